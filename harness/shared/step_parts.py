"""Where a training step's time goes, the same way for every backend: interval arithmetic over a profiled step.

Runs in: every rank (`split_step`, on the events of its own profiled steps, harness/rank/breakdown.py) and the parent
(`combine`, over every rank's parts, harness/core/assemble.py). Nothing here imports torch or knows a framework.

A step is the wall-clock range from the start of its zero_grad to the end of its optimizer step (the device synced).
Inside it, every instant is one of:

- **compute** of a phase (forward, backward, optimizer): an operator (on CPU: an `aten::` op of the training
  thread; on CUDA: a kernel that is not a collective) runs; its phase is the one it was issued in;
- **exposed communication**: a collective is in flight (a gloo or NCCL event, or a range an adapter marks as
  waiting for its framework's collectives) and no operator runs: the step waits for the wire;
- **host time of a phase**: nothing of the above (Python, dispatch, launching kernels), counted in the phase whose
  range holds that instant, or `other` outside the three (zero_grad, the device sync).

So forward + backward + optimizer + other + exposed = the step, exactly. Communication *overlapped* with compute is
reported beside them and not added: that time is already inside a phase. Across ranks (`combine`), the exposed part
is split into **waiting for the slowest rank** (this rank's busy time short of the busiest rank's in the same step:
the collective could not finish before that rank arrived) and **communication exposed** (the rest: the wire).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, Callable, Iterable

PHASES = ("forward", "backward", "optimizer")
PARTS = ("forward", "backward", "optimizer", "other", "comm_exposed", "waiting")
"""The parts of a step, in the order they are stacked; they add up to the step."""
PART_NAMES = {"forward": "forward", "backward": "backward", "optimizer": "optimizer", "other": "other",
              "comm_exposed": "comm exposed", "waiting": "waiting for slowest rank"}
COMM_RANGE = "compare.comm:"
"""Prefix of a profiler range an adapter opens where the training thread waits for its framework's collectives."""
KINDS = (("allreduce", "all-reduce"), ("allgather", "all-gather"), ("reducescatter", "reduce-scatter"),
         ("broadcast", "broadcast"), ("alltoall", "all-to-all"), ("barrier", "barrier"), ("reduce", "reduce"),
         ("gather", "gather"), ("scatter", "scatter"), ("send", "send"), ("recv", "recv"))


def comm_range(kind: str):
    """The range an adapter wraps a wait for its framework's own collectives in (`kind`: "all-reduce", ...), for a
    framework whose collectives torch.profiler does not see (Horovod's run in its own C++ thread): a profiler range
    when a profiler runs, a few hundred nanoseconds otherwise."""
    from torch.profiler import record_function

    return record_function(COMM_RANGE + kind)


def collective_kind(name: str) -> str:
    """The collective an event's name stands for ("gloo:all_reduce", "ncclDevKernel_AllGather_RING_LL",
    "compare.comm:all-reduce (Horovod)" -> all-reduce, all-gather, all-reduce); "collective" when none is named."""
    flat = "".join(c for c in name.lower() if c.isalpha())
    for key, kind in KINDS:
        if key in flat.replace("allgatherintotensor", "allgather").replace("allgatherbase", "allgather"):
            return kind
    return "collective"


def split_step(step: tuple[int, int], phases: dict[str, list[tuple[int, int]]],
               compute: Iterable[tuple[int, int, str]], comm: Iterable[tuple[int, int, str]]) -> dict[str, Any]:
    """One rank's step (start, end) in ns, split into parts.

    `phases`: phase -> its ranges on the training thread; `compute`: (start, end, phase) of every operator (nested
    ones may overlap: any running counts once); `comm`: (start, end, kind) of every collective in flight. Returns
    seconds: step_s, each of PHASES and "other" (compute plus host time), "exposed" with "exposed_by_kind", and
    "overlapped" (communication while compute ran, not added)."""
    lo, hi = step
    edges: list[tuple[int, int, str, str]] = []  # (time, +1/-1, what, label)
    for name, ranges in phases.items():
        for s, e in ranges:
            s, e = max(s, lo), min(e, hi)
            if e > s:
                edges += [(s, 1, "phase", name), (e, -1, "phase", name)]
    for s, e, phase in compute:
        s, e = max(s, lo), min(e, hi)
        if e > s:
            edges += [(s, 1, "compute", phase), (e, -1, "compute", phase)]
    for s, e, kind in comm:
        s, e = max(s, lo), min(e, hi)
        if e > s:
            edges += [(s, 1, "comm", kind), (e, -1, "comm", kind)]
    edges.sort(key=lambda x: (x[0], x[1]))
    out = {p: 0.0 for p in (*PHASES, "other")}
    by_kind: dict[str, float] = {}
    exposed = overlapped = 0.0
    active = {"phase": {}, "compute": {}, "comm": {}}
    t = lo
    for when, delta, what, label in edges + [(hi, 0, "", "")]:
        if when > t:
            seg = (when - t) / 1e9
            running = [k for k, n in active["compute"].items() if n > 0]
            wire = sorted(k for k, n in active["comm"].items() if n > 0)
            if running:
                # nested operators of one phase; operators of two phases at once (a kernel of the forward still
                # running when the backward's first is issued) share the segment
                for k in running:
                    out[k if k in out else "other"] += seg / len(running)
                if wire:
                    overlapped += seg
            elif wire:
                exposed += seg
                for k in wire:
                    by_kind[k] = by_kind.get(k, 0.0) + seg / len(wire)
            else:
                phase = next((k for k, n in active["phase"].items() if n > 0), "other")
                out[phase] += seg
            t = when
        if delta:
            bucket = active[what]
            bucket[label] = bucket.get(label, 0) + delta
    return {"step_s": (hi - lo) / 1e9, **out, "exposed": exposed, "exposed_by_kind": by_kind,
            "overlapped": overlapped}


