"""Result records: one JSON object per (adapter, workload, world size, repeat), schema-versioned.

Runs in: the parent. `records.jsonl` is rewritten atomically (temp file + rename) after every launch, so a crash,
a hang or Ctrl-C later in the run never loses or truncates a finished row. `compare report` renders from these
alone.
"""

import json
import math
import os
from pathlib import Path
from typing import Any

from harness.ground.errors import BadInput
from harness.ground.fields import (NUMBER_TYPES, Base, Comm, CommMeasured, Controls, Env, Measured, Record, Reached,
                                  Run, RunOnly, Scale, ScalePoint, StepTime, TimeToTarget, Tune, WithTimeToTarget,
                                  optional_fields, required_fields)


SCHEMA_VERSION = 3
"""3: samples/s over the timed window by the wall clock, the slowest rank's (2: over the summed slowest-rank step times,
which count a rank's delay twice, in its own step and in the next, where its peers wait for it; 1: the median step);
CPU time per rank over the timed window; the machine's noise over it; the round order's seed and each launch's place
in its round; the run's baseline row."""
READABLE_SCHEMAS = (1, 2, 3)
"""Versions `compare report` renders: 1 as it always was (median step, spread across repeats, no intervals)."""


def has_intervals(records: list[dict[str, Any]]) -> bool:
    """Whether every record is of schema 2 or later (throughput over the whole timed window per launch): reports
    give those intervals and a verdict. Every reader asks this, not the version number, so what each version holds
    is known here alone; records of schema 1 render as they always did (median step, spread, no verdict)."""
    return bool(records) and all(r.get("schema_version", 1) >= 2 for r in records)


def fewer_devices(rec: dict[str, Any]) -> int | None:
    """The devices a launch computed on, where fewer than its world size (dp on the CPU: 1 of 2), else None: such a
    row is not data-parallel across the world size, and the verdict leaves it out of its ranking."""
    used = (rec.get("topology") or {}).get("devices_used")
    return used if used is not None and used < (rec.get("world_size") or 0) else None


def throughput_clock(rec: dict[str, Any]) -> str:
    """What a record's samples/s divides by: "wall clock" (schema 3: its timed window by the wall clock), "summed
    steps" (schema 2: the summed slowest-rank step times) or "median step" (schema 1). Runs whose records differ in
    it measured different things: they are neither joined nor diffed."""
    version = rec.get("schema_version", 1)
    return "wall clock" if version >= 3 else "summed steps" if version == 2 else "median step"


MEASURED = ("ok", "not_reached")
"""Statuses of a record that carries a full measurement: `not_reached` is an until-target row that trained its
whole step budget without reaching the target (its timings, memory and metrics are all there)."""

KINDS = ("run", "scale", "comm", "tune")
"""A record's `kind` (fields.Base); absent: a run."""
STATUSES = ("ok", "not_reached", "diverged", "unavailable", "failed", "timeout", "interrupted", "not_run")
"""A row's `status` (fields.Base); a comm cell's also `unsupported`, never not_reached or diverged."""
COMM_STATUSES = ("ok", "unavailable", "failed", "timeout", "interrupted", "not_run", "unsupported")


def precision_label(controls: dict, conv_share: float | None = None) -> str:
    """Precision, plus wire compression when on: an fp16-compressed row never passes for plain fp32; and on CUDA an
    fp32 row that ran TF32 convolutions or matmuls says so (cuDNN's default). `conv_share` (the record's
    conv_flops_share): a model without convolutions (0) ran none in TF32, whatever cuDNN allowed; unknown (None, an
    older record), the switch alone is shown."""
    c = controls.get("compression", "none")
    label = controls["precision"]
    math = controls.get("cuda_math") or {}
    tf32 = [k for k, on in (("conv", math.get("cudnn_allow_tf32") and conv_share != 0),
                            ("matmul", math.get("matmul_allow_tf32"))) if on]
    if label == "fp32" and tf32:
        label += f" (TF32 {'/'.join(tf32)})"
    return label + ("" if c == "none" else f" + {c} wire")


