"""What a first CUDA run needs, checked on CPU (shared/GPU_REVIEW.md): the parts that can fail or mismeasure before
a GPU is ever seen. What only a GPU can show is listed in the README's GPU section."""

import importlib.util
import sys
from types import SimpleNamespace

import pytest

import adapters
from harness.ground.record import precision_label, records_file
from harness.launching.rank_env import harness_env
from harness.rank.measure import cuda_math
from harness.shared.spec import RunSpec


def _spec(tmp_path, device="cpu"):
    return RunSpec(adapter="x", workload="digits", world_size=2, device=device, global_batch=64, steps=1, warmup=0,
                   threads=1, rank_dir=str(tmp_path))


@pytest.mark.parametrize("name", ["ddp", "amp"])
def test_single_node_torchrun_hands_its_workers_a_loopback_address(tmp_path, name):
    # Without --local-addr the workers' MASTER_ADDR is socket.getfqdn(), which on a node without DNS may not resolve.
    plan = adapters.get(name)({}, "cpu").launch(tmp_path / "spec.json", _spec(tmp_path))
    assert plan.argv[:6] == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--local-addr=127.0.0.1",
                             "--nproc-per-node=2"]


def test_a_single_machine_launch_pins_gloo_and_nccl_to_loopback(tmp_path, monkeypatch):
    monkeypatch.delenv("NCCL_SOCKET_IFNAME", raising=False)
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    env = harness_env(_spec(tmp_path, "cuda"), {}, "id")
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == "lo"
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib0")  # a user's own choice wins
    assert harness_env(_spec(tmp_path, "cuda"), {}, "id")["NCCL_SOCKET_IFNAME"] == "ib0"


def test_a_cuda_rank_without_local_rank_is_refused_before_it_picks_the_wrong_gpu(monkeypatch):
    from adapters.rank_side import init_process_group_from_env

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    with pytest.raises(RuntimeError, match="LOCAL_RANK is not set: on CUDA each rank needs it to pick its GPU"):
        init_process_group_from_env("cuda")


def _fake_torch(conv_tf32, matmul_tf32):
    cudnn = SimpleNamespace(allow_tf32=conv_tf32, benchmark=False, version=lambda: 91002, is_available=lambda: True)
    return SimpleNamespace(backends=SimpleNamespace(cudnn=cudnn, cuda=SimpleNamespace(
        matmul=SimpleNamespace(allow_tf32=matmul_tf32))), get_float32_matmul_precision=lambda: "highest")


def test_tf32_on_cuda_is_recorded_and_shown_in_the_precision():
    # cuDNN runs fp32 convolutions in TF32 by default: an "fp32" resnet row on a GPU is not plain fp32.
    math = cuda_math(_fake_torch(True, False))
    assert math == {"cudnn_allow_tf32": True, "matmul_allow_tf32": False, "cudnn_benchmark": False,
                    "float32_matmul_precision": "highest", "cudnn_version": 91002}
    assert precision_label({"precision": "fp32", "cuda_math": math}) == "fp32 (TF32 conv)"
    both = cuda_math(_fake_torch(True, True))
    assert precision_label({"precision": "fp32", "cuda_math": both, "compression": "fp16"}) == \
        "fp32 (TF32 conv/matmul) + fp16 wire"
    assert precision_label({"precision": "bf16", "cuda_math": both}) == "bf16"
    assert precision_label({"precision": "fp32", "cuda_math": cuda_math(_fake_torch(False, False))}) == "fp32"
    assert precision_label({"precision": "fp32"}) == "fp32"  # CPU rows and older records
    # A model without convolutions ran none in TF32, whatever cuDNN allowed (the fourth lease's Llama was labelled
    # "fp32 (TF32 conv)"); a share not recorded (older records) shows the switch
    assert precision_label({"precision": "fp32", "cuda_math": math}, conv_share=0.0) == "fp32"
    assert precision_label({"precision": "fp32", "cuda_math": both}, conv_share=0.0) == "fp32 (TF32 matmul)"
    assert precision_label({"precision": "fp32", "cuda_math": math}, conv_share=0.2) == "fp32 (TF32 conv)"


