"""The checks every request passes before anything is launched or written: torch present, the device, the world
size and the other bounds, this machine's cores, lists without gaps or repeats, percentages and durations; and the
line that names a row that cannot run. The bounds every request is held to are here too. (A request is any of
harness/core/requests.py's, which import their bounds from here: `req` is not annotated with them.)

Runs in: the parent. A refused request raises BadInput: one line for the user, exit code 2, nothing written."""

from __future__ import annotations

import os
from typing import Any

from harness.ground import provenance as envmod
from harness.ground.errors import BadInput, first_sentence

# ---- the bounds a request is held to ------------------------------------------------------------------------------

DEVICES = ("cpu", "cuda")


MAX_THREADS = 4096
"""--threads above this is a typo, not a machine: refused before torch.set_num_threads() would overflow in a rank."""


MAX_WORLD = 65536
"""A world size above this is a typo, not a cluster (the largest the model extrapolates to, too): refused before
any other check would name it in a less helpful message."""


MAX_STEPS = 10**7
"""--steps, --warmup, --max-steps (and the step counts that follow them) above this are refused: every rank keeps
one time and one loss per step (0.3 GB at this bound), and 2**63 overflowed the progress file's counters."""


MAX_REPEATS = 1000
"""--repeats above this is refused: the plan lists every launch up front (10**20 of them took all the memory)."""


MAX_BUDGET_S = 7 * 24 * 3600.0
"""--budget above a week is a typo."""


MAX_BREAKDOWN_STEPS = 1000
"""--breakdown-steps above this is refused: the profiler holds every event of every profiled step in memory until
they are split. The split is linear in the events and each rank reports every step it splits to the stall watch
(tests/benchmarks/bench_split.py times it on 1,000 synthetic steps); a stall there anyway costs the breakdown,
never the row (harness/rank/train.py writes the row's result before the profiled steps)."""


BREAKDOWN_STEPS = 5
"""The steps --breakdown profiles when --breakdown-steps is not given."""


BREAKDOWN_BOUND = "the profiler holds every event of the profiled steps in memory until they are split"
"""Why --breakdown-steps is bounded, as its refusal says it."""


MAX_ITERS = 10**6
"""`compare comm --iters` above this is refused (a cell of 10**20 calls would never end)."""


def pairs(items: list[str], what: str, form: str = "KEY=VALUE") -> list[tuple[str, str]]:
    """["k=v", ...] -> [("k", "v"), ...], refusing an item that is not KEY=VALUE (`form`: how the message shows
    the expected form)."""
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"{what} '{item}' is not {form}")
        if key.strip() in {k for k, _ in out}:
            raise BadInput(f"{what} '{key.strip()}' given twice")
        out.append((key.strip(), value.strip()))
    return out


def require_torch() -> None:
    """torch imports here (every adapter and the reference need it): one line otherwise, before anything runs.
    Cheap: the answer is cached, keyed by torch's files (adapters/probes.py: torch_build)."""
    from adapters.probes import torch_build

    build = torch_build()
    if not build.get("installed"):
        raise BadInput("torch is not installed in this environment; `make setup` installs the pinned CPU build "
                       "(torch==2.13.0) into .venv/")
    if build.get("broken"):
        raise BadInput(f"torch in {build['where']} fails to import ({build['broken']}); every adapter needs it: "
                       "reinstall it with `make clean setup`, or remove what shadows it from PYTHONPATH")
    import importlib.util

    for name in ("numpy",):  # what torch and the harness import in every rank: a module of that name in front of
        # the package (a numpy.py on PYTHONPATH) failed every launch on a SyntaxError naming neither
        spec = importlib.util.find_spec(name)
        if spec is not None and not spec.submodule_search_locations:
            raise BadInput(f"{name} is shadowed by {spec.origin}, a module that is not the {name} package, in front "
                           f"of it on the path; every adapter needs {name}: remove it from PYTHONPATH (or rename it)")


def check_common(req: Any, min_world: int = 1, largest_world: int | None = None) -> None:
    """Device, world size, timeout, threads and --out, each refused with one line naming the valid values; and a
    test's COMPARE_FAULT, aimed at a rank below `largest_world` (a sweep's largest; default: the world size)."""
    require_torch()
    if req.device not in DEVICES:
        raise BadInput(f"unknown device '{req.device}'; valid choices: {', '.join(DEVICES)}")
    if req.world_size < min_world:
        what = " for communication" if min_world > 1 else ""
        raise BadInput(f"world size must be at least {min_world}{what}, got {req.world_size}")
    if req.world_size > MAX_WORLD:
        raise BadInput(f"world size must be at most {MAX_WORLD:,}, got {req.world_size}")
    if not req.timeout_s > 0:  # inf: no time limit
        raise BadInput(f"--timeout must be a positive number of seconds, got {req.timeout_s:g}")
    if not req.stall_s >= 0:  # inf: never, as 0
        raise BadInput(f"--stall-timeout must be a number of seconds, at least 0 (0: never), got {req.stall_s:g}")
    if req.threads is not None and req.threads < 1:
        raise BadInput(f"threads must be at least 1, got {req.threads}")
    if req.threads is not None and req.threads > MAX_THREADS:
        raise BadInput(f"threads must be at most {MAX_THREADS} (more than any machine's cores), got {req.threads}")
    fault = os.environ.get("COMPARE_FAULT")
    if fault:  # a test's fault injection (harness/rank/faults.py), read by every rank
        from harness.rank import faults

        try:
            name, rank, _, _ = faults.parse(fault)
        except ValueError as exc:
            raise BadInput(str(exc)) from None
        import adapters

        # a fault aimed at nothing fired nowhere, and the run passed for one that survived it
        targets = [*adapters.names(), "reference"]  # the single-process reference run too
        if name not in targets:
            raise BadInput(f"COMPARE_FAULT={fault!r}: unknown adapter '{name}'; valid choices: "
                           f"{', '.join(targets)}")
        world = largest_world or req.world_size
        if rank >= world:
            raise BadInput(f"COMPARE_FAULT={fault!r}: rank {rank} does not exist at world size "
                           f"{world} (ranks 0-{world - 1})")


