"""A model of one data-parallel training step: each backend's schedule priced from its compute (compute.py) and its
collectives (comm_cost.py), with its overlap rules; memory per rank; parallel efficiency.

Runs in: the parent. Pure arithmetic, no torch. Its inputs are measurements this tool makes (a compute profile at
world size 1, a `compare comm` sweep) or published single-device figures, and hardware profiles
(harness/model/profiles/*.json, each number with its source: hardware.py).

One step of a backend on N ranks, per-rank batch b:

    forward(b) -> backward(b), during which gradients become ready (sizes and times from the compute profile)
    -> the backend's communication, overlapped with backward as its schedule dictates
    -> optimizer step (on 1/N of the parameters from ZeRO-1 on)
    + the backend's own per-step cost beyond the plain loop, measured at world size 1 ("overhead")

Collectives follow nccl-tests' accounting: an all-reduce of S bytes moves 2(N-1)/N x S per rank, so
t = latency + 2(N-1)/N x S / busbw; reduce-scatter and all-gather move (N-1)/N x S. On a hardware profile the
latency is NCCL's: a ring of 2(N-1) steps or a tree of 2 log2(nodes) network steps (plus the steps inside a node),
each step priced by where it goes, plus a base latency per call; all-reduce takes the cheaper, as NCCL's tuner
does. Measured here, a collective at a world size the `compare comm` sweep measured is priced from that sweep's
mean time per size (the non-decreasing curve closest to them, linear between sizes); latency and bandwidth fitted
per collective, backend and N carry it to sizes beyond the sweep and to other world sizes.

Schedules (declared by each adapter's `comm_schedule()`, so the framework knowledge stays in adapters/):
- buckets (torch DDP, apex DDP): gradients fill buckets in the order they become ready (DDP: first 1 MiB, then
  25 MiB); each bucket is all-reduced when its last gradient is ready, one after another, during backward;
- fusion (Horovod): a background cycle (1 ms) fuses whatever is ready into all-reduces of at most the fusion
  buffer (128 MiB), each after a small coordination round (on a hardware profile; a latency fitted here to
  Horovod's own synchronous calls already holds its cycle wait and negotiation, so nothing is added to it);
- zero (DeepSpeed, as counted in a real run of 0.19: `zero_calls`): ZeRO-0 all-reduces every gradient after
  backward; ZeRO-1/2 all-reduce them after backward (each rank keeps its partition), all-reduce the gradient norm
  (one float, `compute_grad_norm` on by default) and all-gather the updated parameters after the step
  (overlap_comm is off for 1/2 by default); ZeRO-3 all-gathers each parameter for forward (and again for backward
  only beyond stage3_max_reuse_distance), overlapped with compute, reduce-scatters the gradients and all-reduces
  the norm;
- replicate (DataParallel): broadcast the module and reduce the gradients through device 0, every step, serially.

Where communication runs on the same cores as the compute (a CPU with every core computing), "overlapped"
communication cannot hide: it is added to the step. That is the case on this project's CPU test machine. On a GPU
it hides, but not for free: compute that runs while a collective is in flight takes (1 + overlap_slowdown) as long
(the hardware profile's overlap_compute_slowdown, 18.9% on average where it was measured), and each phase is
simulated event by event (timeline) so that a slowed compute also issues its later collectives later.

Memory per rank (bytes): parameters, gradients and optimizer state per the ZeRO paper (Rajbhandari et al.
2019, section 3: 2+2+K bytes per parameter in mixed precision), each partitioned over N from the ZeRO stage that
partitions it, plus what the world-size-1 measurement shows beyond them (activations, buffers, the process).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from harness.model.comm_cost import Collectives
from harness.model.compute import Compute
from harness.shared.comm_schedule import Buckets, Fsdp, Fusion, Replicate, Schedule, Zero

MiB = 2**20
BOUNDS_FROM = 64
"""Beyond this many workers predictions are given as bounds, not points (published predictors stop being
reliable there: contention, stragglers and topology effects a step model does not see)."""
PREDICT_TO = (8, 65536)
"""The range of --to / --predict-to: the extrapolation's table starts at 8 workers (one node of a profile), and
past 65,536 a one-step model has nothing to say."""


# ---- the step ------------------------------------------------------------------------------------------------

@dataclass
class Step:
    """A predicted step: its time and where it goes."""

    step_s: float
    compute_s: float
    comm_s: float
    """Communication time, whether hidden or not."""
    exposed_s: float
    """What communication adds to the step: what is not hidden behind compute, and what the compute it overlaps
    loses to it (Collectives.overlap_slowdown)."""
    overhead_s: float


def buckets_of(grads: list[tuple[float, float]], first_cap: float, cap: float) -> list[tuple[float, float]]:
    """(bytes, ready time) of each bucket: gradients in ready order, a bucket closes once it holds `cap` bytes
    (the first one `first_cap`)."""
    out, size, last, limit = [], 0.0, 0.0, first_cap
    for b, t in grads:
        size, last = size + b, t
        if size >= limit:
            out.append((size, last))
            size, limit = 0.0, cap
    if size:
        out.append((size, last))
    return out


def fusion_cycles(grads: list[tuple[float, float]], schedule: Fusion,
                  busy=lambda buffers: 0.0) -> list[tuple[float, list[tuple[float, int]]]]:
    """Horovod's cycles with work: (start time, [(fused bytes, tensors) per all-reduce]) in order. The next cycle
    starts a cycle time after this one, or when this one's work (`busy(buffers)`) is done if that is later."""
    cycle, cap = schedule.cycle_s, schedule.fusion_bytes or float("inf")
    pending, out, tick, first = sorted(grads, key=lambda g: g[1]), [], cycle, 0
    times = [t for _, t in pending]
    while first < len(pending):
        if times[first] > tick:  # nothing ready: the first cycle that finds the next gradient ready
            # (past ~10^12 s a cycle is below a float's resolution: the gradient's own time then)
            tick = max(cycle * math.ceil(times[first] / cycle), times[first])
        last = bisect.bisect_right(times, tick, lo=first)
        ready, first = pending[first:last], last
        buffers, size, count = [], 0.0, 0
        for b, _ in ready:
            if count and size + b > cap:
                buffers.append((size, count))
                size, count = 0.0, 0
            size, count = size + b, count + 1
        buffers.append((size, count))
        out.append((tick, buffers))
        tick = max(tick + cycle, tick + busy(buffers))
    return out


