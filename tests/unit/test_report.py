"""Reports render from stored records alone (the committed comparison is the fixture)."""

import copy
import json

from conftest import REPO
from harness import report

RUN = REPO / "results" / "digits_cpu2_20261123-101734"


def _records():
    return [json.loads(line) for line in (RUN / "records.jsonl").read_text().splitlines()]


def test_committed_report_rerenders_identically(tmp_path):
    records = _records()
    report.render(tmp_path, records)
    assert (tmp_path / "report.md").read_text() == (RUN / "report.md").read_text()


def test_table_rows_summarise_repeats():
    rows = {r["adapter"]: r for r in report.table_rows(_records())}
    assert list(rows) == ["dp", "ddp", "spawn", "amp"]
    ddp = [r for r in _records() if r["label"] == "ddp"]
    sps = sorted(r["samples_per_s"] for r in ddp)
    assert rows["ddp"]["samples_per_s"] == sps[1]  # median of 3 repeats
    assert rows["ddp"]["spread"] == (sps[2] - sps[0]) / sps[1]
    assert rows["ddp"]["step_n"] == sum(r["step_time_s"]["n"] for r in ddp)


def test_failed_and_unavailable_rows_show_their_reason(tmp_path):
    records = _records()
    failed = copy.deepcopy(records[1])
    failed.update(label="horovod", adapter="horovod", status="failed", reason="launch exited with code 1; first "
                  "error: boom", log_tail="Traceback\nRuntimeError: boom")
    gone = {**copy.deepcopy(records[0]), "label": "apex", "adapter": "apex", "status": "unavailable",
            "reason": "apex needs CUDA"}
    text = report.markdown_table(report.table_rows(records + [failed, gone]))
    assert "| horovod | torchrun | | | | | | | | | | | **failed**: launch exited with code 1; first error: boom |" in text
    assert "**unavailable**: apex needs CUDA |" in text
    notes = report._notes(report.table_rows(records + [failed]), records + [failed])
    assert any("RuntimeError: boom" in n for n in notes)


def test_rows_of_the_same_mixed_precision_from_different_frameworks_are_called_out():
    records = _records()
    other = copy.deepcopy(next(r for r in records if r["label"] == "amp"))
    other.update(label="apex", adapter="apex")
    notes = report._notes(report.table_rows(records + [other]), records + [other])
    assert ("Same precision (bf16): amp, apex: differences between these rows come from the frameworks, not from "
            "mixed precision itself.") in notes
    assert not any(n.startswith("Same precision") for n in report._notes(report.table_rows(records), records))


def test_compression_is_shown_beside_precision():
    assert report.precision_label({"precision": "fp32", "compression": "fp16"}) == "fp32 + fp16 wire"
    assert report.precision_label({"precision": "bf16"}) == "bf16"
