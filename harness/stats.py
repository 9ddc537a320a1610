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


def step_stats(step_times_s: list[float]) -> dict[str, float | int]:
    """median, p10, p90, mean and n of a list of step times."""
    return {"median": percentile(step_times_s, 50), "p10": percentile(step_times_s, 10),
            "p90": percentile(step_times_s, 90), "mean": sum(step_times_s) / len(step_times_s),
            "n": len(step_times_s)}


def slowest_rank_steps(per_rank: list[list[float]]) -> list[float]:
    """Per-step time = the slowest rank's time for that step (a step is done when every rank is done)."""
    return [max(ts) for ts in zip(*per_rank)]
