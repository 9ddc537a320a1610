"""`compare plan`'s answer in words and as JSON: the cluster, every planned configuration's step and memory per GPU,
what fits, the recommendation with its margin, and every assumption stated (harness/model/planner.py).

Runs in: the parent."""

from __future__ import annotations

import dataclasses
from typing import Any

from harness.model import VERSION, hardware
from harness.model.activations import DTYPE_BYTES, LOSS_BYTES
from harness.model.calibration import UTILISATION
from harness.model.planner import ALLOCATOR_HEADROOM, NIC_EFFICIENCY, TIE, Assumed, GiB, Plan, profile_nics
from harness.model.shapes import OPTIMIZER_TRAFFIC, OPTIMIZERS
from harness.shared.text import rate


def _ms(s: float) -> str:
    return f"{s * 1e3:.3g}" if s < 1 else f"{s * 1e3:,.0f}"


def _gib(b: float) -> str:
    return f"{b / GiB:.3g}"


def _where(plan: Plan) -> str:
    """"on 64 x NVIDIA H100 SXM 80GB (8 nodes x 8, ...): ..." or the run's own CPU machine."""
    c, f = plan.cluster, plan.cluster.fabric()
    capacity = c.capacity_gib()
    if f is None:
        mem = (f", {capacity:.3g} GiB of host memory per process (its share: the host's memory is shared by its "
               f"{c.gpus} processes)" if capacity else "")
        return (f"on the run's own machine: {c.machine}{mem}; each row at the world size it ran "
                f"({c.gpus} processes), every row at its own precision" if c.dtype is None else
                f"on the run's own machine: {c.machine}{mem}; each row at the world size it ran ({c.gpus} processes), "
                f"{c.dtype}")
    if c.nic_gbps is not None:
        net = (f"{c.nics_per_node} x {c.nic_gbps:g} Gb/s NIC{'s' if c.nics_per_node > 1 else ''} per node "
               f"({f.inter_busbw_Bps / 1e9:.3g} GB/s all-reduce bus bandwidth at {NIC_EFFICIENCY:.0%} of line rate)")
    else:
        net = (f"the profile's network ({f.inter_busbw_Bps / 1e9:.3g} GB/s all-reduce bus bandwidth across nodes"
               + (", unused: one node" if c.nodes == 1 else ""))
        kept, nics = profile_nics(c.profile, c.gpus_per_node)
        if kept < nics:  # the profile's figure is its full node's NICs summed
            full = hardware.load_profile(c.profile).devices_per_node
            net += (f": {kept} of its {nics} NICs a node, those of {c.gpus_per_node} GPU"
                    f"{'s' if c.gpus_per_node > 1 else ''}, where the profile's {full}-GPU node sums all {nics} to "
                    f"{f.inter_busbw_Bps * nics / kept / 1e9:.3g} GB/s; --nic-gbps gives your own")
        net += ")"
    return (f"on {c.gpus} x {f.device} ({c.nodes} node{'s' if c.nodes > 1 else ''} x {c.gpus_per_node}, profile "
            f"{c.profile}, {capacity:g} GiB each): {f.intra_busbw_Bps / 1e9:.3g} GB/s inside a node, {net}; "
            f"{c.dtype}")


def _swamped(r: dict) -> str:
    """Where the run resolved the pair but the sessions joined before on its machine put a new session's estimate of
    it either way (the run report's "this run alone, not this machine"), that prediction; else ""."""
    if not r.get("swamped") or not r.get("resolved"):
        return ""
    (lo, hi), sessions = r["swamped"]
    return (f", but the {sessions} sessions joined before on that machine expect a new session's ratio anywhere in "
            f"[{lo:.2f}-{hi:.2f}] (95% prediction interval): that run alone does not rank them on its machine")


