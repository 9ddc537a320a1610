"""The verdict over sessions: runs of the same request at other times, joined (harness/core/joins.py: what may be
joined, `sessions.json`), whose intervals include the variation between runs (issue 65).

Runs in: the parent.

    analyse(sessions)   each session analysed alone (harness/reports/verdict.py), then every row and pair combined over
                        the sessions, each session's estimate counted once (harness/ground/stats.py: Student's
                        t over the k sessions' estimates, k - 1 df)
    markdown(joined)    the verdict, the table against the baseline, and the between-session spread per pair
    render(out, ...)    report.md of a join with no records of its own (`compare join`)

A session is a whole run: its own rounds, shuffled order and machine state. Within it, pairs are paired within rounds
as in a single run's verdict; across sessions nothing is paired. One run's intervals are about that run
(harness/reports/verdict.py: one_session_line).
"""

from __future__ import annotations

import math
import statistics
from itertools import combinations
from pathlib import Path
from typing import Any

from harness.core import analysis, joins
from harness.ground.record import MEASURED, hardware_text, software_text
from harness.ground.stats import (ALPHA, MIN_LAUNCHES, compare_pair, half_width, holm, letter_groups, random_effects,
                                  recorded_margin, session_estimate)
from harness.reports import verdict as verdict_mod

TEST = ("t tests over the sessions' estimates (each session counted once, sessions - 1 degrees of freedom), "
        "Holm-adjusted over the pairs, p < 0.05")
"""The difference tests a joined verdict's words rest on."""


