"""Benchmark (not a test): does `compare comm` measure all_reduce like a minimal raw torch.distributed loop?

    .venv/bin/python tests/benchmarks/bench_comm_overhead.py [--size 64M] [--iters 30] [--rounds 3]

Alternates, in one run, a raw loop (torchrun, `dist.all_reduce` on a 64 MiB fp32 tensor, perf_counter around each
call, slowest rank per iteration) with `compare comm --ops all_reduce --sizes 64M`, and prints both medians and
the harness's difference from the raw loop. Target: within 3%.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def raw_rank(size_bytes: int, iters: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.zeros(size_bytes // 4)
    for _ in range(5):
        dist.all_reduce(t)
    dist.barrier()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        dist.all_reduce(t)
        times.append(time.perf_counter() - t0)
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, times)
    if dist.get_rank() == 0:
        Path(out).write_text(json.dumps([max(ts) for ts in zip(*gathered)]))
    dist.destroy_process_group()


def raw(size_bytes: int, iters: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "raw.json"
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                        __file__, "--rank-mode", str(size_bytes), str(iters), str(out)], check=True, cwd=REPO,
                       env={**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "TMPDIR": d},
                       capture_output=True)
        return statistics.median(json.loads(out.read_text()))


def harness(size: str, iters: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "c"
        subprocess.run([sys.executable, "-m", "harness", "comm", "--backends", "torch", "--ops", "all_reduce",
                        "--sizes", size, "--iters", str(iters), "--out", str(out)], check=True, cwd=REPO,
                       capture_output=True)
        rec = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()][0]
        assert rec["status"] == "ok", rec
        return rec["time_s"]["median"]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--rank-mode":
        raw_rank(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="64M")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from harness.ground.sizes import parse_size
    from harness.shared.collectives import iterations

    size_bytes = parse_size(a.size)
    iters = iterations(size_bytes, a.iters)[1]
    raws, ours = [], []
    for r in range(a.rounds):  # alternate so drift affects both alike
        raws.append(raw(size_bytes, iters))
        ours.append(harness(a.size, a.iters))
        print(f"round {r + 1}: raw {raws[-1] * 1e3:.2f} ms, compare comm {ours[-1] * 1e3:.2f} ms")
    m_raw, m_ours = statistics.median(raws), statistics.median(ours)
    diff = (m_ours - m_raw) / m_raw
    print(f"all_reduce {a.size} fp32, 2 ranks gloo, {iters} timed iterations x {a.rounds} rounds: raw loop "
          f"{m_raw * 1e3:.2f} ms, compare comm {m_ours * 1e3:.2f} ms, difference {diff:+.1%} "
          f"({'within' if abs(diff) <= 0.03 else 'OUTSIDE'} the 3% target)")


if __name__ == "__main__":
    main()
