"""`compare diff`: the same rows of two runs as per-row ratios with intervals and one outcome each."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness.commands.common import console, fail, read_run
from harness.core.argv import cli
from harness.core.requests import typed_path


@dataclass
class DiffRequest:
    """`compare diff`."""

    run_a: Path | None = field(default=None, metadata=cli(argument=True, required=True, parser=typed_path))
    """The first run's directory (A, the reference)."""
    run_b: Path | None = field(default=None, metadata=cli(argument=True, required=True, parser=typed_path))
    """The second run's directory (B, compared with A)."""
    margin: str | None = field(default=None, metadata=cli("--margin"))
    """Equivalence margin, e.g. 5% (the default): a row whose B / A interval (90%) lies within it either way is
    equivalent in the two runs."""


def diff(req: DiffRequest) -> None:
    """The rows measured in both runs, B against A: per row the ratio of samples/s with its 95% interval and
    whether B is faster, slower, equivalent within the margin or not resolved (Holm-adjusted over the rows);
    another torch, framework version, knob or machine. Writes nothing."""
    from harness.core.errors import BadInput
    from harness.core.requests import parse_precision
    from harness.core.stats import DEFAULT_MARGIN
    from harness.reports import run_diff as diffs

    try:
        margin = DEFAULT_MARGIN if req.margin is None else parse_precision(req.margin, "--margin")
    except BadInput as exc:
        fail(str(exc))
    written_by = "`compare run`"
    a, b = read_run(req.run_a, written_by), read_run(req.run_b, written_by)
    same = _same_run(req.run_a, req.run_b, a, b)
    if same:
        fail(f"A and B are one run ({same}): every row would be 1.000x, and that says nothing; give another run as B "
             f"(the same command again, or another torch, knob or machine)")
    try:
        result = diffs.compare(a, b, margin, names=("A", "B"))
    except diffs.NotComparable as exc:
        fail(str(exc))
    if not result["rows"]:
        fail(f"no row was measured in both runs (A: {', '.join(result['only_a']) or 'none'}; B: "
             f"{', '.join(result['only_b']) or 'none'})")
    console.print(f"A = {req.run_a}\nB = {req.run_b}", soft_wrap=True, markup=False)
    for line in diffs.lines(result):
        console.print(line, soft_wrap=True, markup=False)


def _same_run(path_a: Path, path_b: Path, a: list[dict], b: list[dict]) -> str | None:
    """How A and B are one run, in words, or None: one directory (by any path), or two holding the same launches
    (a copy: the same rows, repeats, start times and figures)."""
    try:
        if path_a.resolve().samefile(path_b.resolve()):
            return f"{path_a} is {path_b}" if str(path_a) != str(path_b) else f"{path_a} twice"
    except OSError:
        pass

    def launches(records):
        return sorted((str(r.get("label")), int(r.get("repeat", 0)), r.get("launch_wall") or 0.0,
                       r.get("samples_per_s") or 0.0) for r in records)

    if launches(a) == launches(b):
        return f"{path_b} holds the same launches as {path_a}: a copy"
    return None
