"""The per-rank training loop, identical for every adapter.

Every launcher ends up here: `python -m harness.worker SPEC` (torchrun, in-process) or `worker.run(SPEC)` from an
adapter's own entry point (mp.spawn). The rank writes what it measured to `<rank_dir>/rank<k>.json`; the parent
(harness.launch) turns the rank files into one result record. Nothing here knows which adapter it runs.

Fault injection for tests: COMPARE_FAULT / spec.fault = "ADAPTER:RANK:KIND:STEP", KIND one of
exit (os._exit(3)), raise (RuntimeError), hang (block forever) at the start of step STEP; STEP "end" injects
it after the rank has written its result, during shutdown.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import adapters
import workloads
from harness.spec import RunSpec
from harness.timing import PeakMemory, device_sync


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # per process: ranks may write the same file
    tmp.write_text(text)
    os.replace(tmp, path)


class _Progress:
    """Rank 0 tells the parent where it is (phase, step) through a small file, at most ~4 times a second."""

    def __init__(self, rank_dir: Path, enabled: bool, total: int):
        self.path, self.enabled, self.total, self.last = rank_dir / "progress.json", enabled, total, 0.0

    def __call__(self, phase: str, step: int = 0, force: bool = False) -> None:
        now = time.monotonic()
        if self.enabled and (force or now - self.last > 0.25):
            self.last = now
            _atomic_write(self.path, json.dumps({"phase": phase, "step": step, "total": self.total}))


def _fault(spec: RunSpec, adapter: str, rank: int):
    """(kind, step) if a fault is injected into this rank, else None."""
    text = spec.fault or os.environ.get("COMPARE_FAULT")
    if not text:
        return None
    name, frank, kind, step = text.split(":")
    if name == adapter and int(frank) == rank:
        return kind, (step if step == "end" else int(step))
    return None


def _inject(kind: str, step: int | str) -> None:
    print(f"[fault injection] {kind} at step {step}", file=sys.stderr, flush=True)
    if kind == "exit":
        os._exit(3)
    if kind == "raise":
        raise RuntimeError(f"injected fault at step {step}")
    if kind == "hang":
        threading.Event().wait()  # never set: this rank stops answering, its peers block in the collective
    raise ValueError(f"unknown fault kind {kind!r}")


def run(spec_path: str | Path) -> None:
    spec = RunSpec.load(spec_path)
    start_wall = time.time()
    import torch

    # Threads are fixed explicitly for every launcher (torchrun exports OMP_NUM_THREADS=1, mp.spawn does not).
    torch.set_num_threads(spec.threads)
    adapter = adapters.get(spec.adapter)(spec.knobs, spec.device)
    rank_dir = Path(spec.rank_dir)
    total = spec.warmup + spec.steps
    # Before setup the rank is not known yet: every rank may write the (same) phase, atomically.
    progress = _Progress(rank_dir, spec.mode != "comm", total)
    adapter.phase = lambda text: progress(text, force=True)
    progress("setup", force=True)
    info = adapter.setup(spec)
    progress.enabled = progress.enabled and info.rank == 0
    setup_s = time.time() - start_wall
    if spec.mode == "comm":
        from harness import comm

        result = comm.run_rank(spec, adapter, info)
        result["setup_s"] = setup_s
        _atomic_write(rank_dir / f"rank{info.rank}.json", json.dumps(result))
        adapter.teardown()
        return
    progress("setup", force=True)

    workload = workloads.get(spec.workload, spec.workload_options)
    torch.manual_seed(workload.seed)  # identical initial weights in every process and every adapter
    model = workload.build_model().to(info.device)
    n_params = sum(p.numel() for p in model.parameters())
    lr = workload.lr(spec.global_batch)
    optimizer = workload.make_optimizer(model, lr)
    model, optimizer = adapter.wrap(model, optimizer)
    data = workload.materialize(info.device, spec.global_batch)
    n_train = len(data.train_x)
    batches = [workload.batch_indices(s, spec.global_batch, n_train, info.data_rank, info.data_world).to(info.device)
               for s in range(total)]
    fault = _fault(spec, spec.adapter, info.rank)
    sync = device_sync(info.device)
    memory = PeakMemory(info.device)
    losses = torch.zeros(total, device=info.device)
    step_times: list[float] = []
    first_step_end_wall = None
    adapter.barrier()  # every rank starts the clock together

    for step in range(total):
        if step == spec.warmup:
            memory.reset()  # peak memory covers the timed steps, not start-up transients
        if fault and step == fault[1]:
            _inject(*fault)
        idx = batches[step]
        x, y = adapter.cast_input(data.train_x[idx]), data.train_y[idx]
        sync()
        t0 = time.perf_counter()
        adapter.zero_grad()
        with adapter.autocast():
            loss = workload.loss(model(x), y)
        adapter.backward(loss)
        adapter.step()
        sync()
        step_times.append(time.perf_counter() - t0)
        losses[step] = loss.detach()
        if first_step_end_wall is None:
            first_step_end_wall = time.time()
        if spec.equiv_steps and step + 1 == spec.equiv_steps:
            params = adapter.gather_parameters(model)  # on every rank: may be a collective
            if info.rank == 0:
                torch.save(params, rank_dir / "params.pt")
        progress("warmup" if step < spec.warmup else "timed", step + 1)

    peak = memory.read() if spec.steps > 0 else None
    progress("eval", total, force=True)
    evaluation = None
    if spec.eval:
        local = workload.evaluate(adapter.eval_module(model), data, info.data_rank, info.data_world,
                                  adapter.autocast(), adapter.cast_input)
        if local is not None:
            reduced = adapter.all_reduce_mean(torch.tensor(local, dtype=torch.float64, device=info.device))
            evaluation = {"local": list(local), "reduced_mean": reduced.cpu().tolist()}

    result = {
        "rank": info.rank, "world_size": info.world_size, "local_rank": info.local_rank,
        "data_rank": info.data_rank, "data_world": info.data_world, "devices_used": info.devices_used,
        "device": info.device, "backend": info.backend, "pid": os.getpid(),
        "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
        "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
        "start_wall": start_wall, "setup_s": setup_s, "first_step_end_wall": first_step_end_wall,
        "end_wall": time.time(), "warmup": spec.warmup, "step_times_s": step_times,
        "losses": losses.cpu().tolist(), "peak_memory_bytes": peak, "peak_memory_kind": memory.kind,
        "eval": evaluation, "lr": lr, "lr_rule": workload.lr_rule(), "param_count": n_params,
        "precision": adapter.precision().value,
        "compression": adapter.compression(), "adapter": adapter.describe(), "workload": workload.describe(),
        "data": data.meta, "per_process_batch": spec.global_batch // info.data_world,
    }
    _atomic_write(rank_dir / f"rank{info.rank}.json", json.dumps(result))
    adapter.barrier()
    if fault and fault[1] == "end":
        _inject(*fault)
    adapter.teardown()
    progress("done", total, force=True)


if __name__ == "__main__":
    # Some launchers append their own flags (the deepspeed launcher adds --local_rank=N): the spec is the
    # first positional argument.
    run(next(a for a in sys.argv[1:] if not a.startswith("--")))
