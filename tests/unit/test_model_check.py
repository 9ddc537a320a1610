"""What the check of a user's model finds before launching (harness/core/model_check.py), and what the rows and the
report make of it: parameters a step leaves without a gradient (a DDP row refused, naming find_unused_parameters),
BatchNorm found without a declaration (the check skipped, or run where the row syncs the statistics), randomness told
apart from state, and a failed check explained by the parameters that differ most."""

import sys
from types import SimpleNamespace

import textwrap

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

import adapters
import workloads
from adapters.base import ModelFacts
from harness.cli import app
from harness.core import assemble, model_check, requests, workload_checks
from harness.reports import run_report
from harness.shared.text import shorten

from conftest import REPO

MODELS = REPO / "tests" / "fixtures" / "models.py"


def checked(name, *options, world=2, path=MODELS, equiv_steps=None):
    """Workload `name` of the file at `path` (the fixture models by default), loaded and checked as `compare run`
    checks it before launching, at world size `world`."""
    req = requests.RunRequest(workload=f"{path}:{name}", options=list(options), world_size=world,
                              equiv_steps=equiv_steps)
    w = workload_checks.load_workload(req)
    workload_checks.check_user_code(w, req, w.global_batch)
    return w


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


# ---- messages are shortened at a word -----------------------------------------------------------------------------

def test_a_long_message_is_cut_at_a_word_with_an_ellipsis_never_inside_one():
    ddp = ("RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. This "
           "error indicates that your module has parameters that were not used in producing loss. You can enable "
           "unused parameter detection by passing the keyword argument `find_unused_parameters=True` to "
           "`torch.nn.parallel.DistributedDataParallel`, and by making sure all `forward` function outputs "
           "participate in calculating loss.")
    short = shorten(ddp)
    assert len(short) <= 300 and short.endswith("`find_unused_parameters=True` to…")
    assert ddp.startswith(short[:-1])
    assert shorten("one two three", 9) == "one two…" and shorten("a\n b  c") == "a b c"
    assert shorten("x" * 20, 10) == "x" * 9 + "…"  # one word longer than the limit is the only thing cut


# ---- randomness, state, NaN -----------------------------------------------------------------------------------------

class Counter(nn.Linear):
    def __init__(self):
        super().__init__(4, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return super().forward(x) * self.calls


class Dropping(nn.Linear):
    def __init__(self):
        super().__init__(4, 4)

    def forward(self, x):
        return nn.functional.dropout(super().forward(x), 0.5, training=self.training)


class NotANumber(nn.Linear):
    def __init__(self):
        super().__init__(4, 4)

    def forward(self, x):
        return super().forward(x) * float("nan")


class Clock(nn.Linear):
    def __init__(self):
        super().__init__(4, 4)

    def forward(self, x):
        import random

        return super().forward(x) + random.random()


class Reordered(nn.Linear):
    """Sums in another order from one call to the next, as a CPU library choosing its threads by the load does: the
    outputs differ in their last bits only."""
    calls = 0

    def __init__(self):
        super().__init__(4, 4)

    def forward(self, x):
        Reordered.calls += 1
        return super().forward(x) * (1 + 1e-7 * (Reordered.calls % 2))


@pytest.mark.parametrize("kind, random, state", [
    (Counter, None, "calls: 0 → 1"),
    (Reordered, None, None),
    (NotANumber, None, None),
    (Dropping, "the same samples from the same state gave different outputs under two torch seeds (randomness in "
               "forward, e.g. a functional dropout)", None),
    (Clock, "two copies built alike gave different outputs for the same samples even with torch's generators seeded "
            "alike (randomness torch's seed does not control: Python's random, NumPy or the clock)", None),
])
def test_randomness_is_told_from_state_and_a_nan_output_is_neither(kind, random, state):
    x = torch.randn(2, 4)
    assert model_check.diagnose(kind, lambda m: m(x), seed=0) == (random, state)


def test_a_loss_that_draws_random_numbers_is_told_from_a_random_forward():
    # a sampled softmax drawing its negatives in the loss: the forward was found deterministic, and the ✗ blamed a
    # loss depending on the rest of its batch, whose fixes did not apply (drawn with the data: 1.2e-7 ✓)
    x = torch.randn(4, 4)

    def sampled(out):
        negatives = torch.randint(0, 4, (4, 3))
        return out.gather(1, negatives).logsumexp(1).mean()
    random, _ = model_check.diagnose(lambda: torch.nn.Linear(4, 4), lambda m: m(x), seed=0, loss=sampled)
    assert random == ("the same outputs gave different losses under two torch seeds: the loss draws random numbers "
                      "(negatives sampled in it, a random mask), and each process draws its own for its slice, where "
                      "the single process drew them for the whole batch")
    assert random.startswith(model_check.RANDOM_LOSS)
    assert model_check.diagnose(lambda: torch.nn.Linear(4, 4), lambda m: m(x), seed=0,
                                loss=lambda out: out.square().mean()) == (None, None)
    assert model_check.diagnose(lambda: torch.nn.Linear(4, 4), lambda m: m(x), seed=0,
                                loss=lambda out: out["missing"]) == (None, None)  # left to the loss's own check


class Cache:
    """Like a transformers DynamicCache: tensors held in layer objects, no equality of its own."""

    def __init__(self, *tensors):
        self.layers = [SimpleNamespace(keys=t, values=t * 2) for t in tensors]


def test_outputs_holding_objects_are_equal_when_what_they_hold_is():
    # A transformers causal LM's output carries its DynamicCache: compared by identity, two equal outputs were
    # "different", and every such model was called random (its ✗ blamed on randomness, never on its loss's count)
    x = torch.arange(6.0).reshape(2, 3)
    assert model_check.same({"logits": x, "cache": Cache(x, x + 1)}, {"logits": x.clone(), "cache": Cache(x, x + 1)})
    assert not model_check.same({"logits": x, "cache": Cache(x, x + 1)}, {"logits": x, "cache": Cache(x, x + 2)})
    assert not model_check.same(Cache(x), Cache(x, x))


@pytest.mark.slow  # seconds: left out of make test-fast
def test_a_transformers_causal_lm_is_not_called_random():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=16, resid_pdrop=0,
                                     embd_pdrop=0, attn_pdrop=0, bos_token_id=0, eos_token_id=0)
    ids = torch.randint(0, 64, (2, 8))
    assert model_check.diagnose(lambda: transformers.GPT2LMHeadModel(config), lambda m: m(input_ids=ids),
                                seed=0)[0] is None


@pytest.mark.slow  # seconds: left out of make test-fast
def test_a_stateful_deterministic_forward_is_never_called_random_before_launching():
    w = checked("aux")
    assert w.nondeterministic is None and w.stateful == "step: 0 → 1"


# ---- parameters without a gradient ----------------------------------------------------------------------------------

@pytest.mark.slow  # seconds: left out of make test-fast
def test_a_head_used_on_alternate_steps_is_found_from_the_first_steps_gradients():
    facts = checked("aux").model_facts
    assert facts.checked_steps == 4 and facts.no_gradient == {"aux.weight": [1, 3], "aux.bias": [1, 3]}
    assert facts.never_used == [] and facts.unused_text() == "aux.weight, aux.bias (in steps 2, 4 of the 4 checked)"
    never = checked("aux", "every=0").model_facts
    assert never.never_used == ["aux.weight", "aux.bias"]
    assert never.unused_text() == "aux.weight, aux.bias (in every one of the 4 checked)"
    assert checked("aux", "always_until=4").model_facts.no_gradient == {}  # used in every step the check sees
    assert checked("tied").model_facts.no_gradient == {} and checked("tied").model_facts.checked_steps == 4


def test_ddp_refuses_such_a_model_naming_the_knob_and_the_knob_or_a_static_graph_lets_it_run():
    facts = checked("aux").model_facts
    for name in ("ddp", "spawn", "amp"):
        avail = adapters.get(name)({}, "cpu").model_availability(facts)
        assert not avail and "DDP's reducer waits for every parameter's gradient" in avail.reason
        assert avail.fix == f"add the knob find_unused_parameters=true (-a {name}:find_unused_parameters=true)"
        assert adapters.get(name)({"find_unused_parameters": "true"}, "cpu").model_availability(facts)
    assert not adapters.get("ddp")({"static_graph": "true"}, "cpu").model_availability(facts)  # changes per step
    never = checked("aux", "every=0").model_facts
    assert adapters.get("ddp")({"static_graph": "true"}, "cpu").model_availability(never)
    assert adapters.get("ddp")({}, "cpu").model_availability(never).fix.endswith(
        ", or static_graph=true if they stay unused in every later step too (the check saw only the first 4; a "
        "parameter first used later fails static_graph at that step)")
    for name in ("fsdp", "deepspeed", "horovod", "dp"):
        assert adapters.get(name)({}, "cpu").model_availability(facts), name


def test_a_run_with_only_ddp_rows_that_would_fail_is_one_line_exit_2_naming_the_knob(tmp_path):
    out = tmp_path / "out"
    result = invoke("run", "-w", f"{MODELS}:aux", "-a", "ddp", "--out", out)
    assert result.exit_code == 2 and not out.exists(), result.output
    assert result.stderr == (
        f"error: adapter ddp cannot train workload {MODELS}:aux as given: the model leaves parameters without a "
        f"gradient: aux.weight, aux.bias (in steps 2, 4 of the 4 checked) in the check before launching, and DDP's "
        f"reducer waits for every parameter's gradient, so its launch would fail (\"Expected to have finished "
        f"reduction in the prior iteration\") (fix: add the knob find_unused_parameters=true (-a "
        f"ddp:find_unused_parameters=true))\n")


