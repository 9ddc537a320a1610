"""Reading what a launch left: the first error and the tail of its log, the rank files each rank wrote (which hosts
never answered; which rank ended the launch is harness/launching/culprit.py's), and how a process ended.

Runs in: the parent (harness/launching/launch.py)."""

from __future__ import annotations

import errno
import functools
import itertools
import json
import re
import signal
import socket
import sysconfig
from pathlib import Path

from harness.shared.text import shorten

LOG_TAIL_LINES = 40


# A C++ exception escaping a communication thread (gloo's "Connection reset by peer", say) aborts the rank with
# "terminate called after throwing an instance of '...'", then "what():  <the reason>".
_ERROR = re.compile(r"\[fault injection\]|\w+(Error|Exception)\b:|\bKilled\b|Segmentation fault|error:"
                    r"|terminate called|\bwhat\(\):"
                    # a shell or env(1) that could not find the program a launcher runs on each host
                    r"|: (command )?not found$|: No such file or directory$")


ERROR_LINE = _ERROR
"""A log line that reads as an error (an exception's last line, a crash, a launcher's "error:")."""

def _launcher_summary() -> re.Pattern:
    """A launcher's own summary of a failed worker (torchrun's "ChildFailedError:" and the table after it,
    torch.multiprocessing.spawn's "process 1 terminated with exit code 3" and its "-- Process 0 terminated with the
    following error:" above the rank's own traceback, and each framework's launcher's as its adapter declares it,
    horovodrun's "Horovod detected that one or more processes exited"): never the cause."""
    return _with_declared(r"\bChildFailedError\b|\bProcess(Exited|Raised)Exception\b"
                          r"|-- Process \d+ terminated with the following error:", "LOG_LAUNCHER_SUMMARY")


@functools.cache
def _with_declared(own: str, attr: str) -> re.Pattern:
    import adapters

    return re.compile("|".join([own, *adapters.declared(attr)]))


STOPPED = re.compile(r"\bSignalException\b: Process \d+ got signal")
"""torchrun's words for the signal that stopped it: the cause where someone else sent it, never where compare did
(its stop at a timeout or a stall)."""

_WORKER = re.compile(r"Caught \w+ in DataLoader worker process \d+")
"""torch's line for an exception in a DataLoader worker; the worker's own traceback follows ("Original Traceback")."""

_FRAME = re.compile(r"\bframe #\d+:")
"""A line of a C++ stack trace (c10's "frame #1: c10::DistError::DistError(...)"): never the cause itself."""


def start_error(exc: BaseException) -> str:
    """One line for a launch that could not be started: the error, and for a resource limit, which one."""
    text = " ".join(str(exc).split()) or "(no message)"
    line = f"the launch could not be started here: {type(exc).__name__}: {shorten(text)}"
    if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        line += f" (this process may open {soft} files: raise `ulimit -n`)"
    elif isinstance(exc, OSError) and exc.errno == errno.EAGAIN:
        line += " (no more processes or threads allowed: `ulimit -u`, or the cgroup's pids.max)"
    return line



def consequence() -> re.Pattern:
    """What a rank says when a peer has gone: never the cause of a launch's failure (gloo's and the sockets' words,
    and each framework's as its adapter declares it: Horovod's for a peer that ended)."""
    return _with_declared(r"Connection (reset|closed) by peer|Broken pipe|Connection refused", "LOG_PEER_GONE")


