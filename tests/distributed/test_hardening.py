"""Nothing is ever lost and nothing outlives `compare`: each fault performed for real, from outside the process.

- `kill -9` of compare itself: every process it launched (launcher, ranks, a hung rank included) dies within
  seconds;
- two runs on the same --out: the second is refused at start, naming the first one's pid;
- a full disk (a small tmpfs): one line, exit 1, every finished row kept (or the rank results kept and named);
- Ctrl-C during the very first launch still leaves records and a report;
- a rank killed by a signal is named, with its signal, in the row's reason.

Waits are for conditions (a progress file's step, a file's existence) with deadlines, never fixed sleeps.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

import adapters

from conftest import REPO, one_round, read_records, replacing, run_compare, wait_until
from launchwatch import cmdline, describe, launch_progress

pytestmark = pytest.mark.distributed
# --order-seed 263 runs the first round's rows in the order asked for (2, 3 or 4 rows): a fault or a signal aimed at
# one row then meets the launches these tests expect to have finished before it.
SHORT = ("--steps", "30", "--warmup", "2", "--equiv-steps", "0", "--order-seed", "263")


_STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _no_run_outlives_its_test():
    """Whatever a test started is gone when it ends, even when it failed half-way (a run left training would
    slow every later test down)."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            tree = psutil.Process(proc.pid).children(recursive=True)
            proc.kill()
            for p in tree:
                try:
                    p.kill()
                except psutil.Error:
                    pass
            proc.communicate()


