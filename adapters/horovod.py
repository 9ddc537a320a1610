"""Horovod 0.28.1: hvd.DistributedOptimizer (averaged gradients), ranks started by `horovodrun --gloo`.

    compare run --adapters horovod,horovod:compression=fp16

Installed by `adapters/install/horovod.sh` (part of `make setup`): Horovod's last release must be built against
the venv's torch with C++17 (see that script). Its row is `unavailable`, with the build's reason, when the build
failed or the build in the venv does not load with this torch.

Horovod never scales the learning rate here (its examples multiply it by hvd.size(); the workload owns the LR).
Model buffers (BatchNorm running statistics) are broadcast from rank 0 once at start, as Horovod's examples do;
DDP instead re-broadcasts them at every forward, so batch-dependent models differ slightly between the two.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from adapters.base import Adapter, Availability, KnobError, LaunchPlan, RankInfo, cuda_world_check, python_module

VERSION = "0.28.1"
INSTALL_SCRIPT = "adapters/install/horovod.sh"
COMPRESSIONS = ("none", "fp16")
CONTROLLERS = ("gloo", "mpi")


def wheel_cache() -> Path:
    """Where adapters/install/horovod.sh keeps built wheels, its build log and its failure marker."""
    return Path(os.environ.get("COMPARE_WHEEL_CACHE", Path.home() / ".cache" / "compare" / "wheels"))


def build_failure() -> str | None:
    """The reason the last `horovod.sh` build failed (first line), or None when no failure is recorded."""
    try:
        text = (wheel_cache() / "horovod-build-failed.txt").read_text(errors="replace").strip()
    except OSError:
        return None
    return text.splitlines()[0] if text else None


def horovodrun_path() -> str | None:
    """The venv's own horovodrun (whether or not the venv is activated), else one on PATH."""
    local = Path(sys.executable).parent / "horovodrun"
    return str(local) if local.exists() else shutil.which("horovodrun")


# Imported in a child process: a wheel built for another torch fails with an undefined symbol (or worse) at
# import, and the parent (`compare list`, the run planner) must survive that and report it.
_PROBE = """
import json, horovod, horovod.torch as hvd
print(json.dumps({"version": horovod.__version__, "gloo": hvd.gloo_built(), "mpi": hvd.mpi_built(),
                  "nccl": bool(hvd.nccl_built()), "cuda": bool(hvd.cuda_built()), "file": horovod.__file__}))
"""


