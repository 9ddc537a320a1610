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
    return Path(os.environ.get("COMPARE_CACHE", Path.home() / ".cache" / "compare"))


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
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:
        pass


def cached_json(name: str, key: str, compute: Callable[[], Any], keep: Callable[[Any], bool] = lambda v: True):
    """compute() once per `key`; the answer is stored as JSON in the cache directory under `name` (only when
    `keep(answer)`, so a transient failure is not remembered)."""
    path = cache_dir() / f"{name}.json"
    try:
        stored = json.loads(path.read_text())
        if stored.get("key") == key:
            return stored["value"]
    except (OSError, ValueError, AttributeError):
        pass
    value = compute()
    if keep(value):
        write_atomic(path, json.dumps({"key": key, "value": value}).encode())
    return value
