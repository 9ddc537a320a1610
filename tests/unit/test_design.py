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
    noise_floor.store_components(comp, "cpu")
    designed = comparison.plan(RunRequest(adapters=["ddp", "spawn"], out=tmp_path / "b"))
    want = noise_floor.best_steps(comp, plain.steps)
    assert designed.steps == want != plain.steps and designed.design["components"]["v"] == pytest.approx(0.04)
    assert f"--steps {want} " in designed.rerun  # the command that reproduces it names the steps it chose
    line = noise_floor.design_line(designed.design)
    assert line.startswith(f"Design: {want} timed steps per launch (the workload's own: {plain.steps})")
    assert "within a launch, between windows of 4 steps, SD 10.0%; between launches, beyond that, SD 15.2%" in line
    # --steps or --repeats given: the user's design, not this one
    assert comparison.plan(RunRequest(adapters=["ddp", "spawn"], steps=50, out=tmp_path / "c")).design is None
    assert comparison.plan(RunRequest(adapters=["ddp", "spawn"], repeats=3, out=tmp_path / "d")).design is None
    assert not any((tmp_path / x).exists() for x in "abcd")  # planning writes nothing
