"""Time per epoch, and the seed blog's chart: one bar per backend, seconds per epoch.

Runs in: the parent (report). The seed project (github.com/tczhangzhi/pytorch-distributed, "Distribution is all you
need") timed one ImageNet epoch on 4 V100s under nn.DataParallel, torch.distributed, torch.multiprocessing, apex and
Horovod, in that order (its README lists the five scripts so, and its figure compares them). We draw the same
chart from our records, in the same order, our other backends after, with our controls printed under it.

The arithmetic (records alone): the data pipeline drops the last partial batch (workloads/base.py
`batch_indices`), so an epoch is floor(train samples / global batch) steps of the global batch, and

    time per epoch = steps per epoch x global batch / samples/s

with samples/s as the run report gives it (records of schema 3: over the timed window by the wall clock; schema 2:
over the summed step times; both the geometric mean over launches with its 95% interval, which the time per epoch
then carries; schema 1: global batch / median step time).

In an until-target run, evaluation is measured too: evaluation per epoch = (steps per epoch / K) evaluations x the
median seconds of one, which is the measured per-epoch cost when K is one epoch's steps.
"""

from __future__ import annotations

import statistics
import textwrap
from pathlib import Path
from typing import Any

from harness.ground.record import MEASURED, has_intervals, precision_of, throughput_clock
from harness.reports import figures, palette
from harness.shared.text import shorten


def blog_label(adapter: str, legend: palette.Legend) -> tuple[int, str] | None:
    """(place, name) of an adapter in the seed blog's figure, as the run recorded it (`legend`, from
    `Adapter.blog_label`; torch.distributed.launch there is torchrun, its successor, here); None for one the seed did
    not have."""
    label = (legend.get(adapter) or {}).get("blog_label")
    return (label[0], label[1]) if label else None


def samples_per_epoch(train_samples: int, global_batch: int) -> tuple[int, int]:
    """(steps, samples) of one epoch: full global batches only, the last partial one dropped."""
    steps = train_samples // global_batch
    return steps, steps * global_batch


