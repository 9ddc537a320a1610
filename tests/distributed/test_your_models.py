"""Models users really train, through every backend that applies, each in one `compare run` of several rows (CPU,
gloo, world size 2): a GPT whose head is tied to its embedding (FSDP2's default units group the two); a head used on
alternate steps (DDP with find_unused_parameters, and the rows that differ saying which parameters and why, never
"random"); BatchNorm found without a declaration (skipped with the reason, or checked and passing with sync_bn);
DDP's own failure naming the knob where the check before launching could not see it coming.

The models are tests/fixtures/models.py, written as docs/your-model.md tells a user to."""

import pytest

import adapters
from conftest import REPO, run_compare

pytestmark = pytest.mark.distributed
MODELS = REPO / "tests" / "fixtures" / "models.py"


def _ok(rows, label):
    """The row's record, or a skip where its framework is not installed here."""
    why = adapters.availability(label.split(":")[0], "cpu", 2)
    if not why:
        pytest.skip(f"{label} is not available here: {why.reason}")
    rec = rows[label]
    assert rec["status"] == "ok", (label, rec.get("reason"), rec.get("log_tail"))
    return rec


def _passes(rec):
    eq = rec["equivalence"]
    assert eq["checked"] is True and eq["passed"] is True, (rec["label"], rec["max_param_diff"], eq)


TIED = ("ddp", "spawn", "fsdp", "deepspeed:zero_stage=0", "deepspeed:zero_stage=3", "horovod")


@pytest.fixture(scope="module")
def tied(tmp_path_factory):
    return run_compare(tmp_path_factory.mktemp("tied") / "run", "-w", f"{MODELS}:tied", "-a", ",".join(TIED),
                       "--steps", "2", "--warmup", "1", "--equiv-steps", "3")[0]


@pytest.mark.parametrize("label", TIED)
def test_a_gpt_with_its_head_tied_to_its_embedding_matches_the_single_process_on_every_backend(tied, label):
    rec = _ok(tied, label)
    _passes(rec)
    if label == "fsdp":  # the default units, with the embedding and the head it shares its weight with as one group
        resolved = rec["adapter_info"]["resolved"]
        assert resolved["units_sharing_parameters"] == [["emb", "head"]] and resolved["units"] == 4


def test_hf_bert_whose_decoder_is_tied_to_its_embeddings_runs_on_fsdp_with_its_default_units(tmp_path):
    rows, _ = run_compare(tmp_path / "run", "-w", "hf", "-o", "model=bert", "-o", "layers=1", "-o", "hidden=32", "-o",
                          "heads=2", "-o", "intermediate=64", "-o", "vocab=256", "-o", "seq_len=16", "-a", "fsdp",
                          "--steps", "1", "--warmup", "1", "--equiv-steps", "0")
    resolved = _ok(rows, "fsdp")["adapter_info"]["resolved"]
    assert resolved["units_sharing_parameters"] == [["inner.bert.embeddings", "inner.cls.predictions"]]


AUX = ("ddp", "ddp:find_unused_parameters=true", "spawn:find_unused_parameters=true", "fsdp", "deepspeed",
       "deepspeed:zero_stage=3", "horovod")


@pytest.fixture(scope="module")
def aux(tmp_path_factory):
    out = tmp_path_factory.mktemp("aux") / "run"
    rows, proc = run_compare(out, "-w", f"{MODELS}:aux", "-a", ",".join(AUX), "--steps", "6", "--warmup", "0",
                             "--equiv-steps", "6")
    return rows, proc.stdout, (out / "report.md").read_text()


def test_ddp_without_find_unused_parameters_is_refused_before_launching_naming_the_knob(aux):
    rec = aux[0]["ddp"]
    assert rec["status"] == "unavailable"
    assert rec["reason"].startswith("the model leaves parameters without a gradient: aux.weight, aux.bias (in steps 2, "
                                    "4 of the 4 checked) in the check before launching")
    assert rec["reason"].endswith("(fix: add the knob find_unused_parameters=true (-a "
                                  "ddp:find_unused_parameters=true))")


@pytest.mark.parametrize("label", ["ddp:find_unused_parameters=true", "spawn:find_unused_parameters=true", "fsdp"])
def test_a_head_used_on_alternate_steps_matches_where_the_backend_leaves_its_gradient_none(aux, label):
    _passes(_ok(aux[0], label))


@pytest.mark.parametrize("label, cause", [
    ("deepspeed", "runtime/engine.py, _get_gradients_for_reduction"),
    ("deepspeed:zero_stage=3", "a stale gradient is applied again"),
    ("horovod", "horovod/torch/optimizer.py, _allreduce_grad_async"),
])
def test_the_rows_that_differ_name_the_parameters_and_the_cause_never_randomness(aux, label, cause):
    rows, stdout, report = aux
    rec = _ok(rows, label)
    eq = rec["equivalence"]
    assert eq["checked"] is True and eq["passed"] is False
    assert [p["parameter"] for p in eq["largest_diffs"][:2]] == ["aux.weight", "aux.bias"]
    assert eq["largest_diffs"][0]["steps_without_gradient"] == [1, 3, 5]
    assert eq["why_failed"].startswith("the parameters that differ most, aux.weight by ")
    assert "had no gradient in steps 2, 4, 6 of the 6 compared" in eq["why_failed"] and cause in eq["why_failed"]
    assert "random" not in eq["why_failed"] and "not deterministic" not in eq["why_failed"]
    note = f"✗ in the max_param_diff column ({label}): {eq['why_failed']}."
    assert note in report and " ".join(note.split()) in " ".join(stdout.split())


