"""`compare sbatch`: a ready sbatch script that runs a comparison across the nodes of a SLURM allocation."""

from __future__ import annotations

import shlex

import typer

from harness.commands.common import typed, wrote_to
from harness.ground.argv import to_argv
from harness.core.requests import SbatchRequest


def sbatch(req: SbatchRequest) -> None:
    """Write a ready sbatch script that runs this comparison across the nodes of a SLURM allocation."""
    from harness.core import comparison, slurm_script

    run_args = to_argv(req.run_request())  # as given: the job plans the run again, inside its allocation
    comparison.check(slurm_script.check(req))  # the run's own options: `compare run`'s one validation
    text = slurm_script.render(run_args, typed(shlex.join(["compare", "sbatch", *to_argv(req)])), req.nodes,
                               req.ntasks_per_node, req.time_limit, req.partition, req.job_name, req.exclusive)
    if req.script is None:
        typer.echo(text, nl=False)
        return
    slurm_script.write(req.script, text, req.force)
    # one line: a path cut over two cannot be pasted
    wrote_to(f"{req.script}: submit it with `sbatch {req.script}`")
