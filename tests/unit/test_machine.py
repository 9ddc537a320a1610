"""Other compare runs on this machine (harness/launching/machine.py): a run registers for its lifetime, others see it
while it lives, a dead run's file is removed, and the reports name the rows measured meanwhile."""

import json
import shutil
import signal
import subprocess
import sys
import threading

import pytest

from harness.ground.record import records_file

from harness.launching import machine

from conftest import REPO, RUNS

CHILD = """
import sys
from pathlib import Path
from harness.launching import machine
reg = machine.Registration(Path(sys.argv[1]), command="compare run -a ddp --out elsewhere")
print("registered", flush=True)
sys.stdin.read()
if sys.argv[2] == "release":
    reg.release()
"""


@pytest.fixture
def registry(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    monkeypatch.setenv(machine.REGISTRY_ENV, str(root))
    return root


def _other_run(tmp_path, how: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "elsewhere"), how], cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "registered\n"
    return proc


def test_a_live_run_is_seen_by_others_and_not_by_itself(registry, tmp_path):
    own = machine.Registration(tmp_path / "mine")
    other = _other_run(tmp_path, "release")
    try:
        [seen] = machine.others()
        assert seen["pid"] == other.pid and seen["command"] == "compare run -a ddp --out elsewhere"
        assert seen["out"] == str((tmp_path / "elsewhere").resolve()) and seen["started"] > 0
    finally:
        other.stdin.close()
        other.wait(timeout=30)
    assert machine.others() == []  # it released (and removed) its registration
    assert [p.name for p in registry.iterdir()] == [own.path.name]
    own.release()
    assert list(registry.iterdir()) == []


def test_a_run_inside_a_run_shares_its_processs_registration(registry, tmp_path):
    # compare scale runs its comm sweeps in its own process, each a session of its own: a second open and flock of
    # the process's file waited for the first for ever (the scale sweep hung at "calibrating the model").
    outer = machine.Registration(tmp_path / "scale", command="compare scale")
    done = []
    inner_thread = threading.Thread(target=lambda: done.append(machine.Registration(tmp_path / "scale/comm_n2")),
                                    daemon=True)
    inner_thread.start()
    inner_thread.join(timeout=30)
    assert not inner_thread.is_alive() and done, "a nested registration waited for its own process's flock"
    inner = done[0]
    assert inner.path == outer.path
    assert json.loads(outer.path.read_text())["command"] == "compare scale"  # the first's, not overwritten
    other = _other_run(tmp_path, "release")
    try:
        inner.release()  # the comm sweep ends: the scale sweep is still registered and seen
        assert outer.path.exists()
        probe = subprocess.run([sys.executable, "-c", "from harness.launching import machine; "
                                "print(sorted(r['command'] for r in machine.others()))"], cwd=REPO,
                               capture_output=True, text=True, timeout=60)
        assert probe.stdout.strip() == str(sorted(["compare scale", "compare run -a ddp --out elsewhere"]))
    finally:
        other.stdin.close()
        other.wait(timeout=30)
        outer.release()
    assert list(registry.iterdir()) == []
    again = machine.Registration(tmp_path / "next")  # and the process can register afresh
    assert again.path.exists()
    again.release()


def test_a_run_killed_by_sigkill_is_not_seen_and_its_file_goes(registry, tmp_path):
    other = _other_run(tmp_path, "keep")
    other.send_signal(signal.SIGKILL)
    other.wait(timeout=30)
    assert (registry / f"{other.pid}.json").exists()  # a killed process cannot remove it
    assert machine.others() == []  # but nobody holds its lock any more
    assert not (registry / f"{other.pid}.json").exists()


def test_an_unwritable_registry_never_stops_a_run(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(machine.REGISTRY_ENV, str(blocker / "runs"))  # under a regular file: cannot be created
    reg = machine.Registration(tmp_path)
    assert reg.fd is None
    reg.release()
    assert machine.others() == []


def test_the_reports_note_names_the_rows_and_the_other_runs():
    a = {"pid": 7, "command": "compare run -a ddp", "out": "/x", "started": 1.0}
    b = {"pid": 3, "command": None, "out": None, "started": 2.0}
    assert machine.merge([a], [b, a], []) == [b, a]
    records = [{"label": "ddp", "repeat": 0, "concurrent_compare_runs": [a]},
               {"label": "horovod", "repeat": 0},
               {"label": "ddp", "repeat": 1, "concurrent_compare_runs": [a, b]}]
    assert machine.note(records, lambda r: f"{r['label']}#{r['repeat']}") == [
        "**Measured while another compare run was running on this machine** (pid 3; pid 7: `compare run -a ddp`): "
        "ddp#0, ddp#1. Its processes shared these cores, so the times and throughput of these rows are not this "
        "machine's alone; measure them again on a quiet machine."]
    assert machine.note(records[1:2], str) == []
    json.dumps(records)  # what a record carries is plain JSON


@pytest.mark.slow  # renders a whole report of each kind
@pytest.mark.parametrize("committed, name", [
    ("digits_cpu2_20261124-083538", "ddp#0"),
    ("scale_digits_cpu2_20261124-041536", "ddp@2#0"),
    ("comm_cpu2_n2_20261123-121520", "torch"),
])
def test_every_report_kind_notes_the_rows_measured_beside_another_run(tmp_path, committed, name):
    from harness import reports as report
    from harness.ground.record import read_records

    src = RUNS / committed
    records = read_records(records_file(src))
    other = {"pid": 4242, "command": "compare run -a horovod", "out": "/tmp/x", "started": 1.0}
    names = {"comm": lambda r: r["backend"], "scale": lambda r: f"{r['label']}@{r['scale']['point']}#{r['repeat']}",
             "digits": lambda r: f"{r['label']}#{r['repeat']}"}[committed.split("_")[0]]
    hit = next(r for r in records if r.get("status") == "ok" and names(r) == name)
    hit["concurrent_compare_runs"] = [other]
    out = tmp_path / committed
    shutil.copytree(src, out)
    report.render(out, records)
    assert (f"- **Measured while another compare run was running on this machine** (pid 4242: `compare run -a "
            f"horovod`): {name}. Its processes shared these cores") in (out / "report.md").read_text()
