"""Bad input of comm, list, plan and doctor (one line naming the problem and the valid choices, exit code 2, no
traceback, nothing written), and diff's margin shown as given. The CLI runs in process through typer's CliRunner, as
in test_bad_input.py; nothing here starts a training process.
"""

import json
import tempfile
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import adapters
from harness.cli import app
from harness.ground.record import read_records
from harness.model import planner, shapes

from conftest import RUNS

ADAPTERS = ", ".join(adapters.names())
GPUS = ", ".join(planner.gpu_choices())
SEQ_LEN_0 = f"--seq-len must be from 1 to 1e7 ({shapes.BOUNDS['--seq-len'].why}), got 0"


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


# (id, argv, the whole expected error line); each runs in an empty working directory that must stay empty
CASES = [
    ("list-world-size-above-run-bound", ["list", "-n", "100000000", "--oversubscribe"],
     "world size must be at most 65,536, got 100000000"),
    ("list-world-size-above-run-bound-cuda", ["list", "--device", "cuda", "-n", "65537"],
     "world size must be at most 65,536, got 65537"),
    ("plan-from-empty", ["plan", "-w", "widemlp", "--from", ""],
     "Invalid value for '--from': an empty path ('') (see `compare plan --help`)"),
    ("plan-gpu-empty", ["plan", "-w", "widemlp", "--gpu", ""], f"an empty --gpu (''); choose from {GPUS}"),
    ("plan-gpu-blank", ["plan", "-w", "widemlp", "--gpu", " "], f"an empty --gpu (' '); choose from {GPUS}"),
    ("plan-dtype-empty", ["plan", "-w", "widemlp", "--dtype", ""],
     f"an empty --dtype (''); choose from {', '.join(shapes.DTYPES)}"),
    ("plan-option-without-workload", ["plan", "--params", "7e9", "--layers", "32", "-o", "x=1"],
     "-o x=1 sets a workload's option, and no workload is given (-w); a transformer given by --params is shaped by "
     "--layers, --hidden, --heads, --kv-heads and --ffn"),
    ("plan-seq-len-0-workload", ["plan", "-w", "widemlp", "--seq-len", "0"], SEQ_LEN_0),
    ("plan-seq-len-0-params", ["plan", "--params", "7e9", "--layers", "32", "--seq-len", "0"], SEQ_LEN_0),
    ("doctor-several-rows", ["doctor", "-a", "ddp,spawn"],
     f"-a 'ddp,spawn' names several rows; compare doctor launches one row: give one adapter (with knobs if any); "
     f"valid choices: {ADAPTERS}"),
    ("doctor-trailing-comma", ["doctor", "-a", "ddp,"],
     f"-a 'ddp,' names several rows; compare doctor launches one row: give one adapter (with knobs if any); "
     f"valid choices: {ADAPTERS}"),
    ("doctor-unknown-adapter", ["doctor", "-a", "ddpx"], f"unknown adapter 'ddpx'; valid choices: {ADAPTERS}"),
]


def _doctor_dirs() -> set[str]:
    """The doctor's scratch directories (noise_floor.plan) in the temporary directory."""
    return {p.name for p in Path(tempfile.gettempdir()).glob("compare-doctor-*")}


@pytest.mark.parametrize("argv, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    scratch = _doctor_dirs()
    result = invoke(*argv)
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: {message}\n"
    assert result.stdout == "" and "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == [], "nothing may be written for bad input"
    assert _doctor_dirs() <= scratch


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_comm_on_cuda_without_a_gpu_says_there_is_none_as_run_does(tmp_path):
    # the default world size on cuda is the GPU count (none here: 1), which was refused as too small for
    # communication; comm's own default of 2 ranks lets each backend say why it cannot run. Which backends are
    # installed (and so how many share the reason) is this machine's: the line's ends are checked.
    out = tmp_path / "o"
    result = invoke("comm", "--device", "cuda", "--out", out)
    assert result.exit_code == 2, result.output
    line = result.stderr
    assert line.startswith("error: no backend can run here: CUDA requested but torch sees no GPU"), line
    assert line.endswith("see `compare list --device cuda --world-size 2` for the reasons and fixes\n"), line
    assert line.count("\n") == 1 and "Traceback" not in result.output and not out.exists()


def _run(tmp_path, name, samples_per_s):
    """A run directory with one row, ddp, whose records are a committed run's with these samples/s per launch."""
    template = next(r for r in read_records(RUNS / "digits_cpu2_20261126-045209" / "records.jsonl.gz")
                    if r["label"] == "ddp")
    d = tmp_path / name
    d.mkdir()
    records = [{**json.loads(json.dumps(template)), "repeat": k, "samples_per_s": v}
               for k, v in enumerate(samples_per_s)]
    (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return d


@pytest.mark.parametrize("margin, shown", [("99.9%", "±99.9%"), ("2.5%", "±2.5%"), ("5%", "±5%")])
def test_diff_shows_the_margin_as_given_and_writes_nothing(tmp_path, margin, shown):
    a = _run(tmp_path, "a", [100.0, 101.0, 99.0])
    b = _run(tmp_path, "b", [100.5, 100.0, 99.5])
    before = sorted(p.name for p in tmp_path.rglob("*"))
    result = invoke("diff", "--margin", margin, a, b)
    assert result.exit_code == 0, result.output
    assert f"differences and equivalence within {shown} (TOST) Holm-adjusted" in result.stdout, result.stdout
    assert "±100%" not in result.stdout
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
