"""A rank's life: read the spec, guard against an orphaned run, import, join the group, then train or benchmark.

Runs in: every rank. The rank writes what it measured to `<rank_dir>/rank<k>.json` before its final barrier and
teardown; the parent (harness/launch.py) turns the rank files into one record. Nothing here knows which adapter
or workload it runs.

Phase marks: every rank records wall-clock times of its milestones (process created, entry, imports done,
process group ready, set-up done, warm-up done, timed steps done, eval done, result written) in `marks`, so the
parent can show where a launch's time goes.

Fault injection for tests: see harness/rank/faults.py.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import threading
import time
from pathlib import Path

from harness.rank.faults import fault_for, inject
from harness.spec import PARENT_PGID_ENV, PARENT_PID_ENV, RunSpec


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


def watch_parent() -> None:
    """If `compare` dies (even by SIGKILL), kill this rank's whole process group within a moment.

    The launcher (torchrun's agent, horovodrun, ...) gets a parent-death signal from harness/launch.py, but ranks
    are its children, not compare's: without this, a `kill -9` of compare leaves them training to the end, and a
    hung rank forever. A pidfd makes the wait a blocking poll in a daemon thread: no CPU while compare lives."""
    pid = os.environ.get(PARENT_PID_ENV)
    if not pid:
        return  # started by hand, not by compare
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


def write_result(path: Path, result: dict) -> None:
    """Atomically (a per-process temp name: ranks may share a directory)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, path)


def run(spec_path: str | Path) -> None:
    marks = Marks(process_start=process_start_wall())
    marks("entry")
    watch_parent()
    from harness import progress as progress_file

    spec = RunSpec.load(spec_path)
    progress = progress_file.Writer(spec.progress_path)
    progress.phase("importing")
    import torch

    import adapters

    # Threads are fixed explicitly for every launcher (torchrun exports OMP_NUM_THREADS=1, mp.spawn does not).
    torch.set_num_threads(spec.threads)
    adapter = adapters.get(spec.adapter)(spec.knobs, spec.device)
    adapter.import_framework()
    marks("imports_done")
    adapter.phase = progress.phase  # an adapter may say what a slow set-up is doing (a one-time JIT build)
    progress.phase("setup")
    info = adapter.setup(spec)
    marks("init_done")
    progress.enabled = progress.enabled and info.rank == 0
    fault = fault_for(spec, info.rank)
    if spec.mode == "comm":
        from harness.rank import comm

        result = comm.run(spec, adapter, info)
    else:
        from harness.rank import train

        result = train.run(spec, adapter, info, marks, progress, fault)
    marks("result_written")
    result["marks"] = dict(marks)
    write_result(spec.rank_result_path(info.rank), result)
    adapter.barrier()
    if fault and fault[1] == "end":
        inject(*fault)
    progress.phase("shutdown")
    adapter.teardown()
