"""Verdicts that hold: the statistics against hand-computed values, the tiers, the shuffled order of a round, the
adaptive rounds of --precision, and the noise read from /proc/stat.

Hand-computed values: for launches e^0, e^0.1, e^0.2 the log mean is 0.1 and the sample standard deviation 0.1, so
the standard error is 0.1/sqrt(3) = 0.0577350; Student's t for 2 degrees of freedom at 97.5% is 4.302653 (any
table), so the half-width on the log scale is 0.2484138 and the interval is exp(0.1 -+ 0.2484138).
"""

import math
from types import SimpleNamespace

import pytest

from harness.core.record import records_file

from harness.core import assemble, stats
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


def test_ties_are_grouped_and_only_resolved_differences_ordered():
    fast = [100.0, 101.0, 99.0, 100.5, 99.5]
    tied = [99.0, 102.0, 98.0, 101.0, 100.0]  # its interval against `fast` contains 1
    slow = [80.0, 81.0, 79.0, 80.5, 79.5]
    slower = [50.0, 51.0, 49.0, 50.5, 49.5]
    assert stats.tiers({"slow": slow, "tied": tied, "fast": fast, "slower": slower}) == [
        ["fast", "tied"], ["slow"], ["slower"]]
    # two launches each: no intervals, so nothing is separated
    assert stats.tiers({"a": [100.0, 101.0], "b": [50.0, 51.0]}) == [["a", "b"]]


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


def test_the_verdict_names_the_fastest_tier_and_the_ratios_behind_the_rest():
    a = verdict.analyse(_records({"dp": [300.0] * 5, "ddp": [100.0, 101.0, 99.0, 100.5, 99.5],
                                  "spawn": [99.0, 102.0, 98.0, 101.0, 100.0], "horovod": [80.0, 81.0, 79.0, 80.5, 79.5],
                                  "amp": [120.0, 121.0, 119.0, 120.5, 119.5]},
                                 devices={"dp": 1}))
    assert a["baseline"] == "ddp" and a["left_out"] == ["dp"] and a["tiers"][0] == ["amp"]
    # Checked by hand and with scipy.stats (Welch's t on the log values, t.ppf(0.975, df), outside harness/):
    # amp/ddp 1.2000 [1.1873, 1.2129] (df 7.75), amp/spawn 1.2001 [1.1771, 1.2235] (df 5.35), amp/horovod 1.5000
    # [1.4813, 1.5190] (df 6.97); none is near a rounding edge at two decimals.
    assert a["lines"][0] == ("**Verdict — fastest: amp (bf16)**; then amp 1.20× [1.19–1.21] ahead of ddp, 1.20× "
                             "[1.18–1.22] ahead of spawn (these tie with each other); then amp 1.50× [1.48–1.52] ahead "
                             "of horovod. (5 launches per row, 95% intervals.)")
    assert a["lines"][1] == ("Left out of the ranking: dp (ran on 1 device(s) of 2: not data-parallel across the "
                             "world size).")
    table = "\n".join(verdict.markdown(a))
    assert "| spawn | 100 [98–102] | 5 | 1.00× [0.98–1.02] | no difference | 2.00 (1.00×) |" in table
    assert "| horovod | 80 [79–81] | 5 | 0.80× [0.79–0.81] | slower |" in table


def test_one_launch_per_row_ranks_nothing_and_says_how_to_get_a_ranking():
    a = verdict.analyse(_records({"ddp": [100.0], "horovod": [50.0]}))
    assert a["tiers"] is None and verdict.widest(a) is None
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
    assert assemble.noise(windows, ranks, SimpleNamespace(concurrent_runs=[]))["flags"] == []


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


