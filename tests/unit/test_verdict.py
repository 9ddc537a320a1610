"""Verdicts that hold: the statistics against hand-computed values, every pair and its outcome, the letter groups,
the shuffled order of a round, the
adaptive rounds of --precision, and the noise read from /proc/stat.

Hand-computed values: for launches e^0, e^0.1, e^0.2 the log mean is 0.1 and the sample standard deviation 0.1, so
the standard error is 0.1/sqrt(3) = 0.0577350; Student's t for 2 degrees of freedom at 97.5% is 4.302653 (any
table), so the half-width on the log scale is 0.2484138 and the interval is exp(0.1 -+ 0.2484138).
"""

import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.ground.record import records_file

from harness.core import analysis, assemble
from harness.ground import stats
from harness.core.runner import round_order
from harness.reports import verdict


@pytest.mark.parametrize("df, expected", [(1, 12.706205), (2, 4.302653), (4, 2.776445), (10, 2.228139),
                                          (30, 2.042272), (1e7, 1.959964)])
def test_student_t_quantiles_match_the_tables(df, expected):
    assert stats.t_quantile(0.975, df) == pytest.approx(expected, abs=2e-6)
    assert stats.t_quantile(0.025, df) == pytest.approx(-expected, abs=2e-6)


def test_a_rows_interval_is_student_t_on_log_throughput():
    row = stats.geomean_interval([1.0, math.exp(0.1), math.exp(0.2)])
    assert row["estimate"] == pytest.approx(1.1051709, abs=1e-7)
    assert row["lo"] == pytest.approx(math.exp(0.1 - 0.2484138), abs=1e-6)
    assert row["lo"] == pytest.approx(0.862074, abs=1e-6)
    assert row["hi"] == pytest.approx(1.416818, abs=1e-6)
    assert row["n"] == 3


@pytest.mark.parametrize("values", [[100.0], [100.0, 120.0]])
def test_below_three_launches_there_is_no_interval(values):
    row = stats.geomean_interval(values)
    assert row["lo"] is None and row["hi"] is None and row["n"] == len(values)
    assert verdict.interval_text(row) == f"{row['estimate']:,.0f} (n={len(values)}: no interval)"
    assert stats.ratio_interval(values, [90.0, 95.0, 99.0])["lo"] is None


def test_a_ratio_interval_is_welch_t_on_the_difference_of_log_means():
    # a: logs 0, 0.1, 0.2; b: logs 0.5, 0.6, 0.7. Difference -0.5; both variances 0.01, so
    # se = sqrt(2 * 0.01 / 3) = 0.0816497 and Welch's df = (2 * 0.01/3)^2 / (2 * (0.01/3)^2 / 2) = 4 exactly;
    # t(0.975, 4) = 2.776445, half-width 0.2266958.
    a = [1.0, math.exp(0.1), math.exp(0.2)]
    b = [math.exp(0.5), math.exp(0.6), math.exp(0.7)]
    r = stats.ratio_interval(a, b)
    assert r["df"] == pytest.approx(4.0)
    assert r["estimate"] == pytest.approx(math.exp(-0.5))
    assert r["lo"] == pytest.approx(math.exp(-0.5 - 0.2266958), abs=1e-6)
    assert r["lo"] == pytest.approx(0.483504, abs=1e-6)
    assert r["hi"] == pytest.approx(0.760861, abs=1e-6)
    assert stats.half_width(r) == pytest.approx((0.760861 - 0.483504) / 2 / math.exp(-0.5), abs=1e-5)


def test_a_paired_ratio_is_student_t_on_the_differences_within_rounds():
    # a's logs 1.0, 1.2, 0.9, 1.1 and b's 0.9, 1.0, 0.85, 0.95, one of each per round: differences 0.1, 0.2, 0.05,
    # 0.15, mean 0.125, sample variance 0.0125 / 3, se = 0.0645497 / 2 = 0.0322749; t(0.975, 3) = 3.182446 (any
    # table), half-width 0.1027130: exp(0.125 -+ 0.1027130) = [1.022537, 1.255725]. t = 3.873 lies between the
    # table's 3.182 (p = 0.05) and 4.541 (p = 0.02).
    a = [math.exp(x) for x in (1.0, 1.2, 0.9, 1.1)]
    b = [math.exp(x) for x in (0.9, 1.0, 0.85, 0.95)]
    paired = stats.compare_pair(a, b, paired=True)
    assert paired["estimate"] == pytest.approx(math.exp(0.125)) and paired["df"] == 3 and paired["n"] == 4
    assert paired["lo"] == pytest.approx(1.022537, abs=1e-6) and paired["hi"] == pytest.approx(1.255725, abs=1e-6)
    assert 0.02 < paired["p"] < 0.05
    # unpaired (Welch), the same launches: variances 0.05 / 3 and 0.0125 / 3, se^2 = 0.0052083, df 4.41; the round
    # each pair shared no longer cancels, and the interval is wider and contains 1
    welch = stats.compare_pair(a, b, paired=False)
    assert welch["df"] == pytest.approx(4.412, abs=1e-3) and welch["lo"] < 1 < welch["hi"] and welch["p"] > 0.05
    assert welch["hi"] / welch["lo"] > paired["hi"] / paired["lo"]


def test_equivalence_is_two_one_sided_tests_at_the_margin():
    # differences of logs 0.01, -0.01, 0.02, 0: mean 0.005, se = sqrt(5e-4 / 3) / 2 = 0.00645497; at a 5% margin the
    # bounds are -+ln(1.05) = -+0.0487902, and the larger one-sided p is P(T3 < (0.005 - 0.0487902) / se = -6.784),
    # between the table's 0.005 (t = 5.841) and 0.001 (t = 10.215); the 90% interval, 0.005 -+ 2.353363 x se =
    # [-0.010191, 0.020191], lies inside the bounds
    b = [100.0, 100.0, 100.0, 100.0]
    a = [100.0 * math.exp(d) for d in (0.01, -0.01, 0.02, 0.0)]
    pair = stats.compare_pair(a, b, paired=True, margin=0.05)
    assert 0.001 < pair["p_equivalent"] < 0.005 and pair["p"] > 0.05
    # at a 1% margin (bounds -+0.00995) the same launches are not shown equivalent
    assert stats.compare_pair(a, b, paired=True, margin=0.01)["p_equivalent"] > 0.05
    # two launches: no interval, no test
    assert stats.compare_pair(a[:2], b[:2], paired=True)["p"] is None


