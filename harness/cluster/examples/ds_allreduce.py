"""DeepSpeed's own process-group set-up (deepspeed.init_distributed) and an all-reduce through deepspeed.comm.

    DS_ACCELERATOR=cpu deepspeed --hostfile hostfile --launcher pdsh ds_allreduce.py
"""
import os
import socket
import sys

import deepspeed
import deepspeed.comm as dist
import torch
import torch.distributed


def say(line):
    # One write per line: under PYTHONUNBUFFERED=1 print() writes the text and the newline separately,
    # and ranks that share a log file interleave ("...OKrank 0/2 ...").
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


deepspeed.init_distributed(dist_backend="gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
ok = t.item() == world * (world + 1) / 2
say(f"rank {rank}/{world} host {socket.gethostname()} accelerator {os.environ.get('DS_ACCELERATOR')} "
    f"backend {torch.distributed.get_backend()} all_reduce {t.item():g} {'OK' if ok else 'WRONG'}")
# Without this, a rank that exits while its peer is still tearing down can die in gloo's threads
# ("terminate called without an active exception", exit -6): seen once on h2 with --no_ssh.
dist.barrier()
torch.distributed.destroy_process_group()
