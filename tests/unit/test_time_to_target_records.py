"""Time to target and time per epoch, from records alone: the accounting of one row from its ranks' results, the
epoch arithmetic, the seed blog's order, the verdict on fp32 step counts, and the contracts that carry them."""

import copy
import json
from types import SimpleNamespace

import pytest

from harness import reports as report
from harness.core.assemble import until_target
from harness.ground.record import check_record
from harness.reports import epoch, run_report, ttt
from harness.shared.rank_result import TrainResult
from workloads.base import Workload

from conftest import RUNS, records_text

BLOG_RUN = RUNS / "digits_cpu2_20261123-113816"  # dp, ddp, spawn, amp, apex (unavailable), horovod, ds


def _records(run=BLOG_RUN, train_samples=1437):
    records = [json.loads(line) for line in records_text(run).splitlines()]
    for r in records:
        if "controls" in r and train_samples is not None:
            r["controls"]["train_samples"] = train_samples
    return records


# ---- one row's accounting, from what its ranks recorded ------------------------------------------------------

def _rank(rank, step_end, eval_end, snapshot_s, metrics):
    return TrainResult(rank=rank, world_size=2, snapshot_s=snapshot_s,
                       evals=[{"step": s, "step_end_wall": step_end[i], "eval_end_wall": eval_end[i], "eval_s": 0.0,
                               "local": [0, 0, 0], "reduced_mean": [m * 180, 180.0, 1.0]}
                              for i, (s, m) in enumerate(metrics)])


def test_time_to_target_accounting_from_the_ranks_results():
    spec = SimpleNamespace(target=0.95, eval_every=2, steps=10, equiv_steps=3)
    outcome = SimpleNamespace(launch_wall=1000.0, gate_wait_s=0.0)
    metrics = [(2, 0.5), (4, 0.9), (6, 0.96), (8, 0.97)]
    # Rank 1 ends every step 10 ms after rank 0; rank 0 then waits for it inside the evaluation's all-reduce.
    r0 = _rank(0, [1005.00, 1006.00, 1007.00, 1008.0], [1005.11, 1006.21, 1007.31, 1008.4], 0.2, metrics)
    r1 = _rank(1, [1005.01, 1006.01, 1007.01, 1008.01], [1005.11, 1006.21, 1007.31, 1008.4], 0.25, metrics)
    steps = [0.5, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]  # slowest rank per step
    t = until_target(spec, outcome, [r0, r1], steps, SimpleNamespace(metric_name="test accuracy"))
    assert t["reached"] is True and t["steps_to_target"] == 6 and t["steps_run"] == 8
    assert t["train_time_to_target_s"] == pytest.approx(1.0)  # steps 1..6, the first (slow) one included
    # An evaluation lasts from the last rank's step end to the last rank's evaluation end: 0.1, 0.2, 0.3, 0.39 s.
    assert t["eval_s_each"] == pytest.approx([0.1, 0.2, 0.3, 0.39])
    assert t["eval_time_before_target_s"] == pytest.approx(0.3)  # the evaluations after steps 2 and 4 only
    # Launch to the end of step 6 on the last rank: 7.01 s, less the evaluations before it (0.3 s) and the
    # parameter snapshot after step 3 (0.25 s, the slowest rank's).
    assert t["target_step_end_s"] == pytest.approx(7.01)
    assert t["e2e_time_to_target_s"] == pytest.approx(7.01 - 0.3 - 0.25)
    assert t["startup_to_target_s"] == pytest.approx(7.01 - 0.3 - 0.25 - 1.0)
    assert [c[0] for c in t["curve"]] == [2, 4, 6, 8]  # [step, training seconds so far, metric]
    assert [c[1] for c in t["curve"]] == pytest.approx([0.6, 0.8, 1.0, 1.2])
    assert [c[2] for c in t["curve"]] == pytest.approx([0.5, 0.9, 0.96, 0.97])
    assert t["best_step"] == 8 and t["best_metric"] == t["final_metric"] == pytest.approx(0.97)


