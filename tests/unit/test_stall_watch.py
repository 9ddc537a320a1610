"""The stall watch (harness/launching/launch.py): a launch whose rank 0 reports no new phase or step for --stall-timeout
is stopped as a timeout. On one machine a rank 0 that never says a word counts too; on several hosts the watch starts
only once rank 0 has said something (a rank 0 on another host may never write the progress file here). The end-to-end
cases, with each rank's stack and every process's state in the log, are in tests/distributed/test_failures.py.

Each launch here is real (its one command is `sleep 3600`, a process that says nothing) and its time is a fake clock
the test moves: the watch is asked the way the launch's wait loop asks it, once per wake-up (`watch`, the loop's
one step), and the launch ends through finish(), whose outcome carries the watch's reason.
"""

import math

import pytest

from adapters.base import LaunchPlan
from harness.launching.launch import Launch
from harness.launching.reaper import describe_launch
from harness.shared import progress as progress_file
from harness.shared.spec import Node, RunSpec, Topology

from conftest import wait_until


class _Silent:
    """An adapter whose one command runs and says nothing: no start file, no progress, no result."""

    name = "x"
    launcher = "sleep"

    def launch(self, spec_path, spec):
        return LaunchPlan(argv=["sleep", "3600"])

    def processes(self, world_size):
        return world_size