def _start(*args, env=None) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "harness", *one_round(args)], cwd=REPO,
                            env={**os.environ, **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    _STARTED.append(proc)
    return proc


def _wait_for(condition, what: str, proc: subprocess.Popen, deadline_s: float = 240, fail: bool = True):
    """Poll `condition()` until it returns something truthy; fail with `what` at the deadline (or return None when
    not `fail`) or if the run ends."""
    return wait_until(condition, what, timeout=deadline_s, proc=proc, fail=fail)


KILLED_LAUNCHER = ("the launcher ({}) was killed by SIGKILL from outside while its ranks ran; the ranks it left were "
                   "then stopped")


def _brief(argv: list[str]) -> str:
    """A command line as reasons quote it: whole up to 120 characters, cut with "..." beyond."""
    text = " ".join(argv)
    return text if len(text) <= 120 else text[:117] + "..."


# A SIGTERM is witnessed (harness/shared/witness.py): the row names who sent it, here this test's own process.
FROM_HERE = f"from outside (pid {os.getpid()}: {_brief(psutil.Process().cmdline())})"


@pytest.mark.alone  # /dev/shm's semaphores are the machine's: another test's Horovod launch would add its own
@pytest.mark.parametrize("adapter, command, reason", [
    ("ddp", "torch.distributed.run", KILLED_LAUNCHER.format("torchrun")),
    ("horovod", "horovodrun", KILLED_LAUNCHER.format("horovodrun")),
    ("spawn", "adapters.spawn", KILLED_LAUNCHER.format("torch.multiprocessing.spawn")),
    ("deepspeed", "bin/deepspeed ", KILLED_LAUNCHER.format("deepspeed")),
    # The deepspeed runner outlives its per-node launcher and exits 0 when that is killed: the ranks' own start
    # records name the process that started them, which compare then found gone.
    ("deepspeed", "deepspeed.launcher.launch", "launch exited 0 but rank(s) [0, 1] wrote no result: the process that "
                                               "started them (pid {pid}: {argv}) ended while they ran, and compare "
                                               "then stopped them"),
])
def test_a_launcher_killed_from_outside_is_named_not_the_ranks_compare_then_stopped(tmp_path, adapter, command,
                                                                                     reason):
    # kill -9 of the launcher: the ranks it leaves are stopped by its helpers (Horovod's middleman) or by compare,
    # and their ends (a supervisor with no record, a SIGTERM, a peer's "Connection reset") once took the blame, by
    # a race (issue: "rank 0 killed by SIGTERM" in a CI run). horovodrun's multiprocessing semaphores (10 in
    # /dev/shm) were left behind: its resource tracker, which unlinks them once the launcher is gone, was killed
    # with the process group before it could.
    if not adapters.availability(adapter, "cpu", 2):
        pytest.skip(f"{adapter} is not available here: {adapters.availability(adapter, 'cpu', 2).reason}")
    before = set(Path("/dev/shm").glob("sem.mp-*"))
    out = tmp_path / "o"
    proc = _start("run", "-a", adapter, "--steps", "100000", "--warmup", "2", "--equiv-steps", "0",
                  "--timeout", "300", "--out", str(out))
    root = psutil.Process(proc.pid)
    _wait_for(lambda: (launch_progress(root, "-r0") or {}).get("step", 0) >= 3, f"{adapter} at step 3", proc)
    victim = min((p for p in root.children(recursive=True) if command in cmdline(p)), key=lambda p: p.create_time())
    reason = reason.format(pid=victim.pid, argv=_brief(victim.cmdline()))
    victim.kill()
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1, stderr  # the only row failed
    rows = read_records(out)
    assert (rows[adapter]["status"], rows[adapter]["reason"]) == ("failed", reason)
    assert set(Path("/dev/shm").glob("sem.mp-*")) <= before


def _start_training(tmp_path: Path, what: str, step: int, *args, env=None) -> tuple[subprocess.Popen, psutil.Process]:
    """Start `compare *args --out tmp_path/o` and wait until its launch's rank 0 has reached `step`.

    A launch that hangs on its way there is not retried. compare's own stall watch (--stall-timeout 90, which on
    one machine counts from the gate even when rank 0 never says a word) stops it as a `timeout` with every rank's
    Python stack and every process's state in its log, and the test fails with that log: a start-up hang is found,
    not hidden. A run still going at 240 s (the watch itself failed) is described process by process."""
    out = tmp_path / "o"
    proc = _start(*args, "--stall-timeout", "90", "--out", str(out), env=env)
    root = psutil.Process(proc.pid)
    if _wait_for(lambda: (launch_progress(root, "-r0") or {}).get("step", 0) >= step, what, proc, deadline_s=240,
                 fail=False):
        return proc, root
    where = "compare had ended" if proc.poll() is not None else f"compare still running:\n{describe(root)}"
    kept = "\n".join(f"{log}:\n{log.read_text(errors='replace')[-6000:]}"
                     for log in sorted((out / "logs").glob("*.log")))
    pytest.fail(f"not {what}: {where}\n{kept}")


def _launch_processes(root: psutil.Process) -> list[psutil.Process]:
    return [p for p in root.children(recursive=True) if cmdline(p)]


CHILD_ADAPTERS = [a for a in ("ddp", "spawn", "horovod", "deepspeed")]


@pytest.mark.parametrize("adapter", CHILD_ADAPTERS)
def test_kill_9_of_compare_takes_every_launched_process_with_it(tmp_path, adapter):
    if not adapters.availability(adapter, "cpu", 2):
        pytest.skip(f"{adapter} is not available here: {adapters.availability(adapter, 'cpu', 2).reason}")
    # Rank 1 hangs at step 3: without the watchdogs its peers and launcher would wait forever.
    proc, root = _start_training(tmp_path, f"{adapter}'s ranks at step 3", 3, "run", "-a", adapter, "--steps",
                                 "100000", "--warmup", "2", "--equiv-steps", "0",
                                 env={"COMPARE_FAULT": f"{adapter}:1:hang:3"})
    launched = _launch_processes(root)
    assert len(launched) >= 3, [cmdline(p) for p in launched]  # the launcher and two ranks at least
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    gone, alive = psutil.wait_procs(launched, timeout=20)
    alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"still running {time.monotonic() - t0:.1f} s after kill -9: {[cmdline(p) for p in alive]}"
    # what a process killed by SIGKILL cannot remove itself: its scratch directory
    for scratch in Path(tempfile.gettempdir()).glob(f"compare-{proc.pid}-scratch-*"):
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.mark.alone  # /dev/shm is the machine's
def test_a_killed_deepspeed_launchs_shared_memory_is_gone_after_the_next_run(tmp_path):
    # A DeepSpeed launch records, before its ranks exist, the segments its CPU all-reduce creates in /dev/shm. Its
    # ranks unlink theirs once every peer has mapped them, so a segment survives a kill only inside
    # init_distributed; the test stands in for that moment by leaving one under the launch's own name (as
    # deepspeed_shm_comm names rank 1's), then kills compare with SIGKILL, so nothing of that run can remove it.
    from harness.launching import leftovers

    if not adapters.availability("deepspeed", "cpu", 2):
        pytest.skip(f"deepspeed is not available here: {adapters.availability('deepspeed', 'cpu', 2).reason}")
    proc, root = _start_training(tmp_path, "deepspeed's ranks at step 3", 3, "run", "-a", "deepspeed", "--steps",
                                 "100000", "--warmup", "2", "--equiv-steps", "0")
    [entry] = [json.loads(f.read_text()) for f in leftovers.ledger().glob(f"{proc.pid}-*.json")]
    [pattern] = [lo["pattern"] for lo in entry["leftovers"]]
    assert pattern.startswith(f"/dev/shm/deepspeed_allreduce_buffer_{os.getuid()}_127.0.0.1_")
    segment = Path(pattern.replace("*", "1"))
    segment.write_bytes(b"\0" * 2**20)
    try:
        launched = _launch_processes(root)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        psutil.wait_procs(launched, timeout=20)
        assert segment.exists()  # nobody of the killed run could remove it
        after = run_compare(tmp_path / "next", "-a", "ddp", "--steps", "2", "--warmup", "1", "--equiv-steps", "0")[1]
        assert not segment.exists()
        assert (f"note: removed 1 DeepSpeed shared-memory segment (1.0 MiB) left by 1 launch(es) of compare runs "
                f"that were killed (pid {proc.pid})\n") in after.stderr
        assert not list(leftovers.ledger().glob(f"{proc.pid}-*.json"))
    finally:
        segment.unlink(missing_ok=True)
        for scratch in Path(tempfile.gettempdir()).glob(f"compare-{proc.pid}-scratch-*"):
            shutil.rmtree(scratch, ignore_errors=True)


def test_a_second_run_on_the_same_out_is_refused_naming_the_first(tmp_path):
    first, _ = _start_training(tmp_path, "the first run's training", 1, "run", "-a", "ddp", "--steps", "100000",
                               "--warmup", "0", "--equiv-steps", "0")
    out = Path(first.args[first.args.index("--out") + 1])
    try:
        assert (out / ".compare.lock").exists()
        second = subprocess.run([sys.executable, "-m", "harness", "run", "-a", "ddp", "--out", str(out), "--force"],
                                cwd=REPO, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2
        assert second.stderr == (f"error: output directory {out} is in use by another compare run (pid "
                                 f"{first.pid}); wait for it to finish or choose another --out\n")
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    assert first.returncode == 130
    # The first run's rows are intact (an interrupted row) and the lock is gone with it.
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert [r["status"] for r in rows] == ["interrupted"]
    assert not (out / ".compare.lock").exists()


def test_a_run_measured_while_another_run_trains_says_so(tmp_path):
    # Two runs on the same 2 cores disturb each other's figures and the load average lags by a minute: the row
    # measured while the other run was training names it, in the record, the report and the terminal.
    first, _ = _start_training(tmp_path, "the first run's training", 1, "run", "-a", "ddp", "--steps", "100000",
                               "--warmup", "0", "--equiv-steps", "0", "--repeats", "1")
    try:
        out = tmp_path / "second"
        second = subprocess.run([sys.executable, "-m", "harness", "run", "-a", "ddp", "--steps", "5", "--warmup", "1",
                                 "--equiv-steps", "0", "--repeats", "1", "--out", str(out)],
                                cwd=REPO, capture_output=True, text=True, timeout=300)
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    assert second.returncode == 0, second.stdout + second.stderr
    [rec] = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert rec["status"] == "ok"
    [other] = rec["concurrent_compare_runs"]
    first_out = first.args[first.args.index("--out") + 1]
    assert other["pid"] == first.pid and other["out"] == str(Path(first_out).resolve())
    assert other["command"] == ("compare run -a ddp --steps 100000 --warmup 0 --equiv-steps 0 --repeats 1 "
                                "--stall-timeout 90 --out " + first_out)
    note = (f"**Measured while another compare run was running on this machine** (pid {first.pid}: "
            f"`{other['command']}`): ddp#0. Its processes shared these cores, so the times and throughput of these "
            f"rows are not this machine's alone; measure them again on a quiet machine.")
    assert f"- {note}" in (out / "report.md").read_text()
    said = " ".join(second.stdout.split())  # rich may wrap the lines
    assert (f"warning: another compare run is running on this machine (pid {first.pid}: {other['command']}); the "
            f"rows measured while it runs share the cores with it and will be marked") in said
    assert "warning: Measured while another compare run was running on this machine" in said
    # A run alone on the machine carries no such field (the first run has ended now).
    alone = tmp_path / "alone"
    rows, _ = run_compare(alone, "-a", "ddp", "--steps", "5", "--warmup", "1", "--equiv-steps", "0")
    assert "concurrent_compare_runs" not in rows["ddp"]
    assert "Measured while another compare run" not in (alone / "report.md").read_text()


def test_ctrl_c_during_the_first_launch_still_leaves_records_and_a_report(tmp_path):
    out = tmp_path / "o"
    proc = _start("run", "-a", "dp,ddp", *replacing(SHORT, "--equiv-steps", "2"), "--out", str(out),
                  env={"COMPARE_FAULT": "reference:0:hang:1"})
    root = psutil.Process(proc.pid)
    _wait_for(lambda: (launch_progress(root, "reference") or {}).get("step", 0) >= 1, "the reference at step 1",
              proc)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert [(r["label"], r["status"]) for r in rows] == [("dp", "not_run"), ("ddp", "not_run")]
    assert rows[0]["reason"] == "the run was interrupted by Ctrl-C (SIGINT) during the reference run"
    report = (out / "report.md").read_text()
    assert "**The run was interrupted by Ctrl-C (SIGINT) during the reference run**: dp, ddp never ran." in report
    assert "| dp |" in report and "| ddp |" in report


# ---- a full disk --------------------------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs, mounted for the test and unmounted after; `fill(free_bytes)` leaves that much room."""
    if os.geteuid() != 0:
        pytest.skip("Requires: root (to mount a small tmpfs that runs out of space)")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], check=True,
                       capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"Requires: a tmpfs mount ({exc})")

    def fill(free_bytes: int) -> None:
        st = os.statvfs(mnt)
        (mnt / "filler").write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - free_bytes))

    fill.path = mnt
    yield fill
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def _scratch_dirs(pid: int) -> list[Path]:
    return sorted(Path(tempfile.gettempdir()).glob(f"compare-{pid}-*"))