def first_error(path: Path, containing: str | None = None, causes_only: bool = False,
                stopped_by_us: bool = False) -> str | None:
    """The first line of a log that looks like the root cause (launchers print their own summary last): only one
    `containing` a text where given, none that a peer's end causes (`consequence()`) with `causes_only`, and none that
    compare's own stop of the launch causes (`STOPPED`, and a peer's end) with `stopped_by_us`."""
    causes_only = causes_only or stopped_by_us
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        for i, line in enumerate(lines):
            if (containing is not None and containing not in line or causes_only and consequence().search(line)
                    or stopped_by_us and STOPPED.search(line)):
                continue
            if (_ERROR.search(line) and "FutureWarning" not in line and not _FRAME.search(line)
                    and not _launcher_summary().search(line)):
                i, line = _raised_from(lines, i)
                found = _unprefixed(line)  # the reason names the rank itself
                if "terminate called" in line and i + 1 < len(lines) and "what()" in lines[i + 1]:
                    found += " " + _unprefixed(lines[i + 1])  # the exception's type, then its message
                at = i
                if _WORKER.search(line):  # a DataLoader worker's: its own exception ends the traceback it re-raises
                    at = next((k for k in range(i + 1, len(lines))
                               if _ERROR.search(lines[k]) and not _WORKER.search(lines[k])), i)
                    found += f" ({_unprefixed(lines[at])})" if at != i else ""
                place = _users_frame(lines, at)
                return shorten(found) + (f" (raised in {place})" if place else "")
    except OSError:
        pass
    return None



DIRECT_CAUSE = "The above exception was the direct cause of the following exception:"

def _unprefixed(line: str) -> str:
    """A rank's log line without the launcher's "[1]<stderr>:" (or "[rank1]:") before it."""
    text = line.strip()
    mine = _RANK_PREFIX.match(text)
    return text[mine.end():].strip() if mine else text


FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+),? in (?P<func>\S+)')
"""A frame line: a traceback's ('File "m.py", line 3, in forward') or faulthandler's (no comma before "in")."""
_STDLIB = tuple({sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]})
_REPO = Path(__file__).resolve().parents[2]
_OURS = tuple(str(_REPO / d) + "/" for d in ("harness", "adapters", "workloads"))
"""compare's own code: workloads/batch.py feeds the model, so DDP's own check is raised through it."""


def shown_frame(file: str, line: int, func: str) -> str:
    """"forward (my_model.py:73)": a frame in words, its file relative to the repository or by its name alone."""
    path = Path(file)
    try:
        where = path.name if "-packages" in file else path.relative_to(_REPO).as_posix()
    except ValueError:
        where = path.name
    return f"{func} ({where}:{line})"


def python_own(file: str) -> bool:
    """Whether a frame's file is Python's own library (threading, selectors): not where a rank is, in words. A
    virtual environment's platstdlib is its own lib/pythonX.Y, which holds site-packages: torch is not Python's."""
    return file.startswith(_STDLIB) and "-packages" not in file


def users_place(file: str, line: int, func: str) -> str | None:
    """shown_frame of a frame in the user's code (their model, their dataset): not in an installed package, in
    Python's library or in compare's own (_OURS); None for another."""
    path = Path(file) if Path(file).is_absolute() else _REPO / file
    if file.startswith("<") or "-packages" in file or python_own(file) or str(path).startswith(_OURS):
        return None
    return shown_frame(file, line, func)


def _users_frame(lines: list[str], i: int) -> str | None:
    """"forward (my_model.py:73)": the innermost frame in the user's code (`users_place`) of the traceback right
    above line `i` (read in that rank's lines alone); None where there is none."""
    mine = _RANK_PREFIX.match(lines[i])
    prefix = mine.group(0) if mine else ""
    for k in range(i - 1, -1, -1):
        if prefix and not lines[k].startswith(prefix):
            continue
        text = lines[k][len(prefix):]
        if "Traceback (most recent call last)" in text:  # its start (a DataLoader worker's "Original Traceback")
            return None
        if text.strip() and not text[:1].isspace():  # not a traceback's frame, code or caret line: the error
            return None                                 # came with no traceback right above it
        frame = FRAME.match(text)
        place = frame and users_place(frame["file"], int(frame["line"]), frame["func"])
        if place:
            return place
    return None


