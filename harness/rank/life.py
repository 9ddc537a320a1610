"""A rank's life: read the spec, guard against an orphaned run, import, join the group, then train or benchmark.

Runs in: every rank. The rank writes what it measured to `<rank_dir>/rank<k>.json` before its final barrier and
teardown; the parent (harness/launching/launch.py) turns the rank files into one record. Nothing here knows which
adapter or workload it runs.

How a rank ended is known for certain, whatever killed it: the process a launcher starts forks at once (before torch is
imported) into a tiny supervisor, which stays the process the launcher knows, and the worker, which does the work. The
supervisor forwards signals to the worker, waits for it, writes `exit-rank<k>.json` (exit code, or the signal that
killed it, and when) and then ends the same way, so the launcher sees what it would have seen. A launch whose rank 1 was
killed by SIGKILL is then reported as exactly that, not as the surviving rank's "Connection reset by peer". Both the
supervisor and the worker record the first request to stop they receive and who sent it, and the worker its own failure,
each before acting on it (harness/shared/witness.py), so the parent can tell the rank that ended a launch from the ranks
that its launcher or compare then stopped (harness/launching/culprit.py). The worker leaves with os._exit once its
result is written and its process group left: the interpreter's teardown of torch (about a second) is not worth waiting
for.

Phase marks: every rank records wall-clock times of its milestones (process created, entry, imports done,
process group ready, set-up done, warm-up done, timed steps done, eval done, result written) in `marks`, so the
parent can show where a launch's time goes.

Fault injection for tests: see harness/rank/faults.py.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from harness.rank.faults import fault_for, inject
from harness.rank.identity import launcher_rank
from harness.shared import oom, rank_result
from harness.shared.proc import boot_id, pid_namespace
from harness.shared.spec import PARENT_BOOT_ENV, PARENT_PGID_ENV, PARENT_PID_ENV, PARENT_PIDNS_ENV, RunSpec
from harness.shared.text import shorten
from harness.shared.witness import STOP_SIGNALS, Witness, command_of, failed_path, launch_lineage, write_json


def process_start_wall() -> float | None:
    """Wall-clock time at which this process was created (from /proc: start ticks since boot + boot time)."""
    try:
        stat = Path("/proc/self/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, counted after the command name
        btime = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                     if line.startswith("btime"))
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, StopIteration, IndexError):
        return None


def host_facts() -> dict:
    """Where this rank runs, for the record: hostname, the interface it was told to use, the machine's boot id
    (ranks that report the same one share one kernel: simulated hosts, or node ranks on loopback)."""
    return {"hostname": socket.gethostname(), "iface": os.environ.get("GLOO_SOCKET_IFNAME") or "auto",
            "boot_id": boot_id() or None}


def watch_parent() -> None:
    """If `compare` dies (even by SIGKILL), kill this rank's whole process group within a moment.

    The launcher (torchrun's agent, horovodrun, ...) gets a parent-death signal from harness/launching/launch.py, but
    ranks are its children, not compare's: without this, a `kill -9` of compare leaves them training to the end, and a
    hung rank forever. A pidfd makes the wait a blocking poll in a daemon thread: no CPU while compare lives.

    Only where compare's pid means compare: on its machine and in its PID namespace. A rank on another host, or
    started there in a PID namespace of its own (the simulated hosts), or by slurmd, would find another process
    or none under that number; it is stopped by its launcher's end instead (harness/launching/nodeguard.py, srun)."""
    pid = os.environ.get(PARENT_PID_ENV)
    if not pid:
        return  # started by hand, not by compare
    ns, boot = os.environ.get(PARENT_PIDNS_ENV), os.environ.get(PARENT_BOOT_ENV)
    if (ns is not None and ns != pid_namespace()) or (boot is not None and boot != boot_id()):
        return
    try:
        fd = os.pidfd_open(int(pid))
    except ProcessLookupError:
        _die()
    except (OSError, AttributeError, ValueError):
        return  # no pidfd on this kernel/platform: the launcher's parent-death signal is what is left

    def wait():
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.poll()  # readable when the process has exited
        _die()

    threading.Thread(target=wait, name="compare-parent-watchdog", daemon=True).start()


def _die() -> None:
    print("[compare] the compare process is gone: stopping this launch", file=sys.stderr, flush=True)
    own, parents = os.getpgrp(), os.environ.get(PARENT_PGID_ENV)
    if parents is None or own != int(parents):  # never signal compare's own group (a rank it runs directly)
        os.killpg(own, signal.SIGKILL)
    os._exit(137)


class Marks(dict):
    """Named wall-clock milestones of this rank."""

    def __call__(self, name: str) -> None:
        self[name] = time.time()


_FORWARD = (*STOP_SIGNALS, signal.SIGUSR1, signal.SIGUSR2)
_PR_SET_PDEATHSIG = 1
_STACKS = None
"""The open file faulthandler writes this rank's stacks into on SIGUSR1 (kept open for the process's life)."""


def exit_path(rank_dir: Path, rank: int) -> Path:
    return rank_dir / f"exit-rank{rank}.json"


def _supervise(rank_dir: Path) -> set[int]:
    """Fork; return in the worker (the launch's processes above the supervisor: harness/shared/witness.py). The
    supervisor never returns: it waits, records and mirrors the worker's end.

    It takes its signals synchronously (sigwaitinfo), which tells it who sent each: a request to stop is recorded
    with its sender before it is forwarded (harness/shared/witness.py), and the worker's end is read only after every
    request already pending (the kernel hands over the lowest-numbered pending signal first, and every stop signal
    is numbered below SIGCHLD), so a rank stopped by its launcher or by compare never looks like one that died of
    its own accord."""
    rank, me = launcher_rank(), os.getpid()
    started = {"rank": rank, "supervisor_pid": me, "start": time.time(), "host": socket.gethostname(),
               "parent_pid": os.getppid(), "parent": command_of(os.getppid())}
    memory = oom.snapshot()  # the OOM killer's count before the worker exists, to read it again at its end
    lineage = launch_lineage()
    watched = {*_FORWARD, signal.SIGCHLD}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, watched)  # from before the fork: no request is missed
    worker = os.fork()
    if worker == 0:
        # The stop signals stay blocked until the worker's own witness takes them (_witness_stop_requests): one
        # sent in between waits for it, instead of ending the worker unrecorded.
        signal.pthread_sigmask(signal.SIG_SETMASK, before | set(STOP_SIGNALS))
        try:  # the worker dies with its supervisor (a kill -9 of the process the launcher knows)
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
        if os.getppid() != me:
            os._exit(137)
        return lineage
    witness = Witness(rank_dir, rank, "supervisor", lineage)
    write_json(rank_dir / f"start-rank{rank}.json", {**started, "worker_pid": worker})
    while True:
        info = signal.sigwaitinfo(watched)
        if info.si_signo == signal.SIGCHLD:
            pid, status, usage = os.wait4(worker, os.WNOHANG)
            if pid:
                break
            continue  # stopped or continued, not ended
        if info.si_signo in STOP_SIGNALS:
            witness.record(info)
        try:
            os.kill(worker, info.si_signo)
        except ProcessLookupError:
            pass
    # ru_maxrss: the worker's peak resident memory in KiB (Linux), whatever ended it
    ended = {**started, "worker_pid": worker, "time": time.time(), "max_rss_bytes": usage.ru_maxrss * 1024}
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        ended.update(signal=signal.Signals(sig).name, code=None)
        if sig == signal.SIGKILL:  # the OOM killer's signal: its own record says whether it sent it
            ended["oom"] = oom.killed(worker, memory)
    else:
        sig, ended["signal"], ended["code"] = None, None, os.WEXITSTATUS(status)
    try:
        write_json(exit_path(rank_dir, rank), ended)
    except OSError:
        pass
    if sig is not None:
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL and SIGSTOP have no handler to reset
            pass
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(me, sig)
        os._exit(128 + sig)
    os._exit(ended["code"])