def test_holm_multiplies_the_ith_smallest_of_m_by_m_minus_i_plus_1_and_never_steps_down():
    # m = 4 tests (None is no test): 0.01 x 4 = 0.04; 0.02 x 3 = 0.06; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04 -> 0.06
    assert stats.holm([0.03, 0.01, None, 0.04, 0.02]) == pytest.approx([0.06, 0.04, None, 0.06, 0.06])
    assert stats.holm([0.5, 0.9]) == [1.0, 1.0] and stats.holm([None]) == [None]


def test_letter_groups_share_a_letter_exactly_where_rows_are_not_resolved_apart():
    # a resolved ahead of c and d, b ahead of d: a | a b | b c | c (a compact letter display, Piepho 2004)
    differ = {frozenset("ac"), frozenset("ad"), frozenset("bd")}
    assert stats.letter_groups(list("abcd"), differ) == {"a": "a", "b": "ab", "c": "bc", "d": "c"}
    assert stats.letter_groups(list("abc"), set()) == {"a": "a", "b": "a", "c": "a"}
    assert stats.letter_groups(list("abc"), {frozenset("ab"), frozenset("bc"), frozenset("ac")}) == {
        "a": "a", "b": "b", "c": "c"}


def _records(values: dict[str, list[float]], devices: dict[str, int] | None = None, baseline=None):
    recs = []
    for label, vs in values.items():
        for k, v in enumerate(vs):
            recs.append({"schema_version": 2, "label": label, "adapter": label.split(":")[0], "status": "ok",
                         "repeat": k, "world_size": 2, "samples_per_s": v, "cpu_s_per_step": 0.002,
                         "topology": {"devices_used": (devices or {}).get(label, 2)},
                         "controls": {"precision": "bf16" if label == "amp" else "fp32", "compression": "none"},
                         "baseline": baseline})
    return recs


def test_the_verdict_names_the_fastest_and_every_pair_by_its_outcome():
    a = verdict.analyse(_records({"dp": [300.0] * 5, "ddp": [100.0, 101.0, 99.0, 100.5, 99.5],
                                  "spawn": [99.0, 102.0, 98.0, 101.0, 100.0], "horovod": [80.0, 81.0, 79.0, 80.5, 79.5],
                                  "amp": [120.0, 121.0, 119.0, 120.5, 119.5]},
                                 devices={"dp": 1}))
    assert a["baseline"] == "ddp" and a["left_out"] == ["dp"] and a["blocked"]
    assert a["order"] == ["amp", "ddp", "spawn", "horovod"]
    assert a["letters"] == {"amp": "a", "ddp": "b", "spawn": "b", "horovod": "c"}
    # paired within rounds: amp/ddp is 1.2 in every round but one (119.5 / 99.5), so its interval is narrow;
    # ddp/spawn differ by -1% to +3% round by round, within the 5% margin: equivalent
    assert a["lines"][0] == ("**Verdict for this run — fastest: amp (bf16)**, resolved ahead of every other row (two-sided t tests "
                             "on log throughput, Holm-adjusted over the pairs, p < 0.05).")
    assert a["lines"][1] == ("Groups, highest estimate first (a compact letter display: rows that share a letter are not "
                             "resolved apart): amp (bf16) **a**; ddp **b**; spawn **b**; horovod **c**.")
    assert a["lines"][2].startswith("Resolved (Holm-adjusted p < 0.05): amp (bf16) 1.20× [1.20–1.20] ahead of ddp; ")
    # ddp/spawn round by round 1.0101, 0.9902, 1.0102, 0.9950, 0.9950: log mean 0.0001, sd 0.0093, t(0.975, 4) =
    # 2.776: [0.99, 1.01]
    assert " · Equivalent within ±5% (TOST, Holm-adjusted): ddp vs spawn 1.00× [0.99–1.01]." in a["lines"][2]
    # each pair's interval is its own 95% one; Holm's adjustment is on the tests (an audit read "95% intervals, ...
    # each Holm-adjusted" as intervals adjusted over the pairs)
    assert a["lines"][3] == ("(5 launches per row; 6 pairs, each with its own 95% interval; differences and "
                             "equivalence (TOST, margin ±5%) each tested with Holm's adjustment over the pairs; rounds "
                             "as blocks: each pair's differences within rounds, intervals 42% of the unpaired width "
                             "(median).)")
    # widths on the log scale: amp/ddp's paired [1.198, 1.202] against its unpaired [1.187, 1.213] is 15% of it,
    # and the six pairs' median 42% (the ratio of their hi/lo quotients had printed 98%: no width at all)
    # one run: its intervals are about this run, and the verdict says so (no joined runs known to these records)
    assert a["lines"][4] == ("These intervals hold for this run: they count the variation between its launches, not "
                             "between runs at other times (sessions), which one run cannot measure; `compare run "
                             "--join DIR` runs the request again as another session of DIR, and the verdict over the "
                             "sessions includes it.")
    assert a["lines"][5] == ("Left out of the ranking: dp (ran on 1 device(s) of 2: not data-parallel across the "
                             "world size).")
    table = "\n".join(verdict.markdown(a))
    assert "| spawn | 100 [98–102] | 5 | 1.00× [0.99–1.01] | equivalent | 2.00 (1.00×) |" in table
    assert "| horovod | 80 [79–81] | 5 | 0.80× [0.80–0.80] | slower |" in table
    assert "| row | group | amp (bf16) | ddp | spawn | horovod |" in table
    assert "| horovod | c | 0.67× ▼ | 0.80× ▼ | 0.80× ▼ | – |" in table


