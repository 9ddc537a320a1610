"""The performance model's formulas against values computed by hand (harness/model/costmodel.py), and the published
checks it is held to."""

from dataclasses import replace

import pytest

from harness.model import comm_cost, hardware
from harness.model.compute import Compute, ComputeCurve, interpolate
from harness.model import costmodel as cm
from harness.shared.comm_schedule import from_record

MiB = 2**20


def S(fields):
    """A typed schedule (harness/shared/comm_schedule.py) from its record's fields, torch's collectives unless said."""
    return from_record({"comm_backend": "torch", **fields})


class PerMiB(comm_cost.Collectives):
    """A stub fabric: every collective costs `s_per_mib` seconds per MiB of buffer, nothing else."""

    name = "stub"

    def __init__(self, s_per_mib: float):
        self.s = s_per_mib

    def time(self, op, nbytes, n):
        return 0.0 if n <= 1 else nbytes / MiB * self.s

    def control(self, n):
        return 0.0


def fabric(tree=True):
    return comm_cost.Fabric(name="hand", devices_per_node=8, intra_busbw_Bps=100e9, inter_busbw_Bps=50e9, tree=tree,
                     protocols=[comm_cost.Protocol("Simple", 10e-6, 2e-6, 10e-6, 20e-6, 30e-6, 1.0, 0.9)])


def test_fit_recovers_latency_and_bandwidth():
    n, lat, busbw = 4, 50e-6, 2e9
    factor = 2 * (n - 1) / n
    points = [(s, lat + factor * s / busbw) for s in (1024, 65536, 2**20, 2**24)]
    got_lat, got_bw = comm_cost.fit_alpha_beta(points, factor)
    assert got_lat == pytest.approx(lat, rel=1e-9) and got_bw == pytest.approx(busbw, rel=1e-9)


def test_nccl_ring_and_tree_latencies():
    f = fabric()
    p = f.protocols[0]
    # one node of 8: a ring of 2(8-1) = 14 steps of 2 us, plus 10 us per call
    assert f.ring_latency("all_reduce", 8, p) == pytest.approx(38e-6)
    # two nodes: 30 steps, of which 2 x 2 cross the network: 10 + 26 x 2 + 4 x 10
    assert f.ring_latency("all_reduce", 16, p) == pytest.approx(102e-6)
    assert f.tree_latency(16, p) == pytest.approx(10e-6 + 2 * (7 * 20e-6 + 1 * 30e-6))
    # 128 nodes: the ring's 2046 steps (256 across the network) lose to the tree's 2 x (7 + 7) steps
    assert f.ring_latency("all_reduce", 1024, p) == pytest.approx(10e-6 + 1790 * 2e-6 + 256 * 10e-6)
    assert f.latency("all_reduce", 1024) == pytest.approx(10e-6 + 2 * (7 * 20e-6 + 7 * 30e-6))
    assert fabric(tree=False).latency("all_reduce", 1024) == pytest.approx(6150e-6)
    # reduce-scatter: n - 1 ring steps, nodes - 1 of them across the network
    assert f.ring_latency("reduce_scatter", 16, p) == pytest.approx(10e-6 + 14 * 2e-6 + 1 * 10e-6)


def test_all_reduce_time_takes_the_cheaper_algorithm_and_the_bottleneck_bandwidth():
    f = fabric()
    ring = 102e-6 + 2 * 15 / 16 * 1e8 / 50e9   # two nodes: the network's 50 GB/s is the bottleneck
    tree = 350e-6 + 2 * 15 / 16 * 1e8 / (50e9 * 0.9)
    assert f.time("all_reduce", 1e8, 16) == pytest.approx(min(ring, tree))
    assert f.time("all_gather", 1e8, 8) == pytest.approx(10e-6 + 7 * 2e-6 + 7 / 8 * 1e8 / 100e9)
    assert f.time("all_reduce", 1e8, 1) == 0.0


