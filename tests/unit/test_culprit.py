"""What ended a launch (harness/launching/culprit.py), decided from the facts its processes wrote
(harness/shared/witness.py), written here by hand: each rule on the shape that once took the wrong culprit, then many
launches whose consequences reach the parent in every order that causality allows."""

import json
import random
from pathlib import Path

import pytest

from harness.launching.culprit import Command, culprit, outlived, rank_ends

T = 1_000_000.0  # a wall-clock origin for the hand-written facts


def _write(rank_dir: Path, name: str, rec: dict) -> None:
    (rank_dir / name).write_text(json.dumps(rec))


def _start(rank_dir: Path, rank: int, host: str = "vm", parent: int = 50, t: float = T) -> None:
    _write(rank_dir, f"start-rank{rank}.json", {"rank": rank, "supervisor_pid": 100 + rank, "worker_pid": 200 + rank,
                                                "start": t, "host": host, "parent_pid": parent,
                                                "parent": "python -m torch.distributed.run"})


def _exit(rank_dir: Path, rank: int, t: float, code: int | None = None, sig: str | None = None,
          host: str = "vm", finished: bool = True) -> None:
    _write(rank_dir, f"exit-rank{rank}.json", {"rank": rank, "time": t, "code": code, "signal": sig, "host": host})
    if not code and not sig and finished:  # a rank that ended cleanly wrote its result last
        _write(rank_dir, f"rank{rank}.json", {})


def _asked(rank_dir: Path, rank: int, t: float, by: str, role: str = "supervisor", sender_pid: int = 50,
           sender: str = "python -m torch.distributed.run", sig: str = "SIGTERM") -> None:
    _write(rank_dir, f"asked-rank{rank}-{role}.json", {"rank": rank, "role": role, "pid": 100 + rank, "time": t,
                                                        "signal": sig, "by": by, "sender_pid": sender_pid,
                                                        "sender": sender})


def _failed(rank_dir: Path, rank: int, t: float, error: str = "RuntimeError: boom") -> None:
    _write(rank_dir, f"failed-rank{rank}.json", {"rank": rank, "time": t, "error": error})


def _stopping(rank_dir: Path, t: float, alive: list[int], host: str = "vm", orphaned: list[int] = ()) -> None:
    _write(rank_dir, f"stopping-{host}.json", {"host": host, "time": t, "alive": alive, "orphaned": list(orphaned),
                                               "pid": 1})


def _launcher(rank_dir: Path, rc: int | None, ended: float | None, name: str = "torchrun", **kw) -> Command:
    log = rank_dir / "launch.log"
    if not log.exists():
        log.write_text("")
    return Command(launcher=name, returncode=rc, ended=ended, log=log, **kw)


@pytest.fixture
def rd(tmp_path):
    return tmp_path


# ---- each rule on its own ---------------------------------------------------------------------------------------

def test_a_killed_launcher_is_named_though_a_rank_it_left_reported_first(rd):
    # The CI failure: horovodrun killed with SIGKILL; its middleman asked rank 0 to stop 10 ms before compare saw
    # the launcher's end, and rank 1 then failed with "Connection reset by peer". Neither is the cause.
    _start(rd, 0), _start(rd, 1)
    _asked(rd, 0, T + 5.00, "launch", sender="python -c from multiprocessing.spawn import spawn_main")
    _exit(rd, 0, T + 5.02, sig="SIGTERM")
    _failed(rd, 1, T + 5.03, "RuntimeError: Connection reset by peer")
    _exit(rd, 1, T + 5.04, code=1)
    _stopping(rd, T + 5.2, alive=[])
    reason = culprit(rd, [_launcher(rd, -9, T + 5.01, name="horovodrun")])
    assert reason == ("the launcher (horovodrun) was killed by SIGKILL from outside while its ranks ran; the ranks it "
                      "left were then stopped")


def test_a_killed_launcher_before_any_rank_started_says_so(rd):
    _stopping(rd, T + 1, alive=[])
    assert culprit(rd, [_launcher(rd, -9, T + 0.5)]) == ("the launcher (torchrun) was killed by SIGKILL from outside "
                                                         "before any of its ranks started")


