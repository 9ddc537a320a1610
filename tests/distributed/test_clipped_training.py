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
