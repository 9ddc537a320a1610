"""Benchmark (not a test): how long a rank takes to classify and split its profiled steps (harness/rank/breakdown.py,
harness/shared/step_parts.py), on a synthetic trace of N steps, against the stall watch's default wait.

    .venv/bin/python tests/benchmarks/bench_split.py [--steps 1000] [--ops 2000] [--repeats 3]

`--breakdown-steps` is bounded (harness/core/checks.py, MAX_BREAKDOWN_STEPS) so that the split of that many steps
ends well within `--stall-timeout`'s default while the rank reports each step it splits; this measures the split
alone, with `--ops` operators per step on the training thread (a step of FSDP2 on widemlp records about a thousand
CPU events; a transformer's more), two nested, and an all-reduce on gloo's thread. It prints the seconds to
classify the events and to split them, the best of `--repeats`, and the events per second. The profiler's own
collection of the events (kineto, inside the last profiled step) is not in it: the end-to-end figure is a real run,
`compare run -w widemlp -a ddp,fsdp --breakdown --breakdown-steps 1000 --repeats 1`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from harness.core.checks import MAX_BREAKDOWN_STEPS  # noqa: E402
from harness.rank.breakdown import _classify  # noqa: E402
from harness.shared.spec import STALL_S  # noqa: E402
from harness.shared.step_parts import split_steps  # noqa: E402

MS = 1_000_000


class Event:
    """What breakdown.py reads of a kineto event."""

    class Kind:
        def __init__(self, name):
            self.name = name

    CPU = Kind("CPU")

    def __init__(self, name, start_ns, dur_ns, thread=1):
        self._n, self._s, self._d, self._t = name, int(start_ns), int(dur_ns), thread

    def name(self):
        return self._n

    def start_ns(self):
        return self._s

    def duration_ns(self):
        return self._d

    def start_thread_id(self):
        return self._t

    def device_type(self):
        return self.CPU

    def correlation_id(self):
        return 0


def trace(steps: int, ops: int, step_ns: int = 10 * MS) -> list[Event]:
    events = []
    for k in range(steps):
        t0 = k * step_ns
        events.append(Event("compare.step", t0, step_ns))
        for name, a, b in (("forward", 0.0, 0.3), ("backward", 0.3, 0.8), ("optimizer", 0.8, 0.95)):
            events.append(Event(f"compare.{name}", t0 + a * step_ns, (b - a) * step_ns))
        width = 0.95 * step_ns / ops
        for i in range(ops):
            events.append(Event("aten::mm" if i % 2 else "aten::linear", t0 + i * width, width * (0.4 if i % 2 else 0.9)))
        events.append(Event("gloo:all_reduce", t0 + 0.55 * step_ns, 0.3 * step_ns, thread=2))
    return events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=MAX_BREAKDOWN_STEPS)
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    events = trace(args.steps, args.ops)
    best_classify = best_split = float("inf")
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        steps, phases, compute, comm, _ = _classify(events, cuda=False)
        t1 = time.perf_counter()
        split_steps(steps, phases, compute, comm)
        t2 = time.perf_counter()
        best_classify, best_split = min(best_classify, t1 - t0), min(best_split, t2 - t1)
    total = best_classify + best_split
    print(f"{args.steps} steps x {args.ops} operators ({len(events):,} events): classify {best_classify:.2f} s, "
          f"split {best_split:.2f} s, {len(events) / total:,.0f} events/s; the stall watch waits {STALL_S:g} s "
          f"by default ({total / STALL_S:.1%} of it)")


if __name__ == "__main__":
    main()
