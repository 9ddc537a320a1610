"""What a record holds: every top-level field of every kind of record, written once, here.

Runs in: the parent (and `python -m harness.core.schema`, which prints docs/records.md). A test checks that every field
of every committed fixture record is here for its kind, and that docs/records.md is this module's rendering, so the
schema cannot grow in the code without growing here. Nested fields are described inside their parent's entry.
"""

from __future__ import annotations

from harness.core.record import READABLE_SCHEMAS, SCHEMA_VERSION, checked_fields

RUN, SCALE, COMM = "run", "scale", "comm"
ALL = (RUN, SCALE, COMM)
TRAIN = (RUN, SCALE)

FIELDS: list[tuple[str, tuple[str, ...], str]] = [
    # identity and provenance
    ("schema_version", ALL, f"{SCHEMA_VERSION} now; `compare report` reads {', '.join(map(str, READABLE_SCHEMAS))} "
                            f"(1: throughput from the median step, rendered as it always was)."),
    ("kind", ALL, "`run` (compare run), `scale` (compare scale) or `comm` (compare comm)."),
    ("run_id", ALL, "The run's id, shared by every record of one command."),
    ("time_utc", ALL, "When the run started (UTC, ISO 8601)."),
    ("command", ALL, "The command line as typed."),
    ("rerun_command", (RUN,), "The command line that reproduces the run exactly: its request written back with what "
                              "it resolved (the rows, world size, steps, warm-up, global batch, equivalence steps, "
                              "the order seed; harness/core/argv.py)."),
    ("env", ALL, "The machine and software: versions (torch, frameworks, Python), CPU model, flags and usable cores, "
                 "memory, GPUs, `git_commit`, `tuning_env` (framework tuning variables the ranks inherited)."),
    ("started_wall", TRAIN, "Wall-clock time (epoch seconds) the run started."),
    ("row_order", TRAIN, "The rows as asked for, in that order."),
    ("order_seed", (RUN,), "Seed of the shuffled order of rows within each round (`--order-seed` repeats it)."),
    ("position", (RUN,), "This launch's place in its round's shuffled order (0 first)."),
    ("baseline", (RUN,), "The row ratios are measured against (`--baseline`, or the first row on the full world "
                         "size)."),
    ("precision_mode", (RUN,), "With `--precision`: target, budget, rounds used, how it ended, elapsed seconds and "
                               "the widest interval left."),
    ("oversubscribed", ALL, "More processes than usable cores (`--oversubscribe`): every figure is labelled."),
    ("run_interrupted", TRAIN, "Set on every record of a run stopped by Ctrl-C or SIGTERM: where it was stopped."),
    ("concurrent_compare_runs", TRAIN, "Other compare runs alive on this machine when the timed steps began."),
    # what ran
    ("adapter", ALL, "The adapter's name (`ddp`, `horovod`, ...)."),
    ("label", TRAIN, "The row: the adapter with its knobs (`ddp:bucket_cap_mb=1`)."),
    ("summary", TRAIN, "The adapter's one-line description."),
    ("launcher", ALL, "How its processes were started (`torchrun`, `horovodrun`, `deepspeed`, ...)."),
    ("workload", TRAIN, "The workload's name."),
    ("world_size", ALL, "Ranks (devices for DataParallel)."),
    ("repeat", TRAIN, "Which launch of the row (0, 1, ...): each repeat is a fresh launch."),
    ("status", ALL, "`ok`, `not_reached` (until-target budget spent, fully measured), `unavailable`, `failed`, "
                    "`timeout` (including a stall), `interrupted`, `not_run`; comm cells also `unsupported`."),
    ("reason", ALL, "Why a row is not ok: the first error line, the unavailable framework's reason and fix."),
    ("log_tail", TRAIN, "The last lines of a failed launch's log (a stall's: each rank's Python stacks)."),
    ("reached", TRAIN, "Where rank 0 was when a launch failed: its phase, step and total."),
    ("shutdown_error", ALL, "A launch that ended badly after every rank had written its result: measurements kept."),
    ("leftover_processes_killed", TRAIN, "Processes of the launch still alive after it ended, killed by compare."),
    ("topology", ALL, "Processes, devices used, backend, launcher argv and process group; across hosts the nodes, "
                      "processes per node and every rank's host."),
    ("comm_schedule", TRAIN, "The adapter's communication pattern as the cost model reads it (kind, buckets, wire "
                             "scale, overlap)."),
    ("controls", TRAIN, "The conditions: global / per-device / per-process batch, training-set size, steps, warm-up, "
                        "seed, LR and its rule, precision, compression, threads per rank, knobs, workload options, "
                        "CUDA math settings."),
    ("adapter_info", TRAIN, "What the framework reported: versions, resolved knobs, notes."),
    ("param_count", TRAIN, "Trainable parameters of the model."),
    ("data", TRAIN, "Where the data came from (source, sizes)."),
    ("load_avg_before", ALL, "The machine's load average when the launch started."),
    ("launch_wall", TRAIN, "Wall-clock time the launch started."),
    ("wall_time_s", TRAIN, "The launch's wall time, start to end."),
    ("phases_s", TRAIN, "Seconds per phase of the launch (launcher, python, imports, init, setup, gate, warm-up, "
                        "timed, eval, result, shutdown)."),
    ("setup_s", TRAIN, "The slowest rank's set-up (model, wrapper, data)."),
    ("time_to_first_step_s", TRAIN, "From the launch's start to the end of the first step, without the gate wait."),
    # speed
    ("samples_per_s", TRAIN, "Samples over the timed window's summed slowest-rank step time (the mean step)."),
    ("samples_per_s_median_step", TRAIN, "The same at the median step (schema 1's figure)."),
    ("samples_per_s_per_device", TRAIN, "`samples_per_s` over the devices used."),
    ("step_time_s", TRAIN, "The slowest rank's step time: median, p10, p90, mean, n."),
    ("step_times_s", TRAIN, "Every timed step's slowest-rank time."),
    ("step_time_spread_ranks_s", TRAIN, "Each rank's own median step time."),
    ("step_clock", TRAIN, "`host_sync` (CPU) or `cuda_events` (CUDA events, no sync between steps)."),
    ("skipped_steps_timed", TRAIN, "fp16 steps the loss scaler skipped inside the timed window."),
    ("cpu_time_s_per_rank", TRAIN, "Each rank's process CPU time (all threads) over the timed window."),
    ("cpu_s_per_step", TRAIN, "CPU seconds per timed step per rank (mean over ranks)."),
    ("timed_window_wall_s", TRAIN, "The timed window by the wall clock (synchronised on CUDA), slowest rank."),
    ("noise", TRAIN, "What else the machine did over the timed window (rank 0's /proc/stat): ticks, steal share, "
                     "other processes' CPU share, flags."),
    ("cpu_affinity_per_rank", TRAIN, "Each rank's CPU affinity."),
    ("cpu_affinity_any_thread_per_rank", TRAIN, "Every core any thread of each rank may run on."),
    # memory
    ("peak_memory_bytes", TRAIN, "The largest rank's peak over the timed steps."),
    ("peak_memory_bytes_per_rank", TRAIN, "Each rank's peak: CPU RSS less file-backed pages, or CUDA allocated."),
    ("peak_memory_kind", TRAIN, "What the peak counts (`rss_anon`, `cuda_max_allocated`, ...)."),
    ("peak_memory_file_bytes_per_rank", TRAIN, "File-backed pages beside the peak (shared libraries, mapped data)."),
    ("peak_memory_cuda_reserved_bytes_per_rank", TRAIN, "On CUDA: the caching allocator's reserved peak."),
    ("peak_memory_host_bytes_per_rank", TRAIN, "On CUDA: the host memory peak (offloaded state, pinned buffers)."),
    # what it learned
    ("loss_curve", TRAIN, "The global training loss per step."),
    ("final_loss", TRAIN, "Mean of the last `final_loss_window` steps' loss."),
    ("final_loss_window", TRAIN, "How many steps `final_loss` averages."),
    ("eval", TRAIN, "Test metric: accuracy, loss, target, target_met, test samples, per-rank counts."),
    ("max_param_diff", TRAIN, "Largest parameter difference from the single-process reference after the "
                              "equivalence steps."),
    ("equivalence", TRAIN, "The check: steps, tolerance, whether it was checked (and why not), passed."),
    ("reference_run", TRAIN, "The single-process reference launch: status, start, wall time."),
    # time to target
    ("until_target", TRAIN, "With `--until-target`: target, metric, evaluation cadence, step budget."),
    ("ttt", TRAIN, "Time to target: reached, steps, training and end-to-end seconds, evaluations, curve."),
    # scaling
    ("straggler", TRAIN, "With `--straggler`: the slow rank, its factor and the delay added per step."),
    ("compute_profile", TRAIN, "Each rank's compute time per batch size, measured alone after training."),
    ("load_balance", TRAIN, "Each rank's share of the step spent computing against waiting."),
    ("contention", (SCALE,), "The calibration launch: compute with and without the other ranks busy."),
    ("scale", (SCALE,), "This point of the sweep: scaling, world sizes, point, per-rank batch, baseline."),
    ("scale_sweep", (SCALE,), "The sweep: scaling, world sizes, threads per rank, the model's inputs."),
    # comm
    ("device", (COMM,), "`cpu` or `cuda`."),
    ("dtype", (COMM,), "The buffers' element type."),
    ("backend", (COMM,), "The communication backend (`torch`, `horovod`, `deepspeed`)."),
    ("backend_name", (COMM,), "The transport it ran on (`gloo`, `nccl`, ...)."),
    ("framework", (COMM,), "The framework and its version."),
    ("launcher_argv", (COMM,), "The launch's command line."),
    ("op", (COMM,), "The collective (`all_reduce`, `all_gather`, ...)."),
    ("group", (COMM,), "Which table of the report the op belongs to."),
    ("size_bytes", (COMM,), "The buffer size (divisible by the world size)."),
    ("elements", (COMM,), "Elements in the buffer."),
    ("wrong_ranks", (COMM,), "Ranks whose checked result was wrong."),
    ("time_s", (COMM,), "The slowest rank's time per call: median, p10, p90, mean, n."),
    ("algbw_GBps", (COMM,), "Size over the median time."),
    ("busbw_factor", (COMM,), "nccl-tests' factor from algorithm to bus bandwidth for this op and world size."),
    ("busbw_GBps", (COMM,), "algbw × busbw_factor."),
    ("busbw_interval_GBps", (COMM,), "busbw's 95% distribution-free interval for the median call over the "
                                     "iterations ([lo, hi]; None below 6 iterations)."),
]


