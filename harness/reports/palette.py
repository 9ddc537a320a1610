"""One colour per backend in every figure of every report: the row's adapter (or a comm backend's adapter) picks a
colour by its place in the adapter registry, so ddp is the same colour in throughput.png, loss.png, busbw.png and
every scale plot, in every run. Knob variants of one adapter share its colour and are told apart by line style."""

from __future__ import annotations

import zlib

COLOURS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C", "#CCB974",
           "#64B5CD")
"""seaborn's "deep" palette (matplotlib's tab10 in softer tones)."""
STYLES = ("-", "--", "-.", ":")


def _adapter(label: str) -> str:
    import adapters

    base = label.split(":")[0].split(" ")[0]
    if base not in adapters.names() and base in adapters.comm_backends():
        base = adapters.comm_backend_adapter(base)
    return base


def colour(label: str) -> str:
    """The colour of a row label ("ddp", "deepspeed:zero_stage=3") or comm backend ("torch")."""
    import adapters

    base = _adapter(label)
    names = adapters.names()
    index = names.index(base) if base in names else len(names) + zlib.crc32(base.encode()) % len(COLOURS)
    return COLOURS[index % len(COLOURS)]


def styles(labels: list[str]) -> dict[str, str]:
    """Line style per label: the first row of an adapter solid, its knob variants dashed, dash-dotted, dotted."""
    seen: dict[str, int] = {}
    out = {}
    for label in labels:
        base = _adapter(label)
        out[label] = STYLES[seen.get(base, 0) % len(STYLES)]
        seen[base] = seen.get(base, 0) + 1
    return out
