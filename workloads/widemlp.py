"""A communication-bound model: many parameters, little compute per sample (the "VGG-16" of the suite).

Four wide fully connected layers (about 38 M parameters, 151 MB of fp32 gradients per step) on a small batch, so
the time to all-reduce the gradients rivals the time to compute them: where backends differ most.
Data: deterministic Gaussian inputs labelled by a fixed random linear teacher, so the loss really falls.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.shared.options import OptionError
from workloads.base import Data, Workload, synthetic_classification


class WideMLP(Workload):
    name = "widemlp"
    summary = "4 wide linear layers (~38 M params), small batch: communication-bound, synthetic teacher labels"
    global_batch = 32
    base_lr = 0.01
    base_batch = 32
    steps = 20
    warmup = 3
    seed = 0
    equiv_steps = 3
    target = None

    @dataclass
    class Options:
        width: int = 4096
        """Width of the hidden layers."""
        depth: int = 3
        """Number of width x width hidden layers."""
        in_features: int = 1024
        """Width of each synthetic input vector."""
        train_samples: int = 1024
        """Synthetic training samples (drawn once from the seed)."""
        test_samples: int = 512
        """Held-out synthetic samples the evaluation scores."""

        def __post_init__(self):
            for name in ("width", "depth", "in_features", "train_samples", "test_samples"):
                if getattr(self, name) < 1:
                    raise OptionError(f"option '{name}' must be at least 1; got {getattr(self, name)}")

    def build_model(self):
        import torch.nn as nn

        o = self.options
        layers = [nn.Linear(o.in_features, o.width), nn.ReLU()]
        for _ in range(o.depth - 1):
            layers += [nn.Linear(o.width, o.width), nn.ReLU()]
        layers.append(nn.Linear(o.width, 10))
        return nn.Sequential(*layers)

    def train_samples(self, global_batch: int) -> int:
        return self.options.train_samples

    def materialize(self, device: str, global_batch: int) -> Data:
        o = self.options
        x, y = synthetic_classification(o.train_samples + o.test_samples, (o.in_features,), 10, self.seed, True)
        n = o.train_samples
        x, y = x.to(device), y.to(device)
        return Data(x[:n], y[:n], x[n:], y[n:], meta={"source": "synthetic Gaussian, linear-teacher labels"})


WORKLOAD = WideMLP
