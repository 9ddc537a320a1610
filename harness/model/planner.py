"""`compare plan`: which backend for a cluster that is not here. The step of every framework's planned
configurations (each adapter's `plan_knobs`) on a hardware profile reshaped to the user's cluster, with the memory
each holds per GPU, and a recommendation with its margin.

Runs in: the parent. The model's pricing (costmodel.py) is used as it is, on the shapes of shapes.py with the
activations of activations.py; what this module adds is the target's compute and network, each assumption stated
where it is made (harness/reports/plan_report.py says them):

- compute: FLOPs of one sample's forward and backward (counted by torch's FlopCounterMode on the workload's own
  model, or 6 x parameters x tokens for a transformer given by its size) over the profile's peak for the dtype
  times an assumed utilisation; low, middle and high are calibration.UTILISATION. Forward is 1/3 of it, backward
  2/3 (twice the forward's FLOPs) plus, with activation checkpointing, the recomputed forward; each layer's
  gradient is ready once backward has done that layer's share, in proportion to its parameters. The optimizer step
  reads and writes its state at the device's memory bandwidth. No framework overhead is carried over (none was
  measured on the target);
- network: the profile's bus bandwidth inside a node; across nodes, the node's NICs at NIC_EFFICIENCY of their
  line rate when --nic-gbps is given, else the profile's own figure for the share of its NICs a node of that many
  GPUs keeps (profile_nics: the profile's figure is its full node's NICs summed);
- memory, in GiB: model states (parameters, gradients, optimizer state), as each adapter counts them
  (`model_state_bytes`, `model_state_rule`: ZeRO-2 and ZeRO-3 as DeepSpeed's estimators), plus the activations one
  GPU's batch keeps for backward, the same under every data-parallel backend: counted by autograd on the meta
  device for a workload (`Saved`, with a fused attention kernel's saved tensors for `scaled_dot_product_attention`
  and each shard unit checkpointed when asked), or, for a transformer given by its size, what transformers' Llama
  saves (`llama_activations`, held to the real model by a test).

The ranges are over the assumed utilisation, not confidence intervals: nothing on the target was measured.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass, field
from typing import Any

from harness.model import comm_cost, hardware
from harness.model import costmodel as cm
from harness.model.activations import DTYPE_BYTES, LOSS_BYTES, BadPlan
from harness.model.calibration import UTILISATION
from harness.model.compute import Compute, layered_grads
from harness.model.shapes import BOUNDS, DTYPES, OPTIMIZER_TRAFFIC, OPTIMIZERS, Shape, within

NIC_EFFICIENCY = 0.96
"""All-reduce bus bandwidth per NIC over its line rate: 24 GB/s of a 200 Gb/s (25 GB/s) HDR NIC, "what we see
ourselves in general on perfect setups" (sjeaugey, NVIDIA, nccl-tests#160; the a100-sxm-hdr200 profile's
source)."""
ALLOCATOR_HEADROOM = 0.10
"""What PyTorch's CUDA caching allocator reserves beyond what is allocated at the peak, as a share of it: an
assumption, not a measurement of the target. On the H200 (docs/gpu.md, the fourth lease) reserved over allocated
was 1.10 for ddp and amp, 1.15 and 1.14 for FSDP2, 1.27 for ZeRO-3."""
GiB = 2**30
PLAN_CHECKED_GPUS = 128
"""The most GPUs of the published runs `compare plan` is held against (torchtitan's Llama 3.1 8B on 128 H100s:
tests/fixtures/published_plans.json, docs/scaling.md's "Held against published runs"; a test holds this to the
fixture)."""


def gpu_choices() -> dict[str, str]:
    """--gpu value -> hardware profile: each profile's name, and its first word (h100, a100, ...) where that is
    unique; only profiles with a peak for some precision (a GPU)."""
    names = [n for n in hardware.profiles() if not hardware.profile_problem(n) and hardware.load_profile(n).peak_tflops]
    short: dict[str, list[str]] = {}
    for n in names:
        short.setdefault(n.split("-")[0], []).append(n)
    out = {k: v[0] for k, v in short.items() if len(v) == 1}
    out.update({n: n for n in names})
    return out


def _profile_fields(profile: str) -> dict[str, Any]:
    """harness/model/profiles/<profile>.json as it is, for the fields Fabric does not carry."""
    return json.loads((hardware.PROFILES_DIR / f"{profile}.json").read_text(encoding="utf-8"))


def memory_gib(profile: str) -> float | None:
    """The profile's device memory in GiB (its `memory_GiB`), or None."""
    return _profile_fields(profile).get("memory_GiB")


