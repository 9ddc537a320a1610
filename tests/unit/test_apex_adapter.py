"""The apex adapter's availability says precisely what is missing, its knobs are checked before launch.

Detection is tested against fake `apex` trees written into tmp_path and put first on sys.path (the real NVIDIA
apex needs CUDA and a source build; the training path itself is tested on a GPU in tests/gpu/test_apex_gpu.py).
"""

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import adapters
from adapters.apex import BUILD, GPU_RUN, LAST_TAG, NEEDS_CUDA_CPU, NOT_INSTALLED, ApexAdapter, probe_install
from adapters.base import KnobError, Precision
from harness.cli import app
from harness.core.comparison import plan
from harness.core.requests import RunRequest
from harness.ground.errors import first_sentence

from conftest import REPO

NVIDIA_INIT = "import torch\nfrom . import optimizers\nfrom . import normalization\n"
AMP_INIT = ("def initialize(models, optimizers=None, **kw):\n    return models, optimizers\n"
            "def scale_loss(loss, optimizers):\n    pass\n"
            "def master_params(optimizer):\n    yield from ()\n")
PARALLEL_INIT = "import torch\nclass DistributedDataParallel(torch.nn.Module):\n    pass\n"
PYPI_INIT = "from pyramid_mailer.interfaces import IMailer\n"
PYPI_SUMMARY = "Pyramid toolkit to add Velruse, Flash Messages,CSRF, ReCaptcha and Sessions"


def _drop_apex_modules():
    for name in [m for m in sys.modules if m == "apex" or m.startswith("apex.")]:
        del sys.modules[name]
    importlib.invalidate_caches()


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A directory first on sys.path; write a fake `apex` into it with `write(relpath, text)`."""
    root = tmp_path / "site"
    root.mkdir()
    _drop_apex_modules()
    monkeypatch.syspath_prepend(str(root))

    def write(rel: str, text: str = "") -> Path:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        importlib.invalidate_caches()
        return path

    write.root = root
    yield write
    _drop_apex_modules()


@pytest.fixture
def one_gpu(monkeypatch):
    """Pretend torch sees one GPU, so a test isolates the package reason from the CUDA one."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def nvidia_tree(write, amp=True, parallel=True):
    write("apex/__init__.py", NVIDIA_INIT)
    write("apex/optimizers/__init__.py")
    write("apex/normalization/__init__.py")
    if amp:
        write("apex/amp/__init__.py", AMP_INIT)
    if parallel:
        write("apex/parallel/__init__.py", PARALLEL_INIT)


def unavailable(device="cuda", world=1):
    avail = ApexAdapter.availability(device, world)
    assert not avail
    return avail


# ---- availability: every reason ---------------------------------------------------------------------------

@pytest.mark.skipif(importlib.util.find_spec("apex") is not None, reason="an apex is installed in this venv")
def test_not_installed_on_cpu_says_both_facts():
    avail = unavailable("cpu", 2)
    assert avail.reason == (
        "NVIDIA apex is not installed (it is not on PyPI, whose `apex` is an unrelated web toolkit: it is built "
        "from source); also, apex needs CUDA and this run is on CPU (amp.initialize raises 'expected "
        "torch.cuda.FloatTensor', apex DDP asserts 'Torch not compiled with CUDA enabled')")
    assert avail.fix == (
        "build NVIDIA apex 25.05, the last tag with amp and DDP, from source on a machine with an NVIDIA GPU, nvcc "
        "and a CUDA build of torch: git clone --branch 25.05 https://github.com/NVIDIA/apex && cd apex && pip "
        "install -v --disable-pip-version-check --no-cache-dir --no-build-isolation --config-settings "
        "\"--build-option=--cpp_ext\" --config-settings \"--build-option=--cuda_ext\" ./; then run on a GPU "
        "machine: compare run --device cuda -n 1 -a amp,apex")


@pytest.mark.skipif(importlib.util.find_spec("apex") is not None, reason="an apex is installed in this venv")
def test_not_installed_with_a_gpu(one_gpu):
    avail = unavailable()
    assert (avail.reason, avail.fix) == (NOT_INSTALLED, BUILD)


