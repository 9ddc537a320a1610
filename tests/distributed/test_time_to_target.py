"""`compare run --until-target` run for real (2 ranks, gloo, CPU) through the CLI: the target reached after the
same number of steps as a single-process run needs, evaluations at exactly K, 2K, ..., time accounting, launches
that never overlap, a row that misses its target within the budget, and the report rendered from the records."""

import contextlib
import json

import pytest

import adapters
import workloads
from harness.ground.record import check_record

from conftest import compare_cli, run_compare

pytestmark = pytest.mark.distributed

# Two fp32 backends from different frameworks where Horovod is built (as `make setup` does), else two launchers of
# torch's DDP: either way, rows that must need exactly the same number of steps.
ROWS = ("ddp", "horovod") if adapters.availability("horovod", "cpu", 2) else ("ddp", "spawn")


def single_process_curve(every: int, budget: int, target: float | None):
    """[(step, accuracy)] of a plain single-process digits run evaluated after every `every` steps and after the
    last one, stopping at `target`: the oracle, computed here without the harness."""
    import torch

    w = workloads.get("digits")
    torch.manual_seed(w.seed)
    model = w.build_model()
    opt = w.make_optimizer(model, w.lr(w.global_batch))
    data = w.materialize("cpu", w.global_batch)
    curve = []
    for step in range(budget):
        idx = w.batch_indices(step, w.global_batch, len(data.train_x))
        opt.zero_grad(set_to_none=True)
        w.loss(model(data.train_x[idx]), data.train_y[idx]).backward()
        opt.step()
        if (step + 1) % every == 0 or step + 1 == budget:
            correct, count, _ = w.evaluate(model, data, 0, 1, contextlib.nullcontext())
            curve.append((step + 1, correct / count))
            if target is not None and correct / count >= target:
                break
    return curve


@pytest.fixture(scope="module")
def reached(tmp_path_factory):
    out = tmp_path_factory.mktemp("ttt") / "run"
    rows, proc = run_compare(out, "--until-target", "-a", ",".join(ROWS), plots=True)
    return out, rows, proc


@pytest.fixture(scope="module")
def missed(tmp_path_factory):
    out = tmp_path_factory.mktemp("ttt-missed") / "run"
    # Digits is near 0.88 after 30 steps: a budget too small for the 0.95 target, evaluated every 7 steps. The ddp
    # row's rank 1 dies at step 5: launches run one after the other here, and the next one must still run.
    rows, proc = run_compare(out, "--until-target", "-a", "ddp,spawn", "--eval-every", "7", "--max-steps", "30",
                             env={"COMPARE_FAULT": "ddp:1:exit:5"})
    return out, rows, proc


def test_fp32_rows_reach_the_target_after_the_steps_a_single_process_run_needs(reached):
    _, rows, proc = reached
    w = workloads.get("digits")
    oracle = single_process_curve(w.eval_every, w.max_steps_to_target, w.target)
    assert oracle[-1][1] >= 0.95 and all(acc < 0.95 for _, acc in oracle[:-1])
    assert sorted(rows) == sorted(ROWS)  # in the shuffled order they ran
    for name, rec in rows.items():
        t = rec["ttt"]
        assert rec["status"] == "ok", (name, rec["reason"], rec.get("log_tail"))
        assert t["reached"] is True and t["steps_to_target"] == oracle[-1][0], name
        assert [c[0] for c in t["curve"]] == [s for s, _ in oracle]
        # Rounding differs (2 ranks' all-reduce vs one process) but no test sample flips along the way.
        assert [c[2] for c in t["curve"]] == pytest.approx([a for _, a in oracle], abs=1e-12)
        assert t["final_metric"] == rec["eval"]["accuracy"] >= 0.95 and rec["eval"]["target_met"] is True
        assert rec["max_param_diff"] <= 1e-5  # still checked against the reference after 10 steps
    assert "Every fp32 row needed exactly" in (reached[0] / "report.md").read_text()
    assert "target at step" in proc.stdout


@pytest.mark.parametrize("name", ROWS)
def test_evaluations_come_every_k_steps_and_training_stops_at_the_target(reached, name):
    rec = reached[1][name]
    t = rec["ttt"]
    k, n = t["eval_every"], t["steps_to_target"]
    assert k == 10 and t["budget_steps"] == 500
    assert [c[0] for c in t["curve"]] == list(range(k, n + 1, k)) and t["evals"] == n // k
    # Every step from the first is a training step (no warm-up discarded), and none ran after the target.
    assert t["steps_run"] == n == len(rec["step_times_s"]) == rec["step_time_s"]["n"] == len(rec["loss_curve"])
    assert rec["controls"]["warmup"] == 0 and rec["controls"]["steps"] == 500


