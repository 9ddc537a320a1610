"""The workload's max_grad_norm, from the decorator to each backend's step (no processes started): the hyperparameter
and its refusals, the run's controls, the default step clipping the gradients of the user's module before the
optimizer's step, amp's GradScaler unscaled first, Horovod's clip between synchronize() and step(), and DeepSpeed's
engine handed it as its config's gradient_clipping with nothing clipped by hand. That every backend's clip matches the
single process's in a real run is tests/distributed/test_clipped_training.py's."""

import contextlib

import pytest
import torch
from torch import nn

import workloads
from adapters import amp as amp_adapter
from adapters import deepspeed as ds
from adapters import horovod as hvd_adapter
from adapters.base import RankInfo
from adapters.reference import ReferenceAdapter
from conftest import REPO
from harness.core import assemble
from harness.core.comparison import plan
from harness.core.requests import RunRequest
from harness.core.runner import make_spec
from harness.ground.argv import to_argv
from harness.shared.registry import BadReference
from workloads import Pieces, workload
from workloads.function import from_function

MODELS = REPO / "tests" / "fixtures" / "models.py"


def _model_with_gradients(norm: float) -> nn.Module:
    """A model whose gradients are set by hand to a global norm of `norm` (3-4-12 scaled: exact in fp32)."""
    model = nn.Linear(2, 1)
    model.weight.grad = torch.tensor([[3.0, 4.0]]) * norm / 13
    model.bias.grad = torch.tensor([12.0]) * norm / 13
    return model


def _grad_norm(model: nn.Module) -> float:
    return float(torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()])))


class _Recording(torch.optim.SGD):
    """SGD noting the gradients' global norm when its step() runs."""

    def step(self, closure=None):
        self.seen = _grad_norm_of(self.param_groups)
        return super().step(closure)


def _grad_norm_of(groups) -> float:
    return float(torch.linalg.vector_norm(torch.cat([p.grad.flatten() for g in groups for p in g["params"]])))


@pytest.mark.parametrize("workload, flag, clip", [("clipped", None, 0.05), ("clipped", 2.5, 2.5),
                                                   ("own_optimizer", None, None), ("own_optimizer", 1.0, 1.0)])
def test_the_workloads_max_grad_norm_or_the_flag_reaches_every_launch_and_the_controls(tmp_path, workload, flag,
                                                                                      clip):
    # The decorator's hyperparameter is the default; --max-grad-norm overrides it, as --global-batch does its batch
    assert workloads.get(f"{MODELS}:clipped").max_grad_norm == 0.05
    p = plan(RunRequest(workload=f"{MODELS}:{workload}", adapters=["ddp"], steps=1, warmup=0, max_grad_norm=flag,
                        out=tmp_path / "o"))
    assert p.max_grad_norm == clip
    spec = make_spec(p, "ddp", tmp_path, processes=2, steps=1, warmup=0, equiv=0, knobs={}, do_eval=False, extra={})
    assert spec.max_grad_norm == clip
    controls = assemble.controls(spec, p.workload)
    assert controls.get("max_grad_norm") == clip and ("max_grad_norm" in controls) == (clip is not None)
    assert to_argv(RunRequest(max_grad_norm=flag)).count("--max-grad-norm") == (flag is not None)


def test_the_fixtures_clip_bites_its_gradient_norm_is_far_above_it():
    # Otherwise the distributed test would pass with no backend clipping anything.
    w = workloads.get(f"{MODELS}:clipped")
    torch.manual_seed(w.seed)
    model = w.new_model()
    data = w.materialize("cpu", w.global_batch)
    x, y = data.batch(w.batch_indices(0, w.global_batch, data.n_train, 0, 1), "cpu")
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    assert _grad_norm(model) > 5 * w.max_grad_norm


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "1.0"])
def test_a_max_grad_norm_that_is_not_a_positive_number_is_refused_naming_it(bad):
    @workload(max_grad_norm=bad)
    def mine():
        return Pieces(model=lambda: nn.Linear(2, 2), train=(torch.zeros(4, 2), torch.zeros(4, dtype=torch.long)))

    with pytest.raises(BadReference, match=r"max_grad_norm must be a positive number \(the norm the gradients are "
                                           r"clipped to\) or None \(no clipping\), got "):
        from_function(mine, "mine.py:mine")


