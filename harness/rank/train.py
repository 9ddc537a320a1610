"""The per-rank training loop, identical for every adapter.

Runs in: every rank (called by harness/rank/life.py after the adapter's setup). Nothing here knows which adapter
or workload it runs: the adapter wraps, steps and reduces; the workload builds, shards, scores.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import sys
import time
from pathlib import Path

import workloads
from workloads import batch as batches
from workloads.base import collated, pair
from harness.rank import breakdown, compute_profile
from harness.rank.evaluation import PeriodicEval, evaluate
from harness.rank.faults import inject
from harness.rank.measure import (CompileWatch, CpuWindow, PeakMemory, cuda_math, device_sync, release_freed_memory,
                                  step_clock)
from harness.shared import progress as progress_file
from harness.shared.rank_result import TrainResult


def step_indices(indices, device):
    """A step's batch indices, made on the host, on the data's device without waiting for the device: a plain
    `.to("cuda")` of a host tensor synchronises the stream, so every step would wait for the last one's kernels
    before queueing its own and the GPU would idle while the host launches (4% of a ResNet-50 bf16 step on an H200,
    harness against a hand-written loop). The host copy is staged by the driver before the call returns."""
    return indices.to(device, non_blocking=True)


def run(spec, adapter, info, marks, progress, fault, keep=lambda result: None) -> TrainResult:
    """Train, measure and return this rank's result. `keep(result)` writes a result as the rank's own (life.py):
    with --breakdown it is called before the profiled steps, with the breakdown marked unfinished, so a failure,
    stall or interruption there costs the breakdown, never the measurement."""
    import torch

    workloads.check_unchanged(spec.workload, getattr(spec, "workload_digest", None))
    workload = workloads.get(spec.workload, spec.workload_options)
    total = spec.warmup + spec.steps
    torch.manual_seed(workload.seed)  # identical initial weights in every process and every adapter
    model = workload.new_model().to(info.device)
    n_params = sum(p.numel() for p in model.parameters())
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)  # before wrap: frozen stays frozen
    precision = _precision(adapter, model)
    lr = workload.lr(spec.global_batch)
    optimizer = workload.make_optimizer(model, lr)
    adapter.units = workload.shard_groups(model)  # what a sharding adapter wraps one by one, tied modules together
    adapter.max_grad_norm = spec.max_grad_norm  # before wrap: a framework that clips itself is configured there
    model, optimizer = adapter.wrap(model, optimizer)
    data = workload.materialize(info.device, spec.global_batch)
    n_train = data.n_train
    if torch.get_num_threads() != spec.threads:  # the workload's own torch.set_num_threads, in its builder or data
        # every row computes with the threads the run set (--threads), the same for every backend: measured, a
        # builder's set_num_threads(8) had every rank run 8 threads on 2 cores, recorded as the rows' threads
        adapter.phase(f"the workload's code set torch's threads to {torch.get_num_threads()}; compare sets them back "
                      f"to {spec.threads} (--threads), as for every row")
        torch.set_num_threads(spec.threads)
    loader = (StepLoader(workload, data, spec, info, spec.warmup + spec.steps + _profiled(spec))
              if data.train_set is not None else None)

    def batch(step: int):
        # Each step's indices made when the step comes, outside its timed part: a list made up front for every step
        # grew with --steps and was counted in the peak memory (about 12 KB a step on digits).
        return step_indices(workload.batch_indices(step, spec.global_batch, n_train, info.data_rank, info.data_world),
                            info.device)
    sync = device_sync(info.device)
    memory = PeakMemory(info.device)
    losses = torch.zeros(total, device=info.device)
    uncounted = torch.zeros(total, dtype=torch.bool, device=info.device)  # steps whose global batch counted nothing
    first_step_end_wall = None
    snapshot_s = None
    # Until-target runs evaluate every K steps and stop at the target (harness/rank/evaluation.py).
    periodic = (PeriodicEval(spec, workload, adapter, model, data, info, sync, progress, total)
                if spec.eval_every else None)
    marks("setup_done")
    progress.phase("waiting for the previous launch to end", 0)
    progress_file.pass_gate(Path(spec.rank_dir))  # no other launch runs while this one is measured
    marks("gate_passed")
    per_rank_batch = spec.global_batch // info.data_world
    straggler = _straggler(spec, workload, info, data, adapter, per_rank_batch, progress)
    delay_s = straggler["delay_s"] if straggler else 0.0
    progress.phase("warmup" if spec.warmup else "timed", 0)
    adapter.barrier()  # every rank starts the clock together

    window = CpuWindow()
    compiled = CompileWatch()
    clock = step_clock(str(info.device), spec.warmup)
    steps_done, skipped_before, grads_held = 0, None, None
    for step in range(total):
        if step == spec.warmup:
            memory.reset()  # peak memory covers the timed steps, not start-up transients
            marks("warmup_done")
            skipped_before = adapter.skipped_steps()  # before the window's clock: it may sync
            compiled.warmup_done()
            sync()  # on CUDA the warm-up's queued kernels finish outside the window
            window.start()
            if step:
                progress.phase("timed", step)
        if fault and step == fault[1]:
            inject(*fault)
        if loader is None:
            x, y = training_batch(data, batch(step), adapter)
            clock.start(step)
        else:
            clock.start(step)  # a step waits for its batch from the loader: a training job waits for it too
            x, y = loader.next()
            x = batches.apply(adapter.cast_input, x)
        if delay_s:
            compute_profile.spin(delay_s)  # a slower device: this rank's compute takes `factor` times as long
        adapter.zero_grad()
        with adapter.autocast():
            loss = step_loss(workload, model, x, y, adapter)
        adapter.backward(loss)
        if step == 0 and spec.warmup:  # the gradients as the backward left them (a ZeRO step frees them)
            grads_held = (_dtypes(adapter, model) or {}).get("grads")
        adapter.step()
        clock.stop(step)
        steps_done += 1
        losses[step] = loss.detach()
        if workload.global_count is not None:
            uncounted[step] = workload.global_count == 0  # on the device: no sync a step
        if first_step_end_wall is None:
            first_step_end_wall = time.time()
        stop = False
        if periodic is not None:  # an until-target run's evaluation: harness work, left out of the window
            eval_t0, eval_cpu0 = time.perf_counter(), time.process_time()
            stop = periodic.after_step(step + 1)
            if step >= spec.warmup:
                window.exclude(time.process_time() - eval_cpu0, time.perf_counter() - eval_t0)
        if spec.equiv_steps and step + 1 == spec.equiv_steps:
            snapshot_t0 = time.perf_counter()  # harness work: an until-target run leaves it out of its times
            snapshot_cpu0 = time.process_time()
            timed_peak = memory.read() if step >= spec.warmup else None
            params = adapter.gather_parameters(model)  # on every rank: may be a collective
            if info.rank == 0:
                torch.save(params, spec.params_path)
                peaks = adapter.gradient_peaks()
                if peaks is not None:
                    torch.save(peaks, spec.gradient_peaks_path)
            # The copy is the harness's, not the training's: freed before the next step, and its memory left out
            # of the peak (a copy of every parameter: 144 MiB per rank on widemlp).
            del params
            release_freed_memory()
            if timed_peak is not None:  # inside the timed steps: keep their peak so far, forget the copy's
                memory.reset()
                memory.hold(timed_peak)
            # Rank 0's save (151 MB on widemlp) must not delay the next step of the other ranks, whose wait for
            # it in the next collective would otherwise be timed as a slow step.
            adapter.barrier()
            snapshot_s = time.perf_counter() - snapshot_t0
            if step >= spec.warmup:  # inside the timed window: its CPU time is the harness's, not the training's
                window.exclude(time.process_time() - snapshot_cpu0, snapshot_s)
        progress.step(step + 1)
        if stop:
            break
    step_times = clock.read()  # on CUDA: the events, read once the steps are over
    if loader is not None and not spec.breakdown:
        loader.close()
    window.stop()
    dtypes = _dtypes(adapter, model)  # after a step: the optimizer's state exists
    if dtypes is not None and grads_held is not None:
        dtypes["grads"] = grads_held
    skipped_after = adapter.skipped_steps()
    compile_result = compiled.result()
    skipped_timed = skipped_after - skipped_before if None not in (skipped_before, skipped_after) else None
    steps_run = steps_done
    if "warmup_done" not in marks:  # no timed steps
        marks("warmup_done")
    marks("timed_done")
    peak = memory.read() if spec.steps > 0 else None
    memory_extra = memory.cuda_extra() if spec.steps > 0 else {}
    own = None
    if spec.profile:
        progress.phase("profiling compute", total)
        adapter.barrier()  # every rank profiles at once, sharing the machine as while training
        own = compute_profile.measure(workload, spec, info, data, adapter,
                                      [per_rank_batch] + [b for b in spec.profile.get("curve", [])
                                                          if b != per_rank_batch],
                                      spec.profile.get("steps", 10), delay_s=delay_s, grads=True,
                                      flops=spec.profile.get("flops", False))
        adapter.barrier()
        marks("profile_done")
    if info.rank == 0 and not spec.breakdown:
        progress_file.send_event(Path(spec.rank_dir), "timed_done")  # the parent may start the next launch

    progress.phase("eval", steps_run)
    evaluation = None

    def result(parts, unfinished=()) -> TrainResult:
        return TrainResult(
            rank=info.rank, world_size=info.world_size, local_rank=info.local_rank,
            data_rank=info.data_rank, data_world=info.data_world, devices_used=info.devices_used,
            device=info.device, backend=info.backend, pid=os.getpid(),
            threads=torch.get_num_threads(), interop_threads=torch.get_num_interop_threads(),
            omp_num_threads_env=os.environ.get("OMP_NUM_THREADS"),
            start_wall=marks["entry"], setup_s=marks["init_done"] - marks["entry"],
            first_step_end_wall=first_step_end_wall,
            end_wall=time.time(), warmup=spec.warmup, step_times_s=step_times,
            losses=losses[:steps_run].cpu().tolist(), loss_counted=workload.loss_counted,
            uncounted_steps=uncounted[:steps_run].nonzero().flatten().cpu().tolist(), peak_memory_bytes=peak,
            peak_memory_kind=memory.kind, peak_memory_file_bytes=memory.file_bytes,
            eval=evaluation, eval_skipped=None if evaluation else workload.eval_skipped, lr=lr,
            lr_rule=workload.lr_rule(), param_count=n_params,
            trainable_param_count=n_trainable, precision=precision,
            compression=adapter.compression(), adapter=adapter.describe(), workload=workload.describe(),
            data={**data.meta, **(loader.describe() if loader else {})}, per_process_batch=per_rank_batch,
            train_samples=n_train, evals=periodic.evals if periodic else None, snapshot_s=snapshot_s, profile=own,
            straggler=straggler, timed_window=window.result, step_clock=clock.kind,
            skipped_steps_timed=skipped_timed, compile=compile_result, breakdown=parts, dtypes=dtypes,
            peak_memory_cuda_extra=memory_extra or None,
            cuda_math=cuda_math(torch) if str(info.device).startswith("cuda") else None,
            unfinished=list(unfinished))

    if spec.eval and not periodic:
        # The measurement is complete: the parent gets it now, so a crash or a hang in the evaluation (a model's
        # eval-mode branch, a collective there) costs the accuracy only, not the row's samples/s and step times.
        keep(result(None, unfinished=["evaluation"]))
    if fault and fault[1] == "eval":  # after the measurement is kept, as a fault of the evaluation's own would be
        inject(*fault)
    if spec.eval:
        evaluation = (periodic and periodic.last(steps_run)) or evaluate(workload, adapter, model, data, info)
    marks("eval_done")

    parts = None
    if spec.breakdown:
        # The measurement is complete: the parent gets it now, so whatever happens to the profiled steps (a
        # crash, a stall in their split, Ctrl-C) the row keeps its samples/s, step times and memory.
        keep(result(None, unfinished=["breakdown"]))
        # After the evaluation (the profiled steps train on: the evaluation is the model a run without them
        # has) and before the next launch may start (no other launch's start-up shares the cores meanwhile).
        progress.phase("profiling steps", steps_run)

        def profiled_step(phase, _next=iter(range(steps_run, steps_run + _profiled(spec)))):
            step = next(_next)
            # rank 0 moves on every step, so the stall watch sees a long profiled step as progress
            progress.phase(f"profiling step {step - steps_run + 1} of {_profiled(spec)}", steps_run)
            progress.rank_step(step)
            if loader is None:
                x, y = training_batch(data, batch(step), adapter)
            else:
                x, y = loader.next()
                x = batches.apply(adapter.cast_input, x)
            if delay_s:
                compute_profile.spin(delay_s)
            adapter.zero_grad()
            with phase("forward"), adapter.autocast():
                loss = step_loss(workload, model, x, y, adapter)
            with phase("backward"):
                adapter.backward(loss)
            with phase("optimizer"):
                adapter.step()

        adapter.barrier()  # every rank profiles the same steps at once
        parts = breakdown.run(spec.breakdown, profiled_step, info.device, sync,
                              Path(spec.rank_dir) / f"trace-rank{info.rank}.json.gz" if spec.trace else None,
                              say=lambda text: progress.phase(text, steps_run),
                              before_split=lambda: fault and fault[1] == "split" and inject(*fault))
        adapter.barrier()
        if loader is not None:
            loader.close()
        marks("breakdown_done")
        if info.rank == 0:
            progress_file.send_event(Path(spec.rank_dir), "timed_done")

    return result(parts)


def training_batch(data, idx, adapter):
    """(inputs as the wrapped model takes them, targets) of the training samples `idx` held in memory. A dict batch
    is its own targets: the loss reads them from the batch as it was given, before any cast."""
    inputs, targets = pair(batches.take(data.train_x, idx), batches.take(data.train_y, idx))
    return batches.apply(adapter.cast_input, inputs), targets


def step_loss(workload, model, x, y, adapter):
    """The loss this rank back-propagates (Workload.step_loss): a loss over a counted number of items is divided by
    the count's mean over the ranks, which the adapter's own all-reduce gives (one scalar a step)."""
    return workload.step_loss(workload.forward(model, x), y, adapter.all_reduce_mean)


class StepLoader:
    """This rank's slice of every step's global batch, read from the workload's Dataset through a DataLoader with
    `spec.loader_workers` worker processes (the same for every backend; 0: read in the rank itself). Its batches are
    the index lists `Workload.batch_indices` gives, so the samples are those of the in-memory path, in order."""

    def __init__(self, workload, data, spec, info, total: int):
        from torch.utils.data import DataLoader

        n, gb = data.n_train, spec.global_batch
        steps = (workload.batch_indices(s, gb, n, info.data_rank, info.data_world).tolist() for s in range(total))
        self.workers, self.device = spec.loader_workers, info.device
        # Workers forked where the platform can (Linux): a spawned worker would have to import the Dataset's class
        # by module name, which a user's file loaded by path (-w file.py:NAME) does not have; and under mp.spawn's
        # ranks the default start method is spawn.
        forked = "fork" if self.workers and "fork" in multiprocessing.get_all_start_methods() else None
        self.loader = DataLoader(data.train_set, batch_sampler=_Steps(steps, total), num_workers=self.workers,
                                 pin_memory=str(info.device).startswith("cuda"), multiprocessing_context=forked,
                                 worker_init_fn=functools.partial(loader_worker_stacks, spec.rank_dir)
                                 if self.workers else None)
        self.iterator = iter(self.loader)

    def next(self):
        return collated(next(self.iterator), self.device, non_blocking=True)

    def close(self) -> None:
        self.iterator = None  # its workers end with it

    def describe(self) -> dict:
        return {"loader": "torch.utils.data.DataLoader", "loader_workers": self.workers}


def loader_worker_stacks(rank_dir: str, worker_id: int) -> None:
    """In a DataLoader worker, as it starts: SIGUSR1 writes its Python stacks into a file of its own,
    stacks-rank<k>-loader<worker>-pid<pid>.txt, where the stall watch finds it (harness/launching/stalled.py:
    ask_stacks). A forked worker would otherwise write into its rank's file, whose stacks name where the rank is."""
    import faulthandler

    from harness.rank.identity import launcher_rank

    global _LOADER_STACKS
    try:
        _LOADER_STACKS = open(Path(rank_dir) / f"stacks-rank{launcher_rank()}-loader{worker_id}-pid{os.getpid()}.txt",
                              "w")  # noqa: SIM115 - kept open for the worker's life
        faulthandler.register(signal.SIGUSR1, file=_LOADER_STACKS, all_threads=True)
    except OSError:
        pass