def fusion_copy(c: Compute, size: float, count: int) -> float:
    """Seconds to pack `count` tensors of `size` bytes into the fusion buffer and unpack them (none for one)."""
    return 0.0 if count < 2 or not c.copy_Bps else 2 * size / c.copy_Bps


def fused_all_reduce(c: Compute, coll: Collectives, size: float, count: int, n: int) -> float:
    """Seconds of one all-reduce of `count` tensors, `size` bytes in all, fused into one buffer. Where the comm
    sweep timed the backend's own fused call of several tensors (all_reduce_coalesced: Horovod's
    grouped_allreduce packs them into its fusion buffer, all-reduces it and unpacks it, as in training), that
    time; otherwise (a hardware profile, a sweep made by compare before commit 115e299) the all-reduce of one buffer
    of `size` plus its packing and unpacking at the rank's copy bandwidth. A single tensor is reduced where it is."""
    if count > 1 and coll.has("all_reduce_coalesced", n):
        return coll.time("all_reduce_coalesced", size, n)
    return coll.time("all_reduce", size, n) + fusion_copy(c, size, count)


def fusion_plan(schedule: Fusion, c: Compute, coll: Collectives,
                n: int) -> list[tuple[float, list[tuple[float, int]], float]]:
    """Horovod's cycles for this step: (start, [(fused bytes, tensors)], seconds of work) each."""
    wire = schedule.wire_scale
    grads = [(b * wire, t) for b, t in c.grads] or [(0.0, c.bwd_s)]

    def busy(buffers):
        return coll.control(n) + sum(fused_all_reduce(c, coll, size, count, n) for size, count in buffers)

    return [(start, buffers, busy(buffers)) for start, buffers in fusion_cycles(grads, schedule, busy)]


def fusion_buffer_bytes(schedule: Schedule | None, c: Compute, coll: Collectives, n: int) -> float:
    """Memory a fusion buffer adds on each rank: Horovod allocates it once several tensors are fused, and the
    pages its largest fused all-reduce touches stay resident (at most the fusion threshold)."""
    if not isinstance(schedule, Fusion) or n <= 1:
        return 0.0
    sizes = [size for _, buffers, _ in fusion_plan(schedule, c, coll, n) for size, count in buffers if count > 1]
    return min(max(sizes, default=0.0), schedule.fusion_bytes or float("inf"))


