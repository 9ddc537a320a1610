"""Every bad input of every subcommand: one line naming the problem and the valid choices, exit code 2, no
traceback, nothing written.

One table (`CASES`) covers run (on one host and across hosts), comm, sbatch, scale, report, index, list, plan and
doctor; the CLI runs in process through typer's CliRunner
(the console script itself is exercised in test_layout.py).
"""

import json
import shutil
import socket
from pathlib import Path

import pytest

from harness.ground.record import read_records, records_file
import torch
from typer.testing import CliRunner

import adapters
import workloads
from harness.cli import app
from harness.ground.provenance import memory_total_bytes, usable_cores
from harness.core.checks import unavailable_message
from harness.ground.sizes import format_mib
from harness.model import hardware, planner, shapes
from harness.shared import collectives

from conftest import RUNS, records_text

CORES = usable_cores()
GPUS = ", ".join(planner.gpu_choices())
SEQ_LEN_0 = f"--seq-len must be from 1 to 1e7 ({shapes.BOUNDS['--seq-len'].why}), got 0"
DDP_KNOBS = ("broadcast_buffers, bucket_cap_mb, comm_hook, compile, find_unused_parameters, gradient_as_bucket_view, "
             "powersgd_rank, powersgd_start_iter, powersgd_warm_start, static_graph, sync_bn")
ADAPTERS = ", ".join(adapters.names())
WORKLOADS = ", ".join(workloads.names()) + ("; or your own: -w path/to/file.py:NAME, -w package.module:NAME "
                                              "(docs/your-model.md)")
OPS = ", ".join(collectives.OPS)
BACKENDS = ", ".join(adapters.comm_backends())
PROFILES = ", ".join(hardware.profiles())
HERE = socket.gethostname()
IFACES = ", ".join(sorted(name for _, name in socket.if_nameindex()))
MALFORMED_HOSTFILE = Path(__file__).parent / "hostfiles" / "malformed"
DP_ACROSS_HOSTS = ("no adapter can run here: torch.nn.DataParallel drives the devices of one process on one machine, "
                   "so it cannot run on other hosts or span several; see `compare list --device cpu --world-size 2` "
                   "for the reasons and fixes")