def test_ranks_that_leave_different_parameters_without_a_gradient_are_found_on_each_ranks_slices():
    # A branch some samples take: each rank's slices run on a model of its own, and where one rank gave the branch
    # a gradient and the other did not, FSDP2 and ZeRO-1/2/3 (which reduce only the gradients a rank has: gloo
    # aborts on the mismatch, NCCL hangs) are refused with the fix; DDP with find_unused_parameters, ZeRO-0 and
    # Horovod take it
    facts = checked("routed").model_facts
    assert facts.checked_ranks == 2 and facts.ranks_differ == {"rare.weight": [1, 2, 3], "rare.bias": [1, 2, 3]}
    assert facts.no_gradient["rare.weight"] == [0, 1, 2, 3] and facts.never_used == []
    assert facts.differ_text() == "rare.weight, rare.bias (in steps 2, 3, 4 of the 4 checked on 2 ranks)"
    fsdp = adapters.get("fsdp")({}, "cpu").model_availability(facts)
    assert not fsdp and fsdp.reason.startswith("the ranks leave different parameters without a gradient: rare.weight")
    assert "FSDP2 reduce-scatters only the gradients a rank has" in fsdp.reason
    assert fsdp.fix.startswith("let every rank's forward reach every parameter in every step: add 0 times the output")
    for stage in (1, 2, 3):
        zero = adapters.get("deepspeed")({"zero_stage": str(stage)}, "cpu").model_availability(facts)
        assert not zero and f"ZeRO-{stage} reduces the gradients each rank's backward produced" in zero.reason
        assert zero.fix.endswith("or zero_stage=0 (-a deepspeed:zero_stage=0), which gives a missing gradient zeros")
    for name, knobs in (("ddp", {"find_unused_parameters": "true"}), ("deepspeed", {}), ("horovod", {})):
        assert adapters.get(name)(knobs, "cpu").model_availability(facts), name
    assert not adapters.get("ddp")({}, "cpu").model_availability(facts)  # a parameter without a gradient on a rank
    fixed = checked("routed", "reach_all=true").model_facts  # the fix: 0 times the branch where no sample takes it
    assert fixed.no_gradient == {} and fixed.ranks_differ == {}
    assert adapters.get("fsdp")({}, "cpu").model_availability(fixed)
    # On one rank there is nothing to differ
    assert checked("routed", world=1).model_facts.ranks_differ == {}


def test_sparse_gradients_are_refused_by_the_backends_that_cannot_reduce_them():
    facts = checked("sparse").model_facts
    assert facts.sparse == ["0 (EmbeddingBag)"]
    fsdp = adapters.get("fsdp")({}, "cpu").model_availability(facts)
    assert not fsdp and fsdp.reason == ("the model gives sparse gradients (0 (EmbeddingBag): an embedding with "
                                        "sparse=True), which FSDP2 cannot reduce-scatter (its chunk_cat has no sparse "
                                        "kernel)") and fsdp.fix == "build the embedding with sparse=False (a dense gradient)"
    for stage in (1, 2, 3):
        assert not adapters.get("deepspeed")({"zero_stage": str(stage)}, "cpu").model_availability(facts)
    for name in ("ddp", "spawn", "amp", "deepspeed", "horovod"):
        assert adapters.get(name)({}, "cpu").model_availability(facts), name
    assert checked("sparse", "sparse=false").model_facts.sparse == []


def test_a_parameter_of_no_elements_or_not_contiguous_is_refused_where_a_backend_cannot_take_it():
    empty = checked("odd_layout").model_facts
    transposed = checked("odd_layout", "layout=transposed").model_facts
    assert (empty.empty, empty.non_contiguous) == (["odd"], [])
    assert (transposed.empty, transposed.non_contiguous) == ([], ["odd"])
    fsdp = adapters.get("fsdp")({}, "cpu").model_availability(empty)
    assert not fsdp and fsdp.reason == ("the model's parameter odd holds no element (a layer of size 0), which FSDP2 "
                                        "(it shards each parameter's storage) cannot shard")
    assert not adapters.get("deepspeed")({"zero_stage": "3"}, "cpu").model_availability(empty)
    for name, knobs in (("ddp", {}), ("horovod", {}), ("deepspeed", {}), ("deepspeed", {"zero_stage": "2"})):
        assert adapters.get(name)(knobs, "cpu").model_availability(empty), (name, knobs)
    horovod = adapters.get("horovod")({}, "cpu").model_availability(transposed)
    assert not horovod and horovod.reason == (
        "the model's parameter odd is not contiguous in memory (a transposed view made a Parameter), which Horovod (it "
        "all-reduces each gradient's storage as it is) cannot take as it is")
    assert horovod.fix == "make it contiguous where it is built: nn.Parameter(t.contiguous())"
    for name in ("fsdp", "deepspeed"):
        assert not adapters.get(name)({}, "cpu").model_availability(transposed), name
    for name in ("ddp", "spawn", "amp"):
        assert adapters.get(name)({}, "cpu").model_availability(transposed), name
    plain = checked("odd_layout", "layout=plain").model_facts
    assert all(adapters.get(name)({}, "cpu").model_availability(plain) for name in ("fsdp", "horovod", "deepspeed"))
    # a learned temperature: FSDP2's fully_shard and DeepSpeed's broadcast at initialize (every stage) failed at launch
    scalar = checked("odd_layout", "layout=scalar").model_facts
    assert (scalar.scalar, plain.scalar) == (["odd"], [])
    fsdp = adapters.get("fsdp")({}, "cpu").model_availability(scalar)
    assert not fsdp and fsdp.reason == ("the model's parameter odd has no dimension (a 0-dim tensor, such as a learned "
                                        "temperature), which FSDP2 (it shards each parameter's storage) cannot take")
    assert fsdp.fix == ("give it one dimension of size 1 where it is built: nn.Parameter(torch.tensor([0.0])) (it "
                        "broadcasts as the scalar did)")
    for stage in ("0", "1", "3"):
        assert not adapters.get("deepspeed")({"zero_stage": stage}, "cpu").model_availability(scalar), stage
    for name in ("ddp", "spawn", "amp", "horovod"):
        assert adapters.get(name)({}, "cpu").model_availability(scalar), name


def test_a_model_built_in_another_dtype_is_refused_by_the_backends_that_cannot_reduce_its_gradients():
    from adapters.base import mixed_precision_refusal

    assert checked("typed").model_facts.param_dtypes == ["fp32"]
    bf16 = checked("typed", "dtype=bfloat16").model_facts
    fp64 = checked("typed", "dtype=float64").model_facts
    assert bf16.param_dtypes == ["bf16"] and fp64.param_dtypes == ["fp64"]
    horovod = adapters.get("horovod")({}, "cpu").model_availability(bf16)
    assert not horovod and horovod.reason == (
        "the model's parameters are bf16, and Horovod 0.28.1 all-reduces gradients in fp16, fp32 or fp64 only "
        "(\"Tensor type ... is not supported\" at the first step)")
    assert adapters.get("horovod")({}, "cpu").model_availability(fp64)
    for stage in (0, 1, 2, 3):
        ds = adapters.get("deepspeed")({"zero_stage": str(stage)}, "cpu")
        assert ds.model_availability(bf16) and not ds.model_availability(fp64), stage
    assert ds.model_availability(fp64).fix == "build the model in fp32"
    for name in ("ddp", "fsdp"):
        assert adapters.get(name)({}, "cpu").model_availability(bf16), name
    # A mixed-precision row on a model that is not fp32: autocast leaves fp64 alone, so it would run unlabelled
    amp = adapters.get("amp")({"precision": "bf16"}, "cpu")
    assert mixed_precision_refusal(amp, checked("typed").model_facts) is None
    refused = mixed_precision_refusal(amp, fp64)
    assert not refused and refused.reason == (
        "its precision is bf16, a mixed precision defined over an fp32 model, and this model's parameters are fp64 "
        "as built (autocast leaves fp64 alone)")
    assert mixed_precision_refusal(adapters.get("ddp")({}, "cpu"), fp64) is None
    # complex parameters: autocast leaves them alone too, and building the model in fp32 is no fix for them (an
    # outside check: two real parameters read with view_as_complex ran on amp and matched on every row, 8.9e-8)
    complex_ = ModelFacts(param_dtypes=["fp32", "complex64"])
    refused = mixed_precision_refusal(amp, complex_)
    assert refused.reason.endswith("fp32+complex64 as built (autocast leaves complex tensors alone)")
    assert refused.fix.startswith("hold each complex parameter as two real ones (an fp32 parameter of shape (..., 2), "
                                  "read with torch.view_as_complex in the forward)")


def test_a_plain_rows_precision_is_the_dtype_its_model_was_built_in():
    # A model built in bf16 runs in bf16 on every plain row: labelled fp32, its rounding was judged at fp32's tolerance
    # (9.8e-4 ✗ with no cause); now "bf16", not checked (bf16 arithmetic), like a mixed-precision row
    from harness.rank.train import _precision

    ddp = adapters.get("ddp")({}, "cpu")
    frozen = nn.Linear(2, 2, dtype=torch.float64).requires_grad_(False)
    for dtype, label in ((torch.float32, "fp32"), (torch.bfloat16, "bf16"), (torch.float64, "fp64")):
        assert _precision(ddp, nn.Sequential(nn.Linear(2, 2, dtype=dtype), frozen)) == label
    assert _precision(adapters.get("amp")({"precision": "bf16"}, "cpu"), nn.Linear(2, 2)) == "bf16"
    # a model that mixes dtypes says so (the label said fp32); fp32 with fp64 is still exact arithmetic, checked
    assert _precision(ddp, nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2, dtype=torch.bfloat16))) == "bf16+fp32"
    assert _precision(ddp, nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2, dtype=torch.float64))) == "fp32+fp64"
    spec = SimpleNamespace(equiv_steps=4, global_batch=16)
    w = checked("typed")
    for precision, checked_ in (("fp32+fp64", True), ("bf16+fp32", False), ("complex64+fp32", True)):
        r0 = SimpleNamespace(precision=precision, compression="none", per_process_batch=8)
        eq = assemble.equivalence(spec, r0, w, ddp, {"w": 1e-7}, None, label="ddp")
        assert eq["checked"] is checked_, precision
    assert eq["reference"].startswith("single process, complex64+fp32, global batch 16")
    assert assemble.equivalence(spec, SimpleNamespace(precision="bf16+fp32", compression="none", per_process_batch=8),
                                w, ddp, {"w": 1e-7}, None, label="ddp")["why_not_checked"] == "bf16+fp32 arithmetic"


def test_a_models_own_sync_batch_norm_is_refused_on_the_cpu_where_torch_cannot_run_it():
    facts = checked("syncbn").model_facts
    assert facts.batch_norm == ["SyncBatchNorm"]
    ddp = adapters.get("ddp")({}, "cpu").model_availability(facts)
    for name in ("ddp", "fsdp", "deepspeed"):
        refused = adapters.get(name)({}, "cpu").model_availability(facts)
        assert not refused and refused.reason.startswith("the model holds torch.nn.SyncBatchNorm layers, which torch "
                                                         "runs on CUDA only"), name
        assert refused.fix == (f"the knob sync_bn=true (-a {name}:sync_bn=true) makes each such layer a BatchNorm "
                               f"whose statistics are summed over the ranks, on the CPU too")
        assert adapters.get(name)({"sync_bn": "true"}, "cpu").model_availability(facts), name
    assert adapters.get("horovod")({}, "cpu").model_availability(facts)  # no torch.distributed: per-process BatchNorm
    assert adapters.get("ddp")({}, "cuda").model_availability(facts)


@pytest.mark.parametrize("error", [
    # what torch says where a parameter is read outside its unit's forward, which the default units do not see (a
    # read in the loss, by a hook): each failed with torch's own line and no fix
    "RuntimeError: aten.index.Tensor got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor "
    "before calling distributed operators! (raised in sampled_loss (m6.py:385))",
    "RuntimeError: The differentiated Tensor at index 0 appears to not have been used in the graph. Set "
    "allow_unused=True if this is the desired behavior. (raised in forward (m6.py:424))"])
