"""One colour per backend in every figure of every report: the row's adapter (or a comm backend's adapter) picks a
colour by its place in the adapter registry as the run recorded it (the records' `legend`, adapters.legend), so ddp
is the same colour in throughput.png, loss.png, busbw.png and every scale plot, in every run, and an old run
re-renders in its own colours whatever the registry has become. Records older than `legend` fall back to the live
registry. Knob variants of one adapter share its colour and are told apart by line style."""

from __future__ import annotations

import zlib
from typing import Any

COLOURS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C", "#CCB974",
           "#64B5CD")
"""seaborn's "deep" palette (matplotlib's tab10 in softer tones)."""
STYLES = ("-", "--", "-.", ":")

Legend = dict[str, dict[str, Any]]


def legend_of(records: list[dict[str, Any]]) -> Legend:
    """The legend a run recorded (every record of a run carries the same one); the live registry's for records
    written before `legend` existed."""
    for rec in records:
        if rec.get("legend"):
            return rec["legend"]
    import adapters

    return adapters.legend()


def unplaced(legend: Legend) -> int:
    """The first place after every adapter's: where a label the legend does not know goes."""
    return len({e["adapter"] for e in legend.values()})


def _entry(label: str, legend: Legend) -> tuple[str, int | None]:
    base = label.split(":")[0].split(" ")[0]
    entry = legend.get(base)
    return (entry["adapter"], entry["place"]) if entry else (base, None)


def colour(label: str, legend: Legend) -> str:
    """The colour of a row label ("ddp", "deepspeed:zero_stage=3") or comm backend ("torch")."""
    base, place = _entry(label, legend)
    index = place if place is not None else unplaced(legend) + zlib.crc32(base.encode()) % len(COLOURS)
    return COLOURS[index % len(COLOURS)]


def styles(labels: list[str], legend: Legend) -> dict[str, str]:
    """Line style per label: the first row of an adapter solid, its knob variants dashed, dash-dotted, dotted."""
    seen: dict[str, int] = {}
    out = {}
    for label in labels:
        base = _entry(label, legend)[0]
        out[label] = STYLES[seen.get(base, 0) % len(STYLES)]
        seen[base] = seen.get(base, 0) + 1
    return out
