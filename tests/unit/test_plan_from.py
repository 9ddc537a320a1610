"""`compare plan --from RUN_DIR` (harness/model/measured.py): a plan whose compute comes from what a committed run
measured, its interval carried through; the run's own machine and world size reproduced; another GPU reached by
the ratio of peaks, the range widened as stated; torch.compile's measured speed-up as a knob; every input and
assumption in --json; bad input as one line and exit 2."""

import json
import shutil

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.ground.stats import geomean_interval
from harness.model import measured
from harness.model import planner as plan
from tests.conftest import RUNS, records_text

WIDEMLP = RUNS / "widemlp_cpu2_20261128-072753"  # CPU, world size 2, --breakdown
DIGITS = RUNS / "digits_cpu2_20261126-045209"  # CPU, world size 2, no --breakdown (and a dp row of 1 process)
# the same, its dp row (one process holding the whole global batch) read first: its batch had been taken as every
# row's, and the plan refused the run as asking for --global-batch 64 where the ddp rows ran 32
DP_FIRST = RUNS / "digits_cpu2_20261123-101734"
H200 = RUNS / "hf_h200_20261128-162431"  # one H200, a 300 M-parameter Llama, --breakdown, 2 launches a row


def _plan(*args):
    shown = CliRunner().invoke(app, ["plan", *args])
    assert shown.exit_code == 0, shown.output
    return shown


def _json(*args):
    return json.loads(_plan(*args, "--json").stdout)


def _edited(tmp_path, name, source, change):
    """A copy of the run `source` in tmp_path/name whose every record `change(record)` edited in place."""
    run = tmp_path / name
    run.mkdir()
    lines = []
    for line in records_text(source).splitlines():
        r = json.loads(line)
        change(r)
        lines.append(json.dumps(r))
    (run / "records.jsonl").write_text("\n".join(lines) + "\n")
    return run


def _launches(run, label):
    return [json.loads(line)["samples_per_s"] for line in records_text(run).splitlines()
            if json.loads(line).get("label") == label and json.loads(line).get("status") == "ok"]


@pytest.mark.parametrize("run", [WIDEMLP, DIGITS, DP_FIRST])
def test_planning_a_cpu_runs_own_machine_reproduces_what_it_measured(run):
    # The committed run's own machine and world size (a CPU has no profile: its own machine is all it can plan):
    # every measured row priced from its own step, each within its own 95% interval over its launches, the middle
    # figure its geometric mean; the range is that interval
    data = _json("--from", str(run))
    assert data["assumptions"]["compute"]["kind"] == "measured" and data["cluster"]["profile"] is None
    rows = {r["label"]: r for r in data["rows"]}
    labels = {json.loads(line)["label"] for line in records_text(run).splitlines()}
    assert set(rows) == labels
    for label, row in rows.items():
        interval = geomean_interval(_launches(run, label))
        assert interval["lo"] <= row["samples_per_s"]["mid"] <= interval["hi"]
        assert row["samples_per_s"]["mid"] == pytest.approx(interval["estimate"], rel=1e-9)
        assert row["samples_per_s"]["low"] == pytest.approx(interval["lo"], rel=1e-9)
        assert row["samples_per_s"]["high"] == pytest.approx(interval["hi"], rel=1e-9)
        assert row["compute_from"].startswith("its own step as measured")
    text = _plan("--from", str(run)).stdout
    assert f"compute from the run in {run} (" in text and "on the run's own machine: AMD EPYC, 2 cores" in text
    # the host's memory is what its 2 processes share: each is judged against its half (each had been judged
    # against all of it)
    host = json.loads(records_text(run).splitlines()[0])["env"]["memory_total_bytes"] / 2**30
    assert data["cluster"]["memory_gib"] == pytest.approx(host / 2)
    assert (f", {host / 2:.3g} GiB of host memory per process (its share: the host's memory is shared by its 2 "
            f"processes)") in " ".join(text.split())


def test_a_larger_batch_on_the_runs_own_machine_scales_its_compute_not_its_communication():
    run = measured.read(WIDEMLP)
    ddp = run.rows["ddp"]
    p = ddp.parts
    assert sum(p.values()) == pytest.approx(ddp.step_s) and p["comm"] > 0  # --breakdown split the step
    row = next(r for r in _json("--from", str(WIDEMLP), "--batch", "32")["rows"] if r["label"] == "ddp")
    step = 2 * (p["forward"] + p["backward"]) + p["optimizer"] + p["other"] + p["comm"]
    assert row["step_s"]["mid"] == pytest.approx(step) and row["exposed_s"] == pytest.approx(p["comm"])
    assert row["samples_per_s"]["mid"] == pytest.approx(2 * 32 / step)


