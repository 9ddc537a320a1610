"""Benchmark (not a test): on this machine, does a data-parallel step cost the sum of its parts?

    .venv/bin/python tests/benchmarks/bench_step_parts.py [--workload digits] [--rounds 6] [--seconds 1.5]

`compare scale`'s model (harness/model/costmodel.py) predicts a step as the sum of its parts: the compute measured alone,
plus each collective at its mean time in a `compare comm` sweep (timed back to back), plus the framework's
overhead. This checks that sum against the step it stands for, with no framework in the way and at one time, so
that the drift of the machine between the sweep's launches is not in it: one launch (torchrun, 2 ranks, gloo, one
thread per rank) of a plain local copy of the workload's model at the per-rank batch of a 2-rank strong-scaling
point, and, interleaved in rounds (the order rotated every round), blocks of at least --seconds each of:

- compute: forward + backward + SGD step, every rank at once, no communication;
- collective: an all_reduce of one flat buffer of the gradients' bytes, back to back (as `compare comm` times it);
- step: the compute, then that all_reduce (what DDP does with one bucket, without DDP);
- after gap: the all_reduce alone, each call after --gap ms of busy work on every rank, untimed (as `compare comm
  --gap` times it, and `compare scale`'s comm sweep since 2026-11-25).

`--bytes B` all-reduces B bytes instead of the gradients (a latency-bound size: how much of the extra cost depends on the message).

Per call, the slowest rank's time (as the harness takes it). It prints per round and pooled: the mean of each, the
sum compute + collective, the step's mean and how far it is from the sum, and the share of collective calls that
took over 2 ms (on this VM a small collective is bimodal: under a millisecond, or a few milliseconds when a rank's
wake-up waits for a core). Nothing here is asserted: it prints figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

RANK = r'''
import json, os, statistics, sys, time
sys.path.insert(0, sys.argv[1])
import torch, torch.distributed as dist
torch.set_num_threads(1)
import workloads
workload_name, rounds, seconds, out = sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
nbytes = int(sys.argv[6])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
workload = workloads.get(workload_name, {})
data = workload.materialize("cpu", workload.global_batch)
b = workload.global_batch // world
torch.manual_seed(workload.seed)
model = workload.build_model()
opt = torch.optim.SGD(model.parameters(), lr=workload.lr(workload.global_batch), momentum=0.9)
x, y = data.train_x[rank * b:(rank + 1) * b], data.train_y[rank * b:(rank + 1) * b]
flat = torch.zeros(nbytes // 4 if nbytes else sum(p.numel() for p in model.parameters()))

def compute():
    opt.zero_grad(set_to_none=True)
    workload.loss(model(x), y).backward()
    opt.step()

def collective():
    dist.all_reduce(flat)

def step():
    compute()
    dist.all_reduce(flat)

gap = float(sys.argv[7])

def spin():
    end = time.perf_counter() + gap
    while time.perf_counter() < end:
        pass

blocks = {"compute": compute, "collective": collective, "step": step, "gap": collective}
order = list(blocks)
result = {k: [] for k in blocks}
for r in range(rounds):
    names = order[r % 4:] + order[:r % 4]
    for name in names:
        f = blocks[name]
        # Warm-up, which also sizes the block: rank 0's mean call here sets how many calls fill --seconds, so
        # that no extra collective runs between the timed calls (every rank runs the same number).
        dist.barrier()
        probe = []
        for _ in range(5):  # the same number on every rank: a collective block must not go out of step
            if name == "gap":
                spin()
            t0 = time.perf_counter()
            f()
            probe.append(time.perf_counter() - t0)
        calls = torch.tensor([max(20, round(seconds / (statistics.fmean(probe[1:]) + (gap if name == "gap" else 0))))])
        dist.broadcast(calls, 0)
        dist.barrier()
        times = []
        for _ in range(int(calls.item())):
            if name == "gap":
                spin()
            t0 = time.perf_counter()
            f()
            times.append(time.perf_counter() - t0)
        mine = torch.tensor(times)
        every = [torch.zeros_like(mine) for _ in range(world)]
        dist.all_gather(every, mine)
        slowest = torch.stack(every).max(dim=0).values.tolist()
        result[name].append(slowest)
if rank == 0:
    Path = __import__("pathlib").Path
    Path(out).write_text(json.dumps({"per_rank_batch": b, "grad_bytes": flat.numel() * 4, "blocks": result}))
dist.barrier()  # no rank leaves while its peer still writes: gloo aborts a process whose peer hung up mid-call
dist.destroy_process_group()
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="digits")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=1.5, help="least seconds per block")
    ap.add_argument("--bytes", type=int, default=0, help="the all_reduce's size (default: the gradients')")
    ap.add_argument("--gap", type=float, default=1.0, help="ms of busy work before each call of the 'after gap' block")
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="bench-step-parts-") as tmp:
        script, out = Path(tmp) / "rank.py", Path(tmp) / "out.json"
        script.write_text(RANK)
        env = dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=tmp)  # torchrun's torchelastic_* dir goes with tmp
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               str(script), str(REPO), args.workload, str(args.rounds), str(args.seconds), str(out), str(args.bytes),
               str(args.gap / 1e3)]
        subprocess.run(cmd, check=True, env=env, cwd=tmp, timeout=120 + 4 * args.rounds * args.seconds * 4)
        res = json.loads(out.read_text())
    blocks = res["blocks"]
    what = f"{res['grad_bytes']:,} bytes" if args.bytes else f"{res['grad_bytes'] / 2**20:.2f} MiB (the gradients)"
    print(f"workload {args.workload}: per-rank batch {res['per_rank_batch']}, all_reduce of {what}, 2 ranks, "
          f"gloo, 1 thread each")
    print(f"{'round':>5} {'compute':>9} {'collective':>10} {'sum':>8} {'step':>8} {'step-sum':>9} "
          f"{'':>6} {'coll >2ms':>9} {'in step':>8} {'after gap':>9} {'step-(c+gap)':>12}")
    print("(means in ms, each call the slowest rank's; 'coll >2ms': share of back-to-back collective calls over 2 ms, "
          "'in step': share of steps over the mean compute + 2 ms; only for a collective whose median is under 1 ms; "
          f"'after gap': the collective, each call after {args.gap:g} ms of busy work; 'step-(c+gap)': the step "
          "against the compute plus that)")
    gaps, gaps_after = [], []

    def line(tag, c, a, s, g):
        mc, ma, ms, mg = (statistics.fmean(v) * 1e3 for v in (c, a, s, g))
        modes = " " * 19
        if statistics.median(a) < 1e-3:  # a latency-bound collective: its slow mode is worth counting
            slow_b2b = sum(t > 2e-3 for t in a) / len(a)
            # In the step, the all_reduce's share is not timed apart: the share of steps over compute + 2 ms.
            slow_step = sum(t > statistics.fmean(c) + 2e-3 for t in s) / len(s)
            modes = f" {slow_b2b:9.0%} {slow_step:8.0%}"
        print(f"{tag:>5} {mc:9.3f} {ma:10.3f} {mc + ma:8.3f} {ms:8.3f} {ms - mc - ma:+9.3f} "
              f"{(ms - mc - ma) / ms:+6.0%}{modes} {mg:9.3f} {(ms - mc - mg) / ms:+12.0%}")
        return (ms - mc - ma, (ms - mc - ma) / ms), (ms - mc - mg) / ms

    for r in range(args.rounds):
        b2b, after = line(str(r + 1), *(blocks[k][r] for k in ("compute", "collective", "step", "gap")))
        gaps.append(b2b)
        gaps_after.append(after)
    pooled = [[t for rnd in blocks[k] for t in rnd] for k in ("compute", "collective", "step", "gap")]
    line("all", *pooled)
    ms = sorted(g[0] for g in gaps)
    print(f"step - (compute + collective) per round: median {statistics.median(ms):+.3f} ms "
          f"[{ms[0]:+.3f} to {ms[-1]:+.3f}]; as a share of the step: median "
          f"{statistics.median(g[1] for g in gaps):+.0%} [{min(g[1] for g in gaps):+.0%} to "
          f"{max(g[1] for g in gaps):+.0%}]")
    print(f"step - (compute + collective after the gap), as a share of the step: median "
          f"{statistics.median(gaps_after):+.0%} [{min(gaps_after):+.0%} to {max(gaps_after):+.0%}]")
    coll = sorted(statistics.fmean(v) * 1e3 for v in blocks["collective"])
    print(f"the collective's mean, round to round: {coll[0]:.3f} to {coll[-1]:.3f} ms "
          f"({coll[-1] / coll[0]:.2f}x): how far one comm sweep's figure can be from another's, minutes apart")
    return 0


if __name__ == "__main__":
    sys.exit(main())
