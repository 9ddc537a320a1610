"""The model against published scaling results (harness/model/published.py): layer tables that are the real
architectures, each configuration once, a baseline fitted without the configuration it predicts, the DDP
benchmark's slowdown from its own numbers, and the summary saying what is met and what is not."""

import pytest

from harness.model import hardware
from harness.model import published as pb


@pytest.mark.parametrize("model, aux_gmacs", [("VGG-16", 0), ("ResNet-50", 0), ("ResNet-101", 0),
                                               ("ResNeXt-50 32x4d", 0), ("ResNeXt-101 32x8d", 0),
                                               # its auxiliary head, which training runs and torchvision's
                                               # (inference) figure leaves out: 768x128 and 128x768x5x5 convolutions
                                               # on 5x5, a 768x1000 linear layer
                                               ("Inception V3", (768 * 128 * 25 + 128 * 768 * 25 + 768 * 1000) / 1e9)])
def test_layer_tables_are_the_published_architectures(model, aux_gmacs):
    # the parameters each published result states (torchvision's counts) and torchvision's multiply-adds per image
    table = pb.layer_table(model)
    params = {e["params"] for e in hardware.published() if e["model"] == model}
    assert params == {sum(n for n, _ in table)}
    assert sum(f for _, f in table) / 2e9 - aux_gmacs == pytest.approx(pb.TORCHVISION_GMACS[model], abs=0.005)
    assert all(pb.layer_table(e["model"]) for e in hardware.published())  # no published model is 100 equal tensors


def test_vgg16s_gradients_are_its_layers_not_equal_tensors():
    # VGG-16's three linear layers hold 124M of its 138M parameters and come last in forward: first in backward
    e = next(e for e in hardware.published() if e["model"] == "VGG-16")
    c = pb.compute(e)
    assert len(c.grads) == 16 and c.grads[0][0] == (4096 * 1000 + 1000) * 4  # a layer's weight and bias at once
    assert sum(b for b, _ in c.grads) == e["params"] * 4
    assert sum(b for b, _ in c.grads[:3]) == (25088 * 4096 + 4096 + 4096 * 4096 + 4096 + 4096 * 1000 + 1000) * 4
    # backward reaches them within its first 1% (they are 0.8% of the FLOPs), the last conv at its end
    assert c.grads[2][1] < 0.01 * c.bwd_s and c.grads[-1][1] == pytest.approx(c.bwd_s)
    assert len(pb.compute(e, layers=False).grads) == 100


def test_each_configuration_is_checked_once():
    rows = pb.configurations()
    keys = [(r["model"], r["backend"], r["profile"], r["precision"], r["n"]) for r in rows]
    assert len(keys) == len(set(keys))
    merged = {tuple(r["ids"]) for r in rows if len(r["ids"]) > 1}
    # the Horovod paper's TCP runs are priced on the docs' RoCE profile; DGX-1 16 GB and 32 GB are one configuration
    assert ("horovod-inceptionv3-128-roce25", "horovod-paper-inceptionv3-128-tcp25") in merged
    assert ("nvidia-rn50v15-fp32-dgx1v-16g", "nvidia-rn50v15-fp32-dgx1v-32g") in merged
    for r in rows:
        assert r["range"][0] <= r["predicted_efficiency"] <= r["range"][1]
    at512 = {r["model"]: r["predicted_efficiency"] for r in rows if r["n"] == 512}
    assert at512["VGG-16"] < at512["ResNet-101"]  # as published (68% vs 90%)


def test_the_baseline_is_the_mean_of_the_other_configurations(monkeypatch):
    def entry(model, eff):
        return {"id": model, "model": model, "backend": "horovod", "profile": "p100-25gbe-roce", "precision": "fp32",
                "params": 1e6, "per_device_batch": 32, "single_device_samples_per_s": 100.0,
                "points": [{"n": 8, "efficiency": eff}]}

    monkeypatch.setattr(hardware, "published", lambda: [entry("A", 0.9), entry("B", 0.6), entry("C", 0.75)])
    rows = {r["ids"][0]: r for r in pb.configurations()}
    assert rows["A"]["baseline_efficiency"] == pytest.approx(0.675)
    assert rows["B"]["baseline_efficiency"] == pytest.approx(0.825)
    assert rows["C"]["baseline_efficiency"] == pytest.approx(0.75)
    s = pb.scores(list(rows.values()))
    assert s["baseline_mae"] == pytest.approx((0.225 + 0.225 + 0) / 3) and s["configurations"] == 3


def test_the_slowdown_is_the_tables_own_and_the_summary_says_what_is_met():
    slow = {(r["id"], r["n"]): r for r in pb.slowdowns()}
    # PyTorch's DDP benchmark, ResNet-50: 319 img/s per GPU under DDP on 1 GPU, 306 on 16
    assert slow[("pytorch-ddp-resnet50-v100", 16)]["published"] == pytest.approx(1 - 306 / 319)
    assert len(slow) == 16  # four models at 2, 4, 8 and 16 GPUs
    rows = pb.configurations()
    text = "\n".join(pb.lines(rows, list(slow.values())))
    s = pb.scores(rows)
    verdict = "beats" if s["model_mae"] < s["baseline_mae"] else "does not beat"
    assert f"the model {verdict} it." in text
    worst = max(abs(r["predicted"] - r["published"]) for r in slow.values() if r["n"] == 16)
    assert f"the ±2-point target is {'met' if worst <= 0.02 else 'not met'}." in text