def _pages(n: int) -> int:
    return -(-n // 4096) * 4096


def test_disk_full_for_the_plots_keeps_every_row_and_says_so(small_disk, tmp_path):
    # The same run on a roomy disk first, to size the small one: room for the lock, the logs and the records
    # (twice: records.jsonl is rewritten through a temp file), not for the PNG plots.
    args = ["-a", "dp,ddp", *SHORT, "--repeats", "1"]
    sizing = tmp_path / "sizing"
    subprocess.run([sys.executable, "-m", "harness", "run", *args, "--out", str(sizing)], cwd=REPO, check=True,
                   capture_output=True, timeout=600)
    records = _pages((sizing / "records.jsonl").stat().st_size)
    logs = sum(_pages(f.stat().st_size) for f in (sizing / "logs").iterdir())
    plots = sum(f.stat().st_size for f in sizing.glob("*.png"))
    room = 4096 + logs + 2 * records + 8192
    assert plots > room - 2 * records + 16384, "the plots must not fit where the records do"
    out = small_disk.path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", *args, "--out", str(out)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The disk fills once the run has started (a run is refused up front where it has less room than it writes):
    # as another process's files would fill it, before the first launch's records.
    wait_until(lambda: (out / "logs").is_dir(), "the run's logs/ directory", timeout=120, proc=proc)
    small_disk(room)
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 1, stderr
    assert stderr == (f"error: could not write the report and plots in {out}: No space left on device; "
                      f"records.jsonl holds every finished row (2 records)\n")
    rows = read_records(out)
    assert [rows[k]["status"] for k in ("dp", "ddp")] == ["ok", "ok"]
    assert not list(out.glob("*.tmp")) and not _scratch_dirs(proc.pid)


def test_disk_full_for_the_records_names_where_the_rank_results_are(small_disk):
    # Several rows: the next launch is already running when the first save fails, and its own failed save while
    # stopping must name the same place (it once said "kept in None").
    out = small_disk.path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "-a", "dp,ddp,spawn", *SHORT, "--no-plots",
                             "--repeats", "1", "--out", str(out)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: (out / "logs").is_dir(), "the run's logs/ directory", timeout=120, proc=proc)
    small_disk(0)  # full once the run has started: refused up front otherwise
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 1, stderr
    [kept] = _scratch_dirs(proc.pid)
    try:
        # the records made so far are kept beside the rank results, which no reader took alone
        said = re.fullmatch(rf"error: could not write {re.escape(str(out / 'records.jsonl'))}: No space left on "
                            rf"device; the (\d+) record\(s\) made so far are in {re.escape(str(kept))}/records.jsonl "
                            rf"\(`compare report {re.escape(str(kept))}` renders them\), beside the rank results\n",
                            stderr)
        assert said, stderr
        assert "-kept-" in kept.name and (kept / "dp-r0" / "rank0.json").exists()
        kept_rows = [json.loads(line) for line in (kept / "records.jsonl").read_text().splitlines()]
        assert len(kept_rows) == int(said.group(1)) and kept_rows[0]["label"] == "dp"
        assert kept_rows[0]["status"] == "ok"
        report = subprocess.run([sys.executable, "-m", "harness", "report", str(kept)], cwd=REPO,
                                capture_output=True, text=True, timeout=300)
        assert report.returncode == 0 and "| dp |" in (kept / "report.md").read_text(), report.stderr
    finally:
        import shutil

        shutil.rmtree(kept, ignore_errors=True)
    assert not list(out.glob("*.tmp")) if out.exists() else True


