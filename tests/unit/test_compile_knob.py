"""The compile=true knob without compiling: what refuses it where inductor cannot build, and what the rank and the
report make of TorchDynamo's counters (the real compile is tests/distributed/test_tune.py's)."""

import sys
import types

import pytest

import adapters
from adapters.probes import compile_availability
from harness.rank.measure import CompileWatch
from harness.reports.run_report import compile_note

from conftest import compare_cli


@pytest.mark.parametrize("name", ["ddp", "spawn", "amp", "fsdp", "deepspeed"])
def test_every_adapter_that_compiles_declares_the_knob_and_tries_it_when_tuning(name):
    cls = adapters.get(name)
    assert cls.Knobs().compile is False  # off unless asked
    assert cls.TUNE["compile"] == (True,)


def test_no_cxx_compiler_refuses_the_knob_with_the_reason_and_the_fix(monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    found = compile_availability("cpu")
    assert not found and found.message() == (
        "knob compile=true: torch.compile's inductor builds its CPU kernels with the C++ compiler /nonexistent/g++, "
        "which is not found here (fix: apt-get install g++ (Debian), or set CXX to a C++ compiler, or leave compile "
        "out)")
    assert adapters.get("ddp")({"compile": "true"}).knob_availability("cpu", 2).message() == found.message()
    assert adapters.get("ddp")({}).knob_availability("cpu", 2)  # without the knob, nothing is asked of a compiler


def test_a_run_whose_only_row_cannot_compile_is_one_line_and_exit_2(tmp_path):
    out = tmp_path / "o"
    proc = compare_cli("run", "-w", "digits", "-a", "ddp:compile=true", "--out", str(out),
                       env={"CXX": "/nonexistent/g++"})
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: no adapter can run here: knob compile=true: torch.compile's inductor builds its CPU kernels with the "
        "C++ compiler /nonexistent/g++, which is not found here (fix: apt-get install g++ (Debian), or set CXX to a "
        "C++ compiler, or leave compile out)"], proc.stderr
    assert not out.exists()


def _dynamo(monkeypatch, graphs: int, frame_s: float, backward_s: float):
    utils = types.SimpleNamespace(counters={"stats": {"unique_graphs": graphs} if graphs else {}},
                                  cumulative_time_spent_ns={"entire_frame_compile": frame_s * 1e9,
                                                            "entire_backward_compile": backward_s * 1e9})
    monkeypatch.setitem(sys.modules, "torch._dynamo.utils", utils)


def test_the_compile_watch_splits_what_was_compiled_before_and_inside_the_timed_window(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch._dynamo.utils", raising=False)
    watch = CompileWatch()
    watch.warmup_done()
    assert watch.result() is None  # TorchDynamo never imported: nothing compiled
    _dynamo(monkeypatch, 0, 0.0, 0.0)
    assert CompileWatch().result() is None  # imported (the optimizer does) but nothing compiled
    _dynamo(monkeypatch, 2, 3.0, 1.5)  # forward frames and a lazily compiled backward, in the warm-up
    watch = CompileWatch()
    watch.warmup_done()
    assert watch.result() == {"graphs": 2, "compile_s": 4.5, "graphs_timed": 0, "compile_s_timed": 0.0}
    _dynamo(monkeypatch, 3, 5.0, 1.5)  # a recompile inside the timed window
    assert watch.result() == {"graphs": 3, "compile_s": 6.5, "graphs_timed": 1, "compile_s_timed": 2.0}


def test_the_report_says_what_compiling_cost_and_when_it_fell_inside_the_timed_window():
    before = {"graphs": 2, "compile_s": 4.0, "graphs_timed": 0, "compile_s_timed": 0.0}
    assert compile_note("ddp:compile=true", [before, {**before, "compile_s": 6.0}]) == (
        "**ddp:compile=true**: torch.compile built 2 graph(s) in 5.0 s (slowest rank, median over its 2 launch(es)), "
        "all during the warm-up: not in its samples/s, but in its launch's wall time.")
    inside = {"graphs": 3, "compile_s": 7.0, "graphs_timed": 1, "compile_s_timed": 2.5}
    assert compile_note("fsdp:compile=true", [before, inside]) == (
        "**fsdp:compile=true**: torch.compile built 3 graph(s) in 5.5 s (slowest rank, median over its 2 launch(es)); "
        "in 1 of its launches 1 graph(s) of those (up to 2.5 s) were compiled inside the timed window, which its "
        "samples/s includes: more warm-up (`--warmup`) moves them out of the window.")
