"""Benchmark (not a test): does asking for the breakdown change the timed figure? Paired launches with and without it.

    .venv/bin/python tests/benchmarks/bench_breakdown.py [--workload digits] [--adapters ddp,fsdp] [--pairs 8]
        [--steps N] [--out DIR]

Each pair is two one-round `compare run`s of the same rows, one with `--breakdown --trace` and one without, in an
order that alternates from pair to pair (so a drift of the machine falls on both sides alike). For each row it prints
the samples/s of every launch and the paired ratio with / without, the geometric mean of the ratios with its 95%
Student t interval (harness/ground/stats.py compare_pair, paired): an interval that contains 1 is what "asking for the
why never changes the what" looks like. The breakdown runs after the timed window and the evaluation, so by
construction only what changes before them could show: nothing here is asserted, it prints figures. Check the load
average first: this 2-core VM is noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from harness.ground.stats import compare_pair  # noqa: E402


def one(out: Path, args: argparse.Namespace, breakdown: bool) -> dict[str, float]:
    cmd = [sys.executable, "-m", "harness", "run", "-w", args.workload, "-a", args.adapters, "--repeats", "1",
           "--equiv-steps", "0", "--no-plots", "--out", str(out)]
    if args.steps:
        cmd += ["--steps", str(args.steps)]
    if breakdown:
        cmd += ["--breakdown", "--trace"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    recs = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    return {r["label"]: r["samples_per_s"] for r in recs if r["status"] == "ok"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default="digits")
    ap.add_argument("--adapters", default="ddp,fsdp")
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary directory)")
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()}")
    root = args.out or Path(tempfile.mkdtemp(prefix="bench-breakdown-"))
    on: dict[str, list[float]] = {}
    off: dict[str, list[float]] = {}
    for i in range(args.pairs):
        order = (True, False) if i % 2 == 0 else (False, True)
        got = {b: one(root / f"pair{i}-{'on' if b else 'off'}", args, b) for b in order}
        for label in got[True].keys() & got[False].keys():
            on.setdefault(label, []).append(got[True][label])
            off.setdefault(label, []).append(got[False][label])
        print(f"pair {i}: " + "; ".join(f"{label} on {got[True].get(label, 0):,.0f} off "
                                         f"{got[False].get(label, 0):,.0f} samples/s" for label in sorted(got[False])),
              flush=True)
    print(f"\n{args.workload}, {args.pairs} pairs, load average after: {os.getloadavg()}")
    for label in sorted(on):
        c = compare_pair(on[label], off[label], paired=True)
        interval = f"[{c['lo']:.3f}–{c['hi']:.3f}]" if c["lo"] is not None else "(too few pairs for an interval)"
        print(f"{label}: with / without the breakdown {c['estimate']:.3f}x {interval} (95%, paired, n={c['n']}); "
              f"{'contains 1' if c['lo'] is not None and c['lo'] <= 1 <= c['hi'] else 'does not contain 1'}")


if __name__ == "__main__":
    main()
