"""What a run will cost, said before it is paid for: each launch's seconds as this machine last measured them for the
same row (adapter and knobs, workload and its options, world size, device, threads, global batch), kept in the cache
directory beside DeepSpeed's JIT (harness/shared/cache.py); a row never run here takes the first launch's figure
once one has ended. A launch's seconds are split into what does not depend on the step count (start-up,
evaluation, shutdown) and seconds per step, so a run of another length is priced too.

Runs in: the parent (harness/core/comparison.py builds a Forecast; harness/core/runner.py tells it each launch).
"""

from __future__ import annotations

import json
import math
from typing import Any

from harness.shared import cache

FILE = "launch_seconds.json"
KEEP = 400
"""Entries kept (the most recent): a few hundred rows of any size."""


def _load() -> dict[str, Any]:
    return cache.read_dict(FILE)


def key(plan, label: str) -> str:
    """The row as far as its duration goes."""
    req = plan.request
    return json.dumps([label, req.workload, sorted(req.options), req.world_size, req.device, req.threads,
                       plan.global_batch, None if plan.topology is None else len(plan.topology.nodes)])


def _store(k: str, wall_s: float, steps: int, stepping_s: float) -> None:
    """A launch keyed `k` took `wall_s`, of which `stepping_s` were its `steps` steps (none: all of it fixed)."""
    if not (wall_s > 0 and math.isfinite(wall_s)):
        return
    data = _load()
    data.pop(k, None)  # re-inserted last: the most recent entries are the ones kept
    data[k] = {"fixed_s": max(0.0, wall_s - stepping_s), "step_s": stepping_s / steps if steps else 0.0}
    cache.write_dict(FILE, dict(list(data.items())[-KEEP:]))


def costs(plan, labels: list[str]) -> list[tuple[float, float] | None]:
    """(fixed seconds, seconds a step) of a launch of each of `labels` in `plan`, as this machine last measured it,
    or None for one it has not."""
    data = _load()

    def one(c) -> tuple[float, float] | None:
        try:
            return (float(c["fixed_s"]), float(c["step_s"]))
        except (TypeError, KeyError, ValueError):
            return None

    return [one(data.get(key(plan, label))) for label in labels]


def remember(plan, label: str, wall_s: float, steps: int, stepping_s: float) -> None:
    """A launch of `label` took `wall_s`, of which `stepping_s` were its `steps` warm-up and timed steps."""
    _store(key(plan, label), wall_s, steps, stepping_s)


def comm_key(plan, label: str) -> str:
    """A `compare comm` backend's launch as far as its duration goes: the ops, sizes and iterations it times."""
    req = plan.request
    return json.dumps(["comm", label, plan.ops, plan.sizes, req.dtype, req.max_iters, req.gap_s, req.world_size,
                       req.device, req.threads, None if plan.topology is None else len(plan.topology.nodes)])


def remember_seconds(k: str, wall_s: float) -> None:
    """A launch keyed `k` (comm_key) took `wall_s`, whatever its length."""
    _store(k, wall_s, 0, 0.0)


def _about(launches: int, known: list[float], count: int, rows_known: int, rows: int, noun: str) -> tuple[str, float]:
    """"N launch(es): about T (from ...)": `count` launches priced at the mean of the `known` figures, from
    `rows_known` of the `rows` rows (`noun`s) this machine has run."""
    total = sum(known) / len(known) * count
    source = (f"this machine's last launches of every {noun}" if rows_known == rows else
              f"this machine's last launches of {rows_known} of the {rows} {noun}s, the others taken as their average")
    return f"{launches} launch(es): about {duration(total)} (from {source})", total


def comm_line(keys: list[str]) -> tuple[str, float | None]:
    """What a `compare comm` run will cost, before its first launch, and the seconds it adds up to (None: unknown)."""
    data = _load()
    known = [data[k]["fixed_s"] for k in keys if k in data]
    if not known:
        return (f"{len(keys)} launch(es); no estimate yet: none of these backends has run these ops and sizes on this "
                f"machine"), None
    return _about(len(keys), known, len(keys), len(known), len(keys), "backend")


def duration(text_s: float) -> str:
    """A duration as a person says it: 40 s, 3 min, 1 h 20 min."""
    s = round(text_s)
    if s < 90:
        return f"{max(s, 1)} s"
    if s < 3600:
        return f"{round(s / 60)} min"
    return f"{s // 3600} h {round(s % 3600 / 60)} min"


