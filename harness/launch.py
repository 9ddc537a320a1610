"""Start one adapter's ranks in their own process group, bounded in time, and collect what they wrote.

Runs in: the parent. A crash, a non-zero exit or a hang of one launch becomes an outcome with a status and the
tail of its log; it never raises into the comparison, so the next adapter still runs. Ctrl-C or SIGTERM kill the
whole launch and give an `interrupted` outcome, after which the caller stops.

Nothing a launch starts may outlive it or the `compare` process:
- the launcher (torchrun's agent, horovodrun, ...) gets a parent-death signal (`setpriv --pdeathsig KILL`), so a
  `kill -9` of compare takes it down at once;
- every rank watches compare's pid (harness/rank/main.py) and kills its own process group when compare is gone;
- after a launch ends, whatever it left behind (processes marked with this launch's id, re-parented to compare,
  which is a child subreaper) is killed, including ranks a launcher put in sessions of their own (Horovod does).

The parent waits on the launch with a blocking poll on a pidfd (no busy polling) and wakes only to redraw the
progress line, at most once a second.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import re
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from adapters.base import Adapter
from harness import interrupt
from harness import progress as progress_file
from harness.env import REPO
from harness.spec import PARENT_PGID_ENV, PARENT_PID_ENV, RunSpec

LOG_TAIL_LINES = 40
LAUNCH_ID_ENV = "COMPARE_LAUNCH_ID"
"""Set in a launch's environment (inherited by everything it starts): how leftovers of that launch are found."""
UI_INTERVAL_S = 1.0
"""How often the parent wakes to redraw the progress line while a launch runs."""
_PR_SET_CHILD_SUBREAPER = 36
_LEADERS: set[int] = set()
"""Pids of launches this process has started and not yet waited for: never reaped behind their Popen's back."""


@dataclass
class Outcome:
    status: str
    """ok | failed | timeout | interrupted"""
    reason: str
    returncode: int | None
    wall_time_s: float
    launch_wall: float
    """Wall-clock time the launch command was started."""
    end_wall: float
    """Wall-clock time the launch had ended (its process group gone)."""
    log_path: Path
    argv: list[str]
    processes: int
    pid: int
    """The launch's process id, which is also its process group id."""
    load_avg_before: list[float] = field(default_factory=list)
    """1, 5 and 15 minute load averages just before the launch."""
    ranks: list[dict] = field(default_factory=list)
    log_tail: str = ""
    shutdown_error: str = ""
    """Set when every rank had written its result and only the launch's shutdown then failed or hung (a gloo
    peer closing first, say): the measurement stands, and this says what went wrong afterwards."""
    progress: dict | None = None
    """Rank 0's last reported phase and step (what an interrupted or hung launch had reached)."""
    leftovers_killed: int = 0
    """Processes of this launch still alive after it ended, killed by the harness."""
    gate_opened: float | None = None
    """Wall-clock time the launch's ranks were let past the gate into warm-up (None: never)."""
    gate_wait_s: float = 0.0
    """Seconds from starting the launch to opening its gate (it started while the previous launch ended)."""


def become_subreaper() -> None:
    """Orphans of our launches (a launcher killed before its ranks) are re-parented to this process, so they can
    be found and killed, instead of to init. Linux only; elsewhere this does nothing."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _parent_death_prefix() -> list[str]:
    """argv prefix that makes the launcher die with compare (setpriv, from util-linux, sets PR_SET_PDEATHSIG and
    execs the command: nothing of ours runs between fork and exec, unlike a preexec_fn in a threaded parent)."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def _kill_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM the launch's whole process group, then SIGKILL whatever is left after `grace_s`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            continue
        # The leader is gone; sweep any child it left behind in the group.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return


def _kill_leftovers(launch_id: str, patience_s: float = 5.0) -> int:
    """Kill every process still carrying this launch's id in its environment (ours, or orphans re-parented to us
    as the subreaper) and reap the ones that end up as our zombies. Returns how many were still alive."""
    me = psutil.Process()
    killed: set[int] = set()
    deadline = time.monotonic() + patience_s
    while True:
        living, zombies = [], []
        for child in me.children(recursive=True):
            try:
                if child.status() == psutil.STATUS_ZOMBIE:
                    if child.ppid() == me.pid:
                        zombies.append(child.pid)
                elif child.environ().get(LAUNCH_ID_ENV) == launch_id:
                    living.append(child)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        for pid in zombies:  # a rank whose launcher died before it: re-parented to us, now dead
            if pid in _LEADERS:
                continue
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        if not living or time.monotonic() > deadline:
            return len(killed)
        for p in living:
            killed.add(p.pid)
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(living, timeout=max(0.0, deadline - time.monotonic()))