@dataclass
class Cluster:
    profile: str | None
    """The hardware profile; None: the run's own machine, a CPU (`compare plan --from` a CPU run)."""
    nodes: int
    gpus_per_node: int
    dtype: str | None
    """None: every row at its own precision (the run's own machine, no --dtype)."""
    nic_gbps: float | None = None
    nics_per_node: int = 1
    memory_gib: float | None = None
    machine: str | None = None
    """How the run's own CPU machine is named."""

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def capacity_gib(self) -> float | None:
        """Memory per GPU in GiB: --gpu-memory-gib, else the profile's (the run's own CPU: its host memory)."""
        if self.memory_gib is not None or self.profile is None:
            return self.memory_gib
        return memory_gib(self.profile)

    def fabric(self) -> comm_cost.Fabric | None:
        """The profile with this cluster's node size and its network across nodes: given --nic-gbps, those NICs;
        else the profile's, for the NICs a node of this many GPUs keeps (profile_nics) (None: a CPU)."""
        if self.profile is None:
            return None
        f = hardware.load_profile(self.profile)
        inter = f.inter_busbw_Bps
        if self.nic_gbps is not None:
            inter = self.nics_per_node * self.nic_gbps / 8 * 1e9 * NIC_EFFICIENCY
        else:
            kept, nics = profile_nics(self.profile, self.gpus_per_node)
            inter *= kept / nics
        f = dataclasses.replace(f, devices_per_node=self.gpus_per_node, inter_busbw_Bps=inter)
        f.time = functools.lru_cache(maxsize=None)(f.time)  # a model's blocks repeat the same sizes thousands of times
        return f


def profile_nics(profile: str, gpus_per_node: int) -> tuple[int, int]:
    """(NICs a node of `gpus_per_node` GPUs keeps, NICs a full node of the profile has): a profile's bus bandwidth
    across nodes is its node's NICs summed (harness/model/profiles/README.md), and its NICs sit with its GPUs (one
    per GPU on the H100, H200 and A100 nodes, one per two on the DGX-1), so a node of fewer GPUs keeps their share,
    at least one: on 1 GPU per node of h100-sxm-ndr400, one 400 Gb/s NIC, 46 of the 368 GB/s."""
    d = _profile_fields(profile)
    full, nics = d["devices_per_node"], d.get("nics_per_node") or 1
    return min(nics, max(1, math.ceil(gpus_per_node * nics / full))), nics


def cluster(gpu: str, nodes: int, gpus_per_node: int | None, dtype: str, nic_gbps: float | None = None,
            nics_per_node: int = 1, memory: float | None = None) -> Cluster:
    """The cluster of --gpu (a profile's name or its short name; BadPlan listing them otherwise), with the
    profile's GPUs per node unless given."""
    choices = gpu_choices()
    if gpu not in choices:
        raise BadPlan(f"unknown --gpu {gpu}; choose from {', '.join(choices)}")
    profile = choices[gpu]
    per_node = gpus_per_node if gpus_per_node is not None else hardware.load_profile(profile).devices_per_node
    return Cluster(profile, nodes, per_node, dtype, nic_gbps, nics_per_node, memory)


