"""Name -> class registries with lazy imports, shared by adapters/ and workloads/, and what they find outside this
repository: installed packages' entry points, and (for workloads) a file or module named on the command line.

Runs in: the parent and every rank. Modules are imported only when their entry is asked for, so a framework that
is not installed never breaks `compare list` ("This importlib loading ... allows runners to avoid installing the
dependencies of all the supported frameworks", AlgoPerf). An installed package adds entries with one line of its
own pyproject (`[project.entry-points."compare.workloads"] mine = "mypkg.models:mine"`), as pytest finds its
plug-ins through `pytest11`; a built-in name always wins over an entry point of the same name.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import re
import signal
import sys
import threading
import traceback
from importlib import import_module, metadata
from pathlib import Path
from typing import Any

from harness.shared.bad_input import BadInput

_OURS = tuple(str(Path(__file__).resolve().parents[2] / pkg) for pkg in ("harness", "adapters", "workloads"))
"""This project's source folders: frames from them are left out of a traceback shown as the user's."""


class UnknownName(BadInput, KeyError):
    """A name that is not in a registry; its message names the valid choices. Bad input (one line, exit 2); also a
    KeyError, as a failed lookup is (hardware.load_profile's callers catch it as one)."""

    def __init__(self, kind: str, name: str, valid: list[str], hint: str = ""):
        super().__init__(name)
        self.message = f"unknown {kind} '{name}'; valid choices: {', '.join(valid)}{hint}"

    def __str__(self) -> str:
        return self.message


class BadReference(BadInput, ValueError):
    """A file, module or entry point that does not give what was asked for (no such file, no such NAME, not a
    workload): bad input, one line naming what is wrong and what would do."""


class UserCodeError(Exception):
    """An exception raised inside the user's own code (importing their file or module, calling their workload
    function, their model's forward): shown as their traceback, without this project's frames, and exit code 1.
    Not a BadInput: the request may be sound and their code is what failed, and a traceback is what they need."""

    def __init__(self, doing: str, exc: BaseException, hint: str | None = None):
        super().__init__(f"{doing}: {type(exc).__name__}: {exc}")
        self.doing, self.exc, self.hint = doing, exc, hint  # hint: what it means and its fix, where compare knows

    def user_traceback(self) -> str:
        """The exception's traceback with the frames of this project (and of the import machinery) left out."""
        tb = traceback.TracebackException.from_exception(self.exc)
        for te in _chain(tb):
            te.stack = traceback.StackSummary.from_list(
                [f for f in te.stack if not f.filename.startswith(_OURS) and not f.filename.startswith("<frozen")])
        return "".join(tb.format())


class UserExit(BadReference):
    """The user's code, while compare loaded it, called sys.exit() or raised KeyboardInterrupt itself (not a Ctrl-C):
    one line naming where, exit code 2, where the process used to exit with the user's code and say nothing."""


@contextlib.contextmanager
def user_code(doing: str):
    """Run the user's own code (importing their file, calling their workload function): SystemExit and a
    KeyboardInterrupt that no Ctrl-C caused become UserExit. A real Ctrl-C meanwhile stays a KeyboardInterrupt: a
    SIGINT handler of our own, in place while their code runs, notes that one arrived."""
    signalled = []
    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGINT) if main else None

    def interrupted(signum, frame):
        # whatever handled SIGINT before still does (compare's own, a test's, Python's default); this one only notes
        # that a real one arrived
        if before is signal.SIG_IGN:
            return None
        signalled.append(signum)
        if callable(before):
            return before(signum, frame)
        raise KeyboardInterrupt

    if main and before is not None:
        signal.signal(signal.SIGINT, interrupted)
    global _MOVED_FROM
    try:
        was = Path(os.getcwd())
    except FileNotFoundError:
        was = None
    try:
        yield
    except SystemExit as exc:
        raise UserExit(f"{doing}: your code called sys.exit({exc.code!r}){_where(exc)}; a workload's code must not "
                       f"exit while it is loaded (put a script's own code under `if __name__ == \"__main__\":`); "
                       f"nothing was run or written") from None
    except KeyboardInterrupt as exc:
        if signalled or not main:
            raise
        raise UserExit(f"{doing}: your code raised KeyboardInterrupt{_where(exc)}, though nobody pressed Ctrl-C; a "
                       f"workload's code must not raise it while it is loaded; nothing was run or written") from None
    finally:
        if main and before is not None:
            signal.signal(signal.SIGINT, before)
        try:
            now = Path(os.getcwd())
        except FileNotFoundError:
            now = None
        if was is not None and now != was and _MOVED_FROM is None:
            _MOVED_FROM = was  # the first move counts: compare's own relative paths were given there


