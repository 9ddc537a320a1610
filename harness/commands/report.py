"""`compare report`: re-render a run's report.md and plots from its records alone."""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from pathlib import Path

from harness.commands.common import console, fail, malformed, wrote_to
from harness.ground.argv import cli
from harness.core.requests import typed_path


@dataclass
class ReportRequest:
    """`compare report`."""

    directory: Path | None = field(default=None, metadata=cli(argument=True, required=True, parser=typed_path))
    """A run directory holding records.jsonl."""


def report(req: ReportRequest) -> None:
    """Re-render report.md and the plots of a run from its records.jsonl alone."""
    from harness import reports
    from harness.ground import outdir

    from harness.ground.record import read_results, records_file
    from harness.core import joins
    from harness.reports import sessions

    directory = req.directory
    joined = directory.is_dir() and joins.manifest(directory)
    if joined and records_file(directory) is None:  # a join of earlier runs (`compare join`): nothing of its own
        try:
            joins.unfinished(joins.session_dirs(directory))
            loaded = joins.load(directory)
            joins.check(loaded)
            sessions.render(directory, loaded, joined.get("command"))
        except OSError as exc:
            fail(f"could not write the report in {directory}: {exc.strerror or exc}",
                 2 if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else 1)
        except reports.MALFORMED as exc:
            fail(malformed(directory, exc))
        for line in sessions.console_lines(sessions.analyse(loaded)):
            console.print(line, soft_wrap=True, markup=False)
        wrote_to(f"{directory}/report.md")
        return
    records = read_results(directory)
    before = _plots(directory)
    pid = outdir.holder(directory)
    if pid is not None:  # its records are half written, and the run renders its own report when it ends
        fail(f"{directory} is being written by a compare run that has not finished "
             f"({f'pid {pid}' if pid > 0 else 'its pid is not recorded'}); its report is written when it ends")
    try:
        reports.render(directory, records)
    except OSError as exc:  # a directory it may not write to is bad input (2); a full disk is not (1)
        fail(f"could not write the report in {directory}: {exc.strerror or exc}",
             2 if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else 1)
    except reports.MALFORMED as exc:
        fail(malformed(directory, exc))
    if reports.kind(records) == "run":
        from harness.reports import run_report

        for line in run_report.console_verdict(records, directory):  # as `compare run` ends
            console.print(line)
        console.print(run_report.console_table(records))
        for line in run_report.console_notes(records):
            console.print(line)
    # one line: a path cut over two cannot be pasted; "and plots" only where some were (none for a tune, or without
    # matplotlib)
    drawn = _plots(directory).items() - before.items()
    wrote_to(f"{directory}/report.md" + (" and plots" if drawn else ""))


def _plots(directory: Path) -> dict[str, tuple[int, int]]:
    """Each PNG in `directory` as (inode, mtime): a plot drawn again replaces its file (outdir.save_figure), so the
    pair changes."""
    out = {}
    for p in directory.glob("*.png"):
        try:
            s = p.stat()
        except OSError:
            continue
        out[p.name] = (s.st_ino, s.st_mtime_ns)
    return out
