"""The Hugging Face workload: every published preset has its model's published parameter count (built on the meta
device, nothing allocated), a sharding backend's units are the model's own no-split modules, and its data predict
the next byte (causal models) or the masked bytes (BERT)."""

import pytest
import torch

import workloads
from workloads.hf import IGNORE, missing

pytestmark = [pytest.mark.slow,  # imports transformers (seconds)
              pytest.mark.skipif(missing() is not None, reason=f"Requires: transformers ({missing()})")]

# Each from the model's own card or config: Llama 2 (Touvron et al. 2023) 7B/13B/70B, Llama 3.2 1B, GPT-2 124M and
# 355M (with its 1024 learned positions), BERT base and large as BertForMaskedLM (no pooler).
PUBLISHED = {"llama-1b": (1_235_814_400, "LlamaDecoderLayer", 16), "llama-7b": (6_738_415_616, "LlamaDecoderLayer", 32),
             "llama-13b": (13_015_864_320, "LlamaDecoderLayer", 40),
             "llama-70b": (68_976_648_192, "LlamaDecoderLayer", 80), "gpt2": (124_439_808, "GPT2Block", 12),
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


def test_the_small_llama_trains_on_next_bytes_and_bert_on_masked_ones():
    llama = workloads.get("hf", {"model": "llama", "layers": "1", "hidden": "64", "heads": "4", "seq_len": "16"})
    data = llama.materialize("cpu", 8)
    assert torch.equal(data.train_x[0, 1:], data.train_y[0, :-1]) and llama.tokens_per_sample() == 16
    torch.manual_seed(0)
    model = llama.build_model()
    out = model(data.train_x[:2])
    assert out.shape == (2, 16, 1024) and llama.loss(out, data.train_y[:2]).item() > 0
    assert llama.flops_per_sample(8) > 0  # counted on meta, through transformers' mask builders
    bert = workloads.get("hf", {"model": "bert", "seq_len": "32"})
    b = bert.materialize("cpu", 8)
    masked = b.train_y != IGNORE
    assert 0.1 < masked.float().mean() < 0.2 and (b.train_x[masked] == 0).all()
    assert torch.equal(b.train_y[masked], torch.frombuffer(bytearray(__import__("workloads.tinygpt").tinygpt
                                                                      .corpus()), dtype=torch.uint8).long()
                       [:b.train_x.numel()].view(b.train_x.shape)[masked])
    assert bert.metric_name == "masked-byte accuracy"


def test_bad_shapes_are_refused_in_one_line():
    from harness.shared.options import OptionError

    for options, message in (({"hidden": "100", "heads": "3"}, "option 'hidden' (100) must be a multiple of 'heads' "
                                                               "(3)"),
                             ({"heads": "4", "kv_heads": "3"}, "option 'heads' (4) must be a multiple of 'kv_heads' "
                                                               "(3)"),
                             ({"vocab": "100"}, "option 'vocab' must be at least 256 (one token a byte of the text); "
                                                "got 100"),
                             ({"model": "llama-8b"}, "option 'model' must be llama, llama-1b, llama-7b, llama-13b, "
                                                     "llama-70b, gpt2, gpt2-medium, bert, bert-base or bert-large; got "
                                                     "'llama-8b'")):
        with pytest.raises(OptionError) as exc:
            workloads.get("hf", options)
        assert str(exc.value) == message
