"""Clocks and peak memory inside a rank.

Runs in: every rank.
"""

from __future__ import annotations

import resource
from pathlib import Path


def device_sync(device: str):
    """A function that waits for queued work on `device` (CUDA kernels are asynchronous; CPU needs nothing)."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.synchronize
    return lambda: None


def release_freed_memory() -> None:
    """Return memory freed by this process to the OS now (glibc's malloc_trim): freed tensors below glibc's mmap
    threshold stay in its heap, resident, and an RSS high-water mark taken later would still count them."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


class PeakMemory:
    """Peak memory of this process since `reset()`: max allocated on CUDA, peak RSS (VmHWM) on CPU.

    Linux lets a process reset its own high-water mark by writing 5 to /proc/self/clear_refs, so the CPU figure
    covers the timed steps only (plus whatever stays resident: model, optimizer state, data). Where that is not
    allowed, the figure falls back to ru_maxrss, the peak since the process started, and `kind` says so.
    """

    def __init__(self, device: str):
        self.device = device
        self.kind = "cuda_max_allocated" if device.startswith("cuda") else "rss_vmhwm"
        self._held = 0

    def hold(self, peak: int) -> None:
        """Keep `peak` (read before a reset) as the floor of what `read` returns."""
        self._held = max(self._held, peak)

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
        return max(self._held, self._read())

    def _read(self) -> int:
        if self.device.startswith("cuda"):
            import torch

            return int(torch.cuda.max_memory_allocated())
        if self.kind == "rss_vmhwm":
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
