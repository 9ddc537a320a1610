"""A workload from a plain function: the five-minute path for a user's own model.

    from workloads import Pieces, workload

    @workload(global_batch=64, lr=0.05, steps=50, warmup=5)
    def mlp(hidden: int = 256, samples: int = 4096):
        \"\"\"A two-layer MLP on a synthetic teacher.

        Args:
            hidden: width of the hidden layer.
            samples: training samples.
        \"\"\"
        x, y = make_data(samples)
        return Pieces(model=lambda: Net(hidden), train=(x, y), test=(x_test, y_test))

`compare run -w path/to/file.py:mlp -o hidden=512` then runs it through every backend. The function's parameters
(each with a default) are the workload's options (`-o KEY=VALUE`, `compare knobs`), documented by its docstring's
`Args:` section; the decorator's arguments are its hyperparameters (without it, DEFAULTS). The function is called
once per process, with torch's random generators seeded from the workload's seed and restored afterwards, so
every process (every rank of every backend, and the single-process reference) builds the same data; the model
factory is called after the harness seeds torch, so every process builds the same weights.

What the function returns (a `Pieces`, or a dict with the same keys):
- `model`: a function returning a fresh `torch.nn.Module` (or a module, deep-copied for each use);
- `train`: `(inputs, targets)` tensors, a dict of tensors (a Hugging Face batch: `input_ids`, `attention_mask`,
  `labels`; the model is called `model(**batch)` and the batch is its own targets), or a map-style
  `torch.utils.data.Dataset` whose items are `(input, target)` tensors or dicts of tensors, collated by torch's
  default collate: each rank then reads its slice of every step's global batch through a `DataLoader`
  (`--loader-workers`); the inputs of `(inputs, targets)` may be a dict too;
- `test` (optional): the same, for the evaluation (a Dataset is read into memory once);
- `loss(output, target)` (optional; default: the loss in the model's output, `output.loss` or `output["loss"]`, else
  cross-entropy for integer targets, over every position of a sequence, mean squared error for float targets); it
  may return `(sum, count)` for a loss over a number of items that varies between batches, which every backend then
  divides by the count over all processes; `count(target)` (optional) declares that number for a mean loss
  instead (a model that returns its own loss); `metric(output, target) -> (correct, count)` (optional; default for
  integer targets: argmax accuracy per position of the output or its `logits`, targets of -100 left out; float
  targets, dict batches and outputs with neither a tensor nor `logits` are not evaluated without one);
- `optimizer(parameters, lr)` (optional; default SGD with momentum 0.9); `units(model)` (optional: the blocks a
  sharding backend wraps one by one); `tokens_per_sample` (optional: a language model's tokens per sample; default:
  a sequence target's length, or a dict batch's `input_ids` length).

Runs in: the parent and every rank.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import re
import types
import typing
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any, Callable, ClassVar, Literal

from harness.shared.registry import BadReference, UserCodeError, UserExit, user_code
from workloads import batch as batches
from workloads.base import Data, LossError, Workload, no_loss_fix

DEFAULTS: dict[str, Any] = {"global_batch": 32, "lr": 0.01, "steps": 50, "warmup": 5, "seed": 0, "target": None,
                            "eval_every": None, "max_steps_to_target": None, "equiv_steps": 10,
                            "equiv_tolerance": 1e-5, "max_grad_norm": None, "metric_name": None,
                            "batch_dependence": None, "name": None, "summary": None}
"""Hyperparameters of a workload function without `@workload(...)`, and what the decorator's arguments default to:
global batch, the learning rate at that batch (scaled linearly for another --global-batch), timed and warm-up steps,
seed, an accuracy target (with `eval_every` and `max_steps_to_target` for --until-target), the equivalence check's
steps and tolerance, the global gradient norm clipped to before each optimizer step (None: no clipping), the metric's
name, why the model depends on its batch (BatchNorm: skips the check), and the name and summary shown in reports
(default: the function's name and its docstring's first line)."""


def workload(**hyper: Any) -> Callable:
    """Mark a function that returns a workload's pieces, with its hyperparameters (keys of DEFAULTS)."""
    unknown = sorted(set(hyper) - set(DEFAULTS))
    if unknown:
        raise TypeError(f"@workload: unknown hyperparameter(s) {', '.join(unknown)}; valid: {', '.join(DEFAULTS)}")

    def mark(fn: Callable) -> Callable:
        fn.__compare_workload__ = dict(hyper)
        return fn

    return mark