# ---- the joined verdict ---------------------------------------------------------------------------------------------
def analyse(sessions: list[tuple[str, list[dict[str, Any]]]], margin: float | None = None) -> dict[str, Any]:
    """Every session analysed alone, then every ranked row and pair combined over the sessions (each counted once).
    The result has a single run's analysis's keys (rows, ranked, pairs, letters, lines, ...) so the verdict's words
    are built the same way, plus `sessions` (names, dates, launches) and `per_session` (each session's analysis)."""
    first = sessions[0][1]
    if margin is None:
        margin = recorded_margin(first)
    per = [(name, verdict_mod.analyse(records, margin=margin)) for name, records in sessions]
    asked = first[0].get("row_order") or list(per[0][1]["rows"])
    ok = {k: [(name, a) for name, a in per if k in a["ranked"] and a["rows"][k]["n"] >= MIN_LAUNCHES] for k in asked}
    ranked = [k for k in asked if len(ok[k]) >= 2]
    left_out = sorted({k for _, a in per for k in a["left_out"]}, key=asked.index)
    rows = {}
    for k in ranked:
        re = random_effects([session_estimate(a["values"][k]) for _, a in ok[k]], margin)
        rows[k] = {**re, "launches": sum(a["rows"][k]["n"] for _, a in ok[k]),
                   "precision": per[0][1]["rows"][k]["precision"]}
    order = sorted(ranked, key=lambda k: -rows[k]["estimate"])
    pairs, m = [], len(order) * (len(order) - 1) // 2
    for x, y in combinations(order, 2):
        both = [(name, a) for name, a in per if (name, a) in ok[x] and (name, a) in ok[y]]
        estimates, each = [], []
        for name, a in both:
            own = compare_pair(a["values"][x], a["values"][y], a["blocked"], margin)
            estimates.append(session_estimate(a["values"][x], a["values"][y], a["blocked"]))
            each.append({"session": name, "estimate": own["estimate"], "lo": own["lo"], "hi": own["hi"],
                         "se": (estimates[-1][1]) ** 0.5, "df": own["df"]})
        c = random_effects(estimates, margin)
        sim = random_effects(estimates, margin, confidence=1 - ALPHA / m) if m > 1 else c
        c["simultaneous"] = {"lo": sim["lo"], "hi": sim["hi"], "confidence": 1 - ALPHA / max(m, 1),
                             "half_width": half_width(sim) if sim["lo"] is not None else None}
        c["each"] = each
        c["outside"] = apart_from_the_others(estimates, each)
        # where no session stands apart, the sessions that disagree two by two (a significant Q says some do)
        c["disagree"] = [] if c["outside"] else [(each[i]["session"], each[j]["session"])
                                                 for i, j in disagreeing(estimates, each)]
        pairs.append({"a": x, "b": y, **c})
    analysis.decide(pairs)
    base = first[0].get("baseline") if first[0].get("baseline") in ranked else (ranked[0] if ranked else None)
    ratios = {k: analysis.oriented(pairs, k, base) for k in ranked if base is not None and k != base}
    differ = {frozenset((p["a"], p["b"])) for p in pairs if p["outcome"] == "faster"}
    ranks = len(order) >= 2 and all(p["p"] is not None for p in pairs)
    # the launches of the rows each session's pairs rest on: a row a session measured too few times is not among them
    counts = sorted({a["rows"][k]["n"] for k in ranked for _, a in ok[k]})
    fewer = _fewer(per, ok, ranked)
    launches = "no" if not counts else f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    out = {"rows": rows, "ranked": ranked, "left_out": left_out, "baseline": base, "asked_baseline": base,
           "ratios": ratios, "n_min": len(sessions), "margin": margin, "pairs": pairs, "order": order,
           "blocked": True, "why_unblocked": None, "letters": letter_groups(order, differ) if ranks else None,
           "test": TEST, "joined": True, "per_session": per,
           "narrower": "More sessions (`compare run --join DIR`; more launches in each do not narrow the "
                       "between-session part)",
           "sessions": [{"name": name, "date": (records[0].get("time_utc") or "")[:10],
                         "commit": (records[0].get("env") or {}).get("git_commit"),
                         "host_key": (records[0].get("env") or {}).get("host_key"),
                         "command": records[0].get("command"), "launches": max(
                             (a["rows"][k]["n"] for k in a["ranked"]), default=0),
                         "fewest": min((a["rows"][k]["n"] for k in a["ranked"]), default=0),
                         # a session whose rounds are incomplete is analysed unpaired (Welch), and said so
                         "unpaired": None if a["blocked"] else a["why_unblocked"],
                         # launches its own report flags as disturbed (harness/core/assemble.py: noise)
                         "disturbed": sum(bool((r.get("noise") or {}).get("flags")) for r in records
                                          if r.get("status") in MEASURED and r.get("label") != "reference"),
                         "measured": sum(r.get("status") in MEASURED and r.get("label") != "reference"
                                         for r in records),
                         # and those whose timed window was too short to read that from (not known either way)
                         "unchecked": sum(bool((r.get("noise") or {}).get("unchecked")) for r in records
                                          if r.get("status") in MEASURED and r.get("label") != "reference"),
                         "time": max(str(r.get("time_utc") or "") for r in records),
                         "not_measured": not_measured(records)}
                        for (name, records), (_, a) in zip(sessions, per)],
           # "in each" of sessions of which one measured 2 and was left out read as false: it is of those counted
           "method_line": (f"({len(sessions)} sessions, {launches} launches per row in each"
                           f"{' session that counts it' if fewer else ''}{fewer}; "
                           f"{m} pair"
                           f"{'s' if m != 1 else ''}: each session's ratio paired within its rounds{_unpaired(per)}, "
                           "combined over "
                           "the sessions with each session counted once (the mean of their log estimates, a 95% "
                           "Student t interval over them, sessions - 1 degrees of freedom, its variance at least the "
                           f"mean of the sessions' own variances{_floored_pairs(pairs)}), so every interval "
                           f"includes the variation between runs at other times{span(sessions)}; differences and "
                           "equivalence (TOST, "
                           f"margin ±{margin:.0%}) each tested with Holm's adjustment over the pairs.)")}
    out["widest"] = analysis.widest(out) if ranks else None
    if len(ranked) < 2:
        out["lines"] = ["**Verdict over the sessions: nothing to rank** — fewer than two rows have 3 launches in two "
                        "sessions or more."]
    elif not ranks:
        out["lines"] = ["**Verdict over the sessions: no ranking** — a pair has fewer than two sessions to combine."]
    else:
        out["lines"] = verdict_mod.ranked_lines(out, None)
    if left_out:
        out["lines"].append("Left out of the ranking: " + ", ".join(left_out) + " (not data-parallel across the "
                            "world size).")
    missing = [k for k in dict.fromkeys([*asked, *(k for _, a in per for k in a["rows"])])
               if k not in ranked and k not in left_out and k in {k for _, a in per for k in [*a["rows"],
                                                                                         *a["unmeasured"]]}]
    # every session ranked every row with its launches, none failed: what a spread kept for later runs rests on
    out["complete"] = (ranks and not missing and all(len(ok[k]) == len(sessions) for k in ranked)
                       and not any(s["not_measured"] for s in out["sessions"]))
    gone = unavailable(sessions)
    if gone:  # as a single run's table lists such a row with its reason, not only in the title
        out["lines"].append("Unavailable, not run: " + "; ".join(
            f"{k} ({'in every session' if len(where) == len(sessions) else 'in ' + ', '.join(where)}: "
            f"{'; '.join(reasons)})" for k, (where, reasons) in gone.items()) + ".")
    if missing:
        out["lines"].append(f"Not in the joined verdict (a row needs {MIN_LAUNCHES} measured launches in two sessions "
                            "or more): " + "; ".join(f"{k} (" + "; ".join(f"S{i}: {_launches_in(a, k)}"
                                                                          for i, (_, a) in enumerate(per, 1)) + ")"
                                                     for k in missing) + ".")
    return out


