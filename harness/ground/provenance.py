"""What machine and software a result came from: recorded in every row and printed by `compare env`."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.shared.text import shorten

REPO = Path(__file__).resolve().parents[2]


def usable_core_ids() -> list[int]:
    """The cores this process may run on (its affinity), in order."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def usable_cores() -> int:
    return len(usable_core_ids())


def memory_total_bytes() -> int:
    """This machine's physical memory."""
    import psutil

    return psutil.virtual_memory().total


def host_key() -> str | None:
    """This host, as a digest of its name and machine id (neither is written into records): what tells a run made
    here from one made on another machine of the same CPU and cores, e.g. a cloud VM of the same type. None where
    neither can be read."""
    import hashlib
    import socket

    parts = [socket.gethostname()]
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            parts.append(Path(path).read_text(encoding="utf-8").strip())
            break
        except OSError:
            continue
    if not any(parts):
        return None
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> list[str]:
    """The vector/matrix extensions that decide CPU throughput, bf16 above all (emulated without avx512_bf16/AMX)."""
    wanted = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile", "neon", "sve")
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                have = set(line.split(":", 1)[1].split())
                return [f for f in wanted if f in have]
    except OSError:
        pass
    return []


TUNING_PREFIXES = ("HOROVOD_", "NCCL_", "GLOO_", "TORCH_", "PYTORCH_", "TORCHELASTIC_", "DS_", "DEEPSPEED_", "OMP_",
                   "KMP_", "MKL_", "GOMP_", "OPENBLAS_", "CUDA_", "CUBLAS_", "CUDNN_", "MALLOC_", "UCX_", "FI_",
                   "OMPI_MCA_")
"""Variables that change what a framework or its libraries do (fusion, cycle time, algorithms, threads, memory
allocation, transports). Every rank inherits compare's environment, so one of these set in the user's shell
applies to the rows it concerns: recorded, printed at the start and shown in the report, never silently."""
TUNING_NAMES = ("LD_PRELOAD",)  # e.g. jemalloc or tcmalloc, which change a step's time
OUTER_JOB = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
             "ROLE_WORLD_SIZE", "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
             "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
             "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE")
"""What a launcher sets to give a process its place in its job (torchrun, horovodrun, MPI). Set in compare's own
environment (compare run inside an outer job), they say nothing of compare's ranks, whose launchers set their own
(SLURM's are left: `--launcher slurm` runs inside its allocation); one left over made horovodrun's ranks wait for
peers that were not there (HOROVOD_RANK=1 HOROVOD_SIZE=4: a 30 s gloo timeout). No rank inherits them."""
HARNESS_SET = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""Set by the harness for every rank (threads per rank, recorded as such), so a value in the shell is not used."""


def tuning_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The tuning variables set in this environment (TUNING_PREFIXES), that every rank inherits."""
    environ = os.environ if environ is None else environ
    return {k: environ[k] for k in sorted(environ)
            if (k.startswith(TUNING_PREFIXES) or k in TUNING_NAMES) and k not in HARNESS_SET + OUTER_JOB}


def tuning_line(env: dict[str, Any]) -> list[str]:
    """The report's provenance line for the tuning variables a run's ranks inherited ([] for records made before
    they were recorded)."""
    if "tuning_env" not in env:
        return []
    t = env["tuning_env"]
    if not t:
        return [f"- Tuning variables: none of {', '.join(p + '*' for p in TUNING_PREFIXES[:6])}... set in compare's "
                "environment; every framework ran with its defaults and the knobs shown."]
    return ["- Tuning variables set in compare's environment, which the ranks on this machine inherit (they change "
            "what the frameworks do, on top of the knobs shown): " + ", ".join(f"`{k}={v}`" for k, v in t.items())]


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10)
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def collect_safely(device: str = "cpu") -> dict[str, Any]:
    """`collect`, for a run already under way: if torch cannot be imported in this process after all (a memory
    limit, say), what can be read without it, with the error; the rows then fail with their own reasons and the
    run still writes them."""
    try:
        return collect(device)
    except Exception as exc:  # noqa: BLE001 - the environment is provenance: it must not cost the run
        return {**collect(device, import_torch=False),
                "collect_error": shorten(f"{type(exc).__name__}: {exc}")}


def packaged_torch() -> str | None:
    """torch's version as its installed package says it, without importing torch; None where it is not installed."""
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def collect(device: str = "cpu", import_torch: bool = True) -> dict[str, Any]:
    """The environment shared by every row of one comparison (cheap: no framework imports beyond torch).
    `import_torch=False` (a run interrupted while torch was being imported: importing it again could fail
    half-way) reads torch's version from its package metadata and leaves out what only torch itself can say."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "host_key": host_key(),
        "cpu_flags": cpu_flags(),
        "cpu_cores_usable": usable_cores(),
        "cpu_count_logical": os.cpu_count(),
        "memory_total_bytes": memory_total_bytes(),
        "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
        "tuning_env": tuning_env(),
        "git_commit": git_commit(),
    }
    if not import_torch:
        env["torch"] = packaged_torch() or "not installed"
        env["distributed"] = {}
        return env
    env.update(torch_facts())
    return env


def _torch_facts() -> dict[str, Any]:
    """What only torch itself can say about its build and this machine (importing it: about 1.5 s of a core)."""
    import torch
    import torch.distributed as dist

    facts = {
        "torch": torch.__version__,
        "torch_default_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "distributed": {"gloo": dist.is_gloo_available(), "nccl": dist.is_nccl_available(),
                        "mpi": dist.is_mpi_available()},
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        facts["cuda"] = torch.version.cuda
        facts["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        try:
            facts["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # noqa: BLE001 - informational only
            facts["nccl_version"] = None
    return facts


TORCH_FACTS_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES")
"""The variables `_torch_facts` depends on besides torch's files and the cores this process may use."""


