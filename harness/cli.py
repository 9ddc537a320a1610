"""The `compare` command line (also `python -m harness`).

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
    compare index                      regenerate results/README.md

Exit codes: 0 done (an until-target row that missed its target is a result, not a failure); 1 no row ran or the
results could not be written; 2 bad input (one line on stderr naming the
problem and the valid choices; nothing written); 130 interrupted (Ctrl-C / SIGTERM; finished rows kept).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

import adapters
import workloads
from harness.core.record import MEASURED
from harness.core.requests import (DEVICES, BadInput, CommRequest, Request, RunRequest, check_cores, first_sentence,
                                   split)
from harness.launching import interrupt

try:  # typer vendors click from 0.20 on
    from typer._click import exceptions as _clickerr
except ImportError:  # pragma: no cover - older typer on a stand-alone click
    from click import exceptions as _clickerr
from typer.core import TyperCommand, TyperGroup


def _usage_line(exc) -> str:
    """A usage error (unknown option or command, a value of the wrong type, a missing argument) as one line that
    names the problem and the valid choices."""
    ctx = exc.ctx
    where = "`" + " ".join(["compare", *(ctx.command_path.split()[1:] if ctx else [])]) + "`"
    if isinstance(exc, _clickerr.NoSuchOption) and ctx is not None:
        valid = sorted({max(p.opts, key=len) for p in ctx.command.params if max(p.opts, key=len).startswith("--")}
                       | {"--help"})
        close = [p for p in exc.possibilities or [] if p != "--help"]
        guess = f" (did you mean {' or '.join(close)}?)" if close else ""
        return f"no such option {exc.option_name} for {where}{guess}; valid options: {', '.join(valid)}"
    message = " ".join(exc.format_message().split())
    if message.startswith("No such command") and ctx is not None and hasattr(ctx.command, "list_commands"):
        return f"{message.rstrip('.')}; valid commands: {', '.join(ctx.command.list_commands(ctx))}"
    return f"{message.rstrip('.')} (see {where[:-1]} --help`)"


class _PlainHelpFlag:
    """--help as a plain flag in --help itself (typer shows a `<bool>` placeholder beside it, as beside every flag
    not declared with _flag)."""

    def get_help_option(self, ctx):
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option


class _Command(_PlainHelpFlag, TyperCommand):
    """Every subcommand."""


class _OneLineUsageErrors(_PlainHelpFlag, TyperGroup):
    """Click's usage errors as one line on stderr and exit code 2, like every other bad input (click's own form is
    a usage line, a hint and a framed box)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not (sys.argv[1:] if args is None else list(args)):  # bare `compare`: the help, as before
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _clickerr.UsageError as exc:
            typer.echo(f"error: {_usage_line(exc)}", err=True)
            sys.exit(2)
        except _clickerr.ClickException as exc:
            typer.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
            sys.exit(exc.exit_code)
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


app = typer.Typer(cls=_OneLineUsageErrors, add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False,
                  no_args_is_help=True,
                  help="Run one PyTorch workload through interchangeable data-parallel backends and compare them.")
def _flag(default: bool, *decls: str, **kwargs) -> Any:
    """A boolean option as a plain flag in --help: typer would show a `<bool>` placeholder beside it, which reads as
    if `--bind-cores true` were accepted (it is not: a flag takes no value)."""
    return typer.Option(default, *decls, metavar="", **kwargs)


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
def _root(version: bool = _flag(False, "--version", callback=_version, is_eager=True,
                                       help="Print compare's version and exit.")):
    """Run one PyTorch workload through interchangeable data-parallel backends and compare them."""


# Wide enough for the results table when output is piped (CI logs, `| tee`), where rich would assume 80 columns.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 150)
_TYPED_ARGV: list[str] | None = None
_STARTED: float | None = None
_MAIN = False
"""True when run as the `compare` command (not in process, as the tests' CliRunner does)."""


def _path(value: str) -> Path:
    """A path argument as typed: an empty one ('') would otherwise become '.', the current directory."""
    if isinstance(value, Path):
        return value
    if value == "":
        raise typer.BadParameter("an empty path ('')")
    return Path(value)


def _stop_on_signals() -> None:
    """For the commands that launch processes: Ctrl-C, and the SIGTERM of a CI job runner or `timeout`, and a
    closed terminal's SIGHUP, stop the children and keep finished rows (harness/launching/interrupt.py); and a closed
    pipe on stdout (`compare run | head -1`) no longer ends the command: the rest of its output is dropped and the
    measurement is written (harness/entry.py: _LossyStdout)."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "keep_on_closed_pipe"):
            stream.keep_on_closed_pipe = True
    if _MAIN:
        interrupt.install()


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _shared(field: str, *decls: str, **kwargs) -> Any:
    """An option every command that launches ranks shares, made from the Request field it fills
    (harness/core/requests.py): its default and its help are the field's own, written once there."""
    import dataclasses

    from harness.shared.options import attribute_docs

    default = {f.name: f.default for f in dataclasses.fields(Request)}[field]
    help_text = attribute_docs(Request)[field]
    if isinstance(default, bool):
        return _flag(default, *decls, help=help_text, **kwargs)
    return typer.Option(default, *decls, help=help_text, **kwargs)


def _out(text: str | None) -> Path | None:
    """--out as given: "" stays recognisably empty (Path("") would silently mean the current directory)."""
    if text is None:
        return None
    if not text.strip():
        _fail("--out is empty; give a directory, or leave --out out for results/<name>_<hardware>_<time>")
    return Path(text)


def _typed(fallback: str) -> str:
    return "compare " + shlex.join(_TYPED_ARGV) if _TYPED_ARGV else fallback


def tuning_note() -> None:
    """One line naming the framework tuning variables the ranks will inherit from this shell (also in the report)."""
    from harness.core.provenance import tuning_env

    t = tuning_env()
    if t:
        console.print("  [yellow]note[/]: set in this environment and inherited by the ranks (recorded in the "
                      "report): " + escape(", ".join(f"{k}={v}" for k, v in t.items())))


