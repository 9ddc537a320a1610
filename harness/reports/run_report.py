"""The report of a `compare run` (records of kind "run"): report.md, throughput/loss/step-time PNGs, a console
table.

Runs in: the parent. `compare report DIR` calls `render(DIR, read_records(DIR/records.jsonl))`; nothing here looks
at anything but the records (their `row_order` and `legend`; for records older than those fields, the adapter
registry's order of rows and colours), so an old run re-renders identically.
"""

from __future__ import annotations

import statistics
from collections import OrderedDict
from pathlib import Path
from typing import Any

from harness.core import design as design_mod
from harness.core.analysis import oriented
from harness.ground.errors import first_sentence
from harness.ground.outdir import save_figure, write_text
from harness.ground.provenance import tuning_line
from harness.ground.record import MEASURED, frozen_note, has_intervals, precision_of
from harness.ground.sizes import format_mib
from harness.ground.stats import INTERVAL_METHOD, geomean_interval, half_width, percentile, worst
from harness.launching import machine
from harness.model import hardware
from harness.reports import epoch, figures, palette, step_report, ttt
from harness.reports import host_layout as hosts_report
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


def memory_kind(firsts: list[dict]) -> str:
    """How the rows' peak memory was measured, and on CPU how much file-backed memory it left out per row."""
    kind = firsts[0].get("peak_memory_kind")
    text = MEMORY_KINDS.get(kind, f"`{kind}`")
    left = [f"{r.get('label') or r['adapter']} {max(b) / 2**20:,.0f}" for r in firsts
            if (b := [x for x in r.get("peak_memory_file_bytes_per_rank") or [] if x is not None])]
    if left:
        text += f"; left out, MiB per rank (max): {', '.join(left)}"
    return text


def _fmt(x: float | None, spec: str = ".3g") -> str:
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

    row.update(
        step_median=percentile(pooled, 50), step_p10=percentile(pooled, 10), step_p90=percentile(pooled, 90),
        step_n=len(pooled), peak_memory_bytes=max(r["peak_memory_bytes"] or 0 for r in ok) or None,
        final_loss=statistics.median(r["final_loss"] for r in ok),
        accuracy=(statistics.median(r["eval"]["accuracy"] for r in ok) if first.get("eval") else None),
        target=first["eval"]["target"] if first.get("eval") else None,
        target_met=(all(r["eval"]["target_met"] for r in ok) if first.get("eval") and first["eval"]["target"]
                    is not None else None),
        max_param_diff=(worst(r["max_param_diff"] for r in ok) if all(r.get("max_param_diff") is not None
                                                                      for r in ok) else None),
        time_to_first_step_s=statistics.median(r["time_to_first_step_s"] for r in ok),
    )
    return row


def _acc(row) -> str:
    if row.get("accuracy") is None:
        return "–"
    mark = "" if row["target_met"] is None else (" ✓" if row["target_met"] else " ✗")
    return f"{row['accuracy']:.4f}{mark}"


def _diff(row, short: bool = False) -> str:
    d = row.get("max_param_diff")
    if d is None:
        return "–"
    eq = row["first"]["equivalence"]
    if not eq["checked"]:
        return f"{d:.1e} (not checked{'' if short else ': ' + eq['why_not_checked']})"
    return f"{d:.1e} {'✓' if d <= eq['tolerance'] else '✗'}"


def table_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [summarise(recs) for recs in group(records).values()]


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
    for row in measured:
        mfu = hardware.mfu_of(row["first"]) or {}
        peak = mfu.get("peak") or f"no peak: {mfu.get('why_none', 'none known')}"
        against.setdefault(peak, []).append(row["adapter"])
    return (f"TFLOP/s per device: samples/s per device × {f['flops_per_sample']:,.0f} FLOPs of a sample's forward and "
            f"backward, counted by torch's FlopCounterMode on the real model (matmuls and convolutions; the optimizer "
            f"left out); MFU in brackets against " + ("; ".join(
                peak + (f" ({', '.join(labels)})" if len(against) > 1 else "") for peak, labels in against.items()))
            + ".")


def markdown_table(rows: list[dict[str, Any]]) -> str:
    tokens = tokens_per_sample(rows)
    flops = any(row["measured"] and row["first"].get("flops_per_sample") for row in rows)
    head = ("| adapter | launcher | processes × devices each | precision | batch global (per device) | samples/s "
            + (f"| tokens/s ({tokens} a sample) " if tokens else "")
            + "| samples/s per device " + ("| TFLOP/s per device (MFU) " if flops else "")
            + "| step time ms median [p10–p90] (n) | peak memory per rank | final loss "
              "| test accuracy | max_param_diff | status |")
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
        status = _status(row)
        lines.append(
            f"| {row['adapter']} | {row['launcher']} | {_processes_by_devices(topo)}"
            f"{f' ({hosts_report.nodes_label(topo)})' if hosts_report.spans_hosts(topo) else ''} "
            f"| {precision_of(f)} | {ctl['global_batch']} ({ctl['per_device_batch']}) "
            f"| {row['samples_per_s']:,.0f}{flag} {f'| {tokens_text(row, tokens)} ' if tokens else ''}"
            f"| {row['samples_per_s_per_device']:,.0f} {f'| {tflops_text(row)} ' if flops else ''}"
            f"| {row['step_median'] * 1e3:.2f} [{row['step_p10'] * 1e3:.2f}–{row['step_p90'] * 1e3:.2f}] "
            f"({row['step_n']}) | {format_mib(row['peak_memory_bytes'])} | {_fmt(row['final_loss'], '.4f')} "
            f"| {_acc(row)} | {_diff(row)} | {status} |")
    return "\n".join(lines)


