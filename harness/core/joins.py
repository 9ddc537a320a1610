"""Joins: runs of the same request at other times as sessions of one comparison (issue 65). What may be joined, and
where a join keeps its runs; the verdict over them is harness/reports/sessions.py's.

Runs in: the parent. A join is a directory with `sessions.json`: the runs it joins, as paths relative to it ("." for
a run's own records when `compare run --join DIR` made it), beside the command that made it. Nothing is copied: the
records stay in each run and remain the single source.

    check(named)            one line (NotJoinable) unless the runs are the same request on the same machine and
                            software, and none is a copy of another (copy_of: any launch shared)
    session_dirs(DIR)       the runs DIR stands for; load(DIR) their records
    unfinished(dirs)        one line (NotJoinable) where a live compare run is still writing one of them
    known(env, workload, options, request)  the between-session spread this machine's cache holds for this
                            request (store() keeps it)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from harness.ground.errors import BadInput
from harness.ground.record import MEASURED, throughput_clock
from harness.ground.stats import recorded_margin

SESSIONS = "sessions.json"


class NotJoinable(BadInput):
    """Runs that cannot be sessions of one verdict: bad input, one line naming the difference (a class of its own
    for the reports that skip such a join with a warning rather than refuse)."""


def _measured(records):
    """A record that says the request's controls: a measured one, else any (a run whose every row failed still
    says its options, batch and steps; with none it read as "None" against the other run's)."""
    return (next((r for r in records if r.get("status") in MEASURED and r.get("controls")), None)
            or next((r for r in records if r.get("controls")), None))


def env_of(records) -> dict[str, Any]:
    """The machine a run's records were made on (their env)."""
    return next((r.get("env") for r in records if r.get("env")), None) or {}


def rows_of(records) -> list[str]:
    """The rows a run asked for, sorted."""
    return sorted(records[0].get("row_order") or dict.fromkeys(r["label"] for r in records))


IDENTITY = (("workload", lambda rs: rs[0].get("workload")),
            ("workload options", lambda rs: (_measured(rs) or {}).get("controls", {}).get("workload_options")),
            ("rows", rows_of),
            ("world size", lambda rs: rs[0].get("world_size")),
            ("global batch", lambda rs: (_measured(rs) or {}).get("controls", {}).get("global_batch")),
            ("timed steps", lambda rs: (_measured(rs) or {}).get("controls", {}).get("steps")),
            ("device", lambda rs: (_measured(rs) or {}).get("topology", {}).get("device")),
            # clipping adds a norm (and, for some backends, a collective) to every step: another request
            ("gradient clip (--max-grad-norm)",
             lambda rs: (_measured(rs) or {}).get("controls", {}).get("max_grad_norm") or "none"),
            # the joined verdict takes one margin: which session's must not depend on the order they were given in
            ("equivalence margin (--margin)", recorded_margin))
"""What sessions of one request share: their rows' samples/s measure the same thing."""
MACHINE = (("CPU", lambda env: env.get("cpu_model")), ("usable cores", lambda env: env.get("cpu_cores_usable")),
           ("GPUs", lambda env: env.get("gpus") or []))
"""What makes two runs the same machine (a change of it compares machines, not sessions)."""
SOFTWARE = (("torch", lambda env: env.get("torch"), "torch {}"), ("Python", lambda env: env.get("python"), "Python {}"),
            ("tuning variables", lambda env: env.get("tuning_env"), "with tuning variables {}"))
"""What the runs ran on beyond the machine (their env): another torch, Python or tuning variables (OPENBLAS_*,
NCCL_*, ...) changes what each row does, so sessions share them; "with {}" words each in a refusal. A version a
record does not hold is left out. Another commit of compare is allowed (and said: the join names it)."""
FRAMEWORK = ("framework", lambda r: (r.get("adapter_info") or {}).get("framework"))
"""What each row's framework says it is (its adapter's describe(): "deepspeed 0.19.8"), held like SOFTWARE."""
CONDITIONS = (("warm-up steps", lambda r: (r.get("controls") or {}).get("warmup")),
              ("seed", lambda r: (r.get("controls") or {}).get("seed")),
              ("threads per rank", lambda r: (r.get("controls") or {}).get("threads_requested")),
              ("cores bound", lambda r: (r.get("controls") or {}).get("bind_cores")),
              ("DataLoader workers", lambda r: (r.get("controls") or {}).get("loader_workers")),
              ("oversubscribed", lambda r: r.get("oversubscribed")))