def precision_of(rec: dict) -> str:
    """precision_label of a record: its controls and the share of its FLOPs in convolutions."""
    return precision_label(rec["controls"], rec.get("conv_flops_share"))


def frozen_note(rec: dict) -> str:
    """", of which 4,194,304 trainable" where a record's model has frozen parameters; "" otherwise (and for records
    made before trainable_param_count existed)."""
    trainable = rec.get("trainable_param_count")
    if trainable is None or trainable == rec.get("param_count"):
        return ""
    return f", of which {trainable:,} trainable"


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


def _measured(obj: dict[str, Any], keys: tuple[str, ...], where: str, positive: bool = False) -> None:
    """A measurement is a finite number, at least 0 (above 0 where `positive`): a NaN or negative throughput or
    step time cannot come from a run, and would be rendered as a figure."""
    for key in keys:
        v = obj[key]
        if not math.isfinite(v) or v < 0 or (positive and v == 0) or v > MEASURED_MAX:
            raise ValueError(f"{where}: '{key}' is {v!r}, which no measurement gives (a finite number "
                             f"{'above' if positive else 'of at least'} 0, below {MEASURED_MAX:g})")


def _measured_each(obj: dict[str, Any], key: str, where: str) -> None:
    """Every entry of a list of step times is a finite number above 0: a NaN, negative, infinite or zero step time
    cannot come from a run, and would shift the percentiles the report draws from the list."""
    for i, v in enumerate(obj[key]):
        if isinstance(v, bool) or not isinstance(v, NUMBER_TYPES):
            raise ValueError(f"{where}: '{key}'[{i}] is {type(v).__name__}, expected a number")
        if not math.isfinite(v) or v <= 0 or v > MEASURED_MAX:
            raise ValueError(f"{where}: '{key}'[{i}] is {v!r}, which no measurement gives (a finite number above 0, "
                             f"below {MEASURED_MAX:g})")


REPEAT_BOUND = 100_000
"""Above any round a command makes (--repeats takes up to 1,000; a tune's budget of a week at its shortest launch
is far below it): a report lists the rounds a row never ran, and a repeat of 10^18 had it build that list until the
machine ran out of memory."""

MEASURED_MAX = 1e30
"""Beyond any throughput, time or byte count a machine gives (an exabyte is 1e18), and below where the statistics
overflow (a 1e300 samples/s gave "OverflowError: math range error", naming neither the line nor the field)."""


