"""Horovod 0.28.1: hvd.DistributedOptimizer (averaged gradients), ranks started by `horovodrun --gloo`.

    compare run --adapters horovod,horovod:compression=fp16

Installed by `adapters/install/horovod.sh` (part of `make setup`): Horovod's last release must be built against
the venv's torch with C++17 (see that script). Its row is `unavailable`, with the build's reason, when the build
failed or the build in the venv does not load with this torch.

Across hosts: `horovodrun -np N -H h1:n1,h2:n2 --gloo [--network-interfaces IFACE]`, run on this machine (which
must be one the other hosts can reach: horovodrun's driver listens here), reaching the others over ssh itself.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from adapters.base import (REENTRANT_FIX, Adapter, Availability, Cost, KnobError, Launch, LaunchPlan, RankInfo,
                           Strategy, flat_layout, interpreter, rank_command, sync_batch_norm_in_place)
from adapters.probes import cuda_world_check
from adapters.comm_primitives import Comm
from harness.shared import cache
from harness.shared.comm_schedule import Fusion
from harness.shared.step_parts import comm_range

VERSION = "0.28.1"
INSTALL_SCRIPT = "adapters/install/horovod.sh"


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
    local = Path(interpreter()).parent / "horovodrun"
    return str(local) if local.exists() else shutil.which("horovodrun")


# Imported in a child process: a wheel built for another torch fails with an undefined symbol (or worse) at
# import, and the parent (`compare list`, the run planner) must survive that and report it.
_PROBE = """
import json, horovod, horovod.torch as hvd
print(json.dumps({"version": horovod.__version__, "gloo": hvd.gloo_built(), "mpi": hvd.mpi_built(),
                  "nccl": bool(hvd.nccl_built()), "cuda": bool(hvd.cuda_built()), "file": horovod.__file__}))
