"""FSDP2 (`torch.distributed.fsdp.fully_shard`), one process per device, ranks started by torchrun.

Every unit the workload declares (`Workload.shard_units`: by default each block or layer that holds parameters) is
sharded on its own, modules that share a parameter (a head tied to the embedding) together as one group
(`Workload.shard_groups`: FSDP2's `fully_shard([emb, head])`), then the root: a unit's parameters are all-gathered
for its forward (and, resharded after forward, again for its backward), and its gradients reduce-scattered in
backward, so each rank keeps 1/N of the parameters, gradients and optimizer state. `reshard_after_forward=false`
keeps the gathered parameters from forward to backward (ZeRO-2-like: less communication, more memory); true is
ZeRO-3-like. `replicas=R` is HSDP: a R x (N/R) mesh, sharded within a group of N/R ranks and replicated
(all-reduced) across the R groups.

The optimizer is rebuilt over the sharded (DTensor) parameters with the workload's hyperparameters: FSDP2 replaces
the module's parameters, so an optimizer made before it would update tensors no forward uses.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from adapters.base import (EVERY_PARAMETER_FIX, REENTRANT_FIX, Availability, DeviceKnobError, KnobError, Precision,
                           Launch, cpu_sync_batch_norm, flat_layout, sync_batch_norm_in_place)
from adapters.probes import torch_build
from adapters.ddp import DDPAdapter, DDPCost, DDPLaunch, DDPStrategy
from harness.shared.comm_schedule import Fsdp
from harness.shared.text import listed

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


class FSDPLaunch(DDPLaunch):
    """FSDP: the parent's role (adapters/base.py: Launch)."""

    @classmethod
    def availability(cls, device: str, world_size: int) -> Availability:
        base = super().availability(device, world_size)
        if not base:
            return base
        version = torch_build().get("version", "0")
        major, minor = (int(x) for x in version.split("+")[0].split(".")[:2])
        if (major, minor) < (2, 6):  # fully_shard became public API in torch.distributed.fsdp in 2.6
            return Availability(False, f"torch {version} has no public FSDP2 (torch.distributed.fsdp.fully_shard, "
                                       f"torch >= 2.6)", "install torch 2.6 or newer")
        return base

    def model_availability(self, facts):
        # FSDP2 reduce-scatters the gradients that backward produced and leaves a parameter that got none without
        # one (its sharded .grad stays None), as a single process does: nothing to ask of the user, as long as every
        # rank has the same ones. Its post-backward concatenates the gradients a rank has into one reduce-scatter
        # (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py, post_backward: fsdp_params_with_grad), so
        # ranks with different ones send different sizes: gloo aborts ("Received data size doesn't match expected
        # size"), NCCL hangs.
        for refused in (cpu_sync_batch_norm(facts, self.device_kind, self.name, self.knobs.sync_bn),
                        flat_layout(facts, "FSDP2 (it shards each parameter's storage)", empty_too=True,
                                    scalar_too=True)):
            if refused is not None:
                return refused
        if facts.ranks_differ:
            return Availability(
                False, f"the ranks leave different parameters without a gradient: {facts.differ_text()} in the check "
                       f"before launching, and FSDP2 reduce-scatters only the gradients a rank has, so its ranks "
                       f"would issue collectives of different sizes (gloo aborts: \"Received data size doesn't "
                       f"match expected size\"; NCCL hangs)", EVERY_PARAMETER_FIX)
        if facts.bad_unit:
            return Availability(False, f"{facts.bad_unit} (FSDP2 wraps each unit with fully_shard)",
                                "give the model's own modules that run a forward, one by one (a ModuleList's "
                                "layers: list(model.layers))")
        if facts.unit_read_outside:
            return Availability(
                False, f"the units given (units=) include {listed(facts.unit_read_outside)}, whose parameters the "
                       f"forward reads outside that module's own forward (F.linear(h, self.emb.weight), say), and "
                       f"FSDP2 reshards a unit after its own forward, so that read would meet a shard (\"got mixed "
                       f"torch.Tensor and DTensor\")",
                f"leave {listed(facts.unit_read_outside)} out of units= (its parameters then stay with the root, "
                f"gathered through the whole forward), as the default units do")
        if facts.mixed_unit:
            return Availability(False, f"{facts.mixed_unit}, and FSDP2 gathers a unit's parameters in one "
                                       f"buffer of one dtype (\"FSDP expects uniform original parameter dtype\")",
                                "give the parameters of the other dtype a module of their own and list it among "
                                "the units (Workload.shard_units), or build the model in one dtype")
        if facts.sparse:
            return Availability(
                False, f"the model gives sparse gradients ({', '.join(facts.sparse)}: an embedding with "
                       f"sparse=True), which FSDP2 cannot reduce-scatter (its chunk_cat has no sparse kernel)",
                "build the embedding with sparse=False (a dense gradient)")
        if facts.twice:
            # measured: a module applied twice under reentrant checkpoints trained 3.5e-02 away from the single
            # process (both ways of reshard_after_forward) with no error: FSDP2 reduce-scatters a unit's gradients
            # once its backward ends, and the second inner backward's part of them is not in what it reduced
            return Availability(
                False, f"a parameter's gradient was made twice in one backward in the check before launching "
                       f"({facts.twice_text()}), and FSDP2 takes only part of such a gradient: it trained without "
                       f"an error and away from the single process (measured)", REENTRANT_FIX)
        if facts.grad_hooks:
            # fully_shard replaces each parameter by a sharded DTensor Parameter of its own (measured: not the same
            # object, and its hooks None), so a hook registered on the original never runs
            return Availability(
                False, f"the model registers hooks on its parameters' gradients ({listed(facts.grad_hooks)}: param.register_hook or "
                       f"register_post_accumulate_grad_hook), and fully_shard replaces each parameter by a sharded "
                       f"DTensor of its own, so those hooks would never run and the row would train another model",
                "do the hook's work where the forward uses the parameter (w * s + (w * (1 - s)).detach() has w's value "
                "and scales its gradient by s), or in the optimizer's step")
        return Availability(True)

    # FSDP2 has no SyncBatchNorm of its own: its knob sync_bn sums the statistics over the ranks (wrap), as every
    # backend's with that knob does, not DDP's conversion to SyncBatchNorm
    batch_norm = Launch.batch_norm

    def failure_fix(self, error):
        if ("got mixed torch.Tensor and DTensor" in error
                or "appears to not have been used in the graph" in error):
            # measured: a forward that returned an embedding's weight for the loss to index (a sampled softmax),
            # and MAML's torch.autograd.grad over named_parameters() in the forward, each failed so before the
            # default units saw such reads (workloads/base.py: read_outside); with those modules left to the root,
            # 1.2e-7 and 1.5e-8 ✓. What the check still cannot see (a read in the loss of a parameter the output
            # does not carry, a read by a hook) fails the same way
            return ("FSDP2 holds each unit's parameters as sharded DTensors outside that unit's own forward, and the "
                    "default units leave to the root only the modules whose parameters one forward was seen to read "
                    "outside their own (or to return): a parameter read elsewhere (in the loss, by a hook) is met "
                    "as a shard; give `units=` that leaves its module to the root, where its parameters stay "
                    "gathered through the forward and the loss (units=lambda m: [m.encoder] naming the others, or "
                    "units=lambda m: [] for the whole model as one unit)")
        if "in-place operations that require placement changes are not supported" in error:
            # measured (an outside check): torch.optim.Adafactor's step on FSDP2's parameters, "aten.pow_.Scalar:
            # in-place operations that require placement changes are not supported" on either rank
            return ("the optimizer's step computes, in place, a statistic over each parameter's whole tensor "
                    "(torch.optim.Adafactor's factored moments, a LAMB or LARS norm), and FSDP2 hands it each "
                    "parameter as a sharded DTensor, on which DTensor refuses such an in-place operation (and a "
                    "shard's statistic would not be the whole tensor's); fix: an optimizer whose step is elementwise "
                    "(Adam, AdamW, SGD) to compare FSDP2, or a backend that gives the optimizer whole tensors (ddp, "
                    "horovod, deepspeed:zero_stage=0)")
        return None

    def edited_parameters_fix(self):
        # measured: a BYOL teacher updated in place in the forward, its networks left to the root (read outside
        # their own forward), 7.3e-2 ✗; with units=[online, predictor, target] the update changes each unit's own
        # shard in place, 1.2e-7 ✓
        return ("FSDP2 frees the unsharded copy of a unit's parameters after its forward, so a change to a module left "
                "to the root (its parameters read outside its own forward, where the default units leave it) is "
                "dropped with that copy; give `units=` that makes each module whose parameters the forward writes a "
                "unit of its own (its shards are then changed in place)")

    def check_knobs(self, world_size: int) -> None:
        r = self.knobs.replicas
        if world_size % r:
            raise KnobError(f"knob 'replicas' {r} does not divide world size {world_size} (HSDP needs an R x N/R "
                            f"mesh); choose a divisor of {world_size}")