def _processes_by_devices(topo: dict[str, Any]) -> str:
    """"2 × 1": processes × devices each (what the product says: 2 devices in all), as the header reads."""
    processes, devices = topo["processes"], topo["devices_used"]
    if processes and devices % processes == 0:
        return f"{processes} × {devices // processes}"
    return f"{processes} ({devices} devices in all)"


def _status(row) -> str:
    """"ok", or how many repeats of how many were ok / missed the target (until-target runs)."""
    reached = row["ok_repeats"] - row["not_reached"]
    if not row["not_reached"]:
        return "ok" if reached == row["repeats"] else f"ok {reached}/{row['repeats']}"
    return ", ".join(([f"ok {reached}/{row['repeats']}"] if reached else [])
                     + [f"not reached {row['not_reached']}/{row['repeats']}"])


def target_note(rows) -> str | None:
    """What a ✗ in the accuracy column was judged against (only where one shows): the workload's target, the run
    that reaches it, and whether this run was as long."""
    missed = [row for row in rows if row["measured"] and row.get("target_met") is False]
    if not missed:
        return None
    ev, ctl = missed[0]["first"]["eval"], missed[0]["first"]["controls"]
    metric = ev.get("metric", "test accuracy")
    text = (f"✗ in the accuracy column ({', '.join(row['adapter'] for row in missed)}): below {ev['target']:g}, the "
            f"{metric} the workload's default run reaches")
    if ev.get("default_steps") is None:
        return text + "."
    ran = ctl["warmup"] + ctl["steps"]
    text += f" ({ev['default_steps']} steps at global batch {ev['default_global_batch']})"
    if ran < ev["default_steps"]:
        designed = (missed[0]["first"].get("design") or {}).get("components") is not None
        return text + (f"; this run trained {ran} steps, too few to reach it, so the ✗ says the run was short, not "
                       f"that a backend failed to learn ("
                       + ("its steps per launch were designed for the narrowest intervals, see Design; --steps "
                          "fixes them" if designed else "leave --steps out for the default") + ").")
    return text + f"; this run trained {ran} steps at global batch {ctl['global_batch']}."


def equivalence_notes(rows) -> list[str]:
    """Why a row shows ✗ in the max_param_diff column, where the run found out: a model with dropout
    (harness/core/model_check.py), or the parameters that differ most and what the backend does with a parameter a
    step left without a gradient (harness/core/assemble.py: why_differs). Rows with the same reason share a note."""
    by_reason: dict[str, list[str]] = {}
    for row in rows:
        why = row["measured"] and row["first"]["equivalence"].get("why_failed")
        if why:
            by_reason.setdefault(why, []).append(row["adapter"])
    return [f"✗ in the max_param_diff column ({', '.join(labels)}): {why}." for why, labels in by_reason.items()]


def cut_short(records: list[dict[str, Any]]) -> str | None:
    """The launches a run planned and has no record of, where nothing recorded says why (a run killed, or a machine
    that stopped, writes no `not_run` records): its rows that never ran, and the rounds others never reached. Every
    round runs every row, so a row without a round that another row has was cut off. None when none is missing."""
    if not records or records[0].get("kind", "run") != "run" or any(r.get("run_interrupted") for r in records):
        return None
    order = (next((r.get("row_order") for r in records if r.get("row_order")), None)
             or list(dict.fromkeys(r["label"] for r in records)))  # records older than row_order
    have: dict[str, set[int]] = {}
    for r in records:
        have.setdefault(r["label"], set()).add(int(r["repeat"]))
    launched = [int(r["repeat"]) for r in records if r["status"] != "unavailable"]  # those are written up front
    if not launched:
        return None
    rounds = range(max(launched) + 1)
    unavailable = {r["label"] for r in records if r["status"] == "unavailable"}  # a row for every round
    order = [label for label in order if label not in unavailable]
    missing = []
    for label in order:
        gone = [k + 1 for k in rounds if k not in have.get(label, ())]
        if label not in have:
            missing.append(f"{label} (no launch at all)")
        elif gone:
            missing.append(f"{label} (round{'s' if len(gone) > 1 else ''} {', '.join(map(str, gone))})")
    if not missing:
        return None
    return (f"never run: {', '.join(missing)}; no record says the run was interrupted, so it was stopped without a "
            f"word (kill -9, the machine) after its last record")