def test_an_fsdp_failure_over_a_parameter_met_as_a_shard_names_units(error):
    fsdp = adapters.get("fsdp")({}, "cpu")
    fix = fsdp.failure_fix(f"rank 1 exited with code 1; first error: {error}")
    assert fix.startswith("FSDP2 holds each unit's parameters as sharded DTensors outside that unit's own forward")
    assert fix.endswith("give `units=` that leaves its module to the root, where its parameters stay gathered through "
                        "the forward and the loss (units=lambda m: [m.encoder] naming the others, or units=lambda m: "
                        "[] for the whole model as one unit)")
    assert fsdp.failure_fix("RuntimeError: something else") is None


def test_the_ddp_failure_it_would_otherwise_give_names_the_knob():
    ddp = adapters.get("spawn")({}, "cpu")
    reason = ("rank 1 exited with code 1; first error: RuntimeError: Expected to have finished reduction in the prior "
              "iteration before starting a new one. This error indicates that your module has parameters that…")
    assert ddp.failure_fix(reason) == (
        "a step left parameters without a gradient, which DDP's reducer waits for: add the knob "
        "find_unused_parameters=true (-a spawn:find_unused_parameters=true), or static_graph=true where the same "
        "parameters go unused in every step")
    assert ddp.failure_fix("RuntimeError: something else") is None


@pytest.mark.parametrize("name, error", [
    ("ddp", "RuntimeError: Expected to mark a variable ready only once. This error is caused by one of the following"),
    ("deepspeed", "AssertionError: The parameter shared.0.bias has already been reduced. Gradient computed twice"),
    ("horovod", "AssertionError: Gradients were computed more than backward_passes_per_step times before call to "
                "step(). Increase backward_passes_per_step to accumulate gradients locally.")])
def test_a_gradient_made_twice_in_one_backward_names_reentrant_checkpointing_and_its_fix(name, error):
    # a block called three times under torch.utils.checkpoint(use_reentrant=True): each backend failed with its own
    # words and no fix (ddp:static_graph=true is one; use_reentrant=False is every backend's)
    fix = adapters.get(name)({}, "cpu").failure_fix(f"rank 0 exited with code 1; first error: {error}")
    assert fix.startswith("a parameter's gradient was made twice in one backward: reentrant activation "
                          "checkpointing (torch.utils.checkpoint with use_reentrant=True) of a module the forward "
                          "uses more than once; use use_reentrant=False"), fix
    assert fix.endswith("or the knob static_graph=true (-a ddp:static_graph=true)") == (name == "ddp")


def test_the_knobs_are_declared_like_the_others_so_compare_knobs_shows_them():
    for name in ("ddp", "spawn", "amp"):
        result = invoke("knobs", name)
        assert result.exit_code == 0, result.output
        text = " ".join(result.output.split())
        assert "find_unused_parameters" in text and "sync_bn" in text, name
    assert "find_unused_parameters" not in " ".join(invoke("knobs", "fsdp").output.split())


# ---- BatchNorm ------------------------------------------------------------------------------------------------------

def test_batchnorm_is_found_without_a_declaration():
    w = checked("batchnorm")
    assert w.batch_norm == "BatchNorm1d" and w.batch_dependence is None
    assert checked("aux").batch_norm is None
    assert model_check.batch_norm_layers(nn.Sequential(nn.BatchNorm2d(3), nn.BatchNorm2d(3), nn.BatchNorm1d(2))) == [
        "BatchNorm1d", "BatchNorm2d x 2"]
    assert workloads.get("resnet").batch_norm == "BatchNorm2d"


def _gradients(no_gradient, frozen=None):
    """The reference's record of gradients as the runner hands it over (runner.py: reference_gradients)."""
    return {"no_gradient": no_gradient, "frozen": frozen or {}}


def _equivalence(workload, adapter, diffs=None, gradients=None, label="ddp"):
    spec = SimpleNamespace(equiv_steps=4, global_batch=16)
    r0 = SimpleNamespace(precision="fp32", compression="none", per_process_batch=8)
    return assemble.equivalence(spec, r0, workload, adapter, {"w": 1e-7} if diffs is None else diffs, gradients,
                                label=label)


def test_a_run_without_a_reference_has_nothing_to_explain():
    spec = SimpleNamespace(equiv_steps=0, global_batch=16)
    r0 = SimpleNamespace(precision="fp32", compression="none", per_process_batch=8)
    eq = assemble.equivalence(spec, r0, checked("aux"), adapters.get("horovod")({}, "cpu"), None, None, label="x")
    assert eq["checked"] is True and eq["passed"] is False and "why_failed" not in eq and "largest_diffs" not in eq


def test_batchnorm_skips_the_check_with_the_reason_unless_the_row_syncs_the_statistics():
    w = checked("batchnorm")
    eq = _equivalence(w, adapters.get("ddp")({}, "cpu"))
    assert eq["checked"] is False and eq["why_not_checked"] == (
        "BatchNorm statistics per process (BatchNorm1d): each process normalises its own 8 samples where the single "
        "process normalises all 16; knob sync_bn=true converts them to SyncBatchNorm (-a ddp:sync_bn=true)")
    assert eq["batch_norm"] == {"layers": "BatchNorm1d", "statistics": "per process"}
    for name in ("fsdp", "deepspeed", "horovod"):  # none has a SyncBatchNorm of its own: the knob sums them
        assert _equivalence(w, adapters.get(name)({}, "cpu"))["why_not_checked"].endswith(
            f"all 16; knob sync_bn=true computes their statistics over every rank's samples, as SyncBatchNorm does "
            f"(-a {name}:sync_bn=true)"), name
        assert _equivalence(w, adapters.get(name)({"sync_bn": "true"}, "cpu"))["checked"] is True, name
    synced = _equivalence(w, adapters.get("amp")({"sync_bn": "true"}, "cpu"))
    assert synced["checked"] is True and synced["passed"] is True
    assert synced["batch_norm"] == {"layers": "BatchNorm1d", "statistics": "global batch"}
    assert _equivalence(w, adapters.get("dp")({}, "cpu"))["checked"] is True  # one process, the whole batch
    # with dropout too (a teacher left in training mode): both said at once, not the randomness after sync_bn=true
    w.nondeterministic = "it has dropout (Dropout(p=0.3))"
    assert _equivalence(w, adapters.get("ddp")({}, "cpu"))["why_not_checked"].endswith(
        "(-a ddp:sync_bn=true); besides, the model is not deterministic (it has dropout (Dropout(p=0.3))), so with "
        "statistics over the global batch the check would still fail on that (a frozen part left in training mode, a "
        "teacher, say, keeps both: hold it in eval mode)")
    w.nondeterministic = None
    w.batch_dependence = "a contrastive loss over the batch"  # declared: skipped whatever the row does
    assert _equivalence(w, adapters.get("ddp")({"sync_bn": "true"}, "cpu"))["why_not_checked"] == (
        "model is batch-dependent (a contrastive loss over the batch)")


# ---- a failed check, explained --------------------------------------------------------------------------------------

def test_a_loss_over_the_whole_batch_is_found_and_explains_the_failed_check():
    # A load-balancing term over the batch: with the same parameters, the single process's loss over a global batch
    # is not the mean of the ranks' losses over their slices. Found before launching on the CPU; a failed check
    # says so, with the fix, instead of "no parameter left without one explains the difference"
    w = checked("balanced")
    assert w.batch_dependent.startswith("with the same parameters, its loss over the global batch of step 1 was ")
    assert w.batch_dependent.endswith(" in one process and the mean of 2 ranks' losses over their slices " +
                                      w.batch_dependent.split()[-1])
    eq = _equivalence(w, adapters.get("ddp")({}, "cpu"), {"out.bias": 1e-4}, _gradients({}), label="ddp")
    assert eq["why_failed"].startswith("the model depends on the rest of its batch, other than through BatchNorm: "
                                       "with the same parameters, its loss over the global batch of step 1 was ")
    # a class-weighted mean, the commonest such loss, is named first, with its own fix (an outside check found the
    # list naming only causes that did not apply)
    assert "(a mean divided by a sum over its batch, such as cross_entropy with class weights, " in eq["why_failed"]
    assert ("so ranks that each see their own slice alone cannot match the single process; fix: a weighted mean "
            "returns (sum, count) instead, the count being the batch's sum of weights (the harness divides by the "
            "whole global batch's count); ") in eq["why_failed"]
    assert eq["why_failed"].endswith("otherwise make the loss a mean of per-sample terms (and a branch a choice per "
                                     "sample) to check equivalence, or declare batch_dependence=\"...\" in @workload "
                                     "(the check is then skipped, with that reason)")
    # A per-sample loss, a count that differs between the ranks (explained apart), a stateful but per-sample forward,
    # one rank: nothing found
    assert checked("balanced", "weight=0").batch_dependent is None
    # a loss given as (sum, count) is weighed by its counts, and found alike
    assert checked("balanced", "counted=true").batch_dependent.startswith("with the same parameters, its loss over ")
    assert checked("balanced", "weight=0", "counted=true").batch_dependent is None
    assert checked("aux").batch_dependent is None and checked("routed").batch_dependent is None
    assert checked("balanced", world=1).batch_dependent is None
    assert checked("batchnorm").batch_dependent is None  # BatchNorm is found and said as such


RUNNING_MEAN = """
import torch
from torch import nn


class Centre(nn.Module):
    def __init__(self, gathered):
        super().__init__()
        self.gathered = gathered
        self.register_buffer("running_mean", torch.zeros(4))
        self.register_buffer("seen", torch.zeros((), dtype=torch.long))  # a counter: the same in every copy
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        if self.training:
            with torch.no_grad():
                self.seen += 1
                self.running_mean.mul_(0.9).add_(0.1 * x.mean(0))
        return self.lin(x - self.running_mean)


def centred(gathered: bool = False):
    g = torch.Generator().manual_seed(0)
    return {"model": nn.Sequential(Centre(gathered)), "train": (torch.randn(64, 4, generator=g) + 2,
                                                                torch.randint(0, 3, (64,), generator=g))}
"""


