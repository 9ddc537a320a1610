"""A rank's own compute, measured apart from any communication: the load-balance split of `compare scale` and the
compute input of its performance model (harness/model/costmodel.py).

Runs in: every rank of a launch whose spec asks for it (`spec.profile`), after the timed steps and before rank 0
tells the parent that the measurement is over, so no other launch runs meanwhile.

Each rank builds a plain local copy of the workload's model (same seed, optimizer and learning rate; no wrapper,
no process group, no hooks of any framework) and times, on its own slice of the same training data and with the
same threads as the training step, the three parts of a step separately: forward with the loss (inside the
adapter's autocast, so a mixed-precision row is profiled in its precision), backward, and the optimizer step.
Every rank does this at the same time, so the ranks share the machine as they did while training. Whatever a
rank's training step takes beyond its own compute is communication and waiting for its peers: that is how the
wait of every backend is measured, the same way for all of them.

Backward also records when each parameter's gradient is ready (a post-accumulate-grad hook) and its size: the
order and times at which DDP buckets or Horovod fusion buffers can start their all-reduce, which the model needs.
"""

from __future__ import annotations

import fcntl
import statistics
import time
from pathlib import Path

from harness.rank.measure import device_sync
from harness.shared.rank_result import ContentionResult

BUDGET_S = 5.0
"""Timed steps per batch size stop after this many seconds (but never fewer than MIN_STEPS)."""
MIN_STEPS = 3


