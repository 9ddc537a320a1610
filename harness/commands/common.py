"""What every command module shares: the console, one-line errors, the typed command line, the run's start time,
signal handling for the commands that launch processes, and the line for records no report can be made of.

Runs in: the parent.
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperCommand, TyperGroup

from harness.ground.errors import BadInput
from harness.launching import interrupt
from harness.shared.text import listed, newlines_shown

# Wide enough for the results table when output is piped (CI logs, `| tee`), where rich would assume 80 columns.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 150)


class Invocation:
    """How compare was started: as the `compare` command (main), with the arguments typed, at a time."""

    argv: list[str] | None = None
    started: float | None = None
    """When the process was created (interpreter start-up and imports count too)."""
    main = False
    """True when run as the `compare` command (not in process, as the tests' CliRunner does)."""


def typed(fallback: str) -> str:
    """The command as typed ("compare run -a ddp"), or `fallback` when compare was not started from a shell."""
    return "compare " + shlex.join(Invocation.argv) if Invocation.argv else fallback


def took() -> str:
    """" (12 s)" since compare started, when it is known."""
    return f" ({time.time() - Invocation.started:.0f} s)" if Invocation.started else ""


class PlainHelpFlag:
    """--help as a plain flag in --help itself (typer shows a `<bool>` placeholder beside it, as beside every flag
    not declared with metavar="")."""

    def get_help_option(self, ctx):
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option


class Command(PlainHelpFlag, TyperCommand):
    """Every subcommand: its --help lists the options under the titles of the sections of its request (Rows,
    Workload, Rounds, ..., harness/core/requests.py), the rest under "Options"."""

    def format_options(self, ctx, formatter) -> None:
        groups: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                groups.setdefault(getattr(param, "rich_help_panel", None) or "Options", []).append(record)
        for title, records in groups.items():
            with formatter.section(title):
                formatter.write_dl(records)


    def parse_args(self, ctx, args: list[str]) -> list[str]:
        once_only(self.params, args)
        return super().parse_args(ctx, args)


def once_only(params, args: list[str]) -> None:
    """BadInput where an option that is not repeatable is given more than once before `--`, by any of its spellings
    (`--steps 2 --steps=3`, `-a ddp -addp`, `--plots --no-plots`): click keeps the last value without a word, so
    `run -a ddp,spawn -a ddp` ran ddp alone. Options declared repeatable (`-o`, `-k`, ...) may be given again."""
    by_spelling = {spelling: p for p in params if getattr(p, "opts", None) and p.param_type_name == "option"
                   for spelling in (*p.opts, *p.secondary_opts)}
    given: dict[str, list[str]] = {}

    def seen(p, spelling: str, value: str | None) -> None:
        if not p.multiple:
            given.setdefault(p.name, []).append(spelling if p.is_flag else value)

    rest = list(args)
    if "--help" in rest[:rest.index("--") if "--" in rest else len(rest)]:
        return  # the help, whatever else was typed
    while rest:
        token = rest.pop(0)
        if token == "--":
            break
        if token.startswith("--"):
            spelling, eq, value = token.partition("=")
            p = by_spelling.get(spelling)
            if p is not None:
                if not p.is_flag and not eq and rest:
                    value = rest.pop(0)
                seen(p, spelling, value)
        elif token.startswith("-") and len(token) > 1:
            for i, char in enumerate(token[1:], 1):  # short options, each a flag but the last, which may take a value
                p = by_spelling.get(f"-{char}")
                if p is None:
                    break
                if not p.is_flag:
                    value = token[i + 1:] or (rest.pop(0) if rest else None)
                    seen(p, f"-{char}", value)
                    break
                seen(p, f"-{char}", None)
    for name, values in given.items():
        if len(values) > 1:
            p = next(p for p in params if p.name == name)
            long = max(p.opts, key=len)
            times = "twice" if len(values) == 2 else f"{len(values)} times"
            shown = [str(v) for v in values]
            both = f"{', '.join(shown[:-1])} and {shown[-1]}"
            what = f" ({both})" if not p.is_flag or len(set(values)) > 1 else ""
            raise BadInput(f"{long} is given {times}{what}; give it once")


class Group(PlainHelpFlag, TyperGroup):
    """The `compare` group itself (harness/cli.py adds its one-line usage errors)."""


def fail(message: str, code: int = 2) -> None:
    """One line "error: MESSAGE" and exit `code`; bad input (2) stays one line whatever the user typed (a newline in
    a value is shown escaped, as harness/commands/usage_errors.py does for a refusal raised)."""
    typer.echo(f"error: {newlines_shown(message) if code == 2 else message}", err=True)
    raise typer.Exit(code)


def flag(default: bool, *decls: str, **kwargs) -> Any:
    """A boolean option as a plain flag in --help (no `<bool>` placeholder), for the few commands whose options are
    not a request's."""
    return typer.Option(default, *decls, metavar="", **kwargs)


def stop_on_signals() -> None:
    """For the commands that launch processes: Ctrl-C, and the SIGTERM of a CI job runner or `timeout`, and a
    closed terminal's SIGHUP, stop the children and keep finished rows (harness/launching/interrupt.py); and a
    closed pipe on stdout (`compare run | head -1`) no longer ends the command: the rest of its output is dropped
    and the measurement is written (harness/entry.py: _LossyStdout)."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "keep_on_closed_pipe"):
            stream.keep_on_closed_pipe = True
    if Invocation.main:
        interrupt.install()


def wrote_to(where: str) -> None:
    """The line that says where a command wrote its product, which is then in files, not in what it prints: a lost
    standard output (`> /dev/full`) costs it nothing and its exit code stays (harness/entry.py: _output_lost)."""
    if hasattr(sys.stdout, "wrote_files"):
        sys.stdout.wrote_files = True
    console.print(f"wrote {where}", soft_wrap=True)


def tuning_note() -> None:
    """One line naming the framework tuning variables the ranks will inherit from this shell (also in the report)."""
    from harness.ground.provenance import tuning_env

    t = tuning_env()
    if t:
        console.print("  [yellow]note[/]: set in this environment and inherited by the ranks (recorded in the "
                      "report): " + escape(", ".join(f"{k}={v}" for k, v in t.items())))


def where(plan) -> str:
    """", on 2 nodes (h1:1, h2:1; ssh, iface mn0)" for a multi-node plan, else nothing."""
    topo = plan.topology
    if topo is None:
        return ""
    from harness.launching.hosts import describe_slots

    same = "; simulated hosts or node ranks on this machine" if topo.one_machine else ""
    return escape(f", on {len(topo.nodes)} nodes ({describe_slots(topo.nodes)}; {topo.launcher}, iface "
                  f"{topo.iface or 'auto'}{same})")


def warn_shared(records, name) -> None:
    """A warning line when rows were measured while another compare run was running here (the report says it too)."""
    from harness.launching import machine

    for line in machine.note(records, name):
        console.print(f"[yellow]warning[/]: {escape(line.replace('**', ''))}")


def drew(out: Path) -> bool:
    """Whether a run or sweep that began in an empty (or cleared) `out` left a plot there: none without matplotlib,
    with --no-plots, or when nothing was measured; "and plots" is said only then."""
    return out.is_dir() and any(out.glob("*.png"))


def conclude(records, out, interrupted: bool, wrote: str, kept: str = "row(s)", strict: bool = False) -> None:
    """The end of a command that measured: the shared-cores warning, where it wrote (one line: a path cut over two
    cannot be pasted), and the exit code: 130 interrupted (finished launches kept), 1 nothing measured, or with
    `strict` (--strict) any launch that failed, timed out, stalled or diverged, for a script or CI to see."""
    import typer

    from harness.ground.record import MEASURED

    warn_shared(records, lambda r: f"{r['label']}#{r['repeat']}")
    wrote_to(f"{out}/{wrote}{took()}")
    if interrupted:
        # the measured ones apart from those stopped part-way (the row the signal stopped measured nothing)
        measured = sum(r["status"] in MEASURED for r in records)
        stopped = sum(r["status"] not in (*MEASURED, "not_run", "unavailable") for r in records)
        typer.echo(f"interrupted: children stopped; {measured} measured {kept}"
                   f"{f' and {stopped} stopped part-way' if stopped else ''} kept in {out}", err=True)
        raise typer.Exit(130)
    if not any(r["status"] in MEASURED for r in records):
        raise typer.Exit(1)
    bad = sorted({r["label"] for r in records if r["status"] in ("failed", "timeout", "diverged")})
    if strict and bad:
        typer.echo(f"error: --strict: {listed(bad)} did not run to the end (the report says why)", err=True)
        raise typer.Exit(1)


def planned(plan, req, command: str):
    """The start of a command that measures and is its request again (`compare comm`, `compare scale`): its plan
    (`plan(req)`: BadInput for bad input, nothing written), its command line as typed recorded in the request, and
    Ctrl-C (or SIGTERM) stopping its children from now on."""
    from harness.ground.argv import to_argv

    p = plan(req)
    req.command = typed(shlex.join(["compare", command, *to_argv(req)]))
    stop_on_signals()
    return p


def measured(records, out, wrote: str, interrupted: bool, kept: str, name) -> None:
    """The end of `compare comm` and `compare scale`: the shared-cores warning (each record named by `name`), where it
    wrote (one line: a path cut over two cannot be pasted), and the exit code: 130 interrupted (the finished `kept`
    are), 1 nothing measured."""
    import typer

    warn_shared(records, name)
    wrote_to(f"{out}/{wrote}")
    if interrupted:
        typer.echo(f"interrupted: children stopped; finished {kept} kept in {out}", err=True)
        raise typer.Exit(130)
    if not any(r["status"] == "ok" for r in records):
        raise typer.Exit(1)


def sweep_leftovers() -> None:
    """Remove what the launches of compare runs that were killed left on this machine (harness/launching/leftovers.py),
    saying so in one line: every command that launches does it before its first launch, and `compare doctor`."""
    from harness.launching import leftovers

    for line in leftovers.lines(leftovers.sweep_dead()):
        typer.echo(f"note: {line}", err=True)  # on stderr: `compare doctor --json` prints JSON alone


def execute(execute_plan, plan, *args):
    """Run a plan; map its failures to exit codes (BadInput, 2: another run holds --out; 1: results not written)."""
    from harness.core.session import SessionError
    from harness.launching import machine

    for other in machine.others():  # said now, before minutes of measuring; the rows it overlaps are marked too
        console.print(f"[yellow]warning[/]: another compare run is running on this machine (pid {other['pid']}"
                      + (f": {escape(other['command'])}" if other.get("command") else "") + "); the rows measured "
                      "while it runs share the cores with it and will be marked")
    sweep_leftovers()
    try:
        return execute_plan(plan, *args)
    except SessionError as exc:
        fail(str(exc), 1)


def malformed(directory: Path | str, exc: Exception, doing: str = "make a report of", whose: str = "its",
              wrote_nothing: bool | None = None) -> str:
    """One line for records that pass the field check but that `doing` cannot use (`directory`: one, or several in
    words, whose records.jsonl `whose` says: "a ... of theirs"); "nothing was written" where the command would have
    written (a report, by default; `wrote_nothing` says so for another)."""
    written = "report" in doing if wrote_nothing is None else wrote_nothing
    records = "its records.jsonl" if whose == "its" else f"a records.jsonl of {whose}"
    return (f"cannot {doing} {directory}: {records} holds a record of a shape this compare cannot read "
            f"({type(exc).__name__}: {' '.join(str(exc).split())})" + ("; nothing was written" if written else ""))