def _notes(rows, records) -> list[str]:
    notes = []
    for note in (target_note(rows), *equivalence_notes(rows), flops_note(rows)):
        if note:
            notes.append(note)
    stopped = next((r["run_interrupted"] for r in records if r.get("run_interrupted")), None)
    if stopped:
        never = [row["adapter"] for row in rows if row["status"] == "not_run"]
        notes.append(f"**The run was interrupted {stopped}**: "
                     + (f"{', '.join(never)} never ran." if never else "every adapter had run at least once."))
    cut = cut_short(records)
    if cut:
        notes.append(f"**The run ended before all its launches**: {cut}.")
    notes += hosts_report.note(records)
    notes += machine.note(records, lambda r: f"{r['label']}#{r['repeat']}")
    noisy = [f"{r['label']}#{r['repeat']} ({', '.join(r['noise']['flags'])})" for r in records
             if (r.get("noise") or {}).get("flags")]
    if noisy:
        notes.append("**Launches measured under interference** (read from /proc/stat over each timed window; kept in "
                     "every figure, so their rows' intervals are wider): " + "; ".join(noisy) + ".")
    if any(r.get("oversubscribed") for r in records):
        f = records[0]
        notes.append(f"**Oversubscribed**: more processes than the {f['env']['cpu_cores_usable']} usable cores "
                     f"(--oversubscribe): the ranks time-share the cores, so throughput and efficiency here are not "
                     f"what {f['world_size']} real devices would give.")
    by_precision: dict[str, list[str]] = {}
    for row in rows:
        if row["measured"]:
            by_precision.setdefault(precision_of(row["first"]), []).append(row["adapter"])
    for label, names in by_precision.items():
        frameworks = {r["first"]["adapter"] for r in rows if r["adapter"] in names}
        if label != "fp32" and len(frameworks) > 1:
            notes.append(f"Same precision ({label}): {', '.join(names)}: differences between these rows come from "
                         "the frameworks, not from mixed precision itself.")
    for row in rows:
        f = row["first"]
        info = f.get("adapter_info") or {}
        if info.get("note"):
            notes.append(f"**{row['adapter']}**: {info['note']}.")
        if row["measured"] and precision_of(f) != "fp32":
            notes.append(f"**{row['adapter']}** runs in {precision_of(f)}: compare it with rows of "
                         f"the same precision and compression, not silently with plain fp32 ones.")
        flags = records[0]["env"].get("cpu_flags", [])
        if (row["measured"] and f["controls"]["precision"] == "bf16" and f["topology"]["device"] == "cpu"
                and not {"avx512_bf16", "amx_bf16"} & set(flags)):
            notes.append(f"**{row['adapter']}**: this CPU has no native bf16 (no avx512_bf16 or AMX), so bf16 "
                         "arithmetic is emulated and slower than fp32 here; on such a CPU mixed precision "
                         "measures the emulation, not what it does on a GPU.")
        reserved = [max(b) for r in records if r["label"] == row["adapter"] and r["status"] in MEASURED
                    and (b := [x for x in r.get("peak_memory_cuda_reserved_bytes_per_rank") or [] if x is not None])]
        host = [max(b) for r in records if r["label"] == row["adapter"] and r["status"] in MEASURED
                and (b := [x for x in r.get("peak_memory_host_bytes_per_rank") or [] if x is not None])]
        if reserved or host:
            notes.append(f"**{row['adapter']}** memory beside the allocated peak (largest rank, largest launch): "
                         + ", ".join(part for part in (
                             f"CUDA reserved by the allocator {format_mib(max(reserved))}" if reserved else "",
                             f"host (RSS peak less file pages: offloaded state, pinned buffers) "
                             f"{format_mib(max(host))}" if host else "") if part) + ".")
        skipped = [r.get("skipped_steps_timed") or 0 for r in records if r["label"] == row["adapter"]
                   and r["status"] in MEASURED]
        if any(skipped):
            notes.append(f"**{row['adapter']}**: its fp16 loss scaler skipped the optimizer step at "
                         f"{', '.join(map(str, skipped))} of the {f['controls']['steps']} timed steps of its launches "
                         f"(gradient overflow while the scale settles): skipped steps are cheaper, so its samples/s "
                         f"is optimistic; more warm-up (`--warmup`) lets the scale settle before the clock starts.")
        compiled = [r["compile"] for r in records if r["label"] == row["adapter"] and r["status"] in MEASURED
                    and r.get("compile")]
        if compiled:
            notes.append(compile_note(row["adapter"], compiled))
        if row.get("spread") is not None and row["spread"] > SPREAD_FLAG:
            notes.append(f"**{row['adapter']}**: samples/s varied by {row['spread']:.0%} across "
                         f"{row['ok_repeats']} repeats (> {SPREAD_FLAG:.0%}): treat its figure with care.")
        for r in records:
            if r["label"] == row["adapter"] and r.get("shutdown_error"):
                notes.append(f"**{r['label']}** repeat {r['repeat']}: the launch ended badly {r['shutdown_error']}"
                             f" (its measurements are complete and kept).")
            if r["label"] == row["adapter"] and r.get("failed_parts"):
                for part, why in r["failed_parts"].items():
                    notes.append(f"**{r['label']}** repeat {r['repeat']}: its {part} did not finish ({why}); its "
                                 f"timed measurement was complete before it began and is kept.")
            if r["label"] == row["adapter"] and r["status"] in ("failed", "timeout") and r.get("log_tail"):
                tail = "\n".join(r["log_tail"].splitlines()[-15:])
                notes.append(f"**{r['label']}** repeat {r['repeat']} {r['status']}: {r['reason']}\n\n"
                             f"  ```\n{_indent(tail)}\n  ```")
    return notes


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def _controls(rows) -> list[str]:
    ok = [r for r in rows if r["measured"]]
    if not ok:
        return ["No adapter ran."]
    f = ok[0]["first"]
    ctl, eq = f["controls"], f["equivalence"]
    cfg = f.get("until_target")
    lines = [
        f"- Workload `{f['workload']}`: {f.get('data', {}).get('source', '')}; {f.get('param_count', 0):,} "
        f"parameters{frozen_note(f)}; options {ctl['workload_options']}.",
        f"- Global batch {ctl['global_batch']} for every adapter; learning rate {ctl['lr']:g} ({ctl['lr_rule']}); "
        f"seed {ctl['seed']}; same initial weights and data order everywhere"
        + ("; the loss is over a counted number of items, and each rank divides its sum by the count's mean over the "
           "ranks (one all-reduce of the count a step), as a single process divides by the global batch's count."
           if ctl.get("loss_normalisation") == "global count" else "."),
        ttt.controls(cfg, (f.get("eval") or {}).get("test_samples")) if cfg else
        f"- {ctl['warmup']} warm-up steps discarded, then {ctl['steps']} timed steps per repeat; per-step time is "
        + ("the slowest rank's; samples/s of a launch = samples over its whole timed window (global batch / mean "
           "step time: what a training job gets; the median of a multi-modal step-time distribution jumps between "
           "its modes); a row's samples/s is the geometric mean over its launches with a "
           f"{INTERVAL_METHOD}; the step-time column describes the distribution." if ok[0].get("interval")
           is not None or has_intervals([ok[0]["first"]]) else
           "the slowest rank's; samples/s = global batch / median step time."),
        f"- Equivalence: parameters after {eq['steps']} steps vs {eq['reference']}; fp32 tolerance "
        f"{eq['tolerance']:g}.",
        f"- Peak memory per rank over the timed steps (the table shows the largest rank's): "
        f"{memory_kind([r['first'] for r in ok])}.",
        "- Threads per rank (torch intra-op), set explicitly for every launcher:",
    ]
    for row in ok:
        c = row["first"]["controls"]
        knobs = ", ".join(f"{k}={v}" for k, v in c["knobs"].items()) or "defaults"
        bound = ""
        if c.get("bind_cores"):
            bound = "; cores per rank " + " | ".join(",".join(map(str, a or [])) for a in
                                                      row["first"].get("cpu_affinity_per_rank") or [])
        resolved = (row["first"].get("adapter_info") or {}).get("resolved")
        used = ("; as the framework resolved them in rank 0: " + ", ".join(f"{k}={v}" for k, v in resolved.items())
                if isinstance(resolved, dict) and resolved else "")
        lines.append(f"  - {row['adapter']}: threads {c['threads_per_rank']}, OMP_NUM_THREADS="
                     f"{c['omp_num_threads_env']}{bound}; knobs: {knobs}{used}")
    bind = {row["first"]["controls"].get("bind_cores") for row in ok} - {None}
    if bind == {True}:
        lines.append("- Every process bound to its own share of the usable cores (--bind-cores), all its threads.")
    elif bind == {False}:
        lines.append("- Processes not bound to cores: the OS places their threads (--bind-cores binds them).")
    return lines


