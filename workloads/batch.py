"""Batches and outputs as the ecosystem writes them, in one place.

A batch is what a workload's data gives for a list of sample indices: `(inputs, targets)` tensors, or a dict of
tensors (Hugging Face's `input_ids`, `attention_mask`, `labels`), whose targets are the dict itself; the inputs of
`(inputs, targets)` may be a dict too. A model is called `model(**inputs)` when its inputs are a dict (as the
Trainer calls it) and `model(inputs)` otherwise. An output is a tensor, a dict, a `ModelOutput` (a dict that is
also a dataclass) or a tuple of those.

Every place that indexes, moves, casts, feeds or compares batches and outputs (the rank's steps, the evaluation,
the parent's checks before a launch, FLOP counting) goes through these functions, so a new shape is accepted
everywhere at once or nowhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def _is_tensor(obj: Any) -> bool:
    import torch

    return isinstance(obj, torch.Tensor)


def take(part: Any, idx: Any) -> Any:
    """The samples `idx` (an index tensor or a slice) of a tensor or of every tensor of a dict; None stays None."""
    if part is None:
        return None
    if isinstance(part, Mapping):
        return {k: take(v, idx) for k, v in part.items()}
    return part[idx]


def apply(fn: Callable, part: Any) -> Any:
    """`fn` applied to every tensor of a tensor, dict, tuple or list (other values kept as they are)."""
    if _is_tensor(part):
        return fn(part)
    if isinstance(part, Mapping):
        return {k: apply(fn, v) for k, v in part.items()}
    if isinstance(part, (tuple, list)):
        return type(part)(apply(fn, v) for v in part)
    return part


def to(part: Any, device: Any, non_blocking: bool = False) -> Any:
    """A batch (or part of one) on `device`."""
    return apply(lambda t: t.to(device, non_blocking=non_blocking), part)


def length(part: Any) -> int:
    """Samples in a batch part: the first dimension of its tensor, or of a dict's first tensor."""
    if isinstance(part, Mapping):
        for value in part.values():
            if _is_tensor(value):
                return len(value)
        raise ValueError("a batch given as a dict must hold at least one tensor")
    return len(part)


def call(model: Any, inputs: Any) -> Any:
    """The model's forward on `inputs`: `model(**inputs)` for a dict (a Hugging Face batch), else `model(inputs)`."""
    with _traced_on_meta(inputs):
        return model(**inputs) if isinstance(inputs, Mapping) else model(inputs)


def _traced_on_meta(inputs: Any):
    """On the meta device (counting FLOPs and memory, checking a user's model before launching: never training),
    transformers' mask preparation asks whether the batch packs several sequences into one row, an `.item()` a meta
    tensor cannot answer. It is answered as an unpacked batch answers it on a real device: no (one sequence a row),
    so the mask is skipped for SDPA's `is_causal` and grouped-query attention reaches the kernel unexpanded, as in
    training. (Telling the mask builders they are being traced instead, as under torch.compile, built an explicit
    mask and expanded key and value to every head: a GQA Llama's activations came out larger than a run's; an older
    transformers without that question is still told so.) Real tensors, or transformers not imported, change
    nothing."""
    import contextlib
    import sys

    masks = sys.modules.get("transformers.masking_utils")
    if masks is None or not any(t.is_meta for _, t in leaves(inputs)):
        return contextlib.nullcontext()
    from unittest import mock

    if hasattr(masks, "find_packed_sequence_indices"):
        return mock.patch.object(masks, "find_packed_sequence_indices", lambda *args, **kwargs: None)
    return mock.patch.object(masks, "is_tracing", lambda *args, **kwargs: True)


def field(output: Any, name: str) -> Any:
    """`output[name]` of a dict or ModelOutput (`output.name` of another object), or None: how the Trainer reads
    `outputs["loss"]`. A tensor has no fields."""
    if _is_tensor(output):
        return None
    if isinstance(output, Mapping):
        return output.get(name)
    return getattr(output, name, None)


def _plain_sequence(output: Any) -> bool:
    """A tuple or list without named fields (a namedtuple's `loss` is read by name)."""
    return isinstance(output, (tuple, list)) and not hasattr(output, "_fields")


def _leading_loss(output: Any) -> bool:
    """Whether a plain tuple or list starts with a loss: a floating tensor of one value, as a transformers model
    returns (loss, logits, ...) with return_dict=False when given labels (the Trainer reads `outputs[0]`)."""
    return (_plain_sequence(output) and len(output) > 0 and _is_tensor(output[0])
            and output[0].is_floating_point() and output[0].dim() == 0)


def own_loss(output: Any) -> Any:
    """The loss a model returned in its output, or None: its `loss` field, or the first of a plain tuple that starts
    with a loss (_leading_loss). DataParallel over several GPUs gathers one loss per replica into a vector: their
    mean, as the Trainer takes it (each replica's batch is an equal share)."""
    loss = output[0] if _leading_loss(output) else field(output, "loss")
    return loss.mean() if _is_tensor(loss) and loss.dim() else loss


def logits(output: Any) -> Any:
    """The tensor an accuracy is read from: the output itself, or its `logits`; of a plain tuple, the tensor after
    its leading loss ((loss, logits, ...)) or its only one ((logits,)); None for anything else (a tuple of logits and
    another output: which is which is the user's to say)."""
    if _is_tensor(output):
        return output
    if _plain_sequence(output):
        rest = output[1:] if _leading_loss(output) else output if len(output) == 1 else ()
        return rest[0] if rest and _is_tensor(rest[0]) and rest[0].dim() else None
    found = field(output, "logits")
    return found if _is_tensor(found) else None


def describe(obj: Any) -> str:
    """A short name for a batch or output's kind, for messages ("a CausalLMOutputWithPast", "a dict of 3 tensors")."""
    if _is_tensor(obj):
        return f"a tensor of shape {tuple(obj.shape)}"
    if isinstance(obj, Mapping):
        kind = "dict" if type(obj) is dict else type(obj).__name__
        return f"a {kind} of {', '.join(map(str, obj.keys())) or 'nothing'}"
    if _plain_sequence(obj):
        parts = [f"a tensor {tuple(o.shape)}" if _is_tensor(o) else type(o).__name__ for o in obj[:4]]
        return (f"a {type(obj).__name__} of {', '.join(parts) or 'nothing'}"
                + (f" and {len(obj) - 4} more" if len(obj) > 4 else ""))
    return f"a {type(obj).__name__}"


def leaves(obj: Any) -> list:
    """The tensors of an output in a fixed order (dict keys in order, then sequence items), each with its path."""
    if _is_tensor(obj):
        return [("", obj)]
    if isinstance(obj, Mapping):
        return [(f"{k}{'.' + p if p else ''}", t) for k, v in obj.items() for p, t in leaves(v)]
    if isinstance(obj, (tuple, list)):
        return [(f"{i}{'.' + p if p else ''}", t) for i, v in enumerate(obj) for p, t in leaves(v)]
    return []


def equal(a: Any, b: Any) -> bool:
    """Whether two outputs hold the same tensors (same structure, same values: torch.equal), whatever their kind."""
    import torch

    la, lb = leaves(a), leaves(b)
    return ([p for p, _ in la] == [p for p, _ in lb]
            and all(x.shape == y.shape and torch.equal(x, y) for (_, x), (_, y) in zip(la, lb)))
