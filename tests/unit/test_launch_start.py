"""A launch that cannot even be started in the parent (no file descriptor or port left, a rendezvous store
refused) is a `failed` outcome with the reason, never an exception that ends the whole run: the run goes on to the
next adapter (harness/core/comparison.py), and the launch leaves no descriptor, lock or process behind."""

import errno
import os
import resource
import subprocess
import sys

import pytest

from harness.launching.launch import Launch
from harness.shared.spec import RunSpec

from conftest import REPO


class _Refuses:
    """An adapter whose launch fails in the parent the way the frameworks' do when the process is out of files."""

    name = "x"

    def __init__(self, exc):
        self.exc = exc

    def launch(self, spec_path, spec):
        raise self.exc

    def processes(self, world_size):
        return world_size


def _spec(tmp_path):
    return RunSpec(adapter="x", workload="digits", world_size=2, device="cpu", global_batch=64, steps=5, warmup=1,
                   threads=1, rank_dir=str(tmp_path / "r"))


def _fds():
    return sorted(os.listdir("/proc/self/fd"))


def test_a_launch_that_cannot_start_is_a_failed_row_with_the_limit_named(tmp_path):
    before = _fds()
    launch = Launch(_Refuses(OSError(errno.EMFILE, "Too many open files")), _spec(tmp_path), 30).start(gated=True)
    assert launch.wait_for("timed_done") is False  # the run's pipeline asks, and is told at once
    launch.open_gate()
    out = launch.finish()
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert out.status == "failed"
    assert out.reason == ("the launch could not be started here: OSError: [Errno 24] Too many open files "
                          f"(this process may open {soft} files: raise `ulimit -n`)")
    assert "Traceback" in out.log_tail and "raise self.exc" in out.log_tail  # the whole story, in its log
    assert out.returncode is None and out.ranks == []
    assert _fds() == before  # the gate's lock and the events FIFO are closed again


def test_an_interrupt_of_a_launch_that_never_started_keeps_its_reason(tmp_path):
    launch = Launch(_Refuses(RuntimeError("The server socket has failed to listen on any local network address.\n"
                                          "port: 29500, useIpv6: false")), _spec(tmp_path), 30).start()
    out = launch.interrupt()
    assert (out.status, out.reason) == ("failed", "the launch could not be started here: RuntimeError: The server "
                                        "socket has failed to listen on any local network address. port: 29500, "
                                        "useIpv6: false")


def test_the_first_error_of_a_log_is_the_cause_not_a_cpp_stack_frame(tmp_path):
    from harness.launching.launch_logs import first_error

    log = tmp_path / "launch.log"
    log.write_text(
        "[W1125 04:01:02.1 socket.cpp:752] [c10d] The server socket has failed to bind to [::]:40000.\n"
        "[rank0]: frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x9e\n"
        "[rank0]: frame #1: c10::DistError::DistError(c10::SourceLocation, std::__cxx11::basic_string<char>) + 0x6a\n"
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
        "port: 40000, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use\n")
    assert first_error(log) == (
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
        "port: 40000, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use")


def test_a_program_the_launcher_could_not_find_is_the_cause_not_the_launchers_summary(tmp_path):
    from harness.launching.launch_logs import first_error

    log = tmp_path / "launch.log"
    for missing in ("env: 'python': No such file or directory", "/bin/sh: 1: python: not found",
                    "bash: line 1: python: command not found"):
        log.write_text(f"[1]<stderr>:{missing}\n"
                       "Process 1 exit with status code 127.\n"
                       "Terminating remaining workers after failure of Process 1.\n"
                       "RuntimeError: Horovod detected that one or more processes exited with non-zero status\n")
        assert first_error(log) == missing  # without horovodrun's "[1]<stderr>:": the reason names the rank
    log.write_text("cannot open /etc/nccl.conf: No such file or directory (not used)\nRuntimeError: boom\n")
    assert first_error(log) == "RuntimeError: boom"  # not at the end of its line: not a missing program


def test_mp_spawns_header_above_a_ranks_traceback_is_not_the_error_quoted(tmp_path):
    # a rank's error at its end, under torch.multiprocessing.spawn: the row quoted "-- Process 0 terminated with the
    # following error:" (its header ends in "error:") where torchrun's row quoted the ValueError
    from harness.ground.provenance import REPO
    from harness.launching.launch_logs import first_error

    log = tmp_path / "launch.log"
    log.write_text("Traceback (most recent call last):\n"
                   '  File "/venv/lib/python3.11/site-packages/torch/multiprocessing/spawn.py", line 211, in join\n'
                   "    raise ProcessRaisedException(msg, error_index, failed_process.pid)\n"
                   "torch.multiprocessing.spawn.ProcessRaisedException: \n\n"
                   "-- Process 0 terminated with the following error:\n"
                   "Traceback (most recent call last):\n"
                   f'  File "{REPO}/harness/rank/life.py", line 244, in run\n'
                   "    sys.stdout.flush()\n"
                   "ValueError: I/O operation on closed file.\n")
    assert first_error(log) == "ValueError: I/O operation on closed file."


