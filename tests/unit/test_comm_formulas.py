"""`compare comm` arithmetic: nccl-tests' bus bandwidth factors, size parsing, iteration rule, wrong results."""

import pytest

from harness.core import comm_bench as comm
from harness.ground.sizes import format_size, parse_sizes
from harness.launching.outcome import Outcome
from harness.shared import collectives
from harness.shared.rank_result import CommResult


@pytest.mark.parametrize("op,n,factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("all_reduce", 8, 1.75),
    ("all_gather", 4, 0.75), ("reduce_scatter", 4, 0.75), ("all_to_all", 2, 0.5),
    ("broadcast", 8, 1.0), ("reduce", 8, 1.0), ("sendrecv", 2, 1.0), ("gather", 4, 0.75), ("scatter", 4, 0.75),
])
def test_busbw_factors_follow_nccl_tests(op, n, factor):
    assert collectives.busbw_factor(op, n) == pytest.approx(factor)


def test_sizes():
    assert parse_sizes("1K:8K") == [1024, 2048, 4096, 8192]
    assert parse_sizes("4096,1M,1G") == [4096, 2**20, 2**30]
    assert parse_sizes("1K:256M")[-1] == 256 * 2**20 and len(parse_sizes("1K:256M")) == 19
    with pytest.raises(ValueError, match="size 'lots' is not a byte count such as 4096, 1K, 64M or 1G"):
        parse_sizes("lots")
    with pytest.raises(ValueError, match="size '0' must be at least 1 byte"):
        parse_sizes("0,4K")


@pytest.mark.parametrize("text", ["1K", "64M", "1G", "1000B", "3K"])
def test_size_formatting_is_the_inverse_of_parsing(text):
    assert format_size(parse_sizes(text)[0]) == text


def test_iterations_shrink_with_size_but_never_below_five():
    assert collectives.iterations(1024, 50) == (5, 50)
    assert collectives.iterations(64 * 2**20, 50) == (5, 16)
    assert collectives.iterations(2**30, 50) == (5, 5)


def _outcome(cells_per_rank):
    ranks = [CommResult(rank=r, world_size=2, backend="gloo", framework={"framework": "torch x"}, cells=cells)
             for r, cells in enumerate(cells_per_rank)]
    return Outcome(status="ok", reason="", returncode=0, wall_time_s=1.0, launch_wall=0.0, end_wall=1.0,
                   log_path=None, argv=["x"], processes=2, pid=1, ranks=ranks)


class _Adapter:
    name, launcher = "ddp", "torchrun"


def test_a_wrong_result_on_any_rank_fails_the_cell_and_bandwidth_uses_the_slowest_rank():
    cell = {"op": "all_reduce", "size_bytes": 1_000_000, "elements": 250_000}
    good = [{**cell, "correct": True, "times_s": [0.001, 0.002, 0.003]}]
    bad = [{**cell, "correct": False, "times_s": [0.002, 0.001, 0.004]}]
    ok = comm.cells_to_records({}, "torch", _Adapter(), _outcome([good, good]))[0]
    assert ok["status"] == "ok" and ok["time_s"]["median"] == 0.002
    assert ok["algbw_GBps"] == pytest.approx(1_000_000 / 0.002 / 1e9)
    assert ok["busbw_GBps"] == pytest.approx(ok["algbw_GBps"] * 1.0)  # 2(n-1)/n with n=2
    wrong = comm.cells_to_records({}, "torch", _Adapter(), _outcome([good, bad]))[0]
    assert wrong["status"] == "failed" and wrong["reason"] == "wrong result on 1 of 2 ranks"
    assert wrong["time_s"]["median"] == 0.002  # max per iteration: [0.002, 0.002, 0.004]


def test_an_op_the_framework_lacks_is_unsupported_not_failed():
    cell = {"op": "sendrecv", "size_bytes": 4096, "elements": 1024, "unsupported": "horovod has no send/recv"}
    rec = comm.cells_to_records({}, "horovod", _Adapter(), _outcome([[cell], [cell]]))[0]
    assert rec["status"] == "unsupported" and rec["reason"] == "horovod has no send/recv"


def test_a_failed_cells_reason_stays_one_table_cell():
    # torch appends a C++ stack trace to some messages ("Exception raised from ..."): a cell keeps the first line,
    # and the report keeps even an old record's multi-line reason on one line, without the column separator.
    from harness.rank.comm_cells import _line
    from harness.reports.comm_report import _cell

    message = "TypeError: Overflow when unpacking long long\nException raised from unpack at x.cpp:1 (most recent)\n"
    assert _line(message) == "TypeError: Overflow when unpacking long long"
    assert _line("x" * 400) == "x" * 299 + "…" and _line("") == ""  # shortened, the cut marked
    assert _cell("failed: a | b\n  c") == "failed: a / b c"


def test_a_gap_keeps_every_rank_busy_before_each_call_and_is_not_timed(monkeypatch):
    # `compare comm --gap`: busy work before every warm-up and timed call, outside the timed part; 0 keeps the
    # calls back to back (nccl-tests' way), with no busy work at all.
    from types import SimpleNamespace

    from harness.rank import comm_cells as rank_comm
    from harness.shared import collectives

    events = []
    clock = [0.0]

    class Comm:
        def all_reduce(self, t):
            events.append("call")
            clock[0] += 0.001  # each call "takes" 1 ms on the fake clock

        def barrier(self):
            pass

    def fake_spin(seconds):
        if seconds:
            events.append(("spin", seconds))
            clock[0] += seconds  # busy work moves the clock, which must not reach the timed call

    monkeypatch.setattr(rank_comm, "spin", fake_spin)
    monkeypatch.setattr(rank_comm.time, "perf_counter", lambda: clock[0])
    adapter = SimpleNamespace(comm=Comm, describe=lambda: {"framework": "fake"})
    info = SimpleNamespace(rank=0, world_size=2, device="cpu", backend="fake")
    for gap in (0.0, 0.005):
        events.clear()
        spec = SimpleNamespace(comm={"ops": ["all_reduce"], "sizes": [4096], "dtype": "fp32", "max_iters": 6,
                                     "gap_s": gap})
        cell = rank_comm.run(spec, adapter, info).cells[0]
        warm, timed = collectives.iterations(4096, 6)
        calls = 1 + warm + timed  # the checked call, then warm-up and timed calls
        assert events.count("call") == calls and cell["correct"] is False  # a fake sum: never the right one
        assert cell["times_s"] == pytest.approx([0.001] * timed)  # the busy work is outside every timed call
        if gap:
            # the checked call runs alone; each warm-up and timed call follows the gap
            assert events[1:] == [("spin", gap), "call"] * (warm + timed)
        else:
            assert events == ["call"] * calls


def test_a_comm_report_says_the_load_each_launch_began_under_and_any_compare_run_beside_it():
    # an outside check: comm reports said nothing of the load they were measured under, where a run's report does
    from harness.reports.comm_report import _load_lines

    records = [{"backend": "torch", "load_avg_before": [2.32, 2.2, 2.1]},
               {"backend": "torch", "load_avg_before": [2.32, 2.2, 2.1]},
               {"backend": "horovod", "load_avg_before": [3.5, 2.2, 2.1],
                "concurrent_compare_runs": [{"pid": 41, "command": "compare run -a ddp"}]}]
    assert _load_lines(records) == [
        "- Load average (1 min) before each launch: torch 2.32, horovod 3.50",
        "- Another compare run measured at the same time as: horovod (pid 41: `compare run -a ddp`): its figures "
        "may be lower than this machine gives alone"]

