"""What CI (`.ci/run`) relies on to stay honest: a set-up that should work and did not fails the run instead of
turning tests into skips, and every skip is named in the log."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow  # each starts a pytest of its own


def _pytest(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, **env}, timeout=300)


def test_required_simulated_hosts_that_cannot_come_up_fail_the_run_with_the_reason(tmp_path):
    # A machine without iproute2: the few tools simhosts needs to say so, and nothing else.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "readlink", "id"):
        (bin_dir / tool).symlink_to(Path("/usr/bin") / tool if (Path("/usr/bin") / tool).exists()
                                    else Path("/bin") / tool)
    proc = _pytest("tests/unit/test_rank_supervisor.py",
                   env={"COMPARE_REQUIRE": "simhosts", "PATH": f"{bin_dir}:{Path(sys.executable).parent}"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    said = proc.stdout + proc.stderr
    if os.geteuid() == 0:
        reason = "simhosts: 'ip' not found (run harness/cluster/install-deps)"
    else:
        reason = "simhosts: needs root (network namespaces, veths, bind mounts)"
    assert (f"COMPARE_REQUIRE names what cannot run here:\nsimhosts: {reason} (`make cluster-deps SLURM=1` as root "
            f"installs what it needs)") in said
    assert " passed" not in said  # stopped before any test ran


def test_every_skipped_test_is_named_with_its_reason():
    proc = _pytest("tests/gpu", env={"COMPARE_TEST_GPU": "0"})
    if "skipped, by name" not in proc.stdout:
        pytest.skip("a CUDA GPU is here: nothing in tests/gpu skips")
    named = proc.stdout.split("skipped, by name")[1].splitlines()
    assert ("tests/gpu/test_gpu_paths.py::test_more_ranks_than_gpus_is_refused_up_front: Requires: CUDA GPU (set "
            "COMPARE_TEST_GPU=1 on a GPU machine to make this a failure)") in named
    assert sum(line.startswith("tests/gpu/") for line in named) == int(proc.stdout.split(" skipped")[0].split()[-1])