def _witness_stop_requests(rank_dir: Path, rank: int, lineage: set[int]) -> None:
    """In the worker, before any other thread exists: every request to stop is taken by one thread of its own
    (sigwaitinfo: every other thread, started later, inherits the blocked mask), which records it and who sent it
    (a launcher's helper signals workers directly: Horovod's middleman, the DeepSpeed launcher's process-tree
    terminate), then lets it end the process as it would have. A child that Python forks gets the mask back
    (os.register_at_fork); a program the worker execs keeps it, and is stopped by compare's SIGKILL instead."""
    supervisor = os.getppid()
    witness = Witness(rank_dir, rank, "worker", lineage | {supervisor}, supervisor=supervisor)
    stop = set(STOP_SIGNALS)
    for sig in stop:  # what the signal does once recorded: end the process (no KeyboardInterrupt)
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    os.register_at_fork(after_in_child=lambda: signal.pthread_sigmask(signal.SIG_UNBLOCK, stop))

    def wait() -> None:
        info = signal.sigwaitinfo(stop)
        witness.record(info)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stop)  # this thread alone: the pending signal ends the process
        os.kill(os.getpid(), info.si_signo)

    threading.Thread(target=wait, name="compare-stop-witness", daemon=True).start()


def run(spec_path: str | Path) -> None:
    marks = Marks(process_start=process_start_wall())
    marks("entry")
    spec = RunSpec.load(spec_path)
    rank_dir = Path(spec.rank_dir)
    _witness_stop_requests(rank_dir, launcher_rank(), _supervise(rank_dir))
    import faulthandler

    # The parent's stall watch (harness/launching/launch.py) asks a rank that stopped progressing where it is: every
    # thread's
    # Python stack, written from the signal handler itself (so a thread blocked in C code answers too) into this
    # rank's own file, which the parent copies into the launch log (ranks writing at once to one log interleave).
    global _STACKS
    try:
        _STACKS = open(Path(spec.rank_dir) / f"stacks-rank{launcher_rank()}.txt", "w")  # noqa: SIM115 - kept open
        faulthandler.register(signal.SIGUSR1, file=_STACKS, all_threads=True)
    except OSError:
        pass
    # A crash in C code (a segfault in an extension, an abort) writes every thread's Python stack to the rank's
    # stderr, the launch log, before the process dies: the line of the user's model it happened in.
    try:
        faulthandler.enable(all_threads=True)
    except (ValueError, RuntimeError, OSError, AttributeError):  # a stderr with no file descriptor: no stack, no harm
        pass
    code = 0
    try:
        _work(spec, marks)
    except BaseException as exc:  # noqa: BLE001 - the worker always leaves through os._exit below
        code = exit_status(exc)  # first: what the failure's account raises must not leave this rank exiting 0
        failed(exc, rank_dir)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def failed(exc: BaseException, rank_dir: Path) -> None:
    """What a rank whose work `exc` ended leaves for the parent: its failed-rank record (the exception in one line),
    before its traceback on stderr (the launch log). Where the user's code raised through compare's wrapper
    (UserCodeError: building their model, say, raised `from None` in compare's code), their own exception and its
    traceback, whose frames name their file and line."""
    import traceback

    from harness.shared.registry import UserCodeError

    shown = exc.exc if isinstance(exc, UserCodeError) else exc
    text = _text(shown)
    try:  # before the traceback and the exit: a peer's failure that this one causes comes after it
        write_json(failed_path(rank_dir, launcher_rank()),
                   {"rank": launcher_rank(), "time": time.time(),
                    "error": shorten(f"{type(shown).__name__}: {text}" if text else type(shown).__name__)})
    except OSError:
        pass
    try:
        traceback.print_exception(shown)  # prints "<exception str() failed>" itself where str() raises
    except Exception:  # noqa: BLE001 - a traceback that cannot be printed: the record above says the error
        pass