@dataclass
class Pieces:
    """What a workload function returns (see the module's docstring)."""

    model: Any
    train: Any
    test: Any = None
    loss: Callable | None = None
    metric: Callable | None = None
    optimizer: Callable | None = None
    units: Callable | None = None
    tokens_per_sample: int | None = None
    count: Callable | None = None


PIECES = tuple(f.name for f in dataclasses.fields(Pieces))


class FunctionWorkload(Workload):
    """The base of every class made by `from_function`: a Workload whose pieces come from calling a function."""

    name = "function"
    summary = "a workload made from a function"
    global_batch, base_lr, base_batch, steps, warmup = 32, 0.01, 32, 50, 5
    fn: ClassVar[Callable]
    ref: ClassVar[str]
    """The reference it was loaded from (`path/file.py:NAME`), for messages."""
    made: ClassVar[dict[str, Pieces]]
    """The function's result per set of options: called once per process however many instances ask."""

    def pieces(self) -> Pieces:
        """The function's result, checked, computed once per process with torch's generators seeded and restored."""
        kwargs = dataclasses.asdict(self.options)
        key = repr(sorted(kwargs.items()))
        cached = type(self).made.get(key)
        if cached is not None:
            return cached
        import torch

        with torch.random.fork_rng(devices=[]), torch.device("cpu"):  # not under the caller's meta device
            torch.manual_seed(self.seed)
            try:
                with user_code(f"calling workload {self.ref}"):
                    got = type(self).fn(**kwargs)
            except UserExit:
                raise
            except Exception as exc:  # noqa: BLE001 - the user's code
                raise UserCodeError(f"calling workload {self.ref}", exc) from None
        made = type(self).made[key] = _as_pieces(got, self.ref)
        return made

    # ---- model, optimizer, loss -----------------------------------------------------------------------------
    def build_model(self):
        made = self.pieces().model
        import torch

        if isinstance(made, torch.nn.Module):
            return _copied(made)
        try:
            with user_code(f"building the model of workload {self.ref}"):
                model = made()
        except UserExit:
            raise
        except Exception as exc:  # noqa: BLE001
            raise UserCodeError(f"building the model of workload {self.ref}", exc) from None
        if not isinstance(model, torch.nn.Module):
            raise BadReference(f"workload {self.ref}: its model factory returned {type(model).__name__}, not a "
                               f"torch.nn.Module")
        return model

    def make_optimizer(self, model, lr):
        make = self.pieces().optimizer
        return make(model.parameters(), lr) if make else super().make_optimizer(model, lr)

    def shard_units(self, model):
        units = self.pieces().units
        return list(units(model)) if units else super().shard_units(model)

    def loss(self, output, target):
        given = self.pieces().loss
        if given is not None:
            return given(output, target)
        own = batches.own_loss(output)
        if own is not None:
            return own
        import torch.nn.functional as F

        logits = batches.logits(output)  # the output, or its logits (a classifier fed (dict inputs, labels))
        if logits is None or isinstance(target, Mapping):
            raise LossError(f"workload {self.ref}: its model returned {batches.describe(output)}, with no loss in it, "
                            f"and the workload gives no loss piece: "
                            + no_loss_fix(target, "give loss(output, target)", output))
        if target.is_floating_point():
            if logits.shape != target.shape:
                # mse_loss broadcasts (B, 1) against (B,) to (B, B): every output against every target, which
                # trains (torch only warns) on an objective nobody asked for
                import torch

                try:
                    spread = tuple(torch.broadcast_shapes(logits.shape, target.shape))
                except RuntimeError:
                    spread = None
                if spread != tuple(logits.shape) or logits.numel() != target.numel():
                    raise LossError(f"workload {self.ref}: its model's output {tuple(logits.shape)} and its float "
                                    f"targets {tuple(target.shape)} are not the same shape, and the default "
                                    f"mean squared error would broadcast them"
                                    + (f" to {spread}, every output against every target" if spread else "")
                                    + "; fix: make them the same shape (the output's `.squeeze(-1)`, or targets "
                                      "of the output's shape), or give loss(output, target)")
            return F.mse_loss(logits.float(), target)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), target.reshape(-1))

    def count(self, target):
        given = self.pieces().count
        return None if given is None else given(target)

    def why_not_evaluated(self, data, output):
        """As every workload's, and where there is no accuracy to report without a `metric`: float targets, dict
        batches (whose labels a model may shift itself), an output without logits. No evaluation then (the report
        says why, rather than print an accuracy that means nothing)."""
        if data.test_x is None or self.pieces().metric is not None:
            return super().why_not_evaluated(data, output)
        fix = "without metric(output, target) -> (correct, count) there is no accuracy to take"
        return self.default_accuracy_problem(data, output, fix) or super().why_not_evaluated(data, output)

    def score(self, output, target):
        import torch.nn.functional as F

        p = self.pieces()
        if p.metric is not None:
            try:
                correct, count = p.metric(output, target)
            except Exception as exc:  # noqa: BLE001
                raise UserCodeError(f"the metric of workload {self.ref}", exc) from None
        else:
            logits = batches.logits(output)
            if logits is None:
                raise LossError(f"workload {self.ref}: its model returned {batches.describe(output)}, which has no "
                                f"logits to take an accuracy from; give metric(output, target)")
            kept = target != -100  # positions the default loss ignores (cross_entropy's ignore_index): not scored
            correct, count = ((logits.argmax(-1) == target) & kept).sum().item(), kept.sum().item()
        if p.loss is None and batches.field(output, "loss") is None and not isinstance(target, Mapping):
            out = batches.logits(output)  # the default loss, summed
            loss_sum = (F.mse_loss(out.float(), target, reduction="sum").item() if target.is_floating_point() else
                        F.cross_entropy(out.float().reshape(-1, out.shape[-1]), target.reshape(-1),
                                        reduction="sum").item())
        else:  # the workload's own loss (or the model's), as a mean, weighted by what the metric counts
            value, n, summed = self.loss_terms(output, target)
            loss_sum = float(value) / (float(n) if summed else 1.0) * float(count)
        return float(correct), float(count), loss_sum

    def reads_through_loader(self) -> bool:
        return not isinstance(self.pieces().train, (tuple, Mapping))

    def unpadded_tokens_per_sample(self) -> float | None:
        """The mean number of real tokens a training sample holds, where a dict batch's `attention_mask` marks
        padding (its mean over the training set, below the padded length); None otherwise."""
        train = self.pieces().train
        batch = train if isinstance(train, Mapping) else train[0] if isinstance(train, tuple) else None
        mask = batch.get("attention_mask") if isinstance(batch, Mapping) else None
        if mask is None or getattr(mask, "dim", lambda: 0)() != 2 or mask.numel() == 0:
            return None
        real = float(mask.ne(0).sum(1).float().mean())
        return real if real < mask.shape[1] else None

    def tokens_per_sample(self) -> int | None:
        p = self.pieces()
        if p.tokens_per_sample is not None:
            return int(p.tokens_per_sample)
        train = p.train
        if isinstance(train, Mapping) or (isinstance(train, tuple) and isinstance(train[0], Mapping)):
            ids = (train if isinstance(train, Mapping) else train[0]).get("input_ids")
            return (int(ids.shape[1]) if ids is not None and ids.dim() == 2 and not ids.is_floating_point()
                    else None)
        y = train[1] if isinstance(train, tuple) else None
        if y is not None and not y.is_floating_point() and y.dim() == 2:
            return int(y.shape[1])  # a sequence of class indices per sample: a language model's next tokens
        if y is None and not isinstance(train, (tuple, Mapping)) and len(train):  # a Dataset: its first item, alike
            import torch

            item = train[0]
            inputs = item if isinstance(item, Mapping) else item[0] if isinstance(item, (tuple, list)) else None
            ids = inputs.get("input_ids") if isinstance(inputs, Mapping) else None
            if isinstance(ids, torch.Tensor) and ids.dim() == 1:
                return int(ids.shape[0])
            target = item[1] if isinstance(item, (tuple, list)) and len(item) == 2 else None
            if isinstance(target, torch.Tensor) and not target.is_floating_point() and target.dim() == 1:
                return int(target.shape[0])
        return None

    # ---- data ----------------------------------------------------------------------------------------------
    def train_samples(self, global_batch: int) -> int:
        train = self.pieces().train
        return batches.length(train[0] if isinstance(train, tuple) else train) if isinstance(train, (tuple, Mapping)) \
            else len(train)

    def materialize(self, device: str, global_batch: int) -> Data:
        p = self.pieces()
        test_x = test_y = None
        if p.test is not None:
            test_x, test_y = _in_memory(p.test)
            test_x, test_y = batches.to(test_x, device), batches.to(test_y, device)
        if isinstance(p.train, (tuple, Mapping)):
            x, y = _in_memory(p.train)
            kind = "a dict of tensors" if isinstance(p.train, Mapping) else "tensors"
            return Data(batches.to(x, device), batches.to(y, device), test_x, test_y,
                        meta={"source": f"{self.ref}: {kind}", "train_samples": batches.length(x)})
        return Data(None, None, test_x, test_y, train_set=p.train,
                    meta={"source": f"{self.ref}: {type(p.train).__name__} through a DataLoader",
                          "train_samples": len(p.train)})