@pytest.fixture(autouse=True)
def _network_answers(tmp_path, monkeypatch):
    """An `ssh` first on PATH that answers as the network would: `goodhost` is reachable, every other host is
    unknown (a real unknown host across the simulated cluster: tests/distributed/test_simhosts.py). And no SLURM
    allocation around the tests."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text('#!/bin/sh\nwhile [ "${1#-}" != "$1" ]; do shift 2; done\n'
                                 'if [ "$1" = goodhost ]; then echo boot-of-goodhost; echo 2; exit 0; fi\n'
                                 'echo "ssh: Could not resolve hostname $1: Name or service not known" >&2; exit 255\n')
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


# (id, argv after the subcommand with {out} for the output directory, the whole expected error line)
BY_ANY = "give a directory written by `compare run`, `compare scale`, `compare comm` or `compare tune`"
"""What `compare report` says of a directory that is not results: it renders the results of every command."""

CASES = [
    # ---- run ------------------------------------------------------------------------------------------------
    ("run-unknown-adapter", ["run", "-a", "ddp,horovd"], f"unknown adapter 'horovd'; valid choices: {ADAPTERS}"),
    ("run-unknown-workload", ["run", "-w", "imagenet"], f"unknown workload 'imagenet'; valid choices: {WORKLOADS}"),
    ("run-world-size-0", ["run", "-n", "0"], "world size must be at least 1, got 0"),
    ("run-world-size-negative", ["run", "-n", "-1"], "world size must be at least 1, got -1"),
    ("run-unknown-device", ["run", "--device", "tpu"], "unknown device 'tpu'; valid choices: cpu, cuda"),
    ("run-batch-indivisible", ["run", "--global-batch", "63", "-n", "2"],
     "global batch 63 is not divisible by world size 2; choose a --global-batch that is a multiple of 2"),
    ("run-batch-0", ["run", "--global-batch", "0"], "--global-batch must be at least 1, got 0"),
    ("run-batch-negative", ["run", "--global-batch", "-64"], "--global-batch must be at least 1, got -64"),
    ("run-clip-0", ["run", "--max-grad-norm", "0"],
     "--max-grad-norm must be a positive number (the global gradient norm clipped to), got 0"),
    ("run-clip-nan", ["run", "--max-grad-norm", "nan"],
     "--max-grad-norm must be a positive number (the global gradient norm clipped to), got nan"),
    ("run-batch-above-train-set", ["run", "--global-batch", "2048"],
     "global batch 2048 is larger than workload digits's training set (1437 samples); choose a --global-batch of "
     "at most 1437"),
    ("run-steps-0", ["run", "--steps", "0"], "--steps must be at least 1, got 0"),
    ("run-warmup-negative", ["run", "--warmup", "-1"], "--warmup must be at least 0, got -1"),
    ("run-equiv-negative", ["run", "--equiv-steps", "-2"], "--equiv-steps must be at least 0, got -2"),
    ("run-breakdown-steps-zero", ["run", "--breakdown", "--breakdown-steps", "0"],
     "--breakdown-steps must be between 1 and 1000 (the profiler holds every event of the profiled steps in memory "
     "until they are split), got 0"),
    ("run-breakdown-steps-huge", ["run", "--trace", "--breakdown-steps", "5000"],
     "--breakdown-steps must be between 1 and 1000 (the profiler holds every event of the profiled steps in memory "
     "until they are split), got 5000"),
    # selective:N beyond the blocks checkpoints none, priced as none and labelled checkpointing; an empty N was op
    ("plan-selective-beyond-the-blocks", ["plan", "--params", "7e9", "--layers", "32", "--hidden", "4096",
                                          "--checkpointing", "selective:64"],
     "--checkpointing selective:64: N is more than the model's 32 blocks, so no block would be checkpointed (the "
     "same as none); choose N of at most 32"),
    ("plan-selective-empty-n", ["plan", "-w", "widemlp", "--checkpointing", "selective:"],
     "--checkpointing selective:: N must be a whole number of at least 1 (every Nth block checkpointed, torchtitan's "
     "selective_ac_option), or op for its per-op policy"),
    # issue 64: a Hugging Face model's shape options bounded as `compare plan --layers` is (layers=1000000 planned
    # silently for 300 s), and a sequence too long for the text named as such (not "the training set has 4 samples")
    ("plan-hf-layers-huge", ["plan", "-w", "hf", "-o", "model=llama-70b", "-o", "layers=1000000"],
     "workload hf: option 'layers' must be at most 1,000 (DeepNet's 1,000 blocks, Wang et al. 2022: the deepest "
     "transformer trained; as `compare plan --layers`); got 1000000"),
    ("run-hf-hidden-huge", ["run", "-w", "hf", "-o", "hidden=1000000", "-a", "ddp"],
     "workload hf: option 'hidden' must be at most 65,536 (three times the widest published, MT-NLG 530B's 20,480; "
     "as `compare plan --hidden`); got 1000000"),
    ("run-hf-seq-len-too-long", ["run", "-w", "hf", "-o", "seq_len=100000", "-a", "ddp"],
     "workload hf: option 'seq_len' must be at most 46,627: the text (CPython's help, 466,273 bytes) keeps 46,628 "
     "bytes held out for evaluation, and a window needs seq_len + 1 of them (its next byte); got 100000"),
    # issue 64: a world size the machine cannot run is named as that, not as the batch or buffer it sets a floor on
    ("run-world-size-10000", ["run", "-n", "10000"],
     f"world size 10000 needs 10000 processes but this machine has {CORES} usable cores; use --world-size {CORES} or "
     f"fewer, or --oversubscribe to run it anyway (every row is then labelled oversubscribed)"),
    ("comm-world-size-10000", ["comm", "-n", "10000"],
     f"world size 10000 needs 10000 processes but this machine has {CORES} usable cores; use --world-size {CORES} or "
     f"fewer, or --oversubscribe to run it anyway (every row is then labelled oversubscribed)"),
    ("scale-world-size-99", ["scale", "--world-sizes", "99"],
     f"world size 99 needs 99 processes but this machine has {CORES} usable cores; use --world-sizes up to {CORES}, "
     f"or --oversubscribe to run it anyway (every row is then labelled oversubscribed)"),
    ("run-equiv-beyond-run", ["run", "--steps", "5", "--warmup", "1", "--equiv-steps", "7"],
     "--equiv-steps 7 is more than the 1 + 5 steps the run takes"),
    ("run-repeats-0", ["run", "--repeats", "0"], "repeats must be at least 1, got 0"),
    ("run-knob-conflict", ["run", "-a", "ddp:bucket_cap_mb=1", "--knob", "ddp.bucket_cap_mb=2"],
     "knob bucket_cap_mb of ddp:bucket_cap_mb=1 is given twice with different values: 1 in the row and 2 in --knob "
     "ddp.bucket_cap_mb; give it once"),
    ("run-repeats-huge", ["run", "--repeats", "99999999999999999999"],
     "repeats must be at most 1000, got 99999999999999999999"),
    ("run-steps-huge", ["run", "--steps", "99999999999999999999"],
     "--steps must be at most 10,000,000 steps, got 99999999999999999999"),
    ("run-warmup-huge", ["run", "--warmup", "9223372036854775807"],
     "--warmup must be at most 10,000,000 steps, got 9223372036854775807"),
    ("run-ttt-max-steps-huge", ["run", "--until-target", "--max-steps", "99999999999999999999"],
     "--max-steps must be at most 10,000,000 steps, got 99999999999999999999"),
    ("scale-repeats-huge", ["scale", "--repeats", "5000"], "repeats must be at most 1000, got 5000"),
    ("run-threads-0", ["run", "--threads", "0"], "threads must be at least 1, got 0"),
    ("run-threads-huge", ["run", "-a", "dp", "--threads", "99999999999999999999", "--oversubscribe"],
     "threads must be at most 4096 (more than any machine's cores), got 99999999999999999999"),
    ("run-threads-oversubscribe", ["run", "-a", "ddp", "--threads", str(CORES)],
     f"world size 2 x --threads {CORES} needs {2 * CORES} cores but this machine has {CORES} usable cores; use "
     f"--threads {max(1, CORES // 2)} or fewer, or --oversubscribe to run it anyway (every row is then labelled "
     f"oversubscribed)"),
    ("run-knob-twice-in-a-row", ["run", "-a", "ddp:bucket_cap_mb=1:bucket_cap_mb=2"],
     "adapter row 'ddp:bucket_cap_mb=1:bucket_cap_mb=2': knob 'bucket_cap_mb' given twice"),
    ("run-knob-twice", ["run", "-a", "ddp", "-k", "ddp.bucket_cap_mb=1", "-k", "ddp.bucket_cap_mb=2"],
     "knob 'ddp.bucket_cap_mb' given twice"),
    ("run-image-size-huge", ["run", "-a", "ddp", "-w", "resnet", "-o", "image_size=99999999999999"],
     "workload resnet: option 'image_size' must be at most 4096 (one 3x4096x4096 fp32 image is 192 MiB); got "
     "99999999999999"),
    ("run-option-twice", ["run", "-a", "ddp", "-o", "hidden=8", "-o", "hidden=16"], "option 'hidden' given twice"),
    ("run-empty-knob", ["run", "-a", "ddp:"],
     "adapter row 'ddp:': '' is not KNOB=VALUE (form: ADAPTER:KNOB=VALUE:...); valid knobs of ddp: "
     f"{DDP_KNOBS}"),
    ("run-unknown-adapter-with-knobs", ["run", "-a", "horovd:fusion=1"],
     f"unknown adapter 'horovd'; valid choices: {ADAPTERS}"),
    ("run-out-too-long", ["run", "-a", "ddp", "--out", "/tmp/" + "a" * 300],
     f"output path /tmp/{'a' * 300} cannot be used: File name too long"),
    ("run-out-not-utf8", ["run", "-a", "ddp", "--out", __import__("os").fsdecode(b"/tmp/compare-\xff\xfe")],
     "output path /tmp/compare-\\xff\\xfe is not a UTF-8 name; choose another --out (reports name their directory "
     "in UTF-8 text)"),
    ("run-timeout-0", ["run", "--timeout", "0"],
     "--timeout must be a positive number of seconds, got 0"),
    ("run-timeout-negative", ["run", "--timeout", "-5"],
     "--timeout must be a positive number of seconds, got -5"),
    ("run-stall-negative", ["run", "--stall-timeout", "-1"],
     "--stall-timeout must be a number of seconds, at least 0 (0: never), got -1"),
    ("run-empty-out", ["run", "--out", ""],
     "--out is empty; give a directory, or leave --out out for results/<name>_<hardware>_<time>"),
    ("run-oversubscribed", ["run", "-a", "ddp", "-n", str(CORES + 1), "--global-batch", str(16 * (CORES + 1))],
     f"world size {CORES + 1} needs {CORES + 1} processes but this machine has {CORES} usable cores; use "
     f"--world-size {CORES} or fewer, or --oversubscribe to run it anyway (every row is then labelled "
     f"oversubscribed)"),
    ("run-unknown-knob", ["run", "-a", "ddp", "-k", "ddp.bucket=3"],
     f"adapter ddp: unknown knob 'bucket'; valid knobs: {DDP_KNOBS}"),
    ("run-knob-type", ["run", "-a", "ddp:bucket_cap_mb=big"],
     "adapter ddp:bucket_cap_mb=big: knob 'bucket_cap_mb' expects a number or none (the framework's default), got "
     "'big'"),
    # DDP itself accepts any bucket cap (a negative one silently gives every gradient its own bucket), GradScaler
    # any initial scale; nan and inf mean nothing for any knob or option
    ("run-knob-negative-bucket", ["run", "-a", "spawn:bucket_cap_mb=-1"],
     "adapter spawn:bucket_cap_mb=-1: knob 'bucket_cap_mb' must be a positive number of MiB (DDP's default: 25); "
     "got -1"),
    ("run-knob-zero-init-scale", ["run", "-a", "amp:init_scale=0"],
     "adapter amp:init_scale=0: knob 'init_scale' must be a positive loss scale (GradScaler's default: 65536); "
     "got 0"),
    ("run-knob-inf", ["run", "-a", "ddp:bucket_cap_mb=inf"],
     "adapter ddp:bucket_cap_mb=inf: knob 'bucket_cap_mb' expects a finite number, got 'inf'"),
    ("run-knob-nan", ["run", "-a", "horovod:cycle_time_ms=nan"],
     "adapter horovod:cycle_time_ms=nan: knob 'cycle_time_ms' expects a finite number, got 'nan'"),
    ("run-knob-underflow", ["run", "-a", "amp:init_scale=1e-400"],
     "adapter amp:init_scale=1e-400: knob 'init_scale' is too small to hold: '1e-400' reads as 0 in a double (the "
     "smallest is about 5e-324)"),
    # click's own usage errors, as one line too
    ("cli-unknown-command", ["bench"],
     "No such command 'bench'; valid commands: run, sbatch, scale, tune, predict, plan, comm, report, diff, join, index, list, knobs, doctor, env"),
    ("cli-missing-argument", ["report"], "Missing argument 'directory' (see `compare report --help`)"),
    ("cli-not-an-integer", ["run", "--steps", "many"],
     "Invalid value for '--steps': Input should be a valid integer, unable to parse string as an integer (see "
     "`compare run --help`)"),
    ("run-knob-choice", ["run", "-a", "deepspeed:zero_stage=4"],
     "adapter deepspeed:zero_stage=4: knob 'zero_stage' must be 0, 1, 2 or 3; got '4'"),
    ("run-bad-variant", ["run", "-a", "ddp:bucket_cap_mb"],
     "adapter row 'ddp:bucket_cap_mb': 'bucket_cap_mb' is not KNOB=VALUE (form: ADAPTER:KNOB=VALUE:...); valid knobs "
     f"of ddp: {DDP_KNOBS}"),
    ("run-knob-for-absent-adapter", ["run", "-a", "ddp", "-k", "spawn.bucket_cap_mb=3"],
     "knob 'spawn.bucket_cap_mb' is for adapter 'spawn', which is not in this run (ddp)"),
    ("run-knob-without-adapter", ["run", "-a", "ddp", "-k", "bucket_cap_mb=3"],
     "knob 'bucket_cap_mb' must be ADAPTER.KNOB=VALUE, e.g. ddp.bucket_cap_mb=50"),
    ("run-knob-not-pair", ["run", "-a", "ddp", "-k", "ddp.bucket_cap_mb"], "knob 'ddp.bucket_cap_mb' is not ADAPTER.KNOB=VALUE, e.g. ddp.bucket_cap_mb=50"),
    # a knob value this device cannot run is an unavailable row, as a framework not installed (the other rows run);
    # alone it leaves no row to run
    ("run-fp16-amp-on-cpu", ["run", "-a", "amp:precision=fp16"],
     "no adapter can run here: knob 'precision' fp16 needs CUDA here; use bf16 on CPU"),
    ("run-fp16-amp-on-cpu-strict", ["run", "-a", "amp:precision=fp16", "--strict"],
     "adapter 'amp:precision=fp16' cannot run here: knob 'precision' fp16 needs CUDA here; use bf16 on CPU"),
    ("run-duplicate-adapter", ["run", "-a", "ddp,ddp"], "adapter 'ddp' listed twice"),
    # an unknown name given twice is unknown, with the choices (it was told "listed twice")
    ("run-duplicate-unknown-adapter", ["run", "-a", "nosuch,nosuch"],
     "unknown adapter 'nosuch'; valid choices: dp, ddp, spawn, amp, apex, horovod, deepspeed, fsdp"),
    ("run-empty-adapters", ["run", "-a", ","], f"no adapters given; valid choices: {ADAPTERS}"),
    ("run-bad-option", ["run", "-w", "resnet", "-o", "arch=vgg16"],
     "workload resnet: option 'arch' must be resnet18, resnet34 or resnet50; got 'vgg16'"),
    ("run-option-type", ["run", "-o", "hidden=wide"], "workload digits: option 'hidden' expects an int, got 'wide'"),
    ("run-option-range", ["run", "-o", "hidden=0"], "workload digits: option 'hidden' must be at least 1; got 0"),
    ("run-option-not-pair", ["run", "-o", "hidden"], "option 'hidden' is not KEY=VALUE"),
    # ---- run --until-target ---------------------------------------------------------------------------------
    ("run-ttt-no-target", ["run", "--until-target", "-w", "widemlp"],
     "workload widemlp has no accuracy target, so it cannot be trained until one; workloads with a target: digits, "
     "tinygpt"),
    ("run-ttt-eval-every-0", ["run", "--until-target", "--eval-every", "0"], "--eval-every must be at least 1, got 0"),
    ("run-ttt-eval-every-negative", ["run", "--until-target", "--eval-every", "-5"],
     "--eval-every must be at least 1, got -5"),
    ("run-ttt-max-steps-0", ["run", "--until-target", "--max-steps", "0"], "--max-steps must be at least 1, got 0"),
    ("run-ttt-max-steps-negative", ["run", "--until-target", "--max-steps", "-100"],
     "--max-steps must be at least 1, got -100"),
    ("run-eval-every-without-ttt", ["run", "--eval-every", "10"],
     "--eval-every only applies with --until-target; add --until-target, or leave --eval-every out"),
    # options that would do nothing in the combination given, refused as their siblings are (they were ignored)
    ("run-breakdown-steps-without-breakdown", ["run", "--breakdown-steps", "7"],
     "--breakdown-steps only applies with --breakdown (or --trace); add --breakdown, or leave --breakdown-steps out"),
    ("scale-no-model-profile", ["scale", "-a", "ddp", "--no-model", "--profile", "h100-sxm-ndr400"],
     "--profile sets the hardware the model extrapolates to, which --no-model skips; leave one out"),
    ("scale-no-model-predict-to", ["scale", "-a", "ddp", "--no-model", "--predict-to", "64"],
     "--predict-to sets the largest world size the model predicts, which --no-model skips; leave one out"),
    ("predict-list-with-directory-and-to", ["predict", "--list", "somedir", "--to", "8"],
     "DIRECTORY and --to are skipped by --list, which only lists the hardware profiles; leave one out"),
    ("predict-list-with-profile", ["predict", "--list", "--profile", "gloo-40gbe"],
     "--profile is skipped by --list, which only lists the hardware profiles; leave one out"),
    ("run-max-steps-without-ttt", ["run", "--max-steps", "100"],
     "--max-steps only applies with --until-target; add --until-target, or leave --max-steps out"),
    ("run-ttt-with-steps", ["run", "--until-target", "--steps", "100"],
     "--steps sets the length of a fixed-length run, but an --until-target run lasts until the target or the step "
     "budget; use --max-steps for the budget"),
    ("run-ttt-with-warmup", ["run", "--until-target", "--warmup", "5"],
     "--until-target counts every step from the first as training (no warm-up is discarded); leave --warmup out"),
    ("run-ttt-eval-beyond-budget", ["run", "--until-target", "--eval-every", "50", "--max-steps", "20"],
     "--eval-every 50 is more than the 20-step budget, so the target would be checked only once, after the last "
     "step; choose --eval-every of at most 20 or a larger --max-steps"),
    ("run-ttt-equiv-beyond-budget", ["run", "--until-target", "--eval-every", "5", "--max-steps", "5",
                                     "--equiv-steps", "10"],
     "--equiv-steps 10 is more than the 5-step budget (--max-steps)"),
    # ---- run across hosts -------------------------------------------------------------------------------------
    ("run-hosts-with-dp", ["run", "-a", "dp", "--hosts", "h1:1,h2:1"], DP_ACROSS_HOSTS),
    ("run-hosts-slots-not-world-size", ["run", "-a", "ddp", "--hosts", "h1:1,h2:1", "-n", "4"],
     "--hosts gives 2 slots (h1:1, h2:1) but --world-size is 4; leave --world-size out, or make the slots add up "
     "to it"),
    ("run-hostfile-malformed", ["run", "--hostfile", str(MALFORMED_HOSTFILE)],
     f"{MALFORMED_HOSTFILE}:3: 'h2 slots=two' is not `HOST slots=N` with N at least 1"),
    ("run-hostfile-missing", ["run", "--hostfile", "/nonexistent-hostfile"],
     "--hostfile /nonexistent-hostfile: cannot read it (No such file or directory)"),
    ("run-hostfile-empty", ["run", "--hostfile", "/dev/null"],
     "--hostfile /dev/null names no host (lines are `HOST slots=N`)"),
    ("run-hosts-and-hostfile", ["run", "--hosts", "h1:1", "--hostfile", "/dev/null"],
     "give --hosts or --hostfile, not both"),
    ("run-hosts-bad-slots", ["run", "--hosts", "h1:x,h2:1"],
     "--hosts entry 'h1:x': the slots must be a whole number of at least 1 (HOST:SLOTS, e.g. h1:2)"),
    ("run-hosts-zero-slots", ["run", "--hosts", "h1:0"],
     "--hosts entry 'h1:0': the slots must be a whole number of at least 1 (HOST:SLOTS, e.g. h1:2)"),
    ("run-hosts-empty-entry", ["run", "--hosts", "h1:1,,h2:1"],
     "--hosts 'h1:1,,h2:1' has an empty entry; use HOST:SLOTS,HOST:SLOTS, e.g. h1:2,h2:2"),
    ("run-hosts-bad-name", ["run", "--hosts", "h1:1,h$2:1"], "--hosts: 'h$2' is not a host name"),
    ("run-hosts-twice", ["run", "--hosts", "h1:1,h2:1,h1:2"],
     "--hosts lists host h1 twice; give it once with all its slots (h1:3)"),
    ("run-nnodes-beyond-hosts", ["run", "--hosts", "h1:1,h2:1", "--nnodes", "3"],
     "--nnodes 3 but --hosts gives only 2 host(s) (h1, h2)"),
    ("run-nnodes-0", ["run", "--hosts", "h1:1,h2:1", "--nnodes", "0"], "--nnodes must be at least 1, got 0"),
    ("run-nnodes-without-hosts", ["run", "--nnodes", "2"],
     "--nnodes picks the first nodes of --hosts, --hostfile or a SLURM allocation (--launcher slurm); give one of "
     "them"),
    ("run-localhost-beside-remote-hosts", ["run", "--hosts", "localhost:1,h2:1"],
     f"localhost means this machine, which h2 cannot reach by that name; name this machine by its hostname "
     f"({HERE}) in --hosts"),
    ("run-unknown-interface-here", ["run", "-a", "ddp", "--hosts", "127.0.0.1:1,localhost:1", "--iface", "nosuch0"],
     f"--iface nosuch0: this machine has no such interface ({IFACES})"),
    ("run-bad-interface-name", ["run", "--hosts", "h1:1,h2:1", "--iface", "eth 0"],
     "--iface 'eth 0' is not a network interface name"),
    ("run-iface-on-one-host", ["run", "--iface", "eth0"],
     "--iface chooses the network between hosts (with --hosts, --hostfile or --launcher slurm); ranks on one host "
     "talk over loopback (lo)"),
    ("run-unknown-host", ["run", "-a", "ddp", "--hosts", "goodhost:1,nosuchhost:1"],
     "host nosuchhost is unreachable: ssh: Could not resolve hostname nosuchhost: Name or service not known "
     "(checked with `ssh -o BatchMode=yes -o ConnectTimeout=5 nosuchhost ...`)"),
    ("run-unknown-launcher", ["run", "--hosts", "h1:1,h2:1", "--launcher", "mpirun"],
     "unknown launcher 'mpirun'; valid choices: ssh, slurm"),
    ("run-slurm-outside-an-allocation", ["run", "--launcher", "slurm"],
     "--launcher slurm runs inside a SLURM allocation and there is none here (no SLURM_JOB_ID): run it under "
     "`salloc -N 2 --ntasks-per-node=1 ...`, or in an sbatch script (`compare sbatch ... --nodes 2 "
     "--ntasks-per-node 1` writes one)"),
    ("run-slurm-with-hosts", ["run", "--launcher", "slurm", "--hosts", "h1:1,h2:1"],
     "--launcher slurm takes the hosts from the SLURM allocation; leave --hosts out (--nnodes N uses the first N "
     "nodes of the allocation)"),
    ("comm-hosts-slots-not-world-size", ["comm", "--hosts", "h1:1,h2:1", "-n", "3"],
     "--hosts gives 2 slots (h1:1, h2:1) but --world-size is 3; leave --world-size out, or make the slots add up "
     "to it"),
    ("comm-one-slot-across-hosts", ["comm", "--hosts", "h1:1"], "world size must be at least 2 for communication, got 1"),
    ("comm-unknown-host", ["comm", "--backends", "torch", "--hosts", "goodhost:1,nosuchhost:1"],
     "host nosuchhost is unreachable: ssh: Could not resolve hostname nosuchhost: Name or service not known "
     "(checked with `ssh -o BatchMode=yes -o ConnectTimeout=5 nosuchhost ...`)"),
    ("comm-slurm-outside-an-allocation", ["comm", "--launcher", "slurm"],
     "--launcher slurm runs inside a SLURM allocation and there is none here (no SLURM_JOB_ID): run it under "
     "`salloc -N 2 --ntasks-per-node=1 ...`, or in an sbatch script (`compare sbatch ... --nodes 2 "
     "--ntasks-per-node 1` writes one)"),
    # ---- sbatch ---------------------------------------------------------------------------------------------
    ("sbatch-without-shape", ["sbatch", "-a", "ddp"],
     "compare sbatch needs the allocation's shape: --nodes N --ntasks-per-node K (ranks per node)"),
    ("sbatch-nodes-0", ["sbatch", "--nodes", "0", "--ntasks-per-node", "1"], "--nodes must be at least 1, got 0"),
    ("sbatch-bad-time", ["sbatch", "--nodes", "2", "--ntasks-per-node", "1", "--time", "1h"],
     "--time '1h' is not a SLURM time limit (MM, HH:MM:SS or D-HH:MM:SS, e.g. 00:30:00)"),
    ("sbatch-world-size-disagrees", ["sbatch", "--nodes", "2", "--ntasks-per-node", "2", "-n", "2"],
     "--nodes 2 x --ntasks-per-node 2 gives 4 ranks but --world-size is 2; leave --world-size out, or make them "
     "agree"),
    ("sbatch-dp", ["sbatch", "-a", "dp", "--nodes", "2", "--ntasks-per-node", "1"], DP_ACROSS_HOSTS),
    ("sbatch-unknown-adapter", ["sbatch", "-a", "horovd", "--nodes", "2", "--ntasks-per-node", "1"],
     f"unknown adapter 'horovd'; valid choices: {ADAPTERS}"),
    ("sbatch-nodes-beyond-the-batch", ["sbatch", "-a", "ddp", "--nodes", "99999999999999999999",
                                       "--ntasks-per-node", "1"],
     "--nodes 99999999999999999999 x --ntasks-per-node 1 gives 99999999999999999999 ranks, more than the global "
     "batch of 64 samples (every rank needs at least one); choose fewer ranks or a larger --global-batch"),
    ("sbatch-batch-indivisible", ["sbatch", "-a", "ddp", "--nodes", "3", "--ntasks-per-node", "1"],
     "global batch 64 is not divisible by world size 3; choose a --global-batch that is a multiple of 3"),
    # ---- comm -----------------------------------------------------------------------------------------------
    ("comm-unknown-op", ["comm", "--ops", "allreduce"], f"unknown op 'allreduce'; valid choices: {OPS}"),
    ("comm-duplicate-op", ["comm", "--ops", "all_reduce,all_reduce"], "op 'all_reduce' listed twice"),
    ("comm-unknown-backend-beside-a-known-one", ["comm", "--backends", "torch,ddp"],
     "unknown backend 'ddp'; valid choices: torch, horovod, deepspeed"),
    ("comm-empty-ops", ["comm", "--ops", ","], f"no ops given; valid choices: {OPS}"),
    ("comm-unknown-backend", ["comm", "--backends", "mpi"], f"unknown backend 'mpi'; valid choices: {BACKENDS}"),
    ("comm-world-size-1", ["comm", "-n", "1"], "world size must be at least 2 for communication, got 1"),
    ("comm-oversubscribed", ["comm", "--backends", "torch", "-n", str(max(2, CORES + 1))],
     f"world size {max(2, CORES + 1)} needs {max(2, CORES + 1)} processes but this machine has {CORES} usable "
     f"cores; use --world-size {CORES} or fewer, or --oversubscribe to run it anyway (every row is then labelled "
     f"oversubscribed)"),
    ("comm-unknown-dtype", ["comm", "--dtype", "int8"], "unknown dtype 'int8'; valid choices: fp32, fp16, bf16, fp64"),
    ("comm-bad-size", ["comm", "--sizes", "big"], "size 'big' is not a byte count such as 4096, 1K, 64M or 1G"),
    ("comm-zero-size", ["comm", "--sizes", "0"], "size '0' must be at least 1 byte"),
    ("comm-bad-range", ["comm", "--sizes", "1M:1K"], "size range '1M:1K' must go from a positive size up"),
    ("comm-iters-0", ["comm", "--iters", "0"], "--iters must be at least 1, got 0"),
    ("comm-iters-huge", ["comm", "--iters", "99999999999999999999"],
     "--iters must be at most 1,000,000, got 99999999999999999999"),
    ("comm-size-below-an-element", ["comm", "--sizes", "3,1K"],
     "size 3B is less than one fp32 element per rank (8 bytes at 2 ranks); choose --sizes of at least 8"),
    ("comm-empty-size", ["comm", "--sizes", "1K,,4K"],
     "an empty size in '1K,,4K' (two commas in a row, or one at an end); e.g. 4K,1M"),
    ("comm-empty-backend", ["comm", "--backends", "torch,,horovod"],
     f"an empty backend in 'torch,,horovod' (two commas in a row, or one at an end); valid choices: {BACKENDS}"),
    ("run-empty-adapter", ["run", "-a", "ddp,,horovod"],
     "an empty adapter in 'ddp,,horovod' (two commas in a row, or one at an end); valid choices: "
     + ", ".join(__import__("adapters").names())),
    ("scale-empty-world-size", ["scale", "--world-sizes", "1,,2"],
     "an empty world size in --world-sizes 1,,2 (two commas in a row, or one at an end); e.g. --world-sizes 1,2,4"),
    ("comm-sizes-timed-alike", ["comm", "--sizes", "9,10,11"],
     "sizes 9B, 10B, 11B would all be timed as 8B (whole fp32 elements, a multiple of 2 ranks); give sizes at "
     "least 8 bytes apart"),
    ("run-out-with-a-newline", ["run", "-a", "dp", "--out", "/tmp/compare-probe/a\nb"],
     "output path '/tmp/compare-probe/a\\nb' holds a control character ('\\n'); choose another --out (a report "
     "names its directory on one line)"),
    ("sbatch-out-with-a-newline", ["sbatch", "--nodes", "2", "--ntasks-per-node", "1", "--out",
                                   "/tmp/x\ntouch /tmp/compare-pwned #"],
     "output path '/tmp/x\\ntouch /tmp/compare-pwned #' holds a control character ('\\n'); choose another --out "
     "(a report names its directory on one line)"),
    # an empty path ('') used to become '.', the current directory, with messages about '.'
    ("report-empty-path", ["report", ""], "Invalid value for 'directory': an empty path ('') (see `compare report "
                                          "--help`)"),
    ("predict-empty-path", ["predict", ""], "Invalid value for 'DIRECTORY': an empty path ('') (see `compare "
                                            "predict --help`)"),
    ("index-empty-path", ["index", ""], "Invalid value for 'directory': an empty path ('') (see `compare index "
                                        "--help`)"),
    ("sbatch-empty-script", ["sbatch", "--nodes", "1", "--ntasks-per-node", "1", "--script", ""],
     "Invalid value for '--script': an empty path ('') (see `compare sbatch --help`)"),
    ("run-empty-hostfile", ["run", "--hostfile", ""], "Invalid value for '--hostfile': an empty path ('') (see "
                                                      "`compare run --help`)"),
    ("scale-empty-comm", ["scale", "--comm", ""], "Invalid value for '--comm': an empty path ('') (see `compare "
                                                  "scale --help`)"),
    # a knob that can never be right is refused even where its adapter cannot run (apex: no CUDA here); it used
    # to pass as an `unavailable` row, the bad value never mentioned
    ("run-unavailable-adapter-bad-knob", ["run", "-a", "ddp,apex:opt_level=O4"],
     "adapter apex:opt_level=O4: knob 'opt_level' must be O0, O1, O2 or O3 (the letter O); got 'O4'"),
    ("run-same-row-spelled-twice", ["run", "-a", "ddp:bucket_cap_mb=1,ddp:bucket_cap_mb=1.0"],
     "adapters ddp:bucket_cap_mb=1 and ddp:bucket_cap_mb=1.0 are the same row (the same knobs, spelled "
     "differently); give it once"),
    # a model that cannot fit: it used to fail at launch, out of memory (counted on torch's meta device)
    ("run-workload-cannot-be-built", ["run", "-a", "ddp", "-o", "hidden=99999999999"],
     "workload digits (hidden=99999999999) cannot be built: Storage size calculation overflowed with "
     "sizes=[99999999999, 99999999999]; choose smaller workload options"),
    ("run-workload-too-large", ["run", "-a", "ddp", "-o", "hidden=300000"],
     f"workload digits (hidden=300000) has 90,022,800,010 parameters: their fp32 values, gradients and one optimizer "
     f"buffer alone take {12 * 90_022_800_010 * 2 / 2**30:,.1f} GiB for 2 rank(s), more than this machine's "
     f"{memory_total_bytes() / 2**30:,.1f} GiB; choose smaller workload options"),
    # digits of other scripts (int() takes "１" as 1) and control characters in a value, shown escaped
    ("comm-size-full-width", ["comm", "--sizes", "１K"], "size '１K' is not a byte count such as 4096, 1K, 64M or 1G"),
    ("run-option-full-width", ["run", "-o", "hidden=１２８"],
     "workload digits: option 'hidden' expects an int, got '１２８'"),
    ("run-option-with-a-newline", ["run", "-o", "hidden=64\ntouch"],
     "workload digits: option 'hidden' expects an int, got '64\\ntouch'"),
    # a row's environment value on two lines split the report's table rows and named a log file with a newline
    ("run-env-value-with-a-newline", ["run", "-a", "ddp:env.FOO=a\nb"],
     "adapter row 'ddp:env.FOO=a\\nb': env.FOO's value holds a control character; give it on one line, without "
     "tabs or other control characters"),
    ("comm-gap-negative", ["comm", "--gap", "-1"], "--gap must be between 0 and 1000 ms, got -1"),
    ("comm-gap-nan", ["comm", "--gap", "nan"], "--gap must be between 0 and 1000 ms, got nan"),
    ("comm-gap-too-long", ["comm", "--gap", "1e6"], "--gap must be between 0 and 1000 ms, got 1e+06"),
    ("comm-duplicate-size", ["comm", "--sizes", "1K,4K,1024"], "size 1K listed twice in --sizes 1K,4K,1024"),
    ("comm-size-beyond-memory", ["comm", "--sizes", "4K,99999999999G"],
     f"size 99999999999G is more than this machine's memory ({format_mib(memory_total_bytes())}); choose --sizes "
     f"up to a fraction of it (every rank holds a buffer of the size, and all_gather world size times it)"),
    ("comm-timeout-0", ["comm", "--timeout", "0"],
     "--timeout must be a positive number of seconds, got 0"),
    ("comm-stall-nan", ["comm", "--stall-timeout", "nan"],
     "--stall-timeout must be a number of seconds, at least 0 (0: never), got nan"),
    ("comm-unknown-device", ["comm", "--device", "tpu"], "unknown device 'tpu'; valid choices: cpu, cuda"),
    # ---- scale ----------------------------------------------------------------------------------------------
    ("scale-world-sizes-unsorted", ["scale", "--world-sizes", "2,1"],
     "--world-sizes must be in increasing order, got 2,1; e.g. 1,2"),
    ("scale-world-sizes-duplicate", ["scale", "--world-sizes", "1,2,2"], "world size 2 listed twice in --world-sizes 1,2,2"),
    ("scale-world-size-0", ["scale", "--world-sizes", "0,1"], "world sizes must be at least 1, got 0"),
    ("scale-world-size-not-a-number", ["scale", "--world-sizes", "1,two"],
     "world size 'two' is not a whole number; e.g. --world-sizes 1,2,4"),
    ("scale-world-sizes-empty", ["scale", "--world-sizes", ","], "no world sizes given; e.g. --world-sizes 1,2,4"),
    ("scale-oversubscribed", ["scale", "-a", "ddp", "--world-sizes", f"1,{CORES + 1}", "--global-batch",
                              str(64 * (CORES + 1))],
     f"world size {CORES + 1} needs {CORES + 1} processes but this machine has {CORES} usable cores; use "
     f"--world-sizes up to {CORES}, or --oversubscribe to run it anyway (every row is then labelled oversubscribed)"),
    ("scale-unknown-profile", ["scale", "--profile", "tpu9"],
     f"unknown hardware profile 'tpu9'; valid choices: {PROFILES} (or add harness/model/profiles/tpu9.json: see "
     f"harness/model/profiles/README.md)"),
    ("scale-unknown-scaling", ["scale", "--scaling", "linear"], "unknown scaling 'linear'; valid choices: strong, weak"),
    ("scale-straggler-form", ["scale", "--straggler", "1"],
     "--straggler '1' is not RANK:FACTOR, e.g. 1:2.0 (rank 1 computes twice as slowly)"),
    ("scale-straggler-factor", ["scale", "--straggler", "1:0.5"],
     "straggler factor must be from 1 to 100 (how many times slower the rank computes), got 0.5"),
    ("scale-straggler-factor-inf", ["scale", "--straggler", "1:inf"],
     "straggler factor must be from 1 to 100 (how many times slower the rank computes), got inf"),
    ("scale-straggler-factor-huge", ["scale", "--straggler", "1:1e309"],
     "straggler factor must be from 1 to 100 (how many times slower the rank computes), got inf"),
    ("scale-threads-oversubscribe", ["scale", "-a", "ddp", "--world-sizes", "1,2", "--threads", str(CORES)],
     f"world size 2 x --threads {CORES} needs {2 * CORES} cores but this machine has {CORES} usable cores; use "
     f"--threads {max(1, CORES // 2)} or fewer, or --oversubscribe to run it anyway (every row is then labelled "
     f"oversubscribed)"),
    ("scale-straggler-rank", ["scale", "--world-sizes", "1,2", "--straggler", "2:2"],
     "straggler rank 2 does not exist at any world size of the sweep (the largest is 2, ranks 0-1)"),
    ("scale-batch-indivisible", ["scale", "--world-sizes", "1,2", "--global-batch", "63"],
     "global batch 63 is not divisible by world size 2; choose a --global-batch that is a multiple of 2"),
    ("scale-weak-batch-too-large", ["scale", "--scaling", "weak", "--world-sizes", "1,2", "--global-batch", "1024"],
     "weak scaling at world size 2 needs a global batch of 1024 x 2 = 2048, more than workload digits's training "
     "set (1437 samples); use smaller world sizes or a smaller --global-batch"),
    ("scale-predict-to-below", ["scale", "--world-sizes", "1,2", "--predict-to", "1"],
     "--predict-to 1 is below the largest world size measured (2)"),
    ("scale-profile-steps", ["scale", "--profile-steps", "2"], "--profile-steps must be at least 3, got 2"),
    ("scale-profile-steps-huge", ["scale", "--profile-steps", "99999999999"],
     "--profile-steps must be at most 10,000,000 steps, got 99999999999"),
    ("scale-unknown-adapter", ["scale", "-a", "ddp,horovd"], f"unknown adapter 'horovd'; valid choices: {ADAPTERS}"),
    ("scale-timeout-0", ["scale", "--timeout", "0"],
     "--timeout must be a positive number of seconds, got 0"),
    ("scale-comm-not-results", ["scale", "--comm", "/nonexistent-comm"],
     "--comm /nonexistent-comm does not exist; give a directory written by `compare comm`"),
    ("scale-comm-not-a-directory", ["scale", "--comm", "/etc/hostname"],
     "--comm /etc/hostname is not a directory; give a directory written by `compare comm`"),
    ("scale-comm-no-records", ["scale", "--comm", "/tmp"],
     "--comm /tmp holds no records.jsonl; give a directory written by `compare comm`"),
    ("scale-comm-a-run", ["scale", "--comm", str(RUNS / "digits_cpu2_20261126-045209")],
     f"--comm {RUNS / 'digits_cpu2_20261126-045209'} holds the results of `compare run`; give a directory written "
     f"by `compare comm`"),
    # ---- predict --------------------------------------------------------------------------------------------
    ("predict-unknown-profile", ["predict", "--profile", "tpu9"],
     f"unknown hardware profile 'tpu9'; valid choices: {PROFILES} (or add harness/model/profiles/tpu9.json: see "
     "harness/model/profiles/README.md)"),
    ("predict-to-0", ["predict", "--to", "0"],
     "--to must be from 8 to 65,536 (the extrapolation gives 8, 16, 64, 256, ... workers up to it), got 0"),
    ("predict-to-7", ["predict", "--to", "7"],
     "--to must be from 8 to 65,536 (the extrapolation gives 8, 16, 64, 256, ... workers up to it), got 7"),
    ("predict-to-huge", ["predict", "--to", "99999999999999999999"],
     "--to must be from 8 to 65,536 (the extrapolation gives 8, 16, 64, 256, ... workers up to it), got "
     "99999999999999999999"),
    ("scale-predict-to-4", ["scale", "--world-sizes", "1,2", "--predict-to", "4"],
     "--predict-to must be from 8 to 65,536 (the extrapolation gives 8, 16, 64, 256, ... workers up to it), got 4"),
    ("predict-no-records", ["predict", "/nonexistent-scale"],
     "/nonexistent-scale does not exist; give a directory written by `compare scale`"),
    ("predict-not-results", ["predict", "/tmp"],
     "/tmp holds no records.jsonl; give a directory written by `compare scale`"),
    ("predict-a-run", ["predict", str(RUNS / "digits_cpu2_20261126-045209")],
     f"{RUNS / 'digits_cpu2_20261126-045209'} holds the results of `compare run`; give a directory written by "
     f"`compare scale`"),
    ("predict-empty-profile", ["predict", "--profile", ""], f"an empty --profile name; valid choices: {PROFILES}"),
    ("scale-empty-profile", ["scale", "--profile", " "], f"an empty --profile name; valid choices: {PROFILES}"),
    ("scale-world-size-huge", ["scale", "--world-sizes", "1,99999999999999999999"],
     "world sizes must be at most 65,536, got 99999999999999999999"),
    ("run-world-size-huge", ["run", "-n", "99999999999999999999"],
     "world size must be at most 65,536, got 99999999999999999999"),
    ("comm-world-size-huge", ["comm", "-n", "65537"], "world size must be at most 65,536, got 65537"),
    ("report-nowhere", ["report", "/nonexistent-run"], f"/nonexistent-run does not exist; {BY_ANY}"),
    ("report-a-file", ["report", "/etc/hostname"], f"/etc/hostname is not a directory; {BY_ANY}"),
    ("report-no-records", ["report", "/tmp"], f"/tmp holds no records.jsonl; {BY_ANY}"),
    ("diff-no-records", ["diff", "/tmp", str(RUNS / "digits_cpu2_20261126-045209")],
     "/tmp holds no records.jsonl; give a directory written by `compare run`"),
    ("join-a-file", ["join", "j", "/etc/hostname", str(RUNS / "digits_cpu2_20261126-045209")],
     "/etc/hostname is not a directory; give a directory written by `compare run`"),
    # an empty plan (a table with no row, "recommendation: none") had exited 0
    ("plan-from-a-run-at-a-dtype-it-never-ran", ["plan", "--from", str(RUNS / "digits_cpu2_20261126-045209"),
                                                 "--dtype", "fp16"],
     f"--from {RUNS / 'digits_cpu2_20261126-045209'}: no row of the run can be planned here, on its own machine, at "
     f"--dtype fp16 (its rows ran in bf16, fp32); give one of those"),
    ("plan-from-a-comm-run", ["plan", "--from", str(RUNS / "comm_cpu2_n2_20261123-121520")],
     f"--from {RUNS / 'comm_cpu2_n2_20261123-121520'} holds the results of `compare comm`; give a directory "
     f"written by `compare run`"),
    ("sbatch-empty-iface", ["sbatch", "-a", "ddp", "--nodes", "2", "--ntasks-per-node", "1", "--iface", ""],
     "--iface '' is not a network interface name"),
    # ---- run: verdict options (--precision, --budget, --baseline, --order-seed) -------------------------------
    *[(f"run-precision-{i}", ["run", "-a", "ddp,spawn", "--precision", bad],
       f"--precision must be a percentage of at least 0.01% and below 100%, e.g. 5%; got '{bad}'")
      for i, bad in enumerate(["0", "0%", "-5%", "150%", "100%", "abc", "5", ""])],
    *[(f"run-budget-{i}", ["run", "-a", "ddp,spawn", "--precision", "5%", "--budget", bad],
       f"--budget must be a duration above 0 and at most a week, e.g. 600s, 10m, 2h or 1h30m; got '{bad}'")
      for i, bad in enumerate(["0", "-1m", "0s", "abc", "8d", "2w", "", "30m1h", "1h1h", "1h30"])],
    ("run-budget-and-repeats", ["run", "-a", "ddp,spawn", "--budget", "10m", "--repeats", "3"],
     "--budget and --repeats both set how many rounds run (--repeats 3: exactly that many); give one of them"),
    ("run-precision-and-repeats", ["run", "-a", "ddp,spawn", "--precision", "5%", "--repeats", "3"],
     "--precision and --repeats both set how many rounds run (--precision 5%: as many as that interval needs, within "
     "--budget; --repeats 3: exactly that many); give one of them"),
    ("run-budget-until-target", ["run", "--until-target", "--budget", "1m"],
     "--budget sets how long throughput rounds may take; it does not apply to --until-target runs (--max-steps "
     "bounds each launch)"),
    *[(f"run-budget-default-{i}", ["run", "-a", "ddp,spawn", "--budget", bad],
       f"--budget must be a duration above 0 and at most a week, e.g. 600s, 10m, 2h or 1h30m; got '{bad}'")
      for i, bad in enumerate(["0", "-1m", "soon"])],
    ("run-precision-one-row", ["run", "-a", "ddp", "--precision", "5%"],
     "--precision compares rows with each other, and only 1 row can run here (ddp); name at least two with "
     "--adapters"),
    ("run-precision-until-target", ["run", "-a", "ddp,spawn", "--precision", "5%", "--until-target"],
     "--precision narrows throughput intervals; it does not apply to --until-target runs"),
    ("run-baseline-not-a-row", ["run", "-a", "ddp,spawn", "--baseline", "horovod"],
     "--baseline 'horovod' is not among the rows of this run; choose one of: ddp, spawn"),
    ("run-baseline-unavailable", ["run", "-a", "ddp,spawn,apex", "--baseline", "apex"],
     "--baseline apex cannot run here (unavailable); choose one of: ddp, spawn"),
    ("run-order-seed-negative", ["run", "-a", "ddp,spawn", "--order-seed", "-1"],
     "--order-seed must be between 0 and 2**63 - 1, got -1"),
    *[(f"run-margin-{i}", ["run", "-a", "ddp,spawn", "--margin", bad],
       f"--margin must be a percentage of at least 0.01% and below 100%, e.g. 5%; got '{bad}'")
      for i, bad in enumerate(["0", "0%", "-5%", "abc", "100%", "1e-9%", "0.009%"])],
    ("run-tuned-not-a-tune", ["run", "--tuned", "/tmp"],
     "--tuned /tmp holds no records.jsonl; give a directory written by `compare tune`"),
    ("run-tuned-a-run", ["run", "--tuned", str(RUNS / "digits_cpu2_20261126-045209")],
     f"--tuned {RUNS / 'digits_cpu2_20261126-045209'} holds the results of `compare run`; give a directory written "
     f"by `compare tune`"),
    ("run-join-until-target", ["run", "--join", "/tmp", "--until-target"],
     "--join adds a session to a throughput comparison; it does not apply to --until-target runs"),
    ("run-join-nowhere", ["run", "--join", "/nonexistent-run"],
     "--join /nonexistent-run does not exist; give a directory written by `compare run` or `compare join`"),
    ("run-join-a-file", ["run", "--join", "/etc/hostname"],  # it said "no such run directory" of a file that is there
     "--join /etc/hostname is not a directory; give a directory written by `compare run` or `compare join`"),
    ("run-margin-one-row", ["run", "-a", "ddp", "--margin", "5%"],
     "--margin says when two rows are equivalent, and only 1 row can run here (ddp); name at least two with "
     "--adapters"),
    ("run-margin-until-target", ["run", "-a", "ddp,spawn", "--margin", "2%", "--until-target"],
     "--margin is the throughput verdict's equivalence margin; it does not apply to --until-target runs"),
    ("run-powersgd-rank-0", ["run", "-a", "ddp:comm_hook=powersgd:powersgd_rank=0"],
     "adapter ddp:comm_hook=powersgd:powersgd_rank=0: knob 'powersgd_rank' must be at least 1; got 0"),
    ("run-bf16-hook-cpu", ["run", "-a", "ddp:comm_hook=bf16"],
     "adapter ddp:comm_hook=bf16: knob 'comm_hook' bf16 needs CUDA with NCCL 2.10+ (torch's bf16_compress_hook); on "
     "CPU use fp16 or powersgd"),
    ("run-bf16-hook-cpu-amp", ["run", "-a", "amp:comm_hook=bf16"],
     "adapter amp:comm_hook=bf16: knob 'comm_hook' bf16 needs CUDA with NCCL 2.10+ (torch's bf16_compress_hook); on "
     "CPU use fp16 or powersgd"),
    ("run-unknown-hook", ["run", "-a", "ddp:comm_hook=int8"],
     "adapter ddp:comm_hook=int8: knob 'comm_hook' must be none, fp16, bf16 or powersgd; got 'int8'"),
    # ---- fsdp knobs that cannot work here or at this world size ------------------------------------------------
    ("run-fsdp-replicas-3", ["run", "-a", "fsdp:replicas=3"],
     "adapter fsdp:replicas=3: knob 'replicas' 3 does not divide world size 2 (HSDP needs an R x N/R mesh); choose "
     "a divisor of 2"),
    ("run-fsdp-replicas-0", ["run", "-a", "fsdp:replicas=0"],
     "adapter fsdp:replicas=0: knob 'replicas' must be at least 1 (1: plain FSDP); got 0"),
    ("run-fsdp-fp16-cpu", ["run", "-a", "fsdp:param_dtype=fp16"],
     "no adapter can run here: knob 'param_dtype'/'reduce_dtype' fp16 needs CUDA here; use bf16 or fp32 on CPU"),
    ("run-fsdp-offload-cpu", ["run", "-a", "fsdp:cpu_offload=true"],
     "adapter fsdp:cpu_offload=true: knob 'cpu_offload' moves sharded state from the GPU to the CPU; on CPU it is "
     "already there (leave it out)"),
    ("run-fsdp-unknown-dtype", ["run", "-a", "fsdp:reduce_dtype=fp8"],
     "adapter fsdp:reduce_dtype=fp8: knob 'reduce_dtype' must be fp32, bf16 or fp16; got 'fp8'"),
    ("sbatch-script-under-a-file", ["sbatch", "--nodes", "2", "--ntasks-per-node", "1", "--script",
                                    RUNS / "README.md" / "job.sh"],
     f"--script {RUNS / 'README.md' / 'job.sh'}: {RUNS / 'README.md'} is a file, not a directory; give a path in an "
     f"existing directory"),
    ("knobs-of-a-row", ["knobs", "ddp:bucket_cap=5"],
     "'ddp:bucket_cap=5' is a row, not an adapter: compare knobs takes an adapter's name alone (compare knobs ddp); "
     "its knobs are given to compare run as -a ddp:KNOB=VALUE"),
    ("knobs-unknown", ["knobs", "horovd"],
     f"unknown adapter or workload 'horovd'; valid choices: {ADAPTERS} (adapters), "
     f"{', '.join(workloads.names())} (workloads)"),
    ("diff-one-run-twice", ["diff", RUNS / "digits_cpu2_20261126-045209", RUNS / "digits_cpu2_20261126-045209"],
     f"A and B are one run ({RUNS / 'digits_cpu2_20261126-045209'} twice): every row would be 1.000x, and that says "
     f"nothing; give another run as B (the same command again, or another torch, knob or machine)"),
    # ---- doctor: refused before it samples the machine or launches anything -----------------------------------
    ("doctor-launches-2", ["doctor", "--launches", "2"],
     "--launches must be between 3 (an interval needs 3) and 50, got 2"),
    ("doctor-launches-many", ["doctor", "--launches", "51"],
     "--launches must be between 3 (an interval needs 3) and 50, got 51"),
    ("doctor-unknown-adapter", ["doctor", "-a", "horovd"], f"unknown adapter 'horovd'; valid choices: {ADAPTERS}"),
    ("doctor-unknown-workload", ["doctor", "-w", "mnist"], f"unknown workload 'mnist'; valid choices: {WORKLOADS}"),
    # ---- list -----------------------------------------------------------------------------------------------
    ("list-unknown-device", ["list", "--device", "tpu"], "unknown device 'tpu'; valid choices: cpu, cuda"),
    ("list-world-size-0", ["list", "-n", "0"], "world size must be at least 1, got 0"),
    ("list-oversubscribed", ["list", "-n", str(CORES + 1)],
     f"world size {CORES + 1} needs {CORES + 1} processes but this machine has {CORES} usable cores; use "
     f"--world-size {CORES} or fewer, or --oversubscribe to run it anyway (every row is then labelled "
     f"oversubscribed)"),
    # an outside probe of the subcommands other than run (2026-11-29)
    ("list-world-size-above-run-bound", ["list", "-n", "100000000", "--oversubscribe"],
     "world size must be at most 65,536, got 100000000"),
    ("list-world-size-above-run-bound-cuda", ["list", "--device", "cuda", "-n", "65537"],
     "world size must be at most 65,536, got 65537"),
    ("plan-from-empty", ["plan", "-w", "widemlp", "--from", ""],
     "Invalid value for '--from': an empty path ('') (see `compare plan --help`)"),
    ("plan-global-batch-0", ["plan", "-w", "widemlp", "--global-batch", "0"],
     "--global-batch must be at least 1, got 0"),
    ("plan-global-batch-negative", ["plan", "-w", "widemlp", "--global-batch", "-8"],
     "--global-batch must be at least 1, got -8"),
    ("plan-gpu-empty", ["plan", "-w", "widemlp", "--gpu", ""], f"an empty --gpu (''); choose from {GPUS}"),
    ("plan-gpu-blank", ["plan", "-w", "widemlp", "--gpu", " "], f"an empty --gpu (' '); choose from {GPUS}"),
    ("plan-dtype-empty", ["plan", "-w", "widemlp", "--dtype", ""],
     f"an empty --dtype (''); choose from {', '.join(shapes.DTYPES)}"),
    ("plan-option-without-workload", ["plan", "--params", "7e9", "--layers", "32", "-o", "x=1"],
     "-o x=1 sets a workload's option, and no workload is given (-w); a transformer given by --params is shaped by "
     "--layers, --hidden, --heads, --kv-heads and --ffn"),
    ("plan-seq-len-0-workload", ["plan", "-w", "widemlp", "--seq-len", "0"], SEQ_LEN_0),
    ("plan-seq-len-0-params", ["plan", "--params", "7e9", "--layers", "32", "--seq-len", "0"], SEQ_LEN_0),
    ("doctor-several-rows", ["doctor", "-a", "ddp,spawn"],
     f"-a 'ddp,spawn' names several rows; compare doctor launches one row: give one adapter (with knobs if any); "
     f"valid choices: {ADAPTERS}"),
    ("doctor-trailing-comma", ["doctor", "-a", "ddp,"],
     f"-a 'ddp,' names several rows; compare doctor launches one row: give one adapter (with knobs if any); "
     f"valid choices: {ADAPTERS}"),
    # an option given twice: click kept the last value without a word (`-a ddp,spawn -a ddp` ran ddp alone)
    ("run-adapters-twice", ["run", "-a", "ddp,spawn", "-a", "ddp"],
     "--adapters is given twice (ddp,spawn and ddp); give it once"),
    ("run-steps-twice-spellings", ["run", "--steps", "2", "--steps=3"],
     "--steps is given twice (2 and 3); give it once"),
    ("run-workload-short-and-long", ["run", "-wdigits", "--workload", "digits"],
     "--workload is given twice (digits and digits); give it once"),
    ("run-repeats-3-times", ["run", "--repeats", "2", "--repeats", "3", "--repeats", "4"],
     "--repeats is given 3 times (2, 3 and 4); give it once"),
    ("run-out-twice", ["run", "--out", "a", "--out", "b"], "--out is given twice (a and b); give it once"),
    ("run-plots-and-no-plots", ["run", "--plots", "--no-plots"],
     "--plots is given twice (--plots and --no-plots); give it once"),
    ("run-force-twice", ["run", "--force", "--force"], "--force is given twice; give it once"),
    ("scale-straggler-twice", ["scale", "--straggler", "1:2", "--straggler", "1:3"],
     "--straggler is given twice (1:2 and 1:3); give it once"),
    ("plan-gpu-twice", ["plan", "-w", "widemlp", "--gpu", "h100", "--gpu", "a100"],
     "--gpu is given twice (h100 and a100); give it once"),
    # a value holding a newline is shown escaped: the refusal had come out on two lines (raised, or through fail)
    ("run-adapter-with-a-newline", ["run", "-a", "a\nb"], f"unknown adapter 'a\\nb'; valid choices: {ADAPTERS}"),
    ("list-device-with-a-newline", ["list", "--device", "a\nb"], "unknown device 'a\\nb'; valid choices: cpu, cuda"),
]


@pytest.mark.parametrize("argv, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, monkeypatch, argv, message):
    import tempfile

    work, scratch = tmp_path / "cwd", tmp_path / "tmp"  # the working and temporary directories stay empty (the
    for d in (work, scratch):                           # doctor's scratch run is made in the latter)
        d.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    out = tmp_path / "o"
    if argv[0] in ("run", "comm", "scale") and "--out" not in argv:
        argv = [*argv, "--out", str(out)]
    result = invoke(*argv)
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: {message}\n"
    assert result.stdout == "" and "Traceback" not in result.output
    assert not out.exists() and list(work.iterdir()) == list(scratch.iterdir()) == [], \
        "nothing may be written for bad input"


@pytest.mark.parametrize("value, message", [
    ("ddp:1:raize:3", "COMPARE_FAULT='ddp:1:raize:3': unknown kind 'raize'; valid choices: exit, raise, hang, kill, "
                      "stop, oom"),
    ("ddp:one:raise:3", "COMPARE_FAULT='ddp:one:raise:3': rank 'one' is not a whole number at least 0; the form is "
                        "ADAPTER:RANK:KIND:STEP (KIND one of exit, raise, hang, kill, stop, oom; STEP a step number "
                        "or one of start, eval, split, end)"),
    ("ddp:1:raise:three", "COMPARE_FAULT='ddp:1:raise:three': step 'three' is neither a step number nor one of "
                          "start, eval, split, end"),
    ("dpp:1:raise:3", "COMPARE_FAULT='dpp:1:raise:3': unknown adapter 'dpp'; valid choices: "
                      + ", ".join([*adapters.names(), "reference"])),
    ("ddp:99:raise:3", "COMPARE_FAULT='ddp:99:raise:3': rank 99 does not exist at world size {world} (ranks "
                       "0-{last})"),
    ("ddp:1:raise", "COMPARE_FAULT='ddp:1:raise' is not ADAPTER:RANK:KIND:STEP (KIND one of exit, raise, hang, kill, "
                    "stop, oom; STEP a step number or one of start, eval, split, end), e.g. ddp:1:raise:3"),
])
@pytest.mark.parametrize("sub", ["run", "comm", "scale"])
def test_a_malformed_fault_injection_is_refused_before_any_launch(tmp_path, monkeypatch, sub, value, message):
    """Every rank parses COMPARE_FAULT: a malformed one made every launch of every row fail in its own words."""
    monkeypatch.setenv("COMPARE_FAULT", value)
    result = invoke(sub, "--out", str(tmp_path / "o"))
    world = CORES if sub == "scale" else 2  # a sweep's largest world size: by default, every usable core
    message = message.format(world=world, last=world - 1)
    assert (result.exit_code, result.stderr) == (2, f"error: {message}\n"), result.output
    assert not (tmp_path / "o").exists()


# `compare sbatch` takes every option of `compare run` and checks the run with run's one validation
# (harness/core/comparison.py: check): a script it writes must not be refused by the job hours later in the queue.
# These run refusals are about this machine, its hosts or its network, which the job meets only inside its
# allocation (where it checks them itself), or about options whose place sbatch takes:
WHERE_THE_JOB_RUNS = {
    "run-world-size-0": "the world size is the allocation's shape (--nodes x --ntasks-per-node), refused as such",
    "run-world-size-negative": "the world size is the allocation's shape",
    "run-world-size-huge": "the world size is the allocation's shape",
    "run-world-size-10000": "this machine's cores: the allocation's nodes have their own",
    "run-oversubscribed": "this machine's cores: the allocation's nodes have their own",
    "run-threads-oversubscribe": "this machine's cores: the allocation's nodes have their own",
    "run-hosts-with-dp": "the hosts come from the allocation (sbatch refuses --hosts)",
    "run-hosts-slots-not-world-size": "the hosts come from the allocation",
    "run-hostfile-malformed": "the hosts come from the allocation",
    "run-hostfile-missing": "the hosts come from the allocation",
    "run-hostfile-empty": "the hosts come from the allocation",
    "run-hosts-and-hostfile": "the hosts come from the allocation",
    "run-hosts-bad-slots": "the hosts come from the allocation",
    "run-hosts-zero-slots": "the hosts come from the allocation",
    "run-hosts-empty-entry": "the hosts come from the allocation",
    "run-hosts-bad-name": "the hosts come from the allocation",
    "run-hosts-twice": "the hosts come from the allocation",
    "run-nnodes-beyond-hosts": "the hosts come from the allocation",
    "run-nnodes-0": "the hosts come from the allocation",
    "run-nnodes-without-hosts": "the hosts come from the allocation",
    "run-localhost-beside-remote-hosts": "the hosts come from the allocation",
    "run-unknown-interface-here": "the hosts come from the allocation",
    "run-bad-interface-name": "the hosts come from the allocation",
    "run-unknown-host": "the hosts come from the allocation",
    "run-unknown-launcher": "sbatch's launcher is slurm (any other is refused as such)",
    "run-slurm-with-hosts": "the hosts come from the allocation",
    "run-slurm-outside-an-allocation": "the job runs inside its allocation",
    "run-iface-on-one-host": "an allocation's nodes talk over the network --iface names",
    "run-out-with-a-newline": "its -a dp cannot span an allocation's hosts (sbatch-out-with-a-newline checks the path)",
}
RUN_REFUSALS = [c for c in CASES if c[1][0] == "run" and c[0] not in WHERE_THE_JOB_RUNS]


def test_every_exception_to_sbatch_refusing_as_run_is_a_run_refusal():
    assert set(WHERE_THE_JOB_RUNS) <= {c[0] for c in CASES if c[1][0] == "run"}
    assert {"run-budget-and-repeats", "run-precision-1", "run-margin-3", "run-tuned-not-a-tune",
            "run-baseline-not-a-row"} <= {c[0] for c in RUN_REFUSALS}


@pytest.mark.parametrize("argv, message", [c[1:] for c in RUN_REFUSALS], ids=[c[0] for c in RUN_REFUSALS])
def test_sbatch_refuses_what_run_refuses_with_the_same_line_and_writes_nothing(tmp_path, argv, message):
    """Every run refusal of CASES, given to `compare sbatch` for one node of as many ranks as the run asks (2 by
    default): the same line, exit 2, no script and no results directory."""
    args = list(argv[1:])
    ranks = next((args[i + 1] for i, a in enumerate(args) if a in ("-n", "--world-size")), "2")
    script, out = tmp_path / "job.sbatch", tmp_path / "o"
    if "--out" not in args:
        args += ["--out", str(out)]
    result = invoke("sbatch", *args, "--nodes", "1", "--ntasks-per-node", ranks, "--script", script)
    message = message.replace("`compare run --help`", "`compare sbatch --help`")  # a parse error names its command
    assert (result.exit_code, result.stderr) == (2, f"error: {message}\n"), result.output
    assert "Traceback" not in result.output
    assert not script.exists() and not out.exists()


def test_an_unknown_option_is_one_line_with_the_guess_and_every_valid_option(tmp_path):
    import typer.main

    from harness.cli import app as cli_app

    run = typer.main.get_command(cli_app).commands["run"]
    options = sorted({max(p.opts, key=len) for p in run.params if max(p.opts, key=len).startswith("--")} | {"--help"})
    assert "--adapters" in options and "--world-size" in options
    result = invoke("run", "--adaptrs", "ddp", "--out", tmp_path / "o")
    assert result.exit_code == 2
    assert result.stderr == (f"error: no such option --adaptrs for `compare run` (did you mean --adapters?); valid "
                             f"options: {', '.join(options)}\n")
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_cuda_on_a_machine_without_a_gpu_says_what_is_missing_in_one_readable_line(tmp_path):
    out = tmp_path / "o"
    result = invoke("run", "--device", "cuda", "--out", out)
    assert result.exit_code == 2
    line = result.stderr
    assert line.startswith("error: no adapter can run here: CUDA requested but torch sees no GPU")
    # the default world size on cuda is the GPU count (here none: 1)
    assert line.endswith("see `compare list --device cuda --world-size 1` for the reasons and fixes\n")
    assert line.count("\n") == 1 and len(line) < 250 and not out.exists()


def test_unwritable_output_directory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    out = blocker / "run"
    for sub in ("run", "comm", "scale"):
        result = invoke(sub, "--out", out)
        assert result.exit_code == 2
        assert result.stderr == f"error: cannot create output directory {out}: {blocker} is not a directory\n"


def test_read_only_output_directory(tmp_path, monkeypatch):
    # Permission bits are no test for root: the directory's refusal is made as the kernel makes it
    import errno
    import tempfile

    def refused(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(tempfile, "mkdtemp", refused)
    out = tmp_path / "o"
    result = invoke("run", "--out", out)
    assert (result.exit_code, result.stderr) == (2, f"error: output directory {out} is not writable: Permission "
                                                    f"denied ({tmp_path})\n")
    assert not out.exists()


@pytest.mark.parametrize("files", [("records.jsonl",), ("report.md",), ("records.jsonl", "report.md", "busbw.png")],
                         ids=["records", "report", "comm-run"])
@pytest.mark.parametrize("sub", ["run", "comm", "scale"])
def test_existing_results_are_not_overwritten_without_force(tmp_path, sub, files):
    # Either kind's results directory is protected from either subcommand (a comm run's dir used to be overwritable).
    out = tmp_path / "o"
    out.mkdir()
    for f in files:
        (out / f).write_text("{}\n")
    result = invoke(sub, "--out", out)
    assert result.exit_code == 2
    held = ", ".join(f for f in ("records.jsonl", "report.md") if f in files)
    assert result.stderr == (f"error: output directory {out} already holds results ({held}); use --force to "
                             "overwrite or choose another --out\n")
    assert sorted(p.name for p in out.iterdir()) == sorted(files)


@pytest.mark.parametrize("sub, files", [("run", ("throughput.png",)), ("run", ("logs/ddp-r0.log",)),
                                        ("comm", ("busbw.png",)), ("scale", ("speedup.png", "comm_n2/x"))])
def test_files_a_run_would_overwrite_are_not_overwritten_without_force(tmp_path, sub, files):
    # A directory with no results but with a plot, a log or a sweep's comm dir of the same name: a user's own
    # files there would be replaced (a plot redrawn, a log emptied), so it is refused like results are.
    out = tmp_path / "o"
    for f in files:
        (out / f).parent.mkdir(parents=True, exist_ok=True)
        (out / f).write_text("mine\n")
    result = invoke(sub, "--out", out)
    assert result.exit_code == 2
    shown = ", ".join(f.split("/")[0] + "/" if "/" in f else f for f in files)
    assert result.stderr == (f"error: output directory {out} holds files this run would overwrite ({shown}); use "
                             f"--force to overwrite them or choose another --out\n")
    assert all((out / f).read_text() == "mine\n" for f in files)


def test_what_a_killed_run_left_is_named_as_its_leftovers(tmp_path):
    # An outside check: after kill -9 of compare, a run into the same --out was refused for its logs/ without a word
    # of where they came from (the killed run's lock, which no process holds any longer, names it)
    out = tmp_path / "o"
    (out / "logs").mkdir(parents=True)
    (out / "logs" / "reference.log.gz").write_bytes(b"")
    (out / ".compare.lock").write_text("4194999\n")
    result = invoke("run", "--out", out)
    assert (result.exit_code, result.stderr) == (2, (
        f"error: output directory {out} holds files this run would overwrite (logs/), left by a compare run that never "
        f"finished (pid 4194999, no longer running: killed, or the machine stopped); use --force to overwrite them or "
        f"choose another --out\n"))


# ---- the one reader of a results directory ----------------------------------------------------------------------

def _reader_cases(tmp_path):
    """(directory, kinds, given, the one line read_results refuses it with) for each way a directory is not results
    of the kinds asked for."""
    run, scale = RUNS / "digits_cpu2_20261126-045209", RUNS / "scale_digits_cpu2_20261125-085608"
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "records.jsonl").write_text("")
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "records.jsonl").write_text("not json\n")
    (tmp_path / "mixed").mkdir()
    lines = records_text(scale).splitlines()
    (tmp_path / "mixed" / "records.jsonl").write_text(
        "\n".join([*lines, json.dumps({**json.loads(lines[1]), "kind": "run", "repeat": 99})]) + "\n")
    (tmp_path / "file").write_text("")
    by_run = "give a directory written by `compare run`"
    return [
        (tmp_path / "nowhere", ("run",), "--from", f"--from {tmp_path / 'nowhere'} does not exist; {by_run}"),
        (tmp_path / "file", ("run",), "", f"{tmp_path / 'file'} is not a directory; {by_run}"),
        (tmp_path, ("comm", "scale"), "--comm",
         f"--comm {tmp_path} holds no records.jsonl; give a directory written by `compare comm` or `compare scale`"),
        (tmp_path / "garbage", ("run",), "", f"{tmp_path / 'garbage'} holds records this compare cannot read "
                                             f"({tmp_path / 'garbage' / 'records.jsonl'}:1: not JSON (Expecting value: "
                                             f"line 1 column 1 (char 0)))"),
        (tmp_path / "empty", ("run",), "", f"{tmp_path / 'empty'} holds no records (an empty records.jsonl); {by_run}"),
        (scale, ("run", "tune"), "--tuned", f"--tuned {scale} holds the results of `compare scale`; give a directory "
                                            f"written by `compare run` or `compare tune`"),
        (tmp_path / "mixed", ("scale",), "", f"{tmp_path / 'mixed'} holds records of `compare run` among those of "
                                             f"`compare scale`; give a directory written by `compare scale`"),
        (run, ("scale", "comm"), "", f"{run} holds the results of `compare run`; give a directory written by "
                                     f"`compare scale` or `compare comm`"),
    ]


def test_read_results_refuses_each_way_a_directory_is_not_results_in_one_line_naming_it(tmp_path):
    from harness.ground.errors import BadInput
    from harness.ground.record import read_results

    for directory, kinds, given, message in _reader_cases(tmp_path):
        with pytest.raises(BadInput) as exc:
            read_results(directory, kinds, given)
        assert str(exc.value) == message
    # records.jsonl.gz (a committed run) reads as records.jsonl does, and every kind is taken by default
    assert read_results(RUNS / "digits_cpu2_20261126-045209") == read_records(
        records_file(RUNS / "digits_cpu2_20261126-045209"))


def test_every_request_refused_is_one_class_the_command_line_catches():
    """A refusal that is bad input derives from BadInput, so `compare` catches one class (one line, exit 2); the
    classes kept apart are handled otherwise: the user's code raising (their traceback, exit 1), results that could
    not be written (exit 1), an option's error that its caller words with whose option it was."""
    from harness.core.joins import NotJoinable
    from harness.core.session import SessionError
    from harness.ground.errors import BadInput
    from harness.model.activations import BadPlan
    from harness.model.measured import BadRun
    from harness.reports.run_diff import NotComparable
    from harness.shared.options import OptionError
    from harness.shared.registry import BadReference, UnknownName, UserCodeError

    assert all(issubclass(c, BadInput) for c in (NotJoinable, NotComparable, BadReference, UnknownName, BadPlan, BadRun))
    assert not any(issubclass(c, BadInput) for c in (UserCodeError, SessionError, OptionError))


