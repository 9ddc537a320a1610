"""The workload's max_grad_norm, clipped by every backend its own way (CPU, gloo, world size 2): DDP and FSDP2 by
clip_grad_norm_ over the averaged (FSDP2: DTensor-sharded) gradients, Horovod between synchronize() and step(),
DeepSpeed ZeRO-2 by its config's gradient_clipping over every partition; each matches the single process, which
clips the whole gradient. The clip bites (tests/unit/test_grad_clipping.py checks the norm is far above it), so a
backend that clipped nothing, or only its partition, would not match. A clip inside the optimizer's own step() under
ZeRO is test_your_models_as_built.py's."""

import pytest

from conftest import REPO, matches_reference, ran_ok, run_compare

pytestmark = pytest.mark.distributed
MODELS = REPO / "tests" / "fixtures" / "models.py"

ROWS = ("ddp", "horovod", "deepspeed:zero_stage=2", "fsdp")


@pytest.fixture(scope="module")
def clipped(tmp_path_factory):
    return run_compare(tmp_path_factory.mktemp("clip") / "run", "-w", f"{MODELS}:clipped", "-a", ",".join(ROWS),
                       "--repeats", "1")[0]


@pytest.mark.parametrize("label", ROWS)
def test_a_clip_that_bites_matches_the_single_process_on_every_backend(clipped, label):
    rec = ran_ok(clipped, label)
    assert rec["controls"]["max_grad_norm"] == 0.05
    matches_reference(rec)
    if label.startswith("deepspeed"):  # the engine clips, from its config: nothing by hand
        assert rec["adapter_info"]["resolved"]["gradient_clipping"] == 0.05


SPARSE_ROWS = ("ddp", "deepspeed:zero_stage=0", "horovod")


@pytest.fixture(scope="module")
def clipped_sparse(tmp_path_factory):
    return run_compare(tmp_path_factory.mktemp("clip-sparse") / "run", "-w", f"{MODELS}:sparse", "--max-grad-norm",
                       "0.05", "-a", ",".join(SPARSE_ROWS), "--steps", "4", "--warmup", "1", "--equiv-steps", "5",
                       "--repeats", "1")[0]


@pytest.mark.parametrize("label", SPARSE_ROWS)
def test_a_sparse_gradient_is_clipped_with_the_others_on_every_backend_that_takes_one(clipped_sparse, label):
    # An outside check: torch's clip_grad_norm_ has no sparse kernel (the reference and every torch row failed at
    # their first step), and DeepSpeed 0.19.8's ZeRO-0 clip scaled a sparse gradient's `.data` copy, leaving the
    # embedding unclipped (7.5e-4 ✗). Both are clipped now, and match the single process.
    rec = ran_ok(clipped_sparse, label)
    matches_reference(rec)
    if label.startswith("deepspeed"):  # the engine's norm and coefficient, applied to the sparse gradient too
        said = rec["adapter_info"]["sparse_gradient_clip"]
        least = float(said.rsplit("by ", 1)[1].split(" ")[0])
        assert "in 5 step(s)" in said and least < 0.5, said  # every step, and the clip bit
