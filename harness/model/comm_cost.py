"""What one collective costs in the model: nccl-tests' accounting (an all-reduce of S bytes moves 2(N-1)/N x S per
rank: harness/shared/collectives.py), priced from a `compare comm` sweep's measured means and alpha-beta fits
(`Fitted`), or on a hardware profile's fabric with NCCL's protocol latencies, ring or tree (`Fabric`).

Runs in: the parent. Pure arithmetic, no torch."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from harness.ground.sizes import format_size
from harness.model.compute import interpolate
from harness.shared.collectives import busbw_factor


PRICED = ("all_reduce", "all_reduce_coalesced", "reduce_scatter", "all_gather", "broadcast")
"""The collectives the model prices. Each moves busbw_factor(op, n) bytes per rank per byte of its buffer: nccl-tests'
bus-bandwidth factors, read from the collectives' own definitions (harness/shared/collectives.py)."""


class Collectives:
    """Seconds of one collective of `nbytes` (the full buffer, as nccl-tests counts it) on n ranks; `name` says
    where the figures come from."""

    overlap_slowdown: float = 0.0
    """Compute that runs while a collective is in flight takes (1 + this) times as long: on a GPU the collective's
    kernels take SMs and memory bandwidth from it. 0 for collectives measured here (what a CPU's compute loses to
    them is measured by the contention launch instead)."""

    def time(self, op: str, nbytes: float, n: int) -> float:
        raise NotImplementedError

    def control(self, n: int) -> float:
        """A tiny coordination round among n ranks (Horovod's per-cycle negotiation)."""
        return self.time("all_reduce", 8, n)

    def has(self, op: str, n: int) -> bool:
        """Whether `op` at n ranks is priced from measurements of that op itself (an op a hardware profile does
        not describe is priced another way by its caller)."""
        return False


def fit_alpha_beta(points: list[tuple[float, float]], factor: float) -> tuple[float, float]:
    """(latency s, busbw B/s) of t = latency + factor x S / busbw from (bytes, seconds) points, by least squares
    on the relative error (every size counts alike, small ones as much as large ones); latency >= 0."""
    if len(points) < 2:
        raise ValueError("need at least two sizes to fit latency and bandwidth")
    # minimise sum ((a + c x - y) / y)^2 over a, c: weighted least squares with weights 1/y^2
    w = [1.0 / (t * t) for _, t in points]
    xs = [factor * s for s, _ in points]
    ys = [t for _, t in points]
    sw = sum(w)
    sx = sum(wi * x for wi, x in zip(w, xs))
    sy = sum(wi * y for wi, y in zip(w, ys))
    sxx = sum(wi * x * x for wi, x in zip(w, xs))
    sxy = sum(wi * x * y for wi, x, y in zip(w, xs, ys))
    det = sw * sxx - sx * sx
    slope = (sw * sxy - sx * sy) / det
    latency = (sy - slope * sx) / sw
    if latency < 0:  # refit through the origin
        latency, slope = 0.0, sxy / sxx
    if slope <= 0:
        raise ValueError("time does not grow with size: no bandwidth to fit")
    return latency, 1.0 / slope


