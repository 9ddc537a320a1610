"""A workload checked before anything is launched: it loads with its options and can run here, its loader workers
make sense, its model states fit this machine's memory, and (a user's own model) it trains, its loss takes the
model's output, and that output is finite; what the checks learn (harness/core/model_check.py) is kept on the
workload for the rows and the report.

Runs in: the parent. A refused workload raises BadInput: one line for the user, exit code 2, nothing written; an
exception inside the user's own code is a UserCodeError (their traceback, exit 1)."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import TYPE_CHECKING

import workloads
from harness.core import normalisation
from harness.core.checks import pairs
from harness.ground import provenance as envmod
from harness.ground.errors import BadInput
from harness.shared.cache import cached_json, files_key
from harness.shared.options import OptionError
from harness.shared.text import listed
from workloads import batch as batches
from workloads.base import SMALL_MODEL, LossError

if TYPE_CHECKING:
    from harness.core.requests import RunRequest


def load_workload(req: RunRequest):
    """The request's workload with its options (BadInput naming the valid choices otherwise)."""
    try:  # an unknown name or a reference that gives no workload is a BadInput as it is
        workload = workloads.get(req.workload, dict(pairs(req.options, "option")))
    except OptionError as exc:
        raise BadInput(f"workload {req.workload}: {exc}") from None
    reason = workload.unavailable()
    if reason:
        raise BadInput(f"workload {req.workload} cannot run here: {reason}")
    return workload


MAX_LOADER_WORKERS = 256
"""--loader-workers above this is a typo: every rank would start that many processes."""


def check_loader(workload, req: RunRequest) -> int:
    """The loader workers per rank: refused below 0, above MAX_LOADER_WORKERS, or (any but 0) for a workload that
    holds its data in memory (there is no loader for them to feed)."""
    if req.loader_workers is None:
        return 0
    if not 0 <= req.loader_workers <= MAX_LOADER_WORKERS:
        raise BadInput(f"--loader-workers must be between 0 and {MAX_LOADER_WORKERS}, got {req.loader_workers}")
    if not workload.reads_through_loader() and req.loader_workers:  # 0, the default, said aloud: nothing to refuse
        raise BadInput(f"--loader-workers applies to a workload whose training data is a Dataset; {req.workload} "
                       f"holds its data in memory as tensors, which every rank indexes directly")
    return req.loader_workers


@contextlib.contextmanager
def bounded(what: str, seconds: float):
    """Run the user's code in the parent, as the check before launching does, where a fault in it would otherwise
    say nothing: a segfault prints every thread's Python stack (faulthandler) before the exit, and a hang past
    `seconds` (the --stall-timeout; 0: never) ends compare with exit code 1, one line saying so and the stacks.
    Nothing has been written yet, so nothing is left half written. What the user's code prints is held back: the
    checks build and run the model a dozen times, and its prints said so a dozen times before the run's first line;
    where the checks fail or hang, what it printed comes first, as it may say why."""
    import faulthandler
    import io
    import os
    import sys
    import threading

    try:
        stream = sys.stderr if sys.stderr.fileno() >= 0 else sys.__stderr__
    except (AttributeError, OSError, ValueError):  # a stream with no file (a test's captured one)
        stream = sys.__stderr__
    if not faulthandler.is_enabled():
        faulthandler.enable(file=stream)

    held = io.StringIO()

    def expire():
        stream.write(held.getvalue())
        stream.write(f"error: {what} ran for {seconds:g} s without ending (--stall-timeout): a hang in the model's "
                     f"code? Its stacks, most recent call first:\n")
        stream.flush()
        faulthandler.dump_traceback(file=stream, all_threads=True)
        os._exit(1)

    # 0 or inf: never (a Timer of inf seconds raised OverflowError in its thread, a traceback and no watch)
    timer = threading.Timer(seconds, expire) if seconds and 0 < seconds < float("inf") else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        with contextlib.redirect_stdout(held), contextlib.redirect_stderr(held):
            yield
    except BaseException:
        stream.write(held.getvalue())
        stream.flush()
        raise
    finally:
        if timer is not None:
            timer.cancel()