def ipg_closes(sizes: list[float], cap: float) -> list[float]:
    """DeepSpeed's gradient buckets (reduce_bucket_size, here `cap` bytes; 0: no cap), per gradient in the order
    backward makes them ready: the bytes of the bucket reduced once that gradient has joined it (0: the bucket stays
    open). Gradients join the bucket in that order, and the bucket is reduced before a gradient that would take it
    past the cap joins (stage_1_and_2.py reduce_independent_p_g_buckets_and_remove_grads); a gradient larger than
    the cap is a bucket of its own; the last bucket is reduced after the last gradient. (DeepSpeed also splits a
    bucket where two ranks' partitions meet, and ZeRO-3 may reorder a small gradient into a later bucket: the bytes
    are the same, a call more or less.)"""
    out, size = [0.0] * len(sizes), 0.0
    for i, b in enumerate(sizes):
        if cap and size and size + b > cap:
            out[i - 1], size = size, 0.0
        size += b
    if sizes:
        out[-1] = size
    return out


def ipg_buckets(sizes: list[float], cap: float) -> list[float]:
    """The bytes of each of DeepSpeed's gradient buckets, in the order they are reduced (see ipg_closes)."""
    return [size for size in ipg_closes(sizes, cap) if size]


def zero_calls(schedule: Zero, grads: list[tuple[float, float]],
               n: int) -> tuple[list[tuple[str, float]], list[tuple[str, float]], list[tuple[str, float]]]:
    """DeepSpeed's collectives in one step as (op, bytes), in three phases: during forward, during backward, and
    after backward (before or around the optimizer step). `grads`: (bytes, ready time) per parameter, in the order
    backward makes them ready (the reverse of forward's). What DeepSpeed 0.19 does, as
    counted in a real run (tests/distributed/test_deepspeed_collectives.py), read from the schedule's fields (each
    declared by the adapter, with DeepSpeed's defaults resolved there, never restated here):
    - ZeRO-0 all-reduces the gradients after backward;
    - ZeRO-1/2 reduce them with `grad_reduce` (DeepSpeed: an all-reduce, each rank keeping its partition:
      stage_1_and_2.py average_tensor with use_multi_rank_bucket_allreduce on by default), bucket by bucket
      (`ipg_buckets`), then all-reduce the gradient norm (`norm_allreduce`) and all-gather the updated parameters;
    - ZeRO-3 all-gathers each parameter for forward, and again for backward only when its next use is further
      than `reuse_elems` elements of other parameters away (stage3_max_reuse_distance, 1e9: below it the gathered
      parameter stays until backward), reduce-scatters the gradients and all-reduces the norm."""
    stage = schedule.stage
    sizes = [b for b, _ in grads]
    total = sum(sizes)
    op = schedule.grad_reduce
    cap = schedule.bucket_elems * 4 if stage >= 1 else 0  # reduce_bucket_size, fp32 elements
    reduce = [(op, b) for b in ipg_buckets(sizes, cap)]
    norm = [("all_reduce", 4)] if stage >= 1 and schedule.norm_allreduce else []
    if stage == 0:
        return [], [], reduce
    if stage in (1, 2):
        return [], [], reduce + norm + [("all_gather", total)]
    order = sizes[::-1]  # forward's order
    forward = [("all_gather", b) for b in order]
    again = [("all_gather", b) for b, far in zip(order, regathered(order, schedule.reuse_elems * 4)) if far]
    return forward, again[::-1] + reduce, norm


def regathered(order: list[float], reuse: float) -> list[bool]:
    """ZeRO-3, per parameter in forward order: gathered again for backward, its next use being `reuse` bytes or
    more of other parameters away (the rest of forward, then the same back). Linear in the parameters: a planned
    model may have tens of thousands."""
    out, after = [False] * len(order), 0.0  # after: the bytes of the parameters after this one
    for i in range(len(order) - 1, -1, -1):
        out[i] = 2 * after >= reuse
        after += order[i]
    return out


def units_of(grads: list[tuple[float, float]], fwd_s: float, bwd_s: float) -> list[tuple[float, float, float]]:
    """Per gradient tensor, in backward order: (bytes, its share of forward's seconds, of backward's): backward's
    from the ready times (a tensor's share is the time since the one before it was ready), forward's in the same
    proportion. What backward does after the last gradient is ready is the last tensor's."""
    ends = [t for _, t in grads[:-1]] + [bwd_s]
    shares = [end - start for start, end in zip([0.0] + ends[:-1], ends)]
    total = sum(shares) or 1.0
    return [(b, fwd_s * d / total, d) for (b, _), d in zip(grads, shares)]


