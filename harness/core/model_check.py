"""What the parent learns of a user's model before launching, from a few forward and backward passes on its real
training batches: whether its training-mode forward is random or only stateful, which parameters a step leaves
without a gradient, and its BatchNorm layers.

Runs in: the parent (harness/core/workload_checks.py: check_user_code). Randomness and state are told apart by
running copies built from the same seed: two copies from the same state under the same seed that differ draw randomness that
torch's seed does not control; under two seeds, randomness from torch's generators (a functional dropout); the same
outputs under both, with module attributes or buffers changed by the call, a deterministic stateful forward (a step
counter), which every backend calls once per step as the single process does. Outputs are compared with NaN equal
to NaN (`torch.equal` calls a NaN output different from itself).
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

from adapters.base import NO_GRAD_CHECKPOINT
from harness.shared.text import listed

CHECKED_STEPS = 4
"""Forward and backward passes of the unused-parameter check: the first steps' batches, in order, so that a model
that leaves a parameter out on some steps only (a head used on even steps) is caught as well."""
BATCH_CHECK_STEPS = 32
"""Steps the batch-dependence check reads at most (harness/core/workload_checks.py, batch_dependence): it reads
the steps the equivalence check compares (a count of labelled samples may first differ between the ranks at step 7
of 8), bounded so that --equiv-steps 1000 does not run a thousand global batches before launching."""
CHECK_SAMPLES = 64
"""Samples per pass at most (a rank's slice of each step, cut to this)."""
CHECK_RANKS = 8
"""Ranks whose slices the check runs (the first ones, each on a model of its own, as training runs them): a branch
some samples take, an expert some tokens reach, leaves parameters without a gradient on one rank and not another."""


def batch_norm_layers(model) -> list[str]:
    """The model's BatchNorm layers that normalise by their batch's statistics in training, by type, with their
    count ("BatchNorm2d x 20"): one the model keeps in eval mode while it trains (a frozen BatchNorm) normalises by
    its running statistics, which depend on no batch, unless it tracks none."""
    from collections import Counter

    import torch.nn as nn

    kinds = Counter(type(m).__name__ for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)
                    and (m.training or not m.track_running_stats))
    return [f"{kind} x {n}" if n > 1 else kind for kind, n in sorted(kinds.items())]


def bad_unit(units, model) -> str | None:
    """Why one of a workload's shard units cannot be sharded on its own (torch's fully_shard takes a module that
    runs a forward, and one outside the model shards nothing of it), in words; None where every one can."""
    import torch.nn as nn

    names = {id(m): name for name, m in model.named_modules()}
    for i, unit in enumerate(units):
        if not isinstance(unit, nn.Module):
            return f"its shard unit {i} is a {type(unit).__name__}, not a module"
        if id(unit) not in names:
            return f"its shard unit {i} ({type(unit).__name__}) is not one of the model's modules"
        if isinstance(unit, (nn.ModuleList, nn.ModuleDict)):
            return (f"its shard unit {i} ({names[id(unit)] or 'the model'}) is a {type(unit).__name__}, a container "
                    f"that runs no forward of its own, which fully_shard cannot shard as one")
    return None


def mixed_dtype_unit(units, model) -> str | None:
    """A shard unit (or the model's own parameters outside every unit) holding parameters of more than one dtype, in
    words: fully_shard manages one dtype per unit (FSDP2: "FSDP expects uniform original parameter dtype"); None
    where each unit holds one."""
    from adapters.dtypes import dtype_names

    names = {id(m): name for name, m in model.named_modules()}
    seen: set[int] = set()
    groups = []
    for i, unit in enumerate(units):
        params = [p for p in unit.parameters() if id(p) not in seen]
        seen |= {id(p) for p in params}
        unit_name = names.get(id(unit)) or type(unit).__name__
        groups.append((f"the model's shard unit {i} ({unit_name}) holds parameters of", params))
    rest = [p for p in model.parameters() if id(p) not in seen]
    groups.append(("the model's parameters outside every shard unit are", rest))
    for what, params in groups:
        if len({p.dtype for p in params}) > 1:
            return f"{what} {dtype_names(params)}"
    return None


def sparse_modules(model) -> list[str]:
    """The modules whose weight gets a sparse gradient (nn.Embedding, nn.EmbeddingBag with sparse=True), by name."""
    import torch.nn as nn

    return [f"{name} ({type(m).__name__})" if name else type(m).__name__ for name, m in model.named_modules()
            if isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and m.sparse]


NOISE = 1e-5
"""Relative difference between two outputs of one computation that is summation order, not randomness: a CPU
library that picks its threads by the machine's load (MKL's dynamic threading) sums in another order from one call
to the next, and the check before launching once called GPT-2 random for it."""


