"""`compare tune`'s search on launches of known noise (a stub launcher with set means and spreads), each adapter's
candidates against its Knobs, and its bad input: one line, exit 2, nothing written."""

import dataclasses
import math
import random

import pytest

import adapters
from harness.core import race as tuning
from harness.ground.errors import BadInput

from conftest import compare_cli


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def stub(means: dict[str, float], spread: float, seed: int, wall: float = 10.0, budget=None):
    """run_round over launches whose samples/s are log-normal around `means` with `spread` (sd of the log), each
    taking `wall` seconds of a fake clock."""
    rng, clock = random.Random(seed), Clock()
    backends: dict[str, list[str]] = {}
    for label in means:
        backends.setdefault(label.split(":")[0], []).append(label)

    def run_round(stage, k, labels):
        out = []
        for label in labels:
            clock.t += wall
            out.append({"adapter": label.split(":")[0], "label": label, "repeat": k, "status": "ok",
                        "samples_per_s": means[label] * math.exp(rng.gauss(0.0, spread)), "wall_time_s": wall,
                        "tune": {"stage": stage}, "world_size": 2,
                        "tune_plan": {"backends": backends, **({"budget_s": budget.seconds,
                                                                "per_backend": budget.per_backend, "halving": True}
                                                             if budget else {})},
                        "topology": {}, "controls": {"precision": "fp32"}})
        return out

    return backends, run_round, clock


def tune(means, spread, seed, budget=tuning.Budget(600.0)):
    backends, run_round, clock = stub(means, spread, seed, budget=budget)
    records, summary = tuning.search(backends, run_round, budget, clock=clock)
    return records, summary, tuning.confirmed(records), clock


def test_the_true_best_is_found_and_confirmed_and_the_slower_candidates_are_dropped():
    means = {"ddp": 100.0, "ddp:a=1": 100.0, "ddp:a=2": 130.0, "ddp:a=3": 90.0}
    found = 0
    for seed in range(40):
        records, summary, result, _ = tune(means, 0.03, seed)
        entry = result["ddp"]
        found += entry["winner"] == "ddp:a=2" and entry["gain"]["outcome"] == "faster"
        race = entry["race"]
        # a candidate is dropped only for being resolved slower than the best of its round
        assert all(d["why"] == "slower" and d["hi"] < 1 for d in race.dropped.values())
        assert "ddp:a=2" not in race.dropped
    assert found == 40


@pytest.mark.slow
def test_a_candidate_within_noise_is_not_declared_better():
    # every candidate the same: a winner other than the defaults would be a lucky launch; the confirmation's
    # two-sided 5% test lets at most ~2.5% through one way
    means = {"ddp": 100.0, "ddp:a=1": 100.0, "ddp:a=2": 100.0}
    wrong = sum(tune(means, 0.05, seed, tuning.Budget(240.0))[2]["ddp"]["winner"] != "ddp" for seed in range(200))
    assert wrong <= 10, wrong


@pytest.mark.slow
def test_a_small_true_gain_is_not_claimed_from_the_launches_that_chose_it():
    # two equal backends and a candidate 1% faster in 8% noise: the race cannot resolve it, and whatever it picks is
    # measured again on fresh launches, so the reported gain is not inflated by the choice
    means = {"ddp": 100.0, "ddp:a=1": 101.0, "horovod": 100.0, "horovod:b=1": 100.0}
    gains = [tune(means, 0.08, seed, tuning.Budget(300.0))[2] for seed in range(100)]
    claimed = sum(g["horovod"]["winner"] != "horovod" for g in gains)
    assert claimed <= 6, claimed


def test_the_whole_budget_is_respected_once_the_least_rounds_are_run():
    means = {"ddp": 100.0, "ddp:a=1": 100.0, "ddp:a=2": 100.0, "horovod": 50.0, "horovod:b=1": 50.0}
    # 3 race rounds of 5 launches (150 s) and 3 confirmation rounds of up to 4 (120 s) always run; 400 s leaves
    # room for more race rounds only while the confirmation still fits
    _, summary, _, clock = tune(means, 0.05, 1, tuning.Budget(400.0))
    assert clock.t <= 400.0, summary
    assert summary["race_rounds"] >= 3 and summary["confirm_rounds"] >= 3
    assert summary["race_ended"] == {"ddp": "budget", "horovod": "budget"}


