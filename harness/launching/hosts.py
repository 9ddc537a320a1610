"""Hosts as users give them, checked before anything is launched: `--hosts`, `--hostfile`, a SLURM allocation.

Runs in: the parent.

    compare run --hosts h1:2,h2:2                 two nodes, two processes (slots) each
    compare run --hostfile hosts.txt              `h1 slots=2` per line (DeepSpeed/MPI syntax), # comments
    compare run --hosts h1:1,h2:1,h3:1 --nnodes 2 the first two of them
    compare run --launcher slurm                  inside an allocation: its nodes (`scontrol show hostnames`) and
                                                  tasks per node (SLURM_NTASKS_PER_NODE / SLURM_TASKS_PER_NODE)

`localhost`, `127.0.0.1` and this machine's own hostname are this machine: their commands start here directly
(two of them make a multi-node launch on loopback, without ssh or root). Any other host is reached with the `ssh`
on PATH, as horovodrun and DeepSpeed's pdsh reach it; before anything runs, every remote host is asked for its
boot id and usable cores (`ssh -o BatchMode=yes -o ConnectTimeout=5 HOST ...`, bounded), so an unreachable or
unknown host is one line and exit 2, naming the host and ssh's own error. The repository, its venv and the
results directory must be at the same path on every host (as torchrun, horovodrun and deepspeed assume of the
script they start).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.ground.errors import BadInput
from harness.ground.provenance import usable_cores
from harness.shared import proc
from harness.shared.rank_result import RankResult
from harness.shared.spec import Node, Topology

LAUNCHERS = ("ssh", "slurm")
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
"""Names of this machine that no other host can reach it by."""
PROBE_TIMEOUT_S = 20.0
SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=5")
"""Never prompt for a password (a launch must not hang on one), and give up on a dead host within seconds."""
_HOST = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9._-]*[A-Za-z0-9_])?$")
_IFACE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")
BOOT_ID = proc.BOOT_ID
_IFACE_ALONE = ("--iface chooses the network between hosts (with --hosts, --hostfile or --launcher slurm); ranks on "
                "one host talk over loopback (lo)")


def boot_id() -> str | None:
    """This machine's boot id: two ranks that report the same one share one kernel (one machine)."""
    return proc.boot_id() or None


def this_machine() -> set[str]:
    """Every name by which a host in --hosts means this machine."""
    name = socket.gethostname()
    return {name, name.split(".")[0], *LOCAL_NAMES}


def is_local(host: str) -> bool:
    return host in this_machine()


def _node(host: str, slots: int) -> Node:
    return Node(host=host, slots=slots, local=is_local(host))


def _check_host(host: str, where: str) -> None:
    if host in LOCAL_NAMES:
        return
    if not _HOST.match(host):
        raise BadInput(f"{where}: '{host}' is not a host name")


def parse_hosts(text: str) -> list[Node]:
    """"h1:2,h2:2" (a host without ":N" has one slot, as in horovodrun -H)."""
    nodes: list[Node] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise BadInput(f"--hosts '{text}' has an empty entry; use HOST:SLOTS,HOST:SLOTS, e.g. h1:2,h2:2")
        host, sep, slots = item.rpartition(":") if item.count(":") == 1 else (item, "", "1")
        if sep and not host:
            raise BadInput(f"--hosts entry '{item}' has no host; use HOST:SLOTS, e.g. h1:2")
        if not slots.isdigit() or int(slots) < 1:
            raise BadInput(f"--hosts entry '{item}': the slots must be a whole number of at least 1 (HOST:SLOTS, "
                           f"e.g. h1:2)")
        _check_host(host, "--hosts")
        nodes.append(_node(host, int(slots)))
    _no_duplicates(nodes, "--hosts")
    return nodes


