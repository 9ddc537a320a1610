"""What a run will cost, said before it is paid for: each launch's seconds as this machine last measured them for the
same row (adapter and knobs, workload and its options, world size, device, threads, global batch), kept in the cache
directory beside DeepSpeed's JIT (harness/shared/cache.py); a row never run here takes the first launch's figure
once one has ended. A launch's seconds are split into what does not depend on the step count (start-up,
evaluation, shutdown) and seconds per step, so a run of another length is priced too.

Runs in: the parent (harness/core/comparison.py builds a Forecast; harness/core/runner.py tells it each launch).
"""

from __future__ import annotations

import json
import math
from typing import Any

from harness.shared import cache

FILE = "launch_seconds.json"
KEEP = 400
"""Entries kept (the most recent): a few hundred rows of any size."""


def _path():
    return cache.cache_dir() / FILE


def _load() -> dict[str, Any]:
    try:
        data = json.loads(_path().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def key(plan, label: str) -> str:
    """The row as far as its duration goes."""
    req = plan.request
    return json.dumps([label, req.workload, sorted(req.options), req.world_size, req.device, req.threads,
                       plan.global_batch, None if plan.topology is None else len(plan.topology.nodes)])


def remember(plan, label: str, wall_s: float, steps: int, stepping_s: float) -> None:
    """A launch of `label` took `wall_s`, of which `stepping_s` were its `steps` warm-up and timed steps."""
    if not (wall_s > 0 and math.isfinite(wall_s)):
        return
    data = _load()
    k = key(plan, label)
    data.pop(k, None)  # re-inserted last: the most recent entries are the ones kept
    data[k] = {"fixed_s": max(0.0, wall_s - stepping_s), "step_s": stepping_s / steps if steps else 0.0}
    data = dict(list(data.items())[-KEEP:])
    cache.write_atomic(_path(), json.dumps(data).encode())


def duration(text_s: float) -> str:
    """A duration as a person says it: 40 s, 3 min, 1 h 20 min."""
    s = round(text_s)
    if s < 90:
        return f"{max(s, 1)} s"
    if s < 3600:
        return f"{round(s / 60)} min"
    return f"{s // 3600} h {round(s % 3600 / 60)} min"


class Forecast:
    """The seconds each planned launch is expected to take, updated as launches end."""

    def __init__(self, plan, labels: list[str], steps: int, reference_steps: int = 0):
        data = _load()
        self.steps = steps
        self.pending: list[str] = list(labels) + (["reference"] if reference_steps else [])
        self.costs: dict[str, dict | None] = {label: data.get(key(plan, label)) for label in set(self.pending)}
        self.reference_steps = reference_steps
        self.plan = plan
        self.first_wall: float | None = None

    def _seconds(self, label: str) -> float | None:
        c = self.costs.get(label)
        if c is None:
            return self.first_wall
        return c["fixed_s"] + c["step_s"] * (self.reference_steps if label == "reference" else self.steps)

    def left(self) -> float | None:
        """Seconds the launches not yet ended should take; None while some have no figure at all."""
        each = [self._seconds(label) for label in self.pending]
        return None if any(s is None for s in each) else sum(each)

    def known(self) -> tuple[int, int]:
        rows = [label for label in set(self.pending) if label != "reference"]
        return sum(self.costs.get(label) is not None for label in rows), len(rows)

    def line(self) -> str:
        """What the run will cost, before the first launch."""
        n = sum(label != "reference" for label in self.pending)
        left, (known, rows) = self.left(), self.known()
        if left is None and known == 0:
            return (f"{n} launch(es); no estimate yet: none of these rows has run on this machine with these settings "
                    f"(one follows the first launch)")
        if left is None:
            known_s = [self._seconds(label) for label in self.pending if self.costs.get(label) is not None]
            left = sum(known_s) / len(known_s) * len(self.pending)
        source = ("this machine's last launches of every row" if known == rows else
                  f"this machine's last launches of {known} of the {rows} rows, the others taken as their average")
        return f"{n} launch(es): about {duration(left)} (from {source})"

    def ended(self, label: str, wall_s: float) -> str | None:
        """A launch of `label` ended after `wall_s`; the line to print if this was the first figure of the run."""
        if label in self.pending:
            self.pending.remove(label)
        if self.first_wall is not None or not (wall_s > 0) or label == "reference":  # a row's launch prices rows
            return None
        self.first_wall = wall_s
        unknown = [label for label in set(self.pending) if self.costs.get(label) is None and label != "reference"]
        if not unknown:
            return None
        left = self.left()
        return None if left is None else f"about {duration(left)} left (the rows never run here priced as this one)"


def stepping_seconds(rec: dict[str, Any]) -> float:
    """A record's warm-up and timed seconds (0 where it has no phases)."""
    phases = rec.get("phases_s") or {}
    return float(phases.get("warmup", 0.0)) + float(phases.get("timed", 0.0))
