"""A comparison's rows: each an adapter with its knobs (`-a ddp:bucket_cap_mb=1`, `--knob ddp.KNOB=VALUE`) and what
its ranks run with beyond them (`python=PATH`, `env.NAME=VALUE`), configured and checked, or marked unavailable with
the reason and the fix.

Runs in: the parent. A refused row raises BadInput: one line for the user, exit code 2, nothing written."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import adapters
from adapters.base import Adapter, Availability, DeviceKnobError
from harness.core.checks import list_command, pairs, unavailable_message
from harness.ground.errors import BadInput, first_sentence
from harness.shared.text import newlines_shown
from harness.shared import options
from harness.shared.options import OptionError
from harness.shared.registry import UnknownName

if TYPE_CHECKING:
    from harness.core.requests import Request


@dataclass
class Row:
    """One row of a comparison: an adapter with its knobs (a comm backend is the adapter it runs through)."""

    label: str
    """As the user wrote it: "ddp", "deepspeed:zero_stage=3", or a comm backend "torch"."""
    name: str
    """Registry name of the adapter."""
    cls: type[Adapter] | None
    """None only when the adapter's module fails to import (its reason says so)."""
    adapter: Adapter | None = None
    """The configured adapter; None when it cannot run here."""
    reason: str = ""
    """Why it cannot run here (with the fix), when `adapter` is None."""
    environment: dict[str, Any] | None = None
    """What the row's ranks run with beyond its knobs (`python=PATH`, `env.NAME=VALUE`): {"python", "python_version",
    "torch", "env"}; None for compare's own interpreter and environment (row_environment)."""


def parse_knobs(given: list[str], names: set[str], labels: list[str]) -> dict[str, dict[str, str]]:
    """--knob ADAPTER.KNOB=VALUE (repeatable) -> {adapter: {knob: value}}; BadInput for one not of that form or for
    an adapter not among `names` (the run's, whose rows are `labels`)."""
    knobs: dict[str, dict[str, str]] = {}
    for key, value in pairs(given, "knob", "ADAPTER.KNOB=VALUE, e.g. ddp.bucket_cap_mb=50"):
        name, dot, knob = key.partition(".")
        if not dot:
            raise BadInput(f"knob '{key}' must be ADAPTER.KNOB=VALUE, e.g. ddp.bucket_cap_mb=50")
        if name not in names:
            raise BadInput(f"knob '{key}' is for adapter '{name}', which is not in this run "
                           f"({', '.join(labels)})")
        knobs.setdefault(name, {})[knob] = value
    return knobs


def parse_label(label: str) -> tuple[str, dict[str, str]]:
    """"deepspeed:zero_stage=3:offload_optimizer=true" -> ("deepspeed", {...}): one row per knob variant."""
    name, *parts = label.split(":")
    if parts:  # a misspelt adapter is named as such (UnknownName), before its knobs are read
        adapters.get(name)
    variant = {}
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise BadInput(f"adapter row '{label}': '{part}' is not KNOB=VALUE (form: ADAPTER:KNOB=VALUE:...)"
                           + _knobs_of(name))
        if key in variant:
            raise BadInput(f"adapter row '{label}': knob '{key}' given twice")
        variant[key] = value
    return name, variant


HARNESS_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK",
               "LOCAL_RANK", "PYTHONPATH", "PYTHONUNBUFFERED", "TMPDIR", "PATH", "GLOO_SOCKET_IFNAME",
               "NCCL_SOCKET_IFNAME", "CUDA_VISIBLE_DEVICES")
"""Variables the harness sets for every rank (harness/launching/rank_env.py) or that place the ranks: a row may not
set them through `env.NAME=VALUE`, or it would not run under the same conditions as the others."""