def test_a_buffer_the_forward_updates_from_its_batch_is_named_with_the_fix_that_makes_it_match(tmp_path):
    # a normaliser's running mean updated in the forward: the ✗ listed five possible causes and named no buffer;
    # the check now names the buffer that followed the batch (not the step counter beside it), and the fix, an
    # all-reduced statistic, made ddp, fsdp and deepspeed match at 5.2e-8 when an outside check applied it
    path = tmp_path / "centre.py"
    path.write_text(RUNNING_MEAN)
    w = checked("centred", path=path)
    assert w.batch_buffers == ["0.running_mean"]
    assert w.batch_dependent.endswith("; its forward updates buffer 0.running_mean from its batch: after that step "
                                      "its value in the one process and in a rank over its slice differed")
    eq = _equivalence(w, adapters.get("ddp")({}, "cpu"), {"0.lin.bias": 1e-3}, _gradients({}), label="ddp")
    assert eq["why_failed"].endswith(
        "differed. Each rank's copy of that buffer follows its own slice and the single process's the whole global "
        "batch, and no backend averages a buffer the forward changes, so ranks that each see their own slice alone "
        "cannot match the single process; fix: update it from statistics all-reduced across the ranks, as "
        "SyncBatchNorm does (torch.distributed.all_reduce of the slice's sum and count behind dist.is_initialized()), "
        "or, for a buffer that holds samples rather than a statistic (a MoCo queue of keys), from every rank's samples "
        "gathered in rank order (torch.distributed.all_gather, as MoCo's concat_all_gather), or declare "
        "batch_dependence=\"...\" in @workload (the check is then skipped, with that reason)")
    horovod = _equivalence(w, adapters.get("horovod")({}, "cpu"), {"0.lin.bias": 1e-3}, _gradients({}),
                           label="horovod")
    assert ("behind dist.is_initialized(); under horovod, which starts no torch.distributed process group, the "
            "framework's own all-reduce), or, ") in horovod["why_failed"]
    assert "(torch.distributed.all_gather, as MoCo's concat_all_gather; under horovod, the framework's own allgather)" \
        in horovod["why_failed"]
    # a loss over the whole batch, with no buffer following it, keeps its list of causes
    assert checked("balanced").batch_buffers is None


def test_buffers_that_follow_the_batch_outside_the_loss_are_said_beside_the_tick(tmp_path):
    # InstanceNorm with track_running_stats=True: per-sample statistics in training (every row ✓), a running mean
    # over each rank's slices for eval mode; an outside check saw test accuracy 0.2969 beside 0.3047 on rows whose
    # parameters matched at 1.5e-8, with no word why
    path = tmp_path / "inorm.py"
    path.write_text("import torch\nfrom torch import nn\n"
                    "def inorm(track: bool = True):\n"
                    "    g = torch.Generator().manual_seed(0)\n"
                    "    x = torch.randn(64, 2, 8, generator=g) * torch.linspace(0.5, 3, 64).view(-1, 1, 1)\n"
                    "    model = nn.Sequential(nn.InstanceNorm1d(2, affine=True, track_running_stats=track), "
                    "nn.Flatten(), nn.Linear(16, 3))\n"
                    "    return {'model': model, 'train': (x, torch.randint(0, 3, (64,), generator=g))}\n")
    w = checked("inorm", path=path)
    assert w.batch_dependent is None and w.unlossed_buffers == ["0.running_mean", "0.running_var"]
    eq = _equivalence(w, adapters.get("fsdp")({}, "cpu"), label="fsdp")
    assert eq["passed"] and eq["caveat"] == (
        "its parameters match, but buffers 0.running_mean, 0.running_var follow each rank's own slices: the forward "
        "updates them from its batch without their entering the training loss (InstanceNorm's running statistics "
        "with track_running_stats=True, say), so what reads them in eval mode, the evaluation, reads the ranks' "
        "copies, not the single process's, and its figure may differ between rows whose parameters match; fix: "
        "leave them out (track_running_stats=False, InstanceNorm's default) or update them from statistics "
        "all-reduced across the ranks")
    plain = checked("inorm", "track=false", path=path)
    assert plain.unlossed_buffers is None and "caveat" not in _equivalence(plain, adapters.get("fsdp")({}, "cpu"))


def test_a_loss_whose_counts_first_differ_late_is_found_within_the_steps_the_check_compares():
    # a regression loss averaged over the labelled samples, mixed with a cross-entropy over all: the ranks' slices
    # held equally many labelled samples in the 4 steps the check read, and the ✗ of step 7 of 8 had no cause
    w = checked("masked_late")
    assert w.batch_dependent.startswith("with the same parameters, its loss over the global batch of step 5 was ")
    eq = _equivalence(w, adapters.get("ddp")({}, "cpu"), {"2.bias": 1e-3}, _gradients({}))
    assert ("a mean over a subset mixed with another term divides its sum by a count that does not depend on the "
            "batch") in eq["why_failed"]
    assert checked("masked_late", "first_differs=99").batch_dependent is None  # equal counts throughout
    # --equiv-steps reads further than the workload's own
    late = checked("masked_late", "first_differs=8", equiv_steps=8)
    assert late.batch_dependent.startswith("with the same parameters, its loss over the global batch of step 8 was ")
    assert checked("masked_late", "first_differs=8").batch_dependent is None  # past its own 6 steps


def test_a_loss_summed_over_the_batch_is_named_as_such_not_as_a_dependence_on_the_batch():
    # cross_entropy(reduction="sum"): every rank's sum over half the batch, averaged, is half the single process's,
    # and the check had listed a class-weighted mean, a batch-level term, a buffer and a branch, none of which applied
    w = checked("balanced", "weight=0", "summed=true")
    assert w.batch_dependent is None
    assert w.summed_loss.startswith("its loss over the global batch of step 1 was ")
    assert w.summed_loss.endswith(f" in one process, 2 times the mean of 2 ranks' losses over their slices "
                                  f"{w.summed_loss.split()[-1]}")
    eq = _equivalence(w, adapters.get("ddp")({}, "cpu"), {"out.bias": 1e-2}, _gradients({}), label="ddp")
    assert eq["why_failed"].startswith("the model's loss is a sum over its batch's samples, not a mean: its loss over "
                                       "the global batch of step 1 was ")
    assert eq["why_failed"].endswith("fix: return (sum, count) from the loss, count the batch's samples (the harness "
                                     "divides by the whole global batch's count), or make it a mean "
                                     "(reduction=\"mean\") and the learning rate to match")
    assert checked("balanced", "weight=0").summed_loss is None  # a mean


def test_a_failed_check_names_the_parameters_that_differ_most_and_what_the_backend_does_with_them():
    w = checked("aux")
    diffs = {"aux.weight": 2.7e-2, "aux.bias": 1.5e-2, "out.bias": 6.9e-4, "out.weight": 3e-6, "body.weight": 2e-4}
    gradients = _gradients({"aux.weight": [1, 3], "aux.bias": [1, 3]})
    eq = _equivalence(w, adapters.get("horovod")({}, "cpu"), diffs, gradients, label="horovod")
    assert eq["passed"] is False
    assert [p["parameter"] for p in eq["largest_diffs"]] == ["aux.weight", "aux.bias", "out.bias"]
    assert eq["largest_diffs"][0]["steps_without_gradient"] == [1, 3]
    assert eq["why_failed"].startswith(
        "the parameters that differ most, aux.weight by 2.7e-02, aux.bias by 1.5e-02, had no gradient in steps 2, 4 "
        "of the 4 compared, where the single process's optimizer leaves such a parameter alone; horovod: "
        "hvd.DistributedOptimizer gives a parameter without a gradient a zero one to all-reduce")
    assert eq["why_failed"].endswith("; the next, out.bias by 6.9e-04, had a gradient in every step")
    assert "random" not in eq["why_failed"]
    for stage, says in ((0, "runtime/engine.py, _get_gradients_for_reduction"),
                        (2, "runtime/zero/stage_1_and_2.py, get_all_grad_tensors"),
                        (3, "a stale gradient is applied again, with or without momentum"),
                        (3, "zeros if it never got one")):
        eq = _equivalence(w, adapters.get("deepspeed")({"zero_stage": stage}, "cpu"), diffs, gradients, "deepspeed")
        assert says in eq["why_failed"], stage
    eq = _equivalence(w, adapters.get("fsdp")({}, "cpu"), diffs, gradients, label="fsdp")
    assert "fsdp leaves it without a gradient too, so that does not explain the difference" in eq["why_failed"]
    eq = _equivalence(w, adapters.get("ddp")({}, "cpu"), {"out.bias": 1e-3}, _gradients({}), label="ddp")
    assert eq["why_failed"] == (
        "the parameters that differ most, out.bias by 1.0e-03, had a gradient in every one of the 4 steps compared, "
        "so no parameter left without one explains the difference (the model's forward is stateful, step: 0 → 1, "
        "but deterministic: every backend calls it once a step, as the single process does)")
    assert "why_failed" not in _equivalence(w, adapters.get("ddp")({}, "cpu"), {"out.bias": 1e-3}, None)
    # A row whose adapter explained itself (Horovod's optimizer-state broadcast, say): its note is given.
    spec = SimpleNamespace(equiv_steps=4, global_batch=16)
    r0 = SimpleNamespace(precision="fp32", compression="none", per_process_batch=8,
                         adapter={"note": "hvd.broadcast_optimizer_state moved the parameters"})
    eq = assemble.equivalence(spec, r0, workloads.get("tinygpt"), adapters.get("horovod")({}, "cpu"),
                              {"head.weight": 3e-4}, _gradients({}), label="horovod")
    assert eq["why_failed"] == (
        "the parameters that differ most, head.weight by 3.0e-04, had a gradient in every one of the 4 steps "
        "compared, so no parameter left without one explains the difference; horovod's own note: "
        "hvd.broadcast_optimizer_state moved the parameters")
    # and beside a parameter without a gradient, for the ones that had theirs in every step
    eq = assemble.equivalence(spec, r0, workloads.get("tinygpt"), adapters.get("horovod")({}, "cpu"),
                              {"head.weight": 3e-4, "dead.weight": 1e-3}, _gradients({"dead.weight": [0, 1, 2, 3]}),
                              label="horovod")
    assert eq["why_failed"].endswith("; the next, head.weight by 3.0e-04, had a gradient in every step; horovod's "
                                     "own note: hvd.broadcast_optimizer_state moved the parameters")


def test_a_shard_unit_fsdp_cannot_shard_as_one_refuses_its_row_before_launching():
    # a ModuleList among the units failed at launch ("fully_shard does not support containers that do not implement
    # forward"); a module that is not the model's was taken, and the report said units=2
    from torch import nn

    from adapters.base import ModelFacts
    from harness.core.model_check import bad_unit

    model = nn.Sequential(nn.ModuleList([nn.Linear(4, 4)]), nn.Linear(4, 2))
    assert bad_unit([model[0][0], model[1]], model) is None
    assert bad_unit([model[0], model[1]], model) == ("its shard unit 0 (0) is a ModuleList, a container that runs no "
                                                     "forward of its own, which fully_shard cannot shard as one")
    assert bad_unit([nn.Linear(2, 2)], model) == "its shard unit 0 (Linear) is not one of the model's modules"
    why = adapters.get("fsdp")({}, "cpu").model_availability(ModelFacts(bad_unit=bad_unit([model[0]], model)))
    assert not why and why.reason.endswith("(FSDP2 wraps each unit with fully_shard)")
    assert why.fix.startswith("give the model's own modules that run a forward, one by one")
    assert adapters.get("ddp")({}, "cpu").model_availability(ModelFacts(bad_unit="x"))  # units are FSDP2's alone


