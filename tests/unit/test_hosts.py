"""Hosts as users give them, each framework's own multi-node command line, the remote command's environment,
the guard on a remote host, sbatch scripts and what records say about hosts: everything of the multi-node path
that needs no second host. The launches themselves run in tests/distributed/test_multinode_loopback.py (two node
ranks on this machine, no root) and tests/distributed/test_simhosts.py (two simulated hosts, SLURM).
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

import adapters
from adapters import deepspeed as ds
from adapters import horovod as hv
from harness.core.requests import RunRequest
from harness.ground.errors import BadInput
from harness.launching import hosts
from harness.launching.rank_env import remote_env, ssh_argv
from harness.shared.rank_result import TrainResult
from harness.shared.spec import Node, RunSpec, Topology

from conftest import REPO, wait_until

HERE = socket.gethostname()


def req(**kw) -> RunRequest:
    return RunRequest(**{"world_size": None, **kw})


# ---- parsing -------------------------------------------------------------------------------------------------

def test_hosts_give_nodes_slots_and_the_world_size():
    r = req(hosts="h1:2,h2:2")
    topo = hosts.resolve(r)
    assert [(n.host, n.slots, n.local) for n in topo.nodes] == [("h1", 2, False), ("h2", 2, False)]
    assert r.world_size == 4 and topo.master == "h1" and topo.iface is None and topo.remote
    assert topo.rank_offset(1) == 2 and topo.source == "--hosts h1:2,h2:2"


def test_a_host_without_slots_has_one_as_in_horovodrun():
    assert [(n.host, n.slots) for n in hosts.parse_hosts("a,b:3")] == [("a", 1), ("b", 3)]


def test_names_of_this_machine_are_local_and_two_of_them_are_a_loopback_multi_node_launch():
    r = req(hosts=f"127.0.0.1:1,localhost:1,{HERE}:1")
    topo = hosts.resolve(r)
    assert all(n.local for n in topo.nodes) and not topo.remote
    assert topo.master == "127.0.0.1" and topo.iface == "lo" and topo.one_machine is True and r.world_size == 3


def test_one_node_on_this_machine_is_the_plain_single_host_launch():
    r = req(hosts="localhost:2")
    assert hosts.resolve(r) is None and r.world_size == 2


def test_no_hosts_leaves_the_single_host_default():
    r = req()
    assert hosts.resolve(r) is None and r.world_size == 2


def test_nnodes_takes_the_first_hosts():
    r = req(hosts="h1:1,h2:1,h3:1", nnodes=2)
    assert [n.host for n in hosts.resolve(r).nodes] == ["h1", "h2"] and r.world_size == 2


def test_hostfile_syntax(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("# the cluster\nh1 slots=2   # first\n\nh2\n  h3 slots=1\n")
    assert [(n.host, n.slots) for n in hosts.parse_hostfile(f)] == [("h1", 2), ("h2", 1), ("h3", 1)]


@pytest.mark.parametrize("line", ["h1 slots=0", "h1 slots=two", "h1 gpus=2", "h1 slots=2 max_slots=4", "h1 slots"])
def test_a_malformed_hostfile_line_is_named_by_file_and_line(tmp_path, line):
    f = tmp_path / "hosts"
    f.write_text(f"h0 slots=1\n{line}\n")
    with pytest.raises(BadInput) as e:
        hosts.parse_hostfile(f)
    assert str(e.value) == f"{f}:2: '{line}' is not `HOST slots=N` with N at least 1"


@pytest.mark.parametrize("text, counts", [("2(x3),1", [2, 2, 2, 1]), ("4", [4, 4, 4, 4]), ("1,2,3,4", [1, 2, 3, 4])])
def test_slurm_per_node_counts(text, counts):
    assert hosts.parse_slurm_counts(text, 4, "SLURM_TASKS_PER_NODE") == counts


def test_hosts_come_from_the_slurm_allocation(tmp_path, monkeypatch):
    # A stand-in for scontrol: what `scontrol show hostnames h[1-2]` prints.
    (tmp_path / "scontrol").write_text("#!/bin/sh\n[ \"$3\" = 'n[1-2]' ] && printf 'n1\\nn2\\n'\n")
    (tmp_path / "srun").write_text("#!/bin/sh\n")
    for tool in ("scontrol", "srun"):
        (tmp_path / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    for k, v in {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "2(x2)",
                 "SLURM_JOB_CPUS_PER_NODE": "8(x2)"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("SLURM_NTASKS_PER_NODE", raising=False)
    r = req(launcher="slurm")
    topo = hosts.resolve(r)
    assert [(n.host, n.slots) for n in topo.nodes] == [("n1", 2), ("n2", 2)] and r.world_size == 4
    assert topo.launcher == "slurm" and topo.master == "n1" and topo.cores == [8, 8] and topo.source == "SLURM job 7"
    assert hosts.default_threads(hosts.probe(topo)) == 4


def test_threads_share_each_machine_and_hosts_on_this_machine_share_its_cores():
    two = Topology(nodes=[Node("a", 2), Node("b", 2)], cores=[8, 4])
    assert hosts.default_threads(two) == 2  # the fewest any rank gets: b's 4 cores over its 2 ranks
    same = replace(two, one_machine=True)
    assert hosts.default_threads(same) == max(1, hosts.usable_cores() // 4)
    with pytest.raises(BadInput, match=r"^b would run 5 processes on 4 usable cores"):
        hosts.check_cores(Topology(nodes=[Node("a", 2), Node("b", 5)], cores=[8, 4]), oversubscribe=False)
    assert hosts.check_cores(Topology(nodes=[Node("a", 2), Node("b", 5)], cores=[8, 4]), oversubscribe=True)


# ---- each framework's own multi-node command line --------------------------------------------------------------

SSH = Topology(nodes=[Node("h1", 1, local=True), Node("h2", 2)], iface="mn0", master="h1", port=29555)
SLURM = Topology(nodes=[Node("n1", 2), Node("n2", 2)], launcher="slurm", master="n1", port=29556, cores=[8, 8])
LOOP = Topology(nodes=[Node("127.0.0.1", 1, local=True), Node("localhost", 1, local=True)], iface="lo",
                port=29557, one_machine=True)


def spec(tmp_path, topo, world=None):
    return RunSpec(adapter="x", workload="digits", world_size=world or topo.world_size, device="cpu", global_batch=64,
                   steps=1, warmup=0, threads=1, rank_dir=str(tmp_path), topology=topo)


@pytest.mark.parametrize("name", ["ddp", "amp"])
def test_torchrun_runs_on_every_node_with_one_c10d_rendezvous(tmp_path, name):
    plan = adapters.get(name)({}, "cpu").launch(tmp_path / "spec.json", spec(tmp_path, SSH))
    assert [(c.host, c.remote) for c in plan.commands] == [("h1", False), ("h2", True)]
    for c, nproc in zip(plan.commands, (1, 2)):
        assert c.argv == [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--max-restarts=0",
                          "--rdzv-backend=c10d", "--rdzv-endpoint=h1:29555", "--rdzv-id=compare-29555",
                          f"--nproc-per-node={nproc}", "--module", "harness.rank", str(tmp_path / "spec.json")]


def test_under_slurm_torchrun_is_one_srun_step_with_one_agent_per_node(tmp_path):
    plan = adapters.get("ddp")({}, "cpu").launch(tmp_path / "spec.json", spec(tmp_path, SLURM))
    assert not plan.nodes
    assert plan.argv[:7] == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--nodelist=n1,n2",
                             "--kill-on-bad-exit=1", "--cpus-per-task=8"]
    assert "--nproc-per-node=2" in plan.argv and "--rdzv-endpoint=n1:29556" in plan.argv


def test_spawn_runs_per_node_with_its_node_rank(tmp_path):
    plan = adapters.get("spawn")({}, "cpu").launch(tmp_path / "spec.json", spec(tmp_path, SSH))
    assert [c.argv[-3:] for c in plan.commands] == [[str(tmp_path / "spec.json"), "--node-rank", str(r)]
                                                     for r in (0, 1)]
    slurm = adapters.get("spawn")({}, "cpu").launch(tmp_path / "spec.json", spec(tmp_path, SLURM))
    assert slurm.argv[0] == "srun" and slurm.argv[-3:] == ["-m", "adapters.spawn", str(tmp_path / "spec.json")]


def test_horovodrun_gets_every_host_and_the_interface(tmp_path, monkeypatch):
    monkeypatch.setattr(hv, "horovodrun_path", lambda: "/venv/bin/horovodrun")
    argv = hv.HorovodAdapter({}).launch(Path("/s.json"), spec(tmp_path, SSH)).argv
    assert argv == ["/venv/bin/horovodrun", "-np", "3", "-H", "h1:1,h2:2", "--gloo", "--disable-cache",
                    "--network-interfaces", "mn0",
                    sys.executable, "-m", "harness.rank", "/s.json"]
    auto = hv.HorovodAdapter({}).launch(Path("/s.json"), spec(tmp_path, replace(SSH, iface=None))).argv
    assert "--network-interfaces" not in auto  # no --iface across hosts: horovodrun finds a common one itself


def test_deepspeed_uses_its_hostfile_and_pdsh_with_the_venv_across_hosts(tmp_path, monkeypatch):
    monkeypatch.setattr(ds, "launcher_path", lambda: "/venv/bin/deepspeed")
    plan = ds.DeepSpeedAdapter({}, "cpu").launch(tmp_path / "spec.json", spec(tmp_path, SSH))
    assert (tmp_path / "hostfile").read_text() == "h1 slots=1\nh2 slots=2\n"
    assert plan.argv == ["/venv/bin/deepspeed", "--hostfile", str(tmp_path / "hostfile"), "--master_addr", "h1",
                         "--master_port", "29555", "--launcher", "pdsh", "--venv_script",
                         str(Path(sys.executable).parent / "activate"), "--module", "harness.rank",
                         str(tmp_path / "spec.json")]
    assert plan.env["DS_ENV_FILE"] == str(tmp_path / "deepspeed_env") == str(plan.env_file)
    assert plan.env["DS_ACCELERATOR"] == "cpu" and not plan.hold


def test_deepspeed_on_one_machine_uses_no_ssh_per_node_rank_with_a_store_the_parent_holds(tmp_path, monkeypatch):
    monkeypatch.setattr(ds, "launcher_path", lambda: "/venv/bin/deepspeed")
    plan = ds.DeepSpeedAdapter({}, "cpu").launch(tmp_path / "spec.json", spec(tmp_path, LOOP))
    [store] = plan.hold
    for r, c in enumerate(plan.commands):
        assert not c.remote and c.argv[3:9] == ["--no_ssh", "--node_rank", str(r), "--master_addr", "127.0.0.1",
                                               "--master_port"]
        assert c.argv[9] == str(store.port)
    assert plan.env["TORCHELASTIC_USE_AGENT_STORE"] == "True"


def test_deepspeed_under_slurm_runs_its_slurm_launcher_with_the_rank_script(tmp_path, monkeypatch):
    monkeypatch.setattr(ds, "launcher_path", lambda: "/venv/bin/deepspeed")
    plan = ds.DeepSpeedAdapter({}, "cpu").launch(tmp_path / "spec.json", spec(tmp_path, SLURM))
    assert plan.argv[-8:] == ["--launcher", "slurm", "--launcher_args", "--kill-on-bad-exit=1 --cpus-per-task=4",
                              "--num_nodes", "2", str(ds.RANK_SCRIPT), str(tmp_path / "spec.json")]
    assert plan.env["MASTER_ADDR"] == "n1" and plan.env["MASTER_PORT"] == "29556"
    assert ds.RANK_SCRIPT.is_file()


def test_the_rank_script_runs_the_rank_entry_point_as_a_file():
    # As a script its own directory would come first on sys.path (harness/rank/compute_profile.py shadowing the standard
    # library's `profile`); it puts the repository there and reaches the rank's entry point: here, reading a spec.
    out = subprocess.run([sys.executable, str(ds.RANK_SCRIPT), "--local_rank=0", "/nonexistent/spec.json"],
                         capture_output=True, text=True, cwd="/", timeout=120)
    assert out.returncode != 0 and "No such file or directory: '/nonexistent/spec.json'" in out.stderr


def test_ranks_under_srun_alone_take_their_place_from_slurm(monkeypatch):
    from adapters.rank_side import ranks_from_slurm

    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    monkeypatch.setenv("SLURM_LOCALID", "1")
    ranks_from_slurm()
    assert (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["LOCAL_RANK"]) == ("3", "4", "1")


def test_dp_cannot_span_hosts_and_says_so():
    a = adapters.multinode("dp", SSH)
    assert not a and "cannot run on other hosts" in a.reason and "ddp" in a.fix
    assert adapters.multinode("ddp", SSH)


def test_deepspeed_across_hosts_needs_pdsh(monkeypatch):
    monkeypatch.setattr(ds.shutil, "which", lambda name: None)
    a = adapters.multinode("deepspeed", SSH)
    assert not a and a.reason.startswith("pdsh is not on PATH")
    assert adapters.multinode("deepspeed", LOOP) and adapters.multinode("deepspeed", SLURM)


# ---- the command a remote host runs -----------------------------------------------------------------------------

def test_a_remote_command_gets_only_the_harness_variables_and_the_venv_first(tmp_path, monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "x")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "/jit")
    s = spec(tmp_path, SSH)
    env = remote_env(s, {"DS_ACCELERATOR": "cpu"}, "L1")
    assert "SECRET_TOKEN" not in env and env["TORCH_EXTENSIONS_DIR"] == "/jit" and env["DS_ACCELERATOR"] == "cpu"
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == "mn0" and env["MASTER_ADDR"] == "h1"
    assert env["OMP_NUM_THREADS"] == "1" and env["COMPARE_LAUNCH_ID"] == "L1"
    argv = ssh_argv("h2", ["python", "-m", "x", "a b"], env, "L1")
    assert argv[1:5] == ["-o", "BatchMode=yes", "-o", "ConnectTimeout=5"] and argv[5] == "h2"
    # What the remote login shell runs, parsed as it would: cd, then env with our variables, then the guard.
    words = shlex.split(argv[6])
    assert words[:4] == ["cd", str(REPO), "&&", "exec"] and words[4] == "env"
    assert f"PATH={Path(sys.executable).parent}:$PATH" in words
    assert words[-9:] == [sys.executable, "-m", "harness.launching.nodeguard", "L1", "--", "python", "-m", "x", "a b"]


def test_without_an_interface_the_frameworks_choose():
    s = RunSpec(adapter="x", workload="w", world_size=2, device="cpu", global_batch=2, steps=1, warmup=0, threads=1,
                rank_dir="/tmp", topology=replace(SSH, iface=None))
    env = remote_env(s, {}, "L")
    assert "GLOO_SOCKET_IFNAME" not in env and "NCCL_SOCKET_IFNAME" not in env


def test_the_spec_round_trips_its_topology(tmp_path):
    s = spec(tmp_path, SSH)
    s.save(tmp_path / "s.json")
    assert RunSpec.load(tmp_path / "s.json").topology == SSH


# ---- the guard of a remote command -----------------------------------------------------------------------------

def _guard(*cmd, env=None):
    return subprocess.Popen([sys.executable, "-m", "harness.launching.nodeguard", "LID", "--", *cmd], cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, **(env or {})})


def test_the_guard_mirrors_the_commands_exit_code():
    g = _guard("sh", "-c", "exit 3")
    assert g.wait(timeout=30) == 3
    g = _guard("sh", "-c", "kill -KILL $$")
    assert g.wait(timeout=30) == 137


def test_the_end_of_its_stdin_stops_the_command_and_everything_of_the_launch_it_left():
    # The command starts a process in a session of its own (as horovodrun does with its ranks), carrying the
    # launch id: closing the guard's stdin (the launch ended, compare died, or ssh dropped) must end both.
    g = _guard("sh", "-c", "setsid sleep 300 & echo $!; exec sleep 300", env={"COMPARE_LAUNCH_ID": "LID"})
    escaped = int(g.stdout.readline())
    me = psutil.Process(g.pid)
    wait_until(lambda: len(me.children(recursive=True)) >= 2, "the command and the process it started", timeout=30,
               interval=0.05)
    tree = me.children(recursive=True)
    assert psutil.pid_exists(escaped)
    g.stdin.close()
    assert g.wait(timeout=30) == 128 + signal.SIGTERM
    gone, alive = psutil.wait_procs(tree, timeout=10)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    assert b"stopping" in g.stderr.read()


# ---- sbatch ------------------------------------------------------------------------------------------------------

def test_sbatch_writes_a_script_that_runs_the_same_comparison_under_slurm(tmp_path):
    from typer.testing import CliRunner

    from harness.cli import app

    script = tmp_path / "job.sbatch"
    result = CliRunner().invoke(app, ["sbatch", "-a", "ddp,deepspeed:zero_stage=1", "--nodes", "2",
                                      "--ntasks-per-node", "4", "--time", "01:00:00", "--partition", "cpu",
                                      "--steps", "20", "-k", "ddp.bucket_cap_mb=10", "--iface", "ib0",
                                      "--bind-cores", "--script", str(script)])
    assert result.exit_code == 0, result.output
    text = script.read_text()
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash" and os.access(script, os.X_OK)
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "#SBATCH --time=01:00:00",
                 "#SBATCH --partition=cpu", "#SBATCH --exclusive", f"cd {REPO}"):
        assert line in lines
    assert lines[-1] == ("exec .venv/bin/compare run --adapters ddp,deepspeed:zero_stage=1 --knob ddp.bucket_cap_mb=10 "
                         "--steps 20 --bind-cores --iface ib0 --launcher slurm")
    # bash accepts it
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    again = CliRunner().invoke(app, ["sbatch", "-a", "ddp", "--nodes", "2", "--ntasks-per-node", "1", "--script",
                                     str(script)])
    assert again.exit_code == 2 and again.stderr == (f"error: --script {script} already exists; use --force to "
                                                     f"replace it or choose another name\n")


# ---- what records say ---------------------------------------------------------------------------------------------

def _rank(hostname, boot, rank):
    return TrainResult(rank=rank, world_size=2, host={"hostname": hostname, "iface": "mn0", "boot_id": boot})


def test_records_say_when_every_rank_shared_one_kernel():
    two = [_rank("h1", "b", 0), _rank("h2", "b", 1)]
    d = hosts.describe(SSH, two, 3)
    assert d["nodes"] == 2 and d["processes_per_node"] == [1, 2] and d["iface"] == "mn0"
    assert [h["hostname"] for h in d["rank_hosts"]] == ["h1", "h2"]
    assert d["one_machine"] and d["machine_note"] == "simulated hosts on one machine (one kernel)"
    real = hosts.describe(SSH, [_rank("h1", "a", 0), _rank("h2", "b", 1)], 3)
    assert real["one_machine"] is False and "machine_note" not in real
    loop = hosts.describe(LOOP, [_rank(HERE, "a", 0), _rank(HERE, "a", 1)], 2)
    assert loop["machine_note"] == "node ranks on one machine (loopback)"
    single = hosts.describe(None, [], 2)
    assert single == {"nodes": 1, "processes_per_node": [2], "host_launcher": "local"}