def test_pypi_web_toolkit_named_apex_by_its_metadata(site, one_gpu):
    site("apex/__init__.py", PYPI_INIT)
    site("apex/views.py")
    site("apex/lib/__init__.py")
    site("apex-0.9.10dev.dist-info/METADATA",
         f"Metadata-Version: 2.1\nName: apex\nVersion: 0.9.10dev\nSummary: {PYPI_SUMMARY}\n")
    site("apex-0.9.10dev.dist-info/top_level.txt", "apex\n")
    avail = unavailable()
    assert avail.reason == (
        f"the package named apex at {site.root / 'apex'} is not NVIDIA apex but 'apex 0.9.10dev: {PYPI_SUMMARY}' "
        "(PyPI's `apex` is an unrelated Pyramid web toolkit)")
    assert avail.fix == f"pip uninstall apex, then {BUILD}"
    assert "pyramid_mailer" not in sys.modules, "detection must not import the wrong package"


def test_unrelated_package_named_apex_without_metadata(site, one_gpu):
    site("apex/__init__.py", "raise RuntimeError('must not be imported')\n")
    site("apex/views.py")
    assert unavailable().reason == (
        f"the package named apex at {site.root / 'apex'} is not NVIDIA apex but a package with none of NVIDIA "
        "apex's modules (amp, parallel, optimizers, ...) (PyPI's `apex` is an unrelated Pyramid web toolkit)")


def test_source_checkout_directory_named_apex(site, one_gpu):
    site("apex/setup.py")  # no apex/__init__.py: a namespace package, as a clone in the working directory is
    assert unavailable().reason == (
        f"the package named apex at {site.root / 'apex'} is not NVIDIA apex but a directory without __init__.py "
        "(e.g. an apex source checkout in the working directory) (PyPI's `apex` is an unrelated Pyramid web "
        "toolkit)")


def test_apex_newer_than_25_05_without_amp_and_ddp(site, one_gpu):
    nvidia_tree(site, amp=False, parallel=False)
    site("apex-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: apex\nVersion: 0.1\n"
                                        "Summary: PyTorch Extensions written by NVIDIA\n")
    site("apex-0.1.dist-info/top_level.txt", "apex\n")
    avail = unavailable()
    assert avail.reason == (
        f"NVIDIA apex at {site.root / 'apex'} (apex 0.1) has no apex.amp or apex.parallel.DistributedDataParallel: "
        "apex.amp and apex.parallel.DistributedDataParallel were removed upstream in May 2025 (last tag with "
        "them: 25.05)")
    assert avail.fix == f"replace it with tag {LAST_TAG}: pip uninstall apex, then {BUILD}"


def test_apex_parallel_without_distributed_data_parallel(site, one_gpu):
    nvidia_tree(site, parallel=False)
    site("apex/parallel/__init__.py", "class SyncBatchNorm:\n    pass\n")
    assert unavailable().reason == (
        f"NVIDIA apex at {site.root / 'apex'} has no apex.parallel.DistributedDataParallel: apex.amp and "
        "apex.parallel.DistributedDataParallel were removed upstream in May 2025 (last tag with them: 25.05)")


def test_apex_that_fails_to_import(site, one_gpu):
    nvidia_tree(site)
    site("apex/__init__.py", "raise ImportError('libcudart.so.12: cannot open shared object file')\n")
    avail = unavailable()
    assert avail.reason == (
        f"NVIDIA apex at {site.root / 'apex'} does not import: `import apex.amp, apex.parallel` raised "
        "ImportError: libcudart.so.12: cannot open shared object file")
    assert avail.fix == f"rebuild it against this torch: pip uninstall apex, then {BUILD}"


def test_working_apex_on_cpu_only_needs_cuda(site):
    nvidia_tree(site)
    avail = unavailable("cpu", 2)
    assert (avail.reason, avail.fix) == (NEEDS_CUDA_CPU, GPU_RUN)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the reason on a machine without a GPU")
def test_working_apex_with_cuda_requested_but_no_gpu(site):
    nvidia_tree(site)
    avail = unavailable("cuda", 1)
    assert avail.reason == (
        f"apex needs CUDA and torch {torch.__version__} sees no GPU here (amp.initialize raises 'expected "
        "torch.cuda.FloatTensor', apex DDP asserts 'Torch not compiled with CUDA enabled')")
    assert avail.fix == GPU_RUN


def test_working_apex_on_a_gpu_is_available_for_as_many_ranks_as_gpus(site, one_gpu):
    nvidia_tree(site)
    assert ApexAdapter.availability("cuda", 1)
    avail = unavailable("cuda", 2)
    assert (avail.reason, avail.fix) == ("world size 2 needs 2 GPUs, this machine has 1",
                                         "use --world-size 1 or fewer, or --device cpu")


