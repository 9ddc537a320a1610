"""Handwritten digits (scikit-learn's embedded `load_digits`: 1797 real 8x8 images, no download).

The accuracy workload: a small MLP with a fixed, stratified held-out test split. With the defaults it reaches
>= 0.95 test accuracy under every adapter, so a backend that averages gradients wrongly shows up here.
No BatchNorm and no dropout, so sharding the batch does not change the maths: the single-process reference
must match every fp32 adapter to float rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from harness.shared.options import OptionError
from workloads.base import Data, Workload

DIGITS = 1797
"""Images in scikit-learn's load_digits."""
TEST_FRACTION = 0.2


class Digits(Workload):
    name = "digits"
    summary = "scikit-learn handwritten digits (real data, 1437 train / 360 test), MLP, accuracy target 0.95"
    global_batch = 64
    base_lr = 0.1
    base_batch = 64
    steps = 280
    warmup = 20
    seed = 0
    target = 0.95
    # Measured here: the first evaluation at or above 0.95 comes at step 100 (0.9667; 0.9222 at step 90), a margin
    # of six test images, so float rounding between fp32 backends cannot move the step it is reached at.
    eval_every = 10
    max_steps_to_target = 500

    @dataclass
    class Options:
        hidden: int = 256
        """Width of the two hidden layers."""

        def __post_init__(self):
            if self.hidden < 1:
                raise OptionError(f"option 'hidden' must be at least 1; got {self.hidden}")

    def build_model(self):
        import torch.nn as nn

        h = self.options.hidden
        return nn.Sequential(nn.Linear(64, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 10))

    def train_samples(self, global_batch: int) -> int:
        return DIGITS - math.ceil(TEST_FRACTION * DIGITS)  # train_test_split rounds the test share up

    def materialize(self, device: str, global_batch: int) -> Data:
        import torch

        x_tr, x_te, y_tr, y_te = split()

        def t(a, dtype):
            return torch.tensor(a, dtype=dtype, device=device)

        return Data(t(x_tr, torch.float32), t(y_tr, torch.long), t(x_te, torch.float32), t(y_te, torch.long),
                    meta={"source": "sklearn.datasets.load_digits", "train": len(x_tr), "test": len(x_te)})


SPLIT_FILE = Path(__file__).parent / "data" / "digits_split.npz"
"""The split, shipped with the project (47 KB): pixel values 0-16 as uint8 and labels, exactly scikit-learn's
`train_test_split(load_digits().data / 16, ..., test_size=0.2, random_state=0, stratify=y)` (tests/unit/
test_workloads.py checks it against scikit-learn wherever that is installed). Shipped so that no rank imports
scikit-learn (over a second per rank per launch) and a machine without it (a lent GPU node with no package registry)
still runs the default workload."""


def split():
    """(x_train, x_test, y_train, y_test) as numpy arrays: load_digits / 16 (float64), stratified 80/20,
    random_state 0, labels int64 — the arrays scikit-learn gives, from the shipped file."""
    import numpy as np

    with np.load(SPLIT_FILE) as z:
        return (z["x_tr"] / 16.0, z["x_te"] / 16.0, z["y_tr"].astype(np.int64), z["y_te"].astype(np.int64))


def sklearn_split():
    """The same split made by scikit-learn itself (for the test that the shipped file is exactly it)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    return train_test_split(x / 16.0, y, test_size=TEST_FRACTION, random_state=0, stratify=y)


WORKLOAD = Digits