def test_a_wide_row_that_shares_the_fastest_group_is_named_and_rounds_left_incomplete_are_unpaired():
    # The audit's shape: horovod's estimate is below deepspeed's, but its interval is so wide that it is resolved
    # against nothing, so it shares the fastest group's letter while deepspeed does not. The verdict must say so.
    spawn = [22000.0, 22100.0, 21900.0, 22050.0, 21950.0]
    ddp = [21950.0, 22050.0, 22100.0, 21900.0, 22000.0]  # spawn's launches in another order: the same speed
    deepspeed = [20500.0, 20600.0, 20400.0, 20550.0, 20450.0]
    horovod = [12000.0, 30000.0, 15000.0, 25000.0, 18000.0]
    a = verdict.analyse(_records({"spawn": spawn, "ddp": ddp, "deepspeed": deepspeed, "horovod": horovod}))
    assert a["order"] == ["spawn", "ddp", "deepspeed", "horovod"]
    assert a["letters"] == {"spawn": "a", "ddp": "a", "deepspeed": "b", "horovod": "ab"}
    # no row is resolved ahead of every other, so none is called fastest: the top group is named, with why
    assert a["lines"][0] == ("**Verdict for this run — top group, not resolved behind any row: spawn, ddp, horovod** (every "
                             "other row is resolved behind at least one; no row is resolved ahead of every other: "
                             "two-sided t tests on log throughput, Holm-adjusted over the pairs, "
                             "p < 0.05; spawn and ddp are equivalent within ±5% (TOST)); horovod is in it only "
                             "because it is not resolved against any row (the intervals of its pairs are too wide to "
                             "place it).")
    note = next(line for line in a["lines"] if line.startswith("horovod shares group a"))
    assert "not resolved against deepspeed" in note and "whose estimate is higher" in note
    # a launch lost: rounds are incomplete, so every pair is analysed unpaired, and the verdict says why
    records = [r for r in _records({"spawn": spawn, "ddp": ddp, "deepspeed": deepspeed, "horovod": horovod})
               if not (r["label"] == "ddp" and r["repeat"] == 4)]
    b = verdict.analyse(records)
    assert not b["blocked"] and all(not p["paired"] for p in b["pairs"])
    assert b["lines"][-2].endswith("unpaired (Welch), as rounds are incomplete (a launch failed or was left out), so "
                                   "rows have launches in different rounds.)")


def test_one_launch_per_row_ranks_nothing_and_says_how_to_get_a_ranking():
    a = verdict.analyse(_records({"ddp": [100.0], "horovod": [50.0]}))
    assert a["letters"] is None and analysis.widest(a) is None
    two = verdict.analyse(_records({"ddp": [100.0, 101.0], "horovod": [50.0, 51.0]}))
    assert two["letters"] is None and two["lines"][0].startswith("**Verdict: no ranking.** Each row ran 2 launch(es)")
    assert a["lines"][0].startswith("**Verdict: no ranking.** Each row ran 1 launch(es); a row needs at least 3")
    assert "`--precision 5% --budget 10m`" in a["lines"][0]


def test_the_baseline_is_the_one_asked_for_and_a_left_out_one_falls_back_with_a_word():
    values = {"dp": [300.0] * 3, "ddp": [100.0, 101.0, 99.0], "spawn": [99.0, 100.0, 98.0]}
    assert verdict.analyse(_records(values, {"dp": 1}), baseline="spawn")["baseline"] == "spawn"
    a = verdict.analyse(_records(values, {"dp": 1}, baseline="dp"))
    assert a["baseline"] == "ddp"
    assert "The baseline dp has no measurement on the full world size; ratios are against ddp." in a["lines"]


def test_the_order_of_a_round_is_shuffled_and_reproducible_from_its_seed():
    rows = ["dp", "ddp", "spawn", "amp", "horovod", "deepspeed"]
    first = [round_order(rows, 12345, k) for k in range(6)]
    assert first == [round_order(rows, 12345, k) for k in range(6)]  # the seed gives the order back
    assert all(sorted(o) == sorted(rows) for o in first)
    assert len({tuple(o) for o in first}) > 1  # rounds differ from each other
    assert round_order(rows, 12345, 0) == ["spawn", "ddp", "horovod", "dp", "amp", "deepspeed"]  # any machine
    assert round_order(rows, 12346, 0) != round_order(rows, 12345, 0)


def test_noise_is_read_from_proc_stat_over_the_timed_window(tmp_path):
    from harness.shared.procstat import read as proc_stat

    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 10 0 0 40 0 0\ncpu0 50 0 25 400 5 0 0 20 0 0\n")
    assert proc_stat(str(stat)) == [100, 0, 50, 800, 10, 0, 0, 40]
    assert proc_stat(str(tmp_path / "missing")) is None
    # 1000 ticks over the window: 150 busy, 40 stolen; the two ranks used 1.0 s = 100 ticks, so 50 ticks (5%) went
    # to other processes, and the steal (4%) is below its flag.
    windows = [{"cpu_s": 0.5, "proc_stat": [100, 0, 50, 800, 10, 0, 0, 40]}, {"cpu_s": 0.5, "proc_stat": None}]
    from harness.shared.rank_result import TrainResult

    ranks = [TrainResult(rank=r, world_size=2, host={"boot_id": "b"}) for r in (0, 1)]
    quiet = assemble.noise(windows, ranks, SimpleNamespace(concurrent_runs=[]))
    assert quiet["steal_share"] == pytest.approx(0.04) and quiet["other_cpu_share"] == pytest.approx(0.05)
    assert quiet["flags"] == []
    windows[0]["proc_stat"] = [300, 0, 50, 560, 10, 0, 0, 80]  # 250 ticks of others, 8% steal
    busy = assemble.noise(windows, ranks, SimpleNamespace(concurrent_runs=[{"pid": 1}]))
    assert busy["flags"] == ["CPU steal 8%", "other processes used 25% of the CPUs", "another compare run"]
    windows[0]["proc_stat"] = [3, 0, 0, 1, 0, 0, 0, 0]  # 4 ticks: too short a window to flag anything from
    short = assemble.noise(windows, ranks, SimpleNamespace(concurrent_runs=[]))
    assert short["flags"] == [] and short["unchecked"] == ("its timed window was 4 ticks of /proc/stat, too short to "
                                                           "read other processes' share from")
    # 40 ticks (a default digits launch's window is 17-54): read less 3 ticks of rounding. Half the CPUs to others
    # is flagged (it once went unflagged below 50 ticks); 12.5% is within the rounding of a 10% bar
    windows[0]["cpu_s"] = windows[1]["cpu_s"] = 0.1
    windows[0]["proc_stat"] = [40, 0, 0, 0, 0, 0, 0, 0]
    assert assemble.noise(windows, ranks, SimpleNamespace(concurrent_runs=[]))["flags"] == [
        "other processes used 50% of the CPUs"]
    windows[0]["proc_stat"] = [25, 0, 0, 15, 0, 0, 0, 0]
    edge = assemble.noise(windows, ranks, SimpleNamespace(concurrent_runs=[]))
    assert edge["other_cpu_share"] == pytest.approx(0.125) and edge["flags"] == [] and "unchecked" not in edge


