"""The `compare` command line (also `python -m harness`): it registers the commands, each in its own module under
harness/commands/ with its options declared by its request dataclass, and turns click's usage errors into one line.

Runs in: the parent.

    compare list                       every adapter and workload, with availability and the reason
    compare env                        versions, devices, threads and launchers, for a bug report
    compare run                        default workload, every adapter, world size 2 on this machine
    compare run --adapters ddp,spawn --workload resnet --steps 20 --repeats 3
    compare run --until-target         every adapter trains until the workload's target: time to target
    compare tune -a ddp,horovod --budget 20m    each backend's knobs searched; verdict at defaults and at best
    compare comm                       collectives and point-to-point per backend
    compare run --hosts h1:2,h2:2      the same comparison across hosts (each framework's own multi-node launcher)
    compare sbatch --nodes 2 --ntasks-per-node 4 -a ddp,deepspeed | sbatch     the same under SLURM
    compare report results/<run>/      re-render report.md and the plots from records.jsonl
    compare diff RUN_A RUN_B           the same rows of two runs: per-row ratios B / A with intervals
    compare join OUT RUN RUN ...       runs of one request as sessions: one verdict including run-to-run variation
    compare index                      regenerate results/README.md

Exit codes: 0 done (an until-target row that missed its target is a result, not a failure); 1 no row ran or the
results could not be written; 2 bad input (one line on stderr naming the problem and the valid choices; nothing
written); 130 interrupted (Ctrl-C / SIGTERM; finished rows kept).
"""

from __future__ import annotations

import sys
import time

import typer

from harness.commands import (comm, diff, doctor, env, index, join, knobs, listing, plan, predict, report, run,
                              sbatch, scale, tune)
from harness.commands.common import Invocation, flag
from harness.commands.declare import command
from harness.core.requests import CommRequest, RunRequest, SbatchRequest, ScaleRequest, TuneRequest
from harness.commands.usage_errors import OneLineUsageErrors

app = typer.Typer(cls=OneLineUsageErrors, add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False,
                  no_args_is_help=True,
                  help="Run one PyTorch workload through interchangeable data-parallel backends and compare them.")


def _version(value: bool) -> None:
    if value:
        from importlib import metadata

        try:
            version = metadata.version("compare-dp")
        except metadata.PackageNotFoundError:  # run from a checkout that was never installed (python -m harness)
            version = "unknown (not installed: run `make setup`)"
        typer.echo(f"compare {version}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = flag(False, "--version", callback=_version, is_eager=True,
                               help="Print compare's version and exit.")):
    """Run one PyTorch workload through interchangeable data-parallel backends and compare them."""


command(app, RunRequest, "run")(run.run)
command(app, SbatchRequest, "sbatch", short_help="A ready sbatch script that runs this comparison under SLURM.")(
    sbatch.sbatch)
command(app, ScaleRequest, "scale", short_help="Sweep world sizes: speed-up, efficiency, memory, prediction.")(
    scale.scale)
command(app, TuneRequest, "tune", short_help="Each backend at its best: its knobs searched within a budget, "
                                            "beside the comparison at defaults.")(tune.tune)
command(app, predict.PredictRequest, "predict",
        short_help="The performance model: predicted against measured, extrapolated.")(predict.predict)
command(app, plan.PlanRequest, "plan", short_help="Which backend for a cluster: step time, memory, a "
                                                  "recommendation.")(plan.plan)
command(app, CommRequest, "comm", short_help="Benchmark and check collectives per backend.")(comm.comm)
command(app, report.ReportRequest, "report", short_help="Re-render a run's report.md and plots from its records.")(
    report.report)
command(app, diff.DiffRequest, "diff", short_help="The same rows of two runs: per-row ratios, intervals, outcomes, and what each learned.")(
    diff.diff)
command(app, join.JoinRequest, "join", short_help="Earlier runs of one request as sessions of one verdict "
                                                  "that includes the variation between runs.")(join.join)
command(app, index.IndexRequest, "index", short_help="Regenerate DIR/README.md, the index of the runs under DIR.")(
    index.index)
command(app, listing.ListRequest, "list")(listing.list_all)
command(app, knobs.KnobsRequest, "knobs", short_help="Every knob of an adapter (or option of a workload).")(
    knobs.knobs)
command(app, doctor.DoctorRequest, "doctor", short_help="This machine's noise floor and the precision reachable "
                                                        "here.")(doctor.doctor)
command(app, env.EnvRequest, "env", short_help="Versions, devices, launchers: paste into a bug report.")(env.env)


def main(argv: list[str] | None = None) -> None:
    from harness.shared.proc import become_subreaper

    try:  # from the process's creation, so interpreter start-up and imports count too
        import psutil

        Invocation.started = psutil.Process().create_time()
    except Exception:  # noqa: BLE001 - a clock reading is not worth failing for
        Invocation.started = time.time()
    Invocation.main = True
    become_subreaper()
    Invocation.argv = list(sys.argv[1:] if argv is None else argv)
    app(args=Invocation.argv, prog_name="compare")


if __name__ == "__main__":
    main()