@pytest.fixture(scope="module")
def aux_without_momentum(tmp_path_factory):
    return run_compare(tmp_path_factory.mktemp("aux0") / "run", "-w", f"{MODELS}:aux", "-o", "momentum=0", "-a",
                       "deepspeed:zero_stage=3,horovod", "--steps", "6", "--warmup", "0", "--equiv-steps", "6")[0]


def test_without_momentum_zero_filled_gradients_match_and_zero3s_stale_ones_do_not(aux_without_momentum):
    rows = aux_without_momentum
    _passes(_ok(rows, "horovod"))  # a zero gradient moves nothing without momentum or weight decay
    eq = _ok(rows, "deepspeed:zero_stage=3")["equivalence"]
    assert eq["passed"] is False and eq["largest_diffs"][0]["parameter"].startswith("aux.")
    assert "the last gradient it got" in eq["why_failed"]


def test_ddps_own_failure_names_the_knob_where_the_check_could_not_see_it(tmp_path):
    # The head is used in every step the check before launching runs (the first 4), then on alternate steps.
    rows, _ = run_compare(tmp_path / "run", "-w", f"{MODELS}:aux", "-o", "always_until=4", "-a", "spawn",
                          "--steps", "8", "--warmup", "0", "--equiv-steps", "0", expect_rc=1)
    rec = rows["spawn"]
    assert rec["status"] == "failed"
    assert "first error: RuntimeError: Expected to have finished reduction in the prior iteration" in rec["reason"]
    assert rec["reason"].endswith(
        "…; fix: a step left parameters without a gradient, which DDP's reducer waits for: add the knob "
        "find_unused_parameters=true (-a spawn:find_unused_parameters=true), or static_graph=true where the same "
        "parameters go unused in every step")
    cut = rec["reason"].split("; first error: ", 1)[1].split("…; fix: ", 1)[0]
    assert cut.endswith("`find_unused_parameters=True` to")  # shortened at a word


BN = ("ddp", "ddp:sync_bn=true", "fsdp", "dp")


@pytest.fixture(scope="module")
def batchnorm(tmp_path_factory):
    return run_compare(tmp_path_factory.mktemp("bn") / "run", "-w", f"{MODELS}:batchnorm", "-a", ",".join(BN),
                       "--steps", "3", "--warmup", "1", "--equiv-steps", "4")[0]


def test_batchnorm_found_without_a_declaration_skips_the_check_saying_why(batchnorm):
    for label, fix in (("ddp", "; knob sync_bn=true converts them to SyncBatchNorm (-a ddp:sync_bn=true)"),
                       ("fsdp", "")):
        eq = _ok(batchnorm, label)["equivalence"]
        assert eq["checked"] is False and eq["why_not_checked"] == (
            "BatchNorm statistics per process (BatchNorm1d): each process normalises its own 8 samples where the "
            "single process normalises all 16" + fix)


def test_sync_bn_computes_the_single_process_statistics_so_its_rows_are_checked_and_pass(batchnorm):
    rec = _ok(batchnorm, "ddp:sync_bn=true")
    _passes(rec)
    assert rec["equivalence"]["batch_norm"] == {"layers": "BatchNorm1d", "statistics": "global batch"}
    assert rec["adapter_info"]["resolved"]["sync_batch_norm_layers"] == 1
    # The running statistics too: evaluated with them after the same 4 steps, it scores as the one process (dp on a
    # CPU is one module over the whole batch) does.
    one = _ok(batchnorm, "dp")
    _passes(one)
    assert rec["eval"]["loss"] == pytest.approx(one["eval"]["loss"], rel=1e-5, abs=1e-6)
    assert rec["eval"]["loss"] != pytest.approx(_ok(batchnorm, "ddp")["eval"]["loss"], rel=1e-5, abs=1e-6)


