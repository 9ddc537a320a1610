"""The stall watch (harness/launching/launch.py): a launch whose rank 0 reports no new phase or step for --stall-timeout
is stopped as a timeout. On one machine a rank 0 that never says a word counts too; on several hosts the watch starts
only once rank 0 has said something (a rank 0 on another host may never write the progress file here). The end-to-end
cases, with each rank's stack and every process's state in the log, are in tests/distributed/test_failures.py."""

import time

from harness.launching.launch import Launch
from harness.shared import progress as progress_file
from harness.shared.spec import Node, RunSpec, Topology


def _launch(tmp_path, stall_s, topology=None):
    spec = RunSpec(adapter="x", workload="digits", world_size=2, device="cpu", global_batch=64, steps=10, warmup=2,
                   threads=1, rank_dir=str(tmp_path), topology=topology)
    progress_file.create(spec.progress_path, 12)
    launch = Launch(None, spec, timeout_s=900, stall_s=stall_s)
    launch._seen_at = time.monotonic()  # as when the gate opens
    return launch, spec


def _age(launch, seconds):
    launch._seen_at -= seconds  # as if that long had passed since rank 0 last moved


def test_on_one_machine_a_rank_0_that_never_says_a_word_is_a_stall(tmp_path):
    # A launcher or rendezvous stuck before rank 0's worker began: caught at the stall time, not at --timeout.
    launch, _ = _launch(tmp_path, 10)
    assert launch._watch() is False
    _age(launch, 9)
    assert launch._watch() is False  # 9 s of 10
    _age(launch, 1)
    assert launch._watch() is True
    assert launch.status == "timeout" and launch.stalled
    # no rank wrote a start file and no process of this launch exists here: nothing is claimed to be in the log
    assert launch.reason == "stalled: no word from rank 0 for 10 s (--stall-timeout); process group killed"


def test_on_several_hosts_silence_before_rank_0_says_anything_is_not_a_stall(tmp_path):
    topology = Topology(nodes=[Node("a", 1), Node("b", 1)])
    launch, _ = _launch(tmp_path, 10, topology)
    assert launch._watch() is False
    _age(launch, 3600)
    assert launch._watch() is False and launch.status is None


def test_rank_0_standing_still_for_the_stall_time_stops_the_launch_and_says_where(tmp_path):
    launch, spec = _launch(tmp_path, 10)
    writer = progress_file.Writer(spec.progress_path)
    writer.phase("timed", 7)
    assert launch._watch() is False  # news: the clock restarts
    _age(launch, 9)
    assert launch._watch() is False  # 9 s of 10
    writer.step(8)
    assert launch._watch() is False  # a step: restarted again
    _age(launch, 10)
    assert launch._watch() is True
    assert launch.status == "timeout" and launch.stalled
    # no rank wrote a start file here, so no stack was asked for
    assert launch.reason == ("stalled: no progress for 10 s (--stall-timeout), rank 0 at step 8 of 12 (timed); "
                             "process group killed")


def test_a_stall_timeout_of_0_never_watches(tmp_path):
    launch, spec = _launch(tmp_path, 0)
    progress_file.Writer(spec.progress_path).phase("setup")
    _age(launch, 3600)
    assert launch._watch() is False and launch._until() is None
