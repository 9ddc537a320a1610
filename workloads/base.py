"""The workload contract: model, data, loss, evaluation metric and hyperparameters.

A workload is identical for every adapter. It owns the global batch, the learning rate and its scaling rule,
the seed and the number of steps; adapters never touch any of them. The harness (harness/rank/train.py) asks it
for:

    model = workload.build_model()                 # after torch.manual_seed(workload.seed): same init everywhere
    opt = workload.make_optimizer(model, lr)       # lr = workload.lr(global_batch)
    data = workload.materialize(device, global_batch)   # whole dataset in memory before anything is timed
    idx = workload.batch_indices(step, global_batch, n_train, data_rank, data_world)
    x, y = data.batch(idx, device)                 # (inputs, targets); a dict batch is its own targets
    loss = workload.step_loss(workload.forward(model, x), y, adapter.all_reduce_mean)
    correct, count, loss_sum = workload.evaluate(model, data, rank, world, autocast, cast_input)

Batches may be tensors or dicts of tensors and outputs tensors, dicts or ModelOutputs (workloads/batch.py). A loss
is a mean over equal-weight samples, or the sum over a number of items that varies from batch to batch (tokens that
are not padding, masked positions) with that number: `loss` returning `(sum, count)`, or `count` declaring it. Then
every process divides by the mean count over the processes (one small all-reduce a step), so that after the
backend averages the processes' gradients the step's gradient is the single process's over the global batch.

Sharding: every step's global batch is a fixed index list; process `r` of `W` gets the contiguous slice
`[r*B/W, (r+1)*B/W)`. The union of one step's slices is exactly the single-process batch, in the same order.

A subclass must implement `build_model` and `materialize` (abstract) and set the class attributes without a
default below (checked when the class is defined); it may override the rest.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from harness.shared.options import build as build_options
from workloads import batch as batches

if TYPE_CHECKING:
    import torch

class LossError(ValueError):
    """A loss that cannot be taken from what the model returned, or returned in a form the harness cannot use:
    one line naming what came back and what would do."""


_REQUIRED = ("name", "summary", "global_batch", "base_lr", "base_batch", "steps", "warmup")


@dataclass
class Data:
    """A materialised dataset: tensors (or dicts of tensors) already on the training device, or, for the training
    data, a map-style Dataset that each rank reads its slice of every step from through a DataLoader (`train_set`).
    A dict batch (`train_x` a dict, `train_y` None) is its own targets: the loss gets the whole batch."""

    train_x: Any
    train_y: torch.Tensor | None
    test_x: Any = None
    test_y: torch.Tensor | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    train_set: Any = None
    """A `torch.utils.data.Dataset` of (input, target) or dict items, when train_x and train_y are None."""

    @property
    def n_train(self) -> int:
        return batches.length(self.train_x) if self.train_x is not None else len(self.train_set)

    @property
    def n_test(self) -> int:
        return 0 if self.test_x is None else batches.length(self.test_x)

    def batch(self, idx: torch.Tensor, device: str) -> tuple[Any, Any]:
        """(inputs, targets) of the training samples `idx`, on `device` (read and collated from the Dataset)."""
        if self.train_x is not None:
            return pair(batches.take(self.train_x, idx), batches.take(self.train_y, idx))
        from torch.utils.data import default_collate

        return collated(default_collate([self.train_set[i] for i in idx.tolist()]), device)

    def test(self, sl: slice) -> tuple[Any, Any]:
        """(inputs, targets) of the test samples in `sl`."""
        return pair(batches.take(self.test_x, sl), batches.take(self.test_y, sl))


def _one_number(value: Any) -> bool:
    """A count: a Python number or a tensor of one element."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() == 1
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def pair(inputs: Any, targets: Any) -> tuple[Any, Any]:
    """(inputs, targets): a dict batch without separate targets is its own targets."""
    return inputs, (inputs if targets is None else targets)


def collated(items: Any, device: Any, non_blocking: bool = False) -> tuple[Any, Any]:
    """(inputs, targets) of a batch collated from a Dataset's items ((input, target) pairs or dicts), on `device`."""
    if isinstance(items, Mapping):
        moved = batches.to(items, device, non_blocking)
        return moved, moved
    x, y = items
    return batches.to(x, device, non_blocking), batches.to(y, device, non_blocking)


def nothing_to_train(model, name: str) -> str | None:
    """Why a model has nothing to train (no parameter, or none that requires a gradient), in one line; None where it
    has. What `compare run` refuses before launching and `compare plan` before counting."""
    params = list(model.parameters())
    if not params:
        return (f"workload {name}: its model ({type(model).__name__}) has no parameters, so there is nothing to "
                f"train or to compare; give a model with parameters")
    if not any(p.requires_grad for p in params):
        return (f"workload {name}: none of its model's {len(params)} parameter tensor(s) requires a gradient (all "
                f"frozen), so there is nothing to train or to compare; unfreeze some")
    return None


