"""Stress loop (not a test): is the culprit of a failed launch named right, whoever is killed, whenever?

    .venv/bin/python tests/benchmarks/stress_culprit.py [--kills 300] [--minutes 0] [--seed 1]
        [--launchers torchrun,horovodrun,deepspeed,spawn,srun] [--keep DIR]

Each trial starts `compare run` on one adapter (the launchers in turn: torchrun is ddp's, horovodrun Horovod's, the
deepspeed runner DeepSpeed's, torch.multiprocessing.spawn spawn's, and srun ddp's under SLURM on a simulated two-host
cluster), waits for a moment drawn at random, then kills one victim drawn at random with SIGKILL or SIGTERM:

- moments: set-up (every rank has started, none has passed the gate), warm-up, the timed steps, evaluation and
  shutdown (rank 1 held there by fault injection, COMPARE_FAULT ...:1:hang:eval or :hang:end, so the moment lasts);
- victims: the launcher (the command compare started), one rank (the process its launcher started: its
  supervisor), a rank's child (its worker), or compare itself.

Then it reads the row and checks that its reason names that victim and that signal and nothing else: a rank only if
that rank was the victim, the launcher only if it was (a row ok with every result written names it in its
`shutdown_error`); compare killed by SIGTERM gives an `interrupted` row; compare killed by SIGKILL leaves no row,
and every process of the run must be gone within 20 s. A kill that finds its victim already gone is counted as
missed, not as a kill. Each wrong culprit's row, log and facts are kept under --keep.

It prints one line per trial and, at the end, per launcher and victim: kills, right, wrong, missed. srun needs root
and `make cluster-deps SLURM=1`; without them it is left out, with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import adapters  # noqa: E402
from harness.shared import progress as progress_file  # noqa: E402

from launchwatch import cmdline  # noqa: E402

SIMHOSTS = REPO / "harness" / "cluster" / "simhosts"
LAUNCHERS = {
    # name in reasons: (adapter, how the launcher's command line is told apart)
    "torchrun": ("ddp", "torch.distributed.run"),
    "horovodrun": ("horovod", "bin/horovodrun"),
    "deepspeed": ("deepspeed", "bin/deepspeed "),
    "torch.multiprocessing.spawn": ("spawn", "adapters.spawn"),
    "srun": ("ddp", "srun "),
}
SHORT_NAMES = {"torchrun": "torchrun", "horovodrun": "horovodrun", "deepspeed": "deepspeed",
               "spawn": "torch.multiprocessing.spawn", "srun": "srun"}
MOMENTS = ("setup", "warmup", "timed", "eval", "shutdown")
VICTIMS = ("launcher", "rank", "child", "compare")
GIVE_UP_S = 240.0


def _ns_pid(pid: int) -> int:
    """A process's pid inside its own (innermost) PID namespace."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return pid


def _rank_dir(out: Path, compare: psutil.Process | None) -> Path | None:
    """The running launch's rank directory (its rank-0 label's): in /tmp for one host, under --out across hosts."""
    found = [p.parent for p in (*out.glob(".compare-*-scratch-*/*-r0/spec.json"),
                                *Path(tempfile.gettempdir()).glob(
                                    f"compare-{compare.pid if compare else 'x'}-scratch-*/*-r0/spec.json"))]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def _started(rank_dir: Path) -> dict[int, dict]:
    out = {}
    for f in rank_dir.glob("start-rank*.json"):
        try:
            rec = json.loads(f.read_text())
            out[rec["rank"]] = rec
        except (OSError, ValueError):
            continue
    return out


def _process(rec: dict, key: str) -> psutil.Process | None:
    """A rank's supervisor or worker from its start record: by its pid, which is the one in its own PID namespace
    (srun's ranks run in the simulated hosts' namespaces), and created no later than the record."""
    pid = rec[key]

    def it(p: psutil.Process) -> bool:
        try:
            return p.create_time() <= rec["start"] + 1.0 and p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    try:
        p = psutil.Process(pid)
        if _ns_pid(p.pid) == pid and it(p):
            return p
    except psutil.Error:
        pass
    return next((p for p in psutil.process_iter() if p.pid != pid and _ns_pid(p.pid) == pid and it(p)
                 and ("harness.rank" in cmdline(p) or "spawn_main" in cmdline(p))), None)


