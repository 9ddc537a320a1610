"""torch.nn.parallel.DistributedDataParallel, one process per device, ranks started by torchrun.

Knobs left unset are not passed to DDP, so a plain `DDP(model)`'s defaults apply (in torch 2.13 a 25 MiB bucket
cap with a smaller 1 MiB first bucket, which an explicit `bucket_cap_mb=25` would turn off); the record shows
what DDP resolved them to.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Literal
from pathlib import Path

from adapters.base import (NO_GRAD_CHECKPOINT, REENTRANT_FIX, Adapter, Availability, Cost, KnobError, Launch,
                           LaunchPlan, Strategy, cpu_sync_batch_norm, sync_batch_norm_in_place)
from adapters.launchers import torchrun, torchrun_nodes
from adapters.probes import compile_availability, cuda_world_check, torch_build
from adapters.comm_primitives import Comm
from adapters.rank_side import init_process_group_from_env
from harness.shared.comm_schedule import Buckets


class DDPLaunch(Launch):
    """DDP: the parent's role (adapters/base.py: Launch)."""

    @classmethod
    def availability(cls, device: str, world_size: int) -> Availability:
        build = torch_build()
        if build.get("broken"):
            return Availability(False, f"torch fails to import here ({build['broken']})",
                                "reinstall it (`make clean setup`), or remove what shadows it from PYTHONPATH")
        if not build.get("distributed"):
            return Availability(False, "this torch build has no torch.distributed",
                                "install a torch build with distributed support (every PyPI build has it)")
        if device == "cpu" and not build["gloo"]:
            return Availability(False, "this torch build has no gloo backend", "install torch from PyPI")
        gpus = cuda_world_check(device, world_size)
        if gpus and device == "cuda" and not build["nccl"]:
            return Availability(False, "this torch build has no NCCL backend", "install a CUDA build of torch")
        return gpus

    def knob_availability(self, device: str, world_size: int) -> Availability:
        return compile_availability(device) if self.knobs.compile else Availability(True)

    def launch(self, spec_path: Path, spec) -> LaunchPlan:
        if spec.topology is not None:
            return torchrun_nodes(spec, spec_path)
        return LaunchPlan(torchrun(spec.world_size, spec_path))

    def model_availability(self, facts):
        k = self.knobs
        # with sync_bn, the CPU's statistics over gloo replace SyncBatchNorm's (_sync_batch_norm)
        refused = cpu_sync_batch_norm(facts, self.device_kind, self.name, k.sync_bn)
        if refused is not None:
            return refused
        if not facts.no_gradient or k.find_unused_parameters:
            return Availability(True)
        never = set(facts.never_used) == set(facts.no_gradient)
        if k.static_graph and never:
            return Availability(True)  # a static graph knows its unused parameters after the first step
        # a reentrant checkpoint given no input that needs a gradient trains nothing it holds, in one process too:
        # the model's own fault, whose fix comes before the knobs that would make DDP agree with it
        own = (f"they get none in one process either: torch.utils.checkpoint (use_reentrant=True) warned \""
               f"{NO_GRAD_CHECKPOINT}\", so the module it checkpoints never trains; pass use_reentrant=False (then it "
               f"trains on every backend), or else " if facts.checkpoint_no_grad and never else "")
        return Availability(
            False, f"the model leaves parameters without a gradient: {facts.unused_text()} in the check before "
                   f"launching, and DDP's reducer waits for every parameter's gradient, so its launch would fail "
                   f"(\"Expected to have finished reduction in the prior iteration\")",
            f"{own}add the knob find_unused_parameters=true (-a {self.name}:find_unused_parameters=true)"
            + (f", or static_graph=true if they stay unused in every later step too (the check saw only the first "
               f"{facts.checked_steps}; a parameter first used later fails "
               f"static_graph at that step)" if never else ""))

    def batch_norm(self):
        if getattr(self.knobs, "sync_bn", False):
            return None
        return f"knob sync_bn=true converts them to SyncBatchNorm (-a {self.name}:sync_bn=true)"

    def failure_fix(self, error):
        if "Expected to have finished reduction" in error or "were not used in producing loss" in error:
            return (f"a step left parameters without a gradient, which DDP's reducer waits for: add the knob "
                    f"find_unused_parameters=true (-a {self.name}:find_unused_parameters=true), or static_graph=true "
                    f"where the same parameters go unused in every step")
        if "training graph has changed" in error:
            # static_graph=true where a parameter unused in the first iteration is used in a later one
            return (f"a parameter unused in the first step was used in a later one, which static_graph=true cannot "
                    f"take: use the knob find_unused_parameters=true (-a {self.name}:find_unused_parameters=true) "
                    f"instead of static_graph=true")
        if "mark a variable ready only once" in error:
            # a parameter whose gradient hook fires twice in one backward: reentrant activation checkpointing (its
            # recomputed forward runs inside backward) of a module used more than once, or a parameter shared
            # between several checkpointed calls
            return f"{REENTRANT_FIX}, or the knob static_graph=true (-a {self.name}:static_graph=true)"
        return None

    def check_knobs(self, world_size: int) -> None:
        if getattr(self.knobs, "comm_hook", "none") == "bf16" and self.device_kind != "cuda":
            # torch's bf16_compress_hook raises at the first step unless CUDA 11+ and NCCL 2.10+: refused up front.
            raise KnobError("knob 'comm_hook' bf16 needs CUDA with NCCL 2.10+ (torch's bf16_compress_hook); on CPU "
                            "use fp16 or powersgd")

    @classmethod
    def environment(cls):
        import torch.distributed as dist

        return {"gloo": dist.is_gloo_available(), "nccl": dist.is_nccl_available(), "mpi": dist.is_mpi_available()}


