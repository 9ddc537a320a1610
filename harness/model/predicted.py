"""What the model predicts of a scale sweep, made once, when the sweep ends, and kept in its records
(`scale_sweep.prediction` of the first record): the calibration per adapter, predicted against measured at every
point, the extrapolation on this machine's fitted collectives and to each hardware profile the sweep names, and the
model against published scaling results. A report renders the prediction as it was made; a sweep recorded before
predictions were kept is predicted when it is rendered, from its `comm_n<N>/` (`made`, the same function).

Runs in: the parent (`compare scale`, and `compare report` of an older sweep).

The prediction is plain JSON: numbers, words and lists, no model objects, so that a report of it needs nothing but
the records (harness/reports/prediction.py renders it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.model import VERSION, published
from harness.model import hardware
from harness.model import costmodel as cm
from harness.model.calibration import (UTILISATION, calibrate, comm_records, extrapolate, extrapolate_here,
                                       predict_measured, shares_cores)
from harness.model.points import table
from harness.shared.comm_schedule import Fusion, Zero


def of_sweep(out: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The sweep's prediction: the one its first record keeps, else made now from its `comm_n<N>/`."""
    kept = (records[0].get("scale_sweep") or {}).get("prediction")
    if kept is not None:
        return kept
    problems: list[str] = []
    return made(records, comm_records(out, problems), problems)


def made(records: list[dict[str, Any]], comm: list[dict[str, Any]], problems: list[str]) -> dict[str, Any]:
    """The prediction of the sweep whose records are `records`, calibrated on `comm` (its `compare comm` records;
    `problems`: the comm results that could not be read, said in the report)."""
    sweep = records[0].get("scale_sweep") or {}
    tab = table(records)
    cal = calibrate(records, comm)
    ops = [r for r in comm if r.get("op")]
    out: dict[str, Any] = {
        "version": VERSION, "comm_problems": list(problems),
        "comm_gaps": sorted({r.get("gap_s") or 0.0 for r in ops if r.get("status") == "ok"}),
        "comm_gapped": any(r.get("gap_s") for r in ops),
        "shares_cores": any(shares_cores(p["first"]) for rows in tab.values() for p in rows if p["status"] == "ok"),
        "utilisation": list(UTILISATION), "bounds_from": cm.BOUNDS_FROM, "predict_to": sweep.get("predict_to", 1024),
        "calibration": {label: _calibration(c) for label, c in cal.items()}}
    if not cal:
        return out
    out["rows"] = [_row(r) for r in predict_measured(records, tab, cal)]
    to = out["predict_to"]
    out["here"] = {label: extrapolate_here(c, c["profile"]["batches"][0]["per_rank_batch"], to, out["shares_cores"])
                   for label, c in cal.items()}
    out["profiles"] = [_profile(name, cal, to) for name in sweep.get("profiles") or []]
    checks_problems: list[str] = []
    checks = published.configurations(checks_problems)
    for check in checks:  # the report names each source by its address
        check["sources"] = [{"url": src["url"]} for src in check["sources"] if src.get("url")]
    out["published"] = {"problems": checks_problems, "checks": checks, "slowdowns": published.slowdowns()}
    return out


def _calibration(c: dict[str, Any]) -> dict[str, Any]:
    """One adapter's calibration, as the report says it."""
    sched, coll, batch = c["schedule"], c["collectives"], c["profile"]["batches"][0]
    return {"kind": sched.KIND if sched else None, "stage": sched.stage if isinstance(sched, Zero) else None,
            "comm_backend": sched.comm_backend if sched else None, "fusion": isinstance(sched, Fusion),
            "source": c["source"], "overhead_s": c["overhead_s"],
            "batch": {k: batch[k] for k in ("fwd_s", "bwd_s", "opt_s", "per_rank_batch")},
            "grad_bytes": sum(b for b, _ in c["curve"].grads), "copy_Bps": c["curve"].copy_Bps,
            "collectives": None if coll is None else {
                "fits": [[op, n, lat, bw] for (op, n), (lat, bw) in sorted(coll.fits.items())],
                "unfitted": [[op, n, why] for (op, n), why in sorted(coll.unfitted.items())]}}


def _row(r: dict[str, Any]) -> dict[str, Any]:
    """A predicted-vs-measured row with its step's parts as numbers (its point's contention launch is in the point's
    own records)."""
    row = {k: v for k, v in r.items() if k not in ("step", "first_contention")}
    if "step" in r:
        row.update(exposed_s=r["step"].exposed_s, overhead_s=r["step"].overhead_s)
    return row


def _profile(name: str, cal: dict[str, dict[str, Any]], to: int) -> dict[str, Any]:
    """The extrapolation to hardware profile `name`, per adapter (or why there is none)."""
    try:
        fabric = hardware.load_profile(name)
    except KeyError:
        return {"name": name, "unknown": True}
    except hardware.BadProfile as exc:
        return {"name": name, "bad": str(exc)}
    rows = {}
    for label, c in cal.items():
        batch = c["profile"]["batches"][0]["per_rank_batch"]
        rows[label] = {"batch": batch, "rows": extrapolate(c, fabric, batch, to)}
    return {"name": name, "device": fabric.device, "overlap_slowdown": fabric.overlap_slowdown, "adapters": rows}