def raised_place(path: Path, error: str) -> str | None:
    """Where in the user's code the exception a rank recorded (`error`, "SystemExit: 3", whose line no log reader
    takes for an error) was raised: the innermost user's frame (`_users_frame`) of the traceback above the first line
    that reads exactly so; None where there is none."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return next((place for i, line in enumerate(lines)
                 if _same_error(_unprefixed(line), error) and (place := _users_frame(lines, i))), None)


def _same_error(line: str, error: str) -> bool:
    """Whether a traceback's last line is the error a rank recorded: the same, or the same with its class's module
    before it (Python names a class outside builtins so: "compare_user_fw_27e454c0.MyErr: ...", where the rank
    recorded "MyErr: ...")."""
    if line == error:
        return True
    head = line[:len(line) - len(error)]
    return line.endswith(error) and head.endswith(".") and " " not in head and head[:1].isidentifier()


def crash_place(path: Path) -> str | None:
    """Where a rank that crashed in C code was in the user's code: the innermost such frame of the crashing thread
    in faulthandler's dump ("Fatal Python error: Segmentation fault", then "Current thread ... (most recent call
    first):" and its frames, which harness/rank/life.py has every rank write); None where the log has none."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for i, line in enumerate(lines):
        if "Fatal Python error:" not in line:
            continue
        mine = _RANK_PREFIX.match(line)
        prefix = mine.group(0) if mine else ""
        own = [ln[len(prefix):] for ln in lines[i + 1:] if not prefix or ln.startswith(prefix)]
        start = next((k for k, ln in enumerate(own) if ln.startswith("Current thread")), None)
        if start is None:
            continue
        frames = [FRAME.match(ln) for ln in itertools.takewhile(FRAME.match, own[start + 1:])]  # its block alone
        return next(filter(None, (users_place(m["file"], int(m["line"]), m["func"]) for m in frames)), None)
    return None


def _raised_from(lines: list[str], i: int) -> tuple[int, str]:
    """The error line at `i`, or the one of an exception raised from it (`raise X from exc`: Python prints the cause
    first, then "The above exception was the direct cause...", then X, which is what the code chose to say, e.g. a
    framework's error with its fix). Not "During handling of the above exception...": that one is a second fault.
    A cause that names a signal is kept beside it: torch's DataLoader raises "worker (pid(s) N) exited unexpectedly"
    from "worker (pid N) is killed by signal: Killed.", which is the reason."""
    named = None
    # a launcher that prefixes each rank's lines ("[1]<stderr>:", "[rank1]:") interleaves the ranks' tracebacks:
    # the chain is read in this rank's lines alone (another rank's cause could come between, and be taken for ours)
    mine = _RANK_PREFIX.match(lines[i])
    own = [k for k in range(len(lines)) if not mine or lines[k].startswith(mine.group(0))]
    while True:
        if _SIGNAL.search(lines[i]) and named is None:
            named = lines[i].strip()
        j = next((k for k in own if k > i and (DIRECT_CAUSE in lines[k] or _ERROR.search(lines[k])
                                                and not _FRAME.search(lines[k]))), None)
        if j is None or DIRECT_CAUSE not in lines[j]:
            break
        k = next((k for k in own if k > j and _ERROR.search(lines[k]) and not _FRAME.search(lines[k])
                  and "Traceback (most recent call last)" not in lines[k]), None)
        if k is None:
            break
        i = k
    if named and not _SIGNAL.search(lines[i]):
        return i, f"{lines[i].rstrip()} (raised from {named})"
    return i, lines[i]


_SIGNAL = re.compile(r"killed by signal|\bSIG[A-Z]{2,}\b|[Ss]ignal \d+")
_RANK_PREFIX = re.compile(r"\[\d+\]<std(?:out|err)>:|\[(?:rank|default)\d+\]:")
"""What horovodrun (mpirun-style "[1]<stderr>:") and torchrun ("[rank1]:", "[default1]:") put before a rank's lines."""


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
    return shorten(lines[-1]) if lines else None



def exit_reason(rc: int | None) -> str:
    if rc is not None and rc < 0:
        return f"launch killed by signal {signal.Signals(-rc).name}"
    return f"launch exited with code {rc}"


def read_log(path: Path) -> str:
    """A log's text ("" where it cannot be read)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def join_logs(path: Path, sections: list[tuple[str, Path]]) -> None:
    """One log at `path` of several (a launch's one per node): each under a `==== HEADING` line."""
    with open(path, "w", encoding="utf-8") as out:
        for heading, log in sections:
            out.write(f"==== {heading}\n")
            out.write(read_log(log))
