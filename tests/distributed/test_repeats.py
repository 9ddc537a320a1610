"""Repeats are fresh launches, interleaved across adapters, summarised with their spread."""

import json

import pytest

from conftest import run_compare
from harness.report import run as report

pytestmark = pytest.mark.distributed


def test_repeats_are_interleaved_fresh_launches_with_a_spread(tmp_path):
    out = tmp_path / "o"
    run_compare(out, "-a", "dp,ddp", "--repeats", "2", "--steps", "20", "--warmup", "2", "--equiv-steps", "2")
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert [(r["label"], r["repeat"]) for r in records] == [("dp", 0), ("ddp", 0), ("dp", 1), ("ddp", 1)]
    assert all(r["status"] == "ok" for r in records)
    assert records[1]["topology"]["launch_pgid"] != records[3]["topology"]["launch_pgid"]  # fresh processes
    rows = {row["adapter"]: row for row in report.table_rows(records)}
    sps = [r["samples_per_s"] for r in records if r["label"] == "ddp"]
    assert rows["ddp"]["spread"] == pytest.approx((max(sps) - min(sps)) / (sum(sps) / 2))
    assert rows["ddp"]["step_n"] == 40  # both repeats' timed steps pooled
    table = (out / "report.md").read_text()
    assert "| ddp |" in table and ("±" in table or "spread" in table)
