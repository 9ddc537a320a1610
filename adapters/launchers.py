"""The command lines of the launchers the adapters start their ranks with, built once for all of them: the Python
a launch runs and the rank entry every launcher ends in are the contract's (adapters/base.py: interpreter,
rank_command); here: torchrun on one node or on every node of a topology, ssh or srun to reach other hosts, what srun says when it
was stopped, and the rendezvous store a launcher's parent holds as torchrun's agent does (mp.spawn's).

Runs in: the parent (an adapter's `launch`), and in mp.spawn's agent (adapters/spawn.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from adapters.base import HostCommand, LaunchPlan, python_module

if TYPE_CHECKING:
    from harness.shared.spec import Node, RunSpec, Topology


def torchrun(nproc: int, spec_path: Path) -> list[str]:
    """argv for torchrun (torch.distributed.run) on one node: a rendezvous on a port it binds itself, no
    restarts, `nproc` ranks of the harness's rank entry point. `--local-addr 127.0.0.1`: without it the workers
    get socket.getfqdn() as MASTER_ADDR, which on a machine without DNS (a lent GPU node) may not resolve, and the
    ranks never reach the agent's store (pytorch#150532); spawn, DeepSpeed and Horovod use 127.0.0.1 already."""
    return python_module(
        "torch.distributed.run", "--standalone", "--local-addr=127.0.0.1", f"--nproc-per-node={nproc}",
        "--max-restarts=0", "--module", "harness.rank", str(spec_path),
    )


def on_node(node: Node, argv: list[str]) -> HostCommand:
    """`argv` to run on `node`: directly when it is this machine, else over ssh."""
    return HostCommand(argv, host=node.host, remote=not node.local)


SRUN_STOPPED = "srun: forcing job termination"
"""What srun prints when it gets SIGTERM, SIGHUP or SIGQUIT. It then SIGKILLs every task of its step at once
(SLURM's src/srun/srun_job.c, _srun_signal_mgr), so its ranks die without a word: this line is the only fact that
says the launcher, not a rank, was asked to stop."""


def launcher_stopped(argv: list[str], log: str) -> str | None:
    """What a launch command says of a request to stop that it received itself (and acted on by killing its ranks),
    from its own log; None when it says nothing of the kind. Only srun needs it: the other launchers stop their ranks
    with a signal the ranks witness (harness/shared/witness.py), or die of the signal themselves."""
    if argv and Path(argv[0]).name == "srun" and SRUN_STOPPED in log:
        return f"was asked to stop (SIGTERM, SIGHUP or SIGQUIT: it says \"{SRUN_STOPPED}\") and killed its ranks"
    return None


def srun(topology: Topology, *, per_node: int) -> list[str]:
    """argv prefix of one SLURM job step over the topology's nodes with `per_node` tasks on each (inside the
    allocation): a failed task ends the whole step at once, as one dead node ends the launch under ssh."""
    n = len(topology.nodes)
    argv = ["srun", f"--nodes={n}", f"--ntasks={n * per_node}", f"--ntasks-per-node={per_node}",
            f"--nodelist={','.join(node.host for node in topology.nodes)}", "--kill-on-bad-exit=1"]
    if per_node == 1 and topology.cores:
        # One launcher task per node starts all of that node's ranks: it must get the node's CPUs, not the
        # single CPU a task gets by default where SLURM binds tasks to cores.
        argv.append(f"--cpus-per-task={min(topology.cores)}")
    return argv


def torchrun_nodes(spec: RunSpec, spec_path: Path) -> LaunchPlan:
    """torchrun on every node of `spec.topology`, one c10d rendezvous on node 0 (torchrun's own multi-node
    launch): over ssh, one command per node; under SLURM, one `srun` step with one torchrun per node. Ranks
    follow rendezvous order (torchrun ignores --node-rank with c10d, and says so), so it is not passed."""
    topo = spec.topology
    # The same id on every node and a fresh one per launch (several launches may share one SLURM job).
    common = [f"--nnodes={len(topo.nodes)}", "--max-restarts=0", "--rdzv-backend=c10d",
              f"--rdzv-endpoint={topo.master}:{topo.port}", f"--rdzv-id=compare-{topo.port}"]
    tail = ["--module", "harness.rank", str(spec_path)]
    if topo.launcher == "slurm":
        per = topo.nodes[0].slots
        return LaunchPlan(srun(topo, per_node=1)
                          + python_module("torch.distributed.run", *common, f"--nproc-per-node={per}", *tail))
    return LaunchPlan.per_node([
        on_node(node, python_module("torch.distributed.run", *common, f"--nproc-per-node={node.slots}", *tail))
        for node in topo.nodes])


def agent_store(world_size: int):
    """A rendezvous store bound by the parent on a port the kernel picks and held for the whole launch, as
    torchrun's agent does: no window in which another job can take a "free" port between picking and binding it.
    Ranks join it as clients (env TORCHELASTIC_USE_AGENT_STORE=True, MASTER_PORT=store.port)."""
    from torch.distributed import TCPStore

    return TCPStore("127.0.0.1", 0, world_size=world_size, is_master=True, wait_for_workers=False)


AGENT_STORE_ENV = {"TORCHELASTIC_USE_AGENT_STORE": "True"}
"""With this, torch's env:// rendezvous joins the store at MASTER_ADDR:MASTER_PORT as a client (torchrun's agent)."""
