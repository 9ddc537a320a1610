"""Run by tests/distributed/test_deepspeed_collectives.py under the `deepspeed` launcher (2 ranks, CPU, gloo):
for each ZeRO stage, the collectives DeepSpeed issues in one training step with the adapter's own config, counted
where DeepSpeed's comm layer hands them to torch.distributed. Rank 0 prints one JSON line:
{"<config>": {"calls": [[op, bytes], ...], "params": [bytes, ...]}} (op as the model names it; bytes of the full buffer, as nccl-tests counts them)."""

import json
import os
import sys

sys.path.insert(0, os.environ["COMPARE_REPO"])

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402

from adapters import deepspeed as ds  # noqa: E402
from adapters.base import RankInfo  # noqa: E402

CONFIGS = {**{str(stage): {"zero_stage": stage} for stage in (0, 1, 2, 3)},
           **{f"{stage}:reduce_bucket_elems=50000": {"zero_stage": stage, "reduce_bucket_elems": 50000}
              for stage in (2, 3)}}
"""Each ZeRO stage with DeepSpeed's defaults, and ZeRO-2/3 with gradient buckets smaller than the model (85,002
elements), which DeepSpeed reduces bucket by bucket."""
SEEN: list[list] | None = None
FULL = {"all_reduce": ("all_reduce", 0), "all_gather_into_tensor": ("all_gather", 0),
        "reduce_scatter_tensor": ("reduce_scatter", 1), "all_gather": ("all_gather", 0),
        "reduce_scatter": ("reduce_scatter", 1), "reduce": ("reduce", 0), "broadcast": ("broadcast", 0)}
"""torch.distributed call -> (the model's op, which argument holds the full buffer)."""


def counted(name, fn):
    op, arg = FULL[name]

    def wrapper(*args, **kwargs):
        if SEEN is not None:
            t = (list(args) + list(kwargs.values()))[arg]
            size = sum(x.numel() * x.element_size() for x in t) if isinstance(t, (list, tuple)) \
                else t.numel() * t.element_size()
            SEEN.append([op, size])
        return fn(*args, **kwargs)

    return wrapper


for _name in FULL:
    setattr(dist, _name, counted(_name, getattr(dist, _name)))

import deepspeed  # noqa: E402

deepspeed.init_distributed(dist_init_required=True)
own = ds.shm_segment(dist.get_rank())
if own is not None:
    dist.barrier()
    own.unlink(missing_ok=True)
torch.manual_seed(0)
torch.set_num_threads(1)
out = {}
for key, knobs in CONFIGS.items():
    stage = knobs["zero_stage"]
    adapter = ds.DeepSpeedAdapter(knobs, "cpu")
    adapter.info = RankInfo(rank=dist.get_rank(), world_size=2, local_rank=dist.get_rank(), device="cpu",
                            backend="gloo", data_rank=dist.get_rank(), data_world=2)
    adapter.global_batch = 64
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    sizes = [p.numel() * p.element_size() for p in model.parameters()]  # before ZeRO-3 partitions them
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=adapter._ds_config())
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    for step in range(3):  # the last step is counted: set-up and first-step work are over by then
        SEEN = [] if step == 2 else None
        loss = nn.functional.cross_entropy(engine(x), y)
        engine.backward(loss)
        engine.step()
    out[key] = {"calls": SEEN, "params": sizes}
    SEEN = None
    dist.barrier()
if dist.get_rank() == 0:
    print("COLLECTIVES " + json.dumps(out), flush=True)
dist.barrier()
dist.destroy_process_group()
# Leave as the harness's ranks do (harness/rank/life.py): the interpreter's teardown of DeepSpeed's and gloo's native
# threads once aborted a rank ("terminate called without an active exception", SIGABRT) after its work was done.
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