def test_checkpointing_adds_each_rows_recompute_to_its_own_measured_step_too():
    # an audit's --checkpointing full left every measured row's step as the run measured it (no recompute) while a
    # row priced from another's compute got its recompute, which reordered the ranking: every row now pays it, at
    # the FLOP rate it computed at
    run = measured.read(WIDEMLP)
    plain = {r["label"]: r for r in _json("--from", str(WIDEMLP))["rows"]}
    data = _json("--from", str(WIDEMLP), "--checkpointing", "full")
    model = data["model"]
    assert model["recompute_flops_per_sample"] > 0
    for row in data["rows"]:
        measured_row = run.rows[row["label"]]
        per_sample = (measured_row.parts["forward"] + measured_row.parts["backward"]) / measured_row.per_rank_batch
        recompute = model["recompute_flops_per_sample"] / model["flops_per_sample"] * per_sample * data["per_gpu_batch"]
        assert row["step_s"]["mid"] == pytest.approx(plain[row["label"]]["step_s"]["mid"] + recompute, rel=1e-9)
        assert row["compute_from"].endswith("and the recompute of full checkpointing at its own FLOP rate")


def test_a_run_without_breakdown_says_its_communication_is_inside_its_compute():
    rows = {r["label"]: r for r in _json("--from", str(DIGITS))["rows"]}
    assert rows["ddp"]["compute_from"] == "its own step as measured (its communication inside: no --breakdown)"
    assert rows["dp"]["devices"] == 1 and rows["ddp"]["devices"] == 2  # each row at the processes it ran
    assert "step split by no --breakdown: the timed step at 2 processes taken whole" in _plan("--from",
                                                                                             str(DIGITS)).stdout


@pytest.mark.slow  # seconds: left out of make test-fast
def test_the_h200_run_plans_its_own_gpu_as_it_measured_and_other_rows_from_its_fastest():
    # On its own GPU (the H200 profile) at world size 1: each measured bf16 row is its own step (2 launches a row:
    # their spread, said so, not an interval); ZeRO-1 and ZeRO-2, which the run did not measure, from its fastest
    # bf16 row's compute, amp's
    data = _json("--from", str(H200))
    assert data["cluster"]["profile"] == "h200-sxm-ndr400" and data["cluster"]["gpus"] == 1
    rows = {r["label"]: r for r in data["rows"]}
    amp = rows["amp:precision=bf16"]
    launches = _launches(H200, "amp:precision=bf16")
    assert amp["samples_per_s"]["mid"] == pytest.approx(geomean_interval(launches)["estimate"])
    assert amp["samples_per_s"]["low"] == pytest.approx(min(launches))
    assert amp["samples_per_s"]["high"] == pytest.approx(max(launches))
    z3 = rows["deepspeed:zero_stage=3:precision=bf16"]
    assert z3["samples_per_s"]["mid"] == pytest.approx(
        geomean_interval(_launches(H200, "deepspeed:zero_stage=3:precision=bf16"))["estimate"])
    assert rows["fsdp:param_dtype=bf16:reshard_after_forward=true"]["compute_from"].startswith("its own step")
    z1 = rows["deepspeed:zero_stage=1:precision=bf16"]
    assert z1["compute_from"].startswith("amp:precision=bf16's compute (the run's fastest row at bf16")
    text = _plan("--from", str(H200)).stdout
    assert "(2 launches: their spread, not an interval)" in text
    assert "memory against the run's own peaks (the largest over its launches): amp:precision=bf16 " in text


def test_at_another_batch_the_plan_says_how_it_carried_the_compute_and_sets_no_memory_against_the_runs_peaks():
    # The H200 run measured 8 a GPU. Planned at 16, the memory had been set beside the peaks measured at 8 (+48%
    # for amp, read as the plan's error); at 16 there is no measured peak to check it against
    text = _plan("--from", str(H200), "--batch", "16").stdout
    assert "memory against the run's own peaks" not in text
    assert ("batch: planned at 16 per GPU, measured at 8 per process: each row's forward and backward carried in "
            "proportion to the batch; a step does not grow in proportion to its batch") in text
    assert "batch: planned at" not in _plan("--from", str(H200), "--batch", "8").stdout