"""What each row ran under beyond its label (its knobs too, `row_conditions`): the same row under other conditions
measures something else, so sessions share them and a diff says where they differ. A condition a record does not
hold (one written before compare recorded it) is left out of the comparison."""


def row_conditions(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{label: {condition: value}} of a run, read from each row's first record that says its controls (a measured
    one where there is one): CONDITIONS, and every knob as "knob NAME"."""
    out: dict[str, dict[str, Any]] = {}
    for label in dict.fromkeys(r["label"] for r in records if r.get("label")):
        mine = [r for r in records if r.get("label") == label]
        first = _measured(mine)
        if first is None:
            continue
        got = {what: get(first) for what, get in CONDITIONS if get(first) is not None}
        knobs = (first.get("controls") or {}).get("knobs")
        got.update({f"knob {k}": v for k, v in (knobs or {}).items()} if isinstance(knobs, dict) else {})
        out[label] = got
    return out


def condition_changes(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[tuple[str, str, Any, Any]]:
    """(row, condition, a's value, b's value) for every condition both runs hold of a row and give differently."""
    ca, cb = row_conditions(a), row_conditions(b)
    return [(label, what, ca[label][what], cb[label][what]) for label in ca if label in cb
            for what in ca[label] if what in cb[label] and ca[label][what] != cb[label][what]]


def software_changes(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[tuple[str | None, str, Any, Any]]:
    """(row or None, what, a's value, b's value) for the software (SOFTWARE: the run's; FRAMEWORK: a row's) both runs
    say and give differently."""
    ea, eb = env_of(a), env_of(b)
    out: list[tuple[str | None, str, Any, Any]] = [
        (None, what, get(ea), get(eb)) for what, get, _ in SOFTWARE
        if get(ea) is not None and get(eb) is not None and get(ea) != get(eb)]
    what, get = FRAMEWORK
    fa = {r["label"]: get(r) for r in a if r.get("label") and get(r) is not None}
    fb = {r["label"]: get(r) for r in b if r.get("label") and get(r) is not None}
    ta, tb = ea.get("torch"), eb.get("torch")

    def torchs(x):  # a framework that names torch's version ("torch 2.13.0+cpu") changed with torch, said once
        return str(x).replace(ta, tb) if ta and tb else x

    return out + [(label, what, fa[label], fb[label]) for label in fa
                  if label in fb and fa[label] != fb[label] and torchs(fa[label]) != fb[label]]


def _shown(value) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value)) or "none"
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items()) or "none"
    return str(value)


def _condition(value) -> str:
    return "its default" if value is None else _shown(value)


def _starts(records: list[dict[str, Any]]) -> dict[tuple, Any]:
    """{(row, repeat, start time): samples/s} of a run's launches that say when they started."""
    return {(str(r.get("label")), int(r.get("repeat", 0)), r["launch_wall"]): r.get("samples_per_s")
            for r in records if isinstance(r.get("launch_wall"), (int, float))}


def _run_of(records: list[dict[str, Any]]) -> tuple | None:
    """A run as its records name it: its id (the --out directory's name) and the second it started; None where they
    do not say. The id alone is no run's: `--out a/run` and `--out b/run` share it."""
    first = records[0] if records else {}
    return (first["run_id"], first["time_utc"]) if first.get("run_id") and first.get("time_utc") else None


