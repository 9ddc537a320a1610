"""FSDP2 for real (2 ranks, gloo, CPU, torchrun) on digits and tinygpt: every fp32 variant against the single-process
reference, bf16 parameters reported as not checked, HSDP's mesh, the declared units, and ZeRO-3's row beside it."""

import pytest

import adapters
from conftest import run_compare

_AVAIL = adapters.availability("fsdp", "cpu", 2)
pytestmark = [pytest.mark.distributed,
              pytest.mark.skipif(not _AVAIL, reason=f"Requires: FSDP2 in torch ({_AVAIL.message()})")]
FP32 = ("fsdp", "fsdp:reshard_after_forward=false", "fsdp:replicas=2")


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp") / "run"
    rows, _ = run_compare(out, "-a", ",".join(("ddp", *FP32, "fsdp:param_dtype=bf16")), "--steps", "30",
                          "--warmup", "5")
    return rows


@pytest.mark.parametrize("label", FP32)
def test_every_fp32_fsdp_variant_matches_the_single_process_reference(fsdp_run, label):
    rec = fsdp_run[label]
    assert rec["status"] == "ok", (rec.get("reason"), rec.get("log_tail"))
    assert rec["equivalence"]["checked"] is True and rec["max_param_diff"] <= 1e-5
    assert rec["eval"]["accuracy"] == pytest.approx(fsdp_run["ddp"]["eval"]["accuracy"])
    assert rec["final_loss"] == pytest.approx(fsdp_run["ddp"]["final_loss"], rel=1e-5)


def test_the_units_and_mesh_are_recorded(fsdp_run):
    # digits: three Linear layers, none sharing a parameter with another
    assert fsdp_run["fsdp"]["adapter_info"]["resolved"] == {"units": 3, "units_sharing_parameters": [], "mesh": "2"}
    assert fsdp_run["fsdp:replicas=2"]["adapter_info"]["resolved"]["mesh"] == "2 x 1"
    assert fsdp_run["fsdp"]["comm_schedule"]["kind"] == "fsdp"


def test_bf16_parameters_are_labelled_and_not_judged_at_fp32_tolerance(fsdp_run):
    rec = fsdp_run["fsdp:param_dtype=bf16"]
    assert rec["status"] == "ok", rec.get("log_tail")
    assert rec["controls"]["precision"] == "bf16" and rec["equivalence"]["checked"] is False
    assert rec["eval"]["target_met"] is not None


def test_a_transformer_is_sharded_block_by_block(tmp_path):
    rows, _ = run_compare(tmp_path / "gpt", "-w", "tinygpt", "-a", "ddp,fsdp", "--steps", "4", "--warmup", "2")
    fsdp = rows["fsdp"]
    assert fsdp["status"] == "ok", fsdp.get("log_tail")
    assert fsdp["adapter_info"]["resolved"]["units"] == 2  # tinygpt's default depth: two blocks
    assert fsdp["max_param_diff"] <= fsdp["equivalence"]["tolerance"]