def test_broken_apex_and_no_cuda_are_both_reported(site):
    nvidia_tree(site)
    site("apex/__init__.py", "raise ImportError('boom')\n")
    avail = unavailable("cpu", 2)
    assert avail.reason == (f"NVIDIA apex at {site.root / 'apex'} does not import: `import apex.amp, apex.parallel` "
                            f"raised ImportError: boom; also, {NEEDS_CUDA_CPU}")
    assert avail.fix == f"rebuild it against this torch: pip uninstall apex, then {BUILD}; then {GPU_RUN}"


def test_probe_does_not_import_apex(site):
    nvidia_tree(site)
    inst = probe_install()
    assert (inst.found, inst.nvidia, inst.has_amp, inst.has_parallel) == (True, True, True, True)
    assert "apex" not in sys.modules


def test_adapter_module_does_not_import_apex_or_torch_at_import_time():
    code = "import sys, adapters.apex; print('torch' in sys.modules, 'apex' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


# ---- knobs and precision ----------------------------------------------------------------------------------

@pytest.mark.parametrize("level, precision", [("O0", Precision.FP32), ("O1", Precision.FP16),
                                              ("O2", Precision.FP16), ("O3", Precision.FP16)])
def test_precision_per_opt_level(level, precision):
    assert ApexAdapter({"opt_level": level}, "cuda").precision() is precision


def test_defaults_are_the_blogs_and_apexs():
    adapter = ApexAdapter({}, "cuda")
    k = adapter.knobs
    assert (k.opt_level, k.loss_scale, k.keep_batchnorm_fp32, k.delay_allreduce, k.message_size) == (
        "O1", "auto", None, None, None)  # None: not passed, apex's own default applies
    assert adapter._initialize_kwargs() == {"opt_level": "O1"}  # apex's own per-level defaults apply


def test_overrides_reach_amp_initialize():
    adapter = ApexAdapter({"opt_level": "O2", "loss_scale": "128", "keep_batchnorm_fp32": "false"}, "cuda")
    assert adapter._initialize_kwargs() == {"opt_level": "O2", "loss_scale": "128", "keep_batchnorm_fp32": False}


@pytest.mark.parametrize("knobs, message", [
    ({"opt_level": "O4"}, "knob 'opt_level' must be O0, O1, O2 or O3 (the letter O); got 'O4'"),
    ({"opt_level": "01"}, "knob 'opt_level' must be O0, O1, O2 or O3 (the letter O); got '01'"),
    ({"loss_scale": "big"}, "knob 'loss_scale' must be auto, dynamic or a positive number; got 'big'"),
    ({"loss_scale": "0"}, "knob 'loss_scale' must be auto, dynamic or a positive number; got '0'"),
    ({"keep_batchnorm_fp32": "maybe"}, "knob 'keep_batchnorm_fp32' expects a bool or none (the framework's "
                                       "default), got 'maybe'"),
    ({"keep_batchnorm_fp32": "true"}, "knob 'keep_batchnorm_fp32' applies to opt_level O2 and O3 only (O0 is all "
                                      "fp32; apex refuses it with O1, which runs batchnorm in fp32 itself); got O1"),
    ({"message_size": "0"}, "knob 'message_size' must be a positive number of elements; got 0"),
])
def test_bad_knobs_are_refused(knobs, message):
    with pytest.raises(KnobError) as exc:
        ApexAdapter(knobs, "cuda").precision()
    assert str(exc.value) == message


def test_knob_types_are_coerced_by_the_contract():
    with pytest.raises(KnobError) as exc:
        ApexAdapter({"delay_allreduce": "sometimes"}, "cuda")
    assert str(exc.value) == "knob 'delay_allreduce' expects a bool or none (the framework's default), got 'sometimes'"
    assert ApexAdapter({"delay_allreduce": "true", "message_size": "5"}, "cuda").knobs.message_size == 5


# ---- the CLI on this machine ------------------------------------------------------------------------------