def _check(obj: Any, layer: type, where: str) -> None:
    """Every field `layer` declares is in `obj`, with its type (a nested object's own fields are checked by the
    caller, in the order its messages promise)."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where} is not an object")
    for key, types in required_fields(layer).items():
        if key not in obj:
            raise ValueError(f"{where} has no '{key}'")
        if not isinstance(obj[key], types) or (types in (int, NUMBER_TYPES) and isinstance(obj[key], bool)):
            raise ValueError(f"{where}: '{key}' is {type(obj[key]).__name__}, expected "
                             f"{getattr(types, '__name__', 'a number')}")
    for key, types in optional_fields(layer).items():
        if key in obj and (not isinstance(obj[key], types) or (isinstance(obj[key], bool) and bool not in types)):
            raise ValueError(f"{where}: '{key}' is {type(obj[key]).__name__}, expected "
                             f"{_type_names(types)}")


def _type_names(types: tuple[type, ...]) -> str:
    """("int", "float", NoneType) -> "number or null": as JSON names them."""
    names = [{float: "number", type(None): "null"}.get(tp, tp.__name__) for tp in types]
    return " or ".join(n for n in names if not (n == "int" and "number" in names))


def check_record(rec: Any, where: str = "record") -> None:
    """Raise ValueError naming the first missing or mistyped field of a record that `compare report` needs."""
    _check(rec, Base, where)
    if rec["schema_version"] not in READABLE_SCHEMAS:
        raise ValueError(f"{where}: schema_version {rec['schema_version']!r}, this compare reads "
                         f"{' and '.join(map(str, READABLE_SCHEMAS))}")
    _check(rec["env"], Env, f"{where}: env")
    if rec.get("kind", "run") not in KINDS:
        raise ValueError(f"{where}: kind {rec['kind']!r}; a record's kind is one of {', '.join(KINDS)}")
    statuses = COMM_STATUSES if rec.get("kind") == "comm" else STATUSES
    if rec["status"] not in statuses:
        raise ValueError(f"{where}: status {rec['status']!r}; a{' comm' if statuses is COMM_STATUSES else ''} "
                         f"record's status is one of {', '.join(statuses)}")
    if rec.get("kind") == "comm":
        _check(rec, Comm, where)
        if rec["status"] == "ok":
            _check(rec, CommMeasured, where)
            _check(rec["time_s"], StepTime, f"{where}: time_s")
            _measured(rec["time_s"], ("median", "p10", "p90"), f"{where}: time_s")
        return
    _check(rec, Run, where)
    if not 0 <= rec["repeat"] < REPEAT_BOUND:
        raise ValueError(f"{where}: 'repeat' is {rec['repeat']!r}, which no run writes (a launch's round, from 0, below "
                         f"{REPEAT_BOUND:,})")
    if rec.get("kind", "run") in ("run", "tune"):
        _check(rec, RunOnly, where)
    if rec.get("kind") == "scale":
        _check(rec, Scale, where)
        _check(rec["scale"], ScalePoint, f"{where}: scale")
    if rec.get("kind") == "tune":
        _check(rec, Tune, where)
        _check_tune(rec, where)
    if rec["status"] in MEASURED:
        _check(rec, Measured, where)
        _check(rec["controls"], Controls, f"{where}: controls")
        _check(rec["step_time_s"], StepTime, f"{where}: step_time_s")
        _measured(rec, ("samples_per_s", "samples_per_s_per_device"), where, positive=True)
        _measured(rec["step_time_s"], ("median", "p10", "p90"), f"{where}: step_time_s", positive=True)
        _measured_each(rec, "step_times_s", where)
        if rec.get("until_target") or rec["status"] == "not_reached":
            _check(rec, WithTimeToTarget, where)
            _check(rec["ttt"], TimeToTarget, f"{where}: ttt")
            if rec["ttt"]["reached"]:
                _check(rec["ttt"], Reached, f"{where}: ttt")


def _check_tune(rec: dict[str, Any], where: str) -> None:
    """A tune record's stage, plan and summary have the shape the race's replay reads (harness/core/race.py): what
    `compare report` renders and `compare run --tuned` takes winners from."""
    stage = rec["tune"].get("stage")
    if stage not in ("race", "confirm"):
        raise ValueError(f"{where}: 'tune' has stage {stage!r}, expected 'race' or 'confirm'")
    for key in ("tune_plan", "tune_summary"):
        if key in rec and not isinstance(rec[key], dict):
            raise ValueError(f"{where}: '{key}' is {type(rec[key]).__name__}, expected dict")
    plan = rec.get("tune_plan")
    if plan is not None:
        backends = plan.get("backends")
        if not isinstance(backends, dict) or not backends:
            raise ValueError(f"{where}: 'tune_plan' has no 'backends' (backend -> its candidate rows)")
        for name, candidates in backends.items():
            if not isinstance(candidates, list) or not all(isinstance(c, str) for c in candidates):
                raise ValueError(f"{where}: 'tune_plan' lists backend {name!r}'s candidates as "
                                 f"{type(candidates).__name__}, expected a list of rows")
            if not candidates:
                raise ValueError(f"{where}: 'tune_plan' lists no candidate for backend {name!r} (a tune races its "
                                 f"defaults at least)")
        budget = plan.get("budget_s")
        if not isinstance(budget, NUMBER_TYPES) or isinstance(budget, bool) or not budget > 0:
            raise ValueError(f"{where}: 'tune_plan' has budget_s {budget!r}, expected seconds above 0")
    summary = rec.get("tune_summary")
    if summary is not None:
        for key, types in (("race_rounds", int), ("confirm_rounds", int), ("budget_s", NUMBER_TYPES),
                           ("elapsed_s", NUMBER_TYPES), ("race_ended", dict)):
            value = summary.get(key)
            if not isinstance(value, types) or isinstance(value, bool):
                raise ValueError(f"{where}: 'tune_summary' has {key} {value!r}, which no finished tune writes")


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


def both_records(directory: Path) -> str:
    """What is wrong with a directory holding both records.jsonl and records.jsonl.gz (which of them is its run is
    not known: the .jsonl was read without a word), or ""."""
    if all((directory / name).exists() for name in (RECORDS, PACKED)):
        return f"holds both {RECORDS} and {PACKED}, and which are its run's records is not clear; remove one"
    return ""


def written_by(kinds: tuple[str, ...]) -> str:
    """"`compare run`" or "`compare run`, `compare comm` or `compare scale`": the commands whose results are of
    `kinds`."""
    names = [f"`compare {k}`" for k in kinds]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def read_results(directory: Path, kinds: tuple[str, ...] = KINDS, given: str = "") -> list[Record]:
    """The records of a results directory (a command's --out) whose records are all of `kinds`, for every command
    that reads one (report, diff, join, predict, plan --from, run --join and --tuned, scale --comm). Anything else is
    BadInput in one line naming the directory (after `given`, the option that named it: "--from") and what was
    expected; a command's own checks of what it reads come after this."""
    where = f"{given} {directory}" if given else str(directory)
    expected = f"give a directory written by {written_by(kinds)}"
    if not directory.exists():
        raise BadInput(f"{where} does not exist; {expected}")
    if not directory.is_dir():
        raise BadInput(f"{where} is not a directory; {expected}")
    path = records_file(directory)
    if path is None:
        logs = directory / "logs"  # and outdir.LOCK_NAME, named here: outdir sits a floor above this module
        ours = logs.is_dir() and (directory / ".compare.lock").exists()
        kept = sorted(p.name for p in logs.iterdir()) if ours else []
        if kept:  # compare's own layout: a run stopped (killed) before its first row's record was saved
            raise BadInput(f"{where} holds no {RECORDS}: the run that wrote it ended before its first row's record "
                           f"was saved (its logs/ holds only {', '.join(kept[:3])}"
                           f"{f' and {len(kept) - 3} more' if len(kept) > 3 else ''}; killed?); run it again")
        raise BadInput(f"{where} holds no {RECORDS}; {expected}")
    both = both_records(directory)
    if both:
        raise BadInput(f"{where} {both}")
    try:
        records = read_records(path)
    except (OSError, ValueError) as exc:  # the message names the file and line, and what a record holds there
        raise BadInput(f"{where} holds records this compare cannot read ({' '.join(str(exc).split())})") from None
    if not records:
        raise BadInput(f"{where} holds no records (an empty {path.name}); {expected}")
    held = {str(r.get("kind", "run")) for r in records}
    other = sorted(held - set(kinds))
    if other:
        whose = written_by(tuple(other)).replace(" or ", " and ")
        wanted = held & set(kinds)
        said = (f"records of {whose} among those of {written_by(tuple(sorted(wanted)))}" if wanted
                else f"the results of {whose}")
        raise BadInput(f"{where} holds {said}; {expected}")
    try:
        one_run(records)
    except ValueError as exc:
        raise BadInput(f"{where}: {exc}") from None
    return records


def one_run(records: list[Record]) -> None:
    """ValueError unless the records are one run's: one run id and workload and, but for a sweep's, one world size (a
    record of another run pasted in was counted as this run's launch, or dropped a row as "not data-parallel"; diff,
    join and plan --from had read such a file where report refused it)."""
    kind = records[0].get("kind", "run") if records else "run"
    same = [("run_id", "run"), ("workload", "workload")] + ([("world_size", "world size")] if kind in ("run", "tune")
                                                              else [])
    for key, what in same:
        first = records[0].get(key)
        other = next((n for n, r in enumerate(records, 1) if r.get(key) != first), None)
        if other is not None:
            raise ValueError(f"record {other} is of {what} {records[other - 1].get(key)}, record 1 of {first}: the "
                             f"records of one run share their {what}; a records.jsonl holds one run")


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
        except EOFError:  # gzip, cut short (a copy that stopped, a disk that filled)
            raise ValueError(f"{path}: a truncated gzip file (it ends before gzip's end-of-stream marker); copy it "
                             f"again whole") from None
        except OSError as exc:  # not gzip, or its data corrupt
            raise ValueError(f"{path}: not a gzip file ({exc})") from None
    else:
        text = path.read_text(encoding="utf-8", errors="replace")
    lines: dict[str, int] = {}
    launches: dict[tuple, int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            same = line.strip()
            if same in lines:  # a launch counted twice would move every interval and the verdict
                raise ValueError(f"{path}:{n}: repeats line {lines[same]} word for word; a records.jsonl holds each "
                                 f"record once (remove the copy)")
            lines[same] = n
            try:
                rec = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{n}: not JSON ({exc})") from None
            except RecursionError:
                raise ValueError(f"{path}:{n}: not a record (JSON nested too deep to read)") from None
            check_record(rec, f"{path}:{n}")
            key = _launch_key(rec)
            if key in launches:
                raise ValueError(f"{path}:{n}: a second record of row {rec.get('label')}'s launch "
                                 f"{rec.get('repeat')}{_at(rec)} (line {launches[key]} is the first); a records.jsonl "
                                 f"holds each launch once")
            if key is not None:
                launches[key] = n
            records.append(rec)
    return records


def _launch_key(rec: dict[str, Any]) -> tuple | None:
    """What names one launch among a run's, a tune's or a scale sweep's records (a comm run's cells share their
    launch, and are not keyed)."""
    kind = rec.get("kind", "run")
    if kind not in ("run", "tune", "scale"):
        return None
    return (kind, rec.get("label"), rec.get("repeat"), rec.get("world_size"), json.dumps(rec.get("tune"),
                                                                                         sort_keys=True))


def _at(rec: dict[str, Any]) -> str:
    return f" at world size {rec.get('world_size')}" if rec.get("kind") == "scale" else ""


def hardware_text(e: dict[str, Any]) -> str:
    """The machine a record's `env` describes, in words (CPU, its flags, cores, memory, GPUs)."""
    gpus = ", ".join(e.get("gpus", [])) or "none"
    return (f"{e['cpu_model']} ({' '.join(e.get('cpu_flags', [])) or 'no flags read'}), {e['cpu_cores_usable']} "
            f"usable cores, {e['memory_total_bytes'] / 2**30:.0f} GiB RAM; GPUs: {gpus}")


def software_text(records) -> str:
    """Python, torch (CUDA, NCCL), the frameworks other than torch that the measured rows ran (their versions as
    each adapter recorded them: Horovod, DeepSpeed), the distributed backends built in, and the platform."""
    e = records[0]["env"]
    frameworks = sorted({f for r in records if r.get("status") in MEASURED
                         and (f := (r.get("adapter_info") or {}).get("framework")) and not f.startswith("torch ")})
    return (f"Python {e['python']}, torch {e['torch']}"
            + (f", CUDA {e['cuda']}, NCCL {e.get('nccl_version')}" if e.get("cuda") else "")
            + (f"; frameworks: {', '.join(frameworks)}" if frameworks else "")
            + f"; distributed backends built in: {', '.join(k for k, v in e['distributed'].items() if v)}; "
            f"{e['platform']}")
