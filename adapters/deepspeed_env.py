"""DeepSpeed's environment, kept clean for every launch (adapters/deepspeed.py uses these): what the install is
(read without importing it), where its JIT-built ops live and the build locks a killed build leaves behind, the
shared-memory segments its CPU all-reduce leaves in /dev/shm, and what this machine's build supports.

Runs in: the parent (availability, the launch, sweeping after it) and the ranks (a rank unlinks its own segment)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from adapters.base import Leftover, interpreter


def installed_version_info() -> dict[str, Any] | None:
    """deepspeed/git_version_info_installed.py (written by DeepSpeed's setup.py), loaded as a lone file: the
    version, accelerator and AOT-built ops, without running deepspeed/__init__.py (which imports torch and
    probes accelerators). None when the file is missing: not a real DeepSpeed install."""
    spec = importlib.util.find_spec("deepspeed")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "git_version_info_installed.py"
    if not path.is_file():
        return None
    file_spec = importlib.util.spec_from_file_location("_compare_deepspeed_version", path)
    module = importlib.util.module_from_spec(file_spec)
    file_spec.loader.exec_module(module)
    return {k: getattr(module, k, None) for k in ("version", "accelerator_name", "installed_ops")}


SHM_DIR = Path("/dev/shm")
"""Where DeepSpeed's CPU all-reduce keeps its shared-memory segments."""


def _shm_prefix(addr: str, port: int | str) -> str:
    # deepspeed/ops/csrc/cpu/comm/shm.cpp: "%s_%d_%s_%s" % (SHM_BUFFER_NAME, getuid(), MASTER_ADDR, MASTER_PORT),
    # then "_%d" % rank
    return f"deepspeed_allreduce_buffer_{os.getuid()}_{addr}_{port}_"


def shm_segment(rank: int) -> Path | None:
    """This rank's shared-memory all-reduce segment, which DeepSpeed's CPU backend (deepspeed_shm_comm, used when
    every rank is on one machine) creates at init and never unlinks: about 66 MiB per rank left in /dev/shm by
    every launch, until /dev/shm (RAM) is full."""
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not addr or not port:
        return None
    return SHM_DIR / f"{_shm_prefix(addr, port)}{rank}"


def shm_leftover(addr: str, port: int) -> Leftover:
    """What a launch's ranks may leave in /dev/shm if killed before they unlink their segments (during
    init_distributed): the parent removes them once the launch's processes are gone (LaunchPlan.leftovers)."""
    return Leftover(str(SHM_DIR / (_shm_prefix(addr, port) + "*")), "DeepSpeed shared-memory segment")


def shm_sweeper(addr: str, port: int) -> Callable[[], None]:
    """For the parent, after the launch: remove any segment of this launch still there (a rank that died before
    it could unlink its own)."""

    def sweep() -> None:
        for f in SHM_DIR.glob(_shm_prefix(addr, port) + "*"):
            f.unlink(missing_ok=True)

    return sweep


def launcher_path() -> str | None:
    """The `deepspeed` launcher script of this venv (whether or not it is activated), else the one on PATH."""
    local = Path(interpreter()).parent / "deepspeed"
    return str(local) if local.exists() else shutil.which("deepspeed")


def jit_cache_dir() -> Path:
    """Where torch.utils.cpp_extension puts (and finds) DeepSpeed's JIT-built ops for this venv: the user's
    TORCH_EXTENSIONS_DIR, else the venv's own (set for the ranks by `launch`; see the module docstring)."""
    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path(sys.prefix) / "torch_extensions")


def jit_cached_ops() -> list[str]:
    """Ops that have a built shared library in the JIT cache."""
    root = jit_cache_dir()
    return sorted(d.name for d in root.iterdir() if (d / f"{d.name}.so").exists()) if root.is_dir() else []


STALE_LOCKS_ENV = "COMPARE_DS_STALE_JIT_LOCKS"
"""Set by `launch` for the ranks: the stale JIT build locks it removed before starting them (rank 0 logs them)."""


def _open_files() -> tuple[set[str], bool]:
    """The paths of every file some process on this machine has open, and whether every process could be read
    (another user's /proc/PID/fd is not readable without privilege)."""
    held, complete = set(), True
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            fds = list(fd_dir.iterdir())
        except PermissionError:
            complete = False
            continue
        except OSError:  # the process ended meanwhile
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                held.add(os.readlink(fd))
    return held, complete


FRESH_S = 10.0
"""A build lock younger than this (by its mtime) is never taken for stale."""