"""


def _probe_files() -> list[Path] | None:
    """What the probe's answer depends on: the built extension and the torch it links against. None when horovod
    or torch is not installed."""
    spec, torch_spec = importlib.util.find_spec("horovod"), importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations or torch_spec is None:
        return None
    torch_root, root = Path(list(torch_spec.submodule_search_locations)[0]), Path(list(spec.submodule_search_locations)[0])
    return [root / "__init__.py", root / "torch" / "__init__.py", *sorted((root / "torch").glob("mpi_lib*.so")),
            *sorted((torch_root / "lib").glob("libtorch_cpu*.so")), torch_root / "version.py"]


def _import_in_child() -> dict:
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return {"error": "importing horovod.torch took more than 120 s"}
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        return {"error": lines[-1] if lines else f"exit code {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


@functools.lru_cache(maxsize=1)
def probe() -> dict:
    """What the installed horovod.torch says about itself, or {"error": ...} when it does not import.

    Importing it takes seconds (in a child process, since a wheel built for another torch can crash the
    importer), so a successful answer is cached, keyed by the files it depends on."""
    files = _probe_files()
    if files is None:
        return _import_in_child()
    return cache.cached_json("horovod-probe", cache.files_key(files), _import_in_child,
                             keep=lambda info: "error" not in info)


AUTOTUNE_LOG = "horovod_autotune.csv"
"""horovodrun --autotune's log of trials, in the launch's directory (knob autotune=true)."""


class HorovodLaunch(Launch):
    """Horovod: the parent's role (adapters/base.py: Launch)."""

    # what a rank says once a peer's exception has ended the job, and horovodrun's summary of a failed worker
    LOG_PEER_GONE = r"Horovod has been shut down\. This was caused by an exception on one of the ranks"
    LOG_LAUNCHER_SUMMARY = r"Horovod detected that one or more processes exited with non-zero status"
    COMM_PATHS = ("horovod",)
    # its ranks talk through Horovod's own library, with no torch.distributed group; hvd.allgather's backward
    # all-reduces the gathered gradient as a mean (horovod/torch/mpi_ops.py, HorovodAllgather), where
    # torch.distributed.nn's all_gather sums it, so the loss is scaled back by the ranks' number
    # measured: a MoCo key queue gathered under no_grad matched with hvd.allgather alone (8.9e-8), and the loss
    # multiplied by hvd.size() as well was 2.2e-1 away: the factor is for a gather that carries a gradient
    NO_PROCESS_GROUP = ("gather with Horovod's own allgather (z = hvd.allgather(z), horovod.torch, behind "
                        "hvd.is_initialized()); where the gathered tensor carries a gradient into the loss, Horovod "
                        "averages it back over the ranks where torch.distributed.nn.functional.all_gather sums it: "
                        "multiply that loss by hvd.size() (a gather under no_grad, a queue of keys, needs no factor)")

    # a statistic a buffer takes from every rank (an EMA of the batch's mean): a sum, not a gather
    NO_PROCESS_GROUP_REDUCE = ("all-reduce with Horovod's own (t = hvd.allreduce(t, op=hvd.Sum), horovod.torch, "
                               "behind hvd.is_initialized()) the slice's sum and count the buffer is updated from")

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
        if shutil.which("env") is None:
            return Availability(False, "horovodrun starts every rank through `env` in a shell, and `env` is not on "
                                       "PATH", "put /usr/bin (coreutils) on PATH")
        if horovodrun_path() is None:
            return Availability(False, "horovodrun is not next to this python nor on PATH",
                                f"reinstall horovod into this venv: `bash {INSTALL_SCRIPT}` (horovodrun comes "
                                f"with the wheel)")
        if device == "cuda" and not (info["cuda"] and info["nccl"]):
            return Availability(False, f"horovod {info['version']} here is a CPU build (no CUDA/NCCL operations)",
                                "on a GPU machine rebuild with HOROVOD_GPU_OPERATIONS=NCCL")
        return cuda_world_check(device, world_size)

    def knob_availability(self, device: str, world_size: int) -> Availability:
        if self.knobs.controller != "mpi":
            return Availability(True)
        info = probe()
        if not info.get("mpi"):
            return Availability(False, f"horovod {info.get('version', VERSION)} here was built without MPI "
                                       f"(knob controller=mpi)",
                                f"use controller=gloo (the default), or install an MPI (Debian: apt-get install "
                                f"openmpi-bin libopenmpi-dev) and rebuild: `bash {INSTALL_SCRIPT}` (it builds MPI "
                                f"in where mpicxx is on PATH)")
        if shutil.which("mpirun") is None:
            return Availability(False, "controller=mpi starts the ranks with mpirun, which is not on PATH",
                                "put the MPI that Horovod was built with on PATH, or use controller=gloo")
        return Availability(True)

    def model_availability(self, facts):
        # hvd.DistributedOptimizer all-reduces every gradient as it is held: Horovod 0.28.1 takes fp16, fp32, fp64
        # (and int32/int64), not bf16 or complex ("Tensor type torch.BFloat16Tensor is not supported", measured).
        refused = flat_layout(facts, "Horovod (it all-reduces each gradient's storage as it is)", empty_too=False)
        if refused is not None:
            return refused
        other = facts.dtypes_outside({"fp16", "fp32", "fp64"})
        if not other:
            return Availability(True)
        held = "+".join(facts.param_dtypes or other)
        return Availability(False, f"the model's parameters are {held}, and Horovod {VERSION} all-reduces "
                                   f"gradients in fp16, fp32 or fp64 only (\"Tensor type ... is not supported\" at "
                                   f"the first step)",
                            "build the model in fp32 (for bf16 arithmetic, a row with autocast, such as "
                            "amp:precision=bf16)" if "bf16" in other else "build the model's parameters as real fp32 "
                            "tensors (a complex one as two real ones)")

    def launch(self, spec_path: Path, spec) -> LaunchPlan:
        k, n, topo = self.knobs, spec.world_size, spec.topology
        if topo is None:
            hosts, iface = f"localhost:{n}", "lo"  # loopback, like GLOO_SOCKET_IFNAME=lo for torch: interface
            # discovery is flaky on CI machines
        else:
            # Across hosts horovodrun reaches every other host over ssh itself (it must run where they can reach
            # its driver: on one of the hosts, which is where compare runs), forwarding its whole environment;
            # without an interface it looks for one that every host has.
            hosts, iface = ",".join(f"{node.host}:{node.slots}" for node in topo.nodes), topo.iface
        argv = [horovodrun_path() or "horovodrun", "-np", str(n), "-H", hosts, f"--{k.controller}"]
        # horovodrun caches its host checks for an hour in ~/.horovod: a launch must neither fail on a HOME it cannot
        # write (it did, with a FileNotFoundError) nor rest on a check made before this run. Training is unchanged.
        argv.append("--disable-cache")
        if k.autotune:  # its log in the launch's own directory, read back by rank 0 into the record
            argv += ["--autotune", "--autotune-log-file", str(Path(spec.rank_dir) / AUTOTUNE_LOG)]
        if iface is not None:
            argv += ["--network-interfaces", iface]
        # Only what the user set: everything else stays at horovodrun's own defaults.
        for flag, value in (("--start-timeout", k.start_timeout_s), ("--fusion-threshold-mb", k.fusion_threshold_mb),
                            ("--cycle-time-ms", k.cycle_time_ms),
                            ("--stall-check-warning-time-seconds", k.stall_check_warning_s),
                            ("--stall-check-shutdown-time-seconds", k.stall_check_shutdown_s)):
            if value is not None:
                argv += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
        return LaunchPlan(argv + rank_command(spec_path))

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

    def failure_fix(self, error):
        if "Gradients were computed more than backward_passes_per_step times" in error:  # a gradient hook fired
            return REENTRANT_FIX  # twice in one backward
        return None

    def missing_gradient(self):
        # Read in Horovod 0.28.1's source and measured (docs/your-model.md, "What each backend does differently").
        return ("hvd.DistributedOptimizer gives a parameter without a gradient a zero one to all-reduce "
                "(horovod/torch/optimizer.py, _allreduce_grad_async: \"Gradient was not computed, but we still need "
                "to submit a tensor to allreduce\"), so the optimizer steps it: its running state (SGD's momentum, "
                "Adam's moment estimates) and weight decay keep moving it where a single process leaves it alone")


