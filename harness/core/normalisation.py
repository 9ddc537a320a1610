"""Why a row fails the equivalence check when the workload's loss is a mean over a number of items that differs
between the ranks: each rank divides by its own count, so the backends' average of the ranks' gradients is not
the gradient of the global batch (the normalisation Hugging Face fixed with `num_items_in_batch`).

Found, not guessed. Before launching (harness/core/workload_checks.py, check_user_code), for a workload whose loss
declares no count, the counts a loss commonly divides by (targets other than -100, a sequence's other than its most
frequent target, a dict batch's labels shifted as a causal model shifts them, its attention mask) are read from the data
for each rank's slice of the steps the check covers: `candidates`. After a row has failed the check, `explain` tests
them against what the launch measured. At the first step where a candidate's counts differ, every earlier step's update
was the single process's, so the parameters are still equal and the ranks' losses at that step weighted by the counts
must give the single process's loss there; their plain mean must not, and must have given it at every earlier step (else
the row had parted from the reference for another reason). Only a candidate that passes all three is named.

A workload that declares a count (`count=`, `Workload.count`) is checked the same way against a count that differs
from it (not in proportion: only the ratios of the ranks' counts matter): each rank's loss is first brought back to
its own mean (times its declared count over the declared counts' mean, as `step_loss` divided it), so a declared
count that misses the causal shift (`(labels != -100).sum()` for a model that shifts its labels) is named with the
right one.

Runs in: the parent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

IGNORE_INDEX = -100
"""The ignore_index of torch's cross_entropy and of transformers' losses."""
ROUNDING = 2e-6
"""Relative difference two fp32 losses of the same parameters and batch may show from summation order alone."""


def counters(targets: Any, global_targets: Any) -> list[tuple[str, str, str, Any]]:
    """(what, expression, argument name, function of one rank's targets) for each count a loss of these targets
    commonly divides by."""
    return [(what, expr, arg, lambda t, m=marks: int(m(t).sum())) for what, expr, arg, marks in _marks(
        targets, global_targets)]


def _marks(targets: Any, global_targets: Any) -> list[tuple[str, str, str, Any]]:
    """`counters`, each with the function that marks the items it counts (a tensor whose first dimension is the
    samples') in place of the count."""
    import torch

    out = []

    def integer(t):
        return isinstance(t, torch.Tensor) and not t.is_floating_point() and t.dtype != torch.bool and t.numel()

    if integer(targets):
        out.append((f"the targets other than {IGNORE_INDEX} (cross_entropy's ignore_index)",
                    f"(target != {IGNORE_INDEX}).sum()", "target", lambda y: y != IGNORE_INDEX))
        pad = int(torch.mode(global_targets.flatten()).values)
        # padding pads a sequence: a target per sample (a class) has none, and its most frequent class is no pad
        if pad != IGNORE_INDEX and targets.dim() >= 2:
            out.append((f"the targets other than {pad} (the most frequent target: padding)", f"(target != {pad}).sum()",
                        "target", lambda y, pad=pad: y != pad))
    elif isinstance(targets, Mapping):
        labels, mask = targets.get("labels"), targets.get("attention_mask")
        if integer(labels) and labels.dim() >= 2:
            out.append((f"the labels other than {IGNORE_INDEX} after the first position (a causal model's loss, "
                        f"which shifts its labels)", f'(batch["labels"][..., 1:] != {IGNORE_INDEX}).sum()', "batch",
                        lambda b: b["labels"][..., 1:] != IGNORE_INDEX))
        if integer(labels):
            out.append((f"the labels other than {IGNORE_INDEX}", f'(batch["labels"] != {IGNORE_INDEX}).sum()',
                        "batch", lambda b: b["labels"] != IGNORE_INDEX))
        if isinstance(mask, torch.Tensor) and mask.dim() >= 2:
            out.append(("the attended positions after the first (attention_mask)",
                        'batch["attention_mask"][..., 1:].sum()', "batch", lambda b: b["attention_mask"][..., 1:]))
            out.append(("the attended positions (attention_mask)", 'batch["attention_mask"].sum()', "batch",
                        lambda b: b["attention_mask"]))
    return out


def candidates(workload, data, global_batch: int, world: int, steps: int, fix_form: str,
               declared: bool = False) -> list[dict[str, Any]]:
    """For each common count whose value differs between the `world` ranks' slices in one of the first `steps` steps
    (those the equivalence check covers): {"what", "expr", "arg", "step" (the first such step, 0-based), "counts" (per
    rank there), "fix" (the one-line declaration of it: `fix_form` "pieces" for a workload function's, "subclass"
    for a Workload's)}. Empty for one rank, or where every rank's slice has the same counts. `declared`: the workload
    declares a count (`workload.count`); only counts not in proportion to it at their step are kept, each with
    "declared": the declared counts per rank at every step up to its own."""
    import torch

    if world < 2:
        return []
    found: dict[str, dict[str, Any]] = {}
    own: list[list[float]] = []  # the declared counts, per step and rank
    for step in range(steps):
        slices = [workload.batch_indices(step, global_batch, data.n_train, r, world) for r in range(world)]
        targets = [data.batch(idx, "cpu")[1] for idx in slices]
        whole = data.batch(torch.cat(slices), "cpu")[1]
        if declared:
            got = [workload.count(t) for t in targets]
            if any(c is None for c in got):
                return []
            own.append([float(c) for c in got])
        for what, expr, arg, count in counters(targets[0], whole):
            if what in found:
                continue
            counts = [count(t) for t in targets]
            differs = not _proportional(counts, own[-1]) if declared else len(set(counts)) > 1
            if not differs:
                continue
            fix = (f"`count=lambda {arg}: {expr}` in its Pieces" if fix_form == "pieces" else
                   f"`def count(self, {arg}): return {expr}` on its Workload")
            found[what] = {"what": what, "step": step, "counts": counts, "fix": fix,
                           **({"declared": [list(d) for d in own]} if declared else {})}
    return list(found.values())


CHUNK = 4096
"""Samples whose counted items `empty_slice` marks at a time (a token dataset's marks for all of it at once would be
a byte for each of its tokens)."""


def empty_slice(workload, data, global_batch: int, world: int, steps: int) -> dict[str, Any] | None:
    """For a loss without a count (a mean over its batch's items): the first step (0-based) of the `steps` the launch
    runs and the data rank whose slice holds none of the items a loss commonly averages over (`counters`: targets
    other than -100), {"step", "rank", "what"}, as the launch will feed them; a mean over none is 0/0, NaN, which a
    row would report as a diverged training. Only over training data held as tensors (a Dataset's items are not read
    for it); None where no slice is empty. Each sample's count is read once, then each step's slices only index
    which samples have none: every step is read, however slow the machine."""
    import torch

    from workloads import batch as batches

    if data.train_x is None or steps < 1:
        return None
    first = [workload.batch_indices(0, global_batch, data.n_train, r, world) for r in range(world)]
    found = _marks(data.batch(first[0], "cpu")[1], data.batch(torch.cat(first), "cpu")[1])
    targets = data.train_y if data.train_y is not None else data.train_x  # a dict batch is its own targets
    none: list[tuple[str, Any]] = []  # (what, which samples hold none of it)
    for what, _, _, marks in found:
        parts = []
        for start in range(0, data.n_train, CHUNK):
            m = marks(batches.take(targets, slice(start, start + CHUNK)))
            parts.append(m.reshape(m.shape[0], -1).sum(1) == 0)
        empty = torch.cat(parts)
        if bool(empty.any()):
            none.append((what, empty))
    if not none:
        return None
    for step in range(steps):
        slices = [workload.batch_indices(step, global_batch, data.n_train, r, world) for r in range(world)]
        for what, empty in none:
            for rank, idx in enumerate(slices):
                if bool(empty[idx].all()):
                    return {"step": step, "rank": rank, "what": what}
    return None


def _proportional(a: list[float], b: list[float]) -> bool:
    """Whether the ranks' counts `a` and `b` are in one proportion (a count normalised by its mean over the ranks is
    then the same)."""
    if not sum(a) or not sum(b):
        return sum(a) == sum(b) == 0
    return all(abs(x / sum(a) - y / sum(b)) <= 1e-9 for x, y in zip(a, b))


def explain(cands: list[dict[str, Any]], rank_losses: list[list[float]], reference_losses: list[float] | None,
            equiv_steps: int) -> str | None:
    """The reason for a failed check, where a candidate count explains the ranks' losses at its first differing
    step (see the module's docstring); None where none does. `rank_losses`: each rank's per-step losses, by data
    rank."""
    if not cands or not reference_losses:
        return None
    for c in sorted(cands, key=lambda c: c["step"]):
        s, counts = c["step"], c["counts"]
        if s >= min(equiv_steps, len(reference_losses)) or len(rank_losses) != len(counts) or any(
                len(r) <= s for r in rank_losses):
            continue
        raw = rank_losses
        if c.get("declared"):  # each rank's own mean again: its loss was multiplied by its count over their mean
            own = c["declared"]
            raw = [[x * (sum(own[t]) / len(own[t])) / own[t][r] if t < len(own) and own[t][r] else x
                    for t, x in enumerate(losses)] for r, losses in enumerate(rank_losses)]
        # what the row trained on at step s (the ranks' losses as they back-propagated them: a plain mean, or the
        # means weighted by a declared count), and what the candidate count's weighting gives
        exact = reference_losses[s]
        plain = sum(r[s] for r in rank_losses) / len(rank_losses)
        weighted = sum(n * r[s] for n, r in zip(counts, raw)) / sum(counts)
        rounding = ROUNDING * max(abs(exact), 1e-12)
        off = abs(plain - exact)
        # The premise: the parameters were still the single process's at step s. Before it this count was the same
        # on every rank, so the ranks' plain mean gave the single process's loss at every earlier step; a row that
        # had parted from it already (an optimizer that clips over its shard, say) differs for another reason, and
        # a weighted mean closer by chance must not name this one
        earlier = [abs(sum(r[t] for r in rank_losses) / len(rank_losses) - reference_losses[t]) for t in range(s)]
        if any(e > max(10 * ROUNDING * max(abs(reference_losses[t]), 1e-12), off / 10)
               for t, e in enumerate(earlier)):
            continue
        # the plain mean clearly off, the weighted one an order of magnitude closer (a fresh language model's
        # ranks' losses are all near ln V, so the plain mean may miss by only a few roundings)
        if off > 2 * rounding and abs(weighted - exact) <= off / 10 and c.get("declared"):
            said = " and ".join(f"{x:g}" for x in c["declared"][s])
            return (f"the count declared for its loss ({said} at step {s + 1}) is not the number of items its mean "
                    f"is over: that is {c['what']} ({' and '.join(map(str, counts))} there), so each rank's share of "
                    f"the global batch's loss was weighted wrongly (at that step, before any parameter differed, the "
                    f"ranks' means weighted by those counts give the single process's loss, {exact:.6g}; weighted "
                    f"by the declared ones, {plain:.6g}); fix: declare {c['fix']}")
        if off > 2 * rounding and abs(weighted - exact) <= off / 10:
            return (f"its loss is a mean over {c['what']}, whose number differs between the ranks "
                    f"({' and '.join(map(str, counts))} at step {s + 1}), and each rank averaged its own count, so "
                    f"the ranks' averaged gradient is not the global batch's (at that step, before any parameter "
                    f"differed, the ranks' losses weighted by those counts give the single process's loss, "
                    f"{exact:.6g}; their plain mean is {plain:.6g}); fix: declare the count, {c['fix']}, or return "
                    f"(sum, count) from the loss, and every backend divides by the count over all ranks")
    return None


def _declared_fits(cand: dict[str, Any], losses: tuple[float, list[float]] | None) -> bool:
    """Whether, at the candidate's step, the ranks' losses weighted by the declared counts give the single
    process's loss at least ten times closer than weighted by the candidate's counts."""
    if losses is None:
        return False
    single, ranks = losses
    declared, counts = cand["declared"][cand["step"]], cand["counts"]
    if len(ranks) != len(declared) or len(ranks) != len(counts) or not sum(declared) or not sum(counts):
        return False
    off = abs(single - sum(v * d for v, d in zip(ranks, declared)) / sum(declared))
    other = abs(single - sum(v * c for v, c in zip(ranks, counts)) / sum(counts))
    return off * 10 < other


def suspect(cands: list[dict[str, Any]], losses: dict[int, tuple[float, list[float]]] | None = None) -> str | None:
    """Where a workload declares a count that is not in proportion to a causal model's shifted count, and
    `explain` could not tell from the ranks' losses (two ranks' weights 85:86 against 77:78 move their mean by less
    than summation order does), that count in words as a possible cause, said as one; None otherwise, and where the
    check before launching read that step's losses with the same parameters (`losses`: the single process's and
    the ranks') and the declared count weighs the ranks' into the single process's ten times closer than the
    suspected one does (a model that does not shift its labels, T5's, was told to shift them)."""
    # only the pitfall the docs warn of, a count that misses a causal model's shift: any other candidate would be
    # said of every failed row of a model whose declared count is right
    for c in sorted((c for c in cands if c.get("declared") and "after the first" in c["what"]
                     and not _declared_fits(c, (losses or {}).get(c["step"]))), key=lambda c: c["step"]):
        s = c["step"]
        said = " and ".join(f"{x:g}" for x in c["declared"][s])
        return (f"the count declared for its loss ({said} at step {s + 1}) is not in proportion to {c['what']} "
                f"({' and '.join(map(str, c['counts']))} there): if the loss is a mean over those, each rank's share "
                f"of the global batch's loss is weighted wrongly, by too little for the ranks' losses at one step to "
                f"show it; fix, if so: declare {c['fix']}")
    return None