def same(a, b, rtol: float = 0.0) -> bool:
    """Whether two outputs (tensors, or tuples, lists, dicts and ModelOutputs of them) are equal, NaN equal to NaN
    in the same places; floating-point tensors within `rtol` of each other (of the larger magnitude) where given."""
    import torch
    from torch.utils._pytree import tree_flatten

    leaves_a, spec_a = tree_flatten(a)
    leaves_b, spec_b = tree_flatten(b)
    if spec_a != spec_b:
        return False
    for x, y in zip(leaves_a, leaves_b):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype:
                return False
            if torch.equal(x, y):
                continue
            if not (x.is_floating_point() and torch.equal(x.isnan(), y.isnan())):
                return False
            fx, fy = x.detach().nan_to_num(0.0, 1.0, -1.0), y.detach().nan_to_num(0.0, 1.0, -1.0)
            if rtol and fx.numel():
                scale = float(torch.maximum(fx.abs().max(), fy.abs().max()))
                if not torch.allclose(fx, fy, rtol=rtol, atol=rtol * scale):
                    return False
            elif not torch.equal(fx, fy):
                return False
        elif type(x) is type(y) and not isinstance(x, _SCALARS) and type(x).__eq__ is object.__eq__:
            # an object with no equality of its own (a transformers DynamicCache, whose keys and values live in
            # layer objects): equal when what it holds is, not only when it is the same object
            if not same(_contents(x), _contents(y), rtol):
                return False
        else:
            try:
                if bool(x != y):
                    return False
            except Exception:  # noqa: BLE001 - a leaf that cannot be compared is not evidence either way
                continue
    return True