def check_user_code(workload, req: RunRequest, global_batch: int) -> None:
    """A workload from outside this repository (a file, a module, an entry point) runs forwards and losses on its
    training samples before anything is launched or written: on torch's meta device, which allocates nothing, or
    where the model does what meta cannot (a data-dependent branch, .item()) on the CPU. An exception in the user's
    code is raised as UserCodeError (their traceback, exit 1) rather than as a failed row of every backend; an output
    that no loss can be taken from is one line. What the passes find (harness/core/model_check.py) is kept on the
    workload for the rows and the report: randomness or state in its forward, parameters a step leaves without a
    gradient (`model_facts`), BatchNorm layers. A loss without a count has the counts it may average over read from
    each rank's slices (harness/core/normalisation.py), for a failed equivalence check to be explained."""
    if workloads.source(req.workload) == "built-in":
        return
    import torch

    from adapters.base import ModelFacts
    from harness.core import model_check
    from harness.shared.registry import UserCodeError

    world = req.world_size if req.world_size and global_batch % req.world_size == 0 else 1
    try:  # a Dataset's __getitem__ is the user's code: what it raises is theirs, with their traceback
        data = workload.materialize("cpu", global_batch)
        x, y = data.batch(torch.arange(min(2, data.n_train)), "cpu")
        first_steps = [[data.batch(workload.batch_indices(step, global_batch, data.n_train, rank, world)
                                   [:model_check.CHECK_SAMPLES], "cpu") for step in range(model_check.CHECKED_STEPS)]
                       for rank in range(min(world, model_check.CHECK_RANKS))]  # per rank, its first steps' slices
    except (UserCodeError, BadInput, LossError):
        raise
    except Exception as exc:  # noqa: BLE001 - the user's Dataset
        if "stack expects each tensor to be equal size" in str(exc):  # torch's default_collate, on its items: the
            # traceback is torch's alone, so one line says it
            raise BadInput(f"workload {req.workload}: its training samples' tensors differ in shape ({exc}), and the "
                           f"default collate stacks each batch's items into one tensor; give them one shape in "
                           f"__getitem__ (a sequence padded or cut to a fixed length, its padded labels -100; a bag "
                           f"of ids padded with an id that nn.EmbeddingBag's padding_idx leaves out)") from None
        raise UserCodeError(f"reading the training samples of workload {req.workload}", exc) from None
    facts = workload.model_facts = ModelFacts()
    params = counted = random = None
    try:
        with torch.device("meta"):
            model = workload.new_model()
            output = workload.forward(model, batches.to(x, "meta"))
            counted = _counted(workload, output, batches.to(y, "meta"))
        params = sum(p.numel() for p in model.parameters())
        _check_classes(workload, data, output, req.workload)
    except UserCodeError:
        if params is not None:
            raise
        # the user's code failed on meta (torch's orthogonal parametrization reads .item() as it is set up): it runs
        # for real below, where an error of its own is theirs
        counted = None
    except LossError as exc:  # what the model returned cannot give a loss: one line, not a traceback
        raise BadInput(str(exc)) from None
    except Exception:  # noqa: BLE001 - what meta cannot do is tried for real below
        pass
    if params is not None:
        check_trains(model, req.workload)
        _optimizer(workload, model)
        _module_facts(facts, model)
        try:
            units = workload.shard_units(model)
            facts.bad_unit = model_check.bad_unit(units, model)
            facts.mixed_unit = None if facts.bad_unit else model_check.mixed_dtype_unit(units, model)
            given = (workload.pieces().units if isinstance(workload, workloads.FunctionWorkload)
                     else type(workload).shard_units is not workloads.Workload.shard_units)  # a subclass's own
            if given and not facts.bad_unit:  # the default units leave such a module to the root; given ones not
                from workloads.base import read_outside

                where = {id(m): name for name, m in model.named_modules()}
                outside = read_outside(model, units, batches.to(x, "meta"), workload.forward, beside_activations=True)
                facts.unit_read_outside = [where[id(units[i])] for i in sorted(outside)]
        except Exception:  # noqa: BLE001 - the user's units that fail to be listed fail the row that asks for them
            pass
        _check_gradients(facts, workload, "meta", [[(batches.to(a, "meta"), batches.to(b, "meta")) for a, b in steps]
                                                   for steps in first_steps])
    workload.nondeterministic = _dropout(model) if params is not None else None
    if params is None or params <= SMALL_MODEL:  # run for real: what a Dropout module alone cannot say (one the
        # forward never calls, a functional dropout) the outputs under two seeds do
        outputs = []

        def forward(model):
            outputs.append(workload.forward(model, x))  # training mode, as the steps run it
            return outputs[-1]

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(workload.seed)
            model = workload.new_model()
            check_trains(model, req.workload)
            if workload.optimizer_class is None:  # not built on meta
                _optimizer(workload, model)
            try:
                random, workload.stateful = model_check.diagnose(
                    workload.new_model, forward, workload.seed, loss=lambda out: workload.loss_terms(out, y)[0])
                workload.edits_parameters = model_check.edited_parameters(workload.new_model, forward, workload.seed)
            except UserCodeError:
                raise
            except Exception as exc:  # noqa: BLE001 - the user's code
                raise UserCodeError(f"a forward and loss of workload {req.workload} on {batches.length(x)} training "
                                    f"samples", exc) from None
            loss = loss_takes(workload, outputs[0], y, req.workload, model)
            _check_classes(workload, data, outputs[0], req.workload)
            _check_evaluation(workload, model, data, req.workload)
            counted = workload.loss_terms(outputs[0], y)[1] is not None
            _module_facts(facts, model)
            if not facts.checked_steps:  # meta could not run it: on the CPU
                _check_gradients(facts, workload, "cpu", first_steps)
        try:  # a declared count (or a loss's (sum, count)) of nothing on these samples: the loss is 0/0 by design,
            # and the harness adds nothing for it (docs/your-model.md), so only the rest of the output is checked
            none_counted = workload.loss_terms(outputs[0], y)[1]
            none_counted = none_counted is not None and float(none_counted) == 0
        except Exception:  # noqa: BLE001 - the loss's own failure is reported where it is taken
            none_counted = False
        check_finite(outputs[0], loss, req.workload, batches.length(x), y, none_counted=none_counted)
        workload.nondeterministic = (_dropout(model) or random) if random else None
    _batch_norm(workload, facts)
    form = "pieces" if isinstance(workload, workloads.FunctionWorkload) else "subclass"
    steps = max(workload.equiv_steps, getattr(req, "equiv_steps", None) or 0)  # what the check may cover
    try:  # a declared count too (`count=`), against the counts a loss commonly divides by
        workload.varying_counts = normalisation.candidates(workload, data, global_batch, req.world_size or 1, steps,
                                                           form, declared=bool(counted))
    except Exception:  # noqa: BLE001 - the user's count of a slice: what it raises, the launch raises as theirs
        if not counted:
            raise
    if not counted and req.world_size:
        total = ((req.steps if req.steps is not None else workload.steps)
                 + (req.warmup if req.warmup is not None else workload.warmup))
        try:
            workload.empty_slice = normalisation.empty_slice(workload, data, global_batch, req.world_size, total)
        except Exception:  # noqa: BLE001 - a target no count reads: nothing to say of it
            workload.empty_slice = None
    on_cpu = params is None or params <= SMALL_MODEL  # small enough to run for real here
    if on_cpu and not (workload.nondeterministic or workload.batch_dependence):
        with model_check.distributed_calls() as consulted:  # a loss that gathers the rest of its batch from the
            # other ranks (SimCLR's, CLIP's) skips its gather here, with no process group: said beside what is found
            found = batch_dependence(workload, data, global_batch, world, steps)
        if isinstance(found, SummedLoss):
            workload.summed_loss = str(found)
        elif isinstance(found, UnlossedBuffers):
            workload.unlossed_buffers = found.buffers
        else:
            workload.batch_dependent = found
            workload.batch_buffers = getattr(found, "buffers", None) or None
            workload.consults_distributed = consulted[0] if found and consulted else None
        # where the code calls torch.distributed whatever else it does: a ✗ nothing else explains says so
        workload.calls_distributed = ", ".join(consulted[:3]) if consulted else None


