"""`compare comm` for real: every op's result checked on 2 gloo ranks for each available backend, and a backend
that cannot run here is a row with its reason."""

import re

import pytest

import adapters
from harness.ground.record import read_records as read_all
from harness.shared import collectives

from conftest import compare_cli

pytestmark = pytest.mark.distributed
# What each framework lacks (torch has every primitive): Horovod has only collectives that end on every rank.
UNSUPPORTED = {"horovod": {"reduce", "gather", "scatter", "sendrecv", "isend_irecv", "sendrecv_batched"}}


@pytest.fixture(scope="module")
def comm_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("comm") / "run"
    proc = compare_cli("comm", "--sizes", "4K,1M", "--iters", "8", "--out", str(out))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return out, read_all(out / "records.jsonl")


def test_every_op_is_correct_on_every_available_backend(comm_run):
    _, records = comm_run
    ran = {r["backend"] for r in records if r["op"]}
    available = {b for b in adapters.comm_backends()
                 if adapters.availability(adapters.comm_backend_adapter(b), "cpu", 2)}
    assert "torch" in ran and ran == available
    for backend in ran:
        cells = {(r["op"], r["size_bytes"]): r for r in records if r["backend"] == backend and r["op"]}
        assert {op for op, _ in cells} == set(collectives.DEFAULT_OPS)
        for key, r in cells.items():
            if backend in UNSUPPORTED and key[0] in UNSUPPORTED[backend]:
                # A primitive the framework does not have is a cell that says so, never a failure or a fallback.
                assert r["status"] == "unsupported", (backend, key, r["status"])
                assert r["reason"].startswith(f"{backend} "), r["reason"]
                continue
            assert r["status"] == "ok", (backend, key, r["reason"])
            assert r["wrong_ranks"] == 0 and r["time_s"]["n"] >= 5
            assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * collectives.busbw_factor(r["op"], 2))
            # 8 iterations: the median call's interval is x(2)..x(7) of their times, so it holds the median's busbw
            lo, hi = r["busbw_interval_GBps"]
            assert lo <= r["busbw_GBps"] <= hi


def test_the_report_gives_busbw_with_its_interval(comm_run):
    out, _ = comm_run
    md = (out / "report.md").read_text()
    assert "busbw's [interval] is the 95% distribution-free interval for the median" in md
    assert re.search(r"\| \d+\.\d{3} \[\d+\.\d{3}–\d+\.\d{3}\] \|", md)


def test_records_are_stamped_in_utc(comm_run):
    _, records = comm_run
    assert all(r["time_utc"].endswith("+00:00") for r in records)


def test_a_backend_that_cannot_run_here_is_a_row_with_its_reason(tmp_path):
    # A `deepspeed` directory first on the path that is not an installed DeepSpeed (a source checkout, say):
    # the backend is really unavailable, and the run goes on without it.
    shadow = tmp_path / "shadow" / "deepspeed"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    out = tmp_path / "o"
    # (--timeout inf: no time limit, as for run and scale; it used to overflow poll()'s milliseconds)
    proc = compare_cli("comm", "--backends", "torch,deepspeed", "--ops", "all_reduce", "--sizes", "4K",
                       "--iters", "5", "--timeout", "inf", "--out", str(out), env={"PYTHONPATH": str(shadow.parent)})
    assert proc.returncode == 0, proc.stderr + proc.stdout
    records = read_all(out / "records.jsonl")
    gone = [r for r in records if r["backend"] == "deepspeed"]
    assert [(r["status"], r["op"]) for r in gone] == [("unavailable", None)]
    assert gone[0]["reason"].startswith(f"'deepspeed' at ['{shadow}'] is not an installed DeepSpeed")
    assert "deepspeed: unavailable - 'deepspeed' at" in proc.stdout
    assert f"- **deepspeed**: unavailable — {gone[0]['reason']}" in (out / "report.md").read_text()
    assert [r["status"] for r in records if r["backend"] == "torch"] == ["ok"]
    # --strict makes the same request an error naming the backend, and writes nothing.
    strict = compare_cli("comm", "--backends", "torch,deepspeed", "--strict", "--out", str(tmp_path / "s"),
                         env={"PYTHONPATH": str(shadow.parent)})
    assert strict.returncode == 2
    assert strict.stderr.startswith("error: backend 'deepspeed' cannot run here: 'deepspeed' at")
    assert not (tmp_path / "s").exists()


def test_comm_report_and_rerender(comm_run, tmp_path):
    out, records = comm_run
    report = (out / "report.md").read_text()
    assert "## all_reduce (busbw factor 1)" in report and "## sendrecv_batched" in report
    assert (out / "busbw.png").read_bytes()[:4] == b"\x89PNG"
    copy = tmp_path / "c"
    copy.mkdir()
    (copy / "records.jsonl").write_text((out / "records.jsonl").read_text())
    assert compare_cli("report", str(copy)).returncode == 0
    assert (copy / "report.md").read_text() == report


def test_index_of_a_comm_run_where_no_cell_ran(comm_run, tmp_path):
    """A comm run whose every backend failed has no cell with a size: the index says so instead of crashing."""
    import json

    out, records = comm_run
    run = tmp_path / "runs" / "failed_comm"
    run.mkdir(parents=True)
    base = {k: v for k, v in records[0].items() if k not in ("op", "size_bytes", "time_s")}
    failed = {**base, "op": None, "size_bytes": None, "status": "failed", "reason": "launch exited with code 1"}
    (run / "records.jsonl").write_text(json.dumps(failed) + "\n")
    proc = compare_cli("index", str(tmp_path / "runs"))
    assert proc.returncode == 0, proc.stderr
    line = (tmp_path / "runs" / "README.md").read_text().splitlines()[-1]
    assert line.startswith("| [failed_comm](failed_comm/report.md) | comm: 0 primitives, no cell ran, fp32 | "
                           "torch (failed) | 2 |")


def test_a_launch_that_ends_badly_after_its_cells_is_said_so(tmp_path):
    # Rank 1 exits with an error after every cell was measured and checked (the torch backend runs under the ddp
    # adapter's launcher): the cells stay ok, and every record, the terminal and the report say how it ended.
    out = tmp_path / "o"
    proc = compare_cli("comm", "--backends", "torch", "--ops", "all_reduce", "--sizes", "4K,64K", "--iters", "5",
                       "--out", str(out), env={"COMPARE_FAULT": "ddp:1:exit:end"})
    assert proc.returncode == 0, proc.stderr + proc.stdout
    records = read_all(out / "records.jsonl")
    ended = ("after every rank had written its result: rank 1 exited with code 3; first error: [fault injection] "
             "exit at step end")
    assert [(r["status"], r["shutdown_error"]) for r in records] == [("ok", ended)] * 2
    assert f"torch: ok - 2 cells ok; the launch then ended badly {ended}" in " ".join(proc.stdout.split())
    assert (f"- **torch**: its cells were measured and checked, then the launch ended badly {ended}"
            in (out / "report.md").read_text())
