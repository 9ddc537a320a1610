"""Evaluation inside a rank: the one exact evaluation every adapter runs, and the periodic one of until-target runs.

Runs in: every rank. `evaluate` is the only way a rank evaluates, after training and every K steps alike: the
workload scores this process's contiguous slice of the test set and the adapter's own all-reduce averages the
(correct, count, loss_sum) triple once, so every rank holds the same exact figure.

Until-target runs (`compare run --until-target`, spec.eval_every and spec.target set): after every K-th step and
after the last step of the budget, `PeriodicEval.after_step` evaluates and says whether to stop. Every rank
decides from the same all-reduced figure, so all ranks stop after the same step. The evaluation is timed apart
from the steps (its seconds are recorded per evaluation, and the parent leaves them out of training time and
end-to-end time alike); the wall-clock time at which each evaluated step ended is recorded, so the parent can say
how long after the launch command started the target was reached.
"""

from __future__ import annotations

import time


def evaluate(workload, adapter, model, data, info) -> dict | None:
    """{"local": this rank's (correct, count, loss_sum), "reduced_mean": their mean over ranks}, or None when the
    workload has no test set. Every rank must call it (the reduction is a collective)."""
    import torch

    local = workload.evaluate(adapter.eval_module(model), data, info.data_rank, info.data_world,
                              adapter.autocast(), adapter.cast_input)
    if local is None:
        return None
    reduced = adapter.all_reduce_mean(torch.tensor(local, dtype=torch.float64, device=info.device))
    return {"local": list(local), "reduced_mean": reduced.cpu().tolist()}


def accuracy(evaluation: dict) -> float:
    """The exact accuracy of an `evaluate` result (a ratio of means over ranks is the ratio of the sums)."""
    correct, count, _ = evaluation["reduced_mean"]
    return correct / count


class PeriodicEval:
    """Evaluate after every `spec.eval_every` steps and after the last step; stop once `spec.target` is reached."""

    def __init__(self, spec, workload, adapter, model, data, info, sync, progress, total_steps: int):
        self.spec, self.workload, self.adapter, self.model, self.data, self.info = (spec, workload, adapter, model,
                                                                                   data, info)
        self.sync, self.progress, self.total = sync, progress, total_steps
        self.evals: list[dict] = []
        """One entry per evaluation: step, wall-clock times at which the step and the evaluation ended, this rank's
        seconds in the evaluation, and the evaluation itself (local, reduced_mean)."""

    def after_step(self, steps_done: int) -> bool:
        """Call right after step `steps_done` (1-based) has ended; True when training should stop here."""
        step_end_wall = time.time()
        if steps_done % self.spec.eval_every and steps_done != self.total:
            return False
        self.progress.phase(f"evaluating after step {steps_done}", steps_done)
        self.sync()
        t0 = time.perf_counter()
        result = evaluate(self.workload, self.adapter, self.model, self.data, self.info)
        self.sync()
        eval_s = time.perf_counter() - t0
        if result is None:
            raise RuntimeError(f"workload {self.workload.name} cannot be trained until a target: "
                               f"{self.workload.eval_skipped or 'it has no test set'}")
        self.evals.append({"step": steps_done, "step_end_wall": step_end_wall, "eval_end_wall": time.time(),
                           "eval_s": eval_s, **result})
        acc = accuracy(result)
        reached = self.spec.target is not None and acc >= self.spec.target
        self.progress.phase(f"{'target reached' if reached else 'training'} (step {steps_done}: {acc:.4f})",
                            steps_done)
        return reached

    def last(self, steps_done: int) -> dict | None:
        """The evaluation made after step `steps_done`, if there was one (the final evaluation need not repeat it)."""
        if self.evals and self.evals[-1]["step"] == steps_done:
            return {"local": self.evals[-1]["local"], "reduced_mean": self.evals[-1]["reduced_mean"]}
        return None