def test_a_snapshot_after_the_target_step_is_not_subtracted_and_a_missed_target_has_no_times():
    outcome = SimpleNamespace(launch_wall=0.0, gate_wait_s=0.0)
    r = _rank(0, [3.0, 5.0], [3.5, 5.5], 0.2, [(2, 0.96), (4, 0.97)])
    t = until_target(SimpleNamespace(target=0.95, eval_every=2, steps=4, equiv_steps=2), outcome, [r],
                     [1.0] * 4, SimpleNamespace(metric_name="acc"))
    assert t["e2e_time_to_target_s"] == pytest.approx(3.0)  # the snapshot after step 2 came after the target
    t = until_target(SimpleNamespace(target=0.99, eval_every=2, steps=4, equiv_steps=2), outcome, [r],
                     [1.0] * 4, SimpleNamespace(metric_name="acc"))
    assert t["reached"] is False and t["steps_to_target"] is None and t["e2e_time_to_target_s"] is None
    assert t["best_step"] == 4 and t["best_metric"] == pytest.approx(0.97)


# ---- time per epoch and the seed blog's chart ----------------------------------------------------------------

def test_epoch_arithmetic_and_the_seed_blogs_order():
    records = _records()
    rows = run_report.table_rows(records)
    entries = epoch.epoch_rows(records, rows)
    # The seed's order (nn.DataParallel, torch.distributed, torch.multiprocessing, apex, horovod), then ours.
    assert [e["label"] for e in entries] == ["dp", "ddp", "spawn", "apex", "horovod", "amp", "deepspeed"]
    assert [e["blog_label"] for e in entries[:5]] == ["nn.DataParallel", "torch.distributed",
                                                      "torch.multiprocessing", "apex", "horovod"]
    apex = entries[3]
    assert apex["measured"] is False and apex["status"] == "unavailable" and "CUDA" in apex["reason"]
    by_label = {r["adapter"]: r for r in rows}
    for e in (x for x in entries if x["measured"]):
        # 1437 samples, batch 64: 22 full batches (the 23rd, partial, is dropped), 1408 samples per epoch.
        assert (e["steps"], e["samples"]) == (22, 1408)
        assert e["epoch_s"] == pytest.approx(1408 / by_label[e["label"]]["samples_per_s"])
        assert e["epoch_s"] == pytest.approx(22 * 64 / by_label[e["label"]]["samples_per_s"])
        assert e["eval_per_epoch_s"] is None  # a fixed-length run measures no periodic evaluation
    assert epoch.samples_per_epoch(1408, 64) == (22, 1408) and epoch.samples_per_epoch(63, 64) == (0, 0)
    # an outside check: the chart a blog copies drew dp, one process on one device of 2 on the CPU, as the shortest
    # epoch and said nowhere on it that the verdict leaves dp out of its ranking; its table row says so too now
    assert [e["not_ranked"] for e in entries if e["measured"]] == [
        "1 of 2 devices: not ranked" if e["label"] == "dp" else None for e in entries if e["measured"]]
    line = next(x for x in epoch.section(entries) if x.startswith("| dp "))
    assert line.startswith("| dp (1 of 2 devices: not ranked) | nn.DataParallel |")
    assert epoch._s(2.6) == "2.60" and epoch._s(0.0162) == "0.0162" and epoch._s(123.4) == "123"


def test_evaluation_per_epoch_in_an_until_target_run():
    records = [r for r in _records() if r["label"] == "ddp"]
    for r in records:
        r["until_target"] = {"target": 0.95, "metric": "test accuracy", "eval_every": 11, "max_steps": 500}
        r["ttt"] = {"eval_every": 11, "eval_s_each": [0.002, 0.004, 0.003]}
    (entry,) = epoch.epoch_rows(records, run_report.table_rows(records))
    # Median evaluation 3 ms, 22 / 11 = 2 evaluations per epoch.
    assert entry["eval_s"] == pytest.approx(0.003) and entry["eval_per_epoch_s"] == pytest.approx(0.006)


