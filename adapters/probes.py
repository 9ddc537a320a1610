"""What an adapter's availability asks of this machine, without importing its framework: torch's build (cached on
disk, keyed by torch's files), a compiler for torch.compile's inductor, and one GPU per rank on CUDA.

Runs in: the parent (and `compare list`, `compare env`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from adapters.base import Availability
from harness.shared import cache
from harness.shared.text import shorten


def torch_build() -> dict[str, Any]:
    """Build facts of the installed torch that never change for one installation: version and which
    torch.distributed backends it was built with. Cached on disk, keyed by torch's files, so `compare list` and
    CPU availability checks need not import torch (two seconds) after the first time."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None:
        return {"installed": False}
    if not spec.submodule_search_locations:  # a torch.py somewhere on the path, in front of the real one
        return {"installed": True, "broken": "a module that is not the torch package shadows it", "where": spec.origin}
    root = Path(list(spec.submodule_search_locations)[0])

    def probe() -> dict[str, Any]:
        import torch
        import torch.distributed as dist

        on = dist.is_available()
        return {"installed": True, "version": torch.__version__, "distributed": on,
                "gloo": on and dist.is_gloo_available(), "nccl": on and dist.is_nccl_available(),
                "mpi": on and dist.is_mpi_available()}

    key = cache.files_key([root / "version.py", *sorted((root / "lib").glob("libtorch*.so"))])
    try:
        return cache.cached_json("torch-build", key, probe)
    except Exception as exc:  # noqa: BLE001 - a torch that fails to import (a missing library, a shadowing module)
        text = shorten(str(exc))
        return {"installed": True, "broken": f"{type(exc).__name__}: {text}", "where": str(root)}


def compile_availability(device: str) -> Availability:
    """Can torch.compile's default backend build kernels here? Inductor compiles C++ on CPU with `$CXX` (g++ by
    default: torch._inductor.config.cpp.cxx) and Triton kernels on CUDA. Never raises, imports nothing heavy."""
    import importlib.util
    import shutil

    if device == "cuda":
        if importlib.util.find_spec("triton") is None:
            return Availability(False, "knob compile=true: torch.compile's inductor generates Triton kernels on CUDA, "
                                       "and triton is not installed", "pip install triton (the version this torch "
                                                                      "build names), or leave compile out")
        return Availability(True)
    cxx = os.environ.get("CXX") or "g++"
    if shutil.which(cxx) is None:
        return Availability(False, f"knob compile=true: torch.compile's inductor builds its CPU kernels with the C++ "
                                   f"compiler {cxx}, which is not found here",
                            "apt-get install g++ (Debian), or set CXX to a C++ compiler, or leave "
                            "compile out")
    return Availability(True)


def cuda_world_check(device: str, world_size: int) -> Availability:
    """On CUDA, one device per rank (NCCL refuses two ranks on one GPU; DataParallel needs world_size GPUs)."""
    if device != "cuda":
        return Availability(True)
    import torch

    if not torch.cuda.is_available():
        return Availability(False, "CUDA requested but torch sees no GPU",
                            "run on a machine with an NVIDIA GPU and a CUDA build of torch, or use --device cpu")
    n = torch.cuda.device_count()
    if world_size > n:
        return Availability(False, f"world size {world_size} needs {world_size} GPUs, this machine has {n}",
                            f"use --world-size {n} or fewer, or --device cpu")
    return Availability(True)
