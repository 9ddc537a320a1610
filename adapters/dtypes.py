"""The dtypes a backend holds, in the short names its records and reports use ("fp32", "bf16+fp32")."""

from __future__ import annotations

SHORT_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64"}


def dtype_names(held) -> str:
    """The distinct dtypes of `held` (tensors, or dtypes) as short names joined by "+" ("fp32", "bf16+fp32"); "none"
    for nothing."""
    names = sorted({SHORT_DTYPES.get(name, name)
                    for name in (str(getattr(t, "dtype", t)).removeprefix("torch.") for t in held)})
    return "+".join(names) or "none"


def optimizer_state(optimizer) -> list:
    """Every state tensor of a torch optimizer that has a size (Adam's moments; not its 0-d step counters)."""
    return [v for state in optimizer.state.values() for v in state.values()
            if hasattr(v, "dtype") and getattr(v, "dim", lambda: 0)() > 0]