class Forecast:
    """The seconds each planned launch is expected to take, updated as launches end. `launches`: (plan, row label)
    per planned launch, in any order; `references`: a plan per single-process reference launch."""

    def __init__(self, launches: list[tuple[Any, str]], references: list[Any] = ()):
        data = _load()
        self.pending: list[tuple[int, str, str, int]] = (
            [(id(plan), label, key(plan, label), plan.steps + plan.warmup) for plan, label in launches]
            + [(id(plan), "reference", key(plan, "reference"), plan.equiv_steps) for plan in references])
        """(id of its plan, label, cache key, steps) of every launch not yet ended."""
        self.costs: dict[str, dict | None] = {k: data.get(k) for _, _, k, _ in self.pending}
        self.first_wall: float | None = None

    def _seconds(self, k: str, steps: int) -> float | None:
        c = self.costs.get(k)
        return self.first_wall if c is None else c["fixed_s"] + c["step_s"] * steps

    def left(self) -> float | None:
        """Seconds the launches not yet ended should take; None while some have no figure at all."""
        each = [self._seconds(k, steps) for _, _, k, steps in self.pending]
        return None if any(s is None for s in each) else sum(each)

    def line(self) -> str:
        """What the run will cost, before the first launch."""
        rows = {k for _, label, k, _ in self.pending if label != "reference"}
        n = sum(label != "reference" for _, label, _, _ in self.pending)
        known = sum(self.costs.get(k) is not None for k in rows)
        if known == 0:
            return (f"{n} launch(es); no estimate yet: none of these rows has run on this machine with these settings "
                    f"(one follows the first launch)")
        figures = [self._seconds(k, steps) for _, _, k, steps in self.pending]
        return _about(n, [f for f in figures if f is not None], len(figures), known, len(rows), "row")[0]

    def ended(self, plan, label: str, wall_s: float) -> str | None:
        """A launch of `label` in `plan` ended after `wall_s` (0: it failed); the line to print where this was the
        run's first figure for rows never run here."""
        for i, (pid, lab, _, _) in enumerate(self.pending):
            if pid == id(plan) and lab == label:
                del self.pending[i]
                break
        if self.first_wall is not None or not (wall_s > 0) or label == "reference":  # a row's launch prices rows
            return None
        self.first_wall = wall_s
        if all(self.costs.get(k) is not None for _, lab, k, _ in self.pending if lab != "reference"):
            return None
        left = self.left()
        return None if left is None else f"about {duration(left)} left (the rows never run here priced as this one)"


SPEED_FILE = "speed.json"
LARGE_STEP_S = 1.0
"""A model whose step is estimated at least this long on this machine is said to be large before the first launch
(its parameters, its FLOPs and what the estimate rests on): a default run of it takes minutes per launch."""


CORE_FP32_BOUND = 2.6e11
"""FLOP/s no CPU core passes in fp32 (two 512-bit FMA units at 4 GHz: 16 lanes x 2 x 2 x 4e9 = 256 G): a step under
LARGE_STEP_S at this speed needs no timing to be called small."""


def _speed_key(device: str, threads: int) -> str:
    return f"{device.split(':')[0]}|{threads}"


def remember_speed(device: str, threads: int, flops_per_s: float, what: str) -> None:
    """A row's achieved FLOP/s per rank (fp32 or not, as it ran) with `threads` threads a rank on `device`: the
    fastest kept per device and threads, what a later run's estimate of a step rests on."""
    if not (flops_per_s > 0 and math.isfinite(flops_per_s)):
        return
    data = cache.read_dict(SPEED_FILE)
    k = _speed_key(device, threads)
    if (data.get(k) or {}).get("flops_per_s", 0.0) >= flops_per_s:
        return
    data[k] = {"flops_per_s": flops_per_s, "what": what}
    cache.write_dict(SPEED_FILE, data)


def measured_speed(device: str, threads: int) -> dict[str, Any] | None:
    """{"flops_per_s", "what"}: the fastest FLOP/s per rank a row has reached on this machine at these threads."""
    found = cache.read_dict(SPEED_FILE).get(_speed_key(device, threads))
    return found if isinstance(found, dict) and found.get("flops_per_s") else None


def matmul_speed(threads: int, seconds: float = 0.2) -> float:
    """FLOP/s of fp32 1024 x 1024 matrix products on the CPU with `threads` threads, timed here: the most a
    training step's matmuls can reach with them (the step's other work and communication come on top)."""
    import time

    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a = torch.randn(1024, 1024)
        a @ a  # first touch
        n, start = 0, time.perf_counter()
        while n < 3 or time.perf_counter() - start < seconds:
            a @ a
            n += 1
        return n * 2 * 1024**3 / (time.perf_counter() - start)
    finally:
        torch.set_num_threads(before)


def size_line(name: str, params: int | None, flops_per_sample: float | None, per_rank_batch: int, steps: int,
              device: str, threads: int) -> str | None:
    """What a run says before its first launch when the model is large for this machine (a step estimated at
    LARGE_STEP_S or more): its parameters, its FLOPs a step and rank, the step's estimated time and what that rests
    on (the fastest a row has reached here, else a matmul timed now on the CPU); None for a model that is not."""
    if not flops_per_sample:
        return None
    flops = flops_per_sample * per_rank_batch
    speed = measured_speed(device, threads)
    if speed is not None:
        rate = speed["flops_per_s"]
        basis = (f"the fastest any row has run on this machine at {threads} thread(s) a rank, {rate / 1e9:,.1f} "
                 f"GFLOP/s ({speed['what']})")
    elif device == "cpu" and flops >= LARGE_STEP_S * threads * CORE_FP32_BOUND:
        rate = matmul_speed(threads)
        basis = (f"an fp32 matmul timed now at {threads} thread(s), {rate / 1e9:,.1f} GFLOP/s, as no row has run on "
                 f"this machine yet: a training step reaches only part of that")
    else:
        return None
    step_s = flops / rate
    if step_s < LARGE_STEP_S:
        return None
    size = f"{params / 1e6:,.1f} M parameters, " if params else ""
    return (f"{name} is large for this machine: {size}{flops / 1e12:,.2f} TFLOP a step on each rank "
            f"({flops_per_sample / 1e9:,.1f} GFLOP a sample, {per_rank_batch} a rank), at least {duration(step_s)} a "
            f"step and {duration(step_s * steps)} for the {steps} steps of each launch (from {basis})")