def test_ddp_buckets_fill_in_ready_order_and_overlap_backward():
    c = Compute(fwd_s=1.0, bwd_s=2.0, opt_s=0.5, overhead_s=0.1,
                   grads=[(1 * MiB, 0.5), (2 * MiB, 1.0), (25 * MiB, 1.5), (1 * MiB, 2.0)])
    assert cm.buckets_of(c.grads, 1 * MiB, 25 * MiB) == [(1 * MiB, 0.5), (27 * MiB, 1.5), (1 * MiB, 2.0)]
    ddp = S({"kind": "buckets", "first_bucket_bytes": 1 * MiB, "bucket_bytes": 25 * MiB, "overlap": True})
    # all-reduces of 0.1, 2.7 and 0.1 s issued at 0.5, 1.5 and 2.0 end at 0.6, 4.2 and 4.3: 2.3 s after backward
    step = cm.predict_step(ddp, c, PerMiB(0.1), 2)
    assert step.exposed_s == pytest.approx(2.3) and step.step_s == pytest.approx(1 + 2 + 0.5 + 2.3 + 0.1)
    # where communication shares the computing cores nothing hides: all 2.9 s are added
    assert cm.predict_step(ddp, c, PerMiB(0.1), 2, shares_cores=True).step_s == pytest.approx(1 + 2 + 0.5 + 2.9 + 0.1)
    # delay_allreduce-style: everything after backward
    assert cm.predict_step(replace(ddp, overlap=False), c, PerMiB(0.1), 2).exposed_s == pytest.approx(2.9)


def test_compute_overlapped_with_a_collective_is_slowed_by_the_stated_factor():
    # compute 0-4 s at full speed; a 4 s collective from 4 s, during which compute runs at 1/1.25: 3.2 s of work
    # by 8 s; the last 2.8 s at full speed: 10.8 s, where free overlap ends at 10 s
    assert cm.issued_during([(4.0, 4.0)], 10.0) == pytest.approx(10.0)
    assert cm.issued_during([(4.0, 4.0)], 10.0, 0.25) == pytest.approx(10.8)
    # communication-bound: compute (8 s, then 2 s of work at 0.8: 10.5 s) ends before the collective (12 s)
    assert cm.issued_during([(8.0, 4.0)], 10.0, 0.25) == pytest.approx(12.0)
    # issued past the window (Horovod's next cycle): a wait, not compute, so nothing is slowed
    assert cm.issued_during([(11.0, 1.0)], 10.0, 0.25) == pytest.approx(12.0)
    # one unit of prefetch: the first gather (0.5 s) exposed, the second runs during the first unit's first 0.5 s,
    # which does 0.4 s of work there and 0.6 s after: 0.5 + 1.1 + 1.0
    assert cm.prefetched([(1.0, 0.5, 0.0), (1.0, 0.5, 0.0)]) == pytest.approx(2.5)
    assert cm.prefetched([(1.0, 0.5, 0.0), (1.0, 0.5, 0.0)], 0.25) == pytest.approx(2.6)
    # a unit with nothing to gather does not queue behind the reduce-scatters before it: the last two units compute
    # at 1-3 s while the first unit's 2 s reduce-scatter runs
    assert cm.prefetched([(1.0, 0.0, 2.0), (1.0, 0.0, 0.0), (1.0, 0.0, 0.0)]) == pytest.approx(3.0)


def test_ddp_on_a_gpu_profile_pays_the_overlap_slowdown_and_a_later_issue():
    class Slowed(PerMiB):
        overlap_slowdown = 0.25

    c = Compute(fwd_s=1.0, bwd_s=2.0, opt_s=0.5, overhead_s=0.1,
                   grads=[(1 * MiB, 0.5), (2 * MiB, 1.0), (25 * MiB, 1.5), (1 * MiB, 2.0)])
    ddp = S({"kind": "buckets", "first_bucket_bytes": 1 * MiB, "bucket_bytes": 25 * MiB, "overlap": True})
    # 0.1 s all-reduce at 0.5 s: backward does 0.08 s of work by 0.6 s, reaches 1.5 s of work at 1.52 s and issues
    # the 2.7 s bucket (to 4.22 s); its last 0.5 s of work at 0.8 ends at 2.145 s; the last 0.1 s bucket: 4.32 s
    step = cm.predict_step(ddp, c, Slowed(0.1), 2)
    assert step.exposed_s == pytest.approx(2.32) and step.step_s == pytest.approx(1 + 2 + 0.5 + 2.32 + 0.1)
    # on cores that compute and communicate (a CPU) nothing overlaps, so nothing is slowed: the contention launch
    # measures what compute loses there
    assert cm.predict_step(ddp, c, Slowed(0.1), 2, shares_cores=True).exposed_s == pytest.approx(2.9)
    assert hardware.load_profile("a100-sxm-hdr200").overlap_slowdown == 0.189
    assert hardware.load_profile("gloo-40gbe").overlap_slowdown == 0.0
    assert comm_cost.Fitted("torch", {}).overlap_slowdown == 0.0