class Trial:
    def __init__(self, launcher: str, moment: str, victim: str, sig: int, rank: int, cluster: dict | None,
                 steps: int, timed_step: int):
        self.launcher, self.moment, self.victim, self.sig, self.rank = launcher, moment, victim, sig, rank
        self.timed_step = timed_step
        self.adapter, self.mark = LAUNCHERS[launcher]
        self.cluster = cluster
        self.tmp = Path(tempfile.mkdtemp(prefix="compare-culprit-"))
        self.out = self.tmp / "o"
        fault = {"eval": f"{self.adapter}:1:hang:eval", "shutdown": f"{self.adapter}:1:hang:end"}.get(moment)
        args = ["run", "-a", self.adapter, "--repeats", "1",
                "--steps", str(steps if moment in ("eval", "shutdown") else 100000),
                "--warmup", "30", "--equiv-steps", "0", "--timeout", "200", "--stall-timeout", "120",
                "--out", str(self.out)]
        env = {k: v for k, v in os.environ.items() if k != "COMPARE_FAULT"}
        if fault:
            env["COMPARE_FAULT"] = fault
        if launcher == "srun":
            c = cluster
            argv = [str(SIMHOSTS), "exec", "--prefix", c["prefix"], "h1", "env",
                    f"PATH={c['ssh_dir']}:{os.environ['PATH']}",
                    *([f"COMPARE_FAULT={fault}"] if fault else []), "salloc", "-N2", "--ntasks-per-node=1",
                    sys.executable, "-m", "harness", *args[:1], "--launcher", "slurm", "--iface", "mn0", *args[1:]]
        else:
            argv = [sys.executable, "-m", "harness", *args]
        self.proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)
        self.root = psutil.Process(self.proc.pid)

    def compare(self) -> psutil.Process | None:
        if self.launcher != "srun":
            return self.root
        try:
            return next((p for p in self.root.children(recursive=True)
                         if cmdline(p).split()[1:4] == ["-m", "harness", "run"]), None)
        except psutil.Error:
            return None

    def reached(self) -> tuple[Path, dict] | None:
        """The rank directory and rank 0's progress once the moment has come."""
        rank_dir = _rank_dir(self.out, self.compare())
        if rank_dir is None:
            return None
        started = _started(rank_dir)
        progress = progress_file.read(rank_dir / "progress.bin") or {}
        phase = progress.get("phase", "")
        if len(started) < 2:
            return None
        if self.moment == "setup":
            ok = phase in ("importing", "setup", "waiting for the previous launch to end", "")
        elif self.moment == "warmup":
            ok = phase == "warmup" and progress.get("step", 0) >= 2
        elif self.moment == "timed":
            ok = phase == "timed" and progress.get("step", 0) >= self.timed_step
        elif self.moment == "eval":
            ok = phase == "eval"
        else:
            ok = phase == "shutdown" or (rank_dir / "rank1.json").exists() and (rank_dir / "rank0.json").exists()
        return (rank_dir, progress) if ok else None

    def victim_process(self, rank_dir: Path) -> psutil.Process | None:
        if self.victim == "compare":
            return self.compare()
        if self.victim == "launcher":
            tree = [p for p in self.root.children(recursive=True) if self.mark in cmdline(p)]
            return min(tree, key=lambda p: p.create_time()) if tree else None
        rec = _started(rank_dir).get(self.rank)
        if rec is None:
            return None
        return _process(rec, "supervisor_pid" if self.victim == "rank" else "worker_pid")