def provenance(records) -> list[str]:
    r = records[0]
    e = r["env"]
    gpus = ", ".join(e.get("gpus", [])) or "none"
    return [
        f"- Command: `{r['command']}`",
        f"- Run: {r['run_id']} at {r['time_utc']}; git commit {e.get('git_commit')}",
        f"- Hardware: {e['cpu_model']} ({' '.join(e.get('cpu_flags', [])) or 'no flags read'}), "
        f"{e['cpu_cores_usable']} usable cores, "
        f"{e['memory_total_bytes'] / 2**30:.0f} GiB RAM; GPUs: {gpus}",
        f"- Software: Python {e['python']}, torch {e['torch']}"
        + (f", CUDA {e['cuda']}, NCCL {e.get('nccl_version')}" if e.get("cuda") else "")
        + f"; distributed backends built in: {', '.join(k for k, v in e['distributed'].items() if v)}; "
        f"{e['platform']}",
        *tuning_line(e),
        *row_env_lines(records),
        "- Load average (1 min) before each launch: " + ", ".join(
            f"{r['label']}#{r['repeat']} {r['load_avg_before'][0]:.2f}" for r in records if r.get("load_avg_before")),
    ]


def row_env_lines(records) -> list[str]:
    """Rows run with another interpreter or extra variables (`python=PATH`, `env.NAME=VALUE`), as recorded: an A/B
    inside one run, paired within its rounds like every other pair."""
    seen: dict[str, dict[str, Any]] = {}
    for r in records:
        if r.get("row_env") and r["label"] not in seen:
            seen[r["label"]] = r["row_env"]
    return [f"- Row environment of {label}: " + "; ".join(
        ([f"Python {e['python_version']}, torch {e['torch']} at {e['python']}"] if e.get("python") else [])
        + ([", ".join(f"{k}={v}" for k, v in e["env"].items())] if e.get("env") else [])) for label, e in seen.items()]


_PHASE_HEADS = {"launcher": "launcher", "python": "python", "imports": "imports", "init": "init", "setup": "setup",
                "gate": "gate", "warmup": "warm-up", "timed": "timed", "profile": "profile", "eval": "eval",
                "breakdown": "breakdown", "write": "result", "shutdown": "shutdown"}
_OPTIONAL_PHASES = ("profile", "breakdown")
"""Phases a launch has only when asked (`compare scale`'s compute profile, --breakdown): a column only then."""


