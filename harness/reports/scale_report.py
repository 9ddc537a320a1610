"""The report of a `compare scale` sweep (records of kind "scale"): per adapter and world size, throughput,
speed-up, parallel efficiency, step times, memory per rank and load balance; the performance model's calibration,
its predicted-vs-measured table and its extrapolation to a hardware profile (harness/model/costmodel.py); plots.

Runs in: the parent; reads nothing but the sweep's records, the model's prediction among them (made when the sweep
ended: harness/model/predicted.py), so `compare report DIR` re-renders it as it was made. A sweep recorded before
predictions were kept is predicted when rendered, from the `compare comm` records it kept in `comm_n<N>/`.

Definitions (the same for every backend):
- throughput T(N) = global batch / median step time (slowest rank per step), median over repeats; in records of
  schema 2, global batch / mean step time (the summed step times) per launch, and of schema 3 the samples of the
  timed steps over the timed window by the wall clock, each the geometric mean over repeats with its 95% interval,
  and the speed-ups and efficiencies below with Welch's 95% interval over the launches of both points
  (harness/ground/stats.py);
- speed-up against the same adapter at world size 1: T(N) / T_adapter(1); against the single-process baseline
  (the plain model, no wrapper, one process, the same threads as one rank): T(N) / T_baseline;
- parallel efficiency = T(N) / (N x T_adapter(1)): 1.0 is perfect scaling, in strong scaling (fixed global batch,
  so ideal step time falls as 1/N) and weak scaling (fixed per-rank batch, ideal step time stays) alike;
- per rank: compute, wait (harness/ground/record.py: LOAD_BALANCE_METHOD), and `exposed` = step - the slowest rank's
  compute (what the step costs beyond its slowest worker's own compute).
Oversubscribed points (more ranks than cores) are labelled everywhere and never enter a summary statement.
"""

from __future__ import annotations

import statistics
from collections import OrderedDict
from pathlib import Path
from typing import Any

from harness.ground.outdir import write_text
from harness.ground.provenance import tuning_line
from harness.ground.record import frozen_note, hardware_text, software_text
from harness.ground.sizes import format_mib
from harness.launching import machine
from harness.model.points import BASELINE, table
from harness.reports import figures, palette
from harness.reports import verdict as verdict_mod
from harness.reports.run_rows import MEMORY_KINDS, MEMORY_SHORT
from harness.shared.text import shorten

def _x(v, spec=".2f", none="–"):
    return none if v is None else format(v, spec)


def markdown_tables(tab: OrderedDict[str, list[dict[str, Any]]]) -> list[str]:
    head = ("| world size | global batch (per rank) | samples/s | speed-up vs N=1 | speed-up vs single process "
            "| efficiency | step ms median [p10–p90] (n) | peak memory per rank (max) | compute / wait per rank, ms "
            "| exposed ms | max_param_diff | status |")
    md = []
    for label, rows in tab.items():
        if label == BASELINE:
            continue
        md += [f"### {label}", "", head, "|" + "---|" * (head.count("|") - 1)]
        for r in rows:
            over = " (oversubscribed)" if r["oversubscribed"] else ""
            if r["status"] != "ok":
                md.append(f"| {r['n']}{over} | | | | | | | | | | | **{r['status']}**: "
                          f"{'; '.join(r['reasons']).replace('|', '/')} |")
                continue
            spread = f" (±{r['spread'] / 2:.0%})" if r["spread"] is not None else ""
            flag = " ⚠" if r["spread"] is not None and r["spread"] > 0.05 else ""
            if r.get("interval"):
                iv = r["interval"]
                spread = (f" [{iv['lo']:,.0f}–{iv['hi']:,.0f}]" if iv["lo"] is not None
                          else f" (n={iv['n']}: no interval)")
            bal = ", ".join(f"{p['compute_s'] * 1e3:.2f} / {p['wait_s'] * 1e3:.2f}" for p in r.get("balance", []))
            eff = _x(r["efficiency"], ".0%") + ("†" if r["oversubscribed"] else "")
            speedup = _x(r["speedup_self"])
            si = r.get("speedup_interval")
            if si and si["lo"] is not None and r["n"] > 1:
                speedup += f" [{si['lo']:.2f}–{si['hi']:.2f}]"
                eff += f" [{si['lo'] / r['n']:.0%}–{si['hi'] / r['n']:.0%}]"
            status = "ok" if r["ok_repeats"] == r["repeats"] else f"ok {r['ok_repeats']}/{r['repeats']}"
            md.append(f"| {r['n']}{over} | {r['global_batch']} ({r['per_rank_batch']}) | {r['samples_per_s']:,.0f}"
                      f"{spread}{flag} | {speedup} | {_x(r['speedup_baseline'])} | {eff} "
                      f"| {r['step_median'] * 1e3:.2f} [{r['step_p10'] * 1e3:.2f}–{r['step_p90'] * 1e3:.2f}] "
                      f"({r['step_n']}) | {format_mib(r['peak_memory_bytes'])} | {bal or '–'} "
                      f"| {_x(r.get('exposed_s') and r['exposed_s'] * 1e3)} | {_diff(r)} "
                      f"| {status} |")
        md.append("")
    return md