@functools.lru_cache(maxsize=1)
def probe() -> dict:
    """What the installed horovod.torch says about itself, or {"error": ...} when it does not import."""
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return {"error": "importing horovod.torch took more than 120 s"}
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        return {"error": lines[-1] if lines else f"exit code {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


class HorovodAdapter(Adapter):
    name = "horovod"
    summary = "Horovod 0.28.1 DistributedOptimizer (gradient averaging), launched by horovodrun --gloo"
    launcher = "horovodrun"

    @dataclass
    class Knobs:
        compression: str = "none"
        """none | fp16: gradients cast to fp16 on the wire (hvd.Compression.fp16); off by default, and a row
        with it on is shown as "fp32 + fp16 wire" and not checked for fp32 equivalence."""
        fusion_threshold_mb: int = 128
        """Tensor fusion buffer: gradients ready in one cycle are packed into one all-reduce up to this size
        (horovodrun --fusion-threshold-mb; 0 disables fusion; Horovod's default 128)."""
        cycle_time_ms: float = 1.0
        """Delay between the background thread's fusion cycles (horovodrun --cycle-time-ms; default 1)."""
        controller: str = "gloo"
        """gloo | mpi: how ranks are started and coordinated (mpi needs a Horovod built with MPI)."""
        start_timeout_s: int = 60
        """horovodrun gives up if the ranks have not all started within this (its default is 30)."""
        broadcast_optimizer_state: bool = True
        """Call hvd.broadcast_optimizer_state after broadcasting the parameters, as Horovod's examples do. On a
        fresh optimizer Horovod initialises the state by running optimizer.step() once with zero gradients:
        harmless for SGD, but for Adam-family optimizers it advances the step count and applies weight decay
        once, so training departs from the single-process run (the row records by how much). False skips it
        (every rank starts from the same empty state anyway, because the workload seeds every process alike)."""
        stall_check_warning_s: int = 30
        """Horovod logs which rank is missing which tensor after a collective waits this long."""
        stall_check_shutdown_s: int = 60
        """Horovod shuts the job down after a collective waits this long (0: never; must exceed the warning
        time). Passed on, but with 0.28.1 on CPU under the Gloo controller its stall inspector was not seen to
        fire (neither for a hung rank nor for ranks submitting different tensors): the harness's --timeout is
        what turns a hang into a `timeout` row. A dead rank is caught by horovodrun itself (`failed`)."""

    def __init__(self, knobs=None, device: str = "cpu"):
        super().__init__(knobs, device)
        k = self.knobs
        if k.compression not in COMPRESSIONS:
            raise KnobError(f"knob 'compression' must be one of {', '.join(COMPRESSIONS)}; got '{k.compression}'")
        if k.controller not in CONTROLLERS:
            raise KnobError(f"knob 'controller' must be one of {', '.join(CONTROLLERS)}; got '{k.controller}'")
        if k.fusion_threshold_mb < 0 or k.cycle_time_ms <= 0 or k.start_timeout_s < 1:
            raise KnobError("knobs need fusion_threshold_mb >= 0, cycle_time_ms > 0 and start_timeout_s >= 1")
        if k.stall_check_shutdown_s and k.stall_check_shutdown_s <= k.stall_check_warning_s:
            # Horovod itself would silently ignore such a shutdown time.
            raise KnobError(f"knob 'stall_check_shutdown_s' ({k.stall_check_shutdown_s}) must be 0 or greater "
                            f"than stall_check_warning_s ({k.stall_check_warning_s})")

    # ---- parent side -------------------------------------------------------------------------------------
    @classmethod
    def availability(cls, device: str, world_size: int) -> Availability:
        fix = f"run `make setup` (or `bash {INSTALL_SCRIPT}`): builds Horovod {VERSION} against this torch " \
              f"(about 4 min once, then cached)"
        failed = build_failure()
        if failed:
            fix = f"{fix}; build log at {wheel_cache() / 'horovod-build.log'}"
        if importlib.util.find_spec("horovod") is None:
            return Availability(False, failed or "horovod is not installed", fix)
        info = probe()
        if "error" in info:
            return Availability(False, f"horovod is installed but horovod.torch does not import: {info['error']}"
                                + (f" (last build: {failed})" if failed else ""),
                                f"rebuild it against this torch: `bash {INSTALL_SCRIPT}` (a wheel built for "
                                f"another torch does not load)")
        if not info["gloo"]:
            return Availability(False, f"horovod {info['version']} was built without Gloo",
                                f"rebuild with HOROVOD_WITH_GLOO=1: `bash {INSTALL_SCRIPT}`")
        if horovodrun_path() is None:
            return Availability(False, "horovodrun is not next to this python nor on PATH",
                                f"reinstall horovod into this venv: `bash {INSTALL_SCRIPT}` (horovodrun comes "
                                f"with the wheel)")
        if device == "cuda" and not (info["cuda"] and info["nccl"]):
            return Availability(False, f"horovod {info['version']} here is a CPU build (no CUDA/NCCL operations)",
                                "on a GPU machine rebuild with HOROVOD_GPU_OPERATIONS=NCCL")
        return cuda_world_check(device, world_size)

    def launch(self, spec_path: Path, spec) -> LaunchPlan:
        k, n = self.knobs, spec.world_size
        argv = [horovodrun_path() or "horovodrun", "-np", str(n), "-H", f"localhost:{n}", f"--{k.controller}",
                # loopback, like GLOO_SOCKET_IFNAME=lo for torch: interface discovery is flaky on CI machines
                "--network-interfaces", "lo",
                "--start-timeout", str(k.start_timeout_s),
                "--fusion-threshold-mb", str(k.fusion_threshold_mb), "--cycle-time-ms", f"{k.cycle_time_ms:g}",
                "--stall-check-warning-time-seconds", str(k.stall_check_warning_s),
                "--stall-check-shutdown-time-seconds", str(k.stall_check_shutdown_s),
                *python_module("harness.worker", str(spec_path))]
        return LaunchPlan(argv, processes=n)

    @classmethod
    def environment(cls):
        info = dict(probe())
        run = horovodrun_path()
        info["horovodrun"] = run
        if run:
            try:
                proc = subprocess.run([run, "--check-build"], capture_output=True, text=True, timeout=120)
                info["check_build"] = (proc.stdout + proc.stderr).strip()
            except (OSError, subprocess.TimeoutExpired) as exc:
                info["check_build"] = f"horovodrun --check-build failed: {exc}"
        info["last_build_failure"] = build_failure()
        return info

    # ---- rank side ---------------------------------------------------------------------------------------
    def setup(self, spec) -> RankInfo:
        import horovod.torch as hvd
        import torch

        hvd.init()
        self.hvd = hvd
        rank, size, local = hvd.rank(), hvd.size(), hvd.local_rank()
        if spec.device == "cuda":
            torch.cuda.set_device(local)
            dev, backend = f"cuda:{local}", "nccl"
        else:
            # CPU tensors go through the CPU operations Horovod was built with (HOROVOD_CPU_OPERATIONS=gloo);
            # under the Gloo controller MPI operations cannot run, so the backend is gloo.
            dev = "cpu"
            backend = "gloo" if hvd.gloo_enabled() else os.environ.get("HOROVOD_CPU_OPERATIONS", "mpi").lower()
        self.info = RankInfo(rank=rank, world_size=size, local_rank=local, device=dev, backend=backend,
                             data_rank=rank, data_world=size)
        return self.info

    def wrap(self, model, optimizer):
        hvd = self.hvd
        # Same start everywhere: rank 0's parameters and buffers, and its optimizer state.
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        self.state_init_change = None
        if self.knobs.broadcast_optimizer_state:
            import torch

            fresh = len(optimizer.state_dict()["state"]) == 0
            before = [p.detach().clone() for p in model.parameters()]
            hvd.broadcast_optimizer_state(optimizer, root_rank=0)
            if fresh:
                with torch.no_grad():
                    self.state_init_change = max(float((p - b).abs().max()) for p, b in zip(model.parameters(), before))
                optimizer.zero_grad()  # the zero gradients Horovod left on the parameters
        compression = hvd.Compression.fp16 if self.knobs.compression == "fp16" else hvd.Compression.none
        # op=Average: the mean of the ranks' gradients, as a single process over the global batch computes.
        # The LR is deliberately left alone (no `lr * hvd.size()` as in Horovod's examples).
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             compression=compression, op=hvd.Average)
        return super().wrap(model, optimizer)

    def zero_grad(self):
        # Horovod's zero_grad() takes no set_to_none argument; torch's default (set_to_none=True) applies.
        self.optimizer.zero_grad()

    def all_reduce_mean(self, tensor):
        # hvd.allreduce already averages: dividing by the size again is the bug users found in the seed blog.
        return self.hvd.allreduce(tensor, op=self.hvd.Average, name="compare.metrics")

    def barrier(self):
        self.hvd.barrier()

    def teardown(self):
        self.hvd.shutdown()

    def compression(self) -> str:
        return self.knobs.compression

    def comm(self):
        return HorovodComm(self.hvd)

    def describe(self):
        import horovod

        d = {"framework": f"horovod {horovod.__version__}", "knobs": asdict(self.knobs), "lr_scaling": "none"}
        change = getattr(self, "state_init_change", None)
        if change is not None:
            d["optimizer_state_init_param_change"] = change
            if change > 0:
                d["note"] = (f"hvd.broadcast_optimizer_state initialised the fresh optimizer's state with one "
                             f"optimizer.step() on zero gradients (Horovod's own code), which moved the parameters "
                             f"by up to {change:.1e} before training (weight decay, and Adam's step count); knob "
                             f"broadcast_optimizer_state=false skips it")
        if getattr(self, "hvd", None) is not None and self.info is not None:
            hvd = self.hvd
            d.update(controller="gloo" if hvd.gloo_enabled() else "mpi", backend=self.info.backend,
                     built={"gloo": hvd.gloo_built(), "mpi": hvd.mpi_built(), "nccl": bool(hvd.nccl_built())})
        return d