def spin(seconds: float) -> None:
    """Keep this core busy for `seconds`, as a slower device's compute would (a sleep would free the core)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def measure(workload, spec, info, data, adapter, batches: list[int], steps: int, delay_s: float = 0.0,
            grads: bool = False, flops: bool = False, min_s: float = 0.0, after=None) -> dict:
    """Median forward, backward and optimizer seconds of a local copy of the model at each per-rank batch size in
    `batches` (the first is this rank's training batch); `delay_s` is spun before each forward (a straggler);
    `grads`: the gradient-ready profile at the first batch size; `flops`: FLOPs of one forward+backward;
    `min_s`: keep stepping (over the same `steps` batches again) until this many seconds have passed;
    `after`: a call (a collective) made right after each step's optimizer step and timed apart; the loop then runs
    exactly `steps` timed steps, whatever the time, so that every rank makes the same calls."""
    import torch

    torch.manual_seed(workload.seed)
    model = workload.new_model().to(info.device)
    optimizer = workload.make_optimizer(model, workload.lr(spec.global_batch))
    sync = device_sync(info.device)
    n_train = data.n_train
    params = [p for p in model.parameters() if p.requires_grad]
    ready: list[float | None] = [None] * len(params)
    hooks = []
    if grads:
        # On CUDA this is when the gradient's kernels were issued, not finished: close enough for bucket order.
        hooks = [p.register_post_accumulate_grad_hook(lambda _p, i=i: ready.__setitem__(i, time.perf_counter()))
                 for i, p in enumerate(params)]

    def one_step(idx) -> tuple[float, float, float, float]:
        x, y = data.batch(idx, info.device)
        sync()
        t0 = time.perf_counter()
        if delay_s:
            spin(delay_s)
        optimizer.zero_grad(set_to_none=True)
        with adapter.autocast():  # a local copy: a counted loss is normalised by this rank's own count
            loss = workload.step_loss(workload.forward(model, x), y)
        sync()
        t1 = time.perf_counter()
        loss.backward()
        sync()
        t2 = time.perf_counter()
        optimizer.step()
        sync()
        t3 = time.perf_counter()
        if after is not None:
            after()
            sync()
            extra.append(time.perf_counter() - t3)
        return t0, t1, t2, t3

    extra: list[float] = []
    out: dict = {"batches": [], "threads": torch.get_num_threads(), "delay_s": delay_s}
    for k, b in enumerate(batches):
        if b > spec.global_batch:
            raise ValueError(f"profile batch {b} is larger than the global batch {spec.global_batch}")
        indices = [workload.batch_indices(s, spec.global_batch, n_train, 0, 1)[:b].to(info.device)
                   for s in range(steps + 1)]
        one_step(indices[0])  # untimed: first-touch allocations at this batch size
        fwd, bwd, opt = [], [], []
        extra.clear()
        started = time.perf_counter()
        s = 0
        while True:
            s += 1
            if s > steps and (after is not None or time.perf_counter() - started >= min_s):
                break
            t0, t1, t2, t3 = one_step(indices[1 + (s - 1) % steps])
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
            opt.append(t3 - t2)
            if after is None and s >= MIN_STEPS and time.perf_counter() - started > max(BUDGET_S, min_s):
                break
            if k == 0 and grads and s == 1:
                backward_start = t1
                out["grads"] = sorted(([p.numel() * p.element_size(), ready[i] - backward_start]
                                       for i, p in enumerate(params) if ready[i] is not None), key=lambda g: g[1])
        total = [a + b_ + c for a, b_, c in zip(fwd, bwd, opt)]
        out["batches"].append({"per_rank_batch": b, "fwd_s": statistics.median(fwd), "bwd_s": statistics.median(bwd),
                               "opt_s": statistics.median(opt), "compute_s": statistics.median(total),
                               "mean_s": statistics.fmean(total),
                               "n": len(total)})
        if after is not None:
            out["batches"][-1].update(after_mean_s=statistics.fmean(extra),
                                      step_mean_s=statistics.fmean(t + e for t, e in zip(total, extra)))
    for h in hooks:
        h.remove()
    # What the optimizer keeps per parameter (momentum: 4 bytes; Adam: 8), for the memory model.
    out["optimizer_state_bytes"] = sum(t.numel() * t.element_size() for state in optimizer.state.values()
                                       for t in state.values() if torch.is_tensor(t) and t.dim() > 0)
    out["param_bytes"] = sum(p.numel() * p.element_size() for p in params)
    out["copy_GBps"] = _copy_bandwidth(info.device, sync)
    if flops:
        out["flops_per_sample"] = _flops_per_sample(model, workload, data, adapter, batches[0], info.device)
    return out


def _copy_bandwidth(device: str, sync, nbytes: int = 64 * 2**20) -> float:
    """GB/s of copying one buffer into another (the buffer's size per second) with this rank's threads: what a
    framework that packs gradients into a fusion buffer and back out pays per byte."""
    import torch

    src = torch.ones(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # first touch
    times = []
    for _ in range(5):
        sync()
        t0 = time.perf_counter()
        dst.copy_(src)
        sync()
        times.append(time.perf_counter() - t0)
    return nbytes / statistics.median(times) / 1e9


def _flops_per_sample(model, workload, data, adapter, b: int, device: str) -> float | None:
    """FLOPs of one forward + backward per sample, counted by torch's own FlopCounterMode (matmuls and
    convolutions; what scales the compute to another device)."""
    try:
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError:
        return None
    import torch

    x, y = data.batch(torch.arange(b), device)
    counter = FlopCounterMode(display=False)
    with counter:
        with adapter.autocast():
            loss = workload.step_loss(workload.forward(model, x), y)
        loss.backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / b


def contention(spec, adapter, info) -> ContentionResult:
    """The compute-contention calibration of `compare scale`'s model (spec.mode "contention"): how much slower a
    rank's compute is while every rank of the launch computes at once than while it computes alone.

    After one untimed pass with every rank at once, rounds of: rank 0 alone (every other rank asleep until it is
    done) and every rank at once, the order swapped every round (a machine whose speed drifts during
    the launch then biases neither); each a `measure` of a plain local copy of the model at this rank's
    training batch for at least `min_s` seconds (a step of under a millisecond needs hundreds of steps for a
    median that holds), with no communication inside it.
    No training step runs in this launch: the measurement is apart from any point of the sweep."""
    import workloads

    workload = workloads.get(spec.workload, spec.workload_options)
    data = workload.materialize(info.device, spec.global_batch)
    per_rank_batch = spec.global_batch // info.data_world
    steps, min_s = spec.profile.get("steps", 10), spec.profile.get("min_s", 1.0)
    alone, together = [], []
    adapter.barrier()
    measure(workload, spec, info, data, adapter, [per_rank_batch], steps, min_s=min_s)  # untimed: warm the machine
    local = spec.topology is None
    for i in range(spec.profile.get("rounds", 4)):
        for phase in ("alone", "together") if i % 2 == 0 else ("together", "alone"):
            if phase == "together":
                adapter.barrier()
                together.append(measure(workload, spec, info, data, adapter, [per_rank_batch], steps,
                                        min_s=min_s)["batches"][0])
                continue
            # While rank 0 computes alone, its peers on this machine block on a file lock that rank 0 holds
            # (asleep in the kernel): a framework's barrier may keep a core busy while it waits (Horovod's polls its
            # handle every millisecond, and its background thread runs negotiation cycles until the barrier is done),
            # which would take a core from the rank that should have the machine to itself. The lock goes with
            # rank 0's process if it dies. Ranks on other hosts (no shared directory assumed) wait in the barrier.
            lock = Path(spec.rank_dir) / f"alone-{i}.lock"
            held = None
            if info.rank == 0 and local:
                held = open(lock, "w")
                fcntl.flock(held, fcntl.LOCK_EX)
            adapter.barrier()
            if info.rank == 0:
                alone.append(measure(workload, spec, info, data, adapter, [per_rank_batch], steps,
                                     min_s=min_s)["batches"][0])
                if held:
                    held.close()
            elif local:
                with open(lock) as f:
                    fcntl.flock(f, fcntl.LOCK_SH)
        adapter.barrier()
    out = ContentionResult(rank=info.rank, world_size=info.world_size, device=info.device, backend=info.backend,
                           data_world=info.data_world, per_process_batch=per_rank_batch, threads=_threads(),
                           alone=alone, together=together)
    comm = adapter.comm() if info.world_size > 1 and spec.profile.get("parts", True) else None
    if comm is not None:
        out.parts = parts(workload, spec, info, data, adapter, comm, per_rank_batch, steps, min_s,
                             spec.profile.get("rounds", 4), together[-1]["mean_s"] if together else 0.0)
    return out


def parts(workload, spec, info, data, adapter, comm, batch: int, steps: int, min_s: float, rounds: int,
          compute_s: float) -> dict:
    """Is a step the sum of its parts on this machine? The model adds the compute and each collective at its mean
    time in a comm sweep (timed back to back). In rounds (the order swapped every round), every rank at once:
    the framework's all-reduce of one buffer of the gradients' bytes as the comm sweep times it (back to back, or
    each call after `gap_s` of busy work, untimed), and a plain local step of the
    model followed by that all-reduce (a one-bucket step with no framework around it). Both loops run the same
    number of calls on every rank (the mean of the ranks' own estimates for `min_s` seconds), so no collective
    goes out of step. A diagnosis of the machine, kept beside the model's errors; no prediction uses it."""
    import torch

    from harness.shared.collectives import OPS

    op = OPS["all_reduce"]
    elements = sum(p.numel() for p in workload.new_model().parameters() if p.requires_grad)
    bufs = op.prepare(elements, info.rank, info.world_size, torch.float32, info.device, True)
    sync = device_sync(info.device)

    def collective():
        op.run(comm, bufs)

    gap = float(spec.profile.get("gap_s") or 0.0)  # as the comm sweep times its calls (harness/rank/comm_cells.py)

    def timed(calls: int) -> list[float]:
        times = []
        for _ in range(calls):
            spin(gap)
            sync()
            t0 = time.perf_counter()
            collective()
            sync()
            times.append(time.perf_counter() - t0)
        return times

    probe = statistics.fmean(timed(5)[1:])  # the same 5 calls on every rank
    own = torch.tensor([max(steps, min_s / max(probe + gap, 1e-6)), max(steps, min_s / max(probe + compute_s, 1e-6))],
                       dtype=torch.float64, device=info.device)
    n_coll, n_step = (max(steps, int(round(float(v)))) for v in adapter.all_reduce_mean(own).cpu())
    out = []
    for i in range(rounds):
        r: dict = {}
        for phase in ("collective", "step") if i % 2 == 0 else ("step", "collective"):
            adapter.barrier()
            if phase == "collective":
                r["collective_s"] = statistics.fmean(timed(n_coll))
            else:
                b = measure(workload, spec, info, data, adapter, [batch], n_step, after=collective)["batches"][0]
                r.update(compute_s=b["mean_s"], after_s=b["after_mean_s"], step_s=b["step_mean_s"])
        out.append(r)
    adapter.barrier()
    return {"bytes": elements * 4, "calls": [n_coll, n_step], "rounds": out, "gap_s": gap}


def _threads() -> int:
    import torch

    return torch.get_num_threads()