def test_a_unit_mixing_dtypes_and_a_channels_last_model_are_refused_with_their_own_cause_and_fix():
    # An outside check: an fp64 gain beside an fp32 Linear failed at launch on FSDP2 ("FSDP expects uniform original
    # parameter dtype"), and a model moved to channels_last was told "a transposed view made a Parameter", fix
    # "nn.Parameter(t.contiguous())", of nn.Conv2d's own weights.
    from torch import nn

    from adapters.base import ModelFacts, flat_layout
    from harness.core.model_check import mixed_dtype_unit

    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    assert mixed_dtype_unit([model[0], model[1]], model) is None
    model[1].gain = nn.Parameter(torch.ones(2, dtype=torch.float64))
    assert mixed_dtype_unit([model[0], model[1]], model) == "the model's shard unit 1 (1) holds parameters of fp32+fp64"
    assert mixed_dtype_unit([model[0]], model) == "the model's parameters outside every shard unit are fp32+fp64"
    why = adapters.get("fsdp")({}, "cpu").model_availability(ModelFacts(mixed_unit="its shard unit 1 (1) holds x"))
    assert not why and "(\"FSDP expects uniform original parameter dtype\")" in why.reason
    assert why.fix.startswith("give the parameters of the other dtype a module of their own")
    assert adapters.get("ddp")({}, "cpu").model_availability(ModelFacts(mixed_unit="x"))  # FSDP2's alone

    facts = ModelFacts(non_contiguous=["c.weight"], channels_last=["c.weight"])
    why = flat_layout(facts, "FSDP2 (it shards each parameter's storage)", empty_too=True)
    assert why.reason.startswith("the model's parameter c.weight is in channels_last memory format")
    assert why.fix.startswith("keep the model's parameters in the default format and convert only its inputs")
    facts.non_contiguous.append("w_t")  # a transposed view beside it: the general cause
    assert "a transposed view made a Parameter" in flat_layout(facts, "FSDP2", empty_too=True).reason


def test_a_compiled_model_on_zero3_and_gradient_hooks_on_fsdp2_are_refused_before_launching(tmp_path):
    # An outside check: a builder that returned torch.compile(model) failed ZeRO-3's first forward ("'dict' object
    # has no attribute '_in_forward'") with no cause; a param.register_hook scaling a gradient was dropped by FSDP2
    # (fully_shard replaces the parameters), a ✗ with no cause
    from adapters.base import ModelFacts

    path = tmp_path / "mine.py"
    path.write_text("import torch\nfrom torch import nn\n"
                    "def net(hooked):\n    m = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))\n"
                    "    if hooked:\n        m[0].weight.register_hook(lambda g: g * 0.5)\n    return m\n"
                    "def compiled():\n    x = torch.randn(32, 4)\n"
                    "    return {'model': lambda: torch.compile(net(False), backend='eager'), 'train': (x, x[:, :2])}\n"
                    "def hooked():\n    x = torch.randn(32, 4)\n"
                    "    return {'model': lambda: net(True), 'train': (x, x[:, :2])}\n")
    for name, facts in (("compiled", dict(compiled=[""], grad_hooks=[])),
                        ("hooked", dict(compiled=[], grad_hooks=["0.weight"]))):
        w = checked(name, path=path)
        assert {k: getattr(w.model_facts, k) for k in facts} == facts
    zero3 = adapters.get("deepspeed")({"zero_stage": "3"}, "cpu").model_availability(ModelFacts(compiled=[""]))
    assert not zero3 and zero3.reason.startswith("the model is already wrapped by torch.compile (the model itself), "
                                                 "and ZeRO-3's hooks fail on its wrapper at the first forward")
    assert zero3.fix.startswith("build the model uncompiled and add the knob compile=true")
    # a model that compiles one block: compile=true compiles the whole model, another program, so it comes last
    block = adapters.get("deepspeed")({"zero_stage": "3"}, "cpu").model_availability(ModelFacts(compiled=["1"]))
    assert block.fix.startswith("build those blocks without torch.compile (ZeRO-3 then runs them eagerly), use "
                                "zero_stage 2 or lower (-a deepspeed:zero_stage=2)")
    assert block.fix.endswith("compiles the whole model, not those blocks alone, inside DeepSpeed's engine")
    assert adapters.get("deepspeed")({"zero_stage": "2"}, "cpu").model_availability(ModelFacts(compiled=[""]))
    fsdp = adapters.get("fsdp")({}, "cpu").model_availability(ModelFacts(grad_hooks=["0.weight"]))
    assert not fsdp and fsdp.reason.startswith("the model registers hooks on its parameters' gradients (0.weight: ")
    assert adapters.get("ddp")({}, "cpu").model_availability(ModelFacts(grad_hooks=["0.weight"]))


def test_a_parameter_of_no_elements_has_no_difference_rather_than_failing_the_record(tmp_path):
    # torch's max() of an empty tensor raises: every row of such a model failed as its record was built
    from harness.core.assemble import param_diffs

    torch.save({"w": torch.ones(2), "e": torch.zeros(0)}, tmp_path / "p.pt")
    assert param_diffs(tmp_path / "p.pt", {"w": torch.ones(2) * 1.5, "e": torch.zeros(0)}) == {"w": 0.5, "e": 0.0}


def test_parameters_that_missed_gradients_in_different_steps_are_each_given_their_own_steps():
    # MoE experts: "A, B, C had no gradient in steps 1, 2, 3, 5, 6, 8" gave the union as if each had missed them all
    w = checked("aux")
    diffs = {"e0.weight": 3e-2, "e1.weight": 2e-2, "e2.weight": 1e-2}
    gradients = _gradients({"e0.weight": [0, 1, 2, 3, 7], "e1.weight": [4], "e2.weight": [1, 5]})
    eq = _equivalence(w, adapters.get("horovod")({}, "cpu"), diffs, gradients, label="horovod")
    assert eq["why_failed"].startswith(
        "the parameters that differ most had no gradient in some of the 4 steps compared (e0.weight by 3.0e-02 in "
        "steps 1–4, 8; e1.weight by 2.0e-02 in step 5; e2.weight by 1.0e-02 in steps 2, 6), where the single "
        "process's optimizer leaves such a parameter alone; horovod: hvd.DistributedOptimizer")
    # the fix the fsdp row's refusal gave, which made every row match (-o reach_all=true: 3.0e-08 ✓)
    assert eq["why_failed"].endswith(
        "weight decay keep moving it where a single process leaves it alone; fix: let every rank's forward reach every "
        "parameter in every step: add 0 times the output of a branch or expert that a batch may skip (run it on no "
        "samples, as MoE layers run an expert on zero tokens), so that each parameter gets a gradient, zero where it "
        "did no work, the single process's as well, whose optimizer then steps it as horovod's does")
    assert assemble.step_list([0, 1, 3, 4, 5, 7]) == "steps 1, 2, 4–6, 8"


def test_a_random_model_whose_differing_parameter_missed_a_gradient_is_told_the_backends_cause_first():
    # stochastic depth: a block dropped for the whole batch gets no gradient; ddp matched in the same run, and
    # Horovod's ✗ was blamed on the randomness alone
    w = SimpleNamespace(batch_norm=[], batch_dependence=None, equiv_tolerance=1e-5, stateful=None,
                        nondeterministic="its outputs differed under two torch seeds", varying_counts=None,
                        batch_dependent=None)
    spec = SimpleNamespace(equiv_steps=4, global_batch=16)
    r0 = SimpleNamespace(precision="fp32", compression="none", per_process_batch=8, adapter={})
    horovod = adapters.get("horovod")({}, "cpu")
    eq = assemble.equivalence(spec, r0, w, horovod, {"block.weight": 1e-2, "head.weight": 1e-8},
                              _gradients({"block.weight": [1, 3]}), label="horovod")
    assert eq["why_failed"].startswith("the parameters that differ most, block.weight by 1.0e-02, had no gradient in "
                                       "steps 2, 4 of the 4 compared, where the single process's optimizer leaves "
                                       "such a parameter alone; horovod: hvd.DistributedOptimizer gives")
    assert "; besides, the model is not deterministic: its outputs differed under two torch seeds" in eq["why_failed"]
    # every differing parameter had its gradient: the randomness alone
    eq = assemble.equivalence(spec, r0, w, horovod, {"head.weight": 1e-2}, _gradients({}), label="horovod")
    assert eq["why_failed"].startswith("the model is not deterministic: its outputs differed under two torch seeds; "
                                       "each process draws its own random numbers, which match the single process's "
                                       "only where no draw depends on the batch")
    assert "own note" not in eq["why_failed"]
    # an outside check: a dropout model under Horovod's optimizer-state broadcast (SGD with weight decay) was told
    # the randomness alone; the adapter's own note (the zero-gradient step that moved the weights) is said beside it
    said = "hvd.broadcast_optimizer_state's step on zero gradients moved the parameters by 2.2e-04 before training"
    r0.adapter = {"note": said}
    eq = assemble.equivalence(spec, r0, w, horovod, {"head.weight": 1e-2}, _gradients({}), label="horovod")
    assert eq["why_failed"].startswith("the model is not deterministic: its outputs differed under two torch seeds; ")
    assert eq["why_failed"].endswith(f"; besides, horovod's own note: {said}")


def test_a_batch_coupled_loss_is_found_behind_batchnorm_and_sync_bn_is_not_offered_as_its_fix():
    # a contrastive loss over a BatchNorm encoder: the row said only "BatchNorm ... sync_bn=true converts them", and
    # sync_bn=true then failed with no explanation
    w = checked("batchnorm_contrastive")
    assert w.batch_norm and w.batch_dependent.startswith("with the same parameters, its loss over the global batch")
    eq = _equivalence(w, adapters.get("ddp")({}, "cpu"))
    assert eq["checked"] is False and "sync_bn" not in eq["why_not_checked"]
    assert ("; besides, the model depends on the rest of its batch other than through BatchNorm (with the same "
            "parameters") in eq["why_not_checked"]
    synced = _equivalence(w, adapters.get("ddp")({"sync_bn": "true"}, "cpu"), {"0.weight": 1e-2})
    assert synced["why_failed"].startswith("the model depends on the rest of its batch, other than through BatchNorm")
    # a per-sample loss over the same encoder: BatchNorm alone, and its fix
    plain = checked("batchnorm_contrastive", "contrastive=false")
    assert plain.batch_dependent is None
    assert "sync_bn=true" in _equivalence(plain, adapters.get("ddp")({}, "cpu"))["why_not_checked"]


