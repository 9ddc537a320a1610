"""Your own model through every backend: a complete example (docs/your-model.md explains each piece).

    compare run -w examples/my_model.py:classifier                 # every backend, world size 2
    compare run -w examples/my_model.py:classifier -o hidden=512 -a ddp,fsdp,deepspeed:zero_stage=3 --repeats 3
    compare run -w examples/my_model.py:classifier_dataset --loader-workers 1   # read through a DataLoader
    compare run -w examples/my_model.py:ByteLM -a ddp,fsdp         # a Workload subclass: a tiny language model
    compare run -w examples/my_model.py:padded_lm                  # padded lines: a loss over (sum, count)
    compare run -w examples/my_model.py:hf_causal_lm               # a transformers model on dict batches
    compare knobs examples/my_model.py:classifier                  # its options, from the function's signature
    compare plan -w examples/my_model.py:classifier --gpu h100 --nodes 2

Nothing here is special to this repository: the file can live anywhere, and an installed package can offer the
same functions through the `compare.workloads` entry-point group.
"""

import torch
from torch import nn

from workloads import Data, Pieces, Workload, workload


def teacher_data(samples: int, features: int, classes: int):
    """Gaussian inputs labelled by a fixed random linear teacher: learnable, deterministic (compare seeds torch's
    generator before calling a workload function), nothing to download."""
    x = torch.randn(samples, features)
    y = (x @ torch.randn(features, classes)).argmax(1)
    return x, y


def mlp(features: int, hidden: int, classes: int) -> nn.Module:
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))


@workload(global_batch=64, lr=0.05, steps=60, warmup=5)
def classifier(hidden: int = 256, features: int = 32, classes: int = 10, samples: int = 4096):
    """A two-layer MLP learning a random linear teacher: the five-minute path, a function returning the pieces.

    Args:
        hidden: width of the hidden layer.
        features: input features per sample.
        classes: output classes.
        samples: training samples (a further quarter as many are held out for the test accuracy).
    """
    x, y = teacher_data(samples + samples // 4, features, classes)
    return Pieces(
        model=lambda: mlp(features, hidden, classes),
        train=(x[:samples], y[:samples]),
        test=(x[samples:], y[samples:]),
    )


class TeacherSet(torch.utils.data.Dataset):
    """The same data as a map-style Dataset, as most training code has it: one (input, target) pair per item."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


@workload(global_batch=64, lr=0.05, steps=60, warmup=5)
def classifier_dataset(hidden: int = 256, features: int = 32, classes: int = 10, samples: int = 4096):
    """The classifier with its training data read through a DataLoader: each rank reads its slice of every step.

    Args:
        hidden: width of the hidden layer.
        features: input features per sample.
        classes: output classes.
        samples: training samples.
    """
    x, y = teacher_data(samples + samples // 4, features, classes)
    return {"model": lambda: mlp(features, hidden, classes),
            "train": TeacherSet(x[:samples], y[:samples]), "test": TeacherSet(x[samples:], y[samples:])}


class ByteLM(Workload):
    """The full contract, for what the pieces do not cover: a tiny byte-level language model on this file's text."""

    name = "bytelm"
    summary = "a one-block byte-level transformer language model on the text of examples/my_model.py"
    global_batch, base_lr, base_batch, steps, warmup = 16, 3e-3, 16, 40, 5
    equiv_steps = 3
    equiv_tolerance = 1e-4  # AdamW, as tinygpt: summation order is amplified where a gradient is near zero

    def build_model(self):
        return nn.Sequential(nn.Embedding(256, 64),
                             nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True),
                             nn.Linear(64, 256))

    def make_optimizer(self, model, lr):
        return torch.optim.AdamW(model.parameters(), lr=lr)

    def loss(self, output, target):
        return nn.functional.cross_entropy(output.flatten(0, 1), target.flatten())

    def score(self, output, target):
        loss_sum = nn.functional.cross_entropy(output.flatten(0, 1), target.flatten(), reduction="sum")
        return float((output.argmax(-1) == target).sum()), float(target.numel()), float(loss_sum)

    def tokens_per_sample(self) -> int:
        return 32

    def materialize(self, device: str, global_batch: int) -> Data:
        text = torch.tensor(list(open(__file__, "rb").read()), dtype=torch.long)
        n = (len(text) - 1) // 32
        x, y = text[:n * 32].view(n, 32), text[1:n * 32 + 1].view(n, 32)
        cut = n * 9 // 10
        return Data(x[:cut].to(device), y[:cut].to(device), x[cut:].to(device), y[cut:].to(device),
                    meta={"source": f"examples/my_model.py's own text, {n} windows of 32 bytes"})


