"""What became of one launch: its status and reason, its times, its log, every rank's result, and what happened
around it (the user stopping it, a failed optional part, other runs sharing the machine), as the supervisor
(harness/launching/launch.py) assembled it and the record is built from (harness/core/assemble.py).

Runs in: the parent."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness.shared.rank_result import RankResult


@dataclass
class Outcome:
    status: str
    """ok | failed | timeout | interrupted"""
    reason: str
    returncode: int | None
    wall_time_s: float
    launch_wall: float
    """Wall-clock time the launch command was started."""
    end_wall: float
    """Wall-clock time the launch had ended (its process group gone)."""
    log_path: Path
    argv: list[str]
    processes: int
    pid: int
    """The launch's process id, which is also its process group id."""
    load_avg_before: list[float] = field(default_factory=list)
    """1, 5 and 15 minute load averages just before the launch."""
    ranks: list[RankResult] = field(default_factory=list)
    """Every rank's result (harness/shared/rank_result.py), as each wrote it."""
    log_tail: str = ""
    shutdown_error: str = ""
    """Set when every rank had written its result and only the launch's shutdown then failed or hung (a gloo
    peer closing first, say): the measurement stands, and this says what went wrong afterwards."""
    stalled_rank: int | None = None
    """The rank a stalled launch found behind every other: the one that stopped (None: not stalled, or not told)."""
    failed_parts: dict[str, str] = field(default_factory=dict)
    """Optional parts of a launch that every rank had written its measurement before (the breakdown's profiled
    steps) and that then failed, stalled or were interrupted: part -> why. The measurement stands."""
    stopped: bool = False
    """The user stopped the run (Ctrl-C, SIGTERM) during this launch: set on an `interrupted` launch, and on one
    whose measurement was complete and kept (status ok). The caller stops either way."""
    progress: dict | None = None
    """Rank 0's last reported phase and step (what an interrupted or hung launch had reached)."""
    node_commands: list[dict] = field(default_factory=list)
    """For a launch of one command per node: each node's host, how it was started (here or over ssh), its argv
    and exit code."""
    leftovers_killed: int = 0
    """Processes of this launch still alive after it ended, killed by the harness."""
    log_not_kept: str | None = None
    """Why the launch's log could not be kept in the results' logs/ (a full disk), where it could not."""
    concurrent_runs: list[dict] = field(default_factory=list)
    """Other compare runs that were alive on this machine when the timed steps began or when the launch ended
    ({pid, command, out, started}): their ranks shared the cores with this launch's."""
    gate_opened: float | None = None
    """Wall-clock time the launch's ranks were let past the gate into warm-up (None: never)."""
    gate_wait_s: float = 0.0
    """Seconds from starting the launch to opening its gate (it started while the previous launch ended)."""

    @property
    def interrupted(self) -> bool:
        """Whether the user stopped the run during this launch (whatever became of its row)."""
        return self.status == "interrupted" or self.stopped