def time_breakdown(records: list[dict[str, Any]]) -> list[str]:
    """Seconds per phase of each row's launches (median over repeats), and the run's own wall time, from the
    phase marks the ranks and the parent recorded. Records written before phases were recorded: nothing."""
    timed = [r for r in records if r.get("phases_s")]
    if not timed:
        return []
    heads = {k: v for k, v in _PHASE_HEADS.items()
             if k not in _OPTIONAL_PHASES or any(k in r["phases_s"] for r in timed)}
    pipelined = ttt.settings(records) is None
    gate = ("`gate`: waiting for the previous launch to end, since each launch starts while the previous one "
            "evaluates and shuts down, and is let into its warm-up only when that one has ended" if pipelined else
            "`gate`: zero, since in an until-target run each launch starts only once the previous one has ended; "
            "`timed`: every step, the periodic evaluations between them included")
    lines = ["Seconds per phase of one launch (median over repeats; each phase ends when its slowest rank is done; "
             "`launcher`: from starting the command until the first rank process exists; `init`: joining the "
             f"group; `setup`: model, wrapper, data; {gate}; `shutdown`: from the last result until every process "
             "of the launch is gone).",
             "", "| adapter | " + " | ".join(heads.values()) + " | launch wall |",
             "|---|" + "---|" * (len(heads) + 1)]
    for label, recs in group(timed).items():
        med = {k: statistics.median(r["phases_s"].get(k, 0.0) for r in recs) for k in heads}
        wall = statistics.median(r["wall_time_s"] for r in recs)
        lines.append(f"| {label} | " + " | ".join(f"{med[k]:.2f}" for k in heads) + f" | {wall:.2f} |")
    starts = [r["launch_wall"] for r in records if r.get("launch_wall")]
    ends = [r["launch_wall"] + r["wall_time_s"] for r in records if r.get("launch_wall")]
    first = records[0]
    if starts and first.get("started_wall"):
        total = max(ends) - first["started_wall"]
        measured = sum(r["phases_s"].get("warmup", 0) + r["phases_s"].get("timed", 0) for r in timed)
        launches = sum(r["wall_time_s"] for r in timed)
        ref = next((r["reference_run"] for r in records if r.get("reference_run")), None)
        lines += ["", f"From `compare` starting to its last launch ending: {total:.1f} s (the report and plots come "
                      f"after). Warm-up and timed steps: {measured:.1f} s of it."
                  + (f" Checking the request and the adapters: {ref['launch_wall'] - first['started_wall']:.1f} s; "
                     f"the single-process reference run: {ref['wall_time_s']:.1f} s." if ref else "")
                  + f" The {len(timed)} launches of the table took {launches:.1f} s together"
                  + (", more than their share of the run because each one's start-up overlapped the previous one's "
                     "end." if pipelined else ", one after the other.")]
    return lines


def compile_note(label: str, compiled: list[dict[str, Any]]) -> str:
    """What torch.compile cost a row: its compile time is apart from the timed steps unless a graph was compiled
    inside the timed window, which its samples/s then includes."""
    seconds = statistics.median(c["compile_s"] for c in compiled)
    text = (f"**{label}**: torch.compile built {max(c['graphs'] for c in compiled)} graph(s) in {seconds:.1f} s "
            f"(slowest rank, median over its {len(compiled)} launch(es))")
    inside = [c for c in compiled if c["graphs_timed"]]
    if not inside:
        return text + ", all during the warm-up: not in its samples/s, but in its launch's wall time."
    return text + (f"; in {len(inside)} of its launches {max(c['graphs_timed'] for c in inside)} graph(s) of those "
                   f"(up to {max(c['compile_s_timed'] for c in inside):.1f} s) were compiled inside the timed window, "
                   f"which its samples/s includes: more warm-up (`--warmup`) moves them out of the window.")


def render(out: Path, records: list[dict[str, Any]]) -> Path:
    rows = table_rows(records)
    cfg = ttt.settings(records)
    analysis = verdict_mod.analyse(records) if cfg is None and has_intervals(records) else None
    plots = plot(out, records, rows)
    if analysis is not None:
        plots += pairs_plot(out, records, analysis)
    epochs = epoch.epoch_rows(records, rows)
    epoch_png = epoch.plot(out, records, epochs)
    r0 = records[0]
    ws = r0["world_size"]
    hw = r0["env"]["gpus"][0] if r0["env"].get("gpus") else f"{r0['env']['cpu_cores_usable']}-core CPU"
    over = " (oversubscribed)" if r0.get("oversubscribed") else ""
    until = f" until {cfg['metric']} ≥ {cfg['target']:g}" if cfg else ""
    md = [f"# {r0['workload']}{until}: {', '.join(group(records))} at world size {ws}{over} on {hw}", ""]
    joined = _joined(out, records) if analysis is not None else None
    if isinstance(joined, str):
        md += ["## Verdict over the sessions", "", f"Not made: {joined}.", ""]
    elif joined is not None:
        from harness.reports import sessions

        md += [f"## Verdict over {len(joined['sessions'])} sessions", ""] + sessions.markdown(joined)
        sessions.remember(joined, records, out)
    if analysis is not None:
        md += ["## Verdict" if joined is None else "## This session alone", ""] + verdict_mod.markdown(analysis) \
            + precision_lines(records, analysis)
    if cfg:
        trows = ttt.table_rows(records, group(records))
        plots = ttt.plots(out, records, trows, cfg) + plots
        md += [ttt.markdown_table(trows, cfg), ""] + [x for line in ttt.verdict(trows, cfg) for x in (line, "")]
        md += ["## Throughput, memory and equivalence", ""]
    md += [markdown_table(rows), ""]
    notes = _notes(rows, records)
    if notes:
        md += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    order = list(group(records))
    steps = step_report.section(records, analysis, order)
    if steps:
        md += ["## Where a step's time goes", ""] + steps
        png = step_report.plot(out, records, order)
        if png is not None:
            plots.append(png)
    dtypes = step_report.dtypes_section(records, analysis, order)
    if dtypes:
        md += ["## Dtypes each backend holds", ""] + dtypes
    if epochs:
        md += ["## Time per epoch", ""] + epoch.section(epochs) + [""]
        if epoch_png is not None:
            plots.append(epoch_png)
    md += ["## Controls", ""] + _controls(rows) + [""]
    timing = time_breakdown(records)
    if timing:
        md += ["## Where the time went", ""] + timing + [""]
    md += ["## Provenance", ""] + provenance(records) + [""]
    if plots:
        md += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots] + [""]
    elif not figures.available():
        md += ["## Plots", "", figures.why_none(), ""]
    path = out / "report.md"
    write_text(path, "\n".join(md))
    return path


