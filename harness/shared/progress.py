"""Live progress from rank 0 to the parent through a small memory-mapped file, off the step's critical path.

Runs in: both. The parent creates the file before a launch and reads it when it redraws; a rank writes into its
mapping with plain memory stores (no system call, no file write per step), so reporting progress costs the
training loop nothing measurable. A sequence number (odd while a write is in progress, a seqlock) keeps the
parent from reading a half-written phase text.

Layout (little-endian): u64 seq | i64 step | i64 total | 240 bytes phase text (UTF-8, NUL-padded), then one i64
per rank: the steps that rank has finished (-1 until it has joined), written by every rank into its own slot, so a
launch that stalls can be told which rank stopped first (harness/launching/stalled.py).
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

_HEAD = struct.Struct("<Qqq")
_TEXT = 240
SIZE = _HEAD.size + _TEXT


_SLOT = struct.Struct("<q")


def create(path: Path, total: int, ranks: int = 0) -> None:
    """Parent side: an empty progress file for a launch of `total` steps and `ranks` ranks."""
    path.write_bytes(_HEAD.pack(0, 0, total) + b"\0" * _TEXT + _SLOT.pack(-1) * ranks)


def read_ranks(path: Path) -> dict[int, int]:
    """Parent side: rank -> the steps it has finished, for every rank that has said (one aligned 8-byte store each,
    never torn)."""
    try:
        raw = path.read_bytes()
    except OSError:
        return {}
    slots = raw[SIZE:]
    steps = (_SLOT.unpack_from(slots, 8 * k)[0] for k in range(len(slots) // 8))
    return {k: n for k, n in enumerate(steps) if n >= 0}


def read(path: Path) -> dict | None:
    """Parent side: {"phase", "step", "total"} as last written, or None if unreadable or mid-write."""
    try:
        raw = path.read_bytes()[:SIZE]
    except OSError:
        return None
    if len(raw) < SIZE:
        return None
    seq, step, total = _HEAD.unpack_from(raw)
    if seq % 2:
        return None
    text = raw[_HEAD.size:].split(b"\0", 1)[0].decode("utf-8", "replace")
    return {"phase": text, "step": step, "total": total}


class Writer:
    """Rank side: `phase(text)` and `step(n)` write into the shared mapping; a no-op when disabled."""

    def __init__(self, path: Path):
        self.enabled = False
        self._map = None
        self._slot: int | None = None
        try:
            with open(path, "r+b") as f:
                self._map = mmap.mmap(f.fileno(), max(SIZE, os.fstat(f.fileno()).st_size))
            self.enabled = True
        except (OSError, ValueError):  # no progress file (a rank started by hand): nothing to report to
            pass

    def own_slot(self, rank: int) -> None:
        """This rank's own step counter (set to 0 now): every rank writes it, rank 0's phase or not."""
        if self._map is not None and SIZE + 8 * (rank + 1) <= len(self._map):
            self._slot = SIZE + 8 * rank
            _SLOT.pack_into(self._map, self._slot, 0)

    def phase(self, text: str, step: int | None = None) -> None:
        if not self.enabled:
            return
        m = self._map
        # Odd while writing, even when done, forced rather than counted: should two processes ever write here (a
        # launcher that gives no rank makes every rank say it is 0 until set-up), two counting from the same value
        # could leave it odd for good (a seq of 3 after both), after which every finished write would read as
        # half-written.
        writing = _HEAD.unpack_from(m)[0] | 1
        struct.pack_into("<Q", m, 0, writing)
        data = text.encode("utf-8")[:_TEXT - 1]
        m[_HEAD.size:_HEAD.size + _TEXT] = data + b"\0" * (_TEXT - len(data))
        if step is not None:
            struct.pack_into("<q", m, 8, step)
        struct.pack_into("<Q", m, 0, writing + 1)

    def step(self, n: int) -> None:
        if self._slot is not None:
            _SLOT.pack_into(self._map, self._slot, n)
        if self.enabled:
            struct.pack_into("<q", self._map, 8, n)  # one aligned 8-byte store: never torn

    def rank_step(self, n: int) -> None:
        """This rank's own counter alone (the breakdown's profiled steps, which rank 0's step does not count)."""
        if self._slot is not None:
            _SLOT.pack_into(self._map, self._slot, n)


# ---- the gate and the events channel ---------------------------------------------------------------------------
# While one launch ends (eval, teardown, its launcher's exit), the parent already starts the next one, so the next
# launch's start-up (imports, rendezvous, model, data: seconds, none of it timed) overlaps the previous launch's
# tail. Two small signals keep every timed phase alone on the machine:
# - the gate: after set-up, before warm-up, every rank takes a shared flock on `gate.lock`, which the parent holds
#   exclusively until the previous launch has ended (a blocking wait, no CPU; a rank that arrives after the
#   parent let go passes at once);
# - the events FIFO: rank 0 writes "timed_done" into `events.fifo` when its timed steps are over, which wakes the
#   parent's poll at once, so it can start the next launch (no polling either side).
GATE = "gate.lock"
EVENTS = "events.fifo"
NOTE = "note "
"""The events a rank sends that start with this are an adapter's words for the user (e.g. "first run:
JIT-compiling ..."): the parent hands them to its progress display, which prints each once without a terminal."""


def pass_gate(rank_dir: Path) -> float:
    """Rank side: wait until the parent opens this launch's gate; seconds waited (0 when there is no gate)."""
    import fcntl
    import os
    import time

    try:
        fd = os.open(rank_dir / GATE, os.O_RDONLY)
    except OSError:
        return 0.0
    t0 = time.monotonic()
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    finally:
        os.close(fd)
    return time.monotonic() - t0


def send_event(rank_dir: Path, event: str) -> None:
    """Rank side: one line to the parent through the events FIFO (nothing happens if nobody listens)."""
    import os

    try:
        fd = os.open(rank_dir / EVENTS, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # no FIFO (a rank started by hand) or no reader
        return
    try:
        os.write(fd, (event + "\n").encode())
    except OSError:
        pass
    finally:
        os.close(fd)