def _contents(obj, depth: int = 0) -> Any:
    """What an object holds, for `same`: tensors and plain values as they are, containers and the attributes of
    other objects as dicts and lists of their contents (four levels deep at most; functions and modules left out)."""
    import types
    from collections.abc import Mapping

    import torch

    if isinstance(obj, (torch.Tensor,) + _SCALARS):
        return obj
    if depth >= 4 or isinstance(obj, (types.FunctionType, types.MethodType, types.ModuleType, torch.nn.Module)):
        return None
    if isinstance(obj, Mapping):
        return {str(k): _contents(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_contents(v, depth + 1) for v in obj]
    if hasattr(obj, "__dict__"):
        return {k: _contents(v, depth + 1) for k, v in vars(obj).items()}
    return None


_SCALARS = (bool, int, float, str, type(None))


def _module_internals() -> set[str]:
    import torch.nn as nn

    return set(vars(nn.Module()))


def state_of(model) -> dict[str, Any]:
    """Every module's own attributes that a forward could change (plain numbers, strings and tensors outside its
    parameters) and its buffers, by dotted name: what "state" means for the diagnosis. BatchNorm's running
    statistics are left out (BatchNorm is reported as such)."""
    import torch
    import torch.nn as nn

    internals = _module_internals()
    out: dict[str, Any] = {}
    for path, module in model.named_modules():
        prefix = f"{path}." if path else ""
        if not isinstance(module, nn.modules.batchnorm._BatchNorm):
            for name, buf in module._buffers.items():
                if buf is not None:
                    out[prefix + name] = buf.detach().clone()
        for name, value in vars(module).items():
            if name in internals:
                continue
            if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
                out[prefix + name] = value.detach().clone()
            elif isinstance(value, _SCALARS):
                out[prefix + name] = value
    return out


def changes(before: dict[str, Any], after: dict[str, Any], most: int = 3) -> str | None:
    """What changed between two `state_of` snapshots, in words ("step: 0 → 1"), or None."""
    import torch

    said = []
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and same(a, b):
                continue
            said.append(f"{name} (a tensor) changed")
        elif a != b or name not in before or name not in after:
            said.append(f"{name}: {a!r} → {b!r}")
    if not said:
        return None
    return listed(said, most)


OTHER_SEEDS = 8
"""Seeds beyond the first tried by `diagnose` before a forward is called deterministic."""

RANDOM_LOSS = "the same outputs gave different losses under two torch seeds: the loss draws random numbers"
"""The start of diagnose's reason where the model's output is deterministic and its loss is not (negatives sampled
in the loss): its fix is to draw them with the data, not a dropout of 0."""


DIFFERENT_BUILDS = "two copies built under the same torch seed hold different parameters"
"""How `diagnose` begins where the model's initial values do not follow torch's seed: its own reason and fix, not
a random forward's (harness/core/assemble.py)."""
RESEEDED = "the forward seeds torch's generator itself"
"""How `diagnose` begins where the user's forward calls torch.manual_seed: its draws repeat whatever seed the run
sets, so two seeds cannot tell them from a deterministic forward."""


def _recording(found: list[str]):
    """A wrapper maker: `watched(original)` behaves as `original` and adds to `found` the place in the user's code
    ("forward (m.py:40)") it was called from, once each (torch's own calls are not the user's: users_place)."""
    import functools
    import sys

    from harness.launching.launch_logs import users_place

    def watched(original):
        @functools.wraps(original)
        def call(*args, **kwargs):
            caller = sys._getframe(1)
            place = users_place(caller.f_code.co_filename, caller.f_lineno, caller.f_code.co_name)
            if place and place not in found:
                found.append(place)
            return original(*args, **kwargs)
        return call
    return watched


@contextlib.contextmanager
def _reseeds():
    """The places in the user's code ("forward (m.py:40)") that call torch.manual_seed (or torch.random's) while the
    block runs; the calls behave as they do unwatched."""
    import torch

    found: list[str] = []
    originals = [(torch, "manual_seed", torch.manual_seed), (torch.random, "manual_seed", torch.random.manual_seed)]
    watched = _recording(found)
    try:
        for module, name, original in originals:
            setattr(module, name, watched(original))
        yield found
    finally:
        for module, name, original in originals:
            setattr(module, name, original)


def diagnose(build, forward, seed: int, loss=None) -> tuple[str | None, str | None]:
    """(why the training-mode forward, or the loss over its output, is random, or None; what it changes in its
    modules, or None), from copies built by `build()` under torch seed `seed` and called once each by
    `forward(model)`, then `loss(output)` (None: the forward alone; a loss that raises is left to the checks that
    say why it does not fit)."""
    import torch

    built: list[dict[str, Any]] = []
    reseeded: list[str] = []

    def run(call_seed: int):
        torch.manual_seed(seed)
        model = build()
        built.append({n: p.detach().clone() for n, p in model.named_parameters()})
        before = state_of(model)
        torch.manual_seed(call_seed)
        drawn = torch.random.get_rng_state()
        with _reseeds() as found:
            out = forward(model)
        reseeded.extend(x for x in found if x not in reseeded)
        value = None
        if loss is not None:
            try:
                with torch.no_grad():
                    value = loss(out)
            except Exception:  # noqa: BLE001 - the user's loss: loss_takes says why it does not fit
                value = None
        draws.append(not torch.equal(drawn, torch.random.get_rng_state()))
        return out, changes(before, state_of(model)), value

    draws: list[bool] = []  # whether each call drew from torch's generator
    first, changed, lost = run(1)
    again, _, lost_again = run(1)
    # A forward that draws few numbers (stochastic depth dropping a whole block for the whole batch: one coin per
    # block) gives the same output under two seeds often; where it drew any, a few more seeds are tried before it is
    # called deterministic (one that drew none needs no more: the seed cannot change it)
    for call_seed in range(2, 2 + (OTHER_SEEDS if draws[0] else 1)):
        other, _, lost_other = run(call_seed)
        if not same(first, other, NOISE) or (lost is not None and lost_other is not None
                                              and not same(lost, lost_other, NOISE)):
            break
    differ = [n for n in built[0] if n in built[1] and not same(built[0][n], built[1][n])]
    if differ:  # before any forward: the copies start from other values, whatever their forward does
        return (f"{DIFFERENT_BUILDS} ({listed(differ, 3)}): the "
                f"model draws them from a generator torch's seed does not control (os.urandom, NumPy, Python's "
                f"random, a torch.Generator seeded from the clock), so the single process and every rank build "
                f"their own, and a backend that does not broadcast rank 0's (FSDP2; none broadcasts to the single "
                f"process) trains from others; fix: build the model from torch's generator as the workload's seed "
                f"leaves it (or seed that generator with a constant)", changed)
    if reseeded:  # its draws then repeat whatever the seed: the two-seed test below cannot see them
        return (f"{RESEEDED} ({', '.join(reseeded[:3])}): every rank then draws the same numbers for its own slice, "
                f"which match the single process's draw over the whole batch only in its first rows; fix: draw them "
                f"with the data (in the dataset, or as part of the batch), so that each sample's draws go where the "
                f"sample goes, or leave the seed to the workload", changed)
    where = ("outputs" if not same(first, again, NOISE) else
             "losses" if lost is not None and not same(lost, lost_again, NOISE) else None)
    if where:
        return (f"two copies built alike gave different {where} for the same samples even with torch's generators "
                f"seeded alike (randomness torch's seed does not control: Python's random, NumPy or the clock)",
                changed)
    if not same(first, other, NOISE):
        return ("the same samples from the same state gave different outputs under two torch seeds (randomness in "
                "forward, e.g. a functional dropout)", changed)
    if lost is not None and lost_other is not None and not same(lost, lost_other, NOISE):
        return (f"{RANDOM_LOSS} (negatives sampled in it, a random mask), and each process draws its own for its "
                f"slice, where the single process drew them for the whole batch", changed)
    return None, changed


def edited_parameters(build, forward, seed: int, most: int = 3) -> str | None:
    """The parameters that one training-mode forward changed in place (nn.Embedding(max_norm=...) renormalising the
    rows it looks up, a clamp_ of a weight), by name, in words; None where it changed none. No backend synchronises
    parameters after the start, only gradients: each rank's copy changes where its own slice took it."""
    import torch

    torch.manual_seed(seed)
    model = build()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    torch.manual_seed(1)
    forward(model)
    edited = [n for n, p in model.named_parameters() if n in before and not same(before[n], p.detach())]
    if not edited:
        return None
    return listed(edited, most)


def no_gradient(model, batches, step_loss, twice: dict[str, list[int]] | None = None,
                warned: set[str] | None = None) -> dict[str, list[int]]:
    """Parameter name -> the passes (from 0) after whose backward it had no gradient, over one forward, loss and
    backward of `model` per (inputs, target) batch, in order (the model's state carries from one to the next, as
    training's does; `step_loss(model, inputs, target)` is the step's loss). Frozen parameters (requires_grad False)
    are left out. `twice`, where given, gets parameter name -> the passes in whose backward its gradient was
    accumulated more than once (a reentrant checkpoint's recomputed forward reusing a module: each of its inner
    backward passes accumulates apart, where autograd otherwise sums a reused parameter's gradients first).
    `warned`, where given, gets NO_GRAD_CHECKPOINT if torch warned it in a backward (other warnings pass on)."""
    missing: dict[str, list[int]] = {}
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    calls: dict[str, int] = {}

    def counted(name):
        def hook(_):
            calls[name] = calls.get(name, 0) + 1
        return hook

    handles = ([p.register_post_accumulate_grad_hook(counted(n)) for n, p in trainable] if twice is not None else [])
    try:
        for step, (x, y) in enumerate(batches):
            for _, p in trainable:
                p.grad = None
            calls.clear()
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                step_loss(model, x, y).backward()
            for w in said:
                if warned is not None and NO_GRAD_CHECKPOINT in str(w.message):
                    warned.add(NO_GRAD_CHECKPOINT)
                else:  # not ours to keep
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            for name, p in trainable:
                if p.grad is None:
                    missing.setdefault(name, []).append(step)
                if calls.get(name, 0) > 1:
                    twice.setdefault(name, []).append(step)
    finally:
        for h in handles:
            h.remove()
    for _, p in trainable:
        p.grad = None
    return missing


DISTRIBUTED_CALLS = ("is_available", "is_initialized", "get_world_size", "get_rank", "all_gather",
                     "all_gather_into_tensor", "all_reduce", "all_to_all", "broadcast")
"""torch.distributed's functions (and torch.distributed.nn.functional's of these names) whose call from the user's
code says the model looks for other ranks: a SimCLR or CLIP loss gathering its negatives from every rank."""


@contextlib.contextmanager
def distributed_calls():
    """The places in the user's code ("gather (model.py:52)", first first) that call torch.distributed while the
    block runs, read from the caller's frame of each call (harness/launching/launch_logs.py, users_place: torch's
    own calls are not the user's). The functions behave as they do unwatched: in the parent no process group is
    started, so `dist.is_initialized()` is False and the user's gather path is skipped, which is why a loss over the
    gathered batch looks, run alone, as though it depended on the rest of its batch."""
    import sys

    import torch.distributed as dist

    from harness.launching.launch_logs import users_place

    found: list[str] = []
    if not dist.is_available():  # a torch built without it: no user's code consults it to any effect
        yield found
        return
    modules = [dist]
    with contextlib.suppress(ImportError):
        import torch.distributed.nn.functional as dist_nn
        modules.append(dist_nn)

    watched = _recording(found)

    saved = [(m, name, getattr(m, name)) for m in modules for name in DISTRIBUTED_CALLS
             if callable(getattr(m, name, None))]
    originals = {id(original) for _, _, original in saved}
    # the user's modules that imported such a function by name (`from torch.distributed import all_gather`) hold it
    # in their own namespace: watched there too
    for module in list(sys.modules.values()):
        where = getattr(module, "__file__", None)
        if not where or not users_place(where, 1, "") or module in modules:
            continue
        saved += [(module, name, value) for name, value in list(vars(module).items())
                  if callable(value) and id(value) in originals]
    for module, name, original in saved:
        setattr(module, name, watched(original))
    try:
        yield found
    finally:
        for module, name, original in saved:
            setattr(module, name, original)
