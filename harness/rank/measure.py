"""Clocks and peak memory inside a rank.

Runs in: every rank.
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

from harness.shared import procstat


def cuda_math(torch) -> dict:
    """The math settings that decide what an "fp32" row computes on CUDA, as they were during the timed steps:
    cuDNN's and matmul's TF32 switches (cuDNN convolutions run TF32 by default), cuDNN autotuning, the float32
    matmul precision, and the cuDNN version. Recorded, never changed: every adapter runs under the same defaults."""
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    return {"cudnn_allow_tf32": bool(cudnn.allow_tf32), "matmul_allow_tf32": bool(matmul.allow_tf32),
            "cudnn_benchmark": bool(cudnn.benchmark), "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "cudnn_version": cudnn.version() if cudnn.is_available() else None}


class CpuWindow:
    """This process's CPU time (every thread: CLOCK_PROCESS_CPUTIME_ID) and the machine's /proc/stat over a window,
    less the parts the harness excludes (the equivalence snapshot): work added per step shows here apart from
    scheduling noise, and the machine's counters show what else ran meanwhile (steal, other processes)."""

    def __init__(self):
        self.cpu0 = self.wall0 = None
        self.stat0 = None
        self.excluded_cpu = self.excluded_wall = 0.0
        self.result: dict | None = None

    def start(self) -> None:
        self.stat0, self.cpu0, self.wall0 = procstat.read(), time.process_time(), time.perf_counter()

    def exclude(self, cpu_s: float, wall_s: float) -> None:
        self.excluded_cpu += cpu_s
        self.excluded_wall += wall_s

    def stop(self) -> None:
        if self.cpu0 is None:
            return
        cpu, wall, stat = time.process_time(), time.perf_counter(), procstat.read()
        self.result = {"cpu_s": cpu - self.cpu0 - self.excluded_cpu, "wall_s": wall - self.wall0 - self.excluded_wall,
                       "proc_stat": (None if stat is None or self.stat0 is None
                                     else [b - a for a, b in zip(self.stat0, stat)])}


class CompileWatch:
    """What torch.compile compiled, read from TorchDynamo's own counters (`torch._dynamo.utils`: unique graphs, and
    the time spent compiling frames and their lazily compiled backward graphs), at the end of the warm-up and of the
    timed window: whatever compiled the model (a `compile=true` knob, or a user's workload that calls torch.compile
    itself), its compile time is reported apart from the timed steps, and a graph compiled inside the timed window
    is counted there, since its time is in the row's samples/s. None where nothing was compiled (TorchDynamo
    imported by the optimizer alone compiles nothing)."""

    def __init__(self):
        self.at_warmup: tuple[int, float] | None = None

    @staticmethod
    def _read() -> tuple[int, float]:
        utils = sys.modules.get("torch._dynamo.utils")
        if utils is None:
            return 0, 0.0
        # A frame's compile (forward graph, and the backward where AOTAutograd compiles it at once) and the
        # backward graphs compiled lazily at their first backward, which a frame's own time leaves out.
        spent = utils.cumulative_time_spent_ns
        return (int(utils.counters["stats"].get("unique_graphs", 0)),
                (spent.get("entire_frame_compile", 0) + spent.get("entire_backward_compile", 0)) / 1e9)

    def warmup_done(self) -> None:
        self.at_warmup = self._read()

    def result(self) -> dict | None:
        graphs, seconds = self._read()
        if not graphs:
            return None
        before = self.at_warmup or (graphs, seconds)
        return {"graphs": graphs, "compile_s": seconds, "graphs_timed": graphs - before[0],
                "compile_s_timed": seconds - before[1]}


def device_sync(device: str):
    """A function that waits for queued work on `device` (CUDA kernels are asynchronous; CPU needs nothing)."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.synchronize
    return lambda: None


class HostClock:
    """Each step timed between two device syncs on the host clock (on CPU there is nothing to sync): a step's own
    time. On CUDA this drains the queue every step, so each step also pays the host's launch latency with the GPU
    idle: kept there only as a diagnostic (COMPARE_CUDA_SYNC_EVERY_STEP=1)."""

    kind = "host_sync"

    def __init__(self, sync):
        self.sync, self.times, self.t0 = sync, [], 0.0

    def start(self, step: int) -> None:
        self.sync()
        self.t0 = time.perf_counter()

    def stop(self, step: int) -> None:
        self.sync()
        self.times.append(time.perf_counter() - self.t0)

    def read(self) -> list[float]:
        return self.times


class CudaEventClock:
    """On CUDA: a pair of timing events around each step on the current stream and no sync between steps, as a
    training loop runs; the device is synchronised only where a window starts (the first step, the first timed
    step) and once the steps are over, when the events are read. The timed window as a whole is what the GPU did,
    and each step's time is its share of it (the per-step distribution)."""

    kind = "cuda_events"

    def __init__(self, torch, warmup: int):
        self.torch, self.warmup, self.pairs = torch, warmup, []

    def start(self, step: int) -> None:
        if step in (0, self.warmup):
            self.torch.cuda.synchronize()  # the window starts on an idle device
        begin = self.torch.cuda.Event(enable_timing=True)
        begin.record()
        self.pairs.append([begin, None])

    def stop(self, step: int) -> None:
        end = self.torch.cuda.Event(enable_timing=True)
        end.record()
        self.pairs[-1][1] = end
        if step == 0:
            self.torch.cuda.synchronize()  # so the first step's end (time to first step) is when it really ended

    def read(self) -> list[float]:
        self.torch.cuda.synchronize()
        return [begin.elapsed_time(end) / 1e3 for begin, end in self.pairs]  # ms -> s


