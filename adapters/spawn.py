"""DistributedDataParallel with ranks started by torch.multiprocessing.spawn instead of torchrun.

The launch command is this module: `python -m adapters.spawn SPEC` binds the rendezvous store itself (as
torchrun's agent does), then spawns one process per rank, each of which sets the env:// variables torchrun would
have set and runs the shared rank entry point.

Across hosts (as in PyTorch's multi-node mp.spawn example): `python -m adapters.spawn SPEC --node-rank R` on every
node (over ssh, or one per node under `srun`, where the node rank is the step's SLURM_PROCID), each spawning its
node's ranks as global ranks offset by the slots of the nodes before it; node 0's process holds the store on the
topology's master address and port, and every rank joins it as a client.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from adapters.base import LaunchPlan, python_module
from adapters.launchers import AGENT_STORE_ENV, on_node, srun
from adapters.ddp import DDPAdapter, DDPCost, DDPLaunch


class SpawnLaunch(DDPLaunch):
    """Spawn: the parent's role (adapters/base.py: Launch)."""

    def launch(self, spec_path: Path, spec) -> LaunchPlan:
        topo = spec.topology
        if topo is None:
            return LaunchPlan(python_module("adapters.spawn", str(spec_path)))
        if topo.launcher == "slurm":
            return LaunchPlan(srun(topo, per_node=1) + python_module("adapters.spawn", str(spec_path)))
        return LaunchPlan.per_node([on_node(node, python_module("adapters.spawn", str(spec_path), "--node-rank", str(r)))
                                    for r, node in enumerate(topo.nodes)])


class SpawnCost(DDPCost):
    """Spawn: the model's, the planner's and compare tune's role (adapters/base.py: Cost)."""

    @classmethod
    def plan_knobs(cls, dtype):
        return "ddp started another way, priced as ddp"


class SpawnAdapter(SpawnLaunch, SpawnCost, DDPAdapter):
    name = "spawn"
    summary = "DistributedDataParallel, ranks started by torch.multiprocessing.spawn"
    launcher = "torch.multiprocessing.spawn"
    blog_label = (2, "torch.multiprocessing")


def _rank_entry(local_rank: int, first_rank: int, local_world: int, world_size: int, addr: str, port: int,
                spec_path: str) -> None:
    """One spawned rank: the env:// variables torchrun would have set, then the rank entry every launcher starts,
    by its name as their commands give it (`python -m harness.rank SPEC`: adapters/base.py, rank_command), so that
    the adapters never import the rank code that imports them."""
    import runpy

    rank = first_rank + local_rank
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world_size),
                      LOCAL_WORLD_SIZE=str(local_world), MASTER_ADDR=addr, MASTER_PORT=str(port),
                      **AGENT_STORE_ENV)  # every rank is a client of the parent's store, as under torchrun's agent
    sys.argv = [sys.argv[0], spec_path]
    runpy.run_module("harness.rank", run_name="__main__", alter_sys=True)


def main(argv: list[str]) -> None:
    import torch.multiprocessing as mp
    from torch.distributed import TCPStore

    from adapters.launchers import agent_store
    from harness.shared.spec import RunSpec

    spec_path = argv[0]
    spec = RunSpec.load(spec_path)
    topo = spec.topology
    if topo is None:
        # The parent binds port 0 and holds the store for the whole run: no window in which another process can
        # take a "free" port between picking it and rank 0 binding it (a rank then joins the wrong job or aborts).
        store = agent_store(spec.world_size)
        first, nprocs, addr, port = 0, spec.world_size, "127.0.0.1", store.port
    else:
        node_rank = int(argv[argv.index("--node-rank") + 1]) if "--node-rank" in argv else int(os.environ["SLURM_PROCID"])
        first, nprocs, addr, port = topo.rank_offset(node_rank), topo.nodes[node_rank].slots, topo.master, topo.port
        # Node 0's process holds the store (it listens on every interface) until its ranks are done; the others'
        # ranks reach it at the master address.
        store = (TCPStore(addr, port, world_size=spec.world_size, is_master=True, wait_for_workers=False)
                 if node_rank == 0 else None)
    # join=True: if any rank dies, spawn terminates the others and raises, so the launch exits non-zero.
    mp.spawn(_rank_entry, args=(first, nprocs, spec.world_size, addr, port, spec_path), nprocs=nprocs, join=True)
    assert store is None or store.port == port  # held until here


ADAPTER = SpawnAdapter

if __name__ == "__main__":
    main(sys.argv[1:])