def torch_facts() -> dict[str, Any]:
    """`_torch_facts`, from the cache directory when the same torch (its files' sizes and times), the same usable
    cores, the same TORCH_FACTS_ENV and the same NVIDIA device nodes gave them before. A run's parent imports no
    torch otherwise, so without this every run spent a core-second and a half importing it beside its first
    launch's start-up. Facts that name a CUDA device are read afresh every time."""
    import glob
    import importlib.util

    from harness.shared.cache import cached_json, files_key

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return _torch_facts()  # raises torch's own ImportError, as collect_safely expects
    root = Path(spec.origin).parent
    key = "|".join([files_key([root / "__init__.py", root / "version.py"]),
                    "cores=" + ",".join(map(str, usable_core_ids())),
                    *(f"{name}={os.environ.get(name)}" for name in TORCH_FACTS_ENV),
                    "nvidia=" + ",".join(sorted(glob.glob("/dev/nvidia*")))])
    return cached_json("torch_facts", key, _torch_facts, keep=lambda facts: not facts.get("cuda_available"))


def hardware_slug(device: str) -> str:
    """Short hardware name for result directories: cpu2 (2 usable cores), h100x1, ..."""
    if device == "cuda":
        import torch

        name = torch.cuda.get_device_name(0).lower()
        for word in name.replace("-", " ").split():
            if any(c.isdigit() for c in word) and word[0].isalpha():
                return f"{word}x{torch.cuda.device_count()}"
        return f"gpux{torch.cuda.device_count()}"
    return f"cpu{usable_cores()}"


def launchers(declared: list[str]) -> dict[str, str | None]:
    """Launch tools on PATH (and torchrun as a module, which is how the harness calls it). `declared`: the
    adapters' own launchers (Adapter.launcher); those that are programs (not "in-process" or a Python API) are
    looked for, and MPI's."""
    bindir = Path(sys.executable).parent  # the venv's own scripts, whether or not it is activated
    tools = [n for n in dict.fromkeys(declared) if " " not in n and "." not in n and n != "in-process"] + ["mpirun"]
    found = {name: str(bindir / name) if (bindir / name).exists() else shutil.which(name) for name in tools}
    # What runs across hosts needs (README, Multi-node): ssh for remote hosts, pdsh for DeepSpeed, SLURM's tools.
    found.update({name: shutil.which(name) for name in ("ssh", "pdsh", "srun", "sbatch", "scontrol")})
    found["torch.distributed.run"] = f"{sys.executable} -m torch.distributed.run"
    return found


def parallel_info() -> dict[str, str]:
    """torch's own account of its threading back ends (OpenMP, MKL, ...), for `compare env`."""
    import torch

    info = {}
    for line in torch.__config__.parallel_info().splitlines():
        key, sep, value = line.rpartition(":")  # keys contain "::" (at::get_num_threads())
        if sep and value.strip():
            info[key.strip()] = value.strip()
    return info


def summary_lines(info: dict[str, Any]) -> list[str]:
    """`compare env` in a few paste-ready lines (the whole of it: --full or --json)."""
    from harness.ground.errors import first_sentence
    from harness.ground.sizes import format_mib

    dist = info.get("distributed") or {}
    backends = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in dist.items()) or "torch.distributed missing"
    gpus = ", ".join(info.get("gpus") or []) or "none"
    cuda = f"CUDA {info['cuda']}" if info.get("cuda") else "no CUDA"
    torch = info.get("torch", "?") + (f" (it fails to import: {info['torch_error']})" if info.get("torch_error")
                                      else f" ({cuda}; {backends})")
    lines = [f"python {info.get('python')}, torch {torch}",
             f"machine: {info.get('cpu_model')} ({' '.join(info.get('cpu_flags') or []) or 'no flags read'}), "
             f"{info.get('cpu_cores_usable')} usable of {info.get('cpu_count_logical')} cores, "
             f"{format_mib(info.get('memory_total_bytes'))} RAM; GPUs: {gpus}",
             f"platform: {info.get('platform')}; git commit {info.get('git_commit') or 'unknown'}",
             f"threads: torch {info.get('torch_default_threads')} intra-op, {info.get('torch_interop_threads')} "
             f"inter-op; OMP_NUM_THREADS {info.get('omp_num_threads_env') or 'unset'}"]
    tuning = info.get("tuning_env") or {}
    lines.append("tuning variables the ranks would inherit: "
                 + (", ".join(f"{k}={v}" for k, v in tuning.items()) if tuning else "none"))
    found = info.get("launchers") or {}
    lines.append("launchers: " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in found.items()
                                           if k != "torch.distributed.run"))
    for name, entry in (info.get("adapters") or {}).items():
        ok = entry.get("available_cpu") == "yes"
        version = entry.get("version")
        said = "available" if ok else "unavailable: " + first_sentence(str(entry.get("available_cpu")))
        lines.append(f"  {name}: {said}" + (f" ({version})" if version else "")
                     + (f"; error {entry['error']}" if entry.get("error") and entry["error"] not in said else ""))
    return lines
