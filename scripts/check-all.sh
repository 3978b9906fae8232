#!/usr/bin/env bash
# Every checking preset and sweep point of every index, a fixed number of schedules each, one
# report per point: a quick pass over the whole option space after a change to a protocol or to
# the checker (206 points, about 4 minutes at 300 schedules here). Prints the points that did
# not come out clean; vacuity at a small budget (required counters not reached in so few
# schedules) is expected for a few and says nothing about the protocol.
#
#   scripts/check-all.sh [MODE] [SCHEDULES] [OUT]    # defaults: random 300 results/check-all
#   DMKIT=/tmp/dmkit INDEXES="smart art" scripts/check-all.sh pct 1000
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-random}; schedules=${2:-300}; out=${3:-results/check-all/$mode}
bin=${DMKIT:-target/release/dmkit}
[ -x "$bin" ] || cargo build --release -p dmkit-experiments --bins
mkdir -p "$out"
for index in ${INDEXES:-$("$bin" check --list-indexes)}; do
  for point in $("$bin" check --index "$index" --list-presets 2>&1 | grep -E '^[a-z0-9-]+: [0-9]+ clients x' | cut -d: -f1); do
    if ! "$bin" check --index "$index" --preset "$point" --mode "$mode" --max-schedules "$schedules" --seed 1 \
        --seconds 60 > "$out/$index.$point" 2>&1; then
      echo "$index $point: $(grep -E '^(VIOLATION|VACUOUS|INVARIANT|the index)' "$out/$index.$point" | head -1)"
    fi
  done
done
echo "reports in $out"
