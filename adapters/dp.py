"""torch.nn.DataParallel: one process drives every device, scattering each batch and gathering the outputs.

On a machine with no GPU, DataParallel is a pure pass-through: it calls the module once with the whole batch on
the CPU and ignores `device_ids`. Its row then says so (devices used: 1), rather than pretending to be parallel.
"""

from __future__ import annotations

from adapters.base import Adapter, Availability, Cost, SingleProcessLaunch, SingleProcessStrategy
from adapters.probes import cuda_world_check
from harness.shared.comm_schedule import Replicate


class DPLaunch(SingleProcessLaunch):
    """DP: the parent's role (adapters/base.py: Launch)."""

    @classmethod
    def availability(cls, device: str, world_size: int) -> Availability:
        return cuda_world_check(device, world_size)

    @classmethod
    def multinode(cls, topology) -> Availability:
        return Availability(False, "torch.nn.DataParallel drives the devices of one process on one machine, so it "
                                   "cannot run on other hosts or span several",
                            "leave --hosts out for dp; across hosts, compare ddp (one process per device)")

    def scale_limit(self, device: str, world_size: int) -> str | None:
        if device == "cuda" or world_size == 1:
            return None
        return (f"on a CPU torch.nn.DataParallel is one process calling the module once with the whole batch, so "
                f"world size {world_size} would be 1 worker, with no speed-up to measure (fix: scale it with "
                f"--device cuda on a machine with {world_size} GPUs, or compare ddp on CPU)")

    def batch_norm(self) -> str | None:
        # On GPUs every replica normalises its own part of the batch (DataParallel has no SyncBatchNorm); on the CPU
        # the whole batch goes through one module.
        return None if self.device_kind != "cuda" else ""


class DPStrategy(SingleProcessStrategy):
    """DP: every rank's role (adapters/base.py: Strategy)."""

    def _devices(self, spec) -> int:
        return spec.world_size if spec.device == "cuda" else 1

    def wrap(self, model, optimizer):
        from torch.nn import DataParallel

        ids = list(range(self.info.devices_used)) if self.info.device.startswith("cuda") else None
        return super().wrap(DataParallel(model, device_ids=ids), optimizer)

    def describe(self):
        import torch

        d = {**super().describe(), "framework": f"torch {torch.__version__}",
             "devices": self.info.devices_used if self.info else None}
        if self.info is not None and not self.info.device.startswith("cuda"):
            d["note"] = "no GPU: DataParallel is a pass-through over one device (the CPU)"
        return d


class DPCost(Cost):
    """DP: the model's, the planner's and compare tune's role (adapters/base.py: Cost)."""

    @classmethod
    def plan_knobs(cls, dtype):
        return "one process for the GPUs of one node, which PyTorch's docs advise ddp over"

    def comm_schedule(self):
        # Every step replicates the module from device 0 and reduces the gradients back to it; no communication
        # at all where there is one device (the CPU).
        return Replicate(comm_backend="torch", wire_scale=1.0)


class DPAdapter(DPLaunch, DPStrategy, DPCost, Adapter):
    name = "dp"
    summary = "torch.nn.DataParallel: one process, batch scattered over the devices (pass-through without GPUs)"
    launcher = "in-process"
    blog_label = (0, "nn.DataParallel")


ADAPTER = DPAdapter
