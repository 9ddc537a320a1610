"""ResNet-18/50 on ImageNet-shaped synthetic data: the seed blog's throughput comparison.

The model is a compact re-statement of torchvision's ResNet (same layers, same parameter count: 11,689,512 for
resnet18 and 25,557,032 for resnet50, checked by a test) rather than torchvision itself: PyPI has no CPU build of
torchvision, and the CUDA build only imports next to CPU torch after patching operator schemas. Throughput, not
accuracy, is the point: inputs are random 3x224x224 tensors with random labels, materialised before timing.
BatchNorm statistics are per process (as in the blog, without SyncBatchNorm), so the batch split changes the
maths and the equivalence check is reported but not expected to hold to float rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from harness.shared.options import OptionError
from workloads.base import Data, Workload, synthetic_classification

MAX_IMAGE_SIZE = 4096
"""Largest `image_size` option (ImageNet models train at 224-600)."""


def resnet_model(arch: str, num_classes: int = 1000):
    """torchvision's ResNet-18/34/50/101 (v1.5: the stride in the 3x3 convolution) and ResNeXt-50 32x4d / 101 32x8d
    (the 3x3 convolution grouped: 32 groups of 4 or 8 channels per 64 of width), the same layers and parameter
    counts, built here (torchvision has no CPU build on PyPI); also the published checks' layer tables."""
    import torch.nn as nn

    def conv_bn(cin, cout, k, stride=1, groups=1):
        return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]

    class Basic(nn.Module):
        expansion = 1

        def __init__(self, cin, width, stride):
            super().__init__()
            cout = width * self.expansion
            self.body = nn.Sequential(*conv_bn(cin, width, 3, stride), nn.ReLU(inplace=True), *conv_bn(width, cout, 3))
            self.short = (nn.Sequential(*conv_bn(cin, cout, 1, stride)) if stride != 1 or cin != cout
                          else nn.Identity())

        def forward(self, x):
            return (self.body(x) + self.short(x)).relu_()

    class Bottleneck(Basic):
        expansion = 4

        def __init__(self, cin, width, stride):
            nn.Module.__init__(self)
            cout = width * self.expansion
            inner = width * per_group // 64 * groups
            self.body = nn.Sequential(*conv_bn(cin, inner, 1), nn.ReLU(inplace=True),
                                      *conv_bn(inner, inner, 3, stride, groups), nn.ReLU(inplace=True),
                                      *conv_bn(inner, cout, 1))
            self.short = (nn.Sequential(*conv_bn(cin, cout, 1, stride)) if stride != 1 or cin != cout
                          else nn.Identity())

    block, counts = {"resnet18": (Basic, [2, 2, 2, 2]), "resnet34": (Basic, [3, 4, 6, 3]),
                     "resnet50": (Bottleneck, [3, 4, 6, 3]), "resnet101": (Bottleneck, [3, 4, 23, 3]),
                     "resnext50_32x4d": (Bottleneck, [3, 4, 6, 3]),
                     "resnext101_32x8d": (Bottleneck, [3, 4, 23, 3])}[arch]
    groups, per_group = {"resnext50_32x4d": (32, 4), "resnext101_32x8d": (32, 8)}.get(arch, (1, 64))
    layers, cin = [*conv_bn(3, 64, 7, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)], 64
    for i, n in enumerate(counts):
        width = 64 * 2 ** i
        for j in range(n):
            layers.append(block(cin, width, 2 if (j == 0 and i > 0) else 1))
            cin = width * block.expansion
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)]
    return nn.Sequential(*layers)


class ResNet(Workload):
    name = "resnet"
    summary = "ResNet-18 (or -50) on ImageNet-shaped synthetic data (3x224x224, 1000 classes): throughput"
    global_batch = 32
    base_lr = 0.1
    base_batch = 256
    steps = 10
    warmup = 2
    seed = 0
    equiv_steps = 2
    target = None
    batch_norm = "BatchNorm2d"

    @dataclass
    class Options:
        arch: Literal["resnet18", "resnet34", "resnet50"] = "resnet18"
        """Which torchvision-shaped ResNet (18, 34 or 50 layers; built here, torchvision is not needed)."""
        image_size: int = 224
        """Height and width of the synthetic RGB images (ImageNet's 224 by default)."""
        pool_batches: int = 2
        """Distinct global batches materialised in memory (the data is synthetic; this bounds RAM)."""

        def __post_init__(self):
            for name in ("image_size", "pool_batches"):
                if getattr(self, name) < 1:
                    raise OptionError(f"option '{name}' must be at least 1; got {getattr(self, name)}")
            if self.image_size > MAX_IMAGE_SIZE:  # a typo: the synthetic pool would not fit in any memory
                raise OptionError(f"option 'image_size' must be at most {MAX_IMAGE_SIZE} (one 3x{MAX_IMAGE_SIZE}x"
                                  f"{MAX_IMAGE_SIZE} fp32 image is {3 * 4 * MAX_IMAGE_SIZE ** 2 // 2**20} MiB); got "
                                  f"{self.image_size}")

    def build_model(self):
        return resnet_model(self.options.arch)

    def make_optimizer(self, model, lr):
        import torch

        return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)

    def train_samples(self, global_batch: int) -> int:
        return self.options.pool_batches * global_batch

    def materialize(self, device: str, global_batch: int) -> Data:
        o = self.options
        n = o.pool_batches * global_batch
        x, y = synthetic_classification(n, (3, o.image_size, o.image_size), 1000, self.seed, teacher=False)
        return Data(x.to(device), y.to(device), meta={"source": f"synthetic N(0,1) images, {n} in memory"})

    def batch_indices(self, step, global_batch, n_train, data_rank=0, data_world=1):
        # Synthetic pool: cycle through it in order (no shuffle needed); the pool holds whole global batches.
        import torch

        n_batches = max(1, n_train // global_batch)
        start = (step % n_batches) * global_batch
        per = global_batch // data_world
        return torch.arange(start + data_rank * per, start + (data_rank + 1) * per)

    def describe(self):
        return {**super().describe(), "model": "compact torchvision-equivalent ResNet (see workloads/resnet.py)"}


WORKLOAD = ResNet