def test_a_rank_killed_by_sigkill_is_named_not_the_peer_whose_connection_it_reset(rd):
    _start(rd, 0), _start(rd, 1)
    _exit(rd, 1, T + 3.0, sig="SIGKILL")
    _failed(rd, 0, T + 3.1, "RuntimeError: Connection reset by peer")
    _exit(rd, 0, T + 3.2, code=1)
    _stopping(rd, T + 4, alive=[])
    assert culprit(rd, [_launcher(rd, 1, T + 3.5)]) == "rank 1 killed by SIGKILL"


def test_a_rank_the_out_of_memory_killer_ended_is_named_so_with_its_peak_memory(rd):
    # Its supervisor found the kernel's record of the kill (harness/shared/oom.py) and the worker's peak resident
    # memory (wait4's ru_maxrss); a SIGKILL without such a record stays "killed by SIGKILL".
    _start(rd, 0), _start(rd, 1)
    _write(rd, "exit-rank1.json", {"rank": 1, "time": T + 3.0, "code": None, "signal": "SIGKILL", "host": "vm",
                                   "max_rss_bytes": 1932735283, "oom": {
                                       "record": "Memory cgroup out of memory: Killed process 201 (python)",
                                       "cgroup": "/sys/fs/cgroup/memory/x", "limit_bytes": 2 * 2**30}})
    _failed(rd, 0, T + 3.1, "RuntimeError: Connection reset by peer")
    _exit(rd, 0, T + 3.2, code=1)
    _stopping(rd, T + 4, alive=[])
    assert culprit(rd, [_launcher(rd, 1, T + 3.5)]) == ("rank 1 killed by the out-of-memory killer (SIGKILL; its peak "
                                                        "memory 1.8 GiB; its memory cgroup's limit 2.0 GiB)")


def test_a_supervisor_gone_before_compare_stopped_is_named(rd):
    _start(rd, 0), _start(rd, 1)
    _asked(rd, 0, T + 3.0, "launch")  # torchrun stops the survivor
    _exit(rd, 0, T + 3.1, sig="SIGTERM")
    _stopping(rd, T + 4, alive=[])  # rank 1 was already gone, without a word
    assert culprit(rd, [_launcher(rd, 1, T + 3.5)]) == ("rank 1 killed from outside (no exit status recorded: SIGKILL, "
                                                        "or the OOM killer)")


def test_a_supervisor_alive_when_compare_began_stopping_is_not_blamed_for_vanishing(rd):
    # torchrun killed: its ranks (own sessions) run on until compare's SIGKILL, which leaves no record.
    _start(rd, 0), _start(rd, 1)
    _stopping(rd, T + 4, alive=[0, 1])
    assert culprit(rd, [_launcher(rd, -9, T + 3.9)]).startswith("the launcher (torchrun) was killed by SIGKILL")


def test_a_sigkill_compare_sent_after_it_began_stopping_is_not_blamed(rd):
    _start(rd, 0), _start(rd, 1)
    _stopping(rd, T + 4, alive=[0, 1])
    _exit(rd, 1, T + 4.01, sig="SIGKILL")  # compare's sweep reached the worker before its supervisor
    _asked(rd, 0, T + 4.02, "compare", sender_pid=1, sender="compare run")
    _exit(rd, 0, T + 4.03, sig="SIGTERM")
    assert culprit(rd, [_launcher(rd, -9, T + 3.9)]).startswith("the launcher (torchrun) was killed by SIGKILL")


def test_a_request_from_outside_names_its_sender(rd):
    _start(rd, 0), _start(rd, 1)
    _asked(rd, 1, T + 2.0, "outside", role="worker", sender_pid=4242, sender="kill -TERM 201")
    _exit(rd, 1, T + 2.01, sig="SIGTERM")
    _asked(rd, 0, T + 2.5, "launch")
    _exit(rd, 0, T + 2.6, sig="SIGTERM")
    _stopping(rd, T + 4, alive=[])
    assert culprit(rd, [_launcher(rd, 1, T + 3)]) == "rank 1 killed by SIGTERM from outside (pid 4242: kill -TERM 201)"


def test_a_request_from_another_pid_namespace_says_so(rd):
    _start(rd, 1)
    _asked(rd, 1, T + 2.0, "outside", sender_pid=0, sender="")
    _exit(rd, 1, T + 2.01, sig="SIGTERM")
    _stopping(rd, T + 4, alive=[])
    assert culprit(rd, [_launcher(rd, 1, T + 3)]) == ("rank 1 killed by SIGTERM from outside (the kernel, or a process "
                                                      "in another PID namespace)")


