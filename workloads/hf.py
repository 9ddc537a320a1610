"""Real transformer families: a Hugging Face `transformers` model built from its config class, randomly initialised,
nothing downloaded.

    compare run -w hf -o model=llama -o layers=2 -o hidden=256 -a ddp,fsdp,deepspeed:zero_stage=3 --repeats 3
    compare plan -w hf -o model=llama-7b --gpu h100 --nodes 8

`model` is a family with small defaults (`llama`, `gpt2`, `bert`) or a published size, whose shape is that model's
own config (`llama-1b` is Llama 3.2 1B, `llama-7b`/`-13b`/`-70b` are Llama 2's, `gpt2` and `gpt2-medium` OpenAI's,
`bert-base`/`bert-large` Google's); any of `layers`, `hidden`, `heads`, `kv_heads`, `intermediate`, `vocab`
overrides it. Dropout is set to 0, so every fp32 backend must match the single-process reference. The tokens are
CPython's own help text (`pydoc_data.topics`, shipped with Python, as tinygpt's), one byte a token, in windows of
`seq_len`: a causal model (Llama, GPT-2) predicts each next byte; BERT, a masked language model, predicts the 15% of
bytes masked at fixed positions. A sharding backend (FSDP2) wraps the model's own no-split modules (a decoder
layer), as `transformers`' FSDP integration does.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

from harness.shared.options import OptionError
from workloads.base import Data, Workload
from workloads.tinygpt import corpus, next_byte_windows, split_corpus

FAMILY = {"llama": "llama", "llama-1b": "llama", "llama-7b": "llama", "llama-13b": "llama", "llama-70b": "llama",
          "gpt2": "gpt2", "gpt2-medium": "gpt2", "bert": "bert", "bert-base": "bert", "bert-large": "bert"}
# (layers, hidden, heads, kv_heads, intermediate, vocab, tied embeddings): each published model's config.json.
SHAPES = {
    "llama": (2, 256, 4, 2, 688, 1024, False),
    "llama-1b": (16, 2048, 32, 8, 8192, 128256, True),  # meta-llama/Llama-3.2-1B
    "llama-7b": (32, 4096, 32, 32, 11008, 32000, False),  # meta-llama/Llama-2-7b-hf
    "llama-13b": (40, 5120, 40, 40, 13824, 32000, False),  # meta-llama/Llama-2-13b-hf
    "llama-70b": (80, 8192, 64, 8, 28672, 32000, False),  # meta-llama/Llama-2-70b-hf
    "gpt2": (12, 768, 12, 12, 3072, 50257, True),  # openai-community/gpt2
    "gpt2-medium": (24, 1024, 16, 16, 4096, 50257, True),
    "bert": (2, 256, 4, 4, 1024, 1024, True),
    "bert-base": (12, 768, 12, 12, 3072, 30522, True),  # google-bert/bert-base-uncased
    "bert-large": (24, 1024, 16, 16, 4096, 30522, True),
}
POSITIONS = {"gpt2": 1024, "gpt2-medium": 1024, "bert-base": 512, "bert-large": 512}
"""Learned position embeddings of the published models (part of their parameter count); 128 for the small ones, or
`seq_len` where longer. Llama's rotary positions have no parameters."""
MASK_SHARE = 0.15
"""BERT: the share of each window's bytes masked (positions fixed by the seed), as its pre-training masks."""
IGNORE = -100
"""A target position the loss leaves out (the unmasked bytes of a BERT window)."""


BOUNDS = {
    "layers": (1_000, "DeepNet's 1,000 blocks, Wang et al. 2022: the deepest transformer trained; as `compare plan "
                      "--layers`"),
    "hidden": (65_536, "three times the widest published, MT-NLG 530B's 20,480; as `compare plan --hidden`"),
    "heads": (1_024, "eight times the most published, MT-NLG 530B's 128; as `compare plan --heads`"),
    "kv_heads": (1_024, "as 'heads'"),
    "intermediate": (262_144, "over three times the widest published MLP, PaLM 540B's 73,728; as `compare plan "
                              "--ffn`"),
    "vocab": (1_048_576, "four times the largest published vocabulary, Gemma 3's 262,144"),
    "eval_windows": (1_000_000, "more than the held-out text holds at any length"),
}
"""The largest value each shape option takes, and why: past them a value is a typo, and building or planning such a
model (on the meta device) takes minutes before it could say anything (`plan -o layers=1000000` ran 300 s)."""