def _diff(r) -> str:
    d, eq = r.get("max_param_diff"), r.get("equivalence") or {}
    if d is None:
        return "–"
    if not eq.get("checked"):
        return f"{d:.1e} (not checked)"
    return f"{d:.1e} {'✓' if d <= eq['tolerance'] else '✗'}"


def _baseline_line(tab) -> list[str]:
    base = tab.get(BASELINE)
    if not base or base[0]["status"] != "ok":
        return ["The single-process baseline did not run: speed-ups against it are left out.", ""]
    b = base[0]
    return [f"Single-process baseline (the plain model, no wrapper, one process, the same threads as one rank), "
            f"global batch {b['global_batch']}: {b['samples_per_s']:,.0f} samples/s, step "
            f"{b['step_median'] * 1e3:.2f} ms [{b['step_p10'] * 1e3:.2f}–{b['step_p90'] * 1e3:.2f}], peak memory "
            f"{format_mib(b['peak_memory_bytes'])}.", ""]


def summary_lines(tab) -> list[str]:
    """One sentence per adapter at its largest world size that is not oversubscribed."""
    lines = []
    for label, rows in tab.items():
        if label == BASELINE:
            continue
        real = [r for r in rows if r["status"] == "ok" and not r["oversubscribed"] and r["n"] > 1]
        if not real:
            continue
        r = real[-1]
        eff = f"parallel efficiency {r['efficiency']:.0%}" if r["efficiency"] is not None else "no N=1 point"
        base = f", {r['speedup_baseline']:.2f}x the single process" if r["speedup_baseline"] is not None else ""
        waits = ""
        if r.get("balance"):
            frac = statistics.mean(p["wait_s"] / p["step_s"] for p in r["balance"] if p["step_s"] > 0)
            waits = f"; its ranks spend {frac:.0%} of a step waiting on average"
        # a figure from one launch a point says so where it is read (the table's "no interval" is far from it)
        few = min((x.get("ok_repeats") or 0) for x in rows if x["n"] in (1, r["n"]) and x["status"] == "ok")
        one = (f" (from {few} launch{'es' if few > 1 else ''} a point: no interval, and it may move by more than "
               f"launches vary; `--repeats 3` gives one)") if few < 3 else ""
        lines.append(f"**{label}** at {r['n']} ranks: {r['samples_per_s']:,.0f} samples/s, speed-up "
                     f"{_x(r['speedup_self'])} over itself at N=1 ({eff}){base}{waits}{one}.")
    return lines


def backends_section(records: list[dict[str, Any]]) -> list[str]:
    """At each world size above 1, the backends compared with each other as `compare run` compares rows, from the
    same launches: every pair, Holm's correction, rounds as blocks, letter groups (the single process is the
    speed-ups' reference, not a backend of this comparison). Needs 3 launches per point; says so otherwise."""
    sizes = sorted({r["world_size"] for r in records if r["world_size"] > 1})
    parts, short = [], False
    for n in sizes:
        recs = [r for r in records if r["world_size"] == n and r["label"] != BASELINE]
        a = verdict_mod.analyse(recs) if recs else None
        if a is None or len(a["ranked"]) < 2:
            continue
        if a["letters"] is None:
            short = True
            continue
        over = " (oversubscribed)" if any(r.get("oversubscribed") for r in recs) else ""
        parts += [f"### N = {n}{over}", ""] + [line for line in a["lines"] if line] + [""]
    if short and not parts:
        return ["## The backends compared at each world size", "",
                "Not compared: a point needs at least 3 launches per backend for an interval (`--repeats 3`).", ""]
    return ["## The backends compared at each world size", ""] + parts if parts else []