def test_a_gather_whose_functions_the_user_imported_by_name_is_seen_too(tmp_path):
    # `from torch.distributed import is_initialized`: the watch replaced torch.distributed's attributes alone, so a
    # loss that gathers this way was read as depending on its batch with no word of its gather
    import torch.distributed as dist

    path = tmp_path / "byname.py"
    path.write_text("import torch\nfrom torch import nn\nfrom torch.distributed import is_initialized\n"
                    "from torch.distributed.nn.functional import all_gather as gather\n"
                    "def loss(z, y):\n"
                    "    z = torch.cat(gather(z)) if is_initialized() else z\n"
                    "    return nn.functional.cross_entropy(z @ z.t(), torch.arange(len(z)))\n"
                    "def clr():\n"
                    "    g = torch.Generator().manual_seed(0)\n"
                    "    x = torch.randn(32, 4, generator=g)\n"
                    "    return {'model': nn.Linear(4, 8), 'train': (x, torch.zeros(32).long()), 'loss': loss}\n")
    before = dist.is_initialized
    w = checked("clr", path=path)
    assert w.batch_dependent and w.consults_distributed == "loss (byname.py:6)"
    module = next(m for m in sys.modules.values() if getattr(m, "__file__", None) == str(path))
    assert module.is_initialized is before and dist.is_initialized is before  # the watch is undone in both


def test_a_loss_that_gathers_from_other_ranks_is_never_told_no_backend_can_match():
    # SimCLR's loss over every rank's embeddings (torch.distributed.nn.functional.all_gather behind
    # dist.is_initialized()): ddp, fsdp and deepspeed matched at 3.0e-08 while Horovod's row (no process group, the
    # gather skipped) said "so no data-parallel backend can match the single process", and with BatchNorm every
    # row said sync_bn "would not make it match either" above the sync_bn=true rows that matched
    import torch.distributed as dist

    before = dist.is_initialized
    w = checked("gathered_contrastive")
    assert dist.is_initialized is before  # the watch is undone
    line = next(i for i, text in enumerate(MODELS.read_text().splitlines(), 1) if "dist.is_initialized()" in text)
    assert w.batch_dependent.startswith("with the same parameters, its loss over the global batch of step 1 was ")
    assert w.consults_distributed == f"_gathered (tests/fixtures/models.py:{line})"
    horovod = _equivalence(w, adapters.get("horovod")({}, "cpu"), {"0.weight": 2e-2}, _gradients({}),
                           label="horovod")["why_failed"]
    assert horovod.startswith("when run alone the model depends on the rest of its batch, other than through "
                              "BatchNorm (with the same parameters, ")
    assert (f"it consults torch.distributed in _gathered (tests/fixtures/models.py:{line}), so under a backend it "
            f"may gather the rest from the other ranks, but horovod starts no torch.distributed process group, so "
            f"that gather does not run under it and each rank's loss sees its own slice alone; fix: gather with "
            f"Horovod's own allgather (z = hvd.allgather(z)") in horovod
    assert horovod.endswith("multiply that loss by hvd.size() (a gather under no_grad, a queue of keys, needs no "
                            "factor)")
    ddp = _equivalence(w, adapters.get("ddp")({}, "cpu"), {"0.weight": 2e-2}, _gradients({}))["why_failed"]
    assert "yet this row still differs from the single process: a gather matches it where" in ddp
    assert not any("cannot match" in text or "can match" in text for text in (horovod, ddp))
    # with BatchNorm: sync_bn=true is still its fix; under Horovod, its own gather
    bn = checked("gathered_contrastive", "batch_norm=true")
    assert bn.batch_norm and bn.consults_distributed
    ddp_bn = _equivalence(bn, adapters.get("ddp")({}, "cpu"))["why_not_checked"]
    assert "would not make it match" not in ddp_bn
    assert ddp_bn.endswith("so under a backend it may gather the rest from the other ranks; knob sync_bn=true "
                           "converts them to SyncBatchNorm (-a ddp:sync_bn=true)")
    assert "starts no torch.distributed process group" in _equivalence(
        bn, adapters.get("horovod")({}, "cpu"), label="horovod")["why_not_checked"]
    # no gather: the dependence as before, its fix naming the gather of the embeddings with their gradients
    alone = checked("gathered_contrastive", "gather=false")
    assert alone.batch_dependent and alone.consults_distributed is None
    eq = _equivalence(alone, adapters.get("ddp")({}, "cpu"), {"0.weight": 2e-2}, _gradients({}))
    assert ("a contrastive loss takes its negatives from every rank's samples: gather the embeddings with their "
            "gradients (torch.distributed.nn.functional.all_gather behind dist.is_initialized()") in eq["why_failed"]


def test_a_forward_that_changes_its_parameters_in_place_is_named_in_the_failed_check():
    w = checked("renormed")
    assert w.edits_parameters == "0.weight" and w.nondeterministic is None
    eq = _equivalence(w, adapters.get("ddp")({}, "cpu"), {"0.weight": 2.3}, _gradients({}))
    assert eq["why_failed"].startswith("the model's forward changes its parameters in place (0.weight: "
                                       "nn.Embedding(max_norm=...) renormalising the rows it looks up")
    assert checked("renormed", "max_norm=0").edits_parameters is None
    assert "; on ddp:" not in eq["why_failed"]  # DDP has nothing of its own to add
    # FSDP2 drops a change made to a module the default units leave to the root (a BYOL teacher: 7.3e-2 ✗), and
    # units= that makes it a unit of its own keeps it (1.2e-7 ✓): its row says so
    fsdp = _equivalence(w, adapters.get("fsdp")({}, "cpu"), {"0.weight": 2.3}, _gradients({}), label="fsdp")
    assert fsdp["why_failed"].endswith(
        "; on fsdp: FSDP2 frees the unsharded copy of a unit's parameters after its forward, so a change to a module "
        "left to the root (its parameters read outside its own forward, where the default units leave it) is "
        "dropped with that copy; give `units=` that makes each module whose parameters the forward writes a unit of "
        "its own (its shards are then changed in place)")


def test_a_parameter_frozen_in_some_steps_is_named_as_the_cause_not_as_one_with_a_gradient_every_step():
    # An outside check: a layer built frozen and unfrozen at step 3 (a frozen backbone's warm-up) got a ✗ on Horovod,
    # ZeRO-2 and DDP saying it "had a gradient in every one of the 4 steps": the reference did not look at parameters
    # frozen when it wrapped the model, and the backends had left it out of their gradient reduction then.
    import torch
    from adapters.reference import ADAPTER as Reference

    w = checked("aux")
    ref = Reference({}, "cpu")
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    model[1].requires_grad_(False)
    ref.wrap(model, torch.optim.SGD(model.parameters(), lr=0.1))
    for step in range(4):
        model[1].requires_grad_(step >= 2)
        model.zero_grad(set_to_none=True)
        model(torch.ones(1, 2)).sum().backward()
        ref.step()
    described = ref.describe()
    assert described["frozen"] == {"1.weight": [0, 1], "1.bias": [0, 1]} and described["no_gradient"] == {}
    gradients = {"no_gradient": described["no_gradient"], "frozen": described["frozen"]}
    eq = _equivalence(w, adapters.get("horovod")({}, "cpu"), {"1.weight": 3e-3, "0.bias": 1e-3}, gradients,
                      label="horovod")
    assert eq["largest_diffs"][0] == {"parameter": "1.weight", "diff": 3e-3, "steps_without_gradient": [],
                                      "steps_frozen": [0, 1]}
    assert eq["why_failed"].startswith(
        "the parameters that differ most, 1.weight by 3.0e-03, were frozen (requires_grad False) in steps 1, 2 of "
        "the 4 compared and trained in the others: a backend that sets up its gradient reduction when it wraps the "
        "model (hooks or buckets for the parameters that require a gradient then) leaves out a parameter frozen "
        "then and never averages its gradient across ranks when it trains")
    assert eq["why_failed"].endswith("until it is to train; the next, 0.bias by 1.0e-03, was never frozen")
    # frozen after training (requires_grad_(False) at step 3): the backend wrapped it trainable and steps it on
    # with a zero gradient and momentum; the ✗ had told the unfreezing story, whose mechanism is not this one
    late = {"no_gradient": {}, "frozen": {"1.weight": [2, 3], "1.bias": [2, 3]}}
    eq = _equivalence(w, adapters.get("horovod")({}, "cpu"), {"1.weight": 3e-3}, late, label="horovod")
    missing = adapters.get("horovod")({}, "cpu").missing_gradient()
    assert eq["why_failed"] == (
        "the parameters that differ most, 1.weight by 3.0e-03, trained first and were frozen (requires_grad False) "
        "from steps 3, 4 of the 4 compared, where the single process's optimizer leaves such a parameter alone: it "
        f"has no gradient then; horovod: {missing}; fix: keep requires_grad as it was built and hold the parameter "
        "still with a learning rate of 0 (a parameter group, chosen by a key of its own) from then")


def test_a_gradient_made_twice_in_one_backward_is_found_and_refused_where_a_backend_would_train_wrongly(tmp_path):
    # An outside check: one block applied twice under reentrant checkpoints trained 3.5e-02 away from the single
    # process on FSDP2 with no error (a generic ✗), and ZeRO-3 failed on a bare AssertionError; ddp and Horovod named
    # the cause only after a failed launch
    from torch.utils.checkpoint import checkpoint

    from adapters.base import REENTRANT_FIX

    class Shared(nn.Module):
        def __init__(self, reentrant, depth):
            super().__init__()
            self.inp, self.block, self.out = nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(8, 2)
            self.reentrant, self.depth = reentrant, depth

        def forward(self, x):
            h = self.inp(x)
            for _ in range(self.depth):
                h = h + (checkpoint(self.block, h, use_reentrant=self.reentrant) if self.reentrant is not None
                         else self.block(h))
            return self.out(h)

    batches = [(torch.randn(4, 4), torch.randint(0, 2, (4,))) for _ in range(3)]

    def twice(reentrant, depth):
        found = {}
        model_check.no_gradient(Shared(reentrant, depth), batches,
                                lambda m, x, y: nn.functional.cross_entropy(m(x), y), found)
        return found

    assert twice(True, 2) == {"block.weight": [0, 1, 2], "block.bias": [0, 1, 2]}
    # the same module reused without checkpoints, or under non-reentrant ones, or checkpointed once: summed first
    assert twice(None, 2) == twice(False, 2) == twice(True, 1) == {}
    facts = ModelFacts(twice={"block.weight": [0, 1, 2], "block.bias": [0, 1, 2]}, checked_steps=3)
    assert facts.twice_text() == "block.weight, block.bias (in every one of the 3 steps checked)"
    for name, knobs in (("fsdp", {}), ("deepspeed", {"zero_stage": "3"})):
        why = adapters.get(name)(knobs, "cpu").model_availability(facts)
        assert not why and why.reason.startswith("a parameter's gradient was made twice in one backward in the check "
                                                 "before launching (block.weight, block.bias (in every one of the 3 "
                                                 "steps checked))")
        assert why.fix.startswith(REENTRANT_FIX)
    assert adapters.get("deepspeed")({"zero_stage": "0"}, "cpu").model_availability(facts)  # sums it: measured ✓
    # the workload's check fills it
    path = tmp_path / "mine.py"
    path.write_text("import torch\nfrom torch import nn\nfrom torch.utils.checkpoint import checkpoint\n"
                    "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                    "        self.inp, self.block, self.out = nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(8, 2)\n"
                    "    def forward(self, x):\n        h = self.inp(x)\n"
                    "        for _ in range(2):\n            h = h + checkpoint(self.block, h, use_reentrant=True)\n"
                    "        return self.out(h)\n"
                    "def shared():\n    x = torch.randn(32, 4)\n"
                    "    return {'model': M, 'train': (x, (x.sum(1) > 0).long())}\n")
    w = checked("shared", path=path)
    assert sorted(w.model_facts.twice) == ["block.bias", "block.weight"] and not w.model_facts.checkpoint_no_grad


