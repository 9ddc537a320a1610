"""`compare diff`: the same rows of two runs (or of two joins of runs) as per-row ratios with intervals and one outcome
each."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness.commands.common import console, fail, malformed
from harness.ground.argv import cli
from harness.core.requests import typed_path


@dataclass
class DiffRequest:
    """`compare diff`."""

    run_a: Path | None = field(default=None, metadata=cli(argument=True, required=True, parser=typed_path))
    """The first run's directory (A, the reference), or a join of runs of it (`compare join`); a run made with
    `compare run --join` is its join, and DIR/records.jsonl that run alone."""
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

    if directory.is_file() and directory.name in ("records.jsonl", "records.jsonl.gz"):
        # a run's own records alone: a run made with `compare run --join` is a join of its sessions as a directory,
        # and its own session is this file
        return [(str(directory.parent), read_results(directory.parent, ("run",)))]
    found = joins.manifest(directory) if directory.is_dir() else None
    if found is not None and records_file(directory) is None:
        return [(name, records) for name, records in joins.load(directory)]
    if found is not None:  # a run that joined earlier ones: its sessions, itself among them
        return joins.load(directory, own=read_results(directory, ("run",)))
    return [(str(directory), read_results(directory, ("run",)))]


def diff(req: DiffRequest) -> None:
    """The rows measured in both, B against A: per row the ratio of samples/s with its 95% interval and whether B is
    faster, slower, equivalent within the margin or not resolved (Holm-adjusted over the rows); another torch,
    framework version or knob; and what each row learned on each side (its check against the single-process
    reference, final loss, metric), saying each that changed. A row of one adapter under another label a side
    (`ddp`, `ddp:sync_bn=true`) is paired with it where it is that adapter's only one. Two single runs cannot separate a change from run-to-run variation, and the report
    says so; with two runs or more joined a side (`compare join`), each row's sessions are the unit. Writes
    nothing."""
    from harness.core.checks import parse_precision
    from harness.ground.stats import DEFAULT_MARGIN
    from harness.reports import MALFORMED
    from harness.reports import run_diff as diffs

    margin = DEFAULT_MARGIN if req.margin is None else parse_precision(req.margin, "--margin")
    try:
        _diff(req, margin, diffs)
    except MALFORMED as exc:  # records of a shape the field check lets through: one line, as report says it
        fail(malformed(f"{req.run_a} and {req.run_b}", exc, "diff", whose="theirs"))


def _diff(req: DiffRequest, margin: float, diffs) -> None:
    from harness.core import joins

    for given in (req.run_a, req.run_b):  # a run still being written: its records are part of a run, as for join
        try:
            joins.unfinished([given.parent] if given.is_file() else
                             joins.session_dirs(given) if given.is_dir() else [given])
        except joins.NotJoinable as exc:
            fail(str(exc).replace("join it when it ends", "diff it when it ends"))
    a, b = _side(req.run_a), _side(req.run_b)
    same = _same_run(req.run_a, req.run_b, a, b)
    if same:
        said, exact = same
        fail(f"A and B are one run ({said}): " + (
            "every row would be 1.000x, and that says nothing" if exact else
            "a diff of a run and a copy of it measures the copy's edit, not a change") +
             "; give another run as B (the same command again, or another torch, knob or machine)")
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
    """A run that is a session of both sides (a join and one of its own runs, or a copy of one), in words, or
    None."""
    from harness.core.joins import copy_of

    for name, records in b:
        for held in a:
            copy = copy_of((f"{held[0]} in A", held[1]), (f"{name} in B", records))
            if copy:
                return copy[0]
    return None


def _same_run(path_a: Path, path_b: Path, a: list[tuple[str, list[dict]]],
              b: list[tuple[str, list[dict]]]) -> tuple[str, bool] | None:
    """How A and B are one run, in words, and whether exactly (every row would be 1.000x), or None: one directory
    (by any path), or a single run a side whose records are copies (the same launches; or some of them, or with
    their figures edited: harness/core/joins.py copy_of)."""
    try:
        if path_a.resolve().samefile(path_b.resolve()):
            return (f"{path_a} is {path_b}" if str(path_a) != str(path_b) else f"{path_a} twice"), True
    except OSError:
        pass

    from harness.core.joins import copy_of

    if len(a) == 1 and len(b) == 1:
        copy = copy_of((str(path_a), a[0][1]), (str(path_b), b[0][1]))
        if copy:
            return f"{copy[0]}: a copy", copy[1]
    return None