def raised_in_user_code(exc: BaseException) -> bool:
    """Whether the exception passed through a frame of the user's own code: a file that is neither this project's
    nor the standard library's nor an installed package's."""
    import sysconfig

    libraries = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})
    return any(not f.filename.startswith(_OURS + libraries) and not f.filename.startswith("<")
               for f in traceback.extract_tb(exc.__traceback__))


def raised_in_compare(exc: BaseException) -> bool:
    """Whether the exception was raised in this project's own code with no frame of the user's on the way: a bug of
    compare's met while it handled their workload (one raised in torch from their model, say, is not)."""
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and frames[-1].filename.startswith(_OURS) and not raised_in_user_code(exc)


def _where(exc: BaseException) -> str:
    """" (at models.py:12)": the innermost frame of the user's code in the exception's traceback ("" if none)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith(_OURS) and not f.filename.startswith("<") and
              "contextlib" not in f.filename]
    return f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""


def _chain(tb: traceback.TracebackException):
    seen = set()
    while tb is not None and id(tb) not in seen:
        seen.add(id(tb))
        yield tb
        tb = tb.__cause__ or tb.__context__


def is_reference(name: str) -> bool:
    """Whether `name` points outside the registry: `path/to/file.py:NAME`, `package.module:NAME`, or a path."""
    return ":" in name or name.endswith(".py") or "/" in name


def split_reference(ref: str) -> tuple[str, str, bool]:
    """(where, NAME, whether `where` is a file path) of `path/to/file.py:NAME` or `package.module:NAME` (NAME ""
    when none is given)."""
    where, colon, attr = ref.rpartition(":")
    if not colon:
        where, attr = ref, ""
    return where, attr, where.endswith(".py") or "/" in where


_MOVED_FROM: Path | None = None
"""The directory this process was in when the user's code changed it (os.chdir in their file or workload
function), until compare goes back to it (returned_from_users_directory); None while it has not."""


def returned_from_users_directory() -> str | None:
    """Go back to the directory the user's code left, where it did: the directory it moved to, else None."""
    global _MOVED_FROM
    if _MOVED_FROM is None:
        return None
    try:
        moved = os.getcwd()
    except FileNotFoundError:
        moved = "a directory since removed"
    os.chdir(_MOVED_FROM)
    _MOVED_FROM = None
    return moved


def resolvable_reference(ref: str) -> str:
    """A file reference with its path made absolute, so a process started in another directory resolves it; a
    module reference unchanged."""
    where, attr, is_file = split_reference(ref)
    return f"{_as_given(where).resolve()}:{attr}" if is_file and attr else ref


def _as_given(where: str) -> Path:
    """A file reference's path as the command line gave it: a relative one is read where compare was when the
    user's code changed the directory (os.chdir to find its data), else here."""
    path = Path(where).expanduser()
    return _MOVED_FROM / path if _MOVED_FROM is not None else path


def load_reference(ref: str, kind: str = "workload") -> tuple[Any, str]:
    """(the object `ref` names, where it came from) for `path/to/file.py:NAME` or `package.module:NAME`.
    BadReference for what is not there; UserCodeError when importing the user's code raises."""
    where, attr, is_file = split_reference(ref)
    if is_file:
        path = _as_given(where)  # after the user's os.chdir the file was "missing" from the next lookup
        if not path.exists():
            raise BadReference(f"{kind} file {where} does not exist (in {Path.cwd()}); give -w PATH.py:NAME")
        if not path.is_file():
            raise BadReference(f"{kind} file {where} is not a file; give -w PATH.py:NAME")
        module = _import_file(path.resolve())
        source = f"file {path.resolve()}"
    else:
        module = _import_module(where, kind)
        source = f"module {where}"
    if not attr:
        raise BadReference(f"{kind} '{ref}' names no object: add ':NAME' (-w {where}:NAME){_offers(module, kind)}")
    if not attr.isidentifier():
        raise BadReference(f"{kind} '{ref}': '{attr}' is not a Python name; give -w {where}:NAME")
    if not hasattr(module, attr):
        raise BadReference(f"{where} has no '{attr}'{_offers(module, kind)}")
    return getattr(module, attr), source


def _offers(module, kind: str) -> str:
    """"; it defines: a, b" (what in `module` could be meant), for an error message."""
    found = [name for name, obj in vars(module).items()
             if not name.startswith("_") and getattr(obj, "__module__", None) == module.__name__
             and (getattr(obj, "__compare_workload__", None) is not None or _is_workload_class(obj))]
    return f"; {kind}s it defines: {', '.join(found)}" if found else ""


def _is_workload_class(obj) -> bool:
    return isinstance(obj, type) and any(c.__name__ == "Workload" and c.__module__ == "workloads.base"
                                         for c in obj.__mro__[1:])