def test_a_budget_per_backend_bounds_each_backends_launches():
    means = {"ddp": 100.0, "ddp:a=1": 100.0, "horovod": 50.0, "horovod:b=1": 50.0, "horovod:b=2": 50.0}
    _, summary, _, _ = tune(means, 0.05, 2, tuning.Budget(200.0, per_backend=True))
    assert all(s <= 200.0 for s in summary["spent_s"].values()), summary["spent_s"]


def test_a_budget_too_small_for_every_candidate_halves_them_after_the_first_round_and_still_finds_the_best():
    # 16 candidates at 10 s a launch: their least rounds (3 x 16 launches, then 3 x 4 confirmations) take 600 s
    means = {"ddp": 100.0, **{f"ddp:a={i}": 95.0 - i for i in range(8)}, "ddp:a=9": 130.0,
             "horovod": 50.0, **{f"horovod:b={i}": 48.0 - i for i in range(4)}}
    found = 0
    for seed in range(20):
        records, summary, result, clock = tune(means, 0.03, seed, tuning.Budget(400.0))
        assert clock.t <= 400.0, summary  # the first round (160 s), two more of what is left, the confirmation
        for backend, entry in result.items():
            race = entry["race"]
            left_out = {c for c, d in race.dropped.items() if d["why"] == "budget"}
            assert left_out and race.default not in left_out and {d["round"] for d in race.dropped.values()
                                                                  if d["why"] == "budget"} == {0}
            assert len([c for c in race.candidates if c not in left_out and c != race.default]) >= 1
            # each left out was no faster against its defaults in round 1 than any candidate kept
            kept = [c for c in race.candidates if c not in left_out and c != race.default]
            first = {c: race.values[c][0] / race.values[race.default][0] for c in race.candidates}
            assert max(first[c] for c in left_out) <= min(first[c] for c in kept)
        found += result["ddp"]["winner"] == "ddp:a=9"
    assert found == 20
    # the report replays the same choice from the records alone
    again = tuning.confirmed(records)
    assert {b: e["race"].dropped for b, e in again.items()} == {b: e["race"].dropped for b, e in result.items()}


def test_a_budget_per_backend_too_small_halves_each_backend_within_its_own():
    means = {"ddp": 100.0, **{f"ddp:a={i}": 100.0 for i in range(6)}, "horovod": 50.0, "horovod:b=1": 50.0}
    _, summary, result, _ = tune(means, 0.05, 4, tuning.Budget(200.0, per_backend=True))
    assert all(s <= 200.0 for s in summary["spent_s"].values()), summary["spent_s"]
    assert any(d["why"] == "budget" for d in result["ddp"]["race"].dropped.values())
    assert result["horovod"]["race"].dropped == {}  # two candidates fit its 200 s: nothing left out


def test_the_least_rounds_run_even_past_the_budget_and_a_failed_candidate_is_dropped_with_its_reason():
    backends, run_round, clock = stub({"ddp": 100.0, "ddp:a=1": 100.0}, 0.01, 3)

    def failing(stage, k, labels):
        recs = run_round(stage, k, labels)
        for r in recs:
            if r["label"] == "ddp:a=1":
                r.update(status="failed", reason="rank 1 killed by SIGKILL", samples_per_s=None)
        return recs

    records, summary = tuning.search(backends, failing, tuning.Budget(1.0), clock=clock)
    race = tuning.replay(records, backends)["ddp"]
    assert race.dropped == {"ddp:a=1": {"round": 0, "why": "failed", "reason": "rank 1 killed by SIGKILL"}}
    assert summary["race_ended"] == {"ddp": "one left"}
    assert summary["confirm_rounds"] == 0  # one backend whose defaults won: nothing to confirm


@pytest.mark.parametrize("name", [n for n in adapters.names() if adapters.get(n).TUNE])
def test_every_declared_candidate_is_a_knob_of_the_adapter_and_keeps_its_numerics(name):
    cls = adapters.get(name)
    fields = {f.name: f for f in dataclasses.fields(cls.Knobs)}
    assert set(cls.TUNE) <= set(fields), f"{name} tunes knobs it lacks: {set(cls.TUNE) - set(fields)}"
    labels = tuning.candidates(name, "cpu")  # builds every candidate and refuses one that changes the numerics
    assert labels[0] == name and len(labels) == 1 + sum(len(v) for v in cls.TUNE.values())
    base = tuning.numerics(cls({}, "cpu"))
    for label in labels[1:]:
        _, variant = label.split(":")[0], dict([label.split(":")[1].split("=")])
        assert tuning.numerics(cls(variant, "cpu")) == base, label