class _FakeRunner:
    """Stands in for the runner core: every launch of a round appends a record whose throughput comes from a fixed
    sequence (launches of known noise); each round takes `round_s` seconds of a fake clock."""

    def __init__(self, session, clock, values, round_s):
        self.session, self.clock, self.values, self.round_s = session, clock, values, round_s

    def run(self, jobs, first_started, stop_ui=True):
        for _, row, k in jobs:
            vs = self.values[row.label]
            self.session.records.append(_records({row.label: [vs[k % len(vs)]]})[0] | {"repeat": k})
        self.clock[0] += self.round_s
        return None


@pytest.mark.parametrize("noise, precision, budget_s, ended, rounds, planned", [
    # 1% launch-to-launch noise: the pilot (7 rounds for one pair) already gives ±5%, so the rounds fixed from it
    # are the pilot's
    (0.01, 0.05, 600.0, "resolved", 7, 7),
    (0.30, 0.05, 100.0, "budget", 3, None),  # 30% noise: the next 30 s round would overrun 100 s after round 3
    (0.30, 0.05, 10.0, "budget", 3, None),  # a budget shorter than a round: still the 3 rounds a verdict needs
    # 30% noise and 10 minutes: the pilot fixes far more rounds than fit; the budget ends them, said so. By hand:
    # the pilot's 7 log ratios (ln 1.625 three times, ln 0.9615 and ln 1.25 twice each) have variance 0.055719;
    # t(0.975, 6) = 2.446912, asinh(5%) = 0.0499792: 5.98737 x 0.055719 / 0.00249792 = 133.55, so 134 rounds
    (0.30, 0.05, 600.0, "budget", 20, 134),
    (0.01, None, 200.0, "budget", 6, None),  # the default (no --precision): rounds while they fit, even when resolved
    (0.01, None, 10.0, "budget", 3, None),
])
def test_rounds_are_added_until_resolved_or_out_of_budget_and_never_fewer_than_three(monkeypatch, noise, precision,
                                                                                    budget_s, ended, rounds, planned):
    from harness.core import comparison as runmod

    clock = [0.0]
    monkeypatch.setattr(runmod.time, "monotonic", lambda: clock[0])
    rows = [SimpleNamespace(label="ddp"), SimpleNamespace(label="horovod")]
    values = {"ddp": [100 * (1 + noise), 100.0, 100 * (1 - noise)],
              "horovod": [80.0, 80 * (1 + noise), 80 * (1 - noise)]}
    session = SimpleNamespace(records=[], save=lambda: None)
    runner = _FakeRunner(session, clock, values, 30.0)
    said = []
    ui = SimpleNamespace(round_done=lambda k, analysis, target: said.append((k, analysis["widest"])),
                         stop=lambda: None, estimate=lambda line: said.append(line))
    plan = SimpleNamespace(request=SimpleNamespace(repeats=None, baseline=None), precision=precision,
                           budget_s=budget_s, runnable=rows, margin=None)
    jobs, stopped = runmod._rounds(plan, runner, session, ui, lambda k: [(plan, r, k) for r in rows], lambda: None)
    assert stopped is None and len(jobs) == 2 * rounds
    mode = session.records[0]["precision_mode"]
    assert (mode["ended"], mode["rounds"]) == (ended, rounds)
    notes = [x for x in said if isinstance(x, str)]
    said = [x for x in said if not isinstance(x, str)]
    assert [k for k, _ in said] == list(range(1, rounds + 1))
    assert said[0][1] is None and said[-1][1][0] == "ddp/horovod"  # the one pair, faster row first
    if precision is not None:
        assert (said[-1][1][1] <= 0.05) == (ended == "resolved")
        assert (mode["rule"], mode["pilot_rounds"], mode["planned_rounds"]) == ("two-stage", 7, planned)
        assert notes == ([] if planned is None else [f"pilot of 7 rounds done: {planned} rounds in all give every "
                                                     f"pair's simultaneous interval ±5%"])
    else:
        assert "rule" not in mode
    assert (mode["target"], mode["least"], mode["criterion"]) == (precision, 3, "simultaneous")


def test_the_doctor_turns_launch_to_launch_variation_into_reachable_precision():
    from harness.core import noise_floor as doctor

    # sd 0.1 on the log scale, 3 launches per row: t(0.975, 4) x 0.1 x sqrt(2/3) = 0.2266958, sinh of it 0.2286425
    assert doctor.ratio_half_width(0.1, 3) == pytest.approx(0.2286425, abs=1e-6)
    n = doctor.launches_for(0.05, 0.1)
    assert doctor.ratio_half_width(0.1, n) <= 0.05 < doctor.ratio_half_width(0.1, n - 1)
    assert doctor.launches_for(0.05, 0.0) == 3 and doctor.launches_for(0.01, 2.0) is None
    recs = [{"status": "ok", "samples_per_s": v, "wall_time_s": 4.0, "repeat": k, "label": "ddp", "workload": "digits",
             "controls": {"steps": 280}, "noise": {"flags": ["CPU steal 9%"] if k == 1 else []}}
            for k, v in enumerate([1.0, math.exp(0.1), math.exp(0.2)])]
    floor = doctor.noise_floor(recs)
    assert floor["sd_log"] == pytest.approx(0.1) and floor["flagged"] == [1] and floor["launch_s"] == 4.0
    assert floor["reachable"][0] == {"launches": 3, "half_width": pytest.approx(0.2286425, abs=1e-6),
                                     "seconds_per_row": 12.0}
    text = "\n".join(doctor.lines({"cores": 2, "sample_s": 2.0, "load_avg": [0.5, 0.4, 0.3], "steal_share": 0.0,
                                   "busy_share": 0.02, "cpu_ghz": None, "governors": None,
                                   "other_compare_runs": []}, floor))
    assert "launch-to-launch variation (standard deviation of log samples/s): 10.0%; launches flagged for " \
           "interference: 2" in text
    assert f"±5%: {n} launches per row" in text and "CPU frequency: not readable here" in text
    with pytest.raises(RuntimeError, match="only 2 of 3 launches measured \\(failed: boom\\)"):
        doctor.noise_floor(recs[:2] + [{"status": "failed", "reason": "boom"}])


def test_the_model_is_judged_against_each_points_own_interval():
    from harness.model.calibration import judgement

    tight = [0.0100, 0.0101, 0.0099]  # half-width ~2.5%: 10% + 2.5% is the line for a fail
    wide = [0.008, 0.010, 0.013]
    assert judgement({"error": 0.09, "measured_repeats_s": tight}) == "pass"
    assert judgement({"error": -0.10, "measured_repeats_s": []}) == "pass"
    assert judgement({"error": 0.20, "measured_repeats_s": tight}) == "fail"
    assert judgement({"error": -0.11, "measured_repeats_s": tight}) == "undecidable"
    assert judgement({"error": 0.30, "measured_repeats_s": wide}) == "undecidable"  # its interval is ±60%
    assert judgement({"error": 0.30, "measured_repeats_s": [0.01, 0.011]}) == "undecidable"  # no interval at n=2


