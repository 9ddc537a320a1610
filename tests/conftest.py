"""Shared test helpers: run the real CLI in a subprocess and read the records it wrote.

Distributed tests launch real processes (torchrun, mp.spawn, ...) with gloo on loopback; nothing is mocked.
On a GPU machine, COMPARE_TEST_GPU=1 turns the GPU skips into failures (as Horovod's HOROVOD_TEST_GPU does).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Copies of committed runs (records and reports, no plots) that tests read and render. Tests never read the
# working tree's results/: a user's own `compare run` lands there, and results/ is curated for readers.
RUNS = REPO / "tests" / "fixtures" / "runs"


def records_text(run: Path) -> str:
    """The records of a run directory as text (a committed fixture's are packed: records.jsonl.gz)."""
    from harness.ground.record import records_file

    path = records_file(run)
    if path.name.endswith(".gz"):
        import gzip

        return gzip.decompress(path.read_bytes()).decode("utf-8")
    return path.read_text(encoding="utf-8")


ROUNDS_OPTIONS = ("--repeats", "--precision", "--budget", "--until-target")


def one_round(args) -> list[str]:
    """`compare run` ARGS with `--repeats 1` added where they say nothing of rounds: a run's default is 3 rounds and
    more (a verdict), which a test of anything else than the rounds need not pay for."""
    args = list(args)
    if args[:1] == ["run"] and not any(str(a).split("=")[0] in ROUNDS_OPTIONS for a in args):
        args += ["--repeats", "1"]
    return args


def compare_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600):
    """Run `python -m harness ARGS` as a user would (`run` with one round unless ARGS say otherwise: one_round);
    returns the CompletedProcess."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "harness", *one_round(args)], cwd=REPO, capture_output=True,
                          text=True, env=full_env, timeout=timeout)


def read_records(out: Path) -> dict[str, dict]:
    """records.jsonl of a run, keyed by row label (repeat 0)."""
    rows = {}
    for line in (out / "records.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["repeat"] == 0:
            rows[rec["label"]] = rec
    return rows


def replacing(args: tuple[str, ...], option: str, value: str) -> tuple[str, ...]:
    """`args` with `option`'s value set to `value` (added where it is not there): compare refuses an option given
    twice, so a test's variant of a shared set of options replaces the value rather than repeating the option."""
    if option not in args:
        return (*args, option, value)
    i = args.index(option)
    return (*args[:i + 1], value, *args[i + 2:])


def run_compare(out: Path, *args: str, env: dict[str, str] | None = None, expect_rc: int = 0, timeout: float = 600,
                plots: bool = False):
    """`compare run --out OUT ARGS`, asserting its exit code; returns (records by label, CompletedProcess). Without
    `plots`, the run draws none (--no-plots: about 3 s a run here); tests of the figures ask for them."""
    proc = compare_cli("run", "--out", str(out), *args, *([] if plots or "--no-plots" in args else ["--no-plots"]),
                       env=env, timeout=timeout)
    assert proc.returncode == expect_rc, f"exit {proc.returncode}\nSTDOUT\n{proc.stdout}\nSTDERR\n{proc.stderr}"
    return read_records(out), proc


def wait_until(condition, what: str, *, timeout: float, proc: subprocess.Popen | None = None,
               interval: float = 0.2, fail: bool = True):
    """Poll `condition()` every `interval` seconds until it returns something truthy, and return that: polling a
    condition, bounded, not synchronising by sleeping. At `timeout` seconds fail naming `what` (or return None when
    not `fail`); if `proc` ends first, fail with its exit code and output (or print them and return None)."""
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            said = f"compare ended before {what}: rc {proc.returncode}\n{out}\n{err}"
            if fail:
                pytest.fail(said)
            print(said)
            return None
        if time.monotonic() >= deadline:
            if fail:
                pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
            return None
        time.sleep(interval)


def ran_ok(rows: dict[str, dict], label: str) -> dict:
    """The row's record, asserted ran ("ok"), or a skip where its framework is not installed here (CPU, 2 ranks)."""
    import adapters

    why = adapters.availability(label.split(":")[0], "cpu", 2)
    if not why:
        pytest.skip(f"{label} is not available here: {why.reason}")
    rec = rows[label]
    assert rec["status"] == "ok", (label, rec.get("reason"), rec.get("log_tail"))
    return rec


def matches_reference(rec: dict) -> None:
    """The row's equivalence with the single process was checked and passed."""
    eq = rec["equivalence"]
    assert eq["checked"] is True and eq["passed"] is True, (rec["label"], rec.get("max_param_diff"), eq)


def require_gpu():
    import torch

    if not torch.cuda.is_available():
        if os.environ.get("COMPARE_TEST_GPU") == "1":
            pytest.fail("COMPARE_TEST_GPU=1 but torch sees no GPU")
        pytest.skip("Requires: CUDA GPU (set COMPARE_TEST_GPU=1 on a GPU machine to make this a failure)")


REQUIRABLE = ("simhosts", "slurm")
"""What COMPARE_REQUIRE may name besides adapters: the simulated cluster (harness/cluster/simhosts) and SLURM in it."""


def _simhosts_problem(slurm: bool) -> str | None:
    check = subprocess.run([str(REPO / "harness" / "cluster" / "simhosts"), "check", *(["--slurm"] if slurm else [])],
                           capture_output=True, text=True, timeout=60)
    return None if check.returncode == 0 else (check.stdout or check.stderr).strip() or f"exit {check.returncode}"


