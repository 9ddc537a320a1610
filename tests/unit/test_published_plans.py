"""`compare plan` held against published training runs (tests/fixtures/published_plans.json, the table in
docs/scaling.md): every configuration re-planned and compared with the outputs stored beside the published figures,
so the plan's answers cannot drift silently; and what docs/scaling.md says of them (memory within 10% where the
source states it and its checkpointing, the backend order where the source resolves it, weak-scaling efficiency)
checked on the plan as it is now.

After a deliberate change to the planner: `python -m tests.unit.test_published_plans` re-plans every configuration
and rewrites the fixture's plan figures (the sources and published figures stay as they are); then re-make
docs/scaling.md's table from it."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.model import planner

FIXTURE = Path(__file__).parents[1] / "fixtures" / "published_plans.json"
PUBLISHED = json.loads(FIXTURE.read_text())
CONFIGS = {c["id"]: c for c in PUBLISHED["configurations"]}


def _plan(config) -> dict:
    shown = CliRunner().invoke(app, ["plan", *config["args"], "--json"])
    assert shown.exit_code == 0, shown.output
    return json.loads(shown.stdout)


def _tokens(config, data) -> dict[str, dict]:
    args = config["args"]
    s = int(args[args.index("--seq-len") + 1]) if "--seq-len" in args else None
    n = data["cluster"]["gpus"]
    out = {}
    for row in data["rows"]:
        out[row["label"]] = {"model_states_gb": row["model_state_bytes"] / 1e9}
        if s:
            out[row["label"]].update(tokens_per_s_per_gpu={q: row["samples_per_s"][q] * s / n for q in
                                                           ("low", "mid", "high")},
                                     memory_gib=row["total_bytes"] / 2**30)
    return out


def test_there_are_enough_configurations_from_enough_sources():
    runs = [c for c in CONFIGS.values() if "tokens_per_s_per_gpu" in c["published"]]
    assert len(runs) >= 6 and len({c["source"]["who"].split(" (")[0].split(",")[0] for c in runs}) >= 3
    for c in CONFIGS.values():
        assert c["source"]["url"].startswith("https://") and c["quote"] and c["setup"]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_plan_of_each_published_configuration_has_not_moved(name):
    # A change to the planner that moves any of these figures must come with the fixture and docs/scaling.md's
    # table re-made from it (tests/fixtures/published_plans.json says how)
    config = CONFIGS[name]
    got = _tokens(config, _plan(config))
    assert set(got) == set(config["plan"])
    for label, want in config["plan"].items():
        for key, value in want.items():
            assert got[label][key] == pytest.approx(value, rel=1e-9), (label, key)


def _error(config, key):
    plan = config["plan"][config["row"]][key]
    plan = plan["mid"] if isinstance(plan, dict) else plan
    return plan / config["published"][key] - 1


def test_memory_is_within_10_percent_where_the_source_states_it_and_its_checkpointing():
    stated = [c for c in CONFIGS.values() if "memory_gib" in c["published"]]
    assert stated  # torchtitan's H100 tables: FSDP2 with selective checkpointing, memory as torchtitan logs it
    for c in stated:
        assert abs(_error(c, "memory_gib")) <= 0.10, c["id"]


def test_the_backend_order_where_the_source_resolves_it():
    # Hugging Face's FSDP-against-DeepSpeed table: 3,158.7 against 3,094.5 tokens/s a GPU, "expected to perform
    # similarly" (one measurement each, 2% apart): not an order. The plan does not rank them either (within TIE
    # at every figure of the range).
    fsdp, zero3 = CONFIGS["granite-7b-fsdp"], CONFIGS["granite-7b-zero3"]
    assert fsdp["args"] == zero3["args"]
    a = fsdp["plan"][fsdp["row"]]["tokens_per_s_per_gpu"]
    b = zero3["plan"][zero3["row"]]["tokens_per_s_per_gpu"]
    assert all(abs(a[q] / b[q] - 1) <= planner.TIE for q in a)


def test_weak_scaling_efficiency_against_the_published():
    # torchtitan 8 -> 128 H100: 5,605 / 5,762 = 0.973, the plan 0.964 at its middle figure; llm-foundry's MPT-13B
    # 8 -> 64 H100: 4,800 / 4,792 = 1.002, the plan 0.930: a miss docs/scaling.md explains (the model prices
    # FSDP's collectives tensor by tensor, 1,080 calls a step, whose ring latency grows with the GPUs)
    def eff(small, large, key="mid"):
        s, b = CONFIGS[small], CONFIGS[large]
        return b["plan"][b["row"]]["tokens_per_s_per_gpu"][key] / s["plan"][s["row"]]["tokens_per_s_per_gpu"][key]

    published = {("tt-h100-8", "tt-h100-128"): 5605 / 5762, ("mpt-13b-h100-8", "mpt-13b-h100-64"): 4800 / 4792}
    assert abs(eff("tt-h100-8", "tt-h100-128") - published[("tt-h100-8", "tt-h100-128")]) < 0.02
    assert published[("mpt-13b-h100-8", "mpt-13b-h100-64")] - eff("mpt-13b-h100-8", "mpt-13b-h100-64") > 0.05


def test_the_docs_table_shows_the_plan_as_it_is():
    text = (Path(__file__).parents[2] / "docs" / "scaling.md").read_text()
    for c in CONFIGS.values():
        if c["row"] is None:
            continue
        t = c["plan"][c["row"]]["tokens_per_s_per_gpu"]
        assert f"{t['mid']:,.0f} [{t['low']:,.0f}–{t['high']:,.0f}]" in text, c["id"]


def remake() -> None:
    """Re-plan every configuration and write its plan figures into the fixture."""
    for c in PUBLISHED["configurations"]:
        data = _plan(c)
        c["plan"] = _tokens(c, data)
        seq = c["args"][c["args"].index("--seq-len") + 1] if "--seq-len" in c["args"] else None
        c["flops_per_token"] = data["model"]["flops_per_sample"] / int(seq) if seq else None
        c["peak_tflops"] = data["cluster"]["peak_tflops"][data["cluster"]["dtype"]]
    FIXTURE.write_text(json.dumps(PUBLISHED, indent=1) + "\n")


if __name__ == "__main__":
    remake()
