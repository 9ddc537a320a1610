"""Benchmark (not a test): does `compare run` measure training steps exactly as a hand-written script would?

    .venv/bin/python tests/benchmarks/bench_run_overhead.py [--pairs 5] [--cases ddp:digits,horovod:widemlp]
                                                            [--bind-cores]

For each case (framework x workload: ddp, horovod and deepspeed on digits, where steps are short and any
per-step overhead shows, and on widemlp, which is communication-bound) it alternates, in one run, a minimal
hand-written training script of that framework with `compare run` on the same work, raw-first and harness-first
in turn, for several pairs. The raw scripts below share no code with the harness: each is a plain user's loop
(the framework's own launcher, the framework's defaults, the same model, data, global batch, LR, warm-up, steps
and threads), timing each step with perf_counter and taking the slowest rank per step, as the harness does. It
prints, per case, the median step time of each side and the harness/raw throughput ratio per pair, with its
median and spread, computed at the median step (what the harness's samples/s column uses), at the 10th-percentile
step (the fast steps no neighbour disturbed: a per-step cost the harness added would show there too, while the
VM's noise mostly does not) and at the mean step (samples over the whole run's step time). On this VM a digits
step time is multi-modal (a fast mode near 1.5 ms, others whole milliseconds later, where a rank waiting in a
collective was woken late), and the median can sit between modes, where a few percent more steps in one mode
move it by a millisecond: then the mean is the steadier figure.

What the VM's scheduling cannot blur is the work itself: with --cpu-rounds K it also runs each side K times at
two lengths and reports the CPU time and context switches of its whole process tree per timed step (the long
run's minus the short run's, over the steps between them; start-up cancels). A per-step cost the harness added
(a poll, a redraw, a write, a wake-up) would show there even when the step times scatter.

    .venv/bin/python tests/benchmarks/bench_run_overhead.py --pairs 0 --cpu-rounds 2 --cases deepspeed:digits
Last it prints, per case, the harness/raw throughput ratio over the timed window by the wall clock (each side's
slowest rank: what the harness's samples/s divides by from schema 3) with its 95% interval over
the launches (harness/ground/stats.py: the ratio of geometric means, Welch's interval on the log scale) and the same for
the ranks' own CPU time per timed step, which scheduling noise barely moves.
Target: the interval contains 1 and its lower bound is at least 0.97 (check the load average first: this VM is
noisy; 20 pairs per case narrow it to a few percent). With --bind-cores both
sides bind each rank, all its threads, to its own share of the cores (the raw script by its own few lines), which
takes most scheduler-tick waits out of the 2-4 ms digits steps and so most of the noise out of the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from harness.ground.stats import INTERVAL_METHOD, compare_pair, ratio_interval  # noqa: E402

PY = sys.executable
BIN = Path(PY).parent

# ---- the hand-written scripts -------------------------------------------------------------------------------
# One file, three frameworks: what a user would write to train these two models data-parallel and time the steps.
RAW = r'''
import json, os, statistics, sys, time

import torch
import torch.nn as nn
import torch.nn.functional as F

framework, workload, steps, warmup, out = [a for a in sys.argv[1:] if not a.startswith("--local_rank")]
steps, warmup = int(steps), int(warmup)
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
CUDA = os.environ.get("RAW_DEVICE") == "cuda"  # one GPU per rank, NCCL; RAW_PRECISION=bf16: autocast to bf16
if CUDA:
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))

if framework == "horovod":
    import horovod.torch as hvd
    hvd.init()
    rank, world = hvd.rank(), hvd.size()
elif framework == "deepspeed":
    import deepspeed
    deepspeed.init_distributed()
    import torch.distributed as dist
    rank, world = dist.get_rank(), dist.get_world_size()
else:
    import torch.distributed as dist
    dist.init_process_group("nccl" if CUDA else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

if os.environ.get("BIND_CORES"):  # one share of the cores per local rank, every thread (gloo's included)
    local = hvd.local_rank() if framework == "horovod" else int(os.environ["LOCAL_RANK"])
    cores = sorted(os.sched_getaffinity(0))
    n = torch.get_num_threads()
    mine = {cores[(local * n + i) % len(cores)] for i in range(n)}
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), mine)

torch.manual_seed(0)
if workload == "digits":
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    x, y = load_digits(return_X_y=True)
    x, _, y, _ = train_test_split(x / 16.0, y, test_size=0.2, random_state=0, stratify=y)
    x, y = torch.tensor(x, dtype=torch.float32), torch.tensor(y)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    batch, lr = 64, 0.1
elif workload == "resnet50":  # torchvision's ResNet-50 on ImageNet-shaped random images, 2 global batches of them
    import torchvision
    batch, lr = int(os.environ["RAW_BATCH"]), 0.1
    x, y = torch.randn(2 * batch, 3, 224, 224), torch.randint(0, 1000, (2 * batch,))
    model = torchvision.models.resnet50()
elif workload == "llama":  # transformers' Llama from its config, random init; next-byte windows of random bytes
    import transformers
    shape = dict(kv.split("=") for kv in os.environ["RAW_LLAMA"].split(","))
    seq = int(shape["seq_len"])
    config = transformers.LlamaConfig(
        vocab_size=int(shape["vocab"]), hidden_size=int(shape["hidden"]), intermediate_size=int(shape["intermediate"]),
        num_hidden_layers=int(shape["layers"]), num_attention_heads=int(shape["heads"]),
        num_key_value_heads=int(shape["kv_heads"]), max_position_embeddings=max(seq, 128), tie_word_embeddings=False,
        attention_dropout=0.0)
    model = transformers.LlamaForCausalLM(config)
    batch, lr = int(os.environ["RAW_BATCH"]), 3e-4 * int(os.environ["RAW_BATCH"]) / 8
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 256, (16 * batch * seq + 1,), generator=g)
    x, y = tokens[:-1].view(-1, seq), tokens[1:].view(-1, seq)
else:  # a wide MLP: 38 M parameters, little compute per sample
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1024, 1024, generator=g)
    y = (x @ torch.randn(1024, 10, generator=g)).argmax(1)
    torch.manual_seed(0)
    layers = [nn.Linear(1024, 4096), nn.ReLU()]
    for _ in range(2):
        layers += [nn.Linear(4096, 4096), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(4096, 10))
    batch, lr = 32, 0.01

if CUDA:
    model, x, y = model.cuda(), x.cuda(), y.cuda()
if workload == "llama":  # as the hf workload: AdamW, weight decay 0.01, the loss in fp32 over the vocabulary
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
else:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9,
                                weight_decay=1e-4 if workload == "resnet50" else 0)


def loss_of(xb, yb):
    if workload == "llama":
        # as the hf workload feeds it: the model's own loss over every next byte, scaled by this rank's count of
        # them over their mean over the ranks (torchtitan's global token count; one all-reduce a step)
        loss = model(input_ids=xb, labels=xb, shift_labels=yb, use_cache=False).loss
        count = torch.tensor([float(yb.numel())], dtype=torch.float64, device=yb.device)
        if framework == "horovod":
            mean = hvd.allreduce(count, op=hvd.Average, name="count")
        else:
            mean = count.clone()
            dist.all_reduce(mean)
            mean /= world
        return loss * (count / mean).to(loss.dtype)[0]
    return F.cross_entropy(model(xb), yb)


if framework == "horovod":
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
elif framework == "deepspeed":
    # No clipping, as in the other two scripts (DeepSpeed 0.19.8 would clip at norm 1.0 by default).
    model, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config={
        "train_batch_size": batch, "train_micro_batch_size_per_gpu": batch // world, "gradient_clipping": 0.0})
else:
    model = nn.parallel.DistributedDataParallel(model, device_ids=[torch.cuda.current_device()] if CUDA else None)

per, per_epoch, perms = batch // world, len(x) // batch, {}


def order(step):  # the harness's data order (docs/fairness.md, item 2): one permutation per epoch, seed 0
    epoch, k = divmod(step, per_epoch)
    if epoch not in perms:
        perms[epoch] = torch.randperm(len(x), generator=torch.Generator().manual_seed(epoch))
    return perms[epoch][k * batch:(k + 1) * batch][rank * per:(rank + 1) * per]


slices = [order(step) for step in range(warmup + steps)]
if CUDA:
    slices = [s.cuda() for s in slices]
half = torch.bfloat16 if os.environ.get("RAW_PRECISION") == "bf16" else None
if framework == "horovod":
    hvd.barrier()
else:
    dist.barrier()
times, events = [], []
for step in range(warmup + steps):
    if step == warmup:
        if CUDA:
            torch.cuda.synchronize()
        cpu0 = time.process_time()  # this process's CPU time (every thread) over the timed steps
        wall0 = time.perf_counter()
    xb, yb = x[slices[step]], y[slices[step]]
    t0 = time.perf_counter()
    if CUDA:  # a GPU user's loop: events around each step, no sync until the end
        events.append((torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)))
        events[-1][0].record()
    if framework == "deepspeed":
        loss = loss_of(xb, yb)
        model.backward(loss)
        model.step()
    else:
        optimizer.zero_grad()
        with torch.autocast("cuda" if CUDA else "cpu", dtype=half, enabled=half is not None):
            loss = loss_of(xb, yb)
        loss.backward()
        optimizer.step()
    if CUDA:
        events[-1][1].record()
    times.append(time.perf_counter() - t0)
if CUDA:
    torch.cuda.synchronize()
    times = [a.elapsed_time(b) / 1e3 for a, b in events]
wall_step = (time.perf_counter() - wall0) / steps  # the whole timed window by the wall clock, synchronised
cpu_s = time.process_time() - cpu0
timed = times[warmup:]
every = hvd.allgather_object((timed, cpu_s, wall_step)) if framework == "horovod" else [None] * world
if framework != "horovod":
    dist.all_gather_object(every, (timed, cpu_s, wall_step))
if rank == 0:
    slowest = sorted(max(ts) for ts in zip(*(e[0] for e in every)))
    with open(out, "w") as f:
        json.dump({"median_step_s": statistics.median(slowest), "p10_step_s": slowest[len(slowest) // 10],
                   "mean_step_s": statistics.mean(slowest), "n": len(slowest),
                   "wall_step_s": max(e[2] for e in every),
                   "cpu_s_per_step": sum(e[1] for e in every) / world / len(slowest)}, f)
if framework == "horovod":
    hvd.shutdown()
else:
    dist.barrier()  # nobody leaves while a peer may still talk to it
    dist.destroy_process_group()
'''

STEPS = {"digits": (20, 280), "widemlp": (3, 30), "resnet50": (10, 50), "llama": (5, 30)}
"""(warm-up, timed) steps per workload: the digits default, and widemlp with more timed steps than its default 20."""
CPU_STEPS = {"digits": (500, 5500), "widemlp": (5, 45)}
"""Timed steps of the short and the long run of the CPU-cost measurement (--cpu-rounds): 5000 digits steps are
about 30 s of CPU, 40 widemlp steps about 25 s, against a second or so of start-up that varies between launches."""
GPU = {"device": "cpu", "precision": "fp32", "batch": 256, "llama": ""}
"""--device cuda: every GPU one rank (NCCL), ResNet-50 (or --llama's model) at this global batch, autocast to
--precision bf16 or not."""
COUNTED = {"cpu_s": 0.0, "switches": 0}
WALL = {"raw": 0.0, "harness": 0.0}
"""The last launch's timed window by the wall clock per step (synchronised at both ends on CUDA)."""
"""CPU seconds and context switches of the last command run by `_run`, over its whole process tree."""


def _run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run, counting the command's CPU time and context switches: getrusage(RUSAGE_CHILDREN) covers
    every process of the tree that was waited for (the launchers, the ranks, the harness's parent), user and
    system time, voluntary and involuntary switches."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, **kwargs)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    COUNTED["cpu_s"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    COUNTED["switches"] = (after.ru_nvcsw + after.ru_nivcsw) - (before.ru_nvcsw + before.ru_nivcsw)
    return proc


def raw_command(framework: str, script: Path, args: list[str]) -> tuple[list[str], dict[str, str]]:
    if framework == "horovod":
        return [str(BIN / "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo", "--network-interfaces", "lo",
                PY, str(script), *args], {}
    if framework == "deepspeed":
        return [str(BIN / "deepspeed"), "--num_gpus", "2", str(script), *args], {"DS_ACCELERATOR": "cpu"}
    if GPU["device"] == "cuda":
        import torch

        return [PY, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={torch.cuda.device_count()}",
                str(script), *args], {"RAW_DEVICE": "cuda", "RAW_PRECISION": GPU["precision"],
                                      "RAW_BATCH": str(GPU["batch"]), "RAW_LLAMA": GPU["llama"],
                                      "NCCL_SOCKET_IFNAME": "lo"}
    return [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script), *args], {
        "RAW_BATCH": str(GPU["batch"]), "RAW_LLAMA": GPU["llama"]}


def run_raw(framework: str, workload: str, tmp: Path, bind: bool = False) -> tuple[float, float, float, float]:
    script = tmp / "raw_train.py"
    script.write_text(RAW)
    out = tmp / "raw.json"
    out.unlink(missing_ok=True)
    warmup, steps = STEPS[workload]
    argv, extra = raw_command(framework, script, [framework, workload, str(steps), str(warmup), str(out)])
    # The same threads as the harness gives each of 2 ranks on this machine (its default: usable cores / 2).
    threads = str(max(1, len(os.sched_getaffinity(0)) // 2))
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "GLOO_SOCKET_IFNAME": "lo",
           "MASTER_ADDR": "127.0.0.1", "TMPDIR": str(tmp), **extra, **({"BIND_CORES": "1"} if bind else {})}
    shm = Path("/dev/shm")
    before = set(shm.glob("deepspeed_allreduce_buffer_*"))
    proc = _run(argv, cwd=tmp, env=env, capture_output=True, text=True, timeout=900)
    for leftover in set(shm.glob("deepspeed_allreduce_buffer_*")) - before:
        leftover.unlink(missing_ok=True)  # DeepSpeed never unlinks its CPU all-reduce segments (66 MiB per rank)
    if not out.exists():  # a crash after rank 0 wrote its result (a gloo peer closing first) still measured
        sys.exit(f"raw {framework}/{workload} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    got = json.loads(out.read_text())
    WALL["raw"] = got["wall_step_s"]
    return got["median_step_s"], got["p10_step_s"], got["mean_step_s"], got["cpu_s_per_step"]


def workload_args(workload: str) -> list[str]:
    """The harness's workload for the raw script's: torchvision's ResNet-50 is `-w resnet -o arch=resnet50`, the
    raw Llama is `-w hf -o model=llama` with --llama's shape."""
    if workload == "resnet50":
        return ["-w", "resnet", "-o", "arch=resnet50"]
    if workload == "llama":
        return ["-w", "hf", "-o", "model=llama", *(a for kv in GPU["llama"].split(",") for a in ("-o", kv))]
    return ["-w", workload]


def run_harness(framework: str, workload: str, tmp: Path, bind: bool = False) -> tuple[float, float, float, float]:
    out = tmp / "harness"
    shutil.rmtree(out, ignore_errors=True)
    warmup, steps = STEPS[workload]
    where = ["-a", framework, *workload_args(workload), *(["--global-batch", str(GPU["batch"])]
                                                         if workload == "llama" else [])]
    if GPU["device"] == "cuda":  # the same work as the raw script: DDP, with autocast when it asks for bf16
        where = ["-a", "amp:precision=bf16" if GPU["precision"] == "bf16" else framework, "--device", "cuda",
                 "--global-batch", str(GPU["batch"]),
                 *workload_args(workload)]
    proc = _run([PY, "-m", "harness", "run", *where, "--steps", str(steps),
                 "--warmup", str(warmup), "--equiv-steps", "0", "--repeats", "1", "--out", str(out),
                 *(["--bind-cores"] if bind else [])], cwd=REPO, capture_output=True, text=True, timeout=900)
    rec = json.loads((out / "records.jsonl").read_text().splitlines()[0]) if (out / "records.jsonl").exists() else {}
    if proc.returncode != 0 or rec.get("status") != "ok":
        sys.exit(f"compare run {framework}/{workload} failed ({proc.returncode}): {rec.get('reason')}\n{proc.stderr}")
    steps = sorted(rec["step_times_s"])
    WALL["harness"] = rec.get("timed_window_wall_s", 0.0) / len(steps)
    return rec["step_time_s"]["median"], steps[len(steps) // 10], rec["step_time_s"]["mean"], rec["cpu_s_per_step"]


class Stopped(Exception):
    """SIGTERM (a time box such as make gpu-check's) arrived: main() prints what the finished pairs measured."""


def _stopped(signum, _frame) -> None:
    raise Stopped(signal.Signals(signum).name)


def pairs(a, framework, workload, tmp, ratios, fast_ratios, mean_ratios, raws, harnesses, walls, tput, cpu) -> None:
    """a.pairs interleaved launches of each side (the raw script first in odd pairs), appending to the lists."""
    case = f"{framework}:{workload}"
    for i in range(a.pairs):
        order = ("raw", "harness") if i % 2 == 0 else ("harness", "raw")
        got = {}
        for side in order:
            got[side] = (run_raw if side == "raw" else run_harness)(framework, workload, tmp, a.bind_cores)
        (raw, raw_p10, raw_mean, raw_cpu), (har, har_p10, har_mean, har_cpu) = got["raw"], got["harness"]
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # a pair is recorded whole or not at all
        for side in ("raw", "harness"):  # samples/s as the harness gives it (schema 3): the window by the wall clock
            walls[side].append(1 / WALL[side])
        tput["raw"].append(1 / raw_mean)
        tput["harness"].append(1 / har_mean)
        cpu["raw"].append(raw_cpu)
        cpu["harness"].append(har_cpu)
        raws.append(raw)
        harnesses.append(har)
        ratios.append(raw / har)  # harness throughput / raw throughput, at the median step
        fast_ratios.append(raw_p10 / har_p10)  # the same at the 10th-percentile (fast, undisturbed) step
        mean_ratios.append(raw_mean / har_mean)  # the same over the whole run (samples / total step time)
        print(f"{case} pair {i + 1} ({order[0]} first): median step raw {raw * 1e3:.2f} ms, harness "
              f"{har * 1e3:.2f} ms, ratio {ratios[-1]:.3f}; p10 step ratio {fast_ratios[-1]:.3f}; mean step raw "
              f"{raw_mean * 1e3:.2f} ms, harness {har_mean * 1e3:.2f} ms, ratio {mean_ratios[-1]:.3f}",
              flush=True)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--steps", type=int, default=None,
                    help="Timed steps per run instead of the case's (digits 280: about one second, short enough for "
                         "the VM's drift to move a run's median by 30%%).")
    ap.add_argument("--bind-cores", action="store_true",
                    help="Both sides bind each rank to its own cores (the harness with --bind-cores, the raw script "
                         "by its own sched_setaffinity): less scheduler noise, the same work.")
    ap.add_argument("--cpu-rounds", type=int, default=0,
                    help="Also measure what each side costs the machine per timed step, independent of the VM's "
                         "scheduling noise: CPU time and context switches of the whole process tree, from a short "
                         "and a long run of each side (their difference divided by the steps between them), this "
                         "many rounds, alternating the order. 0: skip.")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: each GPU one rank over NCCL (the raw script torchvision's ResNet-50, the harness "
                         "-w resnet -o arch=resnet50); use with --cases ddp:resnet50")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="With --device cuda: bf16 autocast on both sides (the harness's amp:precision=bf16 row)")
    ap.add_argument("--global-batch", type=int, default=256,
                    help="With --device cuda: the global batch (ResNet-50's, or --llama's sequences)")
    ap.add_argument("--llama", default="layers=2,hidden=256,heads=4,kv_heads=2,intermediate=688,vocab=1024,seq_len=128",
                    help="The case ddp:llama's model: transformers' LlamaForCausalLM of this shape (every key "
                         "needed), the harness's `-w hf -o model=llama -o KEY=VALUE ...`; AdamW, as that workload")
    ap.add_argument("--cases", default="ddp:digits,horovod:digits,deepspeed:digits,ddp:widemlp,horovod:widemlp,"
                                       "deepspeed:widemlp")
    a = ap.parse_args()
    GPU.update(device=a.device, precision=a.precision, batch=a.global_batch, llama=a.llama)
    if a.steps:
        for w, (warm, _) in STEPS.items():
            STEPS[w] = (warm, a.steps)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
          f"{'; both sides bound to cores' if a.bind_cores else ''}")
    signal.signal(signal.SIGTERM, _stopped)
    summary, cpu_summary, stopped = [], [], None
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for case in a.cases.split(","):
            framework, workload = case.split(":")
            ratios, fast_ratios, mean_ratios, raws, harnesses = [], [], [], [], []
            walls = {"raw": [], "harness": []}  # samples/s by the wall clock over the timed window, per launch
            tput = {"raw": [], "harness": []}  # samples/s over the timed window (1 / mean step), per launch
            cpu = {"raw": [], "harness": []}  # CPU seconds per timed step per rank, per launch
            try:
                pairs(a, framework, workload, tmp, ratios, fast_ratios, mean_ratios, raws, harnesses, walls, tput,
                      cpu)
            except Stopped as e:  # a time box's SIGTERM: what the finished pairs measured is still printed
                stopped = f"stopped by {e} during pair {len(ratios) + 1} of {case}: the tables hold the pairs finished"
            if ratios:
                summary.append((case, statistics.median(raws), statistics.median(harnesses), ratios, fast_ratios,
                                mean_ratios, tput, cpu, walls))
            if stopped:
                break
            if a.cpu_rounds:
                cpu_summary.append((case, cpu_per_step(framework, workload, tmp, a.bind_cores, a.cpu_rounds)))
    if stopped:
        print(f"\n{stopped}")
    if summary:
        print("\ncase                 raw ms/step  harness ms/step  harness/raw throughput: at the median step   "
              "at the p10 step   over the run (mean step), each median [min-max] over pairs")
    for case, raw, har, ratios, fast, mean, _, _, _ in summary:
        print(f"{case:20s} {raw * 1e3:11.2f} {har * 1e3:16.2f}  {_spread(ratios):37s}{_spread(fast):20s}"
              f"{_spread(mean)}")
    if summary:
        # The verdict's statistics (harness/ground/stats.py): launches are the replicates, the ratio of geometric means
        # of samples/s over the timed window with a 95% interval on the log scale; the same for CPU per step. Each pair
        # runs raw and harness back to back, so a pair is a block: the paired interval (t on the differences of logs
        # within pairs) is the analysis; Welch's unpaired one is printed beside it.
        print(f"\ncase                 pairs  harness/raw samples/s, paired [95% interval]  unpaired (Welch)  "
              f"CPU per step harness/raw, paired  ({INTERVAL_METHOD})")
        def paired(side: dict[str, list[float]]) -> str:
            if not len(side["raw"]) == len(side["harness"]) >= 2:
                return "n/a (a pair lost one side)"
            return _interval(compare_pair(side["harness"], side["raw"], paired=True))

        for case, _, _, _, _, _, _, cpu, walls in summary:  # by the wall clock over the timed window, both sides
            print(f"{case:20s} {len(walls['raw']):5d}  {paired(walls):36s}  "
                  f"{_interval(ratio_interval(walls['harness'], walls['raw'])):24s}  {paired(cpu)}")
    if summary and GPU["device"] == "cuda":
        # On a GPU the summed step events leave out what falls between steps; both sides' timed windows by the
        # wall clock (synchronised at both ends) hold it: the harness/raw ratio of those is what a job would get.
        print("\ncase                 pairs  harness/raw samples/s by the wall clock over the timed window [95% "
              "interval]; the harness's step events / its own wall clock")
        for case, _, _, _, _, _, tput, _, walls in summary:
            print(f"{case:20s} {len(walls['raw']):5d}  {_interval(ratio_interval(walls['harness'], walls['raw'])):36s}"
                  f"  {_interval(ratio_interval(tput['harness'], walls['harness']))}")
    if cpu_summary:
        print("\ncase                 CPU ms per timed step: raw  harness  harness/raw    context switches per timed "
              "step: raw  harness")
        for case, c in cpu_summary:
            print(f"{case:20s} {c['raw'][0] * 1e3:27.3f} {c['harness'][0] * 1e3:8.3f} {c['harness'][0] / c['raw'][0]:12.4f}"
                  f" {c['raw'][1]:37.2f} {c['harness'][1]:8.2f}")


def cpu_per_step(framework: str, workload: str, tmp: Path, bind: bool, rounds: int) -> dict[str, tuple[float, float]]:
    """{side: (CPU seconds, context switches) per timed step}: the mean over `rounds` of (long run - short run) /
    (their difference in steps), for the same warm-up; every round runs the four in a different order."""
    short, long = CPU_STEPS[workload]
    warmup = STEPS[workload][0]
    runs = [(side, n) for n in (short, long) for side in ("raw", "harness")]
    got: dict[tuple[str, int], list[tuple[float, int]]] = {}
    saved = STEPS[workload]
    try:
        for r in range(rounds):
            for side, n in (runs if r % 2 == 0 else runs[::-1]):
                STEPS[workload] = (warmup, n)
                (run_raw if side == "raw" else run_harness)(framework, workload, tmp, bind)
                got.setdefault((side, n), []).append((COUNTED["cpu_s"], COUNTED["switches"]))
                print(f"{framework}:{workload} {side} {n} timed steps: {COUNTED['cpu_s']:.2f} s of CPU, "
                      f"{COUNTED['switches']} context switches", flush=True)
    finally:
        STEPS[workload] = saved
    out = {}
    for side in ("raw", "harness"):
        per = [((lc - sc) / (long - short), (lw - sw) / (long - short))
               for (lc, lw), (sc, sw) in zip(got[(side, long)], got[(side, short)])]
        out[side] = (statistics.mean(c for c, _ in per), statistics.mean(w for _, w in per))
    return out


def _interval(r: dict) -> str:
    if r["lo"] is None:
        return f"{r['estimate']:.3f} (fewer than 3 pairs: no interval)"
    return f"{r['estimate']:.3f} [{r['lo']:.3f}-{r['hi']:.3f}]"


def _spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} [{min(xs):.3f}-{max(xs):.3f}]"


if __name__ == "__main__":
    main()