def epoch_rows(records: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per table row (a summarised row of harness/reports/run_rows.py), in the seed's order then ours:
    seconds per epoch for measured rows, the status for the others. Empty when the records predate
    `controls.train_samples` (nothing is guessed)."""
    measured = [r for r in rows if r["measured"]]
    if not measured or any(r["first"]["controls"].get("train_samples") is None for r in measured):
        return []
    legend = palette.legend_of(records)
    places = {r["first"]["adapter"]: blog_label(r["first"]["adapter"], legend) for r in rows}
    ordered = sorted(rows, key=lambda r: places[r["first"]["adapter"]][0] if places[r["first"]["adapter"]]
                     else float("inf"))  # sorted() is stable: our other rows keep their order
    out = []
    aside = figures.not_ranked(records)  # a row the verdict leaves out says so where its epoch is read
    for row in ordered:
        f = row["first"]
        entry = {"label": row["adapter"], "adapter": f["adapter"], "blog_label": (places[f["adapter"]] or (0, None))[1],
                 "measured": row["measured"], "status": row["status"], "not_ranked": aside.get(row["adapter"]),
                 "reason": "; ".join(row["reasons"]) or row["status"]}
        if row["measured"]:
            ctl = f["controls"]
            steps, samples = samples_per_epoch(ctl["train_samples"], ctl["global_batch"])
            entry.update(precision=precision_of(f))
            entry.update(train_samples=ctl["train_samples"], global_batch=ctl["global_batch"], steps=steps,
                         samples=samples, samples_per_s=row["samples_per_s"],
                         epoch_s=samples / row["samples_per_s"], eval_per_epoch_s=None)
            iv = row.get("interval") or {}
            if iv.get("lo"):  # the samples/s interval over launches, turned into seconds per epoch
                entry.update(epoch_interval=(samples / iv["hi"], samples / iv["lo"]))
            reps = [r for r in records if r["label"] == row["adapter"] and r["status"] in MEASURED and r.get("ttt")]
            if reps:
                every = reps[0]["ttt"]["eval_every"]
                each = statistics.median(s for r in reps for s in r["ttt"]["eval_s_each"])
                entry.update(eval_every=every, eval_s=each, eval_per_epoch_s=each * steps / every)
        out.append(entry)
    return out


def _s(seconds: float) -> str:
    """Seconds to three significant digits, trailing zeros kept ("2.60", beside "2.68"), whole from 100 on."""
    return f"{seconds:.0f}" if seconds >= 100 else f"{seconds:#.3g}"


def section(entries: list[dict[str, Any]]) -> list[str]:
    """The report's "Time per epoch" section (markdown lines)."""
    if not entries:
        return []
    m = next(e for e in entries if e["measured"])
    with_eval = any(e.get("eval_per_epoch_s") is not None for e in entries)
    lines = [f"One epoch = floor({m['train_samples']:,} training samples / global batch {m['global_batch']}) = "
             f"{m['steps']} steps = {m['samples']:,} samples (the last partial batch is dropped, as the data "
             f"pipeline does); time per epoch = {m['samples']:,} / samples/s. Rows in the order of the seed "
             f"blog's chart (nn.DataParallel, torch.distributed, torch.multiprocessing, apex, Horovod), then ours."
             + (" Evaluation per epoch: (steps per epoch / K) evaluations × the median measured seconds of one; "
                "it is not part of the training time." if with_eval else ""), "",
             "| adapter | seed blog's name | samples/s | time per epoch, s |" + (" + evaluation per epoch, s |"
                                                                              if with_eval else ""),
             "|---|---|---|---|" + ("---|" if with_eval else "")]
    for e in entries:
        name = e["blog_label"] or "–"
        if not e["measured"]:
            lines.append(f"| {e['label']} | {name} | | **{e['status']}** |" + (" |" if with_eval else ""))
            continue
        extra = ""
        if with_eval:
            extra = (" – |" if e.get("eval_per_epoch_s") is None else
                     f" {e['eval_per_epoch_s']:.3g} ({e['steps'] / e['eval_every']:.3g} × {e['eval_s'] * 1e3:.3g} ms) |")
        span = f" [{_s(e['epoch_interval'][0])}–{_s(e['epoch_interval'][1])}]" if e.get("epoch_interval") else ""
        aside = f" ({e['not_ranked']})" if e.get("not_ranked") else ""
        lines.append(f"| {e['label']}{aside} | {name} | {e['samples_per_s']:,.0f} | {_s(e['epoch_s'])}{span} |{extra}")
    return lines


def controls_text(records: list[dict[str, Any]], entries: list[dict[str, Any]]) -> str:
    """Our controls, printed under the chart (the seed's figure gives none)."""
    m = next(e for e in entries if e["measured"])
    r0 = next(r for r in records if r["status"] in MEASURED)
    env, ctl = r0["env"], r0["controls"]
    hw = ", ".join(env["gpus"]) if env.get("gpus") else f"{env['cpu_model']}, {env['cpu_cores_usable']} cores, no GPU"
    ttt = r0.get("ttt")
    timed = (f"every step from the first counted (until-target run, evaluated every {ttt['eval_every']} steps)"
             if ttt else f"{ctl['warmup']} warm-up steps discarded, {ctl['steps']} timed")
    return (f"Ours: {r0['workload']}, {m['train_samples']:,} training samples, global batch {m['global_batch']} "
            f"for every backend, {m['steps']} steps = 1 epoch; world size {r0['world_size']} on {hw}; "
            f"torch {env['torch']}; fp32 unless the label says otherwise;\n"
            f"seconds per epoch = {m['samples']:,} samples / samples/s, "
            + (("samples/s over the timed window by the wall clock (the slowest rank's)"
                if throughput_clock(r0) == "wall clock" else
                "samples/s over the summed step times (the slowest rank's mean step)") + ", the geometric mean over "
               "launches" + (", whiskers its 95% interval" if any(e.get("epoch_interval") for e in entries) else
                             "; one launch per backend, so no interval and no whiskers")
               if has_intervals([r for r in records if r["status"] in MEASURED])
               else "samples/s from the median step time (slowest rank)")
            + f", {timed}; same seed, data order and LR everywhere.\n"
            "The seed's figure (the blog post this tool began from, tczhangzhi/pytorch-distributed: docs/"
            "time-to-target.md): ImageNet on 4 Tesla V100 (PCIe); its scripts read JPEGs with 2 loader workers per "
            "process and validate after every epoch: compare the shape of the comparison, not the seconds.")


def plot(out: Path, records: list[dict[str, Any]], entries: list[dict[str, Any]], scope: str) -> Path | None:
    """epoch_time.png: one bar per backend (unavailable and failed ones named, without a bar), titled with what it
    covers (`scope`: figures.scope)."""
    if not entries:
        return None
    plt = figures.pyplot()
    if plt is None:
        return None

    labels = [figures.wrap_label((f"{e['blog_label']} ({e['label']})" if e["blog_label"] else e["label"])
                                 + (f" [{e['precision']}]" if e.get("precision", "fp32") != "fp32" else "")
                                 + (f" [{e['not_ranked']}]" if e.get("not_ranked") else ""), 34)
              for e in entries]
    train = [e.get("epoch_s") or 0.0 for e in entries]
    ev = [e.get("eval_per_epoch_s") or 0.0 for e in entries]
    legend = palette.legend_of(records)
    colours = [palette.colour(e["label"], legend) for e in entries]  # each backend's colour in every figure
    notes = [line for part in controls_text(records, entries).split("\n") for line in textwrap.wrap(part, 125)]
    text_in = 0.12 * len(notes) + 0.1  # the notes under the chart, and the legend above them (inches)
    legend_in = 0.3 if any(ev) else 0.0
    height = 0.55 * len(entries) + 0.2 * sum(label.count("\n") for label in labels) + 1.6 + text_in + legend_in
    fig, ax = plt.subplots(figsize=(8, height))
    ax.barh(labels, train, color=colours)
    if any(ev):  # the evaluation per epoch on top, in the backend's colour, hatched
        ax.barh(labels, ev, left=train, color=colours, alpha=0.45, hatch="//", edgecolor="white")
        from matplotlib.patches import Patch

        fig.legend([Patch(color="#888888"), Patch(facecolor="#888888", alpha=0.45, hatch="//", edgecolor="white")],
                   ["training", "evaluation per epoch (measured)"], loc="lower center",
                   bbox_to_anchor=(0.5, text_in / height), ncol=2, fontsize=8, frameon=False)
    top = max(t + v for t, v in zip(train, ev)) or 1.0
    for i, e in enumerate(entries):
        if e.get("epoch_interval"):
            lo, hi = e["epoch_interval"]
            ax.errorbar([train[i]], [i], xerr=[[max(0.0, train[i] - lo)], [max(0.0, hi - train[i])]], fmt="none",
                        ecolor="#222222", elinewidth=1, capsize=3, zorder=3)
        if e["measured"]:
            end = max(train[i] + ev[i], e["epoch_interval"][1] if e.get("epoch_interval") else 0.0)
            ax.text(end, i, f"  {_s(train[i] + ev[i])} s", va="center", ha="left", fontsize=9)
        else:
            ax.text(top * 0.02, i, f"{e['status']}: {shorten(e['reason'], 70)}", va="center", ha="left", fontsize=8,
                    color="#888888")
    ax.invert_yaxis()
    ax.set_xlabel("seconds per epoch (lower is better)")
    r0 = records[0]
    ax.set_title(f"Seconds per epoch, by backend: {r0['workload']}, world size {r0['world_size']}\n"
                 f"(drawn as the seed blog's chart; its figure and ours: the notes below)\n{scope}", fontsize=10)
    ax.margins(x=0.3)
    fig.text(0.01, 0.01, "\n".join(notes), fontsize=7, va="bottom", ha="left")
    path = figures.save(fig, out / "epoch_time.png", rect=(0, (text_in + legend_in) / height, 1, 1))
    return path
