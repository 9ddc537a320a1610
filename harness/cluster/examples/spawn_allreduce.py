"""torch.multiprocessing.spawn on each host, one process group across hosts via a tcp:// init method.

    python spawn_allreduce.py --nnodes 2 --node-rank R --nproc 1 --init tcp://h1:29500
"""
import argparse
import datetime
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def say(line):
    # One write per line: under PYTHONUNBUFFERED=1 print() writes the text and the newline separately,
    # and ranks that share a log file interleave ("...OKrank 0/2 ...").
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def worker(local_rank, args):
    rank = args.node_rank * args.nproc + local_rank
    world = args.nnodes * args.nproc
    dist.init_process_group("gloo", init_method=args.init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    hosts = [None] * world
    dist.all_gather_object(hosts, socket.gethostname())
    ok = t.item() == world * (world + 1) / 2
    say(f"rank {rank}/{world} host {socket.gethostname()} all_reduce {t.item():g} hosts {hosts} "
        f"{'OK' if ok else 'WRONG'}")
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--nnodes", type=int, required=True)
    p.add_argument("--node-rank", type=int, required=True)
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument("--init", required=True, help="e.g. tcp://h1:29500")
    args = p.parse_args()
    mp.spawn(worker, args=(args,), nprocs=args.nproc, join=True)
