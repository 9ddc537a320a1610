"""The machine's CPU time counters (/proc/stat), read the same way by a rank (over its timed window), the parent
(what a record's noise figures mean) and `compare doctor` (the machine at rest).

Runs in: both (a shared module: imports nothing of the project).
"""

from __future__ import annotations

FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
"""The columns of the first line of /proc/stat that are kept, in clock ticks summed over every CPU."""


def read(path: str = "/proc/stat") -> list[int] | None:
    """The machine's CPU time so far, per FIELDS; None where unreadable (not Linux, or a restricted /proc)."""
    try:
        with open(path) as f:
            first = f.readline().split()
    except OSError:
        return None
    if not first or first[0] != "cpu":
        return None
    values = [int(v) for v in first[1:1 + len(FIELDS)]]
    return values + [0] * (len(FIELDS) - len(values))


def shares(delta: list[int]) -> dict[str, float] | None:
    """From the counters' difference over a window: its length in ticks, and the shares of it stolen and busy."""
    total = sum(delta)
    if total <= 0:
        return None
    d = dict(zip(FIELDS, delta))
    return {"ticks": total, "steal": d["steal"] / total,
            "busy": (total - d["idle"] - d["iowait"] - d["steal"]) / total}