def test_the_budget_forms():
    assert tuning.parse_budget("20m") == tuning.Budget(1200.0, False)
    assert tuning.parse_budget("5m/backend") == tuning.Budget(300.0, True)
    # a sum of units, as `sleep` and a person write it (the larger first, each once)
    assert tuning.parse_budget("1h30m") == tuning.Budget(5400.0, False)
    assert tuning.parse_budget("2m 30s/backend") == tuning.Budget(150.0, True)
    for bad in ("0", "5x", "/backend", "0/backend", "-1m", "5m/backnd", "30m1h", "1h1h"):
        with pytest.raises(BadInput) as refused:
            tuning.parse_budget(bad)
        assert str(refused.value) == (f"--budget must be a duration above 0 and at most a week, for the whole tune "
                                      f"or for each backend, e.g. 20m or 5m/backend; got {bad!r}")


@pytest.mark.parametrize("args, message", [
    (["--budget", "0"], "--budget must be a duration above 0 and at most a week, for the whole tune or for each "
                        "backend, e.g. 20m or 5m/backend; got '0'"),
    (["-a", "dp"], "nothing to tune: dp declares no tunable knobs; adapters with tunable knobs: ddp, spawn, amp, "
                   "apex, horovod, deepspeed, fsdp (or name knobs with --tune ADAPTER.KNOB=V1,V2)"),
    (["-a", "ddp", "--tune", "ddp.nope"], "--tune ddp.nope: adapter ddp has no knob 'nope'; its tunable knobs: "
                                          "bucket_cap_mb, gradient_as_bucket_view, static_graph, compile (every knob: "
                                          "`compare knobs ddp`)"),
    (["-a", "ddp", "--tune", "ddp.comm_hook=fp16"], "--tune ddp.comm_hook=fp16 changes the numerics (fp32/none -> "
                                                    "fp32/fp16): compare it as a row of its own (compare run -a "
                                                    "ddp:comm_hook=fp16), not as a tuning of speed"),
    (["-a", "ddp", "--tune", "ddp.powersgd_rank"], "--tune ddp.powersgd_rank: ddp declares no candidate values for "
                                                   "'powersgd_rank'; give them, e.g. --tune ddp.powersgd_rank=V1,V2"),
    (["-a", "ddp", "--tune", "horovod.cycle_time_ms"], "--tune horovod.cycle_time_ms: adapter 'horovod' is not in "
                                                       "this tune (ddp)"),
    (["-a", "ddp:bucket_cap_mb=1"], "adapter 'ddp:bucket_cap_mb=1': compare tune starts from each adapter's "
                                    "defaults, so give plain names (-a ddp); fix a knob for every candidate with "
                                    "--knob ddp.KNOB=VALUE"),
    (["-a", "ddp", "--tune", "ddp.bucket_cap_mb=0"], "--tune ddp.bucket_cap_mb=0: knob 'bucket_cap_mb' must be a "
                                                     "positive number of MiB (DDP's default: 25); got 0"),
    # a knob fixed with -k is refused as compare run refuses it (it once ended in an OptionError traceback)
    (["-a", "ddp", "-k", "ddp.nope=1"], "adapter ddp: unknown knob 'nope'; valid knobs: broadcast_buffers, "
                                        "bucket_cap_mb, comm_hook, compile,"),
    (["-a", "ddp", "-k", "ddp.bucket_cap_mb=-1"], "adapter ddp: knob 'bucket_cap_mb' must be a positive number of MiB"),
    (["-a", "ddp", "-k", "horovod.cycle_time_ms=5"], "knob 'horovod.cycle_time_ms' is for adapter 'horovod', which is "
                                                     "not in this run (ddp)"),
    (["-a", "ddp", "-k", "ddp.bucket_cap_mb=5", "--tune", "ddp.bucket_cap_mb=1"],
     "--tune ddp.bucket_cap_mb searches a knob that --knob ddp.bucket_cap_mb=5 fixes; give one of them"),
    # a candidate given twice, or one that would never be raced, was collapsed without a word (issue 64)
    (["-a", "ddp", "--tune", "ddp.bucket_cap_mb=1,1"],
     "--tune ddp.bucket_cap_mb=1,1: value 1 is listed twice; give each candidate once"),
    (["-a", "ddp", "--tune", "ddp.bucket_cap_mb=1,1.0"],
     "--tune ddp.bucket_cap_mb: values 1 and 1.0 are the same value; give each candidate once"),
    (["-a", "ddp", "--tune", "ddp.bucket_cap_mb=1", "--tune", "ddp.bucket_cap_mb=2"],
     "--tune ddp.bucket_cap_mb is given twice; give every value in one: --tune ddp.bucket_cap_mb=V1,V2"),
    (["-a", "ddp", "--tune", "ddp.bucket_cap_mb=1,,2"],
     "--tune 'ddp.bucket_cap_mb=1,,2' has an empty value (two commas in a row, or one at an end); e.g. --tune "
     "ddp.bucket_cap_mb=1,5,100"),
    (["-a", "ddp", "--tune", "ddp.compile=false"],
     "--tune ddp.compile=false: false is ddp's own value of 'compile', which its defaults row already races; give "
     "other values"),
    # an outside check: a knob left unset (None, DDP's own) was not matched against DDP's own value, so the tune raced
    # the defaults row against itself and could name it a winner
    (["-a", "ddp", "--tune", "ddp.gradient_as_bucket_view=false"],
     "--tune ddp.gradient_as_bucket_view=false: false is ddp's own value of 'gradient_as_bucket_view', which its "
     "defaults row already races; give other values"),
    (["-a", "ddp", "--tune", "ddp.static_graph=false"],
     "--tune ddp.static_graph=false: false is ddp's own value of 'static_graph', which its defaults row already "
     "races"),
])
def test_bad_input_is_one_line_and_exit_2_with_nothing_written(tmp_path, args, message):
    out = tmp_path / "o"
    proc = compare_cli("tune", *args, "--out", str(out))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {message}"), proc.stderr
    assert not out.exists()


