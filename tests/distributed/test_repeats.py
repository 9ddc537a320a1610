"""Repeats are rounds of fresh launches: every row once per round, in an order shuffled from a recorded seed, and each
row summarised with its interval over the launches."""

import json

import pytest

from harness.core.runner import round_order
from harness.core.stats import geomean_interval
from harness.reports import run_report as report

from conftest import run_compare

pytestmark = pytest.mark.distributed


def test_repeats_are_rounds_of_fresh_launches_in_a_recorded_order_with_an_interval(tmp_path):
    out = tmp_path / "o"
    run_compare(out, "-a", "dp,ddp", "--repeats", "3", "--steps", "20", "--warmup", "2", "--equiv-steps", "2",
                "--order-seed", "7")
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert [r["repeat"] for r in records] == [0, 0, 1, 1, 2, 2]  # interleaved: a round of every row, then again
    for k in range(3):
        ran = [r for r in records if r["repeat"] == k]
        assert [r["label"] for r in ran] == round_order(["dp", "ddp"], 7, k)  # the seed gives the order back
        assert [r["position"] for r in ran] == [0, 1] and {r["order_seed"] for r in ran} == {7}
    assert all(r["status"] == "ok" for r in records)
    assert len({r["topology"]["launch_pgid"] for r in records}) == 6  # fresh processes every launch
    rows = {row["adapter"]: row for row in report.table_rows(records)}
    sps = [r["samples_per_s"] for r in records if r["label"] == "ddp"]
    assert rows["ddp"]["interval"] == geomean_interval(sps) and rows["ddp"]["interval"]["lo"] is not None
    assert rows["ddp"]["step_n"] == 60  # every launch's timed steps pooled for the distribution
    md = (out / "report.md").read_text()
    iv = rows["ddp"]["interval"]
    assert f"| {iv['estimate']:,.0f} [{iv['lo']:,.0f}–{iv['hi']:,.0f}] |" in md and "## Verdict" in md