def fields(kind: str) -> dict[str, str]:
    return {name: doc for name, kinds, doc in FIELDS if kind in kinds}


def markdown() -> str:
    lines = ["# Records", "",
             "Every run writes `records.jsonl`: one JSON object per row and launch (`compare run`, `compare scale`) "
             "or per backend, op and size (`compare comm`). `compare report DIR` renders a report from these alone. "
             "This page is generated from `harness/core/schema.py` (`python -m harness.core.schema > "
             "docs/records.md`); a test keeps the two equal and every field of the committed fixture records listed. "
             "The `required` column is what `compare report` checks before it renders anything "
             "(harness/core/record.py `check_record`; nested fields are checked too); a field without it is "
             "optional. Those fields and their types are declared once, as TypedDicts in harness/core/record.py "
             "(`Base`, `Run`, `Measured`, `Scale`, `Comm`, `CommMeasured`; nested: `Env`, `Controls`, `StepTime`, "
             "`ScalePoint`, `TimeToTarget`, `Reached`), which the check reads and readers are typed with "
             "(`RunRecord`, `CommRecord`).", "", "| field | in | required | what it holds |", "|---|---|---|---|"]
    required = checked_fields()
    for name, kinds, doc in FIELDS:
        lines.append(f"| `{name}` | {', '.join(kinds)} | {required.get(name, '')} | {doc} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
