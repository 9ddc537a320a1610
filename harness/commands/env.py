"""`compare env`: versions, devices, threads and launchers, in a few lines to paste into a bug report."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import typer
from rich.markup import escape

import adapters
from harness.commands.common import console
from harness.ground.argv import cli


@dataclass
class EnvRequest:
    """`compare env`."""

    as_json: bool = field(default=False, metadata=cli("--json", negatable=False))
    """Print everything as JSON."""
    full: bool = field(default=False, metadata=cli("--full", negatable=False))
    """Print everything (torch's parallel info, each framework's build check) instead of the summary."""


def env(req: EnvRequest) -> None:
    """Versions, devices, threads and launchers in a few lines: paste this into a bug report (--full: all of it)."""
    from harness.ground import provenance
    from harness.core.checks import require_torch
    from harness.ground.errors import BadInput

    try:
        require_torch()
    except BadInput as exc:  # still print what can be known: this is what a bug report about it needs
        info = {**provenance.collect(import_torch=False), "torch_error": str(exc)}
    else:
        info = provenance.collect()
        info["torch_parallel_info"] = provenance.parallel_info()
    info["launchers"] = provenance.launchers([adapters.get(n).launcher for n in adapters.names()])
    info["adapters"] = {}
    for name in adapters.names():
        entry = {"available_cpu": adapters.availability(name, "cpu", 2).message() or "yes"}
        try:
            cls = adapters.get(name)
            if req.full or req.as_json:  # each framework's own report (imports it: seconds for DeepSpeed, Horovod)
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
    if req.as_json:
        typer.echo(json.dumps(info, indent=2, default=str))
        return
    if not req.full:
        for line in provenance.summary_lines(info):
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
