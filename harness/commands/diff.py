"""`compare diff`: the same rows of two runs (or of two joins of runs) as per-row ratios with intervals and one outcome
each."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness.commands.common import console, fail
from harness.ground.argv import cli
from harness.core.requests import typed_path


@dataclass
class DiffRequest:
    """`compare diff`."""

    run_a: Path | None = field(default=None, metadata=cli(argument=True, required=True, parser=typed_path))
    """The first run's directory (A, the reference), or a join of runs of it (`compare join`)."""
    run_b: Path | None = field(default=None, metadata=cli(argument=True, required=True, parser=typed_path))
    """The second run's directory (B, compared with A), or a join of runs of it."""
    margin: str | None = field(default=None, metadata=cli("--margin"))
    """Equivalence margin, e.g. 5% (the default): a row whose B / A interval (90%) lies within it either way is
    equivalent in the two runs."""
    across_machines: bool = field(default=False, metadata=cli("--across-machines", negatable=False))
    """Compare runs made on different machines (CPU model, cores or GPUs): refused without it, since the ratios then
    compare the machines."""


def _side(directory: Path) -> list[tuple[str, list[dict]]]:
    """A side's sessions: a run directory is one, a join (sessions.json) each run it names."""
    from harness.core import joins
    from harness.ground.record import read_results, records_file

    found = joins.manifest(directory) if directory.is_dir() else None
    if found is not None and records_file(directory) is None:
        return [(name, records) for name, records in joins.load(directory)]
    if found is not None:  # a run that joined earlier ones: its sessions, itself among them
        return joins.load(directory, own=read_results(directory, ("run",)))
    return [(str(directory), read_results(directory, ("run",)))]


def diff(req: DiffRequest) -> None:
    """The rows measured in both, B against A: per row the ratio of samples/s with its 95% interval and whether B is
    faster, slower, equivalent within the margin or not resolved (Holm-adjusted over the rows); another torch,
    framework version or knob. Two single runs cannot separate a change from run-to-run variation, and the report
    says so; with two runs or more joined a side (`compare join`), each row's sessions are the unit. Writes
    nothing."""
    from harness.core.checks import parse_precision
    from harness.ground.stats import DEFAULT_MARGIN
    from harness.reports import run_diff as diffs

    margin = DEFAULT_MARGIN if req.margin is None else parse_precision(req.margin, "--margin")
    a, b = _side(req.run_a), _side(req.run_b)
    same = _same_run(req.run_a, req.run_b, [r for _, rs in a for r in rs], [r for _, rs in b for r in rs])
    if same:
        fail(f"A and B are one run ({same}): every row would be 1.000x, and that says nothing; give another run as B "
             f"(the same command again, or another torch, knob or machine)")
    shared = _shared_session(a, b)
    if shared:
        fail(f"A and B share a run ({shared}): a diff takes its two sides as independent, and launches on both sides "
             f"would count twice; give runs that are not in the other side's join")
    result = diffs.compare(a, b, margin, names=("A", "B"), across_machines=req.across_machines)
    if not result["rows"]:
        fail(f"no row was measured in both runs (A: {', '.join(result['only_a']) or 'none'}; B: "
             f"{', '.join(result['only_b']) or 'none'})")
    console.print(f"A = {req.run_a}\nB = {req.run_b}", soft_wrap=True, markup=False)
    for line in diffs.lines(result):
        console.print(line.replace("**", ""), soft_wrap=True, markup=False)


def _shared_session(a: list[tuple[str, list[dict]]], b: list[tuple[str, list[dict]]]) -> str | None:
    """A run that is a session of both sides (a join and one of its own runs), in words, or None."""
    from harness.core.joins import launches

    held = {launches(records): name for name, records in a}
    for name, records in b:
        if launches(records) in held:
            return f"{name} in B holds the launches of {held[launches(records)]} in A"
    return None


def _same_run(path_a: Path, path_b: Path, a: list[dict], b: list[dict]) -> str | None:
    """How A and B are one run, in words, or None: one directory (by any path), or two holding the same launches
    (a copy: the same rows, repeats, start times and figures)."""
    try:
        if path_a.resolve().samefile(path_b.resolve()):
            return f"{path_a} is {path_b}" if str(path_a) != str(path_b) else f"{path_a} twice"
    except OSError:
        pass

    from harness.core.joins import launches

    if launches(a) == launches(b):
        return f"{path_b} holds the same launches as {path_a}: a copy"
    return None
