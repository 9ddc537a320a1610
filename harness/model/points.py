"""A scale sweep's measured points, from its records: per adapter and world size, the repeats summarised (throughput
with its interval, the step's mean, median and percentiles, memory, load balance) with speed-ups and efficiency;
what the model is calibrated on and judged against, and what the scale report tabulates.

Runs in: the parent."""

from __future__ import annotations

import statistics
from collections import OrderedDict
from typing import Any

from harness.ground.record import has_intervals
from harness.ground.stats import geomean_interval, percentile, ratio_interval, worst

BASELINE = "single-process"
"""Label of a sweep's baseline row: the plain model in one process, no wrapper (the equivalence reference's
adapter)."""


def _ok(recs):
    return [r for r in recs if r["status"] == "ok" and r.get("samples_per_s")]


def points(records: list[dict[str, Any]]) -> OrderedDict[str, OrderedDict[int, list[dict]]]:
    """label -> world size -> records (every repeat), labels in the order asked for, the baseline first."""
    order = records[0].get("row_order") or []
    out: OrderedDict[str, OrderedDict[int, list[dict]]] = OrderedDict()
    for label in order:
        out[label] = OrderedDict()
    for r in records:
        if r.get("scale") is None:
            continue
        out.setdefault(r["label"], OrderedDict()).setdefault(r["scale"]["point"], []).append(r)
    return OrderedDict((k, OrderedDict(sorted(v.items()))) for k, v in out.items() if v)


def summarise_point(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """One (adapter, world size): medians over repeats, pooled step percentiles, memory, load balance."""
    ok = _ok(recs)
    first = ok[0] if ok else recs[0]
    row: dict[str, Any] = {"label": first["label"], "n": first["scale"]["point"], "status": "ok" if ok else first["status"],
                           "reasons": sorted({r["reason"] for r in recs if r["status"] != "ok" and r["reason"]}),
                           "oversubscribed": bool(first.get("oversubscribed")), "repeats": len(recs),
                           "ok_repeats": len(ok), "first": first}
    if not ok:
        return row
    sps = [r["samples_per_s"] for r in ok]
    pooled = sorted(t for r in ok for t in r["step_times_s"])
    if has_intervals(ok):  # the whole window per launch, with intervals
        row.update(interval=geomean_interval(sps), sps_values=sps)
        row.update(samples_per_s=row["interval"]["estimate"], spread=None)
    else:
        row.update(samples_per_s=statistics.median(sps),
                   spread=(max(sps) - min(sps)) / statistics.median(sps) if len(sps) > 1 else None)
    row.update(
               step_median=percentile(pooled, 50), step_p10=percentile(pooled, 10), step_p90=percentile(pooled, 90),
               step_mean=statistics.fmean(pooled), step_n=len(pooled),
               step_mean_repeats=[statistics.fmean(r["step_times_s"]) for r in ok if r["step_times_s"]], global_batch=first["controls"]["global_batch"],
               per_rank_batch=first["scale"]["per_rank_batch"], processes=first["topology"]["processes"],
               peak_memory_bytes=max(r["peak_memory_bytes"] or 0 for r in ok) or None,
               peak_memory_per_rank=[statistics.median(m) for m in zip(*(r["peak_memory_bytes_per_rank"] for r in ok))],
               max_param_diff=(worst(r["max_param_diff"] for r in ok)
                               if all(r.get("max_param_diff") is not None for r in ok) else None),
               equivalence=first.get("equivalence"))
    balanced = [r["load_balance"] for r in ok if r.get("load_balance")]
    if balanced:
        per_rank = []
        for k in range(len(balanced[0]["per_rank"])):
            per_rank.append({key: statistics.median(b["per_rank"][k][key] for b in balanced)
                             for key in ("step_s", "compute_s", "wait_s")})
        row["balance"] = per_rank
        row["exposed_s"] = max(0.0, row["step_median"] - max(p["compute_s"] for p in per_rank))
        row["wait_spread"] = statistics.median(b["wait_spread"] for b in balanced if b["wait_spread"] is not None) \
            if any(b["wait_spread"] is not None for b in balanced) else None
    return row


def table(records: list[dict[str, Any]]) -> OrderedDict[str, list[dict[str, Any]]]:
    """label -> summarised points with speed-ups and efficiency filled in."""
    pts = points(records)
    base = [summarise_point(v) for v in pts.get(BASELINE, {}).values()]
    base_sps = base[0].get("samples_per_s") if base else None
    out: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
    for label, by_n in pts.items():
        rows = [summarise_point(recs) for recs in by_n.values()]
        one = next((r for r in rows if r["n"] == 1 and r["status"] == "ok"), None)
        for r in rows:
            if r["status"] != "ok":
                continue
            r["speedup_self"] = r["samples_per_s"] / one["samples_per_s"] if one else None
            r["speedup_baseline"] = r["samples_per_s"] / base_sps if base_sps else None
            r["efficiency"] = r["speedup_self"] / r["n"] if one else None
            r["efficiency_baseline"] = r["speedup_baseline"] / r["n"] if base_sps else None
            if one and r.get("sps_values") and one.get("sps_values"):
                r["speedup_interval"] = ratio_interval(r["sps_values"], one["sps_values"])
        out[label] = rows
    return out
