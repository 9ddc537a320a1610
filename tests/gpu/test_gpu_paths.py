"""GPU paths (NCCL, CUDA memory, amp fp16 with GradScaler): skipped with the reason on a machine without CUDA;
COMPARE_TEST_GPU=1 turns the skip into a failure on a GPU machine, so a broken GPU path cannot hide as a skip.

A lent GPU machine has one GPU and NCCL refuses two ranks on one GPU, so these run at world size 1."""

import pytest

from conftest import require_gpu, run_compare

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory):
    require_gpu()
    out = tmp_path_factory.mktemp("gpu") / "run"
    rows, _ = run_compare(out, "--device", "cuda", "-n", "1", "-a", "dp,ddp,amp,amp:precision=bf16")
    return rows


def test_ddp_uses_nccl_and_matches_the_reference(gpu_run):
    ddp = gpu_run["ddp"]
    assert ddp["status"] == "ok", ddp.get("log_tail")
    assert ddp["topology"]["backend"] == "nccl"
    assert ddp["max_param_diff"] <= 1e-5
    assert ddp["peak_memory_kind"] == "cuda_max_allocated" and ddp["peak_memory_bytes"] > 0


def test_dp_on_one_gpu(gpu_run):
    assert gpu_run["dp"]["status"] == "ok" and gpu_run["dp"]["topology"]["devices_used"] == 1


def test_amp_fp16_uses_a_grad_scaler_and_bf16_does_not(gpu_run):
    fp16, bf16 = gpu_run["amp"], gpu_run["amp:precision=bf16"]
    assert fp16["controls"]["precision"] == "fp16" and fp16["adapter_info"]["grad_scaler"] is True
    assert bf16["controls"]["precision"] == "bf16" and bf16["adapter_info"]["grad_scaler"] is False
    for rec in (fp16, bf16):
        assert rec["eval"]["target_met"] is True