def test_horovod_fuses_what_became_ready_while_its_thread_was_busy():
    c = Compute(fwd_s=1e-3, bwd_s=2e-3, opt_s=0.0, grads=[(MiB, 0.5e-3), (MiB, 1.5e-3), (MiB, 1.6e-3)])
    hvd = S({"kind": "fusion", "fusion_bytes": 128 * MiB, "cycle_s": 1e-3})
    # cycle at 1 ms: 1 MiB (1 ms of comm); next cycle at 2 ms: the other two fused (2 ms); ends at 4 ms
    step = cm.predict_step(hvd, c, PerMiB(1e-3), 2)
    assert step.comm_s == pytest.approx(3e-3) and step.exposed_s == pytest.approx(2e-3)
    assert step.step_s == pytest.approx(1e-3 + 2e-3 + 2e-3)
    # a fusion buffer smaller than two gradients splits them into separate all-reduces (same bytes, same time here)
    assert cm.predict_step(replace(hvd, fusion_bytes=MiB), c, PerMiB(1e-3), 2).comm_s == pytest.approx(3e-3)


def zero(stage, **keys):
    """A ZeRO schedule with every key the model reads, as the DeepSpeed adapter declares them (one reduce bucket
    here), `keys` overriding."""
    return S({"kind": "zero", "stage": stage, "overlap": False, "grad_reduce": "reduce_scatter" if stage == 3 else
              "all_reduce", "norm_allreduce": stage >= 1, "reuse_elems": 1e9, "bucket_elems": 0, **keys})


def test_the_model_restates_no_framework_default():
    # DeepSpeed's defaults (reduce_bucket_size 5e8, stage3_max_reuse_distance 1e9, ...) live in its adapter: a
    # schedule without them is refused by the model, not completed with a copy
    with pytest.raises(ValueError, match="missing 4 required keyword-only arguments"):
        S({"kind": "zero", "stage": 2, "overlap": False})


def test_zero_stages_move_and_hide_what_deepspeed_does():
    c = Compute(fwd_s=1.0, bwd_s=2.0, opt_s=0.6, grads=[(MiB, 1.0), (2 * MiB, 2.0)])
    coll = PerMiB(0.1)
    z = lambda stage, overlap=False: zero(stage, overlap=overlap)  # noqa: E731
    assert cm.predict_step(z(0), c, coll, 3).step_s == pytest.approx(1 + 2 + 0.6 + 0.3)  # one all-reduce after
    # ZeRO-1/2: all-reduce + all-gather after backward, the optimizer on a third of the parameters
    assert cm.predict_step(z(2), c, coll, 3).step_s == pytest.approx(1 + 2 + 0.2 + 0.3 + 0.3)
    # ZeRO-3: each parameter gathered once for forward (kept for backward), reduce-scattered: 0.6 s. Unit by unit:
    # forward runs the 2 MiB layer first (0.5 s of compute each, in proportion to backward's 1 s each), whose gather
    # (0.2 s) nothing can hide; the 1 MiB gather is prefetched behind it. One reduce bucket, filled when backward
    # ends: its 0.3 s is exposed too. The norm's 4 bytes cost nothing here.
    s3 = cm.predict_step(z(3, True), c, coll, 3)
    assert s3.comm_s == pytest.approx(0.6) and s3.step_s == pytest.approx(1 + 2 + 0.2 + 0.2 + 0.3)
    # buckets of 1 MiB: the first (the 1 MiB gradient, ready at 1 s) is reduced behind the 2 MiB layer's backward,
    # only the last (0.2 s) waits
    small = cm.predict_step(replace(z(3, True), bucket_elems=MiB / 4), c, coll, 3)
    assert small.exposed_s == pytest.approx(0.2 + 0.2)
    assert cm.predict_step(z(3, True), c, coll, 3, shares_cores=True).step_s == pytest.approx(1 + 2 + 0.2 + 0.6)
    # beyond the reuse distance a parameter is gathered again for backward: forward runs the 2 MiB layer first,
    # 1 MiB of others lies between its uses each way (2 MiB >= 256 Ki elements of 4 bytes); the last layer's is 0
    far = cm.predict_step(replace(z(3, True), reuse_elems=MiB / 4), c, coll, 3, shares_cores=True)
    assert far.comm_s == pytest.approx(0.6 + 0.2)