class Segment(NamedTuple):
    """One piece of a phase for timeline(): `compute` seconds (at full speed), the collective it waits for before it
    starts (None: none), the collectives (name, seconds) issued as it starts and as it ends. An `idle` segment is a
    wait, not compute: it takes its seconds whatever the stream does."""

    compute: float
    waits: str | None = None
    start: tuple[tuple[str, float], ...] = ()
    end: tuple[tuple[str, float], ...] = ()
    idle: bool = False


def timeline(segments: list[Segment], first: tuple[tuple[str, float], ...] = (), slowdown: float = 0.0) -> float:
    """The end of a phase of segments run one after another beside one communication stream that runs the
    collectives in the order they are issued (`first` before the first segment). A collective of 0 s is done when
    issued. While the stream is busy, compute runs at 1 / (1 + slowdown) of its speed (Collectives.overlap_slowdown).
    Exact for piecewise-constant speeds: one event (a segment or a collective ending) at a time."""
    queue: list[list] = []  # [name, seconds left] in issue order; queue[head] is running
    head, done, clock, k, left = 0, set(), 0.0, 0, None

    def issue(calls):
        for name, seconds in calls:
            if seconds > 0:
                queue.append([name, seconds])
            else:
                done.add(name)

    issue(first)
    while True:
        if left is None and k < len(segments) and (segments[k].waits is None or segments[k].waits in done):
            issue(segments[k].start)
            left = segments[k].compute
        busy = head < len(queue)
        rate = 1.0 / (1.0 + slowdown) if busy and left is not None and not segments[k].idle else 1.0
        to_compute = left / rate if left is not None else math.inf
        to_stream = queue[head][1] if busy else math.inf
        if to_compute == math.inf and to_stream == math.inf:
            if busy or left is not None:  # an infinite duration (a size that overflows): the phase never ends
                return math.inf
            if k < len(segments):
                raise ValueError(f"segment {k} waits for '{segments[k].waits}', which is never issued")
            return clock
        dt = min(to_compute, to_stream)
        clock += dt
        if busy:
            if to_stream <= to_compute:
                done.add(queue[head][0])
                head += 1
            else:
                queue[head][1] -= dt
        if left is not None:
            if to_compute <= to_stream:
                issue(segments[k].end)
                left, k = None, k + 1
            else:
                left = max(0.0, left - dt * rate)


def prefetched(units: list[tuple[float, float, float]], slowdown: float = 0.0) -> float:
    """The end of a phase whose units compute one after another: (compute, gather, after) seconds each, in order. A
    unit computes once its parameters are gathered (a unit with nothing to gather does not wait); the gather of the
    next unit is issued as this one starts to compute (one unit of prefetch: FSDP2's default, and DeepSpeed's once
    units are larger than its prefetch bucket), and the `after` collective (its gradients' reduce-scatter) as this
    one's compute ends, all on one communication stream in the order they are issued."""
    if not units:
        return 0.0
    segments = [Segment(compute, f"g{k}", ((f"g{k + 1}", units[k + 1][1]),) if k + 1 < len(units) else (),
                        ((f"a{k}", after),)) for k, (compute, _, after) in enumerate(units)]
    return timeline(segments, (("g0", units[0][1]),), slowdown)


def issued_during(jobs: list[tuple[float, float]], window: float, slowdown: float = 0.0) -> float:
    """The end of a compute window of `window` seconds during which collectives are issued: (issue time, seconds)
    each, in issue order, an issue time being how far the compute has got (past the window: that long after the
    window began, a wait: Horovod's cycles). Without slowdown: max(window, the collectives' serial end). With it,
    an issue time inside the window moves with the compute, so Horovod's cycle ticks, which are wall-clock, are
    taken to slip with it: an approximation, at most one cycle per collective."""
    segments, at = [], 0.0
    for k, (ready, seconds) in enumerate(jobs):
        if ready > at and at < window:
            upto = min(ready, window)
            segments.append(Segment(upto - at))
            at = upto
        if ready > at:
            segments.append(Segment(ready - at, idle=True))
            at = ready
        segments.append(Segment(0.0, end=((f"j{k}", seconds),)))
    if at < window:
        segments.append(Segment(window - at))
    return timeline(segments, (), slowdown)


class Pricing(NamedTuple):
    """What a schedule kind's pricer returns: all communication seconds, the part not hidden behind compute, and the
    optimizer step's seconds (a sharded backend steps only its 1/N)."""

    comm_s: float
    exposed_s: float
    opt_s: float


