"""A user's own workload, with no edit of this repository: a function returning its pieces or a Workload subclass,
from a file or a module, or an installed package's entry point; and every way such a workload can be wrong (one line
and exit 2, or, for an exception inside the user's own code, their traceback and exit 1)."""

import dataclasses
import os
import math
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

import adapters
import workloads
from harness.cli import app
from harness.core import requests, workload_checks
from harness.rank.train import StepLoader
from harness.shared.options import OptionError
from harness.shared.registry import BadReference
from harness.reports.run_report import equivalence_notes

from conftest import REPO, compare_cli, write

FUNCTION = '''
import torch
from torch import nn
from workloads import Pieces, workload


@workload(global_batch=16, lr=0.2, steps=7, warmup=2)
def tiny(hidden: int = 8, scale: float = 1.0, kind: str = "relu", bias: bool = True):
    """A tiny classifier.

    Args:
        hidden: width of the hidden layer,
            on two lines.
        scale: how large the inputs are.
    """
    x = torch.randn(96, 4) * scale
    y = (x.sum(1) > 0).long()
    return Pieces(model=lambda: nn.Sequential(nn.Linear(4, hidden, bias=bias), nn.ReLU(), nn.Linear(hidden, 2)),
                  train=(x[:64], y[:64]), test=[x[64:], y[64:]])


def plain(width: int = 3):
    return {"model": nn.Linear(2, width), "train": (torch.randn(8, 2), torch.randint(0, width, (8,)))}
'''

SUBCLASS = '''
import torch
from workloads import Data, Workload


class Mine(Workload):
    name = "mine"
    summary = "a linear model, as a subclass"
    global_batch, base_lr, base_batch, steps, warmup = 8, 0.1, 8, 3, 1

    def build_model(self):
        return torch.nn.Linear(3, 2)

    def materialize(self, device, global_batch):
        g = torch.Generator().manual_seed(1)
        return Data(torch.randn(32, 3, generator=g), torch.randint(0, 2, (32,), generator=g))
'''

REGRESSION = '\n    def loss(self, output, target):\n        return torch.nn.functional.mse_loss(output, target)\n'
OWN_SCORE = ("\n    def score(self, output, target):\n"
             "        return 0.0, float(len(target)), float(((output - target) ** 2).sum())\n")


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_a_function_in_a_file_is_a_workload_its_signature_the_options_its_decorator_the_hyperparameters(tmp_path):
    path = write(tmp_path, FUNCTION)
    w = workloads.get(f"{path}:tiny", {"hidden": "5", "scale": "2", "bias": "false"})
    assert (w.name, w.summary, w.global_batch, w.steps, w.warmup) == ("tiny", "A tiny classifier.", 16, 7, 2)
    assert w.lr(16) == 0.2 and w.lr(32) == pytest.approx(0.4)  # linear rule from the decorator's batch
    assert dataclasses.asdict(w.options) == {"hidden": 5, "scale": 2.0, "kind": "relu", "bias": False}
    model = w.build_model()
    assert model[0].out_features == 5 and model[0].bias is None
    data = w.materialize("cpu", 16)
    assert (len(data.train_x), len(data.test_x), data.n_train, w.train_samples(16)) == (64, 32, 64, 64)
    # The data are the same in every process: the function runs under a seeded generator, which it leaves as found
    state = torch.random.get_rng_state()
    type(w).made.clear()
    again = w.materialize("cpu", 16)
    assert torch.equal(again.train_x, data.train_x) and torch.equal(torch.random.get_rng_state(), state)
    assert w.loss(model(data.train_x[:4]), data.train_y[:4]).shape == ()
    assert w.tokens_per_sample() is None and not w.reads_through_loader()
    # Options that are not the signature's are refused by name, as a built-in workload's
    with pytest.raises(OptionError, match="unknown option 'depth'; valid options: bias, hidden, kind, scale"):
        workloads.get(f"{path}:tiny", {"depth": "2"})
    plain = workloads.get(f"{path}:plain")  # no decorator: the defaults, a module instance copied for each use
    assert (plain.global_batch, plain.steps, plain.name) == (32, 50, "plain")
    assert plain.build_model() is not plain.build_model()


@pytest.mark.parametrize("given, said", [
    # each had run: a NaN tolerance failed every row's equivalence (1.5e-08 ✗), a NaN learning rate diverged every
    # row, a warm-up of -1 was shown as "-1 warm-up + 3 timed steps"; the command line refuses each of them
    ("equiv_tolerance=float('nan')", "@workload(equiv_tolerance=...) must be a number above 0 (the equivalence "
                                     "check's tolerance), got nan"),
    ("lr=float('nan')", "@workload(lr=...) must be a number above 0 (the learning rate), got nan"),
    ("lr=-0.1", "@workload(lr=...) must be a number above 0 (the learning rate), got -0.1"),
    ("warmup=-1", "@workload(warmup=...) must be a whole number of at least 0, got -1"),
    ("equiv_steps=-3", "@workload(equiv_steps=...) must be a whole number of at least 0, got -3"),
    ("global_batch=0", "@workload(global_batch=...) must be a whole number of at least 1, got 0"),
    ("seed=1.5", "@workload(seed=...) must be a whole number, got 1.5"),
    ("eval_every=0, target=0.5, max_steps_to_target=9", "@workload(eval_every=...) must be a whole number of at "
                                                        "least 1, got 0"),
    ("target=float('inf'), eval_every=1, max_steps_to_target=9", "@workload(target=...) must be a number (the metric "
                                                                 "to reach) or None, got inf"),
    # the class's own name had leaked: "workload Function_f has a target"
    ("target=0.5", "has a target, so it must set eval_every and max_steps_to_target (the defaults of `compare run "
                   "--until-target`)"),
])
def test_a_decorator_value_no_run_can_use_is_refused_naming_it(tmp_path, given, said):
    path = tmp_path / "m.py"
    path.write_text("import torch\nfrom workloads import workload\n\n"
                    f"@workload({given})\ndef f():\n    return dict(model=torch.nn.Linear(2, 2), "
                    "train=(torch.randn(8, 2), torch.randint(0, 2, (8,))))\n")
    result = invoke("knobs", f"{path}:f")
    assert (result.exit_code, result.stderr) == (2, f"error: workload {path}:f: {said}\n")


def test_tokens_per_sample_is_a_whole_number_of_at_least_1(tmp_path):
    # -5 was shown as "tokens/s -114,093"
    path = tmp_path / "m.py"
    path.write_text("import torch\n\ndef f():\n    return dict(model=torch.nn.Linear(2, 2), train=(torch.randn(8, 2), "
                    "torch.randint(0, 2, (8,))), tokens_per_sample=-5)\n")
    with pytest.raises(BadReference, match=r"^workload .*m.py:f: its tokens_per_sample must be a whole number of at "
                                           r"least 1 \(a sample's tokens\), got -5$"):
        workloads.get(f"{path}:f").pieces()


SUBCLASSES = """
import torch
from workloads import Data, Workload

class Half(Workload):
    name, summary, global_batch, base_lr, base_batch, steps, warmup = "half", "x", 8, 0.1, 8, 3, 1
    def build_model(self):
        return torch.nn.Linear(2, 2)

class InitArgs(Half):
    def __init__(self, a, b):
        super().__init__(None)
    def materialize(self, device, global_batch):
        x, y = torch.randn(16, 2), torch.randint(0, 2, (16,))
        return Data(x, y, x, y)

class MatNone(InitArgs):
    def __init__(self, options=None):
        super().__init__(1, 2)
    def materialize(self, device, global_batch):
        return None
"""


@pytest.mark.parametrize("name, said", [
    # each had been compare's own traceback: "Can't instantiate abstract class Half", "missing 1 required
    # positional argument: 'b'", "'NoneType' object has no attribute 'n_train'"
    ("Half", "class Half does not define materialize, which every workload must (docs/your-model.md, \"The full "
             "contract\")"),
    ("InitArgs", "compare makes it as InitArgs(options), one argument (the -o options as a dict, or None), and its "
                 "__init__ cannot take that (missing a required argument: 'b'); take `options=None` and pass it to "
                 "super().__init__(options)"),
])
def test_a_workload_class_that_breaks_the_contract_is_one_line(tmp_path, name, said):
    path = write(tmp_path, SUBCLASSES)
    result = invoke("run", "-w", f"{path}:{name}", "-a", "ddp", "--out", tmp_path / "o")
    assert (result.exit_code, result.stderr) == (2, f"error: workload '{path}:{name}': {said}\n")
    assert not (tmp_path / "o").exists()


def test_an_optimizer_piece_that_returns_no_optimizer_is_refused_before_launching(tmp_path):
    # every row had failed after its launch on "'NoneType' object has no attribute 'zero_grad'"
    path = write(tmp_path, """
        import torch

        def f():
            return dict(model=torch.nn.Linear(2, 2), train=(torch.randn(64, 2), torch.randint(0, 2, (64,))),
                        optimizer=lambda params, lr: None)
    """)
    result = invoke("run", "-w", f"{path}:f", "-a", "ddp", "--out", tmp_path / "o")
    assert (result.exit_code, result.stderr) == (2, "error: workload f's optimizer returned NoneType, not a "
                                                    "torch.optim.Optimizer; return the optimizer it builds over the "
                                                    "parameters it is given\n")
    assert not (tmp_path / "o").exists()


def test_a_test_set_the_model_cannot_take_is_the_users_error_before_launching(tmp_path):
    # another feature width: every row had ended ok with its evaluation lost ("mat1 and mat2 shapes cannot be
    # multiplied"), said only in a note under the table
    path = write(tmp_path, """
        import torch

        def f():
            x, y = torch.randn(64, 8), torch.randint(0, 3, (64,))
            return dict(model=torch.nn.Linear(8, 3), train=(x, y), test=(torch.randn(16, 9), y[:16]))
    """)
    result = invoke("run", "-w", f"{path}:f", "-a", "ddp", "--out", tmp_path / "o")
    assert result.exit_code == 1 and "RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x9 and 8x3)" in \
        result.stderr
    assert result.stderr.endswith(f"error: evaluating workload {path}:f on 2 test samples (every row evaluates so "
                                  f"after training) raised RuntimeError in your code (traceback above); nothing was "
                                  f"run or written\n")
    assert not (tmp_path / "o").exists()


def test_a_materialize_that_returns_no_data_is_one_line(tmp_path):
    path = write(tmp_path, SUBCLASSES)
    result = invoke("run", "-w", f"{path}:MatNone", "-a", "ddp", "--out", tmp_path / "o")
    assert (result.exit_code, result.stderr) == (2, "error: workload half: materialize() returned NoneType, not a "
                                                    "workloads.Data (the training and test tensors, or Datasets); "
                                                    "return Data(train_x, train_y, test_x, test_y) "
                                                    "(docs/your-model.md)\n")
    assert not (tmp_path / "o").exists()


def test_compare_knobs_describes_a_function_s_options_from_its_docstring(tmp_path):
    path = write(tmp_path, FUNCTION)
    result = invoke("knobs", f"{path}:tiny")
    assert result.exit_code == 0, result.output
    assert "hidden: an int; default 8\n      width of the hidden layer, on two lines." in result.output
    assert "scale: a number; default 1.0\n      how large the inputs are." in result.output
    assert "bias: a bool; default true" in result.output


def test_a_subclass_whose_default_accuracy_means_nothing_is_not_evaluated_saying_why(tmp_path):
    # A regression subclass (float targets, its own MSE loss, no score of its own) printed "test accuracy 0.0000":
    # the default score's argmax over one output column, against float targets
    text = SUBCLASS.replace("torch.randint(0, 2, (32,), generator=g))", "torch.randn(32, 2, generator=g), "
                            "torch.randn(8, 3, generator=g), torch.randn(8, 2, generator=g))") + REGRESSION
    w = workloads.get(f"{write(tmp_path, text)}:Mine")
    data = w.materialize("cpu", 8)
    assert w.why_not_evaluated(data, None) == (
        "its targets are floats, and without a score(output, target) of its own, returning (correct, count, "
        "loss_sum), there is no accuracy to take")
    assert w.evaluate(w.build_model(), data, 0, 1, torch.autocast("cpu", enabled=False)) is None
    scored = workloads.get(f"{write(tmp_path, text + OWN_SCORE, 'scored.py')}:Mine")  # its own score: taken
    assert scored.why_not_evaluated(data, None) is None


def test_a_workload_subclass_in_a_file_and_in_a_module(tmp_path, monkeypatch):
    path = write(tmp_path, SUBCLASS, "mymodels.py")
    w = workloads.get(f"{path}:Mine")
    assert type(w).__name__ == "Mine" and w.materialize("cpu", 8).n_train == 32
    monkeypatch.syspath_prepend(str(tmp_path))
    assert workloads.source("mymodels:Mine") == "module mymodels"
    assert workloads.source(f"{path}:Mine") == f"file {path}"
    assert workloads.get("mymodels:Mine").global_batch == 8


def test_an_installed_packages_entry_point_is_listed_with_where_it_came_from_and_runs_its_checks(tmp_path,
                                                                                                monkeypatch):
    pkg = tmp_path / "site" / "acme_models"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(SUBCLASS))
    info = tmp_path / "site" / "acme_models-1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-models\nVersion: 1.2\n")
    (info / "entry_points.txt").write_text("[compare.workloads]\nacme = acme_models:Mine\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))  # installed: importlib.metadata finds it on sys.path
    monkeypatch.setattr(workloads._REGISTRY, "_points", None)  # entry points are read once per process
    listed = invoke("list")
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "│ acme " in line)
    cells = [" ".join(" ".join(c).split()) for c in zip(*(line.split("│") for line in lines[at:at + 2]))]
    assert "entry point of acme-models 1.2 (acme_models:Mine)" in cells, cells
    shown = invoke("knobs", "acme")
    assert shown.exit_code == 0 and "acme (workload; compare run -w acme -o OPTION=VALUE): none" in shown.stdout
    bad = invoke("run", "-w", "acme", "--global-batch", "64", "-a", "ddp", "--out", tmp_path / "o")
    assert bad.exit_code == 2 and bad.stderr == ("error: global batch 64 is larger than workload acme's training "
                                                 "set (32 samples); choose a --global-batch of at most 32\n")
    assert not (tmp_path / "o").exists()


