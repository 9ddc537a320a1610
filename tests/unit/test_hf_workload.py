"""The Hugging Face workload: every published preset has its model's published parameter count (built on the meta
device, nothing allocated), a family's own name is its tiny model, a sharding backend's units are the model's own
no-split modules, and its batches are dicts that the model takes by name and returns its own loss for, predicting the
next byte (causal models) or the masked bytes (BERT)."""

import pytest
import torch

import workloads
from workloads.hf import IGNORE, missing

pytestmark = [pytest.mark.slow,  # imports transformers (seconds)
              pytest.mark.skipif(missing() is not None, reason=f"Requires: transformers ({missing()})")]

# Each from the model's own card or config: Llama 2 (Touvron et al. 2023) 7B/13B/70B, Llama 3.2 1B, Mistral 7B v0.1
# (7.24 B, Jiang et al. 2023), Qwen2 0.5B/1.5B/7B (the counts their model cards give: 0.49 B, 1.54 B, 7.62 B),
# GPT-2 124M and 355M (with its 1024 learned positions), BERT base and large as BertForMaskedLM (no pooler).
PUBLISHED = {"llama-1b": (1_235_814_400, "LlamaDecoderLayer", 16), "llama-7b": (6_738_415_616, "LlamaDecoderLayer", 32),
             "llama-13b": (13_015_864_320, "LlamaDecoderLayer", 40),
             "llama-70b": (68_976_648_192, "LlamaDecoderLayer", 80),
             "mistral-7b": (7_241_732_096, "MistralDecoderLayer", 32),
             "qwen2-0.5b": (494_032_768, "Qwen2DecoderLayer", 24), "qwen2-1.5b": (1_543_714_304, "Qwen2DecoderLayer", 28),
             "qwen2-7b": (7_615_616_512, "Qwen2DecoderLayer", 28), "gpt2-124m": (124_439_808, "GPT2Block", 12),
             "gpt2-medium": (354_823_168, "GPT2Block", 24), "bert-base": (109_514_298, "BertLayer", 12)}


@pytest.mark.parametrize("model", sorted(PUBLISHED))
def test_each_preset_is_the_published_models_shape(model):
    count, unit, layers = PUBLISHED[model]
    w = workloads.get("hf", {"model": model})
    with torch.device("meta"):
        built = w.build_model()
    assert sum(p.numel() for p in built.parameters()) == count
    units = [u for u in w.shard_units(built) if type(u).__name__ == unit]
    assert len(units) == layers


def test_a_familys_own_name_is_its_tiny_model_and_every_other_name_a_published_one():
    from workloads.hf import FAMILY, MODELS

    for family in set(FAMILY.values()):
        layers, hidden = MODELS[family][1][:2]
        assert (layers, hidden) == (2, 256), family
    assert all(name == FAMILY[name] or MODELS[name][1][0] >= 12 for name in MODELS)


def test_the_small_llama_trains_on_next_bytes_and_bert_on_masked_ones():
    llama = workloads.get("hf", {"model": "llama", "layers": "1", "hidden": "64", "heads": "4", "seq_len": "16"})
    data = llama.materialize("cpu", 8)
    x, y = data.batch(torch.arange(2), "cpu")
    assert y is x and sorted(x) == ["input_ids", "labels", "shift_labels"]  # a dict batch is its own targets
    assert torch.equal(x["input_ids"][0, 1:], x["shift_labels"][0, :-1]) and torch.equal(x["labels"], x["input_ids"])
    assert llama.tokens_per_sample() == 16
    torch.manual_seed(0)
    model = llama.build_model()
    out = llama.forward(model, x)  # model(**batch), as the Trainer calls it
    assert out.logits.shape == (2, 16, 1024)
    # its own loss, every position's next byte (the last one's too, from shift_labels), as tinygpt's
    by_hand = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), x["shift_labels"].flatten())
    assert torch.equal(llama.step_loss(out, y), by_hand) and int(llama.count(y)) == 32
    assert llama.flops_per_sample(8) > 0  # counted on meta, through transformers' mask builders
    bert = workloads.get("hf", {"model": "bert", "seq_len": "32"})
    b = bert.materialize("cpu", 8).train_x
    masked = b["labels"] != IGNORE
    assert 0.1 < masked.float().mean() < 0.2 and (b["input_ids"][masked] == 0).all()
    assert torch.equal(b["labels"][masked], torch.frombuffer(bytearray(__import__("workloads.tinygpt").tinygpt
                                                                         .corpus()), dtype=torch.uint8).long()
                       [:b["input_ids"].numel()].view(b["input_ids"].shape)[masked])
    assert bert.metric_name == "masked-byte accuracy"
    assert int(bert.count({"labels": b["labels"][:4]})) == int(masked[:4].sum())


def test_a_counted_loss_is_divided_by_the_mean_count_over_the_processes():
    """Two processes' losses, each its own masked tokens' mean scaled by its count over the mean count, average to
    the loss of the global batch: what the backends' averaging of gradients then turns into the single process's."""
    bert = workloads.get("hf", {"model": "bert", "seq_len": "32"})
    data = bert.materialize("cpu", 8)
    torch.manual_seed(0)
    model = bert.build_model()
    x, y = data.batch(torch.arange(8), "cpu")
    halves = [data.batch(torch.arange(4 * r, 4 * r + 4), "cpu") for r in range(2)]
    counts = torch.tensor([float(bert.count(h[1])) for h in halves], dtype=torch.float64)
    assert counts[0] != counts[1]  # the masks give the two halves different numbers of tokens
    with torch.no_grad():
        whole = bert.step_loss(bert.forward(model, x), y)
        each = [bert.step_loss(bert.forward(model, hx), hy, lambda c: counts.mean().reshape(1)) for hx, hy in halves]
        plain = [bert.step_loss(bert.forward(model, hx), hy) for hx, hy in halves]
    assert abs(float(sum(each) / 2 - whole)) < 1e-6
    assert abs(float(sum(plain) / 2 - whole)) > 1e-4  # each half's own mean: not the global batch's


def test_bad_shapes_are_refused_in_one_line():
    from harness.shared.options import OptionError

    for options, message in (({"hidden": "100", "heads": "3"}, "option 'hidden' (100) must be a multiple of 'heads' "
                                                               "(3)"),
                             ({"heads": "4", "kv_heads": "3"}, "option 'heads' (4) must be a multiple of 'kv_heads' "
                                                               "(3)"),
                             ({"vocab": "100"}, "option 'vocab' must be at least 256 (one token a byte of the text); "
                                                "got 100"),
                             ({"model": "llama-8b"}, "option 'model' must be llama, llama-1b, llama-7b, llama-13b, "
                                                     "llama-70b, mistral, mistral-7b, qwen2, qwen2-0.5b, qwen2-1.5b, "
                                                     "qwen2-7b, gpt2, gpt2-124m, gpt2-medium, bert, bert-base or "
                                                     "bert-large; got 'llama-8b'")):
        with pytest.raises(OptionError) as exc:
            workloads.get("hf", options)
        assert str(exc.value) == message