class FSDPStrategy(DDPStrategy):
    """FSDP: every rank's role (adapters/base.py: Strategy)."""

    def wrap(self, model, optimizer):
        import torch
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

        k = self.knobs
        if k.sync_bn:  # in place, before the units are sharded: each unit still holds its layers
            self.synced_batch_norm = sync_batch_norm_in_place(model)
        mesh = None
        if k.replicas > 1:
            from torch.distributed.device_mesh import init_device_mesh

            mesh = init_device_mesh(self.info.device.split(":")[0], (k.replicas, self.info.world_size // k.replicas),
                                    mesh_dim_names=("replicate", "shard"))
        # The defaults (fp32, fp32) mean no mixed precision: the parameters compute and reduce as the model built
        # them (a model built in bf16 or fp64 stays so, as on every other row), where float32 would cast them.
        plain = k.param_dtype == k.reduce_dtype == "fp32"
        mp = MixedPrecisionPolicy(param_dtype=None if plain else getattr(torch, DTYPES[k.param_dtype]),
                                  reduce_dtype=None if plain else getattr(torch, DTYPES[k.reduce_dtype]))
        common = {"mesh": mesh, "mp_policy": mp, "offload_policy": CPUOffloadPolicy() if k.cpu_offload
                  else OffloadPolicy()}
        names = {id(p): n for n, p in model.named_parameters()}  # to rebuild the optimizer's groups after sharding
        groups = [list(group) for group in (self.units or [])]
        module_names = {id(m): n for n, m in model.named_modules()}
        for group in groups:
            # Modules sharing a parameter (tied weights) are one group: FSDP2's fully_shard([a, b]).
            fully_shard(group if len(group) > 1 else group[0], reshard_after_forward=k.reshard_after_forward,
                        **common)
        # The root last (its own parameters, if any); it is not resharded after forward: backward starts with it.
        fully_shard(model, reshard_after_forward=False, **common)
        for module in [m for group in groups for m in group] or [model]:
            self._compile(module)
        self.units = len(groups)
        self.shared_groups = [[module_names.get(id(m), "?") for m in group] for group in groups if len(group) > 1]
        # The workload's own optimizer, its parameters swapped for the sharded ones of the same names: every group's
        # hyperparameters and whatever the instance holds stay as the workload built them. Rebuilding it from its
        # class with the groups alone (as this did) failed on a constructor with a required argument and silently
        # reset what the constructor set (a clipping threshold, a warm-up). In place, as an optimizer may keep a
        # reference to its group's list (LBFGS); its state is empty before the first step, else moved by name.
        sharded = dict(model.named_parameters())
        moved = {}
        for group in optimizer.param_groups:
            new = [sharded[names[id(p)]] for p in group["params"]]
            moved.update({id(p): q for p, q in zip(group["params"], new)})
            group["params"][:] = new
        for p in [p for p in list(optimizer.state) if id(p) in moved]:
            optimizer.state[moved[id(p)]] = optimizer.state.pop(p)
        self.model, self.optimizer = model, optimizer
        return model, optimizer

    def dtypes(self, model):
        from adapters.base import dtype_names

        d = super().dtypes(model)  # the sharded parameters and gradients (DTensors) and the optimizer's state
        # What each parameter is really gathered into and reduce-scattered in: FSDP2's own per-parameter dtypes,
        # set at its lazy init (None where no cast is needed: the original dtype, or for the reduction the
        # gathered one).
        held = [fp for module in model.modules()
                if (state := getattr(module, "_get_fsdp_state", None)) is not None
                and (group := getattr(state(), "_fsdp_param_group", None)) is not None
                for fp in group.fsdp_params]
        if held:
            gathered = [fp.param_dtype or fp.orig_dtype for fp in held]
            reduced = [fp.reduce_dtype or fp.param_dtype or fp.orig_dtype for fp in held]
            d["compute"] = self._compute_dtype(gathered)
            d["reduce"] = dtype_names(reduced)
        return d

    def gather_parameters(self, model):
        # DTensor shards -> the full tensor on every rank (an all-gather per parameter: every rank calls this).
        return {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().float().cpu().clone()
                for n, p in model.named_parameters()}

    def unwrap(self, model):
        return model

    def describe(self):
        import torch

        d = {"knobs": dataclasses.asdict(self.knobs), "framework": f"torch {torch.__version__}",
             "backend": self.info.backend if self.info else None}
        if getattr(self, "units", None) is not None:
            d["resolved"] = {**self._synced_layers(), "units": self.units,
                             "units_sharing_parameters": getattr(self, "shared_groups", []),
                             "mesh": (f"{self.knobs.replicas} x "
                                                           f"{self.info.world_size // self.knobs.replicas}"
                                                           if self.knobs.replicas > 1 else f"{self.info.world_size}")}
        return d


class FSDPCost(DDPCost):
    """FSDP: the model's, the planner's and compare tune's role (adapters/base.py: Cost)."""

    # Keeping each unit's gathered parameters from forward to backward saves one all-gather per unit per step for
    # the memory of the unsharded unit (ZeRO-2-like); the DDP knobs it inherits do not apply to FSDP.
    TUNE = {"reshard_after_forward": (False,), "compile": (True,)}

    @classmethod
    def plan_knobs(cls, dtype):
        mixed = {} if dtype == "fp32" else {"param_dtype": dtype}  # gradients reduce-scattered in fp32
        return [{**mixed, "reshard_after_forward": True}, {**mixed, "reshard_after_forward": False}]

    def model_state_bytes(self, params, largest, n, optimizer_bytes, trainable=None):
        # Sharded: the fp32 parameters (frozen ones too), the trainable ones' fp32 gradients and optimizer state,
        # 1/N each. Unsharded while a unit computes: its parameters gathered in param_dtype and its gradients before
        # the reduce-scatter; with reshard_after_forward=false every unit's gathered parameters stay from forward
        # to backward. One unit at a time is counted here; the unit FSDP2 prefetches is a memory_buffers line.
        b = {"fp32": 4, "bf16": 2, "fp16": 2}[self.knobs.param_dtype]
        t = params if trainable is None else trainable
        gathered = largest["unit"] if self.knobs.reshard_after_forward else params
        return (params * 4 + t * (4 + optimizer_bytes)) / n + b * gathered + b * largest["unit"]

    def model_state_rule(self, optimizer_bytes, frozen=False):
        b = {"fp32": 4, "bf16": 2, "fp16": 2}[self.knobs.param_dtype]
        gathered = f"{2 * b}U" if self.knobs.reshard_after_forward else f"{b}P + {b}U"
        what = ("one unit's parameters and gradients unsharded at a time" if self.knobs.reshard_after_forward else
                "every unit's parameters unsharded from forward to backward, one unit's gradients")
        sharded = (f"(4P + {4 + optimizer_bytes:g}T)/N + {gathered} (fp32 parameters, trainable gradients and "
                   f"optimizer state sharded" if frozen else
                   f"{4 + 4 + optimizer_bytes:g}P/N + {gathered} (fp32 parameters, gradients and optimizer state "
                   f"sharded")
        return f"{sharded}; {what}, in {self.knobs.param_dtype}; DeepSpeed has no FSDP estimator)"

    def memory_buffers(self, tensors, largest, n, trainable=None):
        # FSDP2 issues the next unit's all-gather while a unit computes (implicit forward and backward prefetch):
        # one more unit's parameters in param_dtype. DDP's buckets, which it would inherit, do not exist here.
        b = {"fp32": 4, "bf16": 2, "fp16": 2}[self.knobs.param_dtype]
        return [("FSDP2's prefetched all-gather", b * largest["unit"],
                 f"the next unit's parameters gathered while one computes, {b}U in {self.knobs.param_dtype}")]

    def comm_schedule(self):
        k = self.knobs
        wire = {"fp32": 1.0, "bf16": 0.5, "fp16": 0.5}
        return Fsdp(comm_backend="torch", wire_scale=wire[k.reduce_dtype], gather_scale=wire[k.param_dtype],
                    reshard_after_forward=k.reshard_after_forward, replicas=k.replicas, overlap=True)


class FSDPAdapter(FSDPLaunch, FSDPStrategy, FSDPCost, DDPAdapter):
    name = "fsdp"
    summary = "FSDP2 (fully_shard per declared unit, then the root), one process per device, launched by torchrun"
    launcher = "torchrun"
    blog_label = None  # not in the seed figure

    @dataclass
    class Knobs:
        reshard_after_forward: bool = True
        """Free each unit's gathered parameters after its forward and gather them again for backward (ZeRO-3-like);
        false keeps them until backward (ZeRO-2-like: one all-gather per unit per step, more memory)."""
        param_dtype: Literal["fp32", "bf16", "fp16"] = "fp32"
        """The dtype parameters are gathered and computed in (MixedPrecisionPolicy; the sharded fp32 copy stays)."""
        reduce_dtype: Literal["fp32", "bf16", "fp16"] = "fp32"
        """The dtype gradients are reduce-scattered in."""
        cpu_offload: bool = False
        """Keep the sharded parameters, gradients and optimizer step on the CPU (CPUOffloadPolicy; CUDA only)."""
        replicas: int = 1
        """HSDP: replicate across this many groups, shard within each (must divide the world size)."""
        compile: bool = False
        """torch.compile each sharded unit in place (the root where the workload declares none), as torchtitan
        compiles each block; compiled in the warm-up, its time reported apart."""
        sync_bn: bool = False
        """Compute the model's BatchNorm statistics over every rank's samples, as torch.nn.SyncBatchNorm does
        (FSDP2 has none of its own): each layer keeps its parameters and sums its mean and variance over the ranks
        with torch.distributed.nn's differentiable all_reduce, so the statistics are the single process's and the
        equivalence check applies. A model's own SyncBatchNorm becomes such a layer (torch's runs on CUDA only)."""

        def __post_init__(self):
            if self.replicas < 1:
                raise KnobError(f"knob 'replicas' must be at least 1 (1: plain FSDP); got {self.replicas}")

    def precision(self) -> Precision:
        k = self.knobs
        if "fp16" in (k.param_dtype, k.reduce_dtype) and self.device_kind == "cpu":
            raise DeviceKnobError("knob 'param_dtype'/'reduce_dtype' fp16 needs CUDA here; use bf16 or fp32 on CPU")
        if k.cpu_offload and self.device_kind == "cpu":
            raise KnobError("knob 'cpu_offload' moves sharded state from the GPU to the CPU; on CPU it is already "
                            "there (leave it out)")
        return Precision(k.param_dtype)

    def compression(self) -> str:
        r = self.knobs.reduce_dtype
        return "none" if r == self.knobs.param_dtype or r == "fp32" else r


ADAPTER = FSDPAdapter