class BatchBuffers(str):
    """batch_dependence's finding where buffers (`buffers`: their names) follow the batch: a forward that updates
    them from its batch leaves each rank's copy where its own slice took it."""
    buffers: list[str]


def _mixing(workload, data, slices) -> str | None:
    """Where the samples of a batch first mix: the first module, in the order the modules finished (a child before its
    parent), whose output for the first slice's samples differs between a forward over the global batch and one over
    that slice alone. Its own code mixes them where its input did not differ ("norm (MyNorm)"; "the model's own
    forward (Net)"), its parent's code before calling it where its input did ("the forward of the model itself (Net),
    before it calls b"): a statistic over the batch dimension, a use of the batch's size. None where no module's
    output differs (the loss mixes them) or the outputs cannot be told apart by sample."""
    import torch

    def first(value):
        items = value if isinstance(value, (tuple, list)) else value.values() if isinstance(value, dict) else [value]
        t = next((t for t in items if isinstance(t, torch.Tensor) and t.dim() >= 1 and t.is_floating_point()), None)
        return None if t is None else t.detach().clone()

    def outputs(indices):
        torch.manual_seed(workload.seed)
        model = workload.new_model()
        for module in model.modules():  # BatchNorm is found and explained apart
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                module.eval()
        names = {id(m): n for n, m in model.named_modules()}
        kinds.update({n: type(m).__name__ for n, m in model.named_modules()})
        seen = []
        handles = [m.register_forward_hook(lambda module, args, out: seen.append(
            (names.get(id(module), ""), first(args), first(out)))) for m in model.modules()]
        try:
            inputs, _ = data.batch(indices, "cpu")
            workload.forward(model, inputs)
        finally:
            for h in handles:
                h.remove()
        return seen

    def differ(a, b, n) -> bool | None:
        if a is None or b is None or a.shape[0] < n or b.shape[0] != n or a.shape[1:] != b.shape[1:]:
            return None
        scale = max(float(a[:n].abs().max()), float(b.abs().max()), 1e-12)
        return float((a[:n] - b).abs().max()) > 10 * normalisation.ROUNDING * scale

    kinds: dict[str, str] = {}
    try:
        n = len(slices[0])
        whole, part = outputs(torch.cat(slices)), outputs(slices[0])
        if len(whole) != len(part):
            return None
        for (name, a_in, a_out), (_, b_in, b_out) in zip(whole, part):
            if not differ(a_out, b_out, n):
                continue
            if differ(a_in, b_in, n):  # it was handed mixed samples: its parent's own code mixed them
                parent = name.rsplit(".", 1)[0] if "." in name else ""
                where = f"{parent} ({kinds.get(parent, '')})" if parent else f"the model itself ({kinds.get('', '')})"
                return f"the forward of {where}, before it calls {name}"
            return f"{name} ({kinds.get(name, '')})" if name else f"the model's own forward ({kinds.get('', '')})"
    except Exception:  # noqa: BLE001 - what cannot be run so is not placed
        return None
    return None


