"""Step-time statistics: percentiles, the slowest rank per step, summaries.

Runs in: the parent (records and reports). Distributions from scipy.stats; no torch needed.
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
ALPHA = 1 - CONFIDENCE
"""A family-adjusted p-value below it resolves a difference (or an equivalence)."""
MIN_LAUNCHES = 3
"""Below this many launches a row gets no interval ("n=2: no interval"), not a number that looks exact."""
INTERVAL_METHOD = ("95% Student t interval over launches on log samples/s (geometric mean); ratios between rows: "
                   "paired within rounds where every row ran once in every round, else Welch t on the difference of "
                   "log means (the verdict says which)")


def t_quantile(p: float, df: float) -> float:
    """The `p` quantile of Student's t (4.303 for p=0.975, df=2); scipy.stats."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    from scipy import stats as sp

    return float(sp.t.ppf(p, df))


def moments(xs: list[float]) -> tuple[float, float, int]:
    """Mean and sample variance of xs (0 for one), and n."""
    n = len(xs)
    mean = sum(xs) / n
    var = sum((x - mean) ** 2 for x in xs) / (n - 1) if n > 1 else 0.0
    return mean, var, n


def log_moments(values: list[float]) -> tuple[float, float, int]:
    """Mean and sample variance of log(values), and n."""
    return moments([math.log(v) for v in values])


def welch(va: float, na: int, vb: float, nb: int) -> tuple[float, float]:
    """(squared standard error, degrees of freedom) of the difference of two means with sample variances va, vb over
    na, nb values: Welch and Satterthwaite; na + nb - 2 degrees of freedom where neither side varies."""
    se2 = va / na + vb / nb
    df = se2 ** 2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1)) if se2 > 0 else float(na + nb - 2)
    return se2, df


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
    se2, df = welch(va, na, vb, nb)
    if se2 == 0.0:  # identical launches on both sides: no spread to speak of
        out.update(lo=out["estimate"], hi=out["estimate"], df=df)
        return out
    half = t_quantile(0.5 + confidence / 2.0, df) * math.sqrt(se2)
    out.update(lo=math.exp(ma - mb - half), hi=math.exp(ma - mb + half), df=df)
    return out


def half_width(interval: dict) -> float | None:
    """Relative half-width of an interval: (hi - lo) / 2 / estimate (None without an interval)."""
    if interval.get("lo") is None:
        return None
    return (interval["hi"] - interval["lo"]) / 2.0 / interval["estimate"]


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


# ---- every pair, one family -------------------------------------------------------------------------------------
# A run's rows are compared pair by pair, all pairs as one family: each pair's ratio of geometric means with its 95%
# interval and two tests on log throughput, a difference (two-sided t) and an equivalence within a margin (TOST,
# Schuirmann 1987: both one-sided tests at 5%, i.e. the 90% interval inside the margin), each family of p-values
# adjusted by Holm's step-down method. Rounds are blocks: every round runs every row once, so where every row has
# one launch in each of the same rounds, a pair is analysed on its paired differences within rounds (what the
# round shares, the machine's state at that time, cancels); otherwise unpaired (Welch).

DEFAULT_MARGIN = 0.05
"""Equivalence margin: two rows whose ratio's 90% interval lies within [1/1.05, 1.05] are equivalent."""


def recorded_margin(records: list[dict]) -> float:
    """The equivalence margin a run's records were made with (its --margin, which every record of the run holds),
    or DEFAULT_MARGIN where none was given."""
    return next((r["margin"] for r in records if r.get("margin")), None) or DEFAULT_MARGIN
