"""Workload contracts: shards recompose the global batch, evaluation counts each sample once, models match."""

import pytest
import torch

import workloads
from adapters.base import KnobError
from workloads.resnet import resnet_model
from conftest import REPO


@pytest.mark.parametrize("name", ["digits", "widemlp", "resnet"])
@pytest.mark.parametrize("world", [1, 2, 4])
def test_rank_slices_recompose_the_single_process_batch(name, world):
    w = workloads.get(name)
    gb, n = 32, 1000
    for step in (0, 1, n // gb - 1, n // gb, 3 * n // gb + 5):
        full = w.batch_indices(step, gb, n)
        parts = [w.batch_indices(step, gb, n, r, world) for r in range(world)]
        assert torch.equal(torch.cat(parts), full)
        assert all(len(p) == gb // world for p in parts)


def test_data_order_is_deterministic_and_an_epoch_is_a_permutation():
    w = workloads.get("digits")
    n, gb = 1437, 64
    epoch = torch.cat([w.batch_indices(s, gb, n) for s in range(n // gb)])
    assert len(set(epoch.tolist())) == len(epoch) == (n // gb) * gb
    assert torch.equal(epoch, torch.cat([workloads.get("digits").batch_indices(s, gb, n) for s in range(n // gb)]))
    assert not torch.equal(w.batch_indices(0, gb, n), w.batch_indices(n // gb, gb, n))  # reshuffled per epoch


def test_a_training_set_too_large_to_permute_is_ordered_in_the_memory_of_a_batch(monkeypatch):
    # An outside check: a Dataset of 10^12 items failed every rank in torch.randperm (8 TB), blamed on the user's
    # code; above RANDPERM_LIMIT an epoch is an affine permutation, computed a batch at a time
    import workloads.base as base

    order = torch.cat([base.affine_batch(7, 1000, k, 100) for k in range(0, 1000, 100)])
    assert sorted(order.tolist()) == list(range(1000))  # every sample once an epoch, n not a prime
    assert not torch.equal(order, torch.arange(1000))
    w = workloads.get("digits")
    n, gb = 10 ** 12, 64
    first = w.batch_indices(0, gb, n)
    assert len(set(first.tolist())) == gb and 0 <= int(first.min()) and int(first.max()) < n
    assert torch.equal(torch.cat([w.batch_indices(3, gb, n, r, 2) for r in range(2)]), w.batch_indices(3, gb, n))
    assert not torch.equal(first, w.batch_indices(n // gb, gb, n))  # another epoch, another order
    # the same rule below the limit, where it would otherwise be a randperm: still a permutation of the epoch
    monkeypatch.setattr(base, "RANDPERM_LIMIT", 100)
    epoch = torch.cat([w.batch_indices(s, 50, 1000) for s in range(20)])
    assert sorted(epoch.tolist()) == list(range(1000))


@pytest.mark.parametrize("n_test,world", [(360, 2), (361, 2), (5, 4), (3, 4), (0, 2)])
def test_eval_slices_count_every_sample_exactly_once(n_test, world):
    w = workloads.get("digits")
    covered = [i for r in range(world) for i in range(n_test)[w.eval_slice(n_test, r, world)]]
    assert covered == list(range(n_test))


def test_digits_is_the_real_embedded_dataset_with_a_fixed_split():
    d = workloads.get("digits").materialize("cpu", 64)
    assert (len(d.train_x), len(d.test_x)) == (1437, 360)
    assert d.train_x.shape[1] == 64 and 0.0 <= float(d.train_x.min()) and float(d.train_x.max()) <= 1.0
    assert sorted(d.test_y.unique().tolist()) == list(range(10))


@pytest.mark.parametrize("arch,params", [("resnet18", 11_689_512), ("resnet50", 25_557_032)])
def test_resnet_matches_torchvision_parameter_counts(arch, params):
    assert sum(p.numel() for p in resnet_model(arch).parameters()) == params
    assert workloads.get(arch).options.arch == arch


def test_resnet_forward_shape_and_bad_arch():
    assert resnet_model("resnet18")(torch.randn(2, 3, 64, 64)).shape == (2, 1000)
    with pytest.raises(KnobError, match="option 'arch' must be resnet18, resnet34 or resnet50; got 'vgg'"):
        workloads.get("resnet", {"arch": "vgg"})


def test_widemlp_is_communication_heavy():
    params = sum(p.numel() for p in workloads.get("widemlp").build_model().parameters())
    assert params > 30_000_000


def test_lr_follows_the_linear_rule_and_is_independent_of_adapters():
    w = workloads.get("digits")
    assert w.lr(64) == pytest.approx(w.base_lr)
    assert w.lr(128) == pytest.approx(2 * w.base_lr)


def test_unknown_workload_names_the_choices():
    with pytest.raises(workloads.UnknownName) as exc:
        workloads.get("mnist")
    assert str(exc.value) == (f"unknown workload 'mnist'; valid choices: {', '.join(workloads.names())}; or your own: "
                              f"-w path/to/file.py:NAME, -w package.module:NAME (docs/your-model.md)")


def test_tinygpt_trains_on_real_text_shipped_with_python():
    w = workloads.get("tinygpt")
    d = w.materialize("cpu", 32)
    assert d.train_x.shape[1] == 64 and len(d.train_x) > 5000 and len(d.test_x) == 512
    assert torch.equal(d.train_x[0, 1:], d.train_y[0, :-1])  # targets are the next bytes
    text = bytes(d.train_x[:4].flatten().tolist()).decode("utf-8", errors="replace")
    assert sum(c.isalpha() for c in text) > len(text) // 2  # English prose, not noise
    model = w.build_model()
    out = model(d.train_x[:2])
    assert out.shape == (2, 64, 256)
    # Causal: the output at position t does not depend on later bytes.
    x = d.train_x[:1].clone()
    x2 = x.clone()
    x2[0, 40:] = 0
    assert torch.allclose(model(x)[0, :40], model(x2)[0, :40], atol=1e-6)


def test_the_shipped_digits_split_is_exactly_scikit_learns_and_needs_no_scikit_learn():
    import subprocess
    import sys

    import numpy as np

    from workloads import digits

    pytest.importorskip("sklearn", reason="Requires: scikit-learn (to make the split the shipped file must equal)")
    fresh = digits.sklearn_split()
    shipped = digits.split()
    for a, b in zip(fresh, shipped):
        assert np.array_equal(a, b) and a.dtype == b.dtype and a.shape == b.shape
    # A rank on a machine without scikit-learn (a lent GPU node) still gets it: sklearn is never imported.
    code = ("import sys; sys.modules['sklearn'] = None\nfrom workloads import digits\n"
            "x_tr, x_te, y_tr, y_te = digits.split(); print(len(x_tr), len(x_te), 'sklearn' in sys.modules and "
            "sys.modules['sklearn'] is not None)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.split() == ["1437", "360", "False"]


def test_train_samples_needs_no_data(tmp_path):
    w = workloads.get("digits")
    assert w.train_samples(64) == 1437 == len(w.materialize("cpu", 64).train_x)