def _text(exc: BaseException) -> str:
    """str(exc), or what Python's own traceback prints where that raises (an exception class whose __str__ is
    broken: the rank must still say it failed, and with which exception)."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - the user's __str__
        return "<exception str() failed>"


def exit_status(exc: BaseException) -> int:
    """The status a rank leaves with after `exc` ended its work, as Python's own exit gives it: sys.exit(3) in the
    user's code is code 3 (not 1, as for any other exception), sys.exit() and sys.exit(0) code 0 (a stop before the
    rank's result, which the parent reads as a failure all the same), sys.exit("why") code 1, a KeyboardInterrupt
    130."""
    if isinstance(exc, KeyboardInterrupt):
        return 130
    if isinstance(exc, SystemExit):
        if exc.code is None:
            return 0
        return exc.code & 0xFF if isinstance(exc.code, int) else 1
    return 1


def bind_cores(local_rank: int, threads: int) -> list[int]:
    """Bind every thread of this process (the framework's communication threads that set-up started, and through
    inheritance every thread started later) to its own `threads` of the usable cores: local rank k gets the
    k x threads-th on, wrapping round when there are more processes than cores. Unbound, two ranks on two cores
    let the scheduler move their compute and communication threads around, and ~30% of gloo calls waited a
    scheduler tick (~4 ms) here; bound, hardly any did (README, "How it measures")."""
    usable = sorted(os.sched_getaffinity(0))
    mine = sorted({usable[(local_rank * threads + i) % len(usable)] for i in range(threads)})
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), mine)
        except OSError:  # a thread that ended meanwhile
            pass
    return mine


def _any_thread_affinity() -> list[int]:
    """Every core some thread of this process may run on (binding that missed a thread shows here)."""
    cores: set[int] = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            cores |= os.sched_getaffinity(int(tid))
        except OSError:
            pass
    return sorted(cores)


def _work(spec: RunSpec, marks: Marks) -> None:
    watch_parent()
    from harness.shared import progress as progress_file

    progress = progress_file.Writer(spec.progress_path)
    # Only rank 0 speaks in the progress file: before its group is joined, the rank its launcher gave it says which
    # (a peer's "setup" read as rank 0's would hide a rank 0 that never said a word from the parent's stall watch).
    opened = progress.enabled
    progress.enabled = opened and launcher_rank() == 0
    progress.own_slot(launcher_rank())  # by the rank its stacks file is named after (a stall names the rank)
    early = fault_for(spec, launcher_rank())
    if early and early[1] == "start":  # before this rank's first word (tests of the stall watch's start-up case)
        inject(*early)
    progress.phase("importing")
    import torch

    import adapters

    # Threads are fixed explicitly for every launcher (torchrun exports OMP_NUM_THREADS=1, mp.spawn does not).
    torch.set_num_threads(spec.threads)
    adapter = adapters.get(spec.adapter)(spec.knobs, spec.device)
    adapter.import_framework()
    marks("imports_done")

    def adapter_phase(text: str) -> None:
        """An adapter's word on what a slow set-up is doing (a one-time JIT build): the live progress line shows
        it, and the parent prints it once where there is no live line (CI logs, pipes)."""
        progress.phase(text)
        progress_file.send_event(Path(spec.rank_dir), progress_file.NOTE + text)

    adapter.phase = adapter_phase
    progress.phase("setup")
    info = adapter.setup(spec)
    cores = bind_cores(info.local_rank, spec.threads) if spec.bind_cores else None
    marks("init_done")
    progress.enabled = opened and info.rank == 0
    fault = fault_for(spec, info.rank)
    def keep(result) -> None:
        """Write `result` as this rank's, with what every result carries (marks, cores, host)."""
        result.marks = dict(marks)
        result.cpu_affinity = cores if cores is not None else sorted(os.sched_getaffinity(0))
        result.cpu_affinity_any_thread = _any_thread_affinity()
        result.host = host_facts()
        rank_result.write(spec.rank_result_path(info.rank), result)

    if spec.mode == "comm":
        from harness.rank import comm_cells as comm

        result = comm.run(spec, adapter, info, progress.phase)
    elif spec.mode == "contention":
        from harness.rank import compute_profile as profile

        progress.phase("compute contention and the step's parts")  # where a --timeout finds rank 0
        result = profile.contention(spec, adapter, info)
    else:
        from harness.rank import train

        result = train.run(spec, adapter, info, marks, progress, fault, keep)
    marks("result_written")
    keep(result)
    adapter.barrier()
    if fault and fault[1] == "end":
        inject(*fault)
    progress.phase("shutdown")
    adapter.teardown()
