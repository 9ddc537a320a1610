"""Where a run's ranks ran, for the reports: nodes x processes per node, the hosts, and whether they were one
machine (simulated hosts, or node ranks on loopback).

Runs in: the parent; reads nothing but the records (`topology`, harness/launching/hosts.py: describe). Records of a
single-host run have no hosts and get nothing here, so their reports render as before.
"""

from __future__ import annotations

from typing import Any


def spans_hosts(topo: dict[str, Any] | None) -> bool:
    return bool(topo and topo.get("hosts"))


def nodes_label(topo: dict[str, Any] | None) -> str:
    """"2 nodes × 1" (processes per node; "2+1" when they differ); empty for a single-host launch."""
    if not spans_hosts(topo):
        return ""
    per = topo["processes_per_node"]
    each = str(per[0]) if len(set(per)) == 1 else "+".join(map(str, per))
    return f"{topo['nodes']} node{'s' if topo['nodes'] != 1 else ''} × {each}"


def machine_note(topo: dict[str, Any]) -> str:
    note = topo.get("machine_note")
    if note == "simulated hosts on one machine (one kernel)":
        return (f"**{note[0].upper() + note[1:]}**: every rank reported the same boot id, so these hosts share this machine's CPU, memory "
                f"and kernel, and the link between them is a virtual bridge, not a network: the table measures "
                f"each framework's multi-node launch and protocol, not an inter-node network.")
    if note:
        return (f"**{note[0].upper() + note[1:]}**: every rank ran on this machine (the same boot id); node ranks talk over loopback.")
    return ""


def note(records: list[dict[str, Any]]) -> list[str]:
    """One note on where the ranks ran (from the first record that spans hosts), or nothing."""
    rec = next((r for r in records if spans_hosts(r.get("topology")) and r["topology"].get("rank_hosts")),
               next((r for r in records if spans_hosts(r.get("topology"))), None))
    if rec is None:
        return []
    topo = rec["topology"]
    via = {"ssh": "started over ssh where not this machine",
           "slurm": "started inside a SLURM allocation (by srun; horovodrun reaches its nodes over ssh)"}
    hosts = ", ".join(f"{h['host']}:{h['slots']}" for h in topo["hosts"])
    line = (f"**Hosts**: {nodes_label(topo)} ({hosts}, from {topo.get('hosts_from')}), "
            f"{via.get(topo.get('host_launcher'), topo.get('host_launcher'))}; network interface "
            f"{topo.get('iface', 'auto')}")
    ranks = topo.get("rank_hosts")
    if ranks:
        line += "; ranks: " + ", ".join(f"{k} on {h['hostname']}" for k, h in enumerate(ranks))
    remote = topo.get("host_launcher") == "slurm" or not all(h.get("local") for h in topo["hosts"])
    if remote and rec.get("kind", "run") == "run":
        line += ("; launches ran one after another (across hosts the next launch starts only once the previous "
                 "one has ended, so no `gate` wait)")
    out = [line + "."]
    extra = machine_note(topo)
    if extra:
        out.append(extra)
    return out


def index_label(records: list[dict[str, Any]]) -> str:
    """" (2 nodes × 1, simulated hosts on one machine)" for results/README.md; empty for a single-host run."""
    topo = next((r["topology"] for r in records if spans_hosts(r.get("topology"))), None)
    if topo is None:
        return ""
    note = topo.get("machine_note")
    return f" ({nodes_label(topo)}" + (f", {note}" if note else "") + ")"
