"""The primitives `compare comm` benchmarks: how to set up, run and check each, and nccl-tests' bandwidth factors.

Runs in: both. Every rank runs the ops (harness/rank/comm_cells.py); the parent reads the bandwidth factors
(harness/core/comm_bench.py) and the names (input checks). torch is imported lazily, so the parent's checks stay cheap.

Bandwidths follow nccl-tests (doc/PERFORMANCE.md): algbw = size / time; busbw = algbw x factor, with factor
2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter, all_to_all, gather and scatter, and 1 for
broadcast, reduce and point-to-point. Size S is the full buffer as nccl-tests counts it (all_gather: the gathered
output; reduce_scatter: the input).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

DTYPES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp64": 8}
"""Element sizes in bytes of the dtypes a user may choose (--dtype)."""


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor of `op` on `n` ranks."""
    return OPS[op].factor(n)


@dataclass(frozen=True)
class Op:
    """How to set up, run and check one primitive. `run(comm, bufs)` is the timed part."""

    name: str
    factor: Callable[[int], float]
    prepare: Callable[..., dict]
    run: Callable[[Any, dict], None]
    check: Callable[[dict, int, int], bool]
    group: str = "collective"
    """collective | async | batched | p2p: for the report's grouping."""


def _t(n, value, dtype, device):
    import torch

    return torch.full((n,), float(value), dtype=dtype, device=device)


def _close(t, expected) -> bool:
    import torch

    return bool(torch.allclose(t.double(), torch.as_tensor(expected, dtype=torch.float64, device=t.device).expand_as(t),
                               rtol=1e-2, atol=0))


def _peer_order(rank: int, world: int):
    """Ring neighbours; even ranks send first so blocking send/recv pairs cannot deadlock."""
    return (rank + 1) % world, (rank - 1) % world, rank % 2 == 0


def _p2p_prepare(n, rank, world, dtype, device, zero):
    to, frm, first = _peer_order(rank, world)
    return {"send": _t(n, 0 if zero else rank + 1, dtype, device), "recv": _t(n, -1, dtype, device),
            "to": to, "from": frm, "send_first": first}


def _p2p_check(b, rank, world):
    return _close(b["recv"], b["from"] + 1)


def _blocking_sendrecv(comm, b):
    if b["send_first"]:
        comm.send(b["send"], b["to"])
        comm.recv(b["recv"], b["from"])
    else:
        comm.recv(b["recv"], b["from"])
        comm.send(b["send"], b["to"])


def _chunks(n, world):
    return n // world