def _following(single, rank) -> list[str]:
    """The buffers of two copies of one model, the one run over the global batch and the other over a slice, that
    differ beyond rounding (a floating buffer) or at all (another): those its forward updates from its batch."""
    import torch

    theirs = dict(rank.named_buffers())
    found = []
    for name, mine in single.named_buffers():
        other = theirs.get(name)
        if other is None or other.shape != mine.shape or torch.equal(mine, other):
            continue
        if mine.is_floating_point() or mine.is_complex():
            scale = max(float(mine.abs().max()), float(other.abs().max()), 1e-12)
            if float((mine - other).abs().max()) <= normalisation.ROUNDING * scale:
                continue
        found.append(name)
    return found


class UnlossedBuffers(str):
    """batch_dependence's finding where the loss does not depend on the rest of its batch and buffers (`buffers`)
    still follow it (InstanceNorm with track_running_stats: per-sample statistics in training, a running mean over
    the batch for eval mode): the parameters match the single process, what reads the buffers may not."""
    buffers: list[str]


class SummedLoss(str):
    """batch_dependence's finding where the single process's loss is the ranks' mean times their number: a sum over
    the batch's samples (reduction="sum"), which depends on the batch's size, not on its other samples."""


def batch_dependence(workload, data, global_batch: int, world: int, steps: int = 0) -> str | None:
    """Whether the model's loss depends on the rest of its batch, found on the CPU before launching: with the same
    parameters (no optimizer step), one model over each of the first `steps` global batches (the equivalence
    check's, where a count may first differ late; at least CHECKED_STEPS, at most BATCH_CHECK_STEPS), as the single
    process runs it, against one model per rank over its slices, each carrying its own state as training does. A
    loss that is a mean of per-sample terms gives the single process's loss as the ranks' losses' mean (weighted by
    their counts where it has them); a term over the whole batch (a load-balancing or contrastive loss) or a buffer
    the forward updates from its batch does not. Randomness and a loss averaged over a varying count are found and
    explained apart, so the caller leaves them out; BatchNorm layers run on their running statistics here (eval
    mode), so what is found is a dependence other than theirs (a contrastive loss over a BatchNorm encoder: with
    sync_bn=true it still differs). Returns the finding in words, or None."""
    import torch

    from harness.core import model_check

    if world < 2:
        return None
    ranks = min(world, model_check.CHECK_RANKS)
    losses: dict[int, tuple[float, list[float]]] = {}
    workload.count_losses = losses  # per step: the single process's loss and the ranks' (a declared count's)

    def value(model, indices) -> tuple[float, float | None]:
        inputs, target = data.batch(indices, "cpu")
        got, n, summed = workload.loss_terms(workload.forward(model, inputs), target)
        return (float(got) / float(n) if summed else float(got)), (None if n is None else float(n))

    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            models = []
            for _ in range(ranks + 1):
                torch.manual_seed(workload.seed)
                models.append(workload.new_model())
                for module in models[-1].modules():  # BatchNorm is found and explained apart: per sample here
                    if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                        module.eval()
            for step in range(min(max(steps, model_check.CHECKED_STEPS), model_check.BATCH_CHECK_STEPS)):
                slices = [workload.batch_indices(step, global_batch, data.n_train, r, world) for r in range(ranks)]
                single, _ = value(models[0], torch.cat(slices))  # the global batch (its first ranks' part)
                parts = [value(m, indices) for m, indices in zip(models[1:], slices)]
                if not all(math.isfinite(v) for v, _ in parts) and math.isfinite(single):
                    continue  # a slice holding nothing its mean counts (0/0): said apart (normalisation.empty_slice)
                weights = [n if n is not None else float(len(i)) for (_, n), i in zip(parts, slices)]
                mean = sum(v * n for (v, _), n in zip(parts, weights)) / sum(weights)
                rounding = normalisation.ROUNDING * max(abs(single), 1e-12)
                if parts[0][1] is not None:  # a declared count: the losses it weighs, for what a ✗ may suspect
                    losses[step] = (single, [v for v, _ in parts])
                if abs(single - mean) <= 10 * rounding:
                    continue
                if parts[0][1] is None:  # a mean over a count that differs between the ranks is explained apart
                    targets = [data.batch(i, "cpu")[1] for i in slices]
                    whole = data.batch(torch.cat(slices), "cpu")[1]
                    counted = [sum(v * c(t) for (v, _), t in zip(parts, targets)) / max(sum(c(t) for t in targets), 1)
                               for *_, c in normalisation.counters(targets[0], whole)]
                    if any(abs(w - single) <= max(rounding, abs(mean - single) / 10) for w in counted):
                        return None
                if abs(single - ranks * mean) <= 10 * ranks * rounding:  # a sum: each slice holds 1/ranks of it
                    return SummedLoss(f"its loss over the global batch of step {step + 1} was {single:.6g} in one "
                                      f"process, {ranks} times the mean of {ranks} ranks' losses over their slices "
                                      f"({mean:.6g})")
                said = (f"with the same parameters, its loss over the global batch of step {step + 1} was "
                        f"{single:.6g} in one process and the mean of {ranks} ranks' losses over their slices "
                        f"{mean:.6g}")
                buffers = _following(models[0], models[1])
                if not buffers:
                    workload.batch_mixing = _mixing(workload, data, slices)
                    return said
                found = BatchBuffers(f"{said}; its forward updates {'buffer' if len(buffers) == 1 else 'buffers'} "
                                     f"{listed(buffers)} from its batch: after that step "
                                     f"{'its value' if len(buffers) == 1 else 'their values'} in the one process "
                                     f"and in a rank over its slice differed")
                found.buffers = buffers
                return found
            buffers = _following(models[0], models[1])
            if buffers:
                found = UnlossedBuffers(listed(buffers))
                found.buffers = buffers
                return found
    except Exception:  # noqa: BLE001 - a model this cannot run (a loss that needs gradients, say) is not judged
        return None
    return None


