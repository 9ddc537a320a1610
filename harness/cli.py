"""The `compare` command line (also `python -m harness`).

    compare list                       every adapter and workload, with availability and the reason
    compare env                        versions, devices, threads and launchers, for a bug report
    compare run                        default workload, every adapter, world size 2 on this machine
    compare run --adapters ddp,spawn --workload resnet --steps 20 --repeats 3
    compare report results/<run>/      re-render report.md and the plots from records.jsonl

Bad input exits with code 2 and one line on stderr naming the problem and the valid choices; nothing is written.
"""

from __future__ import annotations

import json
import shlex
import signal
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

import adapters
import workloads
from harness.runner import BadInput, Request

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True,
                  help="Run one PyTorch workload through interchangeable data-parallel backends and compare them.")
# Wide enough for the results table when output is piped (CI logs, `| tee`), where rich would assume 80 columns.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 150)
_TYPED_ARGV: list[str] | None = None


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _split(value: Optional[str]) -> Optional[list[str]]:
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


class RunUI:
    """Live progress: one line per launch, with phase and step, then a line with its result."""

    def __init__(self):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description:<18}"), BarColumn(bar_width=30),
                                 MofNCompleteColumn(), TextColumn("{task.fields[phase]}"), TimeElapsedColumn(),
                                 console=console, transient=False)
        self.tasks: dict[tuple[str, int], int] = {}

    def start(self, plan):
        req = plan.request
        names = ", ".join(n for n, _ in plan.runnable)
        console.print(f"[bold]compare run[/]: workload [bold]{req.workload}[/], world size {req.world_size}, "
                      f"device {req.device}, adapters {names}; {plan.warmup} warm-up + {plan.steps} timed steps, "
                      f"{req.repeats} repeat(s) -> {plan.out}")
        for name, _, reason in plan.unavailable:
            console.print(f"  [yellow]{name}: unavailable[/] - {escape(reason)}")
        self.bar.start()

    def begin(self, name, repeat, total):
        label = name if repeat == 0 else f"{name} (repeat {repeat + 1})"
        self.tasks[(name, repeat)] = self.bar.add_task(label, total=total, phase="launching")

    def progress(self, name, repeat, pr):
        self.bar.update(self.tasks[(name, repeat)], completed=pr.get("step", 0), phase=pr.get("phase", ""))

    def reference_done(self, outcome):
        task = self.tasks[("reference", 0)]
        if outcome.status == "ok":
            self.bar.update(task, completed=self.bar.tasks[task].total, phase="[green]reference ok[/]")
        else:
            self.bar.update(task, phase=f"[red]{outcome.status}[/]: {escape(outcome.reason)} "
                                             "(max_param_diff will be empty)")

    def finished(self, rec):
        task = self.tasks[(rec["label"], rec["repeat"])]
        if rec["status"] == "ok":
            self.bar.update(task, completed=self.bar.tasks[task].total,
                                 phase=f"[green]ok[/] {rec['samples_per_s']:,.0f} samples/s")
        else:
            self.bar.update(task, phase=f"[red]{rec['status']}[/]: {escape(rec['reason'])}")

    def interrupted(self):
        self.bar.stop()

    def stop(self):
        self.bar.stop()