@pytest.mark.parametrize("noise, budget_s, ended, rounds", [
    (0.01, 600.0, "resolved", 3),  # 1% launch-to-launch noise: three rounds resolve ±5%
    (0.30, 100.0, "budget", 3),  # 30% noise: the next 30 s round would overrun the 100 s budget after round 3
])
def test_precision_mode_adds_rounds_until_resolved_or_out_of_budget(monkeypatch, noise, budget_s, ended, rounds):
    from harness.core import comparison as runmod

    clock = [0.0]
    monkeypatch.setattr(runmod.time, "monotonic", lambda: clock[0])
    rows = [SimpleNamespace(label="ddp"), SimpleNamespace(label="horovod")]
    values = {"ddp": [100 * (1 + noise), 100.0, 100 * (1 - noise)],
              "horovod": [80.0, 80 * (1 + noise), 80 * (1 - noise)]}
    session = SimpleNamespace(records=[], save=lambda: None)
    runner = _FakeRunner(session, clock, values, 30.0)
    said = []
    ui = SimpleNamespace(round_done=lambda k, w, target: said.append((k, w)), stop=lambda: None)
    plan = SimpleNamespace(request=SimpleNamespace(repeats=1, baseline=None), precision=0.05, budget_s=budget_s,
                           runnable=rows)
    jobs, stopped = runmod._until_precise(plan, runner, session, ui,
                                         lambda k: [(plan, r, k) for r in rows], lambda: None)
    assert stopped is None and len(jobs) == 2 * rounds
    mode = session.records[0]["precision_mode"]
    assert (mode["ended"], mode["rounds"]) == (ended, rounds)
    assert [k for k, _ in said] == list(range(1, rounds + 1))
    assert said[0][1] is None and said[-1][1][0] == "horovod"
    assert (said[-1][1][1] <= 0.05) == (ended == "resolved")


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
    from harness.core.record import read_records
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
    # a later tier is given with the comparison that resolved it: against the fastest row of the tier before
    recs += _records({"horovod": [50.0, 51.0, 49.0]})
    for r in recs:
        r["row_order"] = ["dp", "ddp", "spawn", "horovod"]
    lines = verdict.analyse(recs)["lines"]
    assert "; then ddp " in lines[0] and "ahead of horovod" in lines[0]


def test_a_tie_is_not_transitive_and_the_verdict_says_which_faster_row_a_later_one_is_not_resolved_against():
    # a ≈ b and b ≈ c, but a > c resolved: c is in a later tier because of a, and the verdict must not read as if b
    # were resolved ahead of it too (it once printed the baseline's unresolved ratio there)
    a_, b_, c_ = [100.0, 101.0, 99.0, 100.5, 99.5], [85.0, 115.0, 80.0, 110.0, 95.0], [90.0, 91.0, 89.0, 90.5, 89.5]
    an = verdict.analyse(_records({"a": a_, "b": b_, "c": c_}))
    assert an["tiers"] == [["a", "b"], ["c"]]
    # Checked with scipy.stats (Welch's t on the log values, outside harness/): a/c 1.1111 [1.0976, 1.1248] (df 7.91),
    # b/c 1.0672 [0.8777, 1.2976] (df 4.02: contains 1), a/b 1.0412 [0.8563, 1.2660].
    assert an["lines"][0] == ("**Verdict — fastest: a ≈ b (no difference resolvable among them)**; then a 1.11× "
                              "[1.10–1.12] ahead of c (not resolved against b: 1.07× [0.88–1.30]). (5 launches per "
                              "row, 95% intervals.)")
    # with b as the baseline, its own ratio to c is the one given (as in the table), said to be unresolved, with
    # the comparison that did resolve c's place
    first = verdict.analyse(_records({"a": a_, "b": b_, "c": c_}, baseline="b"))["lines"][0]
    assert first == ("**Verdict — fastest: a ≈ b (no difference resolvable among them)**; then b 1.07× [0.88–1.30] "
                     "ahead of c (not resolved; resolved behind a: 1.11× [1.10–1.12]). (5 launches per row, 95% "
                     "intervals.)")


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
