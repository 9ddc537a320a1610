"""DistributedDataParallel + torch.amp: the modern, built-in replacement for apex.amp.

Precision "auto" resolves to bf16 on CPU (CPU autocast has no fp16 GradScaler path worth comparing) and fp16 with
a GradScaler on CUDA; bf16 on CUDA needs no scaler. Parameters and optimizer state stay fp32 (autocast only
changes the dtype of the ops inside the forward pass).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from adapters.base import DeviceKnobError, KnobError, Precision
from adapters.ddp import DDPAdapter, DDPCost, DDPStrategy


class AmpStrategy(DDPStrategy):
    """Amp: every rank's role (adapters/base.py: Strategy)."""

    def setup(self, spec):
        import torch

        info = super().setup(spec)
        self.dtype = torch.float16 if self.precision() is Precision.FP16 else torch.bfloat16
        scale = {} if self.knobs.init_scale is None else {"init_scale": self.knobs.init_scale}
        self.scaler = torch.amp.GradScaler("cuda", **scale) if self.precision() is Precision.FP16 else None
        self.skips = None  # a device-side count of skipped steps, so counting never syncs inside a step
        return info

    def autocast(self):
        import torch

        return torch.autocast(device_type=self.info.device.split(":")[0], dtype=self.dtype)

    def backward(self, loss):
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def step(self):
        if self.scaler:
            # GradScaler skips the optimizer step and lowers the scale when the gradients overflowed: a lower scale
            # after update() is a skipped step. Compared on the device (get_scale() would sync every step).
            before = getattr(self.scaler, "_scale", None)
            before = before.clone() if before is not None else None
            if self.max_grad_norm is not None:
                # The gradients are scaled: clip their true norm (GradScaler's documented recipe). step() below
                # then knows they are unscaled, and still skips the step on an overflow found here.
                self.scaler.unscale_(self.optimizer)
                self.clip_gradients()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            after = getattr(self.scaler, "_scale", None)
            if before is not None and after is not None:
                dropped = (after < before).to(after.dtype)
                self.skips = dropped if self.skips is None else self.skips + dropped
        else:
            self.clip_gradients()  # bf16 autocast: the gradients are fp32 and unscaled
            self.optimizer.step()

    def skipped_steps(self):
        if self.scaler is None:
            return None
        return 0 if self.skips is None else int(self.skips.item())

    def describe(self):
        d = super().describe()
        d["precision"] = self.precision().value
        d["grad_scaler"] = self.scaler is not None
        if self.scaler is not None:
            d["grad_scaler_final_scale"] = float(self.scaler.get_scale())
        return d


class AmpCost(DDPCost):
    """Amp: the model's, the planner's and compare tune's role (adapters/base.py: Cost)."""

    @classmethod
    def plan_knobs(cls, dtype):
        return [{"precision": dtype}] if dtype in ("bf16", "fp16") else "mixed precision only; ddp is its fp32 row"

    def memory_buffers(self, tensors, largest, n, trainable=None):
        # autocast casts each matmul's and convolution's fp32 weight to 16 bits once a forward (its cast cache) and
        # the matmul saves that copy for backward: a second copy of those weights until backward has used it
        # (largest["cast"]: their parameters, where the planner counted them)
        out = super().memory_buffers(tensors, largest, n, trainable)
        if largest.get("cast"):
            precision = "16-bit" if self.knobs.precision == "auto" else self.knobs.precision
            out.append(("autocast's weight copies", 2 * largest["cast"],
                        f"each matmul and convolution weight backward needs, cast to {precision} once a forward "
                        f"(autocast's cache) and saved for backward, 2C (C: those weights' parameters, "
                        f"{largest['cast']:,.0f})"))
        return out


class AmpAdapter(AmpStrategy, AmpCost, DDPAdapter):
    name = "amp"
    summary = "DistributedDataParallel + torch.amp autocast (bf16 on CPU; fp16+GradScaler or bf16 on CUDA)"
    launcher = "torchrun"
    blog_label = None  # not in the seed figure

    @dataclass
    class Knobs(DDPAdapter.Knobs):
        precision: Literal["auto", "bf16", "fp16"] = "auto"
        """autocast dtype (auto: bf16 on CPU, fp16 on CUDA)."""
        init_scale: float | None = None
        """GradScaler's initial loss scale (fp16 only; unset: GradScaler's default, 2**16)."""

        def __post_init__(self):
            super().__post_init__()
            if self.init_scale is not None and not self.init_scale > 0:
                raise KnobError(f"knob 'init_scale' must be a positive loss scale (GradScaler's default: 65536); "
                                f"got {self.init_scale:g}")

    def precision(self) -> Precision:
        p = self.knobs.precision
        if p == "auto":
            return Precision.FP16 if self.device_kind == "cuda" else Precision.BF16
        if p == "fp16" and self.device_kind == "cpu":
            raise DeviceKnobError("knob 'precision' fp16 needs CUDA here; use bf16 on CPU")
        return Precision(p)


ADAPTER = AmpAdapter
