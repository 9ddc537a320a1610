"""A record assembled from what a launch left: its outcome, every rank's result file, the reference's parameters.

Runs in: the parent (harness/core/runner.py, once per launch). What a record holds, how it is checked and read is
harness/ground/record.py's; this module fills one in: the row's status and reason, its timings, memory, learning,
noise, load balance, time to target and where the launch's time went.
"""

from __future__ import annotations

import math
import os
import statistics
from pathlib import Path
from typing import Any

from adapters.base import EVERY_PARAMETER_FIX, NO_GRAD_CHECKPOINT
from harness.core import normalisation
from harness.core.model_check import DIFFERENT_BUILDS, RANDOM_LOSS, RESEEDED
from harness.ground.record import LOAD_BALANCE_METHOD, SCHEMA_VERSION
from harness.ground.stats import slowest_rank_steps, step_stats, worst
from harness.launching import hosts
from harness.model import hardware
from harness.shared import procstat
from harness.shared import step_parts
from harness.shared.rank_result import TrainResult
from harness.shared.text import listed

NOISE_STEAL = 0.05
"""A launch whose timed window lost this share of the machine's CPU time to steal (the hypervisor) is flagged."""
NOISE_OTHER = 0.10
"""A launch during whose timed window processes other than its ranks used this share of the CPUs is flagged."""
NOISE_MIN_TICKS = 50
"""/proc/stat counts in clock ticks (10 ms): from a window of this many ticks (all CPUs together) a share is read as
it is."""
NOISE_FEWEST_TICKS = 10
"""A shorter window (but at least this long) is flagged only where its share, less NOISE_SLACK_TICKS of it, passes
the bar; a window shorter still is too short to check, and the record says so (`unchecked`)."""
NOISE_SLACK_TICKS = 3
"""Ticks a share read over a short window may be off by (the counters' rounding at both ends, the launcher's own)."""
FINAL_LOSS_WINDOW = 10

def base_record(*, run: dict[str, Any], adapter: str, label: str, summary: str, launcher: str, workload: str,
                world_size: int, repeat: int, status: str, reason: str = "") -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, **run, "adapter": adapter, "label": label, "summary": summary,
            "launcher": launcher, "workload": workload, "world_size": world_size, "repeat": repeat,
            "status": status, "reason": reason}


def final_loss(curve: list[float], uncounted=()) -> tuple[float | None, int]:
    """(the mean of the last FINAL_LOSS_WINDOW steps' loss, how many it averaged), the steps in `uncounted` left
    out: a global batch in which a counted loss counted nothing has a loss of 0 by definition, no training loss (a
    final loss had averaged such a 0 in)."""
    left_out = set(uncounted)
    window = [v for i, v in enumerate(curve) if i not in left_out][-FINAL_LOSS_WINDOW:]
    return (sum(window) / len(window) if window else None), len(window)


def snapshot(params_path: Path, reference: dict | None) -> dict | None:
    """A row's parameter snapshot, by the reference's names (None without both)."""
    if reference is None or not params_path.exists():
        return None
    import torch

    params = torch.load(params_path)
    if set(params) != set(reference):
        raise ValueError(f"parameter names differ from the reference: {sorted(set(params) ^ set(reference))[:4]}")
    return params


def param_diffs(params: Path | dict | None, reference: dict | None) -> dict[str, float] | None:
    """Each parameter's largest absolute difference from the reference's, by name (None without both): of a
    snapshot, or of the file that holds it."""
    if isinstance(params, Path):
        params = snapshot(params, reference)
    if params is None or reference is None:
        return None
    return {n: float((params[n] - reference[n]).abs().max()) if params[n].numel() else 0.0 for n in params}


