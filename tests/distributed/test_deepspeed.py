"""DeepSpeed ZeRO 0-3 run for real (2 ranks, gloo, CPU, the `deepspeed` launcher) on the digits workload, each
row checked against the single-process fp32 reference, the accuracy target and the fairness controls; then bf16,
fp16 refusal and `compare env`.

The first run in a venv JIT-compiles deepspeed_shm_comm (~35-65 s on 2 cores) into <venv>/torch_extensions;
later runs reuse it."""

import gzip
import json
import os
import time
from pathlib import Path

import pytest

import adapters
from conftest import compare_cli, run_compare

_AVAIL = adapters.availability("deepspeed", "cpu", 2)
# Not `alone`: the segments checked in /dev/shm are this run's launches' own (named by their ports), and the stale
# JIT lock is written into a cache of its own, so another test's DeepSpeed launch meanwhile touches neither
pytestmark = [pytest.mark.distributed,
              pytest.mark.skipif(not _AVAIL, reason=f"Requires: deepspeed ({_AVAIL.message()})")]
STAGES = (0, 1, 2, 3)
LABELS = [f"deepspeed:zero_stage={s}" for s in STAGES]
FP16_WHY = ("knob 'precision' fp16 is refused by DeepSpeed's CPU accelerator on this CPU (no oneDNN fp16 support); use "
            "bf16 or fp32")


def _shm_segments() -> set[str]:
    return {f.name for f in Path("/dev/shm").glob("deepspeed_allreduce_buffer_*")}


@pytest.fixture(scope="module")
def zero_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("deepspeed") / "run"
    before = _shm_segments()
    rows, proc = run_compare(out, "--adapters", ",".join(LABELS))
    # this run's launches' segments only (DeepSpeed names them by the launch's master port): another test's launch,
    # running meanwhile, has segments of its own for the moment its ranks start
    argvs = [json.loads(line)["topology"]["launcher_argv"] for line in (out / "records.jsonl").read_text().splitlines()]
    ports = {argv[argv.index("--master_port") + 1] for argv in argvs}
    assert len(ports) == len(argvs) == len(LABELS)
    ours = {s for s in _shm_segments() - before if any(f"_127.0.0.1_{port}_" in s for port in ports)}
    return rows, proc, ours


def test_no_shared_memory_segment_is_left_behind(zero_run):
    # DeepSpeed's CPU shm all-reduce creates ~66 MiB per rank in /dev/shm and never unlinks it: four launches
    # here would leave eight, and a day of runs fills the RAM that /dev/shm lives in.
    assert zero_run[2] == set()


def test_every_stage_ran(zero_run):
    rows, proc, _ = zero_run
    assert sorted(rows) == sorted(LABELS)  # in the shuffled order they ran; the report keeps the order asked for
    for label, rec in rows.items():
        assert rec["status"] == "ok", (label, rec.get("reason"), rec.get("log_tail"))
    assert "samples/s" in proc.stdout


@pytest.mark.parametrize("stage", STAGES)
def test_fp32_zero_stage_matches_the_single_process_reference(zero_run, stage):
    rec = zero_run[0][f"deepspeed:zero_stage={stage}"]
    assert rec["controls"]["precision"] == "fp32"
    assert rec["equivalence"]["checked"] is True and rec["equivalence"]["passed"] is True
    assert rec["max_param_diff"] is not None and rec["max_param_diff"] <= 1e-5


@pytest.mark.parametrize("stage", STAGES)
def test_digits_reaches_its_target_under_every_stage(zero_run, stage):
    ev = zero_run[0][f"deepspeed:zero_stage={stage}"]["eval"]
    assert ev["target"] == 0.95 and ev["accuracy"] >= 0.95 and ev["target_met"] is True


@pytest.mark.parametrize("stage", STAGES)
def test_metrics_are_reduced_exactly_once(zero_run, stage):
    ev = zero_run[0][f"deepspeed:zero_stage={stage}"]["eval"]
    counts = ev["local_counts"]
    assert sum(c for _, c in counts) == ev["test_samples"] == 360  # every test sample counted once
    assert ev["accuracy"] == pytest.approx(sum(c for c, _ in counts) / 360, abs=1e-12)


@pytest.mark.parametrize("stage", STAGES)
def test_knobs_topology_and_controls_are_recorded(zero_run, stage):
    rec = zero_run[0][f"deepspeed:zero_stage={stage}"]
    info = rec["adapter_info"]
    assert rec["controls"]["knobs"]["zero_stage"] == stage
    assert info["zero_stage"] == stage and info["resolved"]["zero_stage"] == stage
    assert info["framework"].startswith("deepspeed ") and info["accelerator"] == "cpu"
    assert rec["launcher"] == "deepspeed" and rec["topology"]["launcher_argv"][0].endswith("deepspeed")
    assert rec["topology"]["processes"] == 2 and rec["topology"]["world_size_processes"] == 2
    assert rec["topology"]["backend"] == "gloo"
    threads = rec["controls"]["threads_per_rank"]
    assert len(threads) == 2 and threads == [rec["controls"]["threads_requested"]] * 2


@pytest.mark.parametrize("stage", STAGES)
def test_deepspeed_keeps_the_workloads_lr_and_batch(zero_run, stage):
    rec = zero_run[0][f"deepspeed:zero_stage={stage}"]
    resolved, controls = rec["adapter_info"]["resolved"], rec["controls"]
    assert resolved["lr"] == [controls["lr"]] == [0.1]
    assert (resolved["train_batch_size"], resolved["micro_batch_per_rank"], resolved["gradient_accumulation_steps"]) \
        == (controls["global_batch"], controls["per_process_batch"], 1) == (64, 32, 1)
    assert rec["adapter_info"]["client_optimizer"] == "SGD" and "scheduler" not in rec["adapter_info"]["ds_config"]


