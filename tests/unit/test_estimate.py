"""What a run will cost, said before it is paid (harness/core/estimate.py): figures kept per row on this machine,
priced for another run length, the rows never run here priced from the run's first launch."""

from types import SimpleNamespace

import pytest

from harness.core import estimate


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPARE_CACHE", str(tmp_path))


def _plan(workload="digits", world_size=2, steps=100):
    req = SimpleNamespace(workload=workload, options=[], world_size=world_size, device="cpu", threads=None)
    return SimpleNamespace(request=req, global_batch=64, topology=None, steps=steps, warmup=0, equiv_steps=3)


def test_durations_as_a_person_says_them():
    assert [estimate.duration(s) for s in (0.2, 40, 89, 90, 1799, 3600, 4800)] == [
        "1 s", "40 s", "89 s", "2 min", "30 min", "1 h 0 min", "1 h 20 min"]


def test_a_row_run_here_before_is_priced_for_this_runs_length():
    plan = _plan()
    # 12 s, of which 4 s were its 40 steps: 8 s fixed + 0.1 s a step
    estimate.remember(plan, "ddp", 12.0, 40, 4.0)
    estimate.remember(plan, "reference", 5.0, 3, 0.3)
    f = estimate.Forecast([(plan, "ddp")] * 3, [plan])
    assert f.left() == pytest.approx(3 * (8.0 + 0.1 * 100) + 5.0)
    assert f.line() == "3 launch(es): about 59 s (from this machine's last launches of every row)"
    f.ended(plan, "reference", 5.0)
    f.ended(plan, "ddp", 18.0)
    assert f.left() == pytest.approx(2 * 18.0)
    other = estimate.Forecast([(_plan(world_size=4), "ddp")])  # another world size: not this row
    assert other.left() is None
    # a sweep's points: each launch priced at its own plan's length
    short = _plan(steps=20)
    assert estimate.Forecast([(plan, "ddp"), (short, "ddp")]).left() == pytest.approx(18.0 + 10.0)


def test_rows_never_run_here_are_priced_from_the_runs_first_launch():
    plan = _plan(steps=50)
    f = estimate.Forecast([(plan, label) for label in ("ddp", "horovod", "ddp", "horovod")])
    assert f.line() == ("4 launch(es); no estimate yet: none of these rows has run on this machine with these "
                        "settings (one follows the first launch)")
    assert f.left() is None
    assert f.ended(plan, "ddp", 10.0) == "about 30 s left (the rows never run here priced as this one)"
    assert f.ended(plan, "horovod", 20.0) is None  # said once
    estimate.remember(plan, "ddp", 10.0, 50, 5.0)
    half = estimate.Forecast([(plan, "ddp"), (plan, "horovod")])
    assert half.line() == ("2 launch(es): about 20 s (from this machine's last launches of 1 of the 2 rows, the "
                           "others taken as their average)")


def test_an_unreadable_cache_only_loses_the_estimate(tmp_path):
    (tmp_path / estimate.FILE).write_text("{not json")
    plan = _plan(steps=10)
    assert estimate.Forecast([(plan, "ddp")]).left() is None
    estimate.remember(plan, "ddp", 3.0, 10, 1.0)  # and is replaced by a good one
    assert estimate.Forecast([(plan, "ddp")]).left() == pytest.approx(3.0)


def test_the_verdicts_advice_says_what_it_would_cost_here():
    import json

    from harness.reports import verdict

    from conftest import RUNS, records_text

    records = [json.loads(line) for line in records_text(RUNS / "digits_cpu2_20261126-045209").splitlines()]
    once = [r for r in records if r.get("repeat", 0) == 0]
    for r in once:
        r.pop("until_target", None)
        r["wall_time_s"] = 6.0  # ten rounds of k rows: 60 k seconds
    analysis = verdict.analyse(once)
    text = " ".join(verdict.markdown(analysis))
    assert f"`--repeats 10` (about {len(analysis['ranked'])} min here, from these launches' times)" in text


def test_a_comm_run_is_priced_from_this_machines_last_launches_of_the_same_ops_and_sizes():
    req = SimpleNamespace(dtype="fp32", max_iters=50, gap_s=0.0, world_size=2, device="cpu", threads=None)
    plan = SimpleNamespace(request=req, ops=["all_reduce"], sizes=[1024, 2**20], topology=None)
    keys = [estimate.comm_key(plan, b) for b in ("torch", "horovod")]
    assert estimate.comm_line(keys) == ("2 launch(es); no estimate yet: none of these backends has run these ops and "
                                        "sizes on this machine", None)
    estimate.remember_seconds(keys[0], 12.0)
    assert estimate.comm_line(keys) == ("2 launch(es): about 24 s (from this machine's last launches of 1 of the 2 "
                                        "backends, the others taken as their average)", 24.0)
    plan.sizes = [1024]  # other sizes: another launch
    assert estimate.comm_line([estimate.comm_key(plan, "torch")])[1] is None


def test_a_large_model_is_said_before_the_first_launch_from_this_machines_fastest_row(monkeypatch):
    # no row has run here: a matmul is timed now, and said to be what the estimate rests on
    monkeypatch.setattr(estimate, "matmul_speed", lambda threads: 100e9)
    line = estimate.size_line("hf (model=gpt2-124m)", 124_439_808, 96.7e9, 4, 23, "cpu", 1)
    assert line == ("hf (model=gpt2-124m) is large for this machine: 124.4 M parameters, 0.39 TFLOP a step on each "
                    "rank (96.7 GFLOP a sample, 4 a rank), at least 4 s a step and 89 s for the 23 steps of each "
                    "launch (from an fp32 matmul timed now at 1 thread(s), 100.0 GFLOP/s, as no row has run on this "
                    "machine yet: a training step reaches only part of that)")
    # a model no CPU core could step through in under a second is never timed, and small: nothing said
    monkeypatch.setattr(estimate, "matmul_speed", lambda threads: pytest.fail("timed a small model"))
    assert estimate.size_line("digits", 85_002, 5e5, 32, 300, "cpu", 1) is None
    # the fastest a row reached here at these threads is what later estimates rest on
    estimate.remember_speed("cpu", 1, 20e9, "ddp on hf, 2026-12-01")
    estimate.remember_speed("cpu", 1, 10e9, "spawn on digits, 2026-12-02")  # slower: not kept
    estimate.remember_speed("cpu", 2, 90e9, "ddp on widemlp, 2026-12-02")  # other threads: another machine setting
    line = estimate.size_line("hf (model=gpt2-124m)", 124_439_808, 96.7e9, 4, 23, "cpu", 1)
    assert line.endswith("at least 19 s a step and 7 min for the 23 steps of each launch (from the fastest any row "
                         "has run on this machine at 1 thread(s) a rank, 20.0 GFLOP/s (ddp on hf, 2026-12-01))")
    assert estimate.size_line("tiny", 1_000, 1e9, 4, 23, "cpu", 1) is None  # 0.2 s a step: not large
    assert estimate.size_line("hf", None, 96.7e9, 4, 23, "cuda", 1) is None  # no speed known for this GPU