def test_a_reentrant_checkpoint_given_no_input_that_needs_a_gradient_is_told_as_the_models_fault_first(tmp_path):
    # An outside check: checkpoint(self.first, x, use_reentrant=True) on the raw input trains nothing of `first`, in
    # one process too (torch warns in the rank logs alone); ddp was refused with find_unused_parameters=true, a knob
    # that makes DDP agree with a model that never trains it
    path = tmp_path / "mine.py"
    path.write_text("import torch\nfrom torch import nn\nfrom torch.utils.checkpoint import checkpoint\n"
                    "class M(nn.Module):\n    def __init__(self, reentrant):\n        super().__init__()\n"
                    "        self.first, self.out = nn.Linear(4, 8), nn.Linear(8, 2)\n"
                    "        self.reentrant = reentrant\n"
                    "    def forward(self, x):\n"
                    "        return self.out(checkpoint(self.first, x, use_reentrant=self.reentrant))\n"
                    "def ckpt(reentrant: bool = True):\n    x = torch.randn(32, 4)\n"
                    "    return {'model': lambda: M(reentrant), 'train': (x, (x.sum(1) > 0).long())}\n")
    facts = checked("ckpt", path=path).model_facts
    assert facts.checkpoint_no_grad and sorted(facts.never_used) == ["first.bias", "first.weight"]
    why = adapters.get("ddp")({}, "cpu").model_availability(facts)
    assert not why and why.fix.startswith(
        "they get none in one process either: torch.utils.checkpoint (use_reentrant=True) warned \"None of the inputs "
        "have requires_grad=True\", so the module it checkpoints never trains; pass use_reentrant=False")
    # the rows that run it match the single process, which trains it no more than they do: their ✓ says so
    w = checked("ckpt", path=path)
    eq = _equivalence(w, adapters.get("fsdp")({}, "cpu"), label="fsdp")
    assert eq["passed"] and eq["caveat"] == (
        "it matches a single process that never trains first.weight, first.bias: torch.utils.checkpoint "
        "(use_reentrant=True) warned \"None of the inputs have requires_grad=True\", so the module it checkpoints gets "
        "no gradient in one process or on any backend; pass use_reentrant=False to train it")
    rows = [{"adapter": "fsdp", "measured": True, "first": {"equivalence": eq}}]
    assert run_report.caveat_notes(rows) == [f"✓ in the max_param_diff column (fsdp): {eq['caveat']}."]
    w = checked("ckpt", "reentrant=false", path=path)
    assert not w.model_facts.checkpoint_no_grad and not w.model_facts.no_gradient
    assert "caveat" not in _equivalence(w, adapters.get("fsdp")({}, "cpu"), label="fsdp")


def test_an_fp16_model_on_zero0_on_the_cpu_and_an_empty_partition_on_zero3_are_told_their_fix():
    # An outside check: an fp16 model failed ZeRO-0 on the CPU at launch ("attempting to reduce an unsupported grad
    # type: torch.float16": the CPU accelerator supports fp32 and bf16), where ZeRO-1 and 2 ran it; an EMA updated
    # from named_parameters() in the forward read ZeRO-3's empty partitions, a size mismatch with no fix
    ds = adapters.get("deepspeed")
    why = ds({"zero_stage": "0"}, "cpu").model_availability(ModelFacts(param_dtypes=["fp16"]))
    assert not why and "DeepSpeed's CPU accelerator reduces fp32 and bf16 only at ZeRO-0" in why.reason
    assert why.fix == ("build the model in bf16 or fp32, or a ZeRO stage of 1 or 2 (-a deepspeed:zero_stage=1), which "
                       "runs an fp16 model here")
    assert ds({"zero_stage": "1"}, "cpu").model_availability(ModelFacts(param_dtypes=["fp16"]))
    assert ds({"zero_stage": "0"}, "cuda").model_availability(ModelFacts(param_dtypes=["fp16"]))
    error = ("RuntimeError: The size of tensor a (16) must match the size of tensor b (0) at non-singleton dimension 1 "
             "(raised in update (shapes.py:204))")
    fix = ds({"zero_stage": "3"}, "cpu").failure_fix(error)
    assert fix.startswith("ZeRO-3 holds each parameter as an empty partition (0 elements) outside its own module's "
                          "forward")
    # a BYOL teacher written in place: the read-only gather dropped the update, one at the forward's start failed
    assert ("after the networks' forward (at its start ZeRO-3 may be fetching them: \"Cannot partition a param in "
            "flight\"), with modifier_rank=0 where it writes to them") in fix
    assert ds({"zero_stage": "2"}, "cpu").failure_fix(error) is None
    # an outside check: MAML's inner step (torch.autograd.grad over named_parameters()) met the same partitions and
    # the gather did not fix it; ZeRO-2 did, so the fix that works for every such model comes first
    assert fix.index("use zero_stage 2 or lower (-a deepspeed:zero_stage=2)") < fix.index("GatheredParameters")
    assert "a MAML inner step's torch.autograd.grad" in fix


def test_multihead_attention_is_refused_on_compiled_zero3_unless_it_is_a_zero3_leaf():
    # An outside check: nn.MultiheadAttention reads out_proj's weight without calling out_proj, and compiled ZeRO-3
    # handed it an empty partition ("b must be 2D" in Dynamo), a raw error; set_z3_leaf_modules made it 3.0e-8 ✓
    from harness.core.workload_checks import _module_facts

    model = nn.Sequential(nn.Linear(8, 8))
    model.attn = nn.MultiheadAttention(8, 2, batch_first=True)
    facts = ModelFacts()
    _module_facts(facts, model)
    assert facts.multihead == ["attn"]
    ds = adapters.get("deepspeed")
    why = ds({"zero_stage": "3", "compile": "true"}, "cpu").model_availability(facts)
    assert not why and why.reason.startswith("the model holds torch.nn.MultiheadAttention (attn), whose forward reads "
                                             "out_proj's weight without calling out_proj")
    assert "deepspeed.utils.set_z3_leaf_modules(model, [torch.nn.MultiheadAttention])" in why.fix
    assert ds({"zero_stage": "3"}, "cpu").model_availability(facts)  # not compiled: gathered for it
    assert ds({"zero_stage": "2", "compile": "true"}, "cpu").model_availability(facts)
    model.attn._z3_leaf = True  # what set_z3_leaf_modules sets
    _module_facts(facts, model)
    assert facts.multihead == []


def test_horovods_fp16_compression_is_read_from_the_class_it_holds():
    # Horovod holds the compressor's class (Compression.fp16 is FP16Compressor), not an instance: its type's name was
    # "type", and the dtype table said fp32 on the wire for horovod:compression=fp16 beside a note saying fp16
    from types import SimpleNamespace

    hvd = adapters.get("horovod")({"compression": "fp16"}, "cpu")

    class FP16Compressor:
        pass
    model = torch.nn.Linear(2, 2)
    model(torch.randn(1, 2)).sum().backward()
    hvd.optimizer = SimpleNamespace(_compression=FP16Compressor, state={})
    assert hvd.dtypes(model)["reduce"] == "fp16"
    hvd.optimizer = SimpleNamespace(_compression=type("NoneCompressor", (), {}), state={})
    assert hvd.dtypes(model)["reduce"] == "fp32"


def test_a_failed_check_nothing_else_explains_names_gradient_hooks_and_calls_of_torch_distributed(tmp_path):
    # an outside check: a loss all-reduced and divided by the world size (logging), and a clamp registered on a
    # weight's gradient, each gave every torch.distributed row a ✗ ending "no parameter left without one explains the
    # difference", though the check had seen both
    path = tmp_path / "planted.py"
    path.write_text(textwrap.dedent("""
        import torch
        import torch.distributed as dist
        from workloads import workload

        def _loss(out, y):
            loss = torch.nn.functional.cross_entropy(out, y)
            if dist.is_initialized():
                dist.all_reduce(loss)
                loss = loss / dist.get_world_size()
            return loss

        @workload(global_batch=16, lr=0.1)
        def logged():
            torch.manual_seed(0)
            x, y = torch.randn(64, 8), torch.randint(0, 4, (64,))

            def model():
                m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
                m[0].weight.register_hook(lambda g: g.clamp(-0.02, 0.02))
                return m
            return dict(model=model, train=(x, y), loss=_loss)
    """))
    w = checked("logged", path=path)
    assert w.calls_distributed.startswith("_loss (planted.py:")
    clues = assemble._code_clues(w)
    assert clues[0].startswith("the model registers hooks on its parameters' gradients (0.weight), and each rank's "
                               "hook runs on its own slice's gradient before the backend averages them")
    assert clues[1].startswith(f"the model's code calls torch.distributed ({w.calls_distributed}), which the single "
                               f"process skips")
    largest = [{"parameter": "2.weight", "diff": 5.5e-2, "steps_without_gradient": [], "gradient_ratio": None}]
    why = assemble.why_differs(largest, 4, "ddp", None, None)
    assert why.endswith(assemble.NOT_EXPLAINED)


