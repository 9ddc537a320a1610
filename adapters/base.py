"""The adapter contract: everything framework-specific, and nothing else.

An adapter is one data-parallel backend (DataParallel, DDP under torchrun, DDP under mp.spawn, ...). The harness
drives every adapter through this contract alone and never branches on which one it is running. Its roles are classes
of their own, each read by the code that calls it, composed into the backend's one `ADAPTER` (`Adapter`):

    Launch: the parent                          Strategy: every rank (harness/rank/)
    (harness/launching/, harness/core/rows.py)  ------------------------------------
    ------------------------------------------  adapter.import_framework()
    Adapter.availability(device, world)         info = adapter.setup(spec)
    adapter.knob_availability(device, world)    model, opt = adapter.wrap(model, opt)
    adapter.processes(world)                    with adapter.autocast(): loss = ...
    adapter.launch(spec_path, spec)             adapter.backward(loss); adapter.step()
      -> LaunchPlan(argv, env, hold, nodes,     adapter.all_reduce_mean(metrics)
                    leftovers)                  adapter.barrier(); adapter.teardown()

    Cost: the model, the planner, compare tune (harness/model/, harness/core/race.py)
    --------------------------------------------------------------------------------
    adapter.comm_schedule(); adapter.model_state_bytes(...); Adapter.plan_knobs(dtype); Adapter.TUNE

What the adapters share beside the contract: adapters/launchers.py (launcher command lines), rank_side.py (joining
the group from env://), probes.py (what availability asks of the machine), comm_primitives.py (`Comm`).

Rules every adapter keeps (the class checks the mechanical ones when it is defined):
- `launch` and `setup` are abstract: an adapter that forgets one cannot be instantiated.
- `name`, `summary` and `launcher` are set; `Knobs` is a dataclass (options are checked by harness/shared/options.py:
  a `Literal[...]` field for choices, `X | None = None` for "the framework's own default, not passed to it",
  `__post_init__` for rules between fields).
- A public method a role's class defines must be part of that role, and one an adapter defines part of some role (a
  typo in an override name is an error, not a silently unused method); helpers are private (`_name`).
- `availability` (and `knob_availability`, for what one knob needs) never raises and never imports the framework
  at module import time; its reason says what is missing and how to get it.
- Across hosts (`spec.topology` set: --hosts, --hostfile, --launcher slurm) `launch` uses the framework's own
  multi-node launcher (torchrun on every node, horovodrun -H, deepspeed --hostfile, ...), never a home-made one;
  an adapter that cannot span hosts says so in `multinode()`.
- What a framework leaves on the machine when its processes are killed (files in /dev/shm, say) is named in the
  plan (`LaunchPlan.leftovers`): the harness records it and removes it once the launch's processes are gone.
- An adapter never changes learning rate, batch size, seeds or data: those belong to the workload.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from adapters.comm_primitives import Comm
from adapters.dtypes import SHORT_DTYPES, dtype_names, optimizer_state  # noqa: F401  (re-exported)
from adapters.interpreter import interpreter, python_module, rank_command, using_interpreter  # noqa: F401
from harness.shared import options
from harness.shared.comm_schedule import Schedule
from harness.shared.text import listed

if TYPE_CHECKING:  # torch is imported lazily so `compare list` stays fast
    import torch

    from harness.shared.spec import RunSpec, Topology

KnobError = options.OptionError
"""A knob the adapter refuses (unknown name, wrong type, a choice not offered, a rule between knobs)."""


class DeviceKnobError(KnobError):
    """A knob value right in itself that this device or build cannot run (fp16 on a CPU): its row is unavailable with
    the reason, as a framework that is not installed is, and the other rows run; an error only with --strict."""


class Precision(str, enum.Enum):
    """Numeric precision of the training step (str-Enum so it serialises to JSON as is)."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"


@dataclass(frozen=True)
class Availability:
    """Whether an adapter can run here, and if not, why and how to fix it."""

    ok: bool
    reason: str = ""
    """What is missing or unsupported (empty when ok)."""
    fix: str = ""
    """How the user gets a working setup (empty when ok or when nothing can be done on this machine)."""

    def __bool__(self) -> bool:
        return self.ok

    def message(self) -> str:
        return self.reason + (f" (fix: {self.fix})" if self.fix else "")


@dataclass
class HostCommand:
    """One command of a multi-node launch and the node it runs on."""

    argv: list[str]
    host: str | None = None
    """The node, as the user named it (None: this machine, for a launcher that reaches the others itself)."""
    remote: bool = False
    """Started over ssh (`ssh HOST 'cd REPO && env ... ARGV'`); False: started here directly."""


@dataclass(frozen=True)
class Leftover:
    """Files a framework's launch may leave on this machine: every regular file matching `pattern` (an absolute
    glob, the wildcard in its last part) is the launch's own and is removed once the launch's processes are gone."""

    pattern: str
    what: str
    """What one such file is, in words ("DeepSpeed shared-memory segment"): the line that says they were removed
    names them so."""


@dataclass
class LaunchPlan:
    """How the harness starts an adapter's ranks: one command (or one per node), each in its own process group."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment on top of the harness's own (threads, loopback interface)."""
    hold: list[Any] = field(default_factory=list)
    """Objects the parent keeps alive until the launch has ended (e.g. a rendezvous store it bound itself)."""
    nodes: list[HostCommand] = field(default_factory=list)
    """A multi-node launch that starts a command on every node (torchrun, mp.spawn): started together, and when
    one fails the others are stopped after a short grace. Empty: `argv` is the one command, run here. Use
    `LaunchPlan.per_node` to build one."""
    env_file: Path | None = None
    """For a launcher that starts remote ranks itself and reads their environment from a file (DeepSpeed's
    DS_ENV_FILE): the harness writes there, as KEY=VALUE lines, what every rank needs (its own variables, `env`,
    TORCH_EXTENSIONS_DIR), before it starts the command."""
    cleanup: list[Callable[[], None]] = field(default_factory=list)
    """Called by the parent once the launch has ended, however it ended (after its processes are gone): removes
    what the framework itself leaves behind on this machine that `leftovers` cannot name."""
    leftovers: list[Leftover] = field(default_factory=list)
    """Machine-wide files the framework's processes may create and not remove when killed (DeepSpeed's
    shared-memory segments in /dev/shm). The parent records them before the launch starts and removes them once
    every process of the launch is gone: when the launch ends, or, if compare itself was killed, at the next run's
    start or `compare doctor` (harness/launching/leftovers.py)."""

    @classmethod
    def per_node(cls, commands: list[HostCommand], **kwargs) -> LaunchPlan:
        return cls(argv=commands[0].argv, nodes=commands, **kwargs)

    @property
    def commands(self) -> list[HostCommand]:
        """Every command of the launch (the one `argv`, run here, unless there is one per node)."""
        return self.nodes or [HostCommand(self.argv)]