def _in_memory(data) -> tuple[Any, Any]:
    """(inputs, targets or None) of data given as (inputs, targets), a dict of tensors, or a Dataset (read into
    memory once)."""
    if isinstance(data, tuple):
        return data
    if isinstance(data, Mapping):
        return dict(data), None
    stacked = _stack(data)
    return (dict(stacked), None) if isinstance(stacked, Mapping) else tuple(stacked)


def from_function(fn: Callable, ref: str) -> type[FunctionWorkload]:
    """A Workload class for the workload function `fn` (loaded from `ref`), its options from its signature."""
    hyper = {**DEFAULTS, **(getattr(fn, "__compare_workload__", None) or {})}
    doc = inspect.getdoc(fn) or ""
    attrs = {
        "name": hyper["name"] or fn.__name__, "summary": hyper["summary"] or (doc.split("\n\n")[0].replace("\n", " ")
                                                                             or f"{fn.__name__} from {ref}"),
        "global_batch": hyper["global_batch"], "base_lr": hyper["lr"], "base_batch": hyper["global_batch"],
        "steps": hyper["steps"], "warmup": hyper["warmup"], "seed": hyper["seed"], "target": hyper["target"],
        "eval_every": hyper["eval_every"], "max_steps_to_target": hyper["max_steps_to_target"],
        "equiv_steps": hyper["equiv_steps"], "equiv_tolerance": hyper["equiv_tolerance"],
        "max_grad_norm": hyper["max_grad_norm"],
        "batch_dependence": hyper["batch_dependence"], "fn": staticmethod(fn), "ref": ref, "made": {},
        "Options": _options(fn, ref, _arg_docs(doc)), "__module__": fn.__module__,
        "__doc__": doc,
    }
    if hyper["metric_name"]:
        attrs["metric_name"] = hyper["metric_name"]
    _check_hyper(hyper, ref)
    name = f"Function_{fn.__name__}"
    try:
        return type(name, (FunctionWorkload,), attrs)
    except TypeError as exc:  # __init_subclass__'s checks (a target without eval_every, ...), by the class's name
        raise BadReference(f"workload {ref}: {str(exc).removeprefix(f'workload {name}').lstrip(': ')}") from None


