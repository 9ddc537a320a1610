"""The `compare` command's entry point (pyproject.toml [project.scripts]).

Runs in: the parent, first. Importing the CLI (typer, rich, the harness) takes a few tenths of a second; a Ctrl-C
in that window ends the command quietly with exit code 130, as one after it does, instead of a traceback from
the middle of an import.
"""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from harness.cli import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    cli_main()
