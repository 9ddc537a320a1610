"""The hardware the model prices and judges against: the profiles in harness/model/profiles/ (each number with its
source: a fabric's bus bandwidths and NCCL's latencies, a device's dense peaks, its memory bandwidth), the
published scaling results kept beside them, and a device's model FLOPs utilisation, achieved TFLOP/s over the dense
peak of the GPU's profile at the row's arithmetic.

Runs in: the parent (the model, a record's assembly, the run report, `compare plan --from`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from harness.model.comm_cost import Fabric, Protocol

PROFILES_DIR = Path(__file__).resolve().parent / "profiles"
PUBLISHED = PROFILES_DIR / "published.json"


class BadProfile(ValueError):
    """A hardware profile file that exists but cannot be used; the message is one line naming the file."""


_PROFILE_NUMBERS = {  # key: (required, what it must be)
    "devices_per_node": (True, "count"), "intra_busbw_GBps": (True, "positive"),
    "inter_busbw_GBps": (True, "positive"), "base_latency_us": (True, "non-negative"),
    "intra_hop_latency_us": (True, "non-negative"), "inter_hop_latency_us": (True, "non-negative"),
    "tree_intra_hop_latency_us": (False, "non-negative"), "tree_inter_hop_latency_us": (False, "non-negative"),
    "ll_base_latency_us": (False, "non-negative"), "ll_intra_hop_latency_us": (False, "non-negative"),
    "ll_inter_hop_latency_us": (False, "non-negative"), "ll_tree_inter_hop_latency_us": (False, "non-negative"),
    "memory_bandwidth_GBps": (False, "positive"),
}


def _profile_data(name: str) -> dict[str, Any]:
    """The checked contents of harness/model/profiles/<name>.json, or BadProfile saying what is wrong with it."""
    path = PROFILES_DIR / f"{name}.json"
    repo = Path(__file__).resolve().parents[2]
    where = f"hardware profile {name} ({path.relative_to(repo) if path.is_relative_to(repo) else path})"
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise BadProfile(f"{where} cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
    except ValueError as exc:
        raise BadProfile(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(d, dict):
        raise BadProfile(f"{where} holds a JSON {type(d).__name__}, not an object of the fields in "
                         f"harness/model/profiles/README.md")
    for key, (required, kind) in _PROFILE_NUMBERS.items():
        v = d.get(key)
        if v is None:
            if required:
                raise BadProfile(f"{where} lacks \"{key}\" (see harness/model/profiles/README.md)")
            continue
        number = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        if kind == "count":
            ok = number and v == int(v) and v >= 1
        else:
            ok = number and (v > 0 if kind == "positive" else v >= 0)
        if not ok:
            need = {"count": "a whole number of at least 1", "positive": "a finite number above 0",
                    "non-negative": "a finite number of at least 0"}[kind]
            raise BadProfile(f"{where}: \"{key}\" must be {need}, got {json.dumps(v)}")
    peaks = d.get("peak_tflops", {})
    if not isinstance(peaks, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
            for v in peaks.values()):
        raise BadProfile(f"{where}: \"peak_tflops\" must map each precision to a finite number above 0, got "
                         f"{json.dumps(peaks)}")
    return d


def profile_problem(name: str) -> str | None:
    """Why the profile `name` cannot be used (no such file, or a file that does not load), or None."""
    if name not in profiles():
        return unknown_profile(name)
    try:
        _profile_data(name)
    except BadProfile as exc:
        return str(exc)
    return None


def load_profile(name: str) -> Fabric:
    """The hardware profile harness/model/profiles/<name>.json (KeyError if there is none, BadProfile if it is not
    usable)."""
    if name not in profiles():
        raise KeyError(name)
    d = _profile_data(name)
    us = 1e-6

    def opt(key):
        return None if d.get(key) is None else d[key] * us

    protocols = [Protocol("Simple", d["base_latency_us"] * us, d["intra_hop_latency_us"] * us,
                          d["inter_hop_latency_us"] * us, opt("tree_intra_hop_latency_us"),
                          opt("tree_inter_hop_latency_us"), 1.0, 0.9)]
    if d.get("ll_base_latency_us") is not None:
        protocols.append(Protocol("LL", d["ll_base_latency_us"] * us, d["ll_intra_hop_latency_us"] * us,
                                  d["ll_inter_hop_latency_us"] * us, opt("ll_intra_hop_latency_us"),
                                  opt("ll_tree_inter_hop_latency_us"), 1 / 4, 0.9 / 3.8))
    return Fabric(name=name, devices_per_node=d["devices_per_node"], intra_busbw_Bps=d["intra_busbw_GBps"] * 1e9,
                  inter_busbw_Bps=d["inter_busbw_GBps"] * 1e9, protocols=protocols, tree=d.get("tree", True),
                  device=d.get("device", ""), peak_tflops=d.get("peak_tflops", {}), sources=d.get("sources", []),
                  notes=d.get("notes", ""), overlap_slowdown=d.get("overlap_compute_slowdown", 0.0),
                  copy_Bps=d["memory_bandwidth_GBps"] * 1e9 / 2 if d.get("memory_bandwidth_GBps") else None)


def profiles() -> list[str]:
    """Names of the hardware profiles (every JSON in harness/model/profiles/ but the published results)."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.json") if p != PUBLISHED)


def unknown_profile(name: str) -> str:
    """The one-line error for a --profile that names no profile."""
    valid = ", ".join(profiles())
    if not name.strip():
        return f"an empty --profile name; valid choices: {valid}"
    if name.endswith(".json") and name[:-5] in profiles():
        return f"unknown hardware profile '{name}'; a profile is named without .json: --profile {name[:-5]}"
    return (f"unknown hardware profile '{name}'; valid choices: {valid} (or add harness/model/profiles/{name}.json: see "
            f"harness/model/profiles/README.md)")


def published() -> list[dict[str, Any]]:
    return json.loads(PUBLISHED.read_text(encoding="utf-8"))


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
    peak, what = peak_of(load_profile(profile).peak_tflops, precision, cuda_math, conv_share)
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
