"""Variance components and the design a default run takes from them (issue 65, item 2; Kalibera & Jones, ISMM 2013):
the components against hand-computed values, the steps that buy the narrowest intervals per minute, and a default
`compare run` planned with them (no launch: planning only)."""

import math

import pytest

from harness.core import design as noise_floor  # the components and the design (harness/core/design.py)

# Five launches of 20 timed steps, cut into 5 windows of 4: within every launch the windows' log throughput is
# -0.1, +0.1, -0.1, +0.1, 0 about its mean (variance 0.04 / 4 = 0.01 on 4 df each, pooled 0.01), and the launches sit
# at log offsets 0, -0.2, +0.2, -0.1, +0.1 (variance 0.1 / 4 = 0.025). v = 0.01 x 4 steps = 0.04, so the steps inside
# a launch of 20 explain 0.04 / 20 = 0.002 of the launches' variance: between launches 0.023.
OFFSETS = [0.0, 0.2, -0.2, 0.1, -0.1]
WINDOW = [0.1, -0.1, 0.1, -0.1, 0.0]
BASE = 0.005  # seconds a step


def _launch(k, offset):
    times = [BASE * math.exp(offset + w) for w in WINDOW for _ in range(4)]
    return {"status": "ok", "label": "ddp", "workload": "digits", "repeat": k, "samples_per_s": 64 * 20 / sum(times),
            "step_times_s": times, "wall_time_s": 5.0 + 22 * BASE, "controls": {"steps": 20, "warmup": 2},
            "time_utc": "2026-11-28T00:00:00+00:00"}


def test_the_components_are_the_variance_within_a_launch_and_between_launches():
    comp = noise_floor.components([_launch(k, o) for k, o in enumerate(OFFSETS)])
    assert comp["window_var"] == pytest.approx(0.01) and comp["window_steps"] == 4 and comp["steps"] == 20
    assert comp["v"] == pytest.approx(0.04)
    assert comp["launch_total_var"] == pytest.approx(0.025)
    assert comp["launch_var"] == pytest.approx(0.023)
    # a step's mean time over the launches, and what a launch costs besides its 22 steps
    mean_step = sum(BASE * math.exp(o + w) for o in OFFSETS for w in WINDOW) / 25
    assert comp["step_s"] == pytest.approx(mean_step) and comp["fixed_s"] == pytest.approx(5.0 + 22 * BASE - 22 * mean_step)
    assert noise_floor.components([_launch(k, o) for k, o in enumerate(OFFSETS[:2])]) is None  # 2 launches


def test_the_designed_steps_minimise_a_rows_variance_per_second_within_bounds():
    comp = {"v": 0.04, "launch_var": 0.023, "fixed_s": 5.0, "step_s": 0.005, "steps": 20}
    # s* = sqrt(v c0 / (sigma_L^2 t)) = sqrt(0.04 x 5 / (0.023 x 0.005)) = 41.7: 42 steps
    assert noise_floor.best_steps(comp, 40) == 42
    # the variance per second (sigma_L^2 + v/s)(c0 + s t) is lowest there
    cost = lambda s: (0.023 + 0.04 / s) * (5.0 + s * 0.005)
    assert cost(42) <= min(cost(30), cost(60))
    assert noise_floor.best_steps(comp, 400) == 100  # never below a quarter of the workload's own
    assert noise_floor.best_steps(comp, 4) == 32  # nor above 8 times it
    assert noise_floor.best_steps({**comp, "launch_var": 0.0}, 40) == 320  # no variance between launches: longest
    buy = noise_floor.buys({**comp, "steps": 20})
    # twice the steps: (0.023 + 0.001) / (0.023 + 0.002) of the variance, sqrt of it narrower by 2.02%
    assert buy["steps"] == pytest.approx(1 - math.sqrt(0.024 / 0.025)) and buy["launches"] == pytest.approx(
        1 - math.sqrt(0.5))