def test_a_backend_that_cannot_run_here_is_left_out_with_its_reason_and_the_others_are_planned(tmp_path):
    from harness.core import tuning as tune_plan
    from harness.core.requests import TuneRequest

    tp = tune_plan.plan(TuneRequest(adapters=["ddp", "apex", "dp"], tune=["ddp.bucket_cap_mb=1"],
                                    out=tmp_path / "o"))
    assert tp.backends == {"ddp": ["ddp", "ddp:bucket_cap_mb=1"]}
    assert list(tp.unavailable) == ["apex"] and "CUDA" in tp.unavailable["apex"]
    assert tp.untunable == {"dp": "it declares no tunable knobs"} and tp.skipped == {}
    assert tp.run.rerun.startswith("compare tune --adapters ddp,apex ") and "--tune ddp.bucket_cap_mb=1" in tp.run.rerun
    assert not (tmp_path / "o").exists()  # planning writes nothing


# ---- --min-gain: a tune that can find what it looks for (issue 65) --------------------------------------------------

def _ten_percent(seed, budget, min_gain=0.10):
    """One backend, four candidates as fast as its defaults and one truly 10% faster, 5% launch-to-launch noise."""
    means = {"ddp": 100.0, "ddp:a=1": 100.0, "ddp:a=2": 110.0, "ddp:a=3": 100.0, "ddp:a=4": 100.0}
    backends, run_round, clock = stub(means, 0.05, seed, budget=budget)
    records, summary = tuning.search(backends, run_round, budget, clock=clock, min_gain=min_gain)
    return records, summary


def test_a_candidate_truly_10_percent_faster_is_confirmed_at_least_80_percent_of_the_time_at_the_budget_asked():
    # what the tune says it needs (its race and confirmation sized from the race's own variance for --min-gain 10%),
    # then the same launches within exactly that budget: the faster candidate is the race pick and is confirmed
    confirmed = 0
    seeds = 60
    for seed in range(seeds):
        _, asked = _ten_percent(seed, tuning.Budget(1e6))
        assert asked["min_gain"] == 0.10 and asked["confirm_rounds"] == asked["confirm_planned"] >= 3
        records, summary = _ten_percent(seed, tuning.Budget(asked["needed_s"]))
        entry = tuning.confirmed(records)["ddp"]
        confirmed += entry["winner"] == "ddp:a=2" and entry["gain"]["outcome"] == "faster"
    assert confirmed / seeds >= 0.80, confirmed


