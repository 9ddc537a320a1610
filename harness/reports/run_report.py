"""The report of a `compare run` (records of kind "run"): report.md (the verdict, the table of its rows:
harness/reports/run_rows.py, notes, controls, provenance), its figures (run_plots.py), and the console's table.

Runs in: the parent. `compare report DIR` calls `render(DIR, read_results(DIR))`; nothing here looks
at anything but the records (their `row_order` and `legend`; for records older than those fields, the adapter
registry's order of rows and colours), so an old run re-renders identically.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from harness.core import design as design_mod
from harness.ground.errors import first_sentence
from harness.ground.outdir import write_text
from harness.ground.provenance import tuning_line
from harness.ground.record import (MEASURED, frozen_note, has_intervals, hardware_text, precision_of, software_text,
                                   throughput_clock)
from harness.ground.sizes import format_mib
from harness.ground.stats import INTERVAL_METHOD, half_width
from harness.launching import machine
from harness.reports import epoch, figures, step_report, ttt
from harness.reports import host_layout as hosts_report
from harness.reports import verdict as verdict_mod
from harness.reports.run_plots import pairs_plot, plot
from harness.reports.run_rows import (SPREAD_FLAG, accuracy_text, diff_text, flops_note, fmt, group, markdown_table,
                                      memory_kind, metric_label, status_text, table_rows, tokens_per_sample,
                                      tokens_text)

WINDOW = {
    "wall clock": "samples/s of a launch = the samples of its timed steps over its timed window by the wall clock, the "
                  "slowest rank's: what a training job gets (each rank's delays counted once)",
    "summed steps": "samples/s of a launch = samples over its summed step times (global batch / mean step time; "
                    "records before schema 3: a rank's delay counts in its own step and again in the next, where its "
                    "peers wait for it, so short steps read a few percent slower than by the wall clock)"}
"""What a launch's samples/s divides by, per throughput_clock (harness/ground/record.py)."""


def eval_note(rows) -> str | None:
    """Why the evaluation column shows no figure, where the workload gave no evaluation (rather than a crash)."""
    skipped: dict[str, list[str]] = {}
    for row in rows:
        if row["measured"] and row.get("accuracy") is None and row.get("eval_skipped"):
            skipped.setdefault(row["eval_skipped"], []).append(row["adapter"])
    if not skipped:
        return None
    every = len(skipped) == 1 and sum(row["measured"] for row in rows) == len(next(iter(skipped.values())))
    return " ".join(f"– in the {metric_label(rows)} column{'' if every else ' (' + ', '.join(a) + ')'}: not "
                    f"evaluated: {why}." for why, a in skipped.items())


def target_note(rows) -> str | None:
    """What a ✗ in the accuracy column was judged against (only where one shows): the workload's target, the run
    that reaches it, and whether this run was as long."""
    missed = [row for row in rows if row["measured"] and row.get("target_met") is False]
    if not missed:
        return None
    ev, ctl = missed[0]["first"]["eval"], missed[0]["first"]["controls"]
    metric = ev.get("metric", "test accuracy")
    text = (f"✗ in the {metric_label(rows)} column ({', '.join(row['adapter'] for row in missed)}): below "
            f"{ev['target']:g}, the "
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
    return _column_notes(rows, "✗", lambda row: row["first"]["equivalence"].get("why_failed"))


def caveat_notes(rows) -> list[str]:
    """What a row's ✓ does not say, where the check found it: a model part that trains in no row, the single
    process included (a reentrant checkpoint whose inputs need no gradient). Rows with the same caveat share a note."""
    return _column_notes(rows, "✓", lambda row: row["first"]["equivalence"].get("caveat"))


def also_notes(rows) -> list[str]:
    """What a row not checked for its precision or compression differs by besides, where the run found it: a loss
    averaged per rank over counts that differ between the ranks, which no backend at any precision undoes."""
    return _column_notes(rows, "(not checked)", lambda row: row["first"]["equivalence"].get("also"),
                         head="Not checked for its arithmetic, and besides")


def unchecked_notes(rows) -> list[str]:
    """Why a row's max_param_diff is "(not checked)", for the terminal, whose table has no room for it (report.md's
    table says it in the cell): a model the check does not apply to (BatchNorm statistics per process, with the
    knob that makes them global; a batch-dependent model). A row of another precision or with compression says why
    in its own precision column, and is left out."""
    def why(row) -> str | None:
        eq = row["first"].get("equivalence") or {}
        said = row.get("max_param_diff") is not None and not eq.get("checked") and eq.get("why_not_checked")
        return said if said and not said.endswith((" arithmetic", " gradient compression")) else None

    return _column_notes(rows, "not checked", why)


def _column_notes(rows, mark: str, reason, head: str | None = None) -> list[str]:
    """One note per reason (`reason(row)`, None for none) of the measured rows, naming the rows that share it; led by
    `head`, else by where `mark` stands ("✗ in the max_param_diff column")."""
    by_reason: dict[str, list[str]] = {}
    for row in rows:
        why = row["measured"] and reason(row)
        if why:
            by_reason.setdefault(why, []).append(row["adapter"])
    head = head or f"{mark} in the max_param_diff column"
    return [f"{head} ({', '.join(labels)}): {why}." for why, labels in by_reason.items()]


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
            f"word (kill -9, the machine, or a write that failed: a full disk, whose error named where the rank "
            f"results were kept) after its last record")


