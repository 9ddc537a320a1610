"""Real transformer families: a Hugging Face `transformers` model built from its config class, randomly initialised,
nothing downloaded.

    compare run -w hf -o model=llama -o layers=2 -o hidden=256 -a ddp,fsdp,deepspeed:zero_stage=3 --repeats 3
    compare plan -w hf -o model=llama-7b --gpu h100 --nodes 8

`model` is a family's name, which is always a tiny model of that family (`llama`, `mistral`, `qwen2`, `gpt2`,
`bert`: 2 layers, width 256), or a published size by its own name, whose shape is that model's config.json
(`llama-1b` is Llama 3.2 1B, `llama-7b`/`-13b`/`-70b` are Llama 2's, `mistral-7b` Mistral 7B v0.1, `qwen2-0.5b`/
`-1.5b`/`-7b` Qwen2's, `gpt2-124m` and `gpt2-medium` OpenAI's, `bert-base`/`bert-large` Google's); any of
`layers`, `hidden`, `heads`, `kv_heads`, `intermediate`, `vocab` overrides it. Dropout is set to 0, so every fp32
backend must match the single-process reference. The tokens are CPython's own help text (`pydoc_data.topics`,
shipped with Python, as tinygpt's), one byte a token, in windows of `seq_len`: a causal model predicts each next
byte; BERT, a masked language model, predicts the 15% of bytes masked at random positions (fixed by the seed).

Batches are what the Trainer feeds: a dict (`input_ids`, and `labels`: for a causal model also `shift_labels`, the
next byte of every position, so that the last position has a target too), the model called `model(**batch)` and
its loss read from its output. That loss is a mean over the batch's predicted tokens, whose number varies (BERT's
random masks), so the workload declares the count (`count`) and every backend divides by the count over all
processes: the single process's loss over the global batch. A sharding backend (FSDP2) wraps the model's own
no-split modules (a decoder layer), as `transformers`' FSDP integration does.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

from harness.shared.options import OptionError
from workloads.base import Data, Workload
from workloads.tinygpt import corpus, next_byte_windows, split_corpus

# name -> (family, (layers, hidden, heads, kv_heads, intermediate, vocab, tied embeddings)): a family's own name is
# its tiny model; every other name is a published model, its shape from that model's config.json.
MODELS = {
    "llama": ("llama", (2, 256, 4, 2, 688, 1024, False)),
    "llama-1b": ("llama", (16, 2048, 32, 8, 8192, 128256, True)),  # meta-llama/Llama-3.2-1B
    "llama-7b": ("llama", (32, 4096, 32, 32, 11008, 32000, False)),  # meta-llama/Llama-2-7b-hf
    "llama-13b": ("llama", (40, 5120, 40, 40, 13824, 32000, False)),  # meta-llama/Llama-2-13b-hf
    "llama-70b": ("llama", (80, 8192, 64, 8, 28672, 32000, False)),  # meta-llama/Llama-2-70b-hf
    "mistral": ("mistral", (2, 256, 4, 2, 688, 1024, False)),
    "mistral-7b": ("mistral", (32, 4096, 32, 8, 14336, 32000, False)),  # mistralai/Mistral-7B-v0.1
    "qwen2": ("qwen2", (2, 256, 4, 2, 688, 1024, True)),
    "qwen2-0.5b": ("qwen2", (24, 896, 14, 2, 4864, 151936, True)),  # Qwen/Qwen2-0.5B
    "qwen2-1.5b": ("qwen2", (28, 1536, 12, 2, 8960, 151936, True)),  # Qwen/Qwen2-1.5B
    "qwen2-7b": ("qwen2", (28, 3584, 28, 4, 18944, 152064, False)),  # Qwen/Qwen2-7B
    "gpt2": ("gpt2", (2, 256, 4, 4, 1024, 1024, True)),
    "gpt2-124m": ("gpt2", (12, 768, 12, 12, 3072, 50257, True)),  # openai-community/gpt2
    "gpt2-medium": ("gpt2", (24, 1024, 16, 16, 4096, 50257, True)),  # openai-community/gpt2-medium
    "bert": ("bert", (2, 256, 4, 4, 1024, 1024, True)),
    "bert-base": ("bert", (12, 768, 12, 12, 3072, 30522, True)),  # google-bert/bert-base-uncased
    "bert-large": ("bert", (24, 1024, 16, 16, 4096, 30522, True)),  # google-bert/bert-large-uncased
}
FAMILY = {name: family for name, (family, _) in MODELS.items()}
SHAPES = {name: shape for name, (_, shape) in MODELS.items()}
POSITIONS = {"gpt2-124m": 1024, "gpt2-medium": 1024, "bert-base": 512, "bert-large": 512}
"""Learned position embeddings of the published models (part of their parameter count); 128 for the small ones, or
`seq_len` where longer. Rotary positions (Llama, Mistral, Qwen2) have no parameters."""
CAUSAL = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}
"""The decoder families built from the same arguments (a Llama-shaped config: RMSNorm, rotary positions, gated MLP,
grouped-query attention; Qwen2 adds biases to its query, key and value projections), by their model class."""
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


class HF(Workload):
    name = "hf"
    summary = ("a Hugging Face transformers model from its config class (random init, nothing downloaded): Llama, "
               "Mistral, Qwen2, GPT-2 or BERT, tiny or a published size, on CPython's help text")
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
        model: Literal[tuple(MODELS)] = "llama"
        """A family's name (a tiny model: 2 layers, width 256) or a published model's (its own config's shape)."""
        layers: int | None = None
        """Transformer blocks (default: the model's)."""
        hidden: int | None = None
        """Hidden size (default: the model's; a multiple of `heads`)."""
        heads: int | None = None
        """Attention heads (default: the model's)."""
        kv_heads: int | None = None
        """Key/value heads, grouped-query attention (Llama, Mistral, Qwen2; default: the model's; divides
        `heads`)."""
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
        if self.family in CAUSAL:
            config = getattr(tf, CAUSAL[self.family].replace("ForCausalLM", "Config"))(
                vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=max(seq, 128),
                tie_word_embeddings=tied, attention_dropout=0.0)
            model = getattr(tf, CAUSAL[self.family])(config)
        elif self.family == "gpt2":
            config = tf.GPT2Config(vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=heads, n_inner=inter,
                                   n_positions=positions, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                   tie_word_embeddings=tied, bos_token_id=None, eos_token_id=None)
            model = tf.GPT2LMHeadModel(config)
            # Its class name maps to no loss in transformers, which then warns and falls back to this one: named here
            model.loss_type = "ForCausalLM"
        else:
            config = tf.BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                                   num_attention_heads=heads, intermediate_size=inter,
                                   max_position_embeddings=positions, hidden_dropout_prob=0.0,
                                   attention_probs_dropout_prob=0.0, tie_word_embeddings=tied)
            model = tf.BertForMaskedLM(config)

        class Batch(nn.Module):
            """The transformers model called with a batch's tensors by name, returning its own output (logits and
            loss); no cache in training."""

            def __init__(self, inner, causal: bool):
                super().__init__()
                self.inner, self.causal = inner, causal

            def forward(self, input_ids, **batch):
                if self.causal:
                    return self.inner(input_ids=input_ids, use_cache=False, **batch)
                return self.inner(input_ids=input_ids, **batch)

        return Batch(model, causal=self.family != "bert")

    def make_optimizer(self, model, lr):
        import torch

        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)

    def lr_rule(self) -> str:
        return f"linear: {self.base_lr} x global_batch / {self.base_batch} (AdamW)"

    @property
    def _labels(self) -> str:
        """The batch's tensor of per-position targets: a causal model's next bytes (`shift_labels`), BERT's masked
        bytes (`labels`)."""
        return "labels" if self.family == "bert" else "shift_labels"

    def count(self, batch):
        """The predicted positions of the batch (every position of a causal model; BERT's masked ones, whose number
        varies): the model's loss is their mean."""
        return (batch[self._labels] != IGNORE).sum()

    def score(self, output, batch):
        """Accuracy and loss over the predicted positions (every next byte; BERT's masked ones): counts are
        tokens."""
        import torch.nn.functional as F

        logits, target = output.logits, batch[self._labels]
        counted = target != IGNORE
        loss_sum = F.cross_entropy(logits.float().flatten(0, 1), target.flatten(), ignore_index=IGNORE,
                                   reduction="sum")
        return (float(((logits.argmax(-1) == target) & counted).sum()), float(counted.sum()), float(loss_sum))

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

        def batch(x, y):
            if self.family == "bert":
                return {"input_ids": x, "labels": y}
            # labels as the Trainer gives them (the inputs, which the model would shift itself), and shift_labels,
            # the next byte of every position, which the model's loss uses as they are: the last position of a window
            # predicts the byte after it, as tinygpt's do.
            return {"input_ids": x, "labels": x, "shift_labels": y}

        x_tr, y_tr = windows(data[:split])
        x_te, y_te = windows(data[split:])
        x_te, y_te = x_te[:self.options.eval_windows], y_te[:self.options.eval_windows]
        task = "masked bytes (15%)" if self.family == "bert" else "next byte"
        return Data(batch(x_tr.to(device), y_tr.to(device)), None, batch(x_te.to(device), y_te.to(device)), None,
                    meta={"source": f"pydoc_data.topics ({len(text):,} bytes, sha256 "
                                    f"{hashlib.sha256(text).hexdigest()[:16]}), 90/10 split, one token a byte; "
                                    f"predicts the {task}",
                          "train_windows": len(x_tr), "test_windows": len(x_te)})


WORKLOAD = HF
