"""The performance model's words and pictures: the "The model" sections of a scale report, rendered from the
prediction the sweep's records keep (harness/model/predicted.py), and `compare predict`'s terminal output, which
asks the model of today (harness/model/calibration.py).

Runs in: the parent."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from harness.core.requests import DEFAULT_PROFILE
from harness.ground.record import has_intervals
from harness.ground.sizes import format_mib
from harness.model import FINGERPRINT, VERSION, predicted, published
from harness.model import hardware
from harness.model import costmodel as cm
from harness.model.calibration import (UTILISATION, calibrate, comm_records, extrapolate, judged, judgement,
                                       predict_measured, repeat_spread, scores, within)
from harness.reports import figures


def _gap_note(gaps: list[float]) -> str:
    """How the comm sweep timed its calls (`gaps`: the busy work before them, in seconds): after busy work on every
    rank (`compare comm --gap`, as `compare scale` has since commit 49ac1de), or back to back."""
    if not gaps:
        return ""
    if gaps == [0.0]:
        return (" The comm sweep timed its calls back to back, as nccl-tests does (a sweep made by compare before "
                "commit 49ac1de, or given with --comm): a step calls its collectives after compute, and on shared "
                "cores such a call can take longer.")
    return (f" The comm sweep timed each call after {'/'.join(f'{g * 1e3:g}' for g in gaps)} ms of busy work on "
            "every rank, untimed, as a step calls its collectives after its compute (`compare comm --gap`; before "
            "commit 49ac1de back to back, as nccl-tests does).")


def _fused_note(c: dict[str, Any]) -> str:
    """How a fusion schedule's fused buffers are priced in this report."""
    if not c["fusion"] or c["collectives"] is None:
        return ""
    if any(op == "all_reduce_coalesced" for op, *_ in c["collectives"]["fits"]):
        return ("; a fused buffer of several tensors is priced from the sweep's all_reduce_coalesced, the "
                "framework's own fused call (packing, all-reduce and unpacking as in training)")
    copy = c["copy_Bps"]
    return ("; a fused buffer of several tensors is priced as one all-reduce plus its packing and unpacking at the "
            "rank's copy bandwidth" + (f" ({copy / 1e9:.1f} GB/s)" if copy else "")
            + " (the sweep has no all_reduce_coalesced cells: made by compare before commit 115e299)")


def _contention_note(records, label: str) -> str:
    """"; compute contention at N=2: 1.10x (alone 160-165 ms, together 176-186 ms per round)" for a row."""
    cals: dict[int, dict[str, Any]] = {}
    for r in records:
        if r["label"] == label and r.get("contention") and r["scale"]["point"] > 1:
            cals.setdefault(r["scale"]["point"], r["contention"])
    parts = []
    for n, c in sorted(cals.items()):
        if c.get("status") != "ok":
            parts.append(f"N={n}: not calibrated ({c.get('status')}: {c.get('reason')})")
            continue
        span = lambda v: f"{min(v) * 1e3:.2f}-{max(v) * 1e3:.2f} ms"  # noqa: E731
        parts.append(f"N={n}: {c['ratio']:.2f}x" + (f" (rank 0 alone {span(c['alone_s'])}, the slowest rank "
                                                   f"together {span(c['together_s'])}, mean compute per round)"
                                                   if c.get("alone_s") and c.get("together_s") else "")
                     + (f" (its launch then ended badly {c['shutdown_error']})" if c.get("shutdown_error") else ""))
    note = "; compute contention " + ", ".join(parts) if parts else ""
    checks = [f"N={n}: " + parts_note(c["parts"]) for n, c in sorted(cals.items())
              if c.get("status") == "ok" and c.get("parts")]
    return note + ("; the step's parts (a plain step, then the framework's all-reduce of the gradients' bytes, "
                   "against the two timed apart) " + ", ".join(checks) if checks else "")


def _parts_timing(parts) -> str:
    gaps = sorted({p.get("gap_s") or 0.0 for p in parts})
    return ("back to back" if gaps == [0.0] else
            f"each call after {'/'.join(f'{g * 1e3:g}' for g in gaps)} ms of busy work, untimed")


def _rounds(rows) -> str:
    return "/".join(sorted({str(r["first_contention"]["rounds"]) for r in rows}))


