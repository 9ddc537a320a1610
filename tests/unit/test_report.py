"""Reports render from stored records alone (the committed comparison is the fixture)."""

import copy
import json

import pytest

from harness.ground.record import precision_label

from harness import reports as report
from harness.reports import run_report

from conftest import RUNS, records_text

RUN = RUNS / "digits_cpu2_20261123-101734"


def _records():
    return [json.loads(line) for line in records_text(RUN).splitlines()]


def test_committed_report_rerenders_identically(tmp_path):
    records = _records()
    report.render(tmp_path, records)
    assert (tmp_path / "report.md").read_text() == (RUN / "report.md").read_text()


def test_table_rows_summarise_repeats():
    rows = {r["adapter"]: r for r in run_report.table_rows(_records())}
    assert list(rows) == ["dp", "ddp", "spawn", "amp"]
    ddp = [r for r in _records() if r["label"] == "ddp"]
    sps = sorted(r["samples_per_s"] for r in ddp)
    assert rows["ddp"]["samples_per_s"] == sps[1]  # median of 3 repeats
    assert rows["ddp"]["spread"] == (sps[2] - sps[0]) / sps[1]
    assert rows["ddp"]["step_n"] == sum(r["step_time_s"]["n"] for r in ddp)


def test_failed_and_unavailable_rows_show_their_reason(tmp_path):
    records = _records()
    failed = copy.deepcopy(records[1])
    failed.update(label="horovod", adapter="horovod", status="failed", reason="launch exited with code 1; first "
                  "error: boom", log_tail="Traceback\nRuntimeError: boom")
    gone = {**copy.deepcopy(records[0]), "label": "apex", "adapter": "apex", "status": "unavailable",
            "reason": "apex needs CUDA"}
    text = run_report.markdown_table(run_report.table_rows(records + [failed, gone]))
    assert "| horovod | torchrun | | | | | | | | | | | **failed**: launch exited with code 1; first error: boom |" in text
    assert "**unavailable**: apex needs CUDA |" in text
    notes = run_report._notes(run_report.table_rows(records + [failed]), records + [failed])
    assert any("RuntimeError: boom" in n for n in notes)


def test_rows_of_the_same_mixed_precision_from_different_frameworks_are_called_out():
    records = _records()
    other = copy.deepcopy(next(r for r in records if r["label"] == "amp"))
    other.update(label="apex", adapter="apex")
    notes = run_report._notes(run_report.table_rows(records + [other]), records + [other])
    assert ("Same precision (bf16): amp, apex: differences between these rows come from the frameworks, not from "
            "mixed precision itself.") in notes
    assert not any(n.startswith("Same precision") for n in run_report._notes(run_report.table_rows(records), records))
    # an outside check: DeepSpeed's bf16 (weights, gradients and all-reduce in bf16) was grouped with autocast's
    # (all in fp32 but the compute) as the same precision, "not from mixed precision itself"
    autocast = {"params": "fp32", "master": "none", "compute": "bf16", "grads": "fp32", "reduce": "fp32"}
    for r in records + [other]:
        r["dtypes"] = dict(autocast)
    other["dtypes"] = {"params": "bf16", "master": "fp32", "compute": "bf16", "grads": "bf16", "reduce": "bf16"}
    notes = run_report._notes(run_report.table_rows(records + [other]), records + [other])
    assert ("Same precision label (bf16), not the same recipe: amp holds params fp32, compute bf16, grads fp32, reduce "
            "fp32; apex holds params bf16, master fp32, compute bf16, grads bf16, reduce bf16: differences between "
            "these rows come from the frameworks and from what each keeps in bf16.") in notes


def test_compression_is_shown_beside_precision():
    assert precision_label({"precision": "fp32", "compression": "fp16"}) == "fp32 + fp16 wire"
    assert precision_label({"precision": "bf16"}) == "bf16"


def test_rows_keep_the_order_asked_for_even_when_unavailable_rows_are_recorded_first():
    records = _records()
    unavailable = copy.deepcopy(records[0])
    unavailable.update(adapter="apex", label="apex", status="unavailable", reason="no CUDA")
    order = ["dp", "apex", "ddp", "spawn", "amp"]
    stored = [unavailable] + records  # the runner writes unavailable rows at plan time, before any launch
    for r in stored:
        r["row_order"] = order
    assert [r["adapter"] for r in run_report.table_rows(stored)] == order


