"""The deepspeed adapter without launching anything: availability reasons, knob validation, the launch command
and the ds config. None of these import deepspeed (which would probe accelerators and log to stdout)."""

import glob
import importlib.util
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import adapters
from adapters import deepspeed as ds
from adapters import deepspeed_env
from adapters.base import KnobError, Precision, RankInfo
from conftest import REPO

FP16_REFUSED = ("knob 'precision' fp16 is refused by DeepSpeed's CPU accelerator on this CPU "
                "(no oneDNN fp16 support); use bf16 or fp32")


def fake_deepspeed(root: Path, version_file: bool) -> Path:
    """A `deepspeed` package on sys.path: importable by name, and a real install only with its version file."""
    pkg = root / "deepspeed"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('the fake deepspeed must never be imported')\n")
    if version_file:
        (pkg / "git_version_info_installed.py").write_text(
            "version='9.9.9'\naccelerator_name='cpu'\ninstalled_ops={}\n")
    return root


@pytest.fixture
def shadow(monkeypatch, tmp_path):
    """Put a fake deepspeed first on sys.path (and forget any imported one) for one test."""
    def install(version_file: bool):
        monkeypatch.delitem(sys.modules, "deepspeed", raising=False)
        monkeypatch.syspath_prepend(str(fake_deepspeed(tmp_path, version_file)))
    return install


def test_registered_after_amp():
    names = adapters.names()
    assert "deepspeed" in names and names.index("deepspeed") > names.index("amp")
    assert adapters.get("deepspeed") is ds.DeepSpeedAdapter


def test_missing_module_says_how_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "deepspeed" else real(name, *a))
    avail = ds.DeepSpeedAdapter.availability("cpu", 2)
    assert not avail and avail.reason == "deepspeed is not installed"
    assert "make setup" in avail.fix and f"deepspeed=={ds.PINNED_VERSION}" in avail.fix


def test_a_package_named_deepspeed_without_its_version_file_is_not_deepspeed(shadow):
    shadow(version_file=False)
    avail = ds.DeepSpeedAdapter.availability("cpu", 2)
    assert not avail and "is not an installed DeepSpeed" in avail.reason and "make setup" in avail.fix


def test_missing_launcher_is_named(shadow, monkeypatch, tmp_path):
    shadow(version_file=True)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "nowhere" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    avail = ds.DeepSpeedAdapter.availability("cpu", 2)
    assert not avail
    assert avail.reason.startswith("deepspeed 9.9.9 is installed but its `deepspeed` launcher is neither next to")


def test_availability_reads_the_version_without_importing_deepspeed(shadow, monkeypatch, tmp_path):
    shadow(version_file=True)  # the fake's __init__ raises if anything imports it
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "deepspeed").write_text("#!/bin/sh\n")
    monkeypatch.setattr(sys, "executable", str(bindir / "python"))
    assert ds.DeepSpeedAdapter.availability("cpu", 2).ok
    assert ds.launcher_path() == str(bindir / "deepspeed")


