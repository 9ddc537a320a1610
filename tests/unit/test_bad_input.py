"""Every bad input: one line naming the problem and the valid choices, exit code 2, no traceback, nothing written.

Runs the CLI in process through typer's CliRunner (the console script itself is exercised in test_layout.py).
"""

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import adapters
import workloads
from harness.cli import app


def invoke(*args):
    return CliRunner().invoke(app, list(args))


def assert_refused(result, message, out):
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: {message}\n"
    assert "Traceback" not in result.output
    assert not out.exists(), "nothing may be written for bad input"


def test_unknown_adapter(tmp_path):
    out = tmp_path / "o"
    assert_refused(invoke("run", "-a", "ddp,horovd", "--out", str(out)),
                   f"unknown adapter 'horovd'; valid choices: {', '.join(adapters.names())}", out)


def test_unknown_workload(tmp_path):
    out = tmp_path / "o"
    assert_refused(invoke("run", "-w", "imagenet", "--out", str(out)),
                   f"unknown workload 'imagenet'; valid choices: {', '.join(workloads.names())}", out)


@pytest.mark.parametrize("n", ["0", "-1"])
def test_world_size_below_one(tmp_path, n):
    out = tmp_path / "o"
    assert_refused(invoke("run", "-n", n, "--out", str(out)), f"world size must be at least 1, got {n}", out)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_world_size_the_adapter_cannot_run(tmp_path):
    out = tmp_path / "o"
    ok = [n for n in adapters.names() if adapters.availability(n, "cuda", 2)]
    assert_refused(invoke("run", "-a", "ddp", "--device", "cuda", "--out", str(out)),
                   "adapter 'ddp' cannot run here: CUDA requested but torch sees no GPU (fix: run on a machine "
                   "with an NVIDIA GPU and a CUDA build of torch, or use --device cpu); available here: "
                   + (", ".join(ok) or "none"), out)


def test_batch_not_divisible_by_world_size(tmp_path):
    out = tmp_path / "o"
    assert_refused(invoke("run", "--global-batch", "63", "-n", "2", "--out", str(out)),
                   "global batch 63 is not divisible by world size 2; choose a --global-batch that is a "
                   "multiple of 2", out)


def test_unknown_device(tmp_path):
    out = tmp_path / "o"
    assert_refused(invoke("run", "--device", "tpu", "--out", str(out)),
                   "unknown device 'tpu'; valid choices: cpu, cuda", out)


def test_unwritable_output_directory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    out = blocker / "run"
    assert_refused(invoke("run", "--out", str(out)),
                   f"cannot create output directory {out}: {blocker} is not a directory", out)


def test_read_only_output_directory():
    # /proc refuses new directories even for root, for whom permission bits are no test.
    out = Path("/proc/compare-test")
    result = invoke("run", "--out", str(out))
    assert result.exit_code == 2 and result.stderr.startswith(f"error: output directory {out} is not writable")
    assert result.stderr.count("\n") == 1


def test_existing_output_without_force(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "records.jsonl").write_text("{}\n")
    result = invoke("run", "--out", str(out))
    assert result.exit_code == 2
    assert result.stderr == (f"error: output directory {out} already holds results (records.jsonl); use --force "
                             "to overwrite or choose another --out\n")
    assert (out / "records.jsonl").read_text() == "{}\n" and sorted(p.name for p in out.iterdir()) == [
        "records.jsonl"]


def test_unknown_knob_and_bad_variant(tmp_path):
    out = tmp_path / "o"
    assert_refused(invoke("run", "-a", "ddp", "-k", "ddp.bucket=3", "--out", str(out)),
                   "adapter ddp: unknown knob 'bucket'; valid knobs: broadcast_buffers, bucket_cap_mb, "
                   "gradient_as_bucket_view, static_graph", out)
    assert_refused(invoke("run", "-a", "ddp:bucket_cap_mb", "--out", str(out)),
                   "adapter row 'ddp:bucket_cap_mb': 'bucket_cap_mb' is not KNOB=VALUE (form: ADAPTER:KNOB=VALUE:...)",
                   out)
    assert_refused(invoke("run", "-a", "ddp", "-k", "spawn.bucket_cap_mb=3", "--out", str(out)),
                   "knob 'spawn.bucket_cap_mb' is for adapter 'spawn', which is not in this run (ddp)", out)


def test_fp16_amp_on_cpu_is_refused_before_launch(tmp_path):
    out = tmp_path / "o"
    assert_refused(invoke("run", "-a", "amp:precision=fp16", "--out", str(out)),
                   "adapter amp:precision=fp16: knob 'precision' fp16 needs CUDA here; use bf16 on CPU", out)


def test_duplicate_and_empty_adapter_lists(tmp_path):
    out = tmp_path / "o"
    assert_refused(invoke("run", "-a", "ddp,ddp", "--out", str(out)), "adapter listed twice in --adapters ddp,ddp",
                   out)
    assert_refused(invoke("run", "-a", ",", "--out", str(out)),
                   f"no adapters given; valid choices: {', '.join(adapters.names())}", out)


def test_bad_workload_option(tmp_path):
    out = tmp_path / "o"
    assert_refused(invoke("run", "-w", "resnet", "-o", "arch=vgg16", "--out", str(out)),
                   "workload resnet: option 'arch' must be one of resnet18, resnet34, resnet50; got 'vgg16'", out)


def test_report_of_a_directory_without_records(tmp_path):
    result = invoke("report", str(tmp_path))
    assert result.exit_code == 2
    assert result.stderr == f"error: no records.jsonl in {tmp_path}; give a directory written by `compare run`\n"
