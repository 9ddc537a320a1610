"""`compare predict`: the performance model against what was measured, extrapolated, and against published results."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rich.markup import escape

from harness.commands.common import console, fail, malformed
from harness.ground.argv import cli
from harness.core.requests import PREDICT_TO, typed_path


@dataclass
class PredictRequest:
    """`compare predict`."""

    directories: list[Path] = field(default_factory=list, metadata=cli(argument=True, metavar="DIRECTORY",
                                                                         parser=typed_path))
    """`compare scale` results directories (omit: only the published checks; several: each sweep's predicted vs
    measured, then the model's accuracy across them)."""
    profiles: list[str] = field(default_factory=list, metadata=cli("--profile"))
    """Hardware profile(s) to extrapolate to (default: the sweep's; with several directories, only those given)."""
    to: int | None = field(default=None, metadata=cli("--to"))
    """Largest world size extrapolated to (8, 16, 64, 256, ... up to it; default 1024)."""
    list_profiles: bool = field(default=False, metadata=cli("--list", negatable=False))
    """List the hardware profiles and exit."""
    validate: bool = field(default=False, metadata=cli("--validate", negatable=False))
    """Score the sweeps made with the current model version (pass, fail or undecidable per point, beside the naive
    sum of parts and the world-size-1 step, and the ranking's rho) and list the others as the data the model was
    developed on."""


def predict(req: PredictRequest) -> None:
    """The performance model: predicted vs measured for scale sweeps (and its accuracy over several), extrapolation
    to a hardware profile, and the check against published scaling results."""
    from harness.ground.record import read_results
    from harness.model import calibration, costmodel, hardware, published
    from harness.reports import MALFORMED, check_kind, prediction, scale_report

    if req.list_profiles:
        given = [name for name, on in (("DIRECTORY", req.directories), ("--profile", req.profiles),
                                       ("--to", req.to is not None), ("--validate", req.validate)) if on]
        if given:  # each would be left without a word: --list prints the profiles and nothing else
            fail(f"{' and '.join(given)} {'are' if len(given) > 1 else 'is'} skipped by --list, which only lists the "
                 f"hardware profiles; leave one out")
        for name in hardware.profiles():
            try:
                f = hardware.load_profile(name)
            except hardware.BadProfile as exc:
                console.print(f"{name}: [yellow]cannot be used[/]: {escape(str(exc))}")
                continue
            console.print(f"{name}: {f.device}, {f.devices_per_node} per node, all-reduce busbw "
                          f"{f.intra_busbw_Bps / 1e9:g} GB/s in a node, {f.inter_busbw_Bps / 1e9:g} GB/s across nodes")
        return
    for name in req.profiles:
        problem = hardware.profile_problem(name)
        if problem:
            fail(problem)
    to = PREDICT_TO if req.to is None else req.to
    lo, hi = costmodel.PREDICT_TO
    if not lo <= to <= hi:
        fail(f"--to must be from {lo} to {hi:,} (the extrapolation gives 8, 16, 64, 256, ... workers up to it), "
             f"got {to}")
    profile = list(dict.fromkeys(req.profiles))  # a profile named twice is extrapolated once
    sweeps: dict[Path, tuple[Path, list[dict]]] = {}
    for directory in req.directories:  # every directory is checked before anything is printed
        records = read_results(directory, ("scale",))
        try:
            check_kind(records)
        except ValueError as exc:
            fail(malformed(directory, exc, "predict from"))
        sweeps.setdefault(directory.resolve(), (directory, records))  # a directory named twice counts once
    if req.validate and not sweeps:
        fail("--validate needs the `compare scale` directories to score, e.g. compare predict --validate "
             "results/scale_*")
    if req.validate:
        judged_sweeps = []
        for directory, records in sweeps.values():
            try:
                rows = prediction.predict_sweep(lambda line: None, directory, records, scale_report.table(records),
                                            profile, to, to_profiles=False)
            except MALFORMED as exc:
                fail(malformed(directory, exc, "predict from"))
            judged_sweeps.append((directory, records, rows))
        for line in prediction.validation_lines(judged_sweeps):
            console.print(escape(line), soft_wrap=True)  # one line per sweep, whatever the width
        return
    judged: list[tuple[Path, list[dict], list[dict]]] = []
    for directory, records in sweeps.values():
        try:
            rows = prediction.predict_sweep(console.print, directory, records, scale_report.table(records), profile,
                                        to, to_profiles=len(sweeps) == 1 or bool(profile))
        except MALFORMED as exc:
            fail(malformed(directory, exc, "predict from"))
        judged.append((directory, records, calibration.judged(rows)))
    if len(sweeps) > 1:
        for line in prediction.accuracy_lines(judged):
            console.print(escape(line))
    console.print("[bold]published results vs the model[/]")
    problems: list[str] = []
    checks = published.configurations(problems)
    for line in problems:
        console.print(f"[yellow]warning[/]: {escape(line)}")
    for line in published.lines(checks, published.slowdowns()):
        console.print(escape(line), soft_wrap=True)