# ---- report and index on records of the wrong shape ------------------------------------------------------------

def test_report_of_a_directory_without_records(tmp_path):
    result = invoke("report", tmp_path)
    assert result.exit_code == 2
    assert result.stderr == f"error: {tmp_path} holds no records.jsonl; {BY_ANY}\n"


@pytest.mark.parametrize("content, problem", [
    ("not json\n", ":1: not JSON"),
    ('{"a": 1}\n', ":1 has no 'schema_version'"),
    ('[1, 2]\n', ":1 is not an object"),
    ('{"schema_version": 1, "run_id": "x", "time_utc": "t", "command": "c", "status": "ok", "env": {}, '
     '"world_size": 2}\n', ":1: env has no 'python'"),
], ids=["not-json", "no-schema", "not-object", "wrong-env"])
def test_report_of_records_of_the_wrong_shape_is_one_line(tmp_path, content, problem):
    (tmp_path / "records.jsonl").write_text(content)
    result = invoke("report", tmp_path)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {tmp_path} holds records this compare cannot read "
                                    f"({tmp_path / 'records.jsonl'}{problem}")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output
    assert not (tmp_path / "report.md").exists()


def test_report_of_a_committed_run_with_one_field_mistyped(tmp_path):
    lines = records_text(RUNS / "digits_cpu2_20261123-101734").splitlines()
    rec = json.loads(lines[1])
    rec["step_time_s"]["median"] = "fast"
    (tmp_path / "records.jsonl").write_text("\n".join([lines[0], json.dumps(rec)]) + "\n")
    result = invoke("report", tmp_path)
    assert result.exit_code == 2
    assert result.stderr.endswith(":2: step_time_s: 'median' is str, expected a number)\n")