def monotone(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The non-decreasing sequence closest in least squares to the y of `points` (sorted by x): pool adjacent
    violators, each point weighted alike."""
    blocks: list[list[float]] = []  # [sum, count]
    for _, y in points:
        blocks.append([y, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, k = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += k
    ys = [s / k for s, k in blocks for _ in range(int(k))]
    return [(x, y) for (x, _), y in zip(points, ys)]


class Fitted(Collectives):
    """Collectives of one backend on this machine, fitted per (op, N) to `compare comm` cells."""

    def __init__(self, backend: str, fits: dict[tuple[str, int], tuple[float, float]],
                 points: dict[tuple[str, int], list[tuple[float, float]]] | None = None,
                 unfitted: dict[tuple[str, int], str] | None = None):
        self.name, self.backend, self.fits, self.points = f"{backend} (fitted here)", backend, fits, points or {}
        self.unfitted = unfitted or {}
        """(op, N) measured but not fitted, with why and the medians it had (noise on shared cores can make a
        small sweep's times not grow with size)."""

    @classmethod
    def from_records(cls, backend: str, records: list[dict[str, Any]], stat: str = "mean") -> Fitted:
        """From `compare comm` records: each cell's `stat` time per op (the mean by default: the model adds a
        step's parts, and means add where medians do not; a cell without it gives its median)."""
        pts: dict[tuple[str, int], list[tuple[float, float]]] = {}
        for r in records:
            if r.get("backend") == backend and r.get("status") == "ok" and r.get("op") in PRICED:
                t = r["time_s"].get(stat, r["time_s"]["median"])
                pts.setdefault((r["op"], r["world_size"]), []).append((r["size_bytes"], t))
        fits, unfitted = {}, {}
        for (op, n), p in pts.items():
            try:
                fits[(op, n)] = fit_alpha_beta(p, busbw_factor(op, n))
            except (ValueError, ZeroDivisionError) as exc:
                medians = ", ".join(f"{format_size(int(s))}: {t * 1e3:.2f} ms" for s, t in sorted(p))
                fix = "at least two --sizes" if len(p) < 2 else "more --iters or larger --sizes"
                unfitted[(op, n)] = f"{exc} ({medians}); re-run compare comm with {fix}"
        return cls(backend, fits, pts, unfitted)

    def curve(self, op: str, n: int) -> list[tuple[float, float]]:
        """The measured times of (op, n) as a non-decreasing curve over size: (bytes, seconds) at every measured
        size, the closest non-decreasing fit to them (pool-adjacent-violators, each size weighted alike). On shared
        cores a sweep's times at small sizes move by whole milliseconds from one size to the next (scheduling
        delays, not the wire), and a larger message never costs less."""
        return monotone(sorted(self.points.get((op, n), [])))

    def time(self, op: str, nbytes: float, n: int) -> float:
        """At a world size the sweep measured: the measured curve, linear between measured sizes (the smallest
        size's time below it; beyond the largest, that time plus the fitted bandwidth's). The fitted
        latency + bandwidth line alone is what `extended()` carries to other world sizes: one line through 1 KB
        to 64 MB cells under-prices the sizes a step uses most (25 MB buckets: -27% on this VM's sweep)."""
        if n <= 1 or nbytes <= 0:
            return 0.0
        if (op, n) in self.fits and len(self.points.get((op, n), [])) >= 2:
            pts = self.curve(op, n)
            if nbytes <= pts[0][0]:
                return pts[0][1]
            if nbytes >= pts[-1][0]:
                return pts[-1][1] + busbw_factor(op, n) * (nbytes - pts[-1][0]) / self.fits[(op, n)][1]
            return interpolate(pts, nbytes)
        return self.line(op, nbytes, n)

    def has(self, op: str, n: int) -> bool:
        return (op, n) in self.fits

    def line(self, op: str, nbytes: float, n: int) -> float:
        """The fitted latency + size x factor / bus bandwidth."""
        if n <= 1 or nbytes <= 0:
            return 0.0
        if (op, n) in self.unfitted:
            raise KeyError(f"{op} for {self.backend} at world size {n} measured but not fitted: "
                           f"{self.unfitted[(op, n)]}")
        if (op, n) not in self.fits:
            raise KeyError(f"no {op} measured for {self.backend} at world size {n}")
        latency, busbw = self.fits[(op, n)]
        return latency + busbw_factor(op, n) * nbytes / busbw

    def control(self, n: int) -> float:
        """None on top: a fitted latency comes from synchronous calls through the backend's own API, each of
        which already went through whatever coordination the backend does per call (Horovod: it waited for its
        next cycle and negotiated there, so its fitted all-reduce latency is about one cycle time)."""
        return 0.0

    def extended(self) -> Collectives:
        """This machine's fitted collectives at any N: each op's bus bandwidth as measured at the largest N, its
        latency per ring step (2(N-1) for all-reduce, N-1 otherwise) as measured there."""
        return _Extended(self)


def ring_steps(op: str, n: int) -> int:
    return {"all_reduce": 2 * (n - 1), "broadcast": n}.get(op, n - 1)


class _Extended(Collectives):
    def __init__(self, fitted: Fitted):
        self.name = f"{fitted.backend} (fitted here, extended by ring steps)"
        self.per_op = {}
        for (op, n), (latency, busbw) in sorted(fitted.fits.items()):
            self.per_op[op] = (latency / ring_steps(op, n), busbw)  # the largest N wins (sorted)

    def time(self, op: str, nbytes: float, n: int) -> float:
        if n <= 1 or nbytes <= 0:
            return 0.0
        if op not in self.per_op:
            raise KeyError(f"no {op} measured")
        step, busbw = self.per_op[op]
        return step * ring_steps(op, n) + busbw_factor(op, n) * nbytes / busbw

    def control(self, n: int) -> float:
        return 0.0  # inside the fitted latency, as in Fitted

    def has(self, op: str, n: int) -> bool:
        return op in self.per_op


@dataclass
class Protocol:
    """One of NCCL's protocols: its latencies (per call, per ring step inside a node and across the network, per
    tree step) and the share of the bus bandwidth it reaches (NCCL src/graph/tuning.cc: LL 1/4 on rings, 1/3.8 on
    trees; trees 0.9 of the ring's)."""

    name: str
    base_s: float
    intra_s: float
    inter_s: float
    tree_intra_s: float | None
    tree_inter_s: float | None
    ring_bw: float
    tree_bw: float


@dataclass
class Fabric(Collectives):
    """A hardware profile: nccl-tests bus bandwidths and NCCL's latencies (harness/model/profiles/*.json)."""

    name: str
    devices_per_node: int
    intra_busbw_Bps: float
    inter_busbw_Bps: float
    """All-reduce busbw once a collective spans nodes (nccl-tests: the node's aggregate NIC bandwidth)."""
    protocols: list[Protocol]
    tree: bool = True
    """False: rings only (NCCL before 2.4, gloo)."""
    device: str = ""
    peak_tflops: dict[str, float] = field(default_factory=dict)
    copy_Bps: float | None = None
    """Bytes per second of a copy in device memory: half the memory bandwidth (every byte is read and written)."""
    sources: list[dict[str, str]] = field(default_factory=list)
    notes: str = ""
    overlap_slowdown: float = 0.0

    def busbw(self, n: int) -> float:
        return self.intra_busbw_Bps if n <= self.devices_per_node else min(self.intra_busbw_Bps, self.inter_busbw_Bps)

    def _nodes(self, n: int) -> tuple[int, int]:
        nodes = math.ceil(n / self.devices_per_node)
        return nodes, min(n, self.devices_per_node)

    def ring_latency(self, op: str, n: int, p: Protocol) -> float:
        """NCCL's ring latency: 2(n-1) steps for all-reduce, n-1 for reduce-scatter and all-gather, n for a
        broadcast, of which the ones that cross the network (2 x nodes for all-reduce, nodes - 1 otherwise) are
        priced as network steps."""
        nodes, _ = self._nodes(n)
        steps = {"all_reduce": 2 * (n - 1), "broadcast": n}.get(op, n - 1)
        inter = 0 if nodes == 1 else min(steps, 2 * nodes if op == "all_reduce" else nodes - 1)
        return p.base_s + (steps - inter) * p.intra_s + inter * p.inter_s

    def tree_latency(self, n: int, p: Protocol) -> float | None:
        """NCCL's tree all-reduce latency: 2 x ((ranks per node - 1) intra steps + log2(nodes) network steps)."""
        if not self.tree or p.tree_inter_s is None:
            return None
        nodes, per_node = self._nodes(n)
        intra = p.tree_intra_s if p.tree_intra_s is not None else p.intra_s
        return p.base_s + 2 * ((per_node - 1) * intra + math.ceil(math.log2(nodes)) * p.tree_inter_s)

    def time(self, op: str, nbytes: float, n: int) -> float:
        """The cheapest (algorithm, protocol) for this size, as NCCL's tuner picks: ring or tree (all-reduce only)
        x Simple or LL."""
        if n <= 1 or nbytes <= 0:
            return 0.0
        moved = busbw_factor(op, n) * nbytes
        best = math.inf
        for p in self.protocols:
            best = min(best, self.ring_latency(op, n, p) + moved / (self.busbw(n) * p.ring_bw))
            tree = self.tree_latency(n, p) if op == "all_reduce" else None
            if tree is not None:
                best = min(best, tree + moved / (self.busbw(n) * p.tree_bw))
        return best

    def latency(self, op: str, n: int) -> float:
        """The smallest latency of one collective on n ranks (what a tiny message costs)."""
        return self.time(op, 1.0, n) if n > 1 else 0.0

    def control(self, n: int) -> float:
        """A tiny coordination message gathered to one rank and broadcast back (Horovod's negotiation, done by MPI
        or Gloo with a tree): 2 log2(n) steps of the lowest-latency protocol."""
        if n <= 1:
            return 0.0
        nodes, _ = self._nodes(n)
        p = min(self.protocols, key=lambda q: q.inter_s if nodes > 1 else q.intra_s)
        return p.base_s + 2 * math.ceil(math.log2(n)) * (p.inter_s if nodes > 1 else p.intra_s)
