"""`compare index`: regenerate DIR/README.md, the index of the runs under DIR."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import typer

from harness.commands.common import fail, wrote_to
from harness.ground.argv import cli
from harness.core.requests import typed_path


@dataclass
class IndexRequest:
    """`compare index`."""

    directory: Path = field(default=Path("results"), metadata=cli(argument=True, parser=typed_path))
    """Directory of runs (default: results)."""
    force: bool = field(default=False, metadata=cli("--force"))
    """Replace a DIR/README.md that `compare index` did not write."""


def index(req: IndexRequest) -> None:
    """Regenerate DIR/README.md, the index of the runs under DIR, from their records."""
    from harness import reports

    directory, force = req.directory, req.force
    if not directory.is_dir():
        fail(f"{directory} is not a directory")
    if (directory / "records.jsonl").exists():
        fail(f"{directory} is a run's own directory (it holds records.jsonl); give the directory that holds the "
             f"runs, e.g. {directory.parent}")
    if not reports.has_runs(directory):
        fail(f"no runs under {directory} (no {directory}/*/records.jsonl); give the directory that holds them, "
             f"e.g. results")
    readme = directory / "README.md"
    if readme.is_symlink() and not force:  # writing through it would put the index wherever the link points
        fail(f"{readme} is a symbolic link to {os.readlink(readme)}; use --force to replace the link with the index")
    if readme.is_file() and not force and not reports.is_index(readme):
        fail(f"{readme} exists and was not written by `compare index`; use --force to replace it")
    try:
        path = reports.index(directory, warn=lambda line: typer.echo(f"warning: {line}", err=True))
    except OSError as exc:
        fail(f"cannot write the index {directory / 'README.md'}: {exc.strerror or exc}")
    # one line: a path cut over two cannot be pasted
    wrote_to(str(path))