def _sum_over_ranks(tensor):
    """The sum of `tensor` over every rank, differentiable (hvd.allreduce's backward all-reduces the gradient)."""
    import horovod.torch as hvd

    return hvd.allreduce(tensor, op=hvd.Sum)


class HorovodStrategy(Strategy):
    """Horovod: every rank's role (adapters/base.py: Strategy)."""

    # ---- rank side ---------------------------------------------------------------------------------------
    def import_framework(self) -> None:
        import horovod.torch  # noqa: F401

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
        import torch

        hvd = self.hvd
        if self.knobs.sync_bn:  # in place: the optimizer holds the same parameters
            self.synced_batch_norm = sync_batch_norm_in_place(model, _sum_over_ranks, hvd.size)
        # Same start everywhere: rank 0's parameters and buffers, and its optimizer state. Horovod 0.28.1 broadcasts
        # no bool, bf16 or complex tensor ("Tensor type torch.BoolTensor is not supported", measured): those go as
        # the same bytes in a type it takes (a bool flag buffer, a bf16 buffer of a model that trains in fp32).
        state, laid_out = [], []
        for name, t in model.state_dict().items():
            if t.dtype == torch.bool:
                t = t.view(torch.uint8)
            elif t.dtype == torch.bfloat16:
                t = t.view(torch.int16)
            elif t.is_complex():
                t = torch.view_as_real(t)
            if not t.is_contiguous():  # Horovod refuses one ("Tensor is required to be contiguous."): a buffer such
                whole = t.contiguous()  # as orthogonal()'s transposed `base` goes as a copy, written back after
                laid_out.append((t, whole))
                t = whole
            state.append((name, t))
        hvd.broadcast_parameters(state, root_rank=0)
        for t, whole in laid_out:
            t.copy_(whole)
        self.state_init_change = self.state_init_moved = None
        if self.knobs.broadcast_optimizer_state:
            fresh = len(optimizer.state_dict()["state"]) == 0
            before = [p.detach().clone() for p in model.parameters()]
            settings = _settings(optimizer)
            try:
                hvd.broadcast_optimizer_state(optimizer, root_rank=0)
            except RuntimeError as exc:
                if "dense gradients" not in str(exc):
                    raise
                # Horovod makes a fresh optimizer's state by one step on zero dense gradients (its optimizer.py:
                # broadcast_optimizer_state), which an optimizer of sparse gradients refuses (SparseAdam: "does not
                # support dense gradients", measured): the user's gradients were sparse
                raise RuntimeError(f"hvd.broadcast_optimizer_state makes the fresh optimizer's state by one step on "
                                   f"zero dense gradients, which {type(optimizer).__name__} refuses ({exc}); fix: "
                                   f"-a {self.name}:broadcast_optimizer_state=false (every rank builds the same "
                                   f"state from the same seed)") from None
            if fresh:
                with torch.no_grad():
                    self.state_init_change = max((float((p - b).abs().max()) for p, b in zip(model.parameters(), before)
                                                  if p.numel()), default=0.0)  # an empty parameter has no max
                optimizer.zero_grad()  # the zero gradients Horovod left on the parameters
                # its step is the optimizer's own: a counter or a schedule it keeps moved too (a warm-up one step on)
                after = _settings(optimizer)
                self.state_init_moved = [f"{k} {settings[k]!r} → {after.get(k)!r}" for k in settings
                                         if after.get(k) != settings[k]][:4] or None
        compression = hvd.Compression.fp16 if self.knobs.compression == "fp16" else hvd.Compression.none
        # op=Average: the mean of the ranks' gradients, as a single process over the global batch computes.
        # The LR is deliberately left alone (no `lr * hvd.size()` as in Horovod's examples).
        # hvd.DistributedOptimizer makes a subclass of the optimizer's class and calls its constructor with the
        # param groups alone (horovod/torch/optimizer.py: super(self.__class__, self).__init__(params)): the groups'
        # hyperparameters survive, but a constructor that requires another argument fails there, and what a
        # constructor sets on the instance (a warm-up's length, a clipping threshold) takes its defaults. The
        # first is said with its fix; the second is undone: the workload's instance attributes are carried over.
        try:
            wrapped = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                               compression=compression, op=hvd.Average)
        except TypeError as exc:
            cls = type(optimizer)
            raise TypeError(f"Horovod's DistributedOptimizer rebuilds {cls.__qualname__} from its param groups "
                            f"alone: {exc}; fix: give every argument of {cls.__qualname__}.__init__ but the "
                            f"parameters a default (the groups keep their own settings)") from exc
        for name, value in _own_attributes(optimizer).items():
            setattr(wrapped, name, value)
        return super().wrap(model, wrapped)

    def step(self):
        # Horovod all-reduces in its own C++ thread, which torch.profiler does not see: the wait for it is marked
        # (Horovod's documented split of step() into synchronize() and the update) so that a step's breakdown
        # counts it as communication.
        with comm_range("all-reduce"):
            self.optimizer.synchronize()
        self.clip_gradients()  # on the averaged gradients: Horovod's documented recipe for clipping
        with self.optimizer.skip_synchronize():
            self.optimizer.step()

    def dtypes(self, model):
        d = super().dtypes(model)
        # The wire: the compressor the DistributedOptimizer really holds (fp16 casts each gradient for the
        # all-reduce and back).
        # Horovod holds the compressor's class itself (Compression.fp16 is FP16Compressor), not an instance: its
        # type's name was "type", and the table said fp32 on the wire for compression=fp16
        held = getattr(self.optimizer, "_compression", None)
        compressor = held.__name__ if isinstance(held, type) else type(held).__name__
        if compressor == "FP16Compressor":
            d["reduce"] = "fp16"
        return d

    def zero_grad(self):
        # Horovod's zero_grad() takes no set_to_none argument; torch's default (set_to_none=True) applies.
        self.optimizer.zero_grad()

    def all_reduce_mean(self, tensor):
        # hvd.allreduce already averages: dividing by the size again is the bug users found in the seed blog.
        # One name per shape (the metrics' triple, a loss's count): Horovod negotiates each name once and reuses it.
        return self.hvd.allreduce(tensor, op=self.hvd.Average, name=f"compare.mean.{tensor.numel()}")

    def barrier(self):
        self.hvd.barrier()

    def teardown(self):
        self.hvd.shutdown()

    def comm(self):
        return HorovodComm(self.hvd)

    def describe(self):
        import horovod

        d = {**super().describe(), "framework": f"horovod {horovod.__version__}", "lr_scaling": "none",
             # What horovodrun handed the ranks (it exports the tunables it was given), else its documented default.
             "resolved": {**self._synced_layers(),
                          "fusion_threshold_mb": int(_env_number("HOROVOD_FUSION_THRESHOLD", 128 * 2**20)) / 2**20,
                          "cycle_time_ms": _env_number("HOROVOD_CYCLE_TIME", 1.0)}}
        notes = []
        log = os.environ.get("HOROVOD_AUTOTUNE_LOG")
        if self.knobs.autotune and log:
            d["autotune"] = _autotune_log(Path(log))
            notes.append(autotune_note(d["autotune"]))
        change = getattr(self, "state_init_change", None)
        moved = getattr(self, "state_init_moved", None)
        if change is not None:
            d["optimizer_state_init_param_change"] = change
            if moved:
                d["optimizer_state_init_moved"] = moved
            if change > 0 or moved:
                what = ([f"moved the parameters by up to {change:.1e} before training (weight decay, and Adam's "
                         f"step count)"] if change > 0 else []) + (
                    [f"changed the optimizer's own settings ({', '.join(moved)}: a schedule or counter it keeps "
                     f"runs one step ahead)"] if moved else [])
                notes.append(f"hvd.broadcast_optimizer_state initialised the fresh optimizer's state with one "
                             f"optimizer.step() on zero gradients (Horovod's own code), which {' and '.join(what)}; "
                             f"knob broadcast_optimizer_state=false skips it")
        if notes:
            d["note"] = "; ".join(notes)
        if getattr(self, "hvd", None) is not None and self.info is not None:
            hvd = self.hvd
            d.update(controller="gloo" if hvd.gloo_enabled() else "mpi", backend=self.info.backend,
                     built={"gloo": hvd.gloo_built(), "mpi": hvd.mpi_built(), "nccl": bool(hvd.nccl_built())})
        return d