def _check_classes(workload, data, output, name: str) -> None:
    """Refuse integer training targets outside the classes of the default cross-entropy (0 to the output's last
    size, or -100 to ignore), read over the whole training set held as tensors: the check's two samples missed a
    label further on, and the launches failed on "IndexError: Target 9 is out of bounds" after writing results."""
    import torch

    if not isinstance(workload, workloads.FunctionWorkload) or workload.pieces().loss is not None:
        return
    y = data.train_y
    logits = batches.logits(output)
    if (batches.own_loss(output) is not None or not isinstance(y, torch.Tensor) or y.is_floating_point()
            or y.dtype == torch.bool or not isinstance(logits, torch.Tensor) or not logits.dim()):
        return
    classes = logits.shape[-1]
    outside = ((y >= classes) | ((y < 0) & (y != normalisation.IGNORE_INDEX))).reshape(len(y), -1)
    bad = outside.any(1)
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        value = int(y[i].reshape(-1)[outside[i]][0])
        raise BadInput(f"workload {name}: training sample {i}'s target is {value}, outside the {classes} classes its "
                       f"model's output gives (0 to {classes - 1}, or {normalisation.IGNORE_INDEX} to ignore), so "
                       f"the default cross-entropy would fail at that sample; {int(bad.sum())} of {len(y)} samples "
                       f"hold such targets: give the model {int(y.max()) + 1} outputs, or map the targets into range")