def test_the_first_rank_to_fail_by_itself_is_named_by_when_it_failed_not_when_its_end_was_read(rd):
    # rank 1's supervisor wrote its end late (the machine was busy); its worker had recorded the failure first.
    _start(rd, 0), _start(rd, 1)
    (rd / "launch.log").write_text("[fault injection] raise at step 5\nRuntimeError: Connection reset by peer\n")
    _failed(rd, 1, T + 5.0, "RuntimeError: injected fault at step 5")
    _failed(rd, 0, T + 5.1, "RuntimeError: Connection reset by peer")
    _exit(rd, 0, T + 5.2, code=1)
    _exit(rd, 1, T + 5.3, code=1)
    _stopping(rd, T + 6, alive=[])
    assert culprit(rd, [_launcher(rd, 1, T + 5.5)]) == ("rank 1 exited with code 1; first error: [fault injection] "
                                                        "raise at step 5")


def test_a_crash_signal_is_a_failure_of_its_own_and_orders_by_time(rd):
    # gloo's "Connection reset by peer" escaping a C++ thread aborts the peer (SIGABRT) after the rank that exited.
    _start(rd, 0), _start(rd, 1)
    _exit(rd, 1, T + 5.0, code=3)
    _exit(rd, 0, T + 5.1, sig="SIGABRT")
    _stopping(rd, T + 6, alive=[])
    assert culprit(rd, [_launcher(rd, 1, T + 5.5)]) == "rank 1 exited with code 3"


def test_an_abort_is_explained_by_the_terminate_line_cpp_printed_before_it(rd):
    # A collective mismatch (ranks reducing different gradients) aborts a rank from inside gloo: its terminate line
    # is the cause the row must show, not the bare signal
    _start(rd, 0), _start(rd, 1)
    (rd / "launch.log").write_text(
        "[rank1]: warming up\nterminate called after throwing an instance of 'gloo::EnforceNotMet'\n  what():  "
        "[enforce fail at pair.cc:456] op.preamble.length <= op.nbytes. 280 vs 212. Received data size doesn't "
        "match expected size. Is there a distributed collective mismatch?\n")
    _exit(rd, 1, T + 5.0, sig="SIGABRT")
    _stopping(rd, T + 6, alive=[0])
    assert culprit(rd, [_launcher(rd, 1, T + 5.5)]).startswith(
        "rank 1 killed by SIGABRT; first error: terminate called after throwing an instance of 'gloo::EnforceNotMet' "
        "what(): [enforce fail at pair.cc:456] op.preamble.length <= op.nbytes. 280 vs 212. Received data size")


def test_a_crash_written_down_after_its_peers_connection_error_is_still_the_cause(rd):
    # A segfault (or os.abort()) in rank 1's model code: rank 0's "Connection closed by peer" exception is recorded
    # first, and rank 1's signal by its supervisor 2 ms later. The crash is the cause, and the peer's line is not its
    # error; an abort after a plain exception stays that exception's consequence
    _start(rd, 0), _start(rd, 1)
    (rd / "launch.log").write_text("[rank0]: RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by "
                                   "peer [127.0.0.1]:29500\n")
    _failed(rd, 0, T + 5.0, "RuntimeError: [pair.cc:534] Connection closed by peer [127.0.0.1]:29500")
    _exit(rd, 0, T + 5.01, code=1)
    for sig in ("SIGSEGV", "SIGABRT"):
        _exit(rd, 1, T + 5.002, sig=sig)
        _stopping(rd, T + 6, alive=[])
        assert culprit(rd, [_launcher(rd, 1, T + 5.5)]) == f"rank 1 killed by {sig}"
    _failed(rd, 0, T + 5.0, "ValueError: the model's own bug")
    assert culprit(rd, [_launcher(rd, 1, T + 5.5)]).startswith("rank 0 exited with code 1")  # the abort: its effect