def _floored_pairs(pairs: list[dict[str, Any]]) -> str:
    """" (raised to it for spawn / deepspeed)" for the pairs whose sessions agreed more closely than their own noise
    (stats.random_effects' floor), "" where none did."""
    raised = [f"{p['a']} / {p['b']}" for p in pairs if p.get("floored")]
    return f" (raised to it for {', '.join(raised)})" if raised else ""


def _fewer(per: list[tuple[str, dict[str, Any]]], ok: dict[str, list], ranked: list[str]) -> str:
    """"; horovod's pairs rest on S1 and S2 alone (S3's horovod left out: 2 launches measured; ...)" for every ranked
    row a session measured too few times to count it, "" where every row's pairs rest on every session."""
    said = []
    for k in ranked:
        inside = [i for i, (_, a) in enumerate(per, 1) if any(a is b for _, b in ok[k])]
        if len(inside) == len(per):
            continue
        names = [f"S{i}" for i in inside]
        said.append(f"{k}'s pairs rest on {' and '.join(', '.join(names).rsplit(', ', 1))} alone ("
                    + "; ".join(f"S{i}'s {k} left out: {_launches_in(a, k)}"
                                for i, (_, a) in enumerate(per, 1) if i not in inside)
                    + f"; a row needs {MIN_LAUNCHES} measured launches in a session)")
    return "".join(f"; {x}" for x in said)


def _unpaired(per: list[tuple[str, dict[str, Any]]]) -> str:
    """" (S3's unpaired, Welch: rounds are incomplete (...))" for the sessions analysed unpaired, "" where none was."""
    alone = [(f"S{i}", a["why_unblocked"]) for i, (_, a) in enumerate(per, 1) if not a["blocked"]]
    if not alone:
        return ""
    whys = list(dict.fromkeys(why for _, why in alone))
    names = " and ".join(", ".join(n for n, _ in alone).rsplit(", ", 1))
    return (f" ({names}'s unpaired, Welch: " + "; ".join(
        f"{why}" + (f" in {', '.join(n for n, w in alone if w == why)}" if len(whys) > 1 else "") for why in whys)
            + ")")


def _session_text(s: dict[str, Any]) -> str:
    """"2026-11-30, 2–3 launches per row, 1 failed; unpaired (Welch), as ...": what a session's own analysis
    measured, its failed launches and, where its rounds were incomplete, that its pairs were not paired."""
    n = f"{s['launches']}" if s.get("fewest", s["launches"]) == s["launches"] else f"{s['fewest']}–{s['launches']}"
    failed_ = "".join(f", {count} launch{'es' if count != 1 else ''} {_STATUS_WORDS.get(status, status)}"
                      for status, count in s["not_measured"].items())
    unpaired = f"; its pairs unpaired (Welch), as {s['unpaired']}" if s.get("unpaired") else ""
    return f"{s['date']}, {n} launches per row{failed_}{unpaired}"