def test_importing_the_adapter_and_checking_availability_do_not_import_deepspeed():
    code = ("import sys, adapters; adapters.availability('deepspeed', 'cpu', 2); "
            "import adapters.deepspeed; print('deepspeed' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_default_knobs():
    a = ds.DeepSpeedAdapter({}, "cpu")
    assert (a.knobs.zero_stage, a.knobs.precision, a.knobs.offload_optimizer) == (0, "fp32", False)
    assert a.precision() is Precision.FP32


def test_knobs_from_row_labels_are_coerced():
    a = ds.DeepSpeedAdapter({"zero_stage": "2", "offload_optimizer": "true", "precision": "bf16"}, "cpu")
    assert a.knobs.zero_stage == 2 and a.knobs.offload_optimizer is True and a.precision() is Precision.BF16


@pytest.mark.parametrize("knobs, message", [
    ({"zero_stage": "4"}, "knob 'zero_stage' must be 0, 1, 2 or 3; got '4'"),
    ({"offload_optimizer": "on"}, "knob 'offload_optimizer' needs zero_stage 1, 2 or 3"),
    ({"reduce_bucket_elems": "0"}, "knob 'reduce_bucket_elems' must be positive; got 0"),
    ({"zero_stage": "two"}, "knob 'zero_stage' must be 0, 1, 2 or 3; got 'two'"),
    ({"stage": "1"}, "unknown knob 'stage'; valid knobs: compile, offload_optimizer, precision, reduce_bucket_elems, "
                     "sync_bn, zero_stage"),
])
def test_bad_knobs_are_refused_before_launch(knobs, message):
    with pytest.raises(KnobError) as exc:
        ds.DeepSpeedAdapter(knobs, "cpu")
    assert str(exc.value).startswith(message)


def test_a_scheduler_stepped_from_a_hook_on_a_narrowed_group_is_told_why_and_the_fix():
    # LambdaLR stepped from register_step_post_hook, two param groups: ZeRO-1/2 narrow param_groups to one group per
    # call of step(), and the scheduler's _update_lr failed with a bare "zip() argument 2 is longer than argument 1"
    error = "ValueError: zip() argument 2 is longer than argument 1 (raised in <lambda> (mine.py:415))"
    fix = ds.DeepSpeedAdapter({"zero_stage": "1"}, "cpu").failure_fix(error)
    assert fix == ("ZeRO-1 calls the workload optimizer's step() once per parameter group each training step, with "
                   "its param_groups narrowed to that group (runtime/zero/stage_1_and_2.py, _optimizer_step): a torch "
                   "scheduler stepped from a hook on that step finds fewer groups than it holds learning rates, and "
                   "would advance once per group; fix: count the steps in each group that steps, inside the "
                   "optimizer's step() (for g in self.param_groups: if g['params']: g['t'] = g.get('t', 0) + 1, then "
                   "its lr from g['t']), as docs/your-model.md's schedule does, or zero_stage=0")
    assert ds.DeepSpeedAdapter({"zero_stage": "0"}, "cpu").failure_fix(error) is None


def test_a_schedule_counted_per_call_of_step_with_two_groups_is_told_zero_steps_one_group_per_call():
    # nanoGPT's decay and no-decay groups with a warm-up counted in step(): ZeRO-1/2 call step() once per group, so
    # the warm-up ran twice as fast (6.1e-3 ✗ on ZeRO-3, a clip on a partition blamed); counted per group, every row
    # matched at 3.0e-8 (tests/distributed/test_your_models_as_built.py runs the fix)
    a = ds.DeepSpeedAdapter({"zero_stage": "2"}, "cpu")
    a.own_step, a.groups = "WarmSGD.step", 2
    notes = a._notes()
    assert notes[0] == (
        "ZeRO-2 calls the workload optimizer's step() once per parameter group each training step, with its "
        "param_groups narrowed to that group (runtime/zero/stage_1_and_2.py, _optimizer_step), and the workload's "
        "optimizer has 2 groups and a step() of its own (WarmSGD.step): a schedule that counts step() calls (in step() "
        "or a scheduler stepped from a hook on it) advances once per group each training step here; " + ds.PER_GROUP_FIX)
    assert notes[1].startswith("the workload's optimizer has a step() of its own (WarmSGD.step), which ZeRO-2 calls")
    a.own_step, a.step_hooked = None, True
    assert "and a hook on its step:" in a._notes()[0] and len(a._notes()) == 1
    a.groups = 1
    assert a._notes() == []
    zero0 = ds.DeepSpeedAdapter({}, "cpu")
    zero0.own_step, zero0.groups = "WarmSGD.step", 2
    assert zero0._notes() == []


def test_an_optimizer_whose_step_reads_each_tensor_whole_is_told_zero_hands_it_flat_partitions():
    # An outside check: torch.optim.Adafactor failed ZeRO-2 (8.3e-3 ✗) with a ✗ that ruled causes out and named
    # none; it matched at ZeRO-0 (1.5e-8): ZeRO-1/2/3 step flat 1-D partitions, where Adafactor factors each matrix
    import torch

    from adapters.base import per_tensor_optimizer

    params = [torch.nn.Parameter(torch.zeros(4, 3))]
    assert per_tensor_optimizer(torch.optim.Adafactor(params)) == "Adafactor"
    assert per_tensor_optimizer(type("Warm", (torch.optim.Adafactor,), {})(params)) == "Adafactor"
    assert per_tensor_optimizer(torch.optim.AdamW(params)) is None
    a = ds.DeepSpeedAdapter({"zero_stage": "2"}, "cpu")
    a.per_tensor = "Adafactor"
    assert a._notes()[0].startswith("the workload's optimizer is Adafactor, whose step depends on each parameter's "
                                    "shape and whole values")
    assert a._notes()[0].endswith("ZeRO-2 hands it this rank's flat 1-D partition of the fp32 parameters instead, "
                                  "so it computes other statistics than a single process; fix: zero_stage=0 (-a "
                                  "deepspeed:zero_stage=0), or an optimizer whose step is elementwise (Adam, AdamW, "
                                  "SGD) to check equivalence")
    zero0 = ds.DeepSpeedAdapter({}, "cpu")
    zero0.per_tensor = "Adafactor"
    assert zero0._notes() == []
    # FSDP2: DTensor refuses the step's in-place statistic; the raw error now carries its cause and fix
    import adapters

    fix = adapters.get("fsdp")({}, "cpu").failure_fix(
        "RuntimeError: aten.pow_.Scalar: in-place operations that require placement changes are not supported.")
    assert fix.startswith("the optimizer's step computes, in place, a statistic over each parameter's whole tensor")


def test_unknown_precision_is_refused():
    with pytest.raises(KnobError, match="knob 'precision' must be fp32, bf16 or fp16; got 'fp8'"):
        ds.DeepSpeedAdapter({"precision": "fp8"}, "cpu")


def test_fp16_follows_deepspeeds_cpu_probe(monkeypatch):
    monkeypatch.setattr(ds, "cpu_fp16_supported", lambda: False)
    with pytest.raises(KnobError) as exc:
        ds.DeepSpeedAdapter({"precision": "fp16"}, "cpu").precision()
    assert str(exc.value) == FP16_REFUSED and "\n" not in str(exc.value)
    monkeypatch.setattr(ds, "cpu_fp16_supported", lambda: True)
    assert ds.DeepSpeedAdapter({"precision": "fp16"}, "cpu").precision() is Precision.FP16
    assert ds.DeepSpeedAdapter({"precision": "fp16"}, "cuda").precision() is Precision.FP16


def test_launch_uses_the_deepspeed_launcher_with_a_store_the_parent_holds(monkeypatch, tmp_path):
    monkeypatch.setattr(ds, "launcher_path", lambda: "/venv/bin/deepspeed")
    spec = SimpleNamespace(world_size=2, device="cpu", topology=None)
    plan = ds.DeepSpeedAdapter({}, "cpu").launch(tmp_path / "spec.json", spec)
    argv = plan.argv
    assert argv[0] == "/venv/bin/deepspeed" and argv[argv.index("--num_gpus") + 1] == "2"
    assert argv[-3:] == ["--module", "harness.rank", str(tmp_path / "spec.json")]
    # No bind-then-release race: the port is the one a store the parent holds is listening on, and the ranks
    # join it as clients (as under torchrun's agent).
    port = int(argv[argv.index("--master_port") + 1])
    [store] = plan.hold
    assert store.port == port
    with socket.socket() as s:
        with pytest.raises(OSError):
            s.bind(("127.0.0.1", port))
    assert plan.env == {"DS_ACCELERATOR": "cpu", "TORCHELASTIC_USE_AGENT_STORE": "True",
                        "TORCH_EXTENSIONS_DIR": str(ds.jit_cache_dir())}
    assert ds.DeepSpeedAdapter({}, "cpu").processes(2) == 2


def test_the_launch_names_its_own_shared_memory_segments_for_the_parent_to_remove_and_no_other(monkeypatch, tmp_path):
    # deepspeed_shm_comm names a rank's segment deepspeed_allreduce_buffer_<uid>_<MASTER_ADDR>_<MASTER_PORT>_<rank>
    # and never unlinks it
    monkeypatch.setattr(ds, "launcher_path", lambda: "/venv/bin/deepspeed")
    monkeypatch.setattr(deepspeed_env, "SHM_DIR", tmp_path)
    plan = ds.DeepSpeedAdapter({}, "cpu").launch(tmp_path / "spec.json",
                                                 SimpleNamespace(world_size=2, device="cpu", topology=None))
    port = plan.argv[plan.argv.index("--master_port") + 1]
    uid = os.getuid()
    ours = [tmp_path / f"deepspeed_allreduce_buffer_{uid}_127.0.0.1_{port}_{r}" for r in (0, 1)]
    other = tmp_path / f"deepspeed_allreduce_buffer_{uid}_127.0.0.1_{int(port) + 1}_0"  # another job's
    for f in [*ours, other]:
        f.write_bytes(b"x")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", port)
    assert ds.shm_segment(1) == ours[1]  # the name a rank unlinks once every peer has mapped it
    [leftover] = plan.leftovers  # what the parent records before the launch and removes once it is gone
    assert sorted(glob.glob(leftover.pattern)) == [str(f) for f in ours]
    assert leftover.what == "DeepSpeed shared-memory segment" and not plan.cleanup
    plan.hold.clear()


def test_the_jit_cache_is_this_venvs_own_unless_the_user_chose_one(monkeypatch):
    # torch's default cache is shared by every venv of one Python and rebuilt whenever another venv used it last
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    assert ds.jit_cache_dir() == Path(sys.prefix) / "torch_extensions"


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_ds_config_keeps_the_workloads_batch_and_optimizer(stage):
    a = ds.DeepSpeedAdapter({"zero_stage": stage}, "cpu")
    a.info = RankInfo(rank=0, world_size=2, local_rank=0, device="cpu", backend="gloo", data_rank=0, data_world=2)
    a.global_batch = 64
    cfg = a._ds_config()
    assert (cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]) \
        == (64, 32, 1)
    assert "optimizer" not in cfg and "scheduler" not in cfg and cfg["gradient_clipping"] == 0.0
    assert cfg["zero_optimization"]["stage"] == stage and cfg["zero_allow_untested_optimizer"] is True
    assert not cfg["bf16"]["enabled"] and not cfg["fp16"]["enabled"]
    assert "offload_optimizer" not in cfg["zero_optimization"]
    assert "reduce_bucket_size" not in cfg["zero_optimization"]  # unset knob: DeepSpeed's own default
    # Nothing beyond what the workload's rule and the client optimizer need: DeepSpeed's defaults for the rest.
    assert set(cfg) == {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                        "gradient_clipping", "zero_optimization", "bf16", "fp16", "zero_allow_untested_optimizer",
                        "zero_force_ds_cpu_optimizer"}