class DDPStrategy(Strategy):
    """DDP: every rank's role (adapters/base.py: Strategy)."""

    def import_framework(self) -> None:
        import torch.distributed  # noqa: F401
        import torch.nn.parallel  # noqa: F401

    def setup(self, spec):
        self.info = init_process_group_from_env(spec.device)
        return self.info

    def wrap(self, model, optimizer):
        from torch.nn.parallel import DistributedDataParallel as DDP

        device_ids = [self.info.local_rank] if self.info.device.startswith("cuda") else None
        k = self.knobs
        # torch >= 2.12 deprecates broadcast_buffers in favour of forward_sync_buffers (same meaning per forward).
        sync = ("forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(DDP.__init__).parameters
                else "broadcast_buffers")
        given = {"bucket_cap_mb": k.bucket_cap_mb, "gradient_as_bucket_view": k.gradient_as_bucket_view,
                 "static_graph": k.static_graph, sync: k.broadcast_buffers,
                 "find_unused_parameters": k.find_unused_parameters}
        if k.sync_bn:
            model = self._sync_batch_norm(model)
        self._compile(model)  # the model's own forward, inside DDP (see the knob)
        model = DDP(model, device_ids=device_ids, **{key: v for key, v in given.items() if v is not None})
        self._register_hook(model)
        return super().wrap(model, optimizer)

    def _sync_batch_norm(self, model):
        """The model with its BatchNorm statistics computed over the global batch. On CUDA every BatchNorm layer
        becomes a torch.nn.SyncBatchNorm holding the same parameters and buffers (convert_sync_batchnorm; the
        optimizer made over the model still updates them). torch's runs on CUDA only (it refuses CPU input, and DDP
        refuses a CPU model holding one: "SyncBatchNorm layers only work with GPU modules"), so on the CPU each layer
        keeps its parameters and gets the same statistics over gloo instead (adapters/base.py:
        sync_batch_norm_in_place)."""
        import torch

        if self.info.device.startswith("cuda"):
            model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
            layers = [m for m in model.modules() if isinstance(m, torch.nn.SyncBatchNorm)]
            self.synced_batch_norm = len(layers)
        else:  # a SyncBatchNorm of the model's own becomes a plain one first: DDP refuses a CPU model that holds one
            self.synced_batch_norm = sync_batch_norm_in_place(model)
        return model

    def _register_hook(self, model) -> None:
        k = self.knobs
        if k.comm_hook in ("fp16", "bf16"):
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            model.register_comm_hook(None, getattr(default_hooks, f"{k.comm_hook}_compress_hook"))
        elif k.comm_hook == "powersgd":
            from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

            self._refuse_powersgd_over_buckets_on_gloo(model)
            # min_compression_rate 2 (torch's default): a tensor PowerSGD would not halve is all-reduced as it is.
            state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=k.powersgd_rank,
                                                start_powerSGD_iter=k.powersgd_start_iter,
                                                warm_start=k.powersgd_warm_start, random_seed=0)
            model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)

    def dtypes(self, model):
        d = super().dtypes(model)
        # The wire: what the hook DDP really holds sends each bucket as (torch's own compress hooks by name);
        # PowerSGD sends low-rank factors in the gradients' dtype.
        for hook, _state in getattr(model, "_comm_hooks", []):
            name = getattr(hook, "__name__", "")
            if name.startswith(("fp16_compress", "bf16_compress")):
                d["reduce"] = name[:4]
            elif name.startswith("powerSGD"):
                d["reduce"] = f"{d['grads']} (low-rank factors)"
        return d

    def _refuse_powersgd_over_buckets_on_gloo(self, model) -> None:
        """PowerSGD over gloo with more than one DDP bucket breaks here: on widemlp (144 MiB of gradients) with 25
        MiB buckets every launch stopped at the first compressed step (the stall watch's stacks: rank 0 in the
        hook's second phase, compute_qs, on one bucket while rank 1 was all-reducing the first phase of two others),
        and with two buckets (bucket_cap_mb=100) gloo itself aborted: "Received data size doesn't match expected
        size. Is there a distributed collective mismatch". The hook chains its all-reduces from future callbacks,
        which gloo completes on its own threads, so the ranks issue them in different orders. With one bucket
        (bucket_cap_mb=200) it runs. Refused at once, with the fix."""
        if self.info is None or self.info.backend != "gloo":
            return
        grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
        cap = self.knobs.bucket_cap_mb
        first = (1 if cap is None else cap) * 2**20  # DDP's first bucket: 1 MiB unless bucket_cap_mb is set
        if grad_bytes > first:
            need = grad_bytes / 2**20
            raise KnobError(f"knob 'comm_hook' powersgd over gloo hangs or aborts when the gradients ({need:.1f} "
                            f"MiB here) span more than one DDP bucket (the first holds {first / 2**20:g} MiB): the "
                            f"ranks issue the hook's all-reduces in different orders; set bucket_cap_mb to at least "
                            f"{int(need) + 1} for one bucket, or use NCCL")

    def all_reduce_mean(self, tensor):
        import torch.distributed as dist

        out = tensor.clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out / self.info.world_size

    def barrier(self):
        import torch.distributed as dist

        dist.barrier()

    def teardown(self):
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()

    def comm(self):
        return TorchComm()

    def describe(self):
        import torch

        d = {**super().describe(), "framework": f"torch {torch.__version__}",
             "backend": self.info.backend if self.info else None}
        hook = self.knobs.comm_hook
        if hook in ("fp16", "bf16"):
            d["note"] = (f"DDP comm hook {hook}_compress_hook: each gradient bucket is cast to {hook} for the "
                         f"all-reduce (half the bytes on the wire) and back to fp32, so gradients lose precision")
        elif hook == "powersgd":
            d["note"] = (f"DDP comm hook PowerSGD (rank {self.knobs.powersgd_rank}, from step "
                         f"{self.knobs.powersgd_start_iter}, error feedback, warm start "
                         f"{'on' if self.knobs.powersgd_warm_start else 'off'}): each gradient matrix of m x n values "
                         f"is sent as rank-r factors, r(m + n) values, with the error fed back the next step; "
                         f"vectors and small matrices go as they are. The scaling model prices it as uncompressed")
        ddp = self.model
        if ddp is not None and hasattr(ddp, "bucket_bytes_cap"):
            config = getattr(ddp, "_bucket_config", None)
            d["resolved"] = {
                "bucket_cap_mb": ddp.bucket_bytes_cap / 2**20,
                "first_bucket_cap_mb": (config.first_bucket_bytes_cap / 2**20 if config is not None else None),
                "gradient_as_bucket_view": ddp.gradient_as_bucket_view, "static_graph": ddp.static_graph,
                "broadcast_buffers": getattr(ddp, "forward_sync_buffers", getattr(ddp, "broadcast_buffers", None)),
                "find_unused_parameters": ddp.find_unused_parameters,
                "sync_batch_norm_layers": getattr(self, "synced_batch_norm", 0),
            }
        return d