def _unresolved(r: dict) -> str:
    """", not resolved ..." where a ratio does not rank its rows: by the run's own verdict for two measured rows (the
    p-value after Holm's correction that it gives), else where its range reaches 1; "" where it is resolved."""
    from harness.reports.verdict import p_text

    outcome = r.get("verdict")
    if outcome is None:
        return "" if r["low"] > 1 else ", not resolved at every figure of the range"
    if outcome == "faster":
        return "" if r["resolved"] else f", within {TIE:.0%}"
    if outcome == "no interval":
        return ", not resolved: the run's verdict ranks nothing (fewer than 3 launches a row)"
    if outcome == "not compared":
        return ", not resolved: the run's verdict did not compare them"
    said = f" (p = {p_text(r['p_holm'])} after Holm's correction over its pairs)" if r.get("p_holm") is not None else ""
    return f", not resolved by the run's verdict{said}" + (", equivalent within its margin" if outcome == "equivalent"
                                                           else "")


SHARDED = {0: "no model state sharded", 1: "its optimizer state sharded",
           2: "its gradients and optimizer state sharded", 3: "its parameters, gradients and optimizer state sharded"}
"""A row's `partitions` in words (the ZeRO paper's stages, as each framework's schedule declares them)."""


def lines(plan: Plan) -> list[str]:
    """The plan as a terminal would show it: what was priced on what, the table, the recommendation, what was
    not planned and why, and how each figure was counted."""
    c, s, f = plan.cluster, plan.shape, plan.cluster.fabric()
    source = plan.source or Assumed()
    capacity = c.capacity_gib()
    def flop(v):
        return f"{v / 1e12:,.0f} TFLOP" if v >= 1e15 else f"{v / 1e12:.3g} TFLOP" if v >= 1e12 else f"{v / 1e9:.3g} GFLOP"

    flops_text = flop(s.flops_per_sample)
    acts = s.activations
    per = "GPU" if f is not None else "process"
    pers = "GPUs" if f is not None else "processes"
    fits = (f"fits in {capacity:.4g} GiB" if capacity else "fits") + ("" if acts else " (no activations counted)")
    trainable = (f" ({s.trainable:,.0f} trainable, {s.params - s.trainable:,.0f} frozen)" if s.frozen else "")
    out = [f"{s.name}: {s.params:,.0f} parameters{trainable}, {flops_text} per sample (forward and backward), "
           f"{s.optimizer}; {plan.batch} per {per}"
           + (f" ({plan.batch * c.gpus:,} global)" if f is not None else "")
           + (f"; {s.checkpointing} checkpointing, {flop(s.recompute_flops_per_sample)} a sample recomputed in "
              f"backward" if s.checkpointing.mode != "none" else ""),
           _where(plan),
           f"model version {VERSION}; {source.header(c, f)}",
           *([plan.beyond_checked] if plan.beyond_checked else []),
           "",
           f"| backend | step (ms) | samples/s | communication exposed (ms) | model states per {per} (GiB) | "
           f"framework buffers (GiB) | " + (f"activations (GiB) | total per {per} (GiB) | " if acts else "")
           + f"{fits} |",
           "|---|---|---|---|---|---|" + ("---|---|" if acts else "") + "---|"]
    for r in sorted(plan.rows, key=lambda r: r["_steps"][1]):
        st, sp = r["step_s"], r["samples_per_s"]
        total = f"{_gib(r['activation_bytes'])} | {_gib(r['total_bytes'])} | " if acts else ""
        out.append(f"| {r['label']} | {_ms(st['mid'])} [{_ms(st['low'])}-{_ms(st['high'])}] | "
                   f"{rate(sp['mid'])} [{rate(sp['low'])}-{rate(sp['high'])}] | {_ms(r['exposed_s'])} | "
                   f"{_gib(r['model_state_bytes'])} | {_gib(r['buffer_bytes'])} | "
                   f"{total}{ {True: 'yes', False: 'no', None: '?'}[r['fits']]} |")
    out.append("")
    rec = plan.recommendation
    too_big = [r for r in plan.rows if r["fits"] is False]
    held = {r["label"]: r["_held"] for r in plan.rows}
    if rec is None and plan.rows:
        what, cures = (("model states, buffers and activations", "more GPUs, a smaller model, a dtype with fewer "
                        "bytes, a smaller per-GPU batch or activation checkpointing") if acts else
                       ("model states and buffers", "more GPUs, a smaller model or a dtype with fewer bytes"))
        out.append(f"recommendation: none: no configuration's {what} fit in {capacity:.4g} GiB per {per}; {cures}")
    elif rec is None:
        out.append("recommendation: none: no configuration could be priced (see below)")
    else:
        text = f"recommendation: {rec['label']}"
        memory = rec.get("memory_bytes") or held
        if rec["tied"]:
            how = ("the fastest at the middle figure and every row before the first resolved slower than it: two "
                   "measured rows by the run's own verdict (its pairing and Holm's correction over its pairs), else "
                   "slower by more than {tie} at the top of the range and not faster at the bottom"
                   if getattr(plan.source, "kind", "") == "measured" else
                   "within {tie} at every figure of the range, or faster at some").format(tie=f"{TIE:.0%}")
            if f is not None and c.gpus == 1 and getattr(plan.source, "kind", "") != "measured":
                # no communication and an assumed compute: nothing the model prices differs between the rows
                how = "on 1 GPU nothing is communicated, so the model prices every configuration's step alike"
            room = f" of {capacity:.4g}" if capacity else ""
            text += (f", the least sharded ({SHARDED[rec.get('partitions', 0)]}) of the {len(rec['tied']) + 1} "
                     f"configurations the model does not rank by speed ({how}): {', '.join(rec['tied'])}; "
                     + (f"it fits ({_gib(memory[rec['label']])}{room} GiB per {per}, the allocator's headroom "
                        f"included), and sharding more would buy memory it does not need at costs" if acts else
                        f"its model states and buffers fit ({_gib(memory[rec['label']])}{room} GiB per {per}, the "
                        f"allocator's headroom included), but its activations are not counted (give --hidden), so "
                        f"whether the whole fits is not known; sharding more has costs")
                     + " the model does not price (a sharded framework's per-unit gathers and casts, its partition "
                       "bookkeeping)")
        devices = {r["label"]: r["devices"] for r in plan.rows}
        if rec.get("fastest"):
            cost = rec["slower"]
            saved = memory[rec["fastest"]] - memory[rec["label"]]
            what = "its step takes" if devices[rec["label"]] == devices[rec["fastest"]] else "it takes per sample"
            text += (f"; {what} {cost['mid']:.2f}x [{cost['low']:.2f}-{cost['high']:.2f}] that of "
                     f"{rec['fastest']}, the fastest at the middle figure, "
                     + (f"for {_gib(saved)} GiB less per {per}" if saved >= 0 else
                        f"holding {_gib(-saved)} GiB more per {per}"))
        if rec.get("least_memory"):
            cost, least = rec["least_memory_ratio"], rec["least_memory"]
            what = "its step takes" if devices[rec["label"]] == devices[least] else "it takes per sample"
            text += (f"; {least} holds the least of the {len(rec['tied']) + 1} configurations the model does not "
                     f"rank by speed ({_gib(memory[least])} GiB per {per}, "
                     f"{_gib(memory[rec['label']] - memory[least])} less): {what} {cost['mid']:.2f}x "
                     f"[{cost['low']:.2f}-{cost['high']:.2f}] that of {rec['label']}")
        if rec["next"]:
            r = rec["ratio"]
            # named: after a clause about another row, a bare "faster than" was read as that row's
            text += (f"; {rec['label']} is {r['mid']:.2f}x [{r['low']:.2f}-{r['high']:.2f}] faster than {rec['next']}"
                     + ((" (95% interval of the measured rows' ratio, in that run alone)"
                         if r.get("measured") is None or abs(r["mid"] / r["measured"] - 1) < 0.005 else
                         f" (planned here, the run measured {r['measured']:.2f}x: its 95% interval's width, in that "
                         f"run alone, around the planned ratio)") if r.get("interval") else "")
                     + _unresolved(r) + _swamped(r))
        if rec.get("measured_memory"):
            text += (f" (memory of {', '.join(rec['measured_memory'])}: the peak the run measured, more than "
                     f"the plan counts)")
        if not (rec["tied"] or rec["next"] or rec.get("fastest") or rec.get("least_memory")):
            text += " (the only configuration that fits)"  # nothing else was priced beside it
        out.append(text)
    left = [r for r in plan.rows if r.get("left_out")]
    if left:
        out.append("left out of the recommendation: " + "; ".join(f"{r['label']} ({r['left_out']})" for r in left))
    reduce = {r["reduce_bytes"] for r in plan.rows if r.get("reduce_bytes")}
    if len(reduce) > 1:  # rows whose gradients cross the network at different precisions
        sixteen = c.dtype if c.dtype in ("bf16", "fp16") else "16-bit"
        names = {4: "fp32", 2: sixteen}
        out.append("gradients reduced across GPUs in: " + "; ".join(
            f"{names.get(b, f'{b:g} bytes an element')}: "
            + ", ".join(r["label"] for r in plan.rows if r.get("reduce_bytes") == b)
            for b in sorted(reduce, reverse=True))
            + " (each row's communication priced at its own, each framework at its defaults)")
    if too_big:
        out.append("does not fit: " + "; ".join(
            f"{r['label']} ({_gib(r['total_bytes'])} GiB: {_gib(r['model_state_bytes'])} of model states + "
            f"{_gib(r['buffer_bytes'])} of buffers + {_gib(r['activation_bytes'])} of activations + "
            f"{_gib(r['loss_bytes'] + r['headroom_bytes'])} of loss and allocator headroom)" if acts else
            f"{r['label']} ({_gib(r['_held'])} GiB of model states, buffers and allocator headroom)"
            for r in too_big))
    if plan.skipped:
        at = f" at {c.dtype}" if c.dtype else ""
        out.append(f"not planned{at}: " + "; ".join(f"{k} ({v})" for k, v in plan.skipped.items()))
    rules: dict[str, list[str]] = {}
    for r in plan.rows:
        rules.setdefault(r["rule"], []).append(r["label"])
    frozen = ", T trainable of them" if s.frozen else ""
    out.append(f"model states (P parameters{frozen}, N = {c.gpus} {pers}, L = {s.largest['module']:,.0f} "
               f"parameters in the largest module, U = {s.largest['unit']:,.0f} in the largest shard unit; bytes): "
               + "; ".join(f"{', '.join(labels)}: {rule.replace('every GPU', 'every process') if f is None else rule}"
                           for rule, labels in rules.items()))
    if s.param_bytes != 4:  # a model built in fp64 (or another dtype) trains as built: no mixed-precision row
        out.append(f"parameters as built: {'+'.join(s.param_dtypes)}, {s.param_bytes:g} bytes an element: every row "
                   f"trains the model as built (a mixed precision is defined over an fp32 model, so none is planned), "
                   f"so each element the formulas above and the buffers below count in fp32 is held at "
                   f"{s.param_bytes:g} bytes, and its gradients cross the network at that size; its FLOPs are priced "
                   f"at the {c.dtype} peak" + (f" (the profile has no {s.built_dtype} one: an upper bound where the "
                                               f"GPU runs {s.built_dtype} slower)" if s.built_dtype else ""))
    if s.frozen:
        out.append(f"frozen parameters: {s.params - s.trainable:,.0f} of {s.params:,.0f} hold their storage only "
                   f"(no gradient, no optimizer state, no gradient communication); the model prices FSDP's and "
                   f"ZeRO-3's gathers from the gradients, so it leaves out gathering the frozen ones")
    buffers: dict[str, list[str]] = {}
    for r in plan.rows:
        for b in r["buffers"]:
            buffers.setdefault(f"{b['name']}: {b['how']}", []).append(f"{r['label']} {_gib(b['bytes'])} GiB")
    out.append("framework buffers (each framework's own, at its defaults): "
               + ("; ".join(f"{what} ({', '.join(rows)})" for what, rows in buffers.items()) if buffers else
                  "none for these configurations"))
    if acts:
        step = s.built_dtype if s.built_dtype in DTYPE_BYTES else c.dtype  # a model not in fp32 runs as built
        dtype = f"{step}'s bytes" if step else "bytes of each row's precision"
        wide = step if step and DTYPE_BYTES[step] > 4 else "fp32"
        out.append(f"activations: {_gib(acts.bytes(step or 'fp32', plan.batch))} GiB per {per} at "
                   f"{plan.batch} per {per}{'' if step else ' (in fp32)'} under every backend ({acts.source})")
        loss = plan.rows[0]["loss_bytes"] if plan.rows else 0.0
        out.append(f"loss over the model's output: {_gib(loss)} GiB per {per} (its {s.output_elements:,.0f} "
                   f"output elements a sample, in {wide} at the start of backward: the log-softmax kept in {wide} "
                   f"and the loss's and the output's gradients, {(LOSS_BYTES + 4) * max(4, DTYPE_BYTES[wide]) / 4:g} "
                   f"bytes an element less the {dtype} counted in the activations)")
    else:
        out.append("activations: not known without --hidden; they and the loss over the output come on top of the "
                   "model states and buffers")
    if f is not None:
        out.append(f"allocator headroom: {ALLOCATOR_HEADROOM:.0%} of the above, assumed (what PyTorch's caching "
                   f"allocator reserves beyond the allocated peak; reserved over allocated was 1.10-1.27 on the "
                   f"H200 this project leased); the CUDA context (a few hundred MiB, outside the allocator) is not "
                   f"counted; total and fits hold all of it")
    else:
        out.append("total and fits hold model states, buffers, activations and the loss; the Python process, its "
                   "libraries and the allocator's own overhead come on top")
    out += source.footer()
    if hasattr(source, "row_lines"):
        out += source.row_lines(plan.rows, c, plan.batch)
    if f is not None:
        slow = f.overlap_slowdown
        overlap = (f"compute overlapping communication takes {1 + slow:.3g}x as long (the profile's "
                   f"overlap_compute_slowdown)" if slow else "communication overlapping compute is taken not to "
                   "slow it (the profile states no slowdown)")
        overhead = ("no framework overhead (none was measured on the target)" if source.kind == "assumed" else
                    "each row's own time outside forward, backward, optimizer and communication as the run measured "
                    "it, carried over unscaled")
        out.append(f"how: {s.source}; {overhead}; {overlap}")
    else:
        out.append(f"how: {s.source}")
    return out


