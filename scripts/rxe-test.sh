#!/usr/bin/env bash
# The real backend's integration tests on Soft-RoCE: builds `dmkit-rdma`'s device tests and the
# dmkit command with feature `connectx` on the host, then runs them inside the qemu VM of
# scripts/rxe-vm.sh with DMKIT_RDMA_REQUIRED=1 (a missing device fails instead of skipping);
# then the device tests again, built with feature `mlx5-masked` and run with
# DMKIT_RDMA_EXTENDED_QP=1 (every queue pair of the extended work-request API, the path native
# masked atomics take on ConnectX; Soft-RoCE has no raw WQEs, so masked atomics stay emulated);
# and then scripts/rxe-e2e.sh (memory-node, server-node and compute processes, end to end).
# Binaries go to $CARGO_TARGET_DIR (default target/), and so does the VM's work directory.
#
#   scripts/rxe-test.sh            # needs scripts/setup.sh --vm
#
# Exit 0: passed; 1: failed; 3: the VM cannot run on this machine (qemu or the kernel package
# missing), with the reason printed.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
test_binary() {
    cargo test -p dmkit-rdma --features "$1" --test rxe --no-run --message-format=json 2>/dev/null \
        | grep -o '"executable":"[^"]*"' | cut -d'"' -f4
}
bins=$(test_binary connectx)
extended=$(test_binary mlx5-masked)
if [ -z "$bins" ] || [ -z "$extended" ]; then
    echo "rxe-test: the test binary did not build (run scripts/setup.sh --rdma)" >&2
    exit 1
fi
# The dmkit command with the real backend, for the end-to-end part.
# (The dev profile: the VM's emulated CPU dominates, and it builds faster than release.)
cargo build --features connectx --bin dmkit 2>&1 | tail -1
target=$(realpath "${CARGO_TARGET_DIR:-target}")
dmkit=$target/debug/dmkit
echo "rxe-test: running $(basename "$bins"), $(basename "$extended") and scripts/rxe-e2e.sh in the Soft-RoCE VM"
status=0
# The device tests (the client half of the server-node check skips itself here: rxe-e2e.sh runs
# it against a dmkit server-node process).
env="DMKIT_RDMA_REQUIRED=1 DMKIT_RDMA_DEVICE=rxe0 RUST_BACKTRACE=1"
scripts/rxe-vm.sh "$target/rxe-vm" "ibv_devices && $env $bins --test-threads 1 --nocapture \
    && echo 'rxe-test: again on queue pairs of the extended work-request API (feature mlx5-masked)' \
    && $env DMKIT_RDMA_EXTENDED_QP=1 $extended --test-threads 1 \
    && bash scripts/rxe-e2e.sh $dmkit $bins" || status=$?
echo "rxe-test: exit $status after $(( $(date +%s) - start )) s"
exit $status
