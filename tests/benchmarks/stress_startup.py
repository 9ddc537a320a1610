"""Stress loop (not a test): do launches ever hang on their way to their first steps?

    .venv/bin/python tests/benchmarks/stress_startup.py [--minutes 30] [--adapters ddp,horovod,spawn,deepspeed]
                                                        [--kill launcher|compare] [--keep DIR]

Twice in full test suites (a Horovod launch once, a ddp launch once, each right after the `kill -9` tests of
tests/distributed/test_hardening.py) a launch did not reach its first steps in 240 s, and runs of those tests alone
never showed it. This loop does what those tests do, over and over, for as long as it is given: start `compare run`
on one adapter (taking the adapters in turn) with rank 1 hung at step 3, wait for rank 0's step 3, then kill -9
compare itself (`--kill compare`, the default) or the framework's launcher (`--kill launcher`, as the other
hardening test does), and wait until every process of the run has gone. Each launch that takes more than 60 s to
reach step 3, or never does (400 s), is described (every process with its state and kernel wait channel, rank 0's
progress, the launch logs) into --keep. compare's own stall watch runs at --stall-timeout 120, so a launch that
hangs before its first word is also stopped and described by compare itself (its log is kept too).

It prints one line per launch and, at the end, per adapter: launches, how many reached step 3, and the time to step
3 (median, 95th percentile, maximum).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import adapters  # noqa: E402
from launchwatch import cmdline, describe, launch_progress  # noqa: E402

LAUNCHERS = {"ddp": "torch.distributed.run", "horovod": "horovodrun", "deepspeed": "deepspeed.launcher.launch",
             "spawn": "adapters.spawn"}
"""What --kill launcher kills, per adapter (spawn's is the process that calls torch.multiprocessing.spawn)."""
SLOW_S, GIVE_UP_S = 60.0, 400.0


def one_launch(adapter: str, kill: str, keep: Path, i: int) -> dict:
    out = Path(tempfile.mkdtemp(prefix="compare-stress-"))
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "-a", adapter, "--steps", "100000", "--warmup",
                             "2", "--equiv-steps", "0", "--stall-timeout", "120", "--repeats", "1",
                             "--out", str(out / "o")],
                            cwd=REPO, env={**os.environ, "COMPARE_FAULT": f"{adapter}:1:hang:3"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    root = psutil.Process(proc.pid)
    reached, described = None, False
    try:
        while time.monotonic() - t0 < GIVE_UP_S and proc.poll() is None:
            progress = launch_progress(root)
            if progress and progress.get("step", 0) >= 3:
                reached = time.monotonic() - t0
                break
            if not described and time.monotonic() - t0 > SLOW_S:
                described = True
                (keep / f"slow-{i}-{adapter}.txt").write_text(describe(root, log_chars=4000))
            time.sleep(0.2)  # polling a condition with a deadline, not synchronising
    except BaseException:  # Ctrl-C or SIGTERM of the stress loop: the run in flight goes with it (kill -9 of
        proc.kill()        # compare takes every process it launched)
        raise
    tree = root.children(recursive=True) if proc.poll() is None else []
    if reached is None:
        (keep / f"hang-{i}-{adapter}.txt").write_text(describe(root, log_chars=4000) if proc.poll() is None else "")
    killed = None
    if proc.poll() is None:
        victim, killed = proc.pid, "compare"
        if kill == "launcher" and reached is not None:
            mark = LAUNCHERS[adapter]
            found = [p for p in tree if mark in cmdline(p)]
            if found:
                victim, killed = min(found, key=lambda p: p.create_time()).pid, mark
        os.kill(victim, signal.SIGKILL)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    _, alive = psutil.wait_procs(tree, timeout=20)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    if reached is None and (out / "o" / "logs").is_dir():
        shutil.copytree(out / "o" / "logs", keep / f"hang-{i}-{adapter}-logs", dirs_exist_ok=True)
    shutil.rmtree(out, ignore_errors=True)
    for scratch in Path(tempfile.gettempdir()).glob(f"compare-{proc.pid}-scratch-*"):
        shutil.rmtree(scratch, ignore_errors=True)
    return {"i": i, "adapter": adapter, "reached_s": None if reached is None else round(reached, 2), "killed": killed,
            "outlived_kill": len(alive), "load": round(os.getloadavg()[0], 2),
            "stderr": "" if reached is not None else err[-1000:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--adapters", default="ddp,horovod,spawn,deepspeed")
    ap.add_argument("--kill", choices=("compare", "launcher"), default="compare")
    ap.add_argument("--keep", default=str(Path(tempfile.gettempdir()) / "compare-stress"))
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    names = []
    for name in (a for a in args.adapters.split(",") if a):
        available = adapters.availability(name, "cpu", 2)
        if available:
            names.append(name)
        else:
            print(f"stress: {name} left out: {available.reason}", flush=True)
    keep = Path(args.keep)
    keep.mkdir(parents=True, exist_ok=True)
    print(f"stress: {args.adapters} in turn for {args.minutes:g} min, killing {args.kill}; load {os.getloadavg()}; "
          f"descriptions under {keep}", flush=True)
    end, i, runs = time.monotonic() + args.minutes * 60, 0, []
    while time.monotonic() < end:
        run = one_launch(names[i % len(names)], args.kill, keep, i + 1)
        i += 1
        runs.append(run)
        print(json.dumps(run), flush=True)
    print("\nadapter | launches | reached step 3 | to step 3: median / p95 / max (s)")
    for name in names:
        mine = [r for r in runs if r["adapter"] == name]
        times = sorted(r["reached_s"] for r in mine if r["reached_s"] is not None)
        spread = (f"{statistics.median(times):.1f} / {times[int(0.95 * (len(times) - 1))]:.1f} / {times[-1]:.1f}"
                  if times else "-")
        print(f"{name} | {len(mine)} | {len(times)} | {spread}")
    hung = [r for r in runs if r["reached_s"] is None]
    print(f"\n{len(runs)} launches, {len(hung)} did not reach step 3" + (f": see {keep}" if hung else ""))


if __name__ == "__main__":
    main()