def test_a_model_built_in_fp64_with_bool_buffers_runs_as_built_on_fsdp_and_horovod(tmp_path):
    # FSDP2 once cast it to fp32 (its default policy named float32) and passed at 1.5e-8 where the others were exact;
    # Horovod's broadcast of rank 0's state failed on the bool buffer ("Tensor type torch.BoolTensor is not
    # supported"). DeepSpeed cannot reduce fp64 gradients: refused before launching, with the fix.
    rows, _ = run_compare(tmp_path / "run", "-w", f"{MODELS}:typed", "-o", "dtype=float64", "-a",
                          "fsdp,horovod,deepspeed", "--repeats", "1", "--no-plots")
    for label in ("fsdp", "horovod"):
        rec = _ok(rows, label)
        _passes(rec)
        assert rec["max_param_diff"] == 0.0 and rec["controls"]["precision"] == "fp64", label
        assert rec["equivalence"]["reference"].startswith("single process, fp64,")
    assert rows["fsdp"]["dtypes"]["compute"] == "fp64" and rows["fsdp"]["dtypes"]["reduce"] == "fp64"
    assert rows["deepspeed"]["status"] == "unavailable"
    assert rows["deepspeed"]["reason"].startswith("the model's parameters are fp64, and DeepSpeed reduces gradients")


def test_a_models_own_sync_batch_norm_runs_on_the_cpu_with_sync_bn(tmp_path):
    # torch's SyncBatchNorm runs on CUDA only and DDP refuses a CPU model holding one: with sync_bn=true the layer
    # becomes a plain BatchNorm whose statistics go over gloo, and the row matches the single process
    rows, _ = run_compare(tmp_path / "run", "-w", f"{MODELS}:syncbn", "-a", "spawn:sync_bn=true,fsdp", "--repeats",
                          "1", "--no-plots")
    rec = _ok(rows, "spawn:sync_bn=true")
    _passes(rec)
    assert rec["equivalence"]["batch_norm"] == {"layers": "SyncBatchNorm", "statistics": "global batch"}
    assert rows["fsdp"]["status"] == "unavailable" and "SyncBatchNorm" in rows["fsdp"]["reason"]


def test_a_models_own_optimizer_class_is_kept_as_built_by_fsdp_and_horovod(tmp_path):
    # FSDP2's row rebuilt the optimizer from its class with the groups alone: a constructor requiring its lr failed,
    # and the instance's own warm-up length took its default. Horovod's DistributedOptimizer does the same rebuild
    # itself: the failure now names it with the fix, the instance's attributes are carried over, and its
    # broadcast_optimizer_state step, which advances the optimizer's own warm-up counter, is named in the ✗
    strict, _ = run_compare(tmp_path / "strict", "-w", f"{MODELS}:own_optimizer", "-o", "strict=true", "-a",
                            "fsdp,horovod", "--repeats", "1", "--no-plots")
    _passes(_ok(strict, "fsdp"))
    if adapters.availability("horovod", "cpu", 2):
        assert strict["horovod"]["status"] == "failed"
        assert ("TypeError: Horovod's DistributedOptimizer rebuilds StrictSGD from its param groups alone: "
                "StrictSGD.__init__() missing 1 required positional argument: 'lr'; " in strict["horovod"]["reason"]
                ), strict["horovod"]["reason"]
        assert "fix: give every argument of StrictSGD.__init__ but the parameters a default" in strict["horovod"][
            "reason"]
    rows, _ = run_compare(tmp_path / "plain", "-w", f"{MODELS}:own_optimizer", "-a",
                          "horovod,horovod:broadcast_optimizer_state=false", "--repeats", "1", "--no-plots")
    _passes(_ok(rows, "horovod:broadcast_optimizer_state=false"))  # warm=4 carried over: its default is 3
    rec = _ok(rows, "horovod")
    assert rec["equivalence"]["passed"] is False
    assert "changed the optimizer's own settings (n 0 → 1, group 0's lr 0.1 → 0.025" in rec["equivalence"][
        "why_failed"], rec["equivalence"]["why_failed"]


def test_an_optimizer_over_some_parameters_is_read_back_from_zero3(tmp_path):
    # ZeRO-3 keeps no fp32 partition of a parameter its optimizer does not hold, and reading the parameters back
    # for the equivalence check failed on it ("KeyError: 0", DeepSpeed's grad_position)
    rows, _ = run_compare(tmp_path / "run", "-w", f"{MODELS}:own_optimizer", "-o", "head_only=true", "-a",
                          "deepspeed:zero_stage=3", "--repeats", "1", "--no-plots")
    _passes(_ok(rows, "deepspeed:zero_stage=3"))


def test_an_optimizer_that_clips_inside_its_own_step_is_named_where_zero_gives_it_a_partition(tmp_path):
    # ZeRO-1 calls the workload's optimizer on this rank's fp32 partition: its clip saw half the gradient norm. The
    # ✗ said only "no parameter left without a gradient explains it" (before, a "padding" count was blamed)
    rows, _ = run_compare(tmp_path / "run", "-w", f"{MODELS}:own_optimizer", "-o", "clip=0.05", "-o", "warm=1", "-a",
                          "ddp,deepspeed:zero_stage=1", "--repeats", "1", "--no-plots")
    _passes(_ok(rows, "ddp"))
    rec = _ok(rows, "deepspeed:zero_stage=1")
    assert rec["equivalence"]["passed"] is False
    assert ("the workload's optimizer has a step() of its own (WarmSGD.step), which ZeRO-1 calls on this rank's "
            "partition of the fp32 parameters and gradients alone") in rec["equivalence"]["why_failed"]