class DDPCost(Cost):
    """DDP: the model's, the planner's and compare tune's role (adapters/base.py: Cost)."""

    # DDP's gradient buckets trade overlap with backward (small) against per-call latency (large); torch's own DDP
    # benchmark sweeps 1-25 MB. The bucket view saves a gradient copy; a static graph lets DDP skip its
    # unused-parameter search and reorder buckets after the first step. torch.compile fuses the model's kernels
    # (same maths in fp32, up to the order of floating-point operations: the reference check shows how close).
    TUNE = {"bucket_cap_mb": (1, 5, 100), "gradient_as_bucket_view": (True,), "static_graph": (True,),
            "compile": (True,)}
    FRAMEWORK_DEFAULTS = {"gradient_as_bucket_view": False, "static_graph": False, "find_unused_parameters": False,
                          "broadcast_buffers": True}

    @classmethod
    def plan_knobs(cls, dtype):
        return [{}] if dtype == "fp32" else "trains in fp32; amp is DDP under autocast"

    def memory_buffers(self, tensors, largest, n, trainable=None):
        # Without gradient_as_bucket_view (off by default) DDP copies every gradient into its flat buckets: one
        # more fp32 copy of the gradients ("the saved memory size will be equal to the total gradients size",
        # DistributedDataParallel's docstring); only parameters that require a gradient get a bucket.
        if self.knobs.gradient_as_bucket_view:
            return []
        t = sum(tensors) if trainable is None else trainable
        return [("DDP's gradient buckets", 4 * t, "a copy of the fp32 gradients in its flat buckets, 4T; "
                                                   "gradient_as_bucket_view=true makes the gradients views of them")]

    def comm_schedule(self):
        cap = self.knobs.bucket_cap_mb
        # DDP's defaults: 25 MiB buckets, and a 1 MiB first bucket unless bucket_cap_mb is given.
        # fp16/bf16 hooks halve the bytes; PowerSGD's rank-r factors of an m x n gradient are r(m + n) values
        # instead of mn (depends on the shapes, not known here: left at 1.0 and said so in the record's note).
        wire = 0.5 if self.knobs.comm_hook in ("fp16", "bf16") else 1.0
        return Buckets(comm_backend="torch", wire_scale=wire, overlap=True,
                       bucket_bytes=int((25 if cap is None else cap) * 2**20),
                       first_bucket_bytes=int((1 if cap is None else cap) * 2**20))