def as_json(plan: Plan) -> dict[str, Any]:
    """The plan with every input and assumption it was made with, so a plan can be diffed against a later one."""
    # what "fits" counted: without --hidden the activations are not, and a row that "fits" may not
    counted = ("model states, buffers, activations, loss and allocator headroom" if plan.shape.activations else
               "model states, buffers and allocator headroom; activations not counted (not known without --hidden)")
    rows = [{**{k: v for k, v in r.items() if not k.startswith("_")}, "fits_counts": counted} for r in plan.rows]
    f = plan.cluster.fabric()
    source = plan.source or Assumed()
    assumptions = {
        "compute": source.as_json(),
        "allocator_headroom": ALLOCATOR_HEADROOM if f is not None else None,
        "loss_bytes_per_output_element": LOSS_BYTES,
        "tie": TIE,
        "nic_efficiency": NIC_EFFICIENCY if plan.cluster.nic_gbps is not None else None,
        "overlap_compute_slowdown": f.overlap_slowdown if f is not None else None,
        "optimizer_state_bytes_per_parameter": OPTIMIZERS[plan.shape.optimizer],
        "optimizer_traffic_bytes_per_parameter": OPTIMIZER_TRAFFIC[plan.shape.optimizer],
        "framework_overhead": "none (not measured on the target)" if source.kind == "assumed" else
                              "each row's own, as the run measured it",
    }
    shape = dataclasses.asdict(plan.shape) | {"tensors": len(plan.shape.tensors), "trainable": plan.shape.trainable,
                                              "frozen": sum(plan.shape.frozen),
                                              "checkpointing": str(plan.shape.checkpointing)}
    cluster = dataclasses.asdict(plan.cluster) | {"gpus": plan.cluster.gpus}
    if f is not None:
        cluster |= {"device": f.device, "peak_tflops": f.peak_tflops, "memory_GiB": plan.cluster.capacity_gib(),
                    "intra_busbw_Bps": f.intra_busbw_Bps, "inter_busbw_Bps": f.inter_busbw_Bps}
    return {"model_version": VERSION, "inputs": plan.inputs, "beyond_checked": plan.beyond_checked,
            "model": shape, "cluster": cluster,
            "per_gpu_batch": plan.batch, "utilisation": list(UTILISATION) if source.kind == "assumed" else None,
            "assumptions": assumptions, "rows": rows, "recommendation": plan.recommendation,
            "not_planned": plan.skipped}
