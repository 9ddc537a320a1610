"""The supervisor every rank forks into, and its worker (harness/rank/life.py): what each records when it is asked to
stop, and who the request came from (harness/shared/witness.py), for real, in processes started here.

Launchers stop the surviving ranks once one has failed (horovodrun: SIGTERM, then SIGKILL after 5 s; torchrun
alike), and some signal a rank's worker directly (Horovod's middleman, the DeepSpeed launcher's process-tree
terminate). Each request is written down with its sender before it is acted on, so the parent can tell the rank
that ended a launch from the ranks stopped after it, whatever order their ends reach it in."""

import json
import os
import signal
import subprocess
import sys

from conftest import REPO, wait_until

# The worker ignores SIGTERM and blocks, as a worker stuck in a gloo collective does (no witness of its own).
DEAF = r"""
import signal, sys, threading
from pathlib import Path
from harness.rank.life import _supervise
_supervise(Path(sys.argv[1]))
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("worker ready", flush=True)
threading.Event().wait()
"""
# A worker as every rank's is: its own witness of requests to stop.
WITNESSED = r"""
import os, sys, threading
from pathlib import Path
from harness.rank.life import _supervise, _witness_stop_requests
rank_dir = Path(sys.argv[1])
_witness_stop_requests(rank_dir, 1, _supervise(rank_dir))
print("worker ready", os.getpid(), flush=True)
threading.Event().wait()
"""


def _wait_for(predicate, what: str, timeout: float = 30.0) -> None:
    wait_until(predicate, what, timeout=timeout, interval=0.02)


def _start(script: str, tmp_path, **env) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)],
                            env={**os.environ, "RANK": "1", "PYTHONPATH": str(REPO), **env},
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("worker ready")
    # the worker runs on from the fork while the supervisor writes its start record: wait for it, bounded
    _wait_for((tmp_path / "start-rank1.json").exists, "the supervisor's start record")
    return proc, json.loads((tmp_path / "start-rank1.json").read_text())


def _read(path):
    _wait_for(path.exists, str(path.name))
    return json.loads(path.read_text())


def _end(proc, start) -> None:
    proc.kill()
    proc.wait(timeout=30)
    _wait_for(lambda: not _alive(start.get("worker_pid")), "the worker to die with its supervisor")


def test_a_rank_asked_to_stop_by_its_launcher_and_then_killed_says_so(tmp_path):
    proc, start = _start(DEAF, tmp_path)
    try:
        assert start["supervisor_pid"] == proc.pid and start["parent_pid"] == os.getpid()
        proc.send_signal(signal.SIGTERM)  # this process started the rank: it is its launcher
        asked = _read(tmp_path / "asked-rank1-supervisor.json")
        proc.kill()  # the launcher's SIGKILL after its grace: the worker did not end
        assert proc.wait(timeout=30) == -signal.SIGKILL
        assert (asked["rank"], asked["signal"], asked["by"], asked["sender_pid"]) == (1, "SIGTERM", "launch",
                                                                                      os.getpid())
        assert asked["time"] >= start["start"]
        assert not (tmp_path / "exit-rank1.json").exists()  # killed before it could record its end
    finally:
        _end(proc, start)


def test_a_worker_signalled_from_outside_names_the_sender_and_dies_of_it(tmp_path):
    proc, start = _start(WITNESSED, tmp_path)
    try:
        kill = subprocess.run(["kill", "-TERM", str(start["worker_pid"])], check=True)
        assert kill.returncode == 0
        asked = _read(tmp_path / "asked-rank1-worker.json")
        assert (asked["signal"], asked["by"], asked["pid"]) == ("SIGTERM", "outside", start["worker_pid"])
        assert asked["sender_pid"] > 0 and asked["sender_pid"] not in (os.getpid(), proc.pid)
        # it died of the signal, and its supervisor mirrored that to its launcher
        assert proc.wait(timeout=30) == -signal.SIGTERM
        ended = json.loads((tmp_path / "exit-rank1.json").read_text())
        assert (ended["signal"], ended["code"]) == ("SIGTERM", None)
        assert ended["time"] >= asked["time"]
        assert not (tmp_path / "asked-rank1-supervisor.json").exists()
    finally:
        _end(proc, start)


def test_a_request_forwarded_by_the_supervisor_is_recorded_once_with_its_first_sender(tmp_path):
    # COMPARE_PARENT_PID names this process as compare: its request is compare's, and the worker's copy of it
    # (forwarded) says it came from its supervisor.
    proc, start = _start(WITNESSED, tmp_path, COMPARE_PARENT_PID=str(os.getpid()))
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM
        first = json.loads((tmp_path / "asked-rank1-supervisor.json").read_text())
        forwarded = json.loads((tmp_path / "asked-rank1-worker.json").read_text())
        assert (first["by"], first["sender_pid"]) == ("compare", os.getpid())
        assert (forwarded["by"], forwarded["sender_pid"]) == ("supervisor", proc.pid)
        assert first["time"] <= forwarded["time"]
    finally:
        _end(proc, start)


# The worker stops between its fork and its witness (where it is while Python reads its next modules): a request
# that arrives then must wait for the witness, not end the worker unrecorded (a stress launch found that window).
LATE_WITNESS = r"""
import os, sys, threading
from pathlib import Path
from harness.rank.life import _supervise, _witness_stop_requests
rank_dir = Path(sys.argv[1])
lineage = _supervise(rank_dir)
print("worker ready", os.getpid(), flush=True)
sys.stdin.readline()
_witness_stop_requests(rank_dir, 1, lineage)
threading.Event().wait()
"""


def test_a_request_before_the_workers_witness_starts_waits_for_it(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", LATE_WITNESS, str(tmp_path)],
                            env={**os.environ, "RANK": "1", "PYTHONPATH": str(REPO)}, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    worker = int(proc.stdout.readline().split()[-1])
    _wait_for((tmp_path / "start-rank1.json").exists, "the supervisor's start record")
    start = json.loads((tmp_path / "start-rank1.json").read_text())
    try:
        subprocess.run(["kill", "-TERM", str(worker)], check=True)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.wait(timeout=30) == -signal.SIGTERM
        asked = json.loads((tmp_path / "asked-rank1-worker.json").read_text())
        assert (asked["signal"], asked["by"], asked["pid"]) == ("SIGTERM", "outside", worker)
    finally:
        _end(proc, start)


def test_a_worker_that_exits_with_a_code_is_mirrored_with_no_request_recorded(tmp_path):
    script = WITNESSED.replace("threading.Event().wait()", "raise SystemExit(4)")
    proc, start = _start(script, tmp_path)
    try:
        assert proc.wait(timeout=30) == 4
        ended = json.loads((tmp_path / "exit-rank1.json").read_text())
        assert (ended["signal"], ended["code"]) == (None, 4)
        assert not list(tmp_path.glob("asked-*"))
    finally:
        _end(proc, start)


def _alive(pid) -> bool:
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
