"""A run's rows, as the run report, the tune, the epoch chart and time to target read them: the records grouped per
row and summarised over its launches (throughput with its interval, the step's percentiles, memory, loss, accuracy,
equivalence), and their table.

Runs in: the parent."""

from __future__ import annotations

import statistics
from collections import OrderedDict
from typing import Any

from harness.ground.record import MEASURED, has_intervals, precision_of
from harness.ground.sizes import format_mib
from harness.ground.stats import geomean_interval, percentile, worst
from harness.model import hardware
from harness.reports import host_layout as hosts_report
from harness.reports import palette
from harness.reports import verdict as verdict_mod

SPREAD_FLAG = 0.05  # rows whose samples/s varies by more than this across repeats are flagged


MEMORY_KINDS = {
    "cuda_max_allocated": "torch.cuda.max_memory_allocated (reset after warm-up)",
    "rss_vmhwm_minus_file": ("the resident set's high-water mark (VmHWM, reset after warm-up) minus its file-backed "
                             "pages (RssFile: shared libraries' code, which depends on what a framework imports and "
                             "on the page cache, not on training), i.e. anonymous + shared memory"),
    "rss_maxrss_since_start_minus_file": ("the resident set's peak since the process started (ru_maxrss: resetting "
                                          "VmHWM was not allowed) minus its file-backed pages"),
    "rss_vmhwm": ("the resident set's high-water mark (VmHWM, reset after warm-up), including the pages of shared "
                  "libraries (reports before the file-backed pages were left out)"),
}


MEMORY_SHORT = {"cuda_max_allocated": "CUDA max allocated", "rss_vmhwm_minus_file": "RSS peak less file pages",
                "rss_maxrss_since_start_minus_file": "RSS peak since start less file pages",
                "rss_vmhwm": "RSS high-water mark"}


def memory_kind(rows: list[dict]) -> str:
    """How the rows' peak memory was measured, and on CPU how much file-backed memory it left out per row (the
    largest over its launches and ranks, as its peak is)."""
    kind = rows[0]["first"].get("peak_memory_kind")
    text = MEMORY_KINDS.get(kind, f"`{kind}`")
    left = [f"{r['first'].get('label') or r['first']['adapter']} {r['file_bytes_max'] / 2**20:,.0f}" for r in rows
            if r.get("file_bytes_max") is not None]
    if left:
        text += f"; left out, MiB per rank (max): {', '.join(left)}"
    return text


def fmt(x: float | None, spec: str = ".3g") -> str:
    return "–" if x is None else format(x, spec)


def group(records: list[dict[str, Any]]) -> OrderedDict[str, list[dict[str, Any]]]:
    rows: OrderedDict[str, list[dict]] = OrderedDict()
    for rec in records:
        rows.setdefault(rec["label"], []).append(rec)
    # Rows in the order they were asked for (unavailable rows are recorded first, at plan time); records written
    # before `row_order` existed fall back to the registry's order (palette.legend_of). Ties keep the order of
    # appearance.
    order = records[0].get("row_order") if records else None
    legend = {} if order else palette.legend_of(records)

    def key(item):
        label, recs = item
        if order:
            return order.index(label) if label in order else len(order)
        entry = legend.get(recs[0]["adapter"])
        return entry["place"] if entry else palette.unplaced(legend)

    return OrderedDict(sorted(rows.items(), key=key))


