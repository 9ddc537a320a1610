"""A device's peaks: model FLOPs utilisation, achieved TFLOP/s over the dense peak of the GPU's hardware profile at
the row's arithmetic.

Runs in: the parent (a record's assembly, the run report, `compare plan --from`)."""

from __future__ import annotations

from typing import Any

from harness.model import costmodel

PEAKS = (("H100", "h100-sxm-ndr400"), ("H200", "h200-sxm-ndr400"), ("A100", "a100-sxm-hdr200"),
         ("V100", "v100-dgx1-edr100"), ("P100", "p100-25gbe-roce"))
"""GPU name -> the hardware profile whose dense peak it has (the H200's has the H100 SXM's peaks and its own memory; a
PCIe card of the same name has a lower peak and gets none)."""


def mfu(tflops: float, device: str, gpus: list[str], precision: str, cuda_math: dict | None,
        conv_share: float | None = None) -> dict[str, Any]:
    """Model FLOPs utilisation: achieved TFLOP/s per device over the device's dense peak at the row's arithmetic,
    or why no peak is known. An fp32 row's convolutions count at TF32's peak where cuDNN allowed TF32 (its default)
    and its matmuls where torch allowed it (not its default): with `conv_share`, the share of the FLOPs in
    convolutions, the peak is the one those FLOPs would reach split so (a transformer in fp32 has no convolution
    and is judged at the fp32 peak, a ResNet at TF32's); without it (records before the share was counted), TF32's
    wherever either switch was on. Judging tensor-core work against the fp32 vector peak would overstate the MFU
    about 7x, and fp32 vector work against TF32's understate it as much."""
    if device != "cuda":
        return {"value": None, "why_none": "no peak known for a CPU"}
    name = gpus[0] if gpus else ""
    profile = next((p for key, p in PEAKS if key in name and "PCIe" not in name), None)
    if profile is None:
        return {"value": None, "why_none": f"no peak known for {name or 'this GPU'}"}
    peak, what = peak_of(costmodel.load_profile(profile).peak_tflops, precision, cuda_math, conv_share)
    if peak is None:
        return {"value": None, "why_none": f"{what} for {name}"}
    return {"value": tflops / peak, "peak_tflops": peak, "peak": f"{name}: {what} (profile {profile})"}


def peak_of(peaks: dict[str, float], precision: str, cuda_math: dict | None,
            conv_share: float | None = None) -> tuple[float | None, str]:
    """(dense peak TFLOP/s, what it is) of a device with these `peaks` (a hardware profile's) for a row's
    arithmetic, as `mfu` judges it; (None, why) when the profile lacks a peak the row needs."""
    math = cuda_math or {}
    if precision in ("bf16", "fp16"):
        parts = {precision: 1.0}
    elif conv_share is None:
        parts = {"tf32" if math.get("matmul_allow_tf32") or math.get("cudnn_allow_tf32") else "fp32": 1.0}
    else:
        conv = "tf32" if math.get("cudnn_allow_tf32") else "fp32"
        other = "tf32" if math.get("matmul_allow_tf32") else "fp32"
        parts = {}
        for kind, share in ((conv, conv_share), (other, 1.0 - conv_share)):
            if share > 0:
                parts[kind] = parts.get(kind, 0.0) + share
        parts = parts or {other: 1.0}
    missing = [k for k in parts if not peaks.get(k)]
    if missing:
        return None, f"no {missing[0]} peak known"
    peak = peaks[next(iter(parts))] if len(parts) == 1 else 1.0 / sum(share / peaks[k] for k, share in parts.items())
    if len(parts) == 1:
        return peak, f"{peak:g} TFLOP/s dense {next(iter(parts))}"
    return peak, f"{peak:.1f} TFLOP/s dense, " + " + ".join(f"{k} for {share:.0%} of the FLOPs"
                                                           for k, share in parts.items())


def mfu_of(rec: dict[str, Any]) -> dict[str, Any] | None:
    """A record's MFU judged now from what it recorded (its TFLOP/s, GPUs, precision and CUDA math settings),
    so a report re-rendered after the rule changed judges old records by the rule of today; None without FLOPs."""
    if not rec.get("tflops_per_device"):
        return None
    controls = rec.get("controls") or {}
    device = "cuda" if controls.get("cuda_math") is not None else "cpu"  # recorded on CUDA only
    return mfu(rec["tflops_per_device"], device, (rec.get("env") or {}).get("gpus") or [],
               controls.get("precision", "fp32"), controls.get("cuda_math"), rec.get("conv_flops_share"))
