"""Benchmark (not a test): compare's split of a profiled step beside Holistic Trace Analysis's reading of the same trace.

    .venv/bin/pip install HolisticTraceAnalysis        # once: `pip install -e '.[trace]'` (it brings jupyterlab)
    .venv/bin/python tests/benchmarks/bench_breakdown_hta.py [TRACE.json.gz ...]

For each trace that `compare run --breakdown --trace` kept (default: the GPU traces in tests/fixtures/traces/), it
prints, per profiled step and over the same steps:

- compare's split (harness/rank/breakdown.py's split_trace, exactly as the rank splits them): forward, backward,
  optimizer, other, exposed communication; the profiled step; and the GPU's busy time (the union of its kernels,
  copies and memsets), which the split spreads over the phases that launched them;
- HTA's temporal breakdown (TraceAnalysis.get_temporal_breakdown: the GPU's compute kernels, its non-compute
  kernels — copies, memsets, communication — and its idle time, over the span from its first kernel to its last)
  and its idle-time breakdown (get_idle_time_breakdown: idle while the host had not yet launched the next kernel,
  `host_wait`, against idle waiting on another kernel, `kernel_wait`).

HTA keeps the steps between ProfilerStep marks (all of them here: include_last_profiler_step=True), and its span
runs from the first kernel to the last, not from the step's first host call to its end: the two differ by the
host time before a step's first kernel and after its last, which the table shows as `outside`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from harness.rank.breakdown import split_trace, trace_events  # noqa: E402

DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")


def gpu_busy_per_step(path: Path) -> list[tuple[float, float, float]]:
    """(step ms, GPU busy ms: the union of its kernels, copies and memsets, first kernel to last ms) per profiled
    step, each device event counted in the step whose range holds its start."""
    raw = path.read_bytes()
    events = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)["traceEvents"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("name") == "compare.step" and e.get("cat") == "user_annotation")
    out = []
    for lo, hi in steps:
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                       if e.get("cat") in DEVICE_WORK and lo <= e["ts"] < hi)
        busy, cur = 0.0, None
        for a, b in spans:
            if cur is None or a > cur[1]:
                busy += (cur[1] - cur[0]) if cur else 0.0
                cur = [a, b]
            else:
                cur[1] = max(cur[1], b)
        busy += (cur[1] - cur[0]) if cur else 0.0
        first_last = (spans[-1][1] - spans[0][0]) if spans else 0.0
        out.append(((hi - lo) / 1e3, busy / 1e3, first_last / 1e3))
    return out


def hta(path: Path) -> dict:
    """HTA's temporal and idle-time breakdowns of one rank's trace, in ms over every profiled step."""
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(path, Path(tmp) / path.name)
        analysis = TraceAnalysis(trace_dir=tmp, include_last_profiler_step=True)
        temporal = analysis.get_temporal_breakdown(visualize=False).iloc[0]
        idle, _ = analysis.get_idle_time_breakdown(visualize=False)
    # The idle breakdown is per stream (ZeRO-3 and FSDP2 launch on several); the compute stream is the one whose
    # idle time is least, the stream that the step's kernels mostly run on
    main = idle.groupby("stream")["idle_time"].sum().idxmin()
    by_category = idle[idle["stream"] == main].groupby("idle_category")["idle_time"].sum().to_dict()
    return {"span": temporal["kernel_time(us)"] / 1e3, "compute": temporal["compute_time(us)"] / 1e3,
            "non_compute": temporal["non_compute_time(us)"] / 1e3, "idle": temporal["idle_time(us)"] / 1e3,
            "host_wait": by_category.get("host_wait", 0.0) / 1e3,
            "kernel_wait": by_category.get("kernel_wait", 0.0) / 1e3, "stream": int(main),
            "streams": int(idle["stream"].nunique())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", type=Path,
                    default=sorted((REPO / "tests" / "fixtures" / "traces").glob("*.trace.json.gz")))
    a = ap.parse_args()
    try:
        import hta as _  # noqa: F401
    except ImportError:
        sys.exit("Holistic Trace Analysis is not installed: .venv/bin/pip install HolisticTraceAnalysis")
    print("ms per profiled step, the mean over the trace's steps")
    print("| trace | steps | profiled step | GPU busy (compare) | forward | backward | optimizer | other | exposed "
          "| HTA compute | HTA non-compute | HTA idle (host wait / kernel wait) | HTA span | outside |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for path in a.traces:
        parts = split_trace(path)
        n = len(parts)
        if not n or not any(e.device_type().name == "CUDA" for e in trace_events(path)):
            print(f"| {path.name} | {n} | no CUDA events: HTA reads GPU traces | | | | | | | | | | | |")
            continue
        busy = gpu_busy_per_step(path)
        h = hta(path)

        def mean(key):
            return sum(p[key] for p in parts) / n * 1e3

        step = sum(s for s, _, _ in busy) / n
        gpu = sum(b for _, b, _ in busy) / n
        span = sum(f for _, _, f in busy) / n
        print(f"| {path.name.removesuffix('.trace.json.gz')} | {n} | {step:.2f} | {gpu:.2f} | {mean('forward'):.2f} "
              f"| {mean('backward'):.2f} | {mean('optimizer'):.2f} | {mean('other'):.2f} | {mean('exposed'):.2f} "
              f"| {h['compute'] / n:.2f} | {h['non_compute'] / n:.2f} | {h['idle'] / n:.2f} "
              f"({h['host_wait'] / n:.2f} / {h['kernel_wait'] / n:.2f} on stream {h['stream']} of {h['streams']}) "
              f"| {h['span'] / n:.2f} | {step - span:.2f} |")


if __name__ == "__main__":
    main()