def copy_of(a: tuple[str, list[dict[str, Any]]], b: tuple[str, list[dict[str, Any]]]) -> tuple[str, bool] | None:
    """How run b's records are a copy of run a's, in words ("b holds the same launches as a"), and whether they are
    an exact one; None where b is another run. A launch is its row, repeat and start time (to the microsecond): no
    two runs share one, so a run that holds any launch of another, or names the same run (its id and start), is a
    copy of it whatever its figures say (one with a launch left out, or its samples/s edited, was joined as a session
    of its own, and diffed at 1.30x). Where the launches both hold give other samples/s, it says so."""
    (na, ra), (nb, rb) = a, b
    sa, sb = _starts(ra), _starts(rb)
    both = [k for k in sa if k in sb]
    if not both:
        run = _run_of(ra)
        if run is None or run != _run_of(rb):
            return None
        return (f"{nb} names the run of {na} (run {run[0]}, started {run[1]}), with none of its launches' start times "
                "(they were edited)"), False
    edited = sum(sa[k] != sb[k] for k in both)
    same = len(both) == len(sa) == len(sb)
    held = (f"the same launches as {na}" if same else f"{len(both)} of the {len(sa)} launches of {na}"
            + (f" (and {len(sb) - len(both)} of its own)" if len(sb) > len(both) else ""))
    edit = f" with other samples/s ({edited} of {len(both)}: its figures were edited)" if edited else ""
    return f"{nb} holds {held}{edit}", same and not edited


def check(named: list[tuple[str, list[dict[str, Any]]]], machines: bool = True) -> None:
    """NotJoinable (one line) unless every run is a `compare run` of the same request (workload and its options,
    rows, world size, global batch, timed steps; each row's knobs, threads, warm-up, seed, binding, DataLoader workers
    and oversubscription) on the same machine (CPU model, usable cores, GPUs) and software (torch, Python, tuning
    variables, each row's framework), none a copy of another (copy_of), the first run being the reference.
    `machines=False` leaves the machine out (`compare diff --across-machines`)."""
    first_name, first = named[0]
    for i, (name, records) in enumerate(named):
        if not records:
            raise NotJoinable(f"{name} holds no records (an empty records.jsonl); give run directories written by "
                              "`compare run`")
        copy = next(filter(None, (copy_of(earlier, (name, records)) for earlier in named[:i])), None)
        if copy:
            raise NotJoinable(f"{copy[0]}: a copy of one run, which is one session; give runs made at different "
                              "times")
        kinds = {r.get("kind", "run") for r in records}
        if kinds != {"run"}:
            raise NotJoinable(f"{name} holds {', '.join(sorted(map(str, kinds)))} records; only `compare run` "
                              "results are sessions")
        if records[0].get("until_target"):
            raise NotJoinable(f"{name} is a time-to-target run; sessions join throughput runs")
    for name, records in named[1:]:
        for what, get in IDENTITY:
            if get(records) != get(first):
                raise NotJoinable(f"{name} differs from {first_name} in {what} ({_shown(get(records))} against "
                                  f"{_shown(get(first))}): sessions are runs of the same request")
        if machines:
            for what, get in MACHINE:
                if get(env_of(records)) != get(env_of(first)):
                    raise NotJoinable(f"{name} ran on another machine than {first_name} ({what} "
                                      f"{_shown(get(env_of(records)))} against {_shown(get(env_of(first)))}): sessions "
                                      "are runs on the same machine")
        changed = software_changes(first, records)
        if changed:
            label, what, was, now = changed[0]
            how = next((f for w, _, f in SOFTWARE if w == what), "row " + str(label) + " with {}")
            more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
            raise NotJoinable(f"{name} ran {how.format(_shown(now))} against {_shown(was)} in {first_name}{more}: "
                              "sessions are runs of the same software; `compare diff` compares two conditions")
        changed = condition_changes(first, records)
        if changed:
            label, what, was, now = changed[0]
            # a setting of the whole run (--bind-cores, --warmup) changes every row alike: said once, of every row
            alike = [c for c in changed if c[1:] == (what, was, now)]
            rows = set(row_conditions(first)) & set(row_conditions(records))
            whom = "every row" if len(alike) == len(rows) > 1 else f"row {label}"
            rest = len(changed) - (len(alike) if whom == "every row" else 1)
            more = f" (and {rest} more)" if rest else ""
            raise NotJoinable(f"{name} ran {whom} with {what} {_condition(now)} against {_condition(was)} in "
                              f"{first_name}{more}: sessions are runs of the same request; `compare diff` compares "
                              "two conditions")
        clock, first_clock = (throughput_clock(_measured(rs) or rs[0]) for rs in (records, first))
        if clock != first_clock:
            raise NotJoinable(f"{name}'s samples/s divide by the {clock}, {first_name}'s by the {first_clock} "
                              "(records of schema 2, before compare measured the timed window by the wall clock): "
                              "sessions measure the same thing; make the earlier runs again with this compare")