def check(cluster: Cluster, batch: int | None, global_batch: int | None) -> int | None:
    """The per-GPU batch (None: not given), or BadPlan naming what cannot be priced."""
    for what, v in (("--nodes", cluster.nodes), ("--gpus-per-node", cluster.gpus_per_node)):
        if v < 1:
            raise BadPlan(f"{what} must be at least 1, got {v}")
    within("--nics-per-node", cluster.nics_per_node)
    within("--nic-gbps", cluster.nic_gbps)
    within("--gpu-memory-gib", cluster.memory_gib)
    within("--batch", batch)
    if cluster.gpus > cm.PREDICT_TO[1]:
        raise BadPlan(f"{cluster.nodes} node{'s' if cluster.nodes > 1 else ''} x {cluster.gpus_per_node} GPUs is "
                      f"{cluster.gpus:,} GPUs; past {cm.PREDICT_TO[1]:,} a one-step model has nothing to say")
    if cluster.dtype is not None and cluster.dtype not in DTYPES:
        raise BadPlan(f"unknown --dtype {cluster.dtype}; choose from {', '.join(DTYPES)}")
    if cluster.profile is not None:
        f = hardware.load_profile(cluster.profile)
        if cluster.gpus_per_node > f.devices_per_node:
            raise BadPlan(f"--gpus-per-node {cluster.gpus_per_node} is more than the {f.devices_per_node} GPUs a "
                          f"node of {cluster.profile} connects (its intra-node bandwidth is for that many); give at "
                          f"most {f.devices_per_node}")
        if not f.peak_tflops.get(cluster.dtype):
            have = ", ".join(k for k in f.peak_tflops if k in DTYPES)
            raise BadPlan(f"{cluster.profile} ({f.device}) has no {cluster.dtype} peak in its profile; choose "
                          f"--dtype from {have}")
    if batch is not None and global_batch is not None:
        raise BadPlan("give --batch (per GPU) or --global-batch, not both")
    if global_batch is not None:
        if global_batch < 1 or global_batch % cluster.gpus:
            raise BadPlan(f"--global-batch {global_batch} cannot be split evenly over {cluster.gpus} GPUs "
                          f"({cluster.nodes} node{'s' if cluster.nodes > 1 else ''} x {cluster.gpus_per_node}); give a "
                          f"multiple of {cluster.gpus}")
        per_gpu = global_batch // cluster.gpus
        b = BOUNDS["--batch"]
        if per_gpu > b.high:
            raise BadPlan(f"--global-batch {global_batch} is {per_gpu:,} per GPU; the batch per GPU must be at most "
                          f"{b.high:,g} ({b.why})")
        return per_gpu
    return batch


def compute(shape: Shape, fabric: comm_cost.Fabric, dtype: str, batch: int, utilisation: float,
            grad_bytes: float) -> Compute:
    """One GPU's step compute at `utilisation` of the peak (see the module's docstring)."""
    rate = fabric.peak_tflops[dtype] * 1e12 * utilisation
    total = shape.flops_per_sample * batch / rate
    backward = 2 * total / 3 + shape.recompute_flops_per_sample * batch / rate
    bandwidth = 2 * fabric.copy_Bps if fabric.copy_Bps else None
    opt = shape.trainable * OPTIMIZER_TRAFFIC[shape.optimizer] / bandwidth if bandwidth else 0.0
    return Compute(total / 3, backward, opt, layered_grads(shape.grad_layers(grad_bytes), backward), 0.0,
                      fabric.copy_Bps)