class HorovodCost(Cost):
    """Horovod: the model's, the planner's and compare tune's role (adapters/base.py: Cost)."""

    # What `horovodrun --autotune` searches first: the fusion buffer (0: every tensor its own all-reduce) and the
    # background cycle that fills it (Horovod's defaults, 128 MB and 1 ms, were set for GPU clusters).
    TUNE = {"fusion_threshold_mb": (0, 8, 32), "cycle_time_ms": (0.2, 5)}

    @classmethod
    def plan_knobs(cls, dtype):
        return [{}] if dtype == "fp32" else "trains in fp32 here; its fp16 compression is a wire format"

    def memory_buffers(self, tensors, largest, n, trainable=None):
        # The fusion buffer, allocated once gradients of more than one tensor are fused: at most the whole gradient.
        fusion = self.comm_schedule().fusion_bytes
        t = sum(tensors) if trainable is None else trainable
        return [("Horovod's fusion buffer", min(fusion, 4 * t),
                 f"min({fusion / 2**20:g} MiB, 4T): gradients of several tensors packed for one all-reduce")]

    def comm_schedule(self):
        k = self.knobs
        # A knob becomes horovodrun's flag, which sets the variable for the ranks; without it they inherit
        # HOROVOD_FUSION_THRESHOLD (bytes) / HOROVOD_CYCLE_TIME (ms) from compare's environment, else Horovod >=
        # 0.21's defaults: a 128 MB fusion buffer and a 1 ms cycle (horovod PR 2468).
        fusion = (k.fusion_threshold_mb * 2**20 if k.fusion_threshold_mb is not None
                  else _env_number("HOROVOD_FUSION_THRESHOLD", 128 * 2**20))
        cycle_ms = k.cycle_time_ms if k.cycle_time_ms is not None else _env_number("HOROVOD_CYCLE_TIME", 1.0)
        return Fusion(comm_backend="horovod", wire_scale=0.5 if k.compression == "fp16" else 1.0,
                      fusion_bytes=int(fusion), cycle_s=cycle_ms / 1e3)