# ---- the manifest ---------------------------------------------------------------------------------------------------
def manifest(directory: Path) -> dict[str, Any] | None:
    """DIR/sessions.json, or None where DIR is not a join; NotJoinable where it cannot be read."""
    path = directory / SESSIONS
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"a JSON {type(data).__name__}, not an object with a list of sessions")
        if not isinstance(data.get("sessions"), list) or not all(isinstance(p, str) for p in data["sessions"]):
            raise ValueError("no list of sessions")
        if not data["sessions"]:
            raise ValueError("its list of sessions is empty; a join written by `compare join` lists two runs or more")
    except (OSError, ValueError) as exc:
        raise NotJoinable(f"cannot read {path}: {exc}") from None
    return data


def session_dirs(directory: Path) -> list[Path]:
    """The run directories DIR stands for: those its sessions.json lists, or DIR itself."""
    data = manifest(directory)
    if data is None:
        return [directory]
    return [Path(os.path.normpath(directory / p)) for p in data["sessions"]]


def unfinished(dirs: list[Path]) -> None:
    """NotJoinable (one line) where a live compare run still holds one of `dirs` (its lock): its records are half
    written, so a verdict over it, and the between-session spread kept from it, would describe part of a run."""
    from harness.ground import outdir

    for d in dirs:
        pid = outdir.holder(d)
        if pid is not None:
            raise NotJoinable(f"{d} is being written by a compare run that has not finished "
                              f"({f'pid {pid}' if pid > 0 else 'its pid is not recorded'}); join it when it ends")


def write_manifest(directory: Path, dirs: list[Path], command: str) -> None:
    """DIR/sessions.json naming `dirs` relative to DIR (atomic)."""
    from harness.ground.outdir import write_text

    rel = [os.path.relpath(d, directory) for d in dirs]
    write_text(directory / SESSIONS, json.dumps({"command": command, "sessions": rel}, indent=1) + "\n")


def load(directory: Path, own: list[dict[str, Any]] | None = None) -> list[tuple[str, list[dict[str, Any]]]]:
    """(name, records) of every session DIR joins, its own records (".") as `own` where given; NotJoinable where a
    session cannot be read."""
    from harness.ground.record import read_results

    out = []
    for d in session_dirs(directory):
        name = os.path.relpath(d, directory) if d != directory else "."
        if own is not None and d.resolve() == directory.resolve():
            out.append((name, own))
            continue
        try:
            records = read_results(d, ("run",))
        except BadInput as exc:  # a session moved or deleted since the join, say
            raise NotJoinable(f"session {name} of {directory}: {exc}") from None
        out.append((name, records))
    return out


# ---- this machine's between-session spread, kept in the cache directory ---------------------------------------------
CACHE_FILE = "between_sessions.json"


def _machine_key(env: dict[str, Any]) -> str:
    return json.dumps([env.get("host_key"), *(get(env) for _, get in MACHINE)])


REQUEST = ("steps", "warmup", "global_batch", "world_size")
"""What of a request, beyond its workload and options, decides how much a session's figures move: its timed steps,
warm-up steps, global batch and world size. A spread is quoted only for a run of the same ones (a 280-step run once
quoted a 20-step join's, 0.0% between sessions against 22.7% within one run); its rows may differ, and are said."""


def request_of(records: list[dict[str, Any]]) -> dict[str, Any]:
    """A run's REQUEST, from its first record that says its controls."""
    controls = (_measured(records) or {}).get("controls") or {}
    return {"steps": controls.get("steps"), "warmup": controls.get("warmup"),
            "global_batch": controls.get("global_batch"), "world_size": records[0].get("world_size")}


def _request_key(workload: str, options: dict[str, Any] | None, request: dict[str, Any]) -> str:
    """A workload under its options and REQUEST: what the cache keeps a spread by (entries kept before it held the
    REQUEST, by workload and options alone, match no run's key and are not quoted)."""
    return json.dumps([workload, options or {}, {k: request.get(k) for k in REQUEST}], sort_keys=True)


