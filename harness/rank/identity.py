"""Which rank this process is, as its launcher said before it joined its group: what the files a rank writes for
the parent are named by (its stacks, its start and its failure), in the rank and in the processes it forks.

Runs in: every rank, and a rank's DataLoader workers."""

from __future__ import annotations

import os

RANK_ENV = ("RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
"""Where launchers put a process's rank before it has joined its group (torchrun, mp.spawn here and the deepspeed
launcher: RANK; horovodrun: HOROVOD_RANK; MPI; SLURM); none of them: a single process, rank 0."""


def launcher_rank() -> int:
    for name in RANK_ENV:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0