def no_loss_fix(target: Any, own: str, output: Any = None) -> str:
    """The fix for a model that returned no loss where the workload gives none: `own` (the workload's own loss); for
    a dict of loss terms (torchvision's detection models: loss_classifier, loss_box_reg), a loss that sums them; for
    a dict batch without labels, first passing them (a transformers model computes its loss when given them)."""
    terms = [k for k in output if "loss" in str(k).lower()] if isinstance(output, Mapping) else []
    if terms:
        return (f"its values {', '.join(map(str, terms))} are loss terms: {own} that sums them, e.g. loss=lambda "
                f"output, target: sum(output.values())")
    if isinstance(target, Mapping) and "labels" not in target:
        return f"pass the labels in the batch (a transformers model computes its loss when given `labels`) or {own}"
    if isinstance(output, (tuple, list)) and not hasattr(output, "_fields"):
        return (f"{own} that picks its part, e.g. loss=lambda output, target: F.cross_entropy(output[0], target) (a "
                f"tuple is read as (loss, logits, ...) where its first is a loss, a tensor of one value, as the "
                f"Trainer reads a transformers model's)")
    return own


SMALL_MODEL = 5_000_000
"""Parameters up to which compare runs a user's model for real on the CPU where the meta device is not enough: the
check before launching runs it twice, to find randomness in its forward that its modules do not show (a functional
dropout), and `compare plan` counts a model whose forward meta cannot run there; a fraction of a second at this
size."""



# Above this many training samples an epoch's order is not a torch.randperm of them all (8 bytes a sample in every
# process: 128 MiB here, 8 TB for a Dataset of 10^12 items) but affine_batch's, which holds only the batch it gives.
RANDPERM_LIMIT = 1 << 24