def parse_hostfile(path: Path) -> list[Node]:
    """DeepSpeed/MPI hostfile: `HOST slots=N` per line (`HOST` alone: one slot), `#` comments, blank lines."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"--hostfile {path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise BadInput(f"--hostfile {path}: not a text file (not UTF-8)") from None
    nodes: list[Node] = []
    for n, line in enumerate(text.splitlines(), 1):
        body = line.split("#", 1)[0].strip()
        if not body:
            continue
        host, *rest = body.split()
        slots = 1 if not rest else None
        if len(rest) == 1:
            key, sep, value = rest[0].partition("=")
            if key == "slots" and sep and value.isdigit() and int(value) >= 1:
                slots = int(value)
        if slots is None:
            raise BadInput(f"{path}:{n}: '{body}' is not `HOST slots=N` with N at least 1")
        _check_host(host, f"{path}:{n}")
        nodes.append(_node(host, slots))
    if not nodes:
        raise BadInput(f"--hostfile {path} names no host (lines are `HOST slots=N`)")
    _no_duplicates(nodes, f"--hostfile {path}")
    return nodes


def _no_duplicates(nodes: list[Node], where: str) -> None:
    seen: set[str] = set()
    for node in nodes:
        if node.host in seen:
            total = sum(n.slots for n in nodes if n.host == node.host)
            raise BadInput(f"{where} lists host {node.host} twice; give it once with all its slots ({node.host}:"
                           f"{total})")
        seen.add(node.host)


def parse_slurm_counts(text: str, nodes: int, what: str) -> list[int]:
    """SLURM's per-node counts, "2(x3),1" -> [2, 2, 2, 1] (a single number applies to every node)."""
    out: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            raise BadInput(f"cannot read {what}='{text}' from the SLURM allocation")
        out += [int(m.group(1))] * int(m.group(2) or 1)
    if len(out) == 1:
        out *= nodes
    if len(out) != nodes:
        raise BadInput(f"{what}='{text}' does not cover the allocation's {nodes} nodes")
    return out


def slurm_allocation(env: dict[str, str] | None = None) -> tuple[list[Node], list[int], str]:
    """(nodes with their tasks, allocated CPUs per node, "SLURM job ID") of the allocation we are inside."""
    env = os.environ if env is None else env
    job = env.get("SLURM_JOB_ID")
    if not job:
        raise BadInput("--launcher slurm runs inside a SLURM allocation and there is none here (no SLURM_JOB_ID): "
                       "run it under `salloc -N 2 --ntasks-per-node=1 ...`, or in an sbatch script (`compare "
                       "sbatch ... --nodes 2 --ntasks-per-node 1` writes one)")
    for tool in ("srun", "scontrol"):
        if not shutil.which(tool):
            raise BadInput(f"--launcher slurm: `{tool}` is not on PATH here (SLURM job {job}); install SLURM's "
                           f"client tools")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    try:
        proc = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                              timeout=30)
    except subprocess.TimeoutExpired:
        raise BadInput(f"`scontrol show hostnames {nodelist}` did not answer within 30 s") from None
    hosts = proc.stdout.split()
    if proc.returncode or not hosts:
        err = (proc.stderr.strip().splitlines() or ["no host names"])[-1]
        raise BadInput(f"cannot list the nodes of SLURM job {job} (`scontrol show hostnames {nodelist}`): {err}")
    if env.get("SLURM_NTASKS_PER_NODE"):
        tasks = parse_slurm_counts(env["SLURM_NTASKS_PER_NODE"], len(hosts), "SLURM_NTASKS_PER_NODE")
    else:
        tasks = parse_slurm_counts(env.get("SLURM_TASKS_PER_NODE", "1"), len(hosts), "SLURM_TASKS_PER_NODE")
    cpus = (parse_slurm_counts(env["SLURM_JOB_CPUS_PER_NODE"], len(hosts), "SLURM_JOB_CPUS_PER_NODE")
            if env.get("SLURM_JOB_CPUS_PER_NODE") else [])
    nodes = [Node(host=h, slots=t, local=False) for h, t in zip(hosts, tasks)]
    return nodes, cpus, f"SLURM job {job}"


def describe_slots(nodes: list[Node]) -> str:
    return ", ".join(f"{n.host}:{n.slots}" for n in nodes)


def default_world_size(device: str) -> int:
    """The world size when none is given on one machine: 2 ranks on CPU; every GPU on CUDA (a lent machine has one,
    and 2 would refuse every row there)."""
    if device != "cuda":
        return 2
    import torch

    return max(1, torch.cuda.device_count())


