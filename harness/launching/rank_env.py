"""What each launch command runs with: the harness's environment for the ranks and, for a command on another host,
the ssh command line that carries it there.

Runs in: the parent (harness/launching/launch.py starts the commands)."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from harness.ground.provenance import OUTER_JOB, REPO
from harness.launching import hosts
from harness.shared.proc import pid_namespace
from harness.shared.spec import PARENT_BOOT_ENV, PARENT_PGID_ENV, PARENT_PID_ENV, PARENT_PIDNS_ENV, RunSpec
from harness.shared.witness import LAUNCH_ID_ENV

PASSED_TO_REMOTE = ("TORCH_EXTENSIONS_DIR", "COMPARE_FAULT")
"""Variables of compare's own environment that remote ranks get too (beyond the harness's): the JIT cache a
DeepSpeed rank would otherwise rebuild, and the tests' fault injection."""


def harness_env(spec: RunSpec, extra: dict[str, str], launch_id: str) -> dict[str, str]:
    """The variables the harness sets for every rank of a launch (and `extra`, the plan's)."""
    threads, topo = str(spec.threads), spec.topology
    env = {
        # Set for every launcher; torchrun would otherwise force OMP_NUM_THREADS=1 and mp.spawn leave it unset.
        "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
        "MASTER_ADDR": "127.0.0.1" if topo is None else topo.master, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO),
        PARENT_PID_ENV: str(os.getpid()), PARENT_PGID_ENV: str(os.getpgrp()), LAUNCH_ID_ENV: launch_id,
        # A rank elsewhere (another host, or another PID namespace on this one) must not watch our pid.
        PARENT_PIDNS_ENV: pid_namespace(), PARENT_BOOT_ENV: hosts.boot_id() or "",
        # The launch's temporary files (torchrun's torchelastic_* directory of error files, any framework's) go
        # into its own directory, removed with the run's scratch, on every host (the ranks share that directory
        # already: they write their results there): a launch leaves nothing in /tmp.
        "TMPDIR": str(Path(spec.rank_dir) / "tmp"),
    }
    if topo is None:
        # Loopback only: hostname-based interface selection is flaky on CI machines (as accelerate does).
        env["GLOO_SOCKET_IFNAME"] = os.environ.get("GLOO_SOCKET_IFNAME", "lo")
        env["NCCL_SOCKET_IFNAME"] = os.environ.get("NCCL_SOCKET_IFNAME", "lo")  # NCCL's bootstrap, one machine
    elif topo.iface is not None:  # chosen explicitly (--iface, or lo when every host is this machine)
        env["GLOO_SOCKET_IFNAME"] = env["NCCL_SOCKET_IFNAME"] = topo.iface
    env.update(extra)
    return env



def child_env(spec: RunSpec, extra: dict[str, str], launch_id: str) -> dict[str, str]:
    """The environment of a command started here: compare's own, plus the harness's variables."""
    env = {k: v for k, v in os.environ.items() if k not in OUTER_JOB}  # an outer job's ranks are not ours
    ours = harness_env(spec, extra, launch_id)
    if "PYTHONPATH" not in extra:
        ours["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    # The venv's tools first, here as on every other host (ssh_argv, DeepSpeed's --venv_script): torch JIT-builds
    # DeepSpeed's op with the `ninja` it finds on PATH, and the system's and the venv's disagree about the same
    # build log, so alternating between them rebuilds the op (35-65 s) inside a launch's time to first step.
    venv_bin = str(Path(spec.python or sys.executable).parent)
    path = env.get("PATH", "")
    if path.split(os.pathsep)[0] != venv_bin:
        ours["PATH"] = os.pathsep.join(p for p in (venv_bin, path) if p)
    env.update(ours)
    env.update(spec.env)  # the row's own variables (env.NAME=VALUE; none the harness sets: requests.HARNESS_ENV)
    return env



def remote_env(spec: RunSpec, extra: dict[str, str], launch_id: str) -> dict[str, str]:
    """The environment a rank on another host gets: the harness's variables and the few of compare's own that
    matter there (PASSED_TO_REMOTE), never the whole environment."""
    env = {k: os.environ[k] for k in PASSED_TO_REMOTE if k in os.environ}
    env.update(harness_env(spec, extra, launch_id))
    env.update(spec.env)
    return env



def ssh_argv(host: str, argv: list[str], env: dict[str, str], launch_id: str) -> list[str]:
    """`ssh HOST 'cd REPO && exec env K=V ... PATH=VENV/bin:$PATH python -m harness.launching.nodeguard ID -- ARGV'`:
    the repository and the venv are at the same path on every host (as torchrun, horovodrun and deepspeed assume)."""
    assigns = [f"{k}={shlex.quote(v)}" for k, v in env.items()]
    assigns.append(f'PATH={shlex.quote(str(Path(sys.executable).parent))}:"$PATH"')
    remote = (f"cd {shlex.quote(str(REPO))} && exec env {' '.join(assigns)} {shlex.quote(sys.executable)} -m "
              f"harness.launching.nodeguard {shlex.quote(launch_id)} -- {shlex.join(argv)}")
    return [shutil.which("ssh") or "ssh", *hosts.SSH_OPTIONS, host, remote]