class DDPAdapter(DDPLaunch, DDPStrategy, DDPCost, Adapter):
    name = "ddp"
    summary = "DistributedDataParallel, one process per device, launched by torchrun"
    launcher = "torchrun"
    blog_label = (1, "torch.distributed")

    @dataclass
    class Knobs:
        bucket_cap_mb: float | None = None
        """Gradient bucket size in MiB: buckets are all-reduced as soon as they fill, overlapping backward (unset:
        DDP's default, 25 MiB with a 1 MiB first bucket; set, every bucket including the first has this cap)."""
        gradient_as_bucket_view: bool | None = None
        """Let .grad alias the communication buckets (saves one gradient copy of memory; DDP's default: off)."""
        static_graph: bool | None = None
        """Declare that the graph is the same every step (enables extra DDP optimisations; default: off)."""
        find_unused_parameters: bool | None = None
        """Let DDP find, every step, the parameters the step's forward did not use, so that it does not wait for
        their gradients (DDP's default: off, and a model that leaves a parameter without a gradient in some step
        then fails: "Expected to have finished reduction in the prior iteration"). A parameter no rank used keeps
        no gradient, as in a single process. Costs a traversal of the autograd graph each step."""
        sync_bn: bool = False
        """Convert the model's BatchNorm layers to torch.nn.SyncBatchNorm (convert_sync_batchnorm): batch statistics
        over the global batch, as the single process computes them, so the equivalence check applies. torch's
        SyncBatchNorm runs on CUDA only; on the CPU the same statistics are all-reduced with
        torch.distributed.nn's differentiable all_reduce."""
        broadcast_buffers: bool | None = None
        """Broadcast rank 0's buffers (e.g. BatchNorm running stats) at every forward (default: on; passed as
        forward_sync_buffers on torch versions that renamed it)."""
        comm_hook: Literal["none", "fp16", "bf16", "powersgd"] = "none"
        """A DDP communication hook (torch.distributed.algorithms.ddp_comm_hooks): fp16 / bf16 cast each bucket to
        half precision for the all-reduce (half the bytes) and back; powersgd sends a rank-r approximation of each
        gradient matrix (PowerSGD, Vogels et al. 2019) after `powersgd_start_iter` plain steps."""
        powersgd_rank: int = 1
        """PowerSGD's matrix approximation rank (higher: more bytes, closer to the exact gradient)."""
        powersgd_start_iter: int = 2
        """Steps of plain all-reduce before PowerSGD starts (torch's default 1000 is longer than a benchmark run;
        at least 2 with error feedback)."""
        powersgd_warm_start: bool = True
        """Reuse the previous step's factors as the starting point (PowerSGD's warm start)."""
        compile: bool = False
        """torch.compile the model's forward (default backend, inductor) and wrap it in DDP: compiled in the
        warm-up, its time reported apart. Not torch.compile(DDP(model)): with torch 2.13 TorchDynamo breaks the
        graph in DDP's forward (its Logger) and captured no graph of a Sequential model here. The compiled backward
        hands DDP its gradients when it ends, so bucket all-reduces overlap less of it than in eager mode."""

        def __post_init__(self):
            if self.powersgd_rank < 1:
                raise KnobError(f"knob 'powersgd_rank' must be at least 1; got {self.powersgd_rank}")
            if self.powersgd_start_iter < 2:
                raise KnobError(f"knob 'powersgd_start_iter' must be at least 2 (PowerSGD with error feedback "
                                f"starts after one plain step or more); got {self.powersgd_start_iter}")
            # DDP itself takes any number here (a negative cap silently gives every gradient its own bucket)
            if self.bucket_cap_mb is not None and not self.bucket_cap_mb > 0:
                raise KnobError(f"knob 'bucket_cap_mb' must be a positive number of MiB (DDP's default: 25); "
                                f"got {self.bucket_cap_mb:g}")

    def compression(self) -> str:
        hook = self.knobs.comm_hook
        if hook == "powersgd":
            return f"powersgd rank {self.knobs.powersgd_rank}"
        return "none" if hook == "none" else hook