def resolve(req) -> Topology | None:
    """The topology a request asks for, checked without touching the network (BadInput otherwise); None for a
    plain single-host run. Sets `req.world_size` to the number of slots when the request left it open (None)."""
    if req.iface is not None and not _IFACE.match(req.iface):  # `compare sbatch` too, before writing a script
        raise BadInput(f"--iface '{req.iface}' is not a network interface name")
    if getattr(req, "topology", None) is not None:  # given whole (`compare sbatch` plans for a future allocation)
        if req.world_size is None:
            req.world_size = req.topology.world_size
        return req.topology
    hosts, hostfile, nnodes = req.hosts, req.hostfile, req.nnodes
    if req.launcher not in LAUNCHERS:
        raise BadInput(f"unknown launcher '{req.launcher}'; valid choices: {', '.join(LAUNCHERS)}")
    given = [name for name, value in (("--hosts", hosts), ("--hostfile", hostfile)) if value is not None]
    cores: list[int] = []
    if req.launcher == "slurm":
        if given:
            raise BadInput(f"--launcher slurm takes the hosts from the SLURM allocation; leave {given[0]} out "
                           f"(--nnodes N uses the first N nodes of the allocation)")
        nodes, cores, source = slurm_allocation()
        what = f"the allocation ({source})"
    elif len(given) == 2:
        raise BadInput("give --hosts or --hostfile, not both")
    elif hosts is not None:
        nodes, source = parse_hosts(hosts), f"--hosts {hosts}"
        what = "--hosts"
    elif hostfile is not None:
        nodes, source = parse_hostfile(Path(hostfile)), f"--hostfile {hostfile}"
        what = f"--hostfile {hostfile}"
    else:
        if nnodes is not None:
            raise BadInput("--nnodes picks the first nodes of --hosts, --hostfile or a SLURM allocation "
                           "(--launcher slurm); give one of them")
        if req.iface is not None:
            raise BadInput(_IFACE_ALONE)
        if req.world_size is None:
            req.world_size = default_world_size(getattr(req, "device", "cpu"))
        return None
    if nnodes is not None:
        if nnodes < 1:
            raise BadInput(f"--nnodes must be at least 1, got {nnodes}")
        if nnodes > len(nodes):
            raise BadInput(f"--nnodes {nnodes} but {what} gives only {len(nodes)} host(s) "
                           f"({', '.join(n.host for n in nodes)})")
        nodes, cores = nodes[:nnodes], cores[:nnodes]
    slots = sum(n.slots for n in nodes)
    if req.world_size is not None and req.world_size != slots:
        raise BadInput(f"{what} gives {slots} slots ({describe_slots(nodes)}) but --world-size is "
                       f"{req.world_size}; leave --world-size out, or make the slots add up to it")
    req.world_size = slots
    if req.launcher == "slurm" and len({n.slots for n in nodes}) > 1:
        raise BadInput(f"{what} has different numbers of tasks per node ({describe_slots(nodes)}); the "
                       f"launchers start the same number on every node under srun: allocate with "
                       f"--ntasks-per-node")
    remote = [n for n in nodes if not n.local]
    if remote:
        loopback = [n.host for n in nodes if n.host in LOCAL_NAMES]
        if loopback:
            raise BadInput(f"{loopback[0]} means this machine, which {remote[0].host} cannot reach by that name; "
                           f"name this machine by its hostname ({socket.gethostname()}) in {what}")
    if req.launcher == "ssh" and len(nodes) == 1 and nodes[0].local:
        if req.iface is not None:
            raise BadInput(_IFACE_ALONE)
        return None  # one node, this machine: the plain single-host launch
    all_local = req.launcher == "ssh" and not remote
    iface = req.iface if req.iface is not None else ("lo" if all_local else None)
    if all_local and iface not in {name for _, name in socket.if_nameindex()}:
        names = ", ".join(sorted(name for _, name in socket.if_nameindex()))
        raise BadInput(f"--iface {iface}: this machine has no such interface ({names})")
    return Topology(nodes=nodes, launcher=req.launcher, iface=iface,
                    master="127.0.0.1" if all_local else nodes[0].host, source=source,
                    one_machine=True if all_local else None, cores=cores)


def _probe_host(ssh: str, host: str) -> tuple[str | None, int | None]:
    argv = [ssh, *SSH_OPTIONS, host, f"cat {BOOT_ID} && nproc"]
    shown = " ".join([Path(ssh).name, *SSH_OPTIONS, host, "..."])
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise BadInput(f"host {host} did not answer within {PROBE_TIMEOUT_S:g} s (`{shown}`)") from None
    if proc.returncode:
        err = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        raise BadInput(f"host {host} is unreachable: {err[-1] if err else f'ssh exited with code {proc.returncode}'}"
                       f" (checked with `{shown}`)")
    lines = proc.stdout.split()
    boot = lines[0] if lines else None
    cores = int(lines[1]) if len(lines) > 1 and lines[1].isdigit() else None
    return boot, cores


