"""matplotlib, where it is installed: every figure of every report goes through `pyplot()`, so a machine without
matplotlib (a lent GPU image, a minimal container) still gets its report.md, whose plots section says why it has
none, instead of losing the report of a run that measured everything."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.ground import outdir

NO_PLOTS = ("No plots: matplotlib is not installed where this report was written (`pip install matplotlib`, then "
            "`compare report DIR` draws them from records.jsonl).")
ASKED_NONE = ("No plots: the run was asked for none (--no-plots); `compare report DIR` draws them from "
              "records.jsonl.")
_off = False
"""Set while a command asked for no plots (--no-plots)."""


@contextmanager
def off(skip: bool = True):
    """While inside (when `skip`): no figure is drawn, and each report says why (ASKED_NONE)."""
    global _off
    before, _off = _off, skip or _off
    try:
        yield
    finally:
        _off = before


def why_none() -> str:
    """What a report without plots says in their place."""
    return ASKED_NONE if _off else NO_PLOTS


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None without matplotlib (or while plots are off)."""
    if _off:
        return None
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def available() -> bool:
    if _off:
        return False
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def save(fig, path: Path, dpi: int = 110, rect: tuple[float, float, float, float] | None = None) -> Path:
    """The end of every figure of every report: laid out (within `rect` of the figure, where notes or a legend sit
    below it), written to `path` (harness/ground/outdir.py: save_figure, atomic and paletted) and closed."""
    if rect is None:
        fig.tight_layout()
    else:
        fig.tight_layout(rect=rect)
    outdir.save_figure(fig, path, dpi)
    pyplot().close(fig)
    return path


def run_title(records: list[dict[str, Any]]) -> str:
    """"digits, world size 2, 2-core CPU": what a run's figures are titled after (the GPU's name on a GPU)."""
    r0 = records[0]
    return f"{r0['workload']}, world size {r0['world_size']}, {r0['env']['cpu_cores_usable']}-core " + (
        r0["env"]["gpus"][0] if r0["env"].get("gpus") else "CPU")


def scope(sessions: int | None = None) -> str:
    """What a run's figures show, said on each (a second title line) and over them in report.md: one run's own
    launches, or in a run that joined earlier sessions this session's alone. A join run's pairs plot once showed "ddp
    1.34x ▲ spawn" under a report whose verdict over 4 sessions left that pair not resolved, with no word that the
    plot was one session's."""
    if sessions:
        return f"this session alone; the verdict over {sessions} sessions is in report.md"
    return "this run alone: its own launches"


def caption(sessions: int | None = None) -> str:
    """The line under report.md's "## Plots": what every plot below covers (`scope`)."""
    if sessions:
        return (f"Every plot shows this session alone, its own launches: the verdict over the {sessions} sessions is "
                "the one above, in words and tables.")
    return ("Every plot shows this run alone, its own launches: its intervals count the variation between them, not "
            "between runs at other times.")


def of_run(records: list[dict[str, Any]], rows: list[dict[str, Any]]) -> tuple[Any, list[dict[str, Any]], str] | None:
    """(pyplot, the measured rows, the run's title) for a run's figures; None where there is nothing to draw (no
    matplotlib, plots off, no row measured)."""
    plt = pyplot()
    measured = [r for r in rows if r["measured"]]
    if plt is None or not measured:
        return None
    return plt, measured, run_title(records)


def not_ranked(records: list[dict[str, Any]]) -> dict[str, str]:
    """{row: what its bar must say} for the rows the verdict leaves out of its ranking, where they ran on fewer
    devices than the world size ("dp, 1 of 2 devices: not ranked"): their bar, the shortest epoch of a CPU run (one
    process over the whole batch), would be read as a backend's win where it is not a data-parallel one."""
    from harness.ground.record import fewer_devices

    return {r["label"]: f"{fewer_devices(r)} of {r['world_size']} devices: not ranked" for r in records
            if r.get("label") and fewer_devices(r) is not None}


LABEL_WIDTH = 26
"""Characters of a row's label on one line of a figure: a longer one (a row with several knobs,
`fsdp:param_dtype=bf16:reshard_after_forward=false`) squeezed the axes of a 7-inch figure until its own value
text fell off the canvas."""


def wrap_label(label: str, width: int = LABEL_WIDTH) -> str:
    """A row's label on as many lines as it needs of at most `width` characters, broken after a knob's colon or
    before a bracket (its precision), never inside a word unless a single part is longer than a line."""
    import re

    if len(label) <= width:
        return label
    parts = [p for p in re.split(r"(?<=:)|(?= [(\[])", label) if p]
    lines, line = [], ""
    for part in parts:
        if line and len(line) + len(part) > width:
            lines.append(line.rstrip())
            line = part.lstrip()
        else:
            line += part
    lines.append(line.rstrip())
    return "\n".join(lines)
