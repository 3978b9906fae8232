#!/usr/bin/env bash
# Mutation score of one index's protocol (issue 26 item 6): cargo-mutants mutates the index's
# protocol files, one mutant at a time, and `verify/tests/mutation_oracle.rs` runs every checking
# preset of the index for a fixed number of schedules (random, then PCT) against each. A mutant
# is caught when a preset finds a violation, panics or hangs; missed mutants are the ones to read.
#
#   scripts/mutants.sh INDEX [SCHEDULES]      # e.g. scripts/mutants.sh example 2000
#   scripts/mutants.sh INDEX --list           # the mutants, without running them
#   SHARD=0/4 scripts/mutants.sh INDEX 2000   # a sample: every 4th mutant of the list, from the
#                                             # first (round-robin, so it spans every function)
#   SWEEP=0 scripts/mutants.sh INDEX 2000     # presets only, without the sweep's points
#                                             # (`dmkit check --sweep`: options at their extremes),
#                                             # which the oracle runs by default: about half the
#                                             # time per mutant, and blind to what only an option
#                                             # extreme reaches (HStore's multi-unit blocks)
#
# Why cargo-mutants: its mutation operators (replace a function's body, swap a comparison or a
# boolean operator, delete a `!`) are the standard ones, it rebuilds only what a mutant touches,
# and its outcome files are machine-readable; a dmkit-specific mutator would have to reinvent all
# three. Functions that are not protocol (option validation, limits, a run's sizing (`for_run`),
# the memory guard's estimate (`cache_host_bytes`), `dmkit fill`'s table shapes,
# invariant walks, reporting, unit-test helpers) are excluded: mutating the judge is not a test
# of the judged.
#
# It mutates the tree it runs in (--in-place): run it in a clean clone or worktree, not where you
# are editing. Results go to results/mutants/INDEX/mutants.out (outcomes.json, caught.txt,
# missed.txt, timeout.txt, unviable.txt). Hours for a large index: a benchmark, not a CI stage.
set -euo pipefail
cd "$(dirname "$0")/.."

index=${1:?usage: scripts/mutants.sh INDEX [SCHEDULES|--list]}
arg=${2:-2000}

# Per index: its protocol files, and optionally `focus`, a regex of the functions that carry the
# protocol (client operations, slot and node encodings), when the files also hold set-up code.
focus=
oracle=
case $index in
  example) files=(indexes/src/example/mod.rs indexes/src/example/layout.rs)
    focus='ExampleHandle|decode_slot|encode_slot' ;;
  race) files=(indexes/src/race/mod.rs indexes/src/race/layout.rs) ;;
  cluster) files=(indexes/src/cluster/mod.rs indexes/src/cluster/layout.rs) ;;
  sherman) files=(indexes/src/sherman/mod.rs) ;;
  # SMART's module is ART's too (ART is a configuration of it): ART's presets judge it as well.
  smart) files=(indexes/src/smart/mod.rs); oracle=smart,art ;;
  chime) files=(indexes/src/chime/mod.rs indexes/src/chime/hotspot.rs) ;;
  dolphin) files=(indexes/src/dolphin/mod.rs) ;;
  hstore) files=(indexes/src/hstore/client.rs indexes/src/hstore/hts.rs indexes/src/hstore/sls.rs) ;;
  clover) files=(indexes/src/clover/mod.rs indexes/src/clover/layout.rs) ;;
  probe) files=(indexes/src/probe/ops.rs indexes/src/probe/layout.rs) ;;
  *) echo "scripts/mutants.sh: no protocol files listed for index '$index'" >&2; exit 2 ;;
esac

if ! command -v cargo-mutants >/dev/null; then
  echo "installing cargo-mutants (once)..." >&2
  cargo install --locked cargo-mutants@27.1.0
fi

# `scan` of a hash index only returns Unsupported, and no preset of one scans; `plant` and
# `planted` only switch planted bugs, which the oracle never plants.
# `inherit`, `fork` and `warm` hand a loaded image's state to a run and warm its caches: no
# checking run uses them (experiments/tests/steady_state.rs tests them). cargo-mutants 27.1
# applies -E to no field-deletion mutant ("delete field x from struct S expression in f"): the
# field deletions in `for_run` (a run's sizing) still run, and are set-up when they survive.
not_protocol='tests::|validate|::limits|node_state_bytes|cache_host_bytes|fixed_table|::serves|check_invariants|planted_bugs|race_handlers|node_counters|server_counters|::fmt|<impl Default|<impl Display|<impl Debug|configure|for_run|describe|Example.*::scan|Race.*::scan|Cluster.*::scan|Clover.*::scan|Probe.*::scan|::plant|::inherit|::fork|::warm'
mutate=(--profile mutants --test-package dmkit-verify -E "$not_protocol")
for f in "${files[@]}"; do mutate+=(-f "$f"); done
[ -n "$focus" ] && mutate+=(-F "$focus")
shard=${SHARD:-}
[ -n "$shard" ] && mutate+=(--shard "$shard" --sharding round-robin)

if [ "$arg" = "--list" ]; then
  exec cargo mutants "${mutate[@]}" --list
fi

sweep=${SWEEP:-1}
sweep_tag=; [ "$sweep" = 1 ] && sweep_tag=-sweep
out=results/mutants/$index$sweep_tag${shard:+-shard-${shard/\//-of-}}
mkdir -p "$out"
export DMKIT_MUTANTS_INDEX=${oracle:-$index} DMKIT_MUTANTS_SCHEDULES=$arg DMKIT_MUTANTS_SWEEP=$sweep
# The baseline: the unmutated tree must pass the oracle. (cargo-mutants 27's own baseline runs
# the mutated package's tests whatever --test-package says, so it is skipped and run here.)
# A mutant's test times out at three times the baseline's wall time (at least 300 s): a fixed
# 300 s counted every survivor of SMART's oracle (SMART's and ART's presets and sweep points,
# 298 s on a busy machine) as a timeout, i.e. as caught. TIMEOUT=S overrides.
cargo build --profile mutants -p dmkit-verify --test mutation_oracle
t0=$(date +%s)
cargo test --profile mutants -p dmkit-verify --test mutation_oracle -- --ignored
baseline=$(( $(date +%s) - t0 ))
timeout=${TIMEOUT:-$(( 3 * baseline > 300 ? 3 * baseline : 300 ))}
echo "baseline ${baseline} s; a mutant's test times out after ${timeout} s" >&2
cargo mutants "${mutate[@]}" --in-place --no-shuffle -o "$out" --baseline skip --timeout "$timeout" \
  -- --test mutation_oracle -- --ignored || true
mo=$out/mutants.out
count() { [ -f "$mo/$1.txt" ] && wc -l < "$mo/$1.txt" || echo 0; }
echo "$index: $(count caught) caught, $(count missed) missed, $(count timeout) timeout, $(count unviable) unviable ($arg schedules per preset and mode${shard:+; shard $shard of the list})"