def unavailable(sessions: list[tuple[str, list[dict[str, Any]]]]) -> dict[str, tuple[list[str], list[str]]]:
    """{row: (the sessions it was unavailable in, as S1..., its reasons)} for every row unavailable here in a
    session (each of its records "unavailable": its adapter cannot run on this machine)."""
    out: dict[str, tuple[list[str], list[str]]] = {}
    for i, (_, records) in enumerate(sessions, 1):
        for label in dict.fromkeys(r.get("label") for r in records):
            mine = [r for r in records if r.get("label") == label]
            if label and label != "reference" and all(r.get("status") == "unavailable" for r in mine):
                where, reasons = out.setdefault(label, ([], []))
                where.append(f"S{i}")
                reasons += [x for x in dict.fromkeys(str(r.get("reason") or "no reason recorded") for r in mine)
                            if x not in reasons]
    return out


_STATUS_WORDS = {"not_run": "never run", "timeout": "timed out", "failed": "failed", "interrupted": "interrupted",
                 "diverged": "diverged"}
"""A launch's status as the Sessions line says it ("1 launch interrupted, 2 launches never run")."""


def not_measured(records: list[dict[str, Any]]) -> dict[str, int]:
    """{status: launches} of a run's launches that were neither measured nor a row unavailable here (`failed`), by
    status: an interrupted session read "3 launches failed" where one was interrupted and two never ran."""
    out: dict[str, int] = {}
    for r in records:
        if r.get("status") not in (*MEASURED, "unavailable") and r.get("label") != "reference":
            out[str(r.get("status"))] = out.get(str(r.get("status")), 0) + 1
    return out


def failed(records: list[dict[str, Any]]) -> int:
    """How many of a run's launches failed (timed out, diverged, interrupted, not run: neither measured nor a row
    unavailable here)."""
    return sum(not_measured(records).values())


def span(sessions: list[tuple[str, list[dict[str, Any]]]]) -> str:
    """" (as far apart as these: 50 min, 2026-11-25 22:58–23:48 UTC)": the time from the first launch to the end of
    the last, which bounds what "other times" the pooled intervals have seen; "" where the records do not say."""
    from datetime import datetime, timezone

    from harness.core.estimate import duration

    walls = [(r["launch_wall"], r["launch_wall"] + (r.get("wall_time_s") or 0.0)) for _, records in sessions
             for r in records if isinstance(r.get("launch_wall"), (int, float))]
    if not walls:
        return ""
    start, end = (datetime.fromtimestamp(t, timezone.utc) for t in (min(w[0] for w in walls),
                                                                   max(w[1] for w in walls)))
    until = end.strftime("%H:%M") if end.date() == start.date() else end.strftime("%Y-%m-%d %H:%M")
    return (f" (as far apart as these: {duration((end - start).total_seconds())}, {start:%Y-%m-%d %H:%M}–{until} "
            f"UTC; runs further apart may vary more)")


def _launches_in(a: dict[str, Any], label: str) -> str:
    """What a row's launches did in one session, from its analysis."""
    if label in a["unmeasured"]:
        return a["unmeasured"][label]
    n = a["rows"][label]["n"] if label in a["rows"] else 0
    return f"{n} launch{'es' if n != 1 else ''} measured"