_WHOLE = {"global_batch": 1, "steps": 1, "warmup": 0, "equiv_steps": 0, "seed": None, "eval_every": 1,
          "max_steps_to_target": 1}
"""The hyperparameters that are whole numbers, and the least each may be (None: any); as the command line's
--global-batch, --steps, --warmup and --equiv-steps are bounded."""
_POSITIVE = {"lr": "the learning rate", "equiv_tolerance": "the equivalence check's tolerance"}
"""The hyperparameters that are finite numbers above 0."""


def _check_hyper(hyper: dict[str, Any], ref: str) -> None:
    """BadReference for a @workload(...) value no run can use: a negative warm-up was run as -1 steps, a NaN
    tolerance failed every row's equivalence check, a NaN learning rate diverged every row."""
    import math

    for key, least in _WHOLE.items():
        value = hyper[key]
        if value is None and key in ("eval_every", "max_steps_to_target"):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or (least is not None and value < least):
            at_least = "" if least is None else f" of at least {least}"
            raise BadReference(f"workload {ref}: @workload({key}=...) must be a whole number{at_least}, got {value!r}")
    for key, what in _POSITIVE.items():
        value = hyper[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise BadReference(f"workload {ref}: @workload({key}=...) must be a number above 0 ({what}), got "
                               f"{value!r}")
    target = hyper["target"]
    if target is not None and (isinstance(target, bool) or not isinstance(target, (int, float))
                               or not math.isfinite(target)):
        raise BadReference(f"workload {ref}: @workload(target=...) must be a number (the metric to reach) or None, "
                           f"got {target!r}")


_SIMPLE = (bool, int, float, str)


def _options(fn: Callable, ref: str, docs: dict[str, str]) -> type:
    """The Options dataclass of a workload function: one field per parameter, typed by its annotation (or its
    default's type), the parameter's line of the docstring's Args: section as its documentation."""
    try:
        sig = inspect.signature(fn, eval_str=True)
    except (NameError, TypeError, SyntaxError):
        sig = inspect.signature(fn)
    fields = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.default is p.empty:
            raise BadReference(f"workload {ref}: parameter '{p.name}' has no default; every parameter of a workload "
                               f"function is an option (-o {p.name}=VALUE) and needs a default")
        tp = p.annotation if p.annotation is not p.empty and not isinstance(p.annotation, str) else None
        if tp is None or not _supported(tp):
            tp = type(p.default) if type(p.default) in _SIMPLE else (str | None if p.default is None else None)
        if tp is None:
            raise BadReference(f"workload {ref}: parameter '{p.name}' defaults to a {type(p.default).__name__}; an "
                               f"option must be a bool, int, float, str or Literal (it is typed on the command line)")
        fields.append((p.name, tp, dataclasses.field(default=p.default)))
    cls = dataclasses.make_dataclass("Options", fields)
    cls.__doc__ = "Parameters of the workload function."
    cls.__field_docs__ = docs  # what options.attribute_docs reads where no source holds attribute docstrings
    return cls


def _supported(tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return True
    if origin in (typing.Union, types.UnionType):
        return all(a is type(None) or a in _SIMPLE for a in typing.get_args(tp))
    return tp in _SIMPLE


def _arg_docs(doc: str) -> dict[str, str]:
    """{parameter: its description} from a Google-style `Args:` section."""
    out: dict[str, str] = {}
    section = re.search(r"^(?:Args|Arguments|Parameters):\s*\n((?:[ \t]+.*\n?|\s*\n)+)", doc, re.M)
    if not section:
        return out
    current = None
    for line in section.group(1).splitlines():
        m = re.match(r"\s+(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)", line)
        if m and (current is None or len(line) - len(line.lstrip()) <= out.get("_indent", 99)):
            current = m.group(1)
            out[current] = m.group(2).strip()
            out["_indent"] = len(line) - len(line.lstrip())
        elif current and line.strip():
            out[current] += " " + line.strip()
    out.pop("_indent", None)
    return out


def _as_pieces(got: Any, ref: str) -> Pieces:
    """The function's result as checked Pieces; BadReference naming what is wrong."""
    import torch

    if isinstance(got, dict):
        unknown = sorted(set(got) - set(PIECES))
        if unknown:
            raise BadReference(f"workload {ref} returned unknown piece(s) {', '.join(map(repr, unknown))}; valid "
                               f"pieces: {', '.join(PIECES)}")
        missing = [k for k in ("model", "train") if k not in got]
        if missing:
            raise BadReference(f"workload {ref} returned no {' and no '.join(missing)}; it must return at least "
                               f"model and train")
        got = Pieces(**got)
    if not isinstance(got, Pieces):
        kind = type(got).__name__
        what = "None" if got is None else f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind}"
        raise BadReference(f"workload {ref} returned {what}; return workloads.Pieces(model=..., "
                           f"train=...) or a dict with those keys")
    if not (callable(got.model) or isinstance(got.model, torch.nn.Module)):
        raise BadReference(f"workload {ref}: its model is a {type(got.model).__name__}; give a torch.nn.Module or a "
                           f"function that returns one")
    _check_data(got.train, "train", ref)
    if got.test is not None:
        _check_data(got.test, "test", ref)
    if isinstance(got.train, list):  # (inputs, targets) given as a list
        got.train = tuple(got.train)
    if isinstance(got.test, list):
        got.test = tuple(got.test)
    for key in ("loss", "metric", "optimizer", "units", "count"):
        if getattr(got, key) is not None and not callable(getattr(got, key)):
            raise BadReference(f"workload {ref}: its {key} is a {type(getattr(got, key)).__name__}, not a function")
    tokens = got.tokens_per_sample
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
        raise BadReference(f"workload {ref}: its tokens_per_sample must be a whole number of at least 1 (a sample's "
                           f"tokens), got {tokens!r}")
    return got


def _check_data(data: Any, what: str, ref: str) -> None:
    import torch

    if isinstance(data, Mapping):
        _check_dict(data, f"its {what} dict", ref)
        return
    if isinstance(data, (tuple, list)) and not isinstance(data, torch.utils.data.Dataset):
        if len(data) != 2 or not (isinstance(data[1], torch.Tensor)
                                  and (isinstance(data[0], torch.Tensor) or isinstance(data[0], Mapping))):
            several = (len(data) == 2 and isinstance(data[0], (tuple, list))) or len(data) > 2  # (a, b, y) too
            raise BadReference(f"workload {ref}: its {what} data must be (inputs, targets) tensors, a dict of tensors "
                               f"or a torch.utils.data.Dataset; got a {type(data).__name__} of "
                               f"{', '.join(type(t).__name__ for t in data) or 'nothing'}"
                               + ("; give several inputs as a dict of tensors, ({'a': xa, 'b': xb}, targets), and the "
                                  "model is called model(a=..., b=...)" if several else ""))
        if isinstance(data[0], Mapping):
            _check_dict(data[0], f"its {what} inputs", ref)
        if batches.length(data[0]) != len(data[1]):
            raise BadReference(f"workload {ref}: its {what} inputs and targets differ in length "
                               f"({batches.length(data[0])} and {len(data[1])})")
        return
    if not isinstance(data, torch.utils.data.Dataset) or not hasattr(data, "__len__"):
        raise BadReference(f"workload {ref}: its {what} data is a {type(data).__name__}; give (inputs, targets) "
                           f"tensors, a dict of tensors or a map-style torch.utils.data.Dataset (with __len__ and "
                           f"__getitem__)")
    if len(data) == 0:
        raise BadReference(f"workload {ref}: its {what} Dataset is empty")
    item = data[0]
    if isinstance(item, Mapping) and item and all(isinstance(v, (torch.Tensor, int, float)) for v in item.values()):
        return
    inputs = item if isinstance(item, Mapping) else item[0] if isinstance(item, (tuple, list)) and item else None
    if isinstance(inputs, Mapping) and inputs:
        wrong = [f"{k!r} ({type(v).__name__})" for k, v in inputs.items()
                 if not isinstance(v, (torch.Tensor, int, float) if inputs is item else torch.Tensor)]
        if wrong:
            nested = [k for k, v in inputs.items() if isinstance(v, (Mapping, tuple, list))]
            raise BadReference(f"workload {ref}: item 0 of its {what} Dataset holds {', '.join(wrong)}, not a tensor; "
                               f"every field of a dict item must be a tensor ("
                               + (f"flatten a nested field into fields of their own: those of {nested[0]!r} as "
                                  f"'{nested[0]}_a', '{nested[0]}_b', ...; " if nested else "")
                               + "tokenize text in __getitem__, or leave the field out)")
    if not (isinstance(item, (tuple, list)) and len(item) == 2
            and (isinstance(item[0], torch.Tensor)
                 or (isinstance(item[0], Mapping) and item[0]
                     and all(isinstance(v, torch.Tensor) for v in item[0].values())))
            and isinstance(item[1], (torch.Tensor, int, float))):
        shown = (f"({', '.join(type(i).__name__ for i in item)})" if isinstance(item, (tuple, list))
                 else batches.describe(item) if isinstance(item, Mapping) else type(item).__name__)
        several = isinstance(item, (tuple, list)) and item and (isinstance(item[0], (tuple, list)) or len(item) > 2)
        raise BadReference(f"workload {ref}: item 0 of its {what} Dataset is {shown}, not (input tensor, target "
                           f"tensor or number) nor a dict of tensors; " + (
                               "give several inputs as a dict of tensors, ({'a': xa, 'b': xb}, target), and the model "
                               "is called model(a=..., b=...)" if several else
                               "return tensors from __getitem__ (torch.as_tensor)"))


def _check_dict(data: Mapping, what: str, ref: str) -> None:
    """A dict batch: named tensors, all with the same number of samples."""
    import torch

    if not data:
        raise BadReference(f"workload {ref}: {what} is empty; give its tensors by name (input_ids, labels, ...)")
    wrong = [f"{k!r} ({type(v).__name__})" for k, v in data.items() if not isinstance(v, torch.Tensor)]
    if wrong:
        nested = [k for k, v in data.items() if isinstance(v, Mapping)]
        raise BadReference(f"workload {ref}: {what} must hold tensors; {', '.join(wrong)} is not one"
                           + (f"; flatten a nested dict into tensors of their own (those of {nested[0]!r} as "
                              f"'{nested[0]}_a', '{nested[0]}_b', ...)" if nested else ""))
    scalars = [k for k, v in data.items() if not v.dim()]
    if scalars:
        raise BadReference(f"workload {ref}: {what} holds 0-dimensional tensors ({', '.join(scalars)}), which have no "
                           f"samples to split between the ranks; give one value per sample (e.g. "
                           f"torch.full((n,), value)), or keep a constant in the model or the loss")
    sizes = {k: len(v) for k, v in data.items()}
    if len(set(sizes.values())) > 1:
        raise BadReference(f"workload {ref}: the tensors of {what} differ in length (samples first): "
                           f"{', '.join(f'{k} {n}' for k, n in sizes.items())}")


def _stack(dataset):
    """A Dataset's items as two tensors (the evaluation set, read into memory once)."""
    from torch.utils.data import default_collate

    return default_collate([dataset[i] for i in range(len(dataset))])


def _copied(model):
    """A deep copy of the model a workload returned as built, with the hooks on its parameters too: deepcopy copies
    a module's own hooks but not a tensor's (param.register_hook, register_post_accumulate_grad_hook), so a copy
    trained without the user's gradient hooks, on every row and in the single process alike."""
    twin = copy.deepcopy(model)
    mine = dict(twin.named_parameters(remove_duplicate=False))
    done = set()  # a parameter shared by two modules (tied weights) is one tensor: its hooks once
    for name, p in model.named_parameters(remove_duplicate=False):
        q = mine.get(name)
        if q is None or q is p or id(q) in done:
            continue
        done.add(id(q))
        for hook in (getattr(p, "_backward_hooks", None) or {}).values():
            q.register_hook(hook)
        for hook in (getattr(p, "_post_accumulate_grad_hooks", None) or {}).values():
            q.register_post_accumulate_grad_hook(hook)
    return twin
