#!/usr/bin/env python3
"""Audit steady verdicts: how much each run's batch means still drift (docs/measurement.md, "Auditing
the verdicts").

    scripts/drift.py DIR [--top N]
    e.g. scripts/drift.py results            (after `dmkit reproduce all --scale reduced`)

Reads every result.jsonl under DIR and, for each run reported steady with at least six batch means,
fits a least-squares line through them and prints the runs whose fitted change over the measured
phase is largest, as a fraction of the mean, beside the 95% interval's half-width as a fraction of
the mean. A steady run passed the trend test, so its drift is not significant at the batches'
spread; the largest ones are the runs worth re-running with a longer fixed window
(`dmkit run ... --duration-us N`) to see whether the mean moves when the window does.
"""
import glob, json, os, statistics, sys

args = sys.argv[1:]
top = 15
if "--top" in args:
    i = args.index("--top")
    try:
        top = int(args[i + 1])
    except (IndexError, ValueError):
        sys.exit("--top needs a number")
    del args[i : i + 2]
if len(args) != 1:
    sys.exit(__doc__)
root = args[0]
files = sorted(glob.glob(os.path.join(root, "**", "result.jsonl"), recursive=True))
if not files:
    sys.exit(f"no result.jsonl under {root}")


def drift(series):
    """Fitted change from the first batch to the last, as a fraction of the mean."""
    n, mean = len(series), statistics.fmean(series)
    xm = (n - 1) / 2
    slope = sum((x - xm) * (y - mean) for x, y in enumerate(series)) / sum((x - xm) ** 2 for x in range(n))
    return slope * (n - 1) / mean


rows, skipped = [], 0
for f in files:
    where = os.path.relpath(os.path.dirname(f), root)
    for line in open(f):
        r = json.loads(line)
        series = r.get("batch_mops") or []
        if not r.get("steady") or len(series) < 6 or statistics.fmean(series) <= 0:
            skipped += 1
            continue
        mean = statistics.fmean(series)
        spec = r.get("workload_spec", {}).get("name", r.get("workload"))
        what = f"{r['index']}:{r.get('config', '')} {spec} clients={r.get('clients')}"
        ci = (r.get("throughput_mops_ci95") or 0) / mean
        rows.append((abs(drift(series)), drift(series), ci, len(series), r.get("measured_ns", 0) / 1e6, where, what))
rows.sort(reverse=True)
print(f"{len(rows)} steady runs with six or more batch means ({skipped} others skipped) under {root}")
print(f"{'drift':>7} {'ci95':>6} {'batches':>7} {'measured':>9}  figure / run")
for _, d, ci, n, ms, where, what in rows[:top]:
    print(f"{d:+7.1%} {ci:6.1%} {n:7d} {ms:7.1f}ms  {where}: {what}")
