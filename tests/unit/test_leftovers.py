"""What a launch's framework leaves on this machine (harness/launching/leftovers.py): recorded while the launch may
hold it, removed when it ends, and, when compare itself was killed, by the next run once every process of the launch
is gone. The end-to-end case (a DeepSpeed launch whose compare is killed with SIGKILL) is in
tests/distributed/test_hardening.py."""

import json
import os
import subprocess

import pytest

from adapters.base import Leftover
from harness.launching import leftovers
from harness.shared.witness import LAUNCH_ID_ENV


@pytest.fixture(autouse=True)
def _own_ledger(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPARE_RUNS_DIR", str(tmp_path / "runs"))


def _segments(tmp_path, port, ranks=(0, 1), size=4096):
    files = [tmp_path / f"seg_{port}_{r}" for r in ranks]
    for f in files:
        f.write_bytes(b"\0" * size)
    return files


def _dead_entry(launch_id, pattern, what="DeepSpeed shared-memory segment", pid=999999):
    """A ledger entry as a compare killed by SIGKILL leaves it: written, its flock dropped by the kernel."""
    root = leftovers.ledger()
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{pid}-dead.json"
    path.write_text(json.dumps({"compare_pid": pid, "launch_id": launch_id, "adapter": "deepspeed",
                                "leftovers": [{"pattern": pattern, "what": what}], "time": 0}))
    return path


def test_a_launch_that_ends_removes_its_own_files_and_no_other(tmp_path):
    ours, other = _segments(tmp_path, 4000), _segments(tmp_path, 4001, ranks=(0,))
    entry = leftovers.Entry("1:/x", "deepspeed", [Leftover(str(tmp_path / "seg_4000_*"), "segment")])
    assert len(list(leftovers.ledger().glob("*.json"))) == 1
    assert leftovers.sweep_dead() == []  # held by this live process: not a dead launch's
    assert all(f.exists() for f in ours)
    assert entry.release() == {"segment": [2, 8192]}
    assert not any(f.exists() for f in ours) and other[0].exists()
    assert not list(leftovers.ledger().glob("*.json"))


def test_the_files_of_a_dead_launch_are_swept_once_its_processes_are_gone_and_said_in_one_line(tmp_path):
    ours = _segments(tmp_path, 4000, size=2**20)
    entry = _dead_entry("777:/scratch/deepspeed-r0", str(tmp_path / "seg_4000_*"))
    # a rank of that launch still alive (a moment after its compare died): left for the next sweep
    rank = subprocess.Popen(["sleep", "60"], env={**os.environ, LAUNCH_ID_ENV: "777:/scratch/deepspeed-r0"})
    try:
        assert leftovers.sweep_dead() == [] and entry.exists() and all(f.exists() for f in ours)
    finally:
        rank.kill()
        rank.wait()
    swept = leftovers.sweep_dead()
    assert swept == [{"compare_pid": 999999, "adapter": "deepspeed",
                      "removed": {"DeepSpeed shared-memory segment": [2, 2 * 2**20]}}]
    assert not any(f.exists() for f in ours) and not entry.exists()
    assert leftovers.lines(swept) == ["removed 2 DeepSpeed shared-memory segments (2.0 MiB) left by 1 launch(es) "
                                      "of compare runs that were killed (pid 999999)"]
    assert leftovers.sweep_dead() == [] and leftovers.lines([]) == []


def test_only_this_users_entries_and_plain_files_of_one_named_directory_are_removed(tmp_path):
    victim = tmp_path / "keep" / "file"
    victim.parent.mkdir()
    victim.write_text("x")
    link = tmp_path / "seg_5000_0"
    link.symlink_to(victim)
    _dead_entry("1:/a", str(tmp_path / "*" / "file"), pid=1)  # a wildcard in the directory: not ours to glob
    _dead_entry("2:/b", str(tmp_path / "seg_5000_*"), pid=2)  # a link: never followed
    if os.geteuid() == 0:  # another user's entry in the shared ledger: never read
        os.chown(_dead_entry("3:/c", str(tmp_path / "keep" / "*"), pid=3), 65534, 65534)
    assert leftovers.sweep_dead() == []
    assert victim.exists() and link.is_symlink()


def test_compare_doctor_sweeps_them_too_and_says_so_on_stderr(tmp_path, monkeypatch):
    import math

    from typer.testing import CliRunner

    from harness.cli import app
    from harness.core import noise_floor

    seg = _segments(tmp_path, 4100, ranks=(0,))[0]
    _dead_entry("888:/scratch/deepspeed-r0", str(tmp_path / "seg_4100_*"), pid=888)
    machine = {"cores": 2, "sample_s": 0.0, "load_avg": [0.0, 0.0, 0.0], "steal_share": 0.0, "busy_share": 0.0,
               "cpu_ghz": None, "governors": None, "other_compare_runs": []}
    monkeypatch.setattr(noise_floor, "plan", lambda *a: (None, None))
    monkeypatch.setattr(noise_floor, "sample_machine", lambda: machine)
    monkeypatch.setattr(noise_floor, "measure", lambda *a: [
        {"status": "ok", "samples_per_s": math.exp(0.01 * k), "wall_time_s": 1.0, "repeat": k, "label": "ddp",
         "workload": "digits", "controls": {"steps": 10}, "noise": {"flags": []}} for k in range(3)])
    result = CliRunner().invoke(app, ["doctor", "--json"])
    assert result.exit_code == 0, result.output
    assert not seg.exists()
    assert result.stderr == ("note: removed 1 DeepSpeed shared-memory segment (4 KiB) left by 1 launch(es) of "
                             "compare runs that were killed (pid 888)\n")
    json.loads(result.stdout)  # --json's output stays JSON
