"""Which rank of a stalled launch stopped first: from each rank's step counter and the Python stack of its training
thread, the rank that is behind every other.

Runs in: the parent (harness/launching/launch.py, once the stall watch has asked every rank on this machine for its
stacks). In data-parallel training no rank gets more than a collective ahead of a peer that stopped: the peers wait
for it in the next collective, further on in the same step (or at most in the next one). So the rank that stopped is
the one whose place is behind every other's, where a place is (the steps it has finished, the line of the training
loop its training thread is at: harness/rank/train.py runs a step's statements top to bottom). Ranks at the same place
(all blocked inside one collective) name none, unless one alone is not waiting for its peers (in a communication
library) or, of ranks none of which is, one alone is in the user's code (a hook hanging in the backward, while DDP's
reducer waits inside the autograd engine): otherwise the stacks in the log say more than a guess would.
"""

from __future__ import annotations

import functools
import json
import re
import signal
import socket
import time
from pathlib import Path

import psutil

from harness.launching.launch_logs import FRAME, python_own, shown_frame, users_place

LOOP = ("harness/rank/train.py", "run")
"""The training loop's frame: (file, function)."""


def _threads(dump: str) -> list[list[tuple[str, int, str]]]:
    """faulthandler's dump (every thread, most recent call first) -> each thread's frames as (file, line, func)."""
    threads: list[list[tuple[str, int, str]]] = []
    for line in dump.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            threads.append([])
            continue
        m = FRAME.match(line)
        if m and threads:
            threads[-1].append((m["file"], int(m["line"]), m["func"]))
    return threads


@functools.cache
def _communication() -> re.Pattern:
    """Where a rank waits for its peers: torch.distributed (DDP's reducer, FSDP's all-gather and reduce-scatter, the
    collectives), and each framework's communication code as its adapter declares it (DeepSpeed's comm module,
    Horovod)."""
    import adapters

    paths = ["torch/distributed", *(p for declared in adapters.declared("COMM_PATHS") for p in declared)]
    return re.compile(r"[/\\](" + "|".join(re.escape(p).replace("/", r"[/\\]") for p in paths) + r")[/\\]")


def _place(dump: str) -> tuple[int, tuple[str, int, str]] | None:
    for frames in reversed(_threads(dump)):  # the last dump of the file is the latest
        loop = [f for f in frames if f[0].endswith(LOOP[0]) and f[2] == LOOP[1]]
        if loop:
            return loop[-1][1], next((f for f in frames if not python_own(f[0])), frames[0])
    return None


def loop_place(dump: str) -> tuple[int, str] | None:
    """(the line of the training loop a rank's training thread is at, its innermost frame outside Python's own
    library in words: a user's model, torch, the harness, and where that is not the user's code, the innermost frame
    of the user's code that called it: "barrier (distributed_c10d.py:5356), called from forward (model.py:47)"),
    from its stack dump; None where no thread is in the training loop (set-up, a comm launch)."""
    place = _place(dump)
    if place is None:
        return None
    said = shown_frame(*place[1])
    frames = next((f for f in reversed(_threads(dump)) if place[1] in f), [])
    # the callers between that frame and the training loop's (most recent call first)
    callers = frames[frames.index(place[1]) + 1:]
    callers = callers[:next((i for i, f in enumerate(callers) if f[0].endswith(LOOP[0]) and f[2] == LOOP[1]),
                            len(callers))]
    mine = next((p for f in callers if (p := users_place(*f))), None)
    return place[0], said if mine is None or mine == said else f"{said}, called from {mine}"


def waiting(dump: str) -> bool:
    """Whether the training thread's innermost frame outside Python's library is in a communication library: the
    rank waits for its peers there."""
    place = _place(dump)
    return place is not None and bool(_communication().search(place[1][0]))


