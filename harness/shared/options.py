"""Typed option dataclasses (adapter knobs, workload options) built from what the user typed, checked once.

Runs in: the parent (to refuse bad input before anything is launched) and every rank (to rebuild the same
object from the spec). Shared by adapters/ and workloads/, so it lives here rather than in either.

A dataclass declares its options; this module turns {"name": "text"} into an instance, generically:

    @dataclass
    class Knobs:
        zero_stage: Literal[0, 1, 2, 3] = 0
        \"\"\"ZeRO stage.\"\"\"
        bucket_cap_mb: float | None = None
        \"\"\"None: the framework's own default, not passed to it.\"\"\"

        def __post_init__(self):          # cross-field rules live in the dataclass itself
            if ...: raise OptionError("...")

- an unknown name is refused with the valid names;
- text is coerced to the declared type (bool, int, float, str; `X | None` accepts "none"/"default" as None);
- a `Literal[...]` field accepts only its choices (typed text is matched against each choice's text form);
- `__post_init__` may raise OptionError for rules that involve several fields.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from typing import Any, Literal

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_NONE = ("none", "default")


class OptionError(ValueError):
    """An option the user gave that the dataclass refuses; the message names the option and the valid values. Not a
    BadInput: the message does not say whose option it was, so every caller catches it to say so first ("workload
    digits: ...", "adapter ddp: ...") and raises the BadInput itself."""


def _fields(cls: type) -> dict[str, tuple[dataclasses.Field, Any]]:
    hints = typing.get_type_hints(cls, include_extras=True)
    return {f.name: (f, hints[f.name]) for f in dataclasses.fields(cls)}


def _hint(tp: Any) -> tuple[Any, str]:
    """(the type, a hint for error messages) from `Annotated[T, "hint"]`; plain types have no hint."""
    if typing.get_origin(tp) is typing.Annotated:
        args = typing.get_args(tp)
        return args[0], " ".join(str(a) for a in args[1:])
    return tp, ""


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    """(inner type, whether None is allowed) for `X | None` / Optional[X]."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(args) != len(typing.get_args(tp)):
            return args[0], True
    return tp, False


_ARTICLE = {bool: "a bool", int: "an int", float: "a number", str: "a string"}


def describe_type(tp: Any, owner: str = "the framework") -> str:
    """Human form of a field's type, for messages: "0, 1, 2 or 3", "a number", "a bool or none (...)"; `owner`:
    whose default none stands for (an adapter's framework, or "the workload")."""
    tp, _ = _hint(tp)
    inner, optional = _unwrap_optional(tp)
    if typing.get_origin(inner) is Literal:
        choices = [str(c) for c in typing.get_args(inner)]
        text = choices[0] if len(choices) == 1 else ", ".join(choices[:-1]) + " or " + choices[-1]
    else:
        text = _ARTICLE.get(inner, getattr(inner, "__name__", str(inner)))
    return text + (f" or none ({owner}'s default)" if optional else "")


def coerce(name: str, raw: Any, tp: Any, what: str = "option") -> Any:
    """`raw` (text from the command line, or an already typed value from a spec file) as type `tp`."""
    owner = "the framework" if what == "knob" else "the workload"  # whose default a none stands for
    tp, hint = _hint(tp)
    hint = f" ({hint})" if hint else ""
    inner, optional = _unwrap_optional(tp)
    if raw is None or (optional and isinstance(raw, str) and raw.strip().lower() in _NONE):
        if optional:
            return None
        raise OptionError(f"{what} '{name}' cannot be none; it expects {describe_type(tp, owner)}")
    if typing.get_origin(inner) is Literal:
        choices = typing.get_args(inner)
        for choice in choices:
            if raw == choice and type(raw) is type(choice):
                return choice
            if isinstance(raw, str) and raw.strip().lower() == str(choice).lower():
                return choice
        raise OptionError(f"{what} '{name}' must be {describe_type(inner, owner)}{hint}; got '{_shown(raw)}'")
    if not isinstance(raw, str):
        if inner is float and isinstance(raw, int) and not isinstance(raw, bool):
            return float(raw)
        return raw
    text = raw.strip()
    try:
        # int() and float() also take other scripts' digits ("１" is 1); a text option takes any script (a path
        # under /home/josé was refused)
        if inner in (bool, int, float) and not text.isascii():
            raise ValueError
        if inner is bool:
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise ValueError
        if inner is int:
            return int(text)
        if inner is float:
            value = float(text)
    except ValueError:
        raise OptionError(f"{what} '{name}' expects {describe_type(tp, owner)}{hint}, got '{_shown(raw)}'") from None
    if inner is float:
        if not math.isfinite(value):  # no knob or option means anything at nan or inf
            raise OptionError(f"{what} '{name}' expects a finite number{hint}, got '{_shown(raw)}'")
        if value == 0.0 and any(c in "123456789" for c in text.lower().partition("e")[0]):
            # 1e-400 is below the smallest double and reads as 0: not the value given
            raise OptionError(f"{what} '{name}' is too small to hold: '{_shown(raw)}' reads as 0 in a double "
                              f"(the smallest is about 5e-324){hint}")
        return value
    if any(not c.isprintable() for c in text):  # a row's label and a report's table are one line each
        raise OptionError(f"{what} '{name}' holds a control character ('{_shown(raw)}'); give it on one line, "
                          f"without tabs or other control characters")
    return text


def _shown(raw: Any) -> str:
    """A value as the one-line error shows it: control characters (a newline) written as escapes."""
    return "".join(c if c.isprintable() or c == " " else c.encode("unicode_escape").decode("ascii") for c in str(raw))


def build(cls: type, values: dict[str, Any] | None = None, what: str = "option"):
    """An instance of the options dataclass `cls` from `values` (text or typed); OptionError on anything wrong.
    `what` names the kind in messages ("knob" for adapters, "option" for workloads)."""
    fields = _fields(cls)
    kwargs = {}
    for key, raw in (values or {}).items():
        if key not in fields:
            valid = ", ".join(sorted(fields)) or "none"
            raise OptionError(f"unknown {what} '{key}'; valid {what}s: {valid}")
        kwargs[key] = coerce(key, raw, fields[key][1], what)
    return cls(**kwargs)


def attribute_docs(cls: type) -> dict[str, str]:
    """The docstrings written under each field of a dataclass (and of the dataclasses it extends), by field name:
    the string literal right after the annotated assignment, as torchtitan's job_config documents its fields."""
    return dict(_attribute_docs(cls))


@functools.lru_cache(maxsize=None)
def _attribute_docs(cls: type) -> dict[str, str]:
    """attribute_docs, read once per class: inspect.getsource parses the class's whole module (a tenth of a second
    for a request class), and every command line, --help and knob listing asks again."""
    import ast
    import inspect
    import textwrap

    docs: dict[str, str] = dict(getattr(cls, "__field_docs__", None) or {})  # a dataclass made, not written
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def catalogue(cls: type, owner: str = "the framework") -> list[dict[str, str]]:
    """Every field of an option dataclass: name, accepted values, default and its documentation, for `compare
    knobs`; read from the declaration itself, so it cannot drift from what `build` accepts. `owner`: whose default
    None stands for (an adapter's framework, or "the workload")."""
    docs = attribute_docs(cls)
    out = []
    for name, (f, tp) in _fields(cls).items():
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        out.append({"name": name, "values": describe_type(tp, owner),
                    "default": (f"unset ({owner}'s own)" if default is None else str(default).lower()
                                if isinstance(default, bool) else _shown(default)),
                    "doc": docs.get(name, "")})
    return out
