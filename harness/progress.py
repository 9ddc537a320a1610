"""Live progress from rank 0 to the parent through a small memory-mapped file, off the step's critical path.

Runs in: both. The parent creates the file before a launch and reads it when it redraws; a rank writes into its
mapping with plain memory stores (no system call, no file write per step), so reporting progress costs the
training loop nothing measurable. A sequence number (odd while a write is in progress, a seqlock) keeps the
parent from reading a half-written phase text.

Layout (little-endian): u64 seq | i64 step | i64 total | 240 bytes phase text (UTF-8, NUL-padded).
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

_HEAD = struct.Struct("<Qqq")
_TEXT = 240
SIZE = _HEAD.size + _TEXT


def create(path: Path, total: int) -> None:
    """Parent side: an empty progress file for a launch of `total` steps."""
    path.write_bytes(_HEAD.pack(0, 0, total) + b"\0" * _TEXT)


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
        try:
            with open(path, "r+b") as f:
                self._map = mmap.mmap(f.fileno(), SIZE)
            self.enabled = True
        except (OSError, ValueError):  # no progress file (a rank started by hand): nothing to report to
            pass

    def phase(self, text: str, step: int | None = None) -> None:
        if not self.enabled:
            return
        m = self._map
        seq = _HEAD.unpack_from(m)[0]
        struct.pack_into("<Q", m, 0, seq + 1)
        data = text.encode("utf-8")[:_TEXT - 1]
        m[_HEAD.size:_HEAD.size + _TEXT] = data + b"\0" * (_TEXT - len(data))
        if step is not None:
            struct.pack_into("<q", m, 8, step)
        struct.pack_into("<Q", m, 0, seq + 2)

    def step(self, n: int) -> None:
        if self.enabled:
            struct.pack_into("<q", self._map, 8, n)  # one aligned 8-byte store: never torn