def first_to_stop(steps: dict[int, int], dumps: dict[int, str]) -> dict | None:
    """{"rank", "steps", "where"} of the rank behind every other (steps: rank -> steps finished; dumps: rank -> its
    stack dump), or None when fewer than two ranks are placed or no single one is behind."""
    places = {}
    for rank, dump in dumps.items():
        place = loop_place(dump)
        if place is not None and rank in steps:
            places[rank] = ((steps[rank], place[0]), place[1])
    if len(places) < 2:
        return None
    lowest = min(p for p, _ in places.values())
    behind = [rank for rank, (p, _) in places.items() if p == lowest]
    if len(behind) > 1:  # at one line of the loop (FSDP gathers a unit's parameters inside the forward): the rank
        # that is not waiting for its peers in a communication library, while they all are, is the one that stopped
        free = [rank for rank in behind if not waiting(dumps[rank])]
        # DDP's reducer waits inside the autograd engine (C++, under torch/autograd): a rank whose innermost frame is
        # the user's code (a hook that hangs in the backward) beside ranks in torch's is the one that stopped
        mine = [rank for rank in free if users_place(*_place(dumps[rank])[1])]
        if len(free) == 1:
            behind = free
        elif len(mine) == 1:
            behind = mine
        elif not free and len({places[r][1] for r in behind}) > 1:  # each waits, in a different collective
            return {"rank": None, "mismatch": {r: places[r][1] for r in sorted(behind)}}
    if len(behind) != 1:
        return None
    rank = behind[0]
    ahead = sorted(r for r in places if r != rank)
    if (waiting(dumps[rank]) and all(steps[r] == steps[rank] and waiting(dumps[r]) for r in ahead)
            and len({places[r][1] for r in places}) > 1):
        # every rank waits in a collective of the same step, the one behind too, each in another: it did not stop,
        # it called one its peers never reach (a barrier on one rank alone)
        return {"rank": None, "mismatch": {r: places[r][1] for r in sorted(places)}}
    if waiting(dumps[rank]) and all(steps[r] > steps[rank] for r in ahead):
        # No rank finishes a step without its peers' part in the step's collectives: peers a whole step further
        # on than a rank that waits in one did not take part in it (a collective skipped, or one added)
        return {"rank": ahead[0] if len(ahead) == 1 else None, "behind": rank, "ahead": ahead,
                "steps": steps[rank], "where": places[rank][1]}
    return {"rank": rank, "steps": steps[rank], "where": places[rank][1]}


def describe(found: dict) -> str:
    """"rank 1 stopped first, after 4 step(s), in inject (harness/rank/faults.py:41): the other ranks went further",
    or, where the ranks' collectives no longer match, which rank waits where and which went on."""
    if "mismatch" in found:
        return ("the ranks wait in different collectives (" + "; ".join(
            f"rank {r} in {where}" for r, where in found["mismatch"].items()) + "): their collectives no longer "
            "match, as where a rank skips or adds one")
    if "behind" in found:
        ahead = ", ".join(map(str, found["ahead"]))
        return (f"rank {found['behind']} waits in {found['where']} in step {found['steps'] + 1} while rank"
                f"{'s' if len(found['ahead']) > 1 else ''} {ahead} went on past that step without it: the ranks' "
                f"collectives no longer match (a collective rank{'s' if len(found['ahead']) > 1 else ''} {ahead} "
                f"skipped, or one rank {found['behind']} added)")
    return (f"rank {found['rank']} stopped first, after {found['steps']} step(s), in {found['where']}: the other ranks "
            f"went further")


def _grown(files: list[Path], wait_s: float) -> None:
    """Wait at most `wait_s` for every file to be written and to stop growing."""
    # Real time, not a launch's clock: this bounds how long real processes may write, sleeping between looks.
    size, end = -1, time.monotonic() + wait_s
    while files and time.monotonic() < end:
        sizes = [f.stat().st_size if f.exists() else 0 for f in files]
        if all(sizes) and sum(sizes) == size:
            break
        size = sum(sizes)
        time.sleep(0.25)  # not a synchronisation: the processes write their stacks at their own pace


_LOADER = re.compile(r"stacks-rank(?P<rank>\d+)-loader(?P<worker>\d+)-pid(?P<pid>\d+)\.txt$")