class HorovodAdapter(HorovodLaunch, HorovodStrategy, HorovodCost, Adapter):
    name = "horovod"
    summary = "Horovod 0.28.1 DistributedOptimizer (gradient averaging), launched by horovodrun --gloo"
    launcher = "horovodrun"
    distribution = "horovod"
    blog_label = (4, "horovod")

    @dataclass
    class Knobs:
        compression: Literal["none", "fp16"] = "none"
        """Gradients cast to fp16 on the wire (hvd.Compression.fp16); off by default, and a row with it on is
        shown as "fp32 + fp16 wire" and not checked for fp32 equivalence."""
        fusion_threshold_mb: int | None = None
        """Tensor fusion buffer: gradients ready in one cycle are packed into one all-reduce up to this size
        (horovodrun --fusion-threshold-mb; 0 disables fusion; unset: Horovod's default, 128)."""
        cycle_time_ms: float | None = None
        """Delay between the background thread's fusion cycles (horovodrun --cycle-time-ms; unset: its default,
        1)."""
        controller: Literal["gloo", "mpi"] = "gloo"
        """How ranks are started and coordinated (mpi needs a Horovod built with MPI)."""
        start_timeout_s: int | None = None
        """horovodrun gives up if the ranks have not all started within this (unset: its default, 30)."""
        broadcast_optimizer_state: bool = True
        """Call hvd.broadcast_optimizer_state after broadcasting the parameters, as Horovod's examples do. On a
        fresh optimizer Horovod initialises the state by running optimizer.step() once with zero gradients:
        harmless for SGD, but for Adam-family optimizers it advances the step count and applies weight decay
        once, so training departs from the single-process run (the row records by how much). False skips it
        (every rank starts from the same empty state anyway, because the workload seeds every process alike)."""
        stall_check_warning_s: int | None = None
        """Horovod logs which rank is missing which tensor after a collective waits this long (unset: its
        default, 60)."""
        stall_check_shutdown_s: int | None = None
        """Horovod shuts the job down after a collective waits this long (0: never, its default; must exceed the
        warning time). With 0.28.1 on CPU under the Gloo controller its stall inspector was not seen to fire
        (neither for a hung rank nor for ranks submitting different tensors): the harness's --timeout is what
        turns a hang into a `timeout` row. A dead rank is caught by horovodrun itself (`failed`)."""

        sync_bn: bool = False
        """Compute the model's BatchNorm statistics over every rank's samples, as hvd.SyncBatchNorm does: each layer
        keeps its parameters and sums its mean and variance over the ranks with hvd.allreduce (differentiable: its
        backward sums the gradients), so the statistics are the single process's and the equivalence check applies.
        Not hvd.SyncBatchNorm itself: it needs torch.batch_norm_stats, which torch implements for CUDA only (on the
        CPU: "Could not run 'aten::batch_norm_stats' with arguments from the 'CPU' backend", measured with torch
        2.13)."""
        autotune: bool = False
        """Horovod's own autotuner (horovodrun --autotune): during the run it tries fusion thresholds, cycle
        times and its other tunables (Bayesian optimisation, scored by bytes all-reduced per second) and ends on its
        pick. Its samples/s mixes every setting it tried, so it is not the pick's speed: the report gives the pick as
        a row to run (`compare run -a horovod:fusion_threshold_mb=..`), and the record keeps horovodrun's log."""

        def __post_init__(self):
            if self.fusion_threshold_mb is not None and self.fusion_threshold_mb < 0:
                raise KnobError(f"knob 'fusion_threshold_mb' must be 0 or more; got {self.fusion_threshold_mb}")
            if self.cycle_time_ms is not None and not 0 < self.cycle_time_ms <= 1000:
                # every fused all-reduce waits for the next cycle: a cycle of hours hangs the row until --timeout
                raise KnobError(f"knob 'cycle_time_ms' must be above 0 and at most 1000 (a second); got "
                                f"{self.cycle_time_ms:g}")
            if self.stall_check_warning_s is not None and self.stall_check_warning_s < 0:
                raise KnobError(f"knob 'stall_check_warning_s' must be 0 or more; got {self.stall_check_warning_s}")
            if self.start_timeout_s is not None and self.start_timeout_s < 1:
                raise KnobError(f"knob 'start_timeout_s' must be at least 1; got {self.start_timeout_s}")
            warning = 60 if self.stall_check_warning_s is None else self.stall_check_warning_s
            if self.stall_check_shutdown_s and self.stall_check_shutdown_s <= warning:
                # Horovod itself would silently ignore such a shutdown time.
                raise KnobError(f"knob 'stall_check_shutdown_s' ({self.stall_check_shutdown_s}) must be 0 or "
                                f"greater than stall_check_warning_s ({warning})")

    def compression(self) -> str:
        return self.knobs.compression