def affine_batch(seed: int, n: int, start: int, count: int):
    """Positions start..start+count of one epoch's order of n samples as the permutation i -> (a*i + b) mod n, with
    a (coprime to n) and b drawn from a generator seeded with `seed`: every sample once an epoch, in memory of the
    batch alone. Less random than a randperm (consecutive positions are a apart), which a benchmark's data order
    can afford."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    draw = lambda: int(torch.randint(0, 1 << 62, (1,), generator=gen)) % n  # noqa: E731
    a = draw()
    while math.gcd(a, n) != 1:
        a = draw()
    b = draw()
    return torch.tensor([(a * i + b) % n for i in range(start, start + count)], dtype=torch.int64)


class Workload(ABC):
    name: ClassVar[str]
    summary: ClassVar[str]
    global_batch: ClassVar[int]
    base_lr: ClassVar[float]
    """Learning rate at `base_batch`; scaled linearly with the global batch (Goyal et al. 2017)."""
    base_batch: ClassVar[int]
    steps: ClassVar[int]
    """Timed steps of a default run."""
    warmup: ClassVar[int]
    """Warm-up steps of a default run (discarded from the timings)."""
    seed: ClassVar[int] = 0
    equiv_steps: ClassVar[int] = 10
    """Steps after which parameters are compared with the single-process reference (max_param_diff)."""
    equiv_tolerance: ClassVar[float] = 1e-5
    """Largest max_param_diff an fp32 adapter may show after `equiv_steps` steps."""
    max_grad_norm: ClassVar[float | None] = None
    """Clip the global gradient norm (over every parameter, every rank's share) to this before each optimizer step, as
    the Hugging Face Trainer's max_grad_norm does; None: no clipping. Each backend clips its own way
    (`Strategy.clip_gradients`), so it is right under ZeRO and FSDP, where a clip inside the optimizer's step() is
    not."""
    target: ClassVar[float | None] = None
    """Eval accuracy the default settings really reach (None: not a learning benchmark)."""
    metric_name: ClassVar[str] = "test accuracy"
    """What the evaluation's accuracy counts, in words for reports (a language model: "next-byte accuracy")."""
    eval_every: ClassVar[int | None] = None
    """Until-target runs (`compare run --until-target`): evaluate every this many steps. Required with a target."""
    max_steps_to_target: ClassVar[int | None] = None
    """Until-target runs: the step budget; a run that has not reached `target` by then is `not_reached`. Required
    with a target."""
    batch_dependence: ClassVar[str | None] = None
    """Why the model's output for a sample depends on the rest of its batch other than through BatchNorm (which
    `batch_norm` covers), or None. When set, sharding the batch changes the maths: per-rank results are not expected
    to equal the single-process reference, the check is skipped, and the report gives this reason."""
    batch_norm: ClassVar[str | None] = None
    """The model's BatchNorm layers in words ("BatchNorm2d"), or None. A user's workload needs no declaration: the
    parent's check finds them in the model's modules. Their batch statistics are per process unless a row computes
    them over the global batch (SyncBatchNorm: `Adapter.batch_norm`), and only such rows are checked."""

    nondeterministic: str | None = None
    """Why the model's training-mode output is random (dropout, or a forward that draws random numbers), found by the
    parent's check of a user's workload before launching (harness/core/model_check.py); a failed equivalence check
    then says so."""
    optimizer_class: str | None = None
    """The optimizer's class as the check before launching built it (the ✗'s words name an adaptive one)."""
    stateful: str | None = None
    """What the model's forward changes in its modules between calls, deterministically (a step counter, a buffer),
    found by the same check: never a reason to call it random."""
    edits_parameters: str | None = None
    """The parameters the model's forward changes in place (nn.Embedding(max_norm=...), a clamp_), found by the same
    check: a failed equivalence check then says each rank's copy changed where its own slice took it."""
    model_facts: Any = None
    """What the same check found for the rows (adapters.base.ModelFacts: parameters left without gradients, BatchNorm
    layers), or None where it did not run (a built-in workload)."""
    batch_dependent: str | None = None
    """How the model's loss was found to depend on the rest of its batch other than through BatchNorm (a term over
    the whole batch, a buffer updated from it), by the same check (harness/core/workload_checks.py,
    batch_dependence); a failed equivalence check then says so, with the fix."""
    batch_mixing: str | None = None
    """Where the same check found a sample's activations first depending on the other samples of its batch: the
    innermost module whose output for a sample differed between the global batch and a rank's slice ("model.norm
    (MyNorm)", "the model's own forward (Net)"), or None where no module's did (the loss mixes them)."""
    batch_buffers: list[str] | None = None
    """The buffers (besides BatchNorm's) that the same check found following the batch: after the step whose loss
    differed, their values in the one process and in a rank over its slice differed. The ✗ then names them."""
    count_losses: dict[int, tuple[float, list[float]]] | None = None
    """Where the workload declares a count, the same check's losses per step (from 0): the single process's over the
    global batch and each rank's over its slice, with the same parameters; a ✗ that would suspect the declared count
    weighs them by it and by the count suspected, and says which gives the single process's loss."""
    unlossed_buffers: list[str] | None = None
    """The buffers the same check found following the batch where the loss did not (InstanceNorm's running
    statistics with track_running_stats=True): the parameters can match the single process while what reads these
    buffers in eval mode (the evaluation) differs. A ✓ then says so."""
    consults_distributed: str | None = None
    """Where the user's code called torch.distributed while that check ran ("gather (model.py:52)"), for a model
    found to depend on the rest of its batch: run alone it skips its gather, and under a backend it may gather the
    rest from the other ranks (a SimCLR or CLIP loss), so no row's ✗ claims that no backend can match it."""
    calls_distributed: str | None = None
    """Where the user's code called torch.distributed while the check before launching ran ("logged_loss
    (model.py:31)"), found or not to depend on its batch: one process skips such code (no process group), a backend
    that starts one runs it, and a ✗ nothing else explains says so (harness/core/assemble.py: _code_clues)."""
    empty_slice: dict[str, Any] | None = None
    """For a loss without a count, the first step and rank whose slice holds none of the items it averages over
    (harness/core/normalisation.py, empty_slice), found by the same check: a row whose loss becomes NaN there is
    told why."""
    summed_loss: str | None = None
    """Where the model's loss was found to be a sum over its batch's samples rather than a mean (the single process's
    loss over the global batch exactly the number of ranks times the ranks' mean), in words, by the same check: a
    failed equivalence check then says so, with the fix."""
    loss_counted: bool | None = None
    """Whether the last `step_loss` came with a count (read by the rank for its record)."""
    global_count: Any = None
    """The last `step_loss`'s count, its mean over the processes (a tensor on the loss's device), None without a
    count: the rank marks the steps where it is 0, whose loss of 0 no final loss averages in."""
    varying_counts: list | None = None
    """For a loss without a count: the counts such a loss commonly averages over that differ between the ranks'
    slices, found by the same check (harness/core/normalisation.py); a failed equivalence check that one of them
    explains then says so, with the fix."""

    @dataclass
    class Options:
        """Workload-specific options (`--option key=value`); subclasses replace this."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        missing = [a for a in _REQUIRED if not hasattr(cls, a)]
        if missing:
            raise TypeError(f"workload {cls.__qualname__} must set {', '.join(missing)}")
        if cls.target is not None and not (cls.eval_every and cls.max_steps_to_target):
            raise TypeError(f"workload {cls.__qualname__} has a target, so it must set eval_every and "
                            f"max_steps_to_target (the defaults of `compare run --until-target`)")
        clip = cls.max_grad_norm
        if clip is not None and (isinstance(clip, bool) or not isinstance(clip, (int, float))
                                 or not math.isfinite(clip) or clip <= 0):
            raise TypeError(f"workload {cls.__qualname__}: max_grad_norm must be a positive number (the norm the "
                            f"gradients are clipped to) or None (no clipping), got {clip!r}")

    def __init__(self, options: dict[str, Any] | None = None):
        """Build the options from `options` (text or typed values); harness.shared.options.OptionError if refused."""
        self.options = build_options(self.Options, options or {}, what="option")

    # ---- hyperparameters -----------------------------------------------------------------------------------
    def lr(self, global_batch: int) -> float:
        """The learning rate for `global_batch` (linear scaling rule unless overridden)."""
        return self.base_lr * global_batch / self.base_batch

    def lr_rule(self) -> str:
        """The scaling rule in words, for the records."""
        return f"linear: {self.base_lr} x global_batch / {self.base_batch}"

    # ---- model, optimizer, loss -----------------------------------------------------------------------------
    @abstractmethod
    def build_model(self) -> torch.nn.Module:
        """The model, on the CPU; the caller seeds torch first, so every process builds the same weights."""

    def new_model(self) -> torch.nn.Module:
        """`build_model`, with the parameters of lazy modules (nn.LazyLinear and the like) made: such a module makes
        them at its first forward, and no backend can wrap, shard or broadcast a parameter that does not exist yet
        (DDP refuses one). One forward of the first two training samples, in eval mode and without gradients (no
        BatchNorm statistics move, no dropout draws), on the device the model was built on (the default device,
        meta inside `with torch.device("meta")`); every process runs the same forward after the same seed, so they
        all make the same weights. What every caller that trains, checks or counts the model calls."""
        import torch
        from torch.nn.parameter import is_lazy

        model = self.build_model()
        if any(is_lazy(p) for p in model.parameters()):
            data = self.materialize("cpu", self.global_batch)
            x, _ = data.batch(torch.arange(min(2, data.n_train)), "cpu")
            model.eval()
            with torch.no_grad():
                self.forward(model, batches.to(x, torch.get_default_device()))
        # In training mode, as a training loop puts it before its first step: a model whose own train() keeps some
        # layers in eval (a frozen BatchNorm, mmdet's norm_eval) or that sets them there only in train() is
        # trained as its loop would train it
        model.train()
        return model

    def make_optimizer(self, model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
        """The optimizer over `model`'s parameters (SGD with momentum 0.9 unless overridden)."""
        import torch

        return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)

    def shard_units(self, model: torch.nn.Module) -> list[torch.nn.Module]:
        """The model's units, in forward order: what a sharding backend (FSDP) wraps one by one, gathering each
        unit's parameters for its own forward and backward. Default: a transformers model's no-split modules
        (`_no_split_modules`: LlamaDecoderLayer, GPT2Block, BertLayer; what transformers' FSDP integration wraps one
        by one), found on any of its modules (a model of yours holding one too); else every direct child that holds
        parameters, looking inside ModuleList and ModuleDict (never called themselves); override to group layers
        into blocks."""
        import torch.nn as nn

        keep = {name for m in model.modules() for name in (getattr(m, "_no_split_modules", None) or [])}
        blocks = [m for m in model.modules() if type(m).__name__ in keep] if keep else []
        if blocks:
            return blocks
        units = []
        for child in model.children():
            if isinstance(child, (nn.ParameterList, nn.ParameterDict)):  # no forward: what reads them is another's
                continue
            inner = list(child.children()) if isinstance(child, (nn.ModuleList, nn.ModuleDict)) else [child]
            units += [m for m in inner if any(True for _ in m.parameters())]
        if units:  # a unit whose parameters are read outside its own forward (a nanoGPT head's F.linear(h,
            # self.emb.weight)) would be resharded while the root still reads them: such a unit is left to the root
            try:
                import torch

                data = self.materialize("cpu", self.global_batch)
                x, _ = data.batch(torch.arange(min(2, data.n_train)), "cpu")
                outside = read_outside(model, units, batches.to(x, "meta"), self.forward)
            except Exception:  # noqa: BLE001 - a model meta cannot run, or data that cannot be read here
                outside = set()
            units = [u for i, u in enumerate(units) if i not in outside]
        return units

    def shard_groups(self, model: torch.nn.Module) -> list[list[torch.nn.Module]]:
        """The units as a sharding backend gathers them (`shard_groups` of `shard_units`): modules that share a
        parameter (tied weights) in one group."""
        return shard_groups(model, self.shard_units(model))

    def forward(self, model: torch.nn.Module, inputs: Any) -> Any:
        """The model's output for a batch's inputs: `model(**inputs)` for a dict, else `model(inputs)`."""
        return batches.call(model, inputs)

    def loss(self, output: Any, target: Any) -> Any:
        """The training loss of one (per-process) batch: a mean over its samples, or `(sum, count)` for a loss over
        a number of items that varies from batch to batch (see `count`). Default: the loss the model returned in its
        output (`output.loss`, `output["loss"]`), else cross-entropy of the output against integer targets."""
        import torch.nn.functional as F

        own = batches.own_loss(output)
        if own is not None:
            return own
        logits = batches.logits(output)
        if logits is None or isinstance(target, Mapping):
            raise LossError(f"the model returned {batches.describe(output)}, with no loss in it, and workload "
                            f"{self.name} gives no loss of its own: "
                            + no_loss_fix(target, "override loss(output, target)", output))
        return F.cross_entropy(logits.float(), target)

    def count(self, target: Any) -> Any:
        """How many items a mean `loss` of this batch averages over, where that varies from batch to batch (tokens
        that are not padding, masked positions: `(target != -100).sum()`), or None: every sample weighs the same.
        Declared, the loss is normalised by the count over every process (`step_loss`), as a single process over
        the global batch normalises it."""
        return None

    def loss_terms(self, output: Any, target: Any) -> tuple[Any, Any, bool]:
        """(value, count, summed): the loss with the count of the items it is over (None: a mean over equal-weight
        samples) and whether value is their sum (a loss returning `(sum, count)`) or their mean (`count`)."""
        got = self.loss(output, target)
        if isinstance(got, (tuple, list)):
            if len(got) != 2:
                raise LossError(f"the loss of workload {getattr(self, 'ref', self.name)} returned {len(got)} values; "
                                f"return the loss (a mean), or (sum, count) for a loss over a varying number of items")
            if getattr(got[1], "requires_grad", False):  # two loss terms (multi-task code), not (sum, count)
                raise LossError(f"the loss of workload {getattr(self, 'ref', self.name)} returned two values whose "
                                f"second carries a gradient, so it is a loss term, not a count: two values are read "
                                f"as (sum, count), the sum of a loss over a varying number of items and that number; "
                                f"to train two terms, return their sum (e.g. `ce + 0.5 * mse`)")
            if not _one_number(got[1]):
                raise LossError(f"the loss of workload {getattr(self, 'ref', self.name)} returned (value, "
                                f"{type(got[1]).__name__}); the second of a loss's two values must be the count of the "
                                f"items its first sums over (a number or a one-element tensor)")
            return got[0], got[1], True
        return got, self.count(target), False

    def step_loss(self, output: Any, target: Any, mean_over_processes=None) -> torch.Tensor:
        """The loss one process back-propagates. A loss with a count is divided by the count's mean over the
        data-parallel processes (`mean_over_processes(tensor)`: the adapter's all-reduce; None: this process alone),
        so the backend's average of the processes' gradients is the gradient of the global batch's sum over its
        total count: what a single process computes (torchtitan's global token count, the Trainer's
        `num_items_in_batch` with `average_tokens_across_devices`). Its mean over the processes is the global
        batch's loss. A mean-reduced loss without a count is returned as it is."""
        import torch

        value, count, summed = self.loss_terms(output, target)
        self.loss_counted = count is not None
        self.global_count = None
        if count is None:
            return value
        count = torch.as_tensor(count, device=value.device).to(torch.float64).reshape(())
        mean = count if mean_over_processes is None else mean_over_processes(count.reshape(1)).reshape(())
        self.global_count = mean  # 0: nothing of the global batch counted, its loss a 0 that is no loss
        if summed:
            # a count of 0 (nothing of the batch counted: every label -100) divides a sum over nothing, 0, by 1, not
            # 0/0 (an audit's run was refused as NaN when its first two samples had nothing to count); torch.where
            # keeps a CUDA count on the device
            return value / torch.where(mean == 0, torch.ones_like(mean), mean).to(value.dtype)
        if count.device.type == "cpu" and float(count) == 0.0:
            # nothing of this slice is counted (every label -100): the mean it returned is 0/0, NaN, and NaN times
            # a factor of 0 stays NaN (its gradient too). Its share of the global batch's loss is 0: a zero kept on
            # the output's graph, so every parameter still gets its (zero) gradient from this process. On the CPU
            # only: reading a CUDA count here would wait for the forward at every step (and meta has no value)
            logits = batches.logits(output)
            if isinstance(logits, torch.Tensor) and logits.requires_grad:
                return (logits.float().sum() * 0.0).to(value.dtype)
        # the factor first: exactly 1 where every process has the same count, so such a loss is unchanged
        return value * (count / mean).to(value.dtype)

    # ---- data ----------------------------------------------------------------------------------------------
    @abstractmethod
    def materialize(self, device: str, global_batch: int) -> Data:
        """The whole dataset as tensors on `device`, before anything is timed."""

    def train_samples(self, global_batch: int) -> int:
        """How many training samples the data holds (checked against the global batch before launching). The
        default materialises the data on the CPU; a workload that can say it more cheaply overrides this."""
        data = self.materialize("cpu", global_batch)
        if not isinstance(data, Data):  # its n_train had been an AttributeError traceback from compare's own frame
            from harness.shared.registry import BadReference

            raise BadReference(f"workload {self.name}: materialize() returned {type(data).__name__}, not a "
                               f"workloads.Data (the training and test tensors, or Datasets); return "
                               f"Data(train_x, train_y, test_x, test_y) (docs/your-model.md)")
        return data.n_train

    def batch_indices(self, step: int, global_batch: int, n_train: int, data_rank: int = 0,
                      data_world: int = 1) -> torch.Tensor:
        """Indices of this process's slice of the global batch at `step` (epoch-wise shuffle, drop last)."""
        import torch

        per_epoch = n_train // global_batch
        if per_epoch == 0:
            raise ValueError(f"global batch {global_batch} is larger than the training set ({n_train})")
        epoch, within = divmod(step, per_epoch)
        if n_train > RANDPERM_LIMIT:  # a permutation of it all would take 8 bytes a sample in every process
            batch = affine_batch(self.seed * 100_003 + epoch, n_train, within * global_batch, global_batch)
        else:
            key = (self.seed, epoch, n_train)
            cached = getattr(self, "_epoch_perm", None)
            if cached is None or cached[0] != key:  # one permutation per epoch, kept while the steps walk through it
                gen = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
                self._epoch_perm = cached = (key, torch.randperm(n_train, generator=gen))
            batch = cached[1][within * global_batch:(within + 1) * global_batch]
        per_rank = global_batch // data_world
        # A copy: a view would keep the epoch's whole permutation alive with every step's indices (12 KB a step on
        # digits, which a run that kept every step's indices counted in its peak memory).
        return batch[data_rank * per_rank:(data_rank + 1) * per_rank].clone()

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

        self.eval_skipped = self.why_not_evaluated(data, None)
        if self.eval_skipped:
            return None
        x, y = data.test(self.eval_slice(data.n_test, rank, world))
        model.eval()
        # scored under the autocast the loss trains under: a user's loss over bf16 outputs with an fp32 class weight
        # trains (cross_entropy autocasts to fp32) and failed here outside it ("expected scalar type BFloat16")
        with torch.no_grad(), autocast:
            out = self.forward(model, batches.apply(cast_input, x))
            self.eval_skipped = self.why_not_evaluated(data, out)  # the same on every rank: the output's kind
            scored = None if self.eval_skipped or batches.length(x) == 0 else self.score(out, y)
        model.train()
        if self.eval_skipped:
            return None
        if batches.length(x) == 0:
            return 0.0, 0.0, 0.0
        if not (isinstance(scored, (tuple, list)) and len(scored) == 3):  # a user's override: said here, by name
            raise TypeError(f"{type(self).__name__}.score returned {_shape(scored)}; it must return (correct, count, "
                            f"loss_sum) of the evaluation batch (a function's `metric` returns (correct, count))")
        return scored

    eval_skipped: str | None = None
    """Why the last `evaluate` returned None, in words (the record's `eval_skipped`)."""

    def why_not_evaluated(self, data: Data, output: Any) -> str | None:
        """Why this workload has no evaluation, or None: asked before the evaluation's forward (`output` None) and
        after it, of its output."""
        if data.test_x is None:
            return "the workload has no test set"
        if type(self).score is Workload.score:  # the default accuracy, on what it can take
            why = self.default_accuracy_problem(data, output, "without a score(output, target) of its own, "
                                                "returning (correct, count, loss_sum), there is no accuracy to take")
            if why:
                return why
        if output is not None and not self.has_accuracy(output):
            return "its output gives no accuracy"
        return None

    @staticmethod
    def default_accuracy_problem(data: Data, output: Any, fix: str) -> str | None:
        """Why the default accuracy (argmax of the logits against an integer class index per row) means nothing for
        this data and output, ending with `fix`; None where it applies: float targets, dict batches (whose labels a
        model may shift itself), an output without logits, targets that are not a class index per row of them."""
        if data.test_y is None:
            return f"its batches are dicts with the labels inside, and {fix}"
        if not hasattr(data.test_y, "is_floating_point"):  # a dict of targets beside the inputs, a list of them
            return (f"its targets are a {type(data.test_y).__name__}, not one tensor of class indices, and {fix}")
        if data.test_y.is_floating_point():
            return f"its targets are floats, and {fix}"
        logits = None if output is None else batches.logits(output)
        if output is not None and logits is None:
            return f"its output has no logits (a tuple or dict without `logits`), and {fix}"
        target = tuple(data.test_y.shape[1:])
        if logits is not None and tuple(logits.shape[1:-1]) != target:  # e.g. multi-hot 0/1 labels, [N, 6]
            return (f"its targets (integers, {list(data.test_y.shape[1:]) or 'one'} per sample) are not a class "
                    f"index per row of its logits ({list(logits.shape[1:])} per sample), as the default accuracy "
                    f"takes them, and {fix}")
        return None

    def has_accuracy(self, output: Any) -> bool:
        """Whether an evaluation output gives an accuracy (`score` can take it); without one, no evaluation."""
        return True

    def score(self, output: Any, target: Any) -> tuple[float, float, float]:
        """(correct, count, loss_sum) of one evaluation batch: per sample for classification; a sequence model
        overrides it to count per token."""
        import torch.nn.functional as F

        output = batches.logits(output)
        loss_sum = F.cross_entropy(output.float(), target, reduction="sum").item()
        return float((output.argmax(1) == target).sum().item()), float(len(target)), loss_sum

    def unavailable(self) -> str | None:
        """Why this workload cannot run here, with the fix (a package it needs is not installed), or None."""
        return None

    def reads_through_loader(self) -> bool:
        """Whether `materialize` gives a Dataset (`Data.train_set`) that ranks read through a DataLoader, rather
        than tensors (override with it: --loader-workers is refused for a workload without one)."""
        return False

    def flops_per_sample(self, global_batch: int) -> float | None:
        """FLOPs of one training sample's forward and backward, counted by torch's FlopCounterMode on this
        workload's real model over two of its training samples, on the meta device (nothing is allocated or
        computed; on the CPU for a model that meta cannot run): matrix multiplications and convolutions, the
        optimizer's elementwise work left out, as MFU is defined (PaLM, Chowdhery et al. 2022). None where neither
        runs it."""
        split = self.flop_split(global_batch)
        return split and split["flops_per_sample"]

    def flop_split(self, global_batch: int) -> dict[str, float] | None:
        """{"flops_per_sample": ..., "conv_share": the share of them in convolutions}: on a GPU an fp32 model's
        convolutions may run in TF32 (cuDNN's default) while its matmuls do not (torch's), so the peak an fp32 row
        is judged against depends on how its FLOPs divide. Counted as flops_per_sample says; None likewise."""
        import torch
        from torch.utils.flop_counter import FlopCounterMode

        data = self.materialize("cpu", global_batch)
        x, y = data.batch(torch.arange(min(2, data.n_train)), "cpu")
        for device in ("meta", "cpu"):
            try:
                with torch.random.fork_rng(devices=[]), torch.device(device):
                    model = self.new_model()
                    counter = FlopCounterMode(display=False)
                    with counter:
                        self.step_loss(self.forward(model, batches.to(x, device)), batches.to(y, device)).backward()
                total = counter.get_total_flops()
                conv = sum(n for op, n in counter.get_flop_counts().get("Global", {}).items()
                           if "convolution" in str(op))
                return {"flops_per_sample": total / batches.length(x), "conv_share": conv / total if total else 0.0}
            except Exception:  # noqa: BLE001 - a model meta cannot run (data-dependent code) is counted on the CPU
                continue
        return None

    def unpadded_tokens_per_sample(self) -> float | None:
        """A language model's mean real tokens per training sample where its batches are padded (below
        `tokens_per_sample`): tokens/s counts the padded length, which this says beside it; None: no padding known."""
        return None

    def tokens_per_sample(self) -> int | None:
        """Tokens in one training sample, for a language model (tokens/s beside samples/s); None otherwise."""
        return None

    def describe(self) -> dict[str, Any]:
        """The resolved options, recorded in every row."""
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


