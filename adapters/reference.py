"""The single-process fp32 reference: the plain model over the whole global batch, no wrapper.

Not a comparison row. The harness runs it once per comparison for `equiv_steps` steps, and every adapter's
parameters after the same number of steps are compared with it (`max_param_diff`). It also notes which parameters
each step left without a gradient (torch's optimizers then leave them alone), so that the report can say of a row
that differs on exactly those what its backend does with them instead (Adapter.missing_gradient).
"""

from __future__ import annotations

import torch

from adapters.base import Adapter, SingleProcessLaunch, SingleProcessStrategy


class ReferenceStrategy(SingleProcessStrategy):
    """Reference: every rank's role (adapters/base.py: Strategy)."""

    def wrap(self, model, optimizer):
        self.steps, self.no_gradient, self.frozen, self.peaks = 0, {}, {}, {}
        # every parameter, frozen ones too: a model may unfreeze a layer as it trains (a frozen backbone's warm-up)
        self.named = list(model.named_parameters())
        return super().wrap(model, optimizer)

    def step(self):
        for name, p in self.named:
            if not p.requires_grad:
                self.frozen.setdefault(name, []).append(self.steps)
            elif p.grad is None:
                self.no_gradient.setdefault(name, []).append(self.steps)
            elif not p.grad.is_sparse:  # element by element: a ✗ under Adam on a gradient near zero is noise
                g = p.grad.detach().abs().float().cpu()
                self.peaks[name] = g if name not in self.peaks else torch.maximum(self.peaks[name], g)
        self.steps += 1
        super().step()

    def describe(self):
        # no_gradient: the steps that left a trainable parameter without a gradient; frozen: the steps in which a
        # parameter did not require one (every step for one frozen throughout)
        return {**super().describe(), "no_gradient": getattr(self, "no_gradient", {}),
                "frozen": getattr(self, "frozen", {}), "steps": getattr(self, "steps", 0)}

    def gradient_peaks(self):
        return getattr(self, "peaks", None)


class ReferenceAdapter(SingleProcessLaunch, ReferenceStrategy, Adapter):
    name = "reference"
    summary = "single process, plain module, fp32: the equivalence reference"
    launcher = "in-process"


ADAPTER = ReferenceAdapter
