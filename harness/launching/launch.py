"""Start one adapter's ranks in their own process group, bounded in time, and collect what they wrote.

Runs in: the parent. A crash, a non-zero exit or a hang of one launch becomes an outcome with a status and the
tail of its log; it never raises into the comparison, so the next adapter still runs. Ctrl-C or SIGTERM kill the
whole launch and give an `interrupted` outcome, after which the caller stops.

Nothing a launch starts may outlive it or the `compare` process:
- the launcher (torchrun's agent, horovodrun, ...) gets a parent-death signal (`setpriv --pdeathsig KILL`), so a
  `kill -9` of compare takes it down at once;
- every rank watches compare's pid (harness/rank/life.py) and kills its own process group when compare is gone;
- after a launch ends, whatever it left behind (processes marked with this launch's id, re-parented to compare,
  which is a child subreaper) is killed, including ranks a launcher put in sessions of their own (Horovod does).

The parent waits on the launch with a blocking poll on a pidfd (no busy polling) and wakes only to redraw the
progress line, at most once a second.

A multi-node launch may be several commands, one per node (torchrun on every node, mp.spawn per node), each with
the host it runs on (adapters/base.py: LaunchPlan.nodes). They start together, each in its own process group;
a command for another host runs as `ssh HOST 'cd REPO && env K=V ... python -m harness.launching.nodeguard ... ARGV'`,
passing only the harness's variables, the plan's env and PATH with the venv first (ssh gives a fresh environment,
as on a real cluster), under a guard that is to that host what compare is to this one (harness/launching/nodeguard.py).
The parent waits for all of them; when one fails, the others get a short grace to fail by themselves (their own
error lines are the useful ones) and are then stopped, so a dead node fails the row at once, not at --timeout.
Each command logs to its own file, joined into launch.log (one section per node) when the launch has ended.

This module supervises and assembles the outcome; the commands' environments are harness/launching/rank_env.py's,
reading logs and rank files is harness/launching/launch_logs.py's, and stopping processes is
harness/launching/reaper.py's.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import select
import shlex
import signal
import subprocess
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from adapters.base import Adapter, HostCommand, LaunchPlan, using_interpreter
from adapters.launchers import launcher_stopped
from harness.ground.provenance import REPO
from harness.launching import hosts, interrupt, leftovers, machine, nodeguard, stalled
from harness.launching.culprit import Command, culprit, describe, launcher_name, outlived
from harness.launching.outcome import Outcome
from harness.launching.launch_logs import (first_error, join_logs, rank_records, read_log, silent_hosts,
                                           start_error, tail)
from harness.launching.rank_env import child_env, remote_env, ssh_argv
from harness.launching.reaper import (LEADERS, describe_launch, kill_groups, kill_leftovers, parent_death_prefix,
                                     reap_orphans)
from harness.shared import progress as progress_file
from harness.shared import rank_result
from harness.shared.spec import STALL_S, RunSpec
from harness.shared.witness import launch_id, note_stopping

UI_INTERVAL_S = 1.0
PAUSED_S = 10.0
"""A gap this long between two turns of a wait loop, which turns at least every UI_INTERVAL_S: compare itself was
stopped (Ctrl-Z, SIGSTOP) while the launch went on, not the launch slow: the deadline and the stall watch move on by
it, and a command that exited meanwhile is reaped before either is read (a launch that ended during a Ctrl-Z was
recorded as a timeout at SIGCONT)."""
"""How often the parent wakes to redraw the progress line while a launch runs."""
NODE_GRACE_S = 5.0
"""After one command of a multi-node launch failed: how long the others may take to fail by themselves."""
STACK_DUMP_WAIT_S = 5.0
"""How long the stacks a stall asked for may take to reach the log (until it stops growing)."""




@dataclass
class _Running:
    """One command of a launch, started."""

    command: HostCommand
    proc: subprocess.Popen
    log: Path
    pidfd: int | None
    stdin: IO[bytes] | None
    """The write end of a remote command's stdin: closing it tells the command's guard to stop it."""
    exited_at: float | None = None

    @property
    def where(self) -> str:
        return self.command.host or "this machine"


class Launch:
    """One launch of an adapter's ranks, started in its own process group and followed until it has ended.

        launch = Launch(adapter, spec, timeout_s).start(gated=True)   # returns at once
        launch.open_gate()                  # its ranks may begin warm-up (the previous launch has ended)
        launch.wait_for("timed_done")       # rank 0 says its timed steps are over (or the launch ended)
        outcome = launch.finish()           # wait for the end (bounded), kill what is left, collect

    The timeout counts from the moment the gate opens (a launch waiting at the gate is waiting for another), and so
    does the stall watch: a launch whose rank 0 reports no new phase or step for `stall_s` is stopped as a timeout
    ("stalled: ..."), every local rank's Python stacks written to the log first (SIGUSR1, which each rank's worker
    answers with faulthandler) and every process of the launch listed with its state, so a hang says where it hung
    instead of waiting out the whole timeout. On one machine the watch counts from the gate, so a launch whose rank
    0 never says a word (stuck before its worker began) is caught too; on several hosts, where rank 0 may run
    elsewhere and never write here, it starts with rank 0's first word.
    """

    def __init__(self, adapter: Adapter, spec: RunSpec, timeout_s: float,
                 on_progress: Callable[[dict], None] | None = None, stall_s: float | None = STALL_S,
                 clock: Callable[[], float] = time.monotonic):
        self.adapter, self.spec, self.timeout_s, self.on_progress = adapter, spec, timeout_s, on_progress
        self.clock = clock
        """Monotonic seconds: what the deadline, the stall watch and the launch's durations are read from."""
        self.stall_s = stall_s if stall_s and math.isfinite(stall_s) else None
        self._seen: tuple | None = None
        """Rank 0's last (phase, step) seen, and since when (monotonic); None until the gate opens."""
        self._seen_at: float | None = None
        self._last_turn: float | None = None
        self.paused_s = 0.0
        """Seconds compare itself was stopped while waiting for this launch (PAUSED_S)."""
        self.stalled = False
        self.stall_cause: str | None = None
        self.stacks = ""
        """The stalled ranks' stacks, appended to the launch log once every process of the launch has ended (a
        launcher still writing to it would overwrite them)."""
        self.dumps: dict[int, str] = {}
        """Each rank's stack dump, by its rank (harness/launching/stalled.py reads them)."""
        self.stalled_rank: int | None = None
        """The rank a stall found behind every other (harness/launching/stalled.py), if any."""
        self.silent: dict[int, str] = {}
        """Rank -> why it gave no stacks when a stall asked for them (stopped, or blocking the signal)."""
        self.loaders = ""
        """Where the stalled ranks' DataLoader workers were, in words, where one was outside the DataLoader's own
        machinery (harness/launching/stalled.py: loader_text)."""
        self.rank_dir = Path(spec.rank_dir)
        self.log_path = self.rank_dir / "launch.log"
        self.running: list[_Running] = []
        self.events: list[str] = []
        self.status: str | None = None
        self.reason = ""
        self.failed: _Running | None = None
        """The first command that exited non-zero."""
        self.failed_at = 0.0
        self.concurrent: list[dict] = []
        """Other compare runs alive on this machine when the timed steps began (harness/launching/machine.py)."""
        self.plan: LaunchPlan | None = None
        self.processes = 0
        self.launch_id = ""
        self.load: list[float] = []
        self.deadline: float | None = None
        self.gate_opened: float | None = None
        self._gate: int | None = None
        self._events: int | None = None
        self.stopping_at = math.inf
        """When compare began stopping the launch (monotonic), once it has."""
        self.ledger_entry: leftovers.Entry | None = None
        """The machine-wide files the launch's framework may leave, recorded while it runs."""
        self.start_error: str | None = None
        """Why the launch could not be started (start() caught it): finish() then says `failed` with it."""

    @property
    def proc(self) -> subprocess.Popen | None:
        """The launch's first command (the only one, except in a launch of one command per node)."""
        return self.running[0].proc if self.running else None

    # ---- starting -------------------------------------------------------------------------------------------
    def start(self, gated: bool = False) -> Launch:
        """Start the launch and return at once. A launch that cannot even be started here (no file descriptor or
        port left, a framework's rendezvous store refused, its launcher missing from PATH) does not raise: what
        it had started is stopped, and finish() says `failed` with the reason, so the run goes on to the next."""
        self.launch_wall, self.t0 = time.time(), self.clock()
        try:
            return self._start(gated)
        except Exception as exc:  # noqa: BLE001 - any failure here is this launch's, never the run's
            self.start_error = start_error(exc)
            try:
                with open(self.log_path, "a", encoding="utf-8") as log:
                    log.write("compare: the launch could not be started:\n" + traceback.format_exc())
            except OSError:
                pass
            self.status, self.reason = "failed", self.start_error
            if self.plan is None:
                self.plan = LaunchPlan(argv=[])
            self._gate_and_events_closed()
            return self

    def _gate_and_events_closed(self) -> None:
        self._close_gate_fd()
        if self._events is not None:
            os.close(self._events)
            self._events = None

    def _start(self, gated: bool) -> Launch:
        spec, rank_dir = self.spec, self.rank_dir
        rank_dir.mkdir(parents=True, exist_ok=True)
        if spec.topology is not None and not spec.topology.port:
            spec.topology = replace(spec.topology, port=hosts.free_port())  # a fresh rendezvous port per launch
        spec_path = rank_dir / "spec.json"
        spec.save(spec_path)
        progress_file.create(spec.progress_path, spec.warmup + spec.steps, spec.world_size)
        self._gate = None
        if gated:  # an ungated launch has no gate file at all, so its ranks never take an flock (NFS may refuse)
            self._gate = os.open(rank_dir / progress_file.GATE, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self._gate, fcntl.LOCK_EX)
        os.mkfifo(rank_dir / progress_file.EVENTS)
        # Read and write: the parent is a writer too, so the FIFO never reports hang-up between rank messages.
        self._events = os.open(rank_dir / progress_file.EVENTS, os.O_RDWR | os.O_NONBLOCK)
        with using_interpreter(spec.python):  # a row's python=PATH: its launch commands start that interpreter
            self.plan = self.adapter.launch(spec_path, spec)
        self.processes = self.adapter.processes(spec.world_size)
        self.launch_id = launch_id(rank_dir)
        if self.plan.leftovers:  # recorded before any process of it exists (harness/launching/leftovers.py)
            self.ledger_entry = leftovers.Entry(self.launch_id, self.adapter.name, self.plan.leftovers)
        if self.plan.env_file is not None:
            env = remote_env(spec, self.plan.env, self.launch_id)
            self.plan.env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()), encoding="utf-8")
        self.load = [round(x, 2) for x in os.getloadavg()]
        self.launch_wall, self.t0 = time.time(), self.clock()
        self.deadline = None if gated else self.t0 + self.timeout_s
        self._seen_at = None if gated else self.t0
        self.gate_opened = None if gated else self.launch_wall
        if not gated:
            self.concurrent = machine.others()
        commands = self.plan.commands
        (rank_dir / "tmp").mkdir(exist_ok=True)  # the launch's TMPDIR (harness_env)
        local_env = child_env(spec, self.plan.env, self.launch_id)
        for i, command in enumerate(commands):
            log_path = self.log_path if len(commands) == 1 else rank_dir / f"launch-node{i}.log"
            argv = (ssh_argv(command.host, command.argv, remote_env(spec, self.plan.env, self.launch_id),
                             self.launch_id) if command.remote else command.argv)
            with open(log_path, "wb") as log:
                proc = subprocess.Popen(parent_death_prefix() + argv, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.PIPE if command.remote else subprocess.DEVNULL,
                                        env=local_env, cwd=REPO, start_new_session=True)
            LEADERS.add(proc.pid)
            try:
                pidfd = os.pidfd_open(proc.pid)
            except (OSError, AttributeError):
                pidfd = None
            self.running.append(_Running(command, proc, log_path, pidfd, proc.stdin))
        return self

    def _close_gate_fd(self) -> None:
        if self._gate is not None:
            os.close(self._gate)  # releases the flock
            self._gate = None

    def open_gate(self) -> None:
        """Let the ranks begin warm-up; the load average recorded is the one the timed steps start with."""
        if self._gate is None:
            return
        self._close_gate_fd()
        self.load = [round(x, 2) for x in os.getloadavg()]
        self.concurrent = machine.others()
        self.gate_opened = time.time()
        self.deadline = self.clock() + self.timeout_s
        self._seen_at = self.clock()

    # ---- waiting --------------------------------------------------------------------------------------------
    def _ended(self) -> bool:
        return all(r.proc.returncode is not None for r in self.running)

    def _reap(self) -> None:
        """Note the commands that have exited (never blocks), and the first one that failed."""
        for r in self.running:
            if r.exited_at is None and r.proc.poll() is not None:
                r.exited_at = self.clock()
                if r.proc.returncode != 0 and self.failed is None:
                    self.failed, self.failed_at = r, r.exited_at

    def _poll(self, until: float | None) -> str:
        """Block until a command exits ("exited"), rank 0 sends an event ("event"), `until` passes ("time") or
        the UI is due a redraw ("ui")."""
        reap_orphans()  # and at least once a UI_INTERVAL_S: a dead orphan is never waited for by anyone else
        timeout = None if until is None else max(0.0, until - self.clock())
        timeout = UI_INTERVAL_S if timeout is None else min(timeout, UI_INTERVAL_S)
        live = [r for r in self.running if r.proc.returncode is None]
        if any(r.pidfd is None for r in live):  # no pidfd: a timed wait (no events: they arrive with the exit)
            interrupt.check()
            try:
                live[0].proc.wait(timeout=(1.0 if timeout is None else min(timeout, 1.0)) / len(live))
            except subprocess.TimeoutExpired:
                pass
            self._reap()
            if any(r.proc.returncode is not None for r in live):
                return "exited"
            return "time" if until is not None and self.clock() >= until else "ui"
        poller = select.poll()
        for r in live:
            poller.register(r.pidfd, select.POLLIN)
        poller.register(self._events, select.POLLIN)
        if interrupt.wakeup_fd() is not None:
            poller.register(interrupt.wakeup_fd(), select.POLLIN)
        # poll() takes whole milliseconds in a C int: a wait of --timeout inf (or 1e12 s) is a day at a time.
        ready = {fd for fd, _ in poller.poll(None if timeout is None else int(min(timeout, 86400.0) * 1000))}
        interrupt.check()  # Ctrl-C / SIGTERM: stop here, where it is safe
        if self._events in ready:
            self._read_events()
            return "event"
        exited = [r for r in live if r.pidfd in ready]
        if exited:
            for r in exited:
                r.proc.wait()
            self._reap()
            return "exited"
        return "time" if until is not None and self.clock() >= until else "ui"

    def _read_events(self) -> None:
        try:
            data = os.read(self._events, 4096)
        except BlockingIOError:
            return
        self.events += [line for line in data.decode(errors="replace").splitlines() if line]

    def _progress(self) -> None:
        if self.on_progress:
            pr = progress_file.read(self.spec.progress_path)
            if pr:
                pr["notes"] = list(dict.fromkeys(e[len(progress_file.NOTE):] for e in self.events
                                                 if e.startswith(progress_file.NOTE)))  # every rank may say it
                self.on_progress(pr)

    def _until(self) -> float | None:
        """When the next wait must end: the deadline, or the moment rank 0 would count as stalled."""
        due = None if self.stall_s is None or self._seen_at is None else self._seen_at + self.stall_s
        if due is None:
            return self.deadline
        return due if self.deadline is None else min(due, self.deadline)

    def watch(self) -> bool:
        """Note rank 0's progress; True once it has stood still for stall_s (then the launch is marked stalled,
        with each local rank's stacks in the log)."""
        if self.stalled:
            return True
        if self.stall_s is None or self._seen_at is None or self.status is not None:
            return False
        pr = progress_file.read(self.spec.progress_path)
        now = self.clock()
        if pr is not None and (pr["phase"], pr["step"]) != self._seen:
            self._seen, self._seen_at = (pr["phase"], pr["step"]), now
            return False
        silent = self._seen in (None, ("", 0))
        if silent and not self._rank0_here():  # a rank 0 on another host never writes here: the watch starts
            self._seen_at = now                # with its first word, and --timeout covers what comes before
            return False
        if now < self._seen_at + self.stall_s:
            return False
        dumped, listed = self._dump_stacks()
        found = stalled.first_to_stop(progress_file.read_ranks(self.spec.progress_path), self.dumps)
        self.stalled_rank = found["rank"] if found else None
        # a rank that could not even answer for its stacks (stopped, or blocking the signal) is the one to name
        # where the others' stacks name none
        unanswered = "; ".join(f"rank {k} did not answer the request for its stacks: {why}"
                               for k, why in sorted(self.silent.items()))
        if found is None and len(self.silent) == 1:
            self.stalled_rank = next(iter(self.silent))
        where = ""
        if pr is not None and pr["phase"]:
            where = (f", rank 0 at step {pr['step']} of {pr['total']} ({pr['phase']})" if pr["total"]
                     else f", rank 0 in {pr['phase']}")
        self.status, self.stalled = "timeout", True
        self.stall_cause = first_error(self.log_path)  # before the stop: what stopping the launch prints is not it
        what = "no word from rank 0" if silent else "no progress"
        in_log = " and ".join(([f"the Python stacks of {dumped} rank(s)"] if dumped else [])
                              + ([f"the state of {listed} process(es)"] if listed else []))
        self.reason = (f"stalled: {what} for {self.stall_s:g} s (--stall-timeout){where}; "
                       + (f"{stalled.describe(found)}; " if found else "")
                       + (f"{self.loaders}; " if self.loaders else "")
                       + (f"{unanswered}; " if unanswered else "")
                       + (f"{in_log} are in the log; " if in_log else "") + "process group killed")
        return True

    def _rank0_here(self) -> bool:
        """Whether rank 0 runs on this machine, so that its silence means something: a launch on this machine
        alone (one on several hosts may start its rank 0 elsewhere, by ssh or through its launcher)."""
        return self.spec.topology is None

    def _dump_stacks(self) -> tuple[int, int]:
        """Every rank of this launch on this machine asked for its Python stacks (harness/launching/stalled.py:
        ask_stacks), each appended to the launch log under a heading of its own, followed by every process of the
        launch with its state (reaper.describe_launch). Returns how many ranks answered and how many processes
        were listed."""
        answered, self.silent, loaders = stalled.ask_stacks(self.rank_dir, STACK_DUMP_WAIT_S)
        for k, text in answered.items():
            self.dumps[k] = text
            self.stacks += f"\ncompare: rank {k} made no progress for {self.stall_s:g} s; its Python stacks:\n{text}"
        for k, found in sorted(loaders.items()):
            for w in found:
                self.stacks += (f"\ncompare: rank {k}'s DataLoader worker {w['worker']} (pid {w['pid']}); its Python "
                                f"stacks:\n{w['stacks']}")
        self.loaders = stalled.loader_text(loaders)
        processes = describe_launch(self.launch_id) if self.launch_id else []
        if processes:
            self.stacks += ("\ncompare: the launch's processes when it was stopped as stalled:\n"
                            + "\n".join(processes) + "\n")
        return len(answered), len(processes)

    def _turn(self) -> None:
        """One turn of a wait loop: after a pause of compare's own (PAUSED_S), the commands that exited meanwhile
        reaped and the deadline and the stall watch moved on by it."""
        now = self.clock()
        last, self._last_turn = self._last_turn, now
        if last is None or now - last < PAUSED_S:
            return
        gap = now - last
        self.paused_s += gap
        if self.deadline is not None:
            self.deadline += gap
        if self._seen_at is not None:
            self._seen_at += gap
        self._reap()

    def wait_for(self, event: str) -> bool:
        """Block until rank 0 sends `event` (True), or the launch ends, fails, runs out of time or stalls
        (False)."""
        while event not in self.events:
            self._turn()
            if self._ended() or self.failed is not None:
                return False
            if self.deadline is not None and self.clock() >= self.deadline:
                return False
            if self.watch():
                return False
            why = self._poll(self._until())
            if why == "ui":
                self._progress()
        return True

    def finish(self) -> Outcome:
        """Wait for the launch to end (until its deadline), kill whatever is left, and say how it went. When one
        command of several fails, the others get NODE_GRACE_S to end by themselves, then are stopped."""
        if self.start_error is not None:
            return self._collect()
        try:
            while True:
                self._turn()
                if self._ended():
                    break
                now = self.clock()
                if self.deadline is not None and now >= self.deadline and not self.stalled:
                    self.status = "timeout"
                    self.reason = f"no result after {self.timeout_s:g} s (--timeout); process group killed"
                    break
                if self.watch():
                    break
                if self.failed is not None and now >= self.failed_at + NODE_GRACE_S:
                    break  # a node failed and the others are still running: stopped below
                until = self._until()
                if self.failed is not None:
                    until = min(until or math.inf, self.failed_at + NODE_GRACE_S)
                if self._poll(until) == "ui":
                    self._progress()
        except KeyboardInterrupt:
            self.status = "interrupted"
        return self._collect()

    def interrupt(self) -> Outcome:
        """Stop the launch now (Ctrl-C / SIGTERM of compare): an `interrupted` outcome."""
        if self.start_error is None:
            self.status = "interrupted"
        return self._collect()

    # ---- ending ---------------------------------------------------------------------------------------------
    def _stop(self) -> None:
        """Stop every command still running. A remote one is asked first by closing its stdin (its guard then
        stops the command on that host, SIGTERM before SIGKILL, and exits), the others get SIGTERM; whatever is
        left after the grace gets SIGKILL, process group by process group."""
        remote = [r for r in self.running if r.stdin is not None]
        for r in remote:
            try:
                r.stdin.close()
            except OSError:
                pass
        grace = 2.0 if self.status is None else 5.0
        if any(r.proc.returncode is None for r in remote):
            grace = max(grace, nodeguard.GRACE_S + 2.0)
        kill_groups([r.proc for r in self.running], grace_s=grace, asked=tuple(r.proc for r in remote))

    def _collect(self) -> Outcome:
        if not self.running:
            return self._unstarted()
        spec, rank_dir, processes = self.spec, self.rank_dir, self.processes
        # Before compare's first signal: which commands had ended by themselves, and which ranks here still ran
        # (harness/launching/culprit.py: nothing that follows this moment is a cause).
        self._reap()
        self.stopping_at = self.clock()
        note_stopping(rank_dir)
        try:
            self._stop()
        finally:
            for r in self.running:
                LEADERS.discard(r.proc.pid)
            self._reap()
            self.plan.hold.clear()  # what the launch needed held (a rendezvous store), only once it has ended
            self._close_gate_fd()
            for fd in [self._events] + [r.pidfd for r in self.running]:
                if fd is not None:
                    os.close(fd)
            self._events = None
            for r in self.running:
                r.pidfd = None
        killed = kill_leftovers(self.launch_id)
        self._release()  # the framework's own leftovers, now that no process of it is left
        end_wall = time.time()
        wall = self.clock() - self.t0
        concurrent = machine.merge(self.concurrent, machine.others())
        several = len(self.running) > 1
        if several:
            self._join_logs()
        if self.stacks:
            with open(self.log_path, "a", encoding="utf-8") as log:
                log.write(self.stacks)
        last = progress_file.read(spec.progress_path)
        ranks = []
        for k in range(processes):
            f = spec.rank_result_path(k)
            if f.exists():
                ranks.append(rank_result.read(f))
        failed = self.failed or next((r for r in self.running if r.proc.returncode), None)
        rc = (failed or self.running[0]).proc.returncode
        status, reason = self.status, self.reason
        if status == "timeout":
            if last and last["phase"]:  # where rank 0 was stuck (in a collective, when a peer hung)
                where = (f"at step {last['step']} of {last['total']} ({last['phase']})" if last["total"]
                         else f"in {last['phase']}")  # a comm or calibration launch has no steps
                reason = reason.replace(" (--timeout)", f" (--timeout), rank 0 {where}")
            silent = silent_hosts(rank_dir, spec.topology) if spec.topology is not None else []
            if silent:
                reason = f"no rank started on {', '.join(silent)}; {reason}"
            cause = self.stall_cause if self.stalled else first_error(self.log_path, stopped_by_us=True)
            if cause:
                reason += f"; first error: {cause}"
        if status == "interrupted":
            at = ((f" at step {last['step']} of {last['total']} ({last['phase']})" if last["total"]
                   else f" in {last['phase']}") if last and last["phase"] else " while its processes were starting")
            reason = f"interrupted{at}; process group killed"
        shutdown_error, failed_parts, stopped = "", {}, status == "interrupted"
        unfinished = sorted({part for r in ranks for part in getattr(r, "unfinished", [])})
        if len(ranks) == processes and (status in ("timeout", "interrupted") or (status is None and rc != 0)):
            # Each rank writes its result before the final barrier and teardown, and a training rank writes its
            # measurement before any optional part too (harness/rank/train.py): all of them are here, so the
            # training and its measurement finished, and only what came after went wrong. Keep the row, say so.
            if status is None:
                reason = self._failure()
            if unfinished:
                failed_parts = {part: reason for part in unfinished}
            else:
                shutdown_error = f"after every rank had written its result: {reason}"
            status, reason = "ok", ""
        elif status is None and rc == 0 and len(ranks) == processes and unfinished:
            failed_parts = {part: "the launch exited 0 before every rank had finished it" for part in unfinished}
        if status is None:
            if rc != 0:
                status, reason = "failed", self._failure()
            elif len(ranks) != processes:
                missing = sorted(set(range(processes)) - {r.rank for r in ranks})
                status, reason = "failed", f"launch exited 0 but rank(s) {missing} wrote no result"
                why = outlived(rank_dir, missing)
                if why:
                    reason += f": {why}"
            else:
                status = "ok"
        gate_wait = 0.0 if self.gate_opened is None else max(0.0, self.gate_opened - self.launch_wall)
        nodes = [{"host": r.command.host, "via": "ssh" if r.command.remote else "here", "argv": r.command.argv,
                  "returncode": r.proc.returncode} for r in self.running] if several else []
        return Outcome(status=status, reason=reason, returncode=rc, wall_time_s=wall, launch_wall=self.launch_wall,
                       end_wall=end_wall, log_path=self.log_path, argv=self.plan.argv, processes=processes,
                       pid=self.running[0].proc.pid, load_avg_before=self.load, ranks=ranks,
                       log_tail="" if status == "ok" and not (shutdown_error or failed_parts) else tail(self.log_path),
                       shutdown_error=shutdown_error, failed_parts=failed_parts, stopped=stopped, progress=last,
                       stalled_rank=self.stalled_rank,
                       leftovers_killed=killed,
                       gate_opened=self.gate_opened, gate_wait_s=gate_wait, node_commands=nodes,
                       concurrent_runs=concurrent)

    def _unstarted(self) -> Outcome:
        """The outcome of a launch none of whose commands started (start() failed before the first)."""
        self._gate_and_events_closed()
        if self.plan is not None:
            self.plan.hold.clear()
        self._release()
        end_wall = time.time()
        return Outcome(status="failed", reason=self.start_error or "the launch was never started", returncode=None,
                       wall_time_s=self.clock() - self.t0, launch_wall=self.launch_wall, end_wall=end_wall,
                       log_path=self.log_path, argv=self.plan.argv if self.plan else [], processes=self.processes,
                       pid=0, load_avg_before=self.load, log_tail=tail(self.log_path))

    def _release(self) -> None:
        """Once no process of the launch is left: what the framework leaves behind removed (its plan's cleanup),
        and the launch's entry in the machine's ledger of runs released."""
        for clean in self.plan.cleanup if self.plan is not None else []:
            try:
                clean()
            except OSError:
                pass
        if self.ledger_entry is not None:
            self.ledger_entry.release()

    def _join_logs(self) -> None:
        """launch.log of a launch of one command per node: each node's log under a header that says where it ran
        and how it ended."""
        join_logs(self.log_path, [(f"node {i}: {r.where} ({'over ssh' if r.command.remote else 'here'}), exit code "
                                   f"{r.proc.returncode}: {shlex.join(r.command.argv)}", r.log)
                                  for i, r in enumerate(self.running)])

    def _failure(self) -> str:
        """Why a launch that ended by itself failed: harness/launching/culprit.py, from the facts its processes recorded
        in order and how each command ended, before or after compare began stopping the launch."""
        topo = self.spec.topology
        silent = set(silent_hosts(self.rank_dir, topo)) if topo is not None else set()
        supervisors = {rec.get("supervisor_pid") for rec in rank_records(self.rank_dir, "start-rank*.json").values()}
        commands = [Command(launcher=launcher_name(r.command.argv, self.adapter.launcher),
                            returncode=r.proc.returncode,
                            ended=(None if r.exited_at is None or r.exited_at > self.stopping_at
                                   else self.launch_wall + (r.exited_at - self.t0)),
                            log=r.log, host=r.command.host, local=not r.command.remote,
                            silent=r.command.host in silent, is_rank=r.proc.pid in supervisors,
                            stopped=launcher_stopped(r.command.argv, read_log(r.log)))
                    for r in self.running]
        reason = culprit(self.rank_dir, commands, name_hosts=topo is not None)
        try:  # a failure the framework is known for, with the knob or change that fixes it (Adapter.failure_fix)
            fix = self.adapter.failure_fix(reason)
        except Exception:  # noqa: BLE001 - only a hint on a reason that stands without it
            fix = None
        if fix:
            reason += f"; fix: {fix}"
        elif hint := environment_hint(reason):
            reason += f"; {hint}"
        try:  # the facts behind the reason, for whoever reads the kept log
            with open(self.log_path, "a", encoding="utf-8") as log:
                log.write(describe(self.rank_dir, commands, reason))
        except OSError:
            pass
        return reason


