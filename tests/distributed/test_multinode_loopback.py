"""Multi-node launches without a second host and without root: two node ranks on this machine
(`--hosts 127.0.0.1:1,localhost:1`), each started by its framework's own multi-node launcher (torchrun on every
node with one c10d rendezvous, mp.spawn per node, horovodrun -H, deepspeed --hostfile --no_ssh per node rank),
checked against the single-process reference, with the topology in every record.

Across real (simulated) hosts, SLURM and the failure cases: tests/distributed/test_simhosts.py.
"""

from __future__ import annotations

import socket

import pytest

import adapters
from conftest import run_compare

pytestmark = pytest.mark.distributed
ADAPTERS = ("ddp", "spawn", "horovod", "deepspeed")
SHORT = ("--steps", "5", "--warmup", "1", "--equiv-steps", "2")


@pytest.fixture(scope="module")
def loopback(tmp_path_factory):
    out = tmp_path_factory.mktemp("loopback") / "run"
    rows, proc = run_compare(out, "--hosts", "127.0.0.1:1,localhost:1", "-a", ",".join(("dp",) + ADAPTERS), *SHORT,
                             "--timeout", "300")
    return rows, proc, out


@pytest.mark.parametrize("name", ADAPTERS)
def test_every_fp32_row_matches_the_single_process_reference(loopback, name):
    avail = adapters.availability(name, "cpu", 2)
    if not avail:
        pytest.skip(f"{name} is not available here: {avail.reason}")
    rec = loopback[0][name]
    assert rec["status"] == "ok", (rec["reason"], rec.get("log_tail"))
    assert rec["controls"]["precision"] == "fp32" and rec["equivalence"]["passed"] is True
    assert rec["max_param_diff"] is not None and rec["max_param_diff"] <= 1e-5


@pytest.mark.parametrize("name", ADAPTERS)
def test_records_carry_the_topology(loopback, name):
    rec = loopback[0][name]
    if rec["status"] == "unavailable":
        pytest.skip(rec["reason"])
    topo = rec["topology"]
    assert topo["nodes"] == 2 and topo["processes_per_node"] == [1, 1] and topo["iface"] == "lo"
    assert [h["host"] for h in topo["hosts"]] == ["127.0.0.1", "localhost"] and all(h["local"] for h in topo["hosts"])
    assert [h["hostname"] for h in topo["rank_hosts"]] == [socket.gethostname()] * 2
    assert {h["iface"] for h in topo["rank_hosts"]} == {"lo"}
    assert topo["one_machine"] is True and topo["machine_note"] == "node ranks on one machine (loopback)"
    assert rec["controls"]["threads_per_rank"] == [max(1, rec["env"]["cpu_cores_usable"] // 2)] * 2


def test_each_node_rank_was_started_by_its_own_launcher_command(loopback):
    rows = loopback[0]
    for name in ("ddp", "spawn", "deepspeed"):
        if rows[name]["status"] != "ok":
            continue
        cmds = rows[name]["topology"]["node_commands"]
        assert [(c["host"], c["via"], c["returncode"]) for c in cmds] == [("127.0.0.1", "here", 0),
                                                                            ("localhost", "here", 0)]
    ddp = rows["ddp"]["topology"]["node_commands"]
    assert all("--rdzv-backend=c10d" in c["argv"] and "--nnodes=2" in c["argv"] for c in ddp)
    if rows["horovod"]["status"] == "ok":
        argv = rows["horovod"]["topology"]["launcher_argv"]
        assert argv[argv.index("-H") + 1] == "127.0.0.1:1,localhost:1"


def test_dp_is_a_row_that_says_it_cannot_span_hosts_and_the_report_shows_nodes(loopback):
    rows, proc, out = loopback
    assert rows["dp"]["status"] == "unavailable"
    assert "cannot run on other hosts or span several" in rows["dp"]["reason"]
    report = (out / "report.md").read_text()
    assert "| ddp | torchrun | 2 × 2 (2 nodes × 1) |" in report
    assert "**Hosts**: 2 nodes × 1 (127.0.0.1:1, localhost:1, from --hosts 127.0.0.1:1,localhost:1)" in report
    assert "world size 2 on 2 nodes × 1" in proc.stdout