def ask_loader_stacks(rank_dir: Path, workers: dict[int, psutil.Process], wait_s: float) -> dict[int, list[dict]]:
    """SIGUSR1 to the DataLoader workers of these ranks (the worker processes `workers` maps each rank to), each of
    which writes its stacks into its own file (harness/rank/train.py: loader_worker_stacks); rank -> [{"worker",
    "pid", "where", "dataloader", "stacks"}] for those that answered, "where" the innermost frame of its main thread
    outside Python's own library, in words, "stacks" what it wrote."""
    asked = []
    for f in sorted(rank_dir.glob("stacks-rank*-loader*-pid*.txt")):
        m = _LOADER.search(f.name)
        k = int(m["rank"]) if m else -1
        if k not in workers:
            continue
        try:
            child = psutil.Process(int(m["pid"]))
            if child.ppid() != workers[k].pid:
                continue  # ended, its pid reused
            child.send_signal(signal.SIGUSR1)
            asked.append((k, int(m["worker"]), child.pid, f))
        except (OSError, psutil.Error):
            continue
    _grown([f for *_, f in asked], wait_s)
    out: dict[int, list[dict]] = {}
    for k, worker, pid, f in asked:
        text = f.read_text(errors="replace") if f.exists() else ""
        threads = _threads(text)
        frames = threads[-1] if threads else []  # the main thread's dump comes last ("Current thread")
        inner = next((fr for fr in frames if not python_own(fr[0])), None)
        if inner is not None:
            out.setdefault(k, []).append({"worker": worker, "pid": pid, "where": shown_frame(*inner),
                                          "dataloader": bool(_DATALOADER.search(inner[0])), "stacks": text})
    return out


_DATALOADER = re.compile(r"[/\\]torch[/\\]utils[/\\]data[/\\]")
"""torch's DataLoader machinery: a worker whose innermost frame is there waits for work, not in a Dataset."""


def ask_stacks(rank_dir: Path, wait_s: float) -> tuple[dict[int, str], dict[int, str], dict[int, list[dict]]]:
    """SIGUSR1 to the worker of every rank of a launch that runs on this machine (its start-rank<k>.json in
    `rank_dir`); each writes every thread's Python stack into its stacks-rank<k>.txt (harness/rank/life.py). Waits at
    most `wait_s` for the files to stop growing; returns (rank -> its stacks, for the ranks that answered; rank ->
    why not, in words, for those asked that did not: a stopped worker (SIGSTOP, a debugger) or one that blocks the
    signal); and, where a rank reads through DataLoader workers, theirs (`ask_loader_stacks`)."""
    here, asked, workers = socket.gethostname(), [], {}
    for f in sorted(rank_dir.glob("start-rank*.json")):
        try:
            started = json.loads(f.read_text())
            if started.get("host") != here:
                continue
            worker = psutil.Process(int(started["worker_pid"]))
            if worker.ppid() != int(started["supervisor_pid"]):
                continue  # gone, and its pid reused
            worker.send_signal(signal.SIGUSR1)
            asked.append(int(started["rank"]))
            workers[int(started["rank"])] = worker
        except (OSError, ValueError, KeyError, psutil.Error):
            continue
    files = [rank_dir / f"stacks-rank{k}.txt" for k in sorted(asked)]
    _grown(files, wait_s)
    answered, silent = {}, {}
    for k, f in zip(sorted(asked), files):
        text = f.read_text(errors="replace") if f.exists() else ""
        if text:
            answered[k] = text
            continue
        try:
            state = workers[k].status()
        except psutil.Error:
            state = "gone"
        silent[k] = (f"its worker (pid {workers[k].pid}) is stopped (SIGSTOP, or a debugger holds it)"
                     if state in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
                     else f"its worker (pid {workers[k].pid}, {state}) did not write them: it may block SIGUSR1")
    return answered, silent, ask_loader_stacks(rank_dir, workers, wait_s)


def loader_text(loaders: dict[int, list[dict]]) -> str:
    """"rank 1's DataLoader worker 0 (pid 4781) was in __getitem__ (mydata.py:12)" for each worker found in the
    Dataset's code or anywhere else but waiting in the DataLoader's own machinery; "" where none was."""
    return "; ".join(f"rank {k}'s DataLoader worker {w['worker']} (pid {w['pid']}) was in {w['where']}"
                     for k, found in sorted(loaders.items()) for w in found if not w["dataloader"])
