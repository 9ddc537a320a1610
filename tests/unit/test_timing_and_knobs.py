"""Statistics, slowest-rank step times, knob parsing and adapter availability."""

import numpy as np
import pytest

import adapters
from adapters.base import KnobError
from adapters.ddp import DDPAdapter
from harness.ground.stats import percentile, slowest_rank_steps, step_stats
from harness.shared.options import build


@pytest.mark.parametrize("q", [0, 10, 50, 90, 100])
def test_percentile_matches_numpy(q):
    values = [0.3, 0.1, 0.7, 0.2, 0.9, 0.4, 0.05]
    assert percentile(values, q) == pytest.approx(np.percentile(values, q))


def test_step_time_is_the_slowest_rank_per_step():
    assert slowest_rank_steps([[1.0, 5.0, 2.0], [3.0, 1.0, 2.5]]) == [3.0, 5.0, 2.5]
    stats = step_stats([1.0, 2.0, 3.0, 4.0])
    assert (stats["median"], stats["n"]) == (2.5, 4)


def test_knobs_are_coerced_to_their_declared_types():
    k = build(DDPAdapter.Knobs, {"bucket_cap_mb": "50", "static_graph": "true"}, "knob")
    assert k.bucket_cap_mb == 50.0 and k.static_graph is True


def test_bad_knobs_are_named_with_the_valid_choices():
    with pytest.raises(KnobError) as exc:
        build(DDPAdapter.Knobs, {"bucket": "1"}, "knob")
    assert str(exc.value) == ("unknown knob 'bucket'; valid knobs: broadcast_buffers, bucket_cap_mb, comm_hook, compile, "
                              "find_unused_parameters, gradient_as_bucket_view, powersgd_rank, powersgd_start_iter, "
                              "powersgd_warm_start, static_graph, sync_bn")
    with pytest.raises(KnobError) as exc:
        build(DDPAdapter.Knobs, {"bucket_cap_mb": "big"}, "knob")
    assert str(exc.value) == "knob 'bucket_cap_mb' expects a number or none (the framework's default), got 'big'"


def test_a_text_option_takes_any_script_and_no_control_character():
    # a path under /home/josé was refused as "expects a string" (the check against other scripts' digits ran for
    # every type); a newline or tab in a text value would split a report's one-line label
    from dataclasses import dataclass

    from harness.shared.options import OptionError

    @dataclass
    class Opts:
        data_dir: str = "x"
        hidden: int = 1

    assert build(Opts, {"data_dir": "/home/josé/données"}).data_dir == "/home/josé/données"
    with pytest.raises(OptionError, match=r"^option 'hidden' expects an int, got '１６'$"):
        build(Opts, {"hidden": "１６"})
    with pytest.raises(OptionError) as exc:
        build(Opts, {"data_dir": "a\tb"})
    assert str(exc.value) == ("option 'data_dir' holds a control character ('a\\tb'); give it on one line, without "
                              "tabs or other control characters")


def test_amp_precision_resolves_per_device():
    amp = adapters.get("amp")
    assert amp({}, "cpu").precision().value == "bf16"
    assert amp({}, "cuda").precision().value == "fp16"
    assert amp({"precision": "bf16"}, "cuda").precision().value == "bf16"
    with pytest.raises(KnobError, match="fp16 needs CUDA"):
        amp({"precision": "fp16"}, "cpu").precision()


def test_torch_adapters_are_available_on_cpu_and_explain_cuda_without_gpu():
    import torch

    for name in ("dp", "ddp", "spawn", "amp"):
        assert adapters.availability(name, "cpu", 2), name
    if not torch.cuda.is_available():
        a = adapters.availability("ddp", "cuda", 1)
        assert not a and a.reason == "CUDA requested but torch sees no GPU"


def test_unknown_adapter_message():
    with pytest.raises(adapters.UnknownName) as exc:
        adapters.get("nccl")
    assert str(exc.value) == f"unknown adapter 'nccl'; valid choices: {', '.join(adapters.names())}"


@pytest.mark.parametrize("knobs, resolved", [
    # Unset: DDP(model) as a user writes it, with torch 2.13's smaller first bucket.
    ({}, {"bucket_cap_mb": 25.0, "first_bucket_cap_mb": 1.0, "gradient_as_bucket_view": False,
          "static_graph": False, "broadcast_buffers": True, "find_unused_parameters": False,
          "sync_batch_norm_layers": 0}),
    # Set: passed on, and DDP then uses the cap for every bucket, the first included.
    ({"bucket_cap_mb": "10", "gradient_as_bucket_view": "true"},
     {"bucket_cap_mb": 10.0, "first_bucket_cap_mb": 10.0, "gradient_as_bucket_view": True, "static_graph": False,
      "broadcast_buffers": True, "find_unused_parameters": False, "sync_batch_norm_layers": 0}),
], ids=["unset", "set"])
def test_unset_ddp_knobs_are_not_passed_and_the_resolved_values_are_recorded(tmp_path, knobs, resolved):
    import torch
    import torch.distributed as dist

    from adapters.base import RankInfo

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        a = DDPAdapter(knobs, "cpu")
        a.info = RankInfo(rank=0, world_size=1, local_rank=0, device="cpu", backend="gloo", data_rank=0, data_world=1)
        model = torch.nn.Linear(4, 4)
        a.wrap(model, torch.optim.SGD(model.parameters(), lr=0.1))
        assert a.describe()["resolved"] == resolved
    finally:
        dist.destroy_process_group()


def test_progress_reads_after_two_ranks_raced_on_its_sequence_number(tmp_path):
    # Until set-up says which rank is 0 every rank writes its phase here. Two writers that both read seq 0 and
    # counted on from it left seq at 3 (odd: "mid-write") in a full suite: from then on every finished phase read
    # as half-written, and a timed-out launch could not say where rank 0 was stuck.
    import struct

    from harness.shared import progress

    path = tmp_path / "progress.bin"
    progress.create(path, 32)
    a, b = progress.Writer(path), progress.Writer(path)
    a.phase("importing")
    struct.pack_into("<Q", b._map, 0, 3)  # what the race left
    assert progress.read(path) is None  # a reader cannot tell it from a write in progress...
    b.phase("timed", 5)
    assert progress.read(path) == {"phase": "timed", "step": 5, "total": 32}  # ...but the next write ends even
    b.step(6)
    assert progress.read(path) == {"phase": "timed", "step": 6, "total": 32}


def test_a_workload_options_none_is_the_workloads_default_not_a_frameworks():
    from typing import Optional

    from harness.shared.options import OptionError, coerce

    with pytest.raises(OptionError) as exc:
        coerce("where", "abc", Optional[int], "option")
    assert str(exc.value) == "option 'where' expects an int or none (the workload's default), got 'abc'"