def test_a_schema_2_sweep_gives_speed_up_and_efficiency_with_intervals():
    from harness.ground.record import read_records
    from harness.reports import scale_report as scale

    from conftest import RUNS

    records = read_records(records_file(RUNS / "scale_digits_cpu2_20261125-085608"))
    for r in records:
        r["schema_version"] = 2
    ddp = {p["n"]: p for p in scale.table(records)["ddp"]}
    one, two = ddp[1]["sps_values"], ddp[2]["sps_values"]
    assert len(one) == len(two) == 3
    assert ddp[2]["speedup_interval"] == stats.ratio_interval(two, one)
    assert ddp[2]["samples_per_s"] == pytest.approx(stats.geomean_interval(two)["estimate"])
    # The fixture's samples/s, checked with scipy.stats outside harness/: N=2 geomean 22,860.2, Student t (df 2) on
    # the logs [18,228, 28,670]; speed-up 22,860.2 / 59,541.9 = 0.3839, Welch (df 3.64) [0.2961, 0.4978].
    md = "\n".join(scale.markdown_tables(scale.table(records)))
    assert "| 2 | 64 (32) | 22,860 [18,228–28,670] | 0.38 [0.30–0.50] |" in md


def test_the_default_baseline_is_the_first_row_asked_for_not_the_first_that_ran():
    # Records are written in the shuffled order the launches ran; the baseline is the first row of the command.
    recs = _records({"spawn": [99.0, 100.0, 98.0], "dp": [300.0] * 3, "ddp": [100.0, 101.0, 99.0]}, {"dp": 1})
    for r in recs:
        r["row_order"] = ["dp", "ddp", "spawn"]
    a = verdict.analyse(recs)
    assert a["baseline"] == "ddp" and a["ranked"] == ["ddp", "spawn"]
    recs += _records({"horovod": [50.0, 51.0, 49.0]})
    for r in recs:
        r["row_order"] = ["dp", "ddp", "spawn", "horovod"]
    lines = verdict.analyse(recs)["lines"]
    # paired: ddp/horovod 2, 1.980, 2.020 round by round, log mean 0.6932, sd 0.0100, t(0.975, 2) = 4.303:
    # [1.95, 2.05]; ddp/spawn is 1.01 in every round, so even that is resolved
    # ddp/spawn is a resolved 1% difference inside the 5% margin: said as both, never as a bare "ahead"
    assert lines[2] == ("Resolved (Holm-adjusted p < 0.05): ddp 1.01× [1.01–1.01] ahead of spawn (and within ±5%: "
                        "TOST); ddp 2.00× [1.95–2.05] ahead of horovod; spawn 1.98× [1.93–2.03] ahead of horovod.")


def test_a_tie_is_not_transitive_and_the_letters_show_it():
    # a ≈ b and b ≈ c, but a > c resolved: b shares a letter with each, and nothing reads as if b were resolved
    # ahead of c
    a_, b_, c_ = [100.0, 101.0, 99.0, 100.5, 99.5], [85.0, 115.0, 80.0, 110.0, 95.0], [90.0, 91.0, 89.0, 90.5, 89.5]
    an = verdict.analyse(_records({"a": a_, "b": b_, "c": c_}))
    assert an["letters"] == {"a": "a", "b": "ab", "c": "b"}
    # a is not resolved ahead of b, so it is not "fastest": a and b are the top group
    assert an["lines"][0] == ("**Verdict for this run — top group, not resolved behind any row: a, b** (every other row is "
                              "resolved behind at least one; no row is resolved ahead of every other: two-sided t "
                              "tests on log throughput, Holm-adjusted over the pairs, p < 0.05); b is in it only "
                              "because it is not resolved against any row (the intervals of its pairs are too wide to "
                              "place it).")
    assert ("Not resolved (neither a difference nor equivalence within ±5%): a vs b " in an["lines"][2]
            and "b vs c " in an["lines"][2])
    assert "Resolved (Holm-adjusted p < 0.05): a 1.11× " in an["lines"][2] and "ahead of c" in an["lines"][2]


def test_compare_knobs_lists_every_knob_from_its_declaration_and_version_prints_one_line():
    from typer.testing import CliRunner

    import adapters
    from harness.cli import app
    from harness.shared.options import catalogue

    out = CliRunner().invoke(app, ["knobs", "ddp"])
    assert out.exit_code == 0, out.output
    text = " ".join(out.stdout.split())
    for row in catalogue(adapters.get("ddp").Knobs):
        assert f"{row['name']}: {row['values']}; default {row['default']}" in text
        assert " ".join(row["doc"].split()) in text
    assert "comm_hook: none, fp16, bf16 or powersgd; default none" in text
    every = CliRunner().invoke(app, ["knobs"])
    assert all(f"{n} (adapter;" in every.stdout for n in adapters.names())
    version = CliRunner().invoke(app, ["--version"])
    assert version.exit_code == 0 and version.stdout.startswith("compare ") and version.stdout.count("\n") == 1


def test_the_seed_the_fault_tests_use_keeps_the_first_round_in_the_order_asked_for():
    # tests/distributed/test_failures.py and test_hardening.py rely on it
    assert all(round_order(list(range(n)), 263, 0) == list(range(n)) for n in (2, 3, 4))


def test_precision_stops_on_the_widest_simultaneous_interval_over_every_pair():
    # Three rows in 4 complete rounds: 3 pairs, each interval at 1 - 0.05/3 (Bonferroni), on the paired log ratios
    import numpy as np
    from scipy import stats as sp

    values = {"ddp": [100.0, 104.0, 97.0, 101.0], "spawn": [98.0, 99.0, 99.5, 97.0], "horovod": [80.0, 86.0, 77.0, 79.0]}
    a = verdict.analyse(_records(values))
    expected = {}
    for x, y in (("ddp", "spawn"), ("ddp", "horovod"), ("spawn", "horovod")):
        d = np.log(values[x]) - np.log(values[y])
        half = sp.t.ppf(1 - 0.05 / 3 / 2, 3) * d.std(ddof=1) / 2.0  # sqrt(4) launches
        lo, hi, est = np.exp(d.mean() - half), np.exp(d.mean() + half), np.exp(d.mean())
        expected[f"{x}/{y}"] = (hi - lo) / 2 / est
        [p] = [p for p in a["pairs"] if (p["a"], p["b"]) == (x, y)]
        assert p["simultaneous"]["lo"] == pytest.approx(lo, rel=1e-9) and p["simultaneous"]["confidence"] == \
            pytest.approx(1 - 0.05 / 3)
        assert p["simultaneous"]["lo"] < p["lo"]  # wider than the pair's own 95% interval
    worst = max(expected, key=expected.get)
    assert a["widest"][0] == worst and a["widest"][1] == pytest.approx(expected[worst], rel=1e-9)
    two = verdict.analyse(_records({k: values[k] for k in ("ddp", "spawn")}))
    assert two["pairs"][0]["simultaneous"]["lo"] == two["pairs"][0]["lo"]  # one pair: nothing to correct
    assert verdict.analyse(_records({k: v[:2] for k, v in values.items()}))["widest"] is None  # n = 2: no interval


