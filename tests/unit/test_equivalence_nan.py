"""A diverged parameter (NaN) fails the equivalence check wherever it is: in any tensor, on either side, in any
repeat. Python's max() keeps a NaN only when it comes first, so a `max(...) <= tolerance` check passed over one."""

import math

import pytest
import torch

from harness.core.assemble import max_param_diff, param_diffs
from harness.ground.stats import worst


def _save(tmp_path, params):
    path = tmp_path / "params.pt"
    torch.save(params, path)
    return path


@pytest.mark.parametrize("where", ["first", "last"])
@pytest.mark.parametrize("side", ["adapter", "reference"])
def test_a_nan_parameter_makes_the_difference_nan_and_fails_the_tolerance(tmp_path, where, side):
    reference = {"a.weight": torch.zeros(3), "b.weight": torch.zeros(4), "c.bias": torch.zeros(2)}
    params = {n: t + 1e-7 for n, t in reference.items()}
    bad = "a.weight" if where == "first" else "c.bias"
    target = params if side == "adapter" else reference
    target[bad] = torch.tensor([0.0, float("nan")] + [0.0] * (len(target[bad]) - 2))
    diff = max_param_diff(param_diffs(_save(tmp_path, params), reference))
    assert math.isnan(diff)
    assert not diff <= 1e-5  # the record's check: passed is False


def test_finite_differences_are_the_largest_one(tmp_path):
    reference = {"a": torch.zeros(3), "b": torch.zeros(2)}
    params = {"a": torch.tensor([0.0, 2e-6, -3e-6]), "b": torch.tensor([1e-6, 0.0])}
    assert max_param_diff(param_diffs(_save(tmp_path, params), reference)) == pytest.approx(3e-6)


def test_worst_of_repeats_keeps_a_nan_wherever_it_is():
    assert math.isnan(worst([1e-7, float("nan")])) and math.isnan(worst([float("nan"), 1e-7]))
    assert worst([1e-7, 3e-7, 2e-7]) == 3e-7
    with pytest.raises(ValueError):
        worst([])


def test_a_loss_that_becomes_nan_and_stays_so_makes_the_row_diverged_naming_the_step():
    # a model whose output turned NaN at step 6 of 7 (each rank's losses averaged: a NaN on one rank is NaN)
    from types import SimpleNamespace

    from harness.core.assemble import diverged_at, row_status

    ok = SimpleNamespace(status="ok", reason="")
    nan, inf = float("nan"), float("inf")
    assert row_status(ok, None, [2.0, 1.5, 1.2, 1.1, 1.0, nan, nan]) == (
        "diverged", "the loss became nan at step 6 of 7 and stayed NaN or infinite: the training diverged (its "
                    "timings are kept in the record, out of the comparison)")
    assert diverged_at([inf, nan]) == (1, "inf")
    assert diverged_at([2.0, inf, 1.0]) is None  # an fp16 overflow it recovered from is not a divergence
    assert diverged_at([]) is None and row_status(ok, None, [1.0]) == ("ok", "")
    failed = SimpleNamespace(status="failed", reason="rank 1 exited with code 1")
    assert row_status(failed, None, [nan]) == ("failed", "rank 1 exited with code 1")  # the launch's own comes first
    # the rank whose own loss went first is named (at the next all-reduce every rank's parameters are NaN)
    curve, ranks = [2.0, 1.5, nan, nan], [[2.0, 1.5, 1.4, nan], [2.0, 1.5, nan, nan]]
    assert row_status(ok, None, curve, ranks)[1].startswith(
        "the loss became nan at step 3 of 4 on rank 1 (the other ranks' losses were finite there) and stayed")
    assert "on rank" not in row_status(ok, None, curve, [[2.0, 1.5, nan, nan]] * 2)[1]  # every rank at once


