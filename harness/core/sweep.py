"""`compare scale`: the same comparison at several world sizes, and what the performance model is calibrated with.

Runs in: the parent. Every point of the sweep (adapter, world size, repeat) is a normal launch of that adapter at
that world size, through the same Runner, fairness protocol and records as `compare run` (harness/core/comparison.py),
with a `scale` block added to each record. On top of a run it adds:
- a single-process baseline (the plain model, no wrapper, no process group) at the first point's global batch,
  for speed-up against "no data parallelism at all";
- the same threads per rank at every point (a rank is one worker: one core each on a CPU), so that N workers
  really are N times the compute of one;
- a compute profile on every rank after its timed steps (harness/rank/compute_profile.py): forward, backward and
  optimizer time of a plain local copy of the model, which splits each rank's step into compute and waiting (the
  load balance) and, at world size 1, gives the model its compute curve over batch sizes and the gradients' sizes
  and ready times;
- a `compare comm` sweep per world size above 1 of the collectives the backends use (or given comm results):
  the model's latency and bandwidth per collective and backend, kept in `comm_n<N>/` inside the results;
- a compute-contention calibration per adapter and world size above 1 (harness/rank/compute_profile.py: contention): a
  launch of the adapter's ranks that runs no training step, only the plain model's compute, rank 0 alone and then
  every rank at once, in alternating rounds. How much slower the slowest rank computes when all compute together
  is what ranks sharing one machine's memory bandwidth and caches cost, which the world-size-1 compute profile
  cannot see; the model multiplies that profile by it. Kept as `contention` in the point's records.
`compare report DIR` re-renders everything from the records (harness/reports/scale_report.py).
"""

from __future__ import annotations

import dataclasses
import shlex
import shutil
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import adapters
import workloads
from harness.core import comm_bench as commmod
from harness.core import estimate
from harness.ground import outdir
from harness.ground import provenance as envmod
from harness.core import runner as core
from harness.ground.argv import to_argv
from harness.ground.record import records_file
from harness.core.checks import MAX_STEPS, check_common
from harness.core.plans import Plan, RunPlan
from harness.core.requests import DEFAULT_PROFILE, PREDICT_TO, CommRequest, ScaleRequest
from harness.core.rows import Row
from harness.core.workload_checks import check_fits, load_workload
from harness.ground.errors import BadInput
from harness.core.session import Render, Session, SessionError
from harness.model import VERSION as MODEL_VERSION
from harness.model import hardware
from harness.model import costmodel
from harness.model.points import BASELINE

RESULT_FILES = ("records.jsonl", "report.md", "speedup.png", "efficiency.png", "memory.png", "balance.png",
                "prediction.png")
COMM_OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_reduce_coalesced")
"""The collectives the model prices (DDP and Horovod all-reduce; ZeRO reduce-scatters and all-gathers; a backend's
fused all-reduce of several tensors, which prices Horovod's fusion buffer: packing, all-reduce and unpacking as the
framework does them, since commit 115e299)."""
COMM_SIZES = "1K,4K,16K,64K,256K,1M,4M,16M,64M"
"""The sizes of the comm sweep, continued by factors of 4 until one holds the workload's gradients
(`comm_sizes`): a step may all-reduce them in one call (ZeRO's bucket, Horovod's 128 MB fusion buffer)."""
COMM_ITERS = 200
"""Timed iterations per cell at most (harness/shared/collectives.py: iterations(), 16 at 64 MB): the model prices a
collective at its mean time, and on shared cores a few calls in a hundred stall for tens of milliseconds, so 20
iterations (the sweep's size before 2026-11-24) moved a small message's mean by whole milliseconds between
sweeps."""
COMM_GAP_S = 1e-3
"""Busy work on every rank before each timed call of the comm sweep (`compare comm --gap`), untimed. A training
step calls its collectives after compute, never back to back; on this VM a gloo all-reduce of digits' gradients
took a mean 1.5 ms back to back and 1.9 ms after 1 ms of busy work, as long as inside a step
(harness/rank/comm_cells.py).
Sweeps made before commit 49ac1de timed the calls back to back (their records have no gap_s)."""
CONTENTION_ROUNDS = 4
CONTENTION_S = 1.0
"""Rounds of the compute-contention calibration, each rank 0 alone and every rank together (the order swapped
every round), each phase a compute profile of at least --profile-steps steps and CONTENTION_S seconds (a
sub-millisecond step needs hundreds for a median that holds); the calibration is the median of the rounds'
together/alone ratios, each from two adjacent phases."""
SCALINGS = ("strong", "weak")