def pytest_sessionstart(session):
    """COMPARE_REQUIRE=horovod,deepspeed,simhosts,slurm (set by .ci/run): a named framework that is unavailable, or
    simulated hosts (with SLURM) that cannot come up, fail the run at once, with the reason (and the last lines of a
    framework's install log), instead of turning their tests into skips and CI green over a broken set-up."""
    import adapters

    required = [n.strip() for n in os.environ.get("COMPARE_REQUIRE", "").split(",") if n.strip()]
    problems = []
    for name in required:
        if name in REQUIRABLE:
            problem = _simhosts_problem(slurm=name == "slurm")
            if problem:
                problems.append(f"{name}: {problem} (`make cluster-deps SLURM=1` as root installs what it needs)")
            continue
        try:
            avail = adapters.availability(name, "cpu", 2)
        except Exception as exc:  # noqa: BLE001 - an unknown name or a broken module is a failure too
            problems.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if not avail:
            log = Path.home() / ".cache" / "compare" / "wheels" / f"{name}-build.log"
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:]) if log.exists() else ""
            problems.append(f"{name}: {avail.message()}" + (f"\n--- last lines of {log} ---\n{tail}" if tail else ""))
    if problems:
        pytest.exit("COMPARE_REQUIRE names what cannot run here:\n" + "\n".join(problems), returncode=1)


def pytest_terminal_summary(terminalreporter):
    """Every skipped test by name, with its reason (-ra groups them by the line that skipped): what a green run did
    not check is read off its log."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    terminalreporter.section(f"{len(skipped)} skipped, by name")
    for report in skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        terminalreporter.write_line(f"{report.nodeid}: {reason.removeprefix('Skipped: ')}")


# `make test` runs the distributed tests not marked `alone` two at a time, each file on one worker (--dist loadfile),
# in collection order (--no-loadscope-reorder): this one, the longest first, so that no long file starts last while
# the other worker has nothing left to run. By their seconds in a `--durations` run on 2026-11-29 (fixtures
# included); a file not listed goes first, the safe side while its length is unknown.
DISTRIBUTED_LONGEST_FIRST = (
    "test_your_models.py", "test_token_losses.py", "test_simhosts.py", "test_failures.py",
    "test_your_models_as_built.py", "test_hardening.py", "test_transformer.py", "test_user_workloads.py",
    "test_horovod.py", "test_tune.py", "test_comparison.py", "test_deepspeed_collectives.py", "test_deepspeed.py",
    "test_breakdown.py", "test_time_to_target.py", "test_fsdp.py", "test_comm.py", "test_multinode_loopback.py",
    "test_comm_hooks.py", "test_clipped_training.py", "test_ab_rows.py", "test_repeats.py", "test_own_backend.py",
    "test_scale.py", "test_bind_cores.py",
)


def pytest_collection_modifyitems(config, items):
    """The distributed tests after the others, their files in DISTRIBUTED_LONGEST_FIRST's order (a stable sort: a
    file's tests keep theirs, so its module-scoped runs are made once)."""
    place = {name: i for i, name in enumerate(DISTRIBUTED_LONGEST_FIRST)}
    items.sort(key=lambda item: (1, place.get(item.path.name, -1)) if item.path.parent.name == "distributed"
               else (0, 0))


def pytest_configure(config):
    """Under pytest-xdist (`make test` runs the distributed tests not marked `alone` two at a time), each worker
    registers its compare runs in a registry of its own (harness/launching/machine.py, COMPARE_RUNS_DIR): a run
    would otherwise be noted as measured beside the other worker's run, which no test here is about. The tests of
    that note start both runs themselves, in one worker."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and "COMPARE_RUNS_DIR" not in os.environ:
        import tempfile

        os.environ["COMPARE_RUNS_DIR"] = str(Path(tempfile.gettempdir()) / f"compare-runs-{worker}")


def tune_records(finished: bool = True) -> list[dict]:
    """A `compare tune` of ddp on digits as its records hold it, made from a committed run's launches (its ddp
    launches as the defaults, its spawn launches as the candidate ddp:bucket_cap_mb=1): three race rounds, then three
    confirmation rounds; without `finished`, no tune_summary (an interrupted tune's records have none)."""
    import copy

    from harness.ground.record import read_records, records_file

    run = read_records(records_file(RUNS / "digits_cpu2_20261126-045209"))
    plan = {"backends": {"ddp": ["ddp", "ddp:bucket_cap_mb=1"]}, "budget_s": 600.0, "per_backend": False,
            "untunable": {}, "unavailable": {}, "skipped": {}, "min_rounds": 3, "halving": True}
    summary = {"budget_s": 600.0, "per_backend": False, "race_rounds": 3, "confirm_rounds": 3,
               "race_ended": {"ddp": "budget"}, "elapsed_s": 300.0, "confirm_s": 150.0, "spent_s": {"ddp": 300.0}}
    out = []
    for stage, offset in (("race", 0), ("confirm", 3)):
        for r in run:
            if r["label"] not in ("ddp", "spawn"):
                continue
            rec = copy.deepcopy(r)
            label = "ddp" if r["label"] == "ddp" else "ddp:bucket_cap_mb=1"
            rec.update(kind="tune", adapter="ddp", label=label, repeat=r["repeat"] + offset, tune={"stage": stage},
                       tune_plan=plan, row_order=["ddp", "ddp:bucket_cap_mb=1"])
            if finished:
                rec["tune_summary"] = summary
            out.append(rec)
    return out


def write(tmp_path: Path, text: str, name: str = "mine.py") -> Path:
    """A user's workload file, `text` dedented, written under tmp_path: the path `-w PATH:NAME` takes."""
    import textwrap

    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def write_run(directory: Path, records: list[dict]) -> Path:
    """records.jsonl of these records in `directory` (made), as a run writes it."""
    from harness.ground.record import write_records

    directory.mkdir(parents=True, exist_ok=True)
    write_records(directory / "records.jsonl", records)
    return directory
