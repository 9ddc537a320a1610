"""What a launch's framework leaves on this machine (DeepSpeed's shared-memory segments in /dev/shm): recorded before
the launch starts, removed once every process of the launch is gone, by this run or, if compare itself was killed, by
the next run or `compare doctor`.

Runs in: the parent. An adapter names the files its framework may create and not remove when killed
(`LaunchPlan.leftovers`: an absolute glob and what one such file is); the harness never knows which framework it is.
Each launch that names some gets an entry in the ledger (`<registry>/leftovers/`, beside the registry of runs of
harness/launching/machine.py), a JSON file holding the launch's id and the globs, with an flock held on it by the
compare process for as long as the launch may hold those files. The kernel drops the flock when compare dies, even by
SIGKILL: an entry whose flock nobody holds, and none of whose launch's processes is alive (each carries the launch's
id in its environment), is a dead launch's, and its files can go. Only entries owned by this user are read (the
ledger, like /tmp, is every user's).
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import time
import uuid
from pathlib import Path

import psutil

from harness.launching import machine
from harness.shared.witness import LAUNCH_ID_ENV


def ledger() -> Path:
    return machine.registry() / "leftovers"


def _remove(patterns: list[dict]) -> dict[str, list[int]]:
    """Remove every regular file (not a link) matching each pattern: what -> [files, bytes]."""
    removed: dict[str, list[int]] = {}
    for p in patterns:
        pattern = p.get("pattern") or ""
        if not os.path.isabs(pattern) or any(c in os.path.dirname(pattern) for c in "*?["):
            continue  # only a glob of files in one named directory
        for name in glob.glob(pattern):
            path = Path(name)
            try:
                st = path.lstat()
                if not path.is_file() or path.is_symlink() or st.st_uid != os.getuid():
                    continue
                path.unlink()
            except OSError:
                continue
            counted = removed.setdefault(p.get("what") or "file", [0, 0])
            counted[0] += 1
            counted[1] += st.st_size
    return removed


class Entry:
    """One launch's leftovers, recorded (and held: the flock) from before its processes start until `release()`."""

    def __init__(self, launch_id: str, adapter: str, leftovers):
        self.patterns = [{"pattern": lo.pattern, "what": lo.what} for lo in leftovers]
        self.path: Path | None = None
        self.fd: int | None = None
        try:
            root = ledger()
            try:
                root.mkdir(parents=True)
                os.chmod(root, 0o1777)
            except FileExistsError:
                pass
            path = root / f"{os.getpid()}-{uuid.uuid4().hex[:12]}.json"
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, json.dumps({"compare_pid": os.getpid(), "launch_id": launch_id, "adapter": adapter,
                                     "leftovers": self.patterns, "time": time.time()}).encode())
            self.path, self.fd = path, fd
        except OSError:  # no ledger (a read-only /tmp): the launch's own end still removes them (release)
            pass

    def release(self) -> dict[str, list[int]]:
        """The launch has ended and its processes are gone: remove its files and its entry."""
        removed = _remove(self.patterns)
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            os.close(self.fd)
            self.path = self.fd = None
        return removed


def _launch_alive(launch_id: str) -> bool:
    for p in psutil.process_iter():
        try:
            if p.environ().get(LAUNCH_ID_ENV) == launch_id:
                return True
        except (psutil.Error, OSError):
            continue
    return False


def sweep_dead() -> list[dict]:
    """Remove the files of every recorded launch whose compare process and launch processes are all gone, and its
    entry: [{"compare_pid", "adapter", "removed": what -> [files, bytes]}] for those that had any left."""
    swept = []
    root = ledger()
    for path in sorted(root.glob("*.json")) if root.is_dir() else []:
        try:
            if path.stat().st_uid != os.getuid() or path.is_symlink():
                continue
            fd = os.open(path, os.O_RDWR)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its compare is alive and holds it
            try:
                rec = json.loads(path.read_text())
            except (OSError, ValueError):
                rec = None
            if not isinstance(rec, dict) or not isinstance(rec.get("leftovers"), list):
                path.unlink(missing_ok=True)  # half written (compare killed while writing it): nothing to sweep
                continue
            if _launch_alive(str(rec.get("launch_id"))):
                continue  # a rank still dying after its compare: the next sweep takes it
            removed = _remove([p for p in rec["leftovers"] if isinstance(p, dict)])
            path.unlink(missing_ok=True)
            if removed:
                swept.append({"compare_pid": rec.get("compare_pid"), "adapter": rec.get("adapter"),
                              "removed": removed})
        finally:
            os.close(fd)
    return swept


def lines(swept: list[dict]) -> list[str]:
    """One line for everything swept: what, how many, how much, and whose launches left it."""
    if not swept:
        return []
    totals: dict[str, list[int]] = {}
    for s in swept:
        for what, (n, size) in s["removed"].items():
            t = totals.setdefault(what, [0, 0])
            t[0] += n
            t[1] += size
    what = ", ".join(f"{n} {w}{'s' if n != 1 else ''}" for w, (n, _) in totals.items())
    size = sum(b for _, b in totals.values())
    shown = f"{size / 2**20:,.1f} MiB" if size >= 2**20 else f"{size / 2**10:,.0f} KiB"
    pids = sorted({str(s["compare_pid"]) for s in swept})
    return [f"removed {what} ({shown}) left by {len(swept)} launch(es) of compare runs that were "
            f"killed (pid {', '.join(pids)})"]
