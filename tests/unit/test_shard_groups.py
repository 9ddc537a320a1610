"""Shard units as a sharding backend gathers them (workloads.base.shard_groups): modules that share a parameter are
one group, since FSDP2 lets one group manage a parameter ("shared with a parameter already managed by another FSDP
group")."""

import torch
from torch import nn

from workloads.base import shard_groups


class TiedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(16, 8)
        self.blocks = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8)])
        self.head = nn.Linear(8, 16, bias=False)
        self.head.weight = self.emb.weight


def names(model, groups):
    by_id = {id(m): n for n, m in model.named_modules()}
    return [[by_id[id(m)] for m in group] for group in groups]


def test_units_without_shared_parameters_stay_one_a_group():
    m = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))
    assert names(m, shard_groups(m, [m[0], m[2]])) == [["0"], ["2"]]


def test_a_head_tied_to_the_embedding_is_gathered_with_it_whether_or_not_it_is_a_unit():
    m = TiedLM()
    assert names(m, shard_groups(m, [m.emb, *m.blocks, m.head])) == [["emb", "head"], ["blocks.0"], ["blocks.1"]]
    # The head left to the root: it joins the embedding's group, or the root and the unit would share the weight.
    assert names(m, shard_groups(m, [m.emb, *m.blocks])) == [["emb", "head"], ["blocks.0"], ["blocks.1"]]


def test_a_module_holding_a_tied_parameter_above_a_unit_joins_with_the_unit_inside_it():
    # BERT's prediction head holds the decoder's bias itself and the decoder (tied to the embedding) below it.
    class Head(nn.Module):
        def __init__(self, emb):
            super().__init__()
            self.decoder = nn.Linear(8, 16)
            self.decoder.weight = emb.weight
            self.bias = self.decoder.bias

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(16, 8)
            self.layer = nn.Linear(8, 8)
            self.head = Head(self.emb)

    m = Bert()
    assert names(m, shard_groups(m, [m.emb, m.layer])) == [["emb", "head"], ["layer"]]


def test_a_parameter_the_model_itself_holds_leaves_its_units_to_the_root():
    m = TiedLM()
    m.shared = m.blocks[0].weight  # the root holds it directly: no group can take the root
    assert names(m, shard_groups(m, [m.emb, *m.blocks])) == [["emb", "head"], ["blocks.1"]]


def test_the_model_is_never_a_unit_and_inner_groups_come_first():
    outer = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    m = nn.Sequential(outer, nn.Linear(2, 2))
    assert names(m, shard_groups(m, [m, outer, outer[1]])) == [["0.1"], ["0"]]


def test_the_hf_bert_units_keep_the_tied_decoder_with_the_embeddings():
    from workloads.hf import HF

    w = HF({"model": "bert", "layers": 1, "hidden": 32, "heads": 2, "intermediate": 64, "vocab": 256,
            "seq_len": 16})
    with torch.device("meta"):
        model = w.build_model()
    assert names(model, w.shard_groups(model)) == [["inner.bert.embeddings", "inner.cls.predictions"],
                                                   ["inner.bert.encoder.layer.0"]]
