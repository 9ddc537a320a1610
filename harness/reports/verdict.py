"""The verdict of a `compare run` in words: which rows are faster, by how much, and only as far as the launches
support it, each sentence naming the statistic it rests on; the numbers are the run's analysis
(harness/core/analysis.py). Each pair is resolved (faster or slower), equivalent within the margin, or not resolved;
the verdict is built from the pairs alone. A run with fewer than three launches per row ranks nothing and says how to
get a ranking. Rows of another precision are ranked with the others but carry their precision in the verdict, never
silently.

Runs in: the parent (report).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from harness.core import analysis
from harness.core.analysis import oriented
from harness.core.estimate import duration
from harness.ground.stats import ALPHA, MIN_LAUNCHES

TESTS = "two-sided t tests on log throughput, Holm-adjusted over the pairs, p < 0.05"
NARROWER = "More launches (`--precision`)"
"""What narrows a run's intervals (a joined verdict's: more sessions)."""
"""The difference tests a verdict's words rest on (a joined verdict names its own: harness/reports/sessions.py)."""


_RECORDED = object()


def analyse(records: list[dict[str, Any]], baseline: str | None = None, margin: float | None = None,
            pilot: int | None = None, between: Any = _RECORDED) -> dict[str, Any]:
    """The run's analysis (harness/core/analysis.py: analyse) with the verdict's lines (markdown) as `lines`.
    `between`: the spread between sessions its verdict is set against, where not what its records say the cache held
    (a `--join` run's own session: the verdict over the sessions in the same report, harness/reports/sessions.py:
    here)."""
    a = analysis.analyse(records, baseline, margin, pilot)
    if between is not _RECORDED:
        a["between_sessions"] = between
    a["swamped"] = swamped(a)
    a["unmeasured"] = unmeasured(records, a["ranked"] + a["left_out"])
    a["lines"] = _lines(a, a["launches"])
    return a


REASON_CHARS = 160
"""A failed launch's reason, as a verdict line quotes it (the row's notes and its log hold all of it)."""


