"""The errors every parent module may raise, and the helpers that word them. Imports nothing of the project.

Runs in: the parent. It sits at the bottom of the import plan, so that writing a file (outdir.py) or reading a
hostfile (hosts.py) does not depend on every adapter and workload, as it did while BadInput lived in inputs.py.
"""

from __future__ import annotations


class BadInput(Exception):
    """A request the harness refuses: one line for the user, exit code 2, nothing written."""


def first_sentence(reason: str) -> str:
    """The part of an availability reason a terminal line shows (the fix and any second problem are left to
    report.md and `compare list`)."""
    return reason.split(" (fix: ")[0].split("; also, ")[0]
