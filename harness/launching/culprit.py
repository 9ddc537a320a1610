"""What ended a launch that ended badly: decided from facts recorded in order, never from which report came first.

Runs in: the parent (harness/launching/launch.py), once every process of the launch has ended.

The facts (harness/shared/witness.py, harness/rank/life.py): each rank's start and end as its supervisor saw them; the
first request to stop that its supervisor or worker received, with who sent it (compare, the launch itself, or something
outside), written before it was acted on; the worker's own failure, written before it exited; per host, when its stopper
(compare, or a node guard) began stopping the launch and which ranks were alive then, written before its first signal;
and how each launch command ended and whether that was before compare began stopping.

The rules, in order. What compare or the launch itself did to a rank is never a cause: a rank stopped by either, a
rank that was alive when its host's stopper began (and vanished later), anything a rank did after that moment.
1. A launcher (not a rank) was killed by a signal (not a crash of its own) before compare began stopping, or says it
   was asked to stop and killed its ranks (srun, which SIGKILLs its step on SIGTERM). Nothing in a launch signals
   its own launcher, and no launcher dies of a signal because a rank failed (torchrun, horovodrun, the deepspeed
   runner, mp.spawn, srun and ssh all exit with a code), so every rank's end follows from it: Horovod's middleman
   stopping them, slurmstepd SIGKILLing a step whose srun is gone, a peer's "Connection reset".
2. Something outside ended a rank: a request to stop from outside the launch, a signal nobody in the launch asked
   for (SIGKILL; the OOM killer, named as such where its own record says so: harness/shared/oom.py), or a
   supervisor gone without a word before compare began stopping. The first.
3. A rank gone without a word on a host that recorded no stop (its node died with it).
4. A rank failed by itself (an exception, an exit code, a crash signal such as SIGABRT): the first by the time it
   failed, which its worker recorded before exiting, so a peer's failure that it caused comes after it. A worker
   that exits without an exception (os._exit, exit() from native code) records nothing: its supervisor writes the
   exit down once told, a moment late, while the peer's exception at the broken connection is written as it
   happens. So an exception recorded less than ABRUPT_LAG_S before another rank's exit with a code and no exception
   is taken as its consequence: a peer's failure makes a rank raise (or abort, a crash signal, which keeps its
   order), never exit with a code of its own.
5. A launch command failed by itself (a node whose command exited first, a launcher that stopped its ranks).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path

from harness.launching.launch_logs import (ERROR_LINE, consequence, crash_place, exit_reason, first_error, last_line,
                                           matches_host, raised_place, rank_records)
from harness.shared.witness import CRASH_SIGNALS, LAUNCH, OUTSIDE, SUPERVISOR, read_json


@dataclass
class Command:
    """One command of a launch, as compare saw it end."""

    launcher: str
    """The adapter's launcher ("torchrun", "horovodrun", ...)."""
    returncode: int | None
    ended: float | None
    """Wall clock when compare saw it end; None: it had not ended when compare began stopping."""
    log: Path
    host: str | None = None
    """Where it ran, in a launch of one command per node (None: the launch's only command)."""
    local: bool = True
    """It ran on this machine (not over ssh)."""
    silent: bool = False
    """No rank ever started on its host."""
    is_rank: bool = False
    """The command is itself a rank's supervisor (a single-process launch): its end is that rank's."""
    stopped: str | None = None
    """What the command itself says of a request to stop it received and acted on (adapters/base.py,
    launcher_stopped: srun's "forcing job termination"), if anything."""


@dataclass
class RankEnd:
    rank: int
    host: str | None
    kind: str
    """external | gone (vanished where no stop was recorded) | own | launch (stopped by the launch) | consequence |
    clean"""
    time: float | None
    text: str
    with_error: bool = False
    """Whether the log's first error line belongs with it (an exception's does; a signal leaves no line)."""
    abrupt: bool = False
    """An exit with a code that its worker did not write down (no exception recorded): its time is when its
    supervisor learnt of it, a moment after."""
    crash: str | None = None
    """The crash signal it died of (SIGSEGV, SIGABRT, ...): written down by its supervisor, a moment after too."""
    error: str | None = None
    """Its own exception, as it recorded it."""
    cause_containing: str | None = None
    """Only a log line containing this is its cause (an abort's: C++'s "terminate called")."""


