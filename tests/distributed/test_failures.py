"""A crash, a hang or Ctrl-C in one adapter never loses the rows of the others.

Faults are injected with COMPARE_FAULT="ADAPTER:RANK:KIND:STEP" (harness/rank/faults.py). Nothing here sleeps to
synchronise: hangs are ended by the harness's own --timeout, and the Ctrl-C test waits for a condition (the
first row on disk) with a deadline.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.shared import progress as progress_file

from conftest import REPO, read_records, replacing, run_compare, wait_until
from launchwatch import cmdline

pytestmark = pytest.mark.distributed
# --order-seed 263 runs the first round's rows in the order asked for (2, 3 or 4 rows): a fault or a signal aimed at
# one row then meets the launches these tests expect to have finished before it.
# No equivalence check (and no reference launch) where a test is about failures, not the maths: the tests that
# check the surviving row's parameters ask for one.
SHORT = ("--steps", "30", "--warmup", "2", "--equiv-steps", "0", "--order-seed", "263")
EQUIV = replacing(SHORT, "--equiv-steps", "2")


def _gone(pgid):
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_rank_crash_under_torchrun_is_a_failed_row_and_the_next_adapter_runs(tmp_path):
    rows, proc = run_compare(tmp_path / "o", "-a", "ddp,spawn", *EQUIV,
                             env={"COMPARE_FAULT": "ddp:1:exit:5"})
    ddp, spawn = rows["ddp"], rows["spawn"]
    assert ddp["status"] == "failed"
    assert ddp["reason"] == "rank 1 exited with code 3; first error: [fault injection] exit at step 5"
    assert "ChildFailedError" in ddp["log_tail"]  # torchrun's own summary of the failed rank
    assert spawn["status"] == "ok" and spawn["max_param_diff"] <= 1e-5
    assert _gone(ddp["topology"]["launch_pgid"])
    assert "**ddp** repeat 0 failed" in (tmp_path / "o" / "report.md").read_text()


def test_a_crash_after_every_rank_reported_keeps_the_row_and_says_so(tmp_path):
    # Rank 1 dies during shutdown, after its result is on disk (as a gloo peer closing first can make it abort):
    # the measurement is complete, so the row stays ok, and the record and report say what happened.
    rows, _ = run_compare(tmp_path / "o", "-a", "spawn", *EQUIV, env={"COMPARE_FAULT": "spawn:1:exit:end"})
    rec = rows["spawn"]
    assert rec["status"] == "ok" and rec["max_param_diff"] <= 1e-5 and rec["samples_per_s"] > 0
    assert rec["shutdown_error"] == ("after every rank had written its result: rank 1 exited with code 3; "
                                     "first error: [fault injection] exit at step end")
    assert "ProcessExitedException: process 1 terminated with exit code 3" in rec["log_tail"]
    report = (tmp_path / "o" / "report.md").read_text()
    assert ("**spawn** repeat 0: the launch ended badly after every rank had written its result: rank 1 exited "
            "with code 3; first error: [fault injection] exit at step end (its measurements are complete and "
            "kept).") in report


def test_exception_in_the_in_process_adapter_is_a_failed_row(tmp_path):
    rows, _ = run_compare(tmp_path / "o", "-a", "dp,ddp", *SHORT, env={"COMPARE_FAULT": "dp:0:raise:3"})
    assert rows["dp"]["status"] == "failed"
    assert rows["dp"]["reason"] == "rank 0 exited with code 1; first error: [fault injection] raise at step 3"
    assert "RuntimeError: injected fault at step 3" in rows["dp"]["log_tail"]
    assert rows["ddp"]["status"] == "ok"


def test_rank_hang_under_spawn_is_a_timeout_row_and_its_processes_are_killed(tmp_path):
    rows, _ = run_compare(tmp_path / "o", "-a", "spawn,ddp", *SHORT, "--timeout", "25",
                          env={"COMPARE_FAULT": "spawn:1:hang:4"})
    spawn = rows["spawn"]
    assert spawn["status"] == "timeout"
    # rank 0 finished steps 0-3 and waits in step 4's all-reduce for the rank that hung
    assert spawn["reason"] == ("no result after 25 s (--timeout), rank 0 at step 4 of 32 (timed); process group "
                               "killed; first error: [fault injection] hang at step 4")
    assert _gone(spawn["topology"]["launch_pgid"])
    assert rows["ddp"]["status"] == "ok"


def test_a_stalled_launch_is_stopped_early_with_each_ranks_stack_and_the_next_row_runs(tmp_path):
    # Rank 1 hangs at the start of step 4; rank 0 waits in that step's all-reduce. Nothing moves for 20 s: the
    # launch is stopped long before --timeout, and the log kept for the row holds both ranks' Python stacks, the
    # hung one inside the fault injection.
    t0 = time.monotonic()
    rows, _ = run_compare(tmp_path / "o", "-a", "ddp,spawn", *SHORT, "--timeout", "300", "--stall-timeout", "20",
                          env={"COMPARE_FAULT": "ddp:1:hang:4"})
    ddp = rows["ddp"]
    assert ddp["status"] == "timeout"
    # torchrun, and each rank's supervisor and worker
    # The row names the rank that stopped (behind rank 0, which waits further on in the step's all-reduce).
    assert re.fullmatch(r"stalled: no progress for 20 s \(--stall-timeout\), rank 0 at step 4 of 32 \(timed\); rank 1 "
                        r"stopped first, after 4 step\(s\), in inject \(harness/rank/faults.py:\d+\): the other ranks "
                        r"went further; the Python stacks of 2 rank\(s\) and the state of ([5-9]|\d\d) process\(es\) "
                        r"are in the log; process group killed; first error: \[fault injection\] hang at step 4",
                        ddp["reason"]), ddp["reason"]
    assert ddp["stalled_rank"] == 1
    log = (tmp_path / "o" / "logs" / "ddp-r0.log").read_text()
    assert log.count("(most recent call first)") >= 2  # faulthandler's header, a thread at a time, both ranks
    assert "harness/rank/faults.py" in log and " in inject" in log
    listed = log.split("compare: the launch's processes when it was stopped as stalled:\n")[1]
    assert "torch.distributed.run" in listed and ", waiting in " in listed
    assert _gone(ddp["topology"]["launch_pgid"])
    assert rows["spawn"]["status"] == "ok"
    assert time.monotonic() - t0 < 200  # stopped by the stall watch, not by --timeout 300


def test_a_stopped_rank_that_cannot_answer_for_its_stacks_is_named(tmp_path):
    # `kill -STOP` of rank 1's worker: no rank was named (the others' stacks place no one), though the process list
    # in the log showed it stopped
    rows, _ = run_compare(tmp_path / "o", "-a", "ddp", *SHORT, "--timeout", "300", "--stall-timeout", "10",
                          env={"COMPARE_FAULT": "ddp:1:stop:4"}, expect_rc=1)
    ddp = rows["ddp"]
    assert ddp["status"] == "timeout" and ddp["stalled_rank"] == 1, ddp["reason"]
    assert re.search(r"; rank 1 did not answer the request for its stacks: its worker \(pid \d+\) is stopped "
                     r"\(SIGSTOP, or a debugger holds it\); ", ddp["reason"]), ddp["reason"]
    assert _gone(ddp["topology"]["launch_pgid"])


HANGING_DATASET = """
import os
import time

