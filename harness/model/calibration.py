"""The performance model fitted to what this tool measured: calibration, predicted vs measured, and extrapolation to
a hardware profile (harness/reports/prediction.py puts them in a scale report and in `compare predict`'s output; the
check against published scaling results is harness/model/published.py).

Runs in: the parent; reads the sweep's records, the `compare comm` records kept in `comm_n<N>/` and the hardware
profiles. The arithmetic is harness/model/costmodel.py.

Calibration, per adapter row, only from what this tool measured:
- compute: the row's own world-size-1 point: its compute profile (forward and backward over per-rank batch sizes,
  the optimizer step, the gradients' sizes and ready times; of the repeat with the median compute) and its
  framework overhead (that point's mean step minus the profile's compute); a row without a world-size-1 point
  uses the single-process baseline's profile and no overhead;
- collectives: the row's comm backend's mean time per (collective, world size, size) in the `compare comm` sweep
  at that world size, and latency and bus bandwidth fitted to them;

The model predicts the mean step, and is judged against it: it adds a step's parts, and means add where medians
do not (a step with several collectives, each delayed now and then on shared cores, has a median above the sum of
their medians); the mean step is also what throughput over a run and time to train are made of. The error
against the median step is shown beside it.
- the schedule: what the adapter declared for its knobs (`comm_schedule` in every record).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from harness.model import comm_cost
from harness.model.compute import Compute, ComputeCurve
from harness.model import costmodel as cm
from harness.model.points import BASELINE
from harness.shared.comm_schedule import Replicate, Schedule, from_record

UTILISATION = (0.1, 0.3, 0.5)
"""Fractions of the target device's peak FLOP/s assumed for the extrapolated compute (low, middle, high). Large
well-tuned training reaches 0.4-0.55 of peak; small models far less. The prediction is given for all three."""
def comm_records(out: Path, problems: list[str] | None = None) -> list[dict[str, Any]]:
    """The records of a sweep's comm_n*/ directories; one that cannot be read is skipped, and named in `problems`
    (so that a report says why a world size has no collectives, rather than that none were measured)."""
    from harness.ground.record import RECORDS, read_records, records_file

    recs = []
    for d in sorted(p for p in out.glob("comm_n*") if p.is_dir()):
        path = records_file(d) or d / RECORDS
        try:
            if not path.exists() and not path.is_symlink():
                raise ValueError("it is missing")
            got = read_records(path)
            if not got:
                raise ValueError("no records")
            kinds = sorted({str(r.get("kind", "run")) for r in got} - {"comm"})
            if kinds:
                raise ValueError(f"records of kind {', '.join(kinds)}, not `compare comm` results")
        except (OSError, ValueError) as exc:
            if problems is not None:
                problems.append(f"{path.relative_to(out)} cannot be read ({exc})")
            continue
        if problems is not None:  # a backend's launch that measured no cell: say why, not only that none is there
            problems += [f"{d.name}: the {r.get('backend')} launch at world size {r.get('world_size')} ended "
                         f"{r['status']} ({' '.join(str(r.get('reason') or 'no reason recorded').split())}; "
                         f"{d.name}/report.md)" for r in got if r.get("op") is None and r.get("status") != "ok"]
        recs += got
    return recs


def _ok(records, label, n):
    return [r for r in records if r["label"] == label and r.get("scale") and r["scale"]["point"] == n
            and r["status"] == "ok" and r.get("step_time_s")]


def _mean_step(recs) -> float:
    """The mean step over every timed step of these runs (a run without a mean gives its median)."""
    total = sum(r["step_time_s"].get("mean", r["step_time_s"]["median"]) * r["step_time_s"].get("n", 1) for r in recs)
    return total / sum(r["step_time_s"].get("n", 1) for r in recs)


def median_profile(recs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Rank 0's compute profile of the repeat whose compute is the median of the repeats' (the lower middle one of
    an even number): one disturbed profile must not become the whole model's compute. (In the committed sweeps
    Horovod's first world-size-1 repeat profiled 24-60% slower than the other two, and slower than its own
    step, which contains that compute.)"""
    profiles = sorted((r["compute_profile"][0] for r in recs if r.get("compute_profile")),
                      key=lambda p: p["batches"][0]["compute_s"])
    return profiles[(len(profiles) - 1) // 2] if profiles else None


def shares_cores(rec: dict[str, Any]) -> bool:
    """Communication runs on cores that also compute: a CPU whose every core has a training thread."""
    if rec["topology"]["device"] != "cpu":
        return False
    threads = sum(rec["controls"]["threads_per_rank"])
    return threads >= rec["env"]["cpu_cores_usable"]


def comm_schedule_of(record: dict[str, Any]) -> Schedule | None:
    """The schedule a record keeps (what its adapter declared for its knobs when it ran), typed, with any field that a
    record made before the field existed lacks taken from what the same adapter declares for the same knobs today: a
    framework's defaults are written once, in its adapter, and never restated by the model."""
    recorded = record.get("comm_schedule")
    if not recorded:
        return None
    import adapters

    try:
        declared = adapters.get(record["adapter"])((record.get("controls") or {}).get("knobs") or {}).comm_schedule()
    except Exception:  # noqa: BLE001 - an adapter or knob gone since: the record's own schedule, as it was
        return from_record(recorded)
    if declared is not None and declared.KIND == recorded.get("kind"):
        return from_record({**declared.to_record(), **recorded})
    return from_record(recorded)


def calibrate(records: list[dict[str, Any]], comm: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """label -> {"schedule", "curve", "collectives", "source", "optimizer_state_bytes", ...}."""
    out: dict[str, dict[str, Any]] = {}
    base_profile = median_profile(_ok(records, BASELINE, 1))
    labels = list(dict.fromkeys(r["label"] for r in records if r.get("scale") and r["label"] != BASELINE))
    for label in labels:
        one = _ok(records, label, 1)
        any_ok = [r for r in records if r["label"] == label and r["status"] == "ok" and r.get("scale")]
        if not any_ok:
            continue
        schedule = comm_schedule_of(any_ok[0])
        prof = median_profile(one)
        if prof is not None:
            overhead = max(0.0, _mean_step(one) - prof["batches"][0]["compute_s"])
            n_prof = sum(1 for r in one if r.get("compute_profile"))
            source = "its own world-size-1 point" + (f" (the median of its {n_prof} repeats' profiles)"
                                                     if n_prof > 1 else "")
        elif base_profile:
            prof, overhead, source = base_profile, 0.0, "the single-process baseline (no world-size-1 point)"
        else:
            continue
        entry = {"schedule": schedule, "curve": ComputeCurve.from_profile(prof, overhead), "source": source,
                 "profile": prof, "overhead_s": overhead, "precision": any_ok[0]["controls"]["precision"],
                 "peak_1": max(one[0]["peak_memory_bytes_per_rank"]) if one else None,
                 "param_count": any_ok[0].get("param_count")}
        backend = schedule.comm_backend if schedule else None
        entry["collectives"] = comm_cost.Fitted.from_records(backend, comm) if backend and comm else None
        out[label] = entry
    return out


def predicted_memory(cal: dict[str, Any], n: int, extra_bytes: float = 0.0) -> float | None:
    """Peak memory per rank at n: the world-size-1 peak, with the model states the schedule shards (ZeRO's stages,
    FSDP's full shard) divided over its shard group, plus
    `extra_bytes` a schedule only needs with several ranks (Horovod's fusion buffer)."""
    if cal.get("peak_1") is None or not cal.get("param_count"):
        return None
    prof, params = cal["profile"], cal["param_count"]
    optim = (prof.get("optimizer_state_bytes") or 0) / params
    schedule = cal["schedule"]
    if schedule is None:
        return cal["peak_1"] + extra_bytes
    states = lambda k: cm.model_state_bytes(params, k, schedule.partitions, optim_bytes=optim)  # noqa: E731
    return cal["peak_1"] - states(1) + states(schedule.shard_ranks(n)) + extra_bytes


def contention_ratio(rec: dict[str, Any]) -> float | None:
    """How many times slower the slowest rank computed with every rank computing at once than rank 0 alone, from
    the point's own contention calibration launch (harness/core/sweep.py); None: none was made, or it failed."""
    cal = rec.get("contention") or {}
    return cal.get("ratio") if cal.get("status") == "ok" else None


def scaled(c: Compute, k: float) -> Compute:
    """The same step's compute, every part (and every gradient's ready time) k times as long."""
    return Compute(c.fwd_s * k, c.bwd_s * k, c.opt_s * k, [(b, t * k) for b, t in c.grads], c.overhead_s,
                      c.copy_Bps)


def repeat_spread(r: dict[str, Any]) -> float:
    """(largest - smallest) / mean of a point's per-repeat mean steps."""
    reps = r["measured_repeats_s"]
    return (max(reps) - min(reps)) / statistics.fmean(reps)


def judged(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The points the model is judged on: predicted, above world size 1 (world size 1 is the calibration itself:
    its error is only how the profile's compute and the timed steps differ) and not oversubscribed."""
    return [r for r in rows if "predicted_s" in r and not r["oversubscribed"] and r["n"] > 1]


def within(rows: list[dict[str, Any]], key: str = "error", bound: float = 0.10) -> int:
    """How many of `rows` the model predicts within ±bound (of the mean step: key "error"; of the median:
    "error_median")."""
    return sum(abs(r[key]) <= bound for r in rows)


JUDGE_BOUND = 0.10
"""The model passes a point within ±10% of its measured mean step."""


def judgement(r: dict[str, Any]) -> str:
    """PASS within ±JUDGE_BOUND of the measured mean step; FAIL beyond JUDGE_BOUND plus the point's own 95% interval
    (relative half-width of the Student t interval of its repeats' mean steps); UNDECIDABLE between the two, or
    beyond the bound with fewer than 3 repeats (no interval): the measurement cannot tell."""
    from harness.ground.stats import geomean_interval, half_width

    err = abs(r["error"])
    if err <= JUDGE_BOUND:
        return "pass"
    reps = r.get("measured_repeats_s") or []
    half = half_width(geomean_interval(reps)) if reps else None
    if half is None:
        return "undecidable"
    return "fail" if err > JUDGE_BOUND + half else "undecidable"


def scores(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The model's marks over judged points (above world size 1, not oversubscribed): PASS / FAIL / UNDECIDABLE
    (judgement), the median |error|, how many points the model, the naive sum of parts and "the same as world size
    1" each get within ±JUDGE_BOUND, and per world size Spearman's rho between the measured and the predicted
    ranking of the rows (None below 3 rows)."""
    from harness.ground.stats import spearman

    real = judged(rows)
    marks = {k: 0 for k in ("pass", "fail", "undecidable")}
    for r in real:
        marks[judgement(r)] += 1
    rho = {}
    for n in sorted({r["n"] for r in real}):
        at_n = [r for r in real if r["n"] == n]
        rho[n] = spearman([r["measured_s"] for r in at_n], [r["predicted_s"] for r in at_n])
    return {"points": len(real), **marks,
            "median_abs_error": statistics.median(abs(r["error"]) for r in real) if real else None,
            "within": within(real), "naive_within": within([r for r in real if "naive_error" in r], "naive_error"),
            "same_as_1_within": within([r for r in real if "same_as_1_error" in r], "same_as_1_error"),
            "rho": rho}


def predict_measured(records, tab, cal) -> list[dict[str, Any]]:
    """Every measured (adapter, world size): measured and predicted step, error, and memory."""
    rows = []
    for label, points in tab.items():
        if label == BASELINE or label not in cal:
            continue
        c = cal[label]
        at_1 = [p["step_mean"] for p in points if p["status"] == "ok" and p["n"] == 1]
        for p in points:
            if p["status"] != "ok":
                continue
            rec = p["first"]
            n = rec["topology"]["processes"]
            if isinstance(c["schedule"], Replicate):
                n = rec["topology"]["devices_used"]
            row = {"label": label, "n": p["n"], "oversubscribed": p["oversubscribed"],
                   "measured_s": p["step_mean"], "measured_median_s": p["step_median"],
                   "measured_p10_s": p["step_p10"], "measured_repeats_s": p.get("step_mean_repeats") or [],
                   "measured_mem": p.get("peak_memory_bytes")}
            fusion = 0.0
            try:
                if n > 1 and c["collectives"] is None:
                    raise KeyError("no comm sweep to calibrate with (--no-model, or no comm results)")
                alone = c["curve"].at(rec["controls"]["per_process_batch"])
                shares = shares_cores(rec)
                ratio = contention_ratio(rec) if n > 1 else None
                compute = scaled(alone, ratio) if ratio else alone
                step = cm.predict_step(c["schedule"], compute, c["collectives"], n, shares)
                row.update(predicted_s=step.step_s, error=step.step_s / p["step_mean"] - 1,
                           error_median=step.step_s / p["step_median"] - 1, step=step, contention=ratio,
                           first_contention=rec.get("contention"))
                # The baselines the model must beat: the naive sum of its parts (the world-size-1 compute at this
                # batch, then one all-reduce of every gradient, nothing hidden, no overhead, no contention), and the
                # world-size-1 step as it was measured.
                naive = alone.fwd_s + alone.bwd_s + alone.opt_s + (
                    c["collectives"].time("all_reduce", alone.grad_bytes, n) if n > 1 else 0.0)
                row.update(naive_s=naive, naive_error=naive / p["step_mean"] - 1)
                if at_1:
                    row.update(same_as_1_s=at_1[0], same_as_1_error=at_1[0] / p["step_mean"] - 1)
                if ratio:
                    # What the model predicted before it had the contention calibration: the compute alone.
                    plain = cm.predict_step(c["schedule"], alone, c["collectives"], n, shares).step_s
                    row.update(without_contention_s=plain, without_contention_error=plain / p["step_mean"] - 1)
                if p.get("balance") and n > 1:
                    # Diagnosis, not prediction: the same model with the compute the ranks measured at this world
                    # size (their slowest), which separates compute contention from the communication model.
                    at_n = max(b["compute_s"] for b in p["balance"])
                    k = at_n / alone.total_s
                    with_n = cm.predict_step(c["schedule"], scaled(alone, k), c["collectives"], n, shares).step_s
                    row.update(compute_ratio=k, with_measured_compute_s=with_n,
                               with_measured_compute_error=with_n / p["step_mean"] - 1)
                fusion = cm.fusion_buffer_bytes(c["schedule"], compute, c["collectives"], n)
            except KeyError as exc:
                row["why_not"] = str(exc).strip("'\"")
            mem = predicted_memory(c, p["n"], fusion)
            if mem is not None and p.get("peak_memory_bytes"):
                row.update(predicted_mem=mem, mem_error=mem / p["peak_memory_bytes"] - 1)
            rows.append(row)
    return rows


def target_compute(cal: dict[str, Any], fabric: comm_cost.Fabric, batch: float, utilisation: float) -> Compute | None:
    """One step's compute on the profile's device: FLOPs measured here / (peak x utilisation), split into forward,
    backward and optimizer in the proportions measured here; no framework overhead carried over."""
    curve = cal["curve"]
    flops = curve.flops_per_sample
    precision = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16"}.get(cal["precision"], "fp32")
    peak = fabric.peak_tflops.get(precision)
    if not flops or not peak:
        return None
    here = curve.at(batch)
    total = flops * batch / (peak * 1e12 * utilisation)
    scale = total / here.total_s
    return Compute(here.fwd_s * scale, here.bwd_s * scale, here.opt_s * scale,
                      [(b, t * scale) for b, t in here.grads], 0.0, fabric.copy_Bps)


def extrapolate_here(cal: dict[str, Any], batch: float, to: int, shares: bool) -> list[dict[str, Any]]:
    """Weak scaling on this machine's fitted collectives (extended by ring steps) with the compute measured here:
    efficiency t(1)/t(N) at N = 1, 2, 4, ... `to` (one figure: no utilisation assumption)."""
    if cal["collectives"] is None or not cal["collectives"].fits:
        return []
    coll = cal["collectives"].extended()
    c = cal["curve"].at(batch)
    t1 = cm.predict_step(cal["schedule"], c, coll, 1, shares).step_s
    rows = []
    for n in [2**k for k in range(int(math.log2(to)) + 1)]:
        try:
            e = t1 / cm.predict_step(cal["schedule"], c, coll, n, shares).step_s
        except KeyError:
            return []
        rows.append({"n": n, "low": e, "mid": e, "high": e})
    return rows


def extrapolate(cal: dict[str, Any], fabric: comm_cost.Fabric, batch: float, to: int) -> list[dict[str, Any]]:
    """Weak scaling at `batch` per device on `fabric`: efficiency t(1)/t(N) at N = 1, 2, 4, ... `to`, for each
    assumed utilisation (low, mid, high)."""
    rows = []
    ns = [2**k for k in range(int(math.log2(to)) + 1)]
    for n in ns:
        effs = []
        for u in UTILISATION:
            c = target_compute(cal, fabric, batch, u)
            if c is None:
                return []
            t1 = cm.predict_step(cal["schedule"], c, fabric, 1).step_s
            tn = cm.predict_step(cal["schedule"], c, fabric, n).step_s
            effs.append(t1 / tn)
        rows.append({"n": n, "low": min(effs), "mid": effs[1], "high": max(effs)})
    return rows
