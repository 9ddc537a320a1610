"""`compare scale` for real: 1- and 2-rank gloo launches through the real CLI, the single-process baseline, a
straggler, the model calibrated from a real `compare comm` sweep, and oversubscribed points labelled."""

import json
import statistics

import pytest

from harness.ground.provenance import usable_cores

from conftest import compare_cli

# alone: the straggler's and the contention calibration's compute times are measured, not just recorded
pytestmark = [pytest.mark.distributed, pytest.mark.alone]
SHORT = ["-w", "digits", "--steps", "20", "--warmup", "3", "--profile-steps", "4"]


def records(out):
    return [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]


def point(recs, label, n):
    (r,) = [r for r in recs if r["label"] == label and r["scale"]["point"] == n and r["repeat"] == 0]
    return r


@pytest.fixture(scope="module")
def straggler_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("scale") / "sweep"
    # Bound to cores and a straggler 10x slower: digits computes ~0.6 ms a step, so a 3x straggler adds ~1.2 ms,
    # less than the scheduler's noise on 2 shared unbound cores (in CI Horovod's slow rank once waited more than
    # its fast peer: 7.6 against 6.6 ms)
    proc = compare_cli("scale", "-a", "ddp,horovod", "--world-sizes", "1,2", "--straggler", "1:10", "--no-model",
                       "--bind-cores", "--out", str(out), *SHORT, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out, records(out), proc


def test_every_point_and_the_baseline_ran_with_the_same_threads_per_rank(straggler_sweep):
    _, recs, _ = straggler_sweep
    assert {(r["label"], r["scale"]["point"]) for r in recs} == {
        ("single-process", 1), ("ddp", 1), ("ddp", 2), ("horovod", 1), ("horovod", 2)}
    for r in recs:
        assert r["status"] == "ok", (r["label"], r["reason"])
        assert r["kind"] == "scale" and r["world_size"] == r["scale"]["point"]
        assert set(r["controls"]["threads_per_rank"]) == {1}, "one worker = one rank with the same threads"
        assert r["controls"]["global_batch"] == 64  # strong scaling: the same global batch everywhere
    assert point(recs, "single-process", 1)["adapter"] == "reference" and point(recs, "single-process", 1)[
        "scale"]["baseline"]


def test_the_straggler_computes_slower_and_its_peers_wait_for_it(straggler_sweep):
    _, recs, _ = straggler_sweep
    for label in ("ddp", "horovod"):
        r = point(recs, label, 2)
        assert r["straggler"]["rank"] == 1 and r["straggler"]["factor"] == 10.0
        assert r["straggler"]["delay_s_per_rank"][0] == 0.0 and r["straggler"]["delay_s_per_rank"][1] > 0
        fast, slow = r["load_balance"]["per_rank"]
        assert slow["compute_s"] > 2 * fast["compute_s"], (label, fast, slow)
        assert fast["wait_s"] > slow["wait_s"], (label, fast, slow)
        # every rank's step is at least as long as the slowest rank's own compute
        assert r["step_time_s"]["median"] >= 0.9 * slow["compute_s"]
        assert r["equivalence"]["passed"] is True  # a slow rank changes the time, never the maths
        assert "straggler" not in point(recs, label, 1)  # rank 1 does not exist at world size 1


def test_the_compute_profile_has_the_batch_curve_at_world_size_1_and_gradient_ready_times(straggler_sweep):
    _, recs, _ = straggler_sweep
    prof = point(recs, "ddp", 1)["compute_profile"][0]
    assert [b["per_rank_batch"] for b in prof["batches"]] == [64, 32, 16, 8, 4, 2, 1]
    assert prof["flops_per_sample"] > 0
    sizes = sorted(g[0] for g in prof["grads"])
    assert sum(sizes) == prof["param_bytes"] == 4 * point(recs, "ddp", 1)["param_count"]
    assert [b["per_rank_batch"] for b in point(recs, "ddp", 2)["compute_profile"][1]["batches"]] == [32]


def test_the_report_has_every_metric_and_plot_and_rerenders_identically(straggler_sweep):
    out, _, proc = straggler_sweep
    md = (out / "report.md").read_text()
    for needle in ("speed-up vs N=1", "speed-up vs single process", "efficiency", "compute / wait per rank",
                   "Straggler", "How wait is measured"):
        assert needle in md, needle
    for png in ("speedup.png", "efficiency.png", "memory.png", "balance.png"):
        assert (out / png).stat().st_size > 0
    assert "ddp n=2:" in proc.stdout
    before = md
    again = compare_cli("report", str(out))
    assert again.returncode == 0, again.stderr
    assert (out / "report.md").read_text() == before


@pytest.fixture(scope="module")
def model_sweep(tmp_path_factory):
    """The default path (no --comm, no --no-model): the comm sweep runs inside the scale sweep's process, as a
    session of its own, then the compute-contention calibration, then the prediction. (--comm DIR, results measured
    beforehand, is the path of test_the_contention_calibration_sees_ranks_that_share_cores.)"""
    root = tmp_path_factory.mktemp("model")
    out, runs = root / "scale", root / "runs"
    proc = compare_cli("scale", "-a", "ddp", "--world-sizes", "1,2", "--out", str(out), *SHORT,
                       "--breakdown", "--breakdown-steps", "2", env={"COMPARE_RUNS_DIR": str(runs)}, timeout=420)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out, runs, proc


def test_a_sweep_runs_its_own_comm_sweep_and_predicts_from_it(model_sweep):
    # It once waited for ever on its own process's registration lock, at "calibrating the model", with every point
    # already measured.
    out, runs, proc = model_sweep
    assert "calibrating the model: collectives at world size 2" in proc.stdout
    comm = [json.loads(line) for line in (out / "comm_n2" / "records.jsonl").read_text().splitlines()]
    assert {(r["backend"], r["op"]) for r in comm if r["status"] == "ok"} == {
        ("torch", "all_reduce"), ("torch", "reduce_scatter"), ("torch", "all_gather"),
        ("torch", "all_reduce_coalesced")}
    row = next(line for line in (out / "report.md").read_text().splitlines() if line.startswith("| ddp | 2 |"))
    assert float(row.split("|")[4]) > 0  # predicted from that sweep
    assert list(runs.iterdir()) == []  # the run's registration went with it
    # the prediction is made once, when the sweep ends, and kept in its first record, which the report renders
    # (tests/unit/test_scale_report.py renders a kept prediction without any comm_n*/)
    from harness.model import VERSION, predicted
    from harness.model.calibration import comm_records

    recs = records(out)
    kept = recs[0]["scale_sweep"]["prediction"]
    assert kept["version"] == VERSION and "prediction" not in recs[1]["scale_sweep"]
    assert [(r["label"], r["n"]) for r in kept["rows"]] == [("ddp", 1), ("ddp", 2)]
    assert kept == json.loads(json.dumps(predicted.made(recs, comm_records(out), [])))


def test_the_models_exposed_communication_is_set_beside_the_breakdowns(model_sweep):
    out = model_sweep[0]
    rec = point(records(out), "ddp", 2)
    measured = rec["breakdown"]["comm_exposed"] + rec["breakdown"]["waiting"]
    md = (out / "report.md").read_text()
    assert "The model's exposed communication against the one measured by `--breakdown`" in md
    row = next(line for line in md.splitlines()
               if line.startswith("| ddp | 2 |") and line.rstrip().endswith("| 1 |"))
    cells = [c.strip() for c in row.split("|")]
    assert float(cells[3]) > 0 and float(cells[4]) == pytest.approx(measured * 1e3, abs=0.006)


def test_the_model_is_calibrated_from_a_real_comm_sweep(model_sweep):
    out = model_sweep[0]
    md = (out / "report.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| ddp | 2 |"))
    cells = [c.strip() for c in row.split("|")]
    mean, median, p10 = (float(v) for v in cells[3].replace("(", " ").replace(")", " ").replace(",", " ").split())
    predicted = float(cells[4])
    assert 0 < p10 <= median and mean >= p10 and predicted > 0  # a prediction, not a placeholder
    # the error is judged against the mean step, and the median's is beside it
    shown = [float(c.rstrip("%")) / 100 for c in cells[5:7]]
    assert shown == pytest.approx([predicted / mean - 1, predicted / median - 1], abs=0.011)
    assert "torch collectives (priced from the sweep's mean time per size" in md and "all_gather n=2:" in md
    # the compute-contention calibration: its own launch of ddp's 2 ranks, in both n=2 records, its ratio in the row
    cal = point(records(out), "ddp", 2)["contention"]
    assert cal["status"] == "ok" and cal["processes"] == 2 and len(cal["alone_s"]) == cal["rounds"] == 4
    assert cells[9].startswith(f"{cal['ratio']:.2f}x (") and "Compute contention, calibrated:" in md
    assert "contention" not in point(records(out), "ddp", 1)
    assert (out / "logs" / "contention-ddp-n2.log.gz").exists()  # ok, so kept compressed
    # the same launch's parts check: digits' 85,002 fp32 gradients all-reduced by torch, 4 rounds, the compute
    # being the contention rounds' "together" (no collective between steps), the step holding its all-reduce
    parts = cal["parts"]
    assert parts["bytes"] == 4 * 85_002 and len(parts["step_s"]) == len(parts["collective_s"]) == 4
    assert parts["compute_s"] == cal["together_s"] and all(c >= 10 for c in parts["calls"])
    assert all(s > c for s, c in zip(parts["step_s"], parts["compute_in_step_s"]))
    assert parts["excess_s"] == pytest.approx([s - c - a for s, c, a in
                                               zip(parts["step_s"], parts["compute_s"], parts["collective_s"])])
    assert "Is a step the sum of its parts on this machine?" in md
    assert f"{parts['median_excess_share']:+.0%} (per round" in md
    assert "## The model against published results" in md and (out / "prediction.png").exists()
    shown = compare_cli("predict", str(out), "--to", "64")
    assert shown.returncode == 0 and "ddp n=2: measured" in shown.stdout and "h100-sxm-ndr400" in shown.stdout


