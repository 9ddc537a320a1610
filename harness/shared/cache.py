"""Small on-disk caches, each keyed by the files its answer depends on, so a stale entry is never used.

Runs in: both. The directory is $COMPARE_CACHE, else ~/.cache/compare (the Horovod wheel cache lives beside it).
A cache that cannot be read or written only costs the next run the time it would have saved.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def cache_dir() -> Path:
    """$COMPARE_CACHE, or ~/.cache/compare where it is unset or empty (an empty one had made the current directory
    the cache, and a read-only command left its files there)."""
    return Path(os.environ.get("COMPARE_CACHE") or Path.home() / ".cache" / "compare")


def files_key(files: Iterable[Path]) -> str:
    """This interpreter plus each file's path, size and modification time: changes whenever any of them does."""
    parts = [sys.executable]
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        parts.append(f"{f}:{st.st_size}:{st.st_mtime_ns}")
    return "|".join(parts)


def write_atomic(path: Path, data: bytes) -> None:
    """Best effort: a temp file named by our pid, then a rename (readers see the old file or the new one)."""
    if "COMPARE_CACHE" not in os.environ and not Path.home().is_dir():
        return  # a HOME that does not exist (a service account's /nonexistent) is not made: no cache, as documented
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:
        pass


def read_dict(name: str) -> dict[str, Any]:
    """The JSON object kept in the cache directory as file `name`, or {} where it is missing, unreadable or not an
    object."""
    try:
        data = json.loads((cache_dir() / name).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_dict(name: str, data: dict[str, Any]) -> None:
    """Keep `data` as the cache directory's file `name` (best effort, atomically: write_atomic)."""
    write_atomic(cache_dir() / name, json.dumps(data).encode())


KEEP_ENTRIES = 8
"""Answers kept per cache file: one per interpreter and file set, so two checkouts (two venvs) used in turn do not
evict each other's answer on every run."""


def cached_json(name: str, key: str, compute: Callable[[], Any], keep: Callable[[Any], bool] = lambda v: True):
    """compute() once per `key`; the answer is stored as JSON in the cache directory under `name` (only when
    `keep(answer)`, so a transient failure is not remembered), beside the answers for other keys (the last
    KEEP_ENTRIES used)."""
    path = cache_dir() / f"{name}.json"
    entries: dict[str, Any] = {}
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        entries = stored.get("entries") or ({stored["key"]: stored["value"]} if "key" in stored else {})
        if key in entries:
            return entries[key]
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        entries = {}
    value = compute()
    if keep(value):
        entries.pop(key, None)
        entries[key] = value  # the newest last; the oldest go first
        kept = dict(list(entries.items())[-KEEP_ENTRIES:])
        write_atomic(path, json.dumps({"entries": kept}).encode())
    return value