def test_index_lists_training_and_comm_runs(tmp_path):
    comm_run = RUNS / "comm_cpu2_n4_20261123-122029"
    for run in (RUN, comm_run):
        (tmp_path / run.name).mkdir()
        (tmp_path / run.name / "records.jsonl").write_text(records_text(run))
    lines = report.index(tmp_path).read_text().splitlines()
    assert lines[-2].startswith(f"| [{comm_run.name}]({comm_run.name}/report.md) | comm: 13 primitives, 1K–16M, fp32 "
                                f"| torch, horovod, deepspeed | 4 (oversubscribed) | AMD EPYC, 2 cores |")
    assert lines[-1].startswith(f"| [{RUN.name}]({RUN.name}/report.md) | digits | dp, ddp, spawn, amp | 2 |")


def test_tuning_variables_are_picked_from_the_environment_and_named_in_the_provenance():
    from harness.ground.provenance import tuning_env, tuning_line

    env = {"HOROVOD_FUSION_THRESHOLD": "0", "NCCL_ALGO": "Tree", "OMP_NUM_THREADS": "8", "OMP_PROC_BIND": "true",
           "LD_PRELOAD": "/usr/lib/libjemalloc.so", "PATH": "/bin", "COMPARE_CACHE": "/tmp/c", "HOME": "/root"}
    # OMP_NUM_THREADS is the harness's own (threads per rank, set for every rank): not inherited, not listed
    assert tuning_env(env) == {"HOROVOD_FUSION_THRESHOLD": "0", "LD_PRELOAD": "/usr/lib/libjemalloc.so",
                               "NCCL_ALGO": "Tree", "OMP_PROC_BIND": "true"}
    assert tuning_line({"tuning_env": {"NCCL_ALGO": "Tree"}}) == [
        "- Tuning variables set in compare's environment, which the ranks on this machine inherit (they change what "
        "the frameworks do, on top of the knobs shown): `NCCL_ALGO=Tree`"]
    assert tuning_line({"tuning_env": {}})[0].startswith("- Tuning variables: none of HOROVOD_*, NCCL_*, GLOO_*")
    assert tuning_line({}) == []  # records made before the variables were recorded


def test_index_shows_each_runs_question_nested_runs_an_archive_and_a_benchmark_log(tmp_path):
    # results/ as curated: a run with the question it answers, a GPU check holding two runs, an archive with its
    # own index (left to it), and a benchmark's directory that is not a run
    records = records_text(RUN)
    for name in ("a_run", "gpu_check/resnet50", "gpu_check/resnet50_apex", "archive/old_run"):
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "records.jsonl").write_text(records)
    (tmp_path / "a_run" / "QUESTION").write_text("Which backend is fastest?\nsecond line ignored\n")
    (tmp_path / "gpu_check" / "QUESTION").write_text("What a GPU | does")
    report.index(tmp_path / "archive")
    (tmp_path / "archive" / "QUESTION").write_text("Runs kept as a record")
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "README.md").write_text("# how it was run\n")
    (tmp_path / "bench" / "QUESTION").write_text("What does the harness cost?")
    (tmp_path / "scratch").mkdir()  # neither a run nor a question: not listed
    lines = report.index(tmp_path).read_text().splitlines()
    assert lines[4] == "| question | run | workload | rows | world size | hardware | date (UTC) | command |"
    rows = [line.split(" | ")[:3] for line in lines[6:]]
    assert rows == [
        ["| Which backend is fastest?", "[a_run](a_run/report.md)", "digits"],
        ["| What a GPU \\| does", "[gpu_check/resnet50](gpu_check/resnet50/report.md)", "digits"],
        ["| What a GPU \\| does", "[gpu_check/resnet50_apex](gpu_check/resnet50_apex/report.md)", "digits"],
        ["| Runs kept as a record", "[archive/](archive/README.md)", "1 run, with an index of their own"],
        ["| What does the harness cost?", "[bench/](bench/README.md)", "not a `compare` run: README.md says what "
                                                                        "made it"],
    ]