def _counted(workload, output, target) -> bool:
    """Whether the workload's loss of `output` comes with a count (checked as a step would use it)."""
    workload.step_loss(output, target)
    return workload.loss_terms(output, target)[1] is not None


def _module_facts(facts, model) -> None:
    """What the model's modules say, on whichever device it was built: its BatchNorm layers, its sparse embeddings."""
    import torch

    from harness.core import model_check

    from adapters.dtypes import dtype_names

    facts.batch_norm = model_check.batch_norm_layers(model)
    facts.sparse = model_check.sparse_modules(model)
    trains = [p for p in model.parameters() if p.requires_grad]
    facts.param_dtypes = dtype_names(trains).split("+") if trains else []
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    facts.empty = [n for n, p in named if p.numel() == 0]
    facts.non_contiguous = [n for n, p in named if p.numel() and not p.is_contiguous()]
    facts.channels_last = [n for n, p in named if n in facts.non_contiguous and p.dim() in (4, 5)
                           and p.is_contiguous(memory_format=torch.channels_last if p.dim() == 4
                                               else torch.channels_last_3d)]
    facts.scalar = [n for n, p in model.named_parameters() if p.dim() == 0]
    facts.compiled = [n for n, m in model.named_modules() if type(m).__name__ == "OptimizedModule"]
    facts.grad_hooks = [n for n, p in named if getattr(p, "_backward_hooks", None)
                        or getattr(p, "_post_accumulate_grad_hooks", None)]
    facts.multihead = [n for n, m in model.named_modules()  # one a ZeRO-3 leaf (set_z3_leaf_modules) is gathered whole
                       if isinstance(m, torch.nn.MultiheadAttention) and not getattr(m, "_z3_leaf", False)]


def _check_gradients(facts, workload, device: str, ranks) -> None:
    """Fill `facts` with the parameters that the first steps leave without a gradient on `device`, each rank's
    slices (`ranks`: per rank, its first steps' batches, in order) on a model of its own: `no_gradient` on any rank,
    `ranks_differ` where one rank gave a parameter a gradient and another did not in the same step; nothing where
    the passes cannot run there."""
    import torch

    from harness.core import model_check
    from harness.shared.registry import UserCodeError

    with torch.random.fork_rng(devices=[]), torch.device(device):
        try:
            missing, twice, warned = [], {}, set()
            for steps in ranks:
                torch.manual_seed(workload.seed)
                model = workload.new_model()
                missing.append(model_check.no_gradient(
                    model, steps, lambda m, inputs, target: workload.step_loss(workload.forward(m, inputs), target),
                    twice, warned))
            facts.twice = {n: sorted(set(s)) for n, s in twice.items()}
            facts.checkpoint_no_grad = model_check.NO_GRAD_CHECKPOINT in warned
            facts.no_gradient, facts.ranks_differ = {}, {}
            for name in dict.fromkeys(n for m in missing for n in m):
                facts.no_gradient[name] = sorted({s for m in missing for s in m.get(name, [])})
                differ = [s for s in facts.no_gradient[name] if not all(s in m.get(name, []) for m in missing)]
                if differ:
                    facts.ranks_differ[name] = differ
            facts.checked_steps, facts.checked_ranks = len(ranks[0]), len(ranks)
        except UserCodeError:
            raise
        except Exception:  # noqa: BLE001 - not checked here (a backward meta cannot run, say)
            facts.no_gradient, facts.ranks_differ, facts.twice, facts.checked_steps = {}, {}, {}, 0


def _batch_norm(workload, facts) -> None:
    """The BatchNorm layers found, as the workload's `batch_norm` (a declared one stays)."""
    if facts.batch_norm and not workload.batch_norm:
        workload.batch_norm = ", ".join(facts.batch_norm)


def _optimizer(workload, model) -> None:
    """The workload's optimizer's class, kept for the ✗'s words (`workload.optimizer_class`), where it can be built
    over the model as checked (on meta nothing is allocated); None where it cannot."""
    import torch

    try:
        made = workload.make_optimizer(model, workload.lr(workload.global_batch))
    except Exception:  # noqa: BLE001 - the user's optimizer: what it raises, the launch raises as theirs
        workload.optimizer_class = None
        return
    if not isinstance(made, torch.optim.Optimizer):  # None had failed every row on "'NoneType' object has no
        # attribute 'zero_grad'", after its launch
        raise BadInput(f"workload {workload.name}'s optimizer returned {type(made).__name__}, not a "
                       f"torch.optim.Optimizer; return the optimizer it builds over the parameters it is given")
    workload.optimizer_class = type(made).__name__