def test_a_rank_that_exits_without_an_exception_is_not_explained_by_its_peers_connection_error(rd):
    # os._exit(1) in the model's code: the only error line in the log is its peer's consequence, which is not its
    # cause; os._exit(0) in the middle of training is a failure, not a clean end (no result written)
    _start(rd, 0), _start(rd, 1)
    (rd / "launch.log").write_text("[rank0]: RuntimeError: Connection reset by peer\n")
    _exit(rd, 1, T + 5.0, code=1)
    _failed(rd, 0, T + 5.01, "RuntimeError: Connection reset by peer")
    _exit(rd, 0, T + 5.02, code=1)
    _stopping(rd, T + 6, alive=[])
    assert culprit(rd, [_launcher(rd, 1, T + 5.5)]) == "rank 1 exited with code 1"
    _exit(rd, 1, T + 5.0, code=0, finished=False)
    assert culprit(rd, [_launcher(rd, 1, T + 5.5)]) == ("rank 1 exited with code 0 before it finished (it wrote no "
                                                        "result: an exit in the model's code?)")


@pytest.mark.parametrize("error, code, status", [
    ("SystemExit: 0", 0, "exited with code 0 before it finished"),
    ("SystemExit: 3", 3, "exited with code 3"),
    ("KeyboardInterrupt", 130, "exited with code 130")])
def test_a_rank_that_left_by_sys_exit_or_keyboard_interrupt_is_given_its_own_cause_not_its_peers(rd, error, code,
                                                                                                    status):
    # sys.exit(...) or a KeyboardInterrupt raised in the model's forward on rank 1: its log line reads as no error, so
    # the first error in the joined log was rank 0's consequence ("Connection reset by peer"); its status is its own
    # (sys.exit(3) is code 3, and sys.exit(0) before the result is no clean end)
    _start(rd, 0), _start(rd, 1)
    (rd / "launch.log").write_text(f"[rank0]: RuntimeError: Connection reset by peer\n[rank1]: {error}\n")
    _failed(rd, 1, T + 5.0, error)
    _exit(rd, 1, T + 5.01, code=code, finished=False)
    _failed(rd, 0, T + 5.02, "RuntimeError: Connection reset by peer")
    _exit(rd, 0, T + 5.03, code=1)
    assert culprit(rd, [_launcher(rd, 1, T + 5.5)]) == f"rank 1 {status}; first error: {error}"
    # with its traceback in the log: the line of the user's code it was raised in
    (rd / "launch.log").write_text(
        "[rank0]: RuntimeError: Connection reset by peer\n[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/x/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1776, in _call_impl\n'
        "[rank1]:     return forward_call(*args, **kwargs)\n"
        '[rank1]:   File "/home/u/my_model.py", line 16, in forward\n[rank1]:     sys.exit(self.code)\n'
        f"[rank1]: {error}\n")
    assert culprit(rd, [_launcher(rd, 1, T + 5.5)]) == (f"rank 1 {status}; first error: {error} (raised in forward "
                                                        f"(my_model.py:16))")


@pytest.mark.parametrize("exc, code", [(SystemExit(3), 3), (SystemExit(None), 0), (SystemExit(0), 0),
                                       (SystemExit(256 + 4), 4), (SystemExit("why"), 1), (KeyboardInterrupt(), 130),
                                       (ValueError("x"), 1)])
def test_a_ranks_status_after_an_exception_is_pythons_own(exc, code):
    from harness.rank.life import exit_status

    assert exit_status(exc) == code


def test_torchruns_summary_of_a_failed_worker_is_never_its_cause(rd):
    # os._exit(3) under torchrun: the only line that reads as an error is torchrun's own summary
    _start(rd, 0), _start(rd, 1)
    (rd / "launch.log").write_text("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n")
    _exit(rd, 1, T + 5.0, code=3)
    _stopping(rd, T + 6, alive=[0])
    assert culprit(rd, [_launcher(rd, 1, T + 5.5)]) == "rank 1 exited with code 3"


