"""A request dataclass is its command's options: each field that the command line sets says how (`cli(...)` in its
metadata), its default is the field's default and its help the field's docstring, so nothing about an option is
written twice. The same declaration turns a request back into the arguments that give it (`to_argv`): the command a
run records, the `compare run` line of an sbatch script and every "re-run with" line come from it and cannot drift
from the options the command takes. harness/commands/declare.py makes the typer commands from these declarations.

Runs in: the parent.

    @dataclass
    class RunRequest(Request):
        adapters: list[str] | None = field(default=None, metadata=cli("--adapters", "-a", csv=True))
        \"\"\"Comma-separated adapters; ...\"\"\"

    to_argv(RunRequest(adapters=["ddp", "fsdp"], steps=5))   # ["--adapters", "ddp,fsdp", "--steps", "5"]
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.shared.cache import cached_json, files_key
from harness.shared.options import attribute_docs


@dataclass(frozen=True)
class Cli:
    """How the command line sets one request field."""

    flags: tuple[str, ...] = ()
    """Its names, the long one first ("--adapters", "-a"); none: --<the field's name with dashes>."""
    argument: bool = False
    """A positional argument instead of an option."""
    required: bool = False
    """An argument that must be given (its field's default is only a placeholder)."""
    csv: bool = False
    """A list field given as one comma-separated value ("-a ddp,fsdp"); otherwise a list field is a repeated option
    ("-o arch=resnet50 -o depth=2")."""
    to_field: Callable[[Any], Any] | None = None
    """The value as typed (after its type's conversion) -> the field's value (milliseconds -> seconds, say)."""
    to_text: Callable[[Any], Any] | None = None
    """The inverse of to_field, for to_argv."""
    kind: type | None = None
    """The type the command line takes when it is not the field's own (a field of seconds set in milliseconds)."""
    metavar: str | None = None
    help: str | None = None
    """Only where the field's docstring is for readers of the code, not of --help."""
    negatable: bool = True
    """A boolean as --x/--no-x (False: a plain flag, --x alone)."""
    parser: Callable[[str], Any] | None = None
    """Turns the typed text into the value, refusing what it cannot (an empty path, say)."""


def cli(*flags: str, **kwargs: Any) -> dict[str, Cli]:
    """Field metadata: `field(default=..., metadata=cli("--steps"))`."""
    return {"cli": Cli(tuple(flags), **kwargs)}


@dataclass(frozen=True)
class Option:
    """One field as its command line sees it."""

    name: str
    """The field's name."""
    spec: Cli
    default: Any
    """The field's default (a default_factory's value for lists)."""
    help: str
    kind: type
    """What one typed value is: str, int, float, bool or Path."""
    many: bool
    """A list of values (repeated, or comma-separated when spec.csv)."""
    optional: bool
    panel: str | None = None
    """The group it is listed under in --help: its section's title, or the command's own (PANEL)."""

    @property
    def flags(self) -> tuple[str, ...]:
        return self.spec.flags or (f"--{self.name.replace('_', '-')}",)

    @property
    def long(self) -> str:
        return max(self.flags, key=len)


