"""The supervisor every rank forks into (harness/rank/main.py): what it records when its launcher stops it.

Launchers stop the surviving ranks once one has failed (horovodrun: SIGTERM, then SIGKILL after 5 s; torchrun
alike). A worker blocked in a collective may not end in time, and the SIGKILL then takes the supervisor too: unless
it said on the SIGTERM that it was asked to stop, that rank looks like the one killed first, and the row blames it
instead of the rank that failed."""

import json
import os
import signal
import subprocess
import sys

from conftest import REPO, wait_until

# The worker ignores SIGTERM and blocks, as a worker stuck in a gloo collective does.
CHILD = r"""
import signal, sys, threading
from pathlib import Path
from harness.rank.main import _supervise
_supervise(Path(sys.argv[1]))
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("worker ready", flush=True)
threading.Event().wait()
"""


def _wait_for(predicate, what: str, timeout: float = 30.0) -> None:
    wait_until(predicate, what, timeout=timeout, interval=0.02)


def test_a_rank_asked_to_stop_and_then_killed_says_it_was_asked(tmp_path):
    env = {**os.environ, "RANK": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], env=env, stdout=subprocess.PIPE, text=True)
    start = {}
    try:
        assert proc.stdout.readline().strip() == "worker ready"
        # the worker runs on from the fork while the supervisor writes its start record: wait for it, bounded
        _wait_for((tmp_path / "start-rank1.json").exists, "the supervisor's start record")
        start = json.loads((tmp_path / "start-rank1.json").read_text())
        assert start["supervisor_pid"] == proc.pid
        proc.send_signal(signal.SIGTERM)  # the launcher asks; the worker does not end
        exit_file = tmp_path / "exit-rank1.json"
        _wait_for(exit_file.exists, "the supervisor's record of the SIGTERM")
        proc.kill()  # the launcher's SIGKILL after its grace
        assert proc.wait(timeout=30) == -signal.SIGKILL
        rec = json.loads(exit_file.read_text())
        assert (rec["rank"], rec["signal"], rec["code"], rec["asked_to_stop"]) == (1, "SIGTERM", None, True)
        assert rec["time"] >= start["start"]
    finally:
        proc.kill()
        proc.wait(timeout=30)
        _wait_for(lambda: not _alive(start.get("worker_pid")), "the worker to die with its supervisor")


def _alive(pid) -> bool:
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