def test_a_launcher_that_stopped_its_ranks_by_itself_is_named(rd):
    # torchrun asked to stop from outside: it forwards SIGTERM to its ranks and exits 1 with its own words.
    _start(rd, 0), _start(rd, 1)
    (rd / "launch.log").write_text("torch.distributed.elastic.multiprocessing.api.SignalException: Process 50 got "
                                   "signal: 15\n")
    _asked(rd, 0, T + 2.0, "launch"), _asked(rd, 1, T + 2.0, "launch")
    _exit(rd, 0, T + 2.1, sig="SIGTERM"), _exit(rd, 1, T + 2.1, sig="SIGTERM")
    _stopping(rd, T + 3, alive=[])
    assert culprit(rd, [_launcher(rd, 1, T + 2.5)]) == (
        "the launcher (torchrun) exited with code 1 and stopped its ranks; first error: "
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 50 got signal: 15")


def test_a_node_whose_command_failed_first_is_named_with_its_host(rd):
    _start(rd, 0, host="h1")
    (rd / "h2.log").write_text("env: '/x/venv/bin/python': No such file or directory\n")
    _stopping(rd, T + 9, alive=[0], host="h1")
    h1 = _launcher(rd, None, None, host="h1", local=True)
    h2 = Command(launcher="torchrun", returncode=127, ended=T + 1, log=rd / "h2.log", host="h2", local=False,
                 silent=True)
    assert culprit(rd, [h1, h2], name_hosts=True) == (
        "h2: launch exited with code 127 before any rank started there; first error: env: '/x/venv/bin/python': "
        "No such file or directory")


def test_a_rank_gone_with_its_node_is_named_with_its_host(rd):
    # Everything on h2 killed at once: its guard too, so no stop was recorded there.
    _start(rd, 0, host="h1"), _start(rd, 1, host="h2")
    _failed(rd, 0, T + 5.1, "RuntimeError: Connection closed by peer")
    _exit(rd, 0, T + 5.2, code=1, host="h1")
    _stopping(rd, T + 9, alive=[], host="h1")
    h1 = _launcher(rd, 1, T + 5.5, host="h1", local=True)
    h2 = Command(launcher="torchrun", returncode=255, ended=T + 5.0, log=rd / "launch.log", host="h2", local=False)
    assert culprit(rd, [h1, h2], name_hosts=True) == ("rank 1 on h2 killed from outside (no exit status recorded: "
                                                      "SIGKILL, or the OOM killer)")


def test_ranks_left_by_a_per_node_launcher_name_it(rd):
    _start(rd, 0, parent=77), _start(rd, 1, parent=77)
    _stopping(rd, T + 4, alive=[0, 1], orphaned=[0, 1])
    assert outlived(rd, [0, 1]) == ("the process that started them (pid 77: python -m torch.distributed.run) ended "
                                    "while they ran, and compare then stopped them")
    _stopping(rd, T + 4, alive=[0, 1])
    assert outlived(rd, [0, 1]) == "they were still running when it exited, and compare then stopped them"
    _stopping(rd, T + 4, alive=[0])
    assert outlived(rd, [0, 1]) is None


def test_every_rank_accounted_for(rd):
    _start(rd, 0), _start(rd, 1), _start(rd, 2)
    _exit(rd, 0, T + 1, code=0)
    _asked(rd, 1, T + 1, "compare")
    _stopping(rd, T + 0.5, alive=[2])
    kinds = [(e.rank, e.kind) for e in rank_ends(rd)]
    assert kinds == [(0, "clean"), (1, "consequence"), (2, "consequence")]


# ---- many launches, every order of their consequences ------------------------------------------------------------

CAUSES = ("launcher_killed", "worker_killed", "supervisor_killed", "term_from_outside", "raised", "exited", "crashed")


def _scenario(rd: Path, cause: str, rng: random.Random) -> tuple[list[Command], str]:
    """One 2- to 4-rank launch whose cause is `cause` (a victim chosen at random), followed by what it can bring
    about in the other ranks, each at a time that causality allows but in no particular order against the
    launcher's end as compare saw it."""
    n = rng.randint(2, 4)
    victim = rng.randrange(n)
    for k in range(n):
        _start(rd, k)
    t0 = T + rng.uniform(1, 100)  # when the cause happened
    stop = t0 + rng.uniform(0.05, 3.0)  # when compare began stopping
    launcher_end = t0 + rng.uniform(0.0, stop - t0)  # when compare saw the launcher end (before it stopped)
    alive = []
    if cause == "launcher_killed":
        command, expected = _launcher(rd, -9, launcher_end), ("the launcher (torchrun) was killed by SIGKILL from "
                                                              "outside while its ranks ran; the ranks it left were "
                                                              "then stopped")
        first_peer = t0 + rng.uniform(0.0, 0.02)  # a helper of the launcher stops ranks at once
        peers = range(n)
    else:
        command = _launcher(rd, 1, launcher_end)  # a launcher exits 1 once one of its ranks failed
        first_peer = t0 + rng.uniform(0.001, 0.05)
        peers = [k for k in range(n) if k != victim]
        if cause == "worker_killed":
            _exit(rd, victim, t0, sig="SIGKILL")
            expected = f"rank {victim} killed by SIGKILL"
        elif cause == "supervisor_killed":
            expected = f"rank {victim} killed from outside (no exit status recorded: SIGKILL, or the OOM killer)"
        elif cause == "term_from_outside":
            role = rng.choice(["supervisor", "worker"])
            _asked(rd, victim, t0, "outside", role=role, sender_pid=999, sender="kill")
            _exit(rd, victim, t0 + rng.uniform(0.001, 0.01), sig="SIGTERM")
            expected = f"rank {victim} killed by SIGTERM from outside (pid 999: kill)"
        elif cause == "crashed":  # a segfault in the model's code: its supervisor writes the signal late too
            _exit(rd, victim, t0 + rng.uniform(0.001, min(0.5, 0.9 * (stop - t0))), sig="SIGSEGV")
            expected = f"rank {victim} killed by SIGSEGV"
        elif cause == "exited":  # os._exit(3): no exception recorded, and its supervisor writes the exit late, but
            # before it exits itself, so before its launcher (hence compare) can know of it
            _exit(rd, victim, t0 + rng.uniform(0.001, min(0.5, 0.9 * (stop - t0))), code=3)
            expected = f"rank {victim} exited with code 3"
        else:
            _failed(rd, victim, t0)
            _exit(rd, victim, t0 + rng.uniform(0.001, 0.5), code=1)  # its supervisor may write late
            expected = f"rank {victim} exited with code 1"
    for k in peers:
        t = first_peer + rng.uniform(0.0, 0.3)
        what = rng.choice(["launch", "compare", "reset", "abort", "vanish_late", "clean_late"])
        if what == "launch":
            _asked(rd, k, t, "launch", role=rng.choice(["supervisor", "worker"]))
            if rng.random() < 0.7:  # else SIGKILLed after its grace, with no end recorded
                _exit(rd, k, t + 0.01, sig="SIGTERM")
        elif what == "compare":
            _asked(rd, k, stop + 0.01, "compare", sender_pid=1)
            _exit(rd, k, stop + 0.02, sig="SIGTERM")
        elif what == "reset":  # its peer ended first: a consequence failing "by itself", always after the cause
            _failed(rd, k, t, "RuntimeError: Connection reset by peer")
            _exit(rd, k, t + 0.01, code=1)
        elif what == "abort":
            _exit(rd, k, t, sig="SIGABRT")
        elif what == "vanish_late":  # alive when compare began stopping, then SIGKILLed without a word
            alive.append(k)
        else:
            _exit(rd, k, stop + 0.5, sig="SIGKILL")  # compare's sweep reached its worker first
    _stopping(rd, stop, alive=alive)
    return [command], expected


@pytest.mark.parametrize("cause", CAUSES)
def test_the_culprit_is_the_cause_in_any_order_of_its_consequences(tmp_path, cause):
    rng = random.Random(f"culprit-{cause}")
    wrong = []
    for i in range(200):
        rd = tmp_path / f"{cause}-{i}"
        rd.mkdir()
        (rd / "launch.log").write_text("")
        commands, expected = _scenario(rd, cause, rng)
        got = culprit(rd, commands)
        if not got.startswith(expected):
            wrong.append((i, expected, got))
    assert not wrong, wrong[:5]


def test_an_exception_just_before_a_peers_abrupt_exit_is_its_consequence(rd):
    # Seen in a fresh clone's make test (Horovod, rank 1 os._exit(3) at step 5): rank 0's collective failed at the
    # broken connection and its worker wrote that down 4 ms before rank 1's supervisor, told of the exit, wrote it.
    for k in (0, 1):
        _start(rd, k)
    _failed(rd, 0, T + 10.000, "RuntimeError: Horovod has been shut down")
    _exit(rd, 0, T + 10.100, code=1)
    _exit(rd, 1, T + 10.004, code=3)  # no failed record: it ended without an exception
    (rd / "launch.log").write_text("[1]<stderr>:[fault injection] exit at step 5\n")
    assert culprit(rd, [_launcher(rd, 1, T + 11)]).startswith("rank 1 exited with code 3")


def test_an_exception_well_before_a_peers_abrupt_exit_stays_the_cause(rd):
    for k in (0, 1):
        _start(rd, k)
    _failed(rd, 0, T + 10.0)
    _exit(rd, 0, T + 10.1, code=1)
    _exit(rd, 1, T + 12.0, code=3)  # an exit two seconds later
    assert culprit(rd, [_launcher(rd, 1, T + 13)]).startswith("rank 0 exited with code 1")
    _exit(rd, 1, T + 10.05, sig="SIGABRT")  # a peer's abort at the broken connection: a consequence, in its order
    assert culprit(rd, [_launcher(rd, 1, T + 13)]).startswith("rank 0 exited with code 1")
    # and of two exceptions, the first, however close
    _failed(rd, 1, T + 10.01)
    assert culprit(rd, [_launcher(rd, 1, T + 13)]).startswith("rank 0 exited with code 1")


def test_the_oom_killers_count_in_a_memory_cgroup_is_read_at_the_workers_start_and_end(tmp_path, monkeypatch):
    from harness.shared import oom

    monkeypatch.setattr(oom, "kernel_record", lambda pid, since: None)  # no kernel log readable: the count decides
    for version, counts, limit in ((1, "memory.oom_control", "memory.limit_in_bytes"), (2, "memory.events", "memory.max")):
        cg = tmp_path / f"v{version}"
        cg.mkdir()
        (cg / counts).write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n" if version == 1 else
                                 "low 0\nhigh 0\nmax 7\noom 1\noom_kill 2\n")
        (cg / limit).write_text("2147483648\n")
        before = {"cgroup": str(cg), "version": version, "oom_kills": 2, "since": 0.0}
        assert oom.killed(4242, before) is None  # a SIGKILL from elsewhere
        (cg / counts).write_text((cg / counts).read_text().replace("oom_kill 2", "oom_kill 3"))
        assert oom.killed(4242, before) == {"record": f"{counts} of {cg}: oom_kill 2 -> 3", "cgroup": str(cg),
                                            "limit_bytes": 2**31}
        (cg / limit).write_text("max\n" if version == 2 else "9223372036854771712\n")
        assert oom.killed(4242, before)["limit_bytes"] is None  # no limit: none said