def probe(topology: Topology) -> Topology:
    """Ask every remote host, before anything is launched, whether it answers (BadInput naming the host and ssh's
    own error otherwise), and for its boot id and usable cores: ranks on hosts that share this machine's kernel
    share its cores too, which the thread count and the oversubscription check must know."""
    if topology.launcher == "slurm":
        return topology  # the allocation says what each node has (SLURM_JOB_CPUS_PER_NODE)
    remote = [n.host for n in topology.nodes if not n.local]
    here = boot_id()
    facts: dict[str, tuple[str | None, int | None]] = {n.host: (here, usable_cores()) for n in topology.nodes
                                                      if n.local}
    if remote:
        ssh = shutil.which("ssh")
        if ssh is None:
            raise BadInput(f"ssh is not on PATH: the remote hosts ({', '.join(remote)}) are started over ssh, as "
                           f"horovodrun and DeepSpeed's pdsh start them")
        with ThreadPoolExecutor(max_workers=min(16, len(remote))) as pool:
            for host, answer in zip(remote, pool.map(lambda h: _probe_host(ssh, h), remote)):
                facts[host] = answer
    boots = [facts[n.host][0] for n in topology.nodes]
    cores = [facts[n.host][1] for n in topology.nodes]
    return replace(topology, one_machine=None if None in boots else len(set(boots)) == 1 and boots[0] == here,
                   cores=[] if None in cores else cores)


def processes_per_machine(topology: Topology) -> int:
    """The most ranks that share one machine's cores: all of them when every host is this machine."""
    if topology.one_machine:
        return topology.world_size
    return max(n.slots for n in topology.nodes)


def default_threads(topology: Topology) -> int:
    """Threads per rank: each machine's usable cores shared equally by the ranks on it (the fewest any rank
    gets, so every rank has the same)."""
    if topology.one_machine:
        return max(1, usable_cores() // topology.world_size)
    if topology.cores:
        return max(1, min(c // n.slots for c, n in zip(topology.cores, topology.nodes)))
    return max(1, usable_cores() // processes_per_machine(topology))


def threads_per_process(processes: int, override: int | None, topology: Topology | None = None) -> int:
    """Threads per training process: `override` if given, else the machine's usable cores shared equally by the
    processes of a launch (across hosts: by the processes on each machine)."""
    if override:
        return override
    if topology is not None:
        return default_threads(topology)
    return max(1, usable_cores() // processes)


def check_cores(topology: Topology, oversubscribe: bool) -> bool:
    """Whether some machine has more ranks than usable cores; refused (BadInput) unless --oversubscribe."""
    if topology.one_machine:
        busy = [(socket.gethostname(), topology.world_size, usable_cores())]
    elif topology.cores:
        busy = [(n.host, n.slots, c) for n, c in zip(topology.nodes, topology.cores)]
    else:
        return False  # not known (a future allocation): the run inside it checks again
    over = [(h, p, c) for h, p, c in busy if p > c]
    if over and not oversubscribe:
        host, p, c = over[0]
        where = "this machine (every host is this machine)" if topology.one_machine else host
        raise BadInput(f"{where} would run {p} processes on {c} usable cores; give it fewer slots, or "
                       f"--oversubscribe to run it anyway (every row is then labelled oversubscribed)")
    return bool(over)


def free_port() -> int:
    """A port that is free here now, for a multi-node rendezvous (node 0's launcher binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def describe(topology: Topology | None, ranks: list[RankResult], processes: int) -> dict[str, Any]:
    """What a record says about where a launch ran: nodes x processes per node, and every rank's host, interface
    and boot id; `one_machine` when every rank reported the same boot id (one kernel)."""
    out: dict[str, Any] = {}
    if topology is None:
        out.update(nodes=1, processes_per_node=[processes], host_launcher="local")
    else:
        out.update(nodes=len(topology.nodes), processes_per_node=[n.slots for n in topology.nodes],
                   hosts=[{"host": n.host, "slots": n.slots, "local": n.local} for n in topology.nodes],
                   host_launcher=topology.launcher, iface=topology.iface or "auto", hosts_from=topology.source,
                   rendezvous=f"{topology.master}:{topology.port}")
        if topology.cores:
            out["cores_per_node"] = topology.cores
    facts = [r.host for r in sorted(ranks, key=lambda r: r.rank) if r.host]
    if facts:
        out["rank_hosts"] = facts
        boots = {f.get("boot_id") for f in facts}
        names = {f.get("hostname") for f in facts}
        out["one_machine"] = len(boots) == 1 and None not in boots
        if topology is not None and out["one_machine"]:
            out["machine_note"] = ("simulated hosts on one machine (one kernel)" if len(names) > 1
                                   else "node ranks on one machine (loopback)")
    return out