def spread(joined: dict[str, Any]) -> dict[str, Any] | None:
    """The between-session spread a joined verdict measured, as this machine's cache keeps it: sessions, pairs, the
    median and largest between-session SD of a pair's log ratio and the median standard error within one run, over
    the pairs pooled over every session; None but for a complete join (every session ranked every row with its
    launches, none failed: a join with a failed launch, or a pair pooled over fewer sessions, once became every
    later run's figure). `newest`: when its newest session started, which orders it against a kept one."""
    k = len(joined["sessions"])
    whole = [p for p in joined["pairs"] if p.get("tau") is not None and len(p["each"]) == k]
    taus = [p["tau"] for p in whole]
    ses = [e["se"] for p in whole for e in p["each"] if e["se"] is not None]
    if not joined.get("complete") or not taus or not ses:
        return None
    return {"sessions": k, "pairs": len(taus), "tau_median": statistics.median(taus),
            "tau_max": max(taus), "se_median": statistics.median(ses),
            "date": max(s["date"] for s in joined["sessions"]),
            "newest": max(s["time"] for s in joined["sessions"]),
            "hosts": [s.get("host_key") for s in joined["sessions"]], "per_pair": pair_spreads(joined)}


def pair_spreads(joined: dict[str, Any]) -> list[dict[str, Any]]:
    """Per pair pooled over every session: its rows (`a` / `b`, the ratio's orientation), the pooled ratio, τ and
    where a new session's own estimate should fall (`prediction`, 95%): what a single run's resolved pair is set
    against (harness/reports/verdict.py: swamped). A median τ over the pairs (0.0%, up to 4.4%) told no reader that the
    one pair their run resolved moved by 34% between sessions."""
    k = len(joined["sessions"])
    return [{"a": p["a"], "b": p["b"], "estimate": p["estimate"], "tau": p["tau"],
             "prediction": list(p["prediction"])}
            for p in joined["pairs"] if p.get("prediction") and p.get("tau") is not None and len(p["each"]) == k]


def here(joined: dict[str, Any]) -> dict[str, Any]:
    """What a `--join` run's own session is set against: the verdict over the sessions in the same report (this
    session among them), never the cache as it was before this join, a staler figure beside a fresher one."""
    return {"joined_here": True, "sessions": len(joined["sessions"]), "per_pair": pair_spreads(joined)}