def test_eleven_complete_rounds_are_blocks():
    # Rounds were compared as sorted by text on one side and by number on the other: from round 11 on ("10" < "2")
    # every run's complete rounds read as incomplete and were analysed unpaired.
    values = {"ddp": [100.0 + k % 3 for k in range(11)], "spawn": [98.0 + k % 2 for k in range(11)]}
    a = verdict.analyse(_records(values))
    assert a["blocked"] and a["why_unblocked"] is None and a["pairs"][0]["paired"]


def test_the_pairs_heat_map_is_drawn_for_a_ranking_and_for_nothing_less(tmp_path):
    # resnet_cpu2_20261126-052328: 3 rounds of dp, ddp, spawn, horovod (dp left out of the ranking on a CPU)
    from harness.ground.record import read_records
    from harness.reports import figures
    from harness.reports.run_report import pairs_plot

    if not figures.available():
        pytest.skip(figures.why_none())
    runs = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
    records = read_records(runs / "resnet_cpu2_20261126-052328" / "records.jsonl.gz")
    assert pairs_plot(tmp_path, records, verdict.analyse(records), figures.scope()) == [tmp_path / "pairs.png"]
    assert (tmp_path / "pairs.png").stat().st_size > 0
    one = [r for r in records if r["label"] in ("dp", "ddp")]  # one ranked row: no pair to draw
    assert pairs_plot(tmp_path / "none", one, verdict.analyse(one), figures.scope()) == []
    assert not (tmp_path / "none").exists()


# ---- words = statistics ---------------------------------------------------------------------------------------------

def test_fastest_is_said_only_of_a_row_resolved_ahead_of_every_other_ranked_row():
    # random runs of 2 to 6 rows of known spread: whatever the data, "fastest" heads the verdict exactly when one
    # row's pairs are all resolved in its favour, and otherwise the top group is named: the rows none is resolved ahead of
    import random

    rng = random.Random(65)
    seen = set()
    for trial in range(300):
        n_rows, launches = rng.randint(2, 6), rng.randint(3, 8)
        values = {f"r{i}": [100 * (1 + 0.1 * rng.randint(0, 3)) * math.exp(rng.gauss(0, rng.choice([0.01, 0.1])))
                            for _ in range(launches)] for i in range(n_rows)}
        a = verdict.analyse(_records(values))
        first = a["lines"][0]
        winners = [k for k in a["order"]
                   if all(analysis.oriented(a["pairs"], k, j)["outcome"] == "faster" for j in a["order"] if j != k)]
        assert first.startswith("**Verdict for this run — fastest: ") == bool(winners), (values, first)
        if winners:
            assert first.startswith(f"**Verdict for this run — fastest: {winners[0]}**, resolved ahead of every other "
                                    "row")
        elif any(p["outcome"] == "faster" for p in a["pairs"]):
            # the top group: every row no row is resolved ahead of, and no two of them resolved apart
            top = [k for k in a["order"]
                   if not any(analysis.oriented(a["pairs"], j, k)["outcome"] == "faster" for j in a["order"] if j != k)]
            assert all(analysis.oriented(a["pairs"], j, k)["outcome"] != "faster" for j in top for k in top if j != k)
            assert first.startswith(f"**Verdict for this run — top group, not resolved behind any row: "
                                    f"{', '.join(top)}**")
            assert first.split("**")[2].startswith(" (every other row is resolved behind at least one; ")
        else:
            assert first.startswith(("**Verdict for this run: equivalent**", "**Verdict for this run: inconclusive**"))
        assert "fastest" not in " ".join(a["lines"][1:])  # the word is the verdict's, for a row resolved ahead of all
        seen.add(first.split("**")[1].split(":")[0])
    assert seen == {"Verdict for this run — fastest", "Verdict for this run — top group, not resolved behind any row",
                    "Verdict for this run"}, seen


def test_intervals_too_wide_for_the_margin_are_inconclusive_not_a_tie():
    # the audit's scale point: one pair, [0.47–2.55]; no difference resolved and no equivalence either
    a = verdict.analyse(_records({"ddp": [100.0, 250.0, 60.0], "horovod": [90.0, 110.0, 100.0]}))
    assert a["pairs"][0]["outcome"] == "not resolved"
    first = a["lines"][0]
    assert first.startswith("**Verdict for this run: inconclusive** — ddp vs horovod 1.15× [0.22–6.01] ")
    assert first.endswith("is neither resolved apart (two-sided t tests on log throughput, Holm-adjusted over the "
                          "pairs, p < 0.05) nor shown equivalent within ±5% (TOST): its 95% interval is too wide to "
                          "decide the margin. More launches (`--precision`) narrow it.")
    assert "a tie is a result" not in " ".join(a["lines"])
    three = verdict.analyse(_records({"a": [100.0, 130.0, 80.0], "b": [90.0, 120.0, 100.0],
                                      "c": [100.0, 100.5, 99.5]}))
    assert three["lines"][0].startswith("**Verdict for this run: inconclusive** — no pair of ")
    assert "3 of the 3 pairs are not shown equivalent within ±5% (TOST) either" in three["lines"][0]
    same = verdict.analyse(_records({"a": [100.0, 100.5, 99.5, 100.2], "b": [100.1, 100.4, 99.6, 100.0]}))
    assert same["lines"][0] == ("**Verdict for this run: equivalent** — a and b are equivalent within ±5% (TOST, Holm-adjusted): "
                                "no row is faster or slower by more than that.")