def test_a_model_given_as_built_keeps_the_hooks_on_its_parameters_in_every_copy(tmp_path):
    # deepcopy copies a module's hooks but not a tensor's: a model returned as built (model=instance) with a hook on
    # a weight's gradient trained without it in every row and in the single process alike, silently
    path = tmp_path / "hooked.py"
    path.write_text(textwrap.dedent("""
        import torch
        from workloads import workload

        @workload(global_batch=16, lr=0.1)
        def hooked():
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 2))
            model[0].weight.register_hook(lambda g: g * 0)
            return dict(model=model, train=(torch.randn(64, 8), torch.randint(0, 2, (64,))))
    """))
    w = checked("hooked", path=path)
    assert w.model_facts.grad_hooks == ["0.weight"]
    copy = w.new_model()
    copy(torch.randn(4, 8)).sum().backward()
    assert torch.count_nonzero(copy[0].weight.grad) == 0 and torch.count_nonzero(copy[1].weight.grad) > 0
    assert len(copy[0].weight._backward_hooks) == 1


def test_a_buffer_all_reduced_by_the_users_code_is_told_horovods_all_reduce_not_its_allgather():
    # an outside check: an EMA buffer updated from an all-reduced statistic (behind dist.is_initialized()) got, on
    # Horovod, the contrastive loss's fix: "gather with Horovod's own allgather ... multiply that loss by hvd.size()"
    w = SimpleNamespace(consults_distributed="update (m.py:12)", batch_buffers=["ema"],
                        batch_dependent="the buffer ema follows the batch")
    why = assemble.batch_dependent_failure(w, adapters.get("horovod")({}, "cpu"), "horovod")
    assert ("horovod starts no torch.distributed process group, so that all-reduce does not run under it and each "
            "rank's buffer follows its own slice alone; fix: all-reduce with Horovod's own (t = hvd.allreduce(t, "
            "op=hvd.Sum), horovod.torch, behind hvd.is_initialized())") in why, why
    w.batch_buffers = None  # a gather (a contrastive loss's): the allgather, as before
    assert "fix: gather with Horovod's own allgather" in assemble.batch_dependent_failure(
        w, adapters.get("horovod")({}, "cpu"), "horovod")


def test_a_model_built_from_a_generator_torchs_seed_does_not_control_or_reseeding_in_forward_is_named():
    # an outside check: a frozen projection drawn from os.urandom was called a random forward ("make it deterministic,
    # e.g. dropout 0"), and torch.manual_seed(step) in forward was called a dependence on the batch
    import os

    def unseeded():
        m = nn.Linear(4, 3)
        g = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
        with torch.no_grad():
            m.weight.copy_(torch.randn(3, 4, generator=g))
        return m

    x = torch.randn(8, 4)
    why, _ = model_check.diagnose(unseeded, lambda m: m(x), seed=0)
    assert why.startswith(f"{model_check.DIFFERENT_BUILDS} (weight): the model draws them from a generator torch's "
                          f"seed does not control")

    class Reseeding(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 3)

        def forward(self, x):
            torch.manual_seed(7)
            return self.lin(x) + torch.randn(x.shape[0], 3)

    why, _ = model_check.diagnose(Reseeding, lambda m: m(x), seed=0)
    assert why.startswith(f"{model_check.RESEEDED} (forward (") and "test_model_check.py:" in why, why
    assert torch.manual_seed is torch.random.manual_seed or torch.manual_seed.__name__ == "manual_seed"


def test_static_graph_meeting_a_parameter_first_used_after_the_first_step_names_find_unused_parameters():
    # An outside check: a head used every 5th step; the refusal offered static_graph=true, which then failed with
    # "Your training graph has changed in this iteration" and no fix
    ddp = adapters.get("ddp")({"static_graph": "true"}, "cpu")
    reason = ("rank 0 exited with code 1; first error: RuntimeError: Your training graph has changed in this "
              "iteration, e.g., one parameter is unused in first iteration, but then got used in the second iteration")
    assert ddp.failure_fix(reason) == (
        "a parameter unused in the first step was used in a later one, which static_graph=true cannot take: use the "
        "knob find_unused_parameters=true (-a ddp:find_unused_parameters=true) instead of static_graph=true")


TIED_UNITS = '''
import torch
from torch import nn
import torch.nn.functional as F
from workloads import Pieces, workload


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(16, 8)
        self.blocks = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8)])

    def forward(self, ids):
        h = self.wte(ids)
        for b in self.blocks:
            h = torch.tanh(b(h))
        return F.linear(h, self.wte.weight)  # nanoGPT's head: the embedding's weight read outside its forward


@workload(global_batch=8)
def tied(units: str = "each"):
    ids = torch.randint(0, 16, (32, 6), generator=torch.Generator().manual_seed(0))
    pick = {"each": lambda m: [m.wte, *m.blocks], "blocks": lambda m: list(m.blocks)}[units]
    return Pieces(model=Tied, train=(ids, ids), units=pick,
                  loss=lambda o, t: F.cross_entropy(o.flatten(0, 1), t.flatten()))
'''


@pytest.mark.parametrize("units", ["each", "blocks"])
def test_units_given_that_include_a_module_whose_weight_the_forward_reads_elsewhere_refuse_fsdp_before_launching(
        tmp_path, units):
    # An outside check: units= listing a nanoGPT head's embedding (F.linear(h, self.wte.weight)) failed at launch
    # with "got mixed torch.Tensor and DTensor" and a fix about the default units and an `encoder` the model lacks;
    # the default units already leave such a module to the root, and units given are now checked the same way
    path = tmp_path / "tied_units.py"
    path.write_text(TIED_UNITS)
    facts = checked("tied", f"units={units}", path=path).model_facts
    why = adapters.get("fsdp")({}, "cpu").model_availability(facts)
    if units == "blocks":
        assert why and facts.unit_read_outside == []
        return
    assert facts.unit_read_outside == ["wte"]
    assert not why and why.reason.startswith("the units given (units=) include wte, whose parameters the forward "
                                             "reads outside that module's own forward")
    assert why.fix.startswith("leave wte out of units=")
    assert adapters.get("ddp")({}, "cpu").model_availability(facts)  # units are FSDP2's alone


def test_a_workload_subclass_whose_own_units_include_such_a_module_is_refused_on_fsdp_alike(tmp_path):
    path = tmp_path / "tied_subclass.py"
    path.write_text(TIED_UNITS + '''

from workloads import Data, Workload


class TiedSub(Workload):
    name = "tiedsub"
    summary = "a nanoGPT-style tied head, units of its own"
    global_batch, base_lr, base_batch, steps, warmup = 8, 0.1, 8, 3, 1

    def build_model(self):
        return Tied()

    def materialize(self, device, global_batch):
        ids = torch.randint(0, 16, (32, 6), generator=torch.Generator().manual_seed(0))
        return Data(ids, ids)

    def loss(self, output, target):
        return F.cross_entropy(output.flatten(0, 1), target.flatten())

    def shard_units(self, model):
        return [model.wte, *model.blocks]
''')
    facts = checked("TiedSub", path=path).model_facts
    assert facts.unit_read_outside == ["wte"] and not adapters.get("fsdp")({}, "cpu").model_availability(facts)


EMA_UNITS = '''
import torch
from torch import nn
from workloads import Pieces, workload


class Distilled(nn.Module):
    def __init__(self):
        super().__init__()
        self.student, self.teacher = nn.Linear(4, 2), nn.Linear(4, 2)
        self.teacher.requires_grad_(False)

    def forward(self, x):
        out = self.student(x)
        with torch.no_grad():  # BYOL's teacher: an EMA of the student, in place, parameters alone
            for t, s in zip(self.teacher.parameters(), self.student.parameters()):
                t.mul_(0.9).add_(s, alpha=0.1)
        return out + 0.0 * self.teacher(x)


@workload(global_batch=8)
def ema():
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(0))
    return Pieces(model=Distilled, train=(x, (x.sum(1) > 0).long()), units=lambda m: [m.student, m.teacher])
'''


def test_units_given_that_an_ema_update_writes_between_parameters_alone_are_not_refused(tmp_path):
    # An outside check: the ✗ of an EMA teacher on fsdp says to give units= making the teacher a unit of its own
    # (measured 1.2e-7 ✓ on a BYOL model), and the check of given units then refused it as read outside its forward,
    # a loop; an update between units' parameters alone changes their shards in place, as a read beside an
    # activation (the nanoGPT head above) cannot
    path = tmp_path / "ema_units.py"
    path.write_text(EMA_UNITS)
    facts = checked("ema", path=path).model_facts
    assert facts.unit_read_outside == [] and adapters.get("fsdp")({}, "cpu").model_availability(facts)


def test_a_forward_drawing_one_coin_a_call_is_found_random_though_two_seeds_draw_the_same_side():
    # An outside check: stochastic depth dropping a whole block for the whole batch draws one number a block; under
    # torch seeds 1 and 2 the coin fell the same way (torch.rand() 0.76 and 0.61), the forward was called
    # deterministic, and the ZeRO rows' ✗ blamed the model's batch dependence; a few more seeds tell
    import torch

    from harness.core.model_check import diagnose

    class Coin(torch.nn.Linear):
        def forward(self, x):
            out = super().forward(x)
            return out if float(torch.rand(())) < 0.5 else 0 * out  # a block kept or dropped whole

    why, _ = diagnose(lambda: Coin(2, 2), lambda m: m(torch.ones(4, 2)), seed=0)
    assert why is not None and why.startswith("the same samples from the same state gave different outputs under two "
                                              "torch seeds"), why


def test_parameters_frozen_in_every_step_compared_are_named_as_changed_by_the_users_code_not_as_unfrozen():
    # An outside check: an EMA teacher (requires_grad False throughout) updated in an optimizer step hook got ZeRO-1
    # and ZeRO-3 ✗ saying it was "frozen ... in steps 1, ..., 8 of the 8 compared and trained in the others"
    w = checked("aux")
    gradients = {"no_gradient": {}, "frozen": {"teacher.weight": [0, 1, 2, 3]}}
    eq = _equivalence(w, adapters.get("deepspeed")({"zero_stage": "3"}, "cpu"), {"teacher.weight": 7e-2}, gradients,
                      label="deepspeed:zero_stage=3")
    assert eq["why_failed"].startswith(
        "the parameters that differ most, teacher.weight by 7.0e-02, were frozen (requires_grad False) in every one "
        "of the 4 steps compared, so no optimizer step moved them: code of yours changed them"), eq["why_failed"]
    assert "deepspeed.zero.GatheredParameters(params, modifier_rank=0)" in eq["why_failed"]
    assert "trained in the others" not in eq["why_failed"]


def test_zero3_names_gathered_parameters_for_a_forward_that_edits_parameters_and_other_stages_add_nothing():
    fix = adapters.get("deepspeed")({"zero_stage": "3"}, "cpu").edited_parameters_fix()
    assert fix.endswith("`deepspeed.zero.GatheredParameters(params, modifier_rank=0)`")
    assert adapters.get("deepspeed")({"zero_stage": "2"}, "cpu").edited_parameters_fix() is None
