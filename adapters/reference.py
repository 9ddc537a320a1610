"""The single-process fp32 reference: the plain model over the whole global batch, no wrapper.

Not a comparison row. The harness runs it once per comparison for `equiv_steps` steps, and every adapter's
parameters after the same number of steps are compared with it (`max_param_diff`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from adapters.base import Adapter, LaunchPlan, RankInfo, python_module


class ReferenceAdapter(Adapter):
    name = "reference"
    summary = "single process, plain module, fp32: the equivalence reference"
    launcher = "in-process"

    @dataclass
    class Knobs:
        pass

    def processes(self, world_size: int) -> int:
        return 1

    def launch(self, spec_path: Path, spec) -> LaunchPlan:
        return LaunchPlan(python_module("harness.worker", str(spec_path)), processes=1)

    def setup(self, spec):
        device = "cuda:0" if spec.device == "cuda" else "cpu"
        self.info = RankInfo(rank=0, world_size=1, local_rank=0, device=device, backend=None,
                             data_rank=0, data_world=1)
        return self.info


ADAPTER = ReferenceAdapter