def exposed_measured(rows: list[dict[str, Any]], records: list[dict[str, Any]]) -> list[str]:
    """The model's exposed communication at each point against the one its launches measured with --breakdown
    (communication exposed + waiting for the slowest rank, the mean over the point's launches): a step predicted
    right with the wrong share of communication shows here. Nothing for a sweep without --breakdown."""
    lines = []
    for r in rows:
        if "predicted_s" not in r:
            continue
        got = [x["breakdown"] for x in records if x.get("label") == r["label"] and x.get("breakdown")
               and (x.get("scale") or {}).get("point") == r["n"] and not (x.get("scale") or {}).get("baseline")]
        if not got:
            continue
        measured = sum(b["comm_exposed"] + b["waiting"] for b in got) / len(got)
        predicted = r["exposed_s"]
        error = f"{predicted / measured - 1:+.0%}" if measured > 0 else "–"
        lines.append(f"| {r['label']} | {r['n']} | {predicted * 1e3:.2f} | {measured * 1e3:.2f} | {error} "
                     f"| {len(got)} |")
    if not lines:
        return []
    return ["", "The model's exposed communication against the one measured by `--breakdown` (communication exposed "
                "plus waiting for the slowest rank, in the profiled steps after each launch's timed window; mean "
                "over the point's launches):", "",
            "| adapter | world size | predicted exposed comm ms | measured ms | error | launches |",
            "|---|---|---|---|---|---|", *lines]


def _repeats_cell(r: dict[str, Any]) -> str:
    reps = r.get("measured_repeats_s") or []
    if len(reps) < 2:
        return ""
    return f" [{min(reps) * 1e3:.2f}–{max(reps) * 1e3:.2f}]"


def _ratio_cell(r: dict[str, Any]) -> str:
    cal = f"{r['contention']:.2f}x" if r.get("contention") else ("–" if r["n"] == 1 else "none")
    return cal + (f" ({r['compute_ratio']:.2f}x)" if "compute_ratio" in r else "")


def parts_note(p: dict[str, Any]) -> str:
    """"compute 0.57 (0.90 as timed inside the step) + all-reduce 1.30 = 1.87 ms, in a row 2.40 ms: +22% (per
    round -1% to +39%)"."""
    import statistics as st

    c, a, s = (st.median(p[k]) * 1e3 for k in ("compute_s", "collective_s", "step_s"))
    inner = (f" ({st.median(p['compute_in_step_s']) * 1e3:.2f} as timed inside the step)"
             if p.get("compute_in_step_s") else "")
    return (f"compute {c:.2f}{inner} + all-reduce {a:.2f} = {c + a:.2f} ms, in a row {s:.2f} ms: "
            f"{p['median_excess_share']:+.0%} (per round {min(p['excess_share']):+.0%} to "
            f"{max(p['excess_share']):+.0%})")


# ---- the report section ------------------------------------------------------------------------------------------