def row_environment(label: str, variant: dict[str, str], device: str = "cpu", remote: bool = False
                    ) -> tuple[dict[str, str], dict[str, Any] | None]:
    """A row's variant split into its adapter's knobs and what its ranks run with: `python=PATH` (another
    interpreter, e.g. a second venv with another torch or framework; checked by running it: it must import torch)
    and `env.NAME=VALUE` (an environment variable). BadInput for a path that is not such an interpreter, `env.` with
    no valid name, or a variable the harness sets itself."""
    import re
    import subprocess

    knobs, env, python = {}, {}, None
    for key, value in variant.items():
        if key == "python":
            python = value
        elif key.startswith("env."):
            name = key[len("env."):]
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise BadInput(f"adapter row '{label}': 'env.{name}' needs a variable name (letters, digits and _, "
                               f"not starting with a digit), e.g. env.NCCL_ALGO=Ring")
            if any(not c.isprintable() for c in value):  # the row's label: one line in the report's tables
                raise BadInput(f"adapter row '{newlines_shown(label)}': env.{name}'s value holds a control character; "
                               f"give it on one line, without tabs or other control characters")
            if name in HARNESS_ENV or name.startswith("COMPARE_"):
                raise BadInput(f"adapter row '{label}': {name} is set by the harness for every row (threads with "
                               f"--threads, placement by the launcher); a row may set other variables, e.g. "
                               f"env.NCCL_ALGO=Ring")
            env[name] = value
        else:
            knobs[key] = value
    if python is None and not env:
        return knobs, None
    out: dict[str, Any] = {"env": env}
    if python is not None:
        if remote:
            raise BadInput(f"adapter row '{label}': python= runs its ranks with another interpreter on this machine; "
                           "across hosts give each host's venv the same packages instead")
        path = Path(python).expanduser()
        if not python or not path.is_file() or not os.access(path, os.X_OK):
            raise BadInput(f"adapter row '{label}': python={python} is not an executable file; give a Python "
                           "interpreter, e.g. python=/path/to/venv/bin/python")
        probe = "import sys, torch; print(sys.version.split()[0], torch.__version__)"
        try:
            got = subprocess.run([str(path), "-c", probe], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BadInput(f"adapter row '{label}': python={python} is not a Python interpreter that runs here "
                           f"({type(exc).__name__})") from None
        words = got.stdout.split()
        if got.returncode != 0 or len(words) != 2:
            last = (got.stderr.strip().splitlines() or ["no output"])[-1]
            raise BadInput(f"adapter row '{label}': python={python} is not a Python interpreter with torch "
                           f"({last}); give one, e.g. python=/path/to/venv/bin/python")
        out.update(python=str(path), python_version=words[0], torch=words[1])
    return knobs, out


def _knobs_of(name: str) -> str:
    """"; valid knobs of ddp: bucket_cap_mb, ..." for an error message ("" if the adapter cannot be loaded)."""
    import dataclasses

    try:
        knobs = sorted(f.name for f in dataclasses.fields(adapters.get(name).Knobs))
    except Exception:  # noqa: BLE001 - only a hint in a message that is already an error
        return ""
    return f"; valid knobs of {name}: {', '.join(knobs) or 'none'}"


def build_rows(req: Request, labels: list[tuple[str, str, dict[str, str]]], explicit: bool, kind: str,
               knobs: dict[str, dict[str, str]] | None = None, topology=None) -> list[Row]:
    """Rows for (label, adapter name, knob variant) triples: each adapter configured and its knobs checked, or
    marked unavailable with its reason (across hosts also when it cannot span them). A named row that cannot run
    is an error only with --strict."""
    rows = []
    for _, name, _ in labels:
        if name not in adapters.names():
            raise UnknownName("adapter", name, adapters.names())
    # Across hosts each machine holds only its own node's ranks (and devices): check the largest node here.
    per_machine = req.world_size if topology is None else max(n.slots for n in topology.nodes)
    avails = adapters.availability_all(req.device, per_machine, [name for _, name, _ in labels])
    if topology is not None:
        avails = {name: avail and adapters.multinode(name, topology) for name, avail in avails.items()}
    knob_reasons = set()
    for label, name, variant in labels:
        variant, environment = row_environment(label, variant, req.device,
                                               topology is not None and topology.remote)
        avail = avails[name]
        try:
            cls = adapters.get(name)
        except Exception:  # noqa: BLE001 - an adapter file that fails to import: its availability says why
            cls = None
        given = (knobs or {}).get(name, {})
        if not avail or cls is None:
            if cls is not None:  # a knob that could never be right is bad input, whether or not it can run here
                try:
                    options.build(cls.Knobs, {**given, **variant}, what="knob")
                except OptionError as exc:
                    raise BadInput(f"{kind} {label}: {exc}") from None
            if explicit and req.strict:
                raise BadInput(unavailable_message(kind, label, avail.message(), req.device, req.world_size))
            rows.append(Row(label, name, cls, reason=avail.message()))
            continue
        for key in variant:
            if key in given and given[key] != variant[key]:
                raise BadInput(f"knob {key} of {label} is given twice with different values: {variant[key]} in the "
                               f"row and {given[key]} in --knob {name}.{key}; give it once")
        try:
            adapter = cls({**given, **variant}, req.device)
            adapter.precision()  # resolves (and so checks) precision knobs against the device
            adapter.check_knobs(req.world_size)  # and knobs that depend on the world size (a mesh)
        except DeviceKnobError as exc:  # right in itself, not here (fp16 on a CPU): as a framework not installed
            avail = Availability(False, str(exc))
        except OptionError as exc:
            raise BadInput(f"{kind} {label}: {exc}") from None
        else:
            try:
                avail = adapter.knob_availability(req.device, per_machine)
            except Exception as exc:  # noqa: BLE001 - a broken check is a reason, not a crash
                avail = Availability(False, f"knob check raised {type(exc).__name__}: {exc}")
        if not avail:  # `compare list` does not know the row's knobs: the line says the fix itself
            if explicit and req.strict:
                raise BadInput(f"{kind} '{label}' cannot run here: {avail.message()}")
            rows.append(Row(label, name, cls, reason=avail.message()))
            knob_reasons.add(avail.message())
            continue
        same = next((r for r in rows if r.adapter is not None and r.name == name and r.adapter.knobs == adapter.knobs
                     and r.environment == environment), None)
        if same is not None:  # `ddp:bucket_cap_mb=1,ddp:bucket_cap_mb=1.0`: one row twice, under two spellings
            raise BadInput(f"{kind}s {same.label} and {label} are the same row (the same knobs, spelled "
                           f"differently); give it once")
        rows.append(Row(label, name, cls, adapter, environment=environment))
    if not any(r.adapter for r in rows):
        if all(r.reason in knob_reasons for r in rows):
            raise BadInput(f"no {kind} can run here: {rows[0].reason}"
                           + (f" (and {len(rows) - 1} more row(s) for their knobs)" if len(rows) > 1 else ""))
        reasons = Counter(first_sentence(r.reason) for r in rows)
        what, n = reasons.most_common(1)[0]
        share = "" if n == len(rows) else f" ({n} of the {len(rows)}; the others for reasons of their own)"
        raise BadInput(f"no {kind} can run here: {what}{share}; see `{list_command(req.device, req.world_size)}` "
                       f"for the reasons and fixes")
    return rows
