"""The `compare` command line (also `python -m harness`): it registers the commands, each in its own module under
harness/commands/ with its options declared by its request dataclass, and turns click's usage errors into one line.

Runs in: the parent.

    compare list                       every adapter and workload, with availability and the reason
    compare env                        versions, devices, threads and launchers, for a bug report
    compare run                        default workload, every adapter, world size 2 on this machine
    compare run --adapters ddp,spawn --workload resnet --steps 20 --repeats 3
    compare run --until-target         every adapter trains until the workload's target: time to target
    compare comm                       collectives and point-to-point per backend
    compare run --hosts h1:2,h2:2      the same comparison across hosts (each framework's own multi-node launcher)
    compare sbatch --nodes 2 --ntasks-per-node 4 -a ddp,deepspeed | sbatch     the same under SLURM
    compare report results/<run>/      re-render report.md and the plots from records.jsonl
    compare diff RUN_A RUN_B           the same rows of two runs: per-row ratios B / A with intervals
    compare index                      regenerate results/README.md

Exit codes: 0 done (an until-target row that missed its target is a result, not a failure); 1 no row ran or the
results could not be written; 2 bad input (one line on stderr naming the problem and the valid choices; nothing
written); 130 interrupted (Ctrl-C / SIGTERM; finished rows kept).
"""

from __future__ import annotations

import sys
import time

import typer

from harness.commands import comm, diff, doctor, env, index, knobs, listing, plan, predict, report, run, sbatch, scale
from harness.commands.common import Group, Invocation, flag
from harness.commands.declare import command
from harness.core.requests import CommRequest, RunRequest, SbatchRequest, ScaleRequest
from harness.shared.registry import BadReference, UserCodeError

try:  # typer vendors click from 0.20 on
    from typer._click import exceptions as clickerr
except ImportError:  # pragma: no cover - older typer on a stand-alone click
    from click import exceptions as clickerr


def _closest(typed: str, candidates: list[str]) -> list[str]:
    """The candidates nearly as close to what was typed as the closest one (click offers every one above 0.6:
    "--adaptrs" got "--adapters or --plots")."""
    import difflib

    ratio = {c: difflib.SequenceMatcher(None, typed, c).ratio() for c in candidates}
    best = max(ratio.values(), default=0.0)
    return [c for c in candidates if ratio[c] >= best - 0.15]


def usage_line(exc) -> str:
    """A usage error (unknown option or command, a value of the wrong type, a missing argument) as one line that
    names the problem and the valid choices."""
    ctx = exc.ctx
    where = "`" + " ".join(["compare", *(ctx.command_path.split()[1:] if ctx else [])]) + "`"
    if isinstance(exc, clickerr.NoSuchOption) and ctx is not None:
        valid = sorted({max(p.opts, key=len) for p in ctx.command.params if max(p.opts, key=len).startswith("--")}
                       | {"--help"})
        close = _closest(exc.option_name, [p for p in exc.possibilities or [] if p != "--help"])
        guess = f" (did you mean {' or '.join(close)}?)" if close else ""
        return f"no such option {exc.option_name} for {where}{guess}; valid options: {', '.join(valid)}"
    message = " ".join(exc.format_message().split())
    if message.startswith("No such command") and ctx is not None and hasattr(ctx.command, "list_commands"):
        return f"{message.rstrip('.')}; valid commands: {', '.join(ctx.command.list_commands(ctx))}"
    return f"{message.rstrip('.')} (see {where[:-1]} --help`)"


class OneLineUsageErrors(Group):
    """Click's usage errors as one line on stderr and exit code 2, like every other bad input (click's own form is
    a usage line, a hint and a framed box)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not (sys.argv[1:] if args is None else list(args)):  # bare `compare`: the help, as before
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except clickerr.UsageError as exc:
            typer.echo(f"error: {usage_line(exc)}", err=True)
            sys.exit(2)
        except clickerr.ClickException as exc:
            typer.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
            sys.exit(exc.exit_code)
        except BadReference as exc:  # a user's file or module that gives no workload, wherever a command met it
            typer.echo(f"error: {exc}", err=True)
            sys.exit(2)
        except UserCodeError as exc:  # the user's own workload raised: their traceback, not ours
            sys.stderr.write(exc.user_traceback())
            sys.stderr.write(f"error: {exc.doing} raised {type(exc.exc).__name__} in your code (traceback above); "
                             f"nothing was run or written\n")
            sys.exit(1)
        except typer.Abort:  # (not in typer's vendored click.exceptions: typer.Abort is the class it raises)
            typer.echo("Aborted!", err=True)
            sys.exit(1)
        except MemoryError:  # compare itself (not a rank) out of memory: what was written stays written
            import resource

            limit = resource.getrlimit(resource.RLIMIT_AS)[0]
            shown = "" if limit == resource.RLIM_INFINITY else f" (this process may map {limit / 2**20:,.0f} MiB: " \
                                                                "raise `ulimit -v`)"
            sys.stderr.write(f"error: compare ran out of memory{shown}\n")
            sys.exit(1)
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)  # the commands return nothing; typer.Exit(n) returns n


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
command(app, predict.PredictRequest, "predict",
        short_help="The performance model: predicted against measured, extrapolated.")(predict.predict)
command(app, plan.PlanRequest, "plan", short_help="Which backend for a cluster: step time, memory, a "
                                                  "recommendation.")(plan.plan)
command(app, CommRequest, "comm", short_help="Benchmark and check collectives per backend.")(comm.comm)
command(app, report.ReportRequest, "report", short_help="Re-render a run's report.md and plots from its records.")(
    report.report)
command(app, diff.DiffRequest, "diff", short_help="The same rows of two runs: per-row ratios, intervals, outcomes.")(
    diff.diff)
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