def padded_lines(width: int):
    """This file's lines as byte sequences, each padded to `width` (a line of its text is one sample): (tokens,
    lengths). Lines differ in length, so each step's slices hold different numbers of real tokens."""
    lines = [line[:width] for line in open(__file__, "rb").read().splitlines() if line.strip()]
    tokens = torch.zeros(len(lines), width, dtype=torch.long)  # byte 0 never occurs in the text: the padding
    for i, line in enumerate(lines):
        tokens[i, :len(line)] = torch.tensor(list(line))
    return tokens, torch.tensor([len(line) for line in lines])


class TinyLM(nn.Module):
    """A one-block causal byte-level transformer: logits for every position."""

    def __init__(self, width: int, dim: int = 64):
        super().__init__()
        self.embed, self.position = nn.Embedding(256, dim), nn.Embedding(width, dim)
        self.block = nn.TransformerEncoderLayer(dim, 4, 2 * dim, dropout=0.0, batch_first=True)
        self.head = nn.Linear(dim, 256)
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(width), persistent=False)

    def forward(self, x):
        h = self.embed(x) + self.position.weight[:x.shape[1]]
        return self.head(self.block(h, src_mask=self.causal[:x.shape[1], :x.shape[1]], is_causal=True))


@workload(global_batch=16, lr=0.05, steps=40, warmup=3)
def padded_lm(width: int = 48, counted: bool = True):
    """Next-byte prediction on padded lines: a loss over a number of tokens that differs between batches.

    Args:
        width: tokens per sample (lines are cut or padded to it).
        counted: the loss returns (sum, count), so that every backend divides by the tokens of the whole global
            batch; false: a plain mean over each process's own tokens (the equivalence check then fails, and says
            why).
    """
    tokens, lengths = padded_lines(width + 1)
    x, y = tokens[:, :-1], tokens[:, 1:].clone()
    y[torch.arange(width + 1)[1:] >= lengths[:, None]] = -100  # no target past a line's end: ignored by the loss

    def loss(output, target):
        if not counted:
            return nn.functional.cross_entropy(output.flatten(0, 1), target.flatten(), ignore_index=-100)
        total = nn.functional.cross_entropy(output.flatten(0, 1), target.flatten(), ignore_index=-100,
                                            reduction="sum")
        return total, (target != -100).sum()

    def metric(output, target):
        real = target != -100
        return ((output.argmax(-1) == target) & real).sum(), real.sum()

    cut = len(x) * 9 // 10
    return Pieces(model=lambda: TinyLM(width), train=(x[:cut], y[:cut]), test=(x[cut:], y[cut:]), loss=loss,
                  metric=metric)


@workload(global_batch=16, lr=0.05, steps=40, warmup=3)
def hf_causal_lm(width: int = 48, layers: int = 1):
    """A Hugging Face causal LM (transformers' Llama, tiny, random init) on padded lines, as the Trainer feeds one:
    dict batches (input_ids, attention_mask, labels with -100 at the padding), the model called model(**batch) and
    returning its own loss. Its loss is a mean over each batch's real tokens, so the workload declares their count.

    Args:
        width: tokens per sample.
        layers: decoder layers.
    """
    import transformers

    tokens, lengths = padded_lines(width)
    mask = (torch.arange(width) < lengths[:, None]).long()
    batch = {"input_ids": tokens, "attention_mask": mask, "labels": tokens.masked_fill(mask == 0, -100)}
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                      num_key_value_heads=2, num_hidden_layers=layers, max_position_embeddings=width,
                                      pad_token_id=0, bos_token_id=None, eos_token_id=None)
    cut = len(tokens) * 9 // 10
    return Pieces(model=lambda: transformers.LlamaForCausalLM(config),
                  train={k: v[:cut] for k, v in batch.items()}, test={k: v[cut:] for k, v in batch.items()},
                  # the model shifts its labels: the tokens it predicts are the labels after the first position
                  count=lambda batch: (batch["labels"][:, 1:] != -100).sum(),
                  metric=lambda out, batch: (((out.logits[:, :-1].argmax(-1) == batch["labels"][:, 1:])
                                              & (batch["labels"][:, 1:] != -100)).sum(),
                                             (batch["labels"][:, 1:] != -100).sum()))