def _check_evaluation(workload, model, data, name: str) -> None:
    """The evaluation as every rank runs it after training, on the first two test samples: a test set the model
    cannot take (another feature width) or a metric that fails had every row end ok with its evaluation lost, said
    only in a note; what it raises is the user's code's, before anything is launched."""
    import dataclasses

    from harness.shared.registry import UserCodeError, user_code

    if data.test_x is None:
        return
    tx, ty = data.test(slice(0, min(2, data.n_test)))
    try:
        with user_code(f"evaluating workload {name} on 2 test samples"):
            workload.evaluate(model, dataclasses.replace(data, test_x=tx, test_y=ty), 0, 1, contextlib.nullcontext())
    except (UserCodeError, BadInput):
        raise
    except Exception as exc:  # noqa: BLE001 - the user's model, test set or metric
        raise UserCodeError(f"evaluating workload {name} on 2 test samples (every row evaluates so after training)",
                            exc) from None


def check_trains(model, name: str) -> None:
    """Refuse a model with nothing to train (no parameter, or none that requires a gradient): every backend would
    fail at launch on "optimizer got an empty parameter list" or DDP's "doesn't have any parameter that requires a
    gradient". Counted on the model as built (on meta: nothing allocated)."""
    from workloads.base import nothing_to_train

    why = nothing_to_train(model, name)
    if why:
        raise BadInput(why)


def _shape(value) -> str:
    """What a model's output or a batch's targets are, in words: "float32 (2, 3)", a dict's or a tuple's parts."""
    import torch

    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).replace('torch.', '')} {tuple(value.shape)}"
    if isinstance(value, dict) or hasattr(value, "items"):
        return "{" + ", ".join(f"{k}: {_shape(v)}" for k, v in list(value.items())[:6]) + "}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_shape(v) for v in value[:6]) + ")"
    return type(value).__name__