def test_a_default_run_takes_its_steps_from_this_machines_components(tmp_path, monkeypatch):
    from harness.core import comparison
    from harness.core.requests import RunRequest

    monkeypatch.setenv("COMPARE_CACHE", str(tmp_path / "cache"))
    plain = comparison.plan(RunRequest(adapters=["ddp", "spawn"], out=tmp_path / "a"))
    assert plain.design == {"steps": plain.steps, "workload_steps": plain.steps, "components": None}
    assert noise_floor.design_line(plain.design).startswith(
        f"Design: the workload's {plain.steps} timed steps per launch, rounds while they fit the budget (this machine "
        "had no variance components for it")
    comp = noise_floor.components([_launch(k, o) for k, o in enumerate(OFFSETS)])
    # a cache that cannot be written keeps nothing, and doctor says so from this (it said a default run would use
    # them, and the run said it had none)
    monkeypatch.setenv("COMPARE_CACHE", str(tmp_path / "a-file"))
    (tmp_path / "a-file").write_text("")
    assert noise_floor.store_components(comp, "cpu") is False
    monkeypatch.setenv("COMPARE_CACHE", str(tmp_path / "cache"))
    assert noise_floor.store_components(comp, "cpu") is True
    designed = comparison.plan(RunRequest(adapters=["ddp", "spawn"], out=tmp_path / "b"))
    # neither row has run here: both priced as the launch the components were measured on, in the 180 s budget
    want = noise_floor.best_design(comp, [(comp["fixed_s"], comp["step_s"])] * 2, plain.warmup, 180.0, plain.steps)
    assert designed.steps == want["steps"] != plain.steps and designed.design["components"]["v"] == pytest.approx(0.04)
    assert designed.design["rounds"] == want["rounds"] >= 3 and designed.design["rows_priced"] == 0
    assert f"--steps {want['steps']} " in designed.rerun  # the command that reproduces it names the steps it chose
    line = noise_floor.design_line(designed.design)
    assert line.startswith(f"Design: {want['steps']} timed steps per launch (the workload's own: {plain.steps}) and "
                           f"{want['rounds']} rounds, so {want['rounds']} launches per row, expected in the 180 s "
                           "budget")
    assert "within a launch, between windows of 4 steps, SD 10.0%; between launches, beyond that, SD 15.2%" in line
    assert "0 of the 2 rows priced from their last launches here" in line
    # --steps or --repeats given: the user's design, not this one
    assert comparison.plan(RunRequest(adapters=["ddp", "spawn"], steps=50, out=tmp_path / "c")).design is None
    assert comparison.plan(RunRequest(adapters=["ddp", "spawn"], repeats=3, out=tmp_path / "d")).design is None
    assert not any((tmp_path / x).exists() for x in "abcd")  # planning writes nothing


def test_the_design_is_the_narrowest_t_interval_the_budget_buys_and_its_3_rounds_fit():
    """The first design (s* for one row, no budget) gave the default digits run here 2,021 steps a launch, whose 3
    rounds took 4.6 to 6.7 minutes of a 3-minute budget: the design is now the t interval over the rounds that fit."""
    from harness.ground.stats import t_quantile

    # this machine's doctor on digits (2026-11-28): v = 0.118^2 x 56 steps, sigma_L = 1.7%, 4.0 s + 2.71 ms a step
    comp = {"v": 0.118 ** 2 * 56, "launch_var": 0.017 ** 2, "fixed_s": 4.0, "step_s": 0.00271, "steps": 280}
    assert noise_floor.best_steps(comp, 280) > 1900  # one row, no budget: long launches
    rows = [(4.0, 0.00271)] * 7 + [(6.0, 0.0135)]  # 8 rows, one of them (fsdp) five times slower a step
    got = noise_floor.best_design(comp, rows, 20, 180.0, 280)
    round_s = lambda s: sum(c0 + (s + 20) * t for c0, t in rows)
    assert got["fits"] and 3 * round_s(got["steps"]) <= 180.0 < 3 * round_s(got["steps"] + 1) or got["rounds"] > 3
    assert got["rounds"] == int(180.0 // round_s(got["steps"]))

    def half(s):
        n = int(180.0 // round_s(s))
        return t_quantile(0.975, n - 1) * math.sqrt((comp["launch_var"] + comp["v"] / s) / n)

    lo, hi = noise_floor.bounds(280)
    fitting = [s for s in range(lo, hi + 1) if int(180.0 // round_s(s)) >= 3]
    assert half(got["steps"]) == min(half(s) for s in fitting)
    assert max(fitting) < 1900  # the unbounded optimum does not fit 3 rounds
    # a budget too small for 3 rounds of even the shortest launches: the workload's own steps, said so
    tight = noise_floor.best_design(comp, rows, 20, 60.0, 280)
    assert tight == {"steps": 280, "rounds": 3, "fits": False}
    line = noise_floor.design_line({"steps": 280, "workload_steps": 280, "components": {
        **comp, "window_var": 0.118 ** 2, "window_steps": 56, "launches": 10, "label": "ddp", "date": "2026-11-28"},
        "budget_s": 60.0, "rows": 8, "rows_priced": 8, "rounds": 3, "fits": False})
    assert line.startswith("Design: the workload's 280 timed steps per launch: no steps within 0.25–8× its own let 3 "
                           "rounds of the 8 rows fit the 60 s budget")