@pytest.mark.slow  # seconds: left out of make test-fast
def test_another_gpu_is_reached_by_the_ratio_of_peaks_and_the_range_widens_as_stated():
    own = {r["label"]: r for r in _json("--from", str(H200))["rows"]}
    a100 = _json("--from", str(H200), "--gpu", "a100", "--gpus-per-node", "1")
    rows = {r["label"]: r for r in a100["rows"]}
    amp, here = rows["amp:precision=bf16"], own["amp:precision=bf16"]
    # an A100's bf16 peak is 312 TFLOP/s against the H200's 989.4: the compute 3.17x as long, then the MFU there
    # taken as 1.00-1.54 the run's (toward a lower peak), 1.24 in the middle
    k = 989.4 / 312
    assert amp["compute_s"] == pytest.approx(here["compute_s"] * k / (1 / 0.65) ** 0.5, rel=0.02)
    assert amp["step_s"]["high"] / amp["step_s"]["low"] > 1.3 > here["step_s"]["high"] / here["step_s"]["low"]
    text = _plan("--from", str(H200), "--gpu", "a100", "--gpus-per-node", "1").stdout
    assert ("compute carried from NVIDIA H200 (989.4 TFLOP/s dense bf16) to NVIDIA A100 SXM4 (40GB or 80GB) "
            "(312 TFLOP/s): x3.17 by the ratio of peaks, and the MFU there taken as x1.00-1.54 the run's") in text
    assert "each range widens: amp:precision=bf16 -2%/+2% -> -" in text
    # the H100 has the H200's peak: no ratio, the MFU within +-10% (no published pair, said so)
    h100 = _plan("--from", str(H200), "--gpu", "h100", "--gpus-per-node", "1").stdout
    assert "x1 by the ratio of peaks, and the MFU there taken as x0.90-1.10 the run's" in h100
    assert "no published pair" in h100


def test_more_gpus_of_the_runs_own_kind_add_communication_to_its_compute():
    one = {r["label"]: r for r in _json("--from", str(H200))["rows"]}
    eight = {r["label"]: r for r in _json("--from", str(H200), "--gpus-per-node", "8")["rows"]}
    fsdp = "fsdp:param_dtype=bf16:reshard_after_forward=true"
    assert eight[fsdp]["compute_from"] == "its own compute" and eight[fsdp]["comm_s"] > 0
    assert eight[fsdp]["step_s"]["mid"] >= one[fsdp]["step_s"]["mid"] * 0.99
    assert eight["amp:precision=bf16"]["samples_per_s"]["mid"] > 7 * one["amp:precision=bf16"]["samples_per_s"]["mid"]


def test_json_carries_every_input_and_assumption():
    data = _json("--from", str(H200), "--gpu", "h100", "--nodes", "2", "--checkpointing", "selective:2")
    assert data["inputs"]["--from"] == str(H200) and data["inputs"]["--gpu"] == "h100"
    assert data["inputs"]["--checkpointing"] == "selective:2" and data["model"]["checkpointing"] == "selective:2"
    a = data["assumptions"]
    assert a["allocator_headroom"] == plan.ALLOCATOR_HEADROOM and a["tie"] == plan.TIE
    assert a["compute"]["mfu_transfer"]["equal"] == [0.9, 1.1] and a["compute"]["run"] == str(H200)
    assert a["overlap_compute_slowdown"] == pytest.approx(0.189)
    assert set(a["compute"]["rows"]) >= {"amp:precision=bf16", "ddp"}
    row = data["rows"][0]
    for key in ("model_state_bytes", "buffers", "activation_bytes", "loss_bytes", "headroom_bytes", "total_bytes",
                "compute_from", "rule"):
        assert key in row
    assumed = _json("-w", "digits")
    assert assumed["assumptions"]["compute"] == {"kind": "assumed", "utilisation": [0.1, 0.3, 0.5], "what": (
        "FLOPs over the dtype's peak at each assumed utilisation (low, middle, high)")}
    assert "an assumed utilisation (--from RUN_DIR prices it from a run instead)" in _plan("-w", "digits").stdout


