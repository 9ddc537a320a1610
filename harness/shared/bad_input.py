"""BadInput, the one class of a request compare refuses. Imports nothing.

Runs in: both sides, though only the parent refuses a request. It sits in harness/shared/, below the parent's ground
floor, because what refuses a request lives on both: the registries and the options both sides build from
(shared/registry.py, shared/options.py) as well as the parent's checks. Every refusal derives from this class, so
the command line catches one (harness/commands/usage_errors.py)."""

from __future__ import annotations


class BadInput(Exception):
    """A request the harness refuses: one line for the user, exit code 2, nothing written."""