def _label(name: str, knobs: dict[str, Any]) -> str:
    return name + "".join(f":{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in knobs.items())


@dataclass
class Priced:
    """A row's step three ways (fastest, middle, slowest) and how its compute was priced."""

    steps: list[cm.Step]
    how: str
    n: int
    """Devices the step runs on (its samples/s is n x batch / step)."""
    precision: str
    measured: Any = None
    """The run's row whose launches' spread makes the range (`--from`), None where the range is an assumption."""
    assumed: list[float] | None = None
    """With `measured`: the step times (fastest, middle, slowest) with that row's launches at their middle, so the
    range left is what every row shares (the MFU assumed on another device)."""
    left_out: str | None = None
    """Why the row is priced but not recommended (a measured row that was not data-parallel across its run's world
    size, which the run's verdict leaves out of its ranking too), None where it is."""
    peak_bytes: float | None = None
    """What the run measured the row holding per device at its peak, where the plan is of that very step (its own
    machine, processes, batch and no added checkpointing): reserved on a GPU, resident on a CPU; None otherwise."""


class Assumed:
    """Compute at an assumed share of the dtype's peak: UTILISATION's low, middle and high (no run given)."""

    kind = "assumed"

    def configurations(self, cluster: Cluster):
        return None  # every adapter's plan_knobs

    def price(self, shape: Shape, cluster: Cluster, fabric: comm_cost.Fabric, batch: int, name: str,
              knobs: dict[str, Any], adapter) -> Priced | str:
        grad_bytes = adapter.gradient_bytes() * as_built(shape)
        steps = [cm.predict_step(adapter.comm_schedule(), compute(shape, fabric, cluster.dtype, batch, u, grad_bytes),
                                 fabric, cluster.gpus)
                 for u in reversed(UTILISATION)]
        return Priced(steps, "assumed", cluster.gpus, cluster.dtype)

    def header(self, cluster: Cluster, fabric: comm_cost.Fabric) -> str:
        return (f"compute at {UTILISATION[0]:.0%}-{UTILISATION[2]:.0%} of the {cluster.dtype} peak "
                f"({fabric.peak_tflops[cluster.dtype]:g} TFLOP/s), the middle figure at {UTILISATION[1]:.0%}: an "
                f"assumed utilisation (--from RUN_DIR prices it from a run instead); ranges are over that "
                f"assumption, not confidence intervals")

    def footer(self) -> list[str]:
        return []

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "utilisation": list(UTILISATION),
                "what": "FLOPs over the dtype's peak at each assumed utilisation (low, middle, high)"}


@dataclass
class Plan:
    shape: Shape
    cluster: Cluster
    batch: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    recommendation: dict[str, Any] | None = None
    source: Any = None
    inputs: dict[str, Any] = field(default_factory=dict)
    beyond_checked: str | None = None
    """Where the cluster is larger than any the model was checked against: what was checked, and where."""


def beyond_checked(gpus: int) -> str | None:
    """A note where `gpus` is past PLAN_CHECKED_GPUS (and past the published scaling results the step model was
    checked against, harness/model/profiles/published.json), else None."""
    if gpus <= PLAN_CHECKED_GPUS:
        return None
    model = max(p["n"] for entry in hardware.published() for p in entry["points"])
    step = (f"and past the {model} of the published scaling results its step model was checked against "
            f"(harness/model/profiles/published.json, `compare predict`)" if gpus > model else
            f"(its step model was checked against published scaling results up to {model} GPUs: "
            f"harness/model/profiles/published.json, `compare predict`)")
    return (f"unchecked at this size: {gpus:,} GPUs is past the {PLAN_CHECKED_GPUS} of the largest published run "
            f"the plan was checked against (tests/fixtures/published_plans.json, docs/scaling.md) {step}; its "
            f"figures and ranking here are the model's extrapolation")


def as_built(shape: Shape) -> float:
    """What a row holds per element an adapter counts in fp32: the parameters' own bytes over 4 (2 for a model built
    in fp64; 1 for fp32, where mixed-precision rows count their own 16-bit copies)."""
    return shape.param_bytes / 4


def refused(shape: Shape, adapter) -> str | None:
    """Why `compare run` would refuse this row for this model's parameter dtypes (a mixed precision over a model not
    built in fp32; a framework that cannot reduce such gradients: Adapter.model_availability), None where it would
    take it. Only the dtypes are known here (the model is not run), and only a model not built in fp32 is asked."""
    from adapters.base import ModelFacts, mixed_precision_refusal

    if not set(shape.param_dtypes) - {"fp32"}:
        return None
    facts = ModelFacts(param_dtypes=list(shape.param_dtypes))
    mixed = mixed_precision_refusal(adapter, facts)  # a refusal is falsy: never joined with `or`
    got = mixed if mixed is not None else adapter.model_availability(facts)
    return None if got else got.message()


