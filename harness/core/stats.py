"""Step-time statistics: percentiles, the slowest rank per step, summaries.

Runs in: the parent (records and reports). No numpy or torch needed.
"""

from __future__ import annotations

import math
import statistics


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


# ---- intervals over launches ----------------------------------------------------------------------------------
# The launch is the unit of replication (the variance is between launches, not between the steps of one), so every
# interval below is over per-launch values. Throughputs are compared as ratios: the intervals are Student t on the
# logarithm (the row's estimate is then the geometric mean of its launches) and, for a ratio of two rows, Welch's t
# on the difference of their log means (unequal variances; Welch-Satterthwaite degrees of freedom). Measured here, a
# percentile bootstrap at 3 launches was too narrow (it once called the same DDP under two launchers different).

CONFIDENCE = 0.95
MIN_LAUNCHES = 3
"""Below this many launches a row gets no interval ("n=2: no interval"), not a number that looks exact."""
INTERVAL_METHOD = ("95% Student t interval over launches on log samples/s (geometric mean); ratios: Welch t on the "
                   "difference of log means")


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom (df may be fractional: Welch)."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The `p` quantile of Student's t (bisection on t_cdf; 4.303 for p=0.975, df=2)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def log_moments(values: list[float]) -> tuple[float, float, int]:
    """Mean and sample variance of log(values), and n."""
    logs = [math.log(v) for v in values]
    n = len(logs)
    mean = sum(logs) / n
    var = sum((x - mean) ** 2 for x in logs) / (n - 1) if n > 1 else 0.0
    return mean, var, n


def geomean_interval(values: list[float], confidence: float = CONFIDENCE) -> dict:
    """{"estimate", "lo", "hi", "n"} of positive per-launch values: the geometric mean and its Student t interval on
    the log scale; "lo"/"hi" are None below MIN_LAUNCHES launches."""
    if not values or any(not v > 0 for v in values):
        raise ValueError(f"geomean_interval needs positive values, got {values}")
    mean, var, n = log_moments(values)
    out = {"estimate": math.exp(mean), "lo": None, "hi": None, "n": n}
    if n >= MIN_LAUNCHES:
        half = t_quantile(0.5 + confidence / 2.0, n - 1) * math.sqrt(var / n)
        out.update(lo=math.exp(mean - half), hi=math.exp(mean + half))
    return out


def ratio_interval(a: list[float], b: list[float], confidence: float = CONFIDENCE) -> dict:
    """{"estimate", "lo", "hi", "n_a", "n_b", "df"} for geomean(a) / geomean(b), with Welch's t interval on the
    difference of log means; "lo"/"hi" are None unless both sides have MIN_LAUNCHES launches."""
    ma, va, na = log_moments(a)
    mb, vb, nb = log_moments(b)
    out = {"estimate": math.exp(ma - mb), "lo": None, "hi": None, "n_a": na, "n_b": nb, "df": None}
    if na < MIN_LAUNCHES or nb < MIN_LAUNCHES:
        return out
    se2 = va / na + vb / nb
    if se2 == 0.0:  # identical launches on both sides: no spread to speak of
        out.update(lo=out["estimate"], hi=out["estimate"], df=float(na + nb - 2))
        return out
    df = se2 ** 2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1))
    half = t_quantile(0.5 + confidence / 2.0, df) * math.sqrt(se2)
    out.update(lo=math.exp(ma - mb - half), hi=math.exp(ma - mb + half), df=df)
    return out


def half_width(interval: dict) -> float | None:
    """Relative half-width of an interval: (hi - lo) / 2 / estimate (None without an interval)."""
    if interval.get("lo") is None:
        return None
    return (interval["hi"] - interval["lo"]) / 2.0 / interval["estimate"]


def tiers(rows: dict[str, list[float]], confidence: float = CONFIDENCE) -> list[list[str]]:
    """Rows (label -> per-launch throughputs) grouped into tiers, fastest first: a tier is the fastest row left (by
    geometric mean) and every other row left whose ratio interval against it contains 1 (no difference resolvable);
    rows whose interval excludes 1 go to a later tier. Without intervals (fewer than MIN_LAUNCHES launches) every row
    is one tier: nothing can be ranked."""
    left = sorted(rows, key=lambda k: -geomean_interval(rows[k])["estimate"])
    out: list[list[str]] = []
    while left:
        top = left[0]
        tier = [top] + [k for k in left[1:] if not excludes_one(ratio_interval(rows[top], rows[k], confidence))]
        out.append(tier)
        left = [k for k in left if k not in tier]
    return out


def excludes_one(interval: dict) -> bool:
    return interval["lo"] is not None and (interval["lo"] > 1.0 or interval["hi"] < 1.0)


MEDIAN_INTERVAL_METHOD = "95% distribution-free interval for the median (order statistics, binomial)"


def median_interval(values: list[float], confidence: float = CONFIDENCE) -> dict:
    """The median with a distribution-free interval: the order statistics x(j) and x(n+1-j) with the largest j such
    that P(Binomial(n, 1/2) < j) <= (1 - confidence) / 2, which cover the median with at least `confidence` whatever
    the distribution (n = 10: x(2) and x(9), 97.9%). Below n = 6 no such pair reaches 95%: lo and hi are None."""
    xs = sorted(values)
    n = len(xs)
    out = {"estimate": statistics.median(xs) if xs else None, "lo": None, "hi": None, "n": n}
    tail, j, below = (1 - confidence) / 2, 0, 0.0
    while j < n:
        nxt = below + math.comb(n, j) / 2 ** n  # P(X <= j) = P(X < j + 1)
        if nxt > tail:
            break
        below, j = nxt, j + 1
    if j >= 1:
        out["lo"], out["hi"] = xs[j - 1], xs[n - j]
    return out


def ranks(values: list[float]) -> list[float]:
    """1-based ranks of `values`, ties sharing the mean of the ranks they span."""
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in order[i:j + 1]:
            out[k] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: list[float], b: list[float]) -> float | None:
    """Spearman's rank correlation of two paired lists (Pearson's r of their ranks); None below 3 pairs or where one
    side has no spread."""
    if len(a) != len(b) or len(a) < 3:
        return None
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va, vb = sum((x - ma) ** 2 for x in ra), sum((y - mb) ** 2 for y in rb)
    return None if va == 0 or vb == 0 else cov / math.sqrt(va * vb)