def _import_file(path: Path):
    """A user's Python file as a module of its own (its folder first on sys.path, as when it runs as a script, so
    it can import its neighbours); imported once per process."""
    stem = re.sub(r"\W", "_", path.stem)
    name = f"compare_user_{stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise BadReference(f"{path} cannot be imported as Python (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    sys.modules[name] = module  # before it runs: dataclasses and pickling look their module up by name
    try:
        with user_code(f"importing {path}"):
            spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - the user's code: shown as their traceback
        del sys.modules[name]
        if isinstance(exc, UserExit):
            raise
        raise UserCodeError(f"importing {path}", exc) from None
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _import_module(name: str, kind: str):
    if not all(part.isidentifier() for part in name.split(".")):
        raise BadReference(f"{kind} module '{name}' is not a dotted Python name; give -w package.module:NAME or "
                           f"-w path/to/file.py:NAME")
    try:
        with user_code(f"importing {name}"):
            return import_module(name)
    except UserExit:
        raise
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            raise BadReference(f"no module named '{exc.name}' (for {kind} {name}): install its package into this "
                               f"environment, or give a file: -w path/to/file.py:NAME") from None
        raise UserCodeError(f"importing {name}", exc) from None
    except Exception as exc:  # noqa: BLE001 - the user's code: shown as their traceback
        raise UserCodeError(f"importing {name}", exc) from None


class Registry:
    """Entries `name -> (module, attribute, preset)`; `get(name)` imports the module and returns the attribute.

    `hidden` entries can be looked up but are not listed (the equivalence reference is not a comparison row).
    `group` is the entry-point group through which installed packages add entries (`compare.workloads`).
    """

    def __init__(self, kind: str, entries: dict[str, str | tuple[str, dict[str, Any]]], attribute: str,
                 hidden: dict[str, str] | None = None, group: str | None = None, hint: str = ""):
        self.kind, self.attribute, self.group, self.hint = kind, attribute, group, hint
        self._entries = {name: (e, {}) if isinstance(e, str) else e for name, e in entries.items()}
        self._hidden = {name: (module, {}) for name, module in (hidden or {}).items()}
        self._points: dict[str, metadata.EntryPoint] | None = None

    def entry_points(self) -> dict[str, metadata.EntryPoint]:
        """Installed packages' entries of this registry's group, by name (read once per process)."""
        if self._points is None:
            found = metadata.entry_points(group=self.group) if self.group else []
            self._points = {ep.name: ep for ep in sorted(found, key=lambda ep: ep.name)}
        return self._points

    def names(self) -> list[str]:
        """Listed names, in registry order (the order of rows in a default comparison), then installed packages'
        entry points (those not shadowed by a built-in name), by name."""
        return list(self._entries) + [n for n in self.entry_points() if n not in self._entries]

    def source(self, name: str) -> str:
        """Where `name` comes from, in words: "built-in", "entry point of DIST VERSION (VALUE)", or for a reference
        "file PATH" / "module NAME"."""
        if name in self._entries or name in self._hidden:
            return "built-in"
        ep = self.entry_points().get(name)
        if ep is not None:
            dist = getattr(ep, "dist", None)
            return f"entry point of {dist.name} {dist.version} ({ep.value})" if dist else f"entry point ({ep.value})"
        return load_reference(name, self.kind)[1]

    def shadowed(self) -> list[str]:
        """Entry points that a built-in name hides: "NAME (DIST's VALUE)", for `compare list` to say so."""
        return [f"{n} ({ep.value})" for n, ep in self.entry_points().items() if n in self._entries]

    def entry(self, name: str, references: bool = False) -> tuple[Any, dict[str, Any]]:
        """(the registered attribute, its preset options) for `name`; UnknownName if it is not registered. With
        `references`, `name` may also be `path/to/file.py:NAME` or `package.module:NAME` (load_reference)."""
        found = self._entries.get(name) or self._hidden.get(name)
        if found is not None:
            module, preset = found
            return getattr(import_module(module), self.attribute), dict(preset)
        ep = self.entry_points().get(name)
        if ep is not None:
            try:
                with user_code(f"loading entry point {name} ({ep.value})"):
                    return ep.load(), {}
            except UserExit:
                raise
            except Exception as exc:  # noqa: BLE001 - the installed package's code
                raise UserCodeError(f"loading entry point {name} ({ep.value})", exc) from None
        if references and is_reference(name):
            where, attr, is_file = split_reference(name)
            if not is_file and where in self.names() and importlib.util.find_spec(where.split(".")[0]) is None:
                # `digits:x`: a built-in name read as package.module:NAME
                raise BadReference(f"{self.kind} '{name}': '{where}' is a built-in {self.kind}, named without ':' "
                                   f"(-w {where}; its options: -o KEY=VALUE, listed by compare knobs {where}); "
                                   f"a module of yours is -w package.module:NAME, a file -w path/to/file.py:NAME")
            return load_reference(name, self.kind)[0], {}
        raise UnknownName(self.kind, name, self.names(), self.hint)