def markdown(joined: dict[str, Any]) -> list[str]:
    """The joined verdict, the rows against the baseline, every pair as a matrix, and per pair the sessions' own
    estimates beside the pooled one with the between-session spread."""
    a = joined
    md = [x for line in a["lines"] for x in (line, "")]
    if a["letters"] is None:
        return md
    base = a["baseline"]
    md += [f"Against the baseline **{base}** (rows: samples/s combined over the sessions, each session's log "
           "geometric mean counted once, 95% t interval over them; ratios: as the pairs above):", "",
           "| row | samples/s [95% interval] | sessions | launches | ratio to baseline [95% interval] | outcome |",
           "|---|---|---|---|---|---|"]
    for k in a["ranked"]:
        row = a["rows"][k]
        if k == base:
            ratio, said = "1 (baseline)", "–"
        else:
            r = a["ratios"][k]
            ratio, said = verdict_mod.ratio_text(r), verdict_mod.outcome_text(r, a["margin"]) + verdict_mod.holm_note(r)
        md.append(f"| {verdict_mod.name_of(a, k)} | {verdict_mod.interval_text(row)} | {row['n']} | {row['launches']} | "
                  f"{ratio} | {said} |")
    md.append("")
    names = {s["name"]: f"S{i + 1}" for i, s in enumerate(a["sessions"])}
    md += ["Between sessions, per pair (the row of the higher pooled samples/s first; rows and pairs are pooled "
           "apart, so a pair's pooled ratio can still be below 1): the pooled ratio, the between-session standard "
           "deviation of its log (τ, DerSimonian-Laird) beside the median standard error within one session, I² (the "
           "share of the spread between sessions not explained by each session's own uncertainty), Cochran's Q test "
           "of no spread, where a new session's own estimate should fall (95% prediction interval, from 3 sessions), "
           "and each session's own estimate (paired within its rounds" + _unpaired(a["per_session"]) + ") — a session "
           "that disagrees with more than half of the others is named (two sessions disagree where their estimates "
           "differ by more than their own within-run uncertainties allow: Welch's t, Holm-adjusted over the pairs of "
           "sessions, p < 0.05):", "",
           "| pair | pooled [95%] | τ | within-session SE | I² | Q test p | a new session [95% prediction] | "
           + " | ".join(names.values()) + " | apart from the others |",
           "|---|---|---|---|---|---|---|" + "---|" * len(names) + "---|"]
    for p in a["pairs"]:
        each = {e["session"]: e for e in p["each"]}
        cells = [f"{each[n]['estimate']:.2f}" if n in each else "–" for n in names]
        ses = [e["se"] for e in p["each"]]
        pred = "–" if not p.get("prediction") else f"[{p['prediction'][0]:.2f}–{p['prediction'][1]:.2f}]"
        md.append(f"| {verdict_mod.name_of(a, p['a'])} / {verdict_mod.name_of(a, p['b'])} | {verdict_mod.ratio_text(p)} | "
                  f"{p['tau']:.1%} | {statistics.median(ses):.1%} | {p['i2']:.0%} | {p['p_q']:.2g} | {pred} | "
                  + " | ".join(cells) + f" | {_apart(p, names)} |")
    md += ["", "Sessions: " + "; ".join(
        f"{names[s['name']]} [{s['name']}]({s['name']}/report.md) ({_session_text(s)})"
        for s in a["sessions"]) + ".", ""]
    disturbed = _disturbed(a, names, "")
    if disturbed:  # kept in every figure, as in each session's own report, which names them
        md += ["Launches measured under interference (other processes or steal over their timed windows; each "
               "session's report names them): " + disturbed + ". They are kept in every figure: where the sessions were disturbed alike, the verdict over them "
                 "describes the machine as it was then, and the between-session spread does not show it.", ""]
    commits = list(dict.fromkeys(s.get("commit") for s in a["sessions"]))
    dirty = [names[s["name"]] for s in a["sessions"] if (s.get("commit") or "").endswith("-dirty")]
    if len(commits) > 1 or dirty:  # the spread between sessions then holds any change of the code too
        md += [("The sessions ran more than one version of this code (git "
                if len(commits) > 1 else "The sessions may have run more than one version of this code (git ")
               + "; ".join(f"{_short(c)}: " + ", ".join(names[s["name"]] for s in a["sessions"]
                                                       if s.get("commit") == c) for c in commits)
               + (f"; -dirty: {', '.join(dirty)} ran from a working tree with uncommitted changes, which the commit "
                  f"does not name" if dirty else "")
               + "): the variation between sessions includes whatever changed between them (`compare diff` "
                 "names it).", ""]
    one = [(n, pa) for n, pa in a["per_session"]]
    md += ["What each session alone said (the first line of its own verdict, as its report words it; its intervals "
           "hold for that run only): " + "; ".join(f"{names[n]}: {_alone(pa)}" for n, pa in one) + ".", ""]
    overturned = _overturned(a, names)
    if overturned:
        md += ["Pairs a session alone resolved otherwise than the sessions together (as its own verdict said them, "
               "Holm-adjusted within that run, whose intervals hold for that run only): " + " · ".join(overturned)
               + ".", ""]
    return md


def _said(a: dict[str, Any], p: dict[str, Any]) -> str:
    """What a pair's outcome says, naming the row it puts ahead: "ddp ahead", "equivalent within ±5%", "not
    resolved"."""
    if p["outcome"] in analysis.RESOLVED:
        return f"{verdict_mod.name_of(a, p['a'] if p['outcome'] == 'faster' else p['b'])} ahead"
    if p["outcome"] == "equivalent":
        return f"equivalent within ±{a['margin']:.0%}"
    return p["outcome"]