def summarise(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """One table row from an adapter's repeats: medians across repeats, spread, pooled step percentiles. Repeats
    with a measurement (`MEASURED`: ok, or an until-target run that missed its target) all count."""
    ok = [r for r in recs if r["status"] in MEASURED and r.get("samples_per_s")]
    first = ok[0] if ok else recs[0]
    row: dict[str, Any] = {"adapter": first["label"], "launcher": first.get("launcher"),
                           "status": first["status"] if not ok else "ok", "repeats": len(recs), "ok_repeats": len(ok),
                           "measured": bool(ok),
                           "not_reached": sum(r["status"] == "not_reached" for r in ok),
                           "reasons": sorted({r["reason"] for r in recs if r["status"] != "ok" and r["reason"]}),
                           "first": first}
    if not ok:
        row["status"] = recs[0]["status"]
        return row
    sps = [r["samples_per_s"] for r in ok]
    pooled = sorted(t for r in ok for t in r["step_times_s"])
    if has_intervals(ok):
        # Throughput of the whole timed window per launch; the row: their geometric mean with its interval.
        interval = geomean_interval(sps)
        devices = ok[0]["topology"]["devices_used"]
        row.update(samples_per_s=interval["estimate"], interval=interval, spread=None,
                   samples_per_s_per_device=interval["estimate"] / devices)
    else:  # schema 1: as it was always rendered (median of the repeats, their spread)
        row.update(samples_per_s=statistics.median(sps), interval=None,
                   samples_per_s_per_device=statistics.median(r["samples_per_s_per_device"] for r in ok),
                   spread=(max(sps) - min(sps)) / statistics.median(sps) if len(sps) > 1 else None)

    evaluated = [r for r in ok if r.get("eval")]
    row.update(
        step_median=percentile(pooled, 50), step_p10=percentile(pooled, 10), step_p90=percentile(pooled, 90),
        step_n=len(pooled), peak_memory_bytes=max(r["peak_memory_bytes"] or 0 for r in ok) or None,
        # the file-backed pages the peak leaves out, over every launch as the peak is (memory_kind says it)
        file_bytes_max=max((x for r in ok for x in r.get("peak_memory_file_bytes_per_rank") or [] if x is not None),
                           default=None),
        final_loss=statistics.median(r["final_loss"] for r in ok),
        # over the launches that evaluated (one whose evaluation crashed or hung has no figure)
        accuracy=(statistics.median(r["eval"]["accuracy"] for r in evaluated) if evaluated else None),
        target=evaluated[0]["eval"]["target"] if evaluated else None,
        metric=evaluated[0]["eval"].get("metric") if evaluated else None,
        eval_skipped=next((r["eval_skipped"] for r in ok if r.get("eval_skipped")), None),
        target_met=(all(r["eval"]["target_met"] for r in evaluated) if evaluated and evaluated[0]["eval"]["target"]
                    is not None else None),
        max_param_diff=(worst(r["max_param_diff"] for r in ok) if all(r.get("max_param_diff") is not None
                                                                      for r in ok) else None),
        time_to_first_step_s=statistics.median(r["time_to_first_step_s"] for r in ok),
    )
    return row


def metric_label(rows: list[dict[str, Any]]) -> str:
    """The evaluation column's heading: the workload's metric in words ("next-byte accuracy", a user's own), where
    every evaluated row names the same one."""
    names = {row["metric"] for row in rows if row["measured"] and row.get("metric")}
    return names.pop() if len(names) == 1 else "test accuracy"


def accuracy_text(row) -> str:
    if row.get("accuracy") is None:
        return "–"
    mark = "" if row["target_met"] is None else (" ✓" if row["target_met"] else " ✗")
    return f"{row['accuracy']:.4f}{mark}"


def diff_text(row, short: bool = False) -> str:
    d = row.get("max_param_diff")
    eq = (row.get("first") or {}).get("equivalence") or {}
    if d is None:  # nothing compared; where the reference did not run, the cell says so
        reference = (row.get("first") or {}).get("reference_run") or {}
        return "–" if reference.get("status") in (None, "ok") else (
            f"– (no reference: it {reference['status']})" if short else f"– ({eq.get('why_not_checked')})")
    if not eq["checked"]:
        return f"{d:.1e} (not checked{'' if short else ': ' + eq['why_not_checked']})"
    return f"{d:.1e} {'✓' if d <= eq['tolerance'] else '✗'}"


def table_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [summarise(recs) for recs in group(records).values()]


def _unpadded(rows) -> str:
    """", padding included: 18.2 real" where the rows' batches are padded (the records' tokens_per_sample_unpadded)."""
    real = next((row["first"]["tokens_per_sample_unpadded"] for row in rows
                 if row["first"].get("tokens_per_sample_unpadded")), None)
    return f", padding included: {real:.1f} real" if real else ""


def tokens_per_sample(rows) -> int | None:
    """A language model's tokens per sample, where its records carry one (the tables then add tokens/s)."""
    return next((row["first"]["tokens_per_sample"] for row in rows if row["first"].get("tokens_per_sample")), None)


def tokens_text(row, tokens: int) -> str:
    """A row's tokens/s: its samples/s (the geometric mean over launches) times the tokens of a sample, with the
    same interval scaled."""
    interval = row.get("interval")
    if interval:
        return verdict_mod.interval_text({**interval, **{k: interval[k] and interval[k] * tokens
                                                         for k in ("estimate", "lo", "hi")}})
    return f"{row['samples_per_s'] * tokens:,.0f}"


def tflops_text(row) -> str:
    """A row's achieved TFLOP/s per device (its samples/s per device x the FLOPs of a sample) and, where the device's
    peak is known, its MFU."""
    f = row["first"]
    achieved = row["samples_per_s_per_device"] * f["flops_per_sample"] / 1e12
    peak = (hardware.mfu_of(f) or {}).get("peak_tflops")
    return f"{achieved:.3g}" + (f" ({achieved / peak:.1%})" if peak else "")


def flops_note(rows) -> str | None:
    """How the TFLOP/s column was counted, and against what its MFU is judged (or why there is none)."""
    measured = [row for row in rows if row["measured"] and row["first"].get("flops_per_sample")]
    if not measured:
        return None
    f = measured[0]["first"]
    against: dict[str, list[str]] = {}  # each peak (or why there is none) -> the rows judged against it
    why_none: dict[str, None] = {}  # why rows have no peak, in order
    for row in measured:
        mfu = hardware.mfu_of(row["first"]) or {}
        why = mfu.get("why_none", "none known")
        if not mfu.get("peak"):
            why_none[why] = None
        against.setdefault(mfu.get("peak") or f"no peak: {why}", []).append(row["adapter"])
    some_peak = len(why_none) < len(against)  # a row judged against a device's peak
    judged = ("MFU in brackets against " + "; ".join(peak + (f" ({', '.join(labels)})" if len(against) > 1 else "")
                                                     for peak, labels in against.items())
              if some_peak else "no MFU: " + "; ".join(why_none))  # no MFU in the column at all
    return (f"TFLOP/s per device: samples/s per device × {f['flops_per_sample']:,.0f} FLOPs of a sample's forward and "
            f"backward, counted by torch's FlopCounterMode on the real model (matmuls and convolutions; the optimizer "
            f"left out); {judged}.")


def markdown_table(rows: list[dict[str, Any]]) -> str:
    tokens = tokens_per_sample(rows)
    flops = any(row["measured"] and row["first"].get("flops_per_sample") for row in rows)
    head = ("| adapter | launcher | processes × devices each | precision | batch global (per device) | samples/s "
            + (f"| tokens/s ({tokens} a sample{_unpadded(rows)}) " if tokens else "")
            + "| samples/s per device " + ("| TFLOP/s per device (MFU) " if flops else "")
            + "| step time ms median [p10–p90] (n) | peak memory per rank | final loss "
              f"| {metric_label(rows)} | max_param_diff | status |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        f = row["first"]
        if not row["measured"]:
            reason = "; ".join(row["reasons"]) or row["status"]
            lines.append(f"| {row['adapter']} | {row['launcher']} | | | | | | | | | | {'| ' if tokens else ''}"
                         f"{'| ' if flops else ''}| **{row['status']}**: {reason.replace('|', '/')} |")
            continue
        topo, ctl = f["topology"], f["controls"]
        spread = row["spread"]
        flag = f" ⚠ spread {spread:.0%}" if spread is not None and spread > SPREAD_FLAG else (
            f" (±{spread / 2:.0%})" if spread is not None else "")
        if row.get("interval"):
            flag = " " + verdict_mod.interval_text(row["interval"]).split(" ", 1)[1]
        status = status_text(row)
        lines.append(
            f"| {row['adapter']} | {row['launcher']} | {_processes_by_devices(topo)}"
            f"{f' ({hosts_report.nodes_label(topo)})' if hosts_report.spans_hosts(topo) else ''} "
            f"| {precision_of(f)} | {ctl['global_batch']} ({ctl['per_device_batch']}) "
            f"| {row['samples_per_s']:,.0f}{flag} {f'| {tokens_text(row, tokens)} ' if tokens else ''}"
            f"| {row['samples_per_s_per_device']:,.0f} {f'| {tflops_text(row)} ' if flops else ''}"
            f"| {row['step_median'] * 1e3:.2f} [{row['step_p10'] * 1e3:.2f}–{row['step_p90'] * 1e3:.2f}] "
            f"({row['step_n']}) | {format_mib(row['peak_memory_bytes'])} | {fmt(row['final_loss'], '.4f')} "
            f"| {accuracy_text(row)} | {diff_text(row)} | {status} |")
    return "\n".join(lines)


def _processes_by_devices(topo: dict[str, Any]) -> str:
    """"2 × 1": processes × devices each (what the product says: 2 devices in all), as the header reads."""
    processes, devices = topo["processes"], topo["devices_used"]
    if processes and devices % processes == 0:
        return f"{processes} × {devices // processes}"
    return f"{processes} ({devices} devices in all)"


def status_text(row) -> str:
    """"ok", or how many repeats of how many were ok / missed the target (until-target runs)."""
    reached = row["ok_repeats"] - row["not_reached"]
    if not row["not_reached"]:
        return "ok" if reached == row["repeats"] else f"ok {reached}/{row['repeats']}"
    return ", ".join(([f"ok {reached}/{row['repeats']}"] if reached else [])
                     + [f"not reached {row['not_reached']}/{row['repeats']}"])
