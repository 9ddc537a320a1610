"""Shard units as a sharding backend gathers them (workloads.base.shard_groups): modules that share a parameter are
one group, since FSDP2 lets one group manage a parameter ("shared with a parameter already managed by another FSDP
group")."""

import pytest
import torch
from torch import nn

from conftest import write
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


@pytest.mark.slow  # seconds: left out of make test-fast
def test_the_hf_bert_units_keep_the_tied_decoder_with_the_embeddings():
    from workloads.hf import HF

    w = HF({"model": "bert", "layers": 1, "hidden": 32, "heads": 2, "intermediate": 64, "vocab": 256,
            "seq_len": 16})
    with torch.device("meta"):
        model = w.build_model()
    assert names(model, w.shard_groups(model)) == [["inner.bert.embeddings", "inner.cls.predictions"],
                                                   ["inner.bert.encoder.layer.0"]]


def test_the_default_units_leave_to_the_root_what_is_read_outside_its_own_forward(tmp_path):
    # an outside probe's two FSDP2 crashes ("got mixed torch.Tensor and DTensor"): an nn.ParameterList the parent
    # reads (no forward of its own), and nanoGPT's head F.linear(h, self.emb.weight), which reads the embedding's
    # weight after FSDP2 has resharded it at the end of the embedding's forward; a buffer the forward updates is
    # left as it was (the forward ran on a copy of meta tensors)
    import workloads

    path = write(tmp_path, '''
        import torch
        from torch import nn
        import torch.nn.functional as F
        from workloads import Pieces, workload

        class Scales(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(2))
                self.scales = nn.ParameterList(nn.Parameter(torch.ones(8)) for _ in range(2))
                self.register_buffer("seen", torch.zeros(()))
                self.calls = 0
            def forward(self, x):
                self.seen += 1
                self.calls += 1
                for layer, s in zip(self.layers, self.scales):
                    x = torch.tanh(layer(x)) * s
                return x

        class LM(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb, self.mlp = nn.Embedding(16, 8), nn.Linear(8, 8)
            def forward(self, x):
                return F.linear(torch.tanh(self.mlp(self.emb(x))), self.emb.weight)

        @workload(global_batch=4)
        def scales():
            x = torch.randn(16, 8)
            return Pieces(model=Scales, train=(x, x.clone()))

        @workload(global_batch=4)
        def lm():
            x = torch.randint(0, 16, (16, 5))
            return Pieces(model=LM, train=(x, x.roll(-1, 1)))
    ''', "reads.py")
    w = workloads.get(f"{path}:scales")
    model = w.new_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert names(model, [w.shard_units(model)]) == [["layers.0", "layers.1"]]
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    # a forward that counts its calls kept its count (the count once moved a head used on alternate steps by one)
    assert model.calls == 0
    lm = workloads.get(f"{path}:lm")
    model = lm.new_model()
    assert names(model, [lm.shard_units(model)]) == [["mlp"]]


def test_a_parameter_the_forward_returns_or_differentiates_through_is_left_to_the_root(tmp_path):
    # two more FSDP2 crashes of an outside probe: a two-tower model returning its item table for a sampled softmax
    # in the loss ("got mixed torch.Tensor and DTensor" in the loss), and MAML's torch.autograd.grad over the
    # network's parameters in the forward, which raised under the check's no_grad, so that no unit was found
    # ("appears to not have been used in the graph"); with those modules left to the root both matched
    import workloads

    path = write(tmp_path, '''
        import torch
        from torch import nn
        from torch.func import functional_call

        class TwoTower(nn.Module):
            def __init__(self):
                super().__init__()
                self.user, self.items = nn.Linear(4, 8), nn.Embedding(10, 8)
            def forward(self, x):
                return {"u": self.user(x), "table": self.items.weight}

        class Maml(nn.Module):
            def __init__(self):
                super().__init__()
                self.net, self.head = nn.Linear(4, 4), nn.Linear(4, 2)
            def forward(self, x):
                params = dict(self.net.named_parameters())
                inner = functional_call(self.net, params, (x,)).square().mean()
                grads = torch.autograd.grad(inner, list(params.values()), create_graph=True)
                fast = {k: v - 0.1 * g for (k, v), g in zip(params.items(), grads)}
                return self.head(functional_call(self.net, fast, (x,)))

        def two_tower():
            x = torch.randn(16, 4)
            return dict(model=TwoTower, train=(x, torch.randint(0, 10, (16,))),
                        loss=lambda out, y: (out["u"] @ out["table"].T).logsumexp(1).mean())

        def maml():
            x = torch.randn(16, 4)
            return dict(model=Maml, train=(x, torch.randint(0, 2, (16,))))
    ''', "reads.py")
    w = workloads.get(f"{path}:two_tower")
    model = w.new_model()
    assert names(model, [w.shard_units(model)]) == [["user"]]
    w = workloads.get(f"{path}:maml")
    model = w.new_model()
    assert names(model, [w.shard_units(model)]) == [["head"]]