def gradient_at(params: dict, reference: dict, peaks: dict, tolerance: float) -> dict[str, Any]:
    """{"at": {name: the reference's largest gradient, over its steps, among the elements of that parameter that
    differ most (NaN, or by more than `tolerance` and half its largest difference)}, "median": the median element's
    largest gradient over the model}: for a failed check, whether what differs had a gradient near zero (`peaks`:
    Strategy.gradient_peaks)."""
    import torch

    at = {}
    for n, peak in peaks.items():
        if n not in params or n not in reference or params[n].shape != peak.shape:
            continue
        d = (params[n] - reference[n]).abs()
        # the elements that differ most (within half the largest difference): one that differs as a consequence of
        # them, by less, would make a near-zero gradient's noise look like a real difference
        differ = d.isnan() if d.isnan().any() else (d > tolerance) & (d >= 0.5 * d.max())
        if differ.any():
            at[n] = float(peak[differ].max())
    every = torch.cat([p.reshape(-1) for p in peaks.values()]) if peaks else torch.zeros(0)
    if every.numel() > 1 << 24:  # a median of at most 16 M of them, evenly spaced
        every = every[::every.numel() // (1 << 24) + 1]
    return {"at": at, "median": float(every.median()) if every.numel() else None}


def max_param_diff(diffs: dict[str, float] | None) -> float | None:
    """The largest of param_diffs' differences (None: there was nothing to compare)."""
    # NaN anywhere (a diverged parameter, on either side) makes the whole difference NaN, which fails every
    # tolerance (stats.worst; max() would drop a NaN that is not first and pass the check).
    return None if diffs is None else worst(diffs.values())


LARGEST_DIFFS = 3
"""Parameters a failed equivalence check names: the ones that differ most, above the tolerance."""


def largest_diffs(diffs: dict[str, float], tolerance: float, gradients: dict | None) -> list[dict[str, Any]]:
    """The parameters that differ most from the reference (above `tolerance`, NaN first), each with the
    reference's steps (from 0) that left it without a gradient while it trained, and those in which it was frozen
    (`gradients`: ReferenceAdapter's record, {"no_gradient": ..., "frozen": ...}; None where the reference did not
    say)."""
    import math

    at, median = (gradients or {}).get("at") or {}, (gradients or {}).get("median")
    above = [(n, d) for n, d in diffs.items() if math.isnan(d) or d > tolerance]
    above.sort(key=lambda nd: (not math.isnan(nd[1]), -nd[1] if not math.isnan(nd[1]) else 0.0))
    out = []
    for n, d in above[:LARGEST_DIFFS]:
        entry = {"parameter": n, "diff": d, "steps_without_gradient":
                 None if gradients is None else list(gradients["no_gradient"].get(n, []))}
        if gradients is not None and gradients["frozen"].get(n):
            entry["steps_frozen"] = list(gradients["frozen"][n])
        if median and n in at:  # the reference's largest gradient where it differs, and that over the model's median
            entry["gradient_peak"], entry["gradient_ratio"] = at[n], at[n] / median
        out.append(entry)
    return out


NEAR_ZERO = 1e-4
"""An element's largest gradient over the reference's steps, as a share of the model's median element's, below
which an adaptive optimizer's step of it is summation-order noise: fp32 sums carry a relative error of about 1e-7 of
their terms, which is then a sizeable part of such a gradient, and Adam divides that part by the gradient's own size."""


def near_zero(largest: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The parameters among `largest` whose gradient was near zero in the reference (NEAR_ZERO), and those whose was
    of the model's usual size; neither where the reference did not record its gradients."""
    if not largest or any(p.get("gradient_ratio") is None for p in largest):
        return [], []
    return ([p for p in largest if p["gradient_ratio"] < NEAR_ZERO],
            [p for p in largest if not p["gradient_ratio"] < NEAR_ZERO])


def gradient_text(items: list[dict[str, Any]]) -> str:
    """"largest gradient in the steps compared where they differ most in_proj_bias 3.1e-09, against the model's median
    element's 2.6e-03: 1.2e-06 of it"."""
    p0 = items[0]
    median = p0["gradient_peak"] / p0["gradient_ratio"] if p0["gradient_ratio"] else 0.0
    each = ", ".join(f"{p['parameter']} {p['gradient_peak']:.1e}" for p in items)
    shares = " and ".join(f"{p['gradient_ratio']:.1e}" for p in items)
    return (f"largest gradient in the steps compared where they differ most {each}, against the model's median "
            f"element's {median:.1e}: {shares} of it")


ADAPTIVE_TOLERANCE = 1e-4
"""The equivalence tolerance the built-in transformer workloads (AdamW) use, suggested to a model of the kind."""
ADAPTIVE = ("Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad", "Adadelta", "Adafactor", "SparseAdam")
"""Optimizers that divide each gradient by its running magnitude: a gradient near zero moves its parameter by about
the learning rate, summation-order noise too."""


def step_list(steps: list[int]) -> str:
    """Steps counted from 0, in words counted from 1, a run of three or more as a range: "steps 1, 3, 5–8"."""
    runs: list[list[int]] = []
    for s in sorted(steps):
        if runs and s == runs[-1][-1] + 1:
            runs[-1].append(s)
        else:
            runs.append([s])
    parts = [f"{r[0] + 1}–{r[-1] + 1}" if len(r) > 2 else ", ".join(str(s + 1) for s in r) for r in runs]
    return f"step{'s' if len(steps) > 1 else ''} {', '.join(parts)}"


NOT_EXPLAINED = "so no parameter left without one explains the difference"
"""How a ✗'s reason ends where the parameters that differ most had a gradient in every step and nothing else was
named: the check's other clues (assemble._code_clues) are then said after it."""


def why_differs(largest: list[dict[str, Any]], steps: int, label: str, missing: str | None,
                stateful: str | None, note: str | None = None, optimizer: str | None = None,
                tolerance: float | None = None, lr: float | None = None, edited: str | None = None) -> str | None:
    """Why a row's parameters differ from the reference's, from the parameters that differ most: those a step
    left without a gradient, and what the backend does with such a parameter (`missing`: Adapter.missing_gradient),
    or that they had one every step (then the row's own note, `note`, where its adapter wrote one); None without
    the reference's record."""
    if not largest or any(p["steps_without_gradient"] is None for p in largest):
        return None

    def named(items):
        return ", ".join(f"{p['parameter']} by {p['diff']:.1e}" for p in items)

    unfrozen = [p for p in largest if p.get("steps_frozen")]
    always = [p for p in unfrozen if len(p["steps_frozen"]) >= steps]
    if always and len(always) == len(unfrozen):
        # frozen in every step compared: no optimizer moved them, so code of the user's did (an EMA teacher)
        text = (f"the parameters that differ most, {named(always)}, were frozen (requires_grad False) in every one of "
                f"the {steps} steps compared, so no optimizer step moved them: code of yours changed them (an EMA "
                f"teacher updated from the online network, an in-place write), which {label} did not see as the "
                f"single process did"
                + (f"; on {label}: {edited}" if edited else "; fix: make that change in the forward, after the "
                   "networks' forward"))
        rest = [p for p in largest if not p.get("steps_frozen")]
        if rest:
            text += f"; the next, {named(rest)}, {'were' if len(rest) > 1 else 'was'} never frozen"
        return text
    late = [p for p in unfrozen if 0 not in p["steps_frozen"]]
    if unfrozen and len(late) == len(unfrozen):  # trainable when the backend wrapped the model, frozen later
        frozen = sorted({s for p in late for s in p["steps_frozen"]})
        text = (f"the parameters that differ most, {named(late)}, trained first and were frozen (requires_grad "
                f"False) from {step_list(frozen)} of the {steps} compared, where the single process's optimizer "
                f"leaves such a parameter alone: it has no gradient then; ")
        text += (f"{label}: {missing}; fix: keep requires_grad as it was built and hold the parameter still with a "
                 f"learning rate of 0 (a parameter group, chosen by a key of its own) from then" if missing else
                 f"{label} leaves it without a gradient too, so that does not explain the difference")
        rest = [p for p in largest if not p.get("steps_frozen")]
        if rest:
            text += f"; the next, {named(rest)}, {'were' if len(rest) > 1 else 'was'} never frozen"
        return text
    if unfrozen:
        frozen = sorted({s for p in unfrozen for s in p["steps_frozen"]})
        text = (f"the parameters that differ most, {named(unfrozen)}, were frozen (requires_grad False) in "
                f"step{'s' if len(frozen) > 1 else ''} {', '.join(str(s + 1) for s in frozen)} of the {steps} "
                f"compared and trained in the others: a backend that sets up its gradient reduction when it wraps "
                f"the model (hooks or buckets for the parameters that require a gradient then) leaves out a "
                f"parameter frozen then and never averages its gradient across ranks when it trains, so each rank "
                f"steps it on its own share of the batch; fix: keep requires_grad as it was built and hold the "
                f"parameter still with a learning rate of 0 (a parameter group) until it is to train")
        rest = [p for p in largest if not p.get("steps_frozen")]
        if rest:
            text += f"; the next, {named(rest)}, {'were' if len(rest) > 1 else 'was'} never frozen"
        return text
    without = [p for p in largest if p["steps_without_gradient"]]
    every = [p for p in largest if not p["steps_without_gradient"]]
    if not without:
        text = (f"the parameters that differ most, {named(every)}, had a gradient in every one of the {steps} steps "
                f"compared, {NOT_EXPLAINED}")
        if note:
            text += f"; {label}'s own note: {note}"
        if stateful:
            text += (f" (the model's forward is stateful, {stateful}, but deterministic: every backend calls it once "
                     f"a step, as the single process does)")
        if optimizer in ADAPTIVE and not note:  # a cause the backend names itself is not summation-order noise
            text += (f"; the optimizer, {optimizer}, divides each gradient by its running magnitude, so a parameter "
                     f"whose gradient is near zero (attention's key bias, which the softmax ignores) moves by about "
                     f"the learning rate on summation-order noise alone, and a backend that sums the batch in "
                     f"another order differs by that much")
            near, sized = near_zero(every)
            if sized and not near:  # the reference's gradients say it: not such parameters
                return text + (f"; these are not such parameters ({gradient_text(sized)}): where they differ most "
                               f"their gradients are not near zero (at least {NEAR_ZERO:g} of the median element's), "
                               f"and summation-order noise does not turn such a gradient into a step of the learning "
                               f"rate, so it does not explain the difference")
            such = ("they are such parameters (" + gradient_text(near) + ")" if near and not sized else
                    f"{', '.join(p['parameter'] for p in near)} {'are' if len(near) > 1 else 'is'} such "
                    f"({gradient_text(near)}), {', '.join(p['parameter'] for p in sized)} not "
                    f"({gradient_text(sized)})" if near else None)
            reach = f" (the learning rate {lr:g} a step, up to {lr * steps:.1e} in {steps} steps)" if lr else ""
            sgd = ("check the backend with the same model under SGD, which does not amplify that noise (where the "
                   "backend computes what one process does, its rows then match)")
            tolerable = all(p["diff"] <= ADAPTIVE_TOLERANCE for p in every)
            if (tolerance is None or tolerance < ADAPTIVE_TOLERANCE) and (such is None or tolerable):
                text += (f": {such}; raise" if such else ": if the largest differences are such parameters, raise")
                text += (" the tolerance (equiv_tolerance=1e-4 in @workload, as the built-in transformer workloads do"
                         + (f"; {tolerance:g} now)" if tolerance is not None else ")"))
            elif tolerance is None or tolerance < ADAPTIVE_TOLERANCE:  # such, and beyond 1e-4: out of its reach
                text += (f": {such}; they differ by more than a tolerance of {ADAPTIVE_TOLERANCE:g} takes, and such "
                         f"noise reaches about the learning rate a step{reach}, beyond what a tolerance can take and "
                         f"still catch a real difference: {sgd}")
            else:  # raised already: noise of about the learning rate a step is out of a tolerance's reach
                text += (f": the tolerance is {tolerance:g} already, and such noise reaches about the learning rate "
                         f"a step{reach}, beyond what a tolerance can take and still catch a real difference; "
                         + (f"{such}: {sgd}" if such else f"if the largest differences are such parameters, {sgd}"))
        return text
    own = [sorted(set(p["steps_without_gradient"])) for p in without]
    if all(o == own[0] for o in own):
        text = (f"the parameters that differ most, {named(without)}, had no gradient in {step_list(own[0])} of the "
                f"{steps} compared, where the single process's optimizer leaves such a parameter alone; ")
    else:  # each its own steps: the union read as if every one of them had missed them all
        each = "; ".join(f"{p['parameter']} by {p['diff']:.1e} in {step_list(o)}" for p, o in zip(without, own))
        text = (f"the parameters that differ most had no gradient in some of the {steps} steps compared ({each}), "
                f"where the single process's optimizer leaves such a parameter alone; ")
    text += (f"{label}: {missing}; fix: {EVERY_PARAMETER_FIX}, the single process's as well, whose optimizer then "
             f"steps it as {label}'s does" if missing else
             f"{label} leaves it without a gradient too, so that does not explain the difference")
    if every:
        text += f"; the next, {named(every)}, had a gradient in every step"
        if note:  # what may move those (Horovod's broadcast of the optimizer state)
            text += f"; {label}'s own note: {note}"
    return text


def controls(spec, workload) -> dict[str, Any]:
    """What a launch ran under, as its record holds it before anything is measured: the same for every launch of a
    row, and what `compare run --join` holds to the earlier sessions' before anything runs."""
    out = {"global_batch": spec.global_batch, "steps": spec.steps, "warmup": spec.warmup, "seed": workload.seed,
           "threads_requested": spec.threads, "bind_cores": spec.bind_cores, "knobs": spec.knobs,
           "workload_options": workload.describe()["options"]}
    if workload.reads_through_loader():
        out["loader_workers"] = spec.loader_workers
    if spec.max_grad_norm is not None:  # absent where nothing is clipped, as in every record before it existed
        out["max_grad_norm"] = spec.max_grad_norm
    return out


def from_outcome(rec: dict[str, Any], outcome, spec, reference: dict | None, workload,
                 reference_losses: list[float] | None = None, *, adapter=None,
                 reference_gradients: dict | None = None, no_reference: str | None = None) -> dict[str, Any]:
    """Fill a base record with everything measured by one launch (`reference_losses`: the single-process
    reference's loss at each step, which a failed equivalence check may be explained by; `adapter`: the row's,
    configured with its knobs; `reference_gradients`: the reference's steps without a gradient per parameter,
    ReferenceAdapter's)."""
    rec["topology"] = {"device": spec.device, "processes": outcome.processes, "launcher_argv": outcome.argv,
                       "launch_pgid": outcome.pid,
                       # nodes x processes per node, and every rank's hostname, interface and boot id
                       **hosts.describe(spec.topology, outcome.ranks, outcome.processes)}
    if outcome.node_commands:
        rec["topology"]["node_commands"] = outcome.node_commands
    rec["wall_time_s"] = outcome.wall_time_s
    rec["launch_wall"] = outcome.launch_wall
    if outcome.leftovers_killed:
        rec["leftover_processes_killed"] = outcome.leftovers_killed
    rec["load_avg_before"] = outcome.load_avg_before  # other load on the machine: a busy machine shows here
    if outcome.concurrent_runs:  # another compare run measured at the same time (harness/launching/machine.py)
        rec["concurrent_compare_runs"] = outcome.concurrent_runs
    rec["controls"] = controls(spec, workload)
    if getattr(outcome, "log_not_kept", None):
        rec["log_not_kept"] = outcome.log_not_kept
    if outcome.stalled_rank is not None:
        rec["stalled_rank"] = outcome.stalled_rank
    if outcome.status != "ok":
        rec["status"], rec["reason"] = row_status(outcome, None)
        rec["log_tail"] = outcome.log_tail
        if outcome.progress:
            rec["reached"] = outcome.progress  # the phase and step rank 0 had reached
        return rec
    if outcome.shutdown_error:
        rec["shutdown_error"] = outcome.shutdown_error
        rec["log_tail"] = outcome.log_tail
    if outcome.failed_parts:
        rec["failed_parts"] = outcome.failed_parts
        rec["log_tail"] = outcome.log_tail
    ranks = sorted(outcome.ranks, key=lambda r: r.rank)
    r0 = ranks[0]
    devices = sum(r.devices_used for r in ranks)
    timed = [r.step_times_s[spec.warmup:] for r in ranks]
    steps = slowest_rank_steps(timed) if spec.steps else []
    stats = step_stats(steps) if steps else None
    windows = [r.timed_window for r in ranks]
    wall = max(w["wall_s"] for w in windows) if steps and all(windows) else None
    rec["topology"].update({"backend": r0.backend, "devices_used": devices, "world_size_processes":
                            r0.world_size, "device_names": sorted({r.device for r in ranks})})
    rec["controls"].update({
        "train_samples": r0.train_samples,
        "per_device_batch": spec.global_batch // devices, "per_process_batch": r0.per_process_batch,
        "lr": r0.lr, "lr_rule": r0.lr_rule, "precision": r0.precision,
        "compression": r0.compression,
        "threads_per_rank": [r.threads for r in ranks],
        "interop_threads_per_rank": [r.interop_threads for r in ranks],
        "omp_num_threads_env": r0.omp_num_threads_env,
    })
    if r0.loss_counted is not None:
        rec["controls"]["loss_normalisation"] = "global count" if r0.loss_counted else "per-sample mean"
    if r0.cuda_math:
        rec["controls"]["cuda_math"] = r0.cuda_math
    rec["adapter_info"] = r0.adapter
    rec["param_count"] = r0.param_count
    rec["trainable_param_count"] = r0.trainable_param_count
    rec["data"] = r0.data
    if stats:
        rec["step_time_s"] = stats
        # What a training job gets: the samples of the timed steps over the timed window by the wall clock, the
        # slowest rank's (each rank's own window, the equivalence snapshot and until-target evaluations left out). The
        # summed slowest-rank steps (schema 2) count a rank's delay twice: in its own step, and in the next, where
        # its peers wait for it in a collective (3-8% longer than the window on digits' 2 ms steps). The median of a
        # multi-modal step-time distribution jumps between its modes from launch to launch.
        rec["samples_per_s"] = spec.global_batch * len(steps) / wall if wall else spec.global_batch / stats["mean"]
        rec["samples_per_s_median_step"] = spec.global_batch / stats["median"]
        rec["samples_per_s_per_device"] = rec["samples_per_s"] / devices
        rec["step_times_s"] = steps
        rec["step_time_spread_ranks_s"] = [step_stats(t)["median"] for t in timed]
        tokens = workload.tokens_per_sample()
        if tokens:  # a language model: tokens/s is the figure its users compare
            rec["tokens_per_sample"] = tokens
            rec["tokens_per_s"] = rec["samples_per_s"] * tokens
            real = workload.unpadded_tokens_per_sample()
            if real:  # padded batches: the padded length counts every pad as a token
                rec["tokens_per_sample_unpadded"] = real
        if rec.get("flops_per_sample"):
            rec["tflops_per_device"] = rec["samples_per_s_per_device"] * rec["flops_per_sample"] / 1e12
            rec["mfu"] = hardware.mfu(rec["tflops_per_device"], spec.device, (rec.get("env") or {}).get("gpus") or [],
                             r0.precision, r0.cuda_math, rec.get("conv_flops_share"))
    if all(r.profile for r in ranks):
        rec["compute_profile"] = [r.profile for r in ranks]
        if stats:
            rec["load_balance"] = load_balance(rec["step_time_spread_ranks_s"], rec["compute_profile"])
    if r0.straggler:
        rec["straggler"] = {**{k: r0.straggler[k] for k in ("rank", "factor")},
                            "delay_s_per_rank": [r.straggler["delay_s"] for r in ranks],
                            "calibrated_compute_s_per_rank": [r.straggler["calibrated_compute_s"] for r in ranks]}
    if r0.step_clock:
        rec["step_clock"] = r0.step_clock  # host_sync (a sync around every step) or cuda_events
    skipped = [r.skipped_steps_timed for r in ranks if r.skipped_steps_timed is not None]
    if skipped:  # fp16 loss-scale overflows inside the timed window (every rank skips the same steps)
        rec["skipped_steps_timed"] = max(skipped)
    compiled = [r.compile for r in ranks if r.compile]
    if compiled:  # torch.compile's graphs and compile time, the slowest rank's (compiling is apart from the steps)
        rec["compile"] = {"graphs": max(c["graphs"] for c in compiled),
                          "compile_s": max(c["compile_s"] for c in compiled),
                          "graphs_timed": max(c["graphs_timed"] for c in compiled),
                          "compile_s_timed": max(c["compile_s_timed"] for c in compiled)}
    if r0.dtypes:
        rec["dtypes"] = r0.dtypes
    if all(r.breakdown for r in ranks):
        rec["breakdown"] = step_breakdown(ranks, stats)
    if wall:
        rec["cpu_time_s_per_rank"] = [w["cpu_s"] for w in windows]
        rec["cpu_s_per_step"] = sum(rec["cpu_time_s_per_rank"]) / len(windows) / len(steps)
        # The timed window by the wall clock (synchronised at both ends on CUDA), slowest rank: samples/s divides by
        # it; against the summed step times it shows what falls between steps (a host that cannot keep the GPU fed).
        rec["timed_window_wall_s"] = wall
        rec["noise"] = noise(windows, ranks, outcome)
    rec["phases_s"] = phases(outcome, ranks)
    # What a user starting this launch alone would wait for its first step: without the wait at the gate.
    rec["time_to_first_step_s"] = r0.first_step_end_wall - outcome.launch_wall - rec["phases_s"].get("gate", 0.0)
    rec["setup_s"] = max(r.setup_s for r in ranks)
    rec["peak_memory_bytes_per_rank"] = [r.peak_memory_bytes for r in ranks]
    rec["peak_memory_bytes"] = max((m for m in rec["peak_memory_bytes_per_rank"] if m is not None), default=None)
    rec["peak_memory_kind"] = r0.peak_memory_kind
    if any(r.peak_memory_cuda_extra for r in ranks):  # CUDA: reserved and host peaks beside the allocated
        extra = [r.peak_memory_cuda_extra or {} for r in ranks]
        rec["peak_memory_cuda_reserved_bytes_per_rank"] = [e.get("cuda_reserved_bytes") for e in extra]
        rec["peak_memory_host_bytes_per_rank"] = [e.get("host_bytes") for e in extra]
    rec["cpu_affinity_per_rank"] = [r.cpu_affinity for r in ranks]
    rec["cpu_affinity_any_thread_per_rank"] = [r.cpu_affinity_any_thread for r in ranks]
    if any(r.peak_memory_file_bytes is not None for r in ranks):  # CPU: the file-backed pages left out
        rec["peak_memory_file_bytes_per_rank"] = [r.peak_memory_file_bytes for r in ranks]
    # Every process fed an equal slice of the global batch with a mean-reduced loss, so the global batch loss
    # is the mean of the processes' losses.
    curve = [sum(ls) / len(ls) for ls in zip(*(r.losses for r in ranks))]
    rec["loss_curve"] = curve
    if r0.uncounted_steps:  # a loss of 0 over nothing counted: left out of the final loss and of the plotted curve
        rec["uncounted_steps"] = sorted(set(r0.uncounted_steps))
    rec["final_loss"], rec["final_loss_window"] = final_loss(curve, r0.uncounted_steps)
    rec["eval"] = _eval(r0, ranks, workload)
    if rec["eval"] is None and r0.eval_skipped:
        rec["eval_skipped"] = r0.eval_skipped
    params = snapshot(spec.params_path, reference)  # read once: the differences, and where a check failed
    diffs = param_diffs(params, reference)
    rec["max_param_diff"] = max_param_diff(diffs)
    peaks = (reference_gradients or {}).get("peaks")
    if peaks is not None and diffs and not rec["max_param_diff"] <= workload.equiv_tolerance:
        reference_gradients = {**reference_gradients,
                               **gradient_at(params, reference, peaks, workload.equiv_tolerance)}
    rec["equivalence"] = equivalence(spec, r0, workload, adapter, diffs, reference_gradients,
                                     label=rec.get("label", rec.get("adapter", "")), ranks=ranks,
                                     reference_losses=reference_losses, no_reference=no_reference)
    if spec.eval_every and spec.target is not None:
        rec["ttt"] = until_target(spec, outcome, ranks, steps, workload)
    rec["status"], rec["reason"] = row_status(outcome, rec.get("ttt"), curve, [r.losses for r in ranks],
                                              getattr(workload, "empty_slice", None))
    return rec


def equivalence(spec, r0, workload, adapter, diffs: dict[str, float] | None, reference_gradients: dict | None,
                label: str, ranks=(), reference_losses: list[float] | None = None,
                no_reference: str | None = None) -> dict[str, Any]:
    """The record's equivalence check: whether it applies to this row (fp32, no compression, no batch dependence,
    BatchNorm statistics over the global batch, a single-process reference to compare with: `no_reference` says why
    there is none), whether it passed, and why not: randomness in the model, a loss averaged per rank over counts
    that differ between them (`ranks`' losses against `reference_losses`), else the parameters that differ most and
    what the backend does with a parameter left without a gradient."""
    # fp32, fp64, a mix of them or complex ones (a model built so): exact arithmetic, checked at the tolerance
    exact_dtypes = set(r0.precision.split("+")) <= EXACT_DTYPES
    exact = exact_dtypes and r0.compression == "none"
    bn = workload.batch_norm
    # None: this row computes BatchNorm statistics over the global batch (SyncBatchNorm); else how it could
    bn_fix = adapter.batch_norm() if adapter is not None else ""
    per_process = bool(bn) and bn_fix is not None
    applies = exact and workload.batch_dependence is None and not per_process
    checked = applies and not no_reference  # nothing to check against is no failed check
    diff = max_param_diff(diffs)
    out: dict[str, Any] = {
        "steps": spec.equiv_steps, "tolerance": workload.equiv_tolerance, "checked": checked,
        "passed": (diff is not None and diff <= workload.equiv_tolerance) if checked else None,
        "reference": f"single process, {r0.precision if exact else 'fp32'}, global batch "
                     f"{spec.global_batch}, same init and data order",
        "why_not_checked": None if checked else no_reference if applies else (
            f"{r0.precision} arithmetic" if not exact_dtypes
            else f"{r0.compression} gradient compression" if not exact
            else f"model is batch-dependent ({workload.batch_dependence})" if workload.batch_dependence
            else (f"BatchNorm statistics per process ({bn}): each process normalises its own "
                  f"{r0.per_process_batch} samples where the single process normalises all {spec.global_batch}"
                  + (_also_batch_dependent(workload, adapter, bn_fix, label)
                     if getattr(workload, "batch_dependent", None) else f"; {bn_fix}" if bn_fix else "")
                  # said at once: with the statistics synced, the check would fail on the randomness next
                  + (f"; besides, the model is not deterministic ({workload.nondeterministic}), so with statistics "
                     f"over the global batch the check would still fail on that (a frozen part left in training "
                     f"mode, a teacher, say, keeps both: hold it in eval mode)" if workload.nondeterministic else ""))),
    }
    if bn:
        out["batch_norm"] = {"layers": bn, "statistics": "per process" if per_process else "global batch"}
    if out["passed"]:
        caveats = _caveats(workload)
        if caveats:
            out["caveat"] = "; besides, ".join(caveats)
    if not exact and workload.varying_counts and reference_losses:
        # a row of another precision or with compression is not checked, and its difference would be put down to
        # that: where a count the loss averages over differs between the ranks explains its losses at the check's
        # steps, the workload's problem is said of it too (measured: a GPT-2 without its count, bf16 3.9e-4 where
        # the count declared gave 3.0e-5, said only as "bf16 arithmetic" in a run with no fp32 row)
        counts = normalisation.explain(workload.varying_counts, [r.losses for r in ranks], reference_losses,
                                       spec.equiv_steps)
        if counts:
            out["also"] = counts
    if out["passed"] is not False or diffs is None:  # passed, not checked, or no reference to compare with
        return out
    if workload.nondeterministic:
        if workload.nondeterministic.startswith(DIFFERENT_BUILDS):  # its own reason and fix: not a random forward
            random = f"the model is not built alike: {workload.nondeterministic}"
        elif workload.nondeterministic.startswith(RESEEDED):  # its fix is the data's draws, not a dropout of 0
            random = f"the model is not deterministic: {workload.nondeterministic}"
        elif workload.nondeterministic.startswith(RANDOM_LOSS):
            # measured: negatives drawn in a sampled softmax's loss, 3.7e-2 ✗; drawn with the data, 1.2e-7 ✓
            random = (f"the model is not deterministic: {workload.nondeterministic}: draw them with the data (in the "
                      f"dataset, or as part of the batch), so that each sample's draws go where the sample goes")
        else:
            random = (f"the model is not deterministic: {workload.nondeterministic}; each process draws its own "
                      f"random numbers, which match the single process's only where no draw depends on the batch (a "
                      f"whole block dropped at once may; a dropout mask over the samples does not): make it "
                      f"deterministic, e.g. dropout 0, to check equivalence")
        largest = largest_diffs(diffs, workload.equiv_tolerance, reference_gradients)
        missing = adapter.missing_gradient() if adapter is not None else None
        if missing and any(p["steps_without_gradient"] for p in largest):
            # a row of a backend that leaves such a parameter alone matched in the same run (stochastic depth: a
            # block dropped for the whole batch gets no gradient, and Horovod's zero one moves it with momentum)
            out["largest_diffs"] = largest
            out["why_failed"] = (why_differs(largest, spec.equiv_steps, label, missing, workload.stateful)
                                 + f"; besides, {random}")
            return out
        note = (getattr(r0, "adapter", None) or {}).get("note")
        # a backend's own cause (Horovod's zero-gradient step decaying the weights before training) is still its
        # own where the model is random too: said beside the randomness, not hidden by it
        out["why_failed"] = random + (f"; besides, {label}'s own note: {note}" if note else "")
        return out
    empty = getattr(workload, "empty_slice", None)
    if (empty is not None and empty["step"] < spec.equiv_steps and len(ranks) > empty["rank"]
            and len(ranks[empty["rank"]].losses) > empty["step"]
            and not math.isfinite(ranks[empty["rank"]].losses[empty["step"]])):
        # a mean over none: NaN at that step on that rank; torch gives it a zero gradient, so the training goes on
        # (no divergence to name) with that rank's share of the step missing from the average
        out["why_failed"] = (f"rank {empty['rank']}'s slice of step {empty['step'] + 1} holds none of {empty['what']}, "
                             f"and the loss is a mean over them: 0/0 there, a NaN loss whose gradient torch makes zero, "
                             f"so that step's average over the ranks lacks that rank's share where the single process "
                             f"weighs every counted item of the global batch alike (the loss of a rank whose slice "
                             f"holds some differs likewise: each rank's mean weighs its own items); fix: return the "
                             f"loss as (sum, count), the count of those items (the harness divides by the whole global "
                             f"batch's), or declare the count (`count=` in its Pieces)")
        return out
    if workload.varying_counts:
        counts = normalisation.explain(workload.varying_counts, [r.losses for r in ranks], reference_losses,
                                       spec.equiv_steps)
        if counts:
            out["why_failed"] = counts
            return out
    if getattr(workload, "edits_parameters", None):
        out["why_failed"] = (f"the model's forward changes its parameters in place ({workload.edits_parameters}: "
                             f"nn.Embedding(max_norm=...) renormalising the rows it looks up, a clamp_ of a weight, an "
                             f"EMA teacher updated from the online network), "
                             f"and no backend synchronises parameters after the start, only gradients: a change that "
                             f"depends on the batch (max_norm's rows) leaves each rank's copy changed where its own "
                             f"slice took it, and a sharding backend (ZeRO-3, FSDP2) may drop a change made to the "
                             f"copy it gathered for the forward")
        own = adapter.edited_parameters_fix() if adapter is not None else None
        # the backend's own fix where it has one (ZeRO-3's GatheredParameters, in the forward), else the general one
        out["why_failed"] += (f"; on {label}: {own}" if own else "; fix: move the change out of the forward (a "
                              "parametrization, or after the optimizer's step) to check equivalence")
        return out
    if getattr(workload, "summed_loss", None):
        out["why_failed"] = (f"the model's loss is a sum over its batch's samples, not a mean: {workload.summed_loss} "
                             f"(reduction=\"sum\", say). Each rank sums its own slice and the backends average the "
                             f"ranks' gradients, so every step moves the parameters a fraction (one over the number "
                             f"of ranks) as far as the single process's step; fix: return (sum, count) from the loss, "
                             f"count the batch's samples (the harness divides by the whole global batch's count), or "
                             f"make it a mean (reduction=\"mean\") and the learning rate to match")
        return out
    if workload.batch_dependent:
        out["why_failed"] = batch_dependent_failure(workload, adapter, label,
                                                    counted=bool(getattr(r0, "loss_counted", None)))
        return out
    largest = largest_diffs(diffs, workload.equiv_tolerance, reference_gradients)
    out["largest_diffs"] = largest
    note = (getattr(r0, "adapter", None) or {}).get("note")
    # a backend's own note (Horovod's broadcast of the optimizer state moves the weights before the first step)
    # names a cause of its own: the first loss is not then the seed's
    started = None if note else first_step_differs(workload, ranks, reference_losses)
    if started:
        out["why_failed"] = started
        return out
    missing = adapter.missing_gradient() if adapter is not None else None
    why = why_differs(largest, spec.equiv_steps, label, missing, workload.stateful, note, workload.optimizer_class,
                      workload.equiv_tolerance, getattr(r0, "lr", None),
                      adapter.edited_parameters_fix() if adapter is not None else None)
    # a declared count that may miss a shift, unless the check before launching found it right at that step
    maybe = normalisation.suspect(workload.varying_counts or [], getattr(workload, "count_losses", None))
    if why and maybe:
        why = f"{why}; besides, {maybe}"
    if not maybe and (why is None or why.endswith(NOT_EXPLAINED)):  # nothing found yet: what the check saw the code do
        clues = _code_clues(workload)
        if clues:
            why = f"{why}; " + "; ".join(clues) if why else "; ".join(clues)
    if why or maybe:
        out["why_failed"] = why or maybe
    return out


def _code_clues(workload) -> list[str]:
    """What the check before launching saw the model's code do that a backend runs otherwise than one process does,
    for a ✗ nothing else explains: hooks on its parameters' gradients, which run on each rank's own gradient before
    the average (the single process's on the whole batch's); calls of torch.distributed, which one process skips
    (no process group: `dist.is_initialized()` is False) and a backend that starts a group runs."""
    out = []
    facts = getattr(workload, "model_facts", None)
    hooks = list(getattr(facts, "grad_hooks", None) or [])
    if hooks:
        out.append(f"the model registers hooks on its parameters' gradients ({listed(hooks)}), and each rank's hook "
                   f"runs on its own slice's gradient before the backend averages them, where the single process's "
                   f"runs on the whole batch's: a hook that is not linear in the gradient (a clamp, a normalisation, "
                   f"a threshold) gives another average; fix: do that work after the average, in the optimizer's "
                   f"step (a subclass, or register_step_pre_hook), or make the hook linear (a constant scale)")
    called = getattr(workload, "calls_distributed", None)
    if called:
        out.append(f"the model's code calls torch.distributed ({called}), which the single process skips (it starts "
                   f"no process group: dist.is_initialized() is False there) and a backend that starts one runs: "
                   f"what that code changes (a loss all-reduced and divided by the world size, as logging often does, "
                   f"which scales every gradient by 1/world size) trains this row away from the single process, and "
                   f"a backend that starts no torch.distributed group skips it as one process does; "
                   f"fix: compute what you log from a detached copy of the loss, or keep the code the same in one "
                   f"process and in many")
    return out


def _caveats(workload) -> list[str]:
    """What a ✓ (parameters that match the single process) does not say, where the check before launching found
    it: a module that trains in no row, the single process included; buffers that follow each rank's slices."""
    out = []
    facts = getattr(workload, "model_facts", None)
    if getattr(facts, "checkpoint_no_grad", False) and facts.never_used:
        # a ddp row refused with it says so; the others matched silently
        out.append(f"it matches a single process that never trains {listed(facts.never_used)}: torch.utils.checkpoint "
                   f"(use_reentrant=True) warned \"{NO_GRAD_CHECKPOINT}\", so the module it checkpoints gets no "
                   f"gradient in one process or on any backend; pass use_reentrant=False to train it")
    buffers = getattr(workload, "unlossed_buffers", None)
    if buffers:
        one = len(buffers) == 1
        out.append(f"its parameters match, but {'buffer' if one else 'buffers'} {listed(buffers)} "
                   f"{'follows' if one else 'follow'} each rank's own slices: the forward updates "
                   f"{'it' if one else 'them'} from its batch without {'its' if one else 'their'} entering the "
                   f"training loss (InstanceNorm's running statistics with track_running_stats=True, say), so what "
                   f"reads {'it' if one else 'them'} in eval mode, the evaluation, reads the ranks' copies, not the "
                   f"single process's, and its figure may differ between rows whose parameters match; fix: leave "
                   f"{'it' if one else 'them'} out (track_running_stats=False, InstanceNorm's default) or update "
                   f"{'it' if one else 'them'} from statistics all-reduced across the ranks")
    return out


def _consulted(workload) -> str:
    """The batch dependence found before launching, in words, with where the model consults torch.distributed."""
    return (f"when run alone the model depends on the rest of its batch, other than through BatchNorm "
            f"({workload.batch_dependent}); it consults torch.distributed in {workload.consults_distributed}, so "
            f"under a backend it may gather the rest from the other ranks")


def _no_group(adapter, label: str, buffers: bool = False) -> str:
    """Where the row's ranks start no torch.distributed process group: that the model's gather (or, for a buffer the
    forward updates, its all-reduce: `buffers`) is skipped, and the framework's own way (its adapter's words); ""
    where they start one."""
    gather = getattr(adapter, "NO_PROCESS_GROUP", "") if adapter is not None else ""
    reduce = getattr(adapter, "NO_PROCESS_GROUP_REDUCE", "") if adapter is not None else ""
    if buffers and reduce:
        return (f"{label} starts no torch.distributed process group, so that all-reduce does not run under it and "
                f"each rank's buffer follows its own slice alone; fix: {reduce}")
    return (f"{label} starts no torch.distributed process group, so that gather does not run under it and each "
            f"rank's loss sees its own slice alone; fix: {gather}") if gather else ""


def _also_batch_dependent(workload, adapter, bn_fix: str | None, label: str) -> str:
    """The rest of a per-process BatchNorm row's reason where the model depends on its batch otherwise as well: a
    model that gathers across ranks (it consults torch.distributed) may match with statistics over the global batch,
    so their fix stays; one that does not, cannot."""
    if not getattr(workload, "consults_distributed", None):
        return (f"; besides, the model depends on the rest of its batch other than through BatchNorm "
                f"({workload.batch_dependent}), so statistics over the global batch would not make it match either "
                f"unless the model gathers the rest of its batch from the other ranks")
    no_group = _no_group(adapter, label)
    return f"; besides, {_consulted(workload)}" + (f": {no_group}" if no_group else f"; {bn_fix}" if bn_fix else "")


CONTRASTIVE_FIX = ("a contrastive loss takes its negatives from every rank's samples: gather the embeddings with "
                   "their gradients (torch.distributed.nn.functional.all_gather behind dist.is_initialized(); "
                   "torch.distributed.all_gather's result carries none) and compute the loss over the gathered batch; a "
                   "load-balancing term over the batch's tokens (Switch's E * sum(f * P)) all-reduces its "
                   "statistic that carries no gradient, the fraction of tokens each expert got, across the ranks "
                   "(dist.all_reduce of f, divided by the world size, behind dist.is_initialized()): each rank's "
                   "term then averages to the single process's")
"""The fix of a failed check for a contrastive (SimCLR, CLIP) loss over the batch's other samples."""


FIRST_STEP_TOLERANCE = 1e-4
"""Relative difference between a row's first loss (the mean of its ranks' over their slices) and the single process's
over the global batch, both before any update, beyond which they did not compute the same thing: fp32 sums in another
order differ by about 1e-7."""


def first_step_differs(workload, ranks, reference_losses: list[float] | None) -> str | None:
    """Why a row whose very first loss, before any update, differs from the single process's: its ranks did not start
    from the same weights or did not see the same data (a model or data built from the process id, the time, the
    rank, or a random state the workload's seed does not set), or its forward depends on the rank. None where the
    losses agree, cannot be compared, or a cause found before launching explains a difference (a count that differs
    between the ranks)."""
    if not reference_losses or not ranks or workload.varying_counts or getattr(workload, "summed_loss", None):
        return None
    firsts = [r.losses[0] for r in ranks if r.losses]
    if len(firsts) != len(ranks) or not all(math.isfinite(v) for v in [*firsts, reference_losses[0]]):
        return None
    mean, single = sum(firsts) / len(firsts), reference_losses[0]
    if abs(mean - single) <= FIRST_STEP_TOLERANCE * max(abs(single), 1e-12):
        return None
    checked = getattr(workload, "count_losses", None) is not None  # the batch check ran: the loss is per sample
    many = f"the mean of its {len(firsts)} ranks' losses over their slices" if len(firsts) > 1 else "its loss"
    return (f"at step 1, before any update, the single process's loss over the global batch was {single:.6g} and "
            f"{many} {mean:.6g}"
            + (", where the check before launching, with the same weights and data, found them equal" if checked
               else "") +
            ": this row's ranks did not start from the single process's weights or did not see its data, or their "
            "forward depends on the rank (a model or data built from the process id, the time, the rank, or Python's "
            "or NumPy's random state, which the workload's seed does not set; no backend moves the data); fix: build "
            "the model and the data from torch's generator as the workload's seed leaves it (or a torch.Generator "
            "with a constant seed), and keep the forward the same on every rank")


def batch_dependent_failure(workload, adapter, label: str, counted: bool = False) -> str:
    """Why a row whose model depends on the rest of its batch (found before launching) differs from the single
    process, with the fix. A model that consults torch.distributed may gather the rest from the other ranks and
    match (rows of the same table did), so it is never told that no backend can: a row whose ranks start no process
    group is told its gather is skipped there and the framework's own; another, what a gather must do to match."""
    gather = getattr(adapter, "NO_PROCESS_GROUP", "") if adapter is not None else ""
    if getattr(workload, "consults_distributed", None):
        no_group = _no_group(adapter, label, buffers=bool(getattr(workload, "batch_buffers", None)))
        if no_group:
            return f"{_consulted(workload)}, but {no_group}"
        return (f"{_consulted(workload)}, yet this row still differs from the single process: a gather matches it "
                f"where every rank gathers every other rank's part in rank order and the gathered parts carry their "
                f"gradients back (torch.distributed.nn.functional.all_gather; torch.distributed.all_gather's result "
                f"carries none), and the loss is taken over the gathered batch as the single process takes it")
    buffers = getattr(workload, "batch_buffers", None)
    if buffers:
        return (f"the model depends on the rest of its batch, other than through BatchNorm: "
                f"{workload.batch_dependent}. Each rank's copy of {'that buffer' if len(buffers) == 1 else 'them'} "
                f"follows its own slice and the single process's the whole global batch, and no backend averages a "
                f"buffer the forward changes, so ranks that each see their own slice alone cannot match the single "
                f"process; fix: update {'it' if len(buffers) == 1 else 'them'} from statistics all-reduced across the "
                f"ranks, as SyncBatchNorm does (torch.distributed.all_reduce of the slice's sum and count behind "
                f"dist.is_initialized()"
                + (f"; under {label}, which starts no torch.distributed process group, the framework's own "
                   f"all-reduce" if gather else "")
                + "), or, for a buffer that holds samples rather than a statistic (a MoCo queue of keys), from every "
                  "rank's samples gathered in rank order (torch.distributed.all_gather, as MoCo's concat_all_gather"
                + (f"; under {label}, the framework's own allgather" if gather else "")
                + "), or declare batch_dependence=\"...\" in @workload (the check is then skipped, with that reason)")
    mixing = getattr(workload, "batch_mixing", None)
    if mixing:  # where a sample's activations first depend on the others (measured: h - h.mean(0), x.shape[0])
        return (f"the model depends on the rest of its batch, other than through BatchNorm: {workload.batch_dependent}"
                f"; a sample's activations first depend on the other samples of its batch in {mixing} (for the same "
                f"samples they differed there between the global batch and a rank's slice: code there mixes the "
                f"samples, a statistic over the batch dimension, as a hand-written normalisation's h.mean(0), or a use "
                f"of the batch's size, x.shape[0]), so ranks that each see their own slice alone cannot match the "
                f"single process; fix: make it per sample to check equivalence (LayerNorm or GroupNorm for a "
                f"normalisation, a constant for a size), or compute the statistic over the global batch, all-reduced "
                f"across the ranks as SyncBatchNorm does (torch.distributed.nn.functional.all_reduce, whose result "
                f"carries its gradient back"
                + (f"; under {label}, which starts no torch.distributed process group, the framework's own "
                   f"all-reduce" if gather else "")
                + "), or declare batch_dependence=\"...\" in @workload (the check is then skipped, with that reason)")
    return (f"the model depends on the rest of its batch, other than through BatchNorm: {workload.batch_dependent} (a "
            f"mean divided by a sum over its batch, such as cross_entropy with class weights, whose mean divides by "
            f"the batch's sum of weights; a mean over a subset of its samples mixed with another term, such as a "
            f"regression loss over the samples that have a label; a loss term over the whole batch, such as a "
            f"load-balancing or contrastive one; a buffer its forward updates from the batch; or a branch its forward "
            f"takes on the whole batch's content), so ranks that each see their own slice alone cannot match the "
            f"single process; fix: a weighted mean returns (sum, count) instead, the count being the batch's sum of "
            f"weights (the harness divides by the whole global batch's count); a mean over a subset mixed with "
            f"another term divides its sum by a count that does not depend on the batch (its size, or the global "
            f"batch's count of that subset, all-reduced across the ranks, times their number); {CONTRASTIVE_FIX}"
            + (f" (under {label}, which starts no torch.distributed process group: {gather})" if gather else "")
            + "; otherwise make the loss a mean of per-sample terms (and a branch a choice per sample) to check "
              "equivalence, or declare batch_dependence=\"...\" in @workload (the check is then skipped, with that "
              "reason)"
            # an outside check: a cross-entropy over every sample plus a regression mean over the boxed ones, returned
            # with count= the boxed samples, was told the generic causes and not that its count weighs both terms
            + (". This loss came with a count (count=, or (sum, count)), which divides the whole loss, every term: "
               "a term over other samples than those counted (a mean over every sample beside a mean over the "
               "labelled ones) must be divided by a count of its own before it is added (one that does not depend on "
               "the batch, as above)" if counted else ""))


EXACT_DTYPES = {"fp32", "fp64", "complex64", "complex128"}
"""Parameter dtypes whose rows are checked against the single process at the tolerance (no rounding to a half)."""


BREAKDOWN_TOLERANCE = 0.10
"""The profiled steps' mean may differ from the timed steps' mean by this much (relative) before the report says
the breakdown does not account for the measured step (the profiler's own cost, or a step that changed)."""


def step_breakdown(ranks: list[TrainResult], stats: dict | None) -> dict[str, Any]:
    """Every rank's profiled steps split into parts (harness/shared/step_parts.py), averaged over ranks and steps,
    beside the timed step it explains: the parts add up to the profiled step exactly; the profiled step is held to
    the timed window's mean step within BREAKDOWN_TOLERANCE."""
    parts = step_parts.combine([r.breakdown["steps"] for r in ranks])
    timed = stats["mean"] if stats else None
    out = dict(parts)
    out["timed_step_s"] = timed
    out["tolerance"] = BREAKDOWN_TOLERANCE
    out["profiled_vs_timed"] = parts["step_s"] / timed - 1.0 if timed else None
    out["within_tolerance"] = (abs(out["profiled_vs_timed"]) <= BREAKDOWN_TOLERANCE
                               if out["profiled_vs_timed"] is not None else None)
    out["collectives_seen"] = [r.breakdown["collectives"] for r in ranks]
    # Overlap is seen only where the collectives' own events are (gloo's threads, NCCL's kernels); a framework
    # that communicates outside torch (Horovod) shows only the training thread's wait for it.
    out["overlap_seen"] = all(c["wire"] for c in out["collectives_seen"])
    busy = [step_parts.busy(r) for r in parts["ranks"]]
    out["slowest_rank"] = max(range(len(busy)), key=busy.__getitem__) if busy else None
    out["traces"] = {r.rank: r.breakdown["trace"] for r in ranks if r.breakdown.get("trace")}
    out["trace_s"] = max((r.breakdown.get("trace_s") or 0.0 for r in ranks), default=0.0)
    return out


def row_status(outcome, ttt: dict[str, Any] | None, curve: list[float] = (),
               rank_losses: list[list[float]] = (), empty: dict[str, Any] | None = None) -> tuple[str, str]:
    """A measured row's status and reason, decided here only: the launch's own (ok, failed, interrupted, hung: what
    harness/launching/launch.py decided from the facts recorded in order, culprit included), then, for a launch
    that ended well, whether its loss diverged (`diverged`: NaN or infinite from some step to the last, the step
    named; its figures stay in the record, out of the comparison) and whether it reached its target
    (`--until-target`)."""
    if outcome.status != "ok":
        return outcome.status, outcome.reason
    diverged = diverged_at(curve)
    if diverged is not None:
        step, value = diverged
        # the rank whose own loss went first (a NaN on one rank reaches every rank's parameters at the next
        # all-reduce, so later steps are NaN everywhere)
        first = [k for k, losses in enumerate(rank_losses)
                 if len(losses) >= step and not math.isfinite(losses[step - 1])]
        where = ("" if len(rank_losses) < 2 or not first or len(first) == len(rank_losses)
                 else f" on rank {first[0]} (the other ranks' losses were finite there)" if len(first) == 1
                 else f" on ranks {', '.join(map(str, first))} (the others' were finite there)")
        if (empty is not None and empty["step"] + 1 == step and len(rank_losses) > empty["rank"]
                and first and empty["rank"] in first):  # `empty`: a slice with nothing to average, by data rank
            return "diverged", (f"the loss became {value} at step {step} of {len(curve)}{where}: rank "
                                f"{empty['rank']}'s slice of step {step} holds none of {empty['what']}, and the "
                                f"loss is a mean over them, 0/0 there, not a diverging training (its timings are "
                                f"kept in the record, out of the comparison); fix: return the loss as (sum, count), "
                                f"the count of those items (the harness divides by the whole global batch's), or "
                                f"declare the count (`count=` in its Pieces)")
        return "diverged", (f"the loss became {value} at step {step} of {len(curve)}{where} and stayed NaN or "
                            f"infinite: the training diverged (its timings are kept in the record, out of the "
                            f"comparison)")
    if not ttt or ttt["reached"]:
        return outcome.status, outcome.reason
    return "not_reached", (f"best {ttt['metric']} {ttt['best_metric']:.4f} (after step {ttt['best_step']}) is below "
                           f"the target {ttt['target']:g} within the {ttt['budget_steps']}-step budget")


def diverged_at(curve: list[float]) -> tuple[int, str] | None:
    """(the step, counted from 1, from which every loss of the curve is NaN or infinite, and that loss as text), or
    None where the last step's loss is finite (a loss that is inf for a step and then recovers, as an fp16 loss
    scale settling may make it, is not a divergence)."""
    import math

    k = len(curve)
    while k and not math.isfinite(curve[k - 1]):
        k -= 1
    return None if k == len(curve) else (k + 1, str(curve[k]))


def noise(windows: list[dict], ranks: list[TrainResult], outcome) -> dict[str, Any]:
    """What else the machine did during the timed window, from rank 0's /proc/stat before and after it: the share of
    the CPUs' time lost to steal and the share used by processes other than the ranks on rank 0's machine (the
    launcher's own process counts as other); and another compare run measured meanwhile. `flags` names what passed
    NOISE_STEAL / NOISE_OTHER, for the report to mark the launch."""
    out: dict[str, Any] = {"method": "rank 0's /proc/stat over its timed window; ranks' CPU: CLOCK_PROCESS_CPUTIME_ID",
                           "flags": []}
    delta = windows[0].get("proc_stat")
    window = procstat.shares(delta) if delta else None
    if window:
        tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        boot = (ranks[0].host or {}).get("boot_id")
        here = sum(w["cpu_s"] for w, r in zip(windows, ranks) if (r.host or {}).get("boot_id") == boot)
        total = window["ticks"]
        out.update(window_ticks=total, steal_share=window["steal"],
                   other_cpu_share=max(0.0, window["busy"] - here * tick / total))
        if total < NOISE_FEWEST_TICKS:
            out["unchecked"] = (f"its timed window was {total} ticks of /proc/stat, too short to read other "
                                f"processes' share from")
        else:
            # a short window (the default digits run's are 17-54 ticks) is read with its rounding taken off the share
            slack = 0.0 if total >= NOISE_MIN_TICKS else NOISE_SLACK_TICKS / total
            if out["steal_share"] - slack >= NOISE_STEAL:
                out["flags"].append(f"CPU steal {out['steal_share']:.0%}")
            if out["other_cpu_share"] - slack >= NOISE_OTHER:
                out["flags"].append(f"other processes used {out['other_cpu_share']:.0%} of the CPUs")
    if outcome.concurrent_runs:
        out["flags"].append("another compare run")
    return out


def load_balance(step_s_per_rank: list[float], profiles: list[dict]) -> dict[str, Any]:
    """Per rank, how much of its step is its own compute and how much is waiting (LOAD_BALANCE_METHOD), and the
    spread of each across ranks ((max - min) / median)."""
    ranks = []
    for k, (step, prof) in enumerate(zip(step_s_per_rank, profiles)):
        compute = prof["batches"][0]["compute_s"]
        ranks.append({"rank": k, "step_s": step, "compute_s": compute, "wait_s": max(0.0, step - compute),
                      "wait_fraction": max(0.0, step - compute) / step if step > 0 else None})

    def spread(key):
        values = [r[key] for r in ranks]
        mid = statistics.median(values)
        return (max(values) - min(values)) / mid if mid > 0 else None

    return {"method": LOAD_BALANCE_METHOD, "per_rank": ranks, "compute_spread": spread("compute_s"),
            "wait_spread": spread("wait_s")}


def until_target(spec, outcome, ranks: list[TrainResult], steps: list[float], workload) -> dict[str, Any]:
    """The `ttt` object of an until-target row, from what every rank recorded (harness/rank/evaluation.py).

    Training time to target: the sum of the per-step times (the slowest rank's) of every step up to and including
    the one after which an evaluation first reached the target; no step is discarded. End-to-end time to target:
    from starting the launch command to the end of that step (the latest rank's clock), less the evaluation time
    spent before it and the harness's parameter snapshot if it came before it: launcher, interpreter, imports,
    rendezvous, framework set-up and any JIT build are in it, evaluations are not."""
    evals = []
    for per_rank in zip(*(r.evals for r in ranks)):
        e0 = per_rank[0]
        correct, count, _ = e0["reduced_mean"]
        # The step ends when its last rank is done; the evaluation, when its last rank is. A rank that finished
        # the step early waits for the others inside the evaluation's all-reduce: that wait is step time (the
        # slowest rank's), so an evaluation's seconds are counted from the last rank's step end.
        step_end = max(e["step_end_wall"] for e in per_rank)
        evals.append({"step": e0["step"], "metric": correct / count, "step_end_wall": step_end,
                      "eval_s": max(e["eval_end_wall"] for e in per_rank) - step_end})
    cumulative = [0.0]
    for t in steps:
        cumulative.append(cumulative[-1] + t)
    hit = next((e for e in evals if e["metric"] >= spec.target), None)
    best = max(evals, key=lambda e: e["metric"])  # the first of equals
    snapshot_s = max((r.snapshot_s for r in ranks if r.snapshot_s is not None), default=None)
    out: dict[str, Any] = {
        "target": spec.target, "metric": workload.metric_name, "eval_every": spec.eval_every,
        "budget_steps": spec.steps, "reached": hit is not None, "steps_run": len(steps),
        "steps_to_target": None, "train_time_to_target_s": None, "e2e_time_to_target_s": None,
        "startup_to_target_s": None, "target_step_end_s": None, "eval_time_before_target_s": None,
        "evals": len(evals), "eval_time_s": sum(e["eval_s"] for e in evals),
        "eval_s_each": [e["eval_s"] for e in evals],
        "best_metric": best["metric"], "best_step": best["step"], "final_metric": evals[-1]["metric"],
        "train_time_s": cumulative[-1],
        "snapshot": None if snapshot_s is None else {"after_step": spec.equiv_steps, "seconds": snapshot_s},
        "curve": [[e["step"], cumulative[e["step"]], e["metric"]] for e in evals],
    }
    if hit is not None:
        before = sum(e["eval_s"] for e in evals if e["step"] < hit["step"])
        excluded = before + (snapshot_s if snapshot_s is not None and spec.equiv_steps < hit["step"] else 0.0)
        end_s = hit["step_end_wall"] - outcome.launch_wall - outcome.gate_wait_s
        out.update(steps_to_target=hit["step"], train_time_to_target_s=cumulative[hit["step"]],
                   target_step_end_s=end_s, eval_time_before_target_s=before,
                   e2e_time_to_target_s=end_s - excluded)
        out["startup_to_target_s"] = out["e2e_time_to_target_s"] - out["train_time_to_target_s"]
    return out


MILESTONES = (("python", "entry"), ("imports", "imports_done"), ("init", "init_done"),
              ("setup", "setup_done"), ("gate", "gate_passed"), ("warmup", "warmup_done"), ("timed", "timed_done"), ("profile", "profile_done"),
              ("eval", "eval_done"), ("breakdown", "breakdown_done"),
              ("write", "result_written"))
"""Phase name -> the rank milestone that ends it (harness/rank/life.py), in order. "python" is interpreter start-up
(process created -> our code runs: entry); "init" is the framework joining its group (rendezvous, process group,
JIT builds); "setup" is model, wrapper and data; "gate" is waiting for the previous launch to end (this one started
while it did); "profile" is the compute profile of `compare scale` (absent otherwise); "breakdown" the profiled
steps of --breakdown (absent otherwise); "write" is building the rank's result."""
PHASES = ("launcher", "python", "imports", "init", "setup", "gate", "warmup", "timed", "profile", "eval", "breakdown",
          "write", "shutdown")
"""Every phase of one launch, in order: `launcher` from starting the command until the first rank process exists,
`shutdown` from the last rank's result until the launch has ended. They add up to the launch's wall time."""


def phases(outcome, ranks: list[TrainResult]) -> dict[str, float]:
    """Seconds per phase of one launch; each milestone is the slowest rank's (the next phase waits for it)."""
    marks = [r.marks or {} for r in ranks]

    def last(name):
        values = [m.get(name) for m in marks]
        return max(values) if values and all(v is not None for v in values) else None

    out, prev = {}, outcome.launch_wall
    starts = [m.get("process_start") for m in marks]
    first_process = min((s for s in starts if s is not None), default=None)
    if first_process is not None:
        out["launcher"] = max(0.0, first_process - prev)
        prev = first_process
    for phase, milestone in MILESTONES:
        t = last(milestone)
        if t is not None:
            out[phase] = max(0.0, t - prev)
            prev = t
    out["shutdown"] = max(0.0, outcome.end_wall - prev)
    return out


def _eval(r0, ranks, workload) -> dict[str, Any] | None:
    if not r0.eval:
        return None
    correct, count, loss_sum = r0.eval["reduced_mean"]  # means over processes: the ratio is exact
    accuracy = correct / count
    return {"accuracy": accuracy, "loss": loss_sum / count, "target": workload.target,
            "target_met": None if workload.target is None else accuracy >= workload.target,
            # the run the target is known to be reached by: a shorter one's miss says it was short
            "metric": workload.metric_name, "default_steps": workload.warmup + workload.steps, "default_global_batch": workload.global_batch,
            "test_samples": round(sum(r.eval["local"][1] for r in ranks)),
            "local_counts": [r.eval["local"][:2] for r in ranks]}


