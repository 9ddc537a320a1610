"""Facts about how a launch's processes ended, each written before what it records can have consequences, so that
the parent tells a cause from its consequences by the order of the facts, never by which report reached it first
(harness/launching/culprit.py decides from them).

Shared by every rank (harness/rank/life.py: the supervisor and the worker of each rank), the node guard of a remote
host (harness/launching/nodeguard.py) and the parent (harness/launching/launch.py); standard library and psutil only.

The facts, one JSON file each in the launch's rank directory:
- `asked-rank<k>-<role>.json`: the first request to stop (SIGTERM, SIGINT, SIGHUP or SIGQUIT) that rank k's
  supervisor or worker received, with when and who sent it, read from the kernel's siginfo (si_pid): `compare`, the
  `launch` itself (its launcher, a launcher's helper such as Horovod's middleman, the rank's parent such as
  slurmstepd), the rank's own `supervisor` forwarding a request it recorded itself, or something `outside` the
  launch (a user's `kill`, the kernel). Written before the process acts on the request (forwards it, or dies of it).
- `failed-rank<k>.json`: the worker's own failure (an exception, an injected fault), written before it exits, so a
  peer's failure that it causes ("Connection reset by peer") is recorded after it.
- `stopping-<host>.json`: written by whatever stops the launch on a host (compare on its own, a node guard on
  another) before it sends its first signal: when, and which ranks of that host were still alive then.
(`start-rank<k>.json` and `exit-rank<k>.json` are the supervisor's own records: harness/rank/life.py.)
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

from harness.shared.spec import PARENT_PID_ENV

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
"""The signals a launcher, compare or a user sends to ask a process to stop (SIGKILL cannot be witnessed)."""
CRASH_SIGNALS = frozenset({"SIGSEGV", "SIGABRT", "SIGBUS", "SIGFPE", "SIGILL", "SIGTRAP", "SIGSYS"})
"""Signals a process gets from its own fault (a C++ exception escaping a gloo thread aborts the rank): a failure of
its own, like an exit code, not something sent to it."""
COMPARE, LAUNCH, SUPERVISOR, OUTSIDE = "compare", "launch", "supervisor", "outside"
LAUNCH_ID_ENV = "COMPARE_LAUNCH_ID"
"""Set in a launch's environment (inherited by everything it starts; harness/launching/rank_env.py): how its processes,
its leftovers and the senders of its signals are known."""


def launch_id(rank_dir: Path) -> str:
    """A launch's id: compare's pid and the launch's rank directory, which every host of the launch shares."""
    return f"{os.getpid()}:{rank_dir}"


def rank_dir_of(launch_id: str) -> Path | None:
    _, sep, rank_dir = launch_id.partition(":")
    return Path(rank_dir) if sep and rank_dir else None


