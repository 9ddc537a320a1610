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


def _row_that_ran(loopback, name: str) -> dict:
    """The row of `name`, which must have run (status ok) wherever the framework is installed; a skip only where it
    is not, with the reason."""
    avail = adapters.availability(name, "cpu", 2)
    if not avail:
        pytest.skip(f"{name} is not available here: {avail.reason}")
    rec = loopback[0][name]
    assert rec["status"] == "ok", (rec["reason"], rec.get("log_tail"))
    return rec


@pytest.mark.parametrize("name", ADAPTERS)
def test_every_fp32_row_matches_the_single_process_reference(loopback, name):
    rec = _row_that_ran(loopback, name)
    assert rec["controls"]["precision"] == "fp32" and rec["equivalence"]["passed"] is True
    assert rec["max_param_diff"] is not None and rec["max_param_diff"] <= 1e-5


@pytest.mark.parametrize("name", ADAPTERS)
def test_records_carry_the_topology(loopback, name):
    rec = _row_that_ran(loopback, name)
    topo = rec["topology"]
    assert topo["nodes"] == 2 and topo["processes_per_node"] == [1, 1] and topo["iface"] == "lo"
    assert [h["host"] for h in topo["hosts"]] == ["127.0.0.1", "localhost"] and all(h["local"] for h in topo["hosts"])
    assert [h["hostname"] for h in topo["rank_hosts"]] == [socket.gethostname()] * 2
    assert {h["iface"] for h in topo["rank_hosts"]} == {"lo"}
    assert topo["one_machine"] is True and topo["machine_note"] == "node ranks on one machine (loopback)"
    assert rec["controls"]["threads_per_rank"] == [max(1, rec["env"]["cpu_cores_usable"] // 2)] * 2


@pytest.mark.parametrize("name", ("ddp", "spawn", "deepspeed"))
def test_each_node_rank_was_started_by_its_own_launcher_command(loopback, name):
    cmds = _row_that_ran(loopback, name)["topology"]["node_commands"]
    assert [(c["host"], c["via"], c["returncode"]) for c in cmds] == [("127.0.0.1", "here", 0),
                                                                        ("localhost", "here", 0)]


def test_torchrun_on_each_node_rank_joins_one_c10d_rendezvous_of_two_nodes(loopback):
    argvs = [c["argv"] for c in _row_that_ran(loopback, "ddp")["topology"]["node_commands"]]
    assert len(argvs) == 2
    assert all("--rdzv-backend=c10d" in argv and "--nnodes=2" in argv for argv in argvs)


def test_horovodrun_is_given_both_node_ranks_as_hosts(loopback):
    argv = _row_that_ran(loopback, "horovod")["topology"]["launcher_argv"]
    assert argv[argv.index("-H") + 1] == "127.0.0.1:1,localhost:1"


def test_dp_is_a_row_that_says_it_cannot_span_hosts_and_the_report_shows_nodes(loopback):
    rows, proc, out = loopback
    assert rows["dp"]["status"] == "unavailable"
    assert "cannot run on other hosts or span several" in rows["dp"]["reason"]
    report = (out / "report.md").read_text()
    assert "| ddp | torchrun | 2 × 1 (2 nodes × 1) |" in report
    assert "**Hosts**: 2 nodes × 1 (127.0.0.1:1, localhost:1, from --hosts 127.0.0.1:1,localhost:1)" in report
    assert "world size 2 on 2 nodes × 1" in proc.stdout