DEBUG_DETAIL = ("TORCH_DISTRIBUTED_DEBUG=DETAIL is set in compare's environment, which the ranks inherit: torch "
                "2.13's DistributedDataParallel is killed by SIGSEGV as it is built under it (a plain torchrun script "
                "too), and it checks every collective, which the timings would carry; fix: unset it (INFO logs "
                "without the checks)")
"""The hint on a rank killed by SIGSEGV where torch's collective checks were asked for (an outside check: every DDP
row failed so, with no word of the variable beyond the run's list of inherited ones)."""


def environment_hint(reason: str, env=os.environ) -> str | None:
    """What in compare's environment, which the ranks inherit, explains a failure `reason` with no fix of the
    framework's own: DEBUG_DETAIL for a SIGSEGV under TORCH_DISTRIBUTED_DEBUG=DETAIL; None otherwise."""
    if "SIGSEGV" in reason and env.get("TORCH_DISTRIBUTED_DEBUG", "").upper() == "DETAIL":
        return DEBUG_DETAIL
    return None


def run_launch(adapter: Adapter, spec: RunSpec, timeout_s: float,
               on_progress: Callable[[dict], None] | None = None, stall_s: float | None = STALL_S) -> Outcome:
    """One launch on its own, start to end (Ctrl-C gives an `interrupted` outcome)."""
    return Launch(adapter, spec, timeout_s, on_progress, stall_s).start().finish()
