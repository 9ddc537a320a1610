"""Reports say what happened (issue 64): an interrupted tune names what it never launched, calls nothing best without
a launch and offers `compare run --tuned` only when finished; `--tuned` and `compare report` read a tune through the
same checked reader and refuse one they cannot; a run killed without a word lists the launches it never made."""

import copy
import json

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.ground.record import read_records, records_file
from harness.reports import tune_report

from conftest import RUNS, tune_records, write_run


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def _interrupted_in_its_first_launch() -> list[dict]:
    """A tune of ddp and spawn stopped by Ctrl-C during its very first launch (ddp:bucket_cap_mb=1): that launch is
    `interrupted`, the rest of the round `not_run`, and there is no tune_summary."""
    first = [r for r in tune_records(finished=False) if r["repeat"] == 0 and r["tune"]["stage"] == "race"]
    plan = {**first[0]["tune_plan"], "backends": {"ddp": ["ddp", "ddp:bucket_cap_mb=1"], "spawn": ["spawn"]}}
    stopped = "during ddp:bucket_cap_mb=1 (repeat 1)"
    out = []
    for label, status in (("ddp:bucket_cap_mb=1", "interrupted"), ("ddp", "not_run"), ("spawn", "not_run")):
        rec = copy.deepcopy(first[0])
        for key in ("samples_per_s", "step_time_s", "controls", "topology"):
            rec.pop(key, None)
        rec.update(label=label, adapter=label.split(":")[0], status=status, tune_plan=plan, run_interrupted=stopped,
                   reason="interrupted at step 4 of 32 (timed); process group killed" if status == "interrupted"
                   else f"the run was interrupted {stopped}")
        out.append(rec)
    return out


def test_a_finished_tune_offers_its_winners_as_rows(tmp_path):
    out = write_run(tmp_path / "tune", tune_records())
    tune_report.render(out, read_records(out / "records.jsonl"))
    report = (out / "report.md").read_text()
    assert f"or `compare run --tuned {out}`." in report and "No winner was confirmed" not in report


def test_an_interrupted_tune_names_what_it_never_launched_and_calls_nothing_best(tmp_path):
    records = _interrupted_in_its_first_launch()
    out = write_run(tmp_path / "tune", records)
    tune_report.render(out, read_records(out / "records.jsonl"))
    report = (out / "report.md").read_text()
    assert "the defaults were best" not in report and "failed in round" not in report
    assert "compare run --tuned" not in report.replace("(and `compare run --tuned` refuses it)", "")
    assert "| ddp | – | – | no launch finished (the tune was interrupted) | – | 2 | 1 | interrupted |" in report
    assert "| spawn | – | – | never launched (the tune was interrupted first) | – | 1 | 0 | interrupted |" in report
    assert "Never launched: ddp, spawn." in report
    assert ("| ddp:bucket_cap_mb=1 | – | 0 | interrupted in round 1, where the tune was stopped: interrupted at step 4 "
            "of 32 (timed); process group killed |") in report
    assert "| spawn | – | 0 | never launched: the tune was interrupted first |" in report
    assert tune_report.console_lines(records) == [
        "the tune was interrupted during ddp:bucket_cap_mb=1 (repeat 1): no winner was confirmed (report.md shows "
        "what it had measured); never launched: ddp, spawn"]


@pytest.mark.parametrize("spoil, problem", [
    (lambda r: r["tune_plan"].update(backends={"ddp": []}),
     "'tune_plan' lists no candidate for backend 'ddp' (a tune races its defaults at least)"),
    (lambda r: r.update(tune_summary="garbage"), "'tune_summary' is str, expected dict or null"),
    (lambda r: r["tune_summary"].update(race_rounds="three"),
     "'tune_summary' has race_rounds 'three', which no finished tune writes"),
    (lambda r: r.update(tune={"stage": "warmup"}), "'tune' has stage 'warmup', expected 'race' or 'confirm'"),
], ids=["empty-candidate-list", "summary-not-an-object", "summary-of-the-wrong-shape", "unknown-stage"])
def test_run_tuned_and_report_refuse_a_tune_they_cannot_read_in_one_line(tmp_path, spoil, problem):
    records = copy.deepcopy(tune_records())
    for rec in records:
        rec["tune_plan"] = copy.deepcopy(rec["tune_plan"])
        rec["tune_summary"] = copy.deepcopy(rec["tune_summary"])
        spoil(rec)
    tune = write_run(tmp_path / "tune", records)
    before = sorted(p.name for p in tune.iterdir())
    path = tune / "records.jsonl"
    run = invoke("run", "--tuned", tune, "--out", tmp_path / "o")
    said = f"holds records this compare cannot read ({path}:1: {problem})\n"
    assert (run.exit_code, run.stderr) == (2, f"error: --tuned {tune} {said}")
    report = invoke("report", tune)
    assert (report.exit_code, report.stderr) == (2, f"error: {tune} {said}")
    assert sorted(p.name for p in tune.iterdir()) == before and not (tmp_path / "o").exists()


def test_run_tuned_reads_a_committed_tunes_gzipped_records(tmp_path):
    # every committed tune keeps records.jsonl.gz, which report, diff and join read; --tuned said "no records.jsonl"
    import gzip

    tune = tmp_path / "tune"
    tune.mkdir()
    (tune / "records.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(r) + "\n"
                                                                  for r in tune_records()).encode()))
    run = invoke("run", "--tuned", tune, "-w", "widemlp", "--out", tmp_path / "o")
    assert (run.exit_code, run.stderr) == (2, f"error: --tuned {tune} tuned workload digits, not widemlp; give -w "
                                              f"digits or another tune\n")
    assert not (tmp_path / "o").exists()


def test_run_tuned_refuses_an_interrupted_tune(tmp_path):
    tune = write_run(tmp_path / "tune", _interrupted_in_its_first_launch())
    run = invoke("run", "--tuned", tune, "--out", tmp_path / "o")
    assert (run.exit_code, run.stderr) == (2, f"error: --tuned {tune}: that tune did not finish, so it has no "
                                              f"confirmed winners; run it again\n")


@pytest.mark.slow  # seconds: left out of make test-fast
def test_the_report_of_a_run_killed_without_a_word_lists_the_launches_it_never_made(tmp_path):
    records = read_records(records_file(RUNS / "digits_cpu2_20261124-083538"))  # 7 rows x 3 rounds
    killed = write_run(tmp_path / "run", records[:11])  # apex's unavailable rows first; killed with -9 in round 2
    result = invoke("report", killed)
    assert result.exit_code == 0, result.output
    said = ("never run: spawn (round 2), amp (round 2), horovod (round 2), deepspeed (round 2); no record says the run "
            "was interrupted, so it was stopped without a word (kill -9, the machine, or a write that failed: a full "
            "disk, whose error named where the rank results were kept) after its last record")
    assert f"**The run ended before all its launches**: {said}." in (killed / "report.md").read_text()
    assert f"the run ended before all its launches: {said}" in " ".join(result.stdout.split())
    whole = write_run(tmp_path / "whole", records)
    invoke("report", whole)
    assert "ended before all its launches" not in (whole / "report.md").read_text()
