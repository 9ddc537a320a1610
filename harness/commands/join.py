"""`compare join`: earlier runs of the same request, joined as sessions of one verdict whose intervals include the
variation between runs (harness/reports/sessions.py)."""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from harness.commands.common import console, fail, malformed, wrote_to
from harness.ground.argv import cli
from harness.core.requests import typed_path


@dataclass
class JoinRequest:
    """`compare join`."""

    out: Path | None = field(default=None, metadata=cli(argument=True, required=True, parser=typed_path))
    """The join's directory: its sessions.json and report.md (created; the runs' records stay where they are)."""
    runs: list[Path] = field(default_factory=list, metadata=cli(argument=True, required=True, parser=typed_path))
    """Two or more run directories (or joins, whose sessions are taken) of the same request on this machine; a run
    made with `compare run --join` is the join of its sessions, and DIR/records.jsonl that run alone."""
    force: bool = field(default=False, metadata=cli("--force"))
    """Replace an earlier join in OUT."""


def join(req: JoinRequest) -> None:
    """Join earlier runs of the same request (workload and options, rows, world size, global batch, timed steps) on
    the same machine as sessions: one verdict over them, whose intervals include the variation between runs, and
    per pair the between-session spread. Writes OUT/sessions.json and OUT/report.md; the records are not copied."""
    from harness import reports
    from harness.ground import outdir
    from harness.ground.errors import BadInput
    from harness.ground.record import read_results, records_file
    from harness.core import joins
    from harness.reports import sessions

    dirs: list[Path] = []
    given: dict[Path, Path] = {}  # each session's resolved path -> the argument that brought it
    expanded = []
    for d in req.runs:
        try:
            # a run's records file stands for that run alone (a run made with `compare run --join` is, as a
            # directory, the join of its sessions), as compare diff takes it
            alone = d.is_file() and d.name in ("records.jsonl", "records.jsonl.gz")
            found = [d.parent] if alone else joins.session_dirs(d)  # a run stands for itself: read (and refused
            # where it is none) below
            d.resolve(), [x.resolve() for x in found]
        except (OSError, RuntimeError):  # a symlink loop: "Symlink loop from ..." as a traceback
            fail(f"{d} cannot be read (a symlink loop?); give a directory written by `compare run`")
        if not alone and (len(found) > 1 or found[0].resolve() != d.resolve()):  # a join: its sessions
            expanded.append(f"{d} is a join of {len(found)} sessions ({', '.join(map(str, found))}), each taken")
        for x in found:  # a session counted twice would weigh twice in every pooled estimate
            if x.resolve() in given:
                via = list(dict.fromkeys(str(a) for a in (given[x.resolve()], d) if a.resolve() != x.resolve()))
                fail(f"{x} is given twice" + (f" (a session of {' and '.join(via)})" if via else "")
                     + "; give each session once")
            given[x.resolve()] = d
            dirs.append(x)
    if len(dirs) < 2:
        fail(f"compare join needs two runs or more; got {len(dirs)} ({', '.join(map(str, req.runs))})")
    joins.unfinished(dirs)
    named = [(str(d), read_results(d, ("run",))) for d in dirs]
    try:
        joins.check(named)
    except reports.MALFORMED as exc:  # records of a shape the field check lets through, in one line
        fail(_unreadable(dirs, exc))
    if records_file(req.out) is not None:  # before --force is offered: it would not help
        fail(f"{req.out} holds a run's records; give a new directory for the join")
    try:
        outdir.check(req.out, req.force, ("sessions.json", "report.md"))
    except BadInput as exc:
        fail(str(exc).replace("another --out", "another OUT directory"))  # join's OUT is its first argument
    command = shlex.join(["compare", "join", str(req.out), *map(str, req.runs)])  # as typed; sessions.json lists all
    for line in expanded:  # said, not silently: a run made with --join brings its earlier sessions with it
        console.print(f"note: {line}", soft_wrap=True)
    created = not req.out.exists()
    before = set() if created else set(req.out.iterdir())
    req.out.mkdir(parents=True, exist_ok=True)
    joined = [(Path(name), records) for name, records in named]
    joins.write_manifest(req.out, [d for d, _ in joined], command)
    try:
        loaded = joins.load(req.out)
        sessions.render(req.out, loaded, command)
    except (BadInput, *reports.MALFORMED) as exc:  # nothing half written: what this join wrote goes
        if created:
            shutil.rmtree(req.out, ignore_errors=True)
        else:
            for path in set(req.out.iterdir()) - before:
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        fail(str(exc) if isinstance(exc, BadInput) else _unreadable(dirs, exc))
    for line in sessions.console_lines(sessions.analyse(loaded)):
        console.print(line, soft_wrap=True, markup=False)
    wrote_to(f"{req.out}/sessions.json and report.md")


def _unreadable(dirs: list[Path], exc: Exception) -> str:
    """One line for sessions whose records pass the field check but cannot be joined: it names the sessions (the
    join's own directory, which holds no records, had been named as if it did)."""
    return malformed(", ".join(map(str, dirs)), exc, "join", whose="theirs", wrote_nothing=True)