def test_a_budget_too_small_for_the_plan_says_the_smallest_gain_it_could_have_confirmed(tmp_path):
    from harness.reports import tune_report

    records, summary = _ten_percent(3, tuning.Budget(160.0))
    assert summary["confirm_rounds"] < summary["confirm_planned"] and summary["needed_s"] > 160.0
    entry = tuning.confirmed([{**r, "tune_summary": summary} for r in records])["ddp"]
    variance = summary["plans"]["ddp"]["variance"]
    rounds = summary["confirm_rounds"]
    assert entry["detectable"] == pytest.approx(tuning.detectable(variance, rounds, 1))
    assert entry["detectable"] > 0.10  # more than the gain asked for: what this tune could not have found
    # by hand: (t(0.975, n-1) + t(0.8, n-1)) x s / sqrt(n)
    from scipy import stats as sp

    by_hand = math.expm1((sp.t.ppf(0.975, rounds - 1) + sp.t.ppf(0.8, rounds - 1)) * math.sqrt(variance / rounds))
    assert entry["detectable"] == pytest.approx(by_hand)
    sizing = tune_report._sizing(summary, {})
    assert sizing[0].startswith("Sized for a gain of 10% over the defaults (`--min-gain`)")
    assert f"the confirmation ran {rounds} of its {summary['confirm_planned']} planned rounds" in sizing[0]


def test_the_rounds_a_gain_needs_are_the_textbook_power_calculation():
    from scipy import stats as sp

    # paired t, two-sided 5%, 90% power, SD 0.05 per round, gain 5% (log 0.048790): n = 14 is the fewest with
    # (t(0.975, n-1) + t(0.9, n-1)) x 0.05 / sqrt(n) <= 0.048790: at 13, (2.179 + 1.356) x 0.013868 = 0.049022
    n = tuning.confirm_rounds(0.05 ** 2, 0.05, 1)
    assert n == 14
    lhs = lambda k: (sp.t.ppf(0.975, k - 1) + sp.t.ppf(0.9, k - 1)) * 0.05 / math.sqrt(k)
    assert lhs(n) <= math.log1p(0.05) < lhs(n - 1)
    # Holm over 4 backends is sized at its strictest (Bonferroni): more rounds
    assert tuning.confirm_rounds(0.05 ** 2, 0.05, 4) > n
    # the race: a candidate 10% faster than 4 others is the pick 95% of the time: Phi(d sqrt(R) / s)^4 >= 0.95
    r = tuning.select_rounds(0.05 ** 2, 0.10, 5)
    p = lambda k: sp.norm.cdf(math.log1p(0.10) * math.sqrt(k) / 0.05) ** 4
    assert p(r) >= 0.95 and (r == tuning.MIN_ROUNDS or p(r - 1) < 0.95)
    # sized from the variance's 80% upper confidence bound: s^2 x df / chi2(0.2, df)
    assert tuning.variance_upper(1.0, 4) == pytest.approx(4 / sp.chi2.ppf(0.2, 4))


@pytest.mark.parametrize("bad", ["0", "-5%", "abc", "100%"])
def test_min_gain_bad_input_is_one_line_and_exit_2(tmp_path, bad):
    out = tmp_path / "o"
    proc = compare_cli("tune", "-a", "ddp", "--min-gain", bad, "--out", str(out))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"error: --min-gain must be a percentage of at least 0.01% and below 100%, e.g. 5%; got "
                           f"'{bad}'\n")
    assert not out.exists()


def test_a_tune_from_before_the_race_variance_was_kept_says_its_smallest_gain_from_the_confirmations_spread():
    # the committed widemlp tunes printed "–" in the column their text promised; the confirmation's own paired log
    # ratios give it, by hand (t(0.975, n-1) + t(0.8, n-1)) x s / sqrt(n)
    import statistics

    from scipy import stats as sp

    records, summary = _ten_percent(3, tuning.Budget(1e6))
    old = {k: v for k, v in summary.items() if k != "plans"}
    entry = tuning.confirmed([{**r, "tune_summary": old} for r in records])["ddp"]
    best, default = entry["values"][entry["best"]], entry["values"][entry["default"]]
    logs = [math.log(best[k] / default[k]) for k in sorted(set(best) & set(default))]
    n = len(logs)
    by_hand = math.expm1((sp.t.ppf(0.975, n - 1) + sp.t.ppf(0.8, n - 1)) * statistics.stdev(logs) / math.sqrt(n))
    assert entry["detectable"] == pytest.approx(by_hand) and entry["detectable_from"] == "confirmation"
    assert "detectable_from" not in tuning.confirmed([{**r, "tune_summary": summary} for r in records])["ddp"]
