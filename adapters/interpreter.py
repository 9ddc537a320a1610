"""The Python interpreter a launch's commands start (compare's own, or a row's `python=PATH`), and the argv of a
module run with it. A leaf: the launchers (adapters/launchers.py) and every adapter build their commands from it."""

from __future__ import annotations

import contextlib
import sys
from contextvars import ContextVar
from pathlib import Path

_INTERPRETER: ContextVar[str | None] = ContextVar("interpreter", default=None)


def interpreter() -> str:
    """The Python a launch's commands start: compare's own, or the row's `python=PATH` while the launching code
    builds that row's launch (`using_interpreter`). A launcher found next to it (horovodrun, deepspeed) is that
    venv's."""
    return _INTERPRETER.get() or sys.executable


@contextlib.contextmanager
def using_interpreter(python: str | None):
    """`interpreter()` is `python` (None: compare's own) within the block."""
    token = _INTERPRETER.set(python)
    try:
        yield
    finally:
        _INTERPRETER.reset(token)


def python_module(module: str, *args: str) -> list[str]:
    """argv that runs `python -m module args...` with the launch's interpreter (`interpreter()`)."""
    return [interpreter(), "-m", module, *args]


def rank_command(spec_path: Path) -> list[str]:
    """argv of one rank: the entry point every launcher starts (harness/rank/life.py)."""
    return python_module("harness.rank", str(spec_path))