@pytest.mark.parametrize("edit", ["copied", "edited"])
def test_report_of_records_holding_one_launch_twice_is_refused_naming_both_lines(tmp_path, edit):
    # a line pasted twice was counted as a fourth launch: rounds incomplete, new pairs resolved, the verdict changed
    lines = records_text(RUNS / "digits_cpu2_20261126-045209").splitlines()
    again = lines[4] if edit == "copied" else json.dumps({**json.loads(lines[4]), "samples_per_s": 1.0})
    (tmp_path / "records.jsonl").write_text("\n".join([*lines[:5], again, *lines[5:]]) + "\n")
    first = json.loads(lines[4])
    result = invoke("report", tmp_path)
    assert result.exit_code == 2, result.output
    path = tmp_path / "records.jsonl"
    said = (f"{path}:6: repeats line 5 word for word; a records.jsonl holds each record once (remove the copy)"
            if edit == "copied" else f"{path}:6: a second record of row {first['label']}'s launch {first['repeat']} "
                                     f"(line 5 is the first); a records.jsonl holds each launch once")
    assert result.stderr == f"error: {tmp_path} holds records this compare cannot read ({said})\n"
    assert not (tmp_path / "report.md").exists()


@pytest.mark.parametrize("field, value, what", [("world_size", 4, "world size"), ("workload", "resnet", "workload"),
                                                 ("run_id", "another", "run")])
