"""The model against published scaling results, scored honestly: each distinct configuration once, what it was
calibrated on and what is held out, a constant-efficiency baseline beside it, the DDP benchmark's 1 -> n slowdown,
and each prediction's range under the inputs nobody published.

Runs in: the parent. Pure arithmetic over harness/model/profiles/published.json with the model's own pricing
(costmodel.predict_step); the one thing it builds is a layer table (each layer's parameters and forward FLOPs) of
the CNNs whose definitions this project can build on torch's meta device.

- A configuration is what the model is given: model, framework, hardware profile, precision, per-GPU batch and
  GPU count. Published results with the same configuration (the Horovod paper's TCP run and the docs' RoCE run are
  priced on the same profile; DGX-1 16 GB and 32 GB share one) are one check, scored against their mean.
- Calibrated: the single-GPU rate (and, where a table gives the framework at 1 GPU, its overhead), which sets the
  compute. Held out: every multi-GPU figure, which only the communication model predicts.
- The baseline predicts, for each configuration, the mean published efficiency of all the others (a constant,
  fitted without the configuration it predicts).
- Gradients: each layer's parameters, ready as backward reaches it (backward per layer in proportion to its forward
  FLOPs) for the CNNs with a layer table; 100 equal tensors ready evenly through backward for the others.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
from typing import Any
from urllib.parse import urlparse

from harness.model import comm_cost, hardware
from harness.model.compute import Compute, layered_grads
from harness.model import costmodel as cm

TORCHVISION_GMACS = {"Inception V3": 5.71, "ResNet-101": 7.80, "ResNet-50": 4.09, "VGG-16": 15.47,
                     "ResNeXt-50 32x4d": 4.23, "ResNeXt-101 32x8d": 16.41}
"""Multiply-adds per 224x224 (Inception: 299x299) image, torchvision's model documentation ("GFLOPS" column of
https://pytorch.org/vision/stable/models.html): used to derive a single-GPU rate that was not published, and held
by a test to the layer tables built here."""
INPUT_SIDE = {"Inception V3": 299}
"""The image side each architecture is trained and counted at (others: 224)."""
SENSITIVITY = {"bus bandwidth": (0.8, 1.25), "latency": (0.5, 2.0), "single-GPU rate": (0.9, 1.1),
               "overlap slowdown": (0.0, 0.40)}
"""The inputs no published result states for its own cluster, each moved by these factors one at a time (and the
gradient layout: per layer or 100 equal tensors): the range shown beside each prediction. The overlap slowdown is
set, not scaled: from none to the largest its source measured (the profile's overlap_compute_slowdown)."""
SLOWDOWN_TARGET = 0.02
"""The DDP benchmark's 1 -> 16 GPU slowdown is met when predicted within 2 points."""


# ---- layer tables -----------------------------------------------------------------------------------------------

def _vgg16():
    import torch.nn as nn

    layers, cin = [], 3
    for v in [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU(inplace=True)]
            cin = v
    layers += [nn.AdaptiveAvgPool2d(7), nn.Flatten(), nn.Linear(512 * 49, 4096), nn.ReLU(inplace=True),
               nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Linear(4096, 1000)]
    return nn.Sequential(*layers)


def _inception_v3():
    """torchvision's Inception3 (aux_logits on, as in training), the same modules in the same order; its forward
    runs the auxiliary head after Mixed_6e, as training does."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def conv(cin, cout, kernel, stride=1, padding=0):
        return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, padding, bias=False),
                             nn.BatchNorm2d(cout, eps=0.001), nn.ReLU(inplace=True))

    class Block(nn.Module):
        """Branches (each a sequence of convolutions, some after a pooling) whose outputs are concatenated."""

        def __init__(self, branches, pools):
            super().__init__()
            self.branches = nn.ModuleList(nn.Sequential(*b) for b in branches)
            self.pools = pools  # per branch: None, "avg" (3x3, stride 1) or "max" (3x3, stride 2)

        def forward(self, x):
            outs = []
            for branch, pool in zip(self.branches, self.pools):
                y = (F.avg_pool2d(x, 3, 1, 1) if pool == "avg" else F.max_pool2d(x, 3, 2) if pool == "max" else x)
                outs.append(branch(y))
            return torch.cat(outs, 1)

    def a(cin, pool):
        return Block([[conv(cin, 64, 1)], [conv(cin, 48, 1), conv(48, 64, 5, padding=2)],
                      [conv(cin, 64, 1), conv(64, 96, 3, padding=1), conv(96, 96, 3, padding=1)],
                      [conv(cin, pool, 1)]], [None, None, None, "avg"])

    def b(cin):
        return Block([[conv(cin, 384, 3, 2)], [conv(cin, 64, 1), conv(64, 96, 3, padding=1), conv(96, 96, 3, 2)],
                      []], [None, None, "max"])

    def c(cin, c7):
        return Block([[conv(cin, 192, 1)],
                      [conv(cin, c7, 1), conv(c7, c7, (1, 7), padding=(0, 3)), conv(c7, 192, (7, 1), padding=(3, 0))],
                      [conv(cin, c7, 1), conv(c7, c7, (7, 1), padding=(3, 0)), conv(c7, c7, (1, 7), padding=(0, 3)),
                       conv(c7, c7, (7, 1), padding=(3, 0)), conv(c7, 192, (1, 7), padding=(0, 3))],
                      [conv(cin, 192, 1)]], [None, None, None, "avg"])

    def d(cin):
        return Block([[conv(cin, 192, 1), conv(192, 320, 3, 2)],
                      [conv(cin, 192, 1), conv(192, 192, (1, 7), padding=(0, 3)),
                       conv(192, 192, (7, 1), padding=(3, 0)), conv(192, 192, 3, 2)], []], [None, None, "max"])

    class E(nn.Module):
        def __init__(self, cin):
            super().__init__()
            self.b1 = conv(cin, 320, 1)
            self.b3 = conv(cin, 384, 1)
            self.b3a, self.b3b = conv(384, 384, (1, 3), padding=(0, 1)), conv(384, 384, (3, 1), padding=(1, 0))
            self.d1, self.d2 = conv(cin, 448, 1), conv(448, 384, 3, padding=1)
            self.d3a, self.d3b = conv(384, 384, (1, 3), padding=(0, 1)), conv(384, 384, (3, 1), padding=(1, 0))
            self.pool = conv(cin, 192, 1)

        def forward(self, x):
            y, z = self.b3(x), self.d2(self.d1(x))
            return torch.cat([self.b1(x), self.b3a(y), self.b3b(y), self.d3a(z), self.d3b(z),
                              self.pool(F.avg_pool2d(x, 3, 1, 1))], 1)

    class Aux(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv0, self.conv1, self.fc = conv(768, 128, 1), conv(128, 768, 5), nn.Linear(768, 1000)

        def forward(self, x):
            y = self.conv1(self.conv0(F.avg_pool2d(x, 5, 3)))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))

    class Inception3(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(conv(3, 32, 3, 2), conv(32, 32, 3), conv(32, 64, 3, padding=1),
                                      nn.MaxPool2d(3, 2), conv(64, 80, 1), conv(80, 192, 3), nn.MaxPool2d(3, 2))
            self.mixed6 = nn.Sequential(a(192, 32), a(256, 64), a(288, 64), b(288), c(768, 128), c(768, 160),
                                        c(768, 160), c(768, 192))
            self.aux = Aux()
            self.mixed7 = nn.Sequential(d(768), E(1280), E(2048))
            self.fc = nn.Linear(2048, 1000)

        def forward(self, x):
            x = self.mixed6(self.stem(x))
            aux = self.aux(x)
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.mixed7(x), 1), 1)), aux

    return Inception3()


def _architecture(model: str):
    """torchvision's architecture of a published model, built here (torchvision has no CPU build on PyPI), or
    None where this project has no definition of it."""
    from workloads.resnet import resnet_model

    builders = {"VGG-16": _vgg16, "ResNet-50": lambda: resnet_model("resnet50"),
                "ResNet-50 v1.5": lambda: resnet_model("resnet50"), "ResNet-101": lambda: resnet_model("resnet101"),
                "ResNeXt-50 32x4d": lambda: resnet_model("resnext50_32x4d"),
                "ResNeXt-101 32x8d": lambda: resnet_model("resnext101_32x8d"), "Inception V3": _inception_v3}
    return builders.get(model)


@functools.cache
def layer_table(model: str) -> tuple[tuple[int, float], ...] | None:
    """Each parameter-holding layer of `model` in forward order: (parameters, forward FLOPs of one image at its
    INPUT_SIDE), convolutions and linear layers counted from their output shapes (2 x multiply-adds), normalisation
    layers 0 FLOPs; None where there is no definition."""
    build = _architecture(model)
    if build is None:
        return None
    import torch
    import torch.nn as nn

    with torch.device("meta"):
        net = build()
        flops: dict[nn.Module, float] = {}

        def hook(module, args, out):
            if isinstance(module, nn.Conv2d):
                k = module.in_channels // module.groups * module.kernel_size[0] * module.kernel_size[1]
                flops[module] = 2.0 * out.numel() * k
            else:
                flops[module] = 2.0 * module.in_features * module.out_features

        for m in net.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                m.register_forward_hook(hook)
        side = INPUT_SIDE.get(model, 224)
        net.eval()(torch.empty(1, 3, side, side))  # eval: one image's statistics are not normalisable
    return tuple((sum(p.numel() for p in m.parameters(recurse=False)), flops.get(m, 0.0)) for m in net.modules()
                 if any(True for _ in m.parameters(recurse=False)))


# ---- pricing ------------------------------------------------------------------------------------------------------

def single_rate(entry: dict[str, Any]) -> tuple[float, str]:
    """The single-GPU images/s without the framework, and how it was had."""
    rate = entry.get("single_device_samples_per_s")
    if rate is not None:
        return rate, ""
    ref = next(e for e in hardware.published() if e["model"] == "Inception V3"
               and e.get("single_device_samples_per_s") and e["profile"] == entry["profile"])
    rate = ref["single_device_samples_per_s"] * TORCHVISION_GMACS["Inception V3"] / TORCHVISION_GMACS[entry["model"]]
    return rate, (f"single-GPU rate not published: derived as Inception V3's {ref['single_device_samples_per_s']} "
                  f"img/s x the ratio of multiply-adds per image (torchvision: {TORCHVISION_GMACS['Inception V3']} / "
                  f"{TORCHVISION_GMACS[entry['model']]} G) = {rate:.0f} img/s")


def compute(entry: dict[str, Any], *, layers: bool = True, rate_scale: float = 1.0) -> Compute:
    """The single-GPU step of a published result: batch / rate, forward 1/3 and backward 2/3 of it; its gradients
    layer by layer where there is a layer table (and `layers`), else 100 equal tensors; the framework's own cost at
    one GPU where the table gives it beside the no-framework rate."""
    rate = single_rate(entry)[0] * rate_scale
    t = entry["per_device_batch"] / rate
    overhead = 0.0
    one = next((p for p in entry["points"] if p["n"] == 1 and "samples_per_s_per_device" in p), None)
    if one:
        overhead = max(0.0, entry["per_device_batch"] / (one["samples_per_s_per_device"] * rate_scale) - t)
    per_param = entry.get("gradient_bytes_per_param", 4)
    bwd = 2 * t / 3
    table = layer_table(entry["model"]) if layers else None
    if table:
        grads = layered_grads([(n * per_param, f) for n, f in table], bwd)
    else:
        grad_bytes = entry["params"] * per_param
        grads = [(grad_bytes / 100, bwd * (i + 1) / 100) for i in range(100)]
    return Compute(t / 3, bwd, 0.0, grads, overhead)


def _schedule(entry):
    """The framework's schedule with the knobs the result ran with (`knobs`: Horovod's defaults before 0.21, 64 MB
    fusion and a 5 ms cycle, for its 2017-2018 benchmarks), else its defaults."""
    import adapters

    return adapters.get(entry["backend"])(entry.get("knobs") or {}).comm_schedule()


def _scaled(fabric: comm_cost.Fabric, bandwidth: float = 1.0, latency: float = 1.0) -> comm_cost.Fabric:
    def lat(v):
        return None if v is None else v * latency

    protocols = [dataclasses.replace(p, base_s=p.base_s * latency, intra_s=p.intra_s * latency,
                                     inter_s=p.inter_s * latency, tree_intra_s=lat(p.tree_intra_s),
                                     tree_inter_s=lat(p.tree_inter_s)) for p in fabric.protocols]
    return dataclasses.replace(fabric, intra_busbw_Bps=fabric.intra_busbw_Bps * bandwidth,
                               inter_busbw_Bps=fabric.inter_busbw_Bps * bandwidth, protocols=protocols)


def efficiency(entry, fabric, n, **compute_args) -> float:
    """Predicted parallel efficiency at n: the single-GPU step without the framework over the step on n GPUs."""
    c = compute(entry, **compute_args)
    return c.total_s / cm.predict_step(_schedule(entry), c, fabric, n).step_s


def sensitivity(entry, fabric, n) -> tuple[float, float]:
    """The predicted efficiency's range with each unpublished input moved by SENSITIVITY (and the other gradient
    layout), one at a time."""
    values = [efficiency(entry, fabric, n)]
    for what, factors in SENSITIVITY.items():
        for f in factors:
            if what == "bus bandwidth":
                values.append(efficiency(entry, _scaled(fabric, bandwidth=f), n))
            elif what == "latency":
                values.append(efficiency(entry, _scaled(fabric, latency=f), n))
            elif what == "overlap slowdown":
                values.append(efficiency(entry, dataclasses.replace(fabric, overlap_slowdown=f), n))
            else:
                values.append(efficiency(entry, fabric, n, rate_scale=f))
    if layer_table(entry["model"]):
        values.append(efficiency(entry, fabric, n, layers=False))
    return min(values), max(values)


def _moved() -> str:
    """SENSITIVITY in words: "bus bandwidth x0.8-1.25, ..., overlap slowdown 0%-40%"."""
    def words(what, lo, hi):
        return f"{what} {lo:.0%}-{hi:.0%}" if what == "overlap slowdown" else f"{what} x{lo:g}-{hi:g}"

    return ", ".join(words(what, *factors) for what, factors in SENSITIVITY.items())


def published_efficiency(entry, point) -> float | None:
    """Efficiency as the result states it, or from its rates against the single-GPU rate without the
    framework."""
    n, rate = point["n"], entry.get("single_device_samples_per_s")
    if "efficiency" in point:
        return point["efficiency"]
    if rate is None:
        return None
    if "samples_per_s_per_device" in point:
        return point["samples_per_s_per_device"] / rate
    return point["samples_per_s"] / (n * rate)


def _calibrated(entry) -> str:
    one = [p for p in entry["points"] if p["n"] == 1]
    if one and "samples_per_s_per_device" in one[0]:
        return "the single-GPU rate without the framework and with it at 1 GPU (the same table)"
    if one:
        return "the 1-GPU rate (the same table)"
    if entry.get("single_device_samples_per_s") is None:
        return "a single-GPU rate derived from Inception V3's by multiply-adds"
    src = urlparse((entry.get("single_device_source") or {}).get("url") or "").path.split("/")
    return f"the single-GPU rate from another publication ({'/'.join(src[1:3])})"


def configurations(problems: list[str] | None = None) -> list[dict[str, Any]]:
    """Every distinct configuration with a published efficiency, its prediction and range (see the module's
    docstring). A published result whose hardware profile cannot be used is left out, and why goes to
    `problems`."""
    groups: dict[tuple, dict[str, Any]] = {}
    for e in hardware.published():
        try:
            fabric = hardware.load_profile(e["profile"])
        except (KeyError, hardware.BadProfile) as exc:
            if problems is not None:
                why = str(exc) if isinstance(exc, hardware.BadProfile) else hardware.unknown_profile(e["profile"])
                problems.append(f"published result {e['id']} left out: {why}")
            continue
        for p in e["points"]:
            n = p["n"]
            pub = published_efficiency(e, p)
            if n == 1 or pub is None:
                continue
            key = (e["model"], e["backend"], e["profile"], e["precision"], e["per_device_batch"], n)
            g = groups.get(key)
            if g is None:
                lo, hi = sensitivity(e, fabric, n)
                g = groups[key] = {
                    "ids": [], "model": e["model"], "backend": e["backend"], "profile": e["profile"],
                    "precision": e["precision"], "n": n, "published": [],
                    "predicted_efficiency": efficiency(e, fabric, n), "range": (lo, hi),
                    "gradients": "per layer" if layer_table(e["model"]) else "100 equal tensors",
                    "calibrated": _calibrated(e), "note": single_rate(e)[1], "sources": e.get("sources", [])}
            g["ids"].append(e["id"])
            g["published"].append(pub)
    rows = list(groups.values())
    for r in rows:
        r["published_efficiency"] = statistics.fmean(r["published"])
    for r in rows:
        others = [o["published_efficiency"] for o in rows if o is not r]
        r["baseline_efficiency"] = statistics.fmean(others) if others else None
    return rows


def slowdowns() -> list[dict[str, Any]]:
    """Where a table gives the framework at 1 GPU and at n: its slowdown 1 - rate(n) / rate(1), published and
    predicted (the framework's overhead is in both steps, so only communication can move it)."""
    rows = []
    for e in hardware.published():
        one = next((p for p in e["points"] if p["n"] == 1 and "samples_per_s_per_device" in p), None)
        if one is None:
            continue
        try:
            fabric = hardware.load_profile(e["profile"])
        except (KeyError, hardware.BadProfile):
            continue
        c = compute(e)
        t1 = cm.predict_step(_schedule(e), c, fabric, 1).step_s
        for p in e["points"]:
            if p["n"] > 1:
                tn = cm.predict_step(_schedule(e), c, fabric, p["n"]).step_s
                rows.append({"id": e["id"], "model": e["model"], "n": p["n"],
                             "published": 1 - p["samples_per_s_per_device"] / one["samples_per_s_per_device"],
                             "predicted": 1 - t1 / tn})
    return rows


def scores(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean absolute error in efficiency points of the model and of the baseline, and how many configurations each
    gets within 10 points."""
    model = [abs(r["predicted_efficiency"] - r["published_efficiency"]) for r in rows]
    base = [abs(r["baseline_efficiency"] - r["published_efficiency"]) for r in rows
            if r["baseline_efficiency"] is not None]
    return {"configurations": len(rows), "model_mae": statistics.fmean(model) if model else None,
            "baseline_mae": statistics.fmean(base) if base else None,
            "model_within": sum(m <= 0.10 for m in model), "baseline_within": sum(b <= 0.10 for b in base),
            "inside_range": sum(r["range"][0] - 1e-9 <= r["published_efficiency"] <= r["range"][1] + 1e-9
                                for r in rows)}


def lines(rows: list[dict[str, Any]], slow: list[dict[str, Any]]) -> list[str]:
    """The checks as Markdown: one row per configuration, the scores, the slowdowns."""
    md = ["| configuration | GPUs | calibrated on | gradients | published | model (range) | baseline | Δ model | "
          "Δ baseline |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pub = " / ".join(f"{v:.0%}" for v in r["published"])
        lo, hi = r["range"]
        d_model = (r["predicted_efficiency"] - r["published_efficiency"]) * 100
        d_base = (r["baseline_efficiency"] - r["published_efficiency"]) * 100
        md.append(f"| {', '.join(r['ids'])} ({r['model']}, {r['backend']}, {r['precision']}, {r['profile']}) | "
                  f"{r['n']} | {r['calibrated']} | {r['gradients']} | {pub} | {r['predicted_efficiency']:.0%} "
                  f"({lo:.0%}–{hi:.0%}) | {r['baseline_efficiency']:.0%} | {d_model:+.1f} | {d_base:+.1f} |")
    s = scores(rows)
    if s["configurations"]:
        verdict = "beats" if s["model_mae"] < s["baseline_mae"] else "does not beat"
        setups = len({(r["model"], r["backend"], r["profile"], r["precision"]) for r in rows})
        md += ["", f"Over {s['configurations']} distinct configurations ({setups} setups at one or more GPU counts), "
                   f"every multi-GPU figure held out: the model's "
                   f"mean absolute error is {s['model_mae'] * 100:.1f} points of efficiency, the constant baseline's "
                   f"(each configuration predicted by the mean of the others) {s['baseline_mae'] * 100:.1f}: the model "
                   f"{verdict} it. Within ±10 points: the model {s['model_within']}, the baseline "
                   f"{s['baseline_within']}. The published figure lies inside the model's range at "
                   f"{s['inside_range']} of {s['configurations']} (range: {_moved()}, and the other gradient layout, "
                   f"one at a time)."]
    if slow:
        md += ["", "The DDP benchmark's slowdown from 1 GPU under DDP to n (1 - rate(n) / rate(1)), where only "
                   "communication can move it:", "", "| result | GPUs | published | predicted | Δ points |",
               "|---|---|---|---|---|"]
        md += [f"| {r['id']} | {r['n']} | {r['published']:.1%} | {r['predicted']:.1%} | "
               f"{(r['predicted'] - r['published']) * 100:+.1f} |" for r in slow]
        at16 = [r for r in slow if r["n"] == 16]
        if at16:
            worst = max(abs(r["predicted"] - r["published"]) for r in at16)
            met = "met" if worst <= SLOWDOWN_TARGET else "not met"
            md += ["", f"At 16 GPUs the largest miss is {worst * 100:.1f} points: the ±{SLOWDOWN_TARGET * 100:.0f}-point "
                       f"target is {met}."]
    notes = sorted({r["note"] for r in rows if r["note"]})
    md += [""] + [f"- {n}" for n in notes] if notes else []
    md += ["", "Sources: " + "; ".join(sorted({s["url"] for r in rows for s in r["sources"] if s.get("url")}))]
    return md