def _compiled_copy(tmp_path, speedup=1.25):
    """The H200 run with a made-up compiled amp row beside its plain one (samples/s x speedup): no committed run
    measured one. Test data, not a measurement."""
    out = tmp_path / "run"
    out.mkdir()
    lines = records_text(H200).splitlines()
    extra = []
    for line in lines:
        r = json.loads(line)
        if r.get("label") == "amp:precision=bf16" and r.get("status") == "ok":
            r["label"] = "amp:precision=bf16:compile=true"
            r["controls"]["knobs"]["compile"] = True
            r["samples_per_s"] *= speedup
            r["step_time_s"] = {k: (v / speedup if isinstance(v, float) and k != "n" else v)
                                for k, v in r["step_time_s"].items()}
            extra.append(json.dumps(r))
    (out / "records.jsonl").write_text("\n".join(lines + extra) + "\n")
    return out


@pytest.mark.slow  # seconds: left out of make test-fast
def test_compile_takes_the_speed_up_the_run_measured(tmp_path):
    run = _compiled_copy(tmp_path)
    data = _json("--from", str(run), "--compile")
    rows = {r["label"]: r for r in data["rows"]}
    assert all(label.endswith(":compile=true") for label in rows)
    # the compiled row the run measured is its own step; a row it measured only plain gets the measured speed-up
    assert rows["amp:precision=bf16:compile=true"]["samples_per_s"]["mid"] == pytest.approx(1.25 * 143.8, rel=0.01)
    plain = {r["label"]: r for r in _json("--from", str(run))["rows"]}
    z3, z3c = plain["deepspeed:zero_stage=3:precision=bf16"], rows["deepspeed:zero_stage=3:precision=bf16:compile=true"]
    assert z3c["compute_from"].endswith("x0.80 for torch.compile")
    assert z3c["step_s"]["mid"] < z3["step_s"]["mid"]
    sp = data["assumptions"]["compute"]["compile_speedup"]
    assert sp["estimate"] == pytest.approx(1.25) and sp["compiled"] == "amp:precision=bf16:compile=true"
    assert "horovod (has no compile knob)" not in _plan("--from", str(run), "--compile").stdout  # not at bf16