@pytest.mark.skipif(usable_cores() > 2, reason="oversubscription is labelled where the ranks exceed the cores (2)")
def test_oversubscribed_points_are_labelled_everywhere(tmp_path):
    out = tmp_path / "over"
    proc = compare_cli("scale", "-a", "ddp", "--world-sizes", "2,4", "--oversubscribe", "--no-model", "--out",
                       str(out), "--equiv-steps", "0", "--no-plots", *SHORT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recs = records(out)
    assert point(recs, "ddp", 4)["oversubscribed"] is True and point(recs, "ddp", 2)["oversubscribed"] is False
    md = (out / "report.md").read_text()
    assert "| 4 (oversubscribed) |" in md and "**Oversubscribed** world sizes 4" in md
    assert "ddp n=4 (oversubscribed)" in proc.stdout


@pytest.mark.skipif(usable_cores() > 2, reason="4 ranks outnumber the cores only on a 2-core machine")
def test_the_contention_calibration_sees_ranks_that_share_cores(tmp_path):
    # 4 one-thread ranks on 2 cores: every rank computing at once gets half a core at most, so the slowest of them
    # computes at least ~2x as long as rank 0 alone (more: switching and caches). A calibration that measured
    # "together" one rank after another, or "alone" while its peers spun, would not see it.
    comm = tmp_path / "comm"
    assert compare_cli("comm", "--backends", "torch", "--ops", "all_reduce", "--sizes", "1K", "--iters", "5",
                       "-n", "4", "--oversubscribe", "--out", str(comm)).returncode == 0  # calibrates world size 4
    out = tmp_path / "scale"
    proc = compare_cli("scale", "-a", "ddp", "--world-sizes", "4", "--oversubscribe", "--threads", "1", "--comm",
                       str(comm), "--out", str(out), "--equiv-steps", "0", "--no-plots", *SHORT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # --comm: the results given are the sweep's own, copied beside its points
    assert (out / "comm_n4" / "records.jsonl").read_text() == (comm / "records.jsonl").read_text()
    cal = point(records(out), "ddp", 4)["contention"]
    assert cal["status"] == "ok" and cal["processes"] == 4 and cal["per_rank_batch"] == 16
    assert len(cal["together_per_rank_s"]) == 4 and all(len(r) == 4 for r in cal["together_per_rank_s"])
    assert cal["together_s"] == [max(r[i] for r in cal["together_per_rank_s"]) for i in range(4)]
    assert cal["round_ratios"] == pytest.approx([t / a for t, a in zip(cal["together_s"], cal["alone_s"])])
    assert cal["ratio"] == pytest.approx(statistics.median(cal["round_ratios"]))
    assert cal["ratio"] > 1.5, cal
    assert "compute contention of ddp at world size 4 (4 rounds" in proc.stdout