def loss_takes(workload, output, target, name: str, model=None):
    """The loss a step back-propagates of the model's output on two training samples (Workload.step_loss); BadInput
    in one line where it cannot take that output (a width or dtype the targets do not fit: "Target 7 is out of
    bounds"), naming both shapes, or where what the model returned gives no loss (LossError)."""
    import torch

    try:
        loss = workload.step_loss(output, target)
    except LossError as exc:
        raise BadInput(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - a loss that cannot take this output, in the user's or torch's code
        said = " ".join(str(exc).split()).rstrip(".")
        raise BadInput(f"workload {name}: its loss cannot take the model's output (output {_shape(output)}, targets "
                       f"{_shape(target)}): {type(exc).__name__}: {said[:300]}; make the model's output what the "
                       f"loss expects (the default loss: cross-entropy over integer class targets, mean squared error "
                       f"for float targets)") from None
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.is_floating_point():
        raise BadInput(f"workload {name}: its loss returned {batches.describe(loss)}, not one floating-point value; "
                       f"return the loss as a tensor (a mean over the batch), or (sum, count)")
    if model is not None and not loss.requires_grad and any(p.requires_grad for p in model.parameters()):
        raise BadInput(f"workload {name}: its loss does not depend on the model's parameters (it requires no "
                       f"gradient: a constant, or computed under torch.no_grad() or from .detach()ed outputs), so no "
                       f"step could train the model; compute it from the model's output")
    return loss


def check_finite(output, loss, name: str, samples: int, target=None, none_counted: bool = False) -> None:
    """Refuse a model whose output or loss on two training samples is NaN or infinite before any backend ran:
    every row would train on it, and two NaN outputs never compare equal (which read as randomness in forward). A
    NaN loss over samples whose targets are all -100 (`target`) is a mean over none: told so, with the count's fix."""
    import torch
    from torch.utils._pytree import tree_leaves

    own = batches.own_loss(output) if none_counted else None
    leaves = [t for t in tree_leaves(output) if isinstance(t, torch.Tensor) and t.is_floating_point()
              and t is not own]
    if none_counted:
        loss = None  # a mean over no counted item: 0/0, which every row and the single process skip alike
    bad = sum(int((~torch.isfinite(t.detach())).sum()) for t in leaves)
    if bad:
        total = sum(t.numel() for t in leaves)
        kinds = " and ".join(k for k, f in (("NaN", torch.isnan), ("infinite", torch.isinf))
                             if any(bool(f(t.detach()).any()) for t in leaves))
        raise BadInput(f"workload {name}: its model's output on {samples} training sample(s) holds {kinds} values "
                       f"({bad:,} of {total:,}) before any backend ran; a model whose output is not finite cannot be "
                       f"trained or compared (check its initialisation, inputs and operations)")
    if isinstance(loss, torch.Tensor) and loss.numel() and not bool(torch.isfinite(loss.detach()).all()):
        labels = target if isinstance(target, torch.Tensor) else batches.field(target, "labels")
        if (isinstance(labels, torch.Tensor) and not labels.is_floating_point() and labels.numel()
                and not bool((labels != -100).any())):
            raise BadInput(f"workload {name}: its loss on {samples} training sample(s) is "
                           f"{loss.detach().flatten()[0].item()} before any backend ran: their targets are all -100, "
                           f"so a mean over the targets it counts is 0/0, as it will be on any rank whose slice holds "
                           f"none; fix: return the loss as (sum, count), the count of those targets (the harness "
                           f"divides by the whole global batch's), or declare the count (`count=` in its Pieces)")
        raise BadInput(f"workload {name}: its loss on {samples} training sample(s) is {loss.detach().flatten()[0].item()} "
                       f"before any backend ran (the output is finite): a loss that is not finite cannot be trained "
                       f"or compared (check the loss and the targets)")


def _dropout(model) -> str | None:
    """Why a model's training-mode output is random, from its modules: dropout with p > 0, or None."""
    import torch.nn as nn

    kinds = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
    found = sorted({f"{type(m).__name__}(p={m.p:g})" for m in model.modules() if isinstance(m, kinds) and m.p > 0})
    return f"it has dropout ({', '.join(found)})" if found else None


def workload_key(workload) -> str:
    """What a workload's model-derived facts (its parameter count, a sample's FLOPs) depend on, as a cache key: the
    files defining its class and every file of the workloads package (which a built-in model may import from), the
    installed torch and transformers (read from their metadata: nothing is imported) and its resolved
    options."""
    import inspect
    import json
    import sys
    from importlib import metadata

    files = {Path(inspect.getfile(klass)) for klass in type(workload).__mro__
             if getattr(sys.modules.get(klass.__module__), "__file__", None)}
    files |= set(Path(workloads.__file__).parent.glob("*.py"))
    versions = []
    for package in ("torch", "transformers"):
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} absent")
    return "|".join([files_key(sorted(files)), *versions, json.dumps(workload.describe(), sort_keys=True,
                                                                      default=str)])


def check_fits(workload, req: RunRequest, ranks: int) -> int | None:
    """Refuse a workload whose model states alone (fp32 parameters, gradients and one optimizer buffer, a lower
    bound on what training holds) for `ranks` ranks on this machine exceed its memory: `-o hidden=99999999999`
    used to fail at launch, out of memory. The model is built on torch's meta device, which allocates nothing.
    Returns its parameter count (None where meta cannot build it; on CUDA it is not counted)."""
    if req.device != "cpu":
        return None
    given = ", ".join(req.options) or "its defaults"

    def count() -> int | None:
        import torch

        try:
            with torch.device("meta"):
                return sum(p.numel() for p in workload.new_model().parameters())
        except RuntimeError as exc:
            if "overflow" in str(exc):  # a tensor larger than any address space
                raise BadInput(f"workload {req.workload} ({given}) cannot be built: {' '.join(str(exc).split())}; "
                               f"choose smaller workload options") from None
            return None
        except Exception:  # noqa: BLE001 - a model that cannot be built on meta is left to the launch
            return None

    # A built-in workload's count is kept in the cache directory (workload_key), so a run of one imports no torch
    # here: 3.5 s of every `compare run`'s start on this machine. A user's model is built on meta regardless
    # (check_user_code), so its count is taken afresh.
    key = workload_key(workload) if workloads.source(req.workload) == "built-in" else None
    params = count() if key is None else cached_json(f"params-{workloads.slug(req.workload)}", key, count,
                                                     keep=lambda v: isinstance(v, int))
    if params is None:
        return None
    need, total = 12 * params * ranks, envmod.memory_total_bytes()
    if need > total:
        raise BadInput(f"workload {req.workload} ({given}) has {params:,} parameters: their fp32 values, gradients "
                       f"and one optimizer buffer alone take {need / 2**30:,.1f} GiB for {ranks} rank(s), more than "
                       f"this machine's {total / 2**30:,.1f} GiB; choose smaller workload options")
    return params