def memory(shape: Shape, adapter, n: int, dtype: str, batch: int, cuda: bool) -> dict[str, Any]:
    """A row's memory per device in bytes: model states (the adapter's count, frozen parameters at their storage
    only), the framework's own buffers (the adapter's memory_buffers), activations, the loss over the model's
    output in fp32, and the caching allocator's headroom (ALLOCATOR_HEADROOM of the rest, on a GPU)."""
    optimizer = OPTIMIZERS[shape.optimizer]
    trainable = shape.trainable if shape.frozen else None
    # beside `largest`'s counts, the weights autocast would copy (Shape.cast_params) and every weight a matmul takes
    # (Shape.matmul_params), for an adapter that casts them
    cast = {k: v for k, v in (("cast", shape.cast_params), ("matmul", shape.matmul_params)) if v is not None}
    # a model built in another dtype than fp32 trains as built (no mixed-precision row is planned for it): each
    # element an adapter counts in fp32 is held at the parameters' own size, its activations and loss likewise
    scale = as_built(shape)
    states = scale * adapter.model_state_bytes(shape.params, shape.largest, n, optimizer, trainable=trainable)
    buffers = [{"name": b_name, "bytes": scale * b_bytes, "how": b_how}
               for b_name, b_bytes, b_how in adapter.memory_buffers(shape.tensors, {**shape.largest, **cast}, n,
                                                                    trainable)]
    dtype = shape.built_dtype if shape.built_dtype in DTYPE_BYTES else dtype
    acts = shape.activations.bytes(dtype, batch) if shape.activations else None
    # the loss in fp32 (in the model's dtype where that is wider): its log-softmax and two gradients
    wide = max(4, DTYPE_BYTES[dtype]) / 4
    loss = shape.output_elements * batch * ((LOSS_BYTES + 4) * wide - DTYPE_BYTES[dtype])
    allocated = states + sum(b["bytes"] for b in buffers) + (acts or 0.0) + loss
    headroom = ALLOCATOR_HEADROOM * allocated if cuda else 0.0
    return {"model_state_bytes": states, "rule": adapter.model_state_rule(optimizer, frozen=bool(shape.frozen)),
            "buffers": buffers, "buffer_bytes": sum(b["bytes"] for b in buffers), "activation_bytes": acts,
            "loss_bytes": loss, "headroom_bytes": headroom,
            "total_bytes": allocated + headroom if acts is not None else None,
            "known_bytes": allocated + headroom}