def test_on_cuda_steps_are_timed_by_events_with_no_sync_between_them():
    # A sync after every step drains the queue and times the host's launch latency with the GPU idle; a training
    # loop syncs nowhere. The clock syncs where a window starts and once when it reads the events.
    from harness.rank.measure import CudaEventClock, HostClock

    calls = []

    class Event:
        made = 0

        def __init__(self, enable_timing):
            assert enable_timing
            Event.made += 1
            self.at = Event.made

        def record(self):
            calls.append("record")

        def elapsed_time(self, end):  # ms between two events: 1 ms per event made in between, here
            return float(end.at - self.at)

    cuda = SimpleNamespace(Event=Event, synchronize=lambda: calls.append("sync"))
    clock = CudaEventClock(SimpleNamespace(cuda=cuda), warmup=2)
    for step in range(6):
        clock.start(step)
        clock.stop(step)
    assert clock.read() == [0.001] * 6
    # syncs: before step 0, after step 0 (its end wall is real), before the first timed step, and at the read
    assert [i for i, c in enumerate(calls) if c == "sync"] == [0, 3, 6, 15]
    assert calls.count("record") == 12

    host = HostClock(lambda: calls.append("host sync"))
    host.start(0)
    host.stop(0)
    assert calls[-2:] == ["host sync", "host sync"] and len(host.read()) == 1 and host.read()[0] >= 0


def test_the_default_world_size_on_cuda_is_the_number_of_gpus(monkeypatch):
    import torch

    from harness.core.requests import RunRequest
    from harness.launching import hosts

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    req = RunRequest(device="cuda", world_size=None)
    assert hosts.resolve(req) is None and req.world_size == 1
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    req = RunRequest(device="cuda", world_size=None)
    hosts.resolve(req)
    assert req.world_size == 8
    req = RunRequest(device="cpu", world_size=None)
    hosts.resolve(req)
    assert req.world_size == 2


def test_fp16_steps_skipped_by_the_loss_scaler_are_counted_without_a_sync_and_noted(tmp_path):
    # GradScaler skips the optimizer step and halves the scale when gradients overflow; such a step inside the
    # timed window is cheaper and flatters the row. Counted on the device, from the scale dropping.
    import torch

    from harness.reports import run_report

    drops = iter([False, True, False, True, False])

    class Scaler:
        _scale = torch.tensor(65536.0)

        def step(self, optimizer):
            optimizer.steps += 1

        def update(self):
            if next(drops):
                self._scale = self._scale / 2

    amp = adapters.get("amp")({}, "cpu")
    amp.scaler, amp.skips, amp.optimizer = Scaler(), None, SimpleNamespace(steps=0)
    assert amp.skipped_steps() == 0
    for _ in range(5):
        amp.step()
    assert amp.skipped_steps() == 2 and amp.optimizer.steps == 5
    amp.scaler = None
    assert amp.skipped_steps() is None  # bf16: no scaler, nothing to skip

    from harness.ground.record import read_records

    from conftest import RUNS

    records = read_records(records_file(RUNS / "digits_cpu2_20261123-101734"))
    for r in records:
        if r["label"] == "amp":
            r["skipped_steps_timed"] = 3 if r["repeat"] == 0 else 0
    notes = "\n".join(run_report._notes(run_report.table_rows(records), records))
    assert ("**amp**: its fp16 loss scaler skipped the optimizer step at 3, 0, 0 of the 280 timed steps of its "
            "launches (gradient overflow while the scale settles)") in notes