@dataclass
class ScalePlan(Plan):
    points: list[RunPlan] = field(default_factory=list)
    """One plan per world size, in increasing order."""
    baseline: RunPlan | None = None
    world_sizes: list[int] = field(default_factory=list)
    scaling: str = "strong"
    threads: int = 1
    """Threads per rank at every point."""
    straggler: dict[str, Any] | None = None
    comm: list[tuple[int, Any]] = field(default_factory=list)
    """(world size, CommPlan to run or a Path of given comm results) for the model's calibration."""
    profiles: list[str] = field(default_factory=list)
    predict_to: int = 1024

    @property
    def labels(self) -> list[str]:
        return [r.label for r in self.points[0].rows]


MAX_STRAGGLER = 100.0
"""The slowest straggler a sweep takes: the rank spins (factor - 1) x its compute before every step, so a larger
factor (or inf) would only hold the point until its --timeout."""


def parse_straggler(text: str | None, world_sizes: list[int]) -> dict[str, Any] | None:
    """"1:2.0" -> {"rank": 1, "factor": 2.0}."""
    if text is None:
        return None
    rank, sep, factor = text.partition(":")
    try:
        if not sep:
            raise ValueError
        r, f = int(rank), float(factor)
    except ValueError:
        raise BadInput(f"--straggler '{text}' is not RANK:FACTOR, e.g. 1:2.0 (rank 1 computes twice as slowly)") \
            from None
    if r < 0:
        raise BadInput(f"straggler rank must be 0 or more, got {r}")
    if not 1.0 <= f <= MAX_STRAGGLER:
        raise BadInput(f"straggler factor must be from 1 to {MAX_STRAGGLER:g} (how many times slower the rank "
                       f"computes), got {f:g}")
    if r >= max(world_sizes):
        raise BadInput(f"straggler rank {r} does not exist at any world size of the sweep (the largest is "
                       f"{max(world_sizes)}, ranks 0-{max(world_sizes) - 1})")
    return {"rank": r, "factor": f}