def compare_pair(a: list[float], b: list[float], paired: bool, margin: float = DEFAULT_MARGIN,
                 confidence: float = CONFIDENCE, pilot: int | None = None) -> dict:
    """Row a against row b from per-launch values: {"estimate" (geomean ratio a/b), "lo", "hi" (its interval),
    "p" (two-sided, no difference), "p_equivalent" (TOST: the larger one-sided p against ratios beyond 1 + margin
    either way), "df", "n", "paired"}. `paired`: a[i] and b[i] come from the same round (t on the differences of
    logs, n - 1 degrees of freedom), else Welch. Below MIN_LAUNCHES a side has no interval and no test (None).
    `pilot` (paired only, two-stage rounds): the variance is the first `pilot` rounds' alone and the degrees of
    freedom pilot - 1, the mean over every round (Stein 1945; see `stein_rounds`)."""
    if paired:
        if len(a) != len(b):
            raise ValueError(f"paired values need as many of each, got {len(a)} and {len(b)}")
        ratios = [x / y for x, y in zip(a, b)]
        mean, var, n = log_moments(ratios)
        se, df, enough = math.sqrt(var / n), float(n - 1), n >= MIN_LAUNCHES
        if pilot is not None and MIN_LAUNCHES <= pilot <= n:
            # the pilot's variance alone: the rounds were fixed from it, so it is independent of the mean over all
            # of them, and (mean - mu) / (s_pilot / sqrt(n)) is exactly Student t with pilot - 1 df
            se, df = math.sqrt(log_moments(ratios[:pilot])[1] / n), float(pilot - 1)
    else:
        ma, va, na = log_moments(a)
        mb, vb, nb = log_moments(b)
        mean, n, enough = ma - mb, min(na, nb), min(na, nb) >= MIN_LAUNCHES
        se2, df = welch(va, na, vb, nb) if enough else (0.0, float(na + nb - 2))
        se = math.sqrt(se2)
    out = {"estimate": math.exp(mean), "lo": None, "hi": None, "p": None, "p_equivalent": None, "df": None,
           "n": n, "paired": paired}
    if not enough:
        return out
    from scipy import stats as sp  # only where there is something to test: a one-launch run never imports it

    bound = math.log1p(margin)
    if se == 0.0:  # identical launches: no spread, the estimate is exact
        out.update(lo=out["estimate"], hi=out["estimate"], df=df, p=0.0 if mean else 1.0,
                   p_equivalent=0.0 if abs(mean) < bound else 1.0)
        return out
    half = float(sp.t.ppf(0.5 + confidence / 2.0, df)) * se
    out.update(lo=math.exp(mean - half), hi=math.exp(mean + half), df=df,
               p=float(2 * sp.t.sf(abs(mean) / se, df)),
               p_equivalent=float(max(sp.t.sf((mean + bound) / se, df), sp.t.cdf((mean - bound) / se, df))))
    return out


# ---- --precision: two stages (Stein 1945) --------------------------------------------------------------------------
# Stopping when an interval is narrow enough stops more often where the variance happened to come out small, so the
# intervals it leaves are too narrow: with two identical rows at CV 5%, false "faster" 8.6-10.2% and coverage 0.90.
# Two stages keep the stated error whatever the variance: a pilot of `pilot_rounds` rounds estimates each pair's
# variance, the rounds are fixed from it once (`stein_rounds`), and every interval takes the pilot's variance with
# pilot - 1 degrees of freedom (`compare_pair(pilot=...)`): the mean over every round is independent of the pilot's
# variance (normal data), so the interval covers with exactly the stated confidence (tests/unit/test_precision_rule.py
# simulates it for 2 to 8 rows at CV 5-15%).

PILOT_COST = 1.25
"""The pilot is long enough that not knowing the variance widens an interval at most this much (t against z)."""


def pilot_rounds(pairs: int, confidence: float = CONFIDENCE) -> int:
    """Rounds of the pilot for `pairs` pairs: the fewest (at least 5) whose Student t quantile at the simultaneous
    level (Bonferroni, 1 - (1 - confidence) / pairs) is within PILOT_COST of the normal one: 7 for 2 rows, 12 for 5,
    15 for 8."""
    from scipy import stats as sp

    q = 1 - (1 - confidence) / max(pairs, 1) / 2
    z, n = float(sp.norm.ppf(q)), 5
    while float(sp.t.ppf(q, n - 1)) > PILOT_COST * z:
        n += 1
    return n


def stein_rounds(pilot_variances: list[float], pilot: int, target: float, confidence: float = CONFIDENCE) -> int:
    """The rounds that give every pair a simultaneous interval (Bonferroni over the pairs) of relative half-width at
    most `target`, from each pair's variance of its log ratio per round over the `pilot` rounds of the pilot:
    n = t(pilot - 1)^2 x s^2 / asinh(target)^2 for the pair that needs the most, and never fewer than the pilot
    (Stein's second stage)."""
    from scipy import stats as sp

    m = len(pilot_variances)
    t = float(sp.t.ppf(1 - (1 - confidence) / max(m, 1) / 2, pilot - 1))
    h = math.asinh(target)  # a log-scale half-width h is a relative half-width sinh(h) (`half_width`)
    return max([pilot] + [math.ceil(t * t * v / (h * h) - 1e-9) for v in pilot_variances])


