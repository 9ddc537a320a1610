"""One gloo all_reduce across every rank, printing each rank's hostname: proof that a launcher placed ranks on
the simulated hosts and that they can talk. Ranks come from torchrun's env (RANK, WORLD_SIZE, MASTER_ADDR/PORT)
or, under a bare `srun`, from SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID (MASTER_ADDR/MASTER_PORT must be set).

    torchrun --nnodes 2 --node_rank 0 --nproc_per_node 1 --rdzv_backend c10d --rdzv_endpoint h1:29400 torch_allreduce.py
"""
import datetime
import os
import socket
import sys

import torch
import torch.distributed as dist


def say(line):
    # One write per line: under PYTHONUNBUFFERED=1 print() writes the text and the newline separately,
    # and ranks that share a log file interleave ("...OKrank 0/2 ...").
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


if "RANK" not in os.environ and "SLURM_PROCID" in os.environ:
    os.environ["RANK"] = os.environ["SLURM_PROCID"]
    os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
    os.environ["LOCAL_RANK"] = os.environ.get("SLURM_LOCALID", "0")

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
expected = world * (world + 1) / 2
hosts = [None] * world
dist.all_gather_object(hosts, socket.gethostname())
say(f"rank {rank}/{world} host {socket.gethostname()} all_reduce {t.item():g} (expected {expected:g}) "
    f"hosts {hosts} {'OK' if t.item() == expected else 'WRONG'}")
dist.destroy_process_group()