def expected(trial: Trial, my_pid: int) -> re.Pattern:
    """What a right reason says (for the launcher, for rank r, ...)."""
    name, sig = trial.launcher, signal.Signals(trial.sig).name
    on = r"( on \S+)?"
    # srun's ranks on h2 run in a PID namespace of their own, where this process has no pid
    sender = (rf"\((the kernel, or a process in another PID namespace|pid {my_pid}: .*)\)$" if trial.launcher == "srun"
              else rf"\(pid {my_pid}: ")
    if trial.victim == "launcher":
        if trial.sig == signal.SIGKILL:
            return re.compile(rf"the launcher \({re.escape(name)}\) was killed by SIGKILL from outside "
                              r"(while its ranks ran; the ranks it left were then stopped|before any of its ranks "
                              r"started)$")
        # a launcher may catch SIGTERM, stop its ranks and exit with its own words
        return re.compile(rf"(the launcher \({re.escape(name)}\) (was killed by SIGTERM from outside|(exited with "
                          rf"code \d+|was killed by \w+) and stopped its ranks|was asked to stop)|launch (exited with "
                          rf"code|killed by))")
    r = trial.rank
    if trial.victim == "rank" and trial.sig == signal.SIGKILL:
        return re.compile(rf"rank {r}{on} killed from outside \(no exit status recorded: SIGKILL, or the OOM killer\)$")
    if trial.sig == signal.SIGKILL:
        return re.compile(rf"rank {r}{on} killed by SIGKILL$")
    return re.compile(rf"rank {r}{on} killed by {sig} from outside {sender}")


def run_trial(trial: Trial, keep: Path, i: int, my_pid: int) -> dict:
    t0 = time.monotonic()
    found = None
    while time.monotonic() - t0 < GIVE_UP_S and trial.proc.poll() is None:
        found = trial.reached()
        if found:
            break
        time.sleep(0.005)  # polling a condition with a deadline, not synchronising
    result = {"i": i, "launcher": trial.launcher, "moment": trial.moment, "victim": trial.victim,
              "signal": signal.Signals(trial.sig).name,
              "rank": trial.rank if trial.victim in ("rank", "child") else None}
    tree = []
    try:
        tree = [trial.root, *trial.root.children(recursive=True)]
    except psutil.Error:
        pass
    victim = trial.victim_process(found[0]) if found else None
    if found:
        result["phase_at_kill"] = found[1].get("phase")
    outcome = "missed"
    if victim is not None:
        try:
            victim.send_signal(trial.sig)
            outcome = None
        except psutil.Error:
            victim = None
    if outcome == "missed" and trial.proc.poll() is None:  # nothing to wait for: end the run now
        (trial.compare() or trial.root).send_signal(signal.SIGTERM)
    try:
        _, err = trial.proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        trial.proc.kill()
        _, err = trial.proc.communicate()
    records = trial.out / "records.jsonl"
    rows = [json.loads(line) for line in records.read_text().splitlines()] if records.exists() else []
    row = rows[-1] if rows else {}
    reason = row.get("reason") or (row.get("shutdown_error") or "").replace(
        "after every rank had written its result: ", "")
    result.update(status=row.get("status"), reason=reason)
    if outcome is None:
        if trial.victim == "compare" and trial.sig == signal.SIGKILL:
            _, alive = psutil.wait_procs(tree[1:], timeout=20)
            alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
            outcome = "right" if not alive else "wrong"
            result["left"] = [cmdline(p)[:100] for p in alive]
        elif trial.victim == "compare":
            outcome = "right" if row.get("status") == "interrupted" else "wrong"
        elif row.get("status") == "ok" and not row.get("shutdown_error"):
            outcome = "missed"  # the launch had ended cleanly before the signal mattered
        else:
            outcome = "right" if expected(trial, my_pid).match(reason) else "wrong"
    result["outcome"] = outcome
    result["s"] = round(time.monotonic() - t0, 1)
    if outcome == "wrong":
        dest = keep / f"wrong-{i}-{trial.launcher}-{trial.victim}"
        shutil.copytree(trial.out, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".compare-*"))
        (dest / "trial.json").write_text(json.dumps({**result, "stderr": err[-3000:]}, indent=1))
    for p in tree[1:]:
        try:
            p.kill()
        except psutil.Error:
            pass
    shutil.rmtree(trial.tmp, ignore_errors=True)
    return result