def split_steps(steps: list[tuple[int, int]], phases: dict[str, list[tuple[int, int]]],
                compute: Iterable[tuple[int, int, str]], comm: Iterable[tuple[int, int, str]],
                on_step: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """Every step of `steps` split by split_step, in time linear in the events: each range (a phase, an operator, a
    collective) is handed to the steps it overlaps only, found by bisection over the steps' starts, instead of every
    step looking at every event of every step (which made 1,000 profiled steps take longer than the stall watch
    waits). `on_step(k, n)` is called before each step is split (a rank reports progress with it)."""
    order = sorted(range(len(steps)), key=lambda k: steps[k])
    starts = [steps[k][0] for k in order]
    per_step: list[dict[str, Any]] = [{"phases": {name: [] for name in phases}, "compute": [], "comm": []}
                                      for _ in steps]

    def owners(s: int, e: int):
        i = max(0, bisect_right(starts, s) - 1)
        while i < len(order) and starts[i] < e:
            lo, hi = steps[order[i]]
            if min(e, hi) > max(s, lo):
                yield order[i]
            i += 1

    for name, ranges in phases.items():
        for r in ranges:
            for k in owners(r[0], r[1]):
                per_step[k]["phases"][name].append(r)
    for key, events in (("compute", compute), ("comm", comm)):
        for ev in events:
            for k in owners(ev[0], ev[1]):
                per_step[k][key].append(ev)
    out = []
    for k, step in enumerate(steps):
        if on_step is not None:
            on_step(k, len(steps))
        mine = per_step[k]
        out.append(split_step(step, mine["phases"], mine["compute"], mine["comm"]))
    return out


def combine(ranks: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Every rank's split steps (the same steps on each) -> the parts of a step averaged over ranks and steps,
    with the exposed part split into waiting for the slowest rank and communication exposed, and the same for
    each rank alone ("ranks") so the slowest can be named. Steps missing on any rank are left out."""
    n = min((len(r) for r in ranks), default=0)
    per_rank = [{p: 0.0 for p in (*PARTS, "step_s", "overlapped")} | {"exposed_by_kind": {}} for _ in ranks]
    for k in range(n):
        steps = [r[k] for r in ranks]
        busy = [s["step_s"] - s["exposed"] for s in steps]
        top = max(busy)
        for acc, s, b in zip(per_rank, steps, busy):
            wait = min(s["exposed"], max(0.0, top - b))
            wire = s["exposed"] - wait
            for p in (*PHASES, "other", "step_s", "overlapped"):
                acc[p] += s[p] / n
            acc["waiting"] += wait / n
            acc["comm_exposed"] += wire / n
            scale = wire / s["exposed"] if s["exposed"] > 0 else 0.0
            for kind, v in s["exposed_by_kind"].items():
                acc["exposed_by_kind"][kind] = acc["exposed_by_kind"].get(kind, 0.0) + v * scale / n
    return {"steps": n, **mean(per_rank), "ranks": per_rank}


def mean(many: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean of several steps' parts (ranks' or launches'): each part, the step, the overlap and the exposed
    communication by collective; the means still add up to the mean step."""
    n = len(many)
    out: dict[str, Any] = {p: sum(m[p] for m in many) / n if n else 0.0 for p in (*PARTS, "step_s", "overlapped")}
    kinds: dict[str, float] = {}
    for m in many:
        for kind, v in m["exposed_by_kind"].items():
            kinds[kind] = kinds.get(kind, 0.0) + v / n
    out["exposed_by_kind"] = kinds
    return out


def busy(parts: dict[str, Any]) -> float:
    """A rank's compute and host time in its parts: its step less the time it waited on the wire."""
    return sum(parts[p] for p in (*PHASES, "other"))


def largest_difference(a: dict[str, Any], b: dict[str, Any]) -> tuple[str, float]:
    """The part (with the collective kind for exposed communication) by which breakdown `a` exceeds `b` the most,
    in seconds per step: ("exposed all-gather", 0.0061)."""
    best, by = "", float("-inf")
    for p in PARTS:
        if p == "comm_exposed":
            kinds = set(a.get("exposed_by_kind", {})) | set(b.get("exposed_by_kind", {}))
            for kind in kinds:
                d = a.get("exposed_by_kind", {}).get(kind, 0.0) - b.get("exposed_by_kind", {}).get(kind, 0.0)
                if d > by:
                    best, by = f"exposed {kind}", d
            rest = ((a["comm_exposed"] - sum(a.get("exposed_by_kind", {}).values()))
                    - (b["comm_exposed"] - sum(b.get("exposed_by_kind", {}).values())))
            if not kinds and rest > by:
                best, by = "exposed communication", rest
            continue
        d = a[p] - b[p]
        if d > by:
            best, by = PART_NAMES[p] if p != "waiting" else "waiting for the slowest rank", d
    return best, by
