"""Whether the kernel's out-of-memory killer ended a process: from the kernel's own record of it, where readable.

Runs in: every rank's supervisor (harness/rank/life.py), which sees its worker die of SIGKILL and asks, on the host
where it happened; and the fault injection that tests it (harness/rank/faults.py). Nothing here imports torch.

Two records, read as the Linux OOM killer writes them:
- the kernel log (`/dev/kmsg`, what `dmesg` shows; readable by root): "Out of memory: Killed process 4242 (python)"
  or, for a cgroup over its limit, "Memory cgroup out of memory: Killed process 4242 ...": the pid itself;
- the memory cgroup's count of OOM kills (cgroup v2 `memory.events`, v1 `memory.oom_control`: `oom_kill N`), read
  when the worker starts and when it ends: a kill counted meanwhile, in the cgroup the worker ran in.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

_KILLED = re.compile(r"Killed process (\d+) ")
UNLIMITED = 2**62
"""Memory limits at or above this (v1's 9223372036854771712, v2's "max") mean none."""


def _mounts() -> list[tuple[str, str, str, str]]:
    """(root, mount point, filesystem type, super options) of every mount of this process."""
    out = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if sep and len(fields) >= 5 and len(rest) >= 3:
            out.append((fields[3], fields[4], rest[0], rest[2]))
    return out


def memory_cgroup() -> tuple[Path, int] | None:
    """(the directory of this process's memory cgroup, its cgroup version), or None where there is none to read."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    v1 = v2 = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            v1 = path
        elif controllers == "":
            v2 = path
    for version, path in ((1, v1), (2, v2)):
        if path is None:
            continue
        for root, point, fstype, opts in _mounts():
            if (version == 1 and fstype == "cgroup" and "memory" in opts.split(",")) or \
                    (version == 2 and fstype == "cgroup2"):
                rel = os.path.relpath(path, root) if path.startswith(root) else None
                if rel is None or rel.startswith(".."):
                    continue
                where = Path(point) / rel
                if (where / ("memory.oom_control" if version == 1 else "memory.events")).is_file():
                    return where, version
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def oom_kills(cgroup: tuple[Path, int] | None) -> int | None:
    """The OOM kills a memory cgroup has counted (None where it cannot say)."""
    if cgroup is None:
        return None
    where, version = cgroup
    text = _read(where / ("memory.oom_control" if version == 1 else "memory.events"))
    m = re.search(r"^oom_kill (\d+)$", text, re.MULTILINE)
    return int(m.group(1)) if m else None


def memory_limit(cgroup: tuple[Path, int] | None) -> int | None:
    """The memory cgroup's limit in bytes, None where it has none (or none can be read)."""
    if cgroup is None:
        return None
    where, version = cgroup
    text = _read(where / ("memory.limit_in_bytes" if version == 1 else "memory.max")).strip()
    if not text.isdigit() or int(text) >= UNLIMITED:
        return None
    return int(text)


def snapshot() -> dict | None:
    """What to compare a worker's end with: its memory cgroup and the OOM kills it has counted so far, and when
    (CLOCK_MONOTONIC, the kernel log's clock)."""
    cgroup = memory_cgroup()
    return {"cgroup": str(cgroup[0]) if cgroup else None, "version": cgroup[1] if cgroup else None,
            "oom_kills": oom_kills(cgroup), "since": time.monotonic()}


def kernel_record(pid: int, since: float) -> str | None:
    """The kernel log's line saying the OOM killer killed `pid` (after `since`, CLOCK_MONOTONIC seconds: a pid
    reused since boot is not taken for this one), or None where it has none or cannot be read (not root)."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    found = None
    try:
        while True:
            try:
                record = os.read(fd, 8192).decode("utf-8", "replace")
            except BlockingIOError:  # the end of the ring buffer
                break
            except OSError as exc:  # EPIPE: records overwritten while reading; go on from the next one
                if exc.errno == 32:
                    continue
                break
            if not record:
                break
            head, _, text = record.partition(";")
            m = _KILLED.search(text)
            if m and int(m.group(1)) == pid:
                fields = head.split(",")
                stamp = int(fields[2]) / 1e6 if len(fields) > 2 and fields[2].isdigit() else None
                if stamp is None or stamp >= since - 1.0:
                    found = text.strip().splitlines()[0]
    finally:
        os.close(fd)
    return found


def killed(pid: int, before: dict | None) -> dict | None:
    """Why a process that died of SIGKILL did, if the OOM killer says it killed it: {"record": the kernel log's
    line, or "memory.events" / "memory.oom_control" with the counts, "cgroup", "limit_bytes"}; None otherwise."""
    before = before or {}
    line = kernel_record(pid, before.get("since", 0.0))
    cgroup = (Path(before["cgroup"]), before["version"]) if before.get("cgroup") else None
    after = oom_kills(cgroup)
    counted = before.get("oom_kills") is not None and after is not None and after > before["oom_kills"]
    if line is None and not counted:
        return None
    source = line or (f"{'memory.oom_control' if cgroup[1] == 1 else 'memory.events'} of {cgroup[0]}: oom_kill "
                      f"{before['oom_kills']} -> {after}")
    return {"record": source, "cgroup": str(cgroup[0]) if cgroup else None, "limit_bytes": memory_limit(cgroup)}