OPS: dict[str, Op] = {op.name: op for op in [
    Op("all_reduce", lambda n: 2 * (n - 1) / n,
       lambda n, r, w, dt, dev, z: {"t": _t(n, 0 if z else r + 1, dt, dev)},
       lambda c, b: c.all_reduce(b["t"]),
       lambda b, r, w: _close(b["t"], w * (w + 1) / 2)),
    Op("all_reduce_async", lambda n: 2 * (n - 1) / n,
       lambda n, r, w, dt, dev, z: {"t": _t(n, 0 if z else r + 1, dt, dev)},
       lambda c, b: c.all_reduce_async(b["t"]).wait(),
       lambda b, r, w: _close(b["t"], w * (w + 1) / 2), group="async"),
    Op("all_reduce_coalesced", lambda n: 2 * (n - 1) / n,
       lambda n, r, w, dt, dev, z: {"ts": [_t(max(1, n // 8), 0 if z else r + 1, dt, dev) for _ in range(8)]},
       lambda c, b: c.all_reduce_coalesced(b["ts"]),
       lambda b, r, w: all(_close(t, w * (w + 1) / 2) for t in b["ts"]), group="batched"),
    Op("broadcast", lambda n: 1.0,
       lambda n, r, w, dt, dev, z: {"t": _t(n, 0 if z else (7 if r == 0 else -1), dt, dev)},
       lambda c, b: c.broadcast(b["t"], 0),
       lambda b, r, w: _close(b["t"], 7)),
    Op("reduce", lambda n: 1.0,
       lambda n, r, w, dt, dev, z: {"t": _t(n, 0 if z else r + 1, dt, dev)},
       lambda c, b: c.reduce(b["t"], 0),
       lambda b, r, w: r != 0 or _close(b["t"], w * (w + 1) / 2)),
    Op("all_gather", lambda n: (n - 1) / n,
       lambda n, r, w, dt, dev, z: {"in": _t(_chunks(n, w), 0 if z else r + 1, dt, dev),
                                    "out": _t(_chunks(n, w) * w, -1, dt, dev)},
       lambda c, b: c.all_gather(b["out"], b["in"]),
       lambda b, r, w: all(_close(ch, i + 1) for i, ch in enumerate(b["out"].chunk(w)))),
    Op("gather", lambda n: (n - 1) / n,
       lambda n, r, w, dt, dev, z: {"in": _t(_chunks(n, w), 0 if z else r + 1, dt, dev),
                                    "out": [_t(_chunks(n, w), -1, dt, dev) for _ in range(w)] if r == 0 else None},
       lambda c, b: c.gather(b["out"], b["in"], 0),
       lambda b, r, w: r != 0 or all(_close(t, i + 1) for i, t in enumerate(b["out"]))),
    Op("scatter", lambda n: (n - 1) / n,
       lambda n, r, w, dt, dev, z: {"in": [_t(_chunks(n, w), 0 if z else i + 1, dt, dev) for i in range(w)]
                                    if r == 0 else None, "out": _t(_chunks(n, w), -1, dt, dev)},
       lambda c, b: c.scatter(b["out"], b["in"], 0),
       lambda b, r, w: _close(b["out"], r + 1)),
    Op("reduce_scatter", lambda n: (n - 1) / n,
       lambda n, r, w, dt, dev, z: {"in": _t(_chunks(n, w) * w, 0 if z else r + 1, dt, dev),
                                    "out": _t(_chunks(n, w), -1, dt, dev)},
       lambda c, b: c.reduce_scatter(b["out"], b["in"]),
       lambda b, r, w: _close(b["out"], w * (w + 1) / 2)),
    Op("all_to_all", lambda n: (n - 1) / n,
       lambda n, r, w, dt, dev, z: _a2a_prepare(n, r, w, dt, dev, z),
       lambda c, b: c.all_to_all(b["out"], b["in"]),
       lambda b, r, w: all(_close(ch, j * w + r) for j, ch in enumerate(b["out"].chunk(w)))),
    Op("sendrecv", lambda n: 1.0, _p2p_prepare, _blocking_sendrecv, _p2p_check, group="p2p"),
    Op("isend_irecv", lambda n: 1.0, _p2p_prepare,
       lambda c, b: [h.wait() for h in (c.isend(b["send"], b["to"]), c.irecv(b["recv"], b["from"]))],
       _p2p_check, group="async"),
    Op("sendrecv_batched", lambda n: 1.0, _p2p_prepare,
       lambda c, b: c.batch_sendrecv(b["send"], b["to"], b["recv"], b["from"]),
       _p2p_check, group="batched"),
]}
DEFAULT_OPS = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all", "gather",
               "scatter", "sendrecv", "isend_irecv", "all_reduce_async", "all_reduce_coalesced", "sendrecv_batched")


def _a2a_prepare(n, r, w, dt, dev, z):
    import torch

    per = _chunks(n, w)
    src = torch.cat([_t(per, 0 if z else r * w + j, dt, dev) for j in range(w)])
    return {"in": src, "out": _t(per * w, -1, dt, dev)}


def iterations(size_bytes: int, max_iters: int) -> tuple[int, int]:
    """(warm-up, timed) iterations: many for small messages, at least 5 timed for the largest. Deterministic, so
    every rank agrees without communicating."""
    timed = max(5, min(max_iters, 2**30 // max(size_bytes, 1)))
    return min(5, timed), timed