class RunUI:
    """Progress of a run: on a terminal one live line per launch (phase, step), redrawn at most once a second and
    only when it changed; elsewhere (CI logs, pipes) one printed line when a launch starts and one when it ends."""

    def __init__(self):
        self.live = console.is_terminal
        self.tasks: dict[tuple[str, int], int] = {}
        self.said: dict[tuple[str, int], set[str]] = {}
        self.bar = None
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description:<18}"), BarColumn(bar_width=30), MofNCompleteColumn(),
                                TextColumn("{task.fields[phase]}"), TimeElapsedColumn(), console=console,
                                transient=False, auto_refresh=False)

    def header(self, plan) -> str:
        req = plan.request
        names = ", ".join(r.label for r in plan.runnable)
        over = " (oversubscribed: more processes than cores)" if plan.oversubscribed else ""
        until = plan.until_target
        length = (f"{plan.warmup} warm-up + {plan.steps} timed steps" if until is None else
                  f"until {until.metric} ≥ {until.target:g} (evaluated every {until.eval_every} steps, at most "
                  f"{until.max_steps} steps; launches one at a time)")
        return (f"[bold]compare run[/]: workload [bold]{req.workload}[/], world size {req.world_size}"
                f"{_where(plan)}{over}, device {req.device}, adapters {escape(names)}; {length}, {req.repeats} "
                f"repeat(s) -> {plan.out}")

    def start(self, plan):
        console.print(self.header(plan))
        tuning_note()
        for row in plan.unavailable:
            console.print(f"  [yellow]{escape(row.label)}: unavailable[/] - {escape(first_sentence(row.reason))}")
        if self.bar:
            self.bar.start()

    def _label(self, name, repeat):
        return name if repeat == 0 else f"{name} (repeat {repeat + 1})"

    def begin(self, name, repeat, total):
        if self.bar:
            self.tasks[(name, repeat)] = self.bar.add_task(self._label(name, repeat), total=total, phase="launching")
            self.bar.refresh()
        else:
            console.print(f"  {escape(self._label(name, repeat))}: launching")

    def progress(self, name, repeat, pr):
        if self.bar:
            self.bar.update(self.tasks[(name, repeat)], completed=pr.get("step", 0), phase=escape(pr.get("phase", "")))
            self.bar.refresh()
            return
        said = self.said.setdefault((name, repeat), set())
        for note in pr.get("notes", []):  # an adapter's word on a slow set-up: no live line here to show it
            if note not in said:
                said.add(note)
                console.print(f"  {escape(self._label(name, repeat))}: {escape(note)}")

    def _done(self, name, repeat, text, complete):
        if self.bar:
            task = self.tasks[(name, repeat)]
            self.bar.update(task, phase=text, **({"completed": self.bar.tasks[task].total} if complete else {}))
            self.bar.refresh()
        else:
            console.print(f"  {escape(self._label(name, repeat))}: {text}")

    def reference_done(self, outcome, name="reference"):
        if outcome.status == "ok":
            self._done(name, 0, "[green]reference ok[/]", True)
        else:
            self._done(name, 0, f"[red]{outcome.status}[/]: {escape(outcome.reason)} (max_param_diff will "
                                f"be empty)", False)

    def finished(self, rec, name=None):
        name = rec["label"] if name is None else name
        ttt = rec.get("ttt")
        if rec["status"] == "ok" and ttt:
            self._done(name, rec["repeat"], f"[green]target[/] at step {ttt['steps_to_target']}: "
                                            f"{ttt['train_time_to_target_s']:.2f} s training, "
                                            f"{ttt['e2e_time_to_target_s']:.2f} s end to end", True)
        elif rec["status"] == "ok":
            ended = (f" [yellow](the launch then ended badly {escape(rec['shutdown_error'])}; the measurements are "
                     f"kept)[/]" if rec.get("shutdown_error") else "")
            self._done(name, rec["repeat"], f"[green]ok[/] {rec['samples_per_s']:,.0f} samples/s{ended}", True)
        elif rec["status"] == "not_reached":
            self._done(name, rec["repeat"], f"[yellow]not reached[/]: {escape(rec['reason'])}", True)
        else:
            self._done(name, rec["repeat"], f"[red]{rec['status']}[/]: {escape(rec['reason'])}", False)

    def round_done(self, k: int, widest, target: float) -> None:
        """After each round of `--precision`: the widest ratio interval so far against the target."""
        now = ("no interval yet (fewer than 3 launches per row)" if widest is None else
               f"widest interval ±{widest[1]:.1%} ({escape(widest[0])} against the baseline)")
        console.print(f"  round {k}: {now}; target ±{target * 100:g}%")

    def stop(self):
        if self.bar and self.bar.live.is_started:
            self.bar.stop()


class ScaleUI(RunUI):
    def header(self, plan) -> str:
        req, first = plan.request, plan.points[0]
        names = ", ".join(r.label for r in first.runnable)
        over = [p.request.world_size for p in plan.points if p.oversubscribed]
        over_text = f" (oversubscribed: {', '.join(map(str, over))})" if over else ""
        straggler = (f"; straggler: rank {plan.straggler['rank']} x{plan.straggler['factor']:g}"
                     if plan.straggler else "")
        return (f"[bold]compare scale[/]: workload [bold]{req.workload}[/], {plan.scaling} scaling at world sizes "
                f"{','.join(map(str, plan.world_sizes))}{over_text} with {plan.threads} thread(s) per rank, device "
                f"{req.device}, adapters {escape(names)} + the single-process baseline; {first.warmup} warm-up + "
                f"{first.steps} timed steps, {req.repeats} repeat(s){straggler} -> {plan.out}")


def _where(plan) -> str:
    """", on 2 nodes (h1:1, h2:1; ssh, iface mn0)" for a multi-node plan, else nothing."""
    topo = plan.topology
    if topo is None:
        return ""
    from harness.launching.hosts import describe_slots

    same = "; simulated hosts or node ranks on this machine" if topo.one_machine else ""
    return escape(f", on {len(topo.nodes)} nodes ({describe_slots(topo.nodes)}; {topo.launcher}, iface "
                  f"{topo.iface or 'auto'}{same})")


def _warn_shared(records, name) -> None:
    """A warning line when rows were measured while another compare run was running here (the report says it too)."""
    from harness.launching import machine

    for line in machine.note(records, name):
        console.print(f"[yellow]warning[/]: {escape(line.replace('**', ''))}")


def _execute(execute, plan, *args):
    """Run a plan; map its failures to exit codes (2: another run holds --out; 1: results not written)."""
    from harness.core.session import SessionError
    from harness.launching import machine

    for other in machine.others():  # said now, before minutes of measuring; the rows it overlaps are marked too
        console.print(f"[yellow]warning[/]: another compare run is running on this machine (pid {other['pid']}"
                      + (f": {escape(other['command'])}" if other.get("command") else "") + "); the rows measured "
                      "while it runs share the cores with it and will be marked")
    try:
        return execute(plan, *args)
    except BadInput as exc:
        _fail(str(exc))
    except SessionError as exc:
        _fail(str(exc), 1)