def test_ds_config_offload_and_bf16():
    a = ds.DeepSpeedAdapter({"zero_stage": 2, "offload_optimizer": True, "precision": "bf16"}, "cpu")
    a.info = RankInfo(rank=0, world_size=4, local_rank=0, device="cpu", backend="gloo", data_rank=0, data_world=4)
    a.global_batch = 32
    cfg = a._ds_config()
    assert cfg["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": False}
    assert cfg["bf16"]["enabled"] and cfg["train_micro_batch_size_per_gpu"] == 8
    # ZeRO-Offload would otherwise insist on swapping the workload's optimizer for DeepSpeedCPUAdam.
    assert cfg["zero_force_ds_cpu_optimizer"] is False


def test_jit_cache_dir_follows_torch_extensions_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    (tmp_path / "deepspeed_shm_comm").mkdir()
    (tmp_path / "deepspeed_shm_comm" / "deepspeed_shm_comm.so").write_bytes(b"")
    (tmp_path / "half_built").mkdir()
    assert ds.jit_cache_dir() == tmp_path and ds.jit_cached_ops() == ["deepspeed_shm_comm"]


def test_a_jit_build_lock_that_no_process_holds_is_removed_before_a_launch(tmp_path, monkeypatch):
    # torch's FileBaton: `<cache>/<op>/lock`, created and held open by the building process; a killed build
    # leaves it, and every later build would poll for it forever.
    held, stale = tmp_path / "op_a" / "lock", tmp_path / "op_b" / "lock"
    for lock in (held, stale):
        lock.parent.mkdir()
        lock.write_text("")
        os.utime(lock, (time.time() - 60, time.time() - 60))  # left a minute ago
    (tmp_path / "op_b" / "op_b.so").write_text("")  # a built op: the lock is stale all the same
    holder = subprocess.Popen([sys.executable, "-c", f"import os, sys; fd = os.open({str(held)!r}, os.O_RDONLY); "
                               "print('holding', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "holding\n"
        assert ds.clear_stale_jit_locks(tmp_path) == [stale]
        assert held.exists() and not stale.exists()
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert ds.clear_stale_jit_locks(tmp_path) == [held]  # its builder is gone
    assert ds.clear_stale_jit_locks(tmp_path) == []
    # The launch clears them (before any of its ranks exists) and tells rank 0, which logs and records them.
    lock = tmp_path / "deepspeed_shm_comm" / "lock"
    lock.parent.mkdir()
    lock.write_text("")
    os.utime(lock, (time.time() - 60, time.time() - 60))
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(ds, "launcher_path", lambda: "/venv/bin/deepspeed")
    plan = ds.DeepSpeedAdapter({}, "cpu").launch(tmp_path / "spec.json",
                                                 SimpleNamespace(world_size=2, device="cpu", topology=None))
    plan.hold.clear()
    assert not lock.exists()
    assert plan.env[ds.STALE_LOCKS_ENV] == str(lock)


def test_a_lock_released_and_taken_again_while_the_processes_are_read_is_left_to_its_new_holder(tmp_path,
                                                                                                   monkeypatch):
    # one rank's build released the lock and the other's took it anew after the scan had read that process: the new
    # lock was removed under it, and its release failed ("FileNotFoundError: .../deepspeed_shm_comm/lock")
    lock = tmp_path / "op" / "lock"
    lock.parent.mkdir()
    lock.write_text("")

    def scan_while_swapping():
        lock.unlink()
        fd = os.open(lock, os.O_CREAT | os.O_EXCL)  # a new file under the same name, after its holder was read
        os.close(fd)
        return set(), True

    monkeypatch.setattr(deepspeed_env, "_open_files", scan_while_swapping)
    assert ds.clear_stale_jit_locks(tmp_path) == [] and lock.exists()


def test_a_lock_taken_while_the_processes_are_read_is_left_though_it_looks_like_the_one_it_replaced(tmp_path,
                                                                                                  monkeypatch):
    # the same race where the new file reuses the freed inode within one tick of the file clock: (inode, ctime) the
    # same, so only its age tells it from a killed build's (a fresh clone's CI errored 7 DeepSpeed tests on it)
    lock = tmp_path / "op" / "lock"
    lock.parent.mkdir()
    lock.write_text("")
    monkeypatch.setattr(deepspeed_env, "_open_files", lambda: (set(), True))  # its holder read before it took it
    assert ds.clear_stale_jit_locks(tmp_path) == [] and lock.exists()
    os.utime(lock, (time.time() - deepspeed_env.FRESH_S - 1,) * 2)
    assert ds.clear_stale_jit_locks(tmp_path) == [lock] and not lock.exists()


@pytest.mark.slow  # imports every framework in a fresh interpreter (~20 s)
def test_compare_env_json_is_json_on_stdout_and_nothing_on_stderr():
    """DeepSpeed warns 'Setting accelerator to CPU' on import where it finds no GPU; `compare env --json` says what it
    would find up front, so a script reading the JSON sees no noise (and the variable is not left set)."""
    import json
    import os
    import subprocess

    from conftest import REPO

    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    out = subprocess.run([str(REPO / ".venv" / "bin" / "compare"), "env", "--json"], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0 and out.stderr == ""
    assert json.loads(out.stdout)["adapters"]["deepspeed"]["accelerator"] == "cpu"
    assert "DS_ACCELERATOR" not in os.environ


def test_a_lock_left_a_moment_ago_by_a_killed_build_is_waited_out_and_removed_not_left_to_stall_the_launch(
        tmp_path, monkeypatch):
    # A build killed a second before the next launch left a lock under FRESH_S old: left alone, the launch's own
    # build waited for it until the launch's --timeout. The launch waits until it is FRESH_S old, reads the
    # processes again and removes it (a build that took it meanwhile would hold it then, and it would stay).
    lock = tmp_path / "op" / "lock"
    lock.parent.mkdir()
    lock.write_text("")
    os.utime(lock, (time.time() - 1,) * 2)
    waited = []

    def sleep(seconds):  # the wait, as the clock would pass it: the lock grows that much older
        waited.append(seconds)
        st = lock.stat()
        os.utime(lock, (st.st_atime - seconds, st.st_mtime - seconds))

    monkeypatch.setattr(deepspeed_env, "_open_files", lambda: (set(), True))
    monkeypatch.setattr(deepspeed_env.time, "sleep", sleep)
    assert ds.clear_stale_jit_locks(tmp_path) == [] and lock.exists() and not waited  # without wait_fresh
    assert ds.clear_stale_jit_locks(tmp_path, wait_fresh=True) == [lock] and not lock.exists()
    assert len(waited) == 1 and deepspeed_env.FRESH_S - 1.5 < waited[0] <= deepspeed_env.FRESH_S - 1 + 0.01