def test_cuda_memory_keeps_the_reserved_and_host_peaks_beside_the_allocated_one(monkeypatch):
    # ZeRO-Offload moves optimizer state into pinned host memory that the allocated figure never shows, and the
    # allocator's reserve is what runs out: both are recorded on CUDA.
    import torch

    from harness.rank.measure import PeakMemory

    calls = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda: calls.append("reset"))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 3 * 2**20)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda: 8 * 2**20)
    mem = PeakMemory("cuda:0")
    mem.reset()
    assert calls == ["reset"] and mem.kind == "cuda_max_allocated" and mem.read() == 3 * 2**20
    extra = mem.cuda_extra()
    assert extra["cuda_reserved_bytes"] == 8 * 2**20 and extra["host_bytes"] > 10 * 2**20  # this process's RSS
    assert PeakMemory("cpu").cuda_extra() == {}


def test_on_the_lent_machine_records_name_the_commit_the_tree_is_not_the_sessions_first_one_dirty(tmp_path):
    # The lent machine's .git is at the session's first commit with the tree of the moment over it: the second GPU
    # lease's records said 7fad539-dirty for a tree that was 232787c exactly. pin_commit puts HEAD at the commit the
    # wheelhouse kept, only where the tree is that commit's, and otherwise leaves HEAD and says why.
    import os
    import shutil
    import subprocess

    from conftest import REPO

    def git(*args, cwd=tmp_path / "here"):
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b",
               "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b", "GIT_CONFIG_NOSYSTEM": "1"}
        return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout

    here = tmp_path / "here"
    here.mkdir()
    git("init", "-q")
    (here / "a.py").write_text("one\n")
    (here / ".gitignore").write_text(".wheelhouse/\n")
    git("add", "-A")
    git("commit", "-qm", "first")
    there = tmp_path / "there"
    shutil.copytree(here / ".git", there / ".git")  # the lent machine's .git: the session's first commit
    (here / "a.py").write_text("two\n")
    (here / "b.py").write_text("new\n")  # a file the first commit lacks: untracked there
    git("add", "-A")
    git("commit", "-qm", "second")
    second = git("rev-parse", "HEAD").strip()
    (there / ".wheelhouse").mkdir()
    (there / ".wheelhouse" / "commit").write_text(git("cat-file", "commit", "HEAD"))
    for name in ("a.py", "b.py", ".gitignore"):
        shutil.copy(here / name, there / name)
    (there / "x.log").write_text("untracked, not ignored\n")
    script = str(REPO / "harness" / "gpu" / "pin_commit")
    off = subprocess.run(["bash", script], cwd=there, capture_output=True, text=True, timeout=60)
    assert off.stdout.startswith("provenance: the tree is not the commit .wheelhouse/commit was made at") and \
        git("rev-parse", "HEAD", cwd=there).strip() != second
    (there / "x.log").unlink()
    git("reset", "-q", cwd=there)
    on = subprocess.run(["bash", script], cwd=there, capture_output=True, text=True, timeout=60)
    assert on.stdout == f"provenance: the tree is commit {second[:12]} exactly; HEAD set to it in this copy\n"
    assert git("rev-parse", "HEAD", cwd=there).strip() == second
    assert git("status", "--porcelain", "--untracked-files=no", cwd=there) == ""  # what provenance.git_commit reads