def step_clock(device: str, warmup: int):
    """The clock a rank's training loop times its steps with (CudaEventClock on CUDA, HostClock elsewhere)."""
    import os

    if device.startswith("cuda") and os.environ.get("COMPARE_CUDA_SYNC_EVERY_STEP") != "1":
        import torch

        return CudaEventClock(torch, warmup)
    return HostClock(device_sync(device))


def release_freed_memory() -> None:
    """Return memory freed by this process to the OS now (glibc's malloc_trim): freed tensors below glibc's mmap
    threshold stay in its heap, resident, and an RSS high-water mark taken later would still count them."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _status_bytes(*fields: str) -> dict[str, int]:
    """Fields of /proc/self/status (kB there) in bytes; a field the kernel does not report is left out."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in fields:
            out[name] = int(value.split()[0]) * 1024
    return out


class PeakMemory:
    """Peak memory of this process since `reset()`: max allocated on CUDA; on CPU the peak resident set without
    its file-backed pages, i.e. the peak of what training allocates (anonymous + shared memory).

    The kernel keeps one high-water mark, of the whole resident set (VmHWM), and Linux lets a process reset it by
    writing 5 to /proc/self/clear_refs, so the CPU figure covers the timed steps only (plus whatever stays
    resident: model, optimizer state, data). That mark also counts the pages of shared libraries mapped from files
    (47-97 MiB per digits rank here), which depend on which libraries a framework imports, how its ranks are
    started and the kernel's page cache, not on training: the same code measured 308 and 381 MiB per rank from two
    venvs, and mp.spawn ranks 45 MiB below torchrun's in one run. They are subtracted:
    peak = VmHWM - RssFile, RssFile read at the same time (code pages are faulted in during warm-up and stay, so
    this is the file-backed part at the peak too), never below the anonymous + shared memory resident now. The
    subtracted part is kept in `file_bytes`. Where the reset is not allowed, the figure starts from ru_maxrss, the
    peak since the process started, and `kind` says so.
    """

    def __init__(self, device: str):
        self.device = device
        self.kind = "cuda_max_allocated" if device.startswith("cuda") else "rss_vmhwm_minus_file"
        self.file_bytes: int | None = None
        self._held = 0

    def hold(self, peak: int) -> None:
        """Keep `peak` (read before a reset) as the floor of what `read` returns."""
        self._held = max(self._held, peak)

    def reset(self) -> None:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.reset_peak_memory_stats()
        try:  # on CUDA too: host memory (ZeRO-Offload's pinned optimizer state lives there) is read beside it
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            if not self.device.startswith("cuda"):
                self.kind = "rss_maxrss_since_start_minus_file"

    def cuda_extra(self) -> dict[str, int | None]:
        """On CUDA, beside the allocated peak: the allocator's reserved peak (what runs out first: cached blocks and
        fragmentation) and this process's host memory peak less file-backed pages (offloaded optimizer state,
        pinned buffers); empty elsewhere."""
        if not self.device.startswith("cuda"):
            return {}
        import torch

        st = _status_bytes("VmHWM", "RssFile", "RssAnon", "RssShmem")
        host = (max(st["VmHWM"] - st["RssFile"], st.get("RssAnon", 0) + st.get("RssShmem", 0))
                if "VmHWM" in st and "RssFile" in st else None)
        return {"cuda_reserved_bytes": int(torch.cuda.max_memory_reserved()), "host_bytes": host}

    def read(self) -> int:
        return max(self._held, self._read())

    def _read(self) -> int:
        if self.device.startswith("cuda"):
            import torch

            return int(torch.cuda.max_memory_allocated())
        st = _status_bytes("VmHWM", "RssFile", "RssAnon", "RssShmem")
        peak = st.get("VmHWM") if self.kind == "rss_vmhwm_minus_file" else None
        if peak is None:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        if "RssFile" not in st:  # a kernel without the split (before 4.5): the whole resident set
            self.kind = self.kind.replace("_minus_file", "")
            return peak
        self.file_bytes = st["RssFile"]
        return max(peak - st["RssFile"], st.get("RssAnon", 0) + st.get("RssShmem", 0))