def _after_now(when: Any) -> bool:
    """Whether a session's start (`time_utc`, ISO 8601) is later than this moment, or unreadable: a doctored or
    mis-clocked copy that would be kept as the newest join, and never replaced."""
    from datetime import datetime, timezone

    try:
        at = datetime.fromisoformat(str(when))
        return (at if at.tzinfo else at.replace(tzinfo=timezone.utc)) > datetime.now(timezone.utc)
    except ValueError:
        return True


STORED_SESSIONS = 3
"""The fewest sessions whose between-session spread is kept for later runs' verdicts to quote: two give each pair's
variance one degree of freedom (a throwaway join of two short runs once put it at 41% for every later run)."""


def store(env: dict[str, Any], workload: str, options: dict[str, Any] | None, spread: dict[str, Any],
          request: dict[str, Any]) -> bool:
    """Keep the between-session spread a verdict over sessions measured, for this host and the workload under its
    options and REQUEST, where every session ran on this very host (`spread["hosts"]`, their env's host_key: a join
    of runs made on another machine of the same CPU, a committed one re-rendered, says nothing of this one), it rests
    on at least STORED_SESSIONS sessions (sessions/spread() keeps only a complete join: every session ranked every
    row, none with a failed launch) and its newest session started no earlier than the kept one's and no later than
    now (`spread["newest"]`, a time: the latest describes the machine as it is now; an older join re-rendered, the
    same day or later, does not replace it; the same join re-rendered replaces its own; a session dated after the
    join is a doctored copy, kept it would be newest for good, and a kept one so dated is replaced). Best effort: a
    cache that cannot be written costs nothing but the sentence. Returns whether it was kept."""
    from harness.ground.provenance import host_key
    from harness.shared import cache

    here = host_key()
    if (spread.get("sessions") or 0) < STORED_SESSIONS or here is None or env.get("host_key") != here \
            or any(h != here for h in spread.get("hosts") or [None]) or not spread.get("newest") \
            or _after_now(spread["newest"]):
        return False
    data = cache.read_dict(CACHE_FILE)
    mine = data.setdefault(_machine_key(env), {})
    key = _request_key(workload, options, request)
    kept = mine.get(key)
    if (isinstance(kept, dict) and kept.get("complete") and kept.get("where") != spread.get("where")
            and str(kept.get("newest") or "") > str(spread["newest"]) and not _after_now(kept.get("newest"))):
        return False
    mine[key] = {**{k: v for k, v in spread.items() if k != "hosts"}, "workload": workload,
                 "options": options or {}, **{k: request.get(k) for k in REQUEST}, "complete": True}
    cache.write_dict(CACHE_FILE, data)
    return True


def known(env: dict[str, Any], workload: str, options: dict[str, Any] | None,
          request: dict[str, Any]) -> dict[str, Any] | None:
    """The between-session spread this host's cache holds for `workload` under `options` and `request` (REQUEST:
    timed steps, warm-up, global batch, world size; its rows may be others), or None: for another request (a spread
    of other steps or another batch is not this run's), for records that do not name their host, and for an entry
    kept before the cache held the REQUEST. Only spreads kept as complete joins are quoted: one kept before (of any
    join) is not."""
    from harness.shared import cache

    if not env.get("host_key"):
        return None
    mine = cache.read_dict(CACHE_FILE).get(_machine_key(env)) or {}
    entry = mine.get(_request_key(workload, options, request)) if isinstance(mine, dict) else None
    need = ("sessions", "pairs", "tau_median", "tau_max", "se_median", "date", "workload")
    if not isinstance(entry, dict) or not entry.get("complete") or not all(n in entry for n in need) \
            or any(entry.get(k) != request.get(k) for k in REQUEST) or _after_now(entry.get("newest")):
        return None
    pairs = entry.get("per_pair")  # kept since pairs were kept one by one; an older entry has the medians alone
    if not (isinstance(pairs, list) and all(
            isinstance(q, dict) and isinstance(q.get("a"), str) and isinstance(q.get("b"), str)
            and isinstance(q.get("prediction"), list) and len(q["prediction"]) == 2
            and all(isinstance(v, (int, float)) and v > 0 for v in q["prediction"]) for q in pairs)):
        pairs = None
    return {**{k: entry[k] for k in need}, **{k: entry[k] for k in ("rows", "steps", "options") if entry.get(k)},
            **({"per_pair": pairs} if pairs else {})}