@dataclass
class RankInfo:
    """What `setup` tells the per-rank loop about this process."""

    rank: int
    world_size: int
    """Processes taking part (1 for DataParallel, which drives several devices from one process)."""
    local_rank: int
    device: str
    """torch device string this process computes on, e.g. "cpu" or "cuda:0"."""
    backend: str | None
    """torch.distributed / framework backend (gloo, nccl, ...), None when there is no process group."""
    data_rank: int
    data_world: int
    """This process feeds slice `data_rank` of `data_world` equal slices of every global batch."""
    devices_used: int = 1
    """Devices this process computes on (DataParallel: all of them; DDP: one)."""


@dataclass
class ModelFacts:
    """What the parent learnt of a workload's model before launching (harness/core/model_check.py), for
    `Adapter.model_availability`: a row that cannot train such a model as its knobs stand is refused there, with
    the knob that fixes it, rather than failing at its first step."""

    no_gradient: dict[str, list[int]] = field(default_factory=dict)
    """Parameter name -> the checked steps (from 0) after whose backward it had no gradient; only parameters that
    missed one."""
    checked_steps: int = 0
    """Forward and backward passes the check ran on real batches, in training order (0: not checked)."""
    checked_ranks: int = 1
    """Ranks whose slices the check ran, each on a model of its own."""
    ranks_differ: dict[str, list[int]] = field(default_factory=dict)
    """Parameter name -> the checked steps in which some ranks gave it a gradient and others did not (a branch some
    samples take, an expert some tokens reach): a backend that reduces only the gradients a rank has would issue
    different collectives on different ranks."""
    batch_norm: list[str] = field(default_factory=list)
    """The model's BatchNorm layers (by type, e.g. "BatchNorm2d x 20")."""
    sparse: list[str] = field(default_factory=list)
    """The model's modules that give their weight a sparse gradient (nn.Embedding or nn.EmbeddingBag with
    sparse=True), by name."""
    param_dtypes: list[str] = field(default_factory=list)
    """The dtypes of the parameters that train, as the model builds them, in short names ("fp32", "bf16",
    "complex64"); empty where not checked."""
    bad_unit: str | None = None
    """Why a shard unit the workload gives cannot be sharded as one (a ModuleList, which has no forward; a module
    that is not the model's), in words; None where every unit can (or they were not checked)."""
    mixed_unit: str | None = None
    """A shard unit holding parameters of more than one dtype (fp32 beside fp64), in words; None where none does."""
    unit_read_outside: list[str] = field(default_factory=list)
    """Modules among the units the workload gave (units=) whose parameters one forward on meta read outside the
    unit's own forward (F.linear(h, self.wte.weight) with wte a unit): FSDP2 would hand that read a shard."""
    empty: list[str] = field(default_factory=list)
    """Parameters that train and hold no element (nn.Linear(n, 0)), by name."""
    non_contiguous: list[str] = field(default_factory=list)
    """Parameters that train and are not contiguous in memory (a transposed view made a Parameter), by name."""
    channels_last: list[str] = field(default_factory=list)
    """Those of non_contiguous in channels_last memory format (model.to(memory_format=torch.channels_last))."""
    compiled: list[str] = field(default_factory=list)
    """The model's modules that are torch.compile's wrappers (OptimizedModule: the builder compiled the model or a
    block), by name ("" for the model itself)."""
    grad_hooks: list[str] = field(default_factory=list)
    """Parameters that train and carry a hook of the user's on their gradient (param.register_hook,
    register_post_accumulate_grad_hook), by name."""
    scalar: list[str] = field(default_factory=list)
    """Parameters of no dimension (nn.Parameter(torch.tensor(0.0)): a learned temperature, CLIP's logit_scale),
    frozen ones too, by name."""
    twice: dict[str, list[int]] = field(default_factory=dict)
    """Parameter name -> the checked steps (from 0) in whose one backward its gradient was accumulated more than once:
    the recomputed forward of a reentrant checkpoint (torch.utils.checkpoint, use_reentrant=True) reusing a module,
    each of whose inner backward passes accumulates apart; a backend that reduces a parameter's gradient when it is
    accumulated reduces it more than once, or takes the first part alone."""

    multihead: list[str] = field(default_factory=list)
    """The model's torch.nn.MultiheadAttention modules, by name: their forward reads out_proj's weight and bias
    itself, without calling out_proj (a parameter read outside its own module's forward)."""
    checkpoint_no_grad: bool = False
    """Whether torch.utils.checkpoint (use_reentrant=True) warned in the check that none of its inputs needs a
    gradient ("None of the inputs have requires_grad=True"): the module it checkpoints then gets no gradient, in one
    process as on every backend, which is what leaves its parameters without one."""

    def twice_text(self, most: int = 4) -> str:
        """The parameters whose gradient was made twice in one backward, and when: "shared.0.weight, shared.0.bias
        (in every one of the 4 steps checked)"."""
        names = list(self.twice)
        shown = listed(names, most)
        steps = sorted({s for v in self.twice.values() for s in v})
        when = ("in every one of the" if len(steps) == self.checked_steps
                else f"in step{'s' if len(steps) > 1 else ''} {', '.join(str(s + 1) for s in steps)} of the")
        return f"{shown} ({when} {self.checked_steps} steps checked)"

    def dtypes_outside(self, allowed: set[str]) -> list[str]:
        """The parameters' dtypes not in `allowed`."""
        return [d for d in self.param_dtypes if d not in allowed]

    @property
    def never_used(self) -> list[str]:
        """Parameters that had no gradient in any checked step on any rank."""
        return [n for n, steps in self.no_gradient.items()
                if len(steps) == self.checked_steps and n not in self.ranks_differ]

    def differ_text(self, most: int = 4) -> str:
        """The parameters some ranks left without a gradient and others not, and when: "rare.weight, rare.bias (in
        step 1 of the 4 checked, on 2 ranks)"."""
        names = list(self.ranks_differ)
        shown = listed(names, most)
        steps = sorted({s for v in self.ranks_differ.values() for s in v})
        return (f"{shown} (in step{'s' if len(steps) > 1 else ''} {', '.join(str(s + 1) for s in steps)} of the "
                f"{self.checked_steps} checked on {self.checked_ranks} ranks)")

    def unused_text(self, most: int = 4) -> str:
        """The parameters without a gradient and when, in words: "aux.weight, aux.bias (in steps 2, 4 of the 4
        checked)"."""
        names = list(self.no_gradient)
        shown = listed(names, most)
        steps = sorted({s for v in self.no_gradient.values() for s in v})
        when = ("in every one of the" if len(self.never_used) == len(names)
                else f"in step{'s' if len(steps) > 1 else ''} {', '.join(str(s + 1) for s in steps)} of the")
        return f"{shown} ({when} {self.checked_steps} checked)"