@pytest.mark.parametrize("name", ROWS)
def test_time_accounting(reached, name):
    rec = reached[1][name]
    t, steps = rec["ttt"], rec["step_times_s"]
    n = t["steps_to_target"]
    # Training time = the recorded (slowest-rank) step times, summed; the curve's clock is the same sum, so
    # evaluation time is in neither.
    assert t["train_time_to_target_s"] == pytest.approx(sum(steps[:n]), rel=1e-12)
    assert len(t["curve"]) == t["evals"] > 0
    for step, seconds, _ in t["curve"]:
        assert seconds == pytest.approx(sum(steps[:step]), rel=1e-12)
    # The evaluations before the target's own: timed apart, and left out of end to end.
    assert len(t["eval_s_each"]) == t["evals"] and all(s > 0 for s in t["eval_s_each"])
    assert t["eval_time_before_target_s"] == pytest.approx(sum(t["eval_s_each"][:-1]), rel=1e-12)
    assert t["eval_time_s"] == pytest.approx(sum(t["eval_s_each"]), rel=1e-12)
    snapshot = t["snapshot"]["seconds"] if t["snapshot"]["after_step"] < n else 0.0
    assert t["e2e_time_to_target_s"] == pytest.approx(
        t["target_step_end_s"] - t["eval_time_before_target_s"] - snapshot, rel=1e-9)
    # End to end holds the start-up before the first step (measured apart, from the launch to rank 0's first
    # step end) as well as the training, and fits inside the launch. The sum of per-step maxima over ranks exceeds
    # the wall time spent in steps by the ranks' skew (whichever rank waited, in each step; 0.7 s of 1.6 s for
    # Horovod on a loaded 2-core machine), and end to end less that sum is short of the start-up by as much. The
    # record has both: the skew is the summed steps less the timed window by the wall clock (the whole run here).
    assert t["steps_run"] == n and rec["timed_window_wall_s"] > 0
    skew = sum(steps[:n]) - rec["timed_window_wall_s"]
    assert t["e2e_time_to_target_s"] >= t["train_time_to_target_s"], name
    assert t["e2e_time_to_target_s"] > rec["time_to_first_step_s"], name
    assert t["startup_to_target_s"] >= 0.95 * (rec["time_to_first_step_s"] - steps[0]) - skew, (name, skew)
    assert t["e2e_time_to_target_s"] + t["eval_time_before_target_s"] < rec["wall_time_s"], name
    assert t["startup_to_target_s"] == pytest.approx(t["e2e_time_to_target_s"] - t["train_time_to_target_s"])


def test_launches_run_one_at_a_time(reached):
    out = reached[0]
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    spans = [(records[0]["reference_run"]["launch_wall"],
              records[0]["reference_run"]["launch_wall"] + records[0]["reference_run"]["wall_time_s"])]
    spans += [(r["launch_wall"], r["launch_wall"] + r["wall_time_s"]) for r in records]
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert start >= end  # each launch started after the previous one had ended (no pipelining)
    for r in records:
        # no gate to wait at (a pipelined launch waits there for the previous one: seconds); the bound leaves room
        # for a loaded 2-core machine's scheduling, not for a wait
        assert r["phases_s"]["gate"] < 1.0 and r["until_target"]["eval_every"] == 10


def test_report_records_and_rerender(reached, tmp_path):
    out, rows, _ = reached
    for line in (out / "records.jsonl").read_text().splitlines():
        check_record(json.loads(line))
        assert json.loads(line)["controls"]["train_samples"] == 1437
    report = (out / "report.md").read_text()
    assert report.startswith("# digits until test accuracy ≥ 0.95:")
    for name, rec in rows.items():
        assert f"| {name} | fp32 | {rec['ttt']['steps_to_target']} |" in report
    assert "First to test accuracy 0.95 in training time:" in report and "## Time per epoch" in report
    assert "Every step from the first counts as training" in report
    for png in ("ttt_curve.png", "ttt_time.png", "epoch_time.png", "throughput.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "records.jsonl").write_text((out / "records.jsonl").read_text())
    proc = compare_cli("report", str(copy))
    assert proc.returncode == 0, proc.stderr
    assert (copy / "report.md").read_text() == report
    assert (copy / "epoch_time.png").exists() and (copy / "ttt_curve.png").exists()


def test_a_row_that_misses_its_target_keeps_its_measurements(missed):
    out, rows, proc = missed
    rec = rows["spawn"]
    t = rec["ttt"]
    oracle = single_process_curve(7, 30, None)
    assert rec["status"] == "not_reached" and t["reached"] is False
    assert [c[0] for c in t["curve"]] == [7, 14, 21, 28, 30]  # every K steps, and after the budget's last step
    assert [c[2] for c in t["curve"]] == pytest.approx([a for _, a in oracle], abs=1e-12)
    assert t["steps_run"] == 30 == len(rec["step_times_s"])  # the budget, and not a step more
    assert t["best_metric"] == max(a for _, a in oracle) and t["best_step"] == 30
    assert rec["reason"] == (f"best test accuracy {t['best_metric']:.4f} (after step 30) is below the target 0.95 "
                             "within the 30-step budget")
    assert t["steps_to_target"] is None and t["e2e_time_to_target_s"] is None
    assert rec["samples_per_s"] > 0 and rec["peak_memory_bytes"] > 0 and rec["eval"]["target_met"] is False
    check_record(rec)
    assert "not reached" in proc.stdout  # exit code 0 (asserted by run_compare): a result, not a failure
    report = (out / "report.md").read_text()
    assert f"**not reached** 1/1 (best {t['best_metric']:.4f} after step 30 of 30)" in report
    assert "No backend reached test accuracy 0.95 within the 30-step budget." in report
    assert "| spawn | torch.multiprocessing.spawn | 2 × 1 |" in report  # the throughput table keeps the row
    index = compare_cli("index", str(out.parent))
    assert index.returncode == 0, index.stderr
    assert (f"| [{out.name}]({out.name}/report.md) | digits, until test accuracy ≥ 0.95 | ddp (failed), "
            f"spawn (not_reached) | 2 |") in (out.parent / "README.md").read_text()


def test_a_crashed_launch_is_a_failed_row_and_the_next_one_still_runs(missed):
    out, rows, _ = missed
    ddp = rows["ddp"]
    assert ddp["status"] == "failed" and "ttt" not in ddp
    assert ddp["reason"] == "rank 1 exited with code 3; first error: [fault injection] exit at step 5"
    assert rows["spawn"]["status"] == "not_reached" and rows["spawn"]["ttt"]["steps_run"] == 30
    report = (out / "report.md").read_text()
    assert "| ddp | | | | | | | | **failed**: rank 1 exited with code 3" in report