import torch
from workloads import Pieces, workload


class Rows(torch.utils.data.Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        if os.environ.get("RANK") == "1" and torch.utils.data.get_worker_info() is not None:
            while True:
                time.sleep(1)
        return torch.ones(8) * i / 256, i % 4


@workload(global_batch=16, lr=0.05, steps=10, warmup=1, equiv_steps=0)
def rows():
    return Pieces(model=lambda: torch.nn.Linear(8, 4), train=Rows())
"""


def test_a_dataloader_worker_that_hangs_in_the_dataset_is_named_with_its_line(tmp_path):
    # An outside check: a hang inside a DataLoader worker named only torch's _try_get_data, where the rank waits for
    # it; the worker's own stacks were nowhere, though they hold the user's line
    model = tmp_path / "hanging.py"
    model.write_text(HANGING_DATASET)
    rows, _ = run_compare(tmp_path / "o", "-w", f"{model}:rows", "-a", "ddp", "--loader-workers", "1", "--repeats",
                          "1", "--timeout", "300", "--stall-timeout", "15", expect_rc=1)
    ddp = rows["ddp"]
    assert ddp["status"] == "timeout", ddp["reason"]
    assert re.search(r"; rank 1's DataLoader worker 0 \(pid \d+\) was in __getitem__ \(hanging\.py:16\); ",
                     ddp["reason"]), ddp["reason"]
    log = (tmp_path / "o" / "logs" / "ddp-r0.log").read_text()
    assert re.search(r"compare: rank 1's DataLoader worker 0 \(pid \d+\); its Python stacks:\n", log)
    assert _gone(ddp["topology"]["launch_pgid"])


@pytest.mark.parametrize("adapter", ["ddp", "horovod"])
def test_a_launch_whose_rank_0_never_says_a_word_is_stopped_as_stalled_with_each_ranks_stack(tmp_path, adapter):
    # Rank 0 hangs before its first word (as a launcher or rendezvous stuck before its worker began would look);
    # rank 1 waits for it to join the group. The stall watch counts from the gate on one machine: the row is a
    # timeout long before --timeout, with both ranks' stacks and every process's state in its log.
    import adapters

    if not adapters.availability(adapter, "cpu", 2):
        pytest.skip(f"{adapter} is not available here: {adapters.availability(adapter, 'cpu', 2).reason}")
    t0 = time.monotonic()
    rows, _ = run_compare(tmp_path / "o", "-a", f"{adapter},spawn", *SHORT, "--timeout", "300", "--stall-timeout",
                          "20", env={"COMPARE_FAULT": f"{adapter}:0:hang:start"})
    row = rows[adapter]
    assert row["status"] == "timeout"
    assert re.fullmatch(r"stalled: no word from rank 0 for 20 s \(--stall-timeout\); the Python stacks of 2 "
                        r"rank\(s\) and the state of \d+ process\(es\) are in the log; process group killed; "
                        r"first error: (\[0\]<stderr>:)?\[fault injection\] hang at start-up",
                        row["reason"]), row["reason"]
    log = (tmp_path / "o" / "logs" / f"{adapter}-r0.log").read_text()
    assert "compare: rank 0 made no progress for 20 s" in log and " in inject" in log
    assert "compare: rank 1 made no progress for 20 s" in log
    assert _gone(row["topology"]["launch_pgid"])
    assert rows["spawn"]["status"] == "ok"
    assert time.monotonic() - t0 < 200  # stopped by the stall watch, not by --timeout 300


def test_every_adapter_failing_exits_non_zero_but_keeps_rows(tmp_path):
    rows, _ = run_compare(tmp_path / "o", "-a", "dp", *SHORT, env={"COMPARE_FAULT": "dp:0:exit:1"}, expect_rc=1)
    assert rows["dp"]["status"] == "failed"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_stops_the_children_and_keeps_finished_rows(tmp_path, sig):
    out = tmp_path / "o"
    env = {**os.environ, "COMPARE_FAULT": "spawn:1:hang:3"}
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "-a", "ddp,spawn", *SHORT, "--repeats", "1",
                             "--out", str(out), "--timeout", "300", "--no-plots"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    harness = psutil.Process(proc.pid)
    seen = {"children": [], "reached": None}

    def hung():
        # ddp's row is on disk and spawn's rank 0 has reached the hung step: rank 0 reports its step through the
        # launch's progress file, next to the spec the launcher got
        rows = read_records(out) if (out / "records.jsonl").exists() else {}
        launcher = [c for c in harness.children(recursive=True) if "adapters.spawn" in cmdline(c)]
        if "ddp" in rows and launcher:
            seen["children"] = [launcher[0], *launcher[0].children(recursive=True)]
            seen["reached"] = progress_file.read(Path(launcher[0].cmdline()[-1]).parent / "progress.bin")
            return seen["reached"] and seen["reached"]["step"] >= 3
        return False

    wait_until(hung, "ddp's row on disk and spawn's rank 0 at step 3", timeout=240, proc=proc)
    children, reached = seen["children"], seen["reached"]
    assert reached["step"] == 3 and len(children) >= 3, f"spawn's ranks never reached step 3: {reached}"
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    # spawn's row, stopped at step 3, measured nothing: it is not counted with ddp's (it had said "2 row(s) kept")
    assert "interrupted: children stopped; 1 measured row(s) and 1 stopped part-way kept in" in stderr
    psutil.wait_procs(children, timeout=10)
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert [(r["label"], r["status"]) for r in rows] == [("ddp", "ok"), ("spawn", "interrupted")]
    # The interrupted row says how far it got (rank 1 hangs at the start of step 3; rank 0 finished 3 steps).
    assert rows[1]["reason"] == "interrupted at step 3 of 32 (timed); process group killed"
    assert rows[1]["reached"] == {"phase": "timed", "step": 3, "total": 32}
    # numbered as its record is (repeat 0) and its log (spawn-r0.log): it said "repeat 1" beside "spawn repeat 0 failed"
    # what stopped it is said: a scheduler's SIGTERM had read as one's own Ctrl-C
    said = {signal.SIGINT: "Ctrl-C (SIGINT)", signal.SIGTERM: "SIGTERM"}[sig]
    assert all(r["run_interrupted"] == f"by {said} during spawn (repeat 0)" for r in rows)
    report = (out / "report.md").read_text()
    assert "| spawn |" in report and "interrupted" in report