@pytest.mark.parametrize("args, message", [
    (["--from", "nosuchdir"], "--from nosuchdir does not exist; give a directory written by `compare run`"),
    (["--from", "tests"], "--from tests holds no records.jsonl; give a directory written by `compare run`"),
    (["--from", str(RUNS / "comm_cpu2_n2_20261123-121520")], f"--from {RUNS / 'comm_cpu2_n2_20261123-121520'} "
                                                             f"holds the results of `compare comm`; give a directory "
                                                             f"written by `compare run`"),
    (["--from", str(H200), "-w", "digits"], f"--from {H200} is a run of workload hf, not digits; plan -w hf (or "
                                            f"leave -w out)"),
    (["--from", str(H200), "-o", "layers=4"], f"--from {H200} ran workload hf with other options: layers=4 (the run: "
                                              f"8); a plan from a run prices the model it ran"),
    (["--from", str(H200), "--params", "7e9", "--layers", "32"], "--from prices the run's own workload (hf), not a "
                                                                 "transformer given by --params"),
    (["--from", str(WIDEMLP), "--gpu", "h100"], f"--from {WIDEMLP} ran on a CPU (AMD EPYC, 2 cores), whose peak "
                                                f"FLOP/s is not known: its compute cannot be carried to "
                                                f"h100-sxm-ndr400; plan the run's own machine"),
    (["--from", str(WIDEMLP), "--nodes", "2"], f"--from {WIDEMLP} ran on a CPU (AMD EPYC, 2 cores), which has no "
                                               f"hardware profile: only its own machine at its own world size (2)"),
    (["--from", str(H200), "--dtype", "fp16"], f"--from {H200} measured no fp16 row (its rows ran in bf16, fp32)"),
    # options that would change what the run measured where no row's measurement can carry them: another optimizer
    # (an audit's --optimizer adamw priced AdamW's memory beside SGD's measured steps), and a batch or checkpointing
    # where each step's communication is inside it (--global-batch 128 doubled the step, communication and all)
    (["--from", str(DIGITS), "--optimizer", "adamw"], f"--optimizer adamw: --from {DIGITS} trained with sgd (workload "
                                                      f"digits's optimizer), and every step it measured holds sgd's "
                                                      f"optimizer step; leave out --optimizer, plan without --from"),
    (["--from", str(DIGITS), "--global-batch", "128"], f"--from {DIGITS} measured its steps at 2 processes without "
                                                       f"--breakdown, so each step's communication is inside it, not "
                                                       f"apart: --global-batch (64 per process where it ran 32) would "
                                                       f"scale each step by the batch, its communication with it; "
                                                       f"leave that option out, or plan from a run made with "
                                                       f"--breakdown"),
    (["--from", str(DIGITS), "--batch", "16"], f"--from {DIGITS} measured its steps at 2 processes without "
                                               f"--breakdown, so each step's communication is inside it, not apart: "
                                               f"--batch (16 per process where it ran 32)"),
    (["--from", str(DIGITS), "--checkpointing", "full"], f"--from {DIGITS} measured its steps at 2 processes without "
                                                         f"--breakdown, so each step's communication is inside it, "
                                                         f"not apart: --checkpointing full would price the recompute"),
    (["--from", str(WIDEMLP), "--attention", "eager"], f"--attention eager: --from {WIDEMLP} computed the model's "
                                                        f"attention as its code does"),
    (["-w", "digits", "--compile"], "--compile needs --from RUN_DIR: torch.compile's speed-up is taken from a run "
                                    "that measured a compiled row"),
    (["--from", str(H200), "--compile"], f"--compile: --from {H200} measured no compiled row (a knob compile=true); "
                                         f"add one beside its plain row, e.g. compare run -a ddp,ddp:compile=true"),
    (["-w", "digits", "--checkpointing", "selective:0"], "--checkpointing selective:0: N must be a whole number of at "
                                                         "least 1 (every Nth block checkpointed, torchtitan's "
                                                         "selective_ac_option), or op for its per-op policy"),
    (["-w", "digits", "--checkpointing", "selective:-2"], "--checkpointing selective:-2: N must be a whole number"),
    (["-w", "digits", "--checkpointing", "selective:two"], "--checkpointing selective:two: N must be a whole number"),
    (["-w", "digits", "--checkpointing", "full:2"], "unknown --checkpointing full:2; choose from none, full, "
                                                    "selective"),
    (["--params", "7e9", "--layers", "32", "--checkpointing", "selective"],
     "--checkpointing selective (the per-op policy) needs --hidden"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    shown = CliRunner().invoke(app, ["plan", *args])
    assert shown.exit_code == 2 and shown.stdout == "", shown.output
    assert shown.stderr.startswith(f"error: {message}") and shown.stderr.count("\n") == 1, shown.stderr


def test_a_join_of_runs_is_refused_naming_the_runs_to_plan_from(tmp_path):
    # a join (`compare join`: sessions.json, no records) was told it "holds no records.jsonl", as if it were no
    # results at all: it is one, of several runs, and a plan reads one of them
    join = tmp_path / "join"
    join.mkdir()
    (join / "sessions.json").write_text(json.dumps({"command": "compare join", "sessions": [f"../{WIDEMLP.name}",
                                                                                            "../other"]}))
    shown = CliRunner().invoke(app, ["plan", "--from", str(join)])
    assert shown.exit_code == 2 and shown.stdout == ""
    assert shown.stderr == (f"error: --from {join} is a join of runs (`compare join`: sessions.json, no records of its "
                            f"own), and a plan prices one run's measurements; plan --from one of the runs it joins: "
                            f"{tmp_path / WIDEMLP.name}, {tmp_path / 'other'}\n")


def test_a_run_with_no_row_that_ran_is_refused(tmp_path):
    run = _edited(tmp_path, "failed", WIDEMLP, lambda r: r.update(status="failed", reason="killed"))
    shown = CliRunner().invoke(app, ["plan", "--from", str(run)])
    assert shown.exit_code == 2 and shown.stdout == ""
    assert shown.stderr == (f"error: --from {run}: no row of it ran to the end (status failed); give a run with a "
                            f"row whose status is ok\n")
    shutil.rmtree(run)


def test_the_gpu_scripts_check_passes_on_the_committed_h200_run(capsys):
    # make gpu-check's plan phase (harness/gpu/plan_from_check.py), run here on the fourth lease's records: every
    # measured row planned on its own GPU at world size 1 within 10% of what it measured
    import importlib.util

    from tests.conftest import REPO

    spec = importlib.util.spec_from_file_location("plan_from_check", REPO / "harness" / "gpu" / "plan_from_check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    assert check.main([str(H200)]) == 0
    out = capsys.readouterr().out
    assert "plan: amp:precision=bf16: measured 143.8 samples/s, planned 143.8 as amp:precision=bf16 (+0.0%" in out
    assert "every measured row within 0.0% of what it measured (bound 10%)" in out
    assert check.main([str(WIDEMLP.parent / "nosuch")]) == 2


def test_a_run_on_a_gpu_without_a_profile_is_refused(tmp_path):
    # no peak is known for it: neither its own machine nor another GPU can be priced from it
    run = _edited(tmp_path, "l4", H200, lambda r: (r["env"].update(gpus=["NVIDIA L4"]), r.pop("mfu", None)))
    for extra, message in (([], f"error: --from {run} ran on NVIDIA L4, which has no hardware profile: its own "
                                f"machine cannot be planned, nor its compute carried (its peak is not known); add a "
                                f"profile (harness/model/profiles/README.md)\n"),
                           (["--gpu", "h100"], f"error: --from {run} ran on NVIDIA L4, which has no hardware profile: "
                                               f"its peak is not known, so its compute cannot be carried to "
                                               f"h100-sxm-ndr400; add a profile (harness/model/profiles/README.md)\n")):
        shown = CliRunner().invoke(app, ["plan", "--from", str(run), *extra])
        assert shown.exit_code == 2 and shown.stdout == "" and shown.stderr == message, shown.output


def _verdict(run):
    from harness.core import analysis
    from harness.ground.record import read_results

    return analysis.analyse(read_results(run, ("run",)))


def test_the_margin_between_two_measured_rows_is_the_runs_verdict_on_them():
    # ddp over horovod on the run's own machine: the ratio, its 95% interval and whether it is resolved are those of
    # the run's verdict (its pairs paired by round, Holm-adjusted over every pair), not one row's interval ends over
    # the other's
    from harness.core.analysis import oriented

    rec = _json("--from", str(WIDEMLP))["recommendation"]
    assert (rec["label"], rec["next"], rec["tied"]) == ("ddp", "horovod", [])
    want = oriented(_verdict(WIDEMLP)["pairs"], "ddp", "horovod")
    assert want["outcome"] == "faster" and rec["ratio"]["resolved"] and rec["ratio"]["verdict"] == "faster"
    assert rec["ratio"]["mid"] == pytest.approx(want["estimate"], rel=1e-9)
    assert (rec["ratio"]["low"], rec["ratio"]["high"]) == pytest.approx((want["lo"], want["hi"]), rel=1e-9)
    assert (f"{want['estimate']:.2f}x [{want['lo']:.2f}-{want['hi']:.2f}] faster than horovod (95% interval of the "
            f"measured rows' ratio, in that run alone)" in _plan("--from", str(WIDEMLP)).stdout)


def test_a_margin_the_sessions_joined_before_on_the_machine_put_either_way_says_so(tmp_path):
    # an outside check: a plan --from a run repeated its 1.91x [1.53-2.38] where the run's own report said that the
    # sessions joined before on the machine put a new session's estimate of the pair anywhere in [0.14-32.28]
    import json

    from harness.ground.record import read_records

    records = read_records(next(WIDEMLP.glob("records.jsonl*")))
    for r in records:
        r["between_sessions"] = {"sessions": 4, "date": "2026-11-30", "per_pair": [
            {"a": "horovod", "b": "ddp", "prediction": [0.25, 2.5]}]}
    run = tmp_path / "run"
    run.mkdir()
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    rec = _json("--from", str(run))["recommendation"]
    assert rec["ratio"]["swamped"] == [[pytest.approx(0.4), pytest.approx(4.0)], 4]
    assert ("(95% interval of the measured rows' ratio, in that run alone), but the 4 sessions joined before on that "
            "machine expect a new session's ratio anywhere in [0.40-4.00] (95% prediction interval): that run alone "
            "does not rank them on its machine") in _plan("--from", str(run)).stdout


def test_the_plan_claims_no_order_the_runs_verdict_does_not_resolve(tmp_path):
    # deepspeed slowed until its 95% interval against spawn (paired by round) excludes 1 while Holm's correction over
    # the run's 10 pairs leaves it unresolved: an audit's plan called a row "4.43x [1.16-16.98] faster" where the
    # run's verdict gave p = 0.25 after Holm's correction. It is tied with the fastest now, as the verdict has it
    from harness.core.analysis import oriented

    slow = 1.2 / oriented(_verdict(DIGITS)["pairs"], "spawn", "deepspeed")["lo"]  # the interval's end to 1.2

    def slowed(r):
        if r["label"] == "deepspeed" and r.get("samples_per_s"):
            r["samples_per_s"] /= slow

    run = _edited(tmp_path, "slowed", DIGITS, slowed)

    pair = oriented(_verdict(run)["pairs"], "spawn", "deepspeed")
    assert pair["lo"] > 1 and pair["p_holm"] >= 0.05 and pair["outcome"] == "not resolved"  # the case in point
    rec = _json("--from", str(run))["recommendation"]
    assert "deepspeed" in rec["tied"] + [rec["label"]] and rec["next"] != "deepspeed"
    assert "faster than deepspeed" not in _plan("--from", str(run)).stdout
    shutil.rmtree(run)


def test_a_row_that_was_not_data_parallel_across_the_world_size_is_priced_but_not_recommended():
    # dp ran on 1 device of the run's 2 (DataParallel on a CPU): the run's verdict leaves it out of its ranking
    # (devices_used below the world size), and so does the plan's recommendation, saying why; an audit's plan of
    # another such run recommended it, 2.64x ahead of ddp, at a step per 32 samples it never ran
    run = DIGITS
    data = _json("--from", str(run))
    rows = {r["label"]: r for r in data["rows"]}
    why = "ran on 1 device(s) of 2: not data-parallel across the world size, left out of the run's ranking too"
    assert rows["dp"]["left_out"] == why and all(r["left_out"] is None for k, r in rows.items() if k != "dp")
    assert data["recommendation"]["label"] != "dp" and "dp" not in data["recommendation"]["tied"]
    assert data["recommendation"]["next"] != "dp" and data["recommendation"]["fastest"] != "dp"
    assert f"left out of the recommendation: dp ({why})" in _plan("--from", str(run)).stdout
    # nor is it the row whose compute prices what the run did not measure (it has the most samples/s per process)
    source = measured.FromRun(measured.read(run), "fp32")
    assert source.run.rows["dp"].not_parallel == why and source.reference("fp32").label != "dp"


def _verdict_of(resolved, factors=(0.6, 1.6)):
    """A stand-in for FromRun.pair: the run's verdict on every pair of two different measured rows."""
    def pair(slow, fast):
        if slow is fast:
            return None
        return {"factors": factors, "resolved": (fast, slow) in resolved, "p_holm": 0.01 if (fast, slow) in resolved
                else 0.3, "outcome": "faster" if (fast, slow) in resolved else "not resolved"}
    return pair


def _measured_row(label, steps, measured, held, peak=None):
    return {"label": label, "fits": True, "step_s": {"mid": steps[1]}, "_steps": steps, "_assumed": [steps[1]] * 3,
            "_measured": measured, "_held": held, "_peak": peak, "model_state_bytes": held}


def test_two_measured_rows_the_runs_verdict_does_not_tell_apart_tie_where_their_ranges_ends_would_not():
    # an audit's plan called spawn 1.25x [1.03-1.52] faster than ddp: each figure of spawn's own range over ddp's,
    # 1.25 at every one here; the run's verdict on the two does not resolve them
    fast, slow, other = object(), object(), object()
    rows = [_measured_row("spawn", [0.8, 1.0, 1.2], fast, 2), _measured_row("ddp", [1.0, 1.25, 1.5], slow, 1),
            _measured_row("horovod", [4.0, 5.0, 6.0], other, 1)]
    assert plan.recommend(rows)["label"] == "spawn" and plan.recommend(rows)["next"] == "ddp"
    got = plan.recommend(rows, _verdict_of({(fast, other), (slow, other)}))
    assert got["label"] == "ddp" and got["tied"] == ["spawn"] and got["next"] == "horovod"
    assert got["slower"] == pytest.approx({"low": 0.75, "mid": 1.25, "high": 2.0, "interval": True, "resolved": False,
                                           "verdict": "not resolved", "p_holm": 0.3, "swamped": None})
    assert got["ratio"] == pytest.approx({"low": 4 * 0.6, "mid": 4.0, "high": 4 * 1.6, "interval": True,
                                          "resolved": True, "verdict": "faster", "p_holm": 0.01, "swamped": None})
    # rows priced from one measured row share its launches: their ratio is taken figure by figure
    same = [dict(r, _measured=fast) for r in rows]
    assert plan.recommend(same, _verdict_of(set()))["label"] == "spawn"


def test_the_rows_tied_with_the_fastest_are_those_before_the_first_resolved_behind_it():
    # an audit's plan tied the slowest, noisiest row with the fastest while a faster, more precise one ranked behind:
    # the group now ends at the first row resolved slower, so no tied row is slower than one left out of it
    a, y, x = object(), object(), object()
    rows = [_measured_row("a", [0.9, 1.0, 1.1], a, 1), _measured_row("y", [1.05, 1.1, 1.15], y, 1),
            _measured_row("x", [1.0, 3.0, 9.0], x, 1)]
    got = plan.recommend(rows, _verdict_of({(a, y)}))
    assert got["label"] == "a" and got["tied"] == [] and got["next"] == "y"


def test_memory_chooses_between_tied_rows_only_by_a_material_difference_never_below_what_the_run_measured():
    # an audit's plan recommended deepspeed over ddp "for 0.000317 GiB less per process", slower at the middle
    # figure, where the run measured deepspeed at 242 MiB and ddp at 215: ddp, the faster, is kept
    ddp, ds = object(), object()
    gib, mib = 2**30, 2**20
    rows = [_measured_row("ddp", [0.9, 1.0, 1.1], ddp, 0.00134 * gib, peak=215 * mib),
            _measured_row("deepspeed", [0.95, 1.12, 1.3], ds, 0.00102 * gib, peak=242 * mib)]
    got = plan.recommend(rows, _verdict_of(set()), 23.5 * gib)
    assert got["label"] == "ddp" and got["tied"] == ["deepspeed"] and got["least_memory"] is None
    assert got["memory_bytes"] == {"ddp": 215 * mib, "deepspeed": 242 * mib}
    # without the measured peaks the plan's 0.000317 GiB is still no reason: 1% of the device's memory is
    unmeasured = [dict(r, _peak=None) for r in rows]
    assert plan.recommend(unmeasured, _verdict_of(set()), 23.5 * gib)["label"] == "ddp"
    # a material difference does choose: a third of the device
    lean = [unmeasured[0] | {"_held": 12 * gib}, unmeasured[1] | {"_held": 4 * gib}]
    got = plan.recommend(lean, _verdict_of(set()), 23.5 * gib)
    assert got["label"] == "deepspeed" and got["fastest"] == "ddp"


@pytest.mark.slow  # seconds: left out of make test-fast
def test_a_gpu_run_from_before_flops_were_counted_is_carried_by_its_gpus_own_peak(tmp_path):
    # the committed H200 runs of 2026-11-26 recorded no FLOPs (no tflops_per_device): carrying them to an H100 or an
    # A100 divided None by the target's peak and printed a traceback; the ratio of peaks needs the GPU's peak alone
    run = _edited(tmp_path, "old", H200, lambda r: (r.pop("tflops_per_device", None), r.pop("mfu", None)))
    assert measured.read(run).rows["amp:precision=bf16"].peak_tflops == pytest.approx(989.4)
    text = _plan("--from", str(run), "--gpu", "a100", "--gpus-per-node", "1").stdout
    assert ("compute carried from NVIDIA H200 (989.4 TFLOP/s dense bf16) to NVIDIA A100 SXM4 (40GB or 80GB) "
            "(312 TFLOP/s): x3.17 by the ratio of peaks") in text


def test_a_planned_ratio_that_is_not_the_runs_own_says_so_and_gives_the_measured_one():
    # An audit: at a batch the run did not measure, the plan's ratio (2.56x at batch 16) was labelled "95% interval of
    # the measured rows' ratio" where the run measured 2.53x; at the run's own batch the ratio is the run's
    own = _plan("--from", str(WIDEMLP)).stdout
    assert "faster than horovod (95% interval of the measured rows' ratio, in that run alone)" in own
    other = _plan("--from", str(WIDEMLP), "--batch", "64").stdout
    assert "(95% interval of the measured rows' ratio" not in other
    assert ("faster than horovod (planned here, the run measured 1.35x: its 95% interval's width, in that run alone, "
            "around the planned ratio)") in other