def test_an_exception_raised_from_another_is_the_error_named_not_its_cause(tmp_path):
    # an adapter's `raise TypeError("Horovod's DistributedOptimizer rebuilds ...; fix: ...") from exc` was reported
    # as the bare TypeError it explains; a second fault while handling one is not the cause, and stays second
    from harness.launching.launch_logs import first_error

    log = tmp_path / "launch.log"
    log.write_text("[0]<stderr>:Traceback (most recent call last):\n"
                   '[0]<stderr>:  File "optimizer.py", line 43, in __init__\n'
                   "[0]<stderr>:TypeError: StrictSGD.__init__() missing 1 required positional argument: 'lr'\n"
                   "[0]<stderr>:\n"
                   "[0]<stderr>:The above exception was the direct cause of the following exception:\n"
                   "[0]<stderr>:\n"
                   "[0]<stderr>:Traceback (most recent call last):\n"
                   '[0]<stderr>:  File "adapters/horovod.py", line 286, in wrap\n'
                   '[0]<stderr>:    raise TypeError(f"Horovod rebuilds it")\n'
                   "[0]<stderr>:TypeError: Horovod rebuilds it; fix: give lr a default\n"
                   "RuntimeError: Horovod detected that one or more processes exited with non-zero status\n")
    assert first_error(log) == "TypeError: Horovod rebuilds it; fix: give lr a default"  # compare's own frame
    # two ranks' tracebacks interleaved (a loaded machine): rank 0's cause came between rank 1's cause and the error
    # raised from it, and rank 1's bare cause was named (flaky in CI)
    one, zero = "[1]<stderr>:", "[0]<stderr>:"
    log.write_text(f"{one}Traceback (most recent call last):\n"
                   f"{one}TypeError: StrictSGD.__init__() missing 1 required positional argument: 'lr'\n"
                   f"{zero}Traceback (most recent call last):\n"
                   f"{zero}TypeError: StrictSGD.__init__() missing 1 required positional argument: 'lr'\n"
                   f"{one}\n{one}The above exception was the direct cause of the following exception:\n{one}\n"
                   f"{zero}\n{zero}The above exception was the direct cause of the following exception:\n"
                   f"{one}Traceback (most recent call last):\n"
                   f"{one}TypeError: Horovod rebuilds it; fix: give lr a default\n"
                   f"{zero}TypeError: Horovod rebuilds it; fix: give lr a default\n")
    assert first_error(log) == "TypeError: Horovod rebuilds it; fix: give lr a default"  # not the bare cause
    log.write_text("ValueError: the first fault\n\nDuring handling of the above exception, another exception "
                   "occurred:\n\nTraceback (most recent call last):\nOSError: a second one\n")
    assert first_error(log) == "ValueError: the first fault"


@pytest.mark.parametrize("summary", [
    "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with exit code 3",
    "RuntimeError: Horovod detected that one or more processes exited with non-zero status, thus causing the job to "
    "be terminated. The first process to do so was:"])
def test_a_launchers_summary_of_a_rank_that_exited_is_never_its_cause(tmp_path, summary):
    # a rank's os._exit(3) was explained by spawn's own "process 1 terminated", Horovod's by its driver's words or a
    # peer's "Horovod has been shut down", a timeout by torchrun's SignalException at compare's own SIGTERM
    from harness.launching.launch_logs import first_error

    log = tmp_path / "launch.log"
    log.write_text("[0]<stderr>:RuntimeError: Horovod has been shut down. This was caused by an exception on one of "
                   f"the ranks or an attempt to allreduce\n{summary}\n")
    assert first_error(log, causes_only=True) is None
    log.write_text(f"{summary}\n")
    assert first_error(log) is None


def test_at_a_timeout_torchruns_words_for_compares_own_stop_are_not_the_cause(tmp_path):
    # `--timeout 30 --stall-timeout 0` on a hung rank: "first error: ...SignalException: Process 11659 got signal: 15",
    # torchrun's words for compare's own SIGTERM. Sent by someone else, they are the cause (test_culprit.py)
    from harness.launching.launch_logs import first_error

    log = tmp_path / "launch.log"
    log.write_text("torch.distributed.elastic.multiprocessing.api.SignalException: Process 11659 got signal: 15\n")
    assert first_error(log, stopped_by_us=True) is None and first_error(log).endswith("got signal: 15")