def test_report_of_records_of_two_runs_in_one_file_is_refused(tmp_path, field, value, what):
    # a record of another run pasted in was counted as this run's launch, or dropped its row as not data-parallel
    lines = records_text(RUNS / "digits_cpu2_20261126-045209").splitlines()
    first = json.loads(lines[0])
    lines[4] = json.dumps({**json.loads(lines[4]), field: value})
    (tmp_path / "records.jsonl").write_text("\n".join(lines) + "\n")
    result = invoke("report", tmp_path)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert (f"record 5 is of {what} {value}, record 1 of {first[field]}: the records of one run share their {what}; "
            f"a records.jsonl holds one run") in result.stderr
    assert not (tmp_path / "report.md").exists()


def _committed_with(tmp_path, run, change):
    """A copy of a committed run's records (with its report and plots) whose records pass the field check but
    are changed by `change(records)`."""
    src = RUNS / run
    dst = tmp_path / run
    dst.mkdir()
    for f in src.iterdir():
        if f.is_file() and f.name != "records.jsonl.gz":  # its records are the records.jsonl written below
            (dst / f.name).write_bytes(f.read_bytes())
    records = [json.loads(line) for line in records_text(src).splitlines() if line.strip()]
    change(records)
    (dst / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return dst


def _set(where, key, value):
    def change(records):
        target = records[1] if where == "row" else records[0]
        target[key] = value
    return change


@pytest.mark.parametrize("change, problem", [
    (_set("row", "equivalence", {}), "(KeyError: 'checked')"),
    (_set("row", "topology", {}), "(KeyError: 'processes')"),
    (_set("row", "loss_curve", ["x", None]), "(TypeError: "),
], ids=["equivalence-empty", "topology-empty", "loss-not-numbers"])
def test_report_of_records_a_report_cannot_be_made_of_is_one_line_and_writes_nothing(tmp_path, change, problem):
    # Records that pass the field check but not the renderer: one line, exit 2, and the directory exactly as it
    # was (the renderer had already redrawn plots before it failed: they are put back).
    d = _committed_with(tmp_path, "digits_cpu2_20261123-101734", change)
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    result = invoke("report", d)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: cannot make a report of {d}: its records.jsonl holds a record of a "
                                    f"shape this compare cannot read {problem}")
    assert result.stderr.endswith("; nothing was written\n") and result.stderr.count("\n") == 1
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before