def cpu_sync_batch_norm(facts: ModelFacts, device: str, name: str, synced: bool) -> Availability | None:
    """A refusal for a model holding torch.nn.SyncBatchNorm layers on the CPU, for a backend that starts
    torch.distributed: torch's runs on CUDA only ("SyncBatchNorm expected input tensor to be on GPU"; DDP refuses a CPU
    model holding one), with the backend's knob sync_bn as the fix. None where that is not the case, or where the
    row's knob is on (`synced`): each such layer then becomes a plain BatchNorm summed over the ranks
    (sync_batch_norm_in_place)."""
    if synced or device.startswith("cuda") or not any(layer.startswith("SyncBatchNorm") for layer in facts.batch_norm):
        return None
    return Availability(False, "the model holds torch.nn.SyncBatchNorm layers, which torch runs on CUDA only (on the "
                               "CPU: \"SyncBatchNorm expected input tensor to be on GPU\")",
                        f"the knob sync_bn=true (-a {name}:sync_bn=true) makes each such layer a BatchNorm whose "
                        f"statistics are summed over the ranks, on the CPU too")


def _torch_world_size() -> int:
    """How many ranks torch.distributed joins (1 where it is not started)."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def sync_batch_norm_in_place(model, all_reduce=None, world_size=None) -> int:
    """Make every BatchNorm layer of `model` compute its training statistics over every rank's samples, as
    torch.nn.SyncBatchNorm does, by a differentiable sum over the ranks (`all_reduce`: the framework's, by default
    torch.distributed.nn's; `world_size()` how many ranks it sums over, by default torch.distributed's). In place: each layer keeps its
    parameters, buffers and hooks (the optimizer made over the model, a wrapper's units, still hold them), and only its
    class changes; a torch.nn.SyncBatchNorm of the model's own becomes a plain one first (torch's runs on CUDA only).
    Returns how many layers it changed."""
    import torch

    if all_reduce is None:
        from torch.distributed.nn.functional import all_reduce
    world_size = world_size or _torch_world_size
    layers = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for layer in layers:
        kind = _any_dim_batch_norm() if isinstance(layer, torch.nn.SyncBatchNorm) else type(layer)
        layer.__class__ = _synced(kind, all_reduce, world_size)
    return len(layers)


def _synced(cls, all_reduce, world_size):
    """A subclass of the BatchNorm class `cls` whose training forward computes torch.nn.SyncBatchNorm's statistics
    with `all_reduce`: the mean and biased variance over every rank's samples for the normalisation, the running
    variance updated with the unbiased one over the global count, as a single process's BatchNorm computes them over
    the whole batch. The sums' backward sums the gradients flowing into them over the ranks, as SyncBatchNorm's
    backward does. Made once per class and reduction."""
    if getattr(cls, "_synced_over", None) is not None:
        return cls
    key = (cls, all_reduce)
    if key in _SYNCED:
        return _SYNCED[key]
    import torch

    def forward(self, x):
        if not (self.training and world_size() > 1):
            return cls.forward(self, x)
        self._check_input_dim(x)
        given, x = x.dtype, x.float()  # statistics in fp32 and the output in the input's dtype, as under autocast
        dims = [0, *range(2, x.dim())]
        shape = [1, -1] + [1] * (x.dim() - 2)
        local = torch.tensor([x.numel() // x.shape[1]], dtype=x.dtype, device=x.device)
        # Two passes, as a single process's batch norm: the mean, then the squared deviations from it.
        total = all_reduce(torch.cat([x.sum(dims), local]))
        count = total[-1]
        mean = total[:-1] / count
        var = all_reduce(((x - mean.view(shape)) ** 2).sum(dims)) / count
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
                self.running_mean.mul_(1 - factor).add_(mean.detach(), alpha=factor)
                self.running_var.mul_(1 - factor).add_(var.detach() * count / (count - 1), alpha=factor)
        out = (x - mean.view(shape)) * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out.to(given)

    _SYNCED[key] = type(f"Synced{cls.__name__}", (cls,), {"forward": forward, "_synced_over": all_reduce,
                                                           "__module__": __name__})
    return _SYNCED[key]


_SYNCED: dict = {}


@functools.cache
def _any_dim_batch_norm():
    """A plain BatchNorm class that takes input of any rank from 2 up, as torch.nn.SyncBatchNorm does: what a model's
    own SyncBatchNorm layer becomes before its statistics are summed over the ranks."""
    import torch

    class BatchNorm(torch.nn.modules.batchnorm._BatchNorm):
        def _check_input_dim(self, x):
            if x.dim() < 2:
                raise ValueError(f"expected at least 2D input (got {x.dim()}D input)")

    return BatchNorm


def flat_layout(facts: ModelFacts, who: str, empty_too: bool, scalar_too: bool = False) -> Availability | None:
    """A refusal for a backend that views or flattens each parameter's storage as it is (`who`, in words): a
    non-contiguous parameter fails there (FSDP2: "FSDP does not support non-contiguous parameters yet"; Horovod:
    "Tensor is required to be contiguous"; DeepSpeed: "self.stride(-1) must be 1 to view Float as Byte", measured),
    and with `empty_too` a parameter of no elements (FSDP2: "_chunk_cat expects non-empty tensor"; ZeRO-3: an
    AssertionError on its status, measured), and with `scalar_too` a parameter of no dimension, frozen or not (FSDP2:
    "fully_shard doesn't support scalar parameters"; DeepSpeed's broadcast of the model at initialize: "self.dim()
    cannot be 0 to view Float as Byte", measured). None where none holds."""
    if facts.non_contiguous and facts.channels_last == facts.non_contiguous:
        many = len(facts.channels_last) > 1
        return Availability(False, f"the model's parameter{'s' if many else ''} {listed(facts.channels_last)} "
                                   f"{'are' if many else 'is'} in channels_last memory format (the model moved "
                                   f"with .to(memory_format=torch.channels_last)), not contiguous, which {who} "
                                   f"cannot take as {'they are' if many else 'it is'}",
                            "keep the model's parameters in the default format and convert only its inputs, "
                            "x.to(memory_format=torch.channels_last): a convolution given a channels_last input "
                            "computes in channels_last")
    if facts.non_contiguous:
        return Availability(False, f"the model's parameter{'s' if len(facts.non_contiguous) > 1 else ''} "
                                   f"{listed(facts.non_contiguous)} {'are' if len(facts.non_contiguous) > 1 else 'is'} "
                                   f"not contiguous in memory (a transposed view made a Parameter), which {who} "
                                   f"cannot take as it is", "make it contiguous where it is built: "
                                                           "nn.Parameter(t.contiguous())")
    if empty_too and facts.empty:
        return Availability(False, f"the model's parameter{'s' if len(facts.empty) > 1 else ''} {listed(facts.empty)} "
                                   f"{'hold' if len(facts.empty) > 1 else 'holds'} no element (a layer of size 0), "
                                   f"which {who} cannot shard", "leave the empty layer out of the model, or freeze "
                                                                "it (requires_grad_(False))")
    if scalar_too and facts.scalar:
        return Availability(False, f"the model's parameter{'s' if len(facts.scalar) > 1 else ''} "
                                   f"{listed(facts.scalar)} {'have' if len(facts.scalar) > 1 else 'has'} no dimension "
                                   f"(a 0-dim tensor, such as a learned temperature), which {who} cannot take",
                            "give it one dimension of size 1 where it is built: nn.Parameter(torch.tensor([0.0])) "
                            "(it broadcasts as the scalar did)")
    return None


PER_TENSOR_OPTIMIZERS = ("Adafactor", "Lamb", "LAMB", "FusedLAMB", "Lars", "LARS", "NovoGrad", "Shampoo", "Muon",
                         "SOAP")
"""Optimizers (by class name, the class or one it derives from) whose step depends on each parameter's shape and whole
values: Adafactor factors a matrix's second moment over its rows and columns and scales by the parameter's RMS, LAMB,
LARS and NovoGrad scale by each tensor's norm, Shampoo, Muon and SOAP precondition each matrix whole. A backend that
hands the optimizer shards or flat partitions makes it compute something else."""


def per_tensor_optimizer(optimizer) -> str | None:
    """The name of `optimizer`'s class (or the one it derives from) among PER_TENSOR_OPTIMIZERS, or None."""
    return next((c.__name__ for c in type(optimizer).__mro__ if c.__name__ in PER_TENSOR_OPTIMIZERS), None)


EVERY_PARAMETER_FIX = ("let every rank's forward reach every parameter in every step: add 0 times the output of a "
                       "branch or expert that a batch may skip (run it on no samples, as MoE layers run an expert "
                       "on zero tokens), so that each parameter gets a gradient, zero where it did no work")
"""The fix for a model whose ranks leave different parameters without a gradient, for a backend that reduces only
the gradients a rank has (`ModelFacts.ranks_differ`)."""


_ROLES: tuple[type, ...] = ()
"""Launch, Strategy and Cost, once defined (below): what the contract check of a subclass reads."""


class Role(ABC):
    """What every role of an adapter shares: its knobs (a `Knobs` dataclass, checked by harness/shared/options.py),
    the device kind, and what the knobs resolve to there (precision, wire compression). An adapter is one object
    composed of three roles, each a class of its own that the code using it reads alone (Lightning Fabric keeps its
    Strategy, Launcher and Precision apart in the same way): `Launch` (the parent's: can it run here, how many
    processes, the command), `Strategy` (every rank's: set-up, wrap, step, the framework's collectives) and `Cost`
    (the model's and the planner's: how it moves gradients, what it holds per device, what `compare tune` tries).
    Instantiated in the parent (to validate knobs, build the launch, price it) and in every rank."""

    @dataclass
    class Knobs:
        """Framework options; subclasses replace this with their own dataclass."""

    def _synced_layers(self) -> dict[str, int]:
        """{"sync_batch_norm_layers": how many} where the row's knob sync_bn summed its BatchNorm statistics over the
        ranks (sync_batch_norm_in_place); {} where it has no such knob or it is off."""
        on = getattr(getattr(self, "knobs", None), "sync_bn", False)
        return {"sync_batch_norm_layers": getattr(self, "synced_batch_norm", 0)} if on else {}

    def __init__(self, knobs: dict[str, Any] | None = None, device: str = "cpu"):
        """Build the knobs from `knobs` (text or typed values; KnobError if refused) for `device` (cpu|cuda)."""
        self.knobs = options.build(self.Knobs, knobs or {}, what="knob")
        self.device_kind = device
        self.info: RankInfo | None = None
        self.model: torch.nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.phase: Callable[[str], None] = lambda text: None
        """Set by the rank: call it with a short text to show in the live progress line (e.g. a one-time
        build during setup, so a user sees why the first launch is slow); without a terminal the parent prints it
        once."""

    def precision(self) -> Precision:
        """The training step's precision with these knobs on this device (KnobError when the pair is refused:
        the parent calls it before launching)."""
        return Precision.FP32

    def compression(self) -> str:
        """Gradient compression on the wire ("none", "fp16", ...): shown next to precision in every table."""
        return "none"

    def __init_subclass__(cls, partial: bool = False, **kwargs):
        """Check the contract when a subclass is defined: a role's class defines only its role's members (and the
        knobs' shared ones), an adapter (all three roles composed) only members of some role, and names itself.
        `partial=True`: a shared base, not an adapter."""
        super().__init_subclass__(**kwargs)
        roles = [r for r in _ROLES if issubclass(cls, r)]
        if not roles:  # the roles themselves, defined in this module: they are the contract
            return
        contract = set(dir(Role)).union(*(vars(r) for r in roles))
        role = "Adapter" if len(roles) == len(_ROLES) else " and ".join(r.__name__ for r in roles)
        for attr, value in vars(cls).items():
            if attr.startswith("_") or not (inspect.isfunction(value) or isinstance(value, (classmethod,
                                                                                            staticmethod))):
                continue
            if attr not in contract:
                raise TypeError(f"{cls.__module__}.{cls.__qualname__}.{attr} is not part of the {role} contract "
                                f"(adapters/base.py): a misspelt override, a helper that should be private "
                                f"(_{attr}), or a member of another role")
        if not dataclasses.is_dataclass(cls.Knobs):
            raise TypeError(f"{cls.__qualname__}.Knobs must be a dataclass")
        if issubclass(cls, Adapter) and not partial:
            missing = [a for a in ("name", "summary", "launcher") if not isinstance(getattr(cls, a, None), str)]
            if missing:
                raise TypeError(f"{cls.__qualname__} must set {', '.join(missing)}")


class Launch(Role):
    """The parent's role (harness/launching/, harness/core/rows.py): whether the backend can run here (with these
    knobs, across these hosts, on this model), how many processes a launch makes, the command that starts every
    rank, and what the framework is known to do that a record or a report explains."""

    LOG_PEER_GONE: ClassVar[str] = ""
    """A regular expression for the framework's words, in a rank's log, for a peer that has ended (Horovod's "has
    been shut down ... caused by an exception on one of the ranks"): a consequence, never the cause a failed launch
    is reported with (harness/launching/launch_logs.py adds it to gloo's "Connection reset by peer")."""

    LOG_LAUNCHER_SUMMARY: ClassVar[str] = ""
    """A regular expression for the framework's launcher's own summary of a failed worker, printed after the
    worker's error: never the cause (torchrun's and torch.multiprocessing.spawn's are torch's, known already)."""

    NO_PROCESS_GROUP: ClassVar[str] = ""
    """Where the framework's ranks start no torch.distributed process group (they talk through the framework's own
    library), how a model gathers tensors across them instead, in words: a model's own torch.distributed gather
    (a SimCLR or CLIP loss's, behind `dist.is_initialized()`) is skipped there. "" where a group is started."""
    NO_PROCESS_GROUP_REDUCE: ClassVar[str] = ""
    """As NO_PROCESS_GROUP, for a statistic a buffer takes from every rank: the framework's own all-reduce."""

    COMM_PATHS: ClassVar[tuple[str, ...]] = ()
    """Folders of the framework's installed package where a rank waits for its peers (its communication module, as
    "deepspeed/comm"): a stalled rank stopped in one is waiting, not computing (torch.distributed's is known)."""

    @classmethod
    def availability(cls, device: str, world_size: int) -> Availability:
        """Can this adapter run `world_size` ranks on `device` ("cpu" or "cuda") here? Never raises."""
        return Availability(True)

    def knob_availability(self, device: str, world_size: int) -> Availability:
        """Can it run with these knobs here, once `availability` said the adapter can (a knob may need what the
        installed framework was built without)? Never raises."""
        return Availability(True)

    @classmethod
    def multinode(cls, topology: Topology) -> Availability:
        """Can its ranks run across these hosts (--hosts, --hostfile, --launcher slurm)? Never raises. `launch`
        then builds the framework's own multi-node launch from `spec.topology`."""
        return Availability(True)

    def model_availability(self, facts: ModelFacts) -> Availability:
        """Can this row train a model with these facts as its knobs stand (DDP needs find_unused_parameters for a
        parameter that a step leaves without a gradient)? Never raises; the reason says what in the model, the fix
        which knob. The parent asks before launching, so such a row never starts only to fail."""
        return Availability(True)

    def check_knobs(self, world_size: int) -> None:
        """Refuse (KnobError) knobs that cannot work at this world size, e.g. a device mesh that does not divide
        it: the parent calls it before launching, so such a row is one line and exit 2, not a failed launch."""

    def processes(self, world_size: int) -> int:
        """Training processes a launch of `world_size` creates (one per device unless overridden)."""
        return world_size

    def scale_limit(self, device: str, world_size: int) -> str | None:
        """Why a `compare scale` point of this adapter at `world_size` would not be `world_size` workers computing
        in parallel on `device`, with the fix; None when it would. Such a point is not run (it has no speed-up to
        measure) and its row says why."""
        return None

    @abstractmethod
    def launch(self, spec_path: Path, spec: RunSpec) -> LaunchPlan:
        """The command that starts every rank; each rank ends up in `harness.rank.life.run(spec_path)` (use
        `rank_command(spec_path)` for the per-rank command line)."""

    @classmethod
    def environment(cls) -> dict[str, Any]:
        """Framework versions and build facts for `compare env` (may import the framework)."""
        return {}

    def batch_norm(self) -> str | None:
        """How this row computes BatchNorm statistics in training: None where over the global batch, as the single
        process does (SyncBatchNorm), so that the equivalence check applies to a model whose BatchNorm is its only
        batch dependence; otherwise per process, and this says how to make them global with this framework, in
        words ("" where it cannot). By default: a backend whose knobs have sync_bn (sync_batch_norm_in_place) is
        global with it on, and names it otherwise."""
        if not hasattr(self.knobs, "sync_bn"):
            return ""
        return None if self.knobs.sync_bn else (f"knob sync_bn=true computes their statistics over every rank's "
                                                f"samples, as SyncBatchNorm does (-a {self.name}:sync_bn=true)")

    def missing_gradient(self) -> str | None:
        """What this backend does with these knobs to a parameter that got no gradient in a step, where that
        departs from a single process (torch's optimizers skip a parameter whose .grad is None: no momentum, no
        weight decay moves it), in words, naming the framework's source that does it; None where the gradient is
        left None. The report gives it for a row that failed the equivalence check on such parameters."""
        return None

    def failure_fix(self, error: str) -> str | None:
        """The fix, in words, for a launch of this framework whose first error line is `error` (a message the
        framework is known to print for a model or knob it cannot train as given); None when none is known."""
        return None

    def edited_parameters_fix(self) -> str | None:
        """Where a model's forward changes its parameters in place (an EMA teacher, a renormalisation) and this row
        failed the equivalence check: what this framework does with such a change and how to keep it, in words;
        None where it has nothing of its own to add to the general reason."""
        return None


NO_GRAD_CHECKPOINT = "None of the inputs have requires_grad=True"
"""What torch.utils.checkpoint warns (use_reentrant=True) when none of its inputs needs a gradient: no gradient then
reaches the parameters of the module it checkpoints, in one process as on every backend."""

REENTRANT_FIX = ("a parameter's gradient was made twice in one backward: reentrant activation checkpointing "
                 "(torch.utils.checkpoint with use_reentrant=True) of a module the forward uses more than once; use "
                 "use_reentrant=False")
"""The fix for a backend's refusal of a gradient made twice in one backward (DDP's "mark a variable ready only
once", DeepSpeed's "has already been reduced", Horovod's "computed more than backward_passes_per_step times"): the
recomputed forward of a reentrant checkpoint runs inside backward, and each call of a reused module there
accumulates its parameters' gradients apart."""


class Strategy(Role):
    """Every rank's role (harness/rank/): import the framework, join the group, wrap the model and optimizer, run the
    step (autocast, backward, optimizer step), reduce the metrics, give the framework's collectives to `compare comm`,
    say what it holds (dtypes) and describe itself for the records."""

    def import_framework(self) -> None:
        """Import the framework's modules (timed as the launch's import phase, apart from its set-up)."""

    @abstractmethod
    def setup(self, spec: RunSpec) -> RankInfo:
        """Join the process group (init_process_group, hvd.init, deepspeed.init_distributed, ...) and say who
        this process is. Sets and returns `self.info`."""

    units: list | None = None
    """The workload's units as groups of modules (`Workload.shard_groups`: each declared unit alone, modules that
    share a parameter together), set by the training loop before `wrap`: what a sharding framework wraps one group
    at a time. Others ignore it."""

    def wrap(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        """Wrap model and optimizer for this framework; return what the training loop should call."""
        self.model, self.optimizer = model, optimizer
        return model, optimizer

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The user's module inside whatever `wrap` returned (for comparing parameters)."""
        return getattr(model, "module", model)

    def cast_input(self, x: torch.Tensor) -> torch.Tensor:
        """Input batch as the wrapped model expects it (e.g. bf16 when a framework casts the whole model)."""
        return x

    def gradient_peaks(self) -> dict[str, torch.Tensor] | None:
        """Each parameter's largest absolute gradient over the steps so far, element by element, kept beside the
        parameter snapshot: the single-process reference's, from which a failed check under an adaptive optimizer
        tells whether the elements that differ had a gradient near zero. None: not kept (every comparison row)."""
        return None

    def gather_parameters(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """Full fp32 CPU copies of every parameter, by the user module's names. Called on every rank at the
        same point (a collective for frameworks that partition parameters, e.g. ZeRO-3); rank 0's is kept."""
        return {n: p.detach().float().cpu().clone() for n, p in self.unwrap(model).named_parameters()}

    def eval_module(self, model: torch.nn.Module) -> torch.nn.Module:
        """The module to run evaluation forwards with (every rank calls it exactly once)."""
        return self.unwrap(model)

    def autocast(self) -> contextlib.AbstractContextManager:
        """Context for the forward pass and loss (mixed precision adapters override)."""
        return contextlib.nullcontext()

    def zero_grad(self) -> None:
        """Clear the gradients before a step's forward."""
        self.optimizer.zero_grad(set_to_none=True)

    def backward(self, loss: torch.Tensor) -> None:
        """Backward of the step's loss (loss scaling, the engine's own backward, ...)."""
        loss.backward()

    max_grad_norm: float | None = None
    """The workload's `max_grad_norm`, set by the training loop before `wrap`: the global gradient norm to clip to
    before every optimizer step (None: no clipping)."""

    def clip_gradients(self) -> None:
        """Clip the global norm of the averaged gradients to `max_grad_norm` (a no-op when it is None), between the
        reduction and the optimizer step. Default: torch's clip_grad_norm_ over the user module's parameters, the
        global norm where every rank holds the whole averaged gradient (DDP) or a DTensor shard of it (FSDP2, whose
        norm is reduced over the mesh). A framework that clips itself, or holds the gradients elsewhere (apex's fp32
        masters), says so here."""
        if self.max_grad_norm is not None:
            import torch

            params = [p for p in self.unwrap(self.model).parameters() if p.grad is not None]
            if any(p.grad.is_sparse for p in params):  # nn.Embedding(sparse=True): torch's clip_grad_norm_ has no
                # sparse norm kernel ("Could not run 'aten::linalg_vector_norm' ... 'SparseCPU'"). The same clip by
                # hand: a sparse gradient's norm is its coalesced values' (a row looked up twice is one row)
                for p in params:
                    if p.grad.is_sparse:
                        p.grad = p.grad.coalesce()
                total = torch.stack([(p.grad._values() if p.grad.is_sparse else p.grad).norm(2) for p in params])
                coef = (self.max_grad_norm / (total.norm(2) + 1e-6)).clamp(max=1.0)  # torch's own formula
                for p in params:
                    if p.grad.is_sparse:
                        p.grad = p.grad * coef
                    else:
                        p.grad.mul_(coef)  # in place, as torch's: DDP's gradient_as_bucket_view keeps its view
                return
            torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)

    def step(self) -> None:
        """The optimizer step, after gradients are averaged over the ranks (and clipped: `clip_gradients`)."""
        self.clip_gradients()
        self.optimizer.step()

    def all_reduce_mean(self, tensor: torch.Tensor) -> torch.Tensor:
        """Mean of `tensor` over all processes, with the framework's own all-reduce: the evaluation's metrics
        (outside the timed region), and inside a step the count of a loss over a varying number of items (one
        float64 element, before the backward: Workload.step_loss), as a trainer normalising by the global token
        count does."""
        return tensor

    def skipped_steps(self) -> int | None:
        """Optimizer steps a dynamic loss scaler has skipped so far (fp16 overflow: such a step is cheaper, so one
        inside the timed window flatters the row); None without a loss scaler. Read only where a window starts and
        ends: it may sync the device."""
        return None

    def barrier(self) -> None:
        """Wait until every rank has reached this point."""

    def teardown(self) -> None:
        """Leave the process group (the last call in a rank)."""

    def comm(self) -> Comm | None:
        """The framework's communication primitives for `compare comm`, or None when it has none of its own."""
        return None

    def describe(self) -> dict[str, Any]:
        """Versions and resolved knobs, recorded in every row."""
        return {"knobs": dataclasses.asdict(self.knobs)}

    def dtypes(self, model: torch.nn.Module) -> dict[str, str]:
        """The dtypes this backend really holds, read from the live objects after a training step (never from its
        knobs): `params` (the parameters the model holds), `master` (a separate fp32 copy the optimizer updates, or
        "none"), `compute` (what the forward runs in: autocast's dtype when it is on), `grads`, `reduce` (the
        gradients on the wire) and `optimizer` (the optimizer's state tensors). Default: a plain module and
        torch optimizer, the gradients reduced as they are held. Each value is `dtype_names` of what was found."""
        params = list(self.unwrap(model).parameters())
        grads = [p.grad for p in params if p.grad is not None]
        return {"params": dtype_names(params), "master": "none", "compute": self._compute_dtype(params),
                "grads": dtype_names(grads), "reduce": dtype_names(grads),
                "optimizer": dtype_names(optimizer_state(self.optimizer) if self.optimizer is not None else [])}

    def _compute_dtype(self, params) -> str:
        """autocast's dtype inside this adapter's `autocast()` when it turns autocast on, else that of `params` (the
        parameters, or the dtypes they are gathered in)."""
        import torch

        kind = (self.info.device if self.info else self.device_kind).split(":")[0]
        with self.autocast():
            if torch.is_autocast_enabled(kind):
                return dtype_names([torch.get_autocast_dtype(kind)])
        return dtype_names(params)

    def _compile(self, module: torch.nn.Module) -> None:
        """torch.compile `module`'s forward in place (the same object and parameters; default backend, inductor)
        where the row asks for it (knob compile=true). Compiling happens at the first steps, in the warm-up; the
        rank reports its time apart (CompileWatch). `module.forward` is compiled, not `module.compile()`, which
        compiles `_call_impl`: TorchDynamo (torch 2.13) skips that frame as a torch.nn file, and then a model that is
        a torch.nn container (digits' and widemlp's Sequential) compiles nothing."""
        if getattr(self.knobs, "compile", False):
            import torch

            module.forward = torch.compile(module.forward)


class Cost(Role):
    """The performance model's and the planner's role (harness/model/), and `compare tune`'s: how the framework moves
    gradients in a step (its comm schedule), what it holds per device, and which knob sets are worth pricing or
    trying. Read in the parent only; nothing here runs a framework."""

    TUNE: ClassVar[dict[str, tuple]] = {}
    """What `compare tune` searches: knob -> candidate values, each tried alone against the defaults. Only knobs that
    change speed or memory, never the maths: a candidate's precision and wire compression are the defaults' (a
    test holds every adapter to it). Empty: nothing to tune (the adapter is left out of a tune, saying so)."""

    FRAMEWORK_DEFAULTS: ClassVar[dict[str, Any]] = {}
    """Knob -> the framework's own value for a knob whose default here is None (unset: the framework decides), so
    that `compare tune` knows a candidate of that value is the defaults row again."""

    def comm_schedule(self) -> Schedule | None:
        """How this framework moves gradients in one training step with these knobs (its defaults where a knob is
        unset), for the scaling model (harness/model/costmodel.py); recorded in every row. None: no communication.
        One of harness/shared/comm_schedule.py's kinds: Buckets (DDP-style), Fusion (Horovod-style), Zero
        (DeepSpeed), Fsdp (FSDP2), Replicate (DataParallel)."""
        return None

    @classmethod
    def plan_knobs(cls, dtype: str) -> list[dict[str, Any]] | str:
        """`compare plan`: the knob sets of this framework worth pricing for training in `dtype` (fp32, bf16 or
        fp16) on GPUs, one row each; or why it has no row at that dtype (a launcher variant of another row, a
        single-process backend, a precision it does not train in), as a few words."""
        return "declares no planned configuration"

    def gradient_bytes(self) -> float:
        """Bytes per parameter of the gradients its collectives carry, before the schedule's wire_scale."""
        return 4.0

    def model_state_bytes(self, params: float, largest: dict[str, float], n: int, optimizer_bytes: float,
                          trainable: float | None = None) -> float:
        """Bytes per device of parameters, gradients and optimizer state with these knobs on n devices (what
        DeepSpeed's memory estimators count; activations are not). `optimizer_bytes`: optimizer state per parameter
        in fp32 (AdamW 8, SGD with momentum 4); `largest`: {"module": parameters of the largest module,
        "unit": of the largest shard unit}; `trainable`: the parameters that train (None: all of them): a frozen
        parameter (a LoRA fine-tune's base weights) is held at its storage, with no gradient and no optimizer
        state. Default: every rank holds fp32 parameters, gradients and the optimizer state, as autocast leaves
        them."""
        t = params if trainable is None else trainable
        return params * 4 + t * (4 + optimizer_bytes)

    def model_state_rule(self, optimizer_bytes: float, frozen: bool = False) -> str:
        """`model_state_bytes` as a formula in P (parameters), N (devices), L (parameters of the largest module) and
        U (of the largest shard unit), and T (the trainable parameters) where some are `frozen`, with what it counts
        and where it departs from DeepSpeed's estimators: the plan's footer."""
        if frozen:
            return (f"4P + {4 + optimizer_bytes:g}T (fp32 parameters on every GPU; gradients and optimizer state of "
                    f"the trainable ones)")
        return f"{4 + 4 + optimizer_bytes:g}P (fp32 parameters, gradients and optimizer state on every GPU)"

    def memory_buffers(self, tensors: list[float], largest: dict[str, float], n: int,
                       trainable: float | None = None) -> list[tuple[str, float, str]]:
        """What the framework itself allocates per device beyond the model states and the activations, as
        (name, bytes, how it is counted): its buckets, prefetch and staging buffers at its defaults for these knobs.
        `tensors`: parameters per tensor (a threshold on tensor sizes, as ZeRO-3's persistence, reads them);
        `largest` and `trainable` as in `model_state_bytes`, `largest` with, where the planner counted them,
        "cast" (the matrix and convolution weights autograd holds at the end of forward, as autocast's cached copies
        live) and "matmul" (every weight a forward's matmuls take, checkpointed blocks' too). The plan gives each
        its own footer line and adds them to what must fit. Default: none."""
        return []


def mixed_precision_refusal(adapter, facts: ModelFacts) -> Availability | None:
    """A mixed-precision row (autocast, a backend's low-precision parameters) on a model whose parameters are not
    fp32: mixed precision is defined over an fp32 model (autocast leaves fp64 alone, so such a row would run as the
    plain one under a bf16 label). None where the row may run. `compare run` refuses such a row before launching and
    `compare plan` does not plan it."""
    precision = adapter.precision().value
    other = facts.dtypes_outside({"fp32"})
    if precision == "fp32" or not other:
        return None
    complex_ = [d for d in other if d.startswith("complex")]
    left = " and ".join(x for x in ("fp64" if "fp64" in other else "",
                                    "complex tensors" if complex_ else "") if x) or "+".join(other)
    return Availability(False, f"its precision is {precision}, a mixed precision defined over an fp32 model, and "
                               f"this model's parameters are {'+'.join(facts.param_dtypes)} as built (autocast "
                               f"leaves {left} alone)",
                        ("hold each complex parameter as two real ones (an fp32 parameter of shape (..., 2), read "
                         "with torch.view_as_complex in the forward), which mixed precision then takes, or compare "
                         "it on the plain rows" if complex_ else
                         "build the model in fp32 to compare mixed precision; a model built in bf16 runs in bf16 on "
                         "every plain row"))


class Adapter(Launch, Strategy, Cost):
    """One backend: its name and how reports show it, and its three roles composed. A backend's module defines a
    class for each role it changes (`DDPLaunch(Launch)`, `DDPStrategy(Strategy)`, `DDPCost(Cost)`) and composes
    them, with its `Knobs`, into the one class it exports as `ADAPTER`:

        class DDPAdapter(DDPLaunch, DDPStrategy, DDPCost, Adapter):
            name, summary, launcher = "ddp", "DistributedDataParallel ...", "torchrun"

    A variant composes its own roles over the backend it varies (`AmpAdapter(AmpStrategy, AmpCost, DDPAdapter)`).
    One class may also hold every role itself (a backend of a few lines)."""

    name: ClassVar[str]
    """Registry name, e.g. "ddp"."""

    summary: ClassVar[str]
    """One line for `compare list` and the records."""

    launcher: ClassVar[str]
    """How its ranks are started, e.g. "torchrun", "torch.multiprocessing.spawn", "in-process"."""

    distribution: ClassVar[str | None] = None
    """The installed distribution that is this framework ("deepspeed", "horovod"), whose version `compare env`
    shows without importing it; None for torch's own backends."""

    blog_label: ClassVar[tuple[int, str] | None] = None
    """(place, name) of this backend in the seed blog's figure that the epoch chart reproduces (the "DataParallel vs
    torch.distributed vs torch.multiprocessing vs apex vs horovod" comparison): report data only, never behaviour;
    recorded in every run (`adapters.legend`), so a report never reads it from the live class."""


_ROLES = (Launch, Strategy, Cost)


# ---- helpers shared by adapters: the launch's interpreter (adapters/interpreter.py), dtype names (adapters/dtypes.py) --

class SingleProcessLaunch(Launch):
    """One process started directly (no launcher, no process group): the reference run, and DataParallel, which
    drives every device from that one process."""

    def processes(self, world_size: int) -> int:
        return 1

    def batch_norm(self) -> str | None:
        return None  # one process normalises the whole batch (DataParallel on CUDA overrides)

    def launch(self, spec_path: Path, spec: RunSpec) -> LaunchPlan:
        return LaunchPlan(rank_command(spec_path))


class SingleProcessStrategy(Strategy):
    """The one process's rank: rank 0 of a world of 1, on the first device (or every device it drives)."""

    def setup(self, spec: RunSpec) -> RankInfo:
        device = "cuda:0" if spec.device == "cuda" else "cpu"
        if spec.device == "cuda":
            import torch

            torch.cuda.set_device(0)
        self.info = RankInfo(rank=0, world_size=1, local_rank=0, device=device, backend=None, data_rank=0,
                             data_world=1, devices_used=self._devices(spec))
        return self.info

    def _devices(self, spec: RunSpec) -> int:
        return 1
