"""Result records: one JSON object per (adapter, workload, world size, repeat), schema-versioned.

Runs in: the parent. `records.jsonl` is rewritten atomically (temp file + rename) after every launch, so a crash,
a hang or Ctrl-C later in the run never loses or truncates a finished row. `compare report` renders from these
alone.
"""

from __future__ import annotations

import functools
import json
import math
import os
from pathlib import Path
from typing import Any, TypedDict, get_origin, get_type_hints, is_typeddict


SCHEMA_VERSION = 2
"""2: samples/s from the mean step of the timed window (1: the median step); CPU time per rank over the timed window;
the machine's noise over it; the round order's seed and each launch's place in its round; the run's baseline row."""
READABLE_SCHEMAS = (1, 2)
"""Versions `compare report` renders: 1 as it always was (median step, spread across repeats, no intervals)."""


def has_intervals(records: list[dict[str, Any]]) -> bool:
    """Whether every record is of schema 2 or later (throughput over the whole timed window per launch): reports
    give those intervals and a verdict. Every reader asks this, not the version number, so what each version holds
    is known here alone; records of schema 1 render as they always did (median step, spread, no verdict)."""
    return bool(records) and all(r.get("schema_version", 1) >= 2 for r in records)


MEASURED = ("ok", "not_reached")
"""Statuses of a record that carries a full measurement: `not_reached` is an until-target row that trained its
whole step budget without reaching the target (its timings, memory and metrics are all there)."""


def precision_label(controls: dict) -> str:
    """Precision, plus wire compression when on: an fp16-compressed row never passes for plain fp32; and on CUDA an
    fp32 row that ran TF32 convolutions or matmuls says so (cuDNN's default)."""
    c = controls.get("compression", "none")
    label = controls["precision"]
    math = controls.get("cuda_math") or {}
    tf32 = [k for k, on in (("conv", math.get("cudnn_allow_tf32")), ("matmul", math.get("matmul_allow_tf32"))) if on]
    if label == "fp32" and tf32:
        label += f" (TF32 {'/'.join(tf32)})"
    return label + ("" if c == "none" else f" + {c} wire")


LOAD_BALANCE_METHOD = (
    "per rank: step = the rank's own median step time over the timed steps; compute = the median forward + "
    "backward + optimizer step of a plain local copy of the model (no wrapper, no communication) on the rank's "
    "own per-rank batch, timed on every rank at once right after the timed steps; wait = step - compute "
    "(communication the step could not hide, and waiting for slower peers), the same measure for every backend")


