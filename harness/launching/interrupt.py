"""Ctrl-C, SIGTERM and SIGHUP in the parent: a request to stop, acted on at a safe point.

Runs in: the parent. Python's default turns Ctrl-C into a KeyboardInterrupt wherever the interpreter happens to
be, in the middle of importing torch or numpy, say, which leaves those modules half-initialised and the rest of
the run (the report's plots) unable to import them. Instead, the first signal only records the request and
wakes the parent's poll (signal.set_wakeup_fd); the parent raises KeyboardInterrupt itself where stopping is
safe (while it waits on a launch, between launches). A second signal stops at once, as a user pressing Ctrl-C
twice expects.
"""

from __future__ import annotations

import os
import signal

_requested: str | None = None
_fd: int | None = None
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


SECOND = (b"interrupted again: stopping at once, with no report; records.jsonl keeps the rows that had finished, "
          b"and a launch still running is not recorded\n")


def _handler(signum, frame):
    global _requested
    if _requested:
        try:
            os.write(2, SECOND)
        except OSError:
            pass
        raise KeyboardInterrupt
    _requested = signal.Signals(signum).name


def install() -> None:
    """From the main thread, once: route the stop signals through the request flag and the wake-up pipe."""
    global _fd
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    for sig in SIGNALS:
        signal.signal(sig, _handler)
    _fd = r


HOW = {"SIGINT": "Ctrl-C (SIGINT)", "SIGTERM": "SIGTERM", "SIGHUP": "SIGHUP (its terminal closed)"}
"""Each stop signal as a report names what stopped the run: a closed terminal or a scheduler's SIGTERM read as
one's own Ctrl-C otherwise."""


def requested_by() -> str | None:
    """What asked this process to stop ("Ctrl-C (SIGINT)"), None where no stop signal came through install()'s
    handler."""
    return HOW.get(_requested, _requested) if _requested else None


def wakeup_fd() -> int | None:
    """Readable when a signal arrived (None when install() was not called, e.g. the CLI run in process)."""
    return _fd


def check() -> None:
    """Raise KeyboardInterrupt if a stop was requested (call it where stopping is safe)."""
    if _fd is not None:
        try:
            while os.read(_fd, 512):
                pass
        except BlockingIOError:
            pass
    if _requested:
        raise KeyboardInterrupt