def test_the_chart_is_always_written_and_records_without_a_training_set_size_get_none(tmp_path):
    records = _records()
    report.render(tmp_path, records)
    text = (tmp_path / "report.md").read_text()
    assert "## Time per epoch" in text and "![epoch_time](epoch_time.png)" in text
    assert "| apex | apex | | **unavailable** |" in text
    assert (tmp_path / "epoch_time.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    old = tmp_path / "old"
    old.mkdir()
    report.render(old, _records(train_samples=None))  # records from before controls.train_samples: nothing guessed
    assert "Time per epoch" not in (old / "report.md").read_text() and not (old / "epoch_time.png").exists()


# ---- the verdict ----------------------------------------------------------------------------------------------

def _ttt_records(steps_by_label: dict[str, list[int | None]], precision=None):
    base = next(r for r in _records(RUNS / "digits_cpu2_20261123-101734") if r["label"] == "ddp")
    records = []
    for label, per_repeat in steps_by_label.items():
        for repeat, n in enumerate(per_repeat):
            r = copy.deepcopy(base)
            r.update(label=label, adapter=label, repeat=repeat, row_order=list(steps_by_label),
                     until_target={"target": 0.95, "metric": "test accuracy", "eval_every": 10, "max_steps": 200})
            if precision and label in precision:
                r["controls"]["precision"] = precision[label]
            reached = n is not None
            r["status"] = "ok" if reached else "not_reached"
            train = None if n is None else n * 0.003 + (0.01 if label == "spawn" else 0)
            r["ttt"] = {"target": 0.95, "metric": "test accuracy", "eval_every": 10, "budget_steps": 200,
                        "reached": reached, "steps_run": n or 200, "steps_to_target": n,
                        "train_time_to_target_s": train, "e2e_time_to_target_s": None if n is None else train + 3,
                        "startup_to_target_s": None if n is None else 3.0, "evals": 1, "eval_time_s": 0.001,
                        "eval_s_each": [0.001], "best_metric": 0.96 if reached else 0.94, "best_step": n or 200,
                        "final_metric": 0.96 if reached else 0.94, "curve": [[10, 0.1, 0.5]]}
            records.append(r)
    return records


def test_verdict_when_fp32_rows_need_the_same_steps():
    records = _ttt_records({"ddp": [100, 100, 100], "spawn": [100, 100, 100]})
    cfg = ttt.settings(records)
    lines = ttt.verdict(ttt.table_rows(records, run_report.group(records)), cfg)
    # schema 1: no intervals, so no row is named first; the medians are given as what they are
    assert lines[0] == ("First to test accuracy 0.95 in training time: no row resolved first (records of schema 1 "
                        "carry no intervals): ddp 0.300 s, spawn 0.310 s (median of 3 repeats). End to end, from "
                        "starting the launch command (start-up included): no row resolved first (records of schema 1 "
                        "carry no intervals): ddp 3.30 s, spawn 3.31 s (median of 3 repeats).")
    assert "**" not in lines[0]
    assert any(line.startswith("Every fp32 row needed exactly 100 steps in every repeat") for line in lines)
    for r in records:
        check_record(r)
    two = [r for r in records if r["repeat"] < 2]
    for r in two:
        r["schema_version"] = 2
    lines = ttt.verdict(ttt.table_rows(two, run_report.group(two)), cfg)
    assert lines[0].startswith("First to test accuracy 0.95 in training time: no row resolved first (a row needs 3 "
                               "repeats that reached the target for an interval): ddp 0.300 s, spawn 0.310 s (median "
                               "of 2 repeats).")


def test_a_difference_in_fp32_steps_is_reported_as_a_finding_and_mixed_precision_is_set_apart():
    records = _ttt_records({"ddp": [100, 100, 100], "horovod": [110, 100, None], "amp": [120, 120, 120]},
                           precision={"amp": "bf16"})
    rows = ttt.table_rows(records, run_report.group(records))
    lines = ttt.verdict(rows, ttt.settings(records))
    finding = next(line for line in lines if line.startswith("**Finding"))
    assert "(ddp 100; horovod 100, 110, not reached;" in finding
    assert any(line.startswith("amp (bf16) needed 120 steps") for line in lines)
    table = ttt.markdown_table(rows, ttt.settings(records))
    assert "| horovod | fp32 | 105 [100–110] |" in table  # median and range over the repeats that reached it
    assert "reached 2/3, **not reached** 1/3 (best 0.9400 after step 200 of 200)" in table
    # The throughput table keeps every measured repeat, and says which missed the target.
    assert "ok 2/3, not reached 1/3 |" in run_report.markdown_table(run_report.table_rows(records))


# ---- contracts ------------------------------------------------------------------------------------------------

def test_a_workload_with_a_target_must_say_how_to_train_until_it():
    with pytest.raises(TypeError, match="has a target, so it must set eval_every and max_steps_to_target"):
        class NoCadence(Workload):  # noqa: F841
            name, summary, global_batch, base_lr, base_batch, steps, warmup = "n", "x", 8, 0.1, 8, 1, 0
            target = 0.9


def test_a_not_reached_record_must_carry_its_ttt_object():
    rec = _ttt_records({"ddp": [None]})[0]
    check_record(rec)
    del rec["ttt"]["best_metric"]
    with pytest.raises(ValueError, match="ttt has no 'best_metric'"):
        check_record(rec)


def test_with_intervals_every_pair_of_times_to_target_is_one_family():
    # Three repeats each (schema 2): ddp 0.300 s every time, spawn 0.310 (the fixture adds 10 ms), horovod 0.40,
    # 0.60, 0.30. The time ratios are geometric means with Welch's interval, Holm-adjusted over the three pairs:
    # spawn/ddp is exactly 1.0333 (no spread: resolved); horovod's logs have mean -0.8770 and variance 0.1213, so
    # against ddp's constant 0.3 s: e^0.3270 = 1.387, Welch df 2, half-width 4.303 x sqrt(0.1213 / 3) = 0.8652,
    # [e^-0.5382, e^1.1922] = [0.58, 3.29]: not resolved.
    records = _ttt_records({"ddp": [100, 100, 100], "spawn": [100, 100, 100], "horovod": [100, 100, 100]})
    for r in records:
        r["schema_version"] = 2
        if r["label"] == "horovod":
            r["ttt"]["train_time_to_target_s"] = {0: 0.40, 1: 0.60, 2: 0.30}[r["repeat"]]
    lines = ttt.verdict(ttt.table_rows(records, run_report.group(records)), ttt.settings(records))
    first = lines[0]
    # ddp is resolved ahead of spawn but not of horovod: no row is named first, and every pair says what it is
    assert first.startswith("First to test accuracy 0.95 in training time: no row resolved first (paired within "
                            "rounds; 95% intervals, all 3 pairs Holm-adjusted, p < 0.05): ddp 0.300 s, spawn 0.310 s, "
                            "horovod 0.416 s (geometric means); resolved: ddp ahead of spawn 1.03× [1.03–1.03] as long; "
                            "not resolved: ddp vs horovod 1.39× [0.58–3.29] as long, spawn vs horovod 1.34× "
                            "[0.57–3.19] as long. End to end")
    assert "**" not in first and "median" not in first.split(". End")[0]


def test_time_to_target_names_a_row_first_only_when_resolved_ahead_of_every_row_on_every_device():
    # dp (one process on one device) is fastest by far but is not data-parallel: left out, named. ddp is resolved
    # ahead of both others in every round (paired within rounds: round 1's slow machine slows every row alike)
    records = _ttt_records({"dp": [100, 100, 100], "ddp": [100, 100, 100], "spawn": [100, 100, 100],
                            "horovod": [100, 100, 100]})
    slow = {0: 1.0, 1: 1.5, 2: 1.1}
    for r in records:
        r["schema_version"] = 2
        per = {"dp": 0.1, "ddp": 0.300, "spawn": 0.330, "horovod": 0.360}[r["label"]]
        r["ttt"]["train_time_to_target_s"] = per * slow[r["repeat"]] * (1 + 0.001 * r["repeat"])
        if r["label"] == "dp":
            r["topology"]["devices_used"] = 1
    lines = ttt.verdict(ttt.table_rows(records, run_report.group(records)), ttt.settings(records))
    assert lines[0].startswith("First to test accuracy 0.95 in training time: **ddp**, ")
    assert "resolved ahead of every other row: spawn 1.10× [1.10–1.10] as long, horovod 1.20× [1.20–1.20] as long " \
           "(paired within rounds; 95% intervals, all 3 pairs Holm-adjusted, p < 0.05)" in lines[0]
    assert " dp " not in lines[0] and "**dp**" not in lines[0]
    # one seed: the verdict says its intervals are over launch timing, not over trainings (an outside check)
    assert lines[1].startswith("These hold for one training: every repeat trains from the workload's seed on the "
                               "same data order")
    assert lines[2] == ("Left out of the ranking: dp (ran on 1 device(s) of 2: not data-parallel across the world "
                        "size).")
    # unpaired, the same launches would not resolve it: the machine's slow round is not cancelled
    for r in records:
        if r["label"] == "spawn" and r["repeat"] == 2:
            r["status"], r["ttt"]["reached"] = "not_reached", False
    lines = ttt.verdict(ttt.table_rows(records, run_report.group(records)), ttt.settings(records))
    assert "First to test accuracy 0.95 in training time: no row resolved first (a row needs 3 repeats" in lines[0]
