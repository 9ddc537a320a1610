"""Every error that reaches the command line as one line on stderr with its exit code: click's usage errors (an
unknown option or command, with the closest valid ones), a request refused (BadInput and the classes derived from
it: a results directory that cannot be read, a workload reference that gives no workload, ...), and the user's own
code raising (their traceback, not ours).

Runs in: the parent.
"""

from __future__ import annotations

import sys

import typer

from harness.commands.common import Group
from harness.ground.errors import BadInput
from harness.shared.registry import UserCodeError, raised_in_compare, raised_in_user_code
from harness.shared.text import newlines_shown

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
        except BadInput as exc:  # a refused request, wherever a command met it: one line, exit 2, nothing written
            # one line whatever the user typed: a value holding a newline (`compare knobs $'a\nb'`) is shown escaped
            typer.echo(f"error: {newlines_shown(str(exc))}", err=True)
            sys.exit(2)
        except UserCodeError as exc:  # the user's own workload raised: their traceback, not ours
            if raised_in_compare(exc.exc):  # raised in compare's code, no frame of theirs: compare's own bug
                import traceback

                sys.stderr.write("".join(traceback.format_exception(exc.exc)))
                sys.stderr.write(f"error: {exc.doing} raised {type(exc.exc).__name__} in compare's own code, not "
                                 f"yours (traceback above: a bug in compare); nothing was run or written\n")
                sys.exit(1)
            sys.stderr.write(exc.user_traceback())
            sys.stderr.write(f"error: {exc.doing} raised {type(exc.exc).__name__} in your code (traceback above); "
                             f"nothing was run or written" + (f"; {exc.hint}" if getattr(exc, "hint", None) else "")
                             + "\n")
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
        except Exception as exc:  # noqa: BLE001 - one raised through the user's own workload code is theirs
            if not raised_in_user_code(exc):
                raise
            sys.stderr.write(UserCodeError("", exc).user_traceback())
            sys.stderr.write(f"error: your workload's code raised {type(exc).__name__} (traceback above)\n")
            sys.exit(1)
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)  # the commands return nothing; typer.Exit(n) returns n