def make(shape: Shape, cluster: Cluster, batch: int, source=None, inputs: dict[str, Any] | None = None) -> Plan:
    """Every planned row priced three ways (the source's: an assumed utilisation, or a run's measurements and their
    interval), its memory, and the recommendation."""
    import adapters

    source = source or Assumed()
    fabric = cluster.fabric()
    capacity = cluster.capacity_gib()
    plan = Plan(shape, cluster, batch, source=source, inputs=dict(inputs or {}),
                beyond_checked=beyond_checked(cluster.gpus))
    configurations = source.configurations(cluster)
    if configurations is None:
        configurations = []
        for name in adapters.names():
            knob_sets = adapters.get(name).plan_knobs(cluster.dtype)
            if isinstance(knob_sets, str):
                plan.skipped[name] = knob_sets
                continue
            configurations += [(name, knobs) for knobs in knob_sets]
    for name, knobs, *own_label in configurations:
        if isinstance(knobs, str):  # the source's reason for not planning it
            plan.skipped[name] = knobs
            continue
        adapter = adapters.get(name)(knobs, "cuda")
        label = own_label[0] if own_label else _label(name, knobs)
        why = refused(shape, adapter)
        if why:
            plan.skipped[label] = why
            continue
        priced = source.price(shape, cluster, fabric, batch, name, knobs, adapter)
        if isinstance(priced, str):
            plan.skipped[label] = priced
            continue
        steps, n = priced.steps, priced.n
        mem = memory(shape, adapter, n, priced.precision, batch, cluster.profile is not None)
        held = mem["known_bytes"]
        schedule = adapter.comm_schedule()
        plan.rows.append({
            "label": label, "adapter": name, "knobs": knobs, "precision": priced.precision, "devices": n,
            # bytes per gradient element its collectives carry (fp32 4, 16-bit 2), as the model prices them
            "reduce_bytes": (adapter.gradient_bytes() * as_built(shape) * schedule.wire_scale
                             if schedule is not None else None),
            "left_out": priced.left_out,
            # the model states this configuration splits across GPUs, as its schedule declares them (the ZeRO
            # paper's stages: 0 none, 1 the optimizer state, 2 the gradients too, 3 the parameters too)
            "partitions": schedule.partitions if schedule is not None else 0,
            "step_s": {"low": steps[0].step_s, "mid": steps[1].step_s, "high": steps[2].step_s},
            "samples_per_s": {"low": n * batch / steps[2].step_s, "mid": n * batch / steps[1].step_s,
                              "high": n * batch / steps[0].step_s},
            "compute_s": steps[1].compute_s, "comm_s": steps[1].comm_s, "exposed_s": steps[1].exposed_s,
            "overhead_s": steps[1].overhead_s, "compute_from": priced.how,
            **{k: v for k, v in mem.items() if k != "known_bytes"},
            "fits": None if capacity is None else held <= capacity * GiB,
            # seconds per sample, so that rows on different numbers of devices (DataParallel's one process on the
            # run's own machine) are ranked by throughput
            "_steps": [s.step_s / (n * batch) for s in steps], "_held": held, "_peak": priced.peak_bytes,
            "_measured": priced.measured,
            "_assumed": [a / (n * batch) for a in priced.assumed] if priced.assumed else None})
    if not plan.rows and cluster.dtype not in (None, "fp32") and set(shape.param_dtypes) - {"fp32"}:
        raise BadPlan(f"{shape.name}'s parameters are {'+'.join(shape.param_dtypes)} as built, and a mixed precision "
                      f"({cluster.dtype}) is defined over an fp32 model: compare run refuses every {cluster.dtype} "
                      f"row for it; plan it as built with --dtype fp32, or build the model in fp32")
    plan.recommendation = recommend(plan.rows, getattr(source, "pair", None),
                                    capacity * GiB if capacity is not None else None)
    return plan


TIE = 0.02
"""Step times within this share of each other are not told apart: a model of a cluster that is not here resolves
no finer."""
MEMORY_MATERIAL = 0.01
"""A difference in memory per device chooses between rows the model does not rank by speed only where it is at least
this share of the device's memory (of the larger of the two rows' where the device's is not known): less than that
buys nothing a row that fits needs, so the faster row at the middle figure is kept."""


