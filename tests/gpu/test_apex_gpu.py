"""NVIDIA apex on a GPU, beside its modern equivalents: torch.amp (same fp16 precision as apex O1/O2) and DDP
(same fp32 as apex O0). Skipped with the reason without CUDA or without an importable NVIDIA apex <= 25.05;
COMPARE_TEST_GPU=1 turns the CUDA skip into a failure (an apex that is missing on a GPU machine stays a skip:
it is built from source by the user).

    COMPARE_TEST_GPU=1 pytest tests/gpu/test_apex_gpu.py
"""

import pytest

from conftest import require_gpu, run_compare

pytestmark = pytest.mark.gpu


def require_apex():
    from adapters.apex import ApexAdapter

    avail = ApexAdapter.availability("cuda", 1)
    if not avail:
        pytest.skip(f"Requires: NVIDIA apex <= 25.05 with amp and DDP ({avail.message()})")


@pytest.fixture(scope="module")
def apex_run(tmp_path_factory):
    require_gpu()
    require_apex()
    out = tmp_path_factory.mktemp("apex") / "run"
    rows, _ = run_compare(out, "--device", "cuda", "-n", "1", "-a",
                          "ddp,apex:opt_level=O0,amp,apex,apex:opt_level=O2")
    return rows


def test_apex_o1_and_amp_run_side_by_side_in_fp16(apex_run):
    amp, apex = apex_run["amp"], apex_run["apex"]
    for rec in (amp, apex):
        assert rec["status"] == "ok", rec.get("log_tail")
        assert rec["controls"]["precision"] == "fp16"
    assert apex["adapter_info"]["opt_level"] == "O1"
    assert apex["topology"]["backend"] == "nccl"
    assert apex["eval"]["target_met"] is True


def test_apex_o2_trains_with_fp32_master_weights(apex_run):
    o2 = apex_run["apex:opt_level=O2"]
    assert o2["status"] == "ok", o2.get("log_tail")
    assert o2["controls"]["precision"] == "fp16" and o2["eval"]["target_met"] is True
    assert o2["max_param_diff"] is not None  # masters gathered by the user module's names


def test_apex_o0_matches_the_reference_like_ddp(apex_run):
    o0 = apex_run["apex:opt_level=O0"]
    assert o0["status"] == "ok", o0.get("log_tail")
    assert o0["controls"]["precision"] == "fp32"
    assert o0["equivalence"]["checked"] and o0["max_param_diff"] <= 1e-5
