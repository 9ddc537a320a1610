"""`compare tune` for real: a two-candidate tune of ddp on digits, end to end through the CLI, its report re-rendered
from the records alone, and its winner reused by `compare run --tuned`."""

import json

import pytest

from harness.core import race as tuning

from conftest import compare_cli, run_compare

pytestmark = pytest.mark.distributed


def test_a_two_candidate_tune_of_ddp_races_confirms_reports_and_its_winner_runs(tmp_path):
    out = tmp_path / "tune"
    # --budget 1s: the least rounds of each stage and no more
    proc = compare_cli("tune", "-a", "ddp,dp", "--tune", "ddp.bucket_cap_mb=1", "--budget", "1s", "--steps", "20",
                       "--warmup", "2", "--equiv-steps", "2", "--order-seed", "11", "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "note: dp is left out: it declares no tunable knobs" in proc.stdout
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert {r["kind"] for r in records} == {"tune"}
    race = [r for r in records if r["tune"]["stage"] == "race"]
    assert sorted((r["repeat"], r["label"]) for r in race) == [
        (k, label) for k in range(3) for label in ("ddp", "ddp:bucket_cap_mb=1")]
    for r in records:  # a tuned knob never changes the maths: every launch matches the single-process reference
        assert r["status"] == "ok" and r["equivalence"]["passed"] is True, (r["label"], r.get("reason"))
        assert r["tune_plan"]["backends"] == {"ddp": ["ddp", "ddp:bucket_cap_mb=1"]}
        assert r["tune_summary"]["race_rounds"] == 3
    assert records[0]["rerun_command"].startswith("compare tune --adapters ddp ") and "--order-seed 11" in \
        records[0]["rerun_command"] and "--tune ddp.bucket_cap_mb=1" in records[0]["rerun_command"]
    found = tuning.confirmed(records)["ddp"]
    confirm = [r for r in records if r["tune"]["stage"] == "confirm"]
    md = (out / "report.md").read_text()
    if found["best"] == "ddp":  # the defaults won the race: one backend, nothing to confirm
        assert confirm == [] and "| ddp | defaults | – | not tested: the race picked the defaults |" in md
    else:  # the best and the defaults again, on fresh launches, three rounds
        assert sorted((r["repeat"], r["label"]) for r in confirm) == [
            (k, label) for k in range(3, 6) for label in ("ddp", "ddp:bucket_cap_mb=1")]
        assert found["gain"]["n"] == 3 and f"| ddp | bucket_cap_mb=1 | {found['gain']['estimate']:.2f}×" in md
    assert f"compare run -a {found['winner']}" in md and f"winners as rows: compare run -a {found['winner']}" in \
        proc.stdout
    assert "**dp** was not tuned: it declares no tunable knobs." in md
    again = compare_cli("report", str(out))
    assert again.returncode == 0, again.stderr
    assert (out / "report.md").read_text() == md
    # the winner as a row of a run
    run = tmp_path / "run"
    used = compare_cli("run", "--tuned", str(out), "-a", "dp", "--steps", "5", "--warmup", "1", "--equiv-steps", "0",
                       "--no-plots", "--out", str(run))
    assert used.returncode == 0, used.stdout + used.stderr
    labels = [json.loads(line)["label"] for line in (run / "records.jsonl").read_text().splitlines()]
    assert labels == ["dp", found["winner"]] or sorted(labels) == sorted(["dp", found["winner"]])


def test_compile_true_compiles_in_the_warm_up_reports_its_time_apart_and_matches_the_reference(tmp_path):
    """ddp:compile=true for real: TorchDynamo's own counters say a graph was compiled, all of it before the timed
    window, the row still matches the single-process reference at the fp32 tolerance, and the report gives the
    compile time apart from the throughput."""
    rows, proc = run_compare(tmp_path / "o", "-w", "digits", "-a", "ddp:compile=true", "--steps", "10", "--warmup",
                             "2", "--equiv-steps", "2")
    rec = rows["ddp:compile=true"]
    assert rec["status"] == "ok" and rec["equivalence"]["passed"] is True, rec.get("reason")
    assert rec["adapter_info"]["knobs"]["compile"] is True
    compiled = rec["compile"]
    assert compiled["graphs"] >= 1 and compiled["compile_s"] > 0, compiled
    assert compiled["graphs_timed"] == 0 and compiled["compile_s_timed"] == 0, compiled
    # compiling happens at the first step, inside the warm-up: the warm-up phase is at least the compile time
    assert rec["phases_s"]["warmup"] >= compiled["compile_s"] * 0.9, (rec["phases_s"], compiled)
    md = (tmp_path / "o" / "report.md").read_text()
    assert (f"- **ddp:compile=true**: torch.compile built {compiled['graphs']} graph(s) in "
            f"{compiled['compile_s']:.1f} s (slowest rank, median over its 1 launch(es)), all during the warm-up: not "
            f"in its samples/s, but in its launch's wall time.") in md