@app.command()
def run(
    adapters_: Optional[str] = typer.Option(None, "--adapters", "-a",
                                            help="Comma-separated adapters (default: every adapter, unavailable "
                                                 "ones listed with their reason)."),
    workload: str = typer.Option(workloads.DEFAULT, "--workload", "-w", help="Workload name (see `compare list`)."),
    world_size: int = typer.Option(2, "--world-size", "-n", help="Ranks (devices for DataParallel)."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda."),
    steps: Optional[int] = typer.Option(None, help="Timed steps (default: the workload's)."),
    warmup: Optional[int] = typer.Option(None, help="Warm-up steps, discarded (default: the workload's)."),
    global_batch: Optional[int] = typer.Option(None, "--global-batch",
                                               help="Global batch (default: the workload's); LR follows its rule."),
    repeats: int = typer.Option(1, help="Fresh launches per adapter; the spread is reported."),
    threads: Optional[int] = typer.Option(None, help="Threads per process (default: usable cores / processes)."),
    equiv_steps: Optional[int] = typer.Option(None, "--equiv-steps",
                                              help="Steps compared with the single-process reference (0: skip)."),
    timeout: float = typer.Option(900.0, help="Seconds before a launch is killed and recorded as timeout."),
    out: Optional[Path] = typer.Option(None, help="Output directory (default: results/<workload>_<hw>_<time>)."),
    force: bool = typer.Option(False, help="Overwrite results already in --out."),
    knob: list[str] = typer.Option([], "--knob", "-k", help="ADAPTER.KNOB=VALUE, e.g. ddp.bucket_cap_mb=50."),
    option: list[str] = typer.Option([], "--option", "-o", help="Workload option KEY=VALUE, e.g. arch=resnet50."),
):
    """Run the comparison and write records.jsonl, report.md and plots."""
    from harness import report, runner

    typed = "compare " + shlex.join(_TYPED_ARGV) if _TYPED_ARGV else None
    req = Request(adapters=_split(adapters_), workload=workload, world_size=world_size, device=device,
                  steps=steps, warmup=warmup, global_batch=global_batch, repeats=repeats, threads=threads,
                  equiv_steps=equiv_steps, timeout_s=timeout, out=out, force=force, knobs=knob, options=option)
    try:
        plan = runner.plan(req)
    except BadInput as exc:
        _fail(str(exc))
    req.command = typed or _resolved_command(plan)
    ui = RunUI()
    try:
        records = runner.execute(plan, ui)
    except KeyboardInterrupt:
        done = len(list((plan.out / "records.jsonl").open())) if (plan.out / "records.jsonl").exists() else 0
        typer.echo(f"interrupted: children stopped; {done} finished row(s) kept in {plan.out}", err=True)
        raise typer.Exit(130)
    ui.stop()
    console.print(report.console_table(records))
    console.print(f"wrote {plan.out}/report.md, records.jsonl and plots")
    if not any(r["status"] == "ok" for r in records):
        raise typer.Exit(1)


def _resolved_command(plan) -> str:
    r = plan.request
    args = ["compare", "run", "--adapters", ",".join(n for n, _ in plan.runnable), "--workload", r.workload,
            "--world-size", str(r.world_size), "--device", r.device, "--steps", str(plan.steps),
            "--warmup", str(plan.warmup), "--global-batch", str(plan.global_batch), "--repeats", str(r.repeats)]
    for k in r.knobs:
        args += ["--knob", k]
    for o in r.options:
        args += ["--option", o]
    return shlex.join(args)


@app.command("comm")
def comm_cmd(
    backends: Optional[str] = typer.Option(None, help="Comma-separated backends (default: all; unavailable ones "
                                                      "listed with their reason)."),
    ops: Optional[str] = typer.Option(None, help="Comma-separated ops (default: all)."),
    sizes: str = typer.Option("1K:64M", help="LO:HI (doubling), or a comma list; units K, M, G (binary)."),
    world_size: int = typer.Option(2, "--world-size", "-n"),
    device: str = typer.Option("cpu", "--device"),
    dtype: str = typer.Option("fp32"),
    iters: int = typer.Option(50, help="Most timed iterations per cell (fewer for large sizes, at least 5)."),
    timeout: float = typer.Option(900.0, help="Seconds before a backend's launch is killed."),
    out: Optional[Path] = typer.Option(None, help="Output directory (default: results/comm_<hw>_n<N>_<time>)."),
    force: bool = typer.Option(False, help="Overwrite results already in --out."),
):
    """Benchmark and check collective and point-to-point primitives per backend."""
    from harness import commrun

    req = commrun.CommRequest(backends=_split(backends), ops=_split(ops), sizes=sizes, world_size=world_size,
                              device=device, dtype=dtype, max_iters=iters, timeout_s=timeout, out=out, force=force)
    try:
        plan = commrun.plan(req)
    except BadInput as exc:
        _fail(str(exc))
    req.command = "compare " + shlex.join(_TYPED_ARGV) if _TYPED_ARGV else "compare comm (API)"
    console.print(f"[bold]compare comm[/]: {len(plan['ops'])} ops x {len(plan['sizes'])} sizes, "
                  f"{world_size} ranks, {dtype} -> {plan['out']}")
    try:
        records = commrun.execute(plan, ui=lambda line: console.print("  " + line))
    except KeyboardInterrupt:
        typer.echo(f"interrupted: children stopped; finished backends kept in {plan['out']}", err=True)
        raise typer.Exit(130)
    for line in commrun.summary_lines(records):
        console.print(line)
    console.print(f"wrote {plan['out']}/report.md, records.jsonl and busbw.png")
    if not any(r["status"] == "ok" for r in records):
        raise typer.Exit(1)


@app.command("report")
def report_cmd(directory: Path = typer.Argument(..., help="A run directory holding records.jsonl.")):
    """Re-render report.md and the plots of a run from its records.jsonl alone."""
    from harness import record, report

    path = directory / "records.jsonl"
    if not path.is_file():
        _fail(f"no records.jsonl in {directory}; give a directory written by `compare run`")
    try:
        records = record.read_records(path)
    except (ValueError, KeyError) as exc:
        _fail(f"cannot read {path}: {exc}")
    if not records:
        _fail(f"{path} holds no records")
    if records[0].get("kind") == "comm":
        from harness import commrun

        commrun.render(directory, records)
    else:
        report.render(directory, records)
        console.print(report.console_table(records))
    console.print(f"wrote {directory}/report.md and plots")


@app.command("index")
def index_cmd(directory: Path = typer.Argument(Path("results"), help="Directory of runs (default: results).")):
    """Regenerate DIR/README.md, the index of the runs under DIR, from their records."""
    from harness import report

    if not directory.is_dir():
        _fail(f"{directory} is not a directory")
    console.print(f"wrote {report.index(directory)}")


@app.command("list")
def list_cmd(device: str = typer.Option("cpu", help="Check availability for cpu or cuda."),
             world_size: int = typer.Option(2, "--world-size", "-n")):
    """Every adapter and workload, with availability and the reason."""
    from rich.table import Table

    t = Table(title=f"Adapters (device {device}, world size {world_size})")
    for col in ("adapter", "launcher", "available", "what it is / why not"):
        t.add_column(col)
    for name in adapters.names():
        avail = adapters.availability(name, device, world_size)
        try:
            cls = adapters.get(name)
            launcher, summary = cls.launcher, cls.summary
        except Exception:  # noqa: BLE001 - shown as the reason below
            launcher, summary = "?", ""
        t.add_row(name, launcher, "[green]yes[/]" if avail else "[red]no[/]",
                  summary if avail else avail.message())
    console.print(t)
    w = Table(title="Workloads")
    for col in ("workload", "global batch", "steps", "target", "what it is"):
        w.add_column(col)
    for name in workloads.names():
        wl = workloads.get(name)
        w.add_row(name, str(wl.global_batch), f"{wl.warmup}+{wl.steps}",
                  "–" if wl.target is None else f"acc ≥ {wl.target}", wl.summary)
    console.print(w)


@app.command("env")
def env_cmd(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")):
    """Versions, devices, threads and launchers: paste this into a bug report."""
    from harness import env as envmod

    info = envmod.collect()
    info["launchers"] = envmod.launchers()
    info["torch_parallel_info"] = envmod.parallel_info()
    info["adapters"] = {}
    for name in adapters.names():
        entry = {"available_cpu": adapters.availability(name, "cpu", 2).message() or "yes"}
        try:
            entry.update(adapters.get(name).environment())
        except Exception as exc:  # noqa: BLE001 - report, don't crash: this is for bug reports
            entry["error"] = f"{type(exc).__name__}: {exc}"
        info["adapters"][name] = entry
    if as_json:
        typer.echo(json.dumps(info, indent=2, default=str))
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


def _sigterm_as_interrupt(signum, frame):
    # A CI job runner or `timeout` sends SIGTERM: stop the children and keep finished rows, as for Ctrl-C.
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    global _TYPED_ARGV
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    _TYPED_ARGV = list(sys.argv[1:] if argv is None else argv)
    app(args=_TYPED_ARGV, prog_name="compare")


if __name__ == "__main__":
    main()