class TorchComm(Comm):
    """torch.distributed primitives for `compare comm` (sum reductions; blocking unless the name says async)."""

    def __init__(self):
        import torch
        import torch.distributed as dist

        self.dist, self.framework = dist, f"torch {torch.__version__}"

    def all_reduce(self, t):
        self.dist.all_reduce(t)

    def all_reduce_async(self, t):
        return self.dist.all_reduce(t, async_op=True)

    def all_reduce_coalesced(self, ts):
        # One coalesced call for several tensors: the NCCL group-call idea (gloo coalesces too).
        with self.dist._coalescing_manager(async_ops=True) as cm:
            for t in ts:
                self.dist.all_reduce(t)
        cm.wait()

    def broadcast(self, t, src):
        self.dist.broadcast(t, src)

    def reduce(self, t, dst):
        self.dist.reduce(t, dst)

    def all_gather(self, out, t):
        self.dist.all_gather_into_tensor(out, t)

    def gather(self, outs, t, dst):
        self.dist.gather(t, outs, dst=dst)

    def scatter(self, out, ins, src):
        self.dist.scatter(out, ins, src=src)

    def reduce_scatter(self, out, t):
        self.dist.reduce_scatter_tensor(out, t)

    def all_to_all(self, out, t):
        self.dist.all_to_all_single(out, t)

    def send(self, t, dst):
        self.dist.send(t, dst)

    def recv(self, t, src):
        self.dist.recv(t, src)

    def isend(self, t, dst):
        return self.dist.isend(t, dst)

    def irecv(self, t, src):
        return self.dist.irecv(t, src)

    def batch_sendrecv(self, send, dst, recv, src):
        ops = [self.dist.P2POp(self.dist.isend, send, dst), self.dist.P2POp(self.dist.irecv, recv, src)]
        for handle in self.dist.batch_isend_irecv(ops):
            handle.wait()

    def barrier(self):
        self.dist.barrier()


ADAPTER = DDPAdapter
