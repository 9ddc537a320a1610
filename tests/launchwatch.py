"""Watching a `compare` run from outside, for the tests and benchmarks that start one as a subprocess and must know
where its launch is (tests/distributed/test_hardening.py, test_failures.py, tests/benchmarks/stress_startup.py)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import psutil

from harness.shared import progress as progress_file


def cmdline(p: psutil.Process) -> str:
    """A process's command line, or "" once it is gone or a zombie."""
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def launch_progress(root: psutil.Process, label_in_spec: str = "-r0") -> dict | None:
    """Rank 0's progress of the running launch (under compare's process `root`) whose spec path contains
    `label_in_spec`; None before it has started, or once compare has ended."""
    try:
        children = root.children(recursive=True)
    except psutil.Error:
        return None
    for p in children:
        for arg in cmdline(p).split():  # a process that ends meanwhile has an empty command line
            if arg.endswith("spec.json") and label_in_spec in arg:
                return progress_file.read(Path(arg).parent / "progress.bin")
    return None


def describe(root: psutil.Process, log_chars: int = 3000) -> str:
    """Every process of a run (state, kernel wait channel, command line), rank 0's progress and the end of each
    launch's log."""
    lines = []
    try:
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:  # compare has ended
        tree = []
    for p in tree:
        try:
            wchan = Path(f"/proc/{p.pid}/wchan").read_text()
            lines.append(f"  {p.pid} {p.status()} wchan={wchan} threads={p.num_threads()} {cmdline(p)[:300]}")
        except (psutil.Error, OSError):
            pass
    lines.append(f"  rank 0 progress: {launch_progress(root)}")
    for log in sorted(Path(tempfile.gettempdir()).glob(f"compare-{root.pid}-scratch-*/*/launch.log")):
        lines.append(f"  {log}:\n{log.read_text(errors='replace')[-log_chars:]}")
    return "\n".join(lines)