def bounded(options) -> None:
    """OptionError, naming the bound and why, for an option past BOUNDS, or a `seq_len` longer than the held-out
    text (then no window is evaluated, and the training windows are fewer than a batch: "the training set has 4
    samples" said the wrong thing)."""
    for name, (most, why) in BOUNDS.items():
        value = getattr(options, name)
        if value is not None and value > most:
            raise OptionError(f"option '{name}' must be at most {most:,} ({why}); got {value}")
    text = len(corpus())
    held_out = text - int(text * 0.9)
    if options.seq_len > held_out - 1:
        raise OptionError(f"option 'seq_len' must be at most {held_out - 1:,}: the text (CPython's help, {text:,} "
                          f"bytes) keeps {held_out:,} bytes held out for evaluation, and a window needs seq_len + 1 of "
                          f"them (its next byte); got {options.seq_len}")


def missing() -> str | None:
    """Why this workload cannot run here (transformers not installed, with the fix), or None."""
    from importlib.util import find_spec

    if find_spec("transformers") is None:
        return ("the Hugging Face transformers package is not installed (fix: `make setup` installs it, or "
                "`.venv/bin/pip install transformers`)")
    return None


def _tracing_on_meta(ids):
    """On the meta device (counting FLOPs and memory, never training), transformers' mask builders are told they
    are being traced, as under torch.compile: they then build the causal mask without the `.item()` calls (is the
    batch packed? is the mask all ones?) that a meta tensor cannot answer. A real tensor changes nothing."""
    import contextlib

    if not ids.is_meta:
        return contextlib.nullcontext()
    from unittest import mock

    import transformers.masking_utils as masks

    return mock.patch.object(masks, "is_tracing", lambda *args, **kwargs: True)