def _overturned(a: dict[str, Any], names: dict[str, str]) -> list[str]:
    """"ddp vs horovod, not resolved over the sessions (1.39× [1.15–1.69], p = ...): ddp ahead in S1 (1.24× [...]),
    S2 (...)" for every pair that a session's own verdict resolved (apart, or equivalent) otherwise than the joined
    verdict: the claims of one run that the runs together do not support."""
    out = []
    for p in a["pairs"]:
        claims: dict[str, list[str]] = {}
        for name, pa in a["per_session"]:
            if not any({q["a"], q["b"]} == {p["a"], p["b"]} for q in pa.get("pairs") or ()):
                continue
            own = analysis.oriented(pa["pairs"], p["a"], p["b"])
            if own["outcome"] in (*analysis.RESOLVED, "equivalent") and own["outcome"] != p["outcome"]:
                claims.setdefault(_said(a, own), []).append(f"{names[name]} ({verdict_mod.ratio_text(own)})")
        if claims:
            out.append(f"{verdict_mod.name_of(a, p['a'])} vs {verdict_mod.name_of(a, p['b'])}, {_said(a, p)} over the "
                       f"sessions ({verdict_mod.ratio_text(p)}{verdict_mod.holm_note(p, ', {}')}): "
                       + "; ".join(f"{said} in {', '.join(where)}" for said, where in claims.items()))
    return out


def apart_from_the_others(estimates: list[tuple[float, float]], each: list[dict[str, Any]]) -> list[str]:
    """The sessions that disagree with more than half of the other sessions (`disagreeing`). Not "outside the pooled
    interval": with 2 to 4 sessions no session can lie outside an interval of t(k-1) s / sqrt(k) about their own mean
    (Samuelson's bound: |y_i - mean| <= s (k-1) / sqrt(k)), so that test never named the run that stood apart; nor
    against the mean of the others, which with 3 an outlier drags as far as to set the other two apart too."""
    k = len(estimates)
    against = [0] * k
    for i, j in disagreeing(estimates, each):
        against[i] += 1
        against[j] += 1
    return [e["session"] for e, n in zip(each, against) if n > (k - 1) / 2]


def disagreeing(estimates: list[tuple[float, float]], each: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(i, j) for every two sessions whose estimates of the pair differ by more than their within-session
    uncertainties allow (|y_i - y_j| over sqrt(v_i + v_j), two-sided Welch t, Satterthwaite's df from each session's
    own), Holm-adjusted over the k (k - 1) / 2 pairs of sessions, p < 0.05. Unadjusted, 5 sessions that do not
    differ at all had some two of them named as disagreeing in 28% of a joined table's rows (an outside check's
    simulation); adjusted, in 4.3% of 4,000 such simulated joins."""
    from scipy import stats as sp

    tested, pvalues = [], []
    for i in range(len(estimates)):
        for j in range(i + 1, len(estimates)):
            (yi, vi), (yj, vj) = estimates[i], estimates[j]
            di, dj = each[i].get("df"), each[j].get("df")
            if not (di and dj) or vi + vj <= 0:
                continue
            df = (vi + vj) ** 2 / (vi ** 2 / di + vj ** 2 / dj)  # Satterthwaite's
            tested.append((i, j))
            pvalues.append(2 * float(sp.t.sf(abs(yi - yj) / math.sqrt(vi + vj), df)))
    return [ij for ij, p in zip(tested, holm(pvalues)) if p < ALPHA]


def _apart(p: dict[str, Any], names: dict[str, str]) -> str:
    """The sessions apart from the others ("S2"), or "none", with the sessions that disagree two by two where none
    is apart ("none; S2 and S4 disagree")."""
    if p["outside"]:
        return ", ".join(names[n] for n in p["outside"])
    pairs = [f"{names[x]} and {names[y]}" for x, y in p.get("disagree") or []]
    return "none" + (f"; {', '.join(pairs)} disagree" if pairs else "")


def _alone(session: dict[str, Any]) -> str:
    """A session's own verdict's first line as its report says it ("Verdict for this run: ..."), plain: a quote
    that read "Verdict: ..." was found in no report."""
    return session["lines"][0].replace("**", "").rstrip(".")


def remember(joined: dict[str, Any], records: list[dict[str, Any]], where: Path) -> None:
    """Keep the between-session spread of this host and workload in its cache, where its sessions ran here, for the
    next single run's verdict to say (harness/core/comparison.py reads it into its records)."""
    got = spread(joined)
    if got is not None:  # with the request it was of: a sentence quoting it names its rows and steps
        controls = next((r["controls"] for r in records if r.get("controls")), {})
        joins.store(joins.env_of(records), records[0].get("workload"), controls.get("workload_options"),
                    {**got, "where": str(where.resolve()), "rows": joins.rows_of(records)}, joins.request_of(records))