def render(out: Path, records: list[dict[str, Any]]) -> Path:
    r0 = records[0]
    sweep = r0.get("scale_sweep") or {}
    tab = table(records)
    e = r0["env"]
    hw = e["gpus"][0] if e.get("gpus") else f"{e['cpu_cores_usable']}-core CPU ({e['cpu_model']})"
    sizes = sweep.get("world_sizes") or sorted({r["scale"]["point"] for r in records if r.get("scale")})
    over = sorted({r["scale"]["point"] for r in records if r.get("scale") and r.get("oversubscribed")})
    md = [f"# Scaling: {r0['workload']}, {sweep.get('scaling', 'strong')} scaling, world sizes "
          f"{', '.join(map(str, sizes))} on {hw}", ""]
    md += summary_lines(tab) + [""]
    md += _baseline_line(tab)
    md += markdown_tables(tab)
    md += backends_section(records)
    md += _notes(records, tab, sweep, over)
    model_md, model_plots = [], []
    try:
        from harness.reports import prediction

        model_md, model_plots = prediction.section(out, records, tab)
    except Exception as exc:  # noqa: BLE001 - the measured tables must never be lost to the model
        model_md = [f"The performance model could not be evaluated: {type(exc).__name__}: {exc}", ""]
    plots = plot(out, records, tab)
    md += model_md
    md += ["## Controls", ""] + _controls(records, sweep) + [""]
    md += ["## Provenance", ""] + _provenance(records) + [""]
    md += ["## Plots", ""] + ([f"![{p.stem}]({p.name})" for p in plots + model_plots] if figures.available()
                              else [figures.why_none()]) + [""]
    path = out / "report.md"
    write_text(path, "\n".join(md))
    return path


def _notes(records, tab, sweep, over) -> list[str]:
    from harness.ground.record import LOAD_BALANCE_METHOD

    notes = [f"How wait is measured ({'the same for every backend'}): {LOAD_BALANCE_METHOD}. `exposed` is the "
             f"median step minus the slowest rank's compute: what communication and framework overhead add beyond "
             f"the slowest worker."]
    stopped = next((r["run_interrupted"] for r in records if r.get("run_interrupted")), None)
    if stopped:
        never = sum(r["status"] == "not_run" for r in records)
        notes.append(f"**The sweep was interrupted {stopped}**: "
                     + (f"{never} launch(es) never ran; " if never else "every point had run; ")
                     + ("the model below has only the calibration that finished before it (a backend's comm cells "
                        "or a row's compute contention that is missing leaves its predictions out or uncalibrated)."
                        if "comm sweep" in stopped or "calibration" in stopped else "what ran is kept."))
    if over:
        notes.append(f"**Oversubscribed** world sizes {', '.join(map(str, over))}: more ranks than the "
                      f"{records[0]['env']['cpu_cores_usable']} usable cores, so ranks time-share cores: their "
                      f"throughput and efficiency (marked †) are not what that many real workers would give, and no "
                      f"summary above includes them.")
    notes += machine.note(records, lambda r: f"{r['label']}@{r['scale']['point']}#{r['repeat']}")
    from harness.reports.verdict import interference_line

    points = [r for r in records if r.get("scale") and r.get("status") == "ok"]
    hit = [r for r in points if (r.get("noise") or {}).get("flags")]
    loaded = interference_line(points, "each point and the model's calibration from them", "the sweep's",
                               "the points: " + ", ".join(f"{r['label']}@{r['scale']['point']}#{r['repeat']}"
                                                          for r in hit[:12])
                               + (f" and {len(hit) - 12} more" if len(hit) > 12 else ""))
    if loaded:  # said only in a per-world-size verdict of 3 repeats or more, where a sweep of 1 repeat had none
        notes.append(loaded)
    straggler = sweep.get("straggler")
    if straggler:
        notes.append(f"**Straggler**: rank {straggler['rank']} computes {straggler['factor']:g}x slower at every "
                     f"world size that has it (a busy-wait of (factor - 1) x its own calibrated compute before each "
                     f"step's forward, the same in the compute profile), so the other ranks' wait shows how each "
                     f"backend absorbs a slow worker.")
    if any(r["status"] == "ok" and r["processes"] == 1 and r["n"] > 1 for rows in tab.values() for r in rows):
        notes.append("Rows with 1 process at N > 1 (DataParallel without GPUs) do not parallelise: one process "
                     "drives the one CPU device, whatever N.")
    for label, rows in tab.items():
        for r in rows:
            if r["spread"] if r["status"] == "ok" and r.get("spread") is not None else False:
                if r["spread"] > 0.05:
                    notes.append(f"**{label}** at N={r['n']}: samples/s varied by {r['spread']:.0%} across "
                                 f"{r['ok_repeats']} repeats (> 5%).")
    for r in records:  # a point measured in full whose launch then failed or hung while shutting down
        if r.get("shutdown_error") and r.get("scale"):
            notes.append(f"**{r['label']}** at N={r['scale']['point']} repeat {r['repeat']}: the launch ended badly "
                         f"{r['shutdown_error']} (its measurements are complete and kept).")
    return ["## Notes", ""] + [f"- {n}" for n in notes] + [""]


