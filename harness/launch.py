"""Start one adapter's ranks in their own process group, bounded in time, and collect what they wrote.

A crash, a non-zero exit or a hang of one launch becomes an outcome with a status and the tail of its log; it
never raises into the comparison, so the next adapter still runs. Ctrl-C kills the whole group, then re-raises.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from adapters.base import Adapter
from harness.env import REPO
from harness.spec import RunSpec

LOG_TAIL_LINES = 40


@dataclass
class Outcome:
    status: str
    """ok | failed | timeout"""
    reason: str
    returncode: int | None
    wall_time_s: float
    launch_wall: float
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


def child_env(spec: RunSpec, extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    threads = str(spec.threads)
    env.update({
        # Set for every launcher; torchrun would otherwise force OMP_NUM_THREADS=1 and mp.spawn leave it unset.
        "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
        # Loopback only: hostname-based interface selection is flaky on CI machines (as accelerate does).
        "GLOO_SOCKET_IFNAME": env.get("GLOO_SOCKET_IFNAME", "lo"), "MASTER_ADDR": "127.0.0.1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p),
    })
    env.update(extra)
    return env


def run_launch(adapter: Adapter, spec: RunSpec, timeout_s: float,
               on_progress: Callable[[dict], None] | None = None) -> Outcome:
    rank_dir = Path(spec.rank_dir)
    rank_dir.mkdir(parents=True, exist_ok=True)
    spec_path = rank_dir / "spec.json"
    spec.save(spec_path)
    plan = adapter.launch(spec_path, spec)
    log_path = rank_dir / "launch.log"
    load = [round(x, 2) for x in os.getloadavg()]
    launch_wall, t0 = time.time(), time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(plan.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=child_env(spec, plan.env), cwd=REPO, start_new_session=True)
        status, reason = None, ""
        try:
            while True:
                try:
                    proc.wait(timeout=0.2)  # UI refresh interval, not synchronisation: exit is observed by wait
                    break
                except subprocess.TimeoutExpired:
                    pass
                if on_progress:
                    try:
                        on_progress(json.loads((rank_dir / "progress.json").read_text()))
                    except (OSError, ValueError):
                        pass
                if time.monotonic() - t0 > timeout_s:
                    status, reason = "timeout", f"no result after {timeout_s:g} s (--timeout); process group killed"
                    cause = first_error(log_path)
                    if cause:
                        reason += f"; first error: {cause}"
                    _kill_group(proc)
                    break
        except BaseException:
            _kill_group(proc)
            raise
        _kill_group(proc, grace_s=2.0)  # a launcher may leave a straggler rank behind: the group goes too
    wall = time.monotonic() - t0
    ranks = []
    for k in range(plan.processes):
        f = rank_dir / f"rank{k}.json"
        if f.exists():
            ranks.append(json.loads(f.read_text()))
    rc = proc.returncode
    shutdown_error = ""
    if len(ranks) == plan.processes and (status == "timeout" or (status is None and rc != 0)):
        # Each rank writes its result before the final barrier and teardown: all of them are here, so the
        # training and its measurement finished, and only the shutdown went wrong. Keep the row, say so.
        if status is None:
            reason = (f"launch exited with code {rc}" if rc is None or rc >= 0
                      else f"launch killed by signal {signal.Signals(-rc).name}")
            cause = first_error(log_path)
            reason += f"; first error: {cause}" if cause else ""
        shutdown_error = f"after every rank had written its result: {reason}"
        status, reason = "ok", ""
    if status is None:
        if rc != 0:
            status, reason = "failed", f"launch exited with code {rc}"
            if rc is not None and rc < 0:
                reason = f"launch killed by signal {signal.Signals(-rc).name}"
            cause = first_error(log_path)
            if cause:
                reason += f"; first error: {cause}"
        elif len(ranks) != plan.processes:
            missing = sorted(set(range(plan.processes)) - {r["rank"] for r in ranks})
            status, reason = "failed", f"launch exited 0 but rank(s) {missing} wrote no result"
        else:
            status = "ok"
    return Outcome(status=status, reason=reason, returncode=rc, wall_time_s=wall, launch_wall=launch_wall,
                   log_path=log_path, argv=plan.argv, processes=plan.processes, pid=proc.pid, load_avg_before=load, ranks=ranks,
                   log_tail="" if status == "ok" and not shutdown_error else tail(log_path),
                   shutdown_error=shutdown_error)