def _autotune_log(path: Path) -> dict:
    """horovodrun --autotune's log as the record keeps it: the lines as written (a CSV header, then one line per
    setting scored: hierarchical_allreduce, hierarchical_allgather, torus_allreduce, cache_enabled, cycle_time_ms,
    tensor_fusion_threshold in MB, score), each sample parsed, and the best-scoring one. Horovod ends its search on
    its pick and logs it last once the search completes; a shorter run leaves only the samples so far."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        return {"log": [], "samples": [], "error": f"{type(exc).__name__}: {exc}"}
    if not lines:
        return {"log": [], "samples": []}
    head = [h.strip() for h in lines[0].split(",")]
    samples = []
    for line in lines[1:]:
        try:
            samples.append({h: float(v) for h, v in zip(head, line.split(","), strict=True)})
        except ValueError:  # a line being written when the run ended, or a format this parser does not know
            continue
    best = max(samples, key=lambda x: x.get("score", float("-inf")), default=None)
    return {"log": lines, "samples": samples, "best": best}


def autotune_note(autotune: dict) -> str:
    """What the report says of a horovod:autotune=true row: what Horovod's autotuner picked, as a row to run."""
    best, n = autotune.get("best"), len(autotune.get("samples") or [])
    if best is None:
        return ("horovodrun --autotune logged no scored setting in this launch (" + (autotune.get("error") or
                "the run ended before its first sample") + "): give it more steps")
    fusion, cycle = best.get("tensor_fusion_threshold"), best.get("cycle_time_ms")
    flags = ", ".join(f"{k} {'on' if best.get(k) else 'off'}" for k in ("cache_enabled", "hierarchical_allreduce",
                                                                       "hierarchical_allgather") if k in best)
    # horovodrun takes the fusion threshold in whole MB (--fusion-threshold-mb), the cycle time as a number
    return (f"horovodrun --autotune scored {n} setting(s) (its own score: bytes all-reduced per second over a few "
            f"steps each, not samples/s); its best-scoring: fusion threshold {fusion:.3g} MB, cycle time {cycle:.3g} "
            f"ms{' (' + flags + ')' if flags else ''}. This row's samples/s mixes every setting it tried; the "
            f"pick's own speed is a row of its own (the threshold in whole MB, as horovodrun takes it): "
            f"horovod:fusion_threshold_mb={round(fusion)}:cycle_time_ms={cycle:.3g}")