def test_registered_with_the_torchrun_launcher():
    assert "apex" in adapters.names() and adapters.get("apex") is ApexAdapter
    assert ApexAdapter.launcher == "torchrun"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_explicit_apex_alone_here_exits_2_with_the_reason(tmp_path):
    out = tmp_path / "o"
    result = CliRunner().invoke(app, ["run", "-a", "apex", "--out", str(out)])
    assert result.exit_code == 2, result.output
    first = first_sentence(adapters.availability("apex", "cpu", 2).message())
    assert first in (NOT_INSTALLED, NEEDS_CUDA_CPU)  # what is missing first: the package, or CUDA
    assert result.stderr == (f"error: no adapter can run here: {first}; see `compare list --device cpu "
                             f"--world-size 2` for the reasons and fixes\n")
    assert "Traceback" not in result.output and not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_strict_makes_a_named_unavailable_apex_an_error(tmp_path):
    out = tmp_path / "o"
    result = CliRunner().invoke(app, ["run", "-a", "ddp,apex", "--strict", "--out", str(out)])
    assert result.exit_code == 2, result.output
    first = first_sentence(adapters.availability("apex", "cpu", 2).message())
    assert result.stderr == (f"error: adapter 'apex' cannot run here: {first}; see `compare list --device "
                             f"cpu --world-size 2` for every reason and fix\n")
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the default plan on a machine without a GPU")
@pytest.mark.parametrize("named", [None, ["ddp", "apex"]], ids=["default", "named"])
def test_a_run_lists_apex_as_unavailable_with_its_reason(tmp_path, named):
    p = plan(RunRequest(adapters=named, out=tmp_path / "o"))
    rows = {row.label: row.reason for row in p.unavailable}
    assert rows["apex"] == adapters.availability("apex", "cpu", 2).message()
    assert NEEDS_CUDA_CPU in rows["apex"]
    assert "apex" not in [row.label for row in p.runnable] and "ddp" in [row.label for row in p.runnable]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("name", adapters.names())
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_adapters_checks_of_knobs_and_models_answer_at_its_defaults_without_raising(name, device):
    # apex inherits DDP's roles and not its knobs: DDP's checks read knobs apex has none of (compile, sync_bn), so
    # on a GPU every apex row was "knob check raised AttributeError" and every user's model refused apex for
    # "model check raised AttributeError"; a check that reads a knob must be its own adapter's
    from adapters.base import Availability, ModelFacts

    adapter = adapters.get(name)({}, device)
    shapes = [ModelFacts(param_dtypes=["fp32"]),
              ModelFacts(param_dtypes=["fp32"], checked_steps=2, no_gradient={"aux.weight": [1]},
                         batch_norm=["BatchNorm2d x 2"], sparse=["emb"]),
              ModelFacts(param_dtypes=["fp32"], checked_steps=2, checked_ranks=2, no_gradient={"e.weight": [0]},
                         ranks_differ={"e.weight": [0]})]
    assert isinstance(adapter.knob_availability(device, 2), Availability)
    for facts in shapes:
        assert isinstance(adapter.model_availability(facts), Availability)
    assert adapter.batch_norm() is None or isinstance(adapter.batch_norm(), str)
    if adapter.batch_norm():
        assert "-a " not in adapter.batch_norm() or f"-a {name}:" in adapter.batch_norm()
    adapter.missing_gradient()
    for error in ("Expected to have finished reduction in the prior iteration", "Some param buckets were not "
                  "allreduced.", "mark a variable ready only once", "RuntimeError: boom"):
        fix = adapter.failure_fix(error)
        assert fix is None or isinstance(fix, str)
    adapter.compression()
    adapter.comm_schedule()


def test_apex_refuses_a_model_whose_parameters_miss_a_gradient_in_some_steps_with_its_own_knob():
    from adapters.base import ModelFacts

    apex = adapters.get("apex")
    some = ModelFacts(param_dtypes=["fp32"], checked_steps=4, no_gradient={"aux.weight": [1, 3]})
    got = apex({}, "cuda").model_availability(some)
    assert not got and "Some param buckets were not allreduced" in got.reason
    assert got.fix.startswith("add the knob delay_allreduce=true (-a apex:delay_allreduce=true)")
    assert apex({"delay_allreduce": True}, "cuda").model_availability(some)
    never = ModelFacts(param_dtypes=["fp32"], checked_steps=4, no_gradient={"aux.weight": [0, 1, 2, 3]})
    assert apex({}, "cuda").model_availability(never)  # its buckets never hold it
    assert apex({}, "cuda").batch_norm() == ""  # no knob of this adapter makes BatchNorm global
    assert apex({}, "cuda").knob_availability("cuda", 2)