def clear_stale_jit_locks(root: Path | None = None, wait_fresh: bool = False) -> list[Path]:
    """Remove JIT build locks that no process holds; the ones removed. torch.utils.cpp_extension takes
    `<cache>/<op>/lock` (a FileBaton: created with O_EXCL, kept open while building, removed at the end), and a
    process that finds the file waits, polling, until it is gone. A build that was killed (a timeout, kill -9 of
    the run, a crash during a first launch's 35-65 s compile) leaves the file behind, and every later launch
    would then wait for it until its --timeout. A lock is stale when no process has it open and it is FRESH_S old;
    one created by another user is left alone unless every process could be checked. `wait_fresh`: where a lock that
    no process holds is younger than FRESH_S, wait until it is not and look again (a build killed a moment ago would
    otherwise hold up this launch until its --timeout)."""
    root = root if root is not None else jit_cache_dir()
    locks = sorted(root.glob("*/lock")) if root.is_dir() else []
    seen = {}
    for lock in locks:  # each lock as it was before the scan: the file, not its name
        with contextlib.suppress(FileNotFoundError):
            st = lock.stat()
            seen[lock] = (st.st_ino, st.st_ctime_ns, st.st_uid)
    if not seen:
        return []
    held, complete = _open_files()
    removed, fresh = [], []
    for lock, (ino, ctime, owner) in seen.items():
        if os.path.realpath(lock) in held or (not complete and owner != os.getuid()):
            continue
        try:
            st = lock.stat()
        except FileNotFoundError:  # released meanwhile
            continue
        # Released during the scan and taken again by another build, after the scan had read its process: a new
        # file under the same name, which a test run found removed under the build that held it
        # ("FileNotFoundError: .../deepspeed_shm_comm/lock" at its release)
        if (st.st_ino, st.st_ctime_ns) != (ino, ctime):
            continue
        # Newer than FRESH_S: a build may have taken it while the processes were read, under an inode just freed
        # and a timestamp of the same clock tick (file times advance by the jiffy), so the check above cannot tell
        # it from the file it replaced; a fresh clone's CI saw one rank's lock removed so, again. A killed build's
        # lock is older than that by the time another launch starts, or is cleared by the next
        if time.time() - st.st_mtime < FRESH_S:
            fresh.append(st.st_mtime)
            continue
        lock.unlink(missing_ok=True)
        removed.append(lock)
    if fresh and wait_fresh:
        time.sleep(max(0.0, max(fresh) + FRESH_S - time.time()))
        removed += clear_stale_jit_locks(root)  # the processes read again: a build that took one since holds it
    return removed


def cpu_fp16_supported() -> bool:
    """DeepSpeed's CPU accelerator's own test (cpu_accelerator.is_fp16_supported): oneDNN fp16 kernels."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    except Exception:  # noqa: BLE001 - an older torch without the probe has no fp16 CPU kernels either
        return False


def fp16_zero0_scales_its_loss() -> bool | None:
    """Whether the installed DeepSpeed's engine.backward() scales the loss for fp16 at ZeRO stage 0. 0.19.8's does
    not (it scales only for a ZeRO optimizer or torch autocast's scaler), while FP16_(Unfused)Optimizer.step()
    still divides the gradients by the loss scale (2^16 to start): every update is that many times too small and the
    model does not learn (seen on an H200: loss ln 10 for 300 digits steps; deepspeedai/DeepSpeed#8393 adds the
    missing branch). Read from engine.py's source without importing DeepSpeed; None where it cannot be read."""
    spec = importlib.util.find_spec("deepspeed")
    where = list(spec.submodule_search_locations or []) if spec else []
    try:
        text = (Path(where[0]) / "runtime" / "engine.py").read_text()
    except (IndexError, OSError):
        return None
    start = text.find("    def backward(self, loss")
    if start < 0:
        return None
    end = text.find("\n    def ", start + 1)
    body = text[start:end if end > 0 else len(text)]
    if "scale_if_loss" not in body:
        return None  # a different engine.backward: not the one this check knows
    return "fp16_enabled()" in body


def ds_report(pinned: str) -> dict[str, Any]:
    """What `ds_report` tells, from DeepSpeed's own objects (it imports DeepSpeed): its version (and the one this
    project pins), its accelerator, its launcher, and per op whether it was built at install time, is in the JIT
    cache, would be JIT-built on first use, or cannot be built here."""
    import deepspeed
    from deepspeed.accelerator import get_accelerator
    from deepspeed.git_version_info import accelerator_name, installed_ops
    from deepspeed.ops.op_builder.all_ops import ALL_OPS
    from deepspeed.ops.op_builder.builder import probe_is_compatible
    from torch.utils.cpp_extension import is_ninja_available

    accel = get_accelerator()
    cached = set(jit_cached_ops())
    ops: dict[str, list[str]] = {"installed": [], "jit_cached": [], "jit_compatible": [], "incompatible": []}
    for op_name, builder in ALL_OPS.items():
        # The same tests as ds_report's op table (installed = built at install time for this accelerator).
        if installed_ops.get(op_name) and accelerator_name == accel._name:
            ops["installed"].append(op_name)
        elif op_name in cached:
            ops["jit_cached"].append(op_name)
        elif probe_is_compatible(builder, False):
            ops["jit_compatible"].append(op_name)  # would be JIT-compiled on first use
        else:
            ops["incompatible"].append(op_name)
    return {"deepspeed": deepspeed.__version__, "version": deepspeed.__version__, "pinned": pinned,
            "accelerator": accel._name, "communication_backend": accel.communication_backend_name(),
            "launcher": launcher_path(),
            "ninja": is_ninja_available(), "jit_cache_dir": str(jit_cache_dir()), "ops": ops}


def ds_report_quietly(pinned: str) -> dict[str, Any]:
    """`ds_report` with nothing on stdout: DeepSpeed's logger writes there (bound at import) and would corrupt
    `compare env --json`; and on a machine without CUDA the CPU accelerator is named up front, since detecting it
    warns on stderr of every `compare env`."""
    import contextlib
    import os
    import sys

    import torch

    quiet = "DS_ACCELERATOR" not in os.environ and not torch.cuda.is_available()
    if quiet:
        os.environ["DS_ACCELERATOR"] = "cpu"
    try:
        with contextlib.redirect_stdout(sys.stderr):
            return ds_report(pinned)
    finally:
        if quiet:
            os.environ.pop("DS_ACCELERATOR", None)
