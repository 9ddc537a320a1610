"""Reading what a launch left: the first error and the tail of its log, the rank files each rank wrote (which rank
died first, which hosts never answered), and how a process ended.

Runs in: the parent (harness/launch.py)."""

from __future__ import annotations

import errno
import json
import re
import signal
import socket
from pathlib import Path
from typing import NamedTuple


LOG_TAIL_LINES = 40


# A C++ exception escaping a communication thread (gloo's "Connection reset by peer", say) aborts the rank with
# "terminate called after throwing an instance of '...'", then "what():  <the reason>".
_ERROR = re.compile(r"\[fault injection\]|\w+(Error|Exception)\b:|\bKilled\b|Segmentation fault|error:"
                    r"|terminate called|\bwhat\(\):"
                    # a shell or env(1) that could not find the program a launcher runs on each host
                    r"|: (command )?not found$|: No such file or directory$")


_FRAME = re.compile(r"\bframe #\d+:")
"""A line of a C++ stack trace (c10's "frame #1: c10::DistError::DistError(...)"): never the cause itself."""


def start_error(exc: BaseException) -> str:
    """One line for a launch that could not be started: the error, and for a resource limit, which one."""
    text = " ".join(str(exc).split()) or "(no message)"
    line = f"the launch could not be started here: {type(exc).__name__}: {text[:300]}"
    if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        line += f" (this process may open {soft} files: raise `ulimit -n`)"
    elif isinstance(exc, OSError) and exc.errno == errno.EAGAIN:
        line += " (no more processes or threads allowed: `ulimit -u`, or the cgroup's pids.max)"
    return line



def first_error(path: Path) -> str | None:
    """The first line of a log that looks like the root cause (launchers print their own summary last)."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        for i, line in enumerate(lines):
            if _ERROR.search(line) and "FutureWarning" not in line and not _FRAME.search(line):
                found = line.strip()
                if "terminate called" in line and i + 1 < len(lines) and "what()" in lines[i + 1]:
                    found += " " + lines[i + 1].strip()  # the exception's type, then its message
                return found[:300]
    except OSError:
        pass
    return None



def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""



def rank_records(rank_dir: Path, pattern: str) -> dict[int, dict]:
    out = {}
    for f in rank_dir.glob(pattern):
        try:
            rec = json.loads(f.read_text())
            out[rec["rank"]] = rec
        except (OSError, ValueError, KeyError):
            continue
    return out



class DeadRank(NamedTuple):
    reason: str
    """"rank 1 killed by SIGKILL", "rank 1 on h2 exited with code 3", ..."""
    with_error: bool
    """Whether the log's first error line belongs with it (an exception does; a signal leaves no line of its own,
    and the first line is then a surviving rank's "Connection reset by peer")."""
    time: float | None
    """When it ended (wall clock; None when its supervisor was killed too and recorded nothing)."""
    host: str | None
    """The hostname it reported."""



def dead_rank(rank_dir: Path, name_hosts: bool = False) -> DeadRank | None:
    """Which rank ended the launch, and how, from what each rank's supervisor recorded (harness/rank/main.py);
    None when every rank ended cleanly. `name_hosts`: say where it ran ("rank 1 on h2 ...")."""
    started, ended = rank_records(rank_dir, "start-rank*.json"), rank_records(rank_dir, "exit-rank*.json")
    failed = sorted((e for e in ended.values() if e.get("signal") or e.get("code")), key=lambda e: e["time"])
    vanished = sorted(set(started) - set(ended))

    def on(ranks: list[int]) -> str:
        where = sorted({started[r].get("host") for r in ranks if started.get(r, {}).get("host")})
        return f" on {', '.join(where)}" if name_hosts and where else ""

    if vanished:
        # Its supervisor was killed by an uncatchable signal before it could record anything; the others' ends
        # (the launcher's SIGTERM, a broken connection) followed from it.
        ranks = ", ".join(map(str, vanished))
        return DeadRank(f"rank {ranks}{on(vanished)} killed from outside (no exit status recorded: SIGKILL, or "
                        f"the OOM killer)", False, None, started[vanished[0]].get("host"))
    if not failed:
        return None
    first = failed[0]
    where, host = on([first["rank"]]), first.get("host")
    if first.get("signal"):
        return DeadRank(f"rank {first['rank']}{where} killed by {first['signal']}", False, first["time"], host)
    return DeadRank(f"rank {first['rank']}{where} exited with code {first['code']}", True, first["time"], host)



def matches_host(node_host: str | None, local: bool, hostname: str | None) -> bool:
    """Whether a rank that reported `hostname` ran on the node named `node_host`."""
    if not hostname:
        return False
    name = socket.gethostname() if local or node_host is None else node_host
    return name == hostname or name.split(".")[0] == hostname.split(".")[0]



def _looks_like_address(host: str) -> bool:
    return all(part.isdigit() for part in host.split(".")) or ":" in host



def silent_hosts(rank_dir: Path, topology) -> list[str]:
    """Hosts of the topology where no rank ever started (by the hostnames the ranks reported; hosts given as
    addresses cannot be told apart that way and are never named)."""
    reported = {r.get("host") for r in rank_records(rank_dir, "start-rank*.json").values()}
    return [node.host for node in topology.nodes
            if (node.local or not _looks_like_address(node.host))
            and not any(matches_host(node.host, node.local, h) for h in reported)]



def last_line(path: Path) -> str | None:
    lines = [ln.strip() for ln in tail(path, 5).splitlines() if ln.strip()]
    return lines[-1][:300] if lines else None



def exit_reason(rc: int | None) -> str:
    if rc is not None and rc < 0:
        return f"launch killed by signal {signal.Signals(-rc).name}"
    return f"launch exited with code {rc}"
