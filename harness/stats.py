"""Step-time statistics: percentiles, the slowest rank per step, summaries.

Runs in: the parent (records and reports). No numpy or torch needed.
"""

from __future__ import annotations


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default)."""
    if not values:
        raise ValueError("no values")
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def worst(values) -> float:
    """The largest of `values`, or NaN if any is NaN: for differences and errors, where a NaN (a diverged
    parameter or loss) is the worst value there is. Python's max() keeps a NaN only when it comes first
    (max(0.1, nan) == 0.1, max(nan, 0.1) is nan), so a check `max(...) <= tolerance` could pass over one."""
    values = list(values)
    if not values:
        raise ValueError("no values")
    return float("nan") if any(v != v for v in values) else max(values)


def step_stats(step_times_s: list[float]) -> dict[str, float | int]:
    """median, p10, p90, mean and n of a list of step times."""
    return {"median": percentile(step_times_s, 50), "p10": percentile(step_times_s, 10),
            "p90": percentile(step_times_s, 90), "mean": sum(step_times_s) / len(step_times_s),
            "n": len(step_times_s)}


def slowest_rank_steps(per_rank: list[list[float]]) -> list[float]:
    """Per-step time = the slowest rank's time for that step (a step is done when every rank is done)."""
    return [max(ts) for ts in zip(*per_rank)]
