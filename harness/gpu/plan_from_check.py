"""make gpu-check's `plan` phase: `compare plan --from` the llm phase's run, planning the run's own GPU at its own world
size, must give each measured row within 10% of the samples/s the run measured (issue 66). Reads records only, so it
runs anywhere (tests/unit/test_plan_from.py runs it on a committed H200 run).

    python harness/gpu/plan_from_check.py RUN_DIR      # exit 0: every row within 10%; 1: one is not; 2: no run
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's harness, whatever is installed
BOUND = 0.10


def main(argv: list[str]) -> int:
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.ground.errors import BadInput
    from harness.ground.stats import geomean_interval
    from harness.model import measured

    if len(argv) != 1:
        print("usage: plan_from_check.py RUN_DIR", file=sys.stderr)
        return 2
    try:
        run = measured.read(Path(argv[0]))
    except (BadInput, measured.BadRun) as exc:
        print(f"plan: {exc}", file=sys.stderr)
        return 2
    worst = 0.0
    for precision in sorted({r.precision for r in run.rows.values()}):
        shown = CliRunner().invoke(app, ["plan", "--from", argv[0], "--dtype", precision, "--json"])
        if shown.exit_code != 0:
            print(f"plan --from {argv[0]} --dtype {precision}: {shown.output.strip()}", file=sys.stderr)
            return 1
        planned = {r["label"]: r for r in json.loads(shown.stdout)["rows"]}
        for row in run.rows.values():
            if row.precision != precision:
                continue
            label = next((p["label"] for p in planned.values() if measured.same_row(row, p["adapter"], p["knobs"])),
                         None)
            got = geomean_interval(row.samples_per_s)["estimate"]
            if label is None:
                print(f"plan: {row.label} ({precision}) measured {got:.4g} samples/s, not planned")
                continue
            mid = planned[label]["samples_per_s"]["mid"]
            error = mid / got - 1
            worst = max(worst, abs(error))
            print(f"plan: {row.label}: measured {got:.4g} samples/s, planned {mid:.4g} as {label} ({error:+.1%}; "
                  f"compute from: {planned[label]['compute_from']})")
    print(f"plan: the run's own GPU at its world size, every measured row within {worst:.1%} of what it measured "
          f"(bound {BOUND:.0%})")
    return 0 if worst <= BOUND else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