# ---- a rank killed by a signal -----------------------------------------------------------------------------

@pytest.mark.parametrize("adapter", CHILD_ADAPTERS)
def test_a_rank_killed_by_a_signal_is_named_with_its_signal(tmp_path, adapter):
    if not adapters.availability(adapter, "cpu", 2):
        pytest.skip(f"{adapter} is not available here: {adapters.availability(adapter, 'cpu', 2).reason}")
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "-a", f"{adapter},dp", *SHORT, "--no-plots",
                           "--repeats", "1", "--out", str(tmp_path / "o")], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COMPARE_FAULT": f"{adapter}:1:kill:5"})
    assert proc.returncode == 0, proc.stderr
    rows = read_records(tmp_path / "o")
    assert rows[adapter]["status"] == "failed"
    assert rows[adapter]["reason"] == "rank 1 killed by SIGKILL"  # not rank 0's "Connection reset by peer"
    assert rows["dp"]["status"] == "ok"


def _rank_processes(root: psutil.Process, rank: int) -> list[psutil.Process]:
    """The processes of one rank (its supervisor, then its worker), found from outside by their environment."""
    found = []
    for p in root.children(recursive=True):
        try:
            env = p.environ()
        except psutil.Error:
            continue
        if "harness.rank" in cmdline(p) and env.get("RANK") == str(rank):
            found.append(p)
    return sorted(found, key=lambda p: p.create_time())


