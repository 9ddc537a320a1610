"""`compare comm` in the parent: validate, launch each backend through its adapter, write records and a report.

One record per (backend, op, size) cell, `kind: "comm"`, in the same records.jsonl / report.md / PNG layout as
`compare run`; `compare report DIR` re-renders either kind.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import adapters
from harness import comm as commmod
from harness import env as envmod
from harness import record
from harness.launch import run_launch
from harness.runner import BadInput, _check_writable, default_threads
from harness.spec import RunSpec
from harness.timing import slowest_rank_steps, step_stats

COMM_FILES = ("records.jsonl", "report.md", "busbw.png")


@dataclass
class CommRequest:
    backends: list[str] | None = None
    ops: list[str] | None = None
    sizes: str = "1K:64M"
    world_size: int = 2
    device: str = "cpu"
    dtype: str = "fp32"
    max_iters: int = 50
    timeout_s: float = 900.0
    out: Path | None = None
    results_dir: Path = Path("results")
    force: bool = False
    command: str = "compare comm"
    extra: dict = field(default_factory=dict)


def plan(req: CommRequest):
    if req.device not in ("cpu", "cuda"):
        raise BadInput(f"unknown device '{req.device}'; valid choices: cpu, cuda")
    if req.world_size < 2:
        raise BadInput(f"world size must be at least 2 for communication, got {req.world_size}")
    if req.dtype not in commmod.DTYPES:
        raise BadInput(f"unknown dtype '{req.dtype}'; valid choices: {', '.join(commmod.DTYPES)}")
    ops = req.ops if req.ops is not None else list(commmod.DEFAULT_OPS)
    for op in ops:
        if op not in commmod.OPS:
            raise BadInput(f"unknown op '{op}'; valid choices: {', '.join(commmod.OPS)}")
    if not ops:
        raise BadInput(f"no ops given; valid choices: {', '.join(commmod.OPS)}")
    try:
        sizes = commmod.parse_sizes(req.sizes)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if not sizes:
        raise BadInput("no sizes given; use e.g. --sizes 1K:64M")
    names = req.backends if req.backends is not None else adapters.comm_backends()
    runnable, unavailable = [], []
    for name in names:
        if name not in adapters.comm_backends():
            raise BadInput(f"unknown backend '{name}'; valid choices: {', '.join(adapters.comm_backends())}")
        adapter_name = adapters.comm_backend_adapter(name)
        avail = adapters.availability(adapter_name, req.device, req.world_size)
        if not avail:
            if req.backends is not None:
                raise BadInput(f"backend '{name}' cannot run here: {avail.message()}")
            unavailable.append((name, adapter_name, avail.message()))
            continue
        runnable.append((name, adapters.get(adapter_name)({}, req.device)))
    if not runnable:
        raise BadInput("no backend can run here: " + "; ".join(f"{n}: {r}" for n, _, r in unavailable))
    out = req.out or req.results_dir / (f"comm_{envmod.hardware_slug(req.device)}_n{req.world_size}_"
                                        f"{datetime.now().strftime('%Y%m%d-%H%M%S')}")
    _check_writable(out, req.force)
    return {"request": req, "ops": ops, "sizes": sizes, "runnable": runnable, "unavailable": unavailable,
            "out": out}


def execute(p, ui=None) -> list[dict[str, Any]]:
    req, out = p["request"], p["out"]
    out.mkdir(parents=True, exist_ok=True)
    for f in COMM_FILES:
        (out / f).unlink(missing_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="compare-comm-"))
    cores = envmod.usable_cores()
    base = {"schema_version": record.SCHEMA_VERSION, "kind": "comm", "run_id": out.name,
            "time_utc": datetime.now().astimezone().isoformat(timespec="seconds"), "command": req.command,
            "env": envmod.collect(req.device), "world_size": req.world_size, "device": req.device,
            "dtype": req.dtype, "oversubscribed": req.device == "cpu" and req.world_size > cores}
    records: list[dict[str, Any]] = []
    try:
        for name, adapter_name, reason in p["unavailable"]:
            records.append({**base, "backend": name, "adapter": adapter_name, "op": None, "size_bytes": None,
                            "status": "unavailable", "reason": reason})
        for name, adapter in p["runnable"]:
            rank_dir = scratch / name
            spec = RunSpec(adapter=adapter.name, workload="-", world_size=req.world_size, device=req.device,
                           global_batch=0, steps=0, warmup=0, threads=default_threads(req.world_size, None), seed=0,
                           rank_dir=str(rank_dir), mode="comm",
                           comm={"ops": p["ops"], "sizes": p["sizes"], "dtype": req.dtype,
                                 "max_iters": req.max_iters})
            if ui:
                ui(f"{name}: launching {req.world_size} ranks with {adapter.launcher} "
                   f"({len(p['ops'])} ops x {len(p['sizes'])} sizes)")
            outcome = run_launch(adapter, spec, req.timeout_s)
            shutil.copy(outcome.log_path, out / "logs" / f"{name}.log")
            records += cells_to_records(base, name, adapter, outcome)
            record.write_records(out / "records.jsonl", records)
            if ui:
                ok = sum(r["status"] == "ok" for r in records if r["backend"] == name)
                ui(f"{name}: {outcome.status} {outcome.reason} - {ok} cells ok")
    finally:
        if records:
            record.write_records(out / "records.jsonl", records)
            render(out, records)
        shutil.rmtree(scratch, ignore_errors=True)
    return records


def cells_to_records(base, name, adapter, outcome) -> list[dict[str, Any]]:
    common = {**base, "backend": name, "adapter": adapter.name, "launcher": adapter.launcher,
              "launcher_argv": outcome.argv, "load_avg_before": outcome.load_avg_before}
    if outcome.status != "ok":
        return [{**common, "op": None, "size_bytes": None, "status": outcome.status, "reason": outcome.reason,
                 "log_tail": outcome.log_tail}]
    ranks = sorted(outcome.ranks, key=lambda r: r["rank"])
    n = len(ranks)
    recs = []
    for i, cell in enumerate(ranks[0]["cells"]):
        per_rank = [r["cells"][i] for r in ranks]
        rec = {**common, "op": cell["op"], "group": commmod.OPS[cell["op"]].group, "size_bytes": cell["size_bytes"],
               "elements": cell["elements"], "backend_name": ranks[0]["backend"],
               "framework": ranks[0]["framework"].get("framework")}
        unsupported = [c["unsupported"] for c in per_rank if "unsupported" in c]
        if unsupported:
            recs.append({**rec, "status": "unsupported", "reason": unsupported[0]})
            continue
        errors = [c["error"] for c in per_rank if "error" in c]
        if errors:
            recs.append({**rec, "status": "failed", "reason": errors[0]})
            continue
        wrong = sum(not c["correct"] for c in per_rank)
        stats = step_stats(slowest_rank_steps([c["times_s"] for c in per_rank]))
        algbw = cell["size_bytes"] / stats["median"] / 1e9
        factor = commmod.busbw_factor(cell["op"], n)
        recs.append({**rec, "status": "ok" if wrong == 0 else "failed",
                     "reason": "" if wrong == 0 else f"wrong result on {wrong} of {n} ranks",
                     "wrong_ranks": wrong, "time_s": stats, "algbw_GBps": algbw, "busbw_factor": factor,
                     "busbw_GBps": algbw * factor})
    return recs


def _size(b: int) -> str:
    for unit, scale in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if b >= scale and b % scale == 0:
            return f"{b // scale}{unit}"
    return f"{b}B"


def render(out: Path, records: list[dict[str, Any]]) -> Path:
    r0 = records[0]
    e = r0["env"]
    backends = list(dict.fromkeys(r["backend"] for r in records))
    ok_backends = [b for b in backends if any(r["backend"] == b and r["op"] for r in records)]
    over = " (oversubscribed: more ranks than cores)" if r0.get("oversubscribed") else ""
    md = [f"# compare comm: {', '.join(backends)}, {r0['world_size']} ranks{over}, {r0['dtype']}, "
          f"{e['cpu_cores_usable']}-core {'CPU' if r0['device'] == 'cpu' else ', '.join(e.get('gpus', []))}", ""]
    for r in records:
        if not r["op"]:
            md.append(f"- **{r['backend']}**: {r['status']} — {r['reason']}")
    md += ["", "Time per op: median [p10–p90] of the slowest rank, µs. algbw = size / time; busbw = algbw × "
           "factor (nccl-tests). ✗: wrong result (a failed cell).", ""]
    ops = list(dict.fromkeys(r["op"] for r in records if r["op"]))
    for op in ops:
        cells = [r for r in records if r["op"] == op]
        factor = next((r["busbw_factor"] for r in cells if "busbw_factor" in r), None)
        md += [f"## {op}" + (f" (busbw factor {factor:.3g})" if factor else ""), ""]
        head = "| size | " + " | ".join(f"{b} µs | {b} algbw GB/s | {b} busbw GB/s" for b in ok_backends) + " |"
        md += [head, "|" + "---|" * (1 + 3 * len(ok_backends))]
        for size in sorted({r["size_bytes"] for r in cells}):
            row = [_size(size)]
            for b in ok_backends:
                c = next((r for r in cells if r["backend"] == b and r["size_bytes"] == size), None)
                if c is None:
                    row += ["–"] * 3
                elif c["status"] == "unsupported":
                    row += [f"n/a: {c['reason']}".replace("|", "/"), "", ""]
                elif c["status"] != "ok" and "time_s" not in c:
                    row += [f"failed: {c['reason']}".replace("|", "/"), "", ""]
                else:
                    t = c["time_s"]
                    mark = "" if c["status"] == "ok" else " ✗"
                    row += [f"{t['median'] * 1e6:,.1f} [{t['p10'] * 1e6:,.1f}–{t['p90'] * 1e6:,.1f}]{mark}",
                            f"{c['algbw_GBps']:.3f}", f"{c['busbw_GBps']:.3f}"]
            md.append("| " + " | ".join(row) + " |")
        md.append("")
    md += ["## Provenance", "", f"- Command: `{r0['command']}`", f"- Run: {r0['run_id']} at {r0['time_utc']}; "
           f"git commit {e.get('git_commit')}",
           f"- Hardware: {e['cpu_model']}, {e['cpu_cores_usable']} usable cores; GPUs: "
           f"{', '.join(e.get('gpus', [])) or 'none'}",
           f"- Software: Python {e['python']}, torch {e['torch']}; " + "; ".join(
               sorted({f"{r['backend']}: {r.get('framework')} via {r.get('launcher')}" for r in records
                       if r.get("framework")})),
           "- Every rank checks one result of every cell against the expected values before timing; timed "
           "iterations run on zero-filled buffers after warm-up, with a barrier before each cell.", ""]
    png = plot(out, records, ops, ok_backends)
    if png:
        md += ["![busbw](busbw.png)", ""]
    path = out / "report.md"
    path.write_text("\n".join(md))
    return path


def plot(out: Path, records, ops, backends) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not ops or not backends:
        return None
    cols = min(3, len(ops))
    rows = (len(ops) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, op in zip(axes.flat, ops):
        for b in backends:
            cells = sorted((r for r in records if r["op"] == op and r["backend"] == b and "busbw_GBps" in r),
                           key=lambda r: r["size_bytes"])
            if cells:
                ax.plot([c["size_bytes"] for c in cells], [c["busbw_GBps"] for c in cells], marker="o",
                        markersize=3, label=b)
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
    fig.tight_layout()
    path = out / "busbw.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
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
        lines.append(f"{b}: {len(ok)}/{len(cells) - na} cells ok" + (f" ({na} unsupported)" if na else "") + (f"; all_reduce peak busbw {best:.3f} GB/s" if best
                                                                 else "") + (
            f"; median of medians {statistics.median(c['time_s']['median'] for c in ok) * 1e6:.0f} µs" if ok else ""))
    return lines