def _controls(records, sweep) -> list[str]:
    ok = [r for r in records if r["status"] == "ok"]
    if not ok:
        return ["No point ran."]
    f = ok[0]
    ctl = f["controls"]
    scaling = sweep.get("scaling", "strong")
    rule = ("strong scaling: the same global batch at every world size, split over the ranks" if scaling == "strong"
            else "weak scaling: the same per-rank batch at every world size; the global batch and the learning "
                 "rate grow with N by the workload's rule")
    return [f"- Workload `{f['workload']}`: {f.get('data', {}).get('source', '')}; {f.get('param_count', 0):,} "
            f"parameters{frozen_note(f)}; options {ctl['workload_options']}; LR rule {ctl['lr_rule']}.",
            f"- {rule}.",
            f"- {sweep.get('threads_per_rank', ctl['threads_requested'])} thread(s) per rank at every world size "
            f"(one rank = one worker), recorded per rank.",
            f"- Every point is a fresh launch by the adapter's own launcher; {ctl['warmup']} warm-up steps "
            f"discarded, then {ctl['steps']} timed steps; step time = the slowest rank's; repeats interleaved "
            f"(each repeat runs every point once).",
            "- Equivalence: each fp32 point's parameters after the same steps are compared with a single-process "
            "run over the same global batch (max_param_diff).",
            f"- Peak memory per rank: {MEMORY_KINDS.get(f.get('peak_memory_kind'), f.get('peak_memory_kind'))}.",
            *([] if "bind_cores" not in ctl else
              ["- Every process bound to its own share of the usable cores (--bind-cores), all its threads."]
              if ctl["bind_cores"] else ["- Processes not bound to cores: the OS places their threads "
                                         "(--bind-cores binds them)."])]


def _provenance(records) -> list[str]:
    r0, e = records[0], records[0]["env"]
    return [f"- Command: `{r0['command']}`", f"- Run: {r0['run_id']} at {r0['time_utc']}; git commit "
            f"{e.get('git_commit')}",
            f"- Hardware: {hardware_text(e)}", f"- Software: {software_text(records)}", *tuning_line(e),
            "- Load average (1 min) before each launch: " + ", ".join(
                f"{r['label']}@{r['scale']['point']}#{r['repeat']} {r['load_avg_before'][0]:.2f}" for r in records
                if r.get("load_avg_before") and r.get("scale"))]