# A SIGTERM is witnessed (harness/shared/witness.py): the row names who sent it, here this test's own process.


@pytest.mark.parametrize("target, reason", [
    ("worker", "rank 1 killed by SIGKILL"),
    ("supervisor", "rank 1 killed from outside (no exit status recorded: SIGKILL, or the OOM killer)"),
    ("worker-term", f"rank 1 killed by SIGTERM {FROM_HERE}"),
    ("supervisor-term", f"rank 1 killed by SIGTERM {FROM_HERE}"),
])
def test_a_rank_killed_from_outside_is_named(tmp_path, target, reason):
    out = tmp_path / "o"
    proc = _start("run", "-a", "ddp", "--steps", "100000", "--warmup", "2", "--equiv-steps", "0", "--out", str(out))
    root = psutil.Process(proc.pid)
    _wait_for(lambda: (launch_progress(root, "-r0") or {}).get("step", 0) >= 3, "ddp at step 3", proc)
    supervisor, worker = _rank_processes(root, 1)
    victim = supervisor if target.startswith("supervisor") else worker
    victim.send_signal(signal.SIGTERM if target.endswith("term") else signal.SIGKILL)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stderr  # the only row failed
    [row] = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert (row["status"], row["reason"]) == ("failed", reason)


# ---- a rank killed by the out-of-memory killer ---------------------------------------------------------------

