"""One rank's compute in the model: a step's forward, backward and optimizer at one per-rank batch, with its
gradients' sizes and ready times, and the curve over batch sizes a compute profile measured.

Runs in: the parent. Pure arithmetic, no torch (harness/model/costmodel.py prices a step from it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Compute:
    """One rank's compute for one step at one per-rank batch (seconds), and its gradients."""

    fwd_s: float
    bwd_s: float
    opt_s: float
    grads: list[tuple[float, float]] = field(default_factory=list)
    """(bytes, seconds after the start of backward when that gradient is ready), in the order they become ready."""
    overhead_s: float = 0.0
    """What the backend itself costs per step beyond the plain loop, measured at world size 1."""
    copy_Bps: float | None = None
    """Bytes per second of copying one buffer into another on this device (None: copies not priced)."""

    @property
    def grad_bytes(self) -> float:
        return sum(b for b, _ in self.grads)

    @property
    def total_s(self) -> float:
        return self.fwd_s + self.bwd_s + self.opt_s


def interpolate(points: list[tuple[float, float]], x: float) -> float:
    """Piecewise-linear through (x, y) points (sorted by x), extended linearly beyond both ends (through the
    nearest two points), never below zero."""
    pts = sorted(points)
    if len(pts) == 1:
        return pts[0][1] * x / pts[0][0] if pts[0][0] else pts[0][1]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x <= x1 or (x1, y1) == pts[-1]:
            if x < pts[0][0]:
                (x0, y0), (x1, y1) = pts[0], pts[1]
            return max(0.0, y0 + (y1 - y0) * (x - x0) / (x1 - x0))
    return pts[-1][1]


@dataclass
class ComputeCurve:
    """Compute at any per-rank batch from a profile at several: forward and backward interpolated over the batch,
    the optimizer step fixed (it does not depend on the batch), ready times scaled with backward."""

    fwd: list[tuple[float, float]]
    bwd: list[tuple[float, float]]
    opt_s: float
    grads: list[tuple[float, float]]
    grads_batch: float
    overhead_s: float = 0.0
    flops_per_sample: float | None = None
    copy_Bps: float | None = None

    def at(self, batch: float) -> Compute:
        bwd = interpolate(self.bwd, batch)
        ref = interpolate(self.bwd, self.grads_batch)
        scale = bwd / ref if ref > 0 else 1.0
        return Compute(interpolate(self.fwd, batch), bwd, self.opt_s, [(b, t * scale) for b, t in self.grads],
                       self.overhead_s, self.copy_Bps)

    @classmethod
    def from_profile(cls, profile: dict[str, Any], overhead_s: float = 0.0) -> ComputeCurve:
        """From a rank's compute profile (harness/rank/compute_profile.py)."""
        batches = profile["batches"]
        return cls(fwd=[(b["per_rank_batch"], b["fwd_s"]) for b in batches],
                   bwd=[(b["per_rank_batch"], b["bwd_s"]) for b in batches],
                   opt_s=batches[0]["opt_s"], grads=[tuple(g) for g in profile.get("grads", [])],
                   grads_batch=batches[0]["per_rank_batch"], overhead_s=overhead_s,
                   flops_per_sample=profile.get("flops_per_sample"),
                   copy_Bps=profile["copy_GBps"] * 1e9 if profile.get("copy_GBps") else None)


def layered_grads(layers: list[tuple[float, float]], bwd_s: float) -> list[tuple[float, float]]:
    """Gradient-ready profile from layers given in forward order as (gradient bytes, share of backward compute):
    backward runs them last to first, and a layer's gradient is ready when its own backward is done."""
    total = sum(w for _, w in layers) or 1.0
    out, t = [], 0.0
    for nbytes, w in reversed(layers):
        t += bwd_s * w / total
        if nbytes:
            out.append((nbytes, t))
    return out