def test_gpu_check_pins_the_commit_before_it_writes_into_the_tree(tmp_path):
    # The fourth GPU lease: make gpu-check wrote its summary into results/ and then ran pin_commit, whose tree then
    # held that new file and was no longer the commit's, so the first call's records said the session's first
    # commit, -dirty. Here a stand-in interpreter answers the script's CUDA questions as a GPU machine's would.
    import os
    import shutil
    import subprocess

    from conftest import REPO

    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b",
           "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b", "GIT_CONFIG_NOSYSTEM": "1",
           "GPU_CHECK_PHASES": " ", "GPU_CHECK_BUDGET": "60"}
    repo = tmp_path / "repo"
    (repo / "harness" / "gpu").mkdir(parents=True)
    for name in ("check", "pin_commit"):
        shutil.copy(REPO / "harness" / "gpu" / name, repo / "harness" / "gpu" / name)
    (repo / ".gitignore").write_text(".wheelhouse/\n.venv-gpu/\n")
    fake = tmp_path / "python"  # answers `-c` as a CUDA torch would; anything else (making a venv) fails
    fake.write_text('#!/bin/bash\ncase "$2" in\n  *is_available*) echo ok;;\n  *get_device_name*) echo "NVIDIA Fake";;\n'
                    '  *get_device_capability*) echo 9.0;;\n  *torch.version.cuda*) echo "2.0 13.0";;\n'
                    '  *) exit 1;;\nesac\n')
    fake.chmod(0o755)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "first"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    (repo / ".wheelhouse").mkdir()
    (repo / ".wheelhouse" / "commit").write_text(subprocess.run(
        ["git", "cat-file", "commit", "HEAD"], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout)
    subprocess.run(["bash", "harness/gpu/check", str(fake)], cwd=repo, env=env, capture_output=True, text=True,
                   timeout=120)
    summary = next((repo / "results").glob("gpu_nvidia-fake_*/summary.txt")).read_text()
    assert "provenance: the tree is commit" in summary and "exactly; HEAD set to it in this copy" in summary


@pytest.mark.slow  # seconds: left out of make test-fast
def test_gpu_check_without_a_cuda_device_is_one_line_exit_2_and_writes_nothing(tmp_path):
    # `make gpu-check` on this CPU machine (or a GPU machine whose torch cannot see its GPU).
    import shutil
    import subprocess

    from conftest import REPO

    (tmp_path / "harness" / "gpu").mkdir(parents=True)
    shutil.copy(REPO / "harness" / "gpu" / "check", tmp_path / "harness" / "gpu" / "check")
    proc = subprocess.run(["bash", str(tmp_path / "harness" / "gpu" / "check"), sys.executable],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    import torch

    assert proc.stderr == (f"gpu-check: no CUDA device (torch {torch.__version__}: torch.cuda.is_available() is "
                           f"False); run it on a machine with an NVIDIA GPU\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["harness"]  # no results/, no venv


def test_the_amp_c_build_takes_apex_25_05s_own_sources():
    # harness/gpu/build_amp_c.py builds amp_C alone; its source list must be 25.05's amp_C block, file for file.
    import importlib.util
    import re
    import tarfile

    from conftest import REPO

    tar = REPO.parent / "shared" / "vendor" / "apex-25.05.tar.gz"
    if not tar.exists():
        pytest.skip(f"Requires: {tar} (shared/vendor beside the checkout)")
    spec = importlib.util.spec_from_file_location("build_amp_c", REPO / "harness" / "gpu" / "build_amp_c.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with tarfile.open(tar) as tf:
        setup = next(m for m in tf.getmembers() if m.name.count("/") == 1 and m.name.endswith("/setup.py"))
        text = tf.extractfile(setup).read().decode()
    block = text[text.index('name="amp_C"'):]
    block = block[:block.index("]")]
    assert re.findall(r'"csrc/([^"]+)"', block) == module.SOURCES


@pytest.mark.parametrize("name", adapters.names())
def test_every_adapter_answers_what_a_rank_records_with_its_own_knobs(name):
    # Seen on the first GPU: apex inherits DDPAdapter's methods but not its knobs, and compression() read a knob
    # apex does not have, so every apex launch failed after its timed steps. What the rank side records of an adapter
    # must be answerable from each adapter's own default knobs, whatever it inherits.
    adapter = adapters.get(name)({}, "cpu")
    assert isinstance(adapter.compression(), str)
    assert adapter.precision() is not None
    schedule = adapter.comm_schedule()
    assert schedule is None or schedule.KIND


def test_a_steps_indices_reach_the_gpu_without_waiting_for_it():
    # Seen on the first GPU: `.to("cuda")` of the host-made indices synchronised the stream every step, so the GPU
    # idled while the host queued the next step (the harness 4% behind a hand-written loop on ResNet-50 bf16).
    import torch

    from harness.rank.train import step_indices

    calls = []

    class Indices:
        def to(self, device, **kwargs):
            calls.append((device, kwargs))
            return self

    step_indices(Indices(), "cuda:0")
    assert calls == [("cuda:0", {"non_blocking": True})]
    assert torch.equal(step_indices(torch.arange(5), "cpu"), torch.arange(5))


def test_deepspeed_fp16_at_zero_stage_0_is_refused_where_its_engine_never_scales_the_loss(tmp_path, monkeypatch):
    # Seen on the first GPU: deepspeed:precision=fp16 (ZeRO-0) ran 300 digits steps at loss ln 10. DeepSpeed 0.19.8's
    # engine.backward() scales the loss only for a ZeRO optimizer, while FP16_UnfusedOptimizer.step() divides the
    # gradients by the loss scale. The row is refused with the reason and the fix where the installed engine lacks
    # the branch, and runs where it has it.
    from adapters import deepspeed as ds

    engine = tmp_path / "deepspeed" / "runtime" / "engine.py"
    engine.parent.mkdir(parents=True)
    unfixed = ("class DeepSpeedEngine:\n    def backward(self, loss, retain_graph=False):\n"
               "        if isinstance(self.optimizer, ZeROOptimizer):\n            loss = self.optimizer.scale_if_loss(loss)\n"
               "        loss.backward()\n\n    def step(self):\n        pass\n")
    fixed = unfixed.replace("        loss.backward()", "        elif self.fp16_enabled():\n            pass\n        loss.backward()")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: (
        SimpleNamespace(submodule_search_locations=[str(engine.parent.parent)]) if name == "deepspeed"
        else real_find_spec(name, *a)))
    monkeypatch.setattr(ds, "installed_version_info", lambda: {"version": "0.19.8"})
    engine.write_text(unfixed)
    assert ds.fp16_zero0_scales_its_loss() is False
    refused = ds.DeepSpeedAdapter({"precision": "fp16"}, "cuda").knob_availability("cuda", 1)
    assert not refused and "does not train on deepspeed 0.19.8" in refused.reason
    assert "DeepSpeed#8393" in refused.reason and "zero_stage=1, 2 or 3" in refused.message()
    assert ds.DeepSpeedAdapter({"precision": "fp16", "zero_stage": 1}, "cuda").knob_availability("cuda", 1)
    assert ds.DeepSpeedAdapter({"precision": "bf16"}, "cuda").knob_availability("cuda", 1)
    engine.write_text(fixed)
    assert ds.fp16_zero0_scales_its_loss() is True
    assert ds.DeepSpeedAdapter({"precision": "fp16"}, "cuda").knob_availability("cuda", 1)
    engine.write_text("class DeepSpeedEngine:\n    pass\n")  # an engine this check does not know: not judged
    assert ds.fp16_zero0_scales_its_loss() is None


def test_the_fp16_check_reads_the_installed_deepspeeds_engine():
    from adapters import deepspeed as ds

    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip("Requires: deepspeed (make setup)")
    assert ds.fp16_zero0_scales_its_loss() is not None  # the pinned DeepSpeed's engine.backward is the one it knows


def test_an_apex_row_says_which_compiled_extensions_it_ran_with(monkeypatch):
    # The apex build makes apex_C and amp_C; a row run without them takes apex's Python fallbacks, which are slower:
    # the row's note says which it had (GPU_REVIEW finding 5).
    from adapters.apex import ApexAdapter

    real = importlib.util.find_spec
    for have, says in (((), "compiled extensions none (without apex_C, amp_C apex falls back to slower Python paths"),
                       (("apex_C", "amp_C"), "compiled extensions apex_C, amp_C")):
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a, have=have: SimpleNamespace() if name in have else
                            (None if name in ("apex_C", "amp_C") else real(name, *a)))
        note = ApexAdapter({"opt_level": "O1"}, "cuda").describe()["note"]
        assert says in note and note.startswith("apex O1 is fp16")
