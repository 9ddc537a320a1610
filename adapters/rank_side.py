"""What the adapters' rank-side code shares: joining torch.distributed's process group from the env:// variables
every launcher sets, and mapping SLURM's where srun alone started the ranks.

Runs in: every rank."""

from __future__ import annotations

import os
from adapters.base import RankInfo


def ranks_from_slurm() -> None:
    """Under `srun` alone (no torchrun agent), a rank knows its place only from SLURM's variables: map them to
    the env:// ones (RANK, WORLD_SIZE, LOCAL_RANK) where the launcher did not set those."""
    if "RANK" not in os.environ and "SLURM_PROCID" in os.environ:
        os.environ.update(RANK=os.environ["SLURM_PROCID"], WORLD_SIZE=os.environ["SLURM_NTASKS"],
                          LOCAL_RANK=os.environ.get("SLURM_LOCALID", "0"))


def init_process_group_from_env(device: str) -> RankInfo:
    """torch.distributed init from the env:// variables that torchrun, our spawn entry and others set; gloo on
    CPU, NCCL on CUDA."""
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if device == "cuda" and world > 1 and "LOCAL_RANK" not in os.environ:
        # The global rank is the wrong GPU on every node but the first of a multi-node start.
        raise RuntimeError("LOCAL_RANK is not set: on CUDA each rank needs it to pick its GPU")
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    extra = {}
    if device == "cuda":
        torch.cuda.set_device(local_rank)
        dev, backend = f"cuda:{local_rank}", "nccl"
        # NCCL's communicator starts eagerly on this GPU, and barrier() no longer guesses the device (torch >= 2.3).
        import inspect

        if "device_id" in inspect.signature(dist.init_process_group).parameters:
            extra["device_id"] = torch.device(dev)
    else:
        dev, backend = "cpu", "gloo"
    dist.init_process_group(backend=backend, init_method="env://", rank=rank, world_size=world, **extra)
    return RankInfo(rank=rank, world_size=world, local_rank=local_rank, device=dev, backend=backend,
                    data_rank=rank, data_world=world)
