"""Benchmark (not a test): does the default design narrow a default run's intervals per minute? (issue 65, P9)

    .venv/bin/python tests/benchmarks/bench_default_design.py --runs 5 --out /tmp/p9 [-w digits]
    .venv/bin/python tests/benchmarks/bench_default_design.py --analyse /tmp/p9 [--json summary.json]

First `compare doctor -w W --launches 10` (the variance components the design needs; --no-doctor skips it), then
--runs pairs, alternating on one machine: `compare run -w W --steps S --out DIR/before_i`, S the workload's own
steps (the design off: steps given), then `compare run -w W --out DIR/after_i` (the default design). Both have
the default budget and rounds. Per run it prints the rounds, the minutes the rounds took, the steps per launch,
the pairs resolved, and two widths, each a relative half-width times sqrt(minutes) (a width per minute of run:
widths shrink as 1/sqrt(time)): the widest resolved pair's (P9's figure) and the median over every pair. Last,
after/before of each: the ratio of geometric means with its 95% Welch interval (harness/ground/stats.py). --json
writes the same, with every launch's samples/s per row, so the figures can be recomputed without the runs.
Check the load average first: this VM is noisy, and each run takes about 3 minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from harness.ground.record import read_records, records_file  # noqa: E402
from harness.ground.stats import half_width, ratio_interval  # noqa: E402
from harness.reports import verdict  # noqa: E402

COMPARE = [sys.executable, "-m", "harness"]


def run(args: list[str], log: Path) -> None:
    with log.open("w") as out:
        subprocess.run(COMPARE + args, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, check=False)


def measure(out: Path, runs: int, workload: str, doctor: bool) -> None:
    import workloads

    steps = workloads.get(workload, {}).steps
    out.mkdir(parents=True, exist_ok=True)
    if doctor:
        run(["doctor", "-w", workload, "--launches", "10"], out / "doctor.log")
    for i in range(1, runs + 1):
        with open("/proc/loadavg") as f:
            print(f"pair {i}: load average {' '.join(f.read().split()[:3])}", flush=True)
        run(["run", "-w", workload, "--steps", str(steps), "--out", str(out / f"before_{i}")], out / f"before_{i}.log")
        run(["run", "-w", workload, "--out", str(out / f"after_{i}")], out / f"after_{i}.log")


def figures(directory: Path) -> dict:
    records = read_records(records_file(directory))
    a = verdict.analyse(records)
    mode = records[0].get("precision_mode") or {}
    minutes = mode["elapsed_s"] / 60
    resolved = [p for p in a["pairs"] if p["outcome"] == "faster"]
    widths = [w for w in (half_width(p) for p in a["pairs"]) if w is not None]
    widest = max((half_width(p) for p in resolved), default=None)
    design = records[0].get("design") or {}
    ok = [r for r in records if r.get("status") == "ok" and r.get("samples_per_s") and r.get("label") != "reference"]
    return {"run": directory.name, "rounds": mode.get("rounds"), "minutes": round(minutes, 3),
            "steps": ok[0]["controls"]["steps"], "designed": "steps" in design,
            "pairs": len(a["pairs"]), "resolved": len(resolved),
            "widest_resolved": widest, "widest_per_minute": widest * math.sqrt(minutes) if widest else None,
            "median_pair": statistics.median(widths) if widths else None,
            "median_per_minute": statistics.median(widths) * math.sqrt(minutes) if widths else None,
            "samples_per_s": {label: [r["samples_per_s"] for r in ok if r["label"] == label]
                              for label in dict.fromkeys(r["label"] for r in ok)},
            "command": records[0].get("command"), "time_utc": records[0].get("time_utc"),
            "commit": (ok[0].get("env") or {}).get("git_commit"), "cpu": (ok[0].get("env") or {}).get("cpu_model"),
            "torch": (ok[0].get("env") or {}).get("torch")}


def analyse(out: Path) -> dict:
    dirs = [d for d in out.iterdir() if d.is_dir() and d.name.split("_")[0] in ("before", "after") and records_file(d)]
    dirs.sort(key=lambda d: (d.name.split("_")[0] == "after", int(d.name.split("_")[1])))
    runs = [figures(d) for d in dirs]
    summary: dict = {"runs": runs}
    for key in ("widest_per_minute", "median_per_minute"):
        before = [r[key] for r in runs if r["run"].startswith("before") and r[key]]
        after = [r[key] for r in runs if r["run"].startswith("after") and r[key]]
        if len(before) > 1 and len(after) > 1:
            summary[f"after_over_before_{key}"] = ratio_interval(after, before)
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="run the pairs into this directory, then analyse it")
    ap.add_argument("--analyse", type=Path, help="only analyse a directory of before_i/after_i runs")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("-w", "--workload", default="digits")
    ap.add_argument("--no-doctor", action="store_true")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    if (args.out is None) == (args.analyse is None):
        ap.error("give one of --out (run, then analyse) and --analyse (analyse only)")
    if args.out is not None:
        measure(args.out, args.runs, args.workload, not args.no_doctor)
    summary = analyse(args.out or args.analyse)
    print(f"{'run':10} {'rounds':>6} {'min':>6} {'steps':>6} {'resolved':>9} {'widest':>7} {'x sqrt(min)':>11} "
          f"{'median':>7} {'x sqrt(min)':>11}")
    for r in summary["runs"]:
        w = f"{r['widest_resolved']:.1%}" if r["widest_resolved"] else "-"
        wm = f"{r['widest_per_minute']:.3f}" if r["widest_per_minute"] else "-"
        print(f"{r['run']:10} {r['rounds']:>6} {r['minutes']:>6.2f} {r['steps']:>6} {r['resolved']:>4} of "
              f"{r['pairs']:<2} {w:>7} {wm:>11} {r['median_pair']:>7.1%} {r['median_per_minute']:>11.3f}")
    for key in ("widest_per_minute", "median_per_minute"):
        got = summary.get(f"after_over_before_{key}")
        if got:
            print(f"after/before, {key.replace('_', ' ')}: {got['estimate']:.3f} [{got['lo']:.3f}–{got['hi']:.3f}] "
                  f"(95% Welch interval of the ratio of geometric means, {got['n_a']} and {got['n_b']} runs)")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
