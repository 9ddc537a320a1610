"""The errors every parent module may raise, and the helpers that word them. Imports nothing of the project but
BadInput's own module.

Runs in: the parent. It sits at the bottom of the import plan, so that writing a file (outdir.py) or reading a
hostfile (hosts.py) does not depend on every adapter and workload, as it did while BadInput lived in inputs.py.
BadInput is defined one floor lower (harness/shared/bad_input.py), where the registries' and options' refusals can
derive from it; the parent's modules take it from here.
"""

from __future__ import annotations

from harness.shared.bad_input import BadInput

__all__ = ["BadInput", "first_sentence"]


def first_sentence(reason: str) -> str:
    """The part of an availability reason a terminal line shows (the fix and any second problem are left to
    report.md and `compare list`)."""
    return reason.split(" (fix: ")[0].split("; also, ")[0]