# A C++ exception escaping a communication thread (gloo's "Connection reset by peer", say) aborts the rank with
# "terminate called after throwing an instance of '...'", then "what():  <the reason>".
_ERROR = re.compile(r"\[fault injection\]|\w+(Error|Exception)\b:|\bKilled\b|Segmentation fault|error:"
                    r"|terminate called|\bwhat\(\):")


def first_error(path: Path) -> str | None:
    """The first line of a log that looks like the root cause (launchers print their own summary last)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
        for i, line in enumerate(lines):
            if _ERROR.search(line) and "FutureWarning" not in line:
                found = line.strip()
                if "terminate called" in line and i + 1 < len(lines) and "what()" in lines[i + 1]:
                    found += " " + lines[i + 1].strip()  # the exception's type, then its message
                return found[:300]
    except OSError:
        pass
    return None


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def child_env(spec: RunSpec, extra: dict[str, str], launch_id: str) -> dict[str, str]:
    env = dict(os.environ)
    threads = str(spec.threads)
    env.update({
        # Set for every launcher; torchrun would otherwise force OMP_NUM_THREADS=1 and mp.spawn leave it unset.
        "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
        # Loopback only: hostname-based interface selection is flaky on CI machines (as accelerate does).
        "GLOO_SOCKET_IFNAME": env.get("GLOO_SOCKET_IFNAME", "lo"), "MASTER_ADDR": "127.0.0.1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p),
        PARENT_PID_ENV: str(os.getpid()), PARENT_PGID_ENV: str(os.getpgrp()), LAUNCH_ID_ENV: launch_id,
    })
    env.update(extra)
    return env


def dead_rank(rank_dir: Path) -> tuple[str, bool] | None:
    """Which rank ended the launch, and how, from what each rank's supervisor recorded (harness/rank/main.py):
    ("rank 1 killed by SIGKILL", False) or ("rank 1 exited with code 3", True); the flag says whether the first
    error line of the log belongs with it (an exception does; a signal leaves no line of its own, and the first
    line is then a surviving rank's "Connection reset by peer"). None when every rank ended cleanly."""
    def load(pattern):
        out = {}
        for f in rank_dir.glob(pattern):
            try:
                rec = json.loads(f.read_text())
                out[rec["rank"]] = rec
            except (OSError, ValueError, KeyError):
                continue
        return out

    started, ended = load("start-rank*.json"), load("exit-rank*.json")
    failed = sorted((e for e in ended.values() if e.get("signal") or e.get("code")), key=lambda e: e["time"])
    vanished = sorted(set(started) - set(ended))
    if vanished:
        # Its supervisor was killed by an uncatchable signal before it could record anything; the others' ends
        # (the launcher's SIGTERM, a broken connection) followed from it.
        ranks = ", ".join(map(str, vanished))
        return (f"rank {ranks} killed from outside (no exit status recorded: SIGKILL, or the OOM killer)", False)
    if not failed:
        return None
    first = failed[0]
    if first.get("signal"):
        return f"rank {first['rank']} killed by {first['signal']}", False
    return f"rank {first['rank']} exited with code {first['code']}", True


def _exit_reason(rc: int | None) -> str:
    if rc is not None and rc < 0:
        return f"launch killed by signal {signal.Signals(-rc).name}"
    return f"launch exited with code {rc}"


class Launch:
    """One launch of an adapter's ranks, started in its own process group and followed until it has ended.

        launch = Launch(adapter, spec, timeout_s).start(gated=True)   # returns at once
        launch.open_gate()                  # its ranks may begin warm-up (the previous launch has ended)
        launch.wait_for("timed_done")       # rank 0 says its timed steps are over (or the launch ended)
        outcome = launch.finish()           # wait for the end (bounded), kill what is left, collect

    The timeout counts from the moment the gate opens (a launch waiting at the gate is waiting for another).
    """

    def __init__(self, adapter: Adapter, spec: RunSpec, timeout_s: float,
                 on_progress: Callable[[dict], None] | None = None):
        self.adapter, self.spec, self.timeout_s, self.on_progress = adapter, spec, timeout_s, on_progress
        self.rank_dir = Path(spec.rank_dir)
        self.log_path = self.rank_dir / "launch.log"
        self.proc: subprocess.Popen | None = None
        self.events: list[str] = []
        self.status: str | None = None
        self.reason = ""

    # ---- starting -------------------------------------------------------------------------------------------
    def start(self, gated: bool = False) -> Launch:
        spec, rank_dir = self.spec, self.rank_dir
        rank_dir.mkdir(parents=True, exist_ok=True)
        spec_path = rank_dir / "spec.json"
        spec.save(spec_path)
        progress_file.create(spec.progress_path, spec.warmup + spec.steps)
        self._gate = os.open(rank_dir / progress_file.GATE, os.O_RDWR | os.O_CREAT, 0o644)
        if gated:
            fcntl.flock(self._gate, fcntl.LOCK_EX)
        else:
            self._close_gate_fd()
        os.mkfifo(rank_dir / progress_file.EVENTS)
        # Read and write: the parent is a writer too, so the FIFO never reports hang-up between rank messages.
        self._events = os.open(rank_dir / progress_file.EVENTS, os.O_RDWR | os.O_NONBLOCK)
        self.plan = self.adapter.launch(spec_path, spec)
        self.processes = self.adapter.processes(spec.world_size)
        self.launch_id = f"{os.getpid()}:{rank_dir}"
        self.load = [round(x, 2) for x in os.getloadavg()]
        self.launch_wall, self.t0 = time.time(), time.monotonic()
        self.deadline = None if gated else self.t0 + self.timeout_s
        self.gate_opened = None if gated else self.launch_wall
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(_parent_death_prefix() + self.plan.argv, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=child_env(spec, self.plan.env, self.launch_id),
                                         cwd=REPO, start_new_session=True)
        _LEADERS.add(self.proc.pid)
        try:
            self._pidfd = os.pidfd_open(self.proc.pid)
        except (OSError, AttributeError):
            self._pidfd = None
        return self

    def _close_gate_fd(self) -> None:
        if self._gate is not None:
            os.close(self._gate)  # releases the flock
            self._gate = None

    def open_gate(self) -> None:
        """Let the ranks begin warm-up; the load average recorded is the one the timed steps start with."""
        if self._gate is None:
            return
        self._close_gate_fd()
        self.load = [round(x, 2) for x in os.getloadavg()]
        self.gate_opened = time.time()
        self.deadline = time.monotonic() + self.timeout_s

    # ---- waiting --------------------------------------------------------------------------------------------
    def _poll(self, until: float | None) -> str:
        """Block until the launch exits ("exited"), rank 0 sends an event ("event"), `until` passes ("time") or
        the UI is due a redraw ("ui")."""
        timeout = None if until is None else max(0.0, until - time.monotonic())
        if self.on_progress:
            timeout = UI_INTERVAL_S if timeout is None else min(timeout, UI_INTERVAL_S)
        if self._pidfd is None:  # no pidfd: a timed wait on the process (no events: they arrive with the exit)
            interrupt.check()
            try:
                self.proc.wait(timeout=1.0 if timeout is None else min(timeout, 1.0))
                return "exited"
            except subprocess.TimeoutExpired:
                return "time" if until is not None and time.monotonic() >= until else "ui"
        poller = select.poll()
        poller.register(self._pidfd, select.POLLIN)
        poller.register(self._events, select.POLLIN)
        if interrupt.wakeup_fd() is not None:
            poller.register(interrupt.wakeup_fd(), select.POLLIN)
        ready = {fd for fd, _ in poller.poll(None if timeout is None else int(timeout * 1000))}
        interrupt.check()  # Ctrl-C / SIGTERM: stop here, where it is safe
        if self._events in ready:
            self._read_events()
            return "event"
        if self._pidfd in ready:
            self.proc.wait()
            return "exited"
        return "time" if until is not None and time.monotonic() >= until else "ui"

    def _read_events(self) -> None:
        try:
            data = os.read(self._events, 4096)
        except BlockingIOError:
            return
        self.events += [line for line in data.decode(errors="replace").splitlines() if line]

    def _progress(self) -> None:
        if self.on_progress:
            pr = progress_file.read(self.spec.progress_path)
            if pr:
                self.on_progress(pr)

    def wait_for(self, event: str) -> bool:
        """Block until rank 0 sends `event` (True), or the launch ends or runs out of time (False)."""
        while event not in self.events:
            if self.proc.returncode is not None:
                return False
            if self.deadline is not None and time.monotonic() >= self.deadline:
                return False
            why = self._poll(self.deadline)
            if why == "ui":
                self._progress()
        return True

    def finish(self) -> Outcome:
        """Wait for the launch to end (until its deadline), kill whatever is left, and say how it went."""
        try:
            while self.proc.returncode is None:
                if self.deadline is not None and time.monotonic() >= self.deadline:
                    self.status = "timeout"
                    self.reason = f"no result after {self.timeout_s:g} s (--timeout); process group killed"
                    cause = first_error(self.log_path)
                    if cause:
                        self.reason += f"; first error: {cause}"
                    break
                if self._poll(self.deadline) == "ui":
                    self._progress()
        except KeyboardInterrupt:
            self.status = "interrupted"
        return self._collect()

    def interrupt(self) -> Outcome:
        """Stop the launch now (Ctrl-C / SIGTERM of compare): an `interrupted` outcome."""
        self.status = "interrupted"
        return self._collect()

    # ---- ending ---------------------------------------------------------------------------------------------
    def _collect(self) -> Outcome:
        proc, spec, rank_dir, processes = self.proc, self.spec, self.rank_dir, self.processes
        try:
            _kill_group(proc, grace_s=2.0 if self.status is None else 5.0)
        finally:
            _LEADERS.discard(proc.pid)
            self.plan.hold.clear()  # what the launch needed held (a rendezvous store), only once it has ended
            self._close_gate_fd()
            for fd in (self._events, self._pidfd):
                if fd is not None:
                    os.close(fd)
            self._events = self._pidfd = None
        leftovers = _kill_leftovers(self.launch_id)
        end_wall = time.time()
        wall = time.monotonic() - self.t0
        last = progress_file.read(spec.progress_path)
        ranks = []
        for k in range(processes):
            f = spec.rank_result_path(k)
            if f.exists():
                ranks.append(json.loads(f.read_text()))
        rc, status, reason = proc.returncode, self.status, self.reason
        if status == "interrupted":
            at = (f" at step {last['step']} of {last['total']} ({last['phase']})" if last and last["phase"]
                  else " while its processes were starting")
            reason = f"interrupted{at}; process group killed"
        shutdown_error = ""
        if len(ranks) == processes and (status == "timeout" or (status is None and rc != 0)):
            # Each rank writes its result before the final barrier and teardown: all of them are here, so the
            # training and its measurement finished, and only the shutdown went wrong. Keep the row, say so.
            if status is None:
                reason = _failure(rank_dir, rc, self.log_path)
            shutdown_error = f"after every rank had written its result: {reason}"
            status, reason = "ok", ""
        if status is None:
            if rc != 0:
                status, reason = "failed", _failure(rank_dir, rc, self.log_path)
            elif len(ranks) != processes:
                missing = sorted(set(range(processes)) - {r["rank"] for r in ranks})
                status, reason = "failed", f"launch exited 0 but rank(s) {missing} wrote no result"
            else:
                status = "ok"
        gate_wait = 0.0 if self.gate_opened is None else max(0.0, self.gate_opened - self.launch_wall)
        return Outcome(status=status, reason=reason, returncode=rc, wall_time_s=wall, launch_wall=self.launch_wall,
                       end_wall=end_wall, log_path=self.log_path, argv=self.plan.argv, processes=processes,
                       pid=proc.pid, load_avg_before=self.load, ranks=ranks,
                       log_tail="" if status == "ok" and not shutdown_error else tail(self.log_path),
                       shutdown_error=shutdown_error, progress=last, leftovers_killed=leftovers,
                       gate_opened=self.gate_opened, gate_wait_s=gate_wait)


def _failure(rank_dir: Path, rc: int | None, log_path: Path) -> str:
    """Why a launch failed: the rank that ended it and how, with the log's first error where it belongs."""
    reason, with_error = dead_rank(rank_dir) or (_exit_reason(rc), True)
    cause = first_error(log_path) if with_error else None
    return reason + (f"; first error: {cause}" if cause else "")


def run_launch(adapter: Adapter, spec: RunSpec, timeout_s: float,
               on_progress: Callable[[dict], None] | None = None) -> Outcome:
    """One launch on its own, start to end (Ctrl-C gives an `interrupted` outcome)."""
    return Launch(adapter, spec, timeout_s, on_progress).start().finish()