@pytest.mark.parametrize("where, line", [("row", 2), ("first", 1)])
def test_report_of_a_kind_compare_never_writes_is_refused_where_it_is_read(tmp_path, where, line):
    d = _committed_with(tmp_path, "digits_cpu2_20261123-101734", _set(where, "kind", "bogus"))
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    result = invoke("report", d)
    assert result.exit_code == 2, result.output
    assert result.stderr == (f"error: {d} holds records this compare cannot read ({d / 'records.jsonl'}:{line}: kind "
                             f"'bogus'; a record's kind is one of run, scale, comm, tune)\n")
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before


def test_index_skips_a_run_a_report_cannot_be_made_of_and_refuses_an_unwritable_directory(tmp_path):
    _committed_with(tmp_path, "digits_cpu2_20261123-101734", lambda recs: None)
    bad = _committed_with(tmp_path, "comm_cpu2_n2_20261123-121520", lambda recs: recs[0]["env"].update(gpus=5))
    result = invoke("index", tmp_path)
    assert result.exit_code == 0, result.output
    assert result.stderr == (f"warning: skipped {bad}: a record of a shape this compare cannot read "
                             f"(TypeError: can only join an iterable)\n")
    assert "digits_cpu2_20261123-101734" in (tmp_path / "README.md").read_text()
    (tmp_path / "README.md").unlink()
    (tmp_path / "README.md").mkdir()
    result = invoke("index", tmp_path)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == f"error: cannot write the index {tmp_path / 'README.md'}: Is a directory"


@pytest.mark.slow  # seconds: left out of make test-fast
def test_predict_skips_a_profile_the_sweep_names_that_does_not_exist(tmp_path):
    run = "scale_digits_cpu2_20261124-041536"

    def change(records):
        for r in records:
            if r.get("scale_sweep"):
                r["scale_sweep"]["profiles"] = ["nosuch"]
    d = _committed_with(tmp_path, run, change)
    result = invoke("predict", d)
    assert result.exit_code == 0, result.output
    assert "unknown hardware profile nosuch named by the sweep: no extrapolation to it" in result.stdout
    assert "published results vs the model" in result.stdout


def test_index_of_something_that_is_not_a_directory(tmp_path):
    result = invoke("index", tmp_path / "missing")
    assert result.exit_code == 2 and result.stderr == f"error: {tmp_path / 'missing'} is not a directory\n"


def test_index_skips_a_bad_run_with_a_warning_and_indexes_the_good_ones(tmp_path):
    good = RUNS / "digits_cpu2_20261123-101734"
    (tmp_path / good.name).mkdir()
    (tmp_path / good.name / "records.jsonl").write_text(records_text(good))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "records.jsonl").write_text('{"schema_version": 1}\n')
    result = invoke("index", tmp_path)
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(f"warning: skipped {tmp_path / 'broken'}: ")
    index = (tmp_path / "README.md").read_text()
    assert f"[{good.name}]" in index and "broken" not in index


def test_list_checks_an_oversubscribed_world_size_when_asked_and_run_points_there():
    result = invoke("list", "-n", str(CORES + 1), "--oversubscribe")
    assert result.exit_code == 0, result.output
    assert f"world size {CORES + 1}, oversubscribed" in result.stdout
    assert unavailable_message("adapter", "apex", "apex is missing (fix: build it)", "cpu", CORES + 1) == (
        f"adapter 'apex' cannot run here: apex is missing; see `compare list --device cpu --world-size {CORES + 1} "
        f"--oversubscribe` for every reason and fix")
    assert unavailable_message("adapter", "apex", "apex is missing", "cpu", CORES).endswith(
        f"`compare list --device cpu --world-size {CORES}` for every reason and fix")


@pytest.mark.slow  # seconds: left out of make test-fast
def test_a_torch_that_fails_to_import_is_one_line_before_anything_is_written(tmp_path):
    """A torch whose library is gone (or a module shadowing it on PYTHONPATH): one line naming it and the fix, exit
    2, no output directory; `compare env` still prints what it can, for the bug report."""
    from conftest import compare_cli

    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise OSError("libtorch_cpu.so: cannot open shared object file")\n')
    env = {"PYTHONPATH": str(tmp_path / "site"), "COMPARE_CACHE": str(tmp_path / "cache")}
    out = tmp_path / "out"
    proc = compare_cli("run", "-a", "ddp", "--out", str(out), env=env, timeout=120)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (f"error: torch in {fake} fails to import (OSError: libtorch_cpu.so: cannot open shared "
                           "object file); every adapter needs it: reinstall it with `make clean setup`, or remove "
                           "what shadows it from PYTHONPATH\n")
    assert not out.exists()
    for args in (("scale", "-a", "ddp", "--world-sizes", "1,2"), ("comm", "--backends", "torch")):
        proc = compare_cli(*args, "--out", str(out), env=env, timeout=120)
        assert proc.returncode == 2 and "fails to import (OSError: libtorch_cpu.so" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and not out.exists()
    proc = compare_cli("env", "--full", env=env, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert "torch_error: torch in" in proc.stdout
    assert "ddp\n    available_cpu: torch fails to import here (OSError: libtorch_cpu.so" in proc.stdout
    proc = compare_cli("env", env=env, timeout=120)  # the summary: a few lines, the same facts
    assert proc.returncode == 0 and "Traceback" not in proc.stderr and len(proc.stdout.splitlines()) <= 20
    assert proc.stdout.startswith("python ") and "(it fails to import: torch in " in proc.stdout.splitlines()[0]
    assert "  ddp: unavailable: torch fails to import here (OSError: libtorch_cpu.so" in proc.stdout


def test_a_fifo_or_a_bottomless_records_file_is_skipped_by_index_and_refused_by_report(tmp_path):
    """A FIFO named records.jsonl used to block `index` for ever; JSON nested 200,000 deep was a RecursionError
    traceback in report, predict and index."""
    import os

    good = RUNS / "digits_cpu2_20261123-101734"
    (tmp_path / good.name).mkdir()
    (tmp_path / good.name / "records.jsonl").write_text(records_text(good))
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / "records.jsonl")
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "records.jsonl").write_text("[" * 200_000 + "]" * 200_000 + "\n")
    result = invoke("index", tmp_path)
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        f"warning: skipped {tmp_path / 'deep'}: {tmp_path / 'deep' / 'records.jsonl'}:1: not a record (JSON nested "
        f"too deep to read)\nwarning: skipped {tmp_path / 'fifo'}: {tmp_path / 'fifo' / 'records.jsonl'}: not a "
        "regular file\n")
    assert f"[{good.name}]" in (tmp_path / "README.md").read_text()
    for command in ("report", "predict"):
        result = invoke(command, tmp_path / "deep")
        assert result.exit_code == 2 and result.stderr == (
            f"error: {tmp_path / 'deep'} holds records this compare cannot read ({tmp_path / 'deep' / 'records.jsonl'}"
            ":1: not a record (JSON nested too deep to read))\n")
    result = invoke("report", tmp_path / "fifo")
    assert result.exit_code == 2 and result.stderr == (f"error: {tmp_path / 'fifo'} holds records this compare cannot "
                                                       f"read ({tmp_path / 'fifo' / 'records.jsonl'}: not a regular "
                                                       f"file)\n")


def test_a_dangling_symlink_as_out_is_named_with_its_target(tmp_path):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "nowhere" / "x")
    for command in (["run", "-a", "ddp"], ["scale", "-a", "ddp", "--world-sizes", "1,2"], ["comm"]):
        result = invoke(*command, "--out", link)
        assert result.exit_code == 2 and result.stderr == (
            f"error: output path {link} is a symbolic link to {tmp_path / 'nowhere' / 'x'}, which does not exist; "
            "create that directory, or choose another --out\n"), result.output
        assert link.is_symlink() and not (tmp_path / "nowhere").exists()


def test_index_never_replaces_a_readme_it_did_not_write_nor_writes_into_a_run(tmp_path):
    """`compare index .` from the project's root used to replace the project's README with an empty index."""
    good = RUNS / "digits_cpu2_20261123-101734"
    (tmp_path / good.name).mkdir()
    (tmp_path / good.name / "records.jsonl").write_text(records_text(good))
    (tmp_path / "README.md").write_text("# my notes\n")
    result = invoke("index", tmp_path)
    assert result.exit_code == 2 and result.stderr == (
        f"error: {tmp_path / 'README.md'} exists and was not written by `compare index`; use --force to replace it\n")
    assert (tmp_path / "README.md").read_text() == "# my notes\n"
    result = invoke("index", tmp_path, "--force")
    assert result.exit_code == 0, result.output
    assert f"[{good.name}]" in (tmp_path / "README.md").read_text()
    result = invoke("index", tmp_path)  # its own index it replaces without --force
    assert result.exit_code == 0, result.output
    result = invoke("index", tmp_path / good.name)
    assert result.exit_code == 2 and result.stderr == (
        f"error: {tmp_path / good.name} is a run's own directory (it holds records.jsonl); give the directory that "
        f"holds the runs, e.g. {tmp_path}\n")
    assert not (tmp_path / good.name / "README.md").exists()
    (tmp_path / "empty").mkdir()
    result = invoke("index", tmp_path / "empty")
    assert result.exit_code == 2 and result.stderr == (
        f"error: no runs under {tmp_path / 'empty'} (no {tmp_path / 'empty'}/*/records.jsonl); give the directory "
        "that holds them, e.g. results\n")
    assert not (tmp_path / "empty" / "README.md").exists()


def test_force_leaves_nothing_of_the_previous_run_but_keeps_files_compare_does_not_write(tmp_path):
    """`--force` over another command's results used to keep its plots, its logs/ and a sweep's comm_n*/, so the
    directory no longer matched its records."""
    from harness.core import comparison as run
    from harness.ground import outdir

    out = tmp_path / "out"
    (out / "logs").mkdir(parents=True)
    (out / "comm_n2").mkdir()
    for name in ("records.jsonl", "report.md", "speedup.png", "busbw.png", "logs/horovod-r0.log",
                 "comm_n2/records.jsonl", "notes.txt"):
        (out / name).write_text("x")
    (out / "mine").mkdir()
    (out / "mine" / "records.jsonl").write_text("x")
    outdir.clear(out, run.RESULT_FILES)
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    assert left == ["logs", "mine", "mine/records.jsonl", "notes.txt"]
    from harness.core import comm_bench as comm
    from harness.core import sweep as scale

    # and a run's records packed for committing, which --force replaces too
    assert set(run.RESULT_FILES + scale.RESULT_FILES + comm.RESULT_FILES) | {"records.jsonl.gz"} == set(outdir.WRITTEN)


def test_scale_refuses_comm_results_that_cannot_calibrate_the_sweep(tmp_path):
    """They used to be accepted, and the rows said after minutes of measuring that there was no comm sweep."""
    import json

    n4 = RUNS / "comm_cpu2_n4_20261123-122029"
    n2 = RUNS / "comm_cpu2_n2_20261123-121520"
    result = invoke("scale", "-a", "ddp", "--world-sizes", "1,2", "--comm", str(n4), "--out", str(tmp_path / "o"))
    assert result.exit_code == 2 and result.stderr == (
        f"error: --comm {n4}: world size 4, which is not one of --world-sizes 1,2; give comm results at a world size "
        "the sweep measures\n")
    result = invoke("scale", "-a", "ddp", "--world-sizes", "1,2", "--comm", str(n2), "--no-model")
    assert result.exit_code == 2 and result.stderr == (
        "error: --comm gives results to calibrate the model with, which --no-model skips; leave one out\n")
    fp16 = tmp_path / "fp16"
    fp16.mkdir()
    recs = [json.loads(line) for line in records_text(n2).splitlines()]
    (fp16 / "records.jsonl").write_text("".join(json.dumps({**r, "dtype": "fp16"}) + "\n" for r in recs))
    result = invoke("scale", "-a", "ddp", "--world-sizes", "1,2", "--comm", str(fp16))
    assert result.exit_code == 2 and result.stderr == (
        f"error: --comm {fp16}: timed in fp16, but the model prices fp32 gradients; give the results of a `compare "
        "comm --dtype fp32` run\n")
    none = tmp_path / "none"
    none.mkdir()
    (none / "records.jsonl").write_text("".join(json.dumps({**r, "op": None, "status": "interrupted"}) + "\n"
                                                for r in recs[:1]))
    result = invoke("scale", "-a", "ddp", "--world-sizes", "1,2", "--comm", str(none))
    assert result.exit_code == 2 and result.stderr == (
        f"error: --comm {none}: no cell of it ran (interrupted); give a finished `compare comm` run\n")
    result = invoke("scale", "-a", "ddp", "--world-sizes", "1,2,4", "--oversubscribe", "--global-batch", "64",
                    "--comm", str(n2))
    assert result.exit_code == 2 and result.stderr == (
        "error: --comm gives no results at world size 4; add a `compare comm -n 4` run, or leave --comm out to "
        "measure them here\n")
    assert not (tmp_path / "o").exists()


def test_scale_does_not_run_a_point_that_would_not_be_parallel():
    """DataParallel on a CPU is one process calling the module once: its "2-rank" point used to be reported with a
    speed-up and an efficiency."""
    from harness.core.requests import ScaleRequest
    from harness.core.sweep import plan

    p = plan(ScaleRequest(adapters=["dp", "ddp"], world_sizes=[1, 2], out=None))
    at1, at2 = p.points
    assert [r.label for r in at1.runnable] == ["dp", "ddp"]
    assert [r.label for r in at2.runnable] == ["ddp"]
    assert [(r.label, r.reason) for r in at2.unavailable] == [
        ("dp", "on a CPU torch.nn.DataParallel is one process calling the module once with the whole batch, so world "
               "size 2 would be 1 worker, with no speed-up to measure (fix: scale it with --device cuda on a machine "
               "with 2 GPUs, or compare ddp on CPU)")]
    result = invoke("scale", "-a", "dp", "--world-sizes", "1,2", "--strict")
    assert result.exit_code == 2 and result.stderr.startswith(
        "error: adapter 'dp' cannot be scaled here: on a CPU torch.nn.DataParallel is one process")


def test_a_sweeps_comm_records_carry_the_compare_comm_line_that_measures_them_again(tmp_path):
    # They were recorded with command "" (the audit of issue 46): a reader could not re-run a calibration alone.
    import shlex

    from harness.commands import declare
    from harness.core.requests import ScaleRequest
    from harness.core.sweep import plan
    from harness.cli import app

    p = plan(ScaleRequest(adapters=["ddp"], world_sizes=[1, 2], out=tmp_path / "s"))
    [(n, cplan)] = p.comm
    line = shlex.split(cplan.request.command)
    assert n == 2 and line[:2] == ["compare", "comm"]
    again = declare.parse(app, "comm", line[2:])
    for field in ("backends", "ops", "sizes", "world_size", "max_iters", "gap_s", "threads", "out", "dtype"):
        assert getattr(again, field) == getattr(cplan.request, field), field


def test_report_leaves_a_directory_a_live_run_holds_alone(tmp_path):
    """`compare report` on the directory of a run still measuring used to rewrite its report with the rows finished
    so far."""
    import os

    from harness.ground import outdir

    d = _committed_with(tmp_path, "digits_cpu2_20261123-101734", lambda recs: None)
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    claim = outdir.Claim(d)
    try:
        result = invoke("report", d)
    finally:
        claim.release()
    assert result.exit_code == 2 and result.stderr == (
        f"error: {d} is being written by a compare run that has not finished (pid {os.getpid()}); its report is "
        "written when it ends\n")
    assert {p.name: p.read_bytes() for p in d.iterdir() if p.name != outdir.LOCK_NAME} == before