EVAL_MODE = (" The evaluation runs the model's forward in eval mode (model.eval(), torch.no_grad(), under the row's "
             "autocast), where a model may take a path its training never takes: nn.TransformerEncoder's nested-tensor "
             "fast path, say (enable_nested_tensor=False leaves it), or a layer that a backend's eval-mode forward "
             "treats otherwise.")
"""Where an evaluation failed and its training did not: said beside the failure."""


def _notes(rows, records) -> list[str]:
    notes = []
    for note in (eval_note(rows), target_note(rows), *equivalence_notes(rows), *caveat_notes(rows),
                 *also_notes(rows),
                 flops_note(rows)):
        if note:
            notes.append(note)
    stopped = next((r["run_interrupted"] for r in records if r.get("run_interrupted")), None)
    if stopped:
        never = [row["adapter"] for row in rows if row["status"] == "not_run"]
        # a row whose only launch was the one interrupted ran, but measured nothing
        unmeasured = [row["adapter"] for row in rows if not row["measured"] and row["status"] not in
                      ("not_run", "unavailable")]
        said = [f"{', '.join(never)} never ran" if never else "",
                f"{', '.join(unmeasured)} measured nothing before it was stopped" if unmeasured else ""]
        notes.append(f"**The run was interrupted {stopped}**: "
                     + ("; ".join(s for s in said if s) + "." if any(said) else
                        "every adapter had run at least once."))
    cut = cut_short(records)
    if cut:
        notes.append(f"**The run ended before all its launches**: {cut}.")
    notes += hosts_report.note(records)
    notes += machine.note(records, lambda r: f"{r['label']}#{r['repeat']}")
    left = [f"{r['label']}#{r['repeat']} ({r['leftover_processes_killed']})" for r in records
            if r.get("leftover_processes_killed")]
    if left:
        notes.append("**Processes left running after their launch ended, killed by compare** (processes the model "
                     "or the framework started and did not end: a forked worker, a server; their CPU time is not in "
                     "the row's figures): " + "; ".join(left) + ".")
    noisy = [f"{r['label']}#{r['repeat']} ({', '.join(r['noise']['flags'])})" for r in records
             if (r.get("noise") or {}).get("flags")]
    if noisy:
        notes.append("**Launches measured under interference** (read from /proc/stat over each timed window; kept in "
                     "every figure, so their rows' intervals are wider): " + "; ".join(noisy) + ".")
    unchecked = [f"{r['label']}#{r['repeat']}" for r in records if (r.get("noise") or {}).get("unchecked")]
    if unchecked:
        notes.append(f"**Not checked for interference** ({len(unchecked)} launch(es): {', '.join(unchecked[:8])}"
                     f"{' …' if len(unchecked) > 8 else ''}): their timed windows were under 10 ticks of /proc/stat "
                     f"(0.1 s of all the CPUs' time), too short to read other processes' share from; more --steps "
                     f"make them checkable.")
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
            held = {r["adapter"]: _recipe(r["first"].get("dtypes")) for r in rows if r["adapter"] in names}
            if len(set(held.values()) - {None}) > 1:  # one label, other recipes: DeepSpeed's bf16 keeps its weights,
                # gradients and all-reduce in bf16, autocast's keeps them in fp32
                alike: dict[str | None, list[str]] = {}
                for name, recipe in held.items():
                    alike.setdefault(recipe, []).append(name)
                notes.append(f"Same precision label ({label}), not the same recipe: "
                             + "; ".join(f"{', '.join(them)} hold{'s' if len(them) == 1 else ''} "
                                         f"{recipe or 'dtypes not recorded'}" for recipe, them in alike.items())
                             + ": differences between these rows come from the frameworks and from what each keeps "
                               f"in {label}.")
            else:
                itself = "the compression of the gradients" if "wire" in label else "mixed precision"
                notes.append(f"Same precision ({label}): {', '.join(names)}: differences between these rows come "
                             f"from the frameworks, not from {itself} itself.")
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
                                 f"timed measurement was complete before it began and is kept."
                                 + (EVAL_MODE if part == "evaluation" else ""))
            if r["label"] == row["adapter"] and r["status"] in ("failed", "timeout") and r.get("log_tail"):
                tail = "\n".join(r["log_tail"].splitlines()[-15:])
                notes.append(f"**{r['label']}** repeat {r['repeat']} {r['status']}: {r['reason']}\n\n"
                             f"  ```\n{_indent(tail)}\n  ```")
            if r["label"] == row["adapter"] and r.get("log_not_kept"):
                notes.append(f"**{r['label']}** repeat {r['repeat']}: its log is not kept: {r['log_not_kept']}"
                             + ("; the lines above are its end" if r.get("log_tail") else ""))
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
        + (f"; the global gradient norm clipped to {ctl['max_grad_norm']:g} before every optimizer step, each "
           f"backend its own way" if ctl.get("max_grad_norm") is not None else "")
        + ("; the loss is over a counted number of items, and each rank divides its sum by the count's mean over the "
           "ranks (one all-reduce of the count a step), as a single process divides by the global batch's count."
           if ctl.get("loss_normalisation") == "global count" else "."),
        ttt.controls(cfg, (f.get("eval") or {}).get("test_samples")) if cfg else
        f"- {ctl['warmup']} warm-up steps discarded, then {ctl['steps']} timed steps per repeat; per-step time is "
        + (f"the slowest rank's; {WINDOW[throughput_clock(ok[0]['first'])]}; a row's samples/s is the geometric "
           f"mean over its launches with a {INTERVAL_METHOD}; the step-time column describes the distribution."
           if ok[0].get("interval") is not None or has_intervals([ok[0]["first"]]) else
           "the slowest rank's; samples/s = global batch / median step time."),
        f"- Equivalence: parameters after {eq['steps']} steps vs {eq['reference']}; fp32 tolerance "
        f"{eq['tolerance']:g}.",
        f"- Peak memory per rank over the timed steps (the table shows the largest rank's): "
        f"{memory_kind(ok)}.",
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
    again = r.get("rerun_command")  # the request with what it resolved: the steps a design chose, the order seed
    return [
        f"- Command: `{r['command']}`",
        *([f"- To rerun it exactly (what it resolved written back: steps, warm-up, rows, order seed): `{again}`"]
          if again and again != r["command"] else []),
        f"- Run: {r['run_id']} at {r['time_utc']}; git commit {e.get('git_commit') or 'unknown'}",
        f"- Hardware: {hardware_text(e)}",
        f"- Software: {software_text(records)}",
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
    joined = _joined(out, records) if analysis is not None else None
    if isinstance(joined, dict):  # its own session is set against the verdict above, not the cache before this join
        from harness.reports import sessions

        analysis = verdict_mod.analyse(records, between=sessions.here(joined))
    # what every figure covers: they are drawn from this run's records alone, never the verdict over sessions
    joins_of = len(joined["sessions"]) if isinstance(joined, dict) else None
    scope = figures.scope(joins_of)
    plots = plot(out, records, rows, scope)
    if analysis is not None:
        plots += pairs_plot(out, records, analysis, scope)
    epochs = epoch.epoch_rows(records, rows)
    epoch_png = epoch.plot(out, records, epochs, scope)
    r0 = records[0]
    ws = r0["world_size"]
    hw = r0["env"]["gpus"][0] if r0["env"].get("gpus") else f"{r0['env']['cpu_cores_usable']}-core CPU"
    over = " (oversubscribed)" if r0.get("oversubscribed") else ""
    until = f" until {cfg['metric']} ≥ {cfg['target']:g}" if cfg else ""
    md = [f"# {r0['workload']}{until}: {', '.join(group(records))} at world size {ws}{over} on {hw}", ""]
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
        plots = ttt.plots(out, records, trows, cfg, scope) + plots
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
        png = step_report.plot(out, records, order, scope)
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
        md += ["## Plots", "", figures.caption(joins_of), ""] + [f"![{p.stem}]({p.name})" for p in plots] + [""]
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
    # the widest interval of the kind the sentence names, from the records as rendered (a figure kept by the run
    # under an earlier criterion named an interval the table does not show)
    if pairs:
        open_ = [f"{p['a']}/{p['b']}" for p in analysis["pairs"]
                 if (p["simultaneous"]["half_width"] or 1.0) > mode["target"]]
        widest = analysis.get("widest")
        widest = widest and widest_text(widest, analysis)
    else:
        open_ = [k for k, r in analysis["ratios"].items() if (half_width(r) or 1.0) > mode["target"]]
        widths = [(k, half_width(r)) for k, r in analysis["ratios"].items() if half_width(r) is not None]
        widest = max(widths, key=lambda w: w[1]) if widths else None
        widest = widest and (f"{widest[0]} ±{widest[1]:.1%}" if widest[1] <= 1 else
                             f"{widest[0]} {verdict_mod.ratio_text(analysis['ratios'][widest[0]])}")
    lines = [f"Precision mode (`--precision {mode['target'] * 100:g}%`): {mode['rounds']} round(s) in "
             f"{mode['elapsed_s']:.0f} s; {how}" + (f" (widest: {widest})." if widest else ".")]
    if open_:
        lines[0] += f" Not resolved to {target}: {', '.join(open_)}."
    return lines + [""]


def widest_text(widest: tuple[str, float], analysis: dict[str, Any]) -> str:
    """"a/b ±4.1%", the widest pair's simultaneous interval as its relative half-width; past ±100% the interval
    itself ("a/b 1.30× [0.07–24.1]"), where a half-width would say that the ratio could be negative."""
    name, hw = widest
    pair = next((p for p in analysis["pairs"] if f"{p['a']}/{p['b']}" == name), None)
    if hw <= 1 or pair is None or pair["simultaneous"]["lo"] is None:
        return f"{name} ±{hw:.1%}"
    return f"{name} {verdict_mod.ratio_text({**pair['simultaneous'], 'estimate': pair['estimate']})}"


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
        text += f" Widest simultaneous interval: {widest_text(widest, analysis)}."
    open_ = [f"{p['a']}/{p['b']}" for p in analysis["pairs"] if (p["simultaneous"]["half_width"] or 1.0) >
             mode["target"]]
    if open_:
        text += f" Not resolved to {target}: {', '.join(open_)}."
    if not analysis["blocked"]:
        text += (f" The pairs are analysed unpaired (Welch), as {analysis['why_unblocked']}, which the two-stage "
                 "error statement does not cover.")
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

        analysis = verdict_mod.analyse(records, between=sessions.here(joined))
        head = [f"Over {len(joined['sessions'])} sessions:"] + sessions.console_lines(joined) + ["This session alone:"]
    return [escape(line.replace("**", "")) for line in head + analysis["lines"] + precision_lines(records, analysis)
            if line]


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
    notes = [note for note in (eval_note(rows), target_note(rows), *equivalence_notes(rows), *caveat_notes(rows),
                               *also_notes(rows),
                               *unchecked_notes(rows)) if note]
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
                "peak mem/rank", "final loss", metric_label(rows), "max_param_diff", "status"):
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
                  format_mib(row["peak_memory_bytes"]), fmt(row["final_loss"], ".4f"), accuracy_text(row),
                  diff_text(row, short=True), status_text(row))
    return t


RECIPE = tuple(k for k in step_report.DTYPE_HEADS if k != "optimizer")
"""The dtypes (Adapter.dtypes, the dtypes table's columns) that make a precision's recipe: a row's parameters, fp32
master copy, compute, gradients and all-reduce (not the optimizer's state)."""


def _recipe(dtypes: dict[str, str] | None) -> str | None:
    """"params fp32, compute bf16, grads fp32, reduce fp32" (no master copy left out), or None where not recorded."""
    if not dtypes:
        return None
    return ", ".join(f"{k} {dtypes[k]}" for k in RECIPE if dtypes.get(k) not in (None, "none"))
