"""Horovod (gloo) all-reduce across hosts, printing each rank's hostname.

    horovodrun -np 2 -H h1:1,h2:1 --gloo --network-interfaces mn0 python hvd_allreduce.py
"""
import socket
import sys

import horovod.torch as hvd
import torch


def say(line):
    # One write per line: under PYTHONUNBUFFERED=1 print() writes the text and the newline separately,
    # and ranks that share a log file interleave ("...OKrank 0/2 ...").
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


hvd.init()
t = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
hosts = hvd.allgather_object(socket.gethostname())
ok = t.item() == hvd.size() * (hvd.size() + 1) / 2
say(f"rank {hvd.rank()}/{hvd.size()} local {hvd.local_rank()}/{hvd.local_size()} cross "
    f"{hvd.cross_rank()}/{hvd.cross_size()} host {socket.gethostname()} allreduce {t.item():g} hosts {hosts} "
    f"{'OK' if ok else 'WRONG'}")
hvd.shutdown()
