"""How a framework moves gradients in one training step: the typed schedule an adapter declares for its knobs
(`Adapter.comm_schedule()`), recorded in every row (`comm_schedule`, as `to_record` writes it) and priced by the
scaling model (harness/model/costmodel.py, one pricer per kind). The framework's knowledge (its defaults, which
collective it issues) stays in its adapter; this module only names the shapes a schedule can take.

Runs in: both (an adapter declares one in the parent and in every rank; the model reads them back from records).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """What every kind has."""

    KIND: ClassVar[str] = ""

    comm_backend: str
    """The `compare comm` backend whose measured collectives price it (torch, horovod, deepspeed)."""
    wire_scale: float = 1.0
    """Bytes on the wire per gradient byte: 0.5 with fp16 compression of fp32 gradients."""

    @property
    def partitions(self) -> int:
        """The model states each rank holds 1/N of at its peak, as the ZeRO paper's stages count them: 0 none,
        1 the optimizer state, 2 the gradients too, 3 the parameters too."""
        return 0

    def shard_ranks(self, n: int) -> float:
        """Over how many of n ranks those states are split."""
        return n

    def to_record(self) -> dict[str, Any]:
        """The record's `comm_schedule`: the kind, then every field."""
        return {"kind": self.KIND, **dataclasses.asdict(self)}


@dataclass(frozen=True, kw_only=True)
class Buckets(Schedule):
    """All-reduce each bucket as its gradients are ready (DDP, apex DDP)."""

    KIND = "buckets"

    bucket_bytes: int
    first_bucket_bytes: int
    """The first bucket's cap (DDP: 1 MiB unless bucket_cap_mb is given): the last layers' gradients go out early."""
    overlap: bool = True
    """Issued during backward; False: all after it (apex's delay_allreduce)."""


@dataclass(frozen=True, kw_only=True)
class Fusion(Schedule):
    """A background cycle fuses what is ready into one buffer per cycle (Horovod)."""

    KIND = "fusion"

    fusion_bytes: int | None
    """The fusion buffer's size; 0 or None: unbounded."""
    cycle_s: float
    """The background thread's cycle."""


@dataclass(frozen=True, kw_only=True)
class Zero(Schedule):
    """DeepSpeed's ZeRO stages 0-3: the calls are harness/model/costmodel.py zero_calls'."""

    KIND = "zero"

    stage: int
    overlap: bool = True
    """Collectives issued during the compute (ZeRO-3's prefetch and reduce-scatter)."""
    bucket_elems: int
    """reduce_bucket_size, in elements."""
    grad_reduce: str
    """The collective that reduces gradients: all_reduce or reduce_scatter."""
    norm_allreduce: bool
    """An all-reduce of the gradient norm after the reduction."""
    reuse_elems: int
    """stage3_max_reuse_distance: a parameter used again within it is not gathered again."""

    @property
    def partitions(self) -> int:
        return self.stage


@dataclass(frozen=True, kw_only=True)
class Fsdp(Schedule):
    """FSDP2: per-unit all-gathers before forward (and backward) and reduce-scatters after backward."""

    KIND = "fsdp"

    gather_scale: float = 1.0
    """Bytes gathered per fp32 parameter byte (0.5 with bf16/fp16 parameters)."""
    reshard_after_forward: bool = True
    """Free the gathered parameters after forward, so backward gathers them again."""
    replicas: int = 1
    """HSDP: replicas of each shard group (an all-reduce across them after the reduce-scatter)."""
    overlap: bool = True

    @property
    def partitions(self) -> int:
        # without resharding after forward, every unit's parameters are whole from forward to backward: at the
        # peak only the gradients and optimizer state are sharded
        return 3 if self.reshard_after_forward else 2

    def shard_ranks(self, n: int) -> float:
        return n / self.replicas


@dataclass(frozen=True, kw_only=True)
class Replicate(Schedule):
    """One process broadcasting the module to and reducing gradients from several devices (DataParallel)."""

    KIND = "replicate"


KINDS: dict[str, type[Schedule]] = {cls.KIND: cls for cls in (Buckets, Fusion, Zero, Fsdp, Replicate)}


def from_record(recorded: dict[str, Any] | None) -> Schedule | None:
    """The schedule a record keeps, typed (None where the row declared no communication). A key the record lacks
    takes the field's default; ValueError for an unknown kind or a missing field that has none."""
    if not recorded:
        return None
    cls = KINDS.get(recorded.get("kind"))
    if cls is None:
        raise ValueError(f"unknown schedule kind {recorded.get('kind')!r}; kinds: {', '.join(KINDS)}")
    names = {f.name for f in dataclasses.fields(cls)}
    try:
        return cls(**{k: v for k, v in recorded.items() if k in names})
    except TypeError as exc:
        raise ValueError(f"a {cls.KIND} schedule {exc}") from None