def _joined(out: Path, records: list[dict[str, Any]]) -> dict[str, Any] | str | None:
    """The verdict over the sessions a run joined (`compare run --join`: its sessions.json), a line saying why it
    cannot be made, or None for a run that joined nothing."""
    from harness.core import joins
    from harness.reports import sessions

    try:
        if joins.manifest(out) is None:
            return None
        loaded = joins.load(out, own=records)
        joins.check(loaded)
    except joins.NotJoinable as exc:
        return str(exc)
    return sessions.analyse(loaded) if len(loaded) >= 2 else None


def precision_lines(records: list[dict[str, Any]], analysis: dict[str, Any]) -> list[str]:
    """How a run of rounds ended (the default, or `--precision`): the rounds it took and why it stopped, and with
    --precision whether every pair reached the target."""
    mode = records[0].get("precision_mode")
    if not mode:
        return []
    design = records[0].get("design")
    if design and mode.get("target") is not None:
        return _precision_lines(records, analysis, mode) + [design_mod.design_line(design), ""]
    return _precision_lines(records, analysis, mode)


def _precision_lines(records: list[dict[str, Any]], analysis: dict[str, Any], mode: dict[str, Any]) -> list[str]:
    if mode.get("target") is None:  # the default: 3 rounds, then as many as fit the budget
        how = {"budget": f"the next would have ended past the {mode['budget_s']:g} s budget",
               "max_rounds": "the most rounds a run may take were run",
               "interrupted": "the run was interrupted"}.get(mode["ended"], mode["ended"])
        design = records[0].get("design")
        return [f"Rounds: {mode['rounds']} in {mode['elapsed_s']:.0f} s (at least {mode.get('least', 3)}, then "
                f"as many as fit the budget); {how}. `--repeats N` fixes the count; `--precision 5%` sizes the "
                f"rounds for every pair's interval to be that narrow.", ""] + ([design_mod.design_line(design), ""] if design
                                                                      else [])
    target = f"±{mode['target'] * 100:g}%"
    widest = mode.get("widest")
    if mode.get("rule") == "two-stage":
        return _two_stage_lines(mode, analysis, target)
    # Runs before the criterion was recorded stopped on the ratios to the baseline (95% each); later ones on every
    # pair's simultaneous interval (Bonferroni over the pairs)
    pairs = mode.get("criterion") == "simultaneous"
    what = "every pair's simultaneous interval" if pairs else "every ratio's interval"
    how = {"resolved": f"{what} reached {target}",
           "budget": f"the budget of {mode['budget_s']:g} s was spent before {what} reached {target}",
           "max_rounds": "the most rounds a run may take were run",
           "interrupted": "the run was interrupted"}.get(mode["ended"], mode["ended"])
    if pairs:
        open_ = [f"{p['a']}/{p['b']}" for p in analysis["pairs"]
                 if (p["simultaneous"]["half_width"] or 1.0) > mode["target"]]
    else:
        open_ = [k for k, r in analysis["ratios"].items() if (half_width(r) or 1.0) > mode["target"]]
    lines = [f"Precision mode (`--precision {mode['target'] * 100:g}%`): {mode['rounds']} round(s) in "
             f"{mode['elapsed_s']:.0f} s; {how}"
             + (f" (widest: {widest[0]} ±{widest[1]:.1%})." if widest else ".")]
    if open_:
        lines[0] += f" Not resolved to {target}: {', '.join(open_)}."
    return lines + [""]


def _two_stage_lines(mode: dict[str, Any], analysis: dict[str, Any], target: str) -> list[str]:
    """How a two-stage `--precision` run ended (harness/core/comparison.py: _rounds)."""
    pilot, planned, k, m = mode["pilot_rounds"], mode.get("planned_rounds"), mode["rounds"], len(analysis["pairs"])
    head = (f"Precision mode (`--precision {mode['target'] * 100:g}%`, two stages): {k} round(s) in "
            f"{mode['elapsed_s']:.0f} s. ")
    if planned is None:
        how = {"interrupted": "the run was interrupted", "max_rounds": "the most rounds a run may take were run"}.get(
            mode["ended"], f"the budget of {mode['budget_s']:g} s was spent")
        return [head + f"The pilot ({pilot} rounds) did not end: {how}, so the intervals are the ordinary ones over "
                       "the rounds that ran.", ""]
    ran = (f"all {planned} ran" if k >= planned else
           f"the budget of {mode['budget_s']:g} s was spent after {k}" if mode["ended"] == "budget" else
           f"{k} ran ({'the run was interrupted' if mode['ended'] == 'interrupted' else mode['ended']})")
    text = (head + f"A pilot of {pilot} rounds estimated every pair's variance, which fixed {planned} rounds in all "
            f"for every pair's simultaneous interval (Bonferroni over the {m} pair{'s' if m != 1 else ''}) to reach "
            f"{target}; {ran}. Every paired interval takes the pilot's variance ({pilot - 1} degrees of freedom; "
            "Stein 1945), so intervals cover, and differences are called falsely, at the stated 95% and 5% whatever "
            "the variance turned out to be: the rounds are never stopped by how narrow the intervals happen to be.")
    widest = mode.get("widest")
    if widest:
        text += f" Widest simultaneous interval: {widest[0]} ±{widest[1]:.1%}."
    open_ = [f"{p['a']}/{p['b']}" for p in analysis["pairs"] if (p["simultaneous"]["half_width"] or 1.0) >
             mode["target"]]
    if open_:
        text += f" Not resolved to {target}: {', '.join(open_)}."
    if not analysis["blocked"]:
        text += (f" Rounds are incomplete ({analysis['why_unblocked']}): the pairs are analysed unpaired (Welch), "
                 "which the two-stage error statement does not cover.")
    return [text, ""]