def section(out: Path, records: list[dict[str, Any]], tab) -> tuple[list[str], list[Path]]:
    """The report's model sections, rendered from the prediction the sweep's records keep (harness/model/predicted.py;
    a sweep recorded before predictions were kept is predicted now, from its `comm_n<N>/`), and its plot."""
    sweep = records[0].get("scale_sweep") or {}
    if sweep.get("model") is False:
        return ["## The model", "", "Not evaluated: the sweep ran with `--no-model` (no comm sweep, no compute-"
                "contention calibration, no prediction).", ""], []
    pred = predicted.of_sweep(out, records)
    cal, version = pred["calibration"], pred["version"]
    md = ["## The model: predicted vs measured", ""]
    made = sweep_version(records)
    md += [f"Model version {version}; this sweep was made with "
           + ("it: a validation of the model, which was frozen before the sweep ran." if made == version else
              f"version {made}: data the model was developed on, not its validation." if made is not None else
              "no model version (before the model was versioned): data the model was developed on, not its "
              "validation."), ""]
    problems = pred["comm_problems"]
    md += [f"- {p}: the model has no collectives from it." for p in problems] + ([""] if problems else [])
    if not cal:
        return md + ["No point has a compute profile to calibrate with.", ""], []
    md += ["One step per backend = forward + backward + optimizer (from the world-size-1 compute profile, at the "
           "point's per-rank batch) + the communication its schedule cannot hide (each collective priced at its "
           "size from the mean times of the `compare comm` sweep in `comm_n<N>/`, non-decreasing in size) + the "
           "framework's own overhead measured at world size 1 (harness/model/costmodel.py; " + (
               "on this CPU every core computes, so communication cannot overlap compute and is added to the step"
               if pred["shares_cores"] else "communication overlaps backward as each schedule allows")
           + "). It predicts the mean step and is judged against it: the model adds a step's parts, and means add "
           "where medians do not (a step "
           "with several collectives, each delayed now and then, has a median above the sum of their medians); "
           "the mean step is also what a run's throughput and time to train are made of. The error against the "
           "median step is beside it." + _gap_note(pred["comm_gaps"]), ""]
    md += ["| adapter | world size | measured step ms: mean (median, p10) [repeats' means] | predicted ms "
           "| error vs mean "
           "| vs median | of which exposed comm ms | overhead ms | compute at N vs alone: calibrated (in the point) "
           "| with the compute measured in the point | peak memory/rank measured → predicted |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    firsts = {(p["label"], p["n"]): p["first"] for points in tab.values() for p in points}
    rows = [{**r, "first_contention": firsts[r["label"], r["n"]].get("contention")} for r in pred["rows"]]
    for r in rows:
        over = " (oversubscribed)" if r["oversubscribed"] else ""
        mem = (f"{format_mib(r['measured_mem'])} → {format_mib(r['predicted_mem'])} ({r['mem_error']:+.0%})"
               if "predicted_mem" in r else "–")
        measured = (f"{r['measured_s'] * 1e3:.2f} ({r['measured_median_s'] * 1e3:.2f}, "
                    f"{r['measured_p10_s'] * 1e3:.2f})" + _repeats_cell(r))
        if "predicted_s" not in r:
            md.append(f"| {r['label']} | {r['n']}{over} | {measured} | – ({r['why_not']}) | | | | | | | {mem} |")
            continue
        md.append(f"| {r['label']} | {r['n']}{over} | {measured} "
                  f"| {r['predicted_s'] * 1e3:.2f} | {r['error']:+.0%} | {r['error_median']:+.0%} "
                  f"| {r['exposed_s'] * 1e3:.2f} "
                  f"| {r['overhead_s'] * 1e3:.2f} | " + _ratio_cell(r) + " | "
                  + (f"{r['with_measured_compute_s'] * 1e3:.2f} ({r['with_measured_compute_error']:+.0%})"
                     if "compute_ratio" in r else "–") + f" | {mem} |")
    md += exposed_measured(rows, records)
    real = judged(rows)
    if real:
        worst = max(real, key=lambda r: abs(r["error"]))
        md += ["", f"Step time within ±10% of the measured mean step at {within(real)} of the {len(real)} measured "
                   f"points above world size 1 (not oversubscribed; world size 1 is the calibration itself); the "
                   f"largest error is {worst['error']:+.0%} ({worst['label']} at {worst['n']}). Against the median "
                   f"step: {within(real, 'error_median')} of {len(real)}."]
        if has_intervals(records):
            verdicts = [judgement(r) for r in real]
            md += ["", f"Judged against each point's own 95% interval over its repeats (pass: within ±10%, at any "
                       f"number of repeats; fail: beyond 10% plus the interval's half-width; undecidable: between, or "
                       f"beyond 10% with fewer than 3 repeats): "
                       f"{verdicts.count('pass')} pass, {verdicts.count('fail')} fail, "
                       f"{verdicts.count('undecidable')} undecidable of {len(real)}."]
        spread = [r for r in real if len(r["measured_repeats_s"]) > 1]
        if spread:
            widths = [repeat_spread(r) for r in spread]
            inside = sum(min(r["measured_repeats_s"]) <= r["predicted_s"] <= max(r["measured_repeats_s"])
                         for r in spread)
            md += ["", f"How far the measurement itself moves: between a point's interleaved repeats (separate "
                       f"launches of the same point, minutes apart) its mean step moved by {min(widths):.0%} to "
                       f"{max(widths):.0%} of the mean (median {statistics.median(widths):.0%}; the bracket in the "
                       f"measured column): the model cannot be judged more finely than a point's own spread. The "
                       f"prediction falls inside its point's range of repeats at {inside} of {len(spread)} points."]
        calibrated = [r for r in real if r.get("contention")]
        if calibrated:
            ks = [r["contention"] for r in calibrated]
            plain_ok = within(calibrated, "without_contention_error")
            md += ["", f"Compute contention, calibrated: ranks computing at once share the machine's memory bandwidth "
                       f"and caches, which the world-size-1 profile cannot see. A launch of each adapter's ranks at "
                       f"each world size, apart from the sweep's points and with no training step in it, timed the "
                       f"plain model's compute of rank 0 alone and of every rank at once in {_rounds(calibrated)} "
                       f"rounds (the order swapped every round); the median over rounds of the slowest rank "
                       f"together against rank 0 alone, {min(ks):.2f}x to {max(ks):.2f}x here, multiplies the world-size-1 compute (forward, backward, optimizer and "
                       f"the gradients' ready times) in the prediction. Without it (the world-size-1 compute as it "
                       f"is), the same model is within ±10% at {plain_ok} of {len(calibrated)} of these points."]
        checked = {(r["label"], r["n"]): r["first_contention"]["parts"] for r in real
                   if (r.get("first_contention") or {}).get("parts") and r.get("contention")}
        if checked:
            shares = [p["median_excess_share"] for p in checked.values()]
            md += ["", f"Is a step the sum of its parts on this machine? The same launches then timed, every rank at "
                       f"once and in rounds with the order swapped, a plain step of the model followed by the "
                       f"framework's own all-reduce of the gradients' bytes, and that all-reduce alone, "
                       f"{_parts_timing(checked.values())} (as the comm sweep times it). The two in a row took {min(shares):+.0%} to {max(shares):+.0%} "
                       f"(median over rounds, per adapter) longer than the compute plus the all-reduce timed apart: "
                       f"a model that adds parts measured apart from the step is off by about that much here, however "
                       f"well it prices each part (per adapter and round: the calibration lines below). A diagnosis of "
                       f"the machine, not used in any prediction."]
        tried = [r for r in real if r.get("first_contention")]
        if not calibrated and tried:
            md += ["", "The compute-contention calibration did not succeed at any point (why, per adapter: the "
                       "calibration lines below): the prediction uses the world-size-1 compute as it is."]
        elif not calibrated and any(r["n"] > 1 for r in rows):
            md += ["", "No compute-contention calibration in these records (a sweep made by compare before commit "
                       "ab7976f, or `--no-model`): the prediction uses the world-size-1 compute as it is."]
        diag = [r for r in real if "with_measured_compute_error" in r]
        if diag:
            ok_n = within(diag, "with_measured_compute_error")
            slow = [r["compute_ratio"] for r in diag]
            md += ["", f"Compute in the point (in brackets): each rank's own compute measured after the point's timed "
                       f"steps (the load-balance profile, all ranks at once) against the world-size-1 profile: "
                       f"{min(slow):.2f}x to {max(slow):.2f}x. Fed that compute instead (a diagnosis, not a "
                       f"prediction: it uses the point itself), the same model is within ±10% at {ok_n} of "
                       f"{len(diag)} points above world size 1: what remains is the communication model's own error."]
        jitter = [r for r in real if r["measured_p10_s"] < 0.7 * r["measured_median_s"]]
        if jitter:
            md += ["", f"At {len(jitter)} of them the median step is more than 1.4x the 10th percentile: steps of a "
                       f"few milliseconds on shared cores collect scheduling delays (every process and communication "
                       f"thread of the step must be on a core), in whole milliseconds, so the steps fall into modes "
                       f"and the median jumps from one mode to another between runs. The model carries such delays "
                       f"only as far as the comm sweep's mean times hold them: a collective timed back to back, with "
                       f"nothing computed between calls, is delayed less often than one called after a step's "
                       f"compute" + (", which is why the sweep times each call after busy work"
                                     if pred["comm_gapped"] else "") +
                       " (tests/benchmarks/bench_step_parts.py times compute, the collective back to back and "
                       "after busy work, and the two in a row, interleaved in one launch, and prints how far the "
                       "step is from the sum of its parts on the machine it runs on)."]
    md += ["", "Calibration per adapter:", ""]
    for label, c in cal.items():
        prof = c["batch"]
        kind = (f"{c['kind']}{', stage ' + str(c['stage']) if c['stage'] is not None else ''}" if c["kind"]
                else "none")
        fits = ""
        if c["collectives"] is not None:
            coll = c["collectives"]
            fits = "; ".join([f"{op} n={n}: {lat * 1e6:,.0f} µs + busbw {bw / 1e9:.2f} GB/s"
                              for op, n, lat, bw in coll["fits"]]
                             + [f"{op} n={n}: not fitted ({why})" for op, n, why in coll["unfitted"]])
        md.append(f"- **{label}** ({kind}): "
                  f"compute from {c['source']}: forward {prof['fwd_s'] * 1e3:.2f} ms, backward "
                  f"{prof['bwd_s'] * 1e3:.2f} ms, optimizer {prof['opt_s'] * 1e3:.2f} ms at per-rank batch "
                  f"{prof['per_rank_batch']}; overhead {c['overhead_s'] * 1e3:.2f} ms; "
                  f"{c['grad_bytes'] / 2**20:.1f} MiB of gradients"
                  + _contention_note(records, label)
                  + (f"; {c['comm_backend']} collectives (priced from the sweep's mean time per "
                     f"size at a measured world size; the latency + bus bandwidth fitted to those means carries them past "
                     f"the largest size and to other world sizes): {fits}" if fits else "")
                  + _fused_note(c))
    md.append("")
    shares, here, to = pred["shares_cores"], pred["here"], pred["predict_to"]
    bounds_from, utilisation = pred["bounds_from"], pred["utilisation"]
    if any(here.values()):
        md += [f"## Extrapolation: this machine's fitted collectives, weak scaling up to {to} ranks", "",
               "Many workers like the ones measured here: each op's bus bandwidth as fitted at the largest world "
               "size measured, its latency per ring step as measured there (2(N-1) steps per all-reduce), the "
               "compute measured here" + (", and communication added to the step (it shares the cores)"
                                          if shares else "") + f". Beyond {bounds_from} ranks a ring of "
               "gloo over loopback is not a machine anyone has: read it as what latency alone does.", "",
               "| adapter | per-rank batch | " + " | ".join(f"N={n}" for n in _ext_ns(to)) + " |",
               "|---|---|" + "---|" * len(_ext_ns(to))]
        for label, rows_h in here.items():
            if rows_h:
                batch = cal[label]["batch"]["per_rank_batch"]
                md.append(f"| {label} | {batch} | " + " | ".join(
                    f"{next(r for r in rows_h if r['n'] == n)['mid']:.0%}" for n in _ext_ns(to)) + " |")
        md.append("")
    plots = []
    ext = {}
    for profile in pred["profiles"]:
        name = profile["name"]
        if profile.get("unknown"):
            md += [f"Unknown hardware profile {name}: no extrapolation.", ""]
            continue
        if profile.get("bad"):
            md += [f"The {profile['bad']}: no extrapolation to it.", ""]
            continue
        device = profile["device"]
        md += [f"## Extrapolation: {name} ({device}), weak scaling up to {to} GPUs", "",
               f"Compute on the {device}: the FLOPs of one step counted here (torch's FlopCounterMode) at the "
               f"profile's peak for the row's precision x {utilisation[0]:.0%} / {utilisation[1]:.0%} / "
               f"{utilisation[2]:.0%} utilisation (the middle figure, and the range); no framework overhead carried "
               f"over from this machine. Collectives: the profile's bus bandwidths and NCCL's latencies (sources in "
               f"harness/model/profiles/){_slowdown_note(profile['overlap_slowdown'])}. Beyond {bounds_from} GPUs "
               f"only the range is given: a step model does not see contention, stragglers or topology effects that "
               f"dominate there.", "",
               "| adapter | per-GPU batch | " + " | ".join(f"N={n}" for n in _ext_ns(to)) + " |",
               "|---|---|" + "---|" * len(_ext_ns(to))]
        for label, e in profile["adapters"].items():
            batch, rows_e = e["batch"], e["rows"]
            if not rows_e:
                md.append(f"| {label} | {batch} | " + " | ".join("–" for _ in _ext_ns(to)) + " |")
                continue
            ext.setdefault(name, {})[label] = rows_e
            cells = []
            for n in _ext_ns(to):
                r = next(x for x in rows_e if x["n"] == n)
                cells.append(f"{r['low']:.0%}–{r['high']:.0%}" if n > bounds_from
                             else f"{r['mid']:.0%} ({r['low']:.0%}–{r['high']:.0%})")
            md.append(f"| {label} | {batch} | " + " | ".join(cells) + " |")
        md.append("")
    checks = pred["published"]["checks"]
    md += ["## The model against published results", "",
           *[x for line in pred["published"]["problems"] for x in (f"{line}.", "")],
           "The same model, fed each published result's single-GPU throughput (forward 1/3, backward 2/3 of the "
           "step; each layer's gradient ready as backward reaches it, for the CNNs built here with torchvision's "
           "layer sizes, else 100 equal tensors; fp32 gradients), the framework's schedule of the time (DDP's "
           "buckets; Horovod's 64 MB / 5 ms fusion before 0.21) and the cluster's profile:", ""]
    md += published.lines(checks, pred["published"]["slowdowns"]) + [""]
    plots += plot(out, ext, checks, to, bounds_from, utilisation)
    return md, plots


def _slowdown_note(slowdown: float) -> str:
    """How the profile prices compute that overlaps communication (model version 3 on)."""
    if not slowdown:
        return "; compute that overlaps communication is not slowed (the profile states no slowdown)"
    return (f"; compute that overlaps communication takes {1 + slowdown:.3g}x as long (the profile's "
            f"overlap_compute_slowdown)")


def _ext_ns(to: int) -> list[int]:
    return [n for n in (8, 16, 64, 256, 1024, 4096) if n <= to]


def plot(out: Path, ext: dict[str, dict[str, list[dict]]], checks: list[dict], to: int, bounds_from: int,
         utilisation: list[float]) -> list[Path]:
    if not ext:
        return []
    plt = figures.pyplot()
    if plt is None:
        return []

    name, rows = next(iter(ext.items()))
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    for label, rs in rows.items():
        ns = [r["n"] for r in rs]
        line, = ax.plot([n for n in ns if n <= bounds_from], [r["mid"] for r in rs if r["n"] <= bounds_from],
                        marker="o", markersize=3, label=label)
        ax.fill_between(ns, [r["low"] for r in rs], [r["high"] for r in rs], color=line.get_color(), alpha=0.15)
    ax.axvline(bounds_from, color="grey", linestyle=":", linewidth=1)
    ax.text(bounds_from * 1.1, 0.02, "bounds only beyond", fontsize=7, color="grey")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("predicted parallel efficiency (weak scaling)")
    ax.set_title(f"This workload on {name} (band: {utilisation[0]:.0%}–{utilisation[2]:.0%} of peak)", fontsize=9)
    ax.legend(fontsize=7)
    labels = [f"{c['model']} {c['backend']} {c['precision']} n={c['n']}" for c in checks]
    y = range(len(checks))
    ax2.scatter([c["published_efficiency"] for c in checks], y, marker="o", label="published", color="black")
    predicted = [c["predicted_efficiency"] for c in checks]
    ax2.errorbar(predicted, y, xerr=[[p - c["range"][0] for p, c in zip(predicted, checks)],
                                     [c["range"][1] - p for p, c in zip(predicted, checks)]],
                 fmt="x", color="#C44E52", elinewidth=0.8, capsize=2, label="predicted (range of inputs)")
    ax2.set_yticks(list(y), labels, fontsize=6)
    ax2.invert_yaxis()
    ax2.set_xlim(0, 1.05)
    ax2.set_xlabel("parallel efficiency")
    ax2.set_title("Published scaling results vs the model", fontsize=9)
    ax2.legend(fontsize=7)
    path = figures.save(fig, out / "prediction.png")
    return [path]


# ---- compare predict -------------------------------------------------------------------------------------------

def predict_sweep(print_line, directory: Path, records: list[dict], tab, profile: list[str], to: int, *,
                  to_profiles: bool = True) -> list[dict]:
    """`compare predict DIR`: predicted vs measured, then (`to_profiles`) the extrapolation to each profile, each
    line given to `print_line` (rich markup; user text escaped). `tab`: the sweep's table
    (harness/reports/scale_report.py
    table()). Returns the predicted-vs-measured rows."""
    from rich.markup import escape

    problems: list[str] = []
    cal = calibrate(records, comm_records(directory, problems))
    for line in problems:
        print_line(f"[yellow]warning[/]: {escape(line)}: the model has no collectives from it")
    print_line(f"[bold]predicted vs measured[/] ({directory})")
    rows = predict_measured(records, tab, cal)
    for r in rows:
        over = " (oversubscribed)" if r["oversubscribed"] else ""
        pred = (f"{r['predicted_s'] * 1e3:.2f} ms ({r['error']:+.0%})" if "predicted_s" in r
                else f"– ({r['why_not']})")
        print_line(f"  {escape(r['label'])} n={r['n']}{over}: measured {r['measured_s'] * 1e3:.2f} ms "
                      f"(mean step; median {r['measured_median_s'] * 1e3:.2f}), predicted {escape(pred)}")
    real = judged(rows)
    if real:
        print_line(f"  within ±10% of the mean step at {within(real)} of {len(real)} points above "
                      f"world size 1, not oversubscribed (of the median step: "
                      f"{within(real, 'error_median')})")
    if not to_profiles:
        return rows
    sweep = records[0].get("scale_sweep") or {}
    for name in profile or sweep.get("profiles") or [DEFAULT_PROFILE]:
        if name not in hardware.profiles():  # named by the sweep's records, not typed (that is checked)
            print_line(f"unknown hardware profile {escape(name)} named by the sweep: no extrapolation to it")
            continue
        try:
            fabric = hardware.load_profile(name)
        except hardware.BadProfile as exc:
            print_line(f"{escape(str(exc))}: no extrapolation to it")
            continue
        print_line(f"[bold]{name}[/] ({fabric.device}), weak scaling, parallel efficiency "
                      f"(utilisation {UTILISATION[0]:.0%} / {UTILISATION[1]:.0%} / "
                      f"{UTILISATION[2]:.0%} of peak):")
        for label, c in cal.items():
            batch = c["profile"]["batches"][0]["per_rank_batch"]
            rows = extrapolate(c, fabric, batch, to)
            if not rows:
                print_line(f"  {escape(label)}: no FLOP count or no peak for its precision on this profile")
                continue
            # as the report's table: its worker counts, the middle figure with its range up to BOUNDS_FROM (the
            # terminal had dropped the range there and listed other counts)
            cells = [f"N={r['n']}: " + (f"{r['low']:.0%}–{r['high']:.0%}" if r["n"] > cm.BOUNDS_FROM
                                        else f"{r['mid']:.0%} ({r['low']:.0%}–{r['high']:.0%})")
                     for r in rows if r["n"] in _ext_ns(to)]
            print_line(f"  {escape(label)} (batch {batch}/GPU): " + ", ".join(cells))
    return rows


def sweep_kind(records: list[dict]) -> str:
    """"digits, strong scaling, bound to cores": what a sweep's points have in common, to group sweeps by."""
    first = records[0]
    bound = any((r.get("controls") or {}).get("bind_cores") for r in records)
    return (f"{first.get('workload', '?')}, {(first.get('scale') or {}).get('scaling', 'strong')} scaling"
            + (", bound to cores" if bound else ""))


def accuracy_lines(judged: list[tuple[Path, list[dict], list[dict]]]) -> list[str]:
    """`compare predict DIR DIR ...`: the model's step-time accuracy over every sweep given, per kind of sweep,
    beside how far the measurement itself moved between a point's repeats."""
    def share(rows, key="error"):
        return f"{within(rows, key)} of {len(rows)}"

    every = [r for _, _, rows in judged for r in rows]
    lines = [f"the model across {len(judged)} sweeps: the step time within ±10% of the measured mean step at "
             f"{share(every)} points above world size 1, not oversubscribed (of the median step: "
             f"{share(every, 'error_median')})"]
    kinds: dict[str, list[list[dict]]] = {}
    for _, records, rows in judged:
        kinds.setdefault(sweep_kind(records), []).append(rows)
    for kind, sweeps in sorted(kinds.items()):
        rows = [r for s in sweeps for r in s]
        if not rows:
            lines.append(f"  {kind} ({len(sweeps)} sweeps): no point above world size 1 predicted")
            continue
        per = [within(s) for s in sweeps if s]
        errors = [abs(r["error"]) for r in rows]
        lines.append(f"  {kind} ({len(sweeps)} sweep{'s' if len(sweeps) > 1 else ''}): {share(rows)}; per sweep "
                     f"{min(per)} to {max(per)}; |error| median {statistics.median(errors):.0%}, largest "
                     f"{max(errors):.0%}")
    spread = [r for r in every if len(r["measured_repeats_s"]) > 1]
    if spread:
        widths = [repeat_spread(r) for r in spread]
        inside = sum(min(r["measured_repeats_s"]) <= r["predicted_s"] <= max(r["measured_repeats_s"]) for r in spread)
        lines.append(f"how far the measurement itself moved: at the {len(spread)} points with repeats, the repeats' "
                     f"mean steps spread over a median {statistics.median(widths):.0%} of the point's mean (up to "
                     f"{max(widths):.0%}); the prediction fell inside its point's range of repeats at {inside} of "
                     f"{len(spread)}")
    return lines


def sweep_version(records: list[dict]) -> int | None:
    """The model version a sweep was made with (None: made before the model was versioned)."""
    return (records[0].get("scale_sweep") or {}).get("model_version")


def _score_line(s: dict, rho: str | None = None) -> str:
    """A sweep's scores in words; `rho`: the ranking's words where they are not the sweep's own rho."""
    if not s["points"]:
        return "no point above world size 1 predicted"
    if rho is None:
        rho = ", ".join(f"N={n} {'–' if r is None else f'{r:.2f}'}" for n, r in s["rho"].items())
    return (f"{s['points']} points: {s['pass']} pass, {s['fail']} fail, {s['undecidable']} undecidable; median "
            f"|error| {s['median_abs_error']:.0%}; within ±10%: the model {s['within']}, the naive sum of parts "
            f"{s['naive_within']}, the world-size-1 step {s['same_as_1_within']}; ranking rho {rho}")


def _pooled_rho(sweep_scores: list[dict]) -> str:
    """The ranking over several sweeps: each sweep's rho (its adapters ranked within one workload and world size),
    summarised per world size as their median and range; the points of different sweeps are never ranked together
    (one workload's every step can be longer than another's, and a pooled rho would rank workloads, not
    adapters)."""
    per_n: dict[int, list[float]] = {}
    for s in sweep_scores:
        for n, r in s["rho"].items():
            if r is not None:
                per_n.setdefault(n, []).append(r)
    if not per_n:
        return "– (no sweep ranks 3 rows or more)"
    return ", ".join(
        f"N={n} median {statistics.median(v):.2f} over {len(v)} sweep{'s' if len(v) > 1 else ''} ({min(v):.2f} to "
        f"{max(v):.2f}; each within its sweep, never pooled across them)" for n, v in sorted(per_n.items()))


def validation_lines(judged_sweeps: list[tuple[Path, list[dict], list[dict]]]) -> list[str]:
    """`compare predict --validate DIR...`: the sweeps made with the current model version scored (its validation:
    the model was frozen before they were made), the others listed as the data it was developed on."""
    current = [(d, rec, rows) for d, rec, rows in judged_sweeps if sweep_version(rec) == VERSION]
    older = [(d, rec) for d, rec, _ in judged_sweeps if sweep_version(rec) != VERSION]
    lines = [f"model version {VERSION} (fingerprint {FINGERPRINT}): validation on the {len(current)} sweep(s) made "
             f"with it (PASS: within ±10% of the measured mean step, at any number of repeats; FAIL: beyond 10% plus "
             f"the point's own 95% half-width; UNDECIDABLE: between, or beyond 10% with fewer than 3 repeats)"]
    each = [scores(rows) for _, _, rows in current]
    for (d, _, _), s in zip(current, each):
        lines.append(f"  {d}: {_score_line(s)}")
    if len(current) > 1:
        pooled = scores([r for _, _, rows in current for r in rows])
        lines.append(f"  all of them: {_score_line(pooled, _pooled_rho(each))}")
    if older:
        made = ", ".join(f"{d} (" + ("before versioning" if sweep_version(rec) is None
                                      else f"version {sweep_version(rec)}") + ")" for d, rec in older)
        lines.append(f"development data, not scored as validation ({len(older)} sweep(s) made with another model): "
                     f"{made}")
    return lines