def test_a_second_stop_signal_says_what_stopping_at_once_loses():
    # The first signal is a request acted on at a safe point; the second stops at once, and once did so silently.
    # Real signals, in a process of its own (the handlers are process-wide).
    code = ("import os, signal\n"
            "from harness.launching import interrupt\n"
            "interrupt.install()\n"
            "os.kill(os.getpid(), signal.SIGINT)\n"
            "print('requested', flush=True)\n"
            "try:\n"
            "    interrupt.check()\n"
            "except KeyboardInterrupt:\n"
            "    print('stopped at the safe point', flush=True)\n"
            "try:\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    print('not stopped', flush=True)\n"
            "except KeyboardInterrupt:\n"
            "    print('stopped at once', flush=True)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                          check=False)
    assert (proc.returncode, proc.stdout.splitlines()) == (0, ["requested", "stopped at the safe point",
                                                               "stopped at once"])
    assert proc.stderr == ("interrupted again: stopping at once, with no report; records.jsonl keeps the rows that had "
                           "finished, and a launch still running is not recorded\n")


def test_a_dataloader_workers_error_is_quoted_with_the_workers_own_exception(tmp_path):
    from harness.launching.launch_logs import first_error

    log = tmp_path / "launch.log"
    log.write_text("ValueError: Caught ValueError in DataLoader worker process 0.\n"
                   "Original Traceback (most recent call last):\n"
                   '  File "/home/me/data.py", line 208, in __getitem__\n'
                   '    raise ValueError("row 1830 is corrupt")\n'
                   "ValueError: row 1830 is corrupt\n\n"
                   "RuntimeError: Connection closed by peer\n")
    # with the user's line it was raised in (an outside check: a failed row never named it)
    assert first_error(log) == ("ValueError: Caught ValueError in DataLoader worker process 0. (ValueError: row 1830 "
                                "is corrupt) (raised in __getitem__ (data.py:208))")


def test_a_dataloader_worker_killed_by_a_signal_is_named_with_the_signal(tmp_path):
    # An outside check: a worker killed with SIGKILL was reported as torch's "exited unexpectedly", the error raised
    # from the one that names the signal
    from harness.launching.launch_logs import first_error

    log = tmp_path / "r.log"
    log.write_text(
        "Traceback (most recent call last):\n"
        '  File "torch/utils/data/dataloader.py", line 1275, in _try_get_data\n'
        "    data = self._data_queue.get(timeout=timeout)\n"
        "RuntimeError: DataLoader worker (pid 5133) is killed by signal: Killed. \n\n"
        "The above exception was the direct cause of the following exception:\n\n"
        "Traceback (most recent call last):\n"
        '  File "harness/rank/train.py", line 10, in run\n'
        "RuntimeError: DataLoader worker (pid(s) 5133) exited unexpectedly\n")
    assert first_error(log) == ("RuntimeError: DataLoader worker (pid(s) 5133) exited unexpectedly (raised from "
                                "RuntimeError: DataLoader worker (pid 5133) is killed by signal: Killed.)")


def test_a_dead_orphan_is_reaped_while_a_launch_runs_and_a_launch_command_never():
    # A rank's DataLoader worker, re-parented to compare (the subreaper) when the launcher killed its rank, stayed a
    # zombie while the launch ran, so DeepSpeed's launcher waited its full 30 s for it to end (a failed row 30 s
    # late, or a stall under a shorter --stall-timeout). The launch's own command is a Popen's to wait for: reaping
    # it would lose its exit code.
    program = r"""
import os, subprocess, sys
import psutil
from harness.shared.proc import become_subreaper
from harness.launching.reaper import LEADERS, reap_orphans

become_subreaper()
leader = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
LEADERS.add(leader.pid)
r, w = os.pipe()
# a process that leaves a child behind and exits: the child (cat) is re-parented to us, and ends at our close(w)
subprocess.run([sys.executable, "-c", "import subprocess, sys; subprocess.Popen(['cat'], stdin=sys.stdin)"],
               stdin=r, check=True)
os.close(r)
orphans = [p for p in psutil.Process().children() if p.pid != leader.pid]
assert [p.name() for p in orphans] == ["cat"], orphans
os.close(w)
for pid in (orphans[0].pid, leader.pid):  # until each has ended, leaving it to be reaped
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
print(reap_orphans(), not psutil.pid_exists(orphans[0].pid), leader.wait())
"""
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.stdout.split() == ["1", "True", "3"], out.stderr


def test_the_users_line_is_read_from_the_traceback_right_above_the_error_only(tmp_path):
    # an error printed with no traceback of its own was given a frame of an earlier, unrelated traceback
    from harness.launching.launch_logs import first_error

    log = tmp_path / "r.log"
    tb = ('Traceback (most recent call last):\n  File "/home/me/model.py", line 7, in forward\n'
          "    return self.a(x)\n           ^^^^^^^^^\n")
    log.write_text(f"{tb}ValueError: first\n")
    assert first_error(log) == "ValueError: first (raised in forward (model.py:7))"
    ours = ('Traceback (most recent call last):\n  File "workloads/batch.py", line 64, in call\n'
            '  File "/x/site-packages/torch/nn/parallel/distributed.py", line 1, in forward\n')
    log.write_text(f"{ours}RuntimeError: Expected to have finished reduction\n")  # DDP's own check: no user line
    assert first_error(log) == "RuntimeError: Expected to have finished reduction"
    log.write_text(f"{tb}UserWarning: handled and printed\n[fault injection] exit at step 5\n")
    assert first_error(log, containing="[fault injection]") == "[fault injection] exit at step 5"
