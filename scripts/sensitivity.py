#!/usr/bin/env python3
"""Sensitivity of a figure's ratios to one profile parameter (README, "Calibration").

    scripts/sensitivity.py FIGURE.toml PARAMETER VALUE [VALUE...]
    e.g. scripts/sensitivity.py experiments/configs/figures/chime/fig12.toml atomic_ops_per_s 20e6 40e6 80e6

For each value: the figure's profile with PARAMETER set to it, the figure's reduced sweep run by
`dmkit run` (to steady state, as `reproduce` runs it), and every ratio of the figure computed as
`reproduce` does (the peak, min or last of each side's matching runs, as the figure's `over`
says; figures compared by extrapolation are not supported). Needs a
release build (cargo build --release -p dmkit-experiments --bins) and Python 3.11 (tomllib).
Files go to $SENSITIVITY_DIR (default /tmp/dmkit-sensitivity).
"""
import json, os, re, subprocess, sys, tomllib

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
dmkit = os.environ.get("DMKIT", os.path.join(root, "target/release/dmkit"))
work = os.environ.get("SENSITIVITY_DIR", "/tmp/dmkit-sensitivity")
if len(sys.argv) < 4:
    sys.exit(__doc__)
fig_path, param, *values = sys.argv[1:]
fig = tomllib.load(open(fig_path, "rb"))
over = fig.get("compare", {}).get("over")
if over not in ("peak", "min", "last"):
    sys.exit(f"{fig_path}: compared by {over}; only peak, min and last are supported")
text = open(fig_path).read()
end = text.index("[run.full]") if "[run.full]" in text else len(text)
run = text[text.index("[run.reduced]"):end].replace("[run.reduced.sweep]", "[sweep]").replace("[run.reduced]", "")
base = fig["run"]["reduced"]["profile"]
profile = open(os.path.join(root, "sim/profiles", base + ".toml")).read()
if not re.search(rf"^{param} = \{{ value = ", profile, flags=re.M):
    sys.exit(f"{base} has no parameter {param}")
os.makedirs(work, exist_ok=True)
name = os.path.basename(os.path.dirname(fig_path)) + "-" + os.path.basename(fig_path)[:-5]


def field(row, path):
    """A result's field by name or dotted path (`workload_spec.distribution.theta`), as `reproduce`'s."""
    for part in path.split("."):
        row = row.get(part) if isinstance(row, dict) else None
    return row


def matches(row, sel):
    return all(str(field(row, k)) == str(v) or (k == "workload" and field(row, k) == f"ycsb-{v}") for k, v in sel.items())


for v in values:
    tag = f"{name}-{param}-{v}"
    p = re.sub(rf"^{param} = \{{ value = [^,]+", f"{param} = {{ value = {v}", profile, flags=re.M)
    open(f"{work}/{tag}.toml", "w").write(p)
    open(f"{work}/run-{tag}.toml", "w").write(run.replace(f'profile = "{base}"', f'profile = "{work}/{tag}.toml"'))
    out = f"{work}/out-{tag}"
    subprocess.run([dmkit, "run", f"{work}/run-{tag}.toml", "--out", out], cwd=root, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = [json.loads(line) for line in open(f"{out}/result.jsonl")]

    def point(sel):
        xs = [r["throughput_mops"] for r in rows if matches(r, sel)]
        if not xs:
            return float("nan")
        return {"peak": max, "min": min, "last": lambda v: v[-1]}[over](xs)

    print(f"{param} = {v}")
    for rt in fig.get("ratio", []):
        n, d = point(rt["numerator"]), point(rt["denominator"])
        label = " ".join(map(str, rt["numerator"].values())) + " / " + " ".join(map(str, rt["denominator"].values()))
        paper = rt["value"] if "value" in rt else "–".join(map(str, rt["range"]))
        print(f"  {label}: {n / d:.3f} (paper {paper})", flush=True)