class _Handle:
    def __init__(self, hvd, handle):
        self.hvd, self.handle = hvd, handle

    def wait(self):
        self.hvd.synchronize(self.handle)


class HorovodComm:
    """Horovod's own ops for `compare comm` (sum reductions). Horovod has no reduce or gather to one rank, no
    scatter and no point-to-point: those cells are `unsupported` with that reason. Its out-of-place ops
    (allgather, reducescatter, alltoall) return a new tensor, copied into the harness's output buffer, which is
    part of what a Horovod user pays."""

    def __init__(self, hvd):
        import horovod

        self.hvd, self.version = hvd, horovod.__version__

    def all_reduce(self, t):
        self.hvd.allreduce_(t, op=self.hvd.Sum)

    def all_reduce_async(self, t):
        return _Handle(self.hvd, self.hvd.allreduce_async_(t, op=self.hvd.Sum))

    def all_reduce_coalesced(self, ts):
        self.hvd.grouped_allreduce_(ts, op=self.hvd.Sum)  # one fused request: Horovod's batched form

    def broadcast(self, t, src):
        self.hvd.broadcast_(t, root_rank=src)

    def all_gather(self, out, t):
        out.copy_(self.hvd.allgather(t))

    def reduce_scatter(self, out, t):
        out.copy_(self.hvd.reducescatter(t, op=self.hvd.Sum))

    def all_to_all(self, out, t):
        out.copy_(self.hvd.alltoall(t))

    def barrier(self):
        self.hvd.barrier()

    def _missing(self, what):
        raise NotImplementedError(f"horovod {self.version} has no {what}")

    def reduce(self, t, dst):
        self._missing("reduce to one rank (only allreduce)")

    def gather(self, outs, t, dst):
        self._missing("gather to one rank (only allgather)")

    def scatter(self, out, ins, src):
        self._missing("scatter")

    def send(self, t, dst):
        self._missing("point-to-point send/recv")

    def recv(self, t, src):
        self._missing("point-to-point send/recv")

    def isend(self, t, dst):
        self._missing("point-to-point send/recv")

    def irecv(self, t, src):
        self._missing("point-to-point send/recv")

    def batch_sendrecv(self, send, dst, recv, src):
        self._missing("point-to-point send/recv")


ADAPTER = HorovodAdapter