@app.command(cls=_Command)
def run(
    adapters_: Optional[str] = typer.Option(None, "--adapters", "-a",
                                            help="Comma-separated adapters; an entry NAME:KNOB=VALUE:... is one row "
                                                 "with those knobs (default: every adapter; unavailable ones become "
                                                 "rows with their reason)."),
    workload: str = typer.Option(workloads.DEFAULT, "--workload", "-w", help="Workload name (see `compare list`)."),
    world_size: Optional[int] = typer.Option(None, "--world-size", "-n", help="Ranks (devices for DataParallel; "
                                                                            "default 2 on CPU, every GPU on cuda, or "
                                                                            "the hosts' slots)."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda."),
    steps: Optional[int] = typer.Option(None, help="Timed steps (default: the workload's)."),
    warmup: Optional[int] = typer.Option(None, help="Warm-up steps, discarded (default: the workload's)."),
    global_batch: Optional[int] = typer.Option(None, "--global-batch",
                                               help="Global batch (default: the workload's); LR follows its rule."),
    repeats: int = typer.Option(1, help="Fresh launches per adapter; the spread is reported."),
    threads: Optional[int] = _shared("threads"),
    equiv_steps: Optional[int] = typer.Option(None, "--equiv-steps",
                                              help="Steps compared with the single-process reference (0: skip)."),
    timeout: float = _shared("timeout_s", "--timeout"),
    stall_timeout: float = _shared("stall_s", "--stall-timeout"),
    out: Optional[str] = typer.Option(None, help="Output directory (default: results/<workload>_<hw>_<time>)."),
    force: bool = _shared("force"),
    strict: bool = _shared("strict"),
    oversubscribe: bool = _shared("oversubscribe"),
    bind_cores: bool = _shared("bind_cores", "--bind-cores"),
    knob: list[str] = typer.Option([], "--knob", "-k", help="ADAPTER.KNOB=VALUE, e.g. ddp.bucket_cap_mb=50."),
    option: list[str] = typer.Option([], "--option", "-o", help="Workload option KEY=VALUE, e.g. arch=resnet50."),
    until_target: bool = _flag(False, "--until-target",
                                      help="Train every adapter until the workload's accuracy target (time to "
                                           "target); no warm-up is discarded."),
    eval_every: Optional[int] = typer.Option(None, "--eval-every",
                                             help="With --until-target: evaluate every K steps (default: the "
                                                  "workload's)."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps",
                                            help="With --until-target: the step budget (default: the workload's)."),
    hosts: Optional[str] = _shared("hosts", "--hosts"),
    hostfile: Optional[Path] = _shared("hostfile", "--hostfile", parser=_path),
    nnodes: Optional[int] = _shared("nnodes", "--nnodes"),
    iface: Optional[str] = _shared("iface", "--iface"),
    host_launcher: str = _shared("launcher", "--launcher"),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="The row every other row is compared with, as a "
                                           "ratio with its 95% interval (default: the first row that runs on the "
                                           "whole world size)."),
    precision: Optional[str] = typer.Option(None, "--precision", help="Add interleaved rounds until every ratio's "
                                            "95% interval is this narrow (half-width), e.g. 5%, or the --budget is "
                                            "spent; at least 3 rounds."),
    budget: Optional[str] = typer.Option(None, "--budget", help="With --precision: time the rounds may take, e.g. "
                                         "600s, 10m, 2h (default 10m)."),
    order_seed: Optional[int] = typer.Option(None, "--order-seed", help="Seed of the shuffled order of rows within "
                                             "each round (default: a fresh one; every record keeps it)."),
):
    """Run the comparison and write records.jsonl, report.md and plots."""
    from harness.core import comparison as runmod
    from harness.reports import run_report as report_run

    req = RunRequest(adapters=split(adapters_), workload=workload, world_size=world_size, device=device,
                     steps=steps, warmup=warmup, global_batch=global_batch, repeats=repeats, threads=threads,
                     equiv_steps=equiv_steps, timeout_s=timeout,
                     stall_s=stall_timeout, out=_out(out), force=force, strict=strict,
                     oversubscribe=oversubscribe, bind_cores=bind_cores, knobs=knob, options=option,
                     until_target=until_target, eval_every=eval_every, max_steps=max_steps, hosts=hosts,
                     hostfile=hostfile, nnodes=nnodes,
                     iface=iface, launcher=host_launcher, baseline=baseline, precision=precision, budget=budget,
                     order_seed=order_seed)
    try:
        plan = runmod.plan(req)
    except BadInput as exc:
        _fail(str(exc))
    req.command = _typed(_resolved_command(plan))
    _stop_on_signals()
    records, interrupted = _execute(runmod.execute, plan, RunUI(), _STARTED)
    for line in report_run.console_verdict(records):
        console.print(line)
    console.print(report_run.console_table(records))
    _warn_shared(records, lambda r: f"{r['label']}#{r['repeat']}")
    took = f" ({time.time() - _STARTED:.0f} s)" if _STARTED else ""
    console.print(f"wrote {plan.out}/report.md, records.jsonl and plots{took}")
    if interrupted:
        done = sum(r["status"] not in ("not_run", "unavailable") for r in records)
        typer.echo(f"interrupted: children stopped; {done} row(s) kept in {plan.out}", err=True)
        raise typer.Exit(130)
    if not any(r["status"] in MEASURED for r in records):
        raise typer.Exit(1)


def _resolved_command(plan) -> str:
    r, until = plan.request, plan.until_target
    length = (["--steps", str(plan.steps), "--warmup", str(plan.warmup)] if until is None else
              ["--until-target", "--eval-every", str(until.eval_every), "--max-steps", str(until.max_steps)])
    args = ["compare", "run", "--adapters", ",".join(row.label for row in plan.rows), "--workload", r.workload,
            "--world-size", str(r.world_size), "--device", r.device, *length,
            "--global-batch", str(plan.global_batch), "--repeats", str(r.repeats)]
    if r.baseline is not None:
        args += ["--baseline", r.baseline]
    if plan.precision is not None:
        args += ["--precision", f"{plan.precision * 100:g}%", "--budget", f"{plan.budget_s:g}s"]
    for k in r.knobs:
        args += ["--knob", k]
    for o in r.options:
        args += ["--option", o]
    topo = plan.topology
    if topo is not None:
        if topo.launcher == "slurm":
            args += ["--launcher", "slurm", "--nnodes", str(len(topo.nodes))]
        else:
            args += ["--hosts", ",".join(f"{n.host}:{n.slots}" for n in topo.nodes)]
        if topo.iface:
            args += ["--iface", topo.iface]
    return shlex.join(args)


