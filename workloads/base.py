"""The workload contract: model, data, loss, evaluation metric and hyperparameters.

A workload is identical for every adapter. It owns the global batch, the learning rate and its scaling rule,
the seed and the number of steps; adapters never touch any of them. The harness asks it for:

    model = workload.build_model()                 # after torch.manual_seed(seed): same init everywhere
    opt = workload.make_optimizer(model, lr)       # lr = workload.lr(global_batch)
    data = workload.materialize(device, B)         # whole dataset in memory before anything is timed
    idx = workload.batch_indices(step, global_batch, data_rank, data_world)
    loss = workload.loss(model(x), y)
    correct, count, loss_sum = workload.evaluate(model, data, rank, world)   # exact: each test sample once

Sharding: every step's global batch is a fixed index list; process `r` of `W` gets the contiguous slice
`[r*B/W, (r+1)*B/W)`. The union of one step's slices is exactly the single-process batch, in the same order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch


@dataclass
class Data:
    """A materialised dataset: tensors already on the training device."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor | None = None
    test_y: torch.Tensor | None = None
    meta: dict[str, Any] = field(default_factory=dict)


class Workload:
    name: ClassVar[str]
    summary: ClassVar[str]
    global_batch: ClassVar[int]
    base_lr: ClassVar[float]
    """Learning rate at `base_batch`; scaled linearly with the global batch (Goyal et al. 2017)."""
    base_batch: ClassVar[int]
    steps: ClassVar[int]
    warmup: ClassVar[int]
    seed: ClassVar[int] = 0
    equiv_steps: ClassVar[int] = 10
    """Steps after which parameters are compared with the single-process reference (max_param_diff)."""
    equiv_tolerance: ClassVar[float] = 1e-5
    """Largest max_param_diff an fp32 adapter may show after `equiv_steps` steps."""
    target: ClassVar[float | None] = None
    """Eval accuracy the default settings really reach (None: not a learning benchmark)."""
    batch_independent: ClassVar[bool] = True
    """False when the model's output for a sample depends on the rest of its batch (BatchNorm): then sharding the
    batch changes the maths and per-rank results are not expected to equal the single-process reference."""

    @dataclass
    class Options:
        """Workload-specific options (`--option key=value`); subclasses replace this."""

    def __init__(self, options: dict[str, Any] | None = None):
        from adapters.base import build_knobs

        self.options = build_knobs(self.Options, options or {})

    # ---- hyperparameters -----------------------------------------------------------------------------------
    def lr(self, global_batch: int) -> float:
        return self.base_lr * global_batch / self.base_batch

    def lr_rule(self) -> str:
        return f"linear: {self.base_lr} x global_batch / {self.base_batch}"

    # ---- model, optimizer, loss -----------------------------------------------------------------------------
    def build_model(self) -> torch.nn.Module:
        raise NotImplementedError

    def make_optimizer(self, model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
        import torch

        return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        import torch.nn.functional as F

        return F.cross_entropy(output.float(), target)

    # ---- data ----------------------------------------------------------------------------------------------
    def materialize(self, device: str, global_batch: int) -> Data:
        raise NotImplementedError

    def batch_indices(self, step: int, global_batch: int, n_train: int, data_rank: int = 0,
                      data_world: int = 1) -> torch.Tensor:
        """Indices of this process's slice of the global batch at `step` (epoch-wise shuffle, drop last)."""
        import torch

        per_epoch = n_train // global_batch
        if per_epoch == 0:
            raise ValueError(f"global batch {global_batch} is larger than the training set ({n_train})")
        epoch, within = divmod(step, per_epoch)
        gen = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
        perm = torch.randperm(n_train, generator=gen)
        batch = perm[within * global_batch:(within + 1) * global_batch]
        per_rank = global_batch // data_world
        return batch[data_rank * per_rank:(data_rank + 1) * per_rank]

    # ---- evaluation ----------------------------------------------------------------------------------------
    def eval_slice(self, n_test: int, rank: int, world: int) -> slice:
        """Contiguous, possibly uneven slices: every test sample is counted exactly once (no padding)."""
        per = math.ceil(n_test / world)
        return slice(min(rank * per, n_test), min((rank + 1) * per, n_test))

    def evaluate(self, model, data: Data, rank: int, world: int, autocast,
                 cast_input=lambda x: x) -> tuple[float, float, float] | None:
        """(correct, count, loss_sum) over this process's slice of the test set, or None without a test set.
        Every rank runs exactly one forward, even on an empty slice (frameworks that gather partitioned
        parameters in forward need every rank to take part)."""
        import torch

        if data.test_x is None:
            return None
        sl = self.eval_slice(len(data.test_x), rank, world)
        x, y = data.test_x[sl], data.test_y[sl]
        model.eval()
        with torch.no_grad(), autocast:
            out = model(cast_input(x))
        model.train()
        if len(y) == 0:
            return 0.0, 0.0, 0.0
        loss_sum = torch.nn.functional.cross_entropy(out.float(), y, reduction="sum").item()
        return float((out.argmax(1) == y).sum().item()), float(len(y)), loss_sum

    def describe(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {"options": asdict(self.options)}


def synthetic_classification(n: int, shape: tuple[int, ...], classes: int, seed: int, teacher: bool):
    """Deterministic Gaussian inputs; labels from a fixed random linear teacher (learnable) or uniform."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((n, *shape), generator=gen)
    if teacher:
        w = torch.randn((math.prod(shape), classes), generator=gen)
        y = (x.flatten(1) @ w).argmax(1)
    else:
        y = torch.randint(0, classes, (n,), generator=gen)
    return x, y