def test_zero_calls_are_the_collectives_deepspeed_issues_per_step():
    grads = [(2 * MiB, 1.0), (MiB, 2.0)]  # backward order: the last layer's 2 MiB first
    z = zero
    assert cm.zero_calls(z(0), grads, 2) == ([], [], [("all_reduce", 3 * MiB)])
    for stage in (1, 2):
        assert cm.zero_calls(z(stage), grads, 2) == (
            [], [], [("all_reduce", 3 * MiB), ("all_reduce", 4), ("all_gather", 3 * MiB)])
    assert cm.zero_calls(z(1, grad_reduce="reduce_scatter", norm_allreduce=False), grads, 2) == (
        [], [], [("reduce_scatter", 3 * MiB), ("all_gather", 3 * MiB)])
    # buckets of reduce_bucket_size elements (fp32): a gradient that would overflow the bucket waits for the next
    assert cm.zero_calls(z(2, bucket_elems=MiB // 2), grads, 2)[2][:2] == [("all_reduce", 2 * MiB)] * 1 + [
        ("all_reduce", MiB)]
    assert cm.ipg_buckets([40, 10240, 1024, 262144, 1024, 65536], 200_000) == [11304, 262144, 66560]
    assert cm.ipg_buckets([1.0, 2.0, 3.0], 0) == [6.0]
    # ZeRO-3: forward gathers in forward order (the first layer's 1 MiB first), backward reduce-scatters
    assert cm.zero_calls(z(3), grads, 2) == (
        [("all_gather", MiB), ("all_gather", 2 * MiB)], [("reduce_scatter", 3 * MiB)], [("all_reduce", 4)])
    # beyond the reuse distance only the first layer (4 MiB of others between its uses) is gathered again
    assert cm.zero_calls(z(3, reuse_elems=MiB // 4), grads, 2)[1] == [("all_gather", MiB),
                                                                         ("reduce_scatter", 3 * MiB)]


def test_zero_from_stage_1_all_reduces_the_gradient_norm_every_step():
    class Calls(comm_cost.Collectives):  # every call costs 1 ms of latency and nothing per byte: counts the calls
        def time(self, op, nbytes, n):
            return 0.0 if n <= 1 else 1e-3

    c = Compute(fwd_s=1.0, bwd_s=2.0, opt_s=0.6, grads=[(MiB, 1.0), (2 * MiB, 2.0)])
    z = zero
    assert cm.predict_step(z(0), c, Calls(), 2).comm_s == pytest.approx(1e-3)  # the gradients' all-reduce
    # reduce-scatter, the norm's all-reduce, all-gather
    assert cm.predict_step(z(2), c, Calls(), 2).comm_s == pytest.approx(3e-3)
    assert cm.predict_step(z(2, norm_allreduce=False), c, Calls(), 2).comm_s == pytest.approx(2e-3)
    # ZeRO-3 overlapped: of its gathers (one per parameter), the first is exposed and the second prefetched behind
    # the first layer; its one reduce bucket fills as backward ends, and the norm waits for it
    s3 = cm.predict_step(z(3, overlap=True), c, Calls(), 2)
    assert s3.comm_s == pytest.approx(4e-3) and s3.exposed_s == pytest.approx(3e-3)
    assert cm.predict_step(z(1), c, Calls(), 1).comm_s == 0  # one rank: nothing


def test_zero_memory_matches_the_papers_table():
    # ZeRO paper, Figure 1: 7.5B parameters, 64 GPUs, mixed-precision Adam (K = 12)
    psi, n = 7.5e9, 64
    gb = lambda stage: cm.model_state_bytes(psi, n, stage, param_bytes=2, grad_bytes=2, optim_bytes=12) / 1e9  # noqa
    assert gb(0) == pytest.approx(120)
    assert gb(1) == pytest.approx(31.4, abs=0.05)
    assert gb(2) == pytest.approx(16.6, abs=0.05)
    assert gb(3) == pytest.approx(1.88, abs=0.01)


def test_efficiency_and_interpolation():
    assert cm.efficiency(1.0, 0.6, 2, "strong") == pytest.approx(1 / 1.2)
    assert cm.efficiency(1.0, 1.25, 2, "weak") == pytest.approx(0.8)
    pts = [(1, 1.0), (2, 3.0), (4, 5.0)]
    assert interpolate(pts, 3) == pytest.approx(4.0)
    assert interpolate(pts, 8) == pytest.approx(9.0)   # beyond: through the last two points
    assert interpolate(pts, 0.25) == 0.0               # below: through the first two, never negative


def test_compute_curve_scales_ready_times_with_backward():
    curve = ComputeCurve(fwd=[(16, 1.0), (32, 2.0)], bwd=[(16, 2.0), (32, 4.0)], opt_s=0.5,
                            grads=[(100, 1.0), (200, 4.0)], grads_batch=32)
    c = curve.at(16)
    assert (c.fwd_s, c.bwd_s, c.opt_s) == (1.0, 2.0, 0.5)
    assert c.grads == [(100, 0.5), (200, 2.0)]


def test_every_profile_loads_with_its_sources():
    for name in hardware.profiles():
        f = hardware.load_profile(name)
        assert f.intra_busbw_Bps > 0 and f.inter_busbw_Bps > 0 and f.sources, name
        assert all(s.get("url") for s in f.sources), name
    with pytest.raises(KeyError):
        hardware.load_profile("published")  # the published results are not a hardware profile


def test_this_machines_fit_extends_to_more_ranks_by_ring_steps():
    fitted = comm_cost.Fitted("torch", {("all_reduce", 2): (100e-6, 1e9), ("all_gather", 2): (40e-6, 2e9)})
    ext = fitted.extended()
    # 100 us over the 2 ring steps of a 2-rank all-reduce = 50 us a step; 8 ranks take 14 steps
    assert ext.time("all_reduce", 1e6, 8) == pytest.approx(14 * 50e-6 + 2 * 7 / 8 * 1e6 / 1e9)
    assert ext.time("all_gather", 1e6, 8) == pytest.approx(7 * 40e-6 + 7 / 8 * 1e6 / 2e9)
    assert fitted.time("all_reduce", 1e6, 2) == pytest.approx(100e-6 + 1e6 / 1e9)
    with pytest.raises(KeyError):
        fitted.time("all_reduce", 1e6, 4)  # nothing measured at 4: no silent guess


def test_horovod_packs_and_unpacks_a_fusion_buffer_of_several_tensors():
    grads = [(MiB, 0.5e-3), (MiB, 0.6e-3)]  # both ready before the first cycle: one fused buffer of 2 MiB
    hvd = S({"kind": "fusion", "fusion_bytes": 128 * MiB, "cycle_s": 1e-3})
    plain = Compute(fwd_s=0.0, bwd_s=1e-3, opt_s=0.0, grads=grads)
    copied = Compute(fwd_s=0.0, bwd_s=1e-3, opt_s=0.0, grads=grads, copy_Bps=MiB / 1e-3)  # 1 MiB per ms
    # all-reduce of 2 MiB: 2 ms; packing and unpacking 2 MiB at 1 MiB/ms: 4 ms more
    assert cm.predict_step(hvd, plain, PerMiB(1e-3), 2).comm_s == pytest.approx(2e-3)
    assert cm.predict_step(hvd, copied, PerMiB(1e-3), 2).comm_s == pytest.approx(6e-3)
    # a single tensor is reduced where it is: no copy
    one = Compute(fwd_s=0.0, bwd_s=1e-3, opt_s=0.0, grads=[(2 * MiB, 0.5e-3)], copy_Bps=MiB / 1e-3)
    assert cm.predict_step(hvd, one, PerMiB(1e-3), 2).comm_s == pytest.approx(2e-3)
    # the buffer stays resident: the largest fused all-reduce, at most the threshold; none on one rank
    assert cm.fusion_buffer_bytes(hvd, copied, PerMiB(1e-3), 2) == 2 * MiB
    assert cm.fusion_buffer_bytes(replace(hvd, fusion_bytes=MiB), copied, PerMiB(1e-3), 2) == 0  # split: 1 each
    assert cm.fusion_buffer_bytes(hvd, copied, PerMiB(1e-3), 1) == 0


def test_a_fused_buffer_is_priced_by_the_backends_own_fused_call_where_the_sweep_timed_it():
    def rec(op, size, t):
        return {"backend": "horovod", "status": "ok", "op": op, "world_size": 2, "size_bytes": size,
                "time_s": {"mean": t, "median": t}}
    # the sweep: one tensor 1 ms per MiB; several tensors in one fused call (pack, all-reduce, unpack) 1.5 ms per MiB
    recs = [rec("all_reduce", MiB, 1e-3), rec("all_reduce", 4 * MiB, 4e-3),
            rec("all_reduce_coalesced", MiB, 1.5e-3), rec("all_reduce_coalesced", 4 * MiB, 6e-3)]
    fitted = comm_cost.Fitted.from_records("horovod", recs)
    hvd = S({"kind": "fusion", "fusion_bytes": 128 * MiB, "cycle_s": 1e-3})
    grads = [(MiB, 0.5e-3), (MiB, 0.6e-3)]  # one fused buffer of 2 MiB, both ready before the first cycle
    c = Compute(fwd_s=0.0, bwd_s=1e-3, opt_s=0.0, grads=grads, copy_Bps=MiB / 1e-3)
    # 2 MiB between the measured 1 and 4 MiB of the fused call: 1.5 + (6 - 1.5) / 3 = 3 ms; no copy added on top
    assert cm.fused_all_reduce(c, fitted, 2 * MiB, 2, 2) == pytest.approx(3e-3)
    assert cm.predict_step(hvd, c, fitted, 2, shares_cores=True).comm_s == pytest.approx(3e-3)
    # a single tensor is the plain all-reduce where it is: 2 ms
    assert cm.fused_all_reduce(c, fitted, 2 * MiB, 1, 2) == pytest.approx(2e-3)
    # a sweep without the fused call (before 2026-11-25): the all-reduce plus packing and unpacking at the copy
    # bandwidth, 2 ms + 2 x 2 MiB at 1 MiB/ms = 6 ms
    plain = comm_cost.Fitted.from_records("horovod", recs[:2])
    assert not plain.has("all_reduce_coalesced", 2) and fitted.has("all_reduce_coalesced", 2)
    assert cm.fused_all_reduce(c, plain, 2 * MiB, 2, 2) == pytest.approx(6e-3)
    # carried to 8 ranks by ring steps like any fitted op, and never claimed by a hardware profile
    assert fitted.extended().has("all_reduce_coalesced", 8) and not fabric().has("all_reduce_coalesced", 8)


def test_the_scale_comm_sweep_reaches_the_workloads_gradients():
    import torch

    from harness.core.sweep import comm_sizes, gradient_bytes

    class W:
        def __init__(self, params):
            self.params = params

        def new_model(self):
            return torch.nn.Linear(self.params, 1, bias=False)

    base = "1K,4K,16K,64K,256K,1M,4M,16M,64M"
    assert gradient_bytes(W(1000)) == 4000
    assert comm_sizes(W(1000)) == base  # within 64 MB
    assert comm_sizes(W(16 * 2**20)) == base  # 64 MiB exactly
    assert comm_sizes(W(16 * 2**20 + 1)) == base + ",256M"  # just over: the next factor of 4
    assert comm_sizes(W(100 * 2**20)) == base + ",256M,1024M"  # 400 MiB


def test_horovods_cycle_and_negotiation_are_counted_once():
    grads = [(MiB, 0.5e-3)]
    hvd = S({"kind": "fusion", "fusion_bytes": 128 * MiB, "cycle_s": 1e-3})
    c = Compute(fwd_s=0.0, bwd_s=1e-3, opt_s=0.0, grads=grads)
    # Fitted to Horovod's own synchronous all-reduces, whose latency (1.1 ms) holds the cycle wait and the
    # negotiation: the step's comm is that all-reduce alone, no second round on top.
    fitted = comm_cost.Fitted("horovod", {("all_reduce", 2): (1.1e-3, 1e9)})
    assert fitted.control(2) == 0 and fitted.extended().control(8) == 0
    assert cm.predict_step(hvd, c, fitted, 2, shares_cores=True).comm_s == pytest.approx(1.1e-3 + MiB / 1e9)
    # On a hardware profile the latency is NCCL's alone, so the negotiation round is added: 2 log2(n) tree steps.
    f = fabric()
    assert f.control(2) == pytest.approx(10e-6 + 2 * 2e-6)
    assert cm.predict_step(hvd, c, f, 2, shares_cores=True).comm_s == pytest.approx(
        f.control(2) + f.time("all_reduce", MiB, 2))


def test_a_cell_that_cannot_be_fitted_says_why_with_its_medians():
    def rec(op, size, t):
        return {"backend": "torch", "status": "ok", "op": op, "world_size": 2, "size_bytes": size,
                "time_s": {"median": t}}
    # all_gather grows with size; all_reduce got slower at smaller sizes (scheduler delays on shared cores)
    recs = [rec("all_gather", 4096, 1e-4), rec("all_gather", 2**20, 1e-3),
            rec("all_reduce", 4096, 3e-3), rec("all_reduce", 65536, 2e-3), rec("all_reduce", 2**20, 1e-3)]
    fitted = comm_cost.Fitted.from_records("torch", recs)
    assert set(fitted.fits) == {("all_gather", 2)}
    assert fitted.time("all_gather", 2**20, 2) == pytest.approx(1e-3, rel=0.01)
    with pytest.raises(KeyError) as err:
        fitted.time("all_reduce", 2**20, 2)
    assert err.value.args[0] == ("all_reduce for torch at world size 2 measured but not fitted: time does not grow "
                                 "with size: no bandwidth to fit (4K: 3.00 ms, 64K: 2.00 ms, 1M: 1.00 ms); re-run "
                                 "compare comm with more --iters or larger --sizes")
    with pytest.raises(KeyError, match="no broadcast measured for torch at world size 2"):
        fitted.time("broadcast", 2**20, 2)


def test_a_measured_world_size_is_priced_from_the_sweeps_mean_times_non_decreasing_in_size():
    def rec(size, median, mean):
        return {"backend": "torch", "status": "ok", "op": "all_reduce", "world_size": 2, "size_bytes": size,
                "time_s": {"median": median, "mean": mean}}
    # means: 1K 2 ms, 4K 1 ms (a scheduler delay made the smaller size slower), 1M 3 ms, 4M 9 ms
    recs = [rec(1024, 0.1e-3, 2e-3), rec(4096, 0.1e-3, 1e-3), rec(2**20, 1e-3, 3e-3), rec(4 * 2**20, 4e-3, 9e-3)]
    assert comm_cost.monotone([(1, 2.0), (2, 1.0), (3, 3.0), (4, 9.0)]) == [(1, 1.5), (2, 1.5), (3, 3.0), (4, 9.0)]
    assert comm_cost.monotone([(1, 3.0), (2, 2.0), (3, 1.0)]) == [(1, 2.0), (2, 2.0), (3, 2.0)]
    fitted = comm_cost.Fitted.from_records("torch", recs)
    assert fitted.curve("all_reduce", 2) == [(1024, 1.5e-3), (4096, 1.5e-3), (2**20, 3e-3), (4 * 2**20, 9e-3)]
    assert fitted.time("all_reduce", 512, 2) == pytest.approx(1.5e-3)  # below the smallest size: its time
    assert fitted.time("all_reduce", 2 * 2**20, 2) == pytest.approx(3e-3 + 6e-3 / 3)  # linear between sizes
    latency, busbw = fitted.fits[("all_reduce", 2)]
    # beyond the largest size: its time plus the fitted bandwidth's share of the rest (all-reduce factor 1 at n=2)
    assert fitted.time("all_reduce", 8 * 2**20, 2) == pytest.approx(9e-3 + 4 * 2**20 / busbw)
    assert fitted.line("all_reduce", 2**20, 2) == pytest.approx(latency + 2**20 / busbw)
    # the medians are there to be chosen, and a record without a mean gives its median
    by_median = comm_cost.Fitted.from_records("torch", recs, stat="median")
    assert by_median.curve("all_reduce", 2)[-1] == (4 * 2**20, 4e-3)
    plain = [{**r, "time_s": {"median": r["time_s"]["median"]}} for r in recs]
    assert comm_cost.Fitted.from_records("torch", plain).curve("all_reduce", 2) == by_median.curve("all_reduce", 2)


def test_fsdp_gathers_each_unit_for_forward_and_again_for_backward_and_reduce_scatters_its_gradients():
    # Hand-computed: 1 and 2 MiB of gradients, 0.1 s per MiB for any collective, 3 ranks.
    c = Compute(fwd_s=1.0, bwd_s=2.0, opt_s=0.6, grads=[(MiB, 1.0), (2 * MiB, 2.0)])
    coll = PerMiB(0.1)
    f = lambda **k: S({"kind": "fsdp", "comm_backend": "torch", "wire_scale": 1.0, "gather_scale": 1.0,  # noqa: E731
                       "reshard_after_forward": True, "overlap": True, **k})
    # forward: gathers of 2 MiB and 1 MiB (0.3 s); backward: the same again (resharded) + reduce-scatters (0.3 s).
    # Unit by unit, one unit of prefetch: forward's first gather (the 2 MiB layer, 0.2 s) is exposed, the second
    # hides behind that layer's 0.5 s; backward's first gather (0.1 s) is exposed, the second and the first
    # reduce-scatter hide behind the 1 s of each layer's backward, the last reduce-scatter (0.2 s) is exposed.
    s = cm.predict_step(f(), c, coll, 3)
    assert s.comm_s == pytest.approx(0.9) and s.exposed_s == pytest.approx(0.2 + 0.1 + 0.2)
    assert s.step_s == pytest.approx(1 + 2 + 0.6 / 3 + 0.5)  # each rank steps a third of the parameters
    assert cm.predict_step(f(), c, coll, 3, shares_cores=True).step_s == pytest.approx(1 + 2 + 0.2 + 0.9)
    # kept from forward to backward (ZeRO-2-like): one gather per unit per step
    assert cm.predict_step(f(reshard_after_forward=False), c, coll, 3, shares_cores=True).comm_s == pytest.approx(0.6)
    # bf16 parameters and gradients: half the bytes each way
    half = cm.predict_step(f(wire_scale=0.5, gather_scale=0.5), c, coll, 3, shares_cores=True)
    assert half.comm_s == pytest.approx(0.45)
    # what does not fit behind compute is exposed: 10x slower collectives. Forward: gathers of 2 s and 1 s, the
    # layers' compute at 2-2.5 s and 3-3.5 s (2.5 s exposed). Backward: gathers of 1 s and 2 s on the stream by 3 s,
    # the first reduce-scatter (1 s) after them, the layers at 1-2 s and 3-4 s, the last reduce-scatter (2 s) from
    # 4 s: done at 6 s (4 s exposed)
    slow = cm.predict_step(f(), c, PerMiB(1.0), 3)
    assert slow.exposed_s == pytest.approx(2.5 + 4.0)


def test_the_model_is_frozen_under_its_version():
    # A change to how the model prices or calibrates must come with a new harness.model.VERSION (and the new
    # fingerprint), so that no sweep is scored as validation by a model tuned after it was made.
    from harness import model

    assert model.fingerprint() == model.FINGERPRINT, (
        f"the model's code changed: raise harness.model.VERSION to {model.VERSION + 1} and set FINGERPRINT = "
        f"\"{model.fingerprint()}\"")


def test_spearman_against_hand_computed_ranks():
    from harness.ground.stats import ranks, spearman

    assert ranks([3.0, 1.0, 2.0, 2.0]) == [4.0, 1.0, 2.5, 2.5]
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # d = (0, 1, -1, 0): rho = 1 - 6 * 2 / (4 * 15) = 0.8
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert spearman([1, 2], [1, 2]) is None and spearman([1, 1, 1], [1, 2, 3]) is None


def test_scores_mark_each_point_and_the_baselines_on_known_rows():
    from harness.model.calibration import scores

    def row(label, n, measured, predicted, repeats=(), naive=None, same=None, over=False):
        r = {"label": label, "n": n, "oversubscribed": over, "measured_s": measured, "predicted_s": predicted,
             "error": predicted / measured - 1, "measured_repeats_s": list(repeats)}
        if naive is not None:
            r["naive_error"] = naive / measured - 1
        if same is not None:
            r["same_as_1_error"] = same / measured - 1
        return r

    rows = [row("a", 2, 1.0, 1.05, naive=1.5, same=0.5),                      # pass (5%)
            row("b", 2, 2.0, 2.6, repeats=(2.0, 2.0, 2.0), naive=2.1, same=1.0),  # 30%, no spread: fail
            row("c", 2, 3.0, 3.6, naive=3.1),                                 # 20%, no repeats: undecidable
            row("d", 1, 1.0, 5.0),                                            # world size 1: not judged
            row("e", 4, 1.0, 5.0, over=True)]                                 # oversubscribed: not judged
    s = scores(rows)
    assert (s["points"], s["pass"], s["fail"], s["undecidable"]) == (3, 1, 1, 1)
    assert s["median_abs_error"] == pytest.approx(0.2)
    assert (s["within"], s["naive_within"], s["same_as_1_within"]) == (1, 2, 0)
    assert s["rho"] == {2: pytest.approx(1.0)}  # measured 1 < 2 < 3, predicted 1.05 < 2.6 < 3.6


def test_predicted_memory_divides_what_each_schedule_shards():
    # FSDP2 shards parameters, gradients and optimizer state as ZeRO-3 does (it had been predicted as unsharded);
    # kept whole from forward to backward, its parameters are not divided at the peak; HSDP divides over a replica's
    # shard group only; DDP divides nothing.
    from harness.model.calibration import predicted_memory
    from harness.shared.comm_schedule import Buckets, Fsdp, Zero

    mib, params = 2**20, 1_000_000  # 4 MB of fp32 parameters, 8 bytes of optimizer state per parameter
    def at(schedule, n):
        cal = {"peak_1": 100 * mib, "param_count": params, "profile": {"optimizer_state_bytes": 8 * params},
               "schedule": schedule}
        return (100 * mib - predicted_memory(cal, n)) / params  # bytes per parameter saved against one rank

    fsdp = dict(comm_backend="torch")
    assert at(Fsdp(**fsdp), 4) == pytest.approx((4 + 4 + 8) * 3 / 4)
    assert at(Fsdp(**fsdp, reshard_after_forward=False), 4) == pytest.approx((4 + 8) * 3 / 4)
    assert at(Fsdp(**fsdp, replicas=2), 4) == pytest.approx((4 + 4 + 8) / 2)
    zero = dict(comm_backend="deepspeed", bucket_elems=1, grad_reduce="all_reduce", norm_allreduce=False,
                reuse_elems=0)
    assert at(Zero(**zero, stage=1), 4) == pytest.approx(8 * 3 / 4)
    assert at(Zero(**zero, stage=3), 4) == at(Fsdp(**fsdp), 4)
    assert at(Buckets(comm_backend="torch", bucket_bytes=1, first_bucket_bytes=1), 4) == 0