OOM_LIMIT = 3 * 2**30
"""The memory cgroup's limit for the OOM test: the parent, torchrun and two ranks of digits fit well under it
(about 1.3 GiB here); rank 1 then allocates until the kernel kills it."""


@pytest.fixture
def memory_limited(tmp_path):
    """A memory cgroup of OOM_LIMIT made for the test under this process's own (cgroup v1 or v2), and the argv
    prefix that starts a command inside it; removed after the test. Skipped, with the reason, where the machine
    does not allow it."""
    from harness.shared import oom

    if os.geteuid() != 0:
        pytest.skip("Requires: root (to create a memory cgroup)")
    mine = oom.memory_cgroup()
    if mine is None:
        pytest.skip("Requires: a memory cgroup this process can read (none found in /proc/self/cgroup)")
    parent, version = mine
    group = parent / f"compare-oom-test-{os.getpid()}"
    try:
        group.mkdir()
        (group / ("memory.limit_in_bytes" if version == 1 else "memory.max")).write_text(str(OOM_LIMIT))
    except OSError as exc:
        if group.exists():
            group.rmdir()
        pytest.skip(f"Requires: a child memory cgroup with a limit under {parent} ({exc.strerror or exc})")
    yield ["sh", "-c", f'echo $$ > {group / "cgroup.procs"} && exec "$@"', "sh"]
    deadline = time.monotonic() + 30
    while True:  # a cgroup goes once its last process has; every process the run started is gone by now
        try:
            group.rmdir()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)  # not a synchronisation: the kernel frees the cgroup's last task asynchronously


def test_a_rank_killed_by_the_out_of_memory_killer_is_named_with_its_peak_memory(tmp_path, memory_limited):
    # Rank 1 allocates past its cgroup's limit at step 3: the kernel's OOM killer sends it SIGKILL, and its
    # supervisor finds the kernel's own record of it (the kernel log, or the cgroup's count of OOM kills).
    out = tmp_path / "o"
    proc = subprocess.run([*memory_limited, sys.executable, "-m", "harness", "run", "-a", "ddp", *SHORT,
                           "--repeats", "1", "--no-plots", "--out", str(out)], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "COMPARE_FAULT": "ddp:1:oom:3"})
    assert proc.returncode == 1, proc.stderr  # the only row failed
    [row] = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert row["status"] == "failed"
    head, peak, limit = row["reason"].partition("; its peak memory ")[0], *row["reason"].split("; its ")[1:]
    assert head == "rank 1 killed by the out-of-memory killer (SIGKILL", row["reason"]
    assert peak.startswith("peak memory ") and peak.endswith(" GiB")
    assert 1.0 <= float(peak.split()[-2]) <= OOM_LIMIT / 2**30  # it grew to most of what was left
    assert limit == "memory cgroup's limit 3.0 GiB)"


def test_a_reference_that_failed_leaves_every_row_unchecked_saying_why_not_failed(tmp_path):
    # Every row read "checked: true, passed: false" (a failed equivalence check) when no reference had run, and
    # report.md said nothing of it; the cell now says why nothing was compared
    out = tmp_path / "o"
    rows, proc = run_compare(out, "-a", "ddp", *replacing(SHORT, "--equiv-steps", "2"),
                             env={"COMPARE_FAULT": "reference:0:raise:1"})
    rec = rows["ddp"]
    assert rec["status"] == "ok" and rec["max_param_diff"] is None
    assert rec["reference_run"]["status"] == "failed" and "[fault injection]" in rec["reference_run"]["reason"]
    eq = rec["equivalence"]
    assert eq["checked"] is False and eq["passed"] is None
    assert eq["why_not_checked"].startswith("the single-process reference failed: rank 0 exited with code 1")
    assert f"| – ({eq['why_not_checked']}) | ok |" in (out / "report.md").read_text()
