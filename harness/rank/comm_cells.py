"""The communication benchmark inside a rank: every (op, size) cell checked once, then timed.

Runs in: every rank of a `compare comm` launch (harness/rank/life.py calls `run` after the adapter's setup),
through the adapter's `comm()` object, which holds the framework's own calls. For every cell every rank first
checks one result against the expected values (a wrong result is a failed cell, like nccl-tests' #wrong), then
times warm-up + timed iterations on zero-filled buffers (so repeated sums cannot overflow); the parent takes the
slowest rank per iteration. With a gap (`compare comm --gap`), every rank keeps its core busy for that long
before each call, untimed, as a training step calls its collectives after its compute: on shared cores a
collective called back to back finds its peers' communication threads awake, one called after compute may not.
"""

from __future__ import annotations

import time

from harness.rank.compute_profile import spin
from harness.rank.measure import device_sync
from harness.shared.collectives import DTYPES, OPS, iterations
from harness.shared.rank_result import CommResult
from harness.shared.text import shorten


def run(spec, adapter, info, phase=lambda text: None) -> CommResult:
    """Every (op, size) cell: checked, then timed. `phase(text)` says which cell rank 0 is in (a --timeout names it)."""
    import torch

    c = spec.comm
    comm = adapter.comm()
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "fp64": torch.float64}[c["dtype"]]
    sync = device_sync(info.device)
    rank, world = info.rank, info.world_size
    gap = float(c.get("gap_s") or 0.0)
    cells = []
    for op_name in c["ops"]:
        op = OPS[op_name]
        for size in c["sizes"]:
            n = max(world, size // DTYPES[c["dtype"]] // world * world)  # divisible by the world size
            cell = {"op": op_name, "size_bytes": n * DTYPES[c["dtype"]], "elements": n}
            phase(f"{op_name} of {cell['size_bytes']:,} bytes")
            try:
                bufs = op.prepare(n, rank, world, dtype, info.device, False)
                op.run(comm, bufs)
                sync()
                cell["correct"] = bool(op.check(bufs, rank, world))
                bufs = op.prepare(n, rank, world, dtype, info.device, True)
                warm, timed = iterations(size, c["max_iters"])
                for _ in range(warm):
                    spin(gap)
                    op.run(comm, bufs)
                sync()
                comm.barrier()
                times = []
                for _ in range(timed):
                    spin(gap)
                    t0 = time.perf_counter()
                    op.run(comm, bufs)
                    sync()
                    times.append(time.perf_counter() - t0)
                cell["times_s"] = times
            except NotImplementedError as exc:  # the framework has no such primitive (Horovod has no send/recv)
                cell["unsupported"] = _line(str(exc))
            except Exception as exc:  # a failing op is a failed cell, not a failed backend
                cell["error"] = _line(f"{type(exc).__name__}: {exc}")
            cells.append(cell)
            comm.barrier()
    return CommResult(rank=rank, world_size=world, device=info.device, backend=info.backend, cells=cells,
                      framework=adapter.describe())


def _line(message: str) -> str:
    """An exception's message as one table cell: its first line (torch appends a C++ stack trace), 300 chars."""
    return shorten((message.strip().splitlines() or [""])[0])