def _env_number(name: str, default: float) -> float:
    """A Horovod tunable from the environment the ranks inherit (Horovod parses it as a number), else `default`."""
    try:
        return float(os.environ[name])
    except (KeyError, ValueError):
        return default


class _Handle:
    def __init__(self, hvd, handle):
        self.hvd, self.handle = hvd, handle

    def wait(self):
        self.hvd.synchronize(self.handle)


class HorovodComm(Comm):
    """Horovod's own ops for `compare comm` (sum reductions). Horovod has no reduce or gather to one rank, no
    scatter and no point-to-point: those cells are `unsupported` with that reason. Its out-of-place ops
    (allgather, reducescatter, alltoall) return a new tensor, copied into the harness's output buffer, which is
    part of what a Horovod user pays."""

    missing = {"reduce": "reduce to one rank (only allreduce)", "gather": "gather to one rank (only allgather)",
               **{op: "point-to-point send/recv" for op in ("send", "recv", "isend", "irecv", "batch_sendrecv")}}

    def __init__(self, hvd):
        import horovod

        self.hvd, self.framework = hvd, f"horovod {horovod.__version__}"

    @staticmethod
    def _name(op, t):
        """The same name for every call of one op on one buffer, as hvd.DistributedOptimizer names each gradient
        after its parameter: an unnamed call is "<op>.noname.<handle>" (torch/mpi_ops_v2.cc GetOpName), a new name
        each time, which misses Horovod's response cache and pays a full negotiation that no training step pays
        after its first. Horovod refuses two ops in flight under one name: compare comm waits for each call
        (all_reduce_async included) before the next, so one op on one buffer is never in flight twice."""
        return f"compare.{op}.{t.numel()}.{str(t.dtype).removeprefix('torch.')}"

    def all_reduce(self, t):
        self.hvd.allreduce_(t, op=self.hvd.Sum, name=self._name("allreduce", t))

    def all_reduce_async(self, t):
        return _Handle(self.hvd, self.hvd.allreduce_async_(t, op=self.hvd.Sum, name=self._name("allreduce_async", t)))

    def all_reduce_coalesced(self, ts):
        # one fused request: Horovod's batched form
        self.hvd.grouped_allreduce_(ts, op=self.hvd.Sum, name=self._name(f"grouped{len(ts)}", ts[0]))

    def broadcast(self, t, src):
        self.hvd.broadcast_(t, root_rank=src, name=self._name(f"broadcast{src}", t))

    def all_gather(self, out, t):
        out.copy_(self.hvd.allgather(t, name=self._name("allgather", t)))

    def reduce_scatter(self, out, t):
        out.copy_(self.hvd.reducescatter(t, op=self.hvd.Sum, name=self._name("reducescatter", t)))

    def all_to_all(self, out, t):
        out.copy_(self.hvd.alltoall(t, name=self._name("alltoall", t)))

    def barrier(self):
        self.hvd.barrier()


ADAPTER = HorovodAdapter


def _own_attributes(optimizer) -> dict[str, object]:
    """The public attributes an optimizer's class sets on its instance beyond torch's Optimizer (a step counter, a
    warm-up's length, a clipping threshold)."""
    return {k: v for k, v in vars(optimizer).items()
            if not k.startswith("_") and k not in ("defaults", "state", "param_groups")}


def _settings(optimizer) -> dict[str, object]:
    """What an optimizer keeps besides its state, as plain values: its own attributes (`_own_attributes`) and each
    param group's hyperparameters ("group 1's lr")."""
    plain = (int, float, str, bool, type(None))
    out = {k: v for k, v in _own_attributes(optimizer).items() if isinstance(v, plain)}
    for i, group in enumerate(optimizer.param_groups):
        out.update({f"group {i}'s {k}": v for k, v in group.items() if k != "params" and isinstance(v, plain)})
    return out