@pytest.mark.slow  # draws every figure twice
def test_a_run_that_recorded_its_legend_renders_without_the_adapter_registry(tmp_path, monkeypatch):
    """Colours, row order and the seed blog's labels come from the records' `legend` (adapters.legend at run time):
    with the registry gone, the report and every figure render byte for byte as with it."""
    import adapters

    blog = RUNS / "digits_cpu2_20261123-113816"  # every seed-blog backend: labels and the epoch chart
    records = [json.loads(line) for line in records_text(blog).splitlines()]
    for rec in records:
        rec["legend"] = adapters.legend()
        if "controls" in rec:
            rec["controls"]["train_samples"] = 1437  # recorded since: the epoch chart needs it
    (tmp_path / "with").mkdir()
    (tmp_path / "without").mkdir()
    report.render(tmp_path / "with", records)

    def gone(*_args, **_kwargs):
        raise AssertionError("a report read the live adapter registry")

    for name in ("names", "get", "legend", "comm_backends", "comm_backend_adapter"):
        monkeypatch.setattr(adapters, name, gone)
    report.render(tmp_path / "without", copy.deepcopy(records))
    made = sorted(p.name for p in (tmp_path / "with").iterdir())
    assert {"report.md", "throughput.png", "loss.png"} <= set(made)
    assert made == sorted(p.name for p in (tmp_path / "without").iterdir())
    for name in made:
        assert (tmp_path / "with" / name).read_bytes() == (tmp_path / "without" / name).read_bytes(), name
    # and what the legend says is what the report shows: the seed blog's names in its epoch table
    assert "| ddp | torch.distributed |" in (tmp_path / "without" / "report.md").read_text()


def test_the_legend_not_the_registry_chooses_a_rows_colour():
    from harness.reports import palette

    legend = {"ddp": {"place": 3, "adapter": "ddp", "blog_label": None},
              "torch": {"place": 3, "adapter": "ddp", "blog_label": None}}
    assert palette.colour("ddp:bucket_cap_mb=1", legend) == palette.COLOURS[3] == palette.colour("torch", legend)
    assert palette.styles(["ddp", "ddp:bucket_cap_mb=1", "torch"], legend) == {
        "ddp": "-", "ddp:bucket_cap_mb=1": "--", "torch": "-."}


def _throughput_figure(records, tmp_path, monkeypatch):
    """The throughput figure run_report draws for these records, read back from its artists."""
    from matplotlib.container import ErrorbarContainer

    from harness.ground import outdir
    from harness.reports import figures, run_plots

    saved = {}
    monkeypatch.setattr(outdir, "save_figure", lambda fig, path, dpi: saved.setdefault(path.name, fig))
    run_plots.plot(tmp_path, records, run_report.table_rows(records), figures.scope())
    ax = saved["throughput.png"].axes[0]
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    return ax, bars


def test_a_row_with_one_launch_draws_no_whisker_and_says_so(tmp_path, monkeypatch):
    three = [json.loads(line) for line in records_text(RUNS / "digits_cpu2_20261126-045209").splitlines()]
    once = [r for r in three if r.get("repeat", 0) == 0]  # one launch per row (schema 2: intervals)
    ax, whiskers = _throughput_figure(once, tmp_path, monkeypatch)
    assert whiskers == []  # not a zero-width one
    assert "no interval, no whiskers" in ax.get_xlabel() and "95% interval" not in ax.get_xlabel()
    texts = [t.get_text() for t in ax.texts]
    rows = len(run_report.table_rows(once))
    assert len(texts) == rows and all(t.endswith("(n=1: no interval)") for t in texts)
    ax, whiskers = _throughput_figure(three, tmp_path, monkeypatch)  # three launches per row
    assert len(whiskers) == 1 and len(whiskers[0].lines[2][0].get_segments()) == rows  # one whisker per row
    assert "whiskers: 95% interval over launches" in ax.get_xlabel()
    assert not any("no interval" in t.get_text() for t in ax.texts)


