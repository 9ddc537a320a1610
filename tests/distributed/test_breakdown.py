"""--breakdown and --trace for real: every row's profiled steps split into parts that add up, a trace of both ranks
that opens as JSON with the phases and the collectives in it, and the dtypes each backend really holds (amp bf16,
DeepSpeed bf16 ZeRO-1, FSDP2 with param_dtype=bf16) against what each framework is documented to hold."""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

import pytest

from harness.shared import progress as progress_file

from conftest import ran_ok, replacing, run_compare

pytestmark = pytest.mark.distributed

ROWS = "amp:precision=bf16,deepspeed:precision=bf16:zero_stage=1,fsdp:param_dtype=bf16"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("breakdown") / "o"
    rows, _ = run_compare(out, "-w", "digits", "-a", ROWS, "--steps", "6", "--warmup", "2", "--equiv-steps", "0",
                          "--breakdown", "--breakdown-steps", "3", "--trace")
    return out, rows


@pytest.mark.parametrize("label", ROWS.split(","))
def test_every_rows_parts_add_up_to_its_profiled_step_and_its_collectives_are_seen(run, label):
    rec = ran_ok(run[1], label)
    b = rec["breakdown"]
    assert b["steps"] == 3
    parts = ("forward", "backward", "optimizer", "other", "comm_exposed", "waiting")
    for one in (b, *b["ranks"]):
        assert sum(one[p] for p in parts) == pytest.approx(one["step_s"], rel=1e-9)
        assert one["forward"] > 0 and one["backward"] > 0 and one["optimizer"] > 0
    assert all(seen["wire"] > 0 for seen in b["collectives_seen"])  # gloo's own events, on both ranks
    assert b["timed_step_s"] == pytest.approx(rec["step_time_s"]["mean"])
    assert rec["phases_s"]["breakdown"] > 0


def test_a_trace_of_each_rank_opens_as_json_with_the_phases_and_the_collectives(run):
    out, rows = run
    rec = ran_ok(rows, "amp:precision=bf16")  # DDP's all-reduce on gloo's threads
    traces = rec["breakdown"]["traces"]
    assert sorted(traces) == ["0", "1"]  # rank 0 and the slowest other rank: both, at world size 2
    for rank, path in traces.items():
        trace = json.loads(gzip.decompress((out / path).read_bytes()))
        names = [e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"]
        for phase in ("compare.step", "compare.forward", "compare.backward", "compare.optimizer"):
            assert names.count(phase) == 3, (rank, phase)
        assert any(n.startswith("gloo:all_reduce") for n in names), rank
        assert trace["distributedInfo"]["rank"] == int(rank)
    report = (out / "report.md").read_text()
    assert f"[rank 0]({traces['0']})" in report and f"[rank 1]({traces['1']})" in report


FP32_STATE = "fp32"  # SGD with momentum 0.9 (the workloads' default): its momentum buffers


@pytest.mark.parametrize("label, held", [
    # torch.amp: fp32 parameters, gradients and optimizer state; autocast computes in bf16; DDP reduces the fp32
    # gradients.
    ("amp:precision=bf16", dict(params="fp32", master="none", compute="bf16", grads="fp32", reduce="fp32",
                                optimizer=FP32_STATE)),
    # DeepSpeed bf16: the module cast to bf16, fp32 master partitions in the ZeRO optimizer (and its state over
    # them), bf16 gradients, reduced in bf16 (communication_data_type defaults to the training dtype).
    ("deepspeed:precision=bf16:zero_stage=1", dict(params="bf16", master="fp32", compute="bf16", grads="bf16",
                                                   reduce="bf16", optimizer=FP32_STATE)),
    # FSDP2 param_dtype=bf16: fp32 sharded parameters (the optimizer's), gathered to bf16 for compute; gradients
    # reduce-scattered in reduce_dtype (fp32 by this adapter's default) onto fp32 sharded gradients.
    ("fsdp:param_dtype=bf16", dict(params="fp32", master="none", compute="bf16", grads="fp32", reduce="fp32",
                                   optimizer=FP32_STATE)),
])
def test_the_dtypes_each_backend_holds_are_read_from_it(run, label, held):
    rec = ran_ok(run[1], label)
    assert rec["dtypes"] == held


def test_the_report_names_the_dtypes_that_differ_between_compared_rows(run):
    out, rows = run
    ran_ok(rows, "deepspeed:precision=bf16:zero_stage=1")
    report = (out / "report.md").read_text()
    assert "## Where a step's time goes" in report and "## Dtypes each backend holds" in report
    assert ("- amp:precision=bf16 / deepspeed:precision=bf16:zero_stage=1: parameters fp32 / bf16; master copy none / "
            "fp32; gradients fp32 / bf16; reduced on the wire fp32 / bf16") in report


# ---- the profiled steps never cost the row its measurement ------------------------------------------------------
KEPT = ("-w", "digits", "-a", "ddp", "--steps", "4", "--warmup", "1", "--equiv-steps", "0", "--breakdown",
        "--breakdown-steps", "2", "--timeout", "300")


def _measured_without_breakdown(rec):
    assert rec["status"] == "ok", rec.get("reason")
    assert rec["samples_per_s"] > 0 and len(rec["step_times_s"]) == 4 and rec["peak_memory_bytes"] > 0
    assert "breakdown" not in rec


def test_a_split_that_stalls_keeps_the_timed_row_and_marks_the_breakdown_failed(tmp_path):
    # Rank 0 stops as its profiled steps' split begins (a split that never ends): the stall watch stops the launch,
    # and the row keeps its samples/s, step times and memory, written before the profiled steps began.
    rows, proc = run_compare(tmp_path / "o", *KEPT, "--stall-timeout", "15", env={"COMPARE_FAULT": "ddp:0:hang:split"})
    rec = rows["ddp"]
    _measured_without_breakdown(rec)
    why = rec["failed_parts"]["breakdown"]
    assert why.startswith("stalled: no progress for 15 s (--stall-timeout), rank 0 at step 5 of 5 (collecting the "
                          "profiler's events of 2 step(s))"), why
    assert "[fault injection] hang at step split" in why
    assert "its breakdown did not finish" in proc.stdout
    report = (tmp_path / "o" / "report.md").read_text()
    assert (f"**ddp** repeat 0: its breakdown did not finish ({why}); its timed measurement was complete before it "
            f"began and is kept.") in report


def test_ctrl_c_during_the_profiled_steps_keeps_the_timed_row_and_stops_the_run(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from conftest import REPO, read_records, wait_until

    out = tmp_path / "o"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "--out", str(out),
                             *replacing(KEPT, "-a", "ddp,spawn"), "--order-seed", "263", "--repeats", "1",
                             "--no-plots"], cwd=REPO,
                            env={**os.environ, "COMPARE_FAULT": "ddp:0:hang:split"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)

    def splitting():
        progress = list(Path(tempfile.gettempdir()).glob(f"compare-{proc.pid}-scratch-*/ddp-r0/progress.bin"))
        return progress and "collecting the profiler" in (progress_file.read(progress[0]) or {}).get("phase", "")

    wait_until(splitting, "ddp's rank 0 at its split", timeout=240, proc=proc)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    rows = read_records(out)
    _measured_without_breakdown(rows["ddp"])
    assert rows["ddp"]["failed_parts"] == {
        "breakdown": "interrupted at step 5 of 5 (collecting the profiler's events of 2 step(s)); process group killed"}
    assert rows["spawn"]["status"] == "not_run"
    assert "interrupted: children stopped; 1 measured row(s) kept in" in stderr
