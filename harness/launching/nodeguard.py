"""The guard of a command the harness started on another host: to that host what compare is to its own.

Runs in: a remote host, between ssh and the command (torchrun's agent, mp.spawn's parent, ...):

    ssh HOST 'cd REPO && exec env K=V ... python -m harness.launching.nodeguard LAUNCH_ID -- ARGV'

It starts ARGV in a process group of its own, becomes the subreaper of everything ARGV starts, and waits for
ARGV's end, a signal, or the end of its stdin: harness/launching/launch.py keeps the write end of that pipe, so stdin
reaches end-of-file when the launch stops the command, when compare dies (even by SIGKILL), and when the ssh
connection drops (sshd closes the session's pipes; a remote command without a pty would otherwise run on until
it next writes to the dead connection). In every case ARGV's group gets SIGTERM, then SIGKILL after GRACE_S,
and every process left on this host that carries the launch's id (COMPARE_LAUNCH_ID in its environment: ranks a
launcher put in sessions of their own) is killed. The guard exits with ARGV's exit code (128 + N for signal N).
Nothing here imports torch.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

import psutil

from harness.launching.reaper import kill_and_wait
from harness.shared.proc import become_subreaper
from harness.shared.witness import LAUNCH_ID_ENV, note_stopping, rank_dir_of

GRACE_S = 3.0
"""From SIGTERM to SIGKILL for the command's process group."""
_stop = False


def _leftovers(launch_id: str) -> list[psutil.Process]:
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get(LAUNCH_ID_ENV) == launch_id:
                found.append(p)
        except psutil.Error:
            continue
    return found


def _end(proc: subprocess.Popen, launch_id: str) -> None:
    """SIGTERM the command's group, SIGKILL it after GRACE_S, then kill whatever of the launch is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=GRACE_S)
            break
        except subprocess.TimeoutExpired:
            continue
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    kill_and_wait(_leftovers(launch_id), GRACE_S)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m harness.launching.nodeguard LAUNCH_ID -- COMMAND...", file=sys.stderr)
        return 2
    launch_id, command = argv[0], argv[2:]
    become_subreaper()
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    signal.set_wakeup_fd(w, warn_on_full_buffer=False)

    def stop(signum, frame):
        global _stop
        _stop = True

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    try:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        print(f"[nodeguard] cannot start {command[0]} on {os.uname().nodename}: {exc}", file=sys.stderr, flush=True)
        return 127
    pidfd = os.pidfd_open(proc.pid)
    poller = select.poll()
    for fd in (pidfd, r, 0):
        poller.register(fd, select.POLLIN | select.POLLHUP)
    while proc.poll() is None and not _stop:
        ready = dict(poller.poll())
        if r in ready:
            os.read(r, 512)  # a signal's wake-up byte: `_stop` says whether to stop
        if 0 in ready:
            try:
                data = os.read(0, 4096)
            except OSError:
                data = b""
            if not data:  # end of stdin: the launch is over, compare is gone, or the connection dropped
                print(f"[nodeguard] {os.uname().nodename}: stopping {command[0]} (the launch ended it)",
                      file=sys.stderr, flush=True)
                break
    t0 = time.monotonic()
    # Before the first signal: which of this host's ranks still ran (harness/launching/culprit.py).
    rank_dir = rank_dir_of(launch_id)
    if rank_dir is not None and rank_dir.is_dir():
        note_stopping(rank_dir)
    _end(proc, launch_id)
    if proc.returncode is None:  # survived SIGKILL for the whole grace (uninterruptible sleep): report, not hang
        print(f"[nodeguard] {command[0]} still running {time.monotonic() - t0:.0f} s after SIGKILL",
              file=sys.stderr, flush=True)
        return 137
    rc = proc.returncode
    return 128 - rc if rc < 0 else rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