def write_records(path: Path, records: list[dict[str, Any]]) -> None:
    """Replace `path` with `records`, atomically: a reader sees the old file or the new one, never a part; on
    failure (a full disk) the old file stays and no temp file is left."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for rec in records:
                f.write(json.dumps(rec, sort_keys=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


Number = int | float
"""A JSON number: an int or a float (a bool is neither)."""
_NUM = (int, float)


class Env(TypedDict):
    """`env`: the machine and software a record was made on (the rest of env is optional: docs/records.md)."""

    python: str
    torch: str
    platform: str
    cpu_model: str
    cpu_cores_usable: int
    memory_total_bytes: int
    distributed: dict[str, Any]


class Base(TypedDict):
    """What every record holds, whatever its kind."""

    schema_version: int
    run_id: str
    time_utc: str
    command: str
    status: str
    env: Env
    world_size: int


class Run(TypedDict):
    """What a run or scale record holds beside Base, measured or not."""

    adapter: str
    label: str
    workload: str
    repeat: int
    reason: str


class StepTime(TypedDict):
    """`step_time_s` (the slowest rank's step) and a comm cell's `time_s` (one call)."""

    median: Number
    p10: Number
    p90: Number
    n: int


class Controls(TypedDict):
    """`controls`: the conditions every row of a run shares (or states where it differs)."""

    global_batch: int
    lr: Number
    lr_rule: str
    precision: str
    steps: int
    warmup: int
    seed: int
    knobs: dict[str, Any]
    threads_per_rank: list[int]
    workload_options: dict[str, Any]


class Measured(TypedDict):
    """What a run or scale record adds once it was measured (status ok, or not_reached)."""

    controls: Controls
    topology: dict[str, Any]
    step_time_s: StepTime
    step_times_s: list[float]
    samples_per_s: Number
    samples_per_s_per_device: Number
    loss_curve: list[float]
    final_loss: Number
    equivalence: dict[str, Any]
    time_to_first_step_s: Number
    peak_memory_kind: str


class TimeToTarget(TypedDict):
    """`ttt`: a run until a target (--until-target, or status not_reached)."""

    target: Number
    metric: str
    eval_every: int
    budget_steps: int
    reached: bool
    steps_run: int
    evals: int
    eval_time_s: Number
    best_metric: Number
    final_metric: Number
    curve: list[Any]


class Reached(TypedDict):
    """What `ttt` adds once the target was reached."""

    steps_to_target: int
    train_time_to_target_s: Number
    e2e_time_to_target_s: Number
    startup_to_target_s: Number


class ScalePoint(TypedDict):
    """`scale`: where a compare scale record sits in its sweep."""

    point: int
    world_sizes: list[int]
    scaling: str


class Scale(TypedDict):
    """What a scale record adds to a run record."""

    scale: ScalePoint


class Comm(TypedDict):
    """What a comm record (kind "comm", one op at one size on one backend) holds beside Base."""

    backend: str
    dtype: str
    device: str


class CommMeasured(TypedDict):
    """What a comm record adds once measured (status ok)."""

    op: str
    size_bytes: int
    time_s: StepTime
    algbw_GBps: Number
    busbw_GBps: Number
    busbw_factor: Number


class RunRecord(Base, Run):
    """A record of `compare run` or `compare scale` as readers see it (Measured's fields once measured)."""


class CommRecord(Base, Comm):
    """A record of `compare comm` as readers see it (CommMeasured's fields once measured)."""


Record = RunRecord | CommRecord
"""What read_records returns: every field these types name is there, with its type; the others are optional
(docs/records.md)."""

WHEN: tuple[tuple[type, str], ...] = (
    (Base, "every record"), (Run, "every run and scale record"), (Measured, "every measured run and scale record"),
    (Comm, "every comm record"), (CommMeasured, "every measured comm record"), (Scale, "every scale record"))
"""Which records each layer's fields are required of, for docs/records.md."""


def _runtime(t: Any) -> type | tuple[type, ...]:
    """What isinstance checks a field's declared type against: a number is an int or a float, a nested TypedDict a
    dict, list[int] a list."""
    if t == Number:
        return _NUM
    if is_typeddict(t):
        return dict
    return get_origin(t) or t


@functools.cache
def _fields(layer: type) -> dict[str, type | tuple[type, ...]]:
    """A layer's fields and their runtime types, in declaration order."""
    return {key: _runtime(t) for key, t in get_type_hints(layer).items()}


def checked_fields() -> dict[str, str]:
    """Top-level field -> what `check_record` requires of it ("int, every record"), for docs/records.md: the
    types are written once, in the TypedDicts above that the check itself reads."""
    def name(types):
        return "number" if types == _NUM else types.__name__

    out: dict[str, str] = {}
    for layer, when in WHEN:
        for key, types in _fields(layer).items():
            out.setdefault(key, f"{name(types)}, {when}")
    return out


def _measured(obj: dict[str, Any], keys: tuple[str, ...], where: str, positive: bool = False) -> None:
    """A measurement is a finite number, at least 0 (above 0 where `positive`): a NaN or negative throughput or
    step time cannot come from a run, and would be rendered as a figure."""
    for key in keys:
        v = obj[key]
        if not math.isfinite(v) or v < 0 or (positive and v == 0):
            raise ValueError(f"{where}: '{key}' is {v!r}, which no measurement gives (a finite number "
                             f"{'above' if positive else 'of at least'} 0)")


def _check(obj: Any, layer: type, where: str) -> None:
    """Every field `layer` declares is in `obj`, with its type (a nested object's own fields are checked by the
    caller, in the order its messages promise)."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where} is not an object")
    for key, types in _fields(layer).items():
        if key not in obj:
            raise ValueError(f"{where} has no '{key}'")
        if not isinstance(obj[key], types) or (types in (int, _NUM) and isinstance(obj[key], bool)):
            raise ValueError(f"{where}: '{key}' is {type(obj[key]).__name__}, expected "
                             f"{getattr(types, '__name__', 'a number')}")


def check_record(rec: Any, where: str = "record") -> None:
    """Raise ValueError naming the first missing or mistyped field of a record that `compare report` needs."""
    _check(rec, Base, where)
    if rec["schema_version"] not in READABLE_SCHEMAS:
        raise ValueError(f"{where}: schema_version {rec['schema_version']!r}, this compare reads "
                         f"{' and '.join(map(str, READABLE_SCHEMAS))}")
    _check(rec["env"], Env, f"{where}: env")
    if rec.get("kind") == "comm":
        _check(rec, Comm, where)
        if rec["status"] == "ok":
            _check(rec, CommMeasured, where)
            _check(rec["time_s"], StepTime, f"{where}: time_s")
            _measured(rec["time_s"], ("median", "p10", "p90"), f"{where}: time_s")
        return
    _check(rec, Run, where)
    if rec.get("kind") == "scale":
        _check(rec, Scale, where)
        _check(rec["scale"], ScalePoint, f"{where}: scale")
    if rec["status"] in MEASURED:
        _check(rec, Measured, where)
        _check(rec["controls"], Controls, f"{where}: controls")
        _check(rec["step_time_s"], StepTime, f"{where}: step_time_s")
        _measured(rec, ("samples_per_s", "samples_per_s_per_device"), where, positive=True)
        _measured(rec["step_time_s"], ("median", "p10", "p90"), f"{where}: step_time_s")
        if rec.get("until_target") or rec["status"] == "not_reached":
            _check(rec, _Ttt, where)
            _check(rec["ttt"], TimeToTarget, f"{where}: ttt")
            if rec["ttt"]["reached"]:
                _check(rec["ttt"], Reached, f"{where}: ttt")


class _Ttt(TypedDict):
    ttt: TimeToTarget


RECORDS = "records.jsonl"
"""What a run writes, and rewrites after every launch."""
PACKED = "records.jsonl.gz"
"""The same, gzip-compressed (as pyperf stores .json.gz): how committed runs are kept, a sixth of the size
(`gzip -9n records.jsonl`). Every reader takes either."""


def records_file(directory: Path) -> Path | None:
    """The records of a results directory: records.jsonl, else records.jsonl.gz; None when it has neither."""
    for name in (RECORDS, PACKED):
        path = directory / name
        if path.exists() or path.is_symlink():
            return path
    return None


def read_records(path: Path) -> list[Record]:
    """Every record of a records.jsonl (or .jsonl.gz), each checked to have the shape the reports need (ValueError,
    naming the line and the field, otherwise)."""
    records = []
    if path.exists() and not path.is_file():  # a FIFO would block the read for ever, a directory cannot be read
        raise ValueError(f"{path}: not a regular file")
    if path.name.endswith(".gz"):
        import gzip

        try:
            text = gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace")
        except (OSError, EOFError) as exc:  # not gzip, or cut short
            raise ValueError(f"{path}: not a gzip file ({exc})") from None
    else:
        text = path.read_text(encoding="utf-8", errors="replace")
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rec = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{n}: not JSON ({exc})") from None
            except RecursionError:
                raise ValueError(f"{path}:{n}: not a record (JSON nested too deep to read)") from None
            check_record(rec, f"{path}:{n}")
            records.append(rec)
    return records
