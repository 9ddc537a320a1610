"""`compare sbatch`: a ready sbatch script for a comparison across the nodes of a SLURM allocation.

Runs in: the parent (on a login node, say). The options are those of `compare run` (its request's: SbatchRequest
extends RunRequest), checked the same way (one line and exit 2 for anything wrong, nothing written), plus the
allocation's shape:

    compare sbatch -a ddp,spawn,horovod,deepspeed --nodes 2 --ntasks-per-node 4 --time 00:30:00 \
        --partition gpu --script compare.sbatch
    sbatch compare.sbatch                  # or, without --script: compare sbatch ... | sbatch

The job runs `compare run --launcher slurm ...` on the first node of its allocation, from this repository, which
(with its venv and the results directory) must be at the same path on every node.
"""

from __future__ import annotations

import re
import shlex
from datetime import datetime, timezone
from pathlib import Path

from harness.ground.provenance import REPO
from harness.core.requests import RunRequest, SbatchRequest
from harness.core.workload_checks import load_workload
from harness.ground.errors import BadInput
from harness.shared.spec import Node, Topology

_TIME = re.compile(r"^(\d+-)?\d+(:\d{2}){0,2}$")
"""SLURM's --time forms: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS."""
_NAME = re.compile(r"^[A-Za-z0-9_.,-]+$")


def check(req: SbatchRequest) -> RunRequest:
    """Refuse a bad allocation shape (BadInput); then the run the job plans, given the topology of the future
    allocation, for `compare run`'s own validation (harness/core/comparison.py: check) to refuse what the job
    would."""
    nodes, ntasks_per_node, time, partition, job_name = (req.nodes, req.ntasks_per_node, req.time_limit,
                                                         req.partition, req.job_name)
    if req.launcher != "slurm":
        raise BadInput(f"compare sbatch runs the comparison under SLURM (--launcher slurm); --launcher "
                       f"{req.launcher} cannot be used in its script")
    for option, value in (("--hosts", req.hosts), ("--hostfile", req.hostfile)):
        if value is not None:
            raise BadInput(f"compare sbatch takes the hosts from the job's allocation (--nodes, --ntasks-per-node); "
                           f"leave {option} out")
    if nodes is None or ntasks_per_node is None:
        raise BadInput("compare sbatch needs the allocation's shape: --nodes N --ntasks-per-node K (ranks per node)")
    if nodes < 1:
        raise BadInput(f"--nodes must be at least 1, got {nodes}")
    if ntasks_per_node < 1:
        raise BadInput(f"--ntasks-per-node must be at least 1, got {ntasks_per_node}")
    if time is not None and not _TIME.match(time):
        raise BadInput(f"--time '{time}' is not a SLURM time limit (MM, HH:MM:SS or D-HH:MM:SS, e.g. 00:30:00)")
    for option, value in (("--partition", partition), ("--job-name", job_name)):
        if value is not None and not _NAME.match(value):
            raise BadInput(f"{option} '{value}' is not a SLURM name (letters, digits, _ . , -)")
    world = nodes * ntasks_per_node
    if req.world_size is not None and req.world_size != world:
        raise BadInput(f"--nodes {nodes} x --ntasks-per-node {ntasks_per_node} gives {world} ranks but "
                       f"--world-size is {req.world_size}; leave --world-size out, or make them agree")
    run = req.run_request()
    run.world_size = world
    batch = load_workload(run).global_batch if run.global_batch is None else run.global_batch
    if 1 <= batch < world:  # before a node list is built for it: --nodes 10**20 must not take the memory
        raise BadInput(f"--nodes {nodes} x --ntasks-per-node {ntasks_per_node} gives {world} ranks, more than the "
                       f"global batch of {batch} samples (every rank needs at least one); choose fewer ranks or a "
                       f"larger --global-batch")
    # Placeholder names: the allocation's nodes are known only inside it, where the job plans the run again.
    run.topology = Topology(nodes=[Node(f"node{i + 1}", ntasks_per_node) for i in range(nodes)], launcher="slurm",
                            iface=req.iface, master="node1", source="compare sbatch")
    return run


def one_line(text: str) -> str:
    """`text` with its control characters written as escapes (a newline as \\n), so that it stays inside the one
    comment line it is put in: a newline in a typed argument would end the comment and run the rest as code."""
    return "".join(ch if ch.isprintable() or ch == " " else ch.encode("unicode_escape").decode("ascii")
                   for ch in text)


def render(run_args: list[str], typed: str, nodes: int, ntasks_per_node: int, time: str | None,
           partition: str | None, job_name: str, exclusive: bool) -> str:
    """The script: #SBATCH lines, then `cd REPO && exec .venv/bin/compare run RUN_ARGS` (RUN_ARGS: harness/core/
    argv.py's to_argv of the run, --launcher slurm among them)."""
    lines = [
        "#!/bin/bash",
        f"# Written by `{one_line(typed)}` on {datetime.now(timezone.utc).isoformat(timespec='seconds')}.",
        "# Submit with `sbatch THIS_FILE`. The job runs `compare run --launcher slurm` on the first node of its",
        "# allocation: every adapter's ranks start through srun (torchrun and mp.spawn per node, DeepSpeed's",
        "# --launcher slurm) or, for horovodrun, over ssh to the allocated nodes. The repository, its venv and the",
        "# results directory must be at the same path on every node.",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --nodes={nodes}",
        f"#SBATCH --ntasks-per-node={ntasks_per_node}",
    ]
    if time is not None:
        lines.append(f"#SBATCH --time={time}")
    if partition is not None:
        lines.append(f"#SBATCH --partition={partition}")
    if exclusive:
        lines += ["# Whole nodes: nothing else runs beside a measurement.", "#SBATCH --exclusive"]
    venv_compare = REPO / ".venv" / "bin" / "compare"
    lines += ["set -euo pipefail", f"cd {shlex.quote(str(REPO))}",
              "exec " + shlex.join([str(venv_compare.relative_to(REPO)), "run", *run_args])]
    return "\n".join(lines) + "\n"


def write(path: Path, text: str, force: bool) -> None:
    """The script at `path` (executable), refusing to replace an existing file without --force."""
    if path.exists() and not force:
        raise BadInput(f"--script {path} already exists; use --force to replace it or choose another name")
    if path.is_dir():
        raise BadInput(f"--script {path} is a directory")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise BadInput(f"--script {path}: {parent} " + ("is a file, not a directory" if parent.exists() else
                                                         "does not exist") + "; give a path in an existing directory")
    from harness.ground.outdir import write_text

    try:
        write_text(path, text)
        path.chmod(0o755)
    except OSError as exc:
        raise BadInput(f"--script {path} cannot be written: {exc.strerror or exc}") from None