def write_json(path: Path, obj: dict) -> None:
    """Atomically (a per-process temp name: ranks share the directory)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def asked_path(rank_dir: Path, rank: int, role: str) -> Path:
    return Path(rank_dir) / f"asked-rank{rank}-{role}.json"


def failed_path(rank_dir: Path, rank: int) -> Path:
    return Path(rank_dir) / f"failed-rank{rank}.json"


def stopping_path(rank_dir: Path, host: str) -> Path:
    return Path(rank_dir) / f"stopping-{host}.json"


def _proc(pid: int, what: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{what}").read_bytes()
    except OSError:
        return b""


def _launch_id_of(pid: int) -> str | None:
    for item in _proc(pid, "environ").split(b"\0"):
        if item.startswith(LAUNCH_ID_ENV.encode() + b"="):
            return item.split(b"=", 1)[1].decode(errors="replace")
    return None


def _ppid(pid: int) -> int:
    stat = _proc(pid, "stat")
    try:
        return int(stat.rsplit(b")", 1)[1].split()[1])
    except (IndexError, ValueError):
        return 0


BRIEF_CHARS = 120


def brief(argv: list[str]) -> str:
    """A command line as a reason quotes it: whole up to BRIEF_CHARS characters, cut with "..." beyond."""
    text = " ".join(argv)
    return text if len(text) <= BRIEF_CHARS else text[:BRIEF_CHARS - 3] + "..."


def command_of(pid: int) -> str:
    """The command line of a running process, briefly ("" once it is gone)."""
    return brief([a.decode(errors="replace") for a in _proc(pid, "cmdline").split(b"\0") if a])


def launch_lineage() -> set[int]:
    """This process's ancestors below compare: whatever started it (the launcher, its shell, Horovod's middleman, a
    per-node torchrun) and their own starters (slurmstepd under srun, a node guard and its sshd on another host),
    up to compare or, where compare is not an ancestor (another host, another PID namespace), to the first process.
    A signal from one of them is the launch acting on its ranks. A rank's supervisor takes them before it forks, and
    its worker adds the supervisor."""
    compare = os.environ.get(PARENT_PID_ENV, "")
    stop = int(compare) if compare.isdigit() else 0
    pid, chain = os.getppid(), set()
    while pid > 1 and pid != stop and pid not in chain:
        chain.add(pid)
        pid = _ppid(pid)
    return chain


class Witness:
    """Records the first request to stop that one process of a rank receives, and who sent it."""

    def __init__(self, rank_dir: Path, rank: int, role: str, lineage: set[int], supervisor: int | None = None):
        self.path = asked_path(rank_dir, rank, role)
        self.rank, self.role, self.supervisor = rank, role, supervisor
        self.lineage = lineage
        self.launch_id = os.environ.get(LAUNCH_ID_ENV)
        compare = os.environ.get(PARENT_PID_ENV, "")
        self.compare = int(compare) if compare.isdigit() else None
        self.recorded = False

    def sender(self, pid: int) -> str:
        if pid <= 0:
            return OUTSIDE  # the kernel itself
        if pid == self.compare:
            return COMPARE
        if pid == self.supervisor:
            return SUPERVISOR
        if pid in self.lineage or (self.launch_id and _launch_id_of(pid) == self.launch_id):
            return LAUNCH
        return OUTSIDE

    def record(self, info) -> None:
        """`info`: the signal.struct_siginfo of a stop request. Only the first is kept (what came first decides)."""
        if self.recorded:
            return
        self.recorded = True
        try:
            write_json(self.path, {"rank": self.rank, "role": self.role, "pid": os.getpid(), "time": time.time(),
                                   "signal": signal.Signals(info.si_signo).name, "by": self.sender(info.si_pid),
                                   "sender_pid": info.si_pid, "sender": command_of(info.si_pid)})
        except OSError:
            pass


def alive(pid: int, started: float) -> bool:
    """Whether the process `pid`, created no later than `started` (wall clock), is still running here (a zombie is
    not; a pid reused by a later process is not it)."""
    import psutil

    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE and p.create_time() <= started + 1.0
    except psutil.Error:
        return False


def note_stopping(rank_dir: Path, host: str | None = None) -> dict:
    """Before the first signal of a stop: record when it began, which of this host's ranks (by their start records)
    were still alive then, and which of those had lost the process that started them (`orphaned`: a per-node
    launcher killed under a launcher that then exited 0, say). Returns the record."""
    host = host or socket.gethostname()
    alive_ranks, orphaned = [], []
    for f in sorted(Path(rank_dir).glob("start-rank*.json")):
        rec = read_json(f)
        if rec and rec.get("host") == host and alive(int(rec["supervisor_pid"]), float(rec["start"])):
            alive_ranks.append(int(rec["rank"]))
            if rec.get("parent_pid") and _ppid(int(rec["supervisor_pid"])) != rec["parent_pid"]:
                orphaned.append(int(rec["rank"]))
    rec = {"host": host, "time": time.time(), "alive": alive_ranks, "orphaned": orphaned, "pid": os.getpid()}
    try:
        write_json(stopping_path(rank_dir, host), rec)
    except OSError:
        pass
    return rec