def recommend(rows: list[dict[str, Any]], pair=None, capacity_bytes: float | None = None) -> dict[str, Any] | None:
    """Among the rows that fit and are not left out (`_steps`: each figure's seconds per sample): the fastest at the
    middle figure, and every row after it, in order of the middle figure, up to the first one resolved slower than it
    (`ratio`'s "resolved"), so that no row of the group is slower at the middle figure than a row outside it. Of those,
    the one sharding least (`partitions`) is recommended, and among those sharding as little the fastest at the middle
    figure, unless another holds less memory by MEMORY_MATERIAL: memory is a constraint, not a goal, and every row
    here fits with the allocator's headroom, so more sharding buys memory the row does not need at costs the model
    does not price (a sharded framework's per-unit gathers and casts, its partition bookkeeping; on one GPU, where
    nothing is communicated, nothing else tells the rows apart). A row's memory is the plan's count, or what the run
    measured it holding where that is more (`_peak`): no row is said to hold less than it was measured holding. Its
    margin is over the first row outside the group; where it is not the fastest at the middle figure, its time per
    sample over that one's; where another of the group holds materially less memory, that one's time per sample over
    the pick's (`least_memory`).

    A ratio's range and whether it is resolved: where both rows' ranges come from one assumption (an assumed
    utilisation, or one measured row carried over), the ratio of times per sample at each figure, resolved where it
    is above 1 + TIE at the top of its range and not below 1 - TIE at the bottom. Where they come from two measured
    rows, whose launches vary independently, `pair(slow, fast)` gives the run's own verdict on the two (its pairing
    and Holm's correction over every pair of its rows: harness/core/analysis.py): the ratio at each figure of what the
    rows share (the MFU assumed on another device) with each row's launches at their middle, widened by the verdict
    pair's 95% interval relative to its estimate, and resolved only where the verdict resolves it (an audit found a
    plan calling a row 4.43x [1.16-16.98] faster where the run's verdict gave p = 0.25 after Holm's correction)."""
    fitting = sorted((r for r in rows if r["fits"] is not False and not r.get("left_out")),
                     key=lambda r: r["_steps"][1])
    if not fitting:
        return None

    def ratio(slow, fast):
        per = [b / a for a, b in zip(fast["_steps"], slow["_steps"])]
        out: dict[str, Any] = {"low": min(per), "mid": per[1], "high": max(per)}
        got = None
        if pair and slow.get("_measured") is not None and fast.get("_measured") is not None:
            got = pair(slow["_measured"], fast["_measured"])
        if got is None:
            out["resolved"] = out["high"] > 1 + TIE and out["low"] >= 1 - TIE
            return out
        if got["factors"] is not None:
            shared = [b / a for a, b in zip(fast["_assumed"], slow["_assumed"])]
            out = {"low": min(shared) * got["factors"][0], "mid": shared[1],
                   "high": max(shared) * got["factors"][1], "interval": True}
            if got.get("estimate") is not None:  # the run's own ratio: the label says whether mid is it
                out["measured"] = got["estimate"]
        out.update(resolved=got["resolved"] and out["high"] > 1 + TIE, verdict=got["outcome"], p_holm=got["p_holm"],
                   swamped=got.get("swamped"))
        return out

    def held(r):
        return max(r.get("_held", r["model_state_bytes"]), r.get("_peak") or 0.0)

    def less(a, b) -> bool:
        """Whether a holds materially less than b."""
        return held(b) - held(a) >= MEMORY_MATERIAL * (capacity_bytes or max(held(a), held(b)))

    best = fitting[0]
    behind = next((i for i, r in enumerate(fitting[1:], 1) if ratio(r, best)["resolved"]), len(fitting))
    tied = fitting[:behind]
    fewest = min(r.get("partitions", 0) for r in tied)
    candidates = [r for r in tied if r.get("partitions", 0) == fewest]
    lean = min(candidates, key=held)
    pick = lean if less(lean, candidates[0]) else candidates[0]
    out: dict[str, Any] = {"label": pick["label"], "tied": [r["label"] for r in tied if r is not pick],
                           "partitions": pick.get("partitions", 0), "next": None, "fastest": None,
                           "least_memory": None, "memory_bytes": {r["label"]: held(r) for r in tied},
                           "measured_memory": [r["label"] for r in tied if (r.get("_peak") or 0.0) >
                                               r.get("_held", r["model_state_bytes"])]}
    if pick is not best:  # what the pick costs: its step time over the fastest's
        out.update(fastest=best["label"], slower=ratio(pick, best))
    least = min(tied, key=held)
    if less(least, pick):  # what more sharding would save, and at what step time
        out.update(least_memory=least["label"], least_memory_ratio=ratio(least, pick))
    rest = fitting[behind:]
    if rest:
        out.update(next=rest[0]["label"], ratio=ratio(rest[0], pick))
    return out