def test_a_resolved_difference_inside_the_margin_is_faster_and_within_it():
    # a is 2% ahead of b in every round (resolved) and the 90% interval lies inside ±5% (equivalent too)
    a = verdict.analyse(_records({"a": [100.0, 101.0, 102.0], "b": [98.0, 99.0, 100.0], "c": [50.0, 51.0, 52.0]}))
    ab = next(p for p in a["pairs"] if (p["a"], p["b"]) == ("a", "b"))
    assert ab["outcome"] == "faster" and ab["within_margin"] and ab["p_holm"] < 0.05 and ab["p_equivalent_holm"] < 0.05
    assert a["lines"][0] == ("**Verdict for this run — fastest: a**, resolved ahead of every other row (two-sided t tests on log "
                             "throughput, Holm-adjusted over the pairs, p < 0.05); ahead of b by less than ±5% "
                             "(faster, and within ±5%: equivalence holds too, TOST).")
    assert "a 1.02× [1.02–1.02] ahead of b (and within ±5%: TOST)" in a["lines"][2]
    table = "\n".join(verdict.markdown(a))
    assert "| b | 99 [97–102] | 3 | 0.98× [0.98–0.98] | slower, and within ±5% |" in table
    assert "| a | a | – | 1.02× ▲≈ | 1.98× ▲ |" in table and "▲≈ / ▼≈ resolved and within ±5% too" in table
    # a 30% difference is not within the margin
    ac = next(p for p in a["pairs"] if (p["a"], p["b"]) == ("a", "c"))
    assert ac["outcome"] == "faster" and not ac["within_margin"]


def test_the_precision_sentence_names_the_widest_interval_of_the_kind_it_names_from_the_records():
    # A run from before the pairs' criterion kept "widest: amp ±16.6%" from its own stopping rule, beside a table
    # whose amp interval was ±9%: the sentence, about the ratios, now takes the widest ratio interval it renders
    from harness.ground.stats import half_width
    from harness.reports import run_report

    values = {"ddp": [100.0, 104.0, 97.0, 101.0], "spawn": [98.0, 99.0, 99.5, 97.0], "horovod": [80.0, 86.0, 77.0, 79.0]}
    a = verdict.analyse(_records(values))
    mode = {"target": 0.05, "budget_s": 600, "rounds": 4, "ended": "budget", "elapsed_s": 598.0,
            "widest": ["spawn", 0.166]}
    [old] = run_report._precision_lines(_records(values), a, mode)[:1]
    k, w = max(((k, half_width(r)) for k, r in a["ratios"].items()), key=lambda x: x[1])
    assert f"every ratio's interval reached ±5% (widest: {k} ±{w:.1%})." in old and "16.6%" not in old
    [new] = run_report._precision_lines(_records(values), a, {**mode, "criterion": "simultaneous"})[:1]
    assert f"(widest: {a['widest'][0]} ±{a['widest'][1]:.1%})." in new


def test_a_widest_interval_past_100_percent_is_shown_as_the_interval_not_a_half_width():
    # Three launches of a row whose throughput varied 20-fold gave "widest: a/b ±1836%", as if the ratio could be
    # negative: past ±100% the sentence shows the interval itself
    from harness.reports import run_report

    values = {"a": [100.0, 5.0, 60.0], "b": [50.0, 52.0, 49.0]}
    a = verdict.analyse(_records(values))
    name, hw = a["widest"]
    assert hw > 1
    p = next(p for p in a["pairs"] if f"{p['a']}/{p['b']}" == name)
    sim = p["simultaneous"]
    [line] = run_report._precision_lines(_records(values), a, {"target": 0.05, "budget_s": 600, "rounds": 3,
                                                                "ended": "budget", "elapsed_s": 598.0,
                                                                "criterion": "simultaneous"})[:1]
    assert f"(widest: {name} {p['estimate']:.2f}× [{sim['lo']:.2f}–{sim['hi']:.2f}])." in line
    assert f"±{hw:.1%}" not in line


def test_the_terminal_after_a_round_shows_a_widest_interval_past_100_percent_as_the_interval(monkeypatch):
    # the report said "a/b 1.30× [0.07–24.1]" while the terminal still printed "±16862.5%"
    from harness.commands import ui

    printed = []
    monkeypatch.setattr(ui.console, "print", lambda *args, **kw: printed.append(args[0]))
    a = verdict.analyse(_records({"a": [100.0, 5.0, 60.0], "b": [50.0, 52.0, 49.0]}))
    quiet = ui.QuietUI()
    ui.RunUI.round_done(quiet, 3, a, 0.05)
    line = next(p for p in printed if isinstance(p, str) and "widest" in p)
    p = next(p for p in a["pairs"] if f"{p['a']}/{p['b']}" == a["widest"][0])
    sim = p["simultaneous"]
    assert line == (f"  widest simultaneous interval over the pairs: {a['widest'][0]} {p['estimate']:.2f}× "
                    f"[{sim['lo']:.2f}–{sim['hi']:.2f}]; target ±5%")


def test_a_row_whose_launches_failed_is_named_in_the_verdict_with_what_they_did():
    # An outside check: ddp and spawn failed and the verdict said only "nothing to rank — fewer than two rows were
    # measured", and a row that lost one launch of three was ranked on two without a word
    recs = _records({"ddp": [100.0, 101.0, 99.0], "horovod": [80.0, 81.0, 79.0], "spawn": [90.0, 91.0, 92.0]})
    boom = "rank 1 exited with code 1; first error: RuntimeError: boom from rank 1 at step 8 " + "and more " * 30
    recs[4].update(status="timeout", samples_per_s=None, reason="stopped after 60 s without a step")
    recs += [{**recs[0], "label": "fsdp", "adapter": "fsdp", "repeat": k, "status": "failed", "samples_per_s": None,
              "reason": boom} for k in range(3)]
    recs += [{**recs[0], "label": "apex", "adapter": "apex", "status": "unavailable", "samples_per_s": None,
              "reason": "needs CUDA"}]
    for r in recs:
        r["row_order"] = ["ddp", "horovod", "spawn", "fsdp", "apex"]
    a = verdict.analyse(recs)
    cut = " ".join(boom.split())[:verdict.REASON_CHARS].rsplit(" ", 1)[0] + " …"
    assert a["lines"][-1] == (
        f"Not compared, no launch measured: fsdp (3 launches, all failed: {cut}). Compared on the launches that were "
        "measured: horovod (2 of 3 launches measured; 1 timed out: stopped after 60 s without a step).")
    assert "apex" not in a["lines"][-1]  # unavailable here: the table says why, and it was never launched
    one = verdict.analyse([{**r, "row_order": ["ddp", "fsdp"]} for r in recs if r["label"] == "ddp"] + recs[9:10])
    assert one["lines"][0].startswith("**Verdict: nothing to rank**")
    assert one["lines"][-1] == f"Not compared, no launch measured: fsdp (its one launch failed: {cut})."


