"""Clocks, peak memory and step-time statistics, shared by the per-rank loop and the parent."""

from __future__ import annotations

import resource
from pathlib import Path


def device_sync(device: str):
    """A function that waits for queued work on `device` (CUDA kernels are asynchronous; CPU needs nothing)."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.synchronize
    return lambda: None


class PeakMemory:
    """Peak memory of this process since `reset()`: max allocated on CUDA, peak RSS (VmHWM) on CPU.

    Linux lets a process reset its own high-water mark by writing 5 to /proc/self/clear_refs, so the CPU figure
    covers the timed steps only (plus whatever stays resident: model, optimizer state, data). Where that is not
    allowed, the figure falls back to ru_maxrss, the peak since the process started, and `kind` says so.
    """

    def __init__(self, device: str):
        self.device = device
        self.kind = "cuda_max_allocated" if device.startswith("cuda") else "rss_vmhwm"

    def reset(self) -> None:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.reset_peak_memory_stats()
            return
        try:
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            self.kind = "rss_ru_maxrss_since_start"

    def read(self) -> int:
        if self.device.startswith("cuda"):
            import torch

            return int(torch.cuda.max_memory_allocated())
        if self.kind == "rss_vmhwm":
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), without needing numpy in the rank."""
    if not values:
        raise ValueError("no values")
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def step_stats(step_times_s: list[float]) -> dict[str, float | int]:
    return {"median": percentile(step_times_s, 50), "p10": percentile(step_times_s, 10),
            "p90": percentile(step_times_s, 90), "mean": sum(step_times_s) / len(step_times_s),
            "n": len(step_times_s)}


def slowest_rank_steps(per_rank: list[list[float]]) -> list[float]:
    """Per-step time = the slowest rank's time for that step (a step is done when every rank is done)."""
    return [max(ts) for ts in zip(*per_rank)]