def test_a_crash_in_c_code_is_placed_in_the_users_code_from_faulthandlers_dump(rd):
    # An outside check: a segfault in a rank left no line of the model anywhere; ranks now write faulthandler's dump
    # (every thread, the crashing one as "Current thread") and the reason says where the user's code was
    _start(rd, 0), _start(rd, 1)
    (rd / "launch.log").write_text(
        "[1]<stderr>:Fatal Python error: Segmentation fault\n[1]<stderr>:\n"
        "[1]<stderr>:Thread 0x7f (most recent call first):\n"
        '[1]<stderr>:  File "/home/me/other.py", line 5 in wait\n[1]<stderr>:\n'
        "[1]<stderr>:Current thread 0x7e (most recent call first):\n"
        '[0]<stderr>:  File "/home/me/model.py", line 99 in rank0s\n'
        '[1]<stderr>:  File "/usr/lib/python3/site-packages/torch/nn/modules/module.py", line 1 in _call_impl\n'
        '[1]<stderr>:  File "/home/me/model.py", line 109 in forward\n'
        '[1]<stderr>:  File "/home/me/model.py", line 120 in outer\n'
        "[0]<stderr>:RuntimeError: Connection closed by peer\n")
    _exit(rd, 1, T + 5.0, sig="SIGSEGV")
    _failed(rd, 0, T + 5.01, "RuntimeError: Connection closed by peer")
    _exit(rd, 0, T + 5.02, code=1)
    _stopping(rd, T + 6, alive=[])
    assert culprit(rd, [_launcher(rd, 1, T + 5.5)]) == "rank 1 killed by SIGSEGV; crashed in forward (model.py:109)"
    # an abort() (a C++ assert, glibc's "free(): invalid pointer", os.abort in a gradient hook) with no cause line of
    # its own: placed the same way (an outside check: a SIGABRT in a hook read only "killed by SIGABRT")
    dump = (rd / "launch.log").read_text().replace("Segmentation fault", "Aborted")
    (rd / "launch.log").write_text(dump)
    _exit(rd, 1, T + 5.0, sig="SIGABRT")
    assert culprit(rd, [_launcher(rd, 1, T + 5.5)]) == "rank 1 killed by SIGABRT; crashed in forward (model.py:109)"
    # one with its cause ("terminate called after throwing ...") says that cause, not a place
    (rd / "launch.log").write_text("[1]<stderr>:terminate called after throwing an instance of 'c10::Error'\n" + dump)
    assert culprit(rd, [_launcher(rd, 1, T + 5.5)]).startswith(
        "rank 1 killed by SIGABRT; first error: terminate called after throwing an instance of 'c10::Error'")
    _exit(rd, 1, T + 5.0, sig="SIGSEGV")
    (rd / "launch.log").write_text("[0]<stderr>:RuntimeError: Connection closed by peer\n")  # no dump: as before
    assert culprit(rd, [_launcher(rd, 1, T + 5.5)]) == "rank 1 killed by SIGSEGV"


