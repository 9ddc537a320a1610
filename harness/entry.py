"""The `compare` command's entry point (pyproject.toml [project.scripts]).

Runs in: the parent, first. Importing the CLI (typer, rich, the harness) takes a few tenths of a second; a Ctrl-C
in that window ends the command quietly with exit code 130, as one after it does, instead of a traceback from
the middle of an import.
"""

from __future__ import annotations

import os
import signal
import sys


def _tolerant_streams() -> None:
    """In a locale whose encoding is not UTF-8 (LC_ALL=C without Python's coercion, ISO-8859-1, ...) a character
    the terminal cannot show (≥, ✓, –) is printed as '?' instead of ending the command; files are always UTF-8."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if encoding != "utf8" and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="replace")
            except (ValueError, OSError):
                pass


class _LossyStdout:
    """Standard output that may fail to take what is printed (`> /dev/full`, a vanished terminal: ENOSPC, EIO)
    without ending the command: a run keeps measuring and writes its files. From the first failed write on, the
    descriptor points to /dev/null, so nothing fails again, not even the flush at exit. A closed pipe (EPIPE)
    ends the command quietly, as `compare list | head` expects, except once `keep_on_closed_pipe` is set: the
    commands that measure (run, scale, comm) set it once their input is checked (harness/cli.py), so that minutes
    of measurement are written to their results directory rather than abandoned half-made."""

    def __init__(self, stream, lost: str | None = None):
        self._stream = stream
        self.keep_on_closed_pipe = False
        self.wrote_files = False
        """Set by a command once its product is in files (harness/commands/common.py: wrote_to)."""
        self.lost = lost
        """Why what was printed did not arrive (the first failed write's error), None while everything did."""

    def _guard(self, call, *args):
        try:
            return call(*args)
        except BrokenPipeError:
            if not self.keep_on_closed_pipe:
                raise
            return self._to_null(args, None)
        except OSError as exc:
            return self._to_null(args, exc.strerror or str(exc))

    def _to_null(self, args, why):
        if self.lost is None:  # (a write of '' fails too, flushing what was buffered before it)
            self.lost = why
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())
            os.close(null)
        except (OSError, ValueError):
            pass
        return len(args[0]) if args else None

    def write(self, text):
        return self._guard(self._stream.write, text)

    def flush(self):
        return self._guard(self._stream.flush)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def main() -> None:
    _tolerant_streams()
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # Started in the background of a shell without job control (`compare run &` in a script), which leaves
        # SIGINT ignored: compare takes it over once it launches (harness/launching/interrupt.py), so a Ctrl-C
        # while it checks the workload was dropped while one minutes later stopped it. It stops compare throughout.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # A closed descriptor (`compare list >&-`) is None here: /dev/null takes its place (and its number, the lowest
    # free, so the launched processes inherit a valid one), and what this command prints is known to be lost.
    sys.stdout = (_LossyStdout(sys.stdout) if sys.stdout is not None else
                  _LossyStdout(open(os.devnull, "w"), lost="it is closed"))  # noqa: SIM115 - for the process's life
    sys.stderr = _LossyStdout(sys.stderr if sys.stderr is not None else open(os.devnull, "w"))  # noqa: SIM115
    try:
        os.getcwd()
    except FileNotFoundError:  # torch, launchers and relative --out paths all fail later in obscure ways
        sys.stderr.write("error: the current directory no longer exists; cd to an existing directory and run "
                         "again\n")
        sys.exit(2)
    try:
        from harness.cli import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except Exception:
        shadow = _shadowed()
        if shadow is None:
            raise
        sys.stderr.write(f"error: {shadow}\n")
        sys.exit(2)
    try:
        cli_main()
    except SystemExit as exc:
        code = _output_lost(exc.code)
        _leave_user_threads(code)
        raise SystemExit(code) from None
    code = _output_lost(0)
    _leave_user_threads(code)
    if code:
        sys.exit(code)


def _output_lost(code):
    """The exit code, 1 instead of success where what a command that only prints printed never arrived (`compare
    list > /dev/full`, a closed standard output), with one line on stderr saying so, as `ls` and `cat` do. A
    command whose product is in files (a run's results, a report) keeps its exit code."""
    out = sys.stdout
    try:
        out.flush()  # what is still buffered: a failure to write it is seen here, not after the exit code is set
    except (OSError, ValueError):
        pass
    if (code not in (0, None) or not isinstance(out, _LossyStdout) or out.lost is None or out.keep_on_closed_pipe
            or out.wrote_files):
        return code
    sys.stderr.write(f"error: could not write to standard output ({out.lost[:1].lower() + out.lost[1:]}): what "
                     f"this command printed is lost\n")
    return 1


def _leave_user_threads(code) -> None:
    """End the process now where threads other than daemons are still running once the command is done: the check
    before launching runs the user's code in this process (their workload function, their model's forward), and a
    thread it started (a prefetcher, a watchdog) would otherwise keep Python waiting at exit for ever, after the
    results were written. They are named; the exit handlers still run. Returns where there is none."""
    import atexit
    import threading

    left = [t for t in threading.enumerate()
            if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if not left:
        return
    if isinstance(code, str):
        sys.stderr.write(code + "\n")
    from harness.shared.text import listed

    names = listed([t.name for t in left])
    # by the user's code, or by a library it called (torch.compile's pool of compile workers), which a thread's
    # stack cannot always tell apart (a thread of time.sleep has no frame of anyone's)
    sys.stderr.write(f"compare: not waiting for {len(left)} thread(s) still running in this process ({names}), "
                     f"started while the check before launching ran the workload's code, by it or by a library it "
                     f"called (torch.compile's compile workers, say); a thread of yours: make it a daemon thread or "
                     f"end it\n")
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)


def _shadowed() -> str | None:
    """When importing the CLI failed: a module of this project that was loaded from somewhere else (a file of the
    same name earlier on PYTHONPATH), named with where it came from."""
    import importlib.util
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    for name in ("adapters", "workloads", "harness"):
        mod = sys.modules.get(name)
        try:  # one the failed import had not reached yet: where it would be loaded from
            spec = mod.__spec__ if mod is not None else importlib.util.find_spec(name)
        except (ImportError, ValueError, AttributeError):
            continue
        if spec is None:
            continue
        where = [Path(p) for p in (spec.submodule_search_locations or [])] or (
            [Path(spec.origin)] if spec.has_location and spec.origin else [])
        if not where or not any(p.resolve() == repo / name for p in where):
            shown = ", ".join(map(str, where)) or "a namespace with no files"
            return (f"the module '{name}' was loaded from {shown}, not from this project ({repo / name}): something "
                    f"on PYTHONPATH shadows it; remove it from there")
    return None
