"""--bind-cores: every process of every adapter on its own share of the usable cores, all its threads included
(the communication threads the framework started during set-up too); without it, nothing is bound."""

import os

import pytest

from conftest import run_compare

# alone: another test's ranks would share the cores these ones are bound to
pytestmark = [pytest.mark.distributed, pytest.mark.alone]
SHORT = ("--steps", "20", "--warmup", "2", "--equiv-steps", "2")
USABLE = sorted(os.sched_getaffinity(0))


@pytest.mark.skipif(len(USABLE) < 2, reason="needs 2 usable cores to give 2 ranks one each")
def test_every_rank_and_thread_is_bound_to_its_own_cores(tmp_path):
    rows, _ = run_compare(tmp_path / "bound", "-a", "dp,ddp,spawn,horovod", *SHORT, "--bind-cores")
    half = len(USABLE) // 2
    own = [USABLE[:half], USABLE[half:2 * half]]
    for label in ("ddp", "spawn", "horovod"):
        rec = rows[label]
        assert rec["status"] == "ok" and rec["controls"]["bind_cores"] is True, rec["reason"]
        assert rec["cpu_affinity_per_rank"] == own, label
        # gloo's and Horovod's background threads were started before the binding: bound all the same
        assert rec["cpu_affinity_any_thread_per_rank"] == own, label
        assert rec["equivalence"]["passed"] is True
    assert rows["dp"]["cpu_affinity_per_rank"] == [USABLE]  # one process, every core
    report = (tmp_path / "bound" / "report.md").read_text()
    assert "- Every process bound to its own share of the usable cores (--bind-cores), all its threads." in report
    assert f"cores per rank {','.join(map(str, own[0]))} | {','.join(map(str, own[1]))}; knobs" in report


def test_without_the_option_nothing_is_bound(tmp_path):
    rows, _ = run_compare(tmp_path / "free", "-a", "ddp", *SHORT)
    rec = rows["ddp"]
    assert rec["controls"]["bind_cores"] is False
    assert rec["cpu_affinity_any_thread_per_rank"] == [USABLE, USABLE]
    assert "- Processes not bound to cores: the OS places their threads" in (tmp_path / "free" / "report.md").read_text()


@pytest.mark.skipif(len(USABLE) < 2, reason="needs 2 usable cores to give 2 ranks one each")
def test_the_comm_benchmark_binds_too_and_says_so(tmp_path):
    import json

    from conftest import compare_cli

    out = tmp_path / "comm"
    proc = compare_cli("comm", "--backends", "torch", "--ops", "all_reduce", "--sizes", "4K", "--iters", "5",
                       "--bind-cores", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert records and all(r["bind_cores"] is True for r in records)
    assert ", each rank bound to its own cores, fp32," in (out / "report.md").read_text().splitlines()[0]