def test_a_rank_whose_model_builder_raised_leaves_the_users_exception_and_its_frames(tmp_path, monkeypatch, capsys):
    # building the model on a rank raises UserCodeError `from None` in compare's code: its traceback held compare's
    # frames alone and its line named compare's class, so the reason lost the user's file and line
    import json

    from harness.rank.life import failed
    from harness.shared.registry import UserCodeError

    monkeypatch.setenv("RANK", "1")
    user = tmp_path / "my_model.py"
    user.write_text("def build():\n    raise RuntimeError('builder fails on rank 1 only')\n")
    namespace: dict = {}
    exec(compile(user.read_text(), str(user), "exec"), namespace)
    try:
        try:
            namespace["build"]()
        except RuntimeError as exc:
            raise UserCodeError("building the model of workload my_model.py:build", exc) from None
    except UserCodeError as wrapped:
        failed(wrapped, tmp_path)
    err = capsys.readouterr().err
    assert f'File "{user}", line 2, in build' in err and err.endswith("RuntimeError: builder fails on rank 1 only\n")
    assert "UserCodeError" not in err
    assert json.loads((tmp_path / "failed-rank1.json").read_text())["error"] == ("RuntimeError: builder fails on "
                                                                                "rank 1 only")


def test_an_exception_class_of_the_users_own_is_placed_by_its_module_qualified_traceback_line(rd):
    # an outside check: "first error: MyErr: a plain custom exception" with no place, where Python's traceback names
    # the class with its module ("compare_user_fw_27e454c0.MyErr: ...") and the rank recorded "MyErr: ..."
    _start(rd, 0), _start(rd, 1)
    (rd / "launch.log").write_text(
        "[rank0]: RuntimeError: Connection reset by peer\n[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/home/u/fw.py", line 33, in fire\n[rank1]:     raise MyErr("a plain custom exception")\n'
        "[rank1]: compare_user_fw_27e454c0.MyErr: a plain custom exception\n")
    _failed(rd, 1, T + 5.0, "MyErr: a plain custom exception")
    _exit(rd, 1, T + 5.01, code=1)
    _failed(rd, 0, T + 5.02, "RuntimeError: Connection reset by peer")
    _exit(rd, 0, T + 5.03, code=1)
    assert culprit(rd, [_launcher(rd, 1, T + 5.5)]) == ("rank 1 exited with code 1; first error: MyErr: a plain "
                                                        "custom exception (raised in fire (fw.py:33))")


def test_an_exception_whose_str_raises_still_fails_its_rank_with_its_class(tmp_path, monkeypatch):
    # an outside check: an exception class whose __str__ raised left its rank exiting 0 with no record ("exited with
    # code 0 before it finished (an exit in the model's code?)"): the ValueError from str() escaped the account
    from harness.rank import life

    class BadStr(Exception):
        def __str__(self):
            raise ValueError("no")

    monkeypatch.setattr(life, "launcher_rank", lambda: 1)
    life.failed(BadStr(), tmp_path)
    got = json.loads(next(tmp_path.rglob("*.json")).read_text())
    assert got["error"] == "BadStr: <exception str() failed>" and life.exit_status(BadStr()) == 1