class _Clock:
    """Monotonic seconds that pass only when the test says so."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


@pytest.fixture
def started(tmp_path):
    """Start a gated launch of `sleep 3600` on a fake clock; whatever a test leaves running is stopped after it."""
    launches = []

    def start(stall_s, topology=None):
        spec = RunSpec(adapter="x", workload="digits", world_size=2, device="cpu", global_batch=64, steps=10,
                       warmup=2, threads=1, rank_dir=str(tmp_path / f"launch{len(launches)}"), topology=topology)
        clock = _Clock()
        launch = Launch(_Silent(), spec, timeout_s=900, stall_s=stall_s, clock=clock).start(gated=True)
        launches.append(launch)
        assert launch.start_error is None and launch.proc.returncode is None
        # The clock is fake, so a test reaches the stall at once: wait until `sleep` has replaced the forked child
        # (whose environment is still the parent's until exec, without the launch's id), or the stopped launch's
        # process list can be empty (a loaded CI machine saw "process group killed" without it)
        wait_until(lambda: describe_launch(launch.launch_id), "the launch's `sleep 3600` to run", timeout=60)
        return launch, spec, clock

    yield start
    for launch in launches:
        if launch.proc is not None and launch.proc.returncode is None:
            launch.interrupt()


def _assert_the_log_lists_the_launchs_process(out):
    text = out.log_path.read_text()
    assert "compare: the launch's processes when it was stopped as stalled:" in text and "sleep 3600" in text, text


def test_on_one_machine_a_rank_0_that_never_says_a_word_is_a_stall(started):
    # A launcher or rendezvous stuck before rank 0's worker began: caught at the stall time, not at --timeout.
    launch, _, clock = started(10)
    assert launch.watch() is False
    clock.advance(3600)  # an hour at the gate while the previous launch ends: the watch has not begun
    assert launch.watch() is False
    launch.open_gate()
    assert launch.watch() is False
    clock.advance(9)
    assert launch.watch() is False  # 9 s of 10
    clock.advance(1)
    assert launch.watch() is True  # asked here: a watch that missed it would leave finish() waiting on this clock
    out = launch.finish()
    # no rank wrote a start file, so no stack was asked for; the one process of the launch (sleep) is listed
    assert out.status == "timeout"
    assert out.reason == ("stalled: no word from rank 0 for 10 s (--stall-timeout); the state of 1 process(es) are in "
                          "the log; process group killed")
    _assert_the_log_lists_the_launchs_process(out)
    assert out.wall_time_s == 3610.0  # on the launch's clock, from its start (at the gate) to its end


def test_on_several_hosts_silence_before_rank_0_says_anything_is_not_a_stall(started):
    launch, _, clock = started(10, Topology(nodes=[Node("a", 1), Node("b", 1)]))
    launch.open_gate()
    assert launch.watch() is False
    clock.advance(3600)
    assert launch.watch() is False and launch.status is None
    out = launch.finish()  # --timeout, not the watch, ends it
    assert out.status == "timeout"
    assert out.reason == "no rank started on a, b; no result after 900 s (--timeout); process group killed"


def test_on_several_hosts_the_watch_starts_with_rank_0s_first_word(started):
    launch, spec, clock = started(10, Topology(nodes=[Node("a", 1), Node("b", 1)]))
    launch.open_gate()
    clock.advance(600)
    assert launch.watch() is False  # 600 s of silence: not counted
    progress_file.Writer(spec.progress_path).phase("setup")
    assert launch.watch() is False  # its first word: the watch counts from here
    clock.advance(9)
    assert launch.watch() is False  # 9 s of 10
    clock.advance(1)
    assert launch.watch() is True  # asked here: a watch that missed it would leave finish() waiting on this clock
    out = launch.finish()
    assert out.status == "timeout"
    assert out.reason == ("no rank started on a, b; stalled: no progress for 10 s (--stall-timeout), rank 0 at step 0 "
                          "of 12 (setup); the state of 1 process(es) are in the log; process group killed")
    _assert_the_log_lists_the_launchs_process(out)


def test_rank_0_standing_still_for_the_stall_time_stops_the_launch_and_says_where(started):
    launch, spec, clock = started(10)
    launch.open_gate()
    writer = progress_file.Writer(spec.progress_path)
    writer.phase("timed", 7)
    assert launch.watch() is False  # news: the count restarts
    clock.advance(9)
    assert launch.watch() is False  # 9 s of 10
    writer.step(8)
    assert launch.watch() is False  # a step: restarted again
    clock.advance(9)
    assert launch.watch() is False  # 18 s since the phase, 9 s since the step: the step restarted the count
    clock.advance(1)
    assert launch.watch() is True  # asked here: a watch that missed it would leave finish() waiting on this clock
    out = launch.finish()
    assert out.status == "timeout"
    assert out.reason == ("stalled: no progress for 10 s (--stall-timeout), rank 0 at step 8 of 12 (timed); the state "
                          "of 1 process(es) are in the log; process group killed")
    _assert_the_log_lists_the_launchs_process(out)


@pytest.mark.parametrize("stall_s", [0, math.inf])
def test_a_stall_timeout_of_0_or_inf_never_watches(started, stall_s):
    launch, spec, clock = started(stall_s)
    launch.open_gate()
    progress_file.Writer(spec.progress_path).phase("setup")
    assert launch.watch() is False
    clock.advance(3600)
    assert launch.watch() is False and launch.status is None
    out = launch.finish()  # --timeout ends it, an hour of standing still notwithstanding
    assert out.status == "timeout"
    assert out.reason == "no result after 900 s (--timeout), rank 0 at step 0 of 12 (setup); process group killed"


def test_a_launch_that_ended_while_compare_was_stopped_is_not_a_timeout_and_the_pause_is_not_its_time(started):
    # Ctrl-Z (SIGTSTP) of compare for longer than --timeout while the launch finished: at SIGCONT the wait loop read
    # the deadline before reaping the exited launcher, and recorded a launch that ended well as "no result after 40 s
    # (--timeout)"; the stall watch counted the pause too
    import os
    import signal
    from pathlib import Path

    launch, _, clock = started(10)
    launch.open_gate()
    launch._turn()
    deadline, seen = launch.deadline, launch._seen_at
    os.kill(launch.proc.pid, signal.SIGKILL)  # the launch ends while compare is stopped: nobody reaps it
    wait_until(lambda: Path(f"/proc/{launch.proc.pid}/stat").read_text().split(") ")[1][0] == "Z",
               "the launch's process to exit", timeout=60)
    clock.advance(1000)  # compare stopped for longer than --timeout (900 s)
    launch._turn()
    assert launch.paused_s == 1000 and launch.deadline == deadline + 1000 and launch._seen_at == seen + 1000
    assert launch.watch() is False  # the pause is no silence of rank 0's
    out = launch.finish()
    assert out.status == "failed" and "--timeout" not in out.reason and "stalled" not in out.reason, out.reason


def test_a_segfault_under_torchs_collective_checks_names_the_variable():
    # TORCH_DISTRIBUTED_DEBUG=DETAIL exported: every DDP row "failed: rank 0 killed by SIGSEGV", with no word of it
    from harness.launching.launch import DEBUG_DETAIL, environment_hint

    assert environment_hint("rank 0 killed by SIGSEGV", {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}) == DEBUG_DETAIL
    assert DEBUG_DETAIL.endswith("fix: unset it (INFO logs without the checks)")
    assert environment_hint("rank 0 killed by SIGSEGV", {"TORCH_DISTRIBUTED_DEBUG": "INFO"}) is None
    assert environment_hint("rank 0 exited with code 1", {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}) is None