def _inner(tp: Any) -> tuple[Any, bool]:
    """(the type without `| None`, whether None is allowed)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def options(cls: type) -> list[Option]:
    """The fields of request class `cls` that its command line sets: those of each section it takes (a base with a
    SECTION title) in the order it names them, its own (and its command bases', the most derived first) before the
    sections of how and where it runs (WHERE: launch, hosts, output).
    The help is its HELP's for the field, else the declaration's, else the field's docstring."""
    return list(_options(cls))


def declaring(cls: type, name: str) -> type:
    """The class among `cls` and its dataclass bases that declares field `name` (the most derived one)."""
    return next(k for k in cls.__mro__ if name in vars(k).get("__annotations__", {}))


@functools.lru_cache(maxsize=None)
def _options(cls: type) -> tuple[Option, ...]:
    """options(cls), worked out once per class (a command line is read and written back several times a run)."""
    hints = typing.get_type_hints(cls)
    docs, own = _field_docs(cls), getattr(cls, "HELP", {})
    mro = [k for k in cls.__mro__ if dataclasses.is_dataclass(k)]
    sections = [k for k in mro if vars(k).get("SECTION")]
    where = [k for k in sections if getattr(k, "WHERE", False)]  # how and where it runs, after what it runs
    order = [k for k in sections if k not in where] + [k for k in mro if k not in sections] + where
    out = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get("cli")
        if spec is None:
            continue
        tp, optional = _inner(hints[f.name])
        many = typing.get_origin(tp) is list and spec.kind is None
        kind = spec.kind or (typing.get_args(tp)[0] if many else tp)
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        help_text = own.get(f.name) or spec.help or docs.get(f.name, "")
        if not help_text:
            raise TypeError(f"{cls.__name__}.{f.name} is a command-line option without a docstring (its --help)")
        home = declaring(cls, f.name)
        panel = vars(home).get("SECTION") or getattr(home, "PANEL", None)
        out.append((order.index(home), len(out),
                    Option(f.name, spec, default, " ".join(help_text.split()), kind, many, optional, panel)))
    return tuple(o for _, _, o in sorted(out, key=lambda t: t[:2]))


def _field_docs(cls: type) -> dict[str, str]:
    """attribute_docs(cls), kept in the cache directory keyed by the files that declare the request and its bases:
    reading them from source parses each module (0.2 s of a core for the commands' requests, which every `compare`
    command line declared again before this cache)."""
    import inspect

    declared = [k for k in reversed(cls.__mro__) if dataclasses.is_dataclass(k)]
    try:
        files = [Path(inspect.getsourcefile(k) or "") for k in declared]
    except TypeError:  # no source file (a class made at run time)
        files = []
    if not files or not all(f.is_file() for f in files):
        return attribute_docs(cls)
    key = "|".join([files_key(files), *(f"{k.__module__}.{k.__qualname__}" for k in declared)])
    return cached_json(f"field_docs/{cls.__module__}.{cls.__qualname__}", key, lambda: attribute_docs(cls))


def from_values(cls: type, values: dict[str, Any], **fixed: Any):
    """The request the command line's parsed `values` (by field name, each already of its option's kind) give."""
    kwargs = dict(fixed)
    for opt in options(cls):
        if opt.name not in values:
            continue
        value = values[opt.name]
        if opt.many and not value and opt.default is None and not opt.spec.csv:
            value = None  # a repeated option given no time, whose default (None) says so
        if value is None and opt.many and opt.default is not None:
            continue  # a variadic argument given nothing: the field's default
        if opt.many and opt.spec.csv and isinstance(value, str):
            value = split(value)
        elif opt.many and value is not None:
            value = list(value)
        if value is not None and opt.spec.to_field is not None:
            value = opt.spec.to_field(value)
        kwargs[opt.name] = value
    return cls(**kwargs)


def split(value: str | None) -> list[str] | None:
    """"a,b, c" -> ["a", "b", "c"]; None stays None (the option was not given); "" or "," -> [] (refused by
    check_list as an empty list); "a,,b" keeps its empty entry, which check_list refuses (a typo, not a list)."""
    if value is None:
        return None
    parts = [v.strip() for v in value.split(",")]
    return parts if any(parts) else []


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}" if value == value and abs(value) != float("inf") else str(value)
    if isinstance(value, Path):
        return str(value)
    return str(value)


def to_argv(req: Any) -> list[str]:
    """The arguments that give `req` on the command line: every option whose value is not its default (positional
    arguments last). Parsing them back gives an equal request (a test holds this for every option)."""
    args: list[str] = []
    positional: list[str] = []
    for opt in options(type(req)):
        value = getattr(req, opt.name)
        if value == opt.default:
            continue
        if value is not None and opt.spec.to_text is not None:
            value = opt.spec.to_text(value)
        if opt.spec.argument:
            positional += [_text(v) for v in value] if opt.many else [_text(value)]
        elif opt.kind is bool:
            if value:
                args.append(opt.long)
            elif opt.spec.negatable:
                args.append(f"--no-{opt.long[2:]}")
        elif opt.many and opt.spec.csv:
            args += [opt.long, ",".join(_text(v) for v in value)]
        elif opt.many:
            for v in value:
                args += [opt.long, _text(v)]
        else:
            args += [opt.long, _text(value)]
    return args + positional