@pytest.mark.parametrize("clip, expected", [(None, 2.0), (0.5, 0.5), (4.0, 2.0)])
def test_the_default_step_clips_the_global_norm_before_the_optimizers_step(clip, expected):
    adapter = ReferenceAdapter()
    model = _model_with_gradients(2.0)
    adapter.max_grad_norm = clip
    adapter.wrap(model, _Recording(model.parameters(), lr=0.1))
    adapter.step()
    assert adapter.optimizer.seen == pytest.approx(expected, rel=1e-5)


def test_a_sparse_gradient_is_clipped_by_the_global_norm_as_a_dense_one_would_be():
    # an outside check: nn.Embedding(sparse=True) with a max_grad_norm failed the reference and every torch row at
    # their first step (torch's clip_grad_norm_ has no sparse kernel); a row looked up twice is one row of the norm
    torch.manual_seed(0)

    def build(sparse):
        torch.manual_seed(0)
        emb, head = nn.Embedding(10, 4, sparse=sparse), nn.Linear(4, 2)
        ids = torch.tensor([[1, 1, 3], [3, 7, 1]])  # rows looked up more than once: an uncoalesced sparse gradient
        (head(emb(ids)).sum() * 3).backward()
        return nn.ModuleDict({"emb": emb, "head": head})

    dense, sparse = build(False), build(True)
    assert sparse["emb"].weight.grad.is_sparse and not sparse["emb"].weight.grad.is_coalesced()
    for model in (dense, sparse):
        adapter = ReferenceAdapter()
        adapter.max_grad_norm = 0.5
        adapter.wrap(model, torch.optim.SGD(model.parameters(), lr=0.1))
        adapter.clip_gradients()
    assert sparse["emb"].weight.grad.to_dense() == pytest.approx(dense["emb"].weight.grad, abs=1e-7)
    assert sparse["head"].weight.grad == pytest.approx(dense["head"].weight.grad, abs=1e-7)
    assert _grad_norm(dense) == pytest.approx(0.5, rel=1e-5)


def _amp(clip, scale: float | None) -> amp_adapter.AmpAdapter:
    a = amp_adapter.AmpAdapter({}, "cpu")
    a.info = RankInfo(rank=0, world_size=1, local_rank=0, device="cpu", backend=None, data_rank=0, data_world=1)
    a.max_grad_norm, a.skips = clip, None
    a.scaler = None if scale is None else torch.amp.GradScaler("cpu", init_scale=scale)
    if a.scaler is not None:
        a.scaler.scale(torch.tensor(1.0))  # the scale is made at the first scaled loss, as a backward makes it
    return a


@pytest.mark.parametrize("scale", [None, 1024.0])
def test_amp_clips_the_unscaled_gradients(scale):
    # bf16 on the CPU has no scaler; with one (fp16), the gradients are scaled until unscale_: clipping those would
    # clip the scaled norm
    a = _amp(0.5, scale)
    model = _model_with_gradients(2.0 * (scale or 1.0))
    a.model, a.optimizer = model, _Recording(model.parameters(), lr=0.1)  # DDP's wrap needs a process group
    a.step()
    assert a.optimizer.seen == pytest.approx(0.5, rel=1e-5)


def test_horovod_clips_between_synchronize_and_the_step_it_does_not_synchronize_again():
    calls = []
    model = _model_with_gradients(2.0)

    class FakeDistributedOptimizer:  # hvd.DistributedOptimizer's step protocol
        param_groups = [{"params": list(model.parameters())}]

        def synchronize(self):
            calls.append("synchronize")

        @contextlib.contextmanager
        def skip_synchronize(self):
            calls.append("skip_synchronize")
            yield

        def step(self):
            calls.append(("step", round(_grad_norm(model), 5)))

    a = hvd_adapter.HorovodAdapter({}, "cpu")
    a.max_grad_norm = 0.5
    a.model, a.optimizer = model, FakeDistributedOptimizer()
    a.step()
    assert calls == ["synchronize", "skip_synchronize", ("step", 0.5)]


@pytest.mark.parametrize("clip, configured", [(None, 0.0), (0.05, 0.05)])
def test_deepspeed_hands_the_clip_to_its_engine_and_clips_nothing_by_hand(clip, configured):
    a = ds.DeepSpeedAdapter({"zero_stage": 2}, "cpu")
    a.info = RankInfo(rank=0, world_size=2, local_rank=0, device="cpu", backend="gloo", data_rank=0, data_world=2)
    a.global_batch, a.max_grad_norm = 64, clip
    assert a._ds_config()["gradient_clipping"] == configured
    model = _model_with_gradients(2.0)
    a.model = model
    a.clip_gradients()  # the engine's partitions hold the gradients: the module's are not the ones to clip
    assert _grad_norm(model) == pytest.approx(2.0)