DATA = ("import torch\nX = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))\n"
        "Y = torch.arange(64) % 3\n")
"""A user file's head: 64 samples of 4 features and 3 classes."""


BAD = {
    "missing-file": ("", "{dir}/nope.py:tiny",
                     "workload file {dir}/nope.py does not exist (in {cwd}); give -w PATH.py:NAME"),
    "missing-name": (FUNCTION, "{path}:tinyy",
                     "{path} has no 'tinyy'; workloads it defines: tiny"),
    "no-name": (FUNCTION, "{path}", "workload '{path}' names no object: add ':NAME' (-w {path}:NAME); workloads it "
                                    "defines: tiny"),
    "not-a-workload": (FUNCTION + "\nNUMBER = 3\n", "{path}:NUMBER",
                       "workload '{path}:NUMBER' is an int, not a workload: give a subclass of workloads.Workload or a "
                       "function that returns its pieces (docs/your-model.md)"),
    "no-module": ("", "nosuchpkg.models:tiny", "no module named 'nosuchpkg' (for workload nosuchpkg.models): install "
                                               "its package into this environment, or give a file: -w "
                                               "path/to/file.py:NAME"),
    "built-in-with-colon": ("", "digits:hidden=3",
                            "workload 'digits:hidden=3': 'digits' is a built-in workload, named without ':' (-w digits; "
                            "its options: -o KEY=VALUE, listed by compare knobs digits); a module of yours is -w "
                            "package.module:NAME, a file -w path/to/file.py:NAME"),
    "parameter-without-default": ("import torch\ndef f(width):\n    pass\n", "{path}:f",
                                  "workload {path}:f: parameter 'width' has no default; every parameter of a workload "
                                  "function is an option (-o width=VALUE) and needs a default"),
    "returns-nothing": ("def f():\n    return None\n", "{path}:f",
                        "workload {path}:f returned None; return workloads.Pieces(model=..., train=...) or a "
                        "dict with those keys"),
    "returns-an-int": ("def f():\n    return 17\n", "{path}:f",
                       "workload {path}:f returned an int; return workloads.Pieces(model=..., train=...) or a dict "
                       "with those keys"),
    "unknown-piece": ("import torch\ndef f():\n    return {'model': torch.nn.Linear(2, 2), 'train': "
                      "(torch.zeros(4, 2), torch.zeros(4).long()), 'valid': 1}\n", "{path}:f",
                      "workload {path}:f returned unknown piece(s) 'valid'; valid pieces: model, train, test, loss, "
                      "metric, optimizer, units, tokens_per_sample, count"),
    "items-not-tensors": ("import torch\nclass S(torch.utils.data.Dataset):\n    def __len__(self):\n        return 8\n"
                          "    def __getitem__(self, i):\n        return 'text', 1\n"
                          "def f():\n    return {'model': torch.nn.Linear(2, 2), 'train': S()}\n", "{path}:f",
                          "workload {path}:f: item 0 of its train Dataset is (str, int), not (input tensor, target "
                          "tensor or number) nor a dict of tensors; return tensors from __getitem__ "
                          "(torch.as_tensor)"),
    "several-inputs-in-a-tuple": ("import torch\ndef f():\n    x = torch.zeros(4, 2)\n"
                                  "    return {'model': torch.nn.Linear(2, 2), 'train': ((x, x), torch.zeros(4).long())}\n",
                                  "{path}:f",
                                  "workload {path}:f: its train data must be (inputs, targets) tensors, a dict of "
                                  "tensors or a torch.utils.data.Dataset; got a tuple of tuple, Tensor; give several "
                                  "inputs as a dict of tensors, ({{'a': xa, 'b': xb}}, targets), and the model is called "
                                  "model(a=..., b=...)"),
    "three-tensors": ("import torch\ndef f():\n    x = torch.zeros(4, 2)\n"
                      "    return {'model': torch.nn.Linear(2, 2), 'train': (x, x, torch.zeros(4).long())}\n",
                      "{path}:f",
                      "workload {path}:f: its train data must be (inputs, targets) tensors, a dict of tensors or a "
                      "torch.utils.data.Dataset; got a tuple of Tensor, Tensor, Tensor; give several inputs as a dict "
                      "of tensors, ({{'a': xa, 'b': xb}}, targets), and the model is called model(a=..., b=...)"),
    "dataset-items-of-three-tensors": ("import torch\nclass S(torch.utils.data.Dataset):\n    def __len__(self):\n"
                                       "        return 8\n    def __getitem__(self, i):\n"
                                       "        return torch.zeros(2), torch.zeros(2), 1\n"
                                       "def f():\n    return {'model': torch.nn.Linear(2, 2), 'train': S()}\n",
                                       "{path}:f",
                                       "workload {path}:f: item 0 of its train Dataset is (Tensor, Tensor, int), not "
                                       "(input tensor, target tensor or number) nor a dict of tensors; give several "
                                       "inputs as a dict of tensors, ({{'a': xa, 'b': xb}}, target), and the model is "
                                       "called model(a=..., b=...)"),
    "dataset-dict-item-with-text": ("import torch\nclass S(torch.utils.data.Dataset):\n    def __len__(self):\n"
                                    "        return 8\n    def __getitem__(self, i):\n"
                                    "        return {'input_ids': torch.zeros(3).long(), 'text': 'a b c'}\n"
                                    "def f():\n    return {'model': torch.nn.Linear(2, 2), 'train': S()}\n", "{path}:f",
                                    "workload {path}:f: item 0 of its train Dataset holds 'text' (str), not a tensor; "
                                    "every field of a dict item must be a tensor (tokenize text in __getitem__, or "
                                    "leave the field out)"),
    "lengths-differ": ("import torch\ndef f():\n    return {'model': torch.nn.Linear(2, 2), 'train': "
                       "(torch.zeros(4, 2), torch.zeros(3).long())}\n", "{path}:f",
                       "workload {path}:f: its train inputs and targets differ in length (4 and 3)"),
    "dict-lengths-differ": ("import torch\ndef f():\n    return {'model': torch.nn.Linear(2, 2), 'train': "
                            "{'input_ids': torch.zeros(4, 2).long(), 'labels': torch.zeros(3, 2).long()}}\n", "{path}:f",
                            "workload {path}:f: the tensors of its train dict differ in length (samples first): "
                            "input_ids 4, labels 3"),
    "dict-holds-a-scalar": ("import torch\ndef f():\n    return {'model': torch.nn.Linear(2, 2), 'train': "
                            "{'input_ids': torch.zeros(4, 2).long(), 'weight': torch.tensor(0.5)}}\n", "{path}:f",
                            "workload {path}:f: its train dict holds 0-dimensional tensors (weight), which have no "
                            "samples to split between the ranks; give one value per sample (e.g. "
                            "torch.full((n,), value)), or keep a constant in the model or the loss"),
    "dict-holds-a-list": ("import torch\ndef f():\n    return {'model': torch.nn.Linear(2, 2), 'train': "
                          "{'input_ids': torch.zeros(4, 2).long(), 'labels': [1, 2, 3, 4]}}\n", "{path}:f",
                          "workload {path}:f: its train dict must hold tensors; 'labels' (list) is not one"),
    "output-without-loss": ("import torch\nclass M(torch.nn.Module):\n    def __init__(self):\n"
                            "        super().__init__()\n        self.lin = torch.nn.Linear(2, 3)\n"
                            "    def forward(self, input_ids, labels):\n        return {'logits': self.lin(input_ids)}\n"
                            "def f():\n    return {'model': M(), 'train': {'input_ids': torch.randn(64, 2), "
                            "'labels': torch.zeros(64).long()}}\n", "{path}:f",
                            "workload {path}:f: its model returned a dict of logits, with no loss in it, and the "
                            "workload gives no loss piece: give loss(output, target)"),
    # a tuple whose first is no loss: which part is the logits is the user's to say (a silent cross-entropy over the
    # first would drop an auxiliary output's loss)
    "tuple-without-loss": ("import torch\nclass M(torch.nn.Module):\n    def __init__(self):\n"
                           "        super().__init__()\n        self.lin = torch.nn.Linear(2, 3)\n"
                           "    def forward(self, x):\n        z = self.lin(x)\n        return z, z.mean(1)\n"
                           "def f():\n    return {'model': M(), 'train': (torch.randn(64, 2), torch.zeros(64).long())}\n",
                           "{path}:f",
                           "workload {path}:f: its model returned a tuple of a tensor (2, 3), a tensor (2,), with no "
                           "loss in it, and the workload gives no loss piece: give loss(output, target) that picks its "
                           "part, e.g. loss=lambda output, target: F.cross_entropy(output[0], target) (a tuple is "
                           "read as (loss, logits, ...) where its first is a loss, a tensor of one value, as the "
                           "Trainer reads a transformers model's)"),
    # a masked LM's plain mean over labels that are rare: the samples the check reads hold none (an outside check
    # got "(check the loss and the targets)" for data that was fine, with no word of the count that fixes it)
    "loss-over-no-label": ("import torch\ndef f():\n    y = torch.arange(64) % 3\n    y[:16] = -100\n"
                           "    return {'model': torch.nn.Linear(2, 3), 'train': (torch.randn(64, 2), y)}\n", "{path}:f",
                           "workload {path}:f: its loss on 2 training sample(s) is nan before any backend ran: their "
                           "targets are all -100, so a mean over the targets it counts is 0/0, as it will be on any "
                           "rank whose slice holds none; fix: return the loss as (sum, count), the count of those "
                           "targets (the harness divides by the whole global batch's), or declare the count "
                           "(`count=` in its Pieces)"),
    "nested-dict-item": ("import torch\nclass S(torch.utils.data.Dataset):\n    def __len__(self):\n"
                         "        return 8\n    def __getitem__(self, i):\n"
                         "        return {'feats': {'a': torch.zeros(2)}, 'labels': torch.tensor(1)}\n"
                         "def f():\n    return {'model': torch.nn.Linear(2, 2), 'train': S()}\n", "{path}:f",
                         "workload {path}:f: item 0 of its train Dataset holds 'feats' (dict), not a tensor; every "
                         "field of a dict item must be a tensor (flatten a nested field into fields of their own: "
                         "those of 'feats' as 'feats_a', 'feats_b', ...; tokenize text in __getitem__, or leave the "
                         "field out)"),
    "output-without-labels": ("import torch\nclass M(torch.nn.Module):\n    def __init__(self):\n"
                              "        super().__init__()\n        self.lin = torch.nn.Linear(2, 3)\n"
                              "    def forward(self, input_ids, mask=None):\n"
                              "        return {'logits': self.lin(input_ids)}\n"
                              "def f():\n    return {'model': M(), 'train': {'input_ids': torch.randn(64, 2), "
                              "'mask': torch.ones(64).long()}}\n", "{path}:f",
                              "workload {path}:f: its model returned a dict of logits, with no loss in it, and the "
                              "workload gives no loss piece: pass the labels in the batch (a transformers model "
                              "computes its loss when given `labels`) or give loss(output, target)"),
    # torchvision's detection models return a dict of loss terms in training
    "output-of-loss-terms": ("import torch\nclass M(torch.nn.Module):\n    def __init__(self):\n"
                             "        super().__init__()\n        self.lin = torch.nn.Linear(2, 3)\n"
                             "    def forward(self, input_ids, labels):\n        out = self.lin(input_ids)\n"
                             "        return {'loss_classifier': out.pow(2).mean(), 'loss_box_reg': out.abs().mean()}\n"
                             "def f():\n    return {'model': M(), 'train': {'input_ids': torch.randn(64, 2), "
                             "'labels': torch.zeros(64).long()}}\n", "{path}:f",
                             "workload {path}:f: its model returned a dict of loss_classifier, loss_box_reg, with no "
                             "loss in it, and the workload gives no loss piece: its values loss_classifier, "
                             "loss_box_reg are loss terms: give loss(output, target) that sums them, e.g. loss=lambda "
                             "output, target: sum(output.values())"),
    "loss-of-three": ("import torch\nimport torch.nn.functional as F\ndef f():\n"
                      "    return {'model': torch.nn.Linear(2, 3), 'train': (torch.randn(64, 2), torch.zeros(64).long()),"
                      "\n            'loss': lambda out, y: (F.cross_entropy(out, y, reduction='sum'), len(y), 1)}\n",
                      "{path}:f", "the loss of workload {path}:f returned 3 values; return the loss (a mean), or (sum, count) "
                                  "for a loss over a varying number of items"),
    "loss-with-logs": ("import torch\nimport torch.nn.functional as F\ndef f():\n"
                       "    return {'model': torch.nn.Linear(2, 3), 'train': (torch.randn(64, 2), torch.zeros(64).long()),"
                       "\n            'loss': lambda out, y: (F.cross_entropy(out, y), {'ce': 1.0})}\n",
                       "{path}:f", "the loss of workload {path}:f returned (value, dict); the second of a loss's two "
                                   "values must be the count of the items its first sums over (a number or a "
                                   "one-element tensor)"),
    # two loss terms (multi-task code) were read as (sum, count): a different objective trained, with a bare ✗
    "loss-of-two-terms": ("import torch\nimport torch.nn.functional as F\ndef f():\n"
                          "    return {'model': torch.nn.Linear(2, 3), 'train': (torch.randn(64, 2), "
                          "torch.zeros(64).long()),\n            'loss': lambda out, y: (F.cross_entropy(out, y), "
                          "0.5 * out.pow(2).mean())}\n",
                          "{path}:f", "the loss of workload {path}:f returned two values whose second carries a "
                                      "gradient, so it is a loss term, not a count: two values are read as (sum, "
                                      "count), the sum of a loss over a varying number of items and that number; to "
                                      "train two terms, return their sum (e.g. `ce + 0.5 * mse`)"),
    "dataset-smaller-than-batch": (FUNCTION, "{path}:tiny",
                                   "global batch 128 is larger than workload {path}:tiny's training set (64 samples); "
                                   "choose a --global-batch of at most 64", "--global-batch", "128"),
    "batch-not-divisible": (FUNCTION, "{path}:tiny", "global batch 15 is not divisible by world size 2; choose a "
                                                     "--global-batch that is a multiple of 2", "--global-batch", "15"),
    "loader-workers-without-a-dataset": (FUNCTION, "{path}:tiny",
                                         "--loader-workers applies to a workload whose training data is a Dataset; "
                                         "{path}:tiny holds its data in memory as tensors, which every rank indexes "
                                         "directly", "--loader-workers", "2"),
    "bad-option-value": (FUNCTION, "{path}:tiny", "workload {path}:tiny: option 'hidden' expects an int, got 'wide'",
                         "-o", "hidden=wide"),
    # issue 63 item 9: workloads that are wrong in themselves, each refused before anything is launched
    "no-parameters": (DATA + "def f():\n    return {'model': torch.nn.Identity(), 'train': (X, Y)}\n", "{path}:f",
                      "workload {path}:f: its model (Identity) has no parameters, so there is nothing to train or to "
                      "compare; give a model with parameters"),
    "all-frozen": (DATA + "def frozen():\n    m = torch.nn.Linear(4, 3)\n    m.requires_grad_(False)\n    return m\n"
                   "def f():\n    return {'model': frozen, 'train': (X, Y)}\n", "{path}:f",
                   "workload {path}:f: none of its model's 2 parameter tensor(s) requires a gradient (all frozen), so "
                   "there is nothing to train or to compare; unfreeze some"),
    "nan-output": (DATA + "class M(torch.nn.Linear):\n    def forward(self, x):\n        return super().forward(x) * "
                   "float('nan')\ndef f():\n    return {'model': lambda: M(4, 3), 'train': (X, Y)}\n", "{path}:f",
                   "workload {path}:f: its model's output on 2 training sample(s) holds NaN values (6 of 6) before any "
                   "backend ran; a model whose output is not finite cannot be trained or compared (check its "
                   "initialisation, inputs and operations)"),
    "infinite-loss": (DATA + "def f():\n    return {'model': lambda: torch.nn.Linear(4, 3), 'train': (X, Y), "
                      "'loss': lambda out, y: out.abs().sum() / 0.0}\n", "{path}:f",
                      "workload {path}:f: its loss on 2 training sample(s) is inf before any backend ran (the output is "
                      "finite): a loss that is not finite cannot be trained or compared (check the loss and the "
                      "targets)"),
    "loss-cannot-take-the-output": (DATA + "def f():\n    return {'model': lambda: torch.nn.Linear(4, 3), 'train': "
                                    "(X, Y + 5)}\n", "{path}:f",
                                    "workload {path}:f: its loss cannot take the model's output (output float32 (2, 3), "
                                    "targets int64 (2,)): IndexError: Target 5 is out of bounds; make the model's "
                                    "output what the loss expects (the default loss: cross-entropy over integer class "
                                    "targets, mean squared error for float targets)"),
    "sys-exit-at-import": ("import sys\nsys.exit(3)\n", "{path}:f",
                           "importing {path}: your code called sys.exit(3) (at mine.py:2); a workload's code must not "
                           "exit while it is loaded (put a script's own code under `if __name__ == \"__main__\":`); "
                           "nothing was run or written"),
    "keyboard-interrupt-at-import": ("raise KeyboardInterrupt\n", "{path}:f",
                                     "importing {path}: your code raised KeyboardInterrupt (at mine.py:1), though "
                                     "nobody pressed Ctrl-C; a workload's code must not raise it while it is loaded; "
                                     "nothing was run or written"),
    "loss-is-a-string": ("import torch\ndef f():\n    return {'model': torch.nn.Linear(2, 2), 'train': "
                         "(torch.zeros(64, 2), torch.zeros(64).long()), 'loss': lambda out, y: 'nope'}\n", "{path}:f",
                         "workload {path}:f: its loss returned a str, not one floating-point value; return the loss "
                         "as a tensor (a mean over the batch), or (sum, count)"),
    "loss-is-a-constant": ("import torch\ndef f():\n    return {'model': torch.nn.Linear(2, 2), 'train': "
                           "(torch.zeros(64, 2), torch.zeros(64).long()), 'loss': lambda out, y: torch.tensor(1.0)}\n",
                           "{path}:f",
                           "workload {path}:f: its loss does not depend on the model's parameters (it requires no "
                           "gradient: a constant, or computed under torch.no_grad() or from .detach()ed outputs), so no "
                           "step could train the model; compute it from the model's output"),
    "empty-training-set": ("import torch\ndef f():\n    return {'model': torch.nn.Linear(2, 2), 'train': "
                           "(torch.zeros(0, 2), torch.zeros(0).long())}\n", "{path}:f",
                           "workload {path}:f's training set is empty (0 samples); give it at least one global batch "
                           "of samples (32)"),
    "sys-exit-in-the-function": ("import sys\ndef f():\n    sys.exit('no data here')\n", "{path}:f",
                                 "calling workload {path}:f: your code called sys.exit('no data here') (at mine.py:3); "
                                 "a workload's code must not exit while it is loaded (put a script's own code under "
                                 "`if __name__ == \"__main__\":`); nothing was run or written"),
    # a subclass's method that cannot take what compare passes it: compare's own TypeError and traceback, before
    "subclass-materialize-without-its-arguments": (
        SUBCLASS.replace("def materialize(self, device, global_batch):", "def materialize(self):"), "{path}:Mine",
        "workload '{path}:Mine': Mine.materialize(self) cannot take the arguments compare passes it: "
        "materialize(self, device, global_batch) (the contract: workloads/base.py, docs/your-model.md)"),
    "subclass-loss-with-one-argument": (
        SUBCLASS + "\n    def loss(self, output):\n        return output.sum()\n", "{path}:Mine",
        "workload '{path}:Mine': Mine.loss(self, output) cannot take the arguments compare passes it: "
        "loss(self, output, target) (the contract: workloads/base.py, docs/your-model.md)"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_user_workload_is_one_line_exit_2_and_nothing_written(case, tmp_path):
    text, ref, message, *extra = BAD[case]
    path = write(tmp_path, text) if text else tmp_path / "unused.py"
    fill = {"path": path, "dir": tmp_path, "cwd": Path.cwd()}
    out = tmp_path / "out"
    result = invoke("run", "-w", ref.format(**fill), "-a", "ddp", "--out", out, *extra)
    assert (result.exit_code, result.stderr) == (2, f"error: {message.format(**fill)}\n")
    assert not out.exists()


@pytest.mark.parametrize("where", ["import", "forward", "dataset"])
def test_an_exception_in_the_users_code_is_their_traceback_and_exit_1_never_ours(where, tmp_path):
    body = {"import": "raise RuntimeError('cannot find my weights')\n",
            "forward": "def f():\n    return {'model': Broken(), 'train': (torch.zeros(64, 2), torch.zeros(64).long())}\n"
                       "class Broken(torch.nn.Linear):\n    def __init__(self):\n        super().__init__(2, 2)\n"
                       "    def forward(self, x):\n"
                       "        return self.helper(x)\n    def helper(self, x):\n"
                       "        raise ValueError('shapes do not match in my model')\n",
            "dataset": "class Rows(torch.utils.data.Dataset):\n    def __len__(self):\n        return 64\n"
                       "    def __getitem__(self, i):\n        if i % 7 == 3:\n"
                       "            raise ValueError(f'row {i} is corrupt')\n"
                       "        return torch.zeros(2), 0\n"
                       "def f():\n    return {'model': torch.nn.Linear(2, 2), 'train': Rows()}\n"}[where]
    path = write(tmp_path, "import torch\n" + body)
    out = tmp_path / "out"
    proc = invoke("run", "-w", f"{path}:f", "-a", "ddp", "--out", out)
    assert proc.exit_code == 1 and not out.exists(), proc.output
    assert proc.stderr.startswith("Traceback (most recent call last):\n"), proc.stderr
    assert f'File "{path}"' in proc.stderr and "/harness/" not in proc.stderr and "/workloads/" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    if where == "import":
        assert "RuntimeError: cannot find my weights" in proc.stderr
        assert last == f"error: importing {path} raised RuntimeError in your code (traceback above); nothing was run " \
                       f"or written"
    elif where == "dataset":  # a Dataset read by the check before launching
        assert "in __getitem__" in proc.stderr and "ValueError: row " in proc.stderr
        assert last == (f"error: reading the training samples of workload {path}:f raised ValueError in your code "
                        f"(traceback above); nothing was run or written")
    else:
        assert "in helper" in proc.stderr and "ValueError: shapes do not match in my model" in proc.stderr
        assert last == (f"error: a forward and loss of workload {path}:f on 2 training samples raised ValueError in "
                        f"your code (traceback above); nothing was run or written")


def test_dropout_is_found_before_launching_and_explains_a_failed_equivalence(tmp_path):
    path = write(tmp_path, "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n"
                           "def drop(p: float = 0.5):\n    return {'model': lambda: nn.Sequential(nn.Linear(4, 4), "
                           "nn.Dropout(p)), 'train': (torch.randn(8, 4), torch.randint(0, 4, (8,)))}\n"
                           "class Noisy(nn.Linear):\n    def forward(self, x):\n"
                           "        return F.dropout(super().forward(x), 0.3, training=self.training)\n"
                           "def hidden():\n    return {'model': lambda: Noisy(4, 4), "
                           "'train': (torch.randn(8, 4), torch.randint(0, 4, (8,)))}\n")
    reasons = {}
    for ref, options in ((f"{path}:drop", []), (f"{path}:drop", ["p=0"]), (f"{path}:hidden", [])):
        req = requests.RunRequest(workload=ref, options=options)
        w = workload_checks.load_workload(req)
        workload_checks.check_user_code(w, req, 8)
        reasons[(ref.rsplit(":")[1], tuple(options))] = w.nondeterministic
    assert reasons == {("drop", ()): "it has dropout (Dropout(p=0.5))", ("drop", ("p=0",)): None,
                       ("hidden", ()): "the same samples from the same state gave different outputs under two torch "
                                       "seeds (randomness in forward, e.g. a functional dropout)"}
    row = {"measured": True, "adapter": "ddp", "first": {"equivalence": {"why_failed": "the model is not "
                                                                                        "deterministic: x"}}}
    assert equivalence_notes([row]) == ["✗ in the max_param_diff column (ddp): the model is not deterministic: x."]


def test_a_dataset_is_read_through_a_loader_as_the_same_samples_in_the_same_order(tmp_path):
    import sys

    sys.path.insert(0, str(REPO / "examples"))
    try:
        tensors = workloads.get(f"{REPO}/examples/my_model.py:classifier", {"samples": "256"})
        through = workloads.get(f"{REPO}/examples/my_model.py:classifier_dataset", {"samples": "256"})
    finally:
        sys.path.remove(str(REPO / "examples"))
    assert through.reads_through_loader() and not tensors.reads_through_loader()
    data, dataset = tensors.materialize("cpu", 64), through.materialize("cpu", 64)
    assert torch.equal(data.test_x, dataset.test_x)  # a test Dataset is read into memory once
    for workers in (0, 2):
        for rank in (0, 1):
            spec = SimpleNamespace(global_batch=64, loader_workers=workers, rank_dir=str(tmp_path))
            info = SimpleNamespace(data_rank=rank, data_world=2, device="cpu")
            loader = StepLoader(through, dataset, spec, info, total=9)  # 9 steps: past the first epoch of 4
            for step in range(9):
                x, y = loader.next()
                idx = tensors.batch_indices(step, 64, 256, rank, 2)
                assert torch.equal(x, data.train_x[idx]) and torch.equal(y, data.train_y[idx]), (workers, rank, step)
            assert loader.describe() == {"loader": "torch.utils.data.DataLoader", "loader_workers": workers}
            loader.close()


def test_flops_per_sample_are_counted_on_the_real_model_as_by_hand(tmp_path):
    path = write(tmp_path, "import torch\nfrom torch import nn\n\n\ndef mlp():\n"
                           "    x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))\n"
                           "    return {'model': lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)),\n"
                           "            'train': (x, y)}\n")
    # Per sample, 2 FLOPs a multiply-add: forward 2*(4*8) + 2*(8*2) = 96; backward, the second layer's input
    # gradient and weight gradient 2 * 2*(8*2) = 64, the first layer's weight gradient only 2*(4*8) = 64 (its input
    # needs no gradient)
    assert workloads.get(f"{path}:mlp").flops_per_sample(8) == 96 + 64 + 64


def test_mfu_is_judged_against_the_devices_dense_peak_at_the_rows_arithmetic_or_says_why_not():
    from harness.model.hardware import mfu

    assert mfu(100.0, "cpu", [], "fp32", None) == {"value": None, "why_none": "no peak known for a CPU"}
    h200 = mfu(98.94, "cuda", ["NVIDIA H200"], "bf16", {"matmul_allow_tf32": False})
    assert h200["value"] == pytest.approx(0.1) and h200["peak_tflops"] == 989.4
    assert mfu(66.9, "cuda", ["NVIDIA H100 80GB HBM3"], "fp32", {"matmul_allow_tf32": False})["value"] == 1.0
    assert mfu(49.47, "cuda", ["NVIDIA H100 80GB HBM3"], "fp32", {"matmul_allow_tf32": True})["value"] == \
        pytest.approx(0.1)
    assert mfu(1.0, "cuda", ["NVIDIA H100 PCIe"], "bf16", None)["why_none"] == "no peak known for NVIDIA H100 PCIe"


def test_an_fp32_row_with_tf32_convolutions_is_judged_against_the_tf32_peak_and_old_records_are_rejudged():
    # cuDNN runs fp32 convolutions in TF32 by default: ResNet-50 at 50.9 TFLOP/s on an H200 is 10.3% of TF32's
    # 494.7, not 76% of the fp32 vector peak that the first rule judged it against
    from harness.model.hardware import mfu, mfu_of

    conv = {"cudnn_allow_tf32": True, "matmul_allow_tf32": False}
    assert mfu(49.47, "cuda", ["NVIDIA H200"], "fp32", conv)["peak_tflops"] == 494.7
    old = {"tflops_per_device": 50.88, "env": {"gpus": ["NVIDIA H200"]}, "mfu": {"value": 0.76, "peak_tflops": 66.9},
           "controls": {"precision": "fp32", "cuda_math": conv}}
    assert mfu_of(old)["value"] == pytest.approx(50.88 / 494.7)
    assert mfu_of({**old, "controls": {"precision": "fp16", "cuda_math": conv}})["peak_tflops"] == 989.4
    assert mfu_of({"tflops_per_device": 1.0, "controls": {"precision": "fp32"}})["why_none"] == \
        "no peak known for a CPU"
    assert mfu_of({"controls": {}}) is None


def test_an_fp32_model_without_convolutions_is_judged_at_the_fp32_peak_whatever_cudnn_allows():
    # The fourth GPU lease: a Llama in fp32 ran 42.9 TFLOP/s on an H200 with cuDNN's TF32 switch on (its default)
    # and torch's matmul switch off (its default). It has no convolution, so its matmuls ran in plain fp32: 64% of
    # the 66.9 TFLOP/s fp32 peak, not the 8.7% of TF32's 494.7 that the rule judging by the switches alone said.
    from harness.model.hardware import mfu, mfu_of

    conv = {"cudnn_allow_tf32": True, "matmul_allow_tf32": False}
    llama = mfu(42.9, "cuda", ["NVIDIA H200"], "fp32", conv, conv_share=0.0)
    assert llama["peak_tflops"] == 66.9 and llama["value"] == pytest.approx(42.9 / 66.9)
    assert llama["peak"] == "NVIDIA H200: 66.9 TFLOP/s dense fp32 (profile h200-sxm-ndr400)"
    assert mfu(49.47, "cuda", ["NVIDIA H200"], "fp32", conv, conv_share=1.0)["peak_tflops"] == 494.7
    # A ResNet's fc layer is a matmul: its FLOPs split, and the peak is what they would reach split so
    mixed = mfu(10.0, "cuda", ["NVIDIA H200"], "fp32", conv, conv_share=0.9)
    assert mixed["peak_tflops"] == pytest.approx(1 / (0.9 / 494.7 + 0.1 / 66.9))
    assert mixed["peak"].endswith("dense, tf32 for 90% of the FLOPs + fp32 for 10% of the FLOPs "
                                  "(profile h200-sxm-ndr400)")
    both = {"cudnn_allow_tf32": True, "matmul_allow_tf32": True}
    assert mfu(1.0, "cuda", ["NVIDIA H200"], "fp32", both, conv_share=0.3)["peak_tflops"] == 494.7
    rec = {"tflops_per_device": 42.9, "env": {"gpus": ["NVIDIA H200"]}, "conv_flops_share": 0.0,
           "controls": {"precision": "fp32", "cuda_math": conv}}
    assert mfu_of(rec)["peak_tflops"] == 66.9


def test_the_flops_are_split_into_convolutions_and_the_rest(tmp_path):
    path = write(tmp_path, "import torch\nfrom torch import nn\n\n\ndef convnet():\n"
                           "    x, y = torch.randn(8, 1, 6, 6), torch.randint(0, 2, (8,))\n"
                           "    return {'model': lambda: nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), "
                           "nn.Linear(32, 2)), 'train': (x, y)}\n\n\n"
                           "def mlp():\n"
                           "    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))\n"
                           "    return {'model': lambda: nn.Linear(4, 2), 'train': (x, y)}\n")
    # Per sample: the convolution's forward 2 * (2 x 9 x 16) = 576 and its weight gradient as much (its input needs
    # none); the linear layer's forward 2 * 32 * 2 = 128, its weight and input gradients 128 each
    split = workloads.get(f"{path}:convnet").flop_split(8)
    assert split == {"flops_per_sample": 576 * 2 + 128 * 3, "conv_share": 576 * 2 / (576 * 2 + 128 * 3)}
    assert workloads.get(f"{path}:mlp").flop_split(8)["conv_share"] == 0.0


HF_STYLE = """
import torch
import torch.nn.functional as F
from torch import nn
from workloads import Pieces


class Tagger(nn.Module):
    \"\"\"Returns its own loss, as a transformers model: a mean over the labels that are not -100.\"\"\"

    def __init__(self):
        super().__init__()
        self.embed, self.head = nn.Embedding(16, 8), nn.Linear(8, 16)

    def forward(self, input_ids, attention_mask, labels=None):
        logits = self.head(self.embed(input_ids)) * attention_mask[..., None]
        loss = None if labels is None else F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        return {"loss": loss, "logits": logits}


class Items(torch.utils.data.Dataset):
    def __init__(self, batch):
        self.batch = batch

    def __len__(self):
        return len(self.batch["input_ids"])

    def __getitem__(self, i):
        return {k: v[i] for k, v in self.batch.items()}


def data(n):
    ids = torch.randint(1, 16, (n, 6))
    mask = (torch.arange(6) < torch.randint(2, 7, (n, 1))).long()
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def tagger(dataset: bool = False, counted: bool = True):
    train = data(32)
    return Pieces(model=Tagger, train=Items(train) if dataset else train, test=data(8),
                  count=(lambda batch: (batch["labels"] != -100).sum()) if counted else None,
                  metric=lambda out, batch: (((out["logits"].argmax(-1) == batch["labels"])
                                              & (batch["labels"] != -100)).sum(), (batch["labels"] != -100).sum()))
"""


def test_a_tuple_that_starts_with_a_loss_is_read_as_the_trainer_reads_it():
    # a transformers model with return_dict=False returns (loss, logits, ...) when given labels, and (logits,) when
    # not; the check had refused it as "a tuple, with no loss in it"
    from collections import namedtuple

    from workloads import batch as batches

    loss, logits = torch.tensor(0.7), torch.randn(4, 3)
    assert batches.own_loss((loss, logits)) is loss and batches.logits((loss, logits)) is logits
    assert batches.own_loss([loss, logits, torch.randn(4, 8)]) is loss
    assert batches.own_loss((logits,)) is None and batches.logits((logits,)) is logits
    # no loss first: neither part is taken for the logits (the second may be a loss term the user means to add)
    assert batches.own_loss((logits, loss)) is None and batches.logits((logits, loss)) is None
    assert batches.own_loss((torch.tensor(3), logits)) is None  # an integer of one value is no loss
    named = namedtuple("Out", "logits aux")(logits, loss)  # fields are read by name
    assert batches.own_loss(named) is None and batches.logits(named) is logits
    assert batches.describe((logits, None)) == "a tuple of a tensor (4, 3), NoneType"


def test_a_dict_batch_is_sliced_like_tensors_fed_by_name_and_its_own_loss_counted(tmp_path):
    path = write(tmp_path, HF_STYLE)
    tensors = workloads.get(f"{path}:tagger")
    through = workloads.get(f"{path}:tagger", {"dataset": "true"})
    assert not tensors.reads_through_loader() and through.reads_through_loader()
    assert tensors.tokens_per_sample() == 6  # the input_ids' length
    data, loaded = tensors.materialize("cpu", 8), through.materialize("cpu", 8)
    idx = tensors.batch_indices(0, 8, data.n_train, 1, 2)
    x, y = data.batch(idx, "cpu")
    lx, ly = loaded.batch(idx, "cpu")  # the Dataset's dicts, default-collated: the same samples
    assert y is x and ly is lx and sorted(x) == sorted(lx) == ["attention_mask", "input_ids", "labels"]
    assert all(torch.equal(x[k], lx[k]) and len(x[k]) == 4 for k in x)
    torch.manual_seed(0)
    model = tensors.build_model()
    out = tensors.forward(model, x)  # model(**batch)
    value, count, summed = tensors.loss_terms(out, y)
    assert value is out["loss"] and int(count) == int((x["labels"] != -100).sum()) and not summed
    # two ranks' slices: each loss times its count over the mean count averages to the global batch's loss
    whole, _ = data.batch(tensors.batch_indices(0, 8, data.n_train, 0, 1), "cpu")
    halves = [data.batch(tensors.batch_indices(0, 8, data.n_train, r, 2), "cpu")[0] for r in range(2)]
    counts = torch.tensor([float(tensors.count(h)) for h in halves], dtype=torch.float64)
    with torch.no_grad():
        each = [tensors.step_loss(tensors.forward(model, h), h, lambda c: counts.mean().reshape(1)) for h in halves]
        exact = tensors.step_loss(tensors.forward(model, whole), whole)
    assert counts[0] != counts[1] and abs(float(sum(each) / 2 - exact)) < 1e-6
    correct, n, loss_sum = tensors.evaluate(model, data, 0, 1, torch.no_grad())
    assert n == float((data.test_x["labels"] != -100).sum()) and loss_sum > 0
    # the pre-launch check runs it as the steps will, and reads no counts for a loss that declares one
    req = requests.RunRequest(workload=f"{path}:tagger", options=[], world_size=2)
    workload_checks.check_user_code(tensors, req, 8)
    # (a count that declares one is held only against counts out of proportion with it, each carrying the declared)
    assert tensors.nondeterministic is None and all(c.get("declared") for c in tensors.varying_counts or [])
    plain = workloads.get(f"{path}:tagger", {"counted": "false"})
    workload_checks.check_user_code(plain, requests.RunRequest(workload=f"{path}:tagger", options=["counted=false"],
                                                        world_size=2), 8)
    assert {c["fix"] for c in plain.varying_counts} >= {'`count=lambda batch: (batch["labels"] != -100).sum()` in its '
                                                        'Pieces'}


def test_a_failed_check_is_explained_only_by_a_count_that_reproduces_the_reference_loss():
    from harness.core.normalisation import explain

    cand = [{"what": "the targets other than -100 (cross_entropy's ignore_index)", "step": 1, "counts": [30, 10],
             "fix": "`count=lambda target: (target != -100).sum()` in its Pieces"}]
    # step 2: the ranks' losses 2.0 and 4.0; weighted by 30 and 10 they give 2.5, the single process's loss
    why = explain(cand, [[1.0, 2.0, 1.5], [1.0, 4.0, 1.7]], [1.0, 2.5, 1.6], 3)
    assert why.startswith("its loss is a mean over the targets other than -100 (cross_entropy's ignore_index), whose "
                          "number differs between the ranks (30 and 10 at step 2), and each rank averaged its own "
                          "count")
    assert "the single process's loss, 2.5; their plain mean is 3);" in why
    assert explain(cand, [[1.0, 2.0, 1.5], [1.0, 4.0, 1.7]], [1.0, 2.9, 1.6], 3) is None  # not what counts give
    assert explain(cand, [[1.0, 2.5, 1.5], [1.0, 2.5, 1.7]], [1.0, 2.5, 1.6], 3) is None  # equal means: no evidence
    assert explain(cand, [[1.0, 2.0], [1.0, 4.0]], [1.0, 2.5], 1) is None  # after the checked steps
    # A fresh language model: every rank's loss near ln V, so the plain mean misses by a few roundings only, while
    # the counts give the single process's loss (GPT-2 without `count`, measured)
    near = [{**cand[0], "step": 0, "counts": [102, 99]}]
    why = explain(near, [[5.54471], [5.55925]], [(102 * 5.54471 + 99 * 5.55925) / 201], 3)
    assert why and "(102 and 99 at step 1)" in why
    assert explain(near, [[5.54471], [5.55925]], [5.55198 + 2e-6], 3) is None  # the plain mean's, near enough
    # A row that had parted from the reference before the count first differed (ZeRO-1 under an optimizer that
    # clips over its shard: step 2 already 1e-4 off) is not explained by a weighted mean that happens to be closer
    parted = explain(cand, [[1.0, 2.0, 1.5], [1.0, 4.0, 1.7]], [1.0, 2.5, 1.6], 3)
    assert parted and explain([{**cand[0], "step": 2, "counts": [30, 10]}],
                              [[1.0, 2.0, 1.0], [1.0, 2.2, 3.0]], [1.0, 2.1, 1.5], 3) is not None
    assert explain([{**cand[0], "step": 2, "counts": [30, 10]}],
                   [[1.0, 2.0, 1.0], [1.0, 2.4, 3.0]], [1.0, 2.1, 1.5], 3) is None  # step 2: 2.2 against 2.1


def test_the_most_frequent_target_is_a_padding_candidate_only_of_a_sequence():
    # A 4-class classifier's most frequent class was named "padding", and its ✗ blamed on it
    from harness.core.normalisation import counters

    classes = torch.tensor([0, 3, 3, 1, 2, 3])
    assert [c[0] for c in counters(classes, classes)] == ["the targets other than -100 (cross_entropy's "
                                                          "ignore_index)"]
    tokens = torch.tensor([[5, 7, 0, 0], [6, 0, 0, 0]])
    assert "the targets other than 0 (the most frequent target: padding)" in [c[0] for c in counters(tokens, tokens)]


def test_dict_inputs_with_targets_apart_take_the_default_loss_and_accuracy_from_the_logits(tmp_path):
    path = write(tmp_path, "import torch\nfrom torch import nn\n"
                           "class Head(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                           "        self.lin = nn.Linear(4, 3)\n"
                           "    def forward(self, features, scale):\n"
                           "        return {'logits': self.lin(features * scale)}\n"
                           "def f():\n    x = torch.randn(80, 4)\n"
                           "    inputs = {'features': x, 'scale': torch.ones(80, 1)}\n"
                           "    return {'model': Head, 'train': (inputs, x[:, :3].argmax(1)),\n"
                           "            'test': ({k: v[:16] for k, v in inputs.items()}, x[:16, :3].argmax(1))}\n")
    w = workloads.get(f"{path}:f")
    data = w.materialize("cpu", 8)
    x, y = data.batch(torch.arange(8), "cpu")
    torch.manual_seed(0)
    model = w.build_model()
    out = w.forward(model, x)  # model(features=..., scale=...)
    assert torch.equal(w.step_loss(out, y), torch.nn.functional.cross_entropy(out["logits"], y))
    correct, count, loss_sum = w.evaluate(model, data, 0, 1, torch.no_grad())
    assert count == 16 and 0 <= correct <= 16 and loss_sum > 0
    workload_checks.check_user_code(w, requests.RunRequest(workload=f"{path}:f", options=[], world_size=2), 8)
    assert w.nondeterministic is None  # the two forwards' dicts compared as outputs, not by torch.equal


def test_a_keyboard_interrupt_from_user_code_is_told_from_a_real_ctrl_c_whatever_handles_sigint():
    # make test once saw exit 130 for the import that raises KeyboardInterrupt: another test had left its own SIGINT
    # handler in place, and the rule then took every KeyboardInterrupt for a real Ctrl-C
    import os
    import signal

    from harness.shared.registry import UserExit, user_code

    seen = []
    before = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        with pytest.raises(UserExit, match="your code raised KeyboardInterrupt"):
            with user_code("importing mine.py"):
                raise KeyboardInterrupt
        with pytest.raises(KeyboardInterrupt):  # a real one: the earlier handler still ran, and it is not the user's
            with user_code("importing mine.py"):
                os.kill(os.getpid(), signal.SIGINT)
                raise KeyboardInterrupt
        assert seen == [signal.SIGINT]
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler  # the test's own, restored
        # Python's default handler (set here: a test run started in the background inherits SIGINT ignored): a real
        # Ctrl-C raises, and is not converted
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with pytest.raises(KeyboardInterrupt):
            with user_code("importing mine.py"):
                os.kill(os.getpid(), signal.SIGINT)
        # SIGINT ignored (a background job's): a real one interrupts nothing, so a KeyboardInterrupt is the code's own
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        with pytest.raises(UserExit, match="your code raised KeyboardInterrupt"):
            with user_code("importing mine.py"):
                os.kill(os.getpid(), signal.SIGINT)
                raise KeyboardInterrupt
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


LAZY = '''
import torch
from torch import nn
from workloads import Pieces, workload


@workload(global_batch=8)
def lazy():
    x = torch.randn(32, 6)
    return Pieces(model=lambda: nn.Sequential(nn.LazyLinear(5), nn.LazyBatchNorm1d(), nn.Dropout(0.5),
                                              nn.Linear(5, 2)), train=(x, (x.sum(1) > 0).long()))
'''


def test_a_lazy_modules_parameters_are_made_before_any_backend_sees_the_model(tmp_path):
    # DDP refuses an uninitialized parameter and FSDP2 cannot shard one: new_model makes them by one forward of the
    # first samples, in eval mode (no BatchNorm statistics moved) and the same in every process after the same seed,
    # on the device the model is built on (meta too)
    from torch.nn.parameter import is_lazy

    w = workloads.get(f"{write(tmp_path, LAZY)}:lazy")
    assert any(is_lazy(p) for p in w.build_model().parameters())
    built = []
    for _ in range(2):
        torch.manual_seed(w.seed)
        built.append(w.new_model())
    model = built[0]
    assert not any(is_lazy(p) for p in model.parameters()) and model.training
    assert model[0].weight.shape == (5, 6) and model[1].weight.shape == (5,)
    assert all(torch.equal(a, b) for a, b in zip(built[0].state_dict().values(), built[1].state_dict().values()))
    assert torch.equal(model[1].running_mean, torch.zeros(5)) and int(model[1].num_batches_tracked) == 0
    with torch.device("meta"):
        assert w.new_model()[0].weight.device.type == "meta"


def test_the_default_accuracy_leaves_out_ignored_positions_and_a_tuple_output_is_not_evaluated(tmp_path):
    # Padding labelled -100 is not a wrong answer (the default loss ignores it too); an output (logits, aux_loss)
    # has no default accuracy, so it is not evaluated, on every rank alike, rather than failing after training
    path = write(tmp_path, "import torch\nfrom torch import nn\n"
                           "class Pair(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                           "        self.lin = nn.Linear(4, 3)\n"
                           "    def forward(self, x):\n        out = self.lin(x)\n        return out, out.pow(2).mean()\n"
                           "def padded():\n    x = torch.randn(40, 5, 4)\n    y = x[..., :3].argmax(-1)\n"
                           "    y[:, 3:] = -100\n"
                           "    return {'model': lambda: nn.Linear(4, 3), 'train': (x, y), 'test': (x[:8], y[:8])}\n"
                           "def pair():\n    x = torch.randn(40, 4)\n"
                           "    return {'model': Pair, 'train': (x, x[:, :3].argmax(1)), 'test': (x[:8], x[:8, :3].argmax(1)),\n"
                           "            'loss': lambda out, y: nn.functional.cross_entropy(out[0], y) + out[1]}\n")
    w = workloads.get(f"{path}:padded")
    data = w.materialize("cpu", 8)
    torch.manual_seed(0)
    model = w.new_model()
    correct, count, _ = w.evaluate(model, data, 0, 1, torch.no_grad())
    assert count == 8 * 3  # the 2 positions of -100 in each of the 8 test samples are left out
    with torch.no_grad():
        out = model(data.test_x)
    assert correct == (out.argmax(-1) == data.test_y)[:, :3].sum().item()
    pair = workloads.get(f"{path}:pair")
    assert pair.evaluate(pair.new_model(), pair.materialize("cpu", 8), 0, 1, torch.no_grad()) is None
    assert pair.evaluate(pair.new_model(), pair.materialize("cpu", 8), 1, 9, torch.no_grad()) is None  # empty slice
    # and says why, for the report's note on the empty column
    assert pair.eval_skipped == ("its output has no logits (a tuple or dict without `logits`), and without "
                                 "metric(output, target) -> (correct, count) there is no accuracy to take")


def test_a_workload_not_evaluated_says_why(tmp_path):
    path = write(tmp_path, "import torch\nfrom torch import nn\n"
                           "x = torch.randn(40, 4)\n"
                           "def regression():\n"
                           "    return {'model': lambda: nn.Linear(4, 1), 'train': (x, x[:, :1]), 'test': (x[:8], x[:8, :1]),\n"
                           "            'loss': nn.functional.mse_loss}\n"
                           "from workloads import workload\n"
                           "@workload(metric_name='share within 0.5')\n"
                           "def within():\n"
                           "    return {**regression(),\n"
                           "            'metric': lambda out, y: (((out - y).abs() < 0.5).sum().item(), y.numel())}\n"
                           "def multihot():\n"
                           "    y = (x[:, :3] > 0).long()\n"
                           "    return {'model': lambda: nn.Linear(4, 3), 'train': (x, y), 'test': (x[:8], y[:8]),\n"
                           "            'loss': lambda out, y: nn.functional.binary_cross_entropy_with_logits(out, y.float())}\n"
                           "def untested():\n"
                           "    return {'model': lambda: nn.Linear(4, 3), 'train': (x, x[:, :3].argmax(1))}\n")
    fix = "without metric(output, target) -> (correct, count) there is no accuracy to take"
    for name, why in (("regression", f"its targets are floats, and {fix}"), ("within", None),
                      ("untested", "the workload has no test set"),
                      ("multihot", "its targets (integers, [3] per sample) are not a class index per row of its logits "
                                   f"([3] per sample), as the default accuracy takes them, and {fix}")):
        w = workloads.get(f"{path}:{name}")
        data = w.materialize("cpu", 8)
        got = w.evaluate(w.new_model(), data, 0, 1, torch.no_grad())
        assert w.eval_skipped == why and (got is None) == (why is not None), name
    assert workloads.get(f"{path}:within").metric_name == "share within 0.5"


FAULTY_CHECK = '''
import ctypes
import threading

import torch
from torch import nn
from workloads import Pieces, workload


class Faulty(nn.Linear):
    def __init__(self, kind):
        super().__init__(4, 2)
        self.kind = kind

    def forward(self, x):
        if self.kind == "hang":
            threading.Event().wait()  # forever: a deadlock in the model's code
        ctypes.string_at(0)  # a segfault
        return super().forward(x)


@workload(global_batch=8)
def faulty(kind: str = "hang"):
    x = torch.randn(32, 4)
    return Pieces(model=lambda: Faulty(kind), train=(x, (x.sum(1) > 0).long()))
'''


@pytest.mark.slow  # seconds: left out of make test-fast
@pytest.mark.parametrize("kind", ["hang", "segv"])
def test_a_hang_or_a_crash_in_the_check_before_launching_says_where_and_writes_nothing(tmp_path, kind):
    # The check runs the model's forward in compare itself: a hang there ended nothing (no timeout applied) and a
    # segfault exited 139 with no word. Now a hang past --stall-timeout is one line and the stacks, exit 1; a crash
    # prints its Python stack; neither leaves an output directory
    path = write(tmp_path, FAULTY_CHECK)
    # 10 s: on a loaded machine the check's own work before the fault took over 3 s, and a crash read as a hang
    _a_fault_is_said(tmp_path, path, kind, f"the check of workload {path}:faulty before launching", 10,
                     "-w", f"{path}:faulty", "-o", f"kind={kind}")



FLOP_HANG = '''
import threading

import torch
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
from workloads import Pieces, workload


class CountHang(nn.Linear):
    def __init__(self):
        super().__init__(4, 2)

    def forward(self, x):
        if any("FlopCounter" in type(m).__name__ for m in _get_current_dispatch_mode_stack()):
            threading.Event().wait()  # forever, and only while compare counts the model's FLOPs
        return super().forward(x)


@workload(global_batch=8)
def counthang():
    x = torch.randn(32, 4)
    return Pieces(model=CountHang, train=(x, (x.sum(1) > 0).long()))
'''


@pytest.mark.slow  # seconds: left out of make test-fast
def test_a_hang_while_compare_counts_the_models_flops_is_bounded_by_the_stall_timeout(tmp_path):
    # The FLOP count (for MFU) runs the model's forward and backward in compare itself after the check: it sat
    # outside the check's guard, so a hang there was never stopped (--stall-timeout did not apply, Ctrl-C was only
    # noted), and what the model printed there reached the terminal before the run's first line: both guarded now
    path = write(tmp_path, FLOP_HANG)
    _a_fault_is_said(tmp_path, path, "hang", f"counting the FLOPs of workload {path}:counthang", 10,
                     "-w", f"{path}:counthang")


def _a_fault_is_said(tmp_path, path, kind, what, stall, *args):
    """`compare run ARGS` with a hang or a segfault in the user's code at `path` while compare runs `what`: one line
    and the stacks after --stall-timeout `stall` (exit 1), or the crash's Python stack (SIGSEGV); the line of their
    file shown, and no output directory."""
    import subprocess
    import sys

    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "harness", "run", *args, "-a", "ddp", "--repeats", "1",
                           "--stall-timeout", str(stall), "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    if kind == "hang":
        assert done.returncode == 1, done.stderr
        assert done.stderr.startswith(f"error: {what} ran for {stall} s without ending (--stall-timeout): a hang in "
                                      f"the model's code? Its stacks, most recent call first:\n"), done.stderr
    else:
        assert done.returncode == -11 and "Fatal Python error: Segmentation fault" in done.stderr, done.stderr
    assert f'File "{path}", line' in done.stderr and not out.exists()


def test_a_language_models_tokens_per_sample_come_from_a_dataset_as_from_tensors(tmp_path):
    # The same token data held as tensors or read through a Dataset of dict items (or of (ids, next ids)) gives the
    # same tokens/s column: it vanished for the Dataset
    path = write(tmp_path, "import torch\n"
                           "ids = torch.randint(0, 50, (32, 12))\n"
                           "class Dicts(torch.utils.data.Dataset):\n    def __len__(self):\n        return 32\n"
                           "    def __getitem__(self, i):\n        return {'input_ids': ids[i], 'labels': ids[i]}\n"
                           "class Pairs(Dicts):\n    def __getitem__(self, i):\n        return ids[i], ids[i]\n"
                           "class Rows(Dicts):\n    def __getitem__(self, i):\n        return ids[i].float(), ids[i, 0]\n"
                           "def tensors():\n    return {'model': torch.nn.Linear(2, 2), 'train': {'input_ids': ids, "
                           "'labels': ids}}\n"
                           "def dicts():\n    return {'model': torch.nn.Linear(2, 2), 'train': Dicts()}\n"
                           "def pairs():\n    return {'model': torch.nn.Linear(2, 2), 'train': Pairs()}\n"
                           "def rows():\n    return {'model': torch.nn.Linear(2, 2), 'train': Rows()}\n")
    assert [workloads.get(f"{path}:{name}").tokens_per_sample() for name in ("tensors", "dicts", "pairs", "rows")] == \
        [12, 12, 12, None]  # a classifier's one label per sample is no sequence


@pytest.mark.slow  # seconds: left out of make test-fast
def test_a_thread_the_users_code_leaves_running_does_not_keep_compare_from_exiting(tmp_path):
    # The check before launching runs the workload function in compare's own process: a thread it starts and never
    # ends once kept Python waiting at exit for ever (SIGTERM too), after the results or, here, the refusal
    path = write(tmp_path, "import threading, time, torch\n"
                           "def f():\n    threading.Thread(target=time.sleep, args=(10**6,), name='prefetch').start()\n"
                           "    return {'model': torch.nn.Linear(2, 2), 'train': (torch.zeros(64, 2), "
                           "torch.zeros(64).long()), 'loss': lambda out, y: 'nope'}\n")
    proc = compare_cli("run", "-w", f"{path}:f", "-a", "ddp", "--out", str(tmp_path / "out"), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[-2:] == [
        f"error: workload {path}:f: its loss returned a str, not one floating-point value; return the loss as a tensor "
        f"(a mean over the batch), or (sum, count)",
        "compare: not waiting for 1 thread(s) still running in this process (prefetch), started while the check "
        "before launching ran the workload's code, by it or by a library it called (torch.compile's compile workers, "
        "say); a thread of yours: make it a daemon thread or end it"]


CHATTY = '''
import torch
from torch import nn
from workloads import Pieces, workload


class Chatty(nn.Linear):
    def __init__(self, fail):
        super().__init__(4, 2)
        self.fail = fail
        print("building my model")

    def forward(self, x):
        if self.fail:
            print("my forward is about to fail")
            raise ValueError("my model failed")
        return super().forward(x)


@workload(global_batch=8)
def chatty(fail: bool = False):
    x = torch.randn(32, 4)
    return Pieces(model=lambda: Chatty(fail), train=(x, (x.sum(1) > 0).long()))
'''


@pytest.mark.parametrize("fail", [False, True])
def test_what_the_users_code_prints_during_the_checks_is_held_back_unless_they_fail(tmp_path, capfd, fail):
    # The checks before launching build the model a dozen times: its print said "building my model" a dozen times
    # before the run's first line. Held back now; where the checks fail, it is printed first, as it may say why
    from harness.core import comparison
    from harness.core.requests import RunRequest
    from harness.shared.registry import UserCodeError

    path = write(tmp_path, CHATTY)
    req = RunRequest(workload=f"{path}:chatty", options=[f"fail={fail}"], adapters=["ddp"], repeats=1,
                     out=tmp_path / "out")
    if fail:
        with pytest.raises(UserCodeError):
            comparison.plan(req)
    else:
        comparison.plan(req)
    out, err = capfd.readouterr()
    built = (out + err).count("building my model")
    if fail:
        assert "my forward is about to fail" in out + err and built >= 1
    else:  # at most the count of its parameters on the meta device, before the checks
        assert built <= 1 and "my forward" not in out + err, (out, err)


@pytest.mark.parametrize("output, target", [("(n, 1)", "(n,)"), ("(n,)", "(n, 1)"), ("(n, 2)", "(n,)")])
def test_a_regression_output_and_target_of_other_shapes_are_refused_not_broadcast(tmp_path, output, target):
    # mse_loss broadcast a (B, 1) output against (B,) targets to (B, B) and trained on it (torch only warns); the ✗
    # then blamed the model's batch dependence
    width = {"(n, 1)": 1, "(n,)": 1, "(n, 2)": 2}[output]
    squeeze = ".squeeze(-1)" if output == "(n,)" else ""
    path = write(tmp_path, "import torch\nclass M(torch.nn.Module):\n    def __init__(self):\n"
                           f"        super().__init__()\n        self.lin = torch.nn.Linear(3, {width})\n"
                           f"    def forward(self, x):\n        return self.lin(x){squeeze}\n"
                           "def f():\n    x = torch.randn(64, 3)\n"
                           f"    y = x.sum(1){'.unsqueeze(-1)' if target == '(n, 1)' else ''}\n"
                           "    return {'model': M(), 'train': (x, y)}\n")
    out = tmp_path / "out"
    result = invoke("run", "-w", f"{path}:f", "-a", "ddp", "--out", out)
    o, t = {"(n, 1)": (2, 1), "(n,)": (2,), "(n, 2)": (2, 2)}[output], {"(n,)": (2,), "(n, 1)": (2, 1)}[target]
    assert result.exit_code == 2 and not out.exists(), result.output
    assert result.stderr.startswith(f"error: workload {path}:f: its model's output {o} and its float targets {t} are "
                                    f"not the same shape, and the default mean squared error would broadcast them"), \
        result.stderr
    assert result.stderr.rstrip().endswith("fix: make them the same shape (the output's `.squeeze(-1)`, or targets "
                                           "of the output's shape), or give loss(output, target)")
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_rank_with_nothing_to_count_adds_nothing_rather_than_nan(tmp_path):
    # `count=` with a mean loss: a slice whose every label is -100 has a mean of 0/0, and NaN x 0 stayed NaN, so
    # the row "diverged"; its share of the global batch's loss is 0, with a zero gradient for every parameter
    import torch.nn.functional as F

    path = write(tmp_path, "import torch\nfrom workloads import Pieces\n"
                           "def f():\n    x = torch.randint(0, 8, (16, 4))\n    y = torch.full((16, 4), -100)\n"
                           "    return Pieces(model=lambda: torch.nn.Sequential(torch.nn.Embedding(8, 4), "
                           "torch.nn.Linear(4, 8)), train=(x, y), count=lambda t: (t != -100).sum())\n")
    w = workloads.get(f"{path}:f")
    torch.manual_seed(0)
    model = w.new_model()
    x, y = torch.randint(0, 8, (2, 4)), torch.full((2, 4), -100)
    out = w.forward(model, x)
    assert math.isnan(float(F.cross_entropy(out.flatten(0, 1), y.flatten()).detach()))  # the mean it is given
    loss = w.step_loss(out, y, mean_over_processes=lambda c: c + 7)  # another rank counted 14: a mean of 7
    loss.backward()
    assert float(loss.detach()) == 0.0
    assert all(p.grad is not None and torch.equal(p.grad, torch.zeros_like(p)) for p in model.parameters())


def test_a_batchnorm_the_model_keeps_in_eval_while_training_is_not_per_process_and_train_is_called():
    # a frozen BatchNorm (its model's train() keeps it in eval: running statistics, no batch's) made every row
    # "not checked: BatchNorm statistics per process", and the harness never called train() before training
    models = REPO / "tests" / "fixtures" / "models.py"
    found = {}
    for name in ("frozen_norm", "batchnorm"):
        w = workloads.get(f"{models}:{name}")
        workload_checks.check_user_code(w, requests.RunRequest(workload=f"{models}:{name}", world_size=2), 16)
        found[name] = w.batch_norm
        model = w.new_model()
        assert model.training and any(not m.training for m in model.modules()) == (name == "frozen_norm")
    assert found == {"frozen_norm": None, "batchnorm": "BatchNorm1d"}


def test_items_of_different_shapes_are_one_line_with_what_it_means_and_the_fix(tmp_path):
    # torch's default_collate failed in torch.stack and the line said only that the user's code raised; then a
    # traceback of torch's frames alone came before the line (an outside check): one line, exit 2
    path = write(tmp_path, "import torch\n"
                           "class Rows(torch.utils.data.Dataset):\n    def __len__(self):\n        return 64\n"
                           "    def __getitem__(self, i):\n        return torch.zeros(2 + i % 3).long(), 0\n"
                           "def f():\n    return {'model': torch.nn.Embedding(4, 2), 'train': Rows()}\n")
    out = tmp_path / "out"
    proc = invoke("run", "-w", f"{path}:f", "-a", "ddp", "--out", out)
    assert proc.exit_code == 2 and not out.exists(), proc.output
    assert proc.stderr == (
        f"error: workload {path}:f: its training samples' tensors differ in shape (stack expects each tensor to be "
        f"equal size, but got [2] at entry 0 and [3] at entry 1), and the default collate stacks each batch's items "
        f"into one tensor; give them one shape in __getitem__ (a sequence padded or cut to a fixed length, its "
        f"padded labels -100; a bag of ids padded with an id that nn.EmbeddingBag's padding_idx leaves out)\n")


@pytest.mark.parametrize("built", ["in the function", "on meta"])
def test_a_target_outside_the_outputs_classes_anywhere_in_the_training_set_is_refused_before_launching(tmp_path,
                                                                                                       built):
    # sample 40 of 64 held class 9 of a 2-class output: the check's two samples missed it, and every launch failed
    # on "IndexError: Target 9 is out of bounds" after results were written
    model = "torch.nn.Linear(4, 2)" if built == "in the function" else "lambda: torch.nn.Linear(4, 2)"
    path = write(tmp_path, "import torch\ndef f():\n    x = torch.randn(64, 4)\n    y = (x.sum(1) > 0).long()\n"
                           f"    y[40] = 9\n    y[50] = -3\n    return {{'model': {model}, 'train': (x, y)}}\n")
    out = tmp_path / "out"
    result = invoke("run", "-w", f"{path}:f", "-a", "ddp", "--out", out)
    assert (result.exit_code, result.stderr) == (2, (
        f"error: workload {path}:f: training sample 40's target is 9, outside the 2 classes its model's output gives "
        f"(0 to 1, or -100 to ignore), so the default cross-entropy would fail at that sample; 2 of 64 samples hold "
        f"such targets: give the model 10 outputs, or map the targets into range\n")), result.output
    assert not out.exists()


def test_a_dropout_module_the_forward_never_calls_makes_no_model_random(tmp_path):
    # an nn.Dropout(0.2) held but never called: "the model is not deterministic: it has dropout (Dropout(p=0.2))",
    # so every row's check was skipped; the outputs under two seeds say it is deterministic
    path = write(tmp_path, "import torch\nclass M(torch.nn.Module):\n    def __init__(self):\n"
                           "        super().__init__()\n        self.lin, self.drop = torch.nn.Linear(4, 2), "
                           "torch.nn.Dropout(0.2)\n    def forward(self, x):\n        return self.lin(x)\n"
                           "def f():\n    x = torch.randn(64, 4)\n"
                           "    return {'model': M, 'train': (x, (x.sum(1) > 0).long())}\n")
    w = workloads.get(f"{path}:f")
    workload_checks.check_user_code(w, requests.RunRequest(workload=f"{path}:f", world_size=2), 16)
    assert w.nondeterministic is None


@pytest.mark.parametrize("seconds", [0.0, float("inf")])
def test_a_stall_timeout_of_zero_or_inf_sets_no_watch_over_the_check(seconds):
    # --stall-timeout inf started a Timer of inf seconds, whose thread died on OverflowError with a traceback
    import threading

    before = threading.active_count()
    with workload_checks.bounded("the check", seconds):
        assert threading.active_count() == before


SLOW_BUILD = '''
import os, time, torch
from torch import nn


def f():
    with open(os.environ["BUILD_FIFO"], "w") as fifo:  # tells the test the function is running
        fifo.write("building")
    time.sleep(120)
    x = torch.randn(64, 8)
    return {"model": lambda: nn.Linear(8, 3), "train": (x, x[:, :3].argmax(1))}
'''


@pytest.mark.slow  # seconds: left out of make test-fast
def test_ctrl_c_stops_compare_while_the_workload_builds_though_started_with_sigint_ignored(tmp_path):
    """A shell without job control starts `compare run &` with SIGINT ignored; compare took it over only once it
    launched, so a Ctrl-C while the user's function ran was dropped and the run went on to its end."""
    import signal
    import subprocess
    import sys

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "-w", f"{write(tmp_path, SLOW_BUILD)}:f", "-a",
                             "ddp", "--repeats", "1", "--out", str(tmp_path / "o")], cwd=REPO,
                            env={**os.environ, "BUILD_FIFO": str(fifo), "COMPARE_CACHE": str(tmp_path / "cache")},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert fifo.read_text() == "building"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and not (tmp_path / "o").exists()


def test_a_score_override_returning_a_pair_is_named_with_what_it_must_return(monkeypatch):
    # `metric` returns (correct, count), so a subclass's `score` of two was a natural guess; it failed every row's
    # record with "not enough values to unpack (expected 3, got 2)", naming nothing
    import contextlib

    w = workloads.get("digits")
    data = w.materialize("cpu", w.global_batch)
    monkeypatch.setattr(type(w), "score", lambda self, output, target: (1.0, 2.0))
    with pytest.raises(TypeError, match=r"^Digits.score returned a tuple of 2; it must return \(correct, count, "
                                        r"loss_sum\) of the evaluation batch"):
        w.evaluate(w.new_model(), data, 0, 2, contextlib.nullcontext())


def test_a_summed_loss_over_a_batch_with_nothing_to_count_is_zero_not_nan(tmp_path):
    # an audit's (sum, count) loss whose first two samples were all -100 was refused before launching as "nan": the
    # sum over nothing divided by its count, 0/0; a declared count= had guarded the same case
    path = write(tmp_path, '''
        import torch
        from torch import nn
        import torch.nn.functional as F
        from workloads import Pieces, workload

        @workload(global_batch=4, lr=0.1)
        def r1():
            x = torch.randint(0, 8, (16, 3), generator=torch.Generator().manual_seed(0))
            y = x.clone()
            y[:2] = -100
            loss = lambda o, t: (F.cross_entropy(o.flatten(0, 1), t.flatten(), ignore_index=-100, reduction="sum"),
                                 (t != -100).sum())
            return Pieces(model=lambda: nn.Sequential(nn.Embedding(8, 8), nn.Linear(8, 8)), train=(x, y), loss=loss)
    ''', "empty_first.py")
    w = workloads.get(f"{path}:r1")
    torch.manual_seed(0)
    model = w.build_model()
    x, y = w.materialize("cpu", 4).train_x[:2], w.materialize("cpu", 4).train_y[:2]
    loss = w.step_loss(w.forward(model, x), y)
    assert float(loss.detach()) == 0.0
    loss.backward()
    assert all(p.grad is not None and float(p.grad.abs().sum()) == 0.0 for p in model.parameters())
    whole = w.step_loss(w.forward(model, w.materialize("cpu", 4).train_x[:4]), w.materialize("cpu", 4).train_y[:4])
    assert math.isfinite(float(whole.detach())) and float(whole.detach()) > 0


def test_a_model_whose_build_fails_on_meta_is_checked_on_the_cpu_and_an_error_of_its_own_is_still_its_own(tmp_path):
    # torch's orthogonal parametrization reads .item() as it is set up: on the meta device that raised, and the check
    # before launching called it an error in the user's code; on the CPU the model builds and trains
    path = write(tmp_path, '''
        import torch
        from torch import nn
        from workloads import Pieces, workload

        @workload(global_batch=4, lr=0.05)
        def ortho():
            x = torch.randn(16, 8, generator=torch.Generator().manual_seed(0))
            return Pieces(model=lambda: nn.utils.parametrizations.orthogonal(nn.Linear(8, 8)), train=(x, x.clone()))

        @workload(global_batch=4, lr=0.05)
        def broken():
            x = torch.randn(16, 8, generator=torch.Generator().manual_seed(0))
            def model():
                raise ValueError("a bug of the user's")
            return Pieces(model=model, train=(x, x.clone()))
    ''', "ortho.py")
    w = workloads.get(f"{path}:ortho")
    workload_checks.check_user_code(w, requests.RunRequest(workload=f"{path}:ortho", options=[], world_size=2), 4)
    assert w.model_facts is not None
    bad = workloads.get(f"{path}:broken")
    from harness.shared.registry import UserCodeError

    with pytest.raises(UserCodeError, match="ValueError: a bug of the user's"):
        workload_checks.check_user_code(bad, requests.RunRequest(workload=f"{path}:broken", options=[], world_size=2),
                                        4)


def test_a_declared_count_out_of_proportion_with_the_loss_is_named_from_the_losses_or_said_as_possible():
    # an outside probe's GPT-2 declared (labels != -100).sum() for a loss over its shifted labels: every row ✗, and
    # the report named no cause
    from harness.core.normalisation import explain, suspect

    cand = [{"what": "the labels other than -100 after the first position (a causal model's loss, which shifts its "
                     "labels)", "step": 1, "counts": [30, 10],
             "fix": "`count=lambda batch: ...` in its Pieces", "declared": [[20.0, 20.0], [10.0, 30.0]]}]
    # step 2: the ranks' own means 2.0 and 4.0, declared 10 and 30 (mean 20): back-propagated 1.0 and 6.0; weighted
    # by the true counts 30 and 10 the means give 2.5, the single process's loss; the declared weighting gave 3.5
    why = explain(cand, [[1.0, 1.0, 1.5], [1.0, 6.0, 1.7]], [1.0, 2.5, 1.6], 3)
    assert why.startswith("the count declared for its loss (10 and 30 at step 2) is not the number of items its mean "
                          "is over: that is the labels other than -100 after the first position (a causal model's "
                          "loss, which shifts its labels) (30 and 10 there)")
    assert "the single process's loss, 2.5; weighted by the declared ones, 3.5); fix: declare `count=lambda" in why
    assert explain(cand, [[1.0, 1.0, 1.5], [1.0, 6.0, 1.7]], [1.0, 3.5, 1.6], 3) is None  # the declared one is right
    assert suspect(cand).startswith("the count declared for its loss (10 and 30 at step 2) is not in proportion to "
                                    "the labels other than -100 after the first position (a causal model's loss, "
                                    "which shifts its labels) (30 and 10 there): if the loss is a mean over those")
    assert suspect([{k: v for k, v in cand[0].items() if k != "declared"}]) is None
    assert suspect([{**cand[0], "what": "the attended positions (attention_mask)"}]) is None  # only the shift
    # the check before launching read step 2's losses with the same parameters (the ranks' own means 2.0 and 4.0):
    # a single process's 3.5 is what the declared counts 10 and 30 weigh them to, so the suspicion goes (T5, which
    # shifts no label, was told to declare a shifted count that then failed every row); its 2.5, what the shifted
    # counts weigh them to, keeps it; a step the check did not read keeps it too
    assert suspect(cand, {1: (3.5, [2.0, 4.0])}) is None
    assert suspect(cand, {1: (2.5, [2.0, 4.0])}).startswith("the count declared for its loss (10 and 30 at step 2)")
    assert suspect(cand, {0: (3.5, [2.0, 4.0])}) is not None


def test_a_failed_check_under_an_adaptive_optimizer_says_what_adam_does_to_a_gradient_near_zero(tmp_path):
    # an outside probe's nn.MultiheadAttention under Adam failed on every backend by 1e-4 in in_proj_bias, whose key
    # slice has a gradient of float noise only, and the ✗ said nothing of it
    from harness.core.assemble import why_differs

    path = write(tmp_path, '''
        import torch
        from torch import nn
        from workloads import Pieces, workload

        class Att(nn.Module):
            def __init__(self):
                super().__init__()
                self.att = nn.MultiheadAttention(8, 2, batch_first=True)
            def forward(self, x):
                return self.att(x, x, x)[0].mean(1)

        @workload(global_batch=4, lr=0.01)
        def att():
            x = torch.randn(16, 5, 8, generator=torch.Generator().manual_seed(0))
            return Pieces(model=Att, train=(x, x.mean(1)), loss=nn.functional.mse_loss,
                          optimizer=lambda params, lr: torch.optim.Adam(params, lr=lr))
    ''', "att.py")
    w = workloads.get(f"{path}:att")
    workload_checks.check_user_code(w, requests.RunRequest(workload=f"{path}:att", options=[], world_size=2), 4)
    assert w.optimizer_class == "Adam"
    largest = [{"parameter": "att.in_proj_bias", "diff": 1.1e-4, "steps_without_gradient": []}]
    text = why_differs(largest, 5, "ddp", None, None, None, w.optimizer_class, 1e-5)
    assert text.endswith("; the optimizer, Adam, divides each gradient by its running magnitude, so a parameter whose "
                         "gradient is near zero (attention's key bias, which the softmax ignores) moves by about the "
                         "learning rate on summation-order noise alone, and a backend that sums the batch in another "
                         "order differs by that much: if the largest differences are such parameters, raise the "
                         "tolerance (equiv_tolerance=1e-4 in @workload, as the built-in transformer workloads do; "
                         "1e-05 now)")
    assert "optimizer" not in why_differs(largest, 5, "ddp", None, None, None, "SGD", 1e-5)
    # raised already: the tolerance in use is not suggested again (an outside check: an AdamW ViT at lr 1e-3 was told
    # to raise equiv_tolerance to 1e-4, which it had; its rows matched under SGD)
    text = why_differs(largest, 8, "ddp", None, None, None, "AdamW", 1e-4, 0.001)
    assert text.endswith("order differs by that much: the tolerance is 0.0001 already, and such noise reaches about "
                         "the learning rate a step (the learning rate 0.001 a step, up to 8.0e-03 in 8 steps), beyond "
                         "what a tolerance can take and still catch a real difference; if the largest differences are "
                         "such parameters, check the backend with the same model under SGD, which does not amplify "
                         "that noise (where the backend computes what one process does, its rows then match)")
    # the reference's gradients, where the parameter differs most, answer the "if": near zero (in_proj_bias's key
    # slice) is such a parameter, one of the model's usual size is not, and then neither a tolerance nor SGD is the
    # advice (an outside run: in_proj_bias by 2.9e-3 under Adam, its key slice's gradient 1.5e-9)
    gt = "largest gradient in the steps compared where they differ most att.in_proj_bias"
    near = [{**largest[0], "diff": 6e-5, "gradient_peak": 3.1e-9, "gradient_ratio": 1.2e-6}]
    text = why_differs(near, 5, "ddp", None, None, None, "Adam", 1e-5)
    assert text.endswith(f"differs by that much: they are such parameters ({gt} 3.1e-09, against the model's median "
                         "element's 2.6e-03: 1.2e-06 of it); raise the tolerance (equiv_tolerance=1e-4 in @workload, as "
                         "the built-in transformer workloads do; 1e-05 now)")
    # such, by more than 1e-4 would take: no tolerance, SGD
    text = why_differs([{**near[0], "diff": 2.9e-3}], 10, "ddp", None, None, None, "Adam", 1e-5, 0.01)
    assert text.endswith("1.2e-06 of it); they differ by more than a tolerance of 0.0001 takes, and such noise reaches "
                         "about the learning rate a step (the learning rate 0.01 a step, up to 1.0e-01 in 10 steps), "
                         "beyond what a tolerance can take and still catch a real difference: check the backend with "
                         "the same model under SGD, which does not amplify that noise (where the backend computes "
                         "what one process does, its rows then match)")
    sized = [{**largest[0], "gradient_peak": 8e-4, "gradient_ratio": 0.31}]
    text = why_differs(sized, 5, "ddp", None, None, None, "Adam", 1e-5)
    assert text.endswith(f"differs by that much; these are not such parameters ({gt} 8.0e-04, against the model's "
                         "median element's 2.6e-03: 3.1e-01 of it): where they differ most their gradients are not near "
                         "zero (at least 0.0001 of the median element's), and summation-order noise does not turn such "
                         "a gradient into a step of the learning rate, so it does not explain the difference")
    both = why_differs([near[0], {**sized[0], "parameter": "att.out_proj.weight"}], 8, "ddp", None, None, None,
                       "AdamW", 1e-4, 0.001)
    assert (f"catch a real difference; att.in_proj_bias is such ({gt} 3.1e-09, against the model's median element's "
            "2.6e-03: 1.2e-06 of it), att.out_proj.weight not (") in both
    # where the backend names its own cause (Horovod's broadcast of AdamW's state), no advice to raise the tolerance:
    # following it would hide a real difference
    note = "hvd.broadcast_optimizer_state moves the weights before the first step"
    lora = [{"parameter": "l1.A", "diff": 4.8e-5, "steps_without_gradient": []}]
    text = why_differs(lora, 4, "horovod", None, None, note, "AdamW", 1e-5)
    assert text.endswith(f"; horovod's own note: {note}") and "tolerance" not in text


@pytest.mark.parametrize("method", ["materialize", "build_model"])
def test_an_exception_in_a_subclass_s_own_method_is_their_traceback_and_exit_1_never_ours(method, tmp_path):
    # A Workload subclass's materialize (read to count the training set) and build_model (the check's forward) are
    # the user's code: what they raised came out as compare's own traceback, from harness/ and workloads/ frames
    text = SUBCLASS + f"\n    def {method}(self, *args):\n        raise RuntimeError('my {method} is broken')\n"
    path = write(tmp_path, text)
    out = tmp_path / "out"
    proc = invoke("run", "-w", f"{path}:Mine", "-a", "ddp", "--out", out)
    assert proc.exit_code == 1 and not out.exists(), proc.output
    assert proc.stderr.startswith("Traceback (most recent call last):\n"), proc.stderr
    assert f'File "{path}"' in proc.stderr and "/harness/" not in proc.stderr and "/workloads/" not in proc.stderr
    assert f"RuntimeError: my {method} is broken" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: checking workload {path}:Mine before launching raised RuntimeError in your code (traceback above); "
        f"nothing was run or written")


@pytest.mark.parametrize("method, last", [
    ("materialize", "error: your workload's code raised RuntimeError (traceback above)"),
    ("build_model", "error: building workload {ref} on torch's meta device raised RuntimeError in your code (traceback "
                    "above); nothing was run or written")])
def test_compare_plan_of_a_subclass_whose_code_raises_is_their_traceback_not_ours_nor_a_size_problem(method, last,
                                                                                                     tmp_path):
    # `compare plan` printed compare's own traceback for a raising materialize, and for a raising build_model "cannot
    # be built: ...; choose smaller workload options", as if the model were too large
    path = write(tmp_path, SUBCLASS + f"\n    def {method}(self, *args):\n        raise RuntimeError('my {method} is "
                                      f"broken')\n")
    proc = invoke("plan", "-w", f"{path}:Mine", "--gpu", "a100", "--nodes", "2")
    assert proc.exit_code == 1, proc.output
    assert proc.stderr.startswith("Traceback (most recent call last):\n"), proc.stderr
    assert f'File "{path}"' in proc.stderr and "/harness/" not in proc.stderr and "/workloads/" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == last.format(ref=f"{path}:Mine")


def test_a_loss_with_an_fp32_class_weight_scores_a_bf16_rows_evaluation_as_it_trains(tmp_path):
    # An outside check: amp's evaluation failed ("expected scalar type BFloat16 but found Float") on a loss that trains
    # under autocast, because the evaluation called it on the bf16 outputs outside the autocast
    path = write(tmp_path, """
        import torch
        import torch.nn.functional as F
        from workloads import Pieces

        def weighted():
            x = torch.randn(64, 8)
            y = x[:, :4].argmax(1)
            w = torch.tensor([1.0, 2.0, 0.5, 3.0])
            return Pieces(model=torch.nn.Linear(8, 4), train=(x[:48], y[:48]), test=(x[48:], y[48:]),
                          loss=lambda out, target: F.cross_entropy(out, target, weight=w))
        """)
    w = workloads.get(f"{path}:weighted")
    data = w.materialize("cpu", 16)
    correct, count, loss_sum = w.evaluate(w.build_model(), data, 0, 1, torch.autocast("cpu", dtype=torch.bfloat16))
    assert count == 16 and 0 <= correct <= 16 and math.isfinite(loss_sum)


def test_loader_workers_0_said_aloud_is_the_default_for_data_held_as_tensors():
    # An outside check: `--loader-workers 0`, the default, was refused for a workload whose data are tensors
    w = workloads.get("digits")
    assert workload_checks.check_loader(w, SimpleNamespace(loader_workers=0, workload="digits")) == 0
    with pytest.raises(workload_checks.BadInput, match="--loader-workers applies to a workload whose training data"):
        workload_checks.check_loader(w, SimpleNamespace(loader_workers=1, workload="digits"))


@pytest.mark.slow  # seconds: left out of make test-fast
@pytest.mark.parametrize("where", ["import", "call"])
@pytest.mark.parametrize("kind", ["hang", "segv"])
def test_a_hang_or_a_crash_importing_the_file_or_calling_its_function_says_where_and_writes_nothing(tmp_path, kind,
                                                                                                      where):
    # Importing the user's file and calling NAME ran outside the bounded check: a loop at import printed nothing
    # until killed, and a segfault there exited 139 with no stack
    fault = "while True:\n        time.sleep(0.05)" if kind == "hang" else "ctypes.string_at(0)"
    body = (f"import ctypes, time\nif True:\n    {fault}\n" if where == "import" else
            f"import ctypes, time\ndef base():\n    {fault}\n")
    path = write(tmp_path, body)
    # the bound starts before compare's own imports of torch's internals, which a loaded machine takes seconds over
    _a_fault_is_said(tmp_path, path, kind, f"importing and calling workload {path}:base", 10, "-w", f"{path}:base")


def test_threads_the_workloads_code_leaves_running_in_compares_process_are_said_before_launching(tmp_path):
    # An outside check: a builder that started two busy threads left 27 running in compare's process after the
    # check's builds, which took a core beside every launch (652 samples/s against 27,886), blamed on "other
    # processes"; only non-daemon ones were named, at exit
    import importlib.util
    import threading

    from harness.core.runner import _left_threads

    path = tmp_path / "spinner.py"
    path.write_text("import threading\nstop = threading.Event()\n"
                    "def spin():\n    stop.wait()\n"
                    "def start():\n    t = threading.Thread(target=spin, daemon=True)\n    t.start()\n    return t\n")
    spec = importlib.util.spec_from_file_location("spinner", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mine = [mod.start(), mod.start()]
    ours = threading.Thread(target=threading.Event().wait, args=(30,), daemon=True)  # not the user's code
    ours.start()
    try:
        said = _left_threads([*mine, ours])
        assert said.startswith(f"warning: the workload's code left 2 thread(s) running in compare's own process (2 in "
                               f"spin ({path.name}:4)), started while compare imported it")
        assert _left_threads([ours]) is None and _left_threads([]) is None
    finally:
        mod.stop.set()


def test_a_workload_that_changes_the_directory_leaves_compares_paths_where_they_were_given(tmp_path, monkeypatch):
    # os.chdir in a workload function (to find its data) sent --out's results to the directory it moved to, and a
    # relative -w path then "did not exist (in /)"
    from harness.core import requests, workload_checks
    from harness.shared import registry

    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "moves.py").write_text(
        "import os\nimport torch\n"
        "def f():\n    os.chdir(os.path.join(os.path.dirname(__file__), 'data'))\n"
        "    return {'model': torch.nn.Linear(2, 3), 'train': (torch.randn(64, 2), torch.arange(64) % 3)}\n")
    monkeypatch.chdir(tmp_path)
    req = requests.RunRequest(workload="moves.py:f", world_size=2)
    w = workload_checks.load_workload(req)
    workload_checks.check_fits(w, req, 2)  # calls the function: the directory moves
    assert Path.cwd() == data
    assert workloads.source("moves.py:f") == f"file {tmp_path / 'moves.py'}"  # still found where it was given
    assert workloads.resolvable("moves.py:f") == f"{tmp_path / 'moves.py'}:f"
    assert registry.returned_from_users_directory() == str(data) and Path.cwd() == tmp_path
    assert registry.returned_from_users_directory() is None  # nothing more to go back from


def test_a_row_not_checked_for_its_arithmetic_still_says_the_count_its_ranks_averaged_differently():
    # measured: a GPT-2 without its count under ddp:comm_hook=fp16 was 3.9e-4 from the single process where the count
    # declared gave 1.9e-6, and the report said only "fp16 gradient compression" (no fp32 row ran to say why)
    from harness.reports import run_report

    rows = [{"measured": True, "adapter": a, "first": {"equivalence": {"checked": False, "also": "its loss is a mean"}}}
            for a in ("ddp:comm_hook=fp16", "horovod:compression=fp16")]
    rows.append({"measured": True, "adapter": "amp", "first": {"equivalence": {"checked": False}}})
    assert run_report.also_notes(rows) == ["Not checked for its arithmetic, and besides (ddp:comm_hook=fp16, "
                                           "horovod:compression=fp16): its loss is a mean."]


def test_padded_batches_say_their_real_tokens_beside_the_padded_length(tmp_path):
    # a padded GPT-2's tokens/s counted 32 a sample where its samples held 18.5 real tokens on average, unsaid
    path = write(tmp_path, """
        import torch

        def lm():
            ids = torch.randint(0, 50, (8, 6))
            mask = torch.tensor([[1] * 6, [1] * 3 + [0] * 3] * 4)
            return dict(model=torch.nn.Embedding(50, 4), train={"input_ids": ids, "attention_mask": mask})

        def full():
            return dict(model=torch.nn.Embedding(50, 4), train={"input_ids": torch.randint(0, 50, (8, 6)),
                                                                 "attention_mask": torch.ones(8, 6)})
    """)
    w = workloads.get(f"{path}:lm")
    assert (w.tokens_per_sample(), w.unpadded_tokens_per_sample()) == (6, 4.5)
    assert workloads.get(f"{path}:full").unpadded_tokens_per_sample() is None
    from harness.reports.run_rows import _unpadded

    assert _unpadded([{"first": {"tokens_per_sample_unpadded": 4.5}}]) == ", padding included: 4.5 real"


@pytest.mark.parametrize("how, where", [
    ("module", "norm (Norm)"),
    ("inline", "the forward of the model itself (Net), before it calls b"),
    ("size", "the model's own forward (Net)"),
    ("loss", None)])
def test_where_the_samples_of_a_batch_first_mix_is_named(tmp_path, how, where):
    # An outside check: a hand-written batch normalisation and a forward scaled by x.shape[0] were told only the
    # category ("depends on the rest of its batch"), with examples and fixes of losses that did not apply
    from harness.core.assemble import batch_dependent_failure

    path = write(tmp_path, f'''
        import torch
        from torch import nn
        from workloads import Pieces, workload

        class Norm(nn.Module):
            def forward(self, h):
                return (h - h.mean(0)) / (h.std(0) + 1e-5)

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.norm, self.b = nn.Linear(8, 16), Norm(), nn.Linear(16, 4)
            def forward(self, x):
                h = self.a(x)
                if "{how}" == "module":
                    h = self.norm(h)
                elif "{how}" == "inline":
                    h = (h - h.mean(0)) / (h.std(0) + 1e-5)
                out = self.b(torch.relu(h))
                return out * (x.shape[0] / 16) if "{how}" == "size" else out

        def loss(out, y):  # a term over the whole batch: no module mixes the samples, the loss does
            return nn.functional.cross_entropy(out, y) + (out.mean(0) ** 2).sum() * ("{how}" == "loss")

        @workload(global_batch=16, lr=0.1)
        def net():
            x = torch.randn(64, 8, generator=torch.Generator().manual_seed(0))
            return Pieces(model=Net, train=(x, x[:, :4].argmax(1)), loss=loss)
    ''', "mix.py")
    w = workloads.get(f"{path}:net")
    workload_checks.check_user_code(w, requests.RunRequest(workload=f"{path}:net", options=[], world_size=2), 4)
    assert w.batch_dependent and w.batch_mixing == where
    text = batch_dependent_failure(w, adapters.get("ddp")({}, "cpu"), "ddp")
    if where:
        assert f"a sample's activations first depend on the other samples of its batch in {where} (" in text
        assert "fix: make it per sample to check equivalence (LayerNorm or GroupNorm" in text
    else:
        assert "a loss term over the whole batch, such as a load-balancing or contrastive one" in text
        assert "came with a count" not in text
        # an outside check: a loss with count= the boxed samples, a cross-entropy over every sample plus a box mean,
        # was not told that its count divides both terms
        counted = batch_dependent_failure(w, adapters.get("ddp")({}, "cpu"), "ddp", counted=True)
        assert counted.startswith(text) and counted.endswith(
            ". This loss came with a count (count=, or (sum, count)), which divides the whole loss, every term: a term "
            "over other samples than those counted (a mean over every sample beside a mean over the labelled ones) "
            "must be divided by a count of its own before it is added (one that does not depend on the batch, as "
            "above)")


def test_a_first_loss_that_differs_before_any_update_is_told_as_other_weights_data_or_a_rank_dependent_forward():
    # An outside check: data seeded from the process id, and a forward scaled by the rank, failed every row with
    # "no parameter left without one explains the difference" and no cause; the first loss, before any update,
    # already differed from the single process's (1.6804 against 1.57252)
    from types import SimpleNamespace

    from harness.core.assemble import first_step_differs

    w = SimpleNamespace(varying_counts=None, summed_loss=None, count_losses={})
    ranks = [SimpleNamespace(losses=[1.70, 1.2]), SimpleNamespace(losses=[1.6608, 1.1])]
    text = first_step_differs(w, ranks, [1.57252, 1.0])
    assert text.startswith("at step 1, before any update, the single process's loss over the global batch was 1.57252 "
                           "and the mean of its 2 ranks' losses over their slices 1.6804, where the check before "
                           "launching, with the same weights and data, found them equal: this row's ranks did not start "
                           "from the single process's weights or did not see its data, or their forward depends on "
                           "the rank")
    # the same first loss up to summation order: nothing to say; a count that differs between ranks: said apart
    assert first_step_differs(w, [SimpleNamespace(losses=[1.5725201]), SimpleNamespace(losses=[1.5725199])],
                              [1.57252]) is None
    assert first_step_differs(SimpleNamespace(varying_counts=["labels"], summed_loss=None), ranks, [1.57252]) is None


def test_a_dict_batch_with_a_test_set_and_no_metric_runs_with_no_accuracy(tmp_path):
    # An outside check: every dict-batch model with a test set and no metric (CTC, detection, a model returning its
    # own loss) was refused before launching with "AttributeError: 'dict' object has no attribute
    # 'is_floating_point'" blamed on the user's code, with no traceback: the check's two test samples held the
    # targets as a dict
    path = write(tmp_path, '''
        import torch
        from torch import nn
        from workloads import Pieces, workload

        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.l = nn.Linear(8, 3)
            def forward(self, x, y):
                logits = self.l(x)
                return {"loss": nn.functional.cross_entropy(logits, y), "logits": logits}

        @workload(global_batch=16, lr=0.05)
        def dict_tensors():
            x = torch.randn(256, 8, generator=torch.Generator().manual_seed(0))
            y = x[:, :3].argmax(1)
            return Pieces(model=M, train={"x": x[:200], "y": y[:200]}, test={"x": x[200:], "y": y[200:]})
    ''', "dicts.py")
    w = workloads.get(f"{path}:dict_tensors")
    workload_checks.check_user_code(w, requests.RunRequest(workload=f"{path}:dict_tensors", options=[],
                                                           world_size=2), 4)
    data = w.materialize("cpu", 16)
    assert w.why_not_evaluated(data, None).startswith("its batches are dicts with the labels inside")
    from workloads.base import Workload

    _, targets = data.test(slice(0, 2))  # the check's two samples: targets as a dict
    assert Workload.default_accuracy_problem(_Held(targets), None, "fix") == (
        f"its targets are a {type(targets).__name__}, not one tensor of class indices, and fix")


class _Held:
    """Data as default_accuracy_problem reads it: its test targets alone."""

    def __init__(self, test_y):
        self.test_y = test_y


def test_compares_own_failure_while_checking_a_workload_is_not_blamed_on_the_users_code(monkeypatch, capsys):
    # the dict-batch failure above read "raised AttributeError in your code (traceback above)" over an empty
    # traceback: raised in compare's own code, with no frame of the user's, it is said to be compare's, in full
    from harness.commands.usage_errors import OneLineUsageErrors
    from harness.shared.registry import UserCodeError

    from types import SimpleNamespace

    from workloads.base import Workload

    try:  # a TypeError raised in compare's own frame (workloads/base.py), as the AttributeError was
        Workload.default_accuracy_problem(SimpleNamespace(test_y=SimpleNamespace(is_floating_point=None)), None, "")
    except TypeError as exc:
        exc.__traceback__ = exc.__traceback__.tb_next  # as compare's caller meets it: no frame of this test's
        raised = UserCodeError("evaluating workload x on 2 test samples", exc)
    group = OneLineUsageErrors()

    def boom(*a, **k):
        raise raised

    monkeypatch.setattr("typer.core.TyperGroup.main", boom)
    with pytest.raises(SystemExit) as code:
        group.main(["run"])
    err = capsys.readouterr().err
    assert code.value.code == 1 and "in default_accuracy_problem" in err  # compare's frames shown
    assert err.endswith("error: evaluating workload x on 2 test samples raised TypeError in compare's own code, "
                        "not yours (traceback above: a bug in compare); nothing was run or written\n")


def test_a_workload_file_edited_during_a_run_fails_the_launches_after_the_edit_saying_so(tmp_path):
    # an outside check: a file edited while a comparison ran had its later rows train the edited model (✗, blamed
    # on the seeding) or lose their record, and every record named the digest of the file before the edit
    path = write(tmp_path, """
        import torch
        def f():
            return dict(model=torch.nn.Linear(4, 2), data=(torch.randn(64, 4), torch.randint(0, 2, (64,))))
    """)
    name = f"{path}:f"
    began = workloads.digest(name)
    assert len(began) == 16 and workloads.provenance(name).endswith(f"(sha256 {began})")
    workloads.check_unchanged(name, began)  # unchanged: nothing to say
    workloads.check_unchanged(name, None)  # a built-in workload has no digest
    path.write_text(path.read_text().replace("Linear(4, 2)", "Linear(4, 3)"))
    with pytest.raises(workloads.WorkloadChanged) as exc:
        workloads.check_unchanged(name, began)
    assert str(exc.value) == (f"the workload file {path} changed since this run began (sha256 {began}, now "
                              f"{workloads.digest(name)}): this row would train another model than the rows before "
                              f"it; run the comparison again once the file is as you want it")


OWN_LOSS_COUNTED = '''
import torch
from torch import nn
import torch.nn.functional as F
from workloads import Pieces, workload


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(16, 8)
        self.head = nn.Linear(8, 16)

    def forward(self, input_ids, attention_mask):
        logits = self.head(self.emb(input_ids))
        m = attention_mask[:, 1:].flatten().float()
        ce = F.cross_entropy(logits[:, :-1].flatten(0, 1), input_ids[:, 1:].flatten(), reduction="none")
        return {"loss": (ce * m).sum() / m.sum(), "logits": logits}  # transformers' way: its own mean


@workload(global_batch=8)
def lm(first_empty: bool = True):
    ids = torch.randint(1, 16, (32, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    if first_empty:
        mask[:4, 1:] = 0  # one-token lines (WikiText's empty ones): nothing to predict
    return Pieces(model=LM, train={"input_ids": ids * mask, "attention_mask": mask},
                  count=lambda b: b["attention_mask"][:, 1:].sum())
'''


def test_a_models_own_loss_with_a_declared_count_of_nothing_on_the_first_samples_is_not_refused_as_nan(tmp_path):
    # An outside check: the model's own mean over no counted token (0/0) on the two samples the check runs was
    # refused as "its model's output ... holds NaN values", where docs/your-model.md says a declared count adds
    # nothing for such a slice; only the rest of the output is checked there
    from harness.core import comparison
    from harness.core.requests import RunRequest

    path = write(tmp_path, OWN_LOSS_COUNTED)
    comparison.plan(RunRequest(workload=f"{path}:lm", adapters=["ddp"], repeats=1, out=tmp_path / "out"))