def test_a_loss_that_becomes_nan_where_a_ranks_slice_had_nothing_to_average_says_so_not_diverged_training(
        monkeypatch):
    # a padded language model whose rank 0 slice of step 1 held only ignored targets (-100): its mean over none is
    # 0/0, and the row read "the training diverged" with no cause and no fix
    from types import SimpleNamespace

    from harness.core import normalisation
    from harness.core.assemble import row_status

    y = torch.full((8, 3), -100)
    y[4:, 0] = 1  # the second half of the batch has a target, the first none
    data = SimpleNamespace(train_x=torch.zeros(8, 3), train_y=y, n_train=8,
                           batch=lambda idx, device: (torch.zeros(len(idx), 3), y[idx]))
    w = SimpleNamespace(batch_indices=lambda step, gb, n, rank, world: torch.arange(rank * 4, rank * 4 + 4))
    empty = normalisation.empty_slice(w, data, 8, 2, 5)
    assert empty == {"step": 0, "rank": 0, "what": "the targets other than -100 (cross_entropy's ignore_index)"}
    y[:4, 1] = 2
    assert normalisation.empty_slice(w, data, 8, 2, 5) is None
    # every step the launch runs is read, however slow the machine: the scan had stopped after 2 s of its clock
    late = SimpleNamespace(batch_indices=lambda step, gb, n, rank, world: (
        torch.arange(4) if step == 2999 and rank == 1 else torch.arange(4, 8)))
    y[:4] = -100
    clock = iter(range(0, 10**6, 5))
    monkeypatch.setattr("time.monotonic", lambda: next(clock))
    assert normalisation.empty_slice(late, data, 8, 2, 3000) == {"step": 2999, "rank": 1, "what": empty["what"]}
    assert normalisation.empty_slice(late, data, 8, 2, 2999) is None
    ok = SimpleNamespace(status="ok", reason="")
    nan = float("nan")
    status, reason = row_status(ok, None, [nan, nan], [[nan, nan], [1.0, nan]], empty)
    assert status == "diverged" and reason == (
        "the loss became nan at step 1 of 2 on rank 0 (the other ranks' losses were finite there): rank 0's slice of "
        "step 1 holds none of the targets other than -100 (cross_entropy's ignore_index), and the loss is a mean over "
        "them, 0/0 there, not a diverging training (its timings are kept in the record, out of the comparison); fix: "
        "return the loss as (sum, count), the count of those items (the harness divides by the whole global batch's), "
        "or declare the count (`count=` in its Pieces)")
    # a NaN at another step, or on the other rank, is not that slice's
    assert row_status(ok, None, [1.0, nan], [[1.0, nan], [1.0, nan]], empty)[1].endswith("the training diverged (its "
                                                                                          "timings are kept in the "
                                                                                          "record, out of the "
                                                                                          "comparison)")


def test_a_slice_with_nothing_to_average_whose_nan_training_recovers_from_is_the_reason_of_the_failed_check():
    # torch 2.13 gives an all-ignored cross_entropy a NaN loss and a zero gradient, so the training goes on: no
    # divergence to name, and the ✗ quoted the batch-dependence check's "the mean of 2 ranks' losses ... nan" with a
    # list of causes none of which applied
    from types import SimpleNamespace

    from harness.core.assemble import equivalence

    nan = float("nan")
    spec = SimpleNamespace(equiv_steps=6, global_batch=8, params_path=None)
    r0 = SimpleNamespace(precision="fp32", compression="none", per_process_batch=4)
    what = "the targets other than -100 (cross_entropy's ignore_index)"
    w = SimpleNamespace(batch_norm=[], batch_dependence=None, equiv_tolerance=1e-5, nondeterministic=None,
                        varying_counts=None, empty_slice={"step": 0, "rank": 0, "what": what}, stateful=None,
                        edits_parameters=None, summed_loss=None, batch_dependent=None, model_facts=None,
                        optimizer_class=None)
    ranks = [SimpleNamespace(losses=[nan, 2.1, 2.0]), SimpleNamespace(losses=[2.3, 2.2, 2.0])]
    eq = equivalence(spec, r0, w, None, {"w": 0.2}, None, label="ddp", ranks=ranks)
    assert eq["passed"] is False and eq["why_failed"] == (
        "rank 0's slice of step 1 holds none of the targets other than -100 (cross_entropy's ignore_index), and the "
        "loss is a mean over them: 0/0 there, a NaN loss whose gradient torch makes zero, so that step's average over "
        "the ranks lacks that rank's share where the single process weighs every counted item of the global batch "
        "alike (the loss of a rank whose slice holds some differs likewise: each rank's mean weighs its own items); "
        "fix: return the loss as (sum, count), the count of those items (the harness divides by the whole global "
        "batch's), or declare the count (`count=` in its Pieces)")
    # an empty slice past the compared steps, or one whose loss was finite (a count declared), is not the reason
    for step in (6, 1):
        w.empty_slice = {"step": step, "rank": 0, "what": what}
        said = equivalence(spec, r0, w, None, {"w": 0.2}, None, label="ddp", ranks=ranks).get("why_failed") or ""
        assert "holds none" not in said


def test_the_final_loss_leaves_out_a_step_whose_global_batch_counted_nothing():
    # a counted loss over a global batch whose every label is -100 is 0 by definition (sum 0 over a count of 0, in
    # one process as on every backend): the final loss had averaged that 0 in as a training loss
    from harness.core.assemble import FINAL_LOSS_WINDOW, final_loss

    curve = [2.0] * 12 + [0.0] + [1.0] * 3
    assert final_loss(curve, [12]) == (pytest.approx((2.0 * (FINAL_LOSS_WINDOW - 3) + 3.0) / FINAL_LOSS_WINDOW),
                                       FINAL_LOSS_WINDOW)
    assert final_loss(curve)[0] == pytest.approx((2.0 * 6 + 0.0 + 3.0) / FINAL_LOSS_WINDOW)
    assert final_loss([0.0], [0]) == (None, 0)