ABRUPT_LAG_S = 1.0
"""How long after a rank's abrupt end its supervisor may write it down on a loaded machine (it is usually a few ms;
on a 2-core VM with four busy processes, a peer's exception at the broken connection was once recorded first)."""


def _signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def rank_ends(rank_dir: Path, name_hosts: bool = False) -> list[RankEnd]:
    """Each rank's first fact, classified (harness/shared/witness.py's records, read once the launch has ended)."""
    started, ended = rank_records(rank_dir, "start-rank*.json"), rank_records(rank_dir, "exit-rank*.json")
    failed = rank_records(rank_dir, "failed-rank*.json")
    asked: dict[int, list[dict]] = {}
    for f in rank_dir.glob("asked-rank*-*.json"):
        rec = read_json(f)
        if rec and rec.get("by") != SUPERVISOR:  # forwarded: the supervisor's own record says who asked
            asked.setdefault(rec["rank"], []).append(rec)
    stopping = {rec["host"]: rec for f in rank_dir.glob("stopping-*.json") if (rec := read_json(f))}
    out = []
    for k in sorted(set(started) | set(ended)):
        host = (started.get(k) or ended.get(k) or {}).get("host")
        who = f"rank {k}" + (f" on {host}" if name_hosts and host else "")
        stop = stopping.get(host)
        stop_t = stop["time"] if stop else None
        end = ended.get(k)
        facts = []  # (time, what, record)
        if k in asked:
            first = min(asked[k], key=lambda r: r["time"])
            facts.append((first["time"], "asked", first))
        if k in failed:
            facts.append((failed[k]["time"], "failed", failed[k]))
        if end and (end.get("signal") or end.get("code")):
            facts.append((end["time"], "end", end))
        if not facts:
            if end is not None and not (rank_dir / f"rank{k}.json").exists():
                # exit code 0 without the result every rank writes last: it stopped in the middle (os._exit(0),
                # sys.exit() in the model's code)
                out.append(RankEnd(k, host, "own", end["time"], f"{who} exited with code 0 before it finished (it "
                                                                 f"wrote no result: an exit in the model's code?)",
                                   abrupt=True))
            elif end is not None:
                out.append(RankEnd(k, host, "clean", end["time"], f"{who} ended cleanly"))
            elif stop is not None and k in stop["alive"]:
                out.append(RankEnd(k, host, "consequence", None, f"{who} stopped by compare"))
            else:
                out.append(RankEnd(k, host, "external" if stop is not None else "gone", None,
                                   f"{who} killed from outside (no exit status recorded: SIGKILL, or the OOM killer)"))
            continue
        t, what, rec = min(facts, key=lambda f: f[0])
        if stop_t is not None and t >= stop_t:
            out.append(RankEnd(k, host, "consequence", t, f"{who} stopped by compare"))
        elif what == "asked":
            by = rec["by"]
            if by == OUTSIDE:
                sender = (f"pid {rec['sender_pid']}" + (f": {rec['sender']}" if rec.get("sender") else "")
                          if rec["sender_pid"] > 0 else "the kernel, or a process in another PID namespace")
                out.append(RankEnd(k, host, "external", t, f"{who} killed by {rec['signal']} from outside ({sender})"))
            else:
                out.append(RankEnd(k, host, "launch" if by == LAUNCH else "consequence", t,
                                   f"{who} stopped by {'its launcher' if by == LAUNCH else by}"))
        elif what == "failed" or (end and end.get("code")):
            code = end.get("code") if end else None
            # sys.exit(0) in the model's code: an exception recorded, then a clean status, before the result
            how = ("exited with code 0 before it finished" if end is not None and code == 0
                   else f"exited with code {code if code else 1}")
            out.append(RankEnd(k, host, "own", t, f"{who} {how}", with_error=True,
                               abrupt=k not in failed, error=(failed.get(k) or {}).get("error")))
        elif end["signal"] in CRASH_SIGNALS:
            # An abort is usually C++'s terminate after an exception it prints first (gloo's "Received data size
            # doesn't match expected size ... collective mismatch"): that line is the cause.
            abort = end["signal"] == "SIGABRT"
            out.append(RankEnd(k, host, "own", t, f"{who} killed by {end['signal']}", with_error=abort,
                               crash=end["signal"], cause_containing="terminate called" if abort else None))
        elif end.get("oom"):
            out.append(RankEnd(k, host, "external", t, f"{who} {out_of_memory(end)}"))
        else:
            out.append(RankEnd(k, host, "external", t, f"{who} killed by {end['signal']}"))
    return out


