"""Stopping what a launch started, and nothing else: its process groups, what it left behind (processes marked with
its launch id), and Python's resource trackers given the moment they need to clean /dev/shm.

Runs in: the parent (harness/launching/launch.py)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil

from harness.shared.text import shorten
from harness.shared.witness import LAUNCH_ID_ENV


def parent_death_prefix() -> list[str]:
    """argv prefix that makes the launcher die with compare (setpriv, from util-linux, sets PR_SET_PDEATHSIG and
    execs the command: nothing of ours runs between fork and exec, unlike a preexec_fn in a threaded parent)."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []



def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass



TRACKER_MARK = "from multiprocessing.resource_tracker import main"
"""The command line of Python's multiprocessing resource tracker (a launcher's helper: horovodrun, mp.spawn). It
ignores SIGTERM, and once every process holding its pipe has ended it unlinks the named semaphores and shared
memory that were not released (a launcher killed by a signal leaves them in /dev/shm), then exits."""


TRACKER_GRACE_S = 3.0


def _is_tracker(p: psutil.Process) -> bool:
    try:
        return TRACKER_MARK in " ".join(p.cmdline())
    except psutil.Error:
        return False



def _alive(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False



def _spare_trackers(pgids: set[int], grace_s: float = TRACKER_GRACE_S) -> None:
    """SIGKILL every process of these process groups but the resource trackers, then give the trackers `grace_s`
    to release what the dead left and end on their own (they are killed with the groups after it)."""
    trackers, others = [], []
    for p in psutil.Process().children(recursive=True):
        try:
            if os.getpgid(p.pid) in pgids:
                (trackers if _is_tracker(p) else others).append(p)
        except (ProcessLookupError, psutil.Error):
            continue
    if not trackers:
        return
    kill_and_wait(others, grace_s)
    psutil.wait_procs(trackers, timeout=grace_s)


def kill_and_wait(procs: list[psutil.Process], timeout_s: float) -> None:
    """SIGKILL each of `procs` (one already gone is passed over), then wait up to `timeout_s` for them to end."""
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=timeout_s)



def kill_groups(procs: list[subprocess.Popen], grace_s: float = 5.0, asked: tuple = ()) -> None:
    """SIGTERM each command's whole process group (except the `asked` ones, already asked to stop another way),
    then SIGKILL whatever is left after `grace_s`; once a leader is gone, its group is swept with SIGKILL (a
    multiprocessing resource tracker after a short grace to clean up: see TRACKER_MARK)."""
    for proc in procs:
        if proc not in asked:
            _killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    _spare_trackers({proc.pid for proc in procs})
    for proc in procs:
        _killpg(proc.pid, signal.SIGKILL)  # the group's leftovers, or a leader that ignored SIGTERM
    for proc in procs:
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass



def kill_leftovers(launch_id: str, patience_s: float = 5.0) -> int:
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
            if pid in LEADERS:
                continue
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        if not living or time.monotonic() > deadline:
            return len(killed)
        if all(_is_tracker(p) for p in living) and not killed:
            # a resource tracker outlives its launcher by a moment (it ends once it has read its pipe's end)
            psutil.wait_procs(living, timeout=min(TRACKER_GRACE_S, max(0.0, deadline - time.monotonic())))
            living = [p for p in living if _alive(p)]
            if not living:
                continue
        for p in living:
            killed.add(p.pid)
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(living, timeout=max(0.0, deadline - time.monotonic()))


LEADERS: set[int] = set()
"""Pids of launches this process has started and not yet waited for: never reaped behind their Popen's back."""


def reap_orphans() -> int:
    """Reap this process's dead children that no Popen waits for: a launch's processes whose parent died first,
    re-parented to us as the subreaper (a rank's DataLoader workers when its launcher killed the rank). Left as
    zombies while the launch runs, they look alive to a launcher waiting for its process tree to end (DeepSpeed's
    launcher waited its full 30 s for two, and a --stall-timeout under that made the failed row a stall). Called
    while a launch runs, from the thread that starts subprocesses: every other child is a Popen's. Returns how many."""
    reaped = 0
    for child in psutil.Process().children():
        try:
            if child.pid not in LEADERS and child.status() == psutil.STATUS_ZOMBIE:
                reaped += os.waitpid(child.pid, os.WNOHANG)[0] == child.pid
        except (psutil.NoSuchProcess, psutil.ZombieProcess, ChildProcessError):
            continue
    return reaped


def describe_launch(launch_id: str) -> list[str]:
    """Every process of this launch still alive here, one line each: pid, state, the kernel function it waits in
    (/proc/<pid>/wchan) and its command line. What a stalled launch shows of the processes that cannot write their
    Python stacks (a launcher, a rank that has not started its worker yet)."""
    lines = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.environ().get(LAUNCH_ID_ENV) != launch_id:
                continue
            try:
                wchan = Path(f"/proc/{p.pid}/wchan").read_text().strip() or "-"
            except OSError:
                wchan = "?"
            lines.append(f"  pid {p.pid} {p.status()}, waiting in {wchan}, {p.num_threads()} thread(s): "
                         f"{shorten(' '.join(p.cmdline()))}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return lines