def plan(req: ScaleRequest) -> ScalePlan:
    """Check the request and plan every point, writing nothing (BadInput otherwise)."""
    cores = envmod.usable_cores()
    sizes = req.world_sizes or list(range(1, cores + 1))
    if req.world_sizes is None and req.device == "cuda":
        sizes = [1]
    first_req = req.point(world_size=min(sizes))
    check_common(first_req, largest_world=max(sizes))
    if req.scaling not in SCALINGS:
        raise BadInput(f"unknown scaling '{req.scaling}'; valid choices: {', '.join(SCALINGS)}")
    straggler = parse_straggler(req.straggler, sizes)
    if not req.model:  # as --comm: options of the model that --no-model would leave without a word
        for name, given, what in (("--profile", req.profiles, "the hardware the model extrapolates to"),
                                  ("--predict-to", req.predict_to, "the largest world size the model predicts")):
            if given is not None:
                raise BadInput(f"{name} sets {what}, which --no-model skips; leave one out")
    profiles = req.profiles or [DEFAULT_PROFILE]
    predict_to = PREDICT_TO if req.predict_to is None else req.predict_to
    for name in profiles:
        problem = hardware.profile_problem(name)  # a file that does not load fails now, not after the sweep
        if problem:
            raise BadInput(problem)
    if predict_to < max(sizes):
        raise BadInput(f"--predict-to {predict_to} is below the largest world size measured ({max(sizes)})")
    lo, hi = costmodel.PREDICT_TO
    if not lo <= predict_to <= hi:
        raise BadInput(f"--predict-to must be from {lo} to {hi:,} (the extrapolation gives 8, 16, 64, 256, ... "
                       f"workers up to it), got {predict_to}")
    if req.profile_steps < 3:
        raise BadInput(f"--profile-steps must be at least 3, got {req.profile_steps}")
    if req.profile_steps > MAX_STEPS:  # as --steps: every step's time is kept, and 1e11 were taken without a word
        raise BadInput(f"--profile-steps must be at most {MAX_STEPS:,} steps, got {req.profile_steps}")
    workload = load_workload(first_req)
    check_fits(workload, first_req, max(sizes))
    batch = workload.global_batch if req.global_batch is None else req.global_batch
    if batch < 1:
        raise BadInput(f"--global-batch must be at least 1, got {batch}")
    # One worker = one rank with the same threads at every point, so N workers are N times one worker's compute.
    fitting = [n for n in sizes if n <= cores] or [1]
    threads = req.threads or max(1, cores // max(fitting))

    points = []
    for n in sizes:
        gb = batch if req.scaling == "strong" else batch * n
        sub = req.point(world_size=n, global_batch=gb, threads=threads, out=None)
        if req.scaling == "weak" and gb > workload.train_samples(gb):
            raise BadInput(f"weak scaling at world size {n} needs a global batch of {batch} x {n} = {gb}, more than "
                           f"workload {req.workload}'s training set ({workload.train_samples(gb)} samples); use "
                           f"smaller world sizes or a smaller --global-batch")
        p = core.plan_rows(sub, f"--world-sizes up to {cores}")
        for row in p.runnable:
            why = row.adapter.scale_limit(req.device, n)
            if why:
                if req.strict and req.adapters is not None:
                    raise BadInput(f"adapter '{row.label}' cannot be scaled here: {why}")
                row.adapter, row.reason = None, why
        per_rank = gb // n
        p.tag = f" n={n}"
        p.extra = {"oversubscribed": p.oversubscribed,
                   "scale": {"scaling": req.scaling, "world_sizes": sizes, "point": n, "per_rank_batch": per_rank,
                             "baseline": False}}
        p.spec_extra = {**p.spec_extra,  # --breakdown's, if asked
                        "profile": {"steps": req.profile_steps,
                                    "curve": _curve(batch if req.scaling == "strong" else per_rank, n),
                                    "flops": n == sizes[0]},
                        "straggler": straggler if straggler and straggler["rank"] < n else {}}
        points.append(p)
    first = points[0]
    if sizes[0] == 1:
        base = dataclasses.replace(first)
    else:
        base = core.plan_rows(req.point(world_size=1, global_batch=first.global_batch // sizes[0]
                                        if req.scaling == "weak" else first.global_batch, threads=threads, out=None))
    ref_cls = adapters.get("reference")
    base.rows = [Row(BASELINE, "reference", ref_cls, ref_cls({}, req.device))]
    base.tag = " (baseline)"
    base.oversubscribed = False
    base.extra = {"oversubscribed": False,
                  "scale": {"scaling": req.scaling, "world_sizes": sizes, "point": 1,
                            "per_rank_batch": base.global_batch, "baseline": True}}
    base.spec_extra = {"profile": {"steps": req.profile_steps,
                                   "curve": _curve(base.global_batch, 1), "flops": True}, "straggler": {}}

    out = req.out or req.results_dir / (f"scale_{workloads.slug(req.workload)}_{envmod.hardware_slug(req.device)}_"
                                        f"{datetime.now().strftime('%Y%m%d-%H%M%S')}")
    outdir.check(out, req.force, RESULT_FILES)
    launches = sum(len(p.rows) for p in points) * req.repeats + 1
    outdir.check_room(out, outdir.least_written(launches, first.steps + first.warmup, req.plots),
                      f"records, report, plots and logs of {launches} launch(es)")
    comm: list[tuple[int, Any]] = []
    if req.comm_dirs and not req.model:
        raise BadInput("--comm gives results to calibrate the model with, which --no-model skips; leave one out")
    if req.model:
        given = _read_comm_dirs(req.comm_dirs)
        if req.comm_dirs:
            for n, d in given.items():
                if n not in sizes:
                    raise BadInput(f"--comm {d}: world size {n}, which is not one of --world-sizes "
                                   f"{','.join(map(str, sizes))}; give comm results at a world size the sweep "
                                   f"measures")
        backends = sorted({r.adapter.comm_schedule().comm_backend for p in points for r in p.runnable
                           if r.adapter.comm_schedule() and r.adapter.processes(p.request.world_size) > 1})
        if req.comm_dirs and backends:
            missing = [n for n in sizes if n > 1 and n not in given]
            if missing:
                raise BadInput(f"--comm gives no results at world size {', '.join(map(str, missing))}; add a "
                               f"`compare comm -n {missing[0]}` run, or leave --comm out to measure them here")
            from harness.ground.record import read_results

            for n, d in given.items():
                have = {r["backend"] for r in read_results(d, ("comm",), "--comm")
                        if r.get("op") and r.get("status") == "ok"}
                lacking = [b for b in backends if b not in have]
                if lacking:
                    raise BadInput(f"--comm {d}: no timings of backend {', '.join(lacking)}, whose collectives "
                                   f"the sweep's adapters use; add it (`compare comm --backends "
                                   f"{','.join(backends)} -n {n}`), or leave --comm out to measure them here")
        for n in sizes:
            if n == 1:
                continue
            if n in given:
                comm.append((n, given[n]))
            elif backends and not req.comm_dirs:
                creq = CommRequest(backends=backends, ops=list(COMM_OPS), sizes=comm_sizes(workload), world_size=n,
                                   device=req.device, dtype="fp32", max_iters=COMM_ITERS, gap_s=COMM_GAP_S,
                                   threads=threads,
                                   timeout_s=req.timeout_s, out=out / f"comm_n{n}", force=True, strict=False,
                                   oversubscribe=req.oversubscribe, bind_cores=req.bind_cores)
                # its records carry the `compare comm` line that measures the same cells again on their own
                creq.command = shlex.join(["compare", "comm", *to_argv(creq)])
                comm.append((n, commmod.plan(creq)))
    return ScalePlan(req, out, first.rows, oversubscribed=any(p.oversubscribed for p in points), points=points,
                     baseline=base, world_sizes=sizes, scaling=req.scaling, threads=threads, straggler=straggler,
                     comm=comm, profiles=profiles, predict_to=predict_to)


def comm_sizes(workload) -> str:
    """COMM_SIZES, continued by factors of 4 up to the first size that holds the workload's fp32 gradients. Before
    commit 115e299 the sweep stopped at 64 MB and the fitted line priced anything larger; on this VM it under-priced a
    144 MiB all-reduce by 45% (82 ms against 149 ms measured)."""
    sizes = COMM_SIZES.split(",")
    grads = gradient_bytes(workload)
    size = 64 * 2**20
    while size < grads:
        size *= 4
        sizes.append(f"{size // 2**20}M")
    return ",".join(sizes)


def gradient_bytes(workload) -> int:
    """Bytes of the workload's trainable parameters in fp32, counted on the meta device (nothing allocated)."""
    import torch

    try:
        with torch.device("meta"):
            model = workload.new_model()
        return 4 * sum(p.numel() for p in model.parameters() if p.requires_grad)
    except Exception:  # a model that cannot be built on the meta device: the sweep keeps its usual sizes
        return 0


def _curve(batch: int, n: int) -> list[int]:
    """Per-rank batch sizes the compute profile covers: at the first world size, the whole strong-scaling range
    (batch, batch/2, ..., 1), so the model can price a smaller per-rank batch; elsewhere only the rank's own."""
    if n != 1:
        return []
    out, b = [], batch
    while b >= 1:
        out.append(b)
        b //= 2
    return out


def _read_comm_dirs(dirs: list[Path]) -> dict[int, Path]:
    """Given `compare comm` results by world size (BadInput when a directory is not one)."""
    from harness.ground.record import read_results

    found: dict[int, Path] = {}
    for d in dirs:
        recs = read_results(d, ("comm",), "--comm")
        if recs[0].get("dtype", "fp32") != "fp32":
            raise BadInput(f"--comm {d}: timed in {recs[0]['dtype']}, but the model prices fp32 gradients; give "
                           f"the results of a `compare comm --dtype fp32` run")
        if not any(r.get("op") and r.get("status") == "ok" for r in recs):
            raise BadInput(f"--comm {d}: no cell of it ran ({', '.join(sorted({r['status'] for r in recs}))}); "
                           f"give a finished `compare comm` run")
        n = recs[0]["world_size"]
        if n in found:
            raise BadInput(f"--comm {d}: a second comm result for world size {n} (also {found[n]})")
        found[n] = d
    return found


def execute(p: ScalePlan, ui, comm_ui=None, started: float | None = None, render: Render | None = None
            ) -> tuple[list[dict[str, Any]], bool]:
    """Run every point (interleaved: each repeat runs the baseline and every world size), then the model's comm
    sweeps; write records after every launch and the report at the end (`render`, the command's; None: records
    alone, here and in each comm sweep). Returns (records, interrupted)."""
    req = p.request
    run_info = core.run_header(p, "scale", [BASELINE] + p.labels, started)
    run_info["scale_sweep"] = {"scaling": p.scaling, "world_sizes": p.world_sizes, "threads_per_rank": p.threads,
                               "straggler": p.straggler, "profiles": p.profiles, "predict_to": p.predict_to,
                               "comm_dirs": [f"comm_n{n}" for n, _ in p.comm], "model": p.request.model,
                               "model_version": MODEL_VERSION}
    with Session(p.out, RESULT_FILES) as session:
        ui.start(p)
        runner = core.Runner(session, ui, run_info)

        def first_started():
            run_info["env"] = envmod.collect_safely(req.device)
            session.save([core.plain_record(run_info, point, row, repeat, "unavailable", row.reason)
                          for point in p.points for row in point.unavailable for repeat in range(req.repeats)])

        jobs = [(plan, row, repeat) for repeat in range(req.repeats)
                for plan in [p.baseline] + p.points for row in plan.runnable]
        runner.forecast = estimate.Forecast([(plan, row.label) for plan, row, _ in jobs],
                                            core.references([p.baseline] + p.points))
        ui.estimate(runner.forecast.line() + " (then the comm sweep and the calibration)")
        stopped = runner.run(jobs, first_started)
        if stopped:
            runner.close_interrupted(stopped, jobs, req.device)
        else:
            try:
                stopped = _calibrate(p, comm_ui, render) or _calibrate_contention(p, session, comm_ui)
            except SessionError as exc:  # a full disk in the comm sweep: say what the sweep's own results hold
                done = sum(r["status"] == "ok" for r in session.records)
                raise SessionError(f"{exc}; the sweep stopped there: {session.records_path} holds its {done} "
                                   f"finished point launch(es), without the rest of the model's calibration and "
                                   f"without a report (`compare report {p.out}` makes one once there is room)") \
                    from None
            if stopped:
                session.records = [{**r, "run_interrupted": stopped} for r in session.records]
                session.save()
            elif req.model:
                _record_prediction(p, session)
        session.finish(render)
    return session.records, stopped is not None


def _record_prediction(p: ScalePlan, session: Session) -> None:
    """The model's prediction of the sweep, made once its points and calibrations are measured and kept in its first
    record (harness/model/predicted.py), so that its report renders the prediction as it was made, whatever the
    model or the hardware profiles become."""
    from harness.model import predicted
    from harness.model.calibration import comm_records

    problems: list[str] = []
    try:
        made = predicted.made(session.records, comm_records(p.out, problems), problems)
    except Exception:  # noqa: BLE001 - nothing kept: the report tries again, and says why the model failed
        return
    first = session.records[0]
    session.records[0] = {**first, "scale_sweep": {**first["scale_sweep"], "prediction": made}}


def _calibrate(p: ScalePlan, comm_ui, render: Render | None) -> str | None:
    """The model's comm sweeps (each a `compare comm` into comm_n<N>/), or a copy of the given results there."""
    for n, what in p.comm:
        dest = p.out / f"comm_n{n}"
        if isinstance(what, Path):
            dest.mkdir(exist_ok=True)
            source = records_file(what)
            shutil.copy(source, dest / source.name)
            continue
        if comm_ui:
            comm_ui(f"calibrating the model: collectives at world size {n} ({', '.join(COMM_OPS)})")
        _, interrupted = commmod.execute(what, comm_ui, render)
        if interrupted:
            return f"during the comm sweep at world size {n}"
    return None


def parts_summary(per_rank: list[dict[str, Any]], together_s: list[float]) -> dict[str, Any]:
    """The ranks' parts check (harness/rank/compute_profile.py: parts) per round, each figure the slowest rank's mean:
    the step (compute then the all-reduce) against the parts as the model takes them, measured apart: the compute
    of every rank at once with no collective between steps (`together_s`, the same launch's round) + the same
    all-reduce timed back to back. `compute_in_step_s`: the compute as timed inside the step loop."""
    import statistics

    rounds = min(len(per_rank[0]["rounds"]), len(together_s))
    out: dict[str, Any] = {"bytes": per_rank[0]["bytes"], "calls": per_rank[0]["calls"],
                           "gap_s": per_rank[0].get("gap_s", 0.0)}
    for key in ("collective_s", "step_s"):
        out[key] = [max(r["rounds"][i][key] for r in per_rank) for i in range(rounds)]
    out["compute_in_step_s"] = [max(r["rounds"][i]["compute_s"] for r in per_rank) for i in range(rounds)]
    out["compute_s"] = list(together_s[:rounds])
    out["excess_s"] = [s - c - a for s, c, a in zip(out["step_s"], out["compute_s"], out["collective_s"])]
    out["excess_share"] = [e / s for e, s in zip(out["excess_s"], out["step_s"])]
    out["median_excess_s"] = statistics.median(out["excess_s"])
    out["median_excess_share"] = statistics.median(out["excess_share"])
    return out


def _calibrate_contention(p: ScalePlan, session, ui) -> str | None:
    """One contention launch per (adapter row, world size above 1 with several processes); its result goes into
    every record of that row at that world size as `contention` (harness/rank/compute_profile.py: contention)."""
    import statistics
    from dataclasses import asdict

    from harness.launching.launch import run_launch

    if not p.request.model:
        return None
    for point in p.points:
        n = point.request.world_size
        for row in point.runnable:
            adapter = row.adapter
            procs = adapter.processes(n)
            if procs < 2:
                continue
            if ui:
                ui(f"calibrating the model: compute contention of {row.label} at world size {n} "
                   f"({CONTENTION_ROUNDS} rounds of rank 0 alone and all {procs} ranks at once; then the step's parts)")
            name = f"contention-{core.file_slug(row.label)}-n{n}"
            spec = core.make_spec(point, adapter.name, session.scratch / name,
                                  processes=procs, steps=0, warmup=0, equiv=0, knobs=asdict(adapter.knobs),
                                  do_eval=False, extra={"mode": "contention",
                                                        "profile": {"steps": p.request.profile_steps,
                                                                    "rounds": CONTENTION_ROUNDS,
                                                                    "min_s": CONTENTION_S,
                                                                    "gap_s": COMM_GAP_S}},
                                  topology=point.topology)
            spec.fault = ""  # injected faults (spec or COMPARE_FAULT) are for the training and comm launches
            outcome = run_launch(adapter, spec, p.request.timeout_s, stall_s=p.request.stall_s)
            session.keep_log(outcome, f"{name}.log")
            result: dict[str, Any] = {"status": outcome.status, "reason": outcome.reason,
                                      "rounds": CONTENTION_ROUNDS, "min_s_per_phase": CONTENTION_S,
                                      "launcher_argv": outcome.argv,
                                      "wall_time_s": outcome.wall_time_s, "load_avg_before": outcome.load_avg_before}
            if outcome.concurrent_runs:
                result["concurrent_compare_runs"] = outcome.concurrent_runs
            if outcome.shutdown_error:  # measured in full, then the launch failed or hung while ending
                result["shutdown_error"] = outcome.shutdown_error
            ranks = sorted(outcome.ranks, key=lambda r: r.rank)
            if outcome.status == "ok" and ranks and ranks[0].alone:
                # Mean compute per step: the model predicts the mean step, and ranks that outnumber the cores are
                # time-sliced in whole scheduler ticks, which a sub-millisecond step's median never shows.
                alone = [b["mean_s"] for b in ranks[0].alone]
                together = [max(r.together[i]["mean_s"] for r in ranks) for i in range(len(alone))]
                ratios = [t / a for t, a in zip(together, alone)]
                result.update(per_rank_batch=ranks[0].per_process_batch, processes=len(ranks),
                              alone_s=alone, together_s=together,
                              together_per_rank_s=[[b["mean_s"] for b in r.together] for r in ranks],
                              round_ratios=ratios, ratio=statistics.median(ratios))
                if all(r.parts for r in ranks):
                    result["parts"] = parts_summary([r.parts for r in ranks], together)
            elif outcome.status == "ok":
                result.update(status="failed", reason="the ranks wrote no contention profile")
            if ui:
                ui(f"{row.label} n={n}: {result['status']} " + (f"compute {result['ratio']:.2f}x alone"
                                                                 if "ratio" in result else result["reason"])
                   + (f"; a step {result['parts']['median_excess_share']:+.0%} over compute + all-reduce"
                      if "parts" in result else "")
                   + (f" (the launch then ended badly {result['shutdown_error']})" if "shutdown_error" in result
                      else ""))
            for rec in session.records:
                if rec.get("label") == row.label and (rec.get("scale") or {}).get("point") == n \
                        and not rec["scale"].get("baseline"):
                    rec["contention"] = result
            session.save()
            if outcome.interrupted:
                return f"during the compute-contention calibration of {row.label} at world size {n}"
    return None
