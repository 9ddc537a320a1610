"""What a `compare run` measured, read for `compare plan --from RUN_DIR`: each row's step split into forward,
backward, optimizer, the loop's own time and communication, per launch, with the interval over its launches.

Runs in: the parent. Reads a results directory's records (nothing else); the planner (planner.py) prices a step
from these figures instead of from an assumed share of the device's peak.

How a row's step is split, in order of preference:
- with `--breakdown`: the profiled steps' forward, backward, optimizer, other (the loop's own time) and
  communication (exposed plus waiting for the slowest rank), each scaled by the timed mean step over the profiled
  step of its launch, so the parts add up to the step the launch timed (profiling slows a host-bound step: on the
  H200 a bf16 row's profiled step was 21-97% longer than its timed one);
- without it: the whole timed step is compute (forward a third, backward two thirds, as the planner splits FLOPs),
  and at world size above 1 its communication is inside it, which the plan says.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.ground.stats import geomean_interval
from harness.shared.bad_input import BadInput
from harness.shared.text import rate


class BadRun(BadInput, ValueError):
    """A --from directory the planner cannot price from: bad input, one line naming the problem and the fix, exit 2."""


@dataclass
class Row:
    """One row of a run (every launch of one label that ended ok)."""

    label: str
    adapter: str
    knobs: dict[str, Any]
    """The knobs as the adapter resolved them (controls.knobs)."""
    precision: str
    processes: int
    per_rank_batch: int
    samples_per_s: list[float]
    """Per launch."""
    repeats: list[int]
    """Each launch's round (`repeat`), in the order of samples_per_s: two rows' launches of one round are paired."""
    parts: dict[str, float]
    """Seconds per step at the run's per-rank batch, adding up to the geometric-mean step over the launches:
    forward, backward, optimizer, other (the loop's own time), comm (exposed communication and waiting)."""
    split: str
    """How `parts` were obtained."""
    comm_inside: bool
    """The step's communication is inside forward and backward (world size above 1 without --breakdown)."""
    peak_tflops: float | None
    """The device's dense peak at the row's arithmetic (as its MFU was judged), None on a CPU."""
    peak_memory_bytes: float | None
    reserved_bytes: float | None
    compiled: bool
    cuda_math: dict[str, Any] | None = None
    conv_share: float | None = None
    devices_used: int | None = None
    """The devices its launches computed on (topology.devices_used; None: not recorded)."""
    world_size: int | None = None
    """The world size the run asked for (its records' world_size)."""

    @property
    def not_parallel(self) -> str | None:
        """Why the row was not data-parallel across its run's world size (fewer devices used than the world size:
        the rule by which the run's verdict leaves a row out of its ranking), else None."""
        if self.devices_used is None or self.world_size is None or self.devices_used >= self.world_size:
            return None
        return (f"ran on {self.devices_used} device(s) of {self.world_size}: not data-parallel across the world "
                f"size, left out of the run's ranking too")

    @property
    def samples(self) -> dict[str, Any]:
        """geomean, lo, hi of samples/s over the launches, and how the range was made: a 95% Student t interval from
        three launches, the launches' own spread below that (not an interval), a point for one launch."""
        g = geomean_interval(self.samples_per_s)
        n = len(self.samples_per_s)
        if g["lo"] is not None:
            return {"mid": g["estimate"], "lo": g["lo"], "hi": g["hi"], "n": n, "kind": "95% interval"}
        kind = "one launch: a point, no interval" if n == 1 else f"{n} launches: their spread, not an interval"
        return {"mid": g["estimate"], "lo": min(self.samples_per_s), "hi": max(self.samples_per_s), "n": n,
                "kind": kind}

    @property
    def step_s(self) -> float:
        return self.processes * self.per_rank_batch / self.samples["mid"]

    def per_sample(self) -> tuple[float, float]:
        """(forward, backward) seconds per sample at the run's per-rank batch."""
        return self.parts["forward"] / self.per_rank_batch, self.parts["backward"] / self.per_rank_batch


@dataclass
class Run:
    path: Path
    workload: str
    options: dict[str, Any]
    device: str
    """"cpu" or "cuda"."""
    gpu: str | None
    """The GPU's name (records' env.gpus), None on a CPU."""
    machine: str
    """The CPU model and its usable cores, or the GPU's name: how the plan names the run's machine."""
    world_size: int
    host_memory_bytes: float | None
    rows: dict[str, Row] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    """label -> why no launch of it is usable."""
    records: list[dict[str, Any]] = field(default_factory=list, repr=False)
    """Every record of the run, as read (what its verdict is computed from)."""

    def describe(self) -> str:
        return f"{self.path} ({self.workload} on {self.machine}, world size {self.world_size})"

    def per_rank_batch(self) -> int:
        """The batch each process of its data-parallel rows computed: that of the rows with the most processes (a
        DataParallel row is one process that holds the whole global batch)."""
        return max(self.rows.values(), key=lambda r: r.processes).per_rank_batch


def _parts(recs: list[dict[str, Any]], step_s: float) -> tuple[dict[str, float], str, bool]:
    """A row's step split into parts that add up to `step_s` (see the module's docstring)."""
    with_breakdown = [r for r in recs if (r.get("breakdown") or {}).get("step_s")]
    if with_breakdown:
        keys = ("forward", "backward", "optimizer", "other")
        shares = {k: 0.0 for k in (*keys, "comm")}
        for r in with_breakdown:
            b = r["breakdown"]
            for k in keys:
                shares[k] += b.get(k, 0.0) / b["step_s"]
            shares["comm"] += (b.get("comm_exposed", 0.0) + b.get("waiting", 0.0)) / b["step_s"]
        total = sum(shares.values()) or 1.0
        within = [abs(r["breakdown"].get("profiled_vs_timed") or 0.0) for r in with_breakdown]
        how = (f"--breakdown of {len(with_breakdown)} launch{'es' if len(with_breakdown) > 1 else ''} (the profiled "
               f"steps' parts scaled to the timed step; profiled within {max(within):.0%} of it)")
        return {k: step_s * v / total for k, v in shares.items()}, how, False
    n = recs[0]["topology"]["processes"]
    parts = {"forward": step_s / 3, "backward": 2 * step_s / 3, "optimizer": 0.0, "other": 0.0, "comm": 0.0}
    if n == 1:
        return parts, "no --breakdown: the timed step taken as compute, forward a third of it", False
    return (parts, f"no --breakdown: the timed step at {n} processes taken whole, its communication inside "
                   f"forward and backward", True)


def read(path: Path) -> Run:
    """The run in `path`; BadInput where it is not a `compare run`'s results (ground/record.py: read_results), else
    BadRun where it cannot be priced from."""
    from harness.ground.record import read_results
    from harness.model import hardware

    records = read_results(path, ("run",), "--from")
    first = records[0]
    ok = [r for r in records if r.get("status") == "ok" and r.get("step_time_s") and r.get("samples_per_s")]
    env = first.get("env") or {}
    gpus = env.get("gpus") or []
    device = "cuda" if any((r.get("topology") or {}).get("device") == "cuda" for r in records) else "cpu"
    cores = env.get("cpu_cores_usable")
    machine = gpus[0] if device == "cuda" and gpus else (f"{env.get('cpu_model') or 'CPU'}, "
                                                         f"{cores} core{'s' if cores != 1 else ''}")
    run = Run(path, first.get("workload", "?"), dict((first.get("controls") or {}).get("workload_options") or {}),
              device, gpus[0] if device == "cuda" and gpus else None, machine, int(first.get("world_size") or 1),
              env.get("memory_total_bytes"), records=records)
    if not ok:
        states = sorted({str(r.get("status")) for r in records})
        raise BadRun(f"--from {path}: no row of it ran to the end (status {', '.join(states)}); give a run with a "
                     f"row whose status is ok")
    by_label: dict[str, list[dict[str, Any]]] = {}
    for r in ok:
        by_label.setdefault(r["label"], []).append(r)
    for label, recs in by_label.items():
        sps = [r["samples_per_s"] for r in recs]
        g = geomean_interval(sps)["estimate"]
        top = recs[0]["topology"]
        controls = recs[0]["controls"]
        step = top["processes"] * controls["per_process_batch"] / g
        parts, how, inside = _parts(recs, step)
        mfu = hardware.mfu_of(recs[0]) if device == "cuda" else None
        peak = (mfu or {}).get("peak_tflops")
        if peak is None and run.gpu and profile_of(run.gpu):  # a record from before FLOPs were counted: the
            # GPU's own peak at the row's arithmetic, which carrying its compute to another GPU needs
            peak, _ = hardware.peak_of(hardware.load_profile(profile_of(run.gpu)).peak_tflops,
                                       controls.get("precision", "fp32"), controls.get("cuda_math"),
                                       recs[0].get("conv_flops_share"))
        peaks = [r.get("peak_memory_bytes") for r in recs if r.get("peak_memory_bytes")]
        reserved = [max(r["peak_memory_cuda_reserved_bytes_per_rank"]) for r in recs
                    if r.get("peak_memory_cuda_reserved_bytes_per_rank")]
        knobs = dict(controls.get("knobs") or {})
        run.rows[label] = Row(label, recs[0]["adapter"], knobs, controls.get("precision", "fp32"),
                              int(top["processes"]), int(controls["per_process_batch"]), sps,
                              [int(r.get("repeat") or 0) for r in recs], parts, how, inside,
                              peak, max(peaks) if peaks else None,
                              max(reserved) if reserved else None, bool(knobs.get("compile")),
                              controls.get("cuda_math"), recs[0].get("conv_flops_share"), top.get("devices_used"),
                              int(recs[0].get("world_size") or run.world_size))
    for r in records:
        if r["label"] not in run.rows:
            run.skipped.setdefault(r["label"], f"{r.get('status')}: {' '.join(str(r.get('reason') or '').split())}")
    return run


def what_it_measured(run: Run, batch: int | None, batch_flag: str, checkpointing, optimizer: str | None,
                     ran_optimizer: str, attention: str = "flash") -> None:
    """BadRun where a plan option would change what the run measured in a way no row's measurement can be carried
    through honestly: another optimizer than the one it trained with (its measured optimizer step is that one's,
    and no row measured another), or another batch or activation checkpointing where its steps hold their
    communication inside (no --breakdown at world size above 1: rescaling the compute would rescale the
    communication with it), or eager attention (the run computed the model's attention as its code does, through
    scaled_dot_product_attention's fused kernel where it calls it: eager's activations beside steps of that kernel
    would price neither). A batch or checkpointing that can be applied is applied to every row alike, measured or
    priced (FromRun.price)."""
    if attention != "flash":
        raise BadRun(f"--attention {attention}: --from {run.path} computed the model's attention as its code does "
                     f"(scaled_dot_product_attention's fused kernel where it calls it), and every step it measured is "
                     f"that; leave out --attention, or plan without --from (an assumed utilisation)")
    if optimizer is not None and optimizer != ran_optimizer:
        raise BadRun(f"--optimizer {optimizer}: --from {run.path} trained with {ran_optimizer} (workload "
                     f"{run.workload}'s optimizer), and every step it measured holds {ran_optimizer}'s optimizer step; "
                     f"leave out --optimizer, plan without --from (an assumed utilisation, which prices {optimizer}), "
                     f"or plan from a run of a workload that trains with {optimizer}")
    inside = [r for r in run.rows.values() if r.comm_inside]
    if not inside:
        return
    per = sorted({r.per_rank_batch for r in inside})
    what = None
    if batch is not None and per != [batch]:
        what = (f"{batch_flag} ({batch} per process where it ran {', '.join(map(str, per))}) would scale each step by "
                f"the batch")
    elif checkpointing.mode != "none":
        what = (f"--checkpointing {checkpointing} would price the recompute at each row's FLOP rate over its whole "
                f"step")
    if what:
        n = inside[0].processes
        raise BadRun(f"--from {run.path} measured its steps at {n} processes without --breakdown, so each step's "
                     f"communication is inside it, not apart: {what}, its communication with it; leave that option "
                     f"out, or plan from a run made with --breakdown (each step's communication apart)")


def same_row(row: Row, adapter: str, knobs: dict[str, Any]) -> bool:
    """Whether a planned configuration (an adapter and its knobs) is what `row` ran: the same adapter with the same
    knobs once both are resolved by the adapter (its defaults filled in), so `fsdp:param_dtype=bf16` is the planned
    `fsdp:param_dtype=bf16:reshard_after_forward=true`."""
    import adapters

    if row.adapter != adapter:
        return False
    cls = adapters.get(adapter)
    try:
        mine = dataclasses.asdict(cls(knobs, "cuda").knobs)
        theirs = dataclasses.asdict(cls({k: v for k, v in row.knobs.items() if v is not None}, "cuda").knobs)
    except Exception:  # noqa: BLE001 - a knob the adapter no longer has: not the same row
        return False
    return mine == theirs


def compile_speedup(run: Run) -> dict[str, Any] | None:
    """The speed-up torch.compile gave in the run: each compiled row beside the row with the same adapter and knobs
    but compile, as the ratio of geometric-mean samples/s with its interval (Welch on the log scale, from three
    launches a side; the launches' spread below that). None: no pair."""
    from harness.ground.stats import ratio_interval

    pairs = []
    for row in run.rows.values():
        if not row.compiled:
            continue
        plain = next((r for r in run.rows.values() if not r.compiled and r.adapter == row.adapter
                      and {k: v for k, v in r.knobs.items() if k != "compile"} ==
                      {k: v for k, v in row.knobs.items() if k != "compile"}), None)
        if plain is None:
            continue
        ratio = ratio_interval(row.samples_per_s, plain.samples_per_s)
        if ratio["lo"] is None:
            spread = [a / b for a in row.samples_per_s for b in plain.samples_per_s]
            ratio.update(lo=min(spread), hi=max(spread), kind="the launches' spread, not an interval")
        else:
            ratio["kind"] = "95% interval"
        pairs.append({"compiled": row.label, "plain": plain.label, **ratio})
    if not pairs:
        return None
    best = max(pairs, key=lambda p: min(p["n_a"], p["n_b"]))  # the pair with the most launches a side
    return {**best, "pairs": pairs}




MFU_TRANSFER = {"faster": (0.65, 1.0), "slower": (1.0, 1 / 0.65), "equal": (0.9, 1.1)}
"""The target's MFU over the run's, where the run's device is not the target: an assumption, stated in every plan
that uses it. Toward a device of a higher peak: from the ratio llm-foundry published for the same configuration on
A100 and H100 (its scripts/train/benchmarking/README.md, MPT at 2,048 tokens without activation checkpointing:
7B 64.23% -> 46.44% MFU, 13B 59.57% -> 39.79%, 3B 62.11% -> 43.73%, i.e. 0.67-0.72; rounded to 0.65) up to the MFU
held (1.0); toward a lower peak, the inverse; between devices of equal peak (an H100 and an H200), +-10%, for
which no published pair was found. The middle figure is the range's geometric middle."""


def profile_of(gpu: str | None) -> str | None:
    """The hardware profile a GPU of this name computes as (harness/model/hardware.py's PEAKS), or None."""
    from harness.model.hardware import PEAKS

    if not gpu:
        return None
    return next((p for key, p in PEAKS if key in gpu and "PCIe" not in gpu), None)


@dataclass
class FromRun:
    """`compare plan --from RUN_DIR`: each planned row's compute from what the run measured (the row itself where
    the run ran it, else the run's fastest row at the plan's dtype), with the run's interval over its launches as
    the range; carried to another device by the ratio of peaks with MFU_TRANSFER's range; on the run's own machine
    and world size a measured row is its own step."""

    run: Run
    dtype: str | None
    compile: bool = False
    speedup: dict[str, Any] | None = None
    kind: str = "measured"
    notes: dict[str, dict[str, str]] = field(default_factory=dict)
    """How compute was carried to another device -> {row whose compute was carried: its range before -> after}."""
    verdict: dict[tuple[str, str], dict[str, Any]] | None = None
    """The run's own verdict, pair by pair: (a, b) -> a against b as harness/core/analysis.py compares them (its
    `oriented` pair), for both orders of every pair of its ranked rows; None: not given (no pair resolved)."""
    swamped: dict[tuple[str, str], tuple[tuple[float, float], int]] | None = None
    """(a, b) -> (the 95% prediction interval of a new session's a / b, how many sessions it is from), for each pair
    the run resolves where the sessions joined before on this machine expect a new session's estimate either way
    (harness/reports/verdict.py: swamped); None: not given."""

    # ---- which configurations ----
    def configurations(self, cluster):
        import adapters

        if cluster.profile is None:  # the run's own CPU machine: what it measured, nothing else can be priced
            out = []
            for row in self.run.rows.values():
                if cluster.dtype is not None and row.precision != cluster.dtype:
                    out.append((row.label, f"ran in {row.precision}, not {cluster.dtype}"))
                elif self.compile and not row.compiled:
                    out.append((row.label, "not compiled (--compile plans the compiled rows)"))
                else:
                    out.append((row.adapter, {k: v for k, v in row.knobs.items() if v is not None}, row.label))
            if not any(len(c) == 3 for c in out):  # nothing to price: an empty plan had exited 0
                ran = sorted({row.precision for row in self.run.rows.values()})
                raise BadRun(f"--from {self.run.path}: no row of the run can be planned here, on its own machine, "
                             + (f"at --dtype {cluster.dtype} (its rows ran in {', '.join(ran)}); give one of those"
                                if cluster.dtype is not None and cluster.dtype not in ran else
                                "with --compile (none of its rows was compiled); leave --compile out"))
            return out
        if not self.compile:
            return None
        out = []
        for name in adapters.names():
            cls = adapters.get(name)
            knob_sets = cls.plan_knobs(cluster.dtype)
            if isinstance(knob_sets, str):
                out.append((name, knob_sets))
                continue
            if "compile" not in {f.name for f in dataclasses.fields(cls.Knobs)}:
                out.append((name, "has no compile knob"))
                continue
            out += [(name, {**knobs, "compile": True}) for knobs in knob_sets]
        return out

    def _match(self, name: str, knobs: dict[str, Any]) -> Row | None:
        return next((r for r in self.run.rows.values() if same_row(r, name, knobs)), None)

    def reference(self, dtype: str) -> Row | None:
        """The run's row whose compute prices the configurations it did not run: the one with the most samples/s
        per process at `dtype` (the least framework cost on top of the compute; its whole step, not its split, which
        a profiler can misattribute), compiled where --compile asks and the run has such a row; not a row that was
        not data-parallel across the run's world size (Row.not_parallel)."""
        rows = [r for r in self.run.rows.values() if r.precision == dtype and not r.not_parallel]
        wanted = [r for r in rows if r.compiled == self.compile] or [r for r in rows if not r.compiled] or rows
        return max(wanted, key=lambda r: r.samples["mid"] / r.processes, default=None)

    # ---- pricing ----
    def pair(self, slow: Row, fast: Row) -> dict[str, Any] | None:
        """The run's own verdict on `fast` against `slow` (`verdict`: its pairs as harness/core/analysis.py made
        them, paired by round where its rounds are complete, Holm-adjusted over every pair of its ranked rows):
        {"factors": its 95% interval relative to its estimate (None: no interval), "resolved": whether the verdict
        resolves fast ahead, "p_holm", "outcome", "swamped": where the sessions joined before on this machine put a
        new session's estimate of it either way, their 95% prediction interval of fast over slow and how many they
        were (`swamped`, set by the caller), else None}; None for one row (its launches move both alike). A pair the
        verdict did not compare (a row it left out) is not resolved."""
        if slow is fast:
            return None
        p = (self.verdict or {}).get((fast.label, slow.label))
        if p is None:
            return {"factors": None, "resolved": False, "p_holm": None, "outcome": "not compared"}
        factors = (p["lo"] / p["estimate"], p["hi"] / p["estimate"]) if p["lo"] is not None else None
        return {"factors": factors, "resolved": p["outcome"] == "faster", "p_holm": p.get("p_holm"),
                "outcome": p["outcome"], "estimate": p["estimate"],
                "swamped": (self.swamped or {}).get((fast.label, slow.label))}

    def _interval(self, row: Row) -> tuple[float, float, float]:
        """Step multipliers (fastest, middle, slowest) from the row's samples/s over its launches."""
        s = row.samples
        return s["mid"] / s["hi"], 1.0, s["mid"] / s["lo"]

    def _transfer(self, row: Row, fabric, dtype: str) -> tuple[float, tuple[float, float, float]]:
        """(the ratio of the run's peak to the target's, MFU multipliers on time (fastest, middle, slowest)) for
        carrying `row`'s compute to the target; each carried row noted for the footer."""
        from harness.model.hardware import peak_of

        if profile_of(self.run.gpu) == getattr(fabric, "name", None):
            return 1.0, (1.0, 1.0, 1.0)
        target, what = peak_of(fabric.peak_tflops, dtype, row.cuda_math, row.conv_share)
        if row.peak_tflops is None or target is None:
            raise BadRun(f"--from {self.run.path}: its {row.label} row's compute cannot be carried from "
                         f"{self.run.machine} to {fabric.device}: "
                         + (f"{what} there" if target is None else f"no peak is known for {self.run.machine}")
                         + "; plan on the run's own GPU (leave out --gpu)")
        k = row.peak_tflops / target
        kind = "equal" if abs(k - 1) < 1e-3 else "faster" if k < 1 else "slower"
        lo, hi = MFU_TRANSFER[kind]
        mid = math.sqrt(lo * hi)
        head = (f"{self.run.machine} ({row.peak_tflops:g} TFLOP/s dense {row.precision}) to {fabric.device} "
                f"({target:g} TFLOP/s): x{k:.3g} by the ratio of peaks, and the MFU there taken as x{lo:.2f}-{hi:.2f} "
                f"the run's, x{mid:.2f} in the middle (MFU_TRANSFER, an assumption: "
                f"{'from published A100 and H100 pairs' if kind != 'equal' else 'no published pair'})")
        widened = tuple(m * t for m, t in zip(self._interval(row), (mid / hi, 1.0, mid / lo)))
        self.notes.setdefault(head, {})[row.label] = f"{_pm(self._interval(row))} -> {_pm(widened)}"
        return k, (1 / hi, 1 / mid, 1 / lo)

    def own(self, cluster, row: Row | None) -> bool:
        """Whether the target is the run's own machine at the row's own world size and precision."""
        if row is None or (self.compile and not row.compiled):
            return False
        if cluster.dtype is not None and row.precision != cluster.dtype:
            return False
        if cluster.profile is None:  # each row at the processes it ran (DataParallel's one, say)
            return True
        return cluster.profile == profile_of(self.run.gpu) and cluster.gpus == row.processes

    def price(self, shape, cluster, fabric, batch: int, name: str, knobs: dict[str, Any], adapter):
        from harness.model import costmodel as cm
        from harness.model import hardware, planner
        from harness.model.compute import Compute, layered_grads

        row = self._match(name, knobs)
        if self.own(cluster, row):
            steps = []
            b = batch / row.per_rank_batch
            p = row.parts
            # with activation checkpointing, the recomputed forward at the row's own FLOP rate, as for a row priced
            # from another's compute (below): the run checkpointed nothing
            recompute = _recompute_s(shape, row) * batch
            compute = (p["forward"] + p["backward"]) * b + recompute + p["optimizer"]
            for m in self._interval(row):
                steps.append(cm.Step((compute + p["other"] + p["comm"]) * m, compute * m, p["comm"] * m,
                                     p["comm"] * m, p["other"] * m))
            inside = " (its communication inside: no --breakdown)" if row.comm_inside else ""
            again = (f", and the recompute of {shape.checkpointing} checkpointing at its own FLOP rate" if recompute
                     else "")
            same = batch == row.per_rank_batch and not recompute  # the very step it measured, memory and all
            peak = (row.reserved_bytes or row.peak_memory_bytes) if same else None
            return planner.Priced(steps, f"its own step as measured{inside}{again}", row.processes, row.precision,
                                  measured=row, assumed=[steps[1].step_s] * 3, left_out=row.not_parallel,
                                  peak_bytes=peak)
        if fabric is None:
            return "not measured by the run (on its CPU only what it measured is priced)"
        if row is None and self.compile:  # the run measured this configuration plain: its own compute, sped up
            row = self._match(name, {k: v for k, v in knobs.items() if k != "compile"})
        base = row if row is not None and row.precision == cluster.dtype else self.reference(cluster.dtype)
        if base is None:
            return f"the run measured no {cluster.dtype} row"
        k, transfer = self._transfer(base, fabric, cluster.dtype)
        mem = 1.0
        run_profile = profile_of(self.run.gpu)
        if k != 1.0:
            here = hardware.load_profile(run_profile).copy_Bps if run_profile else None
            mem = here / fabric.copy_Bps if here and fabric.copy_Bps else k
        compiled = (1.0, 1.0, 1.0)
        if self.compile and not base.compiled:
            sp = self.speedup
            compiled = (1 / sp["hi"], 1 / sp["estimate"], 1 / sp["lo"])
        fwd_ps, bwd_ps = base.per_sample()
        recompute_ps = _recompute_s(shape, base)
        schedule = adapter.comm_schedule()
        # the run's optimizer step, over the whole model where its schedule stepped a 1/N shard
        sharded = getattr(self._schedule(base), "partitions", 0) >= 1
        opt = base.parts["optimizer"] * (base.processes if sharded else 1)

        def step(m, t, c):
            a = k * t * m * c
            bwd = (bwd_ps + recompute_ps) * batch * a
            comp = Compute(fwd_ps * batch * a, bwd, opt * mem * m,
                           layered_grads(shape.grad_layers(adapter.gradient_bytes() * shape.param_bytes / 4), bwd),
                           base.parts["other"] * m, fabric.copy_Bps)
            return cm.predict_step(schedule, comp, fabric, cluster.gpus)

        steps = [step(m, t, c) for m, t, c in zip(self._interval(base), transfer, compiled)]
        assumed = [step(1.0, t, c).step_s for t, c in zip(transfer, compiled)]
        how = ("its own compute" if base is row else
               f"{base.label}'s compute (the run's fastest row at {cluster.dtype}, with its own framework cost)")
        if base.comm_inside:
            how += f" with the run's communication at {base.processes} processes inside it (no --breakdown)"
        if compiled != (1.0, 1.0, 1.0):
            how += f", x{compiled[1]:.2f} for torch.compile"
        return planner.Priced(steps, how, cluster.gpus, cluster.dtype, measured=base, assumed=assumed,
                              left_out=row.not_parallel if row is not None else None)

    @staticmethod
    def _schedule(row: Row):
        import adapters

        try:
            return adapters.get(row.adapter)({k: v for k, v in row.knobs.items() if v is not None}, "cuda") \
                .comm_schedule()
        except Exception:  # noqa: BLE001 - an adapter or knob gone since the run
            return None

    # ---- words ----
    def header(self, cluster, fabric) -> str:
        rows = self.run.rows.values()
        kinds = sorted({r.samples["kind"] for r in rows})
        return (f"compute from the run in {self.run.path} ({self.run.workload} on {self.run.machine}, world size "
                f"{self.run.world_size}): each row's forward, backward and optimizer per sample as the run measured "
                f"them, not an assumed utilisation; ranges are the run's own over its launches "
                f"({'; '.join(kinds)})")

    def footer(self) -> list[str]:
        out = []
        for row in self.run.rows.values():
            s = row.samples
            out.append(f"measured: {row.label}: {rate(s['mid'])} samples/s [{rate(s['lo'])}-{rate(s['hi'])}] over "
                       f"{s['n']} launch{'es' if s['n'] > 1 else ''} at {row.per_rank_batch} per process x "
                       f"{row.processes}, {row.precision}; step split by {row.split}"
                       + (f"; peak memory {row.peak_memory_bytes / 2**30:.3g} GiB allocated"
                          + (f", {row.reserved_bytes / 2**30:.3g} reserved" if row.reserved_bytes else "")
                          if row.peak_memory_bytes and self.run.device == "cuda" else ""))
        out += [f"compute carried from {head}; each range widens: "
                + ", ".join(f"{label} {change}" for label, change in rows.items()) for head, rows in self.notes.items()]
        if self.compile and self.speedup:
            sp = self.speedup
            out.append(f"torch.compile: {sp['compiled']} ran {sp['estimate']:.3g}x [{sp['lo']:.3g}-{sp['hi']:.3g}] "
                       f"the samples/s of {sp['plain']} ({sp['kind']}): the forward and backward of every row not "
                       f"measured compiled are taken that much faster")
        for label, why in self.run.skipped.items():
            out.append(f"not used: {label} ({why})")
        return out

    def row_lines(self, rows: list[dict[str, Any]], cluster, batch: int | None = None) -> list[str]:
        """Where each planned row's compute came from; where the plan's per-GPU batch is not the one the run measured,
        what carrying the compute in proportion to the batch leaves out; and, on the run's own GPU at the batch it
        measured, each row's memory against the peaks the run measured for the same configuration."""
        how: dict[str, list[str]] = {}
        for r in rows:
            how.setdefault(r["compute_from"], []).append(r["label"])
        out = ["compute of each row: " + "; ".join(f"{', '.join(labels)}: {h}" for h, labels in how.items())]
        measured_at = sorted({r.per_rank_batch for r in self.run.rows.values()})
        if batch is not None and batch not in measured_at:
            out.append(f"batch: planned at {batch} per GPU, measured at {'/'.join(map(str, measured_at))} per "
                       f"process: each row's forward and backward carried in proportion to the batch; a step does "
                       f"not grow in proportion to its batch (a GPU's larger matmuls run closer to its peak, and the "
                       f"host's part is fixed), so the planned samples/s is low at a larger batch and high at a "
                       f"smaller one")
        if cluster.profile is None or cluster.profile != profile_of(self.run.gpu):
            return out
        pairs = []
        for r in rows:
            m = self._match(r["adapter"], r["knobs"])
            if m is None or not m.peak_memory_bytes or r["total_bytes"] is None or m.processes != cluster.gpus:
                continue
            if batch is not None and batch != m.per_rank_batch:  # peaks at another batch: nothing to check against
                continue
            allocated = r["total_bytes"] - r["headroom_bytes"]
            gib = 2**30
            pairs.append(f"{r['label']} {allocated / gib:.3g} GiB allocated against {m.peak_memory_bytes / gib:.3g} "
                         f"measured ({allocated / m.peak_memory_bytes - 1:+.0%})"
                         + (f", {r['total_bytes'] / gib:.3g} with the headroom against {m.reserved_bytes / gib:.3g} "
                            f"reserved ({r['total_bytes'] / m.reserved_bytes - 1:+.0%})" if m.reserved_bytes else ""))
        if pairs:
            out.append("memory against the run's own peaks (the largest over its launches): " + "; ".join(pairs))
        return out

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "run": str(self.run.path), "workload": self.run.workload,
                "options": self.run.options, "machine": self.run.machine, "world_size": self.run.world_size,
                "rows": {r.label: {"samples_per_s": r.samples, "per_rank_batch": r.per_rank_batch,
                                   "processes": r.processes, "precision": r.precision, "parts_s": r.parts,
                                   "split": r.split, "peak_tflops": r.peak_tflops,
                                   "peak_memory_bytes": r.peak_memory_bytes, "reserved_bytes": r.reserved_bytes,
                                   "compiled": r.compiled} for r in self.run.rows.values()},
                "mfu_transfer": MFU_TRANSFER, "carried_over": self.notes, "compile": self.compile,
                "compile_speedup": self.speedup, "skipped": self.run.skipped}


def _recompute_s(shape, row: Row) -> float:
    """Seconds per sample that `row` would spend recomputing forward in backward under the shape's activation
    checkpointing: its recomputed FLOPs at the FLOP rate the row computed its forward and backward at."""
    fwd_ps, bwd_ps = row.per_sample()
    return shape.recompute_flops_per_sample * (fwd_ps + bwd_ps) / shape.flops_per_sample


def _pm(m: tuple[float, float, float]) -> str:
    """"-3%/+4%" for step multipliers (fastest, middle, slowest)."""
    return f"-{1 - m[0] / m[1]:.0%}/+{m[2] / m[1] - 1:.0%}"
