"""Repeats are rounds of fresh launches: every row once per round, in an order shuffled from a recorded seed, and each
row summarised with its interval over the launches."""

import json

import pytest

from harness.core.runner import round_order
from harness.ground.stats import geomean_interval
from harness.reports import run_report as report

from conftest import run_compare

pytestmark = pytest.mark.distributed


def test_a_run_without_repeats_is_rounds_of_fresh_launches_in_a_recorded_order_with_an_interval(tmp_path):
    # The default: 3 rounds, then as many as fit --budget (1 s here: none more), the table shown after every round.
    out = tmp_path / "o"
    _, proc = run_compare(out, "-a", "dp,ddp", "--budget", "1s", "--steps", "20", "--warmup", "2", "--equiv-steps",
                          "2", "--order-seed", "7")
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert [r["repeat"] for r in records] == [0, 0, 1, 1, 2, 2]  # interleaved: a round of every row, then again
    for k in range(3):
        ran = [r for r in records if r["repeat"] == k]
        assert [r["label"] for r in ran] == round_order(["dp", "ddp"], 7, k)  # the seed gives the order back
        assert [r["position"] for r in ran] == [0, 1] and {r["order_seed"] for r in ran} == {7}
    assert all(r["status"] == "ok" for r in records)
    assert len({r["topology"]["launch_pgid"] for r in records}) == 6  # fresh processes every launch
    mode = records[0]["precision_mode"]
    assert (mode["target"], mode["budget_s"], mode["rounds"], mode["ended"]) == (None, 1.0, 3, "budget")
    rerun = records[0]["rerun_command"].split()
    assert rerun[rerun.index("--budget") + 1] == "1s" and "--repeats" not in rerun  # the same rounds rule again
    assert [line.strip() for line in proc.stdout.splitlines() if "after round" in line] == \
        ["after round 1", "after round 2", "after round 3"]
    assert "no interval yet (fewer than 3 launches per row)" in proc.stdout
    rows = {row["adapter"]: row for row in report.table_rows(records)}
    sps = [r["samples_per_s"] for r in records if r["label"] == "ddp"]
    assert rows["ddp"]["interval"] == geomean_interval(sps) and rows["ddp"]["interval"]["lo"] is not None
    assert rows["ddp"]["step_n"] == 60  # every launch's timed steps pooled for the distribution
    md = (out / "report.md").read_text()
    iv = rows["ddp"]["interval"]
    assert f"| {iv['estimate']:,.0f} [{iv['lo']:,.0f}–{iv['hi']:,.0f}] |" in md and "## Verdict" in md
    assert "Rounds: 3 in " in md and "the next would have ended past the 1 s budget" in md