def test_a_working_directory_that_no_longer_exists_is_one_line(tmp_path):
    # Run from a deleted directory, torch's import once failed with "Intel oneMKL FATAL ERROR" mid-run, leaving
    # a scratch directory and an empty logs/ behind.
    import subprocess
    import sys

    gone = tmp_path / "gone"
    gone.mkdir()
    code = (f"import os, sys; os.chdir({str(gone)!r}); os.rmdir({str(gone)!r}); "
            f"sys.argv = ['compare', 'run', '-a', 'ddp', '--out', 'o']; "
            f"sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r}); "
            f"from harness.entry import main; main()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == "error: the current directory no longer exists; cd to an existing directory and run again\n"


@pytest.fixture
def own_profiles(tmp_path, monkeypatch):
    """A copy of harness/model/profiles/ that a test may damage, in place of the real one."""
    import shutil

    d = tmp_path / "profiles"
    shutil.copytree(hardware.PROFILES_DIR, d)
    monkeypatch.setattr(hardware, "PROFILES_DIR", d)
    monkeypatch.setattr(hardware, "PUBLISHED", d / "published.json")
    return d


def _h100_with(d, **change):
    good = json.loads((d / "h100-sxm-ndr400.json").read_text())
    for k, v in change.items():
        good.pop(k) if v is None else good.__setitem__(k, v)
    return json.dumps(good)


@pytest.mark.parametrize("text, why", [
    ('{"name": ', "is not valid JSON: Expecting value: line 1 column 10 (char 9)"),
    ("[1, 2]", "holds a JSON list, not an object of the fields in harness/model/profiles/README.md"),
    (dict(base_latency_us=None), 'lacks "base_latency_us" (see harness/model/profiles/README.md)'),
    (dict(intra_busbw_GBps=-1), ': "intra_busbw_GBps" must be a finite number above 0, got -1'),
    (dict(inter_busbw_GBps=0), ': "inter_busbw_GBps" must be a finite number above 0, got 0'),
    (dict(intra_hop_latency_us="3"), ': "intra_hop_latency_us" must be a finite number of at least 0, got "3"'),
    (dict(devices_per_node=2.5), ': "devices_per_node" must be a whole number of at least 1, got 2.5'),
    (dict(devices_per_node=True), ': "devices_per_node" must be a whole number of at least 1, got true'),
    (dict(peak_tflops={"fp32": -5}), ': "peak_tflops" must map each precision to a finite number above 0, got '
                                     '{"fp32": -5}'),
])
def test_a_hardware_profile_that_does_not_load_is_one_line_naming_its_file(own_profiles, text, why):
    # A user's own profile with a typo used to crash `predict` with a traceback, or (a missing field) be blamed on
    # the sweep's records; a negative or NaN bandwidth gave 100% or 0% efficiency at every N.
    if isinstance(text, dict):
        text = _h100_with(own_profiles, **text)
    (own_profiles / "mine.json").write_text(text)
    where = f"hardware profile mine ({own_profiles / 'mine.json'})"
    expected = f"error: {where}{'' if why.startswith(':') else ' '}{why}\n"
    for argv in (["predict", "--profile", "mine"], ["scale", "-a", "ddp", "--profile", "mine", "--out",
                                                    str(own_profiles.parent / "never")]):
        result = invoke(*argv)
        assert result.exit_code == 2 and result.stderr == expected, (argv, result.output)
    assert not (own_profiles.parent / "never").exists()  # refused before the sweep, not after it
    listed = invoke("predict", "--list")
    assert listed.exit_code == 0 and f"mine: cannot be used: {where}" in " ".join(listed.stdout.split())


def test_a_nan_bandwidth_is_refused_too(own_profiles):
    (own_profiles / "mine.json").write_text(_h100_with(own_profiles).replace('"intra_busbw_GBps": 370',
                                                                             '"intra_busbw_GBps": NaN'))
    result = invoke("predict", "--profile", "mine")
    assert result.exit_code == 2 and result.stderr.endswith('"intra_busbw_GBps" must be a finite number above 0, '
                                                            'got NaN\n')


def test_a_profile_named_with_its_json_suffix_is_told_the_name():
    result = invoke("predict", "--profile", "a100-sxm-hdr200.json")
    assert result.exit_code == 2 and result.stderr == (
        "error: unknown hardware profile 'a100-sxm-hdr200.json'; a profile is named without .json: --profile "
        "a100-sxm-hdr200\n")


@pytest.mark.slow  # seconds: left out of make test-fast
def test_a_published_result_whose_profile_is_broken_is_left_out_with_a_warning(own_profiles, tmp_path):
    from harness.model import published

    (own_profiles / "p100-25gbe-roce.json").write_text("{}")
    problems = []
    checks = published.configurations(problems)
    horovod = [e["id"] for e in hardware.published() if e["profile"] == "p100-25gbe-roce"]
    assert horovod and not any(set(r["ids"]) & set(horovod) for r in checks) and checks
    assert problems == [f"published result {i} left out: hardware profile p100-25gbe-roce "
                        f"({own_profiles / 'p100-25gbe-roce.json'}) lacks \"devices_per_node\" (see "
                        f"harness/model/profiles/README.md)" for i in horovod]
    shown = invoke("predict")
    assert shown.exit_code == 0 and f"warning: published result {horovod[0]} left out" in shown.stdout
    # a sweep's report keeps its measured tables and its own model; only the broken profile's parts are left out
    import shutil

    from harness.ground.record import read_records
    from harness.reports import prediction
    from harness.reports import scale_report as scale

    run = tmp_path / "sweep"  # a copy: the section writes its plots into the directory it is given
    shutil.copytree(RUNS / "scale_digits_cpu2_20261125-085608", run)
    records = read_records(records_file(run))
    (own_profiles / "h100-sxm-ndr400.json").write_text("{")
    md = "\n".join(prediction.section(run, records, scale.table(records))[0])
    assert "The hardware profile h100-sxm-ndr400 (" in md and "is not valid JSON" in md
    assert "## The model" in md and "Step time within ±10% of the measured mean step" in md
    assert f"published result {horovod[0]} left out" in md


def test_an_out_under_a_loop_of_symbolic_links_is_one_line(tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    result = invoke("run", "-a", "dp", "--out", tmp_path / "loop" / "sub")
    assert result.exit_code == 2 and result.stderr == (
        f"error: cannot create output directory {tmp_path / 'loop' / 'sub'}: {tmp_path / 'loop'} is a symbolic link "
        f"that leads nowhere (a missing target or a loop); choose another --out\n")


def test_the_sbatch_header_keeps_every_typed_argument_on_its_comment_line():
    # A newline in any argument (here a workload option's value, refused later inside the job) used to end the
    # "# Written by" comment and run the rest of the line as code.
    from harness.core.slurm_script import one_line, render

    assert one_line("a\nb\tc é \x7f") == "a\\nb\\tc é \\x7f"
    text = render(["-a", "ddp"], "compare sbatch -o 'hidden=1\ntouch /tmp/compare-pwned #'", 2, 1, None, None, "x",
                  False)
    comment = [line for line in text.splitlines() if line.startswith("# Written by")]
    assert len(comment) == 1 and "hidden=1\\ntouch" in comment[0]
    assert not any(line.startswith("touch") for line in text.splitlines())


def test_index_never_writes_through_a_symbolic_link_at_readme(tmp_path):
    # It used to follow the link and create whatever file it pointed to, outside DIR.
    run = RUNS / "digits_cpu2_20261123-101734"
    (tmp_path / run.name).mkdir()
    (tmp_path / run.name / "records.jsonl").write_text(records_text(run))
    target = tmp_path / "elsewhere" / "notes.md"
    (tmp_path / "README.md").symlink_to(target)
    result = invoke("index", tmp_path)
    assert result.exit_code == 2 and result.stderr == (
        f"error: {tmp_path / 'README.md'} is a symbolic link to {target}; use --force to replace the link with the "
        f"index\n")
    assert not target.exists() and not target.parent.exists()
    forced = invoke("index", tmp_path, "--force")  # replaces the link itself, still writing nothing through it
    assert forced.exit_code == 0 and not (tmp_path / "README.md").is_symlink() and not target.exists()
    assert f"[{run.name}]" in (tmp_path / "README.md").read_text()


@pytest.mark.parametrize("err, code", [(13, 2), (30, 2), (28, 1)])  # EACCES, EROFS: bad input; ENOSPC: not
def test_report_into_a_directory_it_may_not_write_is_exit_2(tmp_path, monkeypatch, err, code):
    import os
    import shutil

    from harness import reports as report

    run = tmp_path / "run"
    shutil.copytree(RUNS / "comm_cpu2_n2_20261123-121520", run)

    def refuse(directory, records):
        raise OSError(err, os.strerror(err))
    monkeypatch.setattr(report, "render", refuse)
    result = invoke("report", run)
    assert result.exit_code == code and result.stderr == (
        f"error: could not write the report in {run}: {os.strerror(err)}\n")


def _every(change_one):
    def change(records):
        for r in records:
            change_one(r)
    return change


@pytest.mark.parametrize("run, change, problem", [
    # numbers no measurement gives: a report rendered them as "nan (±nan%)" or "-1 samples/s, efficiency 50%"
    ("digits_cpu2_20261123-101734", _set("row", "samples_per_s", float("nan")),
     "'samples_per_s' is nan, which no measurement gives (a finite number above 0, below 1e+30)"),
    ("scale_digits_cpu2_20261125-085608", _set("row", "samples_per_s", -1.0),
     "'samples_per_s' is -1.0, which no measurement gives (a finite number above 0, below 1e+30)"),
    ("comm_cpu2_n2_20261123-121520",
     lambda records: records[0]["time_s"].__setitem__("median", float("inf")),
     "time_s: 'median' is inf, which no measurement gives (a finite number of at least 0, below 1e+30)"),
    # a finite number past any measurement: the statistics overflowed ("OverflowError: math range error")
    ("digits_cpu2_20261123-101734", _set("row", "samples_per_s", 1e300),
     "'samples_per_s' is 1e+300, which no measurement gives (a finite number above 0, below 1e+30)"),
    # a step time no run gives: the report's p10-p90 moved with it, and a median of 0 passed as "at least 0"
    ("digits_cpu2_20261123-101734", lambda records: records[1]["step_times_s"].__setitem__(1, float("nan")),
     "'step_times_s'[1] is nan, which no measurement gives (a finite number above 0, below 1e+30)"),
    ("digits_cpu2_20261123-101734", lambda records: records[1]["step_times_s"].__setitem__(0, -0.5),
     "'step_times_s'[0] is -0.5, which no measurement gives (a finite number above 0, below 1e+30)"),
    ("digits_cpu2_20261123-101734", lambda records: records[1]["step_times_s"].__setitem__(2, float("inf")),
     "'step_times_s'[2] is inf, which no measurement gives (a finite number above 0, below 1e+30)"),
    ("digits_cpu2_20261123-101734", lambda records: records[1]["step_times_s"].__setitem__(2, "0.1"),
     "'step_times_s'[2] is str, expected a number"),
    ("digits_cpu2_20261123-101734", lambda records: records[1]["step_time_s"].__setitem__("median", 0),
     "step_time_s: 'median' is 0, which no measurement gives (a finite number above 0, below 1e+30)"),
    # a round no run makes: the report listed every round the row never ran, and 10^18 took the machine's memory
    ("digits_cpu2_20261123-101734", _set("row", "repeat", 10**18),
     "'repeat' is 1000000000000000000, which no run writes (a launch's round, from 0, below 100,000)"),
    ("digits_cpu2_20261123-101734", _set("row", "repeat", -1),
     "'repeat' is -1, which no run writes (a launch's round, from 0, below 100,000)"),
    # an optional field of another type: it had reached whichever line of a report first read it ("Cannot specify
    # ',' with 's'", "'list' object has no attribute 'get'"), or passed ("ddp" as a row order of 'd', 'd', 'p')
    ("digits_cpu2_20261123-101734", _every(lambda r: r.__setitem__("row_order", "ddp")),
     "'row_order' is str, expected list or null"),
    ("digits_cpu2_20261123-101734", _set("row", "param_count", "many"), "'param_count' is str, expected int or null"),
    ("digits_cpu2_20261123-101734", _set("row", "noise", [1]), "'noise' is list, expected dict or null"),
    ("digits_cpu2_20261123-101734", _set("row", "started_wall", True), "'started_wall' is bool, expected number or null"),
    ("digits_cpu2_20261123-101734", _set("row", "order_seed", "x"), "'order_seed' is str, expected int or null"),
    # a scale record without its point: the report and predict rendered empty sections from it
    ("scale_digits_cpu2_20261125-085608", _every(lambda r: r.pop("scale", None)), "has no 'scale'"),
])
def test_records_no_run_could_write_are_refused_by_report_and_predict(tmp_path, run, change, problem):
    d = _committed_with(tmp_path, run, change)
    for command in ("report", "predict") if run.startswith("scale") else ("report",):
        result = invoke(command, d)
        assert result.exit_code == 2 and result.stderr.startswith(f"error: {d} holds records this compare cannot "
                                                                  f"read ({d / 'records.jsonl'}:")
        assert problem in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_predict_refuses_a_sweep_with_records_of_another_kind_as_report_does(tmp_path):
    def change(records):
        records.append({**records[1], "kind": "run"})
    d = _committed_with(tmp_path, "scale_digits_cpu2_20261125-085608", change)
    result = invoke("predict", d)
    assert result.exit_code == 2 and result.stderr == (
        f"error: {d} holds records of `compare run` among those of `compare scale`; give a directory written by "
        f"`compare scale`\n")


def test_index_skips_a_directory_it_may_not_read_with_a_warning(tmp_path, monkeypatch):
    # `compare index /proc` ended in "PermissionError: [Errno 13] Permission denied: '/proc/1/fdinfo/records.jsonl'"
    # (as root; a user meets it in any directory of another's)
    from harness.ground import record

    idx = tmp_path / "idx"
    shutil.copytree(RUNS / "digits_cpu2_20261123-101734", idx / "ok")
    (idx / "locked").mkdir()
    real = record.records_file

    def records_file(d):
        if Path(d).name == "locked":
            raise PermissionError(13, "Permission denied", str(Path(d) / "records.jsonl"))
        return real(d)
    monkeypatch.setattr(record, "records_file", records_file)
    result = invoke("index", idx)
    assert result.exit_code == 0, result.output
    assert f"warning: skipped {idx / 'locked'}: Permission denied\n" in result.stderr
    assert "[ok]" in (idx / "README.md").read_text()


def test_index_warns_of_runs_report_cannot_render_and_of_a_records_link_to_nowhere(tmp_path):
    good = RUNS / "digits_cpu2_20261123-101734"
    idx = tmp_path / "idx"
    idx.mkdir()

    def banana(records):
        records[0]["kind"] = "banana"
    bad = _committed_with(tmp_path, good.name, banana)
    bad.rename(idx / "banana")
    (idx / "ok").mkdir()
    recs = [json.loads(x) for x in records_text(good).splitlines()]
    recs[1]["label"] = "odd|label\nwith a break"
    (idx / "ok" / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (idx / "loop").mkdir()
    (idx / "loop" / "records.jsonl").symlink_to(idx / "loop" / "records.jsonl")
    result = invoke("index", idx)
    assert result.exit_code == 0, result.output
    assert (f"warning: skipped {idx / 'banana'}: {idx / 'banana' / 'records.jsonl'}:1: kind 'banana'; a record's "
            f"kind is one of run, scale, comm, tune") in result.stderr
    assert (f"warning: skipped {idx / 'loop'}: records.jsonl is a symbolic link that leads nowhere (a missing "
            f"target or a loop)") in result.stderr
    text = (idx / "README.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| [ok]"))
    assert "odd\\|label with a break" in row and row.count(" | ") == 6  # still one row of seven cells
    assert "[banana]" not in text and "[loop]" not in text


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KiB tmpfs, mounted for the test and unmounted after (root only)."""
    import os
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("Requires: root (to mount a small tmpfs)")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], check=True,
                       capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"Requires: a tmpfs mount ({exc})")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.parametrize("sub", ["run", "comm", "scale", "tune"])
@pytest.mark.parametrize("fill", [0, 60 * 1024], ids=["empty", "full"])
def test_an_out_on_a_filesystem_too_small_for_the_run_is_refused_before_anything_is_created(tiny_disk, sub, fill):
    # a full filesystem was found at the first launch's records, after the directories were made
    import shutil

    if fill:
        (tiny_disk / "filler").write_bytes(b"\0" * fill)
    free = shutil.disk_usage(tiny_disk).free
    out = tiny_disk / "runs" / "o"
    args = {"run": ["-a", "ddp", "--steps", "5", "--repeats", "1"], "comm": ["--backends", "torch"],
            "scale": ["-a", "ddp", "--world-sizes", "1,2", "--no-model"],
            "tune": ["-a", "ddp", "--tune", "ddp.bucket_cap_mb=1", "--steps", "5"]}[sub]
    result = invoke(sub, *args, "--out", out)
    assert result.exit_code == 2, result.output
    shown = f"{free / 2**10:,.0f} KiB" if free >= 1024 else f"{free} bytes"
    assert result.stderr.startswith(f"error: output directory {out} is on a filesystem with {shown} free, less than "
                                    f"the "), result.stderr
    assert result.stderr.endswith("; free some space or choose another --out\n") and result.stderr.count("\n") == 1
    assert not (tiny_disk / "runs").exists()
    if sub == "tune":  # an outside check: it counted 3 (one launch a row); 2 candidates raced and confirmed are 12
        assert "logs of 13 launch(es)" in result.stderr, result.stderr


# ---- a row's interpreter and environment (python=PATH, env.NAME=VALUE; issue 65) ------------------------------------
@pytest.mark.parametrize("row, message", [
    ("ddp:python={tmp}/notes.txt", "adapter row 'ddp:python={tmp}/notes.txt': python={tmp}/notes.txt is not an "
                                   "executable file; give a Python interpreter, e.g. python=/path/to/venv/bin/python"),
    ("ddp:python=/bin/true", "adapter row 'ddp:python=/bin/true': python=/bin/true is not a Python interpreter with "
                             "torch (no output); give one, e.g. python=/path/to/venv/bin/python"),
    ("ddp:env.=1", "adapter row 'ddp:env.=1': 'env.' needs a variable name (letters, digits and _, not starting with "
                   "a digit), e.g. env.NCCL_ALGO=Ring"),
    ("ddp:env.9X=1", "adapter row 'ddp:env.9X=1': 'env.9X' needs a variable name"),
    ("ddp:env.OMP_NUM_THREADS=4", "adapter row 'ddp:env.OMP_NUM_THREADS=4': OMP_NUM_THREADS is set by the harness for "
                                  "every row (threads with --threads, placement by the launcher); a row may set other "
                                  "variables, e.g. env.NCCL_ALGO=Ring"),
])
def test_a_rows_interpreter_or_variable_is_refused_in_one_line_before_anything_runs(tmp_path, row, message):
    from conftest import compare_cli

    (tmp_path / "notes.txt").write_text("not a program\n")
    row, message = row.format(tmp=tmp_path), message.format(tmp=tmp_path)
    out = tmp_path / "o"
    proc = compare_cli("run", "-a", f"spawn,{row}", "--out", str(out))
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert proc.stderr.startswith(f"error: {message}") and proc.stderr.count("\n") == 1, proc.stderr
    assert not out.exists()


def test_a_module_shadowing_numpy_on_the_path_is_one_line_before_anything_is_written(tmp_path):
    # a numpy.py with a syntax error on PYTHONPATH failed every launch with "SyntaxError: invalid syntax", naming
    # neither numpy nor the file, and a user file's import was blamed for it
    from conftest import compare_cli

    site = tmp_path / "site"
    site.mkdir()
    (site / "numpy.py").write_text("this is not python\n")
    out = tmp_path / "out"
    proc = compare_cli("run", "-a", "ddp", "--out", str(out), env={"PYTHONPATH": str(site)}, timeout=120)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (f"error: numpy is shadowed by {site / 'numpy.py'}, a module that is not the numpy package, "
                           f"in front of it on the path; every adapter needs numpy: remove it from PYTHONPATH (or "
                           f"rename it)\n")
    assert not out.exists()


def test_an_out_under_a_virtual_filesystem_says_it_takes_no_new_entries(tmp_path):
    # An outside check: `--out /proc/self/x` said "not writable: No such file or directory (/proc/self)", of a
    # directory that is there (/proc refuses new entries even to root)
    for out, where in ((Path("/proc/self/x"), "/proc/self"), (Path("/proc/compare-test"), "/proc")):
        result = invoke("run", "--out", out)
        assert (result.exit_code, result.stderr) == (2, (
            f"error: output directory {out} cannot be made: {where} takes no new entries (a virtual filesystem "
            f"such as /proc or /sys); choose another --out\n"))


@pytest.mark.parametrize("content, said", [
    ('{"sessions": []}', "its list of sessions is empty; a join written by `compare join` lists two runs or more"),
    ("[1, 2]", "a JSON list, not an object with a list of sessions"),
], ids=["empty", "a-list"])
def test_a_join_whose_sessions_json_lists_no_sessions_is_one_line_in_report_diff_and_run_join(tmp_path, content, said):
    # an empty list was an IndexError traceback in diff, run --join and index
    join = tmp_path / "j"
    join.mkdir()
    (join / "sessions.json").write_text(content)
    other = RUNS / "digits_cpu2_20261126-045209"
    for args, prefix in ((["report", join], ""), (["diff", join, other], ""),
                         (["run", "--join", join, "--out", tmp_path / "new", "--repeats", "1"], f"--join {join}: ")):
        result = invoke(*args)
        assert (result.exit_code, result.stderr) == (2, f"error: {prefix}cannot read {join / 'sessions.json'}: {said}\n")
    assert not (tmp_path / "new").exists() and sorted(p.name for p in join.iterdir()) == ["sessions.json"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_comm_on_cuda_without_a_gpu_says_there_is_none_as_run_does(tmp_path):
    # the default world size on cuda is the GPU count (none here: 1), which was refused as too small for
    # communication; comm's own default of 2 ranks lets each backend say why it cannot run. Which backends are
    # installed (and so how many share the reason) is this machine's: the line's ends are checked.
    out = tmp_path / "o"
    result = invoke("comm", "--device", "cuda", "--out", out)
    assert result.exit_code == 2, result.output
    line = result.stderr
    assert line.startswith("error: no backend can run here: CUDA requested but torch sees no GPU"), line
    assert line.endswith("see `compare list --device cuda --world-size 2` for the reasons and fixes\n"), line
    assert line.count("\n") == 1 and "Traceback" not in result.output and not out.exists()


def _run(tmp_path, name, samples_per_s):
    """A run directory with one row, ddp, whose records are a committed run's with these samples/s per launch."""
    template = next(r for r in read_records(RUNS / "digits_cpu2_20261126-045209" / "records.jsonl.gz")
                    if r["label"] == "ddp")
    d = tmp_path / name
    d.mkdir()
    # each run its own launches (a start time of its own): two runs sharing one are a copy (harness/core/joins.py)
    records = [{**json.loads(json.dumps(template)), "repeat": k, "samples_per_s": v, "run_id": name,
                "launch_wall": template["launch_wall"] + 60 * k + sum(map(ord, name)) * 1e-3}
               for k, v in enumerate(samples_per_s)]
    (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return d


@pytest.mark.parametrize("margin, shown", [("99.9%", "±99.9%"), ("2.5%", "±2.5%"), ("5%", "±5%")])
def test_diff_shows_the_margin_as_given_and_writes_nothing(tmp_path, margin, shown):
    a = _run(tmp_path, "a", [100.0, 101.0, 99.0])
    b = _run(tmp_path, "b", [100.5, 100.0, 99.5])
    before = sorted(p.name for p in tmp_path.rglob("*"))
    result = invoke("diff", "--margin", margin, a, b)
    assert result.exit_code == 0, result.output
    assert f"differences and equivalence within {shown} (TOST) Holm-adjusted" in result.stdout, result.stdout
    assert "±100%" not in result.stdout
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_a_run_holding_both_records_files_is_refused_naming_both(tmp_path):
    # the records.jsonl was read without a word, whatever the records.jsonl.gz beside it held
    import gzip

    d = tmp_path / "both"
    d.mkdir()
    text = records_text(RUNS / "digits_cpu2_20261123-101734")
    (d / "records.jsonl").write_text(text)
    (d / "records.jsonl.gz").write_bytes(gzip.compress(text.encode()))
    before = sorted(p.name for p in d.iterdir())
    both = (f"{d} holds both records.jsonl and records.jsonl.gz, and which are its run's records is not clear; remove "
            f"one")
    result = invoke("report", d)
    assert result.exit_code == 2 and result.stderr == f"error: {both}\n"
    assert sorted(p.name for p in d.iterdir()) == before
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "records.jsonl").write_text(text)
    indexed = invoke("index", tmp_path)
    assert indexed.exit_code == 0
    assert f"warning: skipped {d}: it holds both records.jsonl and records.jsonl.gz" in indexed.output


def _another(tmp_path, run):
    """A copy of a committed run made as another run of its request (its own id and launch times): a diff or join
    takes it as a session of its own, not as a copy of the run."""
    (tmp_path / "other").mkdir()

    def change(records):
        for r in records:
            r["run_id"], r["launch_wall"] = "other", r.get("launch_wall", 0) + 86400.0
    return _committed_with(tmp_path / "other", run, change)


@pytest.mark.parametrize("change, command", [
    # what passes the field check (each optional field's own type) but not a reader: report refused such copies in
    # one line while these readers raised tracebacks (an outside check's damaged copies)
    (_set("row", "topology", {}), "plan"),
    (_set("row", "topology", {"devices": 2}), "plan"),
])
def test_records_of_a_shape_no_reader_can_use_are_one_line_in_plan_diff_and_join(tmp_path, change, command):
    run = "digits_cpu2_20261123-101734"
    bad = _committed_with(tmp_path, run, change)
    good = _another(tmp_path, run)
    args = {"plan": ["plan", "--from", bad], "diff": ["diff", bad, good],
            "join": ["join", tmp_path / "j", good, bad]}[command]
    result = invoke(*args)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert result.stderr.startswith({"plan": f"error: cannot plan from {bad}: its records.jsonl holds a record of a "
                                             f"shape this compare cannot read (",
                                     "diff": f"error: cannot diff {bad} and {good}: a records.jsonl of theirs "
                                             f"holds a record of a shape this compare cannot read (",
                                     "join": f"error: cannot join {good}, {bad}: a records.jsonl of theirs holds "
                                             f"a record of a shape this compare cannot read ("}[command]), result.stderr
    assert not (tmp_path / "j").exists()


@pytest.mark.parametrize("command", ["report", "plan", "diff", "join"])
def test_an_optional_field_of_another_type_is_refused_by_name_by_every_reader(tmp_path, command):
    # a hand-edited optional field had reached whichever line first read it: "'list' object has no attribute
    # 'get'" from report, or passed ("ddp" read as the rows 'd', 'd', 'p')
    run = "digits_cpu2_20261123-101734"
    bad = _committed_with(tmp_path, run, _set("row", "noise", "x"))
    good = _another(tmp_path, run)
    args = {"report": ["report", bad], "plan": ["plan", "--from", bad], "diff": ["diff", bad, good],
            "join": ["join", tmp_path / "j", good, bad]}[command]
    result = invoke(*args)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert result.stderr.endswith(f"holds records this compare cannot read ({bad}/records.jsonl:2: 'noise' is str, "
                                  f"expected dict or null)\n"), result.stderr
    assert not (tmp_path / "j").exists()
    assert sorted(p.name for p in bad.iterdir()) == ["records.jsonl", "report.md"]  # as copied: nothing written


@pytest.mark.parametrize("key, value, said", [("workload", "resnet", "workload resnet, record 1 of digits"),
                                              ("world_size", 4, "world size 4, record 1 of 2")])
def test_a_records_file_that_is_not_one_runs_is_refused_by_every_reader_as_report_refuses_it(tmp_path, key, value,
                                                                                           said):
    # diff printed "B against A: resnet, world size 2" for a digits run with one record edited; plan, join and
    # run --join read it too
    run = "digits_cpu2_20261123-101734"

    def change(records):
        records[1][key] = value
    bad = _committed_with(tmp_path, run, change)
    good = _another(tmp_path, run)
    for args, where in ((["report", bad], f"{bad}"), (["plan", "--from", bad], f"--from {bad}"),
                        (["diff", bad, good], f"{bad}"), (["join", tmp_path / "j", good, bad], f"{bad}")):
        result = invoke(*args)
        assert result.exit_code == 2 and result.stderr == (
            f"error: {where}: record 2 is of {said}: the records of one run share their "
            f"{key.replace('_', ' ')}; a records.jsonl holds one run\n"), (args, result.output)
    assert not (tmp_path / "j").exists()


@pytest.mark.parametrize("statuses, strict, code, said", [
    (["ok", "failed"], False, 0, ""),  # a failed row is a finding of the run, which wrote its report
    (["ok", "failed", "timeout"], True, 1, "error: --strict: ddp1, ddp2 did not run to the end (the report says "
                                           "why)\n"),
    (["ok", "ok"], True, 0, ""),
    (["failed", "diverged"], False, 1, ""),  # nothing measured
])
def test_strict_makes_a_run_with_a_row_that_did_not_finish_exit_1(tmp_path, capsys, statuses, strict, code, said):
    # a crashed backend had been visible to a script or CI only by reading the report: the exit code was 0
    import typer

    from harness.commands.common import conclude

    records = [{"label": f"ddp{i}", "status": s, "repeat": 0} for i, s in enumerate(statuses)]
    try:
        conclude(records, tmp_path, False, "report.md", strict=strict)
        got = 0
    except typer.Exit as exc:
        got = exc.exit_code
    assert got == code
    assert capsys.readouterr().err == said


def test_a_run_killed_before_its_first_record_is_told_as_such_by_report(tmp_path):
    # An outside check: compare killed (SIGKILL) after its reference but before its first row's record left a
    # directory of logs/ and its lock, of which report said "give a directory written by compare run": it was one
    from harness.ground.outdir import LOCK_NAME  # the name record.py reads

    d = tmp_path / "killed"
    (d / "logs").mkdir(parents=True)
    (d / "logs" / "reference.log.gz").write_bytes(b"")
    (d / LOCK_NAME).write_text("")
    result = invoke("report", str(d))
    assert result.exit_code == 2
    assert result.stderr == (f"error: {d} holds no records.jsonl: the run that wrote it ended before its first row's "
                             f"record was saved (its logs/ holds only reference.log.gz; killed?); run it again\n")


def test_a_workload_variants_own_option_cannot_be_overridden_under_its_name():
    # an outside check: -w resnet50 -o arch=resnet18 built a ResNet-18 labelled "resnet50 (arch=resnet18)"
    result = invoke("plan", "-w", "resnet50", "-o", "arch=resnet18", "--gpu", "h100")
    assert result.exit_code == 2 and result.stderr == (
        "error: workload resnet50: it is resnet with arch=resnet50; -o arch=resnet18 would run another under its "
        "name: give -w resnet -o arch=resnet18\n"), result.stderr
    knobs = invoke("knobs", "resnet50")
    assert "arch: resnet50, set by the name resnet50 (another value: its base workload)" in knobs.stdout


@pytest.mark.parametrize("cut, said", [
    (True, "a truncated gzip file (it ends before gzip's end-of-stream marker); copy it again whole"),
    (False, "not a gzip file"),
])
def test_a_cut_records_gz_is_called_truncated_not_a_gzip_file_that_is_not_one(tmp_path, cut, said):
    # A records.jsonl.gz cut short (a copy that stopped) was called "not a gzip file"
    import gzip

    d = tmp_path / "run"
    d.mkdir()
    data = gzip.compress(records_text(RUNS / "digits_cpu2_20261123-101734").encode())
    (d / "records.jsonl.gz").write_bytes(data[:2000] if cut else b"plain text, not gzip")
    result = invoke("report", d)
    assert result.exit_code == 2 and result.stderr.startswith(
        f"error: {d} holds records this compare cannot read ({d / 'records.jsonl.gz'}: {said}"), result.stderr
    assert sorted(p.name for p in d.iterdir()) == ["records.jsonl.gz"]


def test_control_characters_in_a_quoted_message_are_shown_escaped_not_sent_to_the_terminal():
    # A rank's exception "\x1b[2J\x1b[31mred" cleared the user's terminal and landed raw in report.md: a terminal's
    # escape sequences are dropped (a framework's coloured log line reads as its text), other controls escaped
    from harness.shared.text import one_line, shorten

    assert one_line("RuntimeError: \x1b[2J\x1b[31mred\x1b[0m\rcarriage\x00nul\x7f \x1bX") == \
        "RuntimeError: red carriage\\x00nul\\x7f \\x1bX"
    assert "\x1b" not in shorten("\x1b[2J" * 100 + "\x1b", 40) and shorten("a\tb\n c", 40) == "a b c"