@app.command("sbatch", cls=_Command, short_help="A ready sbatch script that runs this comparison under SLURM.")
def sbatch_cmd(
    adapters_: Optional[str] = typer.Option(None, "--adapters", "-a", help="As for `compare run`."),
    workload: str = typer.Option(workloads.DEFAULT, "--workload", "-w", help="As for `compare run`."),
    nodes: Optional[int] = typer.Option(None, "--nodes", help="Nodes of the allocation (required)."),
    ntasks_per_node: Optional[int] = typer.Option(None, "--ntasks-per-node", help="Ranks per node (required)."),
    time_limit: Optional[str] = typer.Option(None, "--time", help="SLURM time limit, e.g. 00:30:00."),
    partition: Optional[str] = typer.Option(None, "--partition", help="SLURM partition."),
    job_name: str = typer.Option("compare", "--job-name", help="SLURM job name."),
    exclusive: bool = _flag(True, help="Ask for whole nodes (--no-exclusive: share them)."),
    script: Optional[Path] = typer.Option(None, "--script", parser=_path,
                                          help="Write the script here (default: print it)."),
    world_size: Optional[int] = typer.Option(None, "--world-size", "-n", help="Must equal nodes x ntasks."),
    device: str = typer.Option("cpu", "--device"),
    steps: Optional[int] = typer.Option(None), warmup: Optional[int] = typer.Option(None),
    global_batch: Optional[int] = typer.Option(None, "--global-batch"),
    repeats: int = typer.Option(1), threads: Optional[int] = _shared("threads"),
    equiv_steps: Optional[int] = typer.Option(None, "--equiv-steps"),
    timeout: float = _shared("timeout_s", "--timeout"), stall_timeout: float = _shared("stall_s", "--stall-timeout"),
    out: Optional[str] = typer.Option(None),
    force: bool = _flag(False, help="Replace --script, and pass --force to the run."),
    strict: bool = _shared("strict"),
    oversubscribe: bool = _shared("oversubscribe"),
    bind_cores: bool = _shared("bind_cores", "--bind-cores"),
    knob: list[str] = typer.Option([], "--knob", "-k"), option: list[str] = typer.Option([], "--option", "-o"),
    iface: Optional[str] = _shared("iface", "--iface"),
):
    """Write a ready sbatch script that runs this comparison across the nodes of a SLURM allocation."""
    from harness.core import runner
    from harness.core import slurm_script as sbatch

    req = RunRequest(adapters=split(adapters_), workload=workload, world_size=world_size, device=device,
                     steps=steps, warmup=warmup, global_batch=global_batch, repeats=repeats, threads=threads,
                     equiv_steps=equiv_steps, timeout_s=timeout,
                     stall_s=stall_timeout, out=_out(out), force=force, strict=strict,
                     oversubscribe=oversubscribe, bind_cores=bind_cores, knobs=knob, options=option, iface=iface,
                     launcher="slurm")
    try:
        sbatch.check(req, nodes, ntasks_per_node, time_limit, partition, job_name)
        runner.plan_rows(req)  # the run's own options, checked as `compare run` checks them
    except BadInput as exc:
        _fail(str(exc))
    run_args: list[str] = []
    for flag, value, default in (("--adapters", adapters_, None), ("--workload", workload, workloads.DEFAULT),
                                 ("--device", device, "cpu"), ("--steps", steps, None), ("--warmup", warmup, None),
                                 ("--global-batch", global_batch, None), ("--repeats", repeats, 1),
                                 ("--threads", threads, None), ("--equiv-steps", equiv_steps, None),
                                 ("--timeout", timeout, Request.timeout_s),
                                 ("--stall-timeout", stall_timeout, Request.stall_s),
                                 ("--out", out, None), ("--iface", iface, None)):
        if value != default:
            run_args += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    run_args += [flag for flag, on in (("--force", force), ("--strict", strict), ("--oversubscribe", oversubscribe),
                                       ("--bind-cores", bind_cores)) if on]
    run_args += [a for k in knob for a in ("--knob", k)] + [a for o in option for a in ("--option", o)]
    text = sbatch.render(run_args, _typed("compare sbatch (API)"), nodes, ntasks_per_node, time_limit, partition,
                         job_name, exclusive)
    if script is None:
        typer.echo(text, nl=False)
        return
    try:
        sbatch.write(script, text, force)
    except BadInput as exc:
        _fail(str(exc))
    console.print(f"wrote {script}: submit it with `sbatch {script}`")