def test_bf16_trains_or_is_refused_clearly(tmp_path):
    out = tmp_path / "bf16"
    proc = compare_cli("run", "--out", str(out), "--adapters", "deepspeed:precision=bf16", "--steps", "40",
                       "--warmup", "2")
    if proc.returncode == 2:  # a CPU whose DeepSpeed accelerator refuses bf16
        assert proc.stderr.strip().startswith("error: adapter deepspeed:precision=bf16:"), proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists()
        return
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rec = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()][0]
    assert rec["status"] == "ok", (rec.get("reason"), rec.get("log_tail"))
    assert rec["controls"]["precision"] == "bf16" and rec["adapter_info"]["resolved"]["bf16"] is True
    assert rec["equivalence"]["checked"] is False and rec["equivalence"]["why_not_checked"] == "bf16 arithmetic"
    # bf16 really changed the arithmetic, but the fp32 master weights stay close to the reference.
    assert 1e-5 < rec["max_param_diff"] < 0.05
    curve = rec["loss_curve"]
    assert sum(curve[-5:]) < 0.5 * sum(curve[:5])


def test_fp16_on_this_cpu_is_refused_before_launch(tmp_path):
    from adapters.deepspeed import cpu_fp16_supported

    if cpu_fp16_supported():
        pytest.skip("this CPU has oneDNN fp16 kernels, so DeepSpeed accepts fp16 here")
    out = tmp_path / "fp16"
    # an unavailable row as a framework not installed is (the other rows would run); alone, no row can run
    proc = compare_cli("run", "--out", str(out), "--adapters", "deepspeed:precision=fp16")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == f"error: no adapter can run here: {FP16_WHY}"
    assert not out.exists()  # refused in plan(): nothing launched, nothing written
    proc = compare_cli("run", "--out", str(out), "--adapters", "deepspeed:precision=fp16", "--strict")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == f"error: adapter 'deepspeed:precision=fp16' cannot run here: {FP16_WHY}"
    assert not out.exists()


def test_env_reports_version_accelerator_and_ops(zero_run):
    proc = compare_cli("env", "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)["adapters"]["deepspeed"]  # DeepSpeed's own stdout logging must not leak
    assert info["available_cpu"] == "yes" and info["accelerator"] == "cpu"
    assert info["deepspeed"] == info["pinned"] and info["communication_backend"] == "gloo"
    assert set(info["ops"]) == {"installed", "jit_cached", "jit_compatible", "incompatible"}
    # The ZeRO run above used (and so built or found) the shm comm op.
    assert "deepspeed_shm_comm" in info["ops"]["jit_cached"] + info["ops"]["installed"]


def test_optimizer_offload_keeps_the_workloads_optimizer_and_matches_the_reference(tmp_path):
    label = "deepspeed:zero_stage=2:offload_optimizer=true"
    rows, _ = run_compare(tmp_path / "o", "--adapters", label, "--steps", "30", "--warmup", "2")
    rec = rows[label]
    assert rec["status"] == "ok", (rec.get("reason"), rec.get("log_tail"))
    assert rec["controls"]["knobs"]["offload_optimizer"] is True
    assert rec["adapter_info"]["ds_config"]["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    # ZeRO-Offload did not swap in DeepSpeedCPUAdam: the workload's SGD and LR are what ran.
    assert rec["adapter_info"]["client_optimizer"] == "SGD" and rec["adapter_info"]["resolved"]["lr"] == [0.1]
    assert rec["equivalence"]["checked"] is True and rec["max_param_diff"] <= 1e-5


def test_a_stale_jit_build_lock_does_not_stall_the_next_launch(zero_run, tmp_path):
    # A build killed mid-compile (a timeout, kill -9 of the run) leaves torch's FileBaton `<cache>/<op>/lock`,
    # and every later build of that op would wait for it forever, cached .so or not: each DeepSpeed launch would
    # end as a timeout. The launch removes a lock that no process holds, and rank 0 says so.
    # In a JIT cache of its own (a copy of the venv's, its built ops kept, no lock): the shared one is in use by the
    # other tests' launches, whose own build lock a cleanup here once removed under them (FileNotFoundError at its
    # release, in a fresh clone's CI)
    import shutil

    from adapters.deepspeed import jit_cache_dir

    cache = tmp_path / "torch_extensions"
    if jit_cache_dir().is_dir():
        shutil.copytree(jit_cache_dir(), cache, symlinks=True, ignore=shutil.ignore_patterns("lock"))
    lock = cache / "deepspeed_shm_comm" / "lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")
    os.utime(lock, (time.time() - 60, time.time() - 60))  # left by a build stopped a minute ago
    rows, proc = run_compare(tmp_path / "run", "--adapters", "deepspeed", "--steps", "5", "--warmup", "1",
                             "--equiv-steps", "0", "--timeout", "240", env={"TORCH_EXTENSIONS_DIR": str(cache)})
    stale_left = lock.exists()
    rec = rows["deepspeed"]
    assert rec["status"] == "ok", (rec.get("reason"), rec.get("log_tail"))
    assert not stale_left
    assert rec["adapter_info"]["stale_jit_locks_removed"] == [str(lock)]
    # an ok launch's log is kept gzip-compressed (harness/core/session.py)
    logs = "".join(gzip.decompress(p.read_bytes()).decode() for p in (tmp_path / "run").rglob("*.log.gz"))
    assert f"[deepspeed] removed a stale JIT build lock no process held (left by a build that was stopped): {lock}" \
        in logs
