"""The scale model's DeepSpeed schedule (harness/model/costmodel.py zero_calls, from the adapter's comm_schedule) against
the collectives DeepSpeed really issues in one step, counted in a 2-rank run of each ZeRO stage with the adapter's
own config (tests/distributed/ds_collectives_rank.py, under the `deepspeed` launcher). A DeepSpeed release that
changes how a stage communicates fails here instead of silently mispricing the stage."""

import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest

import adapters
from adapters import deepspeed as ds
from adapters import deepspeed_env
from harness.launching.hosts import free_port
from harness.model import costmodel as cm

REPO = Path(__file__).resolve().parents[2]
_AVAIL = adapters.availability("deepspeed", "cpu", 2)
pytestmark = [pytest.mark.distributed,
              pytest.mark.skipif(not _AVAIL, reason=f"Requires: deepspeed ({_AVAIL.message()})")]
SLACK = 64
"""Bytes a counted buffer may differ from the model's: DeepSpeed pads partitions to an alignment."""


@pytest.fixture(scope="module")
def counted():
    port = free_port()
    env = {**os.environ, "COMPARE_REPO": str(REPO), "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1",
           "TORCH_EXTENSIONS_DIR": str(deepspeed_env.jit_cache_dir())}
    cmd = [deepspeed_env.launcher_path(), "--num_gpus", "2", "--master_addr", "127.0.0.1", "--master_port", str(port),
           str(Path(__file__).with_name("ds_collectives_rank.py"))]
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=420,
                              start_new_session=True)
    finally:
        deepspeed_env.shm_sweeper("127.0.0.1", port)()
    lines = [line for line in proc.stdout.splitlines() if "COLLECTIVES " in line]
    assert proc.returncode == 0 and lines, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(lines[-1].split("COLLECTIVES ", 1)[1])


def _match(counted_calls, modelled_calls):
    """Pair each modelled call with a counted one of the same op and size (within SLACK); the unpaired rest."""
    left = list(counted_calls)
    missing = []
    for op, size in modelled_calls:
        hit = next((c for c in left if c[0] == op and abs(c[1] - size) <= SLACK), None)
        if hit is None:
            missing.append((op, size))
        else:
            left.remove(hit)
    return missing, left


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_the_model_issues_the_collectives_deepspeed_issues(counted, stage):
    run = counted[str(stage)]
    schedule = ds.DeepSpeedAdapter({"zero_stage": stage}, "cpu").comm_schedule()
    grads = [(b, 0.0) for b in reversed(run["params"])]  # backward makes the last layer's gradients ready first
    modelled = [call for phase in cm.zero_calls(schedule, grads, 2) for call in phase]
    missing, extra = _match([tuple(c) for c in run["calls"]], modelled)
    assert (missing, extra) == ([], []), (
        f"ZeRO-{stage}: modelled but not issued {missing}; issued but not modelled {extra}; "
        f"issued {Counter(c[0] for c in run['calls'])}")


@pytest.mark.parametrize("stage", [2, 3])
def test_small_gradient_buckets_cost_the_calls_deepspeed_makes(counted, stage):
    # reduce_bucket_size below the model's size: DeepSpeed reduces bucket by bucket. Same op, same number of calls,
    # same bytes; single sizes may differ (it splits where partitions meet and may defer a small gradient).
    run = counted[f"{stage}:reduce_bucket_elems=50000"]
    schedule = ds.DeepSpeedAdapter({"zero_stage": stage, "reduce_bucket_elems": 50000}, "cpu").comm_schedule()
    grads = [(b, 0.0) for b in reversed(run["params"])]
    modelled = [call for phase in cm.zero_calls(schedule, grads, 2) for call in phase]

    def per_op(calls):
        return {op: (sum(1 for o, _ in calls if o == op), sum(b for o, b in calls if o == op))
                for op in {o for o, _ in calls}}

    issued, model = per_op([tuple(c) for c in run["calls"]]), per_op(modelled)
    assert issued.keys() == model.keys()
    for op in issued:
        assert issued[op][0] == model[op][0], (op, run["calls"], modelled)
        assert abs(issued[op][1] - model[op][1]) <= SLACK * issued[op][0], (op, run["calls"], modelled)
    # the gradients (85,002 elements) in three buckets of at most 50,000 (the norm's 4-byte all-reduce aside)
    assert sum(1 for op, size in run["calls"] if op == schedule.grad_reduce and size > SLACK) == 3


def test_zero_3_gathers_each_parameter_once_and_zero_1_2_all_reduce(counted):
    # the two facts the old schedule had wrong (2 gathers of every parameter; a reduce-scatter for ZeRO-1/2)
    params = counted["3"]["params"]
    gathers = sorted(size for op, size in counted["3"]["calls"] if op == "all_gather")
    assert len(gathers) == len(params) and all(abs(g - p) <= SLACK for g, p in zip(gathers, sorted(params)))
    for stage in ("1", "2"):
        ops = Counter(op for op, _ in counted[stage]["calls"])
        assert ops == {"all_reduce": 2, "all_gather": 1}, ops