@app.command(cls=_Command, short_help="Sweep world sizes: speed-up, efficiency, memory, prediction.")
def scale(
    adapters_: Optional[str] = typer.Option(None, "--adapters", "-a",
                                            help="Comma-separated adapters (NAME:KNOB=VALUE:... for a variant; "
                                                 "default: every adapter)."),
    workload: str = typer.Option(workloads.DEFAULT, "--workload", "-w", help="Workload name (see `compare list`)."),
    world_sizes: Optional[str] = typer.Option(None, "--world-sizes",
                                              help="Increasing comma list, e.g. 1,2,4 (default: 1 and every size "
                                                   "up to the usable cores)."),
    scaling: str = typer.Option("strong", help="strong: fixed global batch; weak: fixed per-rank batch (global "
                                               "batch grows with N, LR by the workload's rule)."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda."),
    steps: Optional[int] = typer.Option(None, help="Timed steps per point (default: the workload's)."),
    warmup: Optional[int] = typer.Option(None, help="Warm-up steps per point (default: the workload's)."),
    global_batch: Optional[int] = typer.Option(None, "--global-batch",
                                               help="Strong: the global batch; weak: the per-rank batch (default: "
                                                    "the workload's global batch)."),
    repeats: int = typer.Option(1, help="Fresh launches per point; the spread is reported."),
    threads: Optional[int] = typer.Option(None, help="Threads per rank at every point (default: usable cores / "
                                                     "the largest world size that fits)."),
    equiv_steps: Optional[int] = typer.Option(None, "--equiv-steps",
                                              help="Steps compared with the single-process reference (0: skip)."),
    timeout: float = _shared("timeout_s", "--timeout"),
    stall_timeout: float = _shared("stall_s", "--stall-timeout"),
    out: Optional[str] = typer.Option(None, help="Output directory (default: results/scale_<workload>_<hw>_<time>)."),
    force: bool = _shared("force"),
    strict: bool = _shared("strict"),
    oversubscribe: bool = _shared("oversubscribe"),
    bind_cores: bool = _shared("bind_cores", "--bind-cores"),
    straggler: Optional[str] = typer.Option(None, help="RANK:FACTOR: that rank computes FACTOR times slower."),
    knob: list[str] = typer.Option([], "--knob", "-k", help="ADAPTER.KNOB=VALUE, e.g. ddp.bucket_cap_mb=50."),
    option: list[str] = typer.Option([], "--option", "-o", help="Workload option KEY=VALUE."),
    comm: list[Path] = typer.Option([], "--comm", parser=_path, help="`compare comm` results to calibrate the model "
                                                                     "with (default: measure them here)."),
    model: bool = _flag(True, help="Calibrate the performance model and predict (--no-model: skip the "
                                          "comm sweep and the prediction)."),
    profile: list[str] = typer.Option(["h100-sxm-ndr400"], "--profile",
                                      help="Hardware profile(s) to extrapolate to (see `compare predict --list`)."),
    predict_to: int = typer.Option(1024, "--predict-to", help="Largest world size predicted."),
    profile_steps: int = typer.Option(10, "--profile-steps", help="Steps per batch size of the compute profile."),
):
    """Sweep world sizes: speed-up, efficiency, memory and load balance, and the model's prediction."""
    from harness.core import sweep as scalemod
    from harness.core.requests import ScaleRequest
    from harness.reports import scale_report as report_scale

    try:
        sizes = scalemod.parse_world_sizes(world_sizes)
    except BadInput as exc:
        _fail(str(exc))
    req = ScaleRequest(adapters=split(adapters_), workload=workload, world_sizes=sizes, scaling=scaling,
                       device=device, steps=steps, warmup=warmup, global_batch=global_batch, repeats=repeats,
                       threads=threads, equiv_steps=equiv_steps, timeout_s=timeout,
                       stall_s=stall_timeout, out=_out(out), force=force,
                       strict=strict, oversubscribe=oversubscribe, bind_cores=bind_cores, straggler=straggler,
                       knobs=knob, options=option, comm_dirs=comm, model=model,
                       profiles=list(dict.fromkeys(profile)), predict_to=predict_to, profile_steps=profile_steps)
    try:
        plan = scalemod.plan(req)
    except BadInput as exc:
        _fail(str(exc))
    req.command = _typed("compare scale (API)")
    _stop_on_signals()
    records, interrupted = _execute(scalemod.execute, plan, ScaleUI(), lambda line: console.print("  " + escape(line)),
                                    _STARTED)
    for line in report_scale.console_lines(plan.out, records):
        console.print(line)
    _warn_shared(records, lambda r: f"{r['label']}@{r['scale']['point']}#{r['repeat']}")
    took = f" ({time.time() - _STARTED:.0f} s)" if _STARTED else ""
    console.print(f"wrote {plan.out}/report.md, records.jsonl and plots{took}")
    if interrupted:
        typer.echo(f"interrupted: children stopped; finished points kept in {plan.out}", err=True)
        raise typer.Exit(130)
    if not any(r["status"] == "ok" for r in records):
        raise typer.Exit(1)


@app.command(cls=_Command, short_help="The performance model: predicted against measured, extrapolated.")
def predict(
    directories: Optional[list[Path]] = typer.Argument(
        None, metavar="DIRECTORY", show_default=False, parser=_path,
        help="`compare scale` results directories (omit: only the published checks; several: each sweep's predicted "
             "vs measured, then the model's accuracy across them)."),
    profile: list[str] = typer.Option([], "--profile", help="Hardware profile(s) to extrapolate to (default: the "
                                                            "sweep's; with several directories, only those "
                                                            "given)."),
    to: int = typer.Option(1024, "--to", help="Largest world size predicted."),
    list_profiles: bool = _flag(False, "--list", help="List the hardware profiles and exit."),
    validate: bool = _flag(False, "--validate", help="Score the sweeps made with the current model version "
                           "(pass, fail or undecidable per point, beside the naive sum of parts and the world-size-1 "
                           "step, and the ranking's rho) and list the others as the data the model was developed "
                           "on."),
):
    """The performance model: predicted vs measured for scale sweeps (and its accuracy over several), extrapolation
    to a hardware profile, and the check against published scaling results."""
    from harness.model import calibration as scale_model
    from harness.model import costmodel, published, render
    from harness.reports import MALFORMED
    from harness.reports import scale_report as report_scale

    names = costmodel.profiles()
    if list_profiles:
        for name in names:
            try:
                f = costmodel.load_profile(name)
            except costmodel.BadProfile as exc:
                console.print(f"{name}: [yellow]cannot be used[/]: {escape(str(exc))}")
                continue
            console.print(f"{name}: {f.device}, {f.devices_per_node} per node, all-reduce busbw "
                          f"{f.intra_busbw_Bps / 1e9:g} GB/s in a node, {f.inter_busbw_Bps / 1e9:g} GB/s across nodes")
        return
    for name in profile:
        problem = costmodel.profile_problem(name)
        if problem:
            _fail(problem)
    lo, hi = costmodel.PREDICT_TO
    if not lo <= to <= hi:
        _fail(f"--to must be from {lo} to {hi:,} (the extrapolation gives 8, 16, 64, 256, ... workers up to it), "
              f"got {to}")
    profile = list(dict.fromkeys(profile))  # a profile named twice is extrapolated once
    sweeps: dict[Path, tuple[Path, list[dict]]] = {}
    for directory in directories or []:  # every directory is checked before anything is printed
        records = _read_run(directory, "`compare scale`")
        if records[0].get("kind") != "scale":
            _fail(f"{directory} holds `compare {records[0].get('kind', 'run')}` results; give a directory written by "
                  f"`compare scale`")
        try:
            from harness import reports as report

            report.check_kind(records)
        except ValueError as exc:
            _fail(_malformed(directory, exc, "predict from"))
        sweeps.setdefault(directory.resolve(), (directory, records))  # a directory named twice counts once
    if validate and not sweeps:
        _fail("--validate needs the `compare scale` directories to score, e.g. compare predict --validate "
              "results/scale_*")
    if validate:
        judged_sweeps = []
        for directory, records in sweeps.values():
            try:
                rows = render.predict_sweep(lambda line: None, directory, records, report_scale.table(records),
                                            profile, to, to_profiles=False)
            except MALFORMED as exc:
                _fail(_malformed(directory, exc, "predict from"))
            judged_sweeps.append((directory, records, rows))
        for line in render.validation_lines(judged_sweeps):
            console.print(escape(line), soft_wrap=True)  # one line per sweep, whatever the width
        return
    judged: list[tuple[Path, list[dict], list[dict]]] = []
    for directory, records in sweeps.values():
        try:
            rows = render.predict_sweep(console.print, directory, records, report_scale.table(records), profile, to,
                                        to_profiles=len(sweeps) == 1 or bool(profile))
        except MALFORMED as exc:
            _fail(_malformed(directory, exc, "predict from"))
        judged.append((directory, records, scale_model.judged(rows)))
    if len(sweeps) > 1:
        for line in render.accuracy_lines(judged):
            console.print(escape(line))
    console.print("[bold]published results vs the model[/]")
    problems: list[str] = []
    checks = published.configurations(problems)
    for line in problems:
        console.print(f"[yellow]warning[/]: {escape(line)}")
    for line in published.lines(checks, published.slowdowns()):
        console.print(escape(line), soft_wrap=True)


@app.command(cls=_Command, short_help="Which backend for a cluster: step time, memory, a recommendation.")
def plan(
    workload: Optional[str] = typer.Option(None, "--workload", "-w", help="Plan this workload's model (see `compare "
                                                                          "list`); or describe one with --params."),
    option: list[str] = typer.Option([], "--option", "-o", help="Workload option KEY=VALUE."),
    params: Optional[float] = typer.Option(None, "--params", help="A transformer's parameter count, e.g. 7e9 (with "
                                                                  "--layers)."),
    layers: Optional[int] = typer.Option(None, "--layers", help="Its transformer blocks."),
    hidden: Optional[int] = typer.Option(None, "--hidden", help="Its hidden size (gives per-matrix gradients, the "
                                                                "embedding and attention's FLOPs)."),
    seq_len: int = typer.Option(2048, "--seq-len", help="Tokens per sample of a model given by --params."),
    gpu: str = typer.Option("h100", "--gpu", help="The GPU, as a hardware profile (`compare predict --list`): "
                                                  "h100, a100, v100, p100 or a profile's full name."),
    nodes: int = typer.Option(1, "--nodes", help="Nodes."),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", help="GPUs per node (default: the "
                                                                              "profile's)."),
    nic_gbps: Optional[float] = typer.Option(None, "--nic-gbps", help="Line rate of each NIC in Gb/s (default: the "
                                                                      "profile's network)."),
    nics_per_node: int = typer.Option(1, "--nics-per-node", help="NICs per node, with --nic-gbps."),
    dtype: str = typer.Option("bf16", "--dtype", help="Training precision: bf16, fp16 or fp32."),
    batch: Optional[int] = typer.Option(None, "--batch", help="Samples per GPU per step (default: the workload's "
                                                              "global batch, or 8 sequences)."),
    global_batch: Optional[int] = typer.Option(None, "--global-batch", help="Samples per step over all GPUs "
                                                                            "(instead of --batch)."),
    optimizer: Optional[str] = typer.Option(None, "--optimizer", help="adamw or sgd (default: the workload's; "
                                                                      "adamw with --params)."),
    memory: Optional[float] = typer.Option(None, "--gpu-memory-gb", help="Memory per GPU (default: the "
                                                                         "profile's)."),
    as_json: bool = _flag(False, "--json", help="Print the plan as JSON."),
):
    """Which backend for a cluster that is not here: each framework's step time and samples/s on it (over an
    assumed range of utilisation), the model states each holds per GPU and whether they fit, and a recommendation
    with its margin."""
    import json as jsonmod

    from harness.model import planner as planmod

    model = ("a workload (-w, one of " + ", ".join(workloads.names()) + ") or a transformer's size (--params with "
             "--layers)")
    if workload is None and params is None:
        _fail(f"give the model to plan: {model}")
    if workload is not None and params is not None:
        _fail(f"give {model}, not both")
    if params is not None and layers is None:
        _fail("--params needs --layers (its transformer blocks), e.g. --params 7e9 --layers 32")
    if optimizer is not None and optimizer not in planmod.OPTIMIZERS:
        _fail(f"unknown --optimizer {optimizer}; choose from {', '.join(planmod.OPTIMIZERS)}")
    from harness.core.requests import pairs
    from harness.shared.options import OptionError
    from harness.shared.registry import UnknownName

    try:
        cluster = planmod.cluster(gpu, nodes, gpus_per_node, dtype, nic_gbps, nics_per_node, memory)
        per_gpu = planmod.check(cluster, batch, global_batch)
        if workload is not None:
            shape = planmod.of_workload(workload, dict(pairs(option, "option")), optimizer)
        else:
            shape = planmod.transformer(params, layers, hidden, seq_len, optimizer or "adamw")
    except (planmod.BadPlan, BadInput, UnknownName) as exc:
        _fail(str(exc).strip("'\""))
    except OptionError as exc:
        _fail(f"workload {workload}: {exc}")
    result = planmod.make(shape, cluster, per_gpu or shape.default_batch)
    if as_json:
        typer.echo(jsonmod.dumps(planmod.as_json(result), indent=2))
        return
    for line in planmod.lines(result):
        console.print(escape(line), soft_wrap=True)


def _malformed(directory: Path, exc: Exception, doing: str = "make a report of") -> str:
    """One line for records that pass the field check but that a report cannot be made of (nothing was written)."""
    return (f"cannot {doing} {directory}: its records.jsonl holds a record of a shape this compare cannot read "
            f"({type(exc).__name__}: {' '.join(str(exc).split())})" + ("; nothing was written" if "report" in doing
                                                                        else ""))


def _read_run(directory: Path, written_by: str = "`compare run`, `comm` or `scale`") -> list[dict]:
    """The records of a results directory, or a one-line error (exit 2). `written_by`: which commands' results
    the caller takes."""
    from harness.core.record import read_records

    path = directory / "records.jsonl"
    if not directory.exists():
        _fail(f"{directory} does not exist; give a directory written by {written_by}")
    if not directory.is_dir():
        _fail(f"{directory} is not a directory; give a directory written by {written_by}")
    if not path.is_file():
        _fail(f"no records.jsonl in {directory}; give a directory written by {written_by}")
    try:
        records = read_records(path)
    except (OSError, ValueError) as exc:
        _fail(f"cannot read {path}: {exc}")
    if not records:
        _fail(f"{path} holds no records")
    return records


@app.command("comm", cls=_Command, short_help="Benchmark and check collectives per backend.")
def comm_cmd(
    backends: Optional[str] = typer.Option(None, help="Comma-separated backends (default: all; unavailable ones "
                                                      "become rows with their reason)."),
    ops: Optional[str] = typer.Option(None, help="Comma-separated ops (default: all)."),
    sizes: str = typer.Option("1K:64M", help="LO:HI (doubling), or a comma list; units K, M, G (binary)."),
    world_size: Optional[int] = typer.Option(None, "--world-size", "-n", help="Ranks (default 2, or the hosts' "
                                                                            "slots)."),
    device: str = typer.Option("cpu", "--device"),
    dtype: str = typer.Option("fp32"),
    iters: int = typer.Option(50, help="Most timed iterations per cell (fewer for large sizes, at least 5)."),
    gap: float = typer.Option(0.0, "--gap", help="Milliseconds of busy work on every rank before each timed call, "
                                                "untimed, as a training step calls collectives after its compute "
                                                "(default 0: back to back, as nccl-tests)."),
    threads: Optional[int] = _shared("threads"),
    timeout: float = _shared("timeout_s", "--timeout"),
    stall_timeout: float = _shared("stall_s", "--stall-timeout"),
    out: Optional[str] = typer.Option(None, help="Output directory (default: results/comm_<hw>_n<N>_<time>)."),
    force: bool = _shared("force"),
    strict: bool = _shared("strict"),
    oversubscribe: bool = _shared("oversubscribe"),
    bind_cores: bool = _shared("bind_cores", "--bind-cores"),
    hosts: Optional[str] = _shared("hosts", "--hosts"),
    hostfile: Optional[Path] = _shared("hostfile", "--hostfile", parser=_path),
    nnodes: Optional[int] = _shared("nnodes", "--nnodes"),
    iface: Optional[str] = _shared("iface", "--iface"),
    host_launcher: str = _shared("launcher", "--launcher"),
):
    """Benchmark and check collective and point-to-point primitives per backend."""
    from harness.core import comm_bench as commmod
    from harness.reports import comm_report as report_comm

    req = CommRequest(backends=split(backends), ops=split(ops), sizes=sizes, world_size=world_size, device=device,
                      dtype=dtype, max_iters=iters, gap_s=gap / 1e3, threads=threads, timeout_s=timeout,
                      stall_s=stall_timeout, out=_out(out),
                      force=force,
                      strict=strict, oversubscribe=oversubscribe, bind_cores=bind_cores, hosts=hosts,
                      hostfile=hostfile, nnodes=nnodes, iface=iface, launcher=host_launcher)
    try:
        plan = commmod.plan(req)
    except BadInput as exc:
        _fail(str(exc))
    req.command = _typed("compare comm (API)")
    _stop_on_signals()
    over = " (oversubscribed)" if plan.oversubscribed else ""
    console.print(f"[bold]compare comm[/]: {len(plan.ops)} ops x {len(plan.sizes)} sizes, {req.world_size} ranks"
                  f"{_where(plan)}{over}, {dtype} -> {plan.out}")
    tuning_note()
    for row in plan.unavailable:
        console.print(f"  [yellow]{escape(row.label)}: unavailable[/] - {escape(first_sentence(row.reason))}")
    records, interrupted = _execute(commmod.execute, plan, lambda line: console.print("  " + escape(line)))
    for line in report_comm.summary_lines(records):
        console.print(escape(line))
    _warn_shared(records, lambda r: r["backend"])
    console.print(f"wrote {plan.out}/report.md, records.jsonl and busbw.png")
    if interrupted:
        typer.echo(f"interrupted: children stopped; finished backends kept in {plan.out}", err=True)
        raise typer.Exit(130)
    if not any(r["status"] == "ok" for r in records):
        raise typer.Exit(1)


@app.command("report", cls=_Command, short_help="Re-render a run's report.md and plots from its records.")
def report_cmd(directory: Path = typer.Argument(..., parser=_path, help="A run directory holding records.jsonl.")):
    """Re-render report.md and the plots of a run from its records.jsonl alone."""
    from harness import reports as report
    from harness.core import outdir

    records = _read_run(directory)
    pid = outdir.holder(directory)
    if pid is not None:  # its records are half written, and the run renders its own report when it ends
        _fail(f"{directory} is being written by a compare run that has not finished "
              f"({f'pid {pid}' if pid > 0 else 'its pid is not recorded'}); its report is written when it ends")
    try:
        report.render(directory, records)
    except OSError as exc:  # a directory it may not write to is bad input (2); a full disk is not (1)
        import errno

        _fail(f"could not write the report in {directory}: {exc.strerror or exc}",
              2 if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else 1)
    except report.MALFORMED as exc:
        _fail(_malformed(directory, exc))
    if report.kind(records) == "run":
        console.print(report.run.console_table(records))
    console.print(f"wrote {directory}/report.md and plots")


@app.command("index", cls=_Command, short_help="Regenerate DIR/README.md, the index of the runs under DIR.")
def index_cmd(directory: Path = typer.Argument(Path("results"), parser=_path,
                                              help="Directory of runs (default: results)."),
              force: bool = _flag(False, help="Replace a DIR/README.md that `compare index` did not write.")):
    """Regenerate DIR/README.md, the index of the runs under DIR, from their records."""
    from harness import reports as report

    if not directory.is_dir():
        _fail(f"{directory} is not a directory")
    if (directory / "records.jsonl").exists():
        _fail(f"{directory} is a run's own directory (it holds records.jsonl); give the directory that holds the "
              f"runs, e.g. {directory.parent}")
    if not report.has_runs(directory):
        _fail(f"no runs under {directory} (no {directory}/*/records.jsonl); give the directory that holds them, "
              f"e.g. results")
    readme = directory / "README.md"
    if readme.is_symlink() and not force:  # writing through it would put the index wherever the link points
        _fail(f"{readme} is a symbolic link to {os.readlink(readme)}; use --force to replace the link with the index")
    if readme.is_file() and not force and not report.is_index(readme):
        _fail(f"{readme} exists and was not written by `compare index`; use --force to replace it")
    try:
        path = report.index(directory, warn=lambda line: typer.echo(f"warning: {line}", err=True))
    except OSError as exc:
        _fail(f"cannot write the index {directory / 'README.md'}: {exc.strerror or exc}")
    console.print(f"wrote {path}")


@app.command("list", cls=_Command)
def list_cmd(device: str = typer.Option("cpu", help="Check availability for cpu or cuda."),
             world_size: int = typer.Option(2, "--world-size", "-n"),
             oversubscribe: bool = _shared("oversubscribe")):
    """Every adapter and workload, with availability and the reason."""
    from rich.table import Table

    if device not in DEVICES:
        _fail(f"unknown device '{device}'; valid choices: {', '.join(DEVICES)}")
    if world_size < 1:
        _fail(f"world size must be at least 1, got {world_size}")
    try:  # the world size `compare run` would refuse is refused here too, in the same words
        over = check_cores(Request(device=device, world_size=world_size, oversubscribe=oversubscribe), world_size)
    except BadInput as e:
        _fail(str(e))
    t = Table(title=f"Adapters (device {device}, world size {world_size}{', oversubscribed' if over else ''})")
    for col in ("adapter", "launcher", "available", "what it is / why not"):
        t.add_column(col)
    for name, avail in adapters.availability_all(device, world_size).items():
        try:
            cls = adapters.get(name)
            launcher, summary = cls.launcher, cls.summary
        except Exception:  # noqa: BLE001 - shown as the reason below
            launcher, summary = "?", ""
        t.add_row(name, launcher, "[green]yes[/]" if avail else "[red]no[/]",
                  escape(summary if avail else avail.message()))
    console.print(t)
    w = Table(title="Workloads")
    for col in ("workload", "global batch", "steps", "target", "what it is"):
        w.add_column(col)
    for name in workloads.names():
        wl = workloads.get(name)
        w.add_row(name, str(wl.global_batch), f"{wl.warmup}+{wl.steps}",
                  "–" if wl.target is None else f"acc ≥ {wl.target} (--until-target: every {wl.eval_every} steps, "
                                                f"≤ {wl.max_steps_to_target})", wl.summary)
    console.print(w)


@app.command("knobs", cls=_Command, short_help="Every knob of an adapter (or option of a workload).")
def knobs_cmd(name: Optional[str] = typer.Argument(None, help="An adapter or a workload (default: every adapter).")):
    """Every knob of an adapter (or option of a workload): the values it takes, its default and what it does, read
    from the declaration that checks them."""
    from harness.shared.options import catalogue

    if name is None:
        names = [("adapter", n) for n in adapters.names()]
    elif name in adapters.names():
        names = [("adapter", name)]
    elif name in workloads.names():
        names = [("workload", name)]
    else:
        _fail(f"unknown adapter or workload '{name}'; valid choices: {', '.join(adapters.names())} (adapters), "
              f"{', '.join(workloads.names())} (workloads)")
    for kind, n in names:
        try:
            cls = adapters.get(n).Knobs if kind == "adapter" else type(workloads.get(n)).Options
        except Exception as exc:  # noqa: BLE001 - an adapter whose module fails to import still lists the others
            console.print(f"[bold]{escape(n)}[/]: cannot read its knobs ({escape(type(exc).__name__)}: {escape(str(exc))})")
            continue
        rows = catalogue(cls)
        how = f"compare run -a {n}:KNOB=VALUE" if kind == "adapter" else f"compare run -w {n} -o OPTION=VALUE"
        console.print(f"[bold]{escape(n)}[/] ({kind}; {escape(how)})" + ("" if rows else ": none"))
        for r in rows:
            console.print(f"  [bold]{escape(r['name'])}[/]: {escape(r['values'])}; default {escape(r['default'])}")
            if r["doc"]:
                console.print(f"      {escape(r['doc'])}")


@app.command("doctor", cls=_Command, short_help="This machine's noise floor and the precision reachable here.")
def doctor_cmd(
    launches: int = typer.Option(5, "--launches", help="Launches of the row whose variation is measured (3 to 50)."),
    adapter: str = typer.Option("ddp", "--adapter", "-a", help="The row to launch (an adapter, with knobs if any)."),
    workload: str = typer.Option(workloads.DEFAULT, "--workload", "-w", help="Workload name (see `compare list`)."),
    steps: Optional[int] = typer.Option(None, help="Timed steps per launch (default: the workload's)."),
    as_json: bool = _flag(False, "--json", help="Print JSON instead of text."),
):
    """This machine's noise floor: what it is doing, how much one row varies from launch to launch, and what
    precision a comparison can reach here in what time (nothing is written)."""
    from harness.core import noise_floor as doctor

    try:
        planned, scratch = doctor.plan(adapter, workload, launches, steps)
    except BadInput as exc:
        _fail(str(exc))
    machine = doctor.sample_machine()
    if not as_json:
        for line in doctor.lines(machine, None):
            console.print(escape(line))
    _stop_on_signals()
    records = _execute(doctor.measure, planned, scratch, _QuietUI() if as_json else RunUI())
    try:
        floor = doctor.noise_floor(records)
    except RuntimeError as exc:
        _fail(f"cannot measure the noise floor: {exc}", 1)
    if as_json:
        typer.echo(json.dumps({"machine": machine, "noise_floor": floor}, indent=2, default=str))
        return
    for line in doctor.lines(machine, floor)[3:]:
        console.print(escape(line))


class _QuietUI(RunUI):
    """Progress for nobody (`--json` prints only the JSON)."""

    def __init__(self):
        self.live, self.tasks, self.bar = False, {}, None

    def start(self, plan):
        pass

    def begin(self, name, repeat, total):
        pass

    def _done(self, name, repeat, text, complete):
        pass


@app.command("env", cls=_Command, short_help="Versions, devices, launchers: paste into a bug report.")
def env_cmd(as_json: bool = _flag(False, "--json", help="Print everything as JSON."),
            full: bool = _flag(False, "--full", help="Print everything (torch's parallel info, each "
                                                            "framework's build check) instead of the summary.")):
    """Versions, devices, threads and launchers in a few lines: paste this into a bug report (--full: all of it)."""
    from harness.core import provenance as envmod
    from harness.core.requests import BadInput, require_torch

    try:
        require_torch()
    except BadInput as exc:  # still print what can be known: this is what a bug report about it needs
        info = {**envmod.collect(import_torch=False), "torch_error": str(exc)}
    else:
        info = envmod.collect()
        info["torch_parallel_info"] = envmod.parallel_info()
    info["launchers"] = envmod.launchers([adapters.get(n).launcher for n in adapters.names()])
    info["adapters"] = {}
    for name in adapters.names():
        entry = {"available_cpu": adapters.availability(name, "cpu", 2).message() or "yes"}
        try:
            cls = adapters.get(name)
            if full or as_json:  # each framework's own report (imports it: seconds for DeepSpeed and Horovod)
                entry.update(cls.environment())
            elif cls.distribution:
                from importlib import metadata

                try:
                    entry["version"] = metadata.version(cls.distribution)
                except metadata.PackageNotFoundError:  # not installed: its availability already says so
                    pass
        except Exception as exc:  # noqa: BLE001 - report, don't crash: this is for bug reports
            entry["error"] = f"{type(exc).__name__}: {exc}"
        info["adapters"][name] = entry
    if as_json:
        typer.echo(json.dumps(info, indent=2, default=str))
        return
    if not full:
        for line in envmod.summary_lines(info):
            typer.echo(line)  # whole lines, never folded: this is pasted into issues
        return
    for key, value in info.items():
        _print_tree(key, value, 0)


def _print_tree(key: str, value, depth: int) -> None:
    """Nested dicts as indented sections, multi-line text (horovodrun --check-build) as an indented block."""
    pad = "  " * depth
    name = f"[bold]{escape(str(key))}[/]" if depth == 0 else escape(str(key))
    if isinstance(value, dict):
        console.print(f"{pad}{name}", highlight=False)
        for k, v in value.items():
            _print_tree(k, v, depth + 1)
    elif isinstance(value, str) and "\n" in value:
        console.print(f"{pad}{name}:", highlight=False)
        for line in value.splitlines():
            if line.strip():
                console.print(f"{pad}  | {escape(line)}", highlight=False)
    else:
        console.print(f"{pad}{name}: {escape(str(value))}", highlight=False)


def main(argv: list[str] | None = None) -> None:
    global _TYPED_ARGV, _STARTED
    from harness.shared.proc import become_subreaper

    try:  # from the process's creation, so interpreter start-up and imports count too
        import psutil

        _STARTED = psutil.Process().create_time()
    except Exception:  # noqa: BLE001 - a clock reading is not worth failing for
        _STARTED = time.time()
    global _MAIN
    _MAIN = True
    become_subreaper()
    _TYPED_ARGV = list(sys.argv[1:] if argv is None else argv)
    app(args=_TYPED_ARGV, prog_name="compare")


if __name__ == "__main__":
    main()
