"""torch.nn.DataParallel: one process drives every device, scattering each batch and gathering the outputs.

On a machine with no GPU, DataParallel is a pure pass-through: it calls the module once with the whole batch on
the CPU and ignores `device_ids`. Its row then says so (devices used: 1), rather than pretending to be parallel.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from adapters.base import Adapter, Availability, LaunchPlan, RankInfo, python_module


class DPAdapter(Adapter):
    name = "dp"
    summary = "torch.nn.DataParallel: one process, batch scattered over the devices (pass-through without GPUs)"
    launcher = "in-process"

    @dataclass
    class Knobs:
        pass

    @classmethod
    def availability(cls, device: str, world_size: int) -> Availability:
        if device == "cuda":
            import torch

            n = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if n == 0:
                return Availability(False, "CUDA requested but torch sees no GPU", "use --device cpu")
            if world_size > n:
                return Availability(False, f"world size {world_size} needs {world_size} GPUs, this machine has {n}",
                                    f"use --world-size {n} or fewer")
        return Availability(True)

    def processes(self, world_size: int) -> int:
        return 1

    def launch(self, spec_path: Path, spec) -> LaunchPlan:
        return LaunchPlan(python_module("harness.worker", str(spec_path)), processes=1)

    def setup(self, spec):
        self.device_ids = list(range(spec.world_size)) if spec.device == "cuda" else []
        device = "cuda:0" if spec.device == "cuda" else "cpu"
        if spec.device == "cuda":
            import torch

            torch.cuda.set_device(0)
        self.info = RankInfo(rank=0, world_size=1, local_rank=0, device=device, backend=None,
                             data_rank=0, data_world=1, devices_used=max(1, len(self.device_ids)))
        return self.info

    def wrap(self, model, optimizer):
        from torch.nn import DataParallel

        return super().wrap(DataParallel(model, device_ids=self.device_ids or None), optimizer)

    def describe(self):
        import torch

        d = {"framework": f"torch {torch.__version__}", "knobs": asdict(self.knobs),
             "devices": self.info.devices_used if self.info else None}
        if not self.device_ids:
            d["note"] = "no GPU: DataParallel is a pass-through over one device (the CPU)"
        return d


ADAPTER = DPAdapter
