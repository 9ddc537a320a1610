"""A few training steps under torch.profiler, after the timed window, split into the parts of a step
(harness/shared/step_parts.py), with the trace kept where asked.

Runs in: every rank of a launch whose spec asks for it (`spec.breakdown`), after the evaluation and before rank 0
tells the parent the measurement is over, so no other launch runs meanwhile and the timed steps and the evaluation
are those of a run without it. The steps are the training loop's own calls (zero_grad, forward and loss under the
adapter's autocast, the adapter's backward and step), each phase inside a `compare.<phase>` range, the device synced
at the end of each step. Every rank profiles the same steps at once.

What counts as what, from the profiler's events: the training thread is the one that ran `compare.step`; an
operator is an `aten::` event of that thread on CPU, a kernel on CUDA; a collective is an event of gloo (`gloo:*`,
on gloo's own threads) or an NCCL kernel, or a `compare.comm:<kind>` range, in which an adapter whose framework
communicates outside torch (Horovod's C++ thread) marks the training thread waiting for it.
"""

from __future__ import annotations

import gzip
import os
import shutil
from bisect import bisect_right
from itertools import accumulate
from pathlib import Path

from harness.shared.step_parts import COMM_RANGE, PHASES, collective_kind, split_steps


def run(n: int, step, device, sync, trace_path: Path | None, say=lambda text: None,
        before_split=lambda: None) -> dict:
    """Profile `n` calls of `step(phase)` after one more (the profiler's warm-up, not kept); `phase(name)` is the
    range a step opens for "forward", "backward" and "optimizer". Each kept step is split into its parts, in time
    linear in the events (step_parts.split_steps); `say(text)` is told what it does meanwhile (the rank's progress,
    which the parent's stall watch reads: reading and splitting 1,000 profiled steps takes a while). Returns
    {"steps": parts per step, "collectives": {"wire": collectives' own events, "waits": ranges of waiting for a
    framework's own}, "events": all events, "trace": the trace written (`trace_path`) or None, "trace_s": seconds
    spent writing it}. `before_split()` is called once the events are collected (fault injection: "split")."""
    import time

    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    cuda = str(device).startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])

    def phase(name):
        return record_function(f"compare.{name}")

    # One step under the profiler first, not kept (its start-up: the first step it sees is slower), then `n`.
    with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=n, repeat=1)) as prof:
        for k in range(n + 1):
            with record_function("compare.step"):
                step(phase)
                sync()
            if k == n:  # the profiler stops and processes what it recorded in this call
                say(f"collecting the profiler's events of {n} step(s)")
            prof.step()
    events = prof.profiler.kineto_results.events()
    before_split()
    say(f"classifying {len(events):,} profiler events")
    steps, phases, compute, comm, seen = _classify(events, cuda)
    parts = split_steps(steps, phases, compute, comm,
                        on_step=lambda k, total: say(f"splitting profiled step {k + 1} of {total}"))
    trace, trace_s = None, None
    if trace_path is not None:
        say("writing the trace")
        t0 = time.perf_counter()
        raw = trace_path.with_suffix("")  # trace.json, then gzipped: Perfetto and chrome://tracing open either
        prof.export_chrome_trace(str(raw))
        with open(raw, "rb") as src, gzip.open(trace_path, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        os.unlink(raw)
        trace, trace_s = str(trace_path), time.perf_counter() - t0
    return {"steps": parts, "collectives": seen, "events": len(events), "trace": trace, "trace_s": trace_s}


def _classify(events, cuda: bool):
    """Step ranges, phase ranges, operators (with their phase) and collectives (with their kind) from kineto's
    events, in ns of the wall clock (comparable between the ranks of one machine)."""
    def span(e):
        return e.start_ns(), e.start_ns() + e.duration_ns()

    cpu = [e for e in events if e.device_type().name == "CPU"]
    step_events = [e for e in cpu if e.name() == "compare.step"]
    main = step_events[0].start_thread_id() if step_events else None
    steps = sorted(span(e) for e in step_events)
    phases: dict[str, list[tuple[int, int]]] = {p: [] for p in PHASES}
    for e in cpu:
        if e.start_thread_id() == main and e.name().startswith("compare.") and e.name()[8:] in phases:
            phases[e.name()[8:]].append(span(e))

    # The phases of the training thread follow one another: bisection over their starts names the phase of an
    # instant in log time (a scan of every range for every event was quadratic in the profiled steps).
    ranges = sorted((s, e, name) for name, spans in phases.items() for s, e in spans)
    range_starts = [r[0] for r in ranges]
    reach = list(accumulate((r[1] for r in ranges), max))  # the latest end of any range up to each one

    def phase_at(t: int) -> str:
        i = bisect_right(range_starts, t) - 1
        while i >= 0 and reach[i] > t:
            if t < ranges[i][1]:
                return ranges[i][2]
            i -= 1
        return "other"

    comm: list[tuple[int, int, str]] = []
    compute: list[tuple[int, int, str]] = []
    seen = {"wire": 0, "waits": 0}  # collectives' own events; ranges an adapter marks as waiting for its own
    for e in cpu:
        name = e.name()
        if name.startswith(COMM_RANGE) and e.start_thread_id() == main:
            comm.append((*span(e), collective_kind(name[len(COMM_RANGE):])))
            seen["waits"] += 1
        elif name.startswith(("gloo:", "nccl:")) and e.start_thread_id() != main:
            comm.append((*span(e), collective_kind(name)))
            seen["wire"] += 1
        elif not cuda and name.startswith("aten::") and e.start_thread_id() == main:
            s, end = span(e)
            compute.append((s, end, phase_at(s)))
    if cuda:
        # A kernel belongs to the phase its launch was made in: the runtime or driver call (cudaLaunchKernel,
        # cuLaunchKernelEx, cudaMemcpyAsync ...) of the same CUDA correlation id. The trace's "External id"
        # (profilers' linked_correlation_id) is not that: it names the CPU operator that made the call, another
        # numbering, and matching it against launches gave kernels the phase of unrelated calls (the fourth GPU lease).
        launched = {e.correlation_id(): phase_at(e.start_ns()) for e in cpu
                    if e.correlation_id() and e.name().startswith("cu")}
        for e in events:
            if e.device_type().name != "CUDA" or e.duration_ns() <= 0 or _annotation(e):
                continue
            name = e.name()
            if "nccl" in name.lower():
                comm.append((*span(e), collective_kind(name)))
                seen["wire"] += 1
            else:  # a kernel, a copy or a memset: the device is busy
                compute.append((*span(e), launched.get(e.correlation_id(), "other")))
    return steps, phases, compute, comm, seen


def _annotation(e) -> bool:
    """A range on the GPU's timeline that kineto draws for a record_function (its "gpu_user_annotation": compare's
    own phases, DDP's forward, the optimizer's step ...), spanning the kernels launched inside it: not device work
    of its own, and counting it as a kernel marked whole phases busy (the fourth GPU lease)."""
    kind = getattr(e, "activity_type", None)
    if kind is not None and "user_annotation" in str(kind()):
        return True
    flag = getattr(e, "is_user_annotation", None)
    return bool(flag is not None and flag())


class TraceEvent:
    """An event of a Chrome trace that torch.profiler exported (`--trace`), read as harness/rank/breakdown.py reads
    kineto's own: so a kept trace can be split again after the run (`split_trace`), by later rules or on another
    machine. Its "correlation" is the CUDA correlation id, its "External id" the CPU operator it came from."""

    DEVICE = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")

    class _Kind:
        def __init__(self, name: str):
            self.name = name

    def __init__(self, e: dict):
        self._e = e

    def name(self) -> str:
        return self._e["name"]

    def start_ns(self) -> int:
        return round(self._e["ts"] * 1000)

    def duration_ns(self) -> int:
        return round(self._e.get("dur", 0) * 1000)

    def start_thread_id(self):
        return self._e.get("tid")

    def device_type(self):
        return self._Kind("CUDA" if self._e.get("cat") in self.DEVICE else "CPU")

    def correlation_id(self) -> int:
        return (self._e.get("args") or {}).get("correlation", 0)

    def activity_type(self) -> str:
        return self._e.get("cat") or ""


def trace_events(path: Path) -> list[TraceEvent]:
    """The complete events ("ph": "X") of a Chrome trace file (.json or .json.gz), as TraceEvents."""
    import json

    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return [TraceEvent(e) for e in json.loads(raw)["traceEvents"] if e.get("ph") == "X"]


def split_trace(path: Path) -> list[dict]:
    """Each profiled step of a kept trace split into its parts, as the rank split them (one rank's view)."""
    events = trace_events(path)
    cuda = any(e.device_type().name == "CUDA" for e in events)
    steps, phases, compute, comm, _ = _classify(events, cuda)
    return split_steps(steps, phases, compute, comm)