_LOADER_STACKS = None
"""The open file a DataLoader worker's faulthandler writes into (`loader_worker_stacks`)."""


class _Steps:
    """A batch sampler over precomputed steps: the DataLoader takes any iterable of index lists with a length."""

    def __init__(self, steps, total: int):
        self.steps, self.total = steps, total

    def __iter__(self):
        return iter(self.steps)

    def __len__(self) -> int:
        return self.total


def _precision(adapter, model) -> str:
    """The row's precision: the adapter's mixed precision, else the dtypes the model's trainable parameters were
    built in ("fp32"; "bf16" for a model built in bf16, which every plain row runs in bf16; "fp32+fp64" for one
    that mixes them, which the row's label said was fp32)."""
    from adapters.dtypes import dtype_names

    precision = adapter.precision().value
    if precision != "fp32":
        return precision
    built = dtype_names([p for p in model.parameters() if p.requires_grad])
    return precision if built == "none" else built


def _dtypes(adapter, model) -> dict | None:
    """The adapter's dtypes (Adapter.dtypes); None, said in the rank's log, where reading them failed: a backend
    whose objects are not what its adapter expects must not cost the row its measurement."""
    try:
        return adapter.dtypes(model)
    except Exception as exc:  # noqa: BLE001 (any failure of a read-only report)
        print(f"compare: could not read the dtypes this backend holds: {type(exc).__name__}: {exc}", file=sys.stderr,
              flush=True)
        return None


def _profiled(spec) -> int:
    """Steps the breakdown runs after the timed window: its profiled steps and the profiler's own warm-up step."""
    return spec.breakdown + 1 if spec.breakdown else 0


def _straggler(spec, workload, info, data, adapter, per_rank_batch, progress) -> dict | None:
    """With `spec.straggler` {"rank", "factor"}: every rank times a few local steps (at once, as in training),
    and the straggler rank's delay per step is (factor - 1) x its own compute time."""
    if not spec.straggler:
        return None
    progress.phase("calibrating the straggler", 0)
    adapter.barrier()
    own = compute_profile.measure(workload, spec, info, data, adapter, [per_rank_batch], 5)
    adapter.barrier()
    compute_s = own["batches"][0]["compute_s"]
    slow = info.rank == spec.straggler["rank"]
    return {"rank": spec.straggler["rank"], "factor": spec.straggler["factor"], "calibrated_compute_s": compute_s,
            "delay_s": (spec.straggler["factor"] - 1.0) * compute_s if slow else 0.0}
