"""Result records: one JSON object per (adapter, workload, world size, repeat), schema-versioned.

`records.jsonl` is rewritten atomically (temp file + rename) after every adapter finishes, so a crash, a hang or
Ctrl-C later in the run never loses or truncates a finished row. `compare report` renders from these alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from harness.timing import slowest_rank_steps, step_stats

SCHEMA_VERSION = 1
FINAL_LOSS_WINDOW = 10


def base_record(*, run: dict[str, Any], adapter: str, label: str, summary: str, launcher: str, workload: str,
                world_size: int, repeat: int, status: str, reason: str = "") -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, **run, "adapter": adapter, "label": label, "summary": summary,
            "launcher": launcher, "workload": workload, "world_size": world_size, "repeat": repeat,
            "status": status, "reason": reason}


def max_param_diff(params_path: Path, reference: dict | None) -> float | None:
    if reference is None or not params_path.exists():
        return None
    import torch

    params = torch.load(params_path)
    if set(params) != set(reference):
        raise ValueError(f"parameter names differ from the reference: {sorted(set(params) ^ set(reference))[:4]}")
    return max(float((params[n] - reference[n]).abs().max()) for n in params)


def from_outcome(rec: dict[str, Any], outcome, spec, reference: dict | None, workload) -> dict[str, Any]:
    """Fill a base record with everything measured by one launch."""
    rec["topology"] = {"device": spec.device, "processes": outcome.processes, "launcher_argv": outcome.argv,
                       "launch_pgid": outcome.pid}
    rec["wall_time_s"] = outcome.wall_time_s
    rec["load_avg_before"] = outcome.load_avg_before  # other load on the machine: a busy machine shows here
    rec["controls"] = {"global_batch": spec.global_batch, "steps": spec.steps, "warmup": spec.warmup,
                       "seed": workload.seed, "threads_requested": spec.threads, "knobs": spec.knobs,
                       "workload_options": workload.describe()["options"]}
    if outcome.status != "ok":
        rec["log_tail"] = outcome.log_tail
        return rec
    if outcome.shutdown_error:
        rec["shutdown_error"] = outcome.shutdown_error
        rec["log_tail"] = outcome.log_tail
    ranks = sorted(outcome.ranks, key=lambda r: r["rank"])
    r0 = ranks[0]
    devices = sum(r["devices_used"] for r in ranks)
    timed = [r["step_times_s"][spec.warmup:] for r in ranks]
    steps = slowest_rank_steps(timed) if spec.steps else []
    stats = step_stats(steps) if steps else None
    rec["topology"].update({"backend": r0["backend"], "devices_used": devices, "world_size_processes":
                            r0["world_size"], "device_names": sorted({r["device"] for r in ranks})})
    rec["controls"].update({
        "per_device_batch": spec.global_batch // devices, "per_process_batch": r0["per_process_batch"],
        "lr": r0["lr"], "lr_rule": r0["lr_rule"], "precision": r0["precision"],
        "compression": r0.get("compression", "none"),
        "threads_per_rank": [r["threads"] for r in ranks],
        "interop_threads_per_rank": [r["interop_threads"] for r in ranks],
        "omp_num_threads_env": r0["omp_num_threads_env"],
    })
    rec["adapter_info"] = r0["adapter"]
    rec["param_count"] = r0["param_count"]
    rec["data"] = r0["data"]
    if stats:
        rec["step_time_s"] = stats
        rec["samples_per_s"] = spec.global_batch / stats["median"]
        rec["samples_per_s_per_device"] = rec["samples_per_s"] / devices
        rec["step_times_s"] = steps
        rec["step_time_spread_ranks_s"] = [step_stats(t)["median"] for t in timed]
    rec["time_to_first_step_s"] = r0["first_step_end_wall"] - outcome.launch_wall
    rec["setup_s"] = max(r["setup_s"] for r in ranks)
    rec["peak_memory_bytes_per_rank"] = [r["peak_memory_bytes"] for r in ranks]
    rec["peak_memory_bytes"] = max((m for m in rec["peak_memory_bytes_per_rank"] if m is not None), default=None)
    rec["peak_memory_kind"] = r0["peak_memory_kind"]
    # Every process fed an equal slice of the global batch with a mean-reduced loss, so the global batch loss
    # is the mean of the processes' losses.
    curve = [sum(ls) / len(ls) for ls in zip(*(r["losses"] for r in ranks))]
    rec["loss_curve"] = curve
    window = curve[-FINAL_LOSS_WINDOW:]
    rec["final_loss"] = sum(window) / len(window) if window else None
    rec["final_loss_window"] = len(window)
    rec["eval"] = _eval(r0, ranks, workload)
    exact = r0["precision"] == "fp32" and r0.get("compression", "none") == "none"
    checked = exact and workload.batch_independent
    diff = max_param_diff(Path(spec.rank_dir) / "params.pt", reference)
    rec["max_param_diff"] = diff
    rec["equivalence"] = {
        "steps": spec.equiv_steps, "tolerance": workload.equiv_tolerance, "checked": checked,
        "passed": (diff is not None and diff <= workload.equiv_tolerance) if checked else None,
        "reference": f"single process, fp32, global batch {spec.global_batch}, same init and data order",
        "why_not_checked": None if checked else (
            f"{r0['precision']} arithmetic" if r0["precision"] != "fp32"
            else f"{r0['compression']} gradient compression" if not exact
            else "model is batch-dependent (BatchNorm statistics per process)"),
    }
    return rec


def _eval(r0, ranks, workload) -> dict[str, Any] | None:
    if not r0["eval"]:
        return None
    correct, count, loss_sum = r0["eval"]["reduced_mean"]  # means over processes: the ratio is exact
    accuracy = correct / count
    return {"accuracy": accuracy, "loss": loss_sum / count, "target": workload.target,
            "target_met": None if workload.target is None else accuracy >= workload.target,
            "test_samples": round(sum(r["eval"]["local"][1] for r in ranks)),
            "local_counts": [r["eval"]["local"][:2] for r in ranks]}


def write_records(path: Path, records: list[dict[str, Any]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        for rec in records:
            f.write(json.dumps(rec, sort_keys=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_records(path: Path) -> list[dict[str, Any]]:
    records = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            rec = json.loads(line)
            if rec.get("schema_version") != SCHEMA_VERSION:
                raise ValueError(f"{path}:{n}: schema_version {rec.get('schema_version')!r}, "
                                 f"this compare reads {SCHEMA_VERSION}")
            records.append(rec)
    return records
