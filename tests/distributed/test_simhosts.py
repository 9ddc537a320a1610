"""Across two hosts for real: the simulated cluster of harness/cluster/simhosts (network namespaces h1, h2 with
their own hostnames on a bridge, the ssh stand-in, SLURM when installed), with compare started on h1 as a user
logged in to the first node would start it. Skipped, with simhosts' own reason, where it cannot run (not root, no
iproute2/util-linux); the SLURM test is skipped without slurmctld/slurmd/munge (`make cluster-deps SLURM=1`).

- ddp, spawn, horovod and deepspeed across h1 and h2 match the single-process reference, and their records name
  both hosts; `compare comm` across them checks every cell; the same comparison runs under SLURM (salloc on h1);
- failures across hosts, each done for real: a rank on h2 killed, every process on h2 killed mid-run (a dead
  node), an unknown host, a host without the venv, and a `kill -9` of compare: a failed row naming the host
  within the timeout (or one line and exit 2 before anything runs), and no process of the run left on any host.

One cluster per module (a unique prefix, removed at the end even on failure). Waits are for conditions (a
progress file's step, processes gone), each with a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import adapters
from harness.shared import progress as progress_file
from harness.shared.spec import Node, Topology

from conftest import REPO, one_round, read_records, replacing, wait_until

pytestmark = pytest.mark.distributed
SIMHOSTS = REPO / "harness" / "cluster" / "simhosts"
ADAPTERS = ("ddp", "spawn", "horovod", "deepspeed")
SHORT = ("--steps", "5", "--warmup", "1", "--equiv-steps", "2", "--no-plots")
LONG = ("--steps", "100000", "--warmup", "1", "--equiv-steps", "0")
VENV = Path(sys.executable).parent.parent


def _run(argv, timeout=60, **kw):
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    check = _run([SIMHOSTS, "check"])
    if check.returncode:  # not root, no ip/unshare, no netns/veth/bridge support
        pytest.skip(check.stdout.strip() or check.stderr.strip())
    slurm = _run([SIMHOSTS, "check", "--slurm"])
    # A directory that h2's commands see empty: the venv reached through it exists on h1 only.
    hidden = tmp_path_factory.mktemp("only-on-h1")
    (hidden / "venv").symlink_to(VENV)
    prefix = f"t{os.getpid()}"[:10]
    up = _run([SIMHOSTS, "up", "--prefix", prefix, "--hide", f"h2:{hidden}",
               *(["--slurm"] if slurm.returncode == 0 else [])], timeout=120)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        info = json.loads(_run([SIMHOSTS, "env", "--prefix", prefix, "--json"], check=True).stdout)
        info["no_slurm_reason"] = None if info["slurm"] else slurm.stdout.strip()
        info["python_missing_on_h2"] = hidden / "venv" / "bin" / "python"
        # What runs on the hosts before any test (SLURM's daemons): everything else must be gone after each test.
        info["baseline"] = {ns: _pids(ns) for ns in info["namespaces"]}
        yield info
    finally:
        _run([SIMHOSTS, "down", "--prefix", prefix], timeout=120)


def _pids(ns: str) -> set[int]:
    out = _run(["ip", "netns", "pids", ns]).stdout
    return {int(p) for p in out.split()}


def _leftovers(info) -> dict[str, list[str]]:
    left = {}
    for ns in info["namespaces"]:
        extra = _pids(ns) - info["baseline"][ns]
        names = []
        for pid in extra:
            try:
                names.append(" ".join(psutil.Process(pid).cmdline())[:120])
            except psutil.Error:
                continue
        if names:
            left[ns] = names
    return left


def assert_nothing_left(info, within_s: float = 15.0):
    wait_until(lambda: not _leftovers(info), "the hosts to have nothing left", timeout=within_s, fail=False)
    assert not _leftovers(info), f"left running on the hosts: {_leftovers(info)}"


def on_h1(info, *argv, env=None):
    """argv for a command on h1, with the ssh stand-in first on PATH (as `eval "$(simhosts env)"` does)."""
    extra = [f"{k}={v}" for k, v in (env or {}).items()]
    return [str(info["simhosts"]), "exec", "--prefix", info["prefix"], "h1", "env",
            f"PATH={info['ssh_dir']}:{os.environ['PATH']}", *extra, *map(str, argv)]


def compare_on_h1(info, *args, env=None, python=sys.executable, timeout=600):
    proc = _run(on_h1(info, python, "-m", "harness", *one_round(args), env=env), timeout=timeout, cwd=REPO)
    return proc


def _can_run(name: str, launcher: str) -> bool:
    """Whether `name` can run across h1 and h2 here (installed, and what its multi-node launch needs: pdsh for
    DeepSpeed over ssh); a row of one that cannot is `unavailable` with the reason, which is all there is to check."""
    topo = Topology(nodes=[Node("h1", 1, local=True), Node("h2", 1)], launcher=launcher)
    return bool(adapters.availability(name, "cpu", 2) and adapters.multinode(name, topo))


def _check_rows(rows, host_launcher):
    for name in ADAPTERS:
        rec = rows[name]
        if rec["status"] == "unavailable":
            assert not _can_run(name, host_launcher), rec["reason"]
            continue
        assert rec["status"] == "ok", (name, rec["reason"], rec.get("log_tail"))
        assert rec["equivalence"]["passed"] is True and rec["max_param_diff"] <= 1e-5, name
        topo = rec["topology"]
        assert sorted(h["hostname"] for h in topo["rank_hosts"]) == ["h1", "h2"], name
        assert {h["iface"] for h in topo["rank_hosts"]} == {"mn0"} and topo["iface"] == "mn0"
        assert topo["host_launcher"] == host_launcher and topo["nodes"] == 2
        assert topo["machine_note"] == "simulated hosts on one machine (one kernel)"


# ---- the comparison across hosts, and comm, and SLURM --------------------------------------------------------------

@pytest.fixture(scope="module")
def across(cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("across") / "run"
    proc = compare_on_h1(cluster, "run", "--hosts", "h1:1,h2:1", "--iface", "mn0", "-a", ",".join(ADAPTERS),
                         *SHORT, "--timeout", "300", "--out", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return read_records(out), proc, out


def test_every_adapter_across_two_hosts_matches_the_reference_and_names_both_hosts(cluster, across):
    rows, proc, out = across
    _check_rows(rows, "ssh")
    for name in ("ddp", "spawn"):  # one launcher per node: here on h1, over ssh on h2
        cmds = rows[name]["topology"]["node_commands"]
        assert [(c["host"], c["via"], c["returncode"]) for c in cmds] == [("h1", "here", 0), ("h2", "ssh", 0)]
    report = (out / "report.md").read_text()
    assert "**Simulated hosts on one machine (one kernel)**" in report and "(2 nodes × 1)" in report
    assert not list(out.glob(".compare-*")), "the ranks' scratch directory is removed at the end"
    assert_nothing_left(cluster)


def test_comm_across_two_hosts_checks_every_cell(cluster, tmp_path):
    out = tmp_path / "comm"
    proc = compare_on_h1(cluster, "comm", "--hosts", "h1:1,h2:1", "--iface", "mn0", "--ops",
                         "all_reduce,broadcast,all_gather", "--sizes", "4K,64K", "--iters", "5", "--out", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    ran = {r["backend"] for r in records if r["op"]}
    available = {b for b in adapters.comm_backends() if _can_run(adapters.comm_backend_adapter(b), "ssh")}
    assert ran == available and "torch" in ran
    for r in records:
        if r["op"]:
            assert r["status"] == "ok" and r["wrong_ranks"] == 0, (r["backend"], r["op"], r["reason"])
            assert sorted(h["hostname"] for h in r["topology"]["rank_hosts"]) == ["h1", "h2"]
    assert "ranks on h1, h2" in proc.stdout
    assert_nothing_left(cluster)


def test_the_same_comparison_under_slurm(cluster, tmp_path):
    if not cluster["slurm"]:
        pytest.skip(cluster["no_slurm_reason"] or "the cluster has no SLURM")
    out = tmp_path / "slurm"
    argv = on_h1(cluster, "salloc", "-N2", "--ntasks-per-node=1", sys.executable, "-m", "harness", "run",
                 "--launcher", "slurm", "--iface", "mn0", "-a", ",".join(ADAPTERS), *SHORT, "--timeout", "300",
                 "--repeats", "1", "--out", out)
    proc = _run(argv, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = read_records(out)
    _check_rows(rows, "slurm")
    assert rows["ddp"]["topology"]["launcher_argv"][0] == "srun"
    assert rows["ddp"]["topology"]["hosts_from"].startswith("SLURM job ")
    assert_nothing_left(cluster)


# ---- failures across hosts --------------------------------------------------------------------------------------

def test_a_rank_killed_on_h2_is_named_with_its_host(cluster, tmp_path):
    out = tmp_path / "o"
    proc = compare_on_h1(cluster, "run", "--hosts", "h1:1,h2:1", "--iface", "mn0", "-a", "spawn",
                         *replacing(replacing(SHORT, "--steps", "30"), "--equiv-steps", "0"), "--timeout", "120",
                         "--out", out,
                         env={"COMPARE_FAULT": "spawn:1:kill:3"})
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the only row failed
    row = read_records(out)["spawn"]
    assert (row["status"], row["reason"]) == ("failed", "rank 1 on h2 killed by SIGKILL")
    assert_nothing_left(cluster)


def _wait_for_step(proc: subprocess.Popen, out: Path, step: int, deadline_s: float = 240):
    def reached():
        return any((pr := progress_file.read(f)) and pr["step"] >= step
                   for f in out.glob(".compare-*-scratch-*/*/progress.bin"))

    wait_until(reached, f"a rank at step {step}", timeout=deadline_s, proc=proc)


def test_a_whole_node_dying_fails_the_row_naming_it_within_the_timeout(cluster, tmp_path):
    out = tmp_path / "o"
    proc = subprocess.Popen(on_h1(cluster, sys.executable, "-m", "harness", "run", "--hosts", "h1:1,h2:1", "--iface",
                                  "mn0", "-a", "ddp", *LONG, "--timeout", "120", "--repeats", "1", "--out", out),
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_step(proc, out, 3)
        h2 = cluster["namespaces"][1]
        victims = _pids(h2) - cluster["baseline"][h2]
        t0 = time.monotonic()
        for pid in victims:  # everything of the run on h2, at once, as a crashed node would lose it
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        stdout, stderr = proc.communicate(timeout=150)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, stdout + stderr
    row = read_records(out)["ddp"]
    assert row["status"] == "failed" and " on h2 " in row["reason"], row["reason"]
    assert took < 60, f"the dead node was noticed only after {took:.0f} s"
    assert_nothing_left(cluster)


def test_an_unreachable_host_is_refused_before_anything_runs(cluster, tmp_path):
    out = tmp_path / "o"
    proc = compare_on_h1(cluster, "run", "--hosts", "h1:1,h3:1", "-a", "ddp", "--out", out, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr == ("error: host h3 is unreachable: ssh: Could not resolve hostname h3: Name or service not "
                           "known (checked with `ssh -o BatchMode=yes -o ConnectTimeout=5 h3 ...`)\n")
    assert not out.exists()


def test_a_host_without_the_venv_is_a_failed_row_naming_it(cluster, tmp_path):
    out = tmp_path / "o"
    python = cluster["python_missing_on_h2"]
    proc = compare_on_h1(cluster, "run", "--hosts", "h1:1,h2:1", "--iface", "mn0", "-a", "ddp,spawn",
                         *replacing(SHORT, "--equiv-steps", "0"), "--timeout", "120", "--out", out, python=python)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = read_records(out)
    for name in ("ddp", "spawn"):
        reason = rows[name]["reason"]
        assert rows[name]["status"] == "failed"
        assert reason.startswith("h2: launch exited with code 127 before any rank started there; first error: "), \
            reason
        assert f"{python}" in reason and "No such file or directory" in reason
    assert_nothing_left(cluster)


def test_kill_9_of_compare_leaves_nothing_on_any_host(cluster, tmp_path):
    out = tmp_path / "o"
    proc = subprocess.Popen(on_h1(cluster, sys.executable, "-m", "harness", "run", "--hosts", "h1:1,h2:1", "--iface",
                                  "mn0", "-a", "ddp", *LONG, "--timeout", "120", "--repeats", "1", "--out", out),
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_step(proc, out, 3)
        [compare] = [p for p in psutil.Process(proc.pid).children(recursive=True)
                     if p.cmdline()[1:4] == ["-m", "harness", "run"]]
        compare.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert_nothing_left(cluster)
