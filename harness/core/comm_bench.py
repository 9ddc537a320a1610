"""`compare comm` in the parent: check the request, launch each backend through its adapter, write records.

Runs in: the parent (each rank runs harness/rank/comm_cells.py). One record per (backend, op, size) cell,
`kind: "comm"`, in the same records.jsonl / report.md / PNG layout as `compare run`; `compare report DIR` re-renders
either kind (harness/reports/).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import adapters
from harness.core import estimate
from harness.ground import outdir
from harness.ground import provenance as envmod
from harness.ground.record import SCHEMA_VERSION
from harness.core.checks import check_common, check_cores, check_list
from harness.core.plans import CommPlan
from harness.core.checks import MAX_ITERS
from harness.core.requests import CommRequest
from harness.core.rows import build_rows
from harness.ground.errors import BadInput
from harness.core.session import Render, Session
from harness.ground.sizes import format_mib, format_size, parse_sizes
from harness.ground.stats import median_interval, slowest_rank_steps, step_stats
from harness.launching import hosts, interrupt
from harness.launching.launch import run_launch
from harness.shared import collectives
from harness.shared.spec import RunSpec

RESULT_FILES = ("records.jsonl", "report.md", "busbw.png")
MAX_GAP_S = 1.0
"""The longest --gap: a second of busy work before each of up to --iters calls per cell is already minutes."""


def plan(req: CommRequest) -> CommPlan:
    topology = hosts.resolve(req)
    check_common(req, min_world=2)
    # The cores a world size needs before the sizes it sets a floor on (`-n 10000` was answered with the buffer size)
    over = check_cores(req, req.world_size) if topology is None else False
    if req.dtype not in collectives.DTYPES:
        raise BadInput(f"unknown dtype '{req.dtype}'; valid choices: {', '.join(collectives.DTYPES)}")
    if req.max_iters < 1:
        raise BadInput(f"--iters must be at least 1, got {req.max_iters}")
    if req.max_iters > MAX_ITERS:
        raise BadInput(f"--iters must be at most {MAX_ITERS:,}, got {req.max_iters}")
    if not 0 <= req.gap_s <= MAX_GAP_S:  # also refuses nan and inf
        raise BadInput(f"--gap must be between 0 and {MAX_GAP_S * 1e3:g} ms, got {req.gap_s * 1e3:g}")
    ops = req.ops if req.ops is not None else list(collectives.DEFAULT_OPS)
    check_list(req.ops, list(collectives.OPS), "op")
    for op in ops:
        if op not in collectives.OPS:
            raise BadInput(f"unknown op '{op}'; valid choices: {', '.join(collectives.OPS)}")
    try:
        sizes = parse_sizes(req.sizes)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if not sizes:
        raise BadInput("no sizes given; use e.g. --sizes 1K:64M")
    least = collectives.DTYPES[req.dtype] * req.world_size  # one element per rank
    if min(sizes) < least:
        raise BadInput(f"size {format_size(min(sizes))} is less than one {req.dtype} element per rank ({least} bytes "
                       f"at {req.world_size} ranks); choose --sizes of at least {least}")
    dup = next((x for i, x in enumerate(sizes) if x in sizes[:i]), None)
    if dup is not None:
        raise BadInput(f"size {format_size(dup)} listed twice in --sizes {req.sizes}")
    elem = collectives.DTYPES[req.dtype]
    timed: dict[int, list[int]] = {}  # the bytes each size is timed at (harness/rank/comm_cells.py): whole elements,
    for size in sizes:                # a multiple of the world size
        timed.setdefault(max(req.world_size, size // elem // req.world_size * req.world_size) * elem, []).append(size)
    same = next((v for v in timed.values() if len(v) > 1), None)
    if same is not None:
        at = max(req.world_size, same[0] // elem // req.world_size * req.world_size) * elem
        raise BadInput(f"sizes {', '.join(format_size(x) for x in same)} would all be timed as {format_size(at)} "
                       f"(whole {req.dtype} elements, a multiple of {req.world_size} ranks); give sizes at least "
                       f"{least} bytes apart")
    memory = envmod.memory_total_bytes()
    if max(sizes) > memory:
        raise BadInput(f"size {format_size(max(sizes))} is more than this machine's memory "
                       f"({format_mib(memory)}); choose --sizes up to a fraction of it (every rank holds "
                       f"a buffer of the size, and all_gather world size times it)")
    check_list(req.backends, adapters.comm_backends(), "backend")
    names = req.backends if req.backends is not None else adapters.comm_backends()
    for name in names:
        if name not in adapters.comm_backends():
            raise BadInput(f"unknown backend '{name}'; valid choices: {', '.join(adapters.comm_backends())}")
    rows = build_rows(req, [(n, adapters.comm_backend_adapter(n), {}) for n in names], req.backends is not None,
                      "backend", topology=topology)
    if topology is not None:
        topology = hosts.probe(topology)  # every remote host answers, or one line and exit 2
        over = hosts.check_cores(topology, req.oversubscribe)
    nodes = f"_{len(topology.nodes)}nodes" if topology is not None else ""
    out = req.out or req.results_dir / (f"comm_{envmod.hardware_slug(req.device)}_n{req.world_size}{nodes}_"
                                        f"{datetime.now().strftime('%Y%m%d-%H%M%S')}")
    outdir.check(out, req.force, RESULT_FILES)
    cells = len(rows) * len(ops) * len(sizes)  # one record each, about a launch record's size without steps
    outdir.check_room(out, outdir.least_written(cells, 0, True), f"records, report and plot of {cells} cells")
    return CommPlan(req, out, rows, oversubscribed=over, topology=topology, ops=ops, sizes=sizes)


def execute(p: CommPlan, ui=None, render: Render | None = None) -> tuple[list[dict[str, Any]], bool]:
    """Run every backend; `ui(line)` gets progress lines; `render` writes the report at the end (None: the records
    alone). Returns (records, interrupted)."""
    req = p.request
    base = {"schema_version": SCHEMA_VERSION, "kind": "comm", "run_id": p.out.name,
            "time_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": req.command,
            "env": envmod.collect_safely(req.device), "world_size": req.world_size, "device": req.device,
            "dtype": req.dtype, "oversubscribed": p.oversubscribed,
            "bind_cores": req.bind_cores, "gap_s": req.gap_s, "legend": adapters.legend()}
    interrupted = False
    remote = p.topology is not None and p.topology.remote
    with Session(p.out, RESULT_FILES, shared_scratch=remote) as session:
        try:
            session.save([{**base, "backend": row.label, "adapter": row.name, "op": None, "size_bytes": None,
                           "status": "unavailable", "reason": row.reason} for row in p.unavailable])
            keys = {row.label: estimate.comm_key(p, row.label) for row in p.runnable}
            line, left = estimate.comm_line(list(keys.values()))
            if ui:
                ui(line)
            for row in p.runnable:
                interrupt.check()
                adapter = row.adapter
                spec = RunSpec(adapter=adapter.name, workload="-", world_size=req.world_size, device=req.device,
                               global_batch=0, steps=0, warmup=0,
                               threads=hosts.threads_per_process(req.world_size, req.threads, p.topology),
                               rank_dir=str(session.scratch / row.label), mode="comm", topology=p.topology,
                               bind_cores=req.bind_cores,
                               comm={"ops": p.ops, "sizes": p.sizes, "dtype": req.dtype, "max_iters": req.max_iters,
                                     "gap_s": req.gap_s})
                if ui:
                    where = "" if p.topology is None else f" on {hosts.describe_slots(p.topology.nodes)}"
                    ui(f"{row.label}: launching {req.world_size} ranks{where} with {adapter.launcher} "
                       f"({len(p.ops)} ops x {len(p.sizes)} sizes)"
                       + ("" if left is None else f" (run: about {estimate.duration(max(left, 1.0))} left)"))
                outcome = run_launch(adapter, spec, req.timeout_s, stall_s=req.stall_s)
                session.keep_log(outcome, f"{row.label}.log")
                if outcome.status == "ok":
                    estimate.remember_seconds(keys[row.label], outcome.wall_time_s)
                if left is not None:
                    left -= outcome.wall_time_s
                recs = cells_to_records(base, row.label, adapter, outcome, spec)
                session.save(recs)
                if ui:
                    ok = sum(r["status"] == "ok" for r in recs)
                    said = outcome.reason if outcome.reason.startswith(outcome.status) else \
                        f"{outcome.status} {outcome.reason}".strip()
                    ended = (f"; the launch then ended badly {outcome.shutdown_error}" if outcome.shutdown_error
                             else "")
                    ui(f"{row.label}: {said} - {ok} cells ok{ended}")
                if outcome.interrupted:
                    interrupted = True
                    break
        except KeyboardInterrupt:
            interrupted = True
        if interrupted:
            ran = {r["backend"] for r in session.records}
            session.save([{**base, "backend": row.label, "adapter": row.name, "op": None, "size_bytes": None,
                           "status": "not_run", "reason": "not run: the run was interrupted"}
                          for row in p.runnable if row.label not in ran])
        session.finish(render)
    return session.records, interrupted


def cells_to_records(base, name, adapter, outcome, spec=None) -> list[dict[str, Any]]:
    common = {**base, "backend": name, "adapter": adapter.name, "launcher": adapter.launcher,
              "launcher_argv": outcome.argv, "load_avg_before": outcome.load_avg_before}
    if outcome.concurrent_runs:  # another compare run measured at the same time (harness/launching/machine.py)
        common["concurrent_compare_runs"] = outcome.concurrent_runs
    if spec is not None and spec.topology is not None:  # where the ranks ran (single-host records stay as they were)
        common["topology"] = {**hosts.describe(spec.topology, outcome.ranks, outcome.processes),
                              "node_commands": outcome.node_commands}
    if outcome.shutdown_error:  # every cell was measured and written; only the launch's ending went wrong
        common["shutdown_error"] = outcome.shutdown_error
    if outcome.status != "ok":
        return [{**common, "op": None, "size_bytes": None, "status": outcome.status, "reason": outcome.reason,
                 "log_tail": outcome.log_tail}]
    ranks = sorted(outcome.ranks, key=lambda r: r.rank)
    n = len(ranks)
    recs = []
    for i, cell in enumerate(ranks[0].cells):
        per_rank = [r.cells[i] for r in ranks]
        rec = {**common, "op": cell["op"], "group": collectives.OPS[cell["op"]].group, "size_bytes": cell["size_bytes"],
               "elements": cell["elements"], "backend_name": ranks[0].backend,
               "framework": ranks[0].framework.get("framework")}
        unsupported = [c["unsupported"] for c in per_rank if "unsupported" in c]
        if unsupported:
            recs.append({**rec, "status": "unsupported", "reason": unsupported[0]})
            continue
        errors = [c["error"] for c in per_rank if "error" in c]
        if errors:
            recs.append({**rec, "status": "failed", "reason": errors[0]})
            continue
        wrong = sum(not c["correct"] for c in per_rank)
        slowest = slowest_rank_steps([c["times_s"] for c in per_rank])
        stats = step_stats(slowest)
        algbw = cell["size_bytes"] / stats["median"] / 1e9
        factor = collectives.busbw_factor(cell["op"], n)
        # The median call's interval over the iterations (distribution-free): busbw's bounds from its time's
        within = median_interval(slowest)
        bounds = (None if within["lo"] is None else
                  [cell["size_bytes"] * factor / within["hi"] / 1e9, cell["size_bytes"] * factor / within["lo"] / 1e9])
        recs.append({**rec, "status": "ok" if wrong == 0 else "failed",
                     "reason": "" if wrong == 0 else f"wrong result on {wrong} of {n} ranks",
                     "wrong_ranks": wrong, "time_s": stats, "algbw_GBps": algbw, "busbw_factor": factor,
                     "busbw_GBps": algbw * factor, "busbw_interval_GBps": bounds})
    return recs