PRICERS: dict[str, Callable[..., Pricing]] = {}
"""Schedule kind (harness/shared/comm_schedule.py, an adapter's comm_schedule().KIND) -> its pricer: a new communication pattern is one more
function registered with @schedule_kind, not a branch in predict_step."""


def schedule_kind(kind: str):
    def register(fn):
        PRICERS[kind] = fn
        return fn
    return register


def _overlapped(jobs: list[tuple[float, float]], window: float, shares_cores: bool,
                slowdown: float = 0.0) -> tuple[float, float]:
    """(comm time, exposed time) of collectives issued during a compute window of `window` seconds."""
    comm = sum(d for _, d in jobs)
    if shares_cores:
        return comm, comm
    return comm, max(0.0, issued_during(jobs, window, slowdown) - window)  # the window's pieces re-add to it +-1 ulp


@schedule_kind("buckets")
def _buckets(schedule: Buckets, c: Compute, coll: Collectives, n: int, grads, shares_cores: bool) -> Pricing:
    """DDP (and apex DDP): gradients all-reduced bucket by bucket as backward fills them (unless overlap is off).
    Fields: first_bucket_bytes, bucket_bytes, overlap, wire_scale."""
    jobs = [(t, coll.time("all_reduce", b, n)) for b, t in
            buckets_of(grads, schedule.first_bucket_bytes, schedule.bucket_bytes)]
    if schedule.overlap:
        comm, exposed = _overlapped(jobs, c.bwd_s, shares_cores, coll.overlap_slowdown)
    else:
        comm = exposed = sum(d for _, d in jobs)
    return Pricing(comm, exposed, c.opt_s)


@schedule_kind("fusion")
def _fusion(schedule: Fusion, c: Compute, coll: Collectives, n: int, grads, shares_cores: bool) -> Pricing:
    """Horovod's background thread: each cycle it negotiates whatever gradients are ready, fuses them into
    all-reduces of at most the fusion buffer, runs them, then sleeps out the rest of its cycle; what became ready
    while it was busy is fused into the next cycle's buffer. A buffer of several tensors is packed (copied in) and
    unpacked (copied out); a single tensor is reduced where it is. Fields: see fusion_plan."""
    jobs = [(start, busy) for start, _, busy in fusion_plan(schedule, c, coll, n)]
    comm, exposed = _overlapped(jobs, c.bwd_s, shares_cores, coll.overlap_slowdown)
    return Pricing(comm, exposed, c.opt_s)


@schedule_kind("zero")
def _zero(schedule: Zero, c: Compute, coll: Collectives, n: int, grads, shares_cores: bool) -> Pricing:
    """DeepSpeed ZeRO stage 0-3 (zero_calls says which collectives each stage issues when). Fields: stage,
    bucket_elems, grad_reduce, norm_allreduce, reuse_elems, overlap, wire_scale."""
    opt = c.opt_s / n if schedule.stage >= 1 else c.opt_s  # each rank steps its 1/N partition
    forward, backward, after = zero_calls(schedule, grads, n)
    priced = [sum(coll.time(op, b, n) for op, b in calls) for calls in (forward, backward, after)]
    comm = sum(priced)
    if schedule.stage == 3 and schedule.overlap and not shares_cores:
        # unit by unit: each parameter's gather prefetched one ahead of its forward (and, beyond the reuse
        # distance, of its backward); each reduce bucket reduce-scattered once backward has filled it
        units = units_of(grads, c.fwd_s, c.bwd_s)
        far = regathered([b for b, _, _ in units][::-1], schedule.reuse_elems * 4)[::-1]
        closes = ipg_closes([b for b, _, _ in units], schedule.bucket_elems * 4)
        slow = coll.overlap_slowdown
        fwd = prefetched([(f, coll.time("all_gather", b, n), 0.0) for b, f, _ in units[::-1]], slow)
        bwd = prefetched([(d, coll.time("all_gather", b, n) if again else 0.0,
                           coll.time(schedule.grad_reduce, closed, n) if closed else 0.0)
                          for (b, _, d), again, closed in zip(units, far, closes)], slow)
        exposed = (fwd - c.fwd_s) + (bwd - c.bwd_s) + priced[2]
    else:
        exposed = comm
    return Pricing(comm, exposed, opt)