def _reason(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= REASON_CHARS:
        return text
    return text[:REASON_CHARS].rsplit(" ", 1)[0] + " …"


def launches_text(mine: list[dict[str, Any]]) -> str:
    """What a row's launches (`mine`: its records) did, in words: "3 launches, all failed: rank 1 exited with code
    1; first error: …", "2 of 3 launches measured; 1 timed out: …" (the first reason of each kind that is not a
    measurement)."""
    from collections import Counter

    measured = sum(analysis.measured(r) for r in mine)
    other = Counter(r.get("status") for r in mine if not analysis.measured(r))
    said = []
    for status, n in other.items():
        reason = next((r.get("reason") for r in mine if r.get("status") == status and r.get("reason")), None)
        what = {"timeout": "timed out", "not_run": "never ran"}.get(status, str(status).replace("_", " "))
        said.append((n, what, f": {_reason(reason)}" if reason else ""))
    if measured:
        return f"{measured} of {len(mine)} launches measured; " + "; ".join(f"{n} {w}{r}" for n, w, r in said)
    if len(said) == 1:
        n, what, reason = said[0]
        return (f"its one launch {what}" if n == 1 else f"{n} launches, all {what}") + reason
    return f"{len(mine)} launches, none measured: " + "; ".join(f"{n} {w}{r}" for n, w, r in said)


def unmeasured(records: list[dict[str, Any]], verdict_rows: list[str]) -> dict[str, str]:
    """{row: what its launches did} for every row that was launched (not unavailable here) and either has no
    measurement in the verdict or lost some of its launches: a verdict is about the rows it ranks, and says so of
    the rest."""
    out = {}
    for label in dict.fromkeys([*(records[0].get("row_order") or []), *(r.get("label") for r in records)]):
        mine = [r for r in records if r.get("label") == label]
        if not label or label == "reference" or all(r.get("status") == "unavailable" for r in mine):
            continue
        if label not in verdict_rows or not all(analysis.measured(r) for r in mine):
            out[label] = launches_text(mine)
    return out


def unmeasured_line(a: dict[str, Any]) -> str | None:
    """"Not compared, no launch measured: spawn (…). Compared on the launches that were measured: ddp (…)." from
    `unmeasured`, or None."""
    missing = {k: v for k, v in (a.get("unmeasured") or {}).items() if k not in a["ranked"] + a["left_out"]}
    short = {k: v for k, v in (a.get("unmeasured") or {}).items() if k not in missing}
    parts = []
    if missing:
        parts.append("Not compared, no launch measured: " + "; ".join(f"{k} ({v})" for k, v in missing.items()) + ".")
    if short:
        parts.append("Compared on the launches that were measured: " + "; ".join(f"{k} ({v})"
                                                                                 for k, v in short.items()) + ".")
    return " ".join(parts) or None


def interval_text(row: dict[str, Any], fmt: str = ",.0f") -> str:
    """"29,550 [27,103–31,902]", or "29,550 (n=1: no interval)"."""
    est = format(row["estimate"], fmt)
    if row["lo"] is None:
        return f"{est} (n={row['n']}: no interval)"
    return f"{est} [{format(row['lo'], fmt)}–{format(row['hi'], fmt)}]"


def ratio_text(ratio: dict[str, Any]) -> str:
    if ratio["lo"] is None:
        return f"{ratio['estimate']:.2f}× (no interval)"
    return f"{_ratio(ratio['estimate'])}× [{_ratio(ratio['lo'])}–{_ratio(ratio['hi'])}]"


def _ratio(x: float) -> str:
    """Two decimals, or two significant figures below 0.01: a bound of 0.0006 (two sessions, t with 1 degree of
    freedom) read as "0.00", a ratio of zero."""
    return f"{x:.2f}" if x >= 0.01 or x <= 0 else f"{x:.2g}"


def scope(analysis) -> str:
    """What a verdict's first words say it holds for: a run's intervals count the variation between its own launches,
    not between runs at other times, so its claim is for this run; joined sessions' include that variation. A run
    with a pair the sessions joined on this machine put either way (swamped) says at once that it ranks no machine."""
    if analysis.get("joined"):
        return "Verdict over the sessions"
    return "Verdict for this run alone, not for this machine" if analysis.get("swamped") else "Verdict for this run"


def swamped(a: dict[str, Any]) -> list[tuple[dict[str, Any], float, float]]:
    """(pair, lo, hi) for every pair this run resolves (faster) or shows equivalent whose 95% prediction interval for
    a new session's estimate, from the sessions this machine joined (`between_sessions`' `per_pair`, turned to the
    pair's orientation), does not hold that outcome: a resolved pair's reaches 1 or past it, an equivalent pair's
    leaves the margin. One run resolved spawn 1.30× ahead of ddp while the joined sessions put a new run's spawn / ddp
    anywhere in [0.39–2.90]; the next run resolved ddp 1.34× ahead."""
    known = a.get("between_sessions") or {}
    out = []
    for p in a["pairs"]:
        if p["outcome"] not in ("faster", "equivalent") or p["lo"] is None:
            continue
        for q in known.get("per_pair") or []:
            if {q["a"], q["b"]} != {p["a"], p["b"]}:
                continue
            lo, hi = q["prediction"] if q["a"] == p["a"] else (1 / q["prediction"][1], 1 / q["prediction"][0])
            bound = 1 + a["margin"]
            if (lo <= 1) if p["outcome"] == "faster" else (lo < 1 / bound or hi > bound):
                out.append((p, lo, hi))
    return out


def swamped_line(a: dict[str, Any]) -> str | None:
    """The pairs `swamped` names, each beside the prediction that swamps it, or None: "spawn vs ddp: resolved in this
    run, 1.30× [1.13–1.49], but the 4 sessions joined before on this machine (...) expect a new session's estimate of
    this pair anywhere in [0.39–2.90] (95% prediction interval): this run alone does not rank them on this machine"."""
    if not a.get("swamped"):
        return None
    known = a["between_sessions"]
    k = known["sessions"]
    alone = "this session" if known.get("joined_here") else "this run"
    since = (f"the verdict over the {k} sessions above (this one among them) expects" if known.get("joined_here") else
             f"the {k} sessions joined before on this machine (the last on {known.get('date')}) expect")
    said = []
    for outcome, what, claim in (("faster", "resolved", "rank them"),
                                 ("equivalent", f"equivalent within ±{a['margin']:.0%}", "show them equivalent")):
        mine = [(p, lo, hi) for p, lo, hi in a["swamped"] if p["outcome"] == outcome]
        if len(mine) == 1:
            (p, lo, hi), = mine
            said.append(f"{name_of(a, p['a'])} vs {name_of(a, p['b'])}: {what} in {alone}, {ratio_text(p)}, but "
                        f"{since} a new session's estimate of this pair anywhere in {_bounds(lo, hi)} (95% prediction "
                        f"interval): {alone} alone does not {claim} on this machine")
        elif mine:
            said.append(f"{what} in {alone}, but {since} a new session's estimate of each of these pairs anywhere in "
                        "its 95% prediction interval: " + "; ".join(
                            f"{name_of(a, p['a'])} vs {name_of(a, p['b'])} {ratio_text(p)}, a new session "
                            f"{_bounds(lo, hi)}" for p, lo, hi in mine)
                        + f": {alone} alone does not {claim} on this machine")
    return f"**{alone[0].upper()}{alone[1:]} alone, not this machine:** " + "; and ".join(said) + "."


def _bounds(lo: float, hi: float) -> str:
    """"[0.39–2.90]", with a third digit where two would show a bound that reaches past 1 as 1.00."""
    return "[" + "–".join(f"{v:.3f}" if f"{v:.2f}" == "1.00" and v != 1 else f"{v:.2f}" for v in (lo, hi)) + "]"


def name_of(analysis, label) -> str:
    """A row's label, with its precision where that is not plain fp32."""
    prec = analysis["rows"][label]["precision"]
    return f"{label} ({prec})" if prec != "fp32" else label


def _lines(a: dict[str, Any], launches) -> list[str]:
    ranked = a["ranked"]
    out: list[str] = []
    if len(ranked) < 2:
        out.append("**Verdict: nothing to rank** — fewer than two rows were measured on the full world size.")
    elif a["letters"] is None:
        counts = sorted({len(launches[k]) for k in ranked})
        n = " to ".join(map(str, counts[:1] + counts[-1:])) if len(counts) > 1 else str(counts[0])
        walls = [statistics.median(r["wall_time_s"] for r in launches[k]) for k in ranked
                 if all(r.get("wall_time_s") for r in launches[k])]
        cost = (f" (about {duration(10 * sum(walls))} here, from these launches' times)"
                if len(walls) == len(ranked) else "")
        out.append(f"**Verdict: no ranking.** Each row ran {n} launch(es); a row needs at least {MIN_LAUNCHES} for an "
                   "interval, and one launch cannot separate a backend's speed from launch-to-launch variation. "
                   "For a ranking: leave `--repeats` out (3 rounds, then more while they fit `--budget`, 3 minutes "
                   f"by default), `--repeats 10`{cost}, or `--precision 5% --budget 10m` (a pilot of rounds, then "
                   "the rounds its variance says every pair needs for ±5%, within the budget).")
    else:
        out += ranked_lines(a, launches)
    if a["left_out"]:
        out.append("Left out of the ranking: " + ", ".join(
            f"{k} (ran on {launches[k][0]['topology'].get('devices_used')} device(s) of "
            f"{launches[k][0]['world_size']}: not data-parallel across the world size)" for k in a["left_out"]) + ".")
    if a["asked_baseline"] and a["asked_baseline"] != a["baseline"]:
        out.append(f"The baseline {a['asked_baseline']} has no measurement on the full world size; ratios are "
                   f"against {a['baseline']}.")
    line = unmeasured_line(a)
    if line:
        out.append(line)
    line = interference_line([r for k in ranked for r in launches[k]])
    if line:
        out.append(line)
    return out


def interference_line(launches: list[dict[str, Any]], subject: str = "this verdict", of: str = "the verdict's",
                      named: str = "the notes name each launch") -> str | None:
    """Where the verdict's launches were measured under interference (their records' `noise`, read from /proc/stat
    over each timed window: harness/core/assemble.py), how many and how much, beside the verdict: the notes name each
    launch, but a verdict over a loaded machine must say so where it is read."""
    hit = [r for r in launches if (r.get("noise") or {}).get("flags")]
    # a launch whose timed window was too short to read the machine's load from is not known either way
    unchecked = sum(bool((r.get("noise") or {}).get("unchecked")) for r in launches)
    short = (f"{unchecked} of {of} {len(launches)} launches had timed windows too short to check for interference "
             f"(/proc/stat counts 10 ms ticks)") if unchecked else ""
    if not hit:
        return f"**Not checked for interference: {short[0].lower()}{short[1:]}**; {named}." if short else None

    def span(key: str, flag: str) -> str | None:
        shares = sorted(r["noise"][key] for r in hit if any(f.startswith(flag) for f in r["noise"]["flags"])
                        and isinstance(r["noise"].get(key), (int, float)))
        ends = list(dict.fromkeys(f"{v:.0%}" for v in (shares[:1] + shares[-1:])))
        return "–".join(ends) if shares else None

    said = [text.format(got) for text, got in (("other processes used {} of the CPUs over their timed windows",
                                                span("other_cpu_share", "other processes")),
                                               ("CPU steal {}", span("steal_share", "CPU steal"))) if got]
    beside = sum("another compare run" in r["noise"]["flags"] for r in hit)
    if beside:
        said.append(f"another compare run measuring at the same time as {beside} of them")
    said = said or sorted({f for r in hit for f in r["noise"]["flags"]})  # flags of records before the shares
    every = "every launch" if len(hit) == len(launches) else f"{len(hit)} of {of} {len(launches)} launches"
    return (f"**Measured under interference: {every}** ({'; '.join(said)}): every figure keeps them, so {subject} "
            f"describes the machine as loaded as it then was" + (f"; {short}, so more may have been" if short else "")
            + f"; {named}.")


def _pair_text(a, p) -> str:
    """"x vs y 1.28× [1.05–1.56]", and where the interval alone excludes 1 but Holm's correction does not resolve
    the pair, its adjusted p-value."""
    return f"{name_of(a, p['a'])} vs {name_of(a, p['b'])} {ratio_text(p)}" + holm_note(p)


def holm_note(p: dict[str, Any], form: str = " ({})") -> str:
    """" (p = 0.21 after Holm's correction)" (its words in `form`) for a pair whose interval alone excludes 1 but
    which the family's correction leaves unresolved (a reader sees the interval and would otherwise ask), else ""
    (an equivalent pair has said what it is)."""
    if p["lo"] is None or p["p_holm"] < ALPHA or p["lo"] <= 1 <= p["hi"] or p.get("outcome") == "equivalent":
        return ""
    return form.format(f"p = {p_text(p['p_holm'])} after Holm's correction")


def p_text(p: float) -> str:
    """A p-value in two significant digits, or as many more as keep it from reading as the threshold it missed
    (0.0501 is not "0.05")."""
    alpha = round(ALPHA, 12)  # 1 - 0.95 in binary is 0.050000000000000044
    for digits in range(2, 6):
        text = f"{p:.{digits}g}"
        if (float(text) < alpha) == (p < alpha) and (float(text) != alpha or p == alpha):
            return text
    return text


def ranked_lines(a: dict[str, Any], launches) -> list[str]:
    """The verdict of a run that ranks, each sentence naming the statistic it rests on: the fastest row only where
    it is resolved ahead of every other ranked row, else the top group (the rows no row is resolved ahead of), or,
    where no pair is resolved, equivalence within the margin or "inconclusive"; the letter groups, every pair by
    outcome, any row whose group reads better than its pairs support, and the method."""
    order, letters, pairs, margin = a["order"], a["letters"], a["pairs"], a["margin"]
    faster = [p for p in pairs if p["outcome"] == "faster"]
    equivalent = [p for p in pairs if p["outcome"] == "equivalent"]
    unresolved = [p for p in pairs if p["outcome"] == "not resolved"]
    test = a.get("test", TESTS)
    # The top group: the rows that no row is resolved ahead of. Every other row is then resolved behind at least
    # one row, and no two of them are resolved apart. Not "the rows sharing the first letter": a letter group can
    # hold a row that some row outside it is resolved ahead of, and miss one that no row is
    top = [k for k in order if not any(p["b"] == k for p in faster)]
    beats_all = [k for k in order if sum(1 for p in faster if p["a"] == k) == len(order) - 1]
    out = []
    if beats_all:
        k = beats_all[0]
        close = [p for p in faster if p["a"] == k and p["within_margin"]]
        text = f"**{scope(a)} — fastest: {name_of(a, k)}**, resolved ahead of every other row ({test})"
        if close:
            text += (f"; ahead of {', '.join(name_of(a, p['b']) for p in close)} by less than ±{margin:.0%} (faster, "
                     f"and within ±{margin:.0%}: equivalence holds too, TOST)")
        out.append(text + ".")
    elif not faster:
        same = " and ".join(name_of(a, k) for k in order) if len(order) == 2 else ", ".join(name_of(a, k) for k in order)
        if len(equivalent) == len(pairs):
            out.append(f"**{scope(a)}: equivalent** — {same} are equivalent within ±{margin:.0%} (TOST, "
                       f"Holm-adjusted): no row is faster or slower by more than that.")
        elif len(pairs) == 1:
            p = unresolved[0]
            out.append(f"**{scope(a)}: inconclusive** — {name_of(a, p['a'])} vs {name_of(a, p['b'])} {ratio_text(p)} is "
                       f"neither resolved apart ({test}) nor shown equivalent within ±{margin:.0%} (TOST): its 95% "
                       f"interval is too wide to decide the margin. {a.get('narrower', NARROWER)} narrow it.")
        else:
            # an interval that excludes 1 and lies outside the margin is not too wide to decide it: Holm's
            # correction over the pairs is what leaves it unresolved, and that is said of it
            wide_ = [p for p in unresolved if p["lo"] is None or p["lo"] <= 1 <= p["hi"]]
            held = [p for p in unresolved if p not in wide_]
            why = []
            if wide_:
                wide = max(wide_, key=lambda p: _width(p) or float("inf"))
                why.append(f"{'their' if len(wide_) > 1 else 'its'} 95% interval{'s' if len(wide_) > 1 else ''} ("
                           + ("the widest " if len(wide_) > 1 else "") + f"{name_of(a, wide['a'])} vs "
                           f"{name_of(a, wide['b'])} {ratio_text(wide)}) {'are' if len(wide_) > 1 else 'is'} too wide "
                           f"to decide the margin")
            if held:
                why.append("; ".join(f"{name_of(a, p['a'])} vs {name_of(a, p['b'])} {ratio_text(p)} excludes 1 alone "
                                     f"but is not resolved after Holm's correction over the {len(pairs)} pairs (p = "
                                     f"{p_text(p['p_holm'])})" for p in held))
            out.append(f"**{scope(a)}: inconclusive** — no pair of {same} is resolved apart ({test}), and "
                       f"{len(unresolved)} of the {len(pairs)} pairs are not shown equivalent within ±{margin:.0%} "
                       f"(TOST) either: " + "; ".join(why) + f". {a.get('narrower', NARROWER)} narrow them.")
    else:
        # the top group's rows that some resolved pair places; a row resolved against none (and equivalent to none
        # of those placed) shares every letter only because its pairs' intervals are wide, and is named apart: its
        # own interval may be the narrowest (a slow row beside wide fast ones)
        placed = {x for p in faster for x in (p["a"], p["b"])}
        strong = [k for k in top if k in placed]
        level = {x for p in pairs if p["outcome"] == "equivalent" and {p["a"], p["b"]} & set(strong)
                 for x in (p["a"], p["b"])}
        weak = [k for k in top if k not in placed and k not in level]
        among = [p for p in pairs if p["a"] in strong and p["b"] in strong]
        how = ("" if not among or not all(p["outcome"] == "equivalent" for p in among) else
               f"; {' and '.join(name_of(a, k) for k in strong)} are equivalent within ±{margin:.0%} (TOST)")
        text = (f"**{scope(a)} — top group, not resolved behind any row: {', '.join(name_of(a, k) for k in top)}** "
                f"(every other row is resolved behind at least one; no row is resolved ahead of every other: "
                f"{test}{how})")
        if weak:
            one = len(weak) == 1
            text += (f"; {', '.join(name_of(a, k) for k in weak)} {'is' if one else 'are'} in it only because "
                     f"{'it is' if one else 'they are'} not resolved against any row (the intervals of "
                     f"{'its' if one else 'their'} pairs are too wide to place {'it' if one else 'them'})")
        out.append(text + ".")
    line = swamped_line(a)
    if line:  # beside the headline: a pair that moves either way between runs here is ranked for this run alone
        out.append(line)
    if faster:
        out.append("Groups, highest estimate first (a compact letter display: rows that share a letter are not resolved "
                   "apart): " + "; ".join(f"{name_of(a, k)} **{letters[k]}**" for k in order) + ".")
    said = []
    if faster:
        said.append("resolved (Holm-adjusted p < 0.05): " + "; ".join(
            f"{name_of(a, p['a'])} {ratio_text(p)} ahead of {name_of(a, p['b'])}"
            + (f" (and within ±{margin:.0%}: TOST)" if p["within_margin"] else "") for p in faster))
    if equivalent:
        said.append(f"equivalent within ±{margin:.0%} (TOST, Holm-adjusted): "
                    + "; ".join(_pair_text(a, p) for p in equivalent))
    if unresolved:
        said.append(f"not resolved (neither a difference nor equivalence within ±{margin:.0%}): "
                    + "; ".join(_pair_text(a, p) for p in unresolved))
    out.append(" · ".join(s[0].upper() + s[1:] for s in said) + ".")
    # A row with a lower estimate may share the top group's letter while a row above it does not (its pairs are not
    # resolved): its letter then reads better than its pairs support, and the verdict says so.
    for i, k in enumerate(order):
        worse = [j for j in order[:i] if min(letters[k]) < min(letters[j])]
        if worse:
            open_ = [oriented(pairs, j, k) for j in worse]
            out.append(f"{name_of(a, k)} shares group {min(letters[k])} with faster rows only because its pairs are "
                       f"not resolved: it is not resolved against " + ", ".join(
                           f"{name_of(a, p['a'])} ({ratio_text(p)})" for p in open_)
                       + f", whose estimate{'s are' if len(open_) > 1 else ' is'} higher and which "
                       f"{'are' if len(open_) > 1 else 'is'} not in that group.")
    if a.get("method_line"):  # a verdict over sessions says its own method (harness/reports/sessions.py)
        return out + [a["method_line"]]
    counts = sorted({len(launches[k]) for k in order})
    n = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    if a["blocked"] and a.get("pilot"):
        blocks = (f"rounds as blocks: each pair's differences within rounds, its variance from the {a['pilot']}-round "
                  f"pilot ({a['pilot'] - 1} degrees of freedom: two stages, Stein 1945)")
    elif a["blocked"]:
        narrowed = [_width(p) / _width(p["unpaired"]) for p in pairs if _width(p) and _width(p["unpaired"])]
        blocks = ("rounds as blocks: each pair's differences within rounds" + (
            f", intervals {statistics.median(narrowed):.0%} of the unpaired width (median)" if narrowed else ""))
    else:
        blocks = f"unpaired (Welch), as {a['why_unblocked']}"
    out.append(f"({n} launches per row; {len(pairs)} pair{'s' if len(pairs) != 1 else ''}, each with its own 95% "
               f"interval; differences and equivalence (TOST, margin ±{margin:.0%}) each tested with Holm's "
               f"adjustment over the pairs; {blocks}.)")
    return out + [one_session_line(a.get("between_sessions"))]


def one_session_line(known: dict[str, Any] | None) -> str:
    """What one run's intervals cover, and the between-session spread this machine has shown where the records say
    it was known when the run was made (harness/reports/sessions.py keeps it per machine)."""
    text = ("These intervals hold for this run: they count the variation between its launches, not between runs at "
            "other times (sessions), which one run cannot measure; `compare run --join DIR` runs the request again "
            "as another session of DIR, and the verdict over the sessions includes it.")
    from harness.core.joins import STORED_SESSIONS

    if known and known.get("joined_here"):  # the cache, as it was before this join, is staler than the verdict above
        return ("These intervals hold for this session: they count the variation between its launches, not between "
                f"sessions, which the verdict over the {known['sessions']} sessions above includes (τ per pair in its "
                "table).")
    if known and known["sessions"] >= STORED_SESSIONS:  # a join of two runs (kept before it was refused) is not quoted
        k, pairs = known["sessions"], known["pairs"]
        spread = (f"median over {pairs} pairs; up to {known['tau_max']:.1%}" if pairs != 1
                  else "from its one pair")
        options = ", ".join(f"{k}={v}" for k, v in (known.get("options") or {}).items())
        request = (f"{', '.join(known['rows'])}" + (f", {options}" if options else "")
                   + (f", {known['steps']} timed steps" if known.get("steps") else "")
                   + "; " if known.get("rows") else "")  # which rows: a join of other rows spreads otherwise
        text += (f" On this machine, {k} joined runs of {known['workload']} ({request}the last on {known['date']}) "
                 f"put the "
                 f"between-session standard deviation of a pair's log ratio at {known['tau_median']:.1%} ({spread}; "
                 f"{k} sessions give each pair's figure {k - 1} degrees of freedom: a rough one), against a median "
                 f"standard error within one of those runs of {known['se_median']:.1%}.")
    return text


def _width(p: dict[str, Any] | None) -> float | None:
    """A ratio's interval's width on the log scale, log(hi/lo), where the interval is symmetric: two widths' ratio is
    how much narrower one is ("intervals 82% of the unpaired width"; their hi/lo ratios read 77%)."""
    return None if not p or p["lo"] is None or p["hi"] == p["lo"] else math.log(p["hi"] / p["lo"])


SYMBOL = {"faster": "▲", "slower": "▼", "equivalent": "≈", "not resolved": "?", "no interval": "·"}


def symbol(p: dict[str, Any]) -> str:
    """A pair's mark in the matrix: ▲ ▼ ≈ ? ·, and ▲≈ / ▼≈ for a difference resolved inside the margin."""
    return SYMBOL[p["outcome"]] + ("≈" if p.get("within_margin") else "")


def outcome_text(p: dict[str, Any], margin: float) -> str:
    """"faster", "slower, and within ±5%" (the difference and the equivalence both hold), "equivalent", ..."""
    return p["outcome"] + (f", and within ±{margin:.0%}" if p.get("within_margin") else "")


def markdown(a: dict[str, Any]) -> list[str]:
    """The verdict lines, the table of every ranked row against the baseline, and every pair as a matrix."""
    md = [x for line in a["lines"] for x in (line, "")]
    if a["baseline"] is None or not a["ratios"]:
        return md
    ratios = ("paired within rounds" if a["blocked"] else "Welch t on the difference of log means")
    md += [f"Against the baseline **{a['baseline']}** (rows: 95% Student t interval over launches on log samples/s, "
           f"the geometric mean; ratios: {ratios}, with their outcome as in the pairs above; CPU time: the ranks' own "
           "process CPU time over the timed window, per step, mean over ranks and launches):", "",
           "| row | samples/s [95% interval] | launches | ratio to baseline [95% interval] | outcome | CPU ms per step "
           "per rank (ratio) |", "|---|---|---|---|---|---|"]
    for k in a["ranked"]:
        row = a["rows"][k]
        cpu = row["cpu_s_per_step"]
        if k == a["baseline"]:
            ratio, said, cpu_ratio = "1 (baseline)", "–", ""
        else:
            r = a["ratios"][k]
            ratio, said = ratio_text(r), outcome_text(r, a["margin"])
            cpu_ratio = f" ({r['cpu_ratio']:.2f}×)" if r.get("cpu_ratio") else ""
        md.append(f"| {name_of(a, k)} | {interval_text(row)} | {row['n']} | {ratio} | {said} | "
                  f"{'–' if cpu is None else f'{cpu * 1e3:.2f}'}{cpu_ratio} |")
    md.append("")
    if len(a["order"]) > 2 and a["letters"] is not None:
        order = a["order"]
        within = (f", ▲≈ / ▼≈ resolved and within ±{a['margin']:.0%} too" if any(p.get("within_margin")
                                                                                for p in a["pairs"]) else "")
        md += [f"Every pair (row ÷ column, geometric means; ▲ resolved faster, ▼ resolved slower, ≈ equivalent "
               f"within ±{a['margin']:.0%}, ? not resolved{within}; Holm-adjusted):", "",
               "| row | group | " + " | ".join(name_of(a, k) for k in order) + " |",
               "|---|---|" + "---|" * len(order)]
        for x in order:
            cells = ["–" if x == y else (lambda r: f"{r['estimate']:.2f}× {symbol(r)}")(
                oriented(a["pairs"], x, y)) for y in order]
            md.append(f"| {name_of(a, x)} | {a['letters'][x]} | " + " | ".join(cells) + " |")
        md.append("")
    return md