def read_outside(model, units, inputs, forward, beside_activations: bool = False) -> set[int]:
    """The indices of `units` whose parameters the model's forward reads while that unit's own forward is not
    running (a parameter of an nn.ParameterList the parent reads, an embedding's weight used as the output head by
    F.linear): one forward of `inputs` on the meta device through a copy of the model whose parameters and buffers
    are meta tensors (`copy.deepcopy` given them in its memo: nothing of the model's storage is copied), so nothing
    of the model itself runs or changes (a forward that counts its calls, alternating a head between steps, kept
    its count). `beside_activations`: only reads in a call that also takes a tensor that is no unit's parameter (an
    activation: F.linear(h, self.emb.weight)), which meet a shard as "mixed torch.Tensor and DTensor"; an update
    between units' parameters alone (an EMA teacher's from its student's) changes their shards in place."""
    import copy

    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_flatten

    memo: dict[int, Any] = {}
    for p in model.parameters():
        memo[id(p)] = torch.nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad)
    for b in model.buffers():
        memo[id(b)] = torch.empty_like(b, device="meta")
    twin = copy.deepcopy(model, memo)
    where = {id(m): name for name, m in model.named_modules()}
    theirs = dict(twin.named_modules())
    twins = [theirs[where[id(u)]] for u in units]
    holders: dict[int, set[int]] = {}  # a parameter of the copy -> the units holding it
    for i, unit in enumerate(twins):
        for p in unit.parameters():
            holders.setdefault(id(p), set()).add(i)
    active: list[int] = []
    outside: set[int] = set()

    class Reads(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            tensors = [t for t in tree_flatten((args, kwargs or {}))[0] if isinstance(t, torch.Tensor)]
            if not beside_activations or any(id(t) not in holders for t in tensors):
                for t in tensors:
                    held = holders.get(id(t))
                    if held and not held.intersection(active):
                        outside.update(held)
            return func(*args, **(kwargs or {}))

    for i, unit in enumerate(twins):
        unit.register_forward_pre_hook(lambda m, a, i=i: active.append(i))
        unit.register_forward_hook(lambda m, a, o, i=i: active.remove(i), always_call=True)
    try:
        with torch.no_grad(), Reads():
            out = forward(twin, inputs)
    except Exception:  # noqa: BLE001 - a forward that needs autograd (MAML's torch.autograd.grad over parameters)
        active.clear()
        with torch.enable_grad(), Reads():
            out = forward(twin, inputs)
    # a parameter the forward returns (an embedding's weight for a sampled softmax in the loss) is read outside
    # every unit's forward too: by the loss, after them
    for t in tree_flatten(dict(out) if isinstance(out, Mapping) else out)[0]:
        outside.update(holders.get(id(t), ()))
    return outside


def shard_groups(model, units) -> list[list]:
    """`units` (a workload's shard units) as the groups a sharding backend gathers together, inner groups first:
    each unit alone, except that modules sharing a parameter (a head tied to the embedding, BERT's decoder bias)
    are one group. A parameter can be gathered by one group only (FSDP2 refuses a second: "Parameter ... is shared
    with a parameter already managed by another FSDP group"), so units that share one are merged, and a module
    outside every unit that holds a unit's parameter joins that unit's group (FSDP2's `fully_shard([emb, head])`),
    with any unit inside it. Where that module is the model itself, the units involved are left to the root."""
    groups = [[u] for u in dict.fromkeys(units) if u is not model]
    while True:
        member = {id(m): g for g, mods in enumerate(groups) for m in mods}
        holders: dict[int, dict[int, list]] = {}  # parameter -> its group (-1: the root's) -> modules holding it

        def walk(module, group, seen):
            group = member.get(id(module), group)
            if (id(module), group) in seen:
                return
            seen.add((id(module), group))
            for p in module._parameters.values():
                if p is not None:
                    holders.setdefault(id(p), {}).setdefault(group, []).append(module)
            for child in module._modules.values():
                if child is not None:
                    walk(child, group, seen)

        walk(model, -1, set())
        clash = next((h for h in holders.values() if len(h) > 1), None)
        if clash is None:
            break
        outside = list(dict.fromkeys(clash.get(-1, [])))
        involved = {g for g in clash if g >= 0}
        if any(m is model for m in outside):
            merged = None  # the model itself holds it: the units involved go back to the root
        else:
            # A root-side holder joins the group, with every group inside it (BERT's prediction head holds the
            # decoder's tied bias itself and the decoder below it).
            involved |= {member[id(sub)] for m in outside for sub in m.modules() if id(sub) in member}
            mods = list(dict.fromkeys([m for g in sorted(involved) for m in groups[g]] + outside))
            inside = {id(sub) for m in mods for sub in m.modules() if sub is not m}
            merged = [m for m in mods if id(m) not in inside]
        keep = [mods for g, mods in enumerate(groups) if g not in involved]
        if merged is not None:
            keep.insert(min(involved), merged)
        groups = keep
    # Inner groups first: a group with a module inside another group's module is sharded before that one.
    ordered: list[list] = []
    while groups:
        def outer(g):
            inside = {id(sub) for mod in g for sub in mod.modules() if sub is not mod}
            return any(other is not g and any(id(m) in inside for m in other) for other in groups)

        inner = next((g for g in groups if not outer(g)), groups[0])
        ordered.append(inner)
        groups.remove(inner)
    return ordered


def _shape(value) -> str:
    """A returned value in a few words: "a tuple of 2", "a float"."""
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__name__}"
