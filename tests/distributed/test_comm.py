"""`compare comm` for real: every op's result checked on 2 gloo ranks for each available backend."""

import pytest

import adapters
from conftest import compare_cli
from harness import comm
from harness.record import read_records as read_all

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
        assert {op for op, _ in cells} == set(comm.DEFAULT_OPS)
        for key, r in cells.items():
            if backend in UNSUPPORTED and key[0] in UNSUPPORTED[backend]:
                # A primitive the framework does not have is a cell that says so, never a failure or a fallback.
                assert r["status"] == "unsupported", (backend, key, r["status"])
                assert r["reason"].startswith(f"{backend} "), r["reason"]
                continue
            assert r["status"] == "ok", (backend, key, r["reason"])
            assert r["wrong_ranks"] == 0 and r["time_s"]["n"] >= 5
            assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * comm.busbw_factor(r["op"], 2))


def test_unavailable_backends_appear_with_their_reason(comm_run):
    _, records = comm_run
    for r in records:
        if r["status"] == "unavailable":
            assert r["reason"] and r["op"] is None


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


def test_comm_bad_input(tmp_path):
    for args, message in [
        (["--ops", "allreduce"], f"unknown op 'allreduce'; valid choices: {', '.join(comm.OPS)}"),
        (["--backends", "mpi"], f"unknown backend 'mpi'; valid choices: {', '.join(adapters.comm_backends())}"),
        (["-n", "1"], "world size must be at least 2 for communication, got 1"),
        (["--dtype", "int8"], "unknown dtype 'int8'; valid choices: fp32, fp16, bf16, fp64"),
        (["--sizes", "big"], "size 'big' is not a byte count such as 4096, 1K, 64M or 1G"),
    ]:
        proc = compare_cli("comm", *args, "--out", str(tmp_path / "o"))
        assert proc.returncode == 2 and proc.stderr == f"error: {message}\n", (args, proc.stderr)
        assert not (tmp_path / "o").exists()