def _cluster(keep: Path) -> tuple[dict | None, str]:
    check = subprocess.run([str(SIMHOSTS), "check", "--slurm"], capture_output=True, text=True)
    if check.returncode:
        return None, (check.stdout or check.stderr).strip()
    prefix = f"s{os.getpid()}"[:10]
    up = subprocess.run([str(SIMHOSTS), "up", "--prefix", prefix, "--slurm"], capture_output=True, text=True,
                        timeout=180)
    if up.returncode:
        return None, up.stdout + up.stderr
    info = json.loads(subprocess.run([str(SIMHOSTS), "env", "--prefix", prefix, "--json"], capture_output=True,
                                     text=True, check=True).stdout)
    return info, ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=300, help="stop after this many kills (missed ones not counted)")
    ap.add_argument("--minutes", type=float, default=0.0, help="or after this long (0: no limit)")
    ap.add_argument("--launchers", default=",".join(SHORT_NAMES))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=60, help="timed steps where evaluation or shutdown is the moment")
    ap.add_argument("--keep", default=str(Path(tempfile.gettempdir()) / "compare-culprit"))
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rng = random.Random(args.seed)
    keep = Path(args.keep)
    keep.mkdir(parents=True, exist_ok=True)
    names, cluster = [], None
    for short in (a for a in args.launchers.split(",") if a):
        launcher = SHORT_NAMES[short]
        adapter = LAUNCHERS[launcher][0]
        available = adapters.availability(adapter, "cpu", 2)
        if not available:
            print(f"stress: {short} left out: {available.reason}", flush=True)
            continue
        if launcher == "srun":
            cluster, why = _cluster(keep)
            if cluster is None:
                print(f"stress: srun left out: {why}", flush=True)
                continue
        names.append(launcher)
    print(f"stress: {', '.join(names)} in turn; load {os.getloadavg()}; wrong culprits kept under {keep}", flush=True)
    end = time.monotonic() + args.minutes * 60 if args.minutes else float("inf")
    results, i = [], 0
    try:
        while sum(r["outcome"] != "missed" for r in results) < args.kills and time.monotonic() < end:
            launcher = names[i % len(names)]
            victim = rng.choice(VICTIMS)
            sig = rng.choice([signal.SIGKILL, signal.SIGTERM])
            moment = rng.choice(MOMENTS)
            # at shutdown rank 0 may have ended already: the rank held there (1) is the one that can be killed
            rank = 1 if moment == "shutdown" else rng.randrange(2)
            trial = Trial(launcher, moment, victim, sig, rank, cluster, args.steps,
                          timed_step=30 + rng.randrange(1, 200))
            i += 1
            result = run_trial(trial, keep, i, os.getpid())
            results.append(result)
            print(json.dumps(result), flush=True)
    finally:
        if cluster is not None:
            subprocess.run([str(SIMHOSTS), "down", "--prefix", cluster["prefix"]], capture_output=True, timeout=180)
    table = Counter((r["launcher"], r["victim"], r["outcome"]) for r in results)
    print("\nlauncher | victim | kills | right | wrong | missed")
    for launcher in names:
        for victim in VICTIMS:
            right, wrong, missed = (table[(launcher, victim, o)] for o in ("right", "wrong", "missed"))
            print(f"{launcher} | {victim} | {right + wrong} | {right} | {wrong} | {missed}")
    kills = [r for r in results if r["outcome"] != "missed"]
    moments = Counter(r["moment"] for r in kills)
    print(f"\n{len(kills)} kills ({', '.join(f'{m} {moments[m]}' for m in MOMENTS)}), "
          f"{sum(r['outcome'] == 'wrong' for r in kills)} wrong culprits, "
          f"{len(results) - len(kills)} missed" + (f"; see {keep}" if any(r['outcome'] == 'wrong' for r in kills)
                                                    else ""))


if __name__ == "__main__":
    main()