def render(out: Path, sessions: list[tuple[str, list[dict[str, Any]]]], command: str | None) -> Path:
    """report.md of a join with no records of its own (`compare join`)."""
    from harness.ground.outdir import write_text

    joined = analyse(sessions)
    r0 = sessions[0][1][0]
    e = joins.env_of(sessions[0][1])
    hw = e["gpus"][0] if e.get("gpus") else f"{e.get('cpu_cores_usable')}-core CPU"
    rows = r0.get("row_order") or joins.rows_of(sessions[0][1])
    md = [f"# {r0['workload']}: {', '.join(rows)} at world size {r0['world_size']} on {hw}, "
          f"{len(sessions)} sessions joined", "",
          f"Made by `{command}` from the records of the runs it names (nothing copied); `compare report` re-renders "
          "it from them.", "", "## Verdict over the sessions", ""] + markdown(joined)
    md += ["## Provenance", "", *([f"- Command: `{command}`"] if command else []), *provenance(joined, sessions), ""]
    write_text(out / "report.md", "\n".join(md))
    remember(joined, sessions[0][1], out)
    return out / "report.md"


def provenance(joined: dict[str, Any], sessions: list[tuple[str, list[dict[str, Any]]]]) -> list[str]:
    """The hardware and software each session recorded, as its own report's provenance words them: one line for
    the sessions that agree, a line per group where they do not (the spread between them then holds that too)."""
    names = {s["name"]: f"S{i + 1}" for i, s in enumerate(joined["sessions"])}
    out = []
    for kind, text in (("Hardware", lambda records: hardware_text(records[0]["env"])),
                       ("Software", software_text)):
        said: dict[str, list[str]] = {}
        for name, records in sessions:
            said.setdefault(text(records), []).append(names.get(name, name))
        if len(said) == 1:
            out.append(f"- {kind} (every session): {next(iter(said))}")
        else:
            out += [f"- {kind} ({', '.join(which)}): {t}" for t, which in said.items()]
    return out


def _disturbed(joined: dict[str, Any], names: dict[str, str], unit: str) -> str:
    """"S1 23 of 156; S2 52 of 138, 4 not checked": the sessions with launches measured under interference, or
    with launches whose timed windows were too short to check, "" where none was."""
    return "; ".join(f"{names[s['name']]} {s['disturbed']} of {s['measured']}{unit}"
                     + (f", {s['unchecked']} not checked (windows too short to read)" if s.get("unchecked") else "")
                     for s in joined["sessions"] if s.get("disturbed") or s.get("unchecked"))


def console_lines(joined: dict[str, Any]) -> list[str]:
    """The joined verdict for the terminal: its lines, and per pair the between-session spread in one line."""
    names = {s["name"]: f"S{i + 1}" for i, s in enumerate(joined["sessions"])}
    out = [line.replace("**", "") for line in joined["lines"]]
    disturbed = _disturbed(joined, names, " launches")
    if disturbed:  # the report's paragraph, in one line: a verdict over loaded sessions says so where it is read
        out.append(f"Measured under interference (other processes or steal): {disturbed}; kept in every figure (each "
                   "session's report names them).")
    out.append("Between sessions (" + "; ".join(f"{v} {k}" for k, v in names.items()) + "):")
    for p in joined["pairs"]:
        if p.get("tau") is None:
            continue
        away = f"; apart from the others: {_apart(p, names)}" if p["outside"] or p.get("disagree") else ""
        out.append(f"  {p['a']} / {p['b']} {verdict_mod.ratio_text(p)}: τ {p['tau']:.1%}, I² {p['i2']:.0%}{away}")
    return out


def _short(commit: str | None) -> str:
    """A commit as the report names it: its first 7 hex digits, and "-dirty" where the tree had uncommitted
    changes (a dirty tree and its commit are not the same code)."""
    if not commit:
        return "unknown"
    return commit[:7] + ("-dirty" if commit.endswith("-dirty") else "")