def console_verdict(records: list[dict[str, Any]], out: Path | None = None) -> list[str]:
    """The verdict's lines for the terminal, first thing after the progress (markup-escaped); with `out`, a run
    that joined earlier sessions gives the verdict over them first."""
    from rich.markup import escape

    if ttt.settings(records) or not has_intervals(records):
        return []
    analysis = verdict_mod.analyse(records)
    joined = _joined(out, records) if out is not None else None
    head: list[str] = []
    if isinstance(joined, str):
        head = [f"Verdict over the sessions not made: {joined}.", "This session alone:"]
    elif joined is not None:
        from harness.reports import sessions

        head = [f"Over {len(joined['sessions'])} sessions:"] + sessions.console_lines(joined) + ["This session alone:"]
    return [escape(line.replace("**", "")) for line in head + analysis["lines"] + precision_lines(records, analysis)
            if line]


def plot(out: Path, records: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[Path]:
    plt = figures.pyplot()
    if plt is None:
        return []

    ok = [r for r in rows if r["measured"]]
    if not ok:
        return []
    r0 = records[0]
    title = f"{r0['workload']}, world size {r0['world_size']}, {r0['env']['cpu_cores_usable']}-core " + (
        r0["env"]["gpus"][0] if r0["env"].get("gpus") else "CPU")
    paths = []
    legend = palette.legend_of(records)

    fig, ax = plt.subplots(figsize=(7, 0.6 * len(ok) + 1.5))
    labels = [f"{r['adapter']} ({precision_of(r['first'])})" for r in ok]
    sps = [r["samples_per_s"] for r in ok]
    gb = [r["first"]["controls"]["global_batch"] for r in ok]
    notes = [""] * len(ok)
    if all(r.get("interval") for r in ok):  # schema 2: the 95% interval over launches (none below 2 launches)
        # a row without an interval gets no whisker (a zero-width one reads as a very tight interval): its bar says
        # how many launches it has instead
        spans = [(r["interval"]["lo"], r["interval"]["hi"]) for r in ok]
        drawn = [i for i, (a, b) in enumerate(spans) if a is not None and b is not None]
        lo = [sps[i] - spans[i][0] if i in drawn else 0.0 for i in range(len(ok))]
        hi = [spans[i][1] - sps[i] if i in drawn else 0.0 for i in range(len(ok))]
        notes = ["" if i in drawn else f" (n={r['interval']['n']}: no interval)"
                 for i, r in enumerate(ok)]
        whiskers = ("; whiskers: 95% interval over launches" if drawn else
                    "; one launch per row: no interval, no whiskers")
    else:
        lo = [s - g / r["step_p90"] for s, g, r in zip(sps, gb, ok)]
        hi = [g / r["step_p10"] - s for s, g, r in zip(sps, gb, ok)]
        drawn = list(range(len(ok)))
        whiskers = "; whiskers: p90..p10 step time"
    ax.barh(labels, sps, color=[palette.colour(r["adapter"], legend) for r in ok])
    if drawn:
        ax.errorbar([sps[i] for i in drawn], drawn, xerr=[[lo[i] for i in drawn], [hi[i] for i in drawn]],
                    fmt="none", ecolor="black", capsize=4)
    for i, s in enumerate(sps):
        ax.text(s + hi[i], i, f"  {s:,.0f}{notes[i]}", va="center", ha="left", fontsize=9)  # right of the whisker
    ax.invert_yaxis()
    ax.set_xlabel(f"samples/s (global{whiskers})")
    ax.set_title(f"Throughput: {title}", fontsize=10)
    ax.margins(x=0.45 if any(notes) else 0.25)  # room for "n=1: no interval" beside the longest bar
    fig.tight_layout()
    paths.append(out / "throughput.png")
    save_figure(fig, paths[-1], 110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    style = palette.styles([r["adapter"] for r in ok], legend)
    curves: dict[tuple, str] = {}
    for r in ok:
        curve = r["first"]["loss_curve"]
        same = curves.setdefault(tuple(round(v, 4) for v in curve), r["adapter"])
        # rows that trained alike (every fp32 backend does, to rounding) overlap: the legend says so
        label = r["adapter"] if same == r["adapter"] else f"{r['adapter']} (same curve as {same})"
        ax.plot(range(1, len(curve) + 1), curve, label=label, linewidth=1, color=palette.colour(r["adapter"], legend),
                linestyle=style[r["adapter"]])
    ax.set_xlabel("step (warm-up included)")
    ax.set_ylabel("training loss (global batch)")
    ax.set_title(f"Loss: {title}", fontsize=10)
    ax.legend()
    fig.tight_layout()
    paths.append(out / "loss.png")
    save_figure(fig, paths[-1], 110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 0.6 * len(ok) + 1.5))
    data = [[t * 1e3 for rec in records if rec["label"] == r["adapter"] and rec["status"] in MEASURED
             for t in rec["step_times_s"]] for r in ok]
    ax.boxplot(data, orientation="horizontal", tick_labels=[r["adapter"] for r in ok], whis=(10, 90), showfliers=False)
    ax.invert_yaxis()
    ax.set_xlabel("step time, ms (slowest rank; box: p25..p75, whiskers: p10..p90)")
    ax.set_title(f"Step times: {title}", fontsize=10)
    fig.tight_layout()
    paths.append(out / "step_times.png")
    save_figure(fig, paths[-1], 110)
    plt.close(fig)
    return paths


def pairs_plot(out: Path, records: list[dict[str, Any]], a: dict[str, Any]) -> list[Path]:
    """The verdict's pairwise matrix as a heat map (pairs.png): each cell the row's geometric-mean throughput over
    the column's, coloured by log2 of it (red: the row is slower, blue: faster), marked with the pair's outcome
    after Holm's correction (`a`: the verdict's analysis of `records`). Nothing where fewer than two rows rank, or a
    row has fewer than 3 launches."""
    plt = figures.pyplot()
    order = a["order"]
    if plt is None or len(order) < 2 or a["letters"] is None:  # fewer than 3 launches a row: nothing ranks
        return []
    import math

    cells = [[None if x == y else oriented(a["pairs"], x, y) for y in order] for x in order]
    logs = [[0.0 if c is None else math.log2(c["estimate"]) for c in row] for row in cells]
    span = max(0.05, max(abs(v) for row in logs for v in row))
    size = 1.1 * len(order) + 2.5
    fig, ax = plt.subplots(figsize=(size, size * 0.8))
    ax.imshow(logs, cmap="RdBu", vmin=-span, vmax=span)
    for i, row in enumerate(cells):
        for j, c in enumerate(row):
            text = "—" if c is None else f"{c['estimate']:.2f}×\n{verdict_mod.symbol(c)}"
            ax.text(j, i, text, ha="center", va="center", fontsize=9,
                    color="white" if abs(logs[i][j]) > 0.6 * span else "black")  # readable on the darkest cells
    ax.set_xticks(range(len(order)), order, rotation=30, ha="right")
    ax.set_yticks(range(len(order)), order)
    ax.set_xlabel("column")
    ax.set_ylabel("row")
    r0 = records[0]
    ax.set_title(f"Row ÷ column, samples/s ({r0['workload']}, world size {r0['world_size']}; {a['n_min']}+ launches "
                 f"per row)\n▲ faster, ▼ slower, ≈ equivalent within ±{a['margin'] * 100:g}%, ? not resolved "
                 f"(Holm over {len(a['pairs'])} pairs)", fontsize=9)
    fig.tight_layout()
    path = out / "pairs.png"
    save_figure(fig, path, 110)
    plt.close(fig)
    return [path]


def console_notes(records: list[dict[str, Any]]) -> list[str]:
    """Lines for the terminal under the table (markup-escaped): the fix of every unavailable row (the table has
    room for the reason's first sentence only) and what a ✗ was judged against."""
    from rich.markup import escape

    if ttt.settings(records):
        return []
    rows = table_rows(records)
    lines = []
    for row in rows:
        if row["status"] != "unavailable":
            continue
        reason = "; ".join(row["reasons"])
        fix = reason.rsplit("(fix: ", 1)[1].removesuffix(")") if "(fix: " in reason else None
        lines.append(f"{row['adapter']} unavailable: " + (f"fix: {fix}" if fix else f"{reason} (the whole reason: "
                                                           f"report.md)"))
    notes = [note for note in (target_note(rows), *equivalence_notes(rows)) if note]
    cut = cut_short(records)
    if cut:
        notes.append(f"the run ended before all its launches: {cut}")
    return [escape(line) for line in lines + notes + step_report.console_lines(records, list(group(records)))]


def console_table(records: list[dict[str, Any]]):
    from rich.markup import escape
    from rich.table import Table

    cfg = ttt.settings(records)
    if cfg:
        return ttt.console_table(records, group(records), cfg)

    where = next((hosts_report.nodes_label(r.get("topology")) for r in records
                  if hosts_report.spans_hosts(r.get("topology"))), "")
    t = Table(title=f"{records[0]['workload']} — world size {records[0]['world_size']}"
                    + (f" on {where}" if where else ""))
    rows = table_rows(records)
    tokens = tokens_per_sample(rows)
    for col in ("adapter", "precision", "samples/s", *(["tokens/s"] if tokens else []), "step ms (p10–p90)",
                "peak mem/rank", "final loss", "accuracy", "max_param_diff", "status"):
        t.add_column(col, justify="right" if col not in ("adapter", "status") else "left")
    for row in rows:
        if not row["measured"]:
            reason = "; ".join(row["reasons"])
            if row["status"] == "unavailable":  # the terminal gets the reason; report.md and `compare list` the fix
                reason = first_sentence(reason)
            status = escape(f"{row['status']}: {reason}")  # "[fault injection]" is not markup
            t.add_row(row["adapter"], *[""] * (8 if tokens else 7), status)
            continue
        f = row["first"]
        sps = (verdict_mod.interval_text(row["interval"]).replace(" (", "\n(") if row.get("interval")
               else f"{row['samples_per_s']:,.0f}")
        t.add_row(row["adapter"], precision_of(f), sps,
                  *([tokens_text(row, tokens).replace(" [", "\n[")] if tokens else []),
                  f"{row['step_median'] * 1e3:.2f} ({row['step_p10'] * 1e3:.2f}–{row['step_p90'] * 1e3:.2f})",
                  format_mib(row["peak_memory_bytes"]), _fmt(row["final_loss"], ".4f"), _acc(row),
                  _diff(row, short=True), _status(row))
    return t
