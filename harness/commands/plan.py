"""`compare plan`: which backend for a cluster that is not here, and whether the model fits in its memory."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import typer
from rich.markup import escape

import workloads
from harness.commands.common import console, fail
from harness.core.argv import cli


@dataclass
class PlanRequest:
    """`compare plan`."""

    workload: str | None = field(default=None, metadata=cli("--workload", "-w"))
    """Plan this workload's model (see `compare list`); or describe one with --params."""
    options: list[str] = field(default_factory=list, metadata=cli("--option", "-o"))
    """Workload option KEY=VALUE."""
    params: float | None = field(default=None, metadata=cli("--params"))
    """A transformer's parameter count, e.g. 7e9 (with --layers)."""
    layers: int | None = field(default=None, metadata=cli("--layers"))
    """Its transformer blocks."""
    hidden: int | None = field(default=None, metadata=cli("--hidden"))
    """Its hidden size: lays it out as Llama (per-matrix gradients, separate embedding and head, activations)."""
    heads: int | None = field(default=None, metadata=cli("--heads"))
    """Its attention heads (default: hidden / 128)."""
    kv_heads: int | None = field(default=None, metadata=cli("--kv-heads"))
    """Its key/value heads: fewer than --heads is grouped-query attention (default: as many)."""
    ffn: int | None = field(default=None, metadata=cli("--ffn"))
    """Its SwiGLU MLP width (default: Llama's, 8/3 x hidden rounded up to 256)."""
    seq_len: int = field(default=2048, metadata=cli("--seq-len"))
    """Tokens per sample of a model given by --params."""
    attention: str = field(default="flash", metadata=cli("--attention"))
    """flash (a fused kernel: no s x s scores kept) or eager (the softmax kept for backward)."""
    checkpointing: str = field(default="none", metadata=cli("--checkpointing"))
    """none, or full: every block (shard unit) recomputed in backward, only its input kept."""
    gpu: str = field(default="h100", metadata=cli("--gpu"))
    """The GPU, as a hardware profile (`compare predict --list`): h100, a100, v100, p100 or a profile's full name."""
    nodes: int = field(default=1, metadata=cli("--nodes"))
    """Nodes."""
    gpus_per_node: int | None = field(default=None, metadata=cli("--gpus-per-node"))
    """GPUs per node (default: the profile's)."""
    nic_gbps: float | None = field(default=None, metadata=cli("--nic-gbps"))
    """Line rate of each NIC in Gb/s (default: the profile's network)."""
    nics_per_node: int = field(default=1, metadata=cli("--nics-per-node"))
    """NICs per node, with --nic-gbps."""
    dtype: str = field(default="bf16", metadata=cli("--dtype"))
    """Training precision: bf16, fp16 or fp32."""
    batch: int | None = field(default=None, metadata=cli("--batch"))
    """Samples per GPU per step (default: the workload's global batch, or 8 sequences)."""
    global_batch: int | None = field(default=None, metadata=cli("--global-batch"))
    """Samples per step over all GPUs (instead of --batch)."""
    optimizer: str | None = field(default=None, metadata=cli("--optimizer"))
    """adamw or sgd (default: the workload's; adamw with --params)."""
    memory_gib: float | None = field(default=None, metadata=cli("--gpu-memory-gib"))
    """Memory per GPU in GiB (default: the profile's)."""
    as_json: bool = field(default=False, metadata=cli("--json", negatable=False))
    """Print the plan as JSON."""


def plan(req: PlanRequest) -> None:
    """Which backend for a cluster that is not here: each framework's step time and samples/s on it (over an
    assumed range of utilisation), the model states each holds per GPU and whether they fit, and a recommendation
    with its margin."""
    from harness.core.errors import BadInput
    from harness.core.requests import pairs
    from harness.model import planner
    from harness.shared.options import OptionError
    from harness.shared.registry import UnknownName

    model = ("a workload (-w, one of " + ", ".join(workloads.names()) + ") or a transformer's size (--params with "
             "--layers)")
    if req.workload is None and req.params is None:
        fail(f"give the model to plan: {model}")
    if req.workload is not None and req.params is not None:
        fail(f"give {model}, not both")
    if req.params is not None and req.layers is None:
        fail("--params needs --layers (its transformer blocks), e.g. --params 7e9 --layers 32")
    if req.optimizer is not None and req.optimizer not in planner.OPTIMIZERS:
        fail(f"unknown --optimizer {req.optimizer}; choose from {', '.join(planner.OPTIMIZERS)}")
    try:
        cluster = planner.cluster(req.gpu, req.nodes, req.gpus_per_node, req.dtype, req.nic_gbps, req.nics_per_node,
                                  req.memory_gib)
        per_gpu = planner.check(cluster, req.batch, req.global_batch)
        if req.workload is not None:
            for name, value in (("--hidden", req.hidden), ("--heads", req.heads), ("--kv-heads", req.kv_heads),
                                ("--ffn", req.ffn), ("--layers", req.layers)):
                if value is not None:
                    fail(f"{name} describes a model given by --params; workload {req.workload}'s model has its own "
                         f"shape (set it with its -o options, see `compare knobs {req.workload}`)")
            # The model is built, run and counted on the meta device: a published size takes a minute or two here
            # (hf llama-70b at 1,000 layers, its bound, about two); on a terminal the wait says what it is.
            with console.status(f"building and counting workload {escape(req.workload)}'s model on the meta device"):
                shape = planner.of_workload(req.workload, dict(pairs(req.options, "option")), req.optimizer,
                                            attention=req.attention, checkpointing=req.checkpointing)
        else:
            shape = planner.transformer(req.params, req.layers, req.hidden, req.seq_len, req.optimizer or "adamw",
                                        heads=req.heads, kv_heads=req.kv_heads, ffn=req.ffn,
                                        attention=req.attention, checkpointing=req.checkpointing)
    except (planner.BadPlan, BadInput, UnknownName) as exc:
        fail(str(exc).strip("'\""))
    except OptionError as exc:
        fail(f"workload {req.workload}: {exc}")
    result = planner.make(shape, cluster, per_gpu or shape.default_batch)
    if req.as_json:
        typer.echo(json.dumps(planner.as_json(result), indent=2))
        return
    for line in planner.lines(result):
        console.print(escape(line), soft_wrap=True)