class HF(Workload):
    name = "hf"
    summary = ("a Hugging Face transformers model from its config class (random init, nothing downloaded): Llama, "
               "GPT-2 or BERT, small or a published size, on CPython's help text")
    global_batch = 8
    base_lr = 3e-4
    base_batch = 8
    steps = 20
    warmup = 3
    equiv_steps = 3
    # AdamW, as tinygpt: it divides each update by sqrt(v) + eps, amplifying the all-reduce's summation-order
    # rounding where a gradient is near zero; a wrong average shows as differences of order lr, far above this.
    equiv_tolerance = 1e-4
    metric_name = "next-byte accuracy"

    @dataclass
    class Options:
        model: Literal["llama", "llama-1b", "llama-7b", "llama-13b", "llama-70b", "gpt2", "gpt2-medium", "bert",
                       "bert-base", "bert-large"] = "llama"
        """The family (small defaults) or a published size, whose shape is that model's own config."""
        layers: int | None = None
        """Transformer blocks (default: the model's)."""
        hidden: int | None = None
        """Hidden size (default: the model's; a multiple of `heads`)."""
        heads: int | None = None
        """Attention heads (default: the model's)."""
        kv_heads: int | None = None
        """Key/value heads, grouped-query attention (Llama only; default: the model's; divides `heads`)."""
        intermediate: int | None = None
        """The MLP's inner width (default: the model's)."""
        vocab: int | None = None
        """Vocabulary size (default: the model's; at least 256, one token a byte of the text)."""
        seq_len: int = 128
        """Tokens per training sample (the window of text)."""
        eval_windows: int = 64
        """Held-out windows evaluated."""

        def __post_init__(self):
            for name in ("layers", "hidden", "heads", "kv_heads", "intermediate", "seq_len", "eval_windows"):
                value = getattr(self, name)
                if value is not None and value < 1:
                    raise OptionError(f"option '{name}' must be at least 1; got {value}")
            bounded(self)
            layers, hidden, heads, kv, inter, vocab, _ = self.shape()
            if hidden % heads:
                raise OptionError(f"option 'hidden' ({hidden}) must be a multiple of 'heads' ({heads})")
            if heads % kv:
                raise OptionError(f"option 'heads' ({heads}) must be a multiple of 'kv_heads' ({kv})")
            if vocab < 256:
                raise OptionError(f"option 'vocab' must be at least 256 (one token a byte of the text); got {vocab}")
            if FAMILY[self.model] == "gpt2" and hidden // heads % 2:
                raise OptionError(f"option 'hidden' / 'heads' must be even for gpt2; got {hidden // heads}")

        def shape(self) -> tuple[int, int, int, int, int, int, bool]:
            """(layers, hidden, heads, kv_heads, intermediate, vocab, tied) with the options over the preset."""
            layers, hidden, heads, kv, inter, vocab, tied = SHAPES[self.model]
            heads = self.heads or heads
            return (self.layers or layers, self.hidden or hidden, heads,
                    self.kv_heads or (kv if self.heads is None else heads), self.intermediate or inter,
                    self.vocab or vocab, tied)

    def __init__(self, options=None):
        super().__init__(options)
        if self.family == "bert":
            self.metric_name = "masked-byte accuracy"

    @property
    def family(self) -> str:
        return FAMILY[self.options.model]

    def unavailable(self) -> str | None:
        return missing()

    def describe(self):
        out = super().describe()
        layers, hidden, heads, kv, inter, vocab, tied = self.options.shape()
        out["shape"] = {"family": self.family, "layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv,
                        "intermediate": inter, "vocab": vocab, "tied_embeddings": tied}
        return out

    def build_model(self):
        import torch.nn as nn
        import transformers as tf

        layers, hidden, heads, kv, inter, vocab, tied = self.options.shape()
        seq = self.options.seq_len
        positions = max(seq, POSITIONS.get(self.options.model, 128))
        if self.family == "llama":
            config = tf.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter,
                                    num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                                    max_position_embeddings=max(seq, 128), tie_word_embeddings=tied,
                                    attention_dropout=0.0)
            model = tf.LlamaForCausalLM(config)
        elif self.family == "gpt2":
            config = tf.GPT2Config(vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=heads, n_inner=inter,
                                   n_positions=positions, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                   tie_word_embeddings=tied, bos_token_id=None, eos_token_id=None)
            model = tf.GPT2LMHeadModel(config)
        else:
            config = tf.BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                                   num_attention_heads=heads, intermediate_size=inter,
                                   max_position_embeddings=positions, hidden_dropout_prob=0.0,
                                   attention_probs_dropout_prob=0.0, tie_word_embeddings=tied)
            model = tf.BertForMaskedLM(config)

        class Logits(nn.Module):
            """The model with its logits as its output (every backend calls model(inputs) and takes a tensor)."""

            def __init__(self, inner, causal: bool):
                super().__init__()
                self.inner, self.causal = inner, causal

            def forward(self, ids):
                with _tracing_on_meta(ids):
                    if self.causal:
                        return self.inner(input_ids=ids, use_cache=False).logits
                    return self.inner(input_ids=ids).logits

        return Logits(model, causal=self.family != "bert")

    def shard_units(self, model):
        """The model's own no-split modules (LlamaDecoderLayer, GPT2Block, BertLayer): what transformers' FSDP
        integration wraps one by one."""
        keep = set(getattr(model.inner, "_no_split_modules", None) or [])
        units = [m for m in model.modules() if type(m).__name__ in keep]
        return units or super().shard_units(model)

    def make_optimizer(self, model, lr):
        import torch

        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)

    def lr_rule(self) -> str:
        return f"linear: {self.base_lr} x global_batch / {self.base_batch} (AdamW)"

    def loss(self, output, target):
        import torch.nn.functional as F

        return F.cross_entropy(output.float().flatten(0, 1), target.flatten(), ignore_index=IGNORE)

    def score(self, output, target):
        """Accuracy and loss over the predicted positions (every next byte; BERT's masked ones): counts are
        tokens."""
        import torch.nn.functional as F

        counted = target != IGNORE
        loss_sum = F.cross_entropy(output.float().flatten(0, 1), target.flatten(), ignore_index=IGNORE,
                                   reduction="sum")
        return (float(((output.argmax(-1) == target) & counted).sum()), float(counted.sum()), float(loss_sum))

    def tokens_per_sample(self) -> int:
        return self.options.seq_len

    def train_samples(self, global_batch: int) -> int:
        return (int(len(corpus()) * 0.9) - 1) // self.options.seq_len

    def materialize(self, device: str, global_batch: int) -> Data:
        import torch

        text, data, split = split_corpus()
        t = self.options.seq_len

        def windows(a):
            if self.family != "bert":
                return next_byte_windows(a, t)
            n = (len(a) - 1) // t
            x = a[:n * t].view(n, t).clone()
            gen = torch.Generator().manual_seed(self.seed)
            masked = torch.rand(x.shape, generator=gen) < MASK_SHARE
            y = torch.where(masked, x, torch.full_like(x, IGNORE))
            x[masked] = 0  # byte 0 never occurs in the text: the mask token
            return x, y

        x_tr, y_tr = windows(data[:split])
        x_te, y_te = windows(data[split:])
        x_te, y_te = x_te[:self.options.eval_windows], y_te[:self.options.eval_windows]
        task = "masked bytes (15%)" if self.family == "bert" else "next byte"
        return Data(x_tr.to(device), y_tr.to(device), x_te.to(device), y_te.to(device),
                    meta={"source": f"pydoc_data.topics ({len(text):,} bytes, sha256 "
                                    f"{hashlib.sha256(text).hexdigest()[:16]}), 90/10 split, one token a byte; "
                                    f"predicts the {task}",
                          "train_windows": len(x_tr), "test_windows": len(x_te)})


WORKLOAD = HF
