"""DistributedDataParallel with ranks started by torch.multiprocessing.spawn instead of torchrun.

The launch command is this module: `python -m adapters.spawn SPEC` binds the rendezvous store itself (as
torchrun's agent does), then spawns one process per rank, each of which sets the env:// variables torchrun would
have set and runs the shared rank entry point.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from adapters.base import AGENT_STORE_ENV, LaunchPlan, agent_store, python_module
from adapters.ddp import DDPAdapter


class SpawnAdapter(DDPAdapter):
    name = "spawn"
    summary = "DistributedDataParallel, ranks started by torch.multiprocessing.spawn"
    launcher = "torch.multiprocessing.spawn"

    def launch(self, spec_path: Path, spec) -> LaunchPlan:
        return LaunchPlan(python_module("adapters.spawn", str(spec_path)))


def _rank_entry(local_rank: int, world_size: int, port: int, spec_path: str) -> None:
    from harness.rank.main import run

    os.environ.update(RANK=str(local_rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world_size),
                      LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      **AGENT_STORE_ENV)  # every rank is a client of the parent's store, as under torchrun's agent
    run(spec_path)


def main(spec_path: str) -> None:
    import torch.multiprocessing as mp

    from harness.spec import RunSpec

    spec = RunSpec.load(spec_path)
    # The parent binds port 0 and holds the store for the whole run: no window in which another process can
    # take a "free" port between picking it and rank 0 binding it (a rank then joins the wrong job or aborts).
    store = agent_store(spec.world_size)
    # join=True: if any rank dies, spawn terminates the others and raises, so the launch exits non-zero.
    mp.spawn(_rank_entry, args=(spec.world_size, store.port, spec_path), nprocs=spec.world_size, join=True)


ADAPTER = SpawnAdapter

if __name__ == "__main__":
    main(sys.argv[1])
