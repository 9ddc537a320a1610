"""Process facts and one process setting, shared by the parent (harness/launching/launch.py), the node guard
(harness/launching/nodeguard.py) and every rank (harness/rank/life.py): standard library only, so rank code may import
it.

- `become_subreaper()`: orphans of what this process started are re-parented to it, not to init.
- `pid_namespace()`, `boot_id()`: whether two processes share a PID namespace and a kernel (a rank checks the
  parent's before it trusts a PID the parent handed it).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
"""prctl option (linux/prctl.h)."""
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def become_subreaper() -> None:
    """Orphans of this process's children (a launcher killed before its ranks) are re-parented to this process, so
    they can be found and killed, instead of to init. Linux only; elsewhere this does nothing."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def pid_namespace() -> str:
    """This process's PID namespace, as its inode number ("pid:[4026531836]" -> "4026531836": plain digits survive
    every launcher's quoting of the environment it forwards); "" where it cannot be read."""
    try:
        return os.readlink("/proc/self/ns/pid").strip("pid:[]")
    except OSError:
        return ""


def boot_id() -> str:
    """This machine's boot id ("" where it cannot be read): processes that report the same one share a kernel."""
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""
