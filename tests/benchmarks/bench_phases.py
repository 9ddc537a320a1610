"""Benchmark (not a test): where a `compare run` spends its time, phase by phase, over several runs.

    .venv/bin/python tests/benchmarks/bench_phases.py [--runs 3] [-- compare run arguments]

Runs `compare run` (the default comparison unless arguments follow `--`) R times in fresh processes, each into a
temporary directory, and prints the wall time of each run (from the command's start to its exit: what a user
waits for, report included) and, per row, the median seconds of every launch phase recorded in its records
(harness/ground/record.py: PHASES). Check the load average first: this 2-core VM is noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from harness.core.assemble import PHASES  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("args", nargs="*", help="compare run arguments (after --)")
    a = ap.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    walls, phases = [], {}
    for i in range(a.runs):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run"
            t0 = time.monotonic()
            proc = subprocess.run([sys.executable, "-m", "harness", "run", *a.args, "--out", str(out)], cwd=REPO,
                                  capture_output=True, text=True)
            wall = time.monotonic() - t0
            if proc.returncode != 0:
                sys.exit(f"run {i + 1} failed ({proc.returncode}):\n{proc.stderr}")
            walls.append(wall)
            for line in (out / "records.jsonl").read_text().splitlines():
                rec = json.loads(line)
                if rec.get("phases_s"):
                    phases.setdefault(rec["label"], []).append(rec["phases_s"] | {"launch": rec["wall_time_s"]})
        print(f"run {i + 1}: {wall:.1f} s")
    print(f"\nwall time of `compare run {' '.join(a.args)}`: median {statistics.median(walls):.1f} s, "
          f"min {min(walls):.1f}, max {max(walls):.1f} over {len(walls)} runs\n")
    cols = [*PHASES, "launch"]
    print(f"{'row':24s}" + "".join(f"{c:>10s}" for c in cols))
    for label, recs in phases.items():
        print(f"{label:24s}" + "".join(f"{statistics.median(r.get(c, 0.0) for r in recs):10.2f}" for c in cols))


if __name__ == "__main__":
    main()