def plot(out: Path, records, tab) -> list[Path]:
    plt = figures.pyplot()
    if plt is None:
        return []

    rows = {label: [r for r in rs if r["status"] == "ok"] for label, rs in tab.items() if label != BASELINE}
    rows = {k: v for k, v in rows.items() if v}
    if not rows:
        return []
    r0 = records[0]
    sweep = r0.get("scale_sweep") or {}
    title = f"{r0['workload']}, {sweep.get('scaling', 'strong')} scaling, {r0['env']['cpu_cores_usable']}-core " + (
        r0["env"]["gpus"][0] if r0["env"].get("gpus") else "CPU")
    sizes = sorted({r["n"] for rs in rows.values() for r in rs})
    paths = []
    legend = palette.legend_of(records)
    style = palette.styles(list(rows), legend)

    def lines(ax, key):
        for label, rs in rows.items():
            pts = [(r["n"], r[key], r["oversubscribed"]) for r in rs if r.get(key) is not None]
            if not pts:
                continue
            line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label, linewidth=1.2,
                            color=palette.colour(label, legend), linestyle=style[label])
            for n, v, o in pts:
                if o:  # hollow marker: time-shared cores
                    ax.plot([n], [v], marker="o", markerfacecolor="white", markeredgecolor=line.get_color())
            for r in rs:  # the speed-up's 95% interval over both points' launches (an efficiency is it over N)
                si = r.get("speedup_interval")
                if r.get(key) is not None and si and si.get("lo") is not None and si["estimate"]:
                    v = r[key]
                    ax.errorbar([r["n"]], [v], yerr=[[v - v * si["lo"] / si["estimate"]],
                                                     [v * si["hi"] / si["estimate"] - v]],
                                fmt="none", ecolor=line.get_color(), elinewidth=1, capsize=3)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(s) + ("*" if any(r["n"] == s and r["oversubscribed"] for rs in rows.values()
                                                     for r in rs) else "") for s in sizes])
        ax.set_xlabel("world size (ranks)" + (" — * oversubscribed (hollow markers)" if any(
            r["oversubscribed"] for rs in rows.values() for r in rs) else ""))

    whiskers = any((r.get("speedup_interval") or {}).get("lo") is not None for rs in rows.values() for r in rs)

    def ideal_speedup(ax):
        ax.plot(sizes, sizes, "k--", linewidth=1, label="ideal (N)")
        ax.set_yscale("log", base=2)

    def ideal_efficiency(ax):
        ax.axhline(1.0, color="k", linestyle="--", linewidth=1, label="ideal")
        ax.set_ylim(0, max(1.1, max((r["efficiency"] or 0) for rs in rows.values() for r in rs) * 1.1))

    for key, name, what, ylabel, ideal in (
            ("speedup_self", "speedup", "Speed-up", "speed-up over the same adapter at N=1", ideal_speedup),
            ("efficiency", "efficiency", "Efficiency", "parallel efficiency = T(N) / (N T(1))", ideal_efficiency)):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        ideal(ax)
        lines(ax, key)
        ax.set_ylabel(ylabel + ("\n(whiskers: 95% interval over the launches)" if whiskers else ""))
        ax.set_title(f"{what}: {title}", fontsize=10)
        ax.legend(fontsize=8)
        paths.append(figures.save(fig, out / f"{name}.png"))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in rows.values():
        for p in r:
            p["peak_mib"] = (p["peak_memory_bytes"] or 0) / 2**20
    lines(ax, "peak_mib")
    kind = next((p["first"].get("peak_memory_kind") for r in rows.values() for p in r), None)
    ax.set_ylabel(f"peak memory per rank, MiB\n(max over ranks; {MEMORY_SHORT.get(kind, kind)})", fontsize=9)
    ax.set_title(f"Memory per rank: {title}", fontsize=10)
    ax.legend(fontsize=8)
    paths.append(figures.save(fig, out / "memory.png"))

    bars = [(f"{label}\nN={r['n']}" + ("*" if r["oversubscribed"] else ""), r) for label, rs in rows.items()
            for r in rs if r.get("balance") and r["n"] > 1]
    if bars:
        fig, ax = plt.subplots(figsize=(max(7, 0.45 * sum(len(r["balance"]) for _, r in bars) + 2), 4.5))
        x, ticks, names = 0, [], []
        for name, r in bars:
            xs = list(range(x, x + len(r["balance"])))
            comp = [p["compute_s"] * 1e3 for p in r["balance"]]
            wait = [p["wait_s"] * 1e3 for p in r["balance"]]
            ax.bar(xs, comp, color="#4C72B0", label="compute" if not ticks else None)
            ax.bar(xs, wait, bottom=comp, color="#DD8452", label="wait (step - compute)" if not ticks else None)
            ticks.append(sum(xs) / len(xs))
            names.append(name)
            x += len(xs) + 1
        ax.set_xticks(ticks, names, fontsize=7)
        ax.set_ylabel("ms per step, per rank (bars left to right: rank 0, 1, ...)")
        ax.set_title(f"Load balance: {title}", fontsize=10)
        ax.legend(fontsize=8)
        paths.append(figures.save(fig, out / "balance.png"))
    return paths


def console_lines(out: Path, records: list[dict[str, Any]]) -> list[str]:
    """What the terminal shows after a sweep: one line per point, then the summary sentences."""
    from rich.markup import escape

    tab = table(records)
    lines = []
    for label, rows in tab.items():
        for r in rows:
            name = f"{label} n={r['n']}" + (" (oversubscribed)" if r["oversubscribed"] else "")
            if r["status"] != "ok":
                lines.append(f"  {escape(name)}: [red]{r['status']}[/] {escape(shorten('; '.join(r['reasons']), 200))}")
                continue
            eff = f", efficiency {r['efficiency']:.0%}" if r.get("efficiency") is not None else ""
            sp = f", speed-up {r['speedup_self']:.2f}" if r.get("speedup_self") is not None else ""
            lines.append(f"  {escape(name)}: {r['samples_per_s']:,.0f} samples/s, step {r['step_median'] * 1e3:.2f} "
                         f"ms{sp}{eff}")
    return lines + [escape(s.replace("**", "")) for s in summary_lines(tab)]