def _titles(out, records, monkeypatch):
    """Every figure run_report draws for `records` in `out`, as {file: its axes' titles}, and the report's text."""
    from harness.ground import outdir

    saved = {}
    monkeypatch.setattr(outdir, "save_figure", lambda fig, path, dpi: saved.setdefault(path.name, fig))
    path = run_report.render(out, records)
    return {name: [ax.get_title() for ax in fig.axes if ax.get_title()] for name, fig in saved.items()}, \
        path.read_text()


def test_every_figure_says_whether_it_shows_this_run_or_one_session_of_a_join(tmp_path, monkeypatch):
    """A `--join` run's pairs.png showed "ddp 1.34x ▲ spawn" under a report whose verdict over 4 sessions left that pair
    not resolved, and its throughput.png this session alone, with no word of it; a single run's figures said nothing
    of covering one run either."""
    from harness.core import joins
    from harness.reports import figures

    if not figures.available():
        pytest.skip(figures.why_none())
    monkeypatch.setenv("COMPARE_CACHE", str(tmp_path / "cache"))
    # resnet_cpu2_20261126-052328: 3 rounds of dp, ddp, spawn, horovod (schema 2: intervals, a verdict, pairs.png)
    base = [json.loads(line) for line in records_text(RUNS / "resnet_cpu2_20261126-052328").splitlines()]
    dirs = []
    for i in range(3):  # three runs of it at other times: their own launches, each a session
        d = tmp_path / f"s{i}"
        d.mkdir()
        recs = [{**r, "run_id": d.name, "launch_wall": r["launch_wall"] + 3600 * (i + 1),
                 "samples_per_s": r["samples_per_s"] and r["samples_per_s"] * (1 + 0.05 * i)} for r in base]
        (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        dirs.append((d, recs))
    titles, text = _titles(dirs[0][0], dirs[0][1], monkeypatch)
    assert {"throughput.png", "loss.png", "step_times.png", "pairs.png"} <= set(titles)
    assert all(t[-1].endswith("\nthis run alone: its own launches") for t in titles.values()), titles
    assert ("## Plots\n\nEvery plot shows this run alone, its own launches: its intervals count the variation between "
            "them, not between runs at other times.\n") in text
    # the third, as `compare run --join` writes it: another session of the first two
    own, recs = dirs[2]
    joins.write_manifest(own, [d for d, _ in dirs], "compare run --join s1")
    titles, text = _titles(own, recs, monkeypatch)
    assert "## Verdict over 3 sessions" in text
    assert all(t[-1].endswith("\nthis session alone; the verdict over 3 sessions is in report.md")
               for t in titles.values()), titles
    assert ("## Plots\n\nEvery plot shows this session alone, its own launches: the verdict over the 3 sessions is "
            "the one above, in words and tables.\n") in text


def test_a_cross_names_the_target_and_whether_the_run_was_long_enough_to_reach_it():
    records = [json.loads(line) for line in records_text(RUNS / "digits_cpu2_20261124-083538").splitlines()]
    for r in records:
        if r.get("eval"):
            r["eval"].update(target=0.9, target_met=r["adapter"] == "ddp", default_steps=300, default_global_batch=64)
            r["controls"].update(warmup=5, steps=25)
    rows = run_report.table_rows(records)
    missed = [row["adapter"] for row in rows if row["measured"] and row["adapter"] != "ddp"]
    assert run_report.target_note(rows) == (
        f"✗ in the test accuracy column ({', '.join(missed)}): below 0.9, the test accuracy the workload's default run "
        f"reaches (300 steps at global batch 64); this run trained 30 steps, too few to reach it, so the ✗ says the "
        f"run was short, not that a backend failed to learn (leave --steps out for the default).")
    assert run_report.target_note(rows) in run_report.console_notes(records)
    for r in records:
        if r.get("eval"):
            r["controls"].update(warmup=100, steps=200)
    assert run_report.target_note(run_report.table_rows(records)).endswith(
        "(300 steps at global batch 64); this run trained 300 steps at global batch 64.")
    for r in records:
        if r.get("eval"):
            r["eval"]["target_met"] = True
    assert run_report.target_note(run_report.table_rows(records)) is None  # nothing to explain


def test_the_terminal_shows_an_unavailable_rows_fix_not_only_its_reason():
    records = [json.loads(line) for line in records_text(RUNS / "digits_cpu2_20261123-113816").splitlines()]
    notes = run_report.console_notes(records)
    assert len(notes) == 1 and notes[0].startswith("apex unavailable: fix: build NVIDIA apex 25.05, the last tag ")
    assert notes[0].endswith("then run on a GPU machine: compare run --device cuda -n 1 -a amp,apex")


def test_the_terminal_says_why_a_row_was_not_checked_where_its_cell_has_no_room():
    # a BatchNorm model's rows showed "(not checked)" in the terminal with neither the reason nor the fix
    records = [json.loads(line) for line in records_text(RUNS / "resnet_cpu2_20261126-052328").splitlines()]
    notes = run_report.console_notes(records)
    assert ("not checked in the max_param_diff column (dp, ddp, spawn, horovod): model is batch-dependent (BatchNorm "
            "statistics per process).") in notes
    # another precision says why in its own column: no line for it
    digits = [json.loads(line) for line in records_text(RUNS / "digits_cpu2_20261126-045209").splitlines()]
    assert not any(n.startswith("not checked") for n in run_report.console_notes(digits))


def test_the_evaluation_column_is_named_by_the_metric_and_an_empty_one_says_why():
    records = _records()
    for r in records:
        if r.get("eval"):
            r["eval"]["metric"] = "share within 0.5"
    rows = run_report.table_rows(records)
    assert "| final loss | share within 0.5 | max_param_diff |" in run_report.markdown_table(rows)
    assert run_report.eval_note(rows) is None
    why = "its targets are floats, and without metric(output, target) -> (correct, count) there is no accuracy to take"
    for r in records:
        if r.get("eval"):
            r["eval"], r["eval_skipped"] = None, why
    rows = run_report.table_rows(records)
    assert "| final loss | test accuracy | max_param_diff |" in run_report.markdown_table(rows)
    assert run_report.eval_note(rows) == f"– in the test accuracy column: not evaluated: {why}."
    assert run_report.eval_note(rows) in run_report.console_notes(records)
    ddp = [r for r in records if r["label"] == "ddp"]
    ddp[0]["eval_skipped"] = ddp[1]["eval_skipped"] = ddp[2]["eval_skipped"] = "the workload has no test set"
    measured = [row["adapter"] for row in run_report.table_rows(records) if row["measured"] and row["adapter"] != "ddp"]
    assert run_report.eval_note(run_report.table_rows(records)) == (
        f"– in the test accuracy column ({', '.join(measured)}): not evaluated: {why}. – in the test accuracy column "
        f"(ddp): not evaluated: the workload has no test set.")


def test_a_launch_whose_evaluation_failed_leaves_the_rows_figure_to_the_others():
    records = _records()
    ddp = [r for r in records if r["label"] == "ddp"]
    kept = sorted(r["eval"]["accuracy"] for r in ddp[1:])
    ddp[0]["eval"] = None  # its evaluation hung or crashed (failed_parts), its measurement kept
    row = next(row for row in run_report.table_rows(records) if row["adapter"] == "ddp")
    assert row["accuracy"] == (kept[0] + kept[1]) / 2 and row["samples_per_s"] > 0


def test_an_outer_jobs_rank_variables_reach_no_rank_and_are_not_tuning(tmp_path, monkeypatch):
    # compare run inside an outer Horovod job: its HOROVOD_RANK=1 HOROVOD_SIZE=4 made horovodrun's ranks wait 30 s for
    # peers that were not there; the tuning note listed them as tuning
    from harness.ground.provenance import tuning_env
    from harness.launching.rank_env import child_env
    from harness.shared.spec import RunSpec

    outer = {"HOROVOD_RANK": "1", "HOROVOD_SIZE": "4", "RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
             "OMPI_COMM_WORLD_RANK": "3"}
    kept = {"HOROVOD_FUSION_THRESHOLD": "0", "SLURM_PROCID": "2", "MASTER_PORT": "29999"}
    for k, v in {**outer, **kept}.items():
        monkeypatch.setenv(k, v)
    spec = RunSpec(adapter="x", workload="digits", world_size=2, device="cpu", global_batch=64, steps=5, warmup=1,
                   threads=1, rank_dir=str(tmp_path / "r"))
    env = child_env(spec, {}, "id")
    assert not set(outer) & set(env)
    assert {k: env[k] for k in kept} == kept
    assert set(tuning_env()) & set(outer | kept) == {"HOROVOD_FUSION_THRESHOLD"}


def test_an_interrupted_run_names_the_row_whose_one_launch_it_stopped_as_having_measured_nothing():
    # the row stopped in its set-up has status "interrupted", not "not_run": the note said every adapter had run
    records = _records()
    stopped = {**copy.deepcopy(records[0]), "label": "horovod", "adapter": "horovod", "status": "interrupted",
               "reason": "interrupted at step 0 of 2001 (setup)"}
    records[0]["run_interrupted"] = "during horovod (repeat 1)"
    notes = run_report._notes(run_report.table_rows(records + [stopped]), records + [stopped])
    assert ("**The run was interrupted during horovod (repeat 1)**: horovod measured nothing before it was "
            "stopped.") in notes
    notes = run_report._notes(run_report.table_rows(records), records)
    assert "**The run was interrupted during horovod (repeat 1)**: every adapter had run at least once." in notes



def test_an_interruption_while_one_launch_ended_and_the_next_started_names_both():
    # An outside check: a SIGTERM while horovod was starting and deepspeed shutting down said only "during deepspeed"
    from types import SimpleNamespace

    from harness.core.runner import Job, _during

    ds, hvd = (Job(None, None, SimpleNamespace(tag=""), SimpleNamespace(label=name), 0, name)
               for name in ("deepspeed", "horovod"))
    assert _during([ds]) == "during deepspeed (repeat 0)"
    assert _during([ds, hvd]) == "during deepspeed (repeat 0, ending) and horovod (repeat 0, starting)"


def test_an_evaluation_that_did_not_finish_says_where_a_model_may_fail_in_eval_mode(tmp_path):
    # An outside check: a transformer encoder's eval-mode fast path failed under amp and ZeRO-3 and the row said only
    # the error; the note now says what the evaluation does that training does not
    from typer.testing import CliRunner

    from conftest import RUNS, write_run
    from harness.cli import app
    from harness.ground.record import read_records, records_file
    from harness.reports.run_report import EVAL_MODE

    records = read_records(records_file(RUNS / "digits_cpu2_20261126-045209"))
    first = next(r for r in records if r["status"] == "ok")
    first["failed_parts"] = {"evaluation": "rank 1 exited with code 1; first error: AssertionError: NestedTensor"}
    run = write_run(tmp_path / "run", records)
    assert CliRunner().invoke(app, ["report", str(run)]).exit_code == 0
    md = (run / "report.md").read_text()
    assert (f"**{first['label']}** repeat {first['repeat']}: its evaluation did not finish (rank 1 exited with code 1; "
            f"first error: AssertionError: NestedTensor); its timed measurement was complete before it began and is "
            f"kept.{EVAL_MODE}") in md


def test_a_run_reports_provenance_gives_the_command_that_reruns_it_exactly():
    # an outside check: two runs of `compare run -a dp,ddp,horovod,apex` designed 222 and 172 timed steps, and each
    # report's command named neither: rerun from the report, a run designs its steps anew
    from pathlib import Path

    from harness.ground.record import read_records
    from harness.reports.run_report import provenance

    run = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "digits_cpu2_20261126-045209"
    records = read_records(run / "records.jsonl.gz")
    assert not any(line.startswith("- To rerun it exactly") for line in provenance(records))  # none recorded
    records[0].update(command="compare run -a ddp", rerun_command="compare run -a ddp --steps 172 --warmup 20")
    records[0]["env"]["git_commit"] = None
    lines = provenance(records)
    assert lines[1] == ("- To rerun it exactly (what it resolved written back: steps, warm-up, rows, order seed): "
                        "`compare run -a ddp --steps 172 --warmup 20`")
    assert lines[2].endswith("; git commit unknown")
