"""A checked request, ready to run: every number resolved, every row built, the output directory chosen.

Runs in: the parent. `compare run` plans a RunPlan (harness/core/comparison.py), `compare comm` a CommPlan
(harness/core/comm_bench.py); `compare scale` and `compare tune` build theirs from RunPlans."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.core.requests import Request
    from harness.core.rows import Row


@dataclass
class Plan:
    """A checked request, ready to run: every number resolved, every row built, the output directory chosen."""

    request: Request
    out: Path | None
    """None only while a sub-plan is being built (`compare scale` plans each world size, then picks one out)."""
    rows: list[Row]
    oversubscribed: bool = False
    """More processes than usable cores (only with --oversubscribe)."""
    topology: Any = None
    """Where the ranks run (harness.shared.spec.Topology; None: this machine, one single-node launch)."""
    rerun: str | None = None
    """The command line that reproduces this plan exactly, with what it resolved (harness/ground/argv.py)."""

    @property
    def runnable(self) -> list[Row]:
        return [r for r in self.rows if r.adapter is not None]

    @property
    def unavailable(self) -> list[Row]:
        return [r for r in self.rows if r.adapter is None]


@dataclass
class UntilTarget:
    """The resolved settings of an until-target run."""

    target: float
    """The workload's accuracy target."""
    metric: str
    """What the accuracy counts, in words ("test accuracy", "next-byte accuracy")."""
    eval_every: int
    max_steps: int
    """The step budget."""


@dataclass
class RunPlan(Plan):
    workload: Any = None
    global_batch: int = 0
    steps: int = 0
    """Timed steps; in an until-target run, the step budget."""
    warmup: int = 0
    equiv_steps: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    """Added to every record of this plan (`compare scale`: which point of the sweep it is)."""
    tag: str = ""
    """Appended to row names in progress lines and to log names when one run holds several plans (" n=4")."""
    spec_extra: dict[str, Any] = field(default_factory=dict)
    """RunSpec fields for every launch of this plan beyond the common ones (profile, straggler)."""
    until_target: UntilTarget | None = None
    """Set for `compare run --until-target`: launches then run one at a time, never overlapping."""
    precision: float | None = None
    """Relative half-width every ratio's interval must reach (`compare run --precision`), or None."""
    budget_s: float | None = None
    """Seconds the rounds may take (precision mode, or rounds by default), or None: a fixed --repeats."""
    margin: float | None = None
    """The verdict's equivalence margin (`--margin`), or None for the default (stats.DEFAULT_MARGIN)."""
    order_seed: int | None = None
    """Seed of the rows' shuffled order within each round (`compare run`: --order-seed, or a fresh one)."""
    loader_workers: int = 0
    """DataLoader workers per rank (a workload whose training data is a Dataset)."""
    max_grad_norm: float | None = None
    """The global gradient norm every row clips to (--max-grad-norm, else the workload's); None: no clipping."""
    left_threads: str | None = None
    """Threads the workload's code started in compare's own process while it was imported and checked, still
    running, in words; None where none is."""
    moved: str | None = None
    """That the workload's code changed compare's working directory while it was loaded, and compare went back, in
    words; None where it did not."""
    param_count: int | None = None
    """The model's parameters, counted on the meta device before launching (None where that was not done)."""
    join: list[Path] | None = None
    """`compare run --join DIR`: the run directories of the earlier sessions this run joins."""
    design: dict[str, Any] | None = None
    """A default run's design: its steps per launch and the variance components they came from
    (harness/core/noise_floor.py: design)."""


@dataclass
class CommPlan(Plan):
    ops: list[str] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