def check_cores(req: Any, processes: int, fix: str | None = None) -> bool:
    """Whether `processes` CPU processes oversubscribe the usable cores; refused unless --oversubscribe. `fix`:
    what to say instead of "--world-size N or fewer" (`compare scale` has --world-sizes)."""
    if req.device != "cpu":
        return False
    cores = envmod.usable_cores()
    if processes <= cores:
        if req.threads is None or processes * req.threads <= cores:
            return False
        if not req.oversubscribe:  # more compute threads than cores: oversubscribed as surely as more processes
            raise BadInput(f"world size {processes} x --threads {req.threads} needs {processes * req.threads} cores "
                           f"but this machine has {cores} usable cores; use --threads {max(1, cores // processes)} "
                           f"or fewer, or --oversubscribe to run it anyway (every row is then labelled "
                           f"oversubscribed)")
        return True
    if not req.oversubscribe:
        raise BadInput(f"world size {processes} needs {processes} processes but this machine has {cores} usable "
                       f"cores; use {fix or f'--world-size {cores} or fewer'}, or --oversubscribe to run it anyway "
                       f"(every row is then labelled oversubscribed)")
    return True


def check_list(given: list[str] | None, valid: list[str], what: str) -> None:
    """An explicit list must be non-empty and without duplicates."""
    if given is None:
        return
    if not given:
        raise BadInput(f"no {what}s given; valid choices: {', '.join(valid)}")
    if "" in given:
        raise BadInput(f"an empty {what} in '{','.join(given)}' (two commas in a row, or one at an end); valid "
                       f"choices: {', '.join(valid)}")
    seen = set()
    for name in given:
        # an unknown name is named as unknown, with the choices, by the check that follows (twice was said first)
        if name in seen and name.split(":", 1)[0] in valid:
            raise BadInput(f"{what} '{name}' listed twice")
        seen.add(name)


MIN_PERCENT = 0.01
"""The smallest --precision, --margin or --min-gain, in percent: one part in 10,000, a hundredth of the run-to-run
spread of the quietest machine measured (about 1%); `--margin 1e-9%` was refused as not "above 0%"."""


def parse_precision(text: str, option: str = "--precision") -> float:
    """"5%" -> 0.05: a percentage of at least MIN_PERCENT and below 100 (BadInput otherwise)."""
    import re

    m = re.fullmatch(r"\s*((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*%\s*", text or "")
    value = float(m.group(1)) / 100.0 if m else None
    if value is None or not MIN_PERCENT / 100 <= value < 1.0:
        raise BadInput(f"{option} must be a percentage of at least {MIN_PERCENT:g}% and below 100%, e.g. 5%; got "
                       f"{text!r}")
    return value


def parse_duration(text: str, option: str = "--budget") -> float:
    """"10m" -> 600.0: a number of seconds (s, the default), minutes (m) or hours (h), or a sum of them with their
    units ("1h30m", "2m 30s"), each unit once and the larger first; above 0 and at most a week."""
    import re

    number = r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    m = re.fullmatch(rf"\s*{number}\s*([smh]?)\s*", text or "")
    parts = [(m.group(1), m.group(2))] if m else None
    if parts is None and re.fullmatch(rf"\s*(?:{number}\s*[hms]\s*)+", text or ""):
        parts = re.findall(rf"{number}\s*([hms])", text)
        if "".join(u for _, u in parts) not in ("hms", "hm", "hs", "ms"):
            parts = None  # a unit twice, or out of order ("30m1h"): not read as a sum
    scale = {"": 1, "s": 1, "m": 60, "h": 3600}
    seconds = sum(float(n) * scale[u] for n, u in parts) if parts else None
    if seconds is None or not 0.0 < seconds <= MAX_BUDGET_S:
        raise BadInput(f"{option} must be a duration above 0 and at most a week, e.g. 600s, 10m, 2h or 1h30m; got "
                       f"{text!r}")
    return seconds


def unavailable_message(kind: str, name: str, reason: str, device: str, world_size: int) -> str:
    """One readable line for a named adapter/backend that cannot run (with --strict)."""
    return (f"{kind} '{name}' cannot run here: {first_sentence(reason)}; see `{list_command(device, world_size)}` "
            f"for every reason and fix")


def list_command(device: str, world_size: int | None) -> str:
    """The `compare list` line that shows the same availability (a world size above the usable cores got this far
    only with --oversubscribe, which `compare list` then needs too)."""
    over = device == "cpu" and world_size is not None and world_size > envmod.usable_cores()
    return f"compare list --device {device} --world-size {world_size}{' --oversubscribe' if over else ''}"