def test_a_verdict_over_launches_measured_under_interference_says_so_beside_it():
    # every launch of a run was flagged by its noise reading; only the notes, far below the verdict, said so
    recs = _records({"ddp": [100.0, 101.0, 99.0], "spawn": [90.0, 91.0, 89.0], "dp": [50.0, 50.0, 50.0]},
                    devices={"dp": 1})
    assert not any("interference" in line for line in verdict.analyse(recs)["lines"])
    shares = {("ddp", 0): 0.2, ("ddp", 1): 0.74, ("spawn", 2): 0.44, ("dp", 0): 0.9}  # dp is not in the verdict
    for r in recs:
        share = shares.get((r["label"], r["repeat"]))
        r["noise"] = {"other_cpu_share": share or 0.01, "steal_share": 0.0,
                      "flags": [f"other processes used {share:.0%} of the CPUs"] if share else []}
    recs[4]["noise"].update(steal_share=0.06, flags=[*recs[4]["noise"]["flags"], "CPU steal 6%", "another compare run"])
    line = verdict.analyse(recs)["lines"][-1]
    assert line == ("**Measured under interference: 4 of the verdict's 6 launches** (other processes used 20%–74% of "
                    "the CPUs over their timed windows; CPU steal 6%; another compare run measuring at the same time "
                    "as 1 of them): every figure keeps them, so this verdict describes the machine as loaded as it "
                    "then was; the notes name each launch.")
    for r in recs:
        r["noise"]["flags"] = ["other processes used 50% of the CPUs"]
        r["noise"]["other_cpu_share"] = 0.5
    assert verdict.analyse(recs)["lines"][-1].startswith("**Measured under interference: every launch** (other "
                                                         "processes used 50% of the CPUs over their timed windows)")


def test_launches_whose_windows_were_too_short_to_check_for_interference_are_counted_beside_the_verdict():
    # an outside check: a session beside two busy loops read "Measured under interference: 1 of the verdict's 9
    # launches", the cleanest of four, while 4 more of its windows had been too short to read the load from
    recs = _records({"ddp": [100.0, 101.0, 99.0], "spawn": [90.0, 91.0, 89.0]})
    for k, r in enumerate(recs):
        r["noise"] = {"other_cpu_share": 0.01, "steal_share": 0.0, "flags": []}
        if k < 2:
            r["noise"]["unchecked"] = "its timed window was 6 ticks of /proc/stat, too short to read from"
    assert verdict.analyse(recs)["lines"][-1] == (
        "**Not checked for interference: 2 of the verdict's 6 launches had timed windows too short to check for "
        "interference (/proc/stat counts 10 ms ticks)**; the notes name each launch.")
    recs[5]["noise"].update(other_cpu_share=0.5, flags=["other processes used 50% of the CPUs"])
    assert verdict.analyse(recs)["lines"][-1] == (
        "**Measured under interference: 1 of the verdict's 6 launches** (other processes used 50% of the CPUs over "
        "their timed windows): every figure keeps them, so this verdict describes the machine as loaded as it then "
        "was; 2 of the verdict's 6 launches had timed windows too short to check for interference (/proc/stat counts "
        "10 ms ticks), so more may have been; the notes name each launch.")


def test_a_slow_row_with_a_narrow_interval_beside_wide_fast_rows_is_not_said_to_have_a_wide_interval():
    # a repeated run's shape: fsdp ~5x slower than ddp and spawn with the narrowest interval of the four, in the top
    # group only because ddp's and spawn's intervals were wide; the verdict blamed fsdp's own interval
    # the fast rows move together from round to round (paired within rounds, their pairs resolve); fsdp does not
    swing = [0.0, 1.2, -1.2, 0.6]
    a = verdict.analyse(_records({"spawn": [20000 * math.exp(e + 0.01 * k) for k, e in enumerate(swing)],
                                  "ddp": [15000 * math.exp(e - 0.01 * k) for k, e in enumerate(swing)],
                                  "horovod": [9000 * math.exp(e + 0.005 * k) for k, e in enumerate(swing)],
                                  "fsdp": [3200 * (1 + 0.01 * k) for k in range(4)]}))
    assert a["rows"]["fsdp"]["hi"] / a["rows"]["fsdp"]["lo"] < min(a["rows"][k]["hi"] / a["rows"][k]["lo"]
                                                                    for k in ("spawn", "ddp", "horovod"))
    text = " ".join(a["lines"])
    assert "fsdp" in a["lines"][0] and "interval is wide" not in text and "intervals are wide" not in text
    assert "not resolved against any row (the intervals of" in a["lines"][0]


def test_a_p_value_just_above_the_threshold_never_reads_as_the_threshold():
    # a report printed "(p = 0.05 after Holm's correction)" for an adjusted p of 0.0501
    assert [verdict.p_text(p) for p in (0.0501, 0.05004, 0.21, 0.056, 0.0499, 0.0496, 0.05)] == [
        "0.0501", "0.05004", "0.21", "0.056", "0.0499", "0.0496", "0.05"]


def test_an_interval_that_excludes_1_but_holm_leaves_unresolved_is_not_called_too_wide():
    # an outside check: "their 95% intervals (the widest spawn vs horovod 2.71x [1.28-5.74]) are too wide to decide
    # the margin", of intervals lying wholly outside ±5%: what leaves them unresolved is Holm's correction
    a = verdict.analyse(_records({"ddp": [89.0, 113.0, 86.0, 108.0], "spawn": [81.0, 112.0, 99.0, 121.0],
                                  "horovod": [79.0, 71.0, 67.0, 75.0]}))
    line = a["lines"][0]
    assert line.startswith("**Verdict for this run: inconclusive** — no pair of spawn, ddp, horovod is resolved apart")
    assert ("either: its 95% interval (spawn vs ddp 1.04× [0.87–1.24]) is too wide to decide the margin; spawn vs "
            "horovod 1.40× [1.00–1.96] excludes 1 alone but is not resolved after Holm's correction over the 3 pairs "
            "(p = 0.099); ddp vs horovod 1.35× [1.06–1.71] excludes 1 alone but is not resolved after Holm's correction "
            "over the 3 pairs (p = 0.083).") in line