def holm(pvalues: list[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of a family of p-values (None: no test, not counted in the family): the i-th
    smallest of m is multiplied by m - i + 1, and an adjusted value is never below the one before it."""
    ranked = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    m, out, running = len(ranked), list(pvalues), 0.0
    for rank, (p, i) in enumerate(ranked):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def adjust(pairs: list[dict]) -> list[dict]:
    """A family of `compare_pair` results, each given "p_holm" and "p_equivalent_holm": the difference tests and the
    equivalence tests each Holm-adjusted over the family."""
    for key in ("p", "p_equivalent"):
        for p, q in zip(pairs, holm([p[key] for p in pairs])):
            p[f"{key}_holm"] = q
    return pairs


def letter_groups(order: list[str], differ: set[frozenset]) -> dict[str, str]:
    """A compact letter display (Piepho 2004, insert and absorb): letters for rows in `order` (fastest first) such
    that two rows share a letter exactly when they are not in `differ` (pairs resolved apart). Letters run a, b, ...
    in the order of each group's fastest row."""
    groups = [list(order)]
    for pair in sorted(differ, key=lambda p: sorted(order.index(x) for x in p)):
        x, y = sorted(pair, key=order.index)
        split = []
        for g in groups:
            split += [[r for r in g if r != x], [r for r in g if r != y]] if x in g and y in g else [g]
        kept: list[list[str]] = []
        for g in sorted(split, key=len, reverse=True):  # absorb: drop a group inside another
            if g and not any(set(g) <= set(h) for h in kept):
                kept.append(g)
        groups = kept
    groups.sort(key=lambda g: sorted(order.index(r) for r in g))
    names = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    out = {r: "" for r in order}
    for k, g in enumerate(groups):
        for r in g:
            out[r] += names[k] if k < len(names) else f"[{k}]"
    return out


# ---- sessions: runs at other times as a level of their own ----------------------------------------------------------
# Runs of the same request at other times (sessions) disagree more than one run's intervals allow (the five committed
# `--precision 5%` runs: between-run SD of a pair's log ratio up to 0.13 against a run's standard error of 0.02-0.05).
# A comparison over several sessions therefore takes each session's estimate (a pair's log ratio, paired within its
# rounds; a row's log geometric mean) as one observation: the pooled estimate is their mean and its interval Student's
# t over the k estimates (k - 1 df), so the spread of the estimates themselves carries both the variation between
# sessions and each session's own. Each session counts once. Weighting sessions by their own variance (DerSimonian-
# Laird's random-effects weights with Hartung and Knapp's interval, used here until 2026-11-29) trusts a within-session
# variance estimated from 2-5 rounds: an audit's 3 sessions put 99.8% of the weight on one whose 3 rounds had happened
# to agree, its pooled interval was that session's own, and the next session fell outside it; simulated with
# within-session noise differing between sessions (CV 2-30%) and a between-session SD of 5-10%, that verdict called
# identical rows different in 6-9% of runs against the stated 5%, where the t over the estimates stays near 5%
# (docs/fairness.md gives the simulation's figures; tests/unit/test_sessions.py). Between-session variance tau^2 (DerSimonian and Laird's moment estimator), I^2 and
# Cochran's Q are still given: they describe the spread, and the interval does not rest on them. Why not a rows x
# sessions mixed model on every launch: each session keeps its own analysis (rounds as blocks within it, Welch where a
# launch failed), sessions may have different numbers of rounds, and each pair gets its own spread (the five runs'
# heterogeneity ranged from I^2 53% to 83% between pairs), which one rows x sessions variance would average away.

def _dl(groups: list[list[tuple[float, float]]]) -> tuple[float, float, float]:
    """DerSimonian-Laird for sessions in groups (each group its own mean): (tau^2, Q, degrees of freedom of Q)."""
    q = c = 0.0
    k = sum(len(g) for g in groups)
    for g in groups:
        w = [1.0 / max(v, 1e-12) for _, v in g]
        sw = sum(w)
        mu = sum(wi * y for wi, (y, _) in zip(w, g)) / sw
        q += sum(wi * (y - mu) ** 2 for wi, (y, _) in zip(w, g))
        c += sw - sum(wi * wi for wi in w) / sw
    df = k - len(groups)
    return (max(0.0, (q - df) / c) if c > 0 else 0.0), q, df


def _tests(mean: float, se: float, df: float, margin: float, confidence: float) -> dict:
    from scipy import stats as sp

    bound = math.log1p(margin)
    if se == 0.0:
        return {"lo": math.exp(mean), "hi": math.exp(mean), "p": 0.0 if mean else 1.0,
                "p_equivalent": 0.0 if abs(mean) < bound else 1.0}
    half = float(sp.t.ppf(0.5 + confidence / 2.0, df)) * se
    return {"lo": math.exp(mean - half), "hi": math.exp(mean + half), "p": float(2 * sp.t.sf(abs(mean) / se, df)),
            "p_equivalent": float(max(sp.t.sf((mean + bound) / se, df), sp.t.cdf((mean - bound) / se, df)))}


def _floored(spread: float, estimates: list[tuple[float, float]]) -> float:
    """The variance of one session's estimate: the between-session part plus its own (within the session), which
    the estimates' sample variance `spread` estimates both of, never taken below the mean of their own variances;
    sessions that happen to agree would otherwise make the interval narrower than any one session's noise allows
    (Hartung-Knapp's floor, q* = max(1, q): Roever, Knapp & Friede 2015, for the mean counted once each)."""
    return max(spread, sum(v for _, v in estimates) / len(estimates))


def random_effects(estimates: list[tuple[float, float]], margin: float = DEFAULT_MARGIN,
                   confidence: float = CONFIDENCE) -> dict:
    """Sessions' estimates on the log scale, each (mean, its within-session variance), combined with each session
    counted once: {"estimate" (exp of the mean of the session estimates), "lo", "hi" (Student's t over the k
    estimates, k - 1 df), "p", "p_equivalent" (TOST), "df", "n" (sessions), "se", "tau" (between-session SD, log
    scale, DerSimonian-Laird), "i2", "q", "p_q" (Cochran's Q test of no heterogeneity), "prediction" ([lo, hi] where
    a new session's own estimate should fall: mean +- t(k - 1) sqrt(s*^2 (1 + 1/k)), from 3 sessions, with the
    interval's floored variance s*^2 = max(s^2, the mean of the sessions' own variances), s^2 the estimates' sample
    variance: a new session carries its own noise at least, however closely the k agreed), "sessions" (each
    session's exp(mean)), "floored" (whether s^2 was raised to the mean of the sessions' own variances)}. Below 2
    sessions: no interval (None)."""
    from scipy import stats as sp

    k = len(estimates)
    out = {"estimate": None, "lo": None, "hi": None, "p": None, "p_equivalent": None, "df": None, "n": k,
           "tau": None, "i2": None, "q": None, "p_q": None, "prediction": None, "paired": True, "floored": False,
           "sessions": [math.exp(y) for y, _ in estimates]}
    if k == 0:
        return out
    ys = [y for y, _ in estimates]
    if k < 2:
        out["estimate"] = math.exp(ys[0])
        return out
    mu, spread, _ = moments(ys)
    s2 = _floored(spread, estimates)
    tau2, q, dfq = _dl([estimates])
    se = math.sqrt(s2 / k)
    out.update(_tests(mu, se, k - 1, margin, confidence), estimate=math.exp(mu), df=float(k - 1),
               tau=math.sqrt(tau2), q=q, p_q=float(sp.chi2.sf(q, dfq)), i2=max(0.0, (q - dfq) / q) if q > 0 else 0.0,
               se=se, floored=s2 > spread)
    if k >= 3:
        half = float(sp.t.ppf(0.5 + confidence / 2.0, k - 1)) * math.sqrt(s2 * (1 + 1 / k))
        out["prediction"] = [math.exp(mu - half), math.exp(mu + half)]
    return out


def random_effects_difference(a: list[tuple[float, float]], b: list[tuple[float, float]],
                              margin: float = DEFAULT_MARGIN, confidence: float = CONFIDENCE) -> dict:
    """Two sets of sessions (say, before and after a change), each session (log mean, within variance), each session
    counted once: the mean of B's estimates minus the mean of A's, with Welch's t interval over the two sets of
    estimates (Satterthwaite's df). {"estimate" (exp of the difference), "lo", "hi", "p", "p_equivalent", "df", "n"
    (sessions in all), "se", "tau" (one between-session SD for both, DerSimonian-Laird on the residuals about each
    side's mean)}; no interval unless each side has 2 sessions."""
    out = {"estimate": None, "lo": None, "hi": None, "p": None, "p_equivalent": None, "df": None,
           "n": len(a) + len(b), "tau": None, "paired": False}
    if not a or not b:
        return out
    ya, yb = [y for y, _ in a], [y for y, _ in b]
    out["estimate"] = math.exp(sum(yb) / len(yb) - sum(ya) / len(ya))
    if min(len(a), len(b)) < 2:
        return out
    (mu_a, s2a, ka), (mu_b, s2b, kb) = moments(ya), moments(yb)
    s2a, s2b = _floored(s2a, a), _floored(s2b, b)
    se2, df = welch(s2a, ka, s2b, kb)
    se = math.sqrt(se2)
    tau2, _, _ = _dl([a, b])
    out.update(_tests(mu_b - mu_a, se, df, margin, confidence), df=df, tau=math.sqrt(tau2), se=se)
    return out


def session_estimate(a: list[float], b: list[float] | None = None, paired: bool = False) -> tuple[float, float]:
    """One session's estimate on the log scale and its variance: a row's log geometric mean (b None), or a pair's
    log ratio a / b (paired within rounds, else the difference of log means, Welch's variance)."""
    if b is None:
        mean, var, n = log_moments(a)
        return mean, var / n
    if paired:
        mean, var, n = log_moments([x / y for x, y in zip(a, b)])
        return mean, var / n
    ma, va, na = log_moments(a)
    mb, vb, nb = log_moments(b)
    return ma - mb, va / na + vb / nb
