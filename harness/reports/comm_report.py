"""The report of a `compare comm` run (records of kind "comm"): a table per op, busbw plot, console summary.

Runs in: the parent; reads nothing but the records.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from harness.ground.outdir import write_text
from harness.ground.provenance import tuning_line
from harness.ground.sizes import format_size
from harness.ground.stats import MEDIAN_INTERVAL_METHOD
from harness.launching import machine
from harness.reports import figures, palette
from harness.reports import host_layout as hosts_report


def render(out: Path, records: list[dict[str, Any]]) -> Path:
    r0 = records[0]
    e = r0["env"]
    backends = list(dict.fromkeys(r["backend"] for r in records))
    ok_backends = [b for b in backends if any(r["backend"] == b and r["op"] for r in records)]
    over = " (oversubscribed: more ranks than cores)" if r0.get("oversubscribed") else ""
    over += ", each rank bound to its own cores" if r0.get("bind_cores") else ""
    where = next((f" on {hosts_report.nodes_label(r['topology'])}" for r in records
                  if hosts_report.spans_hosts(r.get("topology"))), "")
    md = [f"# compare comm: {', '.join(backends)}, {r0['world_size']} ranks{where}{over}, {r0['dtype']}, "
          f"{e['cpu_cores_usable']}-core {'CPU' if r0['device'] == 'cpu' else ', '.join(e.get('gpus', []))}", ""]
    shared = machine.note(records, lambda r: r["backend"])
    for line in hosts_report.note(records) + shared:
        md += [f"- {line}"]
    if where or shared:
        md.append("")
    for r in records:
        if not r["op"]:
            md.append(f"- **{r['backend']}**: {r['status']} — {r['reason']}")
    for b in backends:
        ended = next((r["shutdown_error"] for r in records if r["backend"] == b and r.get("shutdown_error")), None)
        if ended:
            md.append(f"- **{b}**: its cells were measured and checked, then the launch ended badly {ended}")
    md += ([""] if md[-1] else []) + ["## Summary", ""] + [f"- {line}" for line in summary_lines(records)]
    gap = r0.get("gap_s") or 0.0
    md += ["", "Time per op: median [p10–p90] of the slowest rank, µs. algbw = size / time; busbw = algbw × "
           "factor (nccl-tests)" + (f"; busbw's [interval] is the {MEDIAN_INTERVAL_METHOD} call over the iterations"
                                    if any(r.get("busbw_interval_GBps") for r in records) else "")
           + ". ✗: wrong result (a failed cell)." + (
               f" Each call came after {gap * 1e3:g} ms of busy work on every rank, untimed (`--gap`), as a training "
               "step calls its collectives after compute." if gap else ""),
           ""]
    ops = list(dict.fromkeys(r["op"] for r in records if r["op"]))
    for op in ops:
        cells = [r for r in records if r["op"] == op]
        factor = next((r["busbw_factor"] for r in cells if "busbw_factor" in r), None)
        md += [f"## {op}" + (f" (busbw factor {factor:.3g})" if factor else ""), ""]
        head = "| size | " + " | ".join(f"{b} µs | {b} algbw GB/s | {b} busbw GB/s" for b in ok_backends) + " |"
        md += [head, "|" + "---|" * (1 + 3 * len(ok_backends))]
        for size in sorted({r["size_bytes"] for r in cells}):
            row = [format_size(size)]
            for b in ok_backends:
                c = next((r for r in cells if r["backend"] == b and r["size_bytes"] == size), None)
                if c is None:
                    row += ["–"] * 3
                elif c["status"] == "unsupported":
                    row += [_cell(f"n/a: {c['reason']}"), "", ""]
                elif c["status"] != "ok" and "time_s" not in c:
                    row += [_cell(f"failed: {c['reason']}"), "", ""]
                else:
                    t = c["time_s"]
                    mark = "" if c["status"] == "ok" else " ✗"
                    bus = f"{c['busbw_GBps']:.3f}"
                    if c.get("busbw_interval_GBps"):  # records made before it was kept render as they were
                        lo, hi = c["busbw_interval_GBps"]
                        bus += f" [{lo:.3f}–{hi:.3f}]"
                    row += [f"{t['median'] * 1e6:,.1f} [{t['p10'] * 1e6:,.1f}–{t['p90'] * 1e6:,.1f}]{mark}",
                            f"{c['algbw_GBps']:.3f}", bus]
            md.append("| " + " | ".join(row) + " |")
        md.append("")
    md += ["## Provenance", "", f"- Command: `{r0['command']}`", f"- Run: {r0['run_id']} at {r0['time_utc']}; "
           f"git commit {e.get('git_commit') or 'unknown'}",
           f"- Hardware: {e['cpu_model']}, {e['cpu_cores_usable']} usable cores; GPUs: "
           f"{', '.join(e.get('gpus', [])) or 'none'}",
           f"- Software: Python {e['python']}, torch {e['torch']}; " + "; ".join(
               sorted({f"{r['backend']}: {r.get('framework')} via {r.get('launcher')}" for r in records
                       if r.get("framework")})), *tuning_line(e),
           *_load_lines(records),
           "- Every rank checks one result of every cell against the expected values before timing; timed "
           "iterations run on zero-filled buffers after warm-up, with a barrier before each cell.", ""]
    png = plot(out, records, ops, ok_backends)
    if png:
        md += ["![busbw](busbw.png)", ""]
    elif not figures.available():
        md += [figures.why_none(), ""]
    path = out / "report.md"
    write_text(path, "\n".join(md))
    return path


def plot(out: Path, records, ops, backends) -> Path | None:
    plt = figures.pyplot()
    if plt is None:
        return None

    if not ops or not backends:
        return None
    legend = palette.legend_of(records)
    cols = min(3, len(ops))
    rows = (len(ops) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, op in zip(axes.flat, ops):
        for b in backends:
            cells = sorted((r for r in records if r["op"] == op and r["backend"] == b and "busbw_GBps" in r),
                           key=lambda r: r["size_bytes"])
            if cells:
                xs, ys = [c["size_bytes"] for c in cells], [c["busbw_GBps"] for c in cells]
                ax.plot(xs, ys, marker="o", markersize=3, label=b, color=palette.colour(b, legend))
                spans = [(c, c["busbw_interval_GBps"]) for c in cells if c.get("busbw_interval_GBps")]
                if spans:  # the median call's interval over the iterations, as whiskers
                    ax.errorbar([c["size_bytes"] for c, _ in spans], [c["busbw_GBps"] for c, _ in spans],
                                yerr=[[c["busbw_GBps"] - lo for c, (lo, _) in spans],
                                      [hi - c["busbw_GBps"] for c, (_, hi) in spans]],
                                fmt="none", ecolor=palette.colour(b, legend), elinewidth=0.8, capsize=2)
        ax.set_xscale("log", base=2)
        ax.set_title(op, fontsize=9)
        ax.set_xlabel("size (bytes)", fontsize=8)
        ax.set_ylabel("busbw GB/s", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(ops):]:
        ax.axis("off")
    r0 = records[0]
    fig.suptitle(f"busbw vs size, {r0['world_size']} ranks, {r0['dtype']}"
                 + (" (oversubscribed)" if r0.get("oversubscribed") else ""), fontsize=10)
    path = figures.save(fig, out / "busbw.png", 100)
    return path


def summary_lines(records) -> list[str]:
    lines = []
    for b in dict.fromkeys(r["backend"] for r in records):
        cells = [r for r in records if r["backend"] == b and r["op"]]
        if not cells:
            r = next(r for r in records if r["backend"] == b)
            lines.append(f"{b}: {r['status']} - {r['reason']}")
            continue
        ok = [c for c in cells if c["status"] == "ok"]
        na = sum(c["status"] == "unsupported" for c in cells)
        big = [c for c in ok if c["op"] == "all_reduce"]
        best = max((c["busbw_GBps"] for c in big), default=None)
        ended = next((c["shutdown_error"] for c in cells if c.get("shutdown_error")), None)
        lines.append(f"{b}: {len(ok)}/{len(cells) - na} cells ok" + (f" ({na} unsupported)" if na else "")
                     + (f"; the launch then ended badly {ended}" if ended else "")
                     + (f"; all_reduce peak busbw {best:.3f} GB/s, average over its {len(big)} sizes "
                        f"{statistics.fmean(c['busbw_GBps'] for c in big):.3f} GB/s (nccl-tests' \"Avg bus "
                        f"bandwidth\")" if best else "") + (
            f"; median of medians {statistics.median(c['time_s']['median'] for c in ok) * 1e6:.0f} µs" if ok else ""))
        ranks = (cells[0].get("topology") or {}).get("rank_hosts")
        if ranks:
            lines[-1] += "; ranks on " + ", ".join(h["hostname"] for h in ranks)
    return lines


def _cell(text: str) -> str:
    """Text for one Markdown table cell: on one line, without the column separator (records written before the
    ranks kept only a message's first line may hold a C++ stack trace)."""
    return " ".join(text.split()).replace("|", "/")


def _load_lines(records) -> list[str]:
    """What the machine was doing when each backend's launch began (the 1-minute load average before it), and the
    other compare runs that measured at the same time: a table of bus bandwidths on a loaded machine says so, as a
    run's report does."""
    loads = dict.fromkeys((r.get("backend") or r.get("adapter"), r["load_avg_before"][0]) for r in records
                          if r.get("load_avg_before"))
    out = ["- Load average (1 min) before each launch: " + ", ".join(f"{b} {v:.2f}" for b, v in loads)] if loads else []
    beside = {b: r["concurrent_compare_runs"] for r in records if r.get("concurrent_compare_runs")
              for b in [r.get("backend") or r.get("adapter")]}
    if beside:
        out.append("- Another compare run measured at the same time as: " + "; ".join(
            f"{b} (" + ", ".join(f"pid {x.get('pid')}: `{x.get('command')}`" if isinstance(x, dict) else str(x)
                                 for x in runs) + ")" for b, runs in beside.items())
            + ": its figures may be lower than this machine gives alone")
    return out