@schedule_kind("fsdp")
def _fsdp(schedule: Fsdp, c: Compute, coll: Collectives, n: int, grads, shares_cores: bool) -> Pricing:
    """FSDP2: each rank steps its 1/N shard; every unit's parameters are all-gathered (in param_dtype: gather_scale
    bytes per fp32 byte) for forward and, resharded after forward, again for backward; its gradients are
    reduce-scattered (in reduce_dtype: wire_scale) in backward. Priced per gradient tensor, the finest units FSDP
    could have (a workload's units group several: fewer, larger calls); prefetching hides the gathers behind forward
    and backward where they fit, as ZeRO-3's. HSDP's all-reduce across replicas is not priced. Fields: gather_scale,
    reshard_after_forward, overlap, wire_scale."""
    wire, gather, reshard = schedule.wire_scale, schedule.gather_scale, schedule.reshard_after_forward
    units = units_of(grads, c.fwd_s, c.bwd_s)
    gathers = [coll.time("all_gather", (b / wire if wire else 0.0) * gather, n) for b, _, _ in units]
    scatters = [coll.time("reduce_scatter", b, n) for b, _, _ in units]
    comm = sum(gathers) * (2 if reshard else 1) + sum(scatters)
    if schedule.overlap and not shares_cores:
        # unit by unit: each unit's gather prefetched one ahead of its compute, its reduce-scatter issued once its
        # backward is done
        slow = coll.overlap_slowdown
        fwd = prefetched([(f, g, 0.0) for (_, f, _), g in zip(units[::-1], gathers[::-1])], slow)
        bwd = prefetched([(d, g if reshard else 0.0, r) for (_, _, d), g, r in zip(units, gathers, scatters)], slow)
        exposed = (fwd - c.fwd_s) + (bwd - c.bwd_s)
    else:
        exposed = comm
    return Pricing(comm, exposed, c.opt_s / n)


@schedule_kind("replicate")
def _replicate(schedule: Replicate, c: Compute, coll: Collectives, n: int, grads, shares_cores: bool) -> Pricing:
    """DataParallel: every step the module is broadcast from device 0 to the others and the gradients reduced back,
    with no overlap."""
    total_bytes = sum(b for b, _ in grads)
    comm = (n - 1) * 2 * coll.time("broadcast", total_bytes, 2)
    return Pricing(comm, comm, c.opt_s)


def predict_step(schedule: Schedule | None, c: Compute, coll: Collectives, n: int,
                 shares_cores: bool = False) -> Step:
    """The step of a backend with `schedule` (an adapter's comm_schedule()) on n ranks. `shares_cores`:
    communication runs on the cores that compute (a CPU), so nothing overlaps."""
    compute = c.total_s
    if schedule is None or n <= 1:
        return Step(compute + c.overhead_s, compute, 0.0, 0.0, c.overhead_s)
    kind, wire = schedule.KIND, schedule.wire_scale
    if kind not in PRICERS:
        raise KeyError(f"unknown schedule kind '{kind}'")
    grads = [(b * wire, t) for b, t in c.grads] or [(0.0, c.bwd_s)]
    comm, exposed, opt = PRICERS[kind](schedule, c, coll, n, grads, shares_cores)
    step = c.fwd_s + c.bwd_s + opt + exposed + c.overhead_s
    return Step(step, c.fwd_s + c.bwd_s + opt, comm, exposed, c.overhead_s)


# ---- memory --------------------------------------------------------------------------------------------------

def model_state_bytes(params: float, n: int, stage: int, *, param_bytes: float = 4, grad_bytes: float = 4,
                      optim_bytes: float = 4, master_bytes: float = 0) -> float:
    """Bytes of model states per rank (ZeRO paper): parameters, gradients and optimizer state (with fp32 master
    weights under mixed precision), each divided by n from the stage that partitions it (1: optimizer state,
    2: + gradients, 3: + parameters). K = optim_bytes + master_bytes (12 for mixed-precision Adam)."""
    p, g, o = params * param_bytes, params * grad_bytes, params * (optim_bytes + master_bytes)
    if stage >= 1:
        o /= n
    if stage >= 2:
        g /= n
    if stage >= 3:
        p /= n
    return p + g + o


# ---- parallel efficiency ---------------------------------------------------------------------------------------

def efficiency(t1: float, tn: float, n: int, scaling: str) -> float:
    """T(N) / (N T(1)) from step times: weak scaling (per-rank batch fixed) t1 / tN; strong scaling (global batch
    fixed, so each rank does 1/N of the work) t1 / (N tN)."""
    return t1 / tn if scaling == "weak" else t1 / (n * tn)


