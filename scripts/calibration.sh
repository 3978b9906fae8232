#!/bin/sh
# The simulated NIC's verb-level numbers for one profile, as `dmkit perftest` measures them: the
# rows of the README's calibration table (README, "Calibration"). Usage:
#   scripts/calibration.sh [PROFILE]        # cx6-100g (default), cx5-100g or a TOML file
# Needs a release build of dmkit (cargo build --release -p dmkit-experiments --bins).
set -eu
cd "$(dirname "$0")/.."
DMKIT=${DMKIT:-target/release/dmkit}
PROFILE=${1:-cx6-100g}
row() {
    what=$1
    shift
    # The perftest table's second line, without its header.
    line=$("$DMKIT" perftest --profile "$PROFILE" "$@" 2>/dev/null | sed -n 2p)
    printf '%-44s %s\n' "$what" "$line"
}
printf '%-44s %s\n' "profile $PROFILE" "$("$DMKIT" perftest --profile "$PROFILE" 2>/dev/null | sed -n 1p)"
row "64-B READ, 256 clients, one MN" --verb read --bytes 64 --clients 256
row "64-B READ, 256 clients, batches of 8" --verb read --bytes 64 --clients 256 --batch 8
row "64-B WRITE, 256 clients" --verb write --bytes 64 --clients 256
row "CAS over many addresses, 256 clients" --verb cas --clients 256
row "FAA over many addresses, 256 clients" --verb faa --clients 256
row "64-B READ, 16 clients on one CN" --verb read --bytes 64 --clients 16 --compute-nodes 1
row "64-B READ, 16 clients on one CN, batch 8" --verb read --bytes 64 --clients 16 --compute-nodes 1 --batch 8
row "4-KiB READ, 64 clients" --verb read --bytes 4096 --clients 64
row "CAS on one host address, 64 clients" --verb cas --clients 64 --hot-addresses 1
row "FAA on one host address, 64 clients" --verb faa --clients 64 --hot-addresses 1
row "CAS on one device address, 64 clients" --verb cas --clients 64 --hot-addresses 1 --region device
row "FAA on one device address, 64 clients" --verb faa --clients 64 --hot-addresses 1 --region device
row "64-B READ, 1 client (unloaded)" --verb read --bytes 64 --clients 1
row "CAS on host memory, 1 client (unloaded)" --verb cas --clients 1
row "CAS on device memory, 1 client (unloaded)" --verb cas --clients 1 --region device
row "8-B call to an echo, 1 client (unloaded)" --verb call --bytes 8 --clients 1 --compute-nodes 1 --server-threads 1 --handler-ns 0
# Many queue pairs with the NIC's context cache modelled at its calibration (450 entries; README,
# "The NIC's caches"): the profile with that one parameter changed, in a temporary file.
case $PROFILE in
*.toml) BASE=$PROFILE ;;
*) BASE=sim/profiles/$PROFILE.toml ;;
esac
CACHED=$(mktemp --suffix=.toml)
trap 'rm -f "$CACHED"' EXIT
sed 's/^qp_context_cache_entries = { value = [0-9]*,/qp_context_cache_entries = { value = 450,/' "$BASE" > "$CACHED"
for n in 448 512 1024 4096; do
    line=$("$DMKIT" perftest --profile "$CACHED" --verb read --bytes 64 --clients $n 2>/dev/null | sed -n 2p)
    printf '%-44s %s\n' "64-B READ, $n QPs, 450 contexts cached" "$line"
done
