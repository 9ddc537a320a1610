"""The horovod adapter says precisely why it cannot run, checks its knobs before launch, and launches horovodrun.

Detection is tested against fake `horovod` trees written into tmp_path and put first on sys.path and PYTHONPATH
(the availability probe imports horovod.torch in a child process). The real build is exercised by
tests/distributed/test_horovod.py.
"""

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import adapters
from adapters import horovod as hv
from adapters.base import KnobError

from conftest import REPO

GOOD_TORCH = ("def gloo_built(): return {gloo}\ndef mpi_built(): return False\n"
              "def nccl_built(): return False\ndef cuda_built(): return False\n")


@pytest.fixture(autouse=True)
def fresh_probe(tmp_path, monkeypatch):
    """Every test starts with no cached probe, an empty wheel cache and no horovod module imported."""
    monkeypatch.setenv("COMPARE_WHEEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COMPARE_CACHE", str(tmp_path / "probe-cache"))
    hv.probe.cache_clear()
    for name in [m for m in sys.modules if m == "horovod" or m.startswith("horovod.")]:
        monkeypatch.delitem(sys.modules, name)
    yield
    hv.probe.cache_clear()


@pytest.fixture
def not_installed(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "horovod" else real(name, *a))


@pytest.fixture
def fake_horovod(tmp_path, monkeypatch):
    """A directory first on sys.path and PYTHONPATH; write(relpath, text) puts a fake horovod file into it."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", str(root))
    importlib.invalidate_caches()

    def write(rel: str, text: str = "") -> Path:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    write("horovod/__init__.py", "__version__ = '0.28.1'\n")
    return write


def test_not_installed_says_how_to_build_it(not_installed):
    a = hv.HorovodAdapter.availability("cpu", 2)
    assert not a
    assert a.reason == "horovod is not installed"
    assert "make setup" in a.fix and "adapters/install/horovod.sh" in a.fix and "0.28.1" in a.fix


def test_a_failed_build_is_the_reason_with_the_log(not_installed, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "horovod-build-failed.txt").write_text(
        "horovod 0.28.1 build failed for torch 2.13.0+cpu (cp311): pip wheel exited non-zero\n"
        "--- last lines ---\n#error C++17 or later compatible compiler is required\n")
    a = hv.HorovodAdapter.availability("cpu", 2)
    assert not a
    assert a.reason == "horovod 0.28.1 build failed for torch 2.13.0+cpu (cp311): pip wheel exited non-zero"
    assert f"build log at {cache / 'horovod-build.log'}" in a.fix and "make setup" in a.fix
    # The registry (what `compare list` and `compare run` use) shows the same.
    assert adapters.availability("horovod", "cpu", 2).reason == a.reason


def test_an_import_error_of_horovod_torch_becomes_the_reason(fake_horovod):
    # What a wheel built for another torch does at import.
    fake_horovod("horovod/torch/__init__.py",
                 "raise ImportError('mpi_lib.cpython-311-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda')\n")
    a = hv.HorovodAdapter.availability("cpu", 2)
    assert not a
    assert a.reason.startswith("horovod is installed but horovod.torch does not import: ImportError: ")
    assert "undefined symbol: _ZN3c104cuda" in a.reason
    assert "rebuild it against this torch" in a.fix


def test_a_build_without_gloo_is_refused(fake_horovod):
    fake_horovod("horovod/torch/__init__.py", GOOD_TORCH.format(gloo=False))
    a = hv.HorovodAdapter.availability("cpu", 2)
    assert not a and a.reason == "horovod 0.28.1 was built without Gloo"
    assert "HOROVOD_WITH_GLOO=1" in a.fix


def test_horovodrun_must_exist(fake_horovod, monkeypatch):
    fake_horovod("horovod/torch/__init__.py", GOOD_TORCH.format(gloo=True))
    monkeypatch.setattr(hv, "horovodrun_path", lambda: None)
    a = hv.HorovodAdapter.availability("cpu", 2)
    assert not a and a.reason == "horovodrun is not next to this python nor on PATH"


def test_a_cpu_build_is_not_offered_for_cuda(fake_horovod, monkeypatch):
    fake_horovod("horovod/torch/__init__.py", GOOD_TORCH.format(gloo=True))
    monkeypatch.setattr(hv, "horovodrun_path", lambda: "/usr/bin/horovodrun")
    assert hv.HorovodAdapter.availability("cpu", 2)
    a = hv.HorovodAdapter.availability("cuda", 1)
    assert not a and a.reason == "horovod 0.28.1 here is a CPU build (no CUDA/NCCL operations)"


def test_without_env_on_path_horovodrun_cannot_start_its_ranks(fake_horovod, monkeypatch):
    # horovodrun runs every rank as `env VAR=... python ...` through a shell: without `env` each rank dies with
    # "/bin/sh: 1: env: not found", so the row is unavailable up front, saying what to put back.
    fake_horovod("horovod/torch/__init__.py", GOOD_TORCH.format(gloo=True))
    monkeypatch.setattr(hv, "horovodrun_path", lambda: "/usr/bin/horovodrun")
    monkeypatch.setenv("PATH", "/nonexistent")
    a = hv.HorovodAdapter.availability("cpu", 2)
    assert not a
    assert a.message() == ("horovodrun starts every rank through `env` in a shell, and `env` is not on PATH (fix: put "
                           "/usr/bin (coreutils) on PATH)")


def test_the_mpi_controller_needs_a_build_with_mpi(fake_horovod, monkeypatch):
    fake_horovod("horovod/torch/__init__.py", GOOD_TORCH.format(gloo=True))  # mpi_built() is False
    monkeypatch.setattr(hv, "horovodrun_path", lambda: "/usr/bin/horovodrun")
    assert hv.HorovodAdapter({}).knob_availability("cpu", 2)
    a = hv.HorovodAdapter({"controller": "mpi"}).knob_availability("cpu", 2)
    assert not a
    assert a.reason == "horovod 0.28.1 here was built without MPI (knob controller=mpi)"
    assert a.fix.startswith("use controller=gloo (the default), or install an MPI")


def test_a_row_whose_knob_the_build_lacks_is_unavailable_and_with_strict_an_error(fake_horovod, monkeypatch):
    from harness.core.requests import RunRequest
    from harness.core.rows import build_rows
    from harness.ground.errors import BadInput

    fake_horovod("horovod/torch/__init__.py", GOOD_TORCH.format(gloo=True))
    monkeypatch.setattr(hv, "horovodrun_path", lambda: "/usr/bin/horovodrun")
    labels = [("horovod", "horovod", {}), ("horovod:controller=mpi", "horovod", {"controller": "mpi"})]
    rows = build_rows(RunRequest(adapters=["horovod", "horovod:controller=mpi"]), labels, True, "adapter")
    assert [bool(r.adapter) for r in rows] == [True, False]
    assert rows[1].reason.startswith("horovod 0.28.1 here was built without MPI (knob controller=mpi) (fix: use "
                                     "controller=gloo")
    with pytest.raises(BadInput) as err:
        build_rows(RunRequest(adapters=["horovod", "horovod:controller=mpi"], strict=True), labels, True, "adapter")
    assert str(err.value).startswith("adapter 'horovod:controller=mpi' cannot run here: horovod 0.28.1 here was "
                                     "built without MPI (knob controller=mpi) (fix: use controller=gloo")
    with pytest.raises(BadInput) as err:  # the only row: its own fix, not `compare list` (which has no knobs)
        build_rows(RunRequest(adapters=["horovod:controller=mpi"]), labels[1:], True, "adapter")
    assert str(err.value).startswith("no adapter can run here: horovod 0.28.1 here was built without MPI")
    assert "compare list" not in str(err.value)


def test_importing_the_adapter_or_listing_adapters_does_not_import_horovod():
    code = ("import sys, adapters, adapters.horovod; adapters.names(); "
            "assert 'horovod' not in sys.modules, sorted(m for m in sys.modules if 'horovod' in m)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("knobs, message", [
    ({"compression": "bf16"}, "knob 'compression' must be none or fp16; got 'bf16'"),
    ({"controller": "nccl"}, "knob 'controller' must be gloo or mpi; got 'nccl'"),
    ({"stall_check_warning_s": "30", "stall_check_shutdown_s": "20"},
     "knob 'stall_check_shutdown_s' (20) must be 0 or greater than stall_check_warning_s (30)"),
    ({"fusion_threshold_mb": "big"}, "knob 'fusion_threshold_mb' expects an int or none (the framework's default), "
                                     "got 'big'"),
    ({"stall_check_shutdown_s": "45"},
     "knob 'stall_check_shutdown_s' (45) must be 0 or greater than stall_check_warning_s (60)"),
    # horovodrun refuses these only once a row launches (its own ValueError), or never (a cycle of 1e9 ms hangs
    # every fused all-reduce until --timeout)
    ({"stall_check_warning_s": "-1"}, "knob 'stall_check_warning_s' must be 0 or more; got -1"),
    ({"cycle_time_ms": "1e9"}, "knob 'cycle_time_ms' must be above 0 and at most 1000 (a second); got 1e+09"),
    ({"cycle_time_ms": "0"}, "knob 'cycle_time_ms' must be above 0 and at most 1000 (a second); got 0"),
])
def test_bad_knobs_are_refused_with_the_valid_choices(knobs, message):
    with pytest.raises(KnobError) as exc:
        hv.HorovodAdapter(knobs)
    assert str(exc.value) == message


def test_compression_is_what_the_table_shows():
    assert hv.HorovodAdapter({}).compression() == "none"
    assert hv.HorovodAdapter({"compression": "fp16"}).compression() == "fp16"


def test_launch_is_horovodrun_with_gloo_stall_check_and_fusion(monkeypatch):
    monkeypatch.setattr(hv, "horovodrun_path", lambda: "/venv/bin/horovodrun")
    a = hv.HorovodAdapter({"fusion_threshold_mb": "32", "cycle_time_ms": "2.5", "stall_check_shutdown_s": "75"})
    plan = a.launch(Path("/tmp/spec.json"), SimpleNamespace(world_size=2, topology=None))
    argv = plan.argv
    assert argv[:7] == ["/venv/bin/horovodrun", "-np", "2", "-H", "localhost:2", "--gloo", "--disable-cache"]
    flags = dict(zip(argv[7:-4:2], argv[8:-4:2]))
    assert flags == {"--network-interfaces": "lo", "--fusion-threshold-mb": "32", "--cycle-time-ms": "2.5",
                     "--stall-check-shutdown-time-seconds": "75"}
    assert argv[-4:] == [sys.executable, "-m", "harness.rank", "/tmp/spec.json"]
    assert a.processes(2) == 2


def test_unset_knobs_are_not_passed_to_horovodrun(monkeypatch):
    monkeypatch.setattr(hv, "horovodrun_path", lambda: "/venv/bin/horovodrun")
    argv = hv.HorovodAdapter({}).launch(Path("/tmp/spec.json"), SimpleNamespace(world_size=2, topology=None)).argv
    assert argv == ["/venv/bin/horovodrun", "-np", "2", "-H", "localhost:2", "--gloo", "--disable-cache",
                    "--network-interfaces", "lo",
                    sys.executable, "-m", "harness.rank", "/tmp/spec.json"]


def test_the_schedule_follows_the_knob_then_the_inherited_variable_then_horovods_default(monkeypatch):
    monkeypatch.delenv("HOROVOD_FUSION_THRESHOLD", raising=False)
    monkeypatch.delenv("HOROVOD_CYCLE_TIME", raising=False)
    s = hv.HorovodAdapter({}).comm_schedule()
    assert (s.fusion_bytes, s.cycle_s) == (128 * 2**20, 0.001)
    monkeypatch.setenv("HOROVOD_FUSION_THRESHOLD", "0")  # bytes, as Horovod reads it: fusion off
    monkeypatch.setenv("HOROVOD_CYCLE_TIME", "5")
    s = hv.HorovodAdapter({}).comm_schedule()
    assert (s.fusion_bytes, s.cycle_s) == (0, 0.005)
    s = hv.HorovodAdapter({"fusion_threshold_mb": "32", "cycle_time_ms": "2.5"}).comm_schedule()
    assert (s.fusion_bytes, s.cycle_s) == (32 * 2**20, 0.0025)


def test_a_successful_probe_is_cached_and_a_changed_build_is_probed_again(fake_horovod, monkeypatch, tmp_path):
    init = fake_horovod("horovod/torch/__init__.py", GOOD_TORCH.format(gloo=True))
    assert hv.probe()["gloo"] is True
    hv.probe.cache_clear()
    calls = []
    monkeypatch.setattr(hv, "_import_in_child", lambda: calls.append(1) or {"gloo": False})
    assert hv.probe()["gloo"] is True and not calls  # same files: the stored answer, no child process
    hv.probe.cache_clear()
    init.write_text(GOOD_TORCH.format(gloo=False) + "# rebuilt\n")
    assert hv.probe() == {"gloo": False} and calls == [1]  # the build changed: probed again


def test_compare_comm_names_each_buffer_as_a_training_step_names_each_gradient():
    # An unnamed Horovod call is "<op>.noname.<handle>", new every call: each would miss the response cache and pay
    # a negotiation no training step pays after its first. One op on one buffer keeps one name; the names of two
    # buffers that could be in flight together (different ops, sizes or dtypes) differ, as Horovod requires.
    import torch

    name = hv.HorovodComm._name
    t = torch.zeros(256)
    assert name("allreduce", t) == name("allreduce", torch.ones(256)) == "compare.allreduce.256.float32"
    assert len({name("allreduce", t), name("allgather", t), name("allreduce", torch.zeros(512)),
                name("allreduce", torch.zeros(256, dtype=torch.bfloat16))}) == 4


def test_the_autotuners_log_is_parsed_its_best_given_as_a_row_and_a_cut_line_skipped(tmp_path):
    from adapters.horovod import _autotune_log, autotune_note

    log = tmp_path / "horovod_autotune.csv"
    log.write_text("hierarchical_allreduce,hierarchical_allgather,torus_allreduce,cache_enabled,cycle_time_ms,"
                   "tensor_fusion_threshold,score\n0,0,0, 0,5,4,46.2514\n0,0,0, 1,1.00025,13.9841,81.2803\n0,1,0, 0,2.9")
    parsed = _autotune_log(log)
    assert len(parsed["log"]) == 4 and len(parsed["samples"]) == 2  # the line cut when the run ended is skipped
    assert parsed["best"] == {"hierarchical_allreduce": 0, "hierarchical_allgather": 0, "torus_allreduce": 0,
                              "cache_enabled": 1, "cycle_time_ms": 1.00025, "tensor_fusion_threshold": 13.9841,
                              "score": 81.2803}
    assert autotune_note(parsed) == (
        "horovodrun --autotune scored 2 setting(s) (its own score: bytes all-reduced per second over a few steps "
        "each, not samples/s); its best-scoring: fusion threshold 14 MB, cycle time 1 ms (cache_enabled on, "
        "hierarchical_allreduce off, hierarchical_allgather off). This row's samples/s mixes every setting it "
        "tried; the pick's own speed is a row of its own (the threshold in whole MB, as horovodrun takes it): "
        "horovod:fusion_threshold_mb=14:cycle_time_ms=1")
    missing = _autotune_log(tmp_path / "none.csv")
    assert missing["samples"] == [] and autotune_note(missing).startswith(
        "horovodrun --autotune logged no scored setting in this launch (FileNotFoundError: ")


def test_autotune_adds_horovodruns_own_flags_with_its_log_in_the_launch_directory(tmp_path):
    from adapters.horovod import AUTOTUNE_LOG, HorovodAdapter

    spec = type("Spec", (), {"world_size": 2, "topology": None, "rank_dir": str(tmp_path)})()
    argv = HorovodAdapter({"autotune": "true"}).launch(tmp_path / "spec.json", spec).argv
    i = argv.index("--autotune")
    assert argv[i + 1:i + 3] == ["--autotune-log-file", str(tmp_path / AUTOTUNE_LOG)]
    assert "--autotune" not in HorovodAdapter({}).launch(tmp_path / "spec.json", spec).argv


def test_a_buffer_not_laid_out_contiguously_is_broadcast_as_a_copy_and_written_back():
    # an outside check: torch's orthogonal() parametrization keeps a transposed `base` buffer that Horovod refused
    # ("Tensor is required to be contiguous."), failing the row at its set-up with nothing the user could change
    import torch
    from torch import nn
    from torch.nn.utils import parametrizations

    model = nn.Sequential(nn.Linear(4, 6), parametrizations.orthogonal(nn.Linear(6, 6)))
    laid_out = {name: t.is_contiguous() for name, t in model.state_dict().items()}
    assert not all(laid_out.values()), laid_out  # the case itself: some tensor of the state is not contiguous
    seen = []

    class Stop(Exception):
        pass

    def broadcast_parameters(state, root_rank):  # Horovod's refusal, and rank 0's values written into every tensor
        for name, t in state:
            if not t.is_contiguous():
                raise ValueError("Tensor is required to be contiguous.")
            seen.append(name)
            t.fill_(7.0)

    def distributed_optimizer(*args, **kwargs):
        raise Stop

    a = hv.HorovodAdapter({"broadcast_optimizer_state": False}, "cpu")
    a.hvd = SimpleNamespace(broadcast_parameters=broadcast_parameters, DistributedOptimizer=distributed_optimizer,
                            size=lambda: 2, Compression=SimpleNamespace(fp16="fp16", none=None), Average="avg")
    with pytest.raises(Stop):
        a.wrap(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert seen == list(laid_out)
    assert all(bool((t == 7.0).all()) for t in model.state_dict().values())  # the copies were written back
