"""Typer commands made from request dataclasses (harness/ground/argv.py): the options of a command are its request's
declared fields, so a default, a flag or a help text is written once, on the field, and `parse` reads a command
line back into the request it gives.

Runs in: the parent.

    @command(app, RunRequest, "run")
    def run(req: RunRequest) -> None: ...
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, Optional

import typer

from harness.commands.common import Command
from harness.ground.argv import Option, from_values, options


def _bad_parameter(parser: Callable[[str], Any]) -> Callable[[str], Any]:
    """The request's parser, its ValueError as click's own "Invalid value for '--x': ..." (one line)."""

    def parse(text: str) -> Any:
        try:
            return parser(text)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None

    return parse


def _param(opt: Option) -> tuple[Any, Any]:
    """(annotation, typer default) of one option."""
    spec = opt.spec
    kind = str if opt.many and spec.csv else opt.kind
    default = opt.default
    if default is not None and spec.to_text is not None and not (opt.many and not spec.csv):
        default = spec.to_text(default)
    if opt.many and spec.csv:
        default = None if default is None else ",".join(map(str, default))
    extra: dict[str, Any] = {"help": opt.help}
    if spec.metavar is not None:
        extra["metavar"] = spec.metavar
    if spec.parser is not None:
        extra["parser"] = _bad_parameter(spec.parser)
    if opt.panel and not spec.argument:
        extra["rich_help_panel"] = opt.panel
    if spec.argument:
        if opt.many:  # variadic: click takes None for "none given" (the field's default then)
            return Optional[list[kind]], typer.Argument(None, show_default=False, **extra)
        if spec.required:
            return kind, typer.Argument(..., show_default=False, **extra)
        return Optional[kind], typer.Argument(default, show_default=False, **extra)
    if kind is bool:
        decls = [f"{opt.long}/--no-{opt.long[2:]}" if spec.negatable else opt.long]
        decls += [f for f in opt.flags if f != opt.long]
        return bool, typer.Option(bool(default), *decls, metavar="", **extra)
    if opt.many and not spec.csv:
        if default is None:  # not given: None, the field's default, which the command resolves (scale --profile)
            return Optional[list[kind]], typer.Option(None, *opt.flags, show_default=False, **extra)
        return list[kind], typer.Option(list(default), *opt.flags, **extra)
    annotation = kind if default is not None else Optional[kind]
    return annotation, typer.Option(default, *opt.flags, **extra)


def command(app: typer.Typer, cls: type, name: str, *, short_help: str | None = None,
            **fixed: Any) -> Callable[[Callable], Callable]:
    """Register `handler(request)` as command `name` of `app`, with the options `cls` declares. `fixed`: fields the
    command sets itself. A value the request refuses while it is built (BadInput) is one line and exit 2."""

    def register(handler: Callable) -> Callable:
        params, annotations = [], {}
        for opt in options(cls):
            annotation, default = _param(opt)
            params.append(inspect.Parameter(opt.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                            annotation=annotation))
            annotations[opt.name] = annotation

        def run_command(**values: Any) -> Any:
            return handler(from_values(cls, values, **fixed))

        run_command.__signature__ = inspect.Signature(params)
        run_command.__annotations__ = annotations
        run_command.__doc__ = handler.__doc__
        run_command.__name__ = handler.__name__
        app.command(name, cls=Command, short_help=short_help)(run_command)
        _REQUESTS[name] = (cls, fixed)
        return handler

    return register


_REQUESTS: dict[str, tuple[type, dict[str, Any]]] = {}
"""Each registered command's request class and the fields it fixes."""


def request_class(name: str) -> type:
    return _REQUESTS[name][0]


@functools.lru_cache(maxsize=4)
def _click_group(app: typer.Typer):
    """The click command tree of `app`, built once (typer builds it anew on every call, reading every command's
    signature: a tenth of a second, which parsing each option of each command paid)."""
    return typer.main.get_command(app)


def parse(app: typer.Typer, name: str, argv: list[str]) -> Any:
    """The request that `compare NAME ARGV` gives (what the command would run with), without running it."""
    cls, fixed = _REQUESTS[name]
    ctx = _click_group(app).commands[name].make_context(name, list(argv))
    return from_values(cls, dict(ctx.params), **fixed)
