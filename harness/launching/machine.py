"""Other compare runs measuring on this machine at the same time.

Runs in: the parent. Two runs on the same cores disturb each other's figures (each one's ranks get a share of the
cores the other thinks it has), and neither table would say so: the load average lags by a minute. Every run that
writes results registers here for its lifetime: a file `<registry>/<pid>.json` (the run's pid, command, output
directory and start time) with an flock held on it, which the kernel drops when the process dies, even by SIGKILL.
A launch asks `others()` when its timed steps start and when it has ended, and its record lists the runs that were
alive then; the report marks those rows. A file whose lock nobody holds is a dead run's, and is removed.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REGISTRY_ENV = "COMPARE_RUNS_DIR"
"""Where the registry is (tests point it elsewhere); default `<tmp>/compare-runs`, shared by every user."""


def registry() -> Path:
    return Path(os.environ.get(REGISTRY_ENV) or Path(tempfile.gettempdir()) / "compare-runs")


_held: dict[str, Any] = {"path": None, "fd": None, "count": 0}
"""This process's registration, shared by every Registration in it (a scale sweep's comm sweeps run in its
process): one file and one flock per process, released when the last of them is. A second open and flock of the
same file in the same process would wait for the first for ever: flock locks belong to the open file."""


class Registration:
    """This run, registered until `release()` (or the process's end). A registration made while this process is
    already registered shares that one (its command and output directory stay the first's)."""

    def __init__(self, out: Path | None, command: str | None = None):
        self.path: Path | None = None
        self.fd: int | None = None
        if _held["fd"] is not None:
            _held["count"] += 1
            self.path, self.fd = _held["path"], _held["fd"]
            return
        root = registry()
        try:
            try:
                root.mkdir(parents=True)
                os.chmod(root, 0o1777)  # like /tmp: every user registers, only the owner removes its own file
            except FileExistsError:  # made by an earlier run (perhaps another user's, whose mode we leave alone)
                pass
            path = root / f"{os.getpid()}.json"
            while True:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:  # not a file that `others()` removed as stale between our open and our flock
                    if os.stat(path).st_ino == os.fstat(fd).st_ino:
                        break
                except FileNotFoundError:
                    pass
                os.close(fd)
            info = {"pid": os.getpid(), "command": command or "compare " + " ".join(sys.argv[1:]),
                    "out": str(out.resolve()) if out else None, "started": time.time()}
            os.write(fd, json.dumps(info).encode())
        except OSError:  # a registry we cannot write (a read-only or full /tmp): no detection, the run goes on
            return
        self.path, self.fd = path, fd
        _held.update(path=path, fd=fd, count=1)

    def release(self) -> None:
        if self.fd is None:
            return
        self.fd = None
        _held["count"] -= 1
        if _held["count"] > 0:
            return
        try:
            _held["path"].unlink(missing_ok=True)
        except OSError:
            pass
        os.close(_held["fd"])  # drops the flock
        _held.update(path=None, fd=None, count=0)


def others() -> list[dict[str, Any]]:
    """Every other live compare run registered on this machine: {pid, command, out, started}, by pid."""
    root = registry()
    try:
        files = sorted(root.glob("*.json"))
    except OSError:
        return []
    live = []
    for path in files:
        if path.stem == str(os.getpid()):
            continue
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:  # removed meanwhile, or not ours to read
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:  # held: the run is alive
                try:
                    info = json.loads(os.pread(fd, 65536, 0).decode(errors="replace") or "{}")
                except ValueError:  # registered a moment ago and not written yet
                    info = {}
                live.append({"pid": info.get("pid", int(path.stem) if path.stem.isdigit() else None),
                             "command": info.get("command"), "out": info.get("out"), "started": info.get("started")})
                continue
            # Nobody holds it: a run that died without removing its file (SIGKILL).
            try:
                path.unlink()
            except OSError:
                pass
        finally:
            os.close(fd)
    return live


def merge(*snapshots: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs of several `others()` snapshots, each once (by pid), in pid order."""
    by_pid = {}
    for snap in snapshots:
        for run in snap or []:
            by_pid.setdefault(run["pid"], run)
    return [by_pid[p] for p in sorted(by_pid, key=lambda p: (p is None, p))]


def note(records: list[dict[str, Any]], name) -> list[str]:
    """The report's note on the records measured while other compare runs were alive (`name(record)` names one),
    or nothing."""
    hit = [r for r in records if r.get("concurrent_compare_runs")]
    if not hit:
        return []
    runs = merge(*(r["concurrent_compare_runs"] for r in hit))
    who = "; ".join(f"pid {o['pid']}" + (f": `{o['command']}`" if o.get("command") else "") for o in runs)
    return [f"**Measured while another compare run was running on this machine** ({who}): "
            f"{', '.join(dict.fromkeys(name(r) for r in hit))}. Its processes shared these cores, so the times and throughput of "
            f"these rows are not this machine's alone; measure them again on a quiet machine."]