def out_of_memory(end: dict) -> str:
    """"killed by the out-of-memory killer (SIGKILL; its peak memory 1.9 GiB; its memory cgroup's limit 2.0 GiB)",
    from a rank's exit record whose supervisor found the OOM killer's own record of the kill (harness/shared/oom.py)."""
    why = end["oom"]
    facts = [end["signal"]]
    if end.get("max_rss_bytes"):
        facts.append(f"its peak memory {_gib(end['max_rss_bytes'])}")
    if why.get("limit_bytes"):
        facts.append(f"its memory cgroup's limit {_gib(why['limit_bytes'])}")
    return f"killed by the out-of-memory killer ({'; '.join(facts)})"


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.0f} MiB"


def _first(ends: list[RankEnd]) -> RankEnd | None:
    """The earliest; one with no time (gone without a word, before compare began stopping) before any with one."""
    return min(ends, key=lambda e: (e.time is not None, e.time or 0.0), default=None)


def culprit(rank_dir: Path, commands: list[Command], name_hosts: bool = False) -> str:
    """Why a launch that ended by itself failed (compare's own stops, a timeout or Ctrl-C, say so elsewhere)."""
    ends = rank_ends(rank_dir, name_hosts)
    several = len(commands) > 1

    def with_cause(end: RankEnd) -> str:
        reason = end.text
        # Its own node's log first: in the joined log another node's consequence may come before the cause.
        own = [c.log for c in commands if several and matches_host(c.host, c.local, end.host)]
        if end.with_error:
            # a rank that recorded no exception of its own (an exit, an abort) is not explained by a peer's "connection
            # reset by peer", which may come first in the log
            how = {"containing": end.cause_containing, "causes_only": end.abrupt or end.crash is not None}
            cause = (first_error(own[0], **how) if own else None) or first_error(rank_dir / "launch.log", **how)
            if end.error and not consequence().search(end.error) and not ERROR_LINE.search(end.error):
                # SystemExit, KeyboardInterrupt: its own, which no log line reads as an error
                place = (raised_place(own[0], end.error) if own else None) or raised_place(rank_dir / "launch.log",
                                                                                          end.error)
                cause = end.error + (f" (raised in {place})" if place else "")
            if cause:
                reason += f"; first error: {cause}"
        if end.crash is not None and not (end.with_error and "; first error: " in reason):
            # a segfault in C code, or an abort() with no cause line ("terminate called ..."): where the user's code
            # was, from faulthandler's dump
            place = (crash_place(own[0]) if own else None) or crash_place(rank_dir / "launch.log")
            if place:
                reason += f"; crashed in {place}"
        silent = [c.host for c in commands if c.silent and c.host]
        return (f"no rank started on {', '.join(silent)}; " if silent else "") + reason

    killed = sorted((c for c in commands if not c.is_rank and c.ended is not None and c.returncode is not None
                     and c.returncode < 0 and _signal_name(c.returncode) not in CRASH_SIGNALS),
                    key=lambda c: c.ended)
    if killed:
        c = killed[0]
        ranks = [e for e in ends if not several or matches_host(c.host, c.local, e.host)]
        after = ("while its ranks ran; the ranks it left were then stopped" if ranks
                 else "before any of its ranks started")
        return (f"{c.host}: " if several and c.host else "") + (
            f"the launcher ({c.launcher}) was killed by {_signal_name(c.returncode)} from outside {after}")
    asked = sorted((c for c in commands if c.stopped and c.ended is not None), key=lambda c: c.ended)
    if asked:
        return (f"{asked[0].host}: " if several and asked[0].host else "") + (
            f"the launcher ({asked[0].launcher}) {asked[0].stopped}")
    outside = _first([e for e in ends if e.kind == "external"])
    if outside:
        return with_cause(outside)
    gone = _first([e for e in ends if e.kind == "gone"])
    if gone:
        return with_cause(gone)
    own_ends = [e for e in ends if e.kind == "own"]
    own = _first(own_ends)
    if own and not own.abrupt:  # an exception just before a peer's abrupt end, which is written down late: its effect
        # (a crash signal too: a segfault is never a peer's effect, an abort is one unless the exception is a peer's
        # "connection reset")
        late = [e for e in own_ends if e.time is not None and e.time - own.time < ABRUPT_LAG_S]
        peer_gone = bool(own.error and consequence().search(own.error))
        own = (_first([e for e in late if e.crash not in (None, "SIGABRT")]) or _first([e for e in late if e.abrupt])
               or (_first([e for e in late if e.crash == "SIGABRT"]) if peer_gone else None) or own)
    if own:
        return with_cause(own)
    failed = sorted((c for c in commands if not c.is_rank and c.ended is not None and c.returncode),
                    key=lambda c: c.ended)
    stopped = any(e.kind == "launch" for e in ends)
    if failed:
        c = failed[0]
        cause = first_error(c.log)
        if several:
            before = " before any rank started there" if c.silent else ""
            cause = cause or last_line(c.log)
            return f"{c.host}: {exit_reason(c.returncode)}{before}" + (f"; first error: {cause}" if cause else "")
        if stopped:
            how = (f"was killed by {_signal_name(c.returncode)}" if c.returncode < 0
                   else f"exited with code {c.returncode}")
            return f"the launcher ({c.launcher}) {how} and stopped its ranks" + (
                f"; first error: {cause}" if cause else "")
        return exit_reason(c.returncode) + (f"; first error: {cause}" if cause else "")
    rc = next((c.returncode for c in commands if c.returncode), None)
    cause = first_error(rank_dir / "launch.log")
    return exit_reason(rc) + (f"; first error: {cause}" if cause else "")


def outlived(rank_dir: Path, ranks: list[int]) -> str | None:
    """For a launch that exited 0 while these ranks had written no result: what the facts say of them, if each was
    still alive when its host's stopper began (so they ended only after, stopped)."""
    started = rank_records(rank_dir, "start-rank*.json")
    stopping = {rec["host"]: rec for f in rank_dir.glob("stopping-*.json") if (rec := read_json(f))}
    stop = [stopping.get(started[k].get("host"), {}) if k in started else {} for k in ranks]
    if not ranks or not all(k in s.get("alive", []) for k, s in zip(ranks, stop)):
        return None
    orphaned = [k for k, s in zip(ranks, stop) if k in s.get("orphaned", [])]
    if orphaned:
        parents = sorted({(started[k]["parent_pid"], started[k].get("parent", "")) for k in orphaned})
        which = "; ".join(f"pid {pid}" + (f": {cmd}" if cmd else "") for pid, cmd in parents)
        return f"the process that started them ({which}) ended while they ran, and compare then stopped them"
    return "they were still running when it exited, and compare then stopped them"



def describe(rank_dir: Path, commands: list[Command], reason: str) -> str:
    """The facts a reason was decided from, as a few lines for the launch log."""
    lines = [f"\ncompare: what ended this launch (harness/launching/culprit.py): {reason}"]
    for c in commands:
        when = "before compare began stopping" if c.ended is not None else "after compare began stopping"
        lines.append(f"  the launcher ({c.launcher}){f' on {c.host}' if c.host else ''}: "
                     f"returncode {c.returncode}, ended {when}")
    for e in rank_ends(rank_dir, name_hosts=True):
        lines.append(f"  {e.text} [{e.kind}{f', at {e.time:.3f}' if e.time is not None else ''}]")
    for f in sorted(rank_dir.glob("stopping-*.json")):
        rec = read_json(f) or {}
        lines.append(f"  stopping began on {rec.get('host')} at {rec.get('time', 0):.3f}; ranks alive then: "
                     f"{rec.get('alive')}")
    return "\n".join(lines) + "\n"


def launcher_name(argv: list[str], launcher: str) -> str:
    """What a reason calls a launch command: the adapter's launcher, or srun where SLURM starts it."""
    return "srun" if argv and Path(argv[0]).name == "srun" else launcher
