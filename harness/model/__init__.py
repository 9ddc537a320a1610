"""The performance model, in one package: what a step costs on N workers and whether that is right.

- costmodel.py: the arithmetic of a step (each schedule kind's pricer, memory, efficiency), from compute.py (one
  rank's compute) and comm_cost.py (what a collective costs, measured or on a profile's fabric);
- calibration.py: the model fitted to what this tool measured (a `compare scale` sweep and its `compare comm`
  sweeps), predicted vs measured, extrapolation to a profile;
- published.py: the model against published scaling results (distinct configurations, a constant baseline, the
  DDP benchmark's slowdown, each prediction's range);
- hardware.py: the hardware profiles and published scaling results in profiles/, and a GPU's dense peaks for model
  FLOPs utilisation;
- planner.py: `compare plan`, the model on a cluster that is not here, with each framework's memory (measured.py: a
  run read for `compare plan --from`).

Its words and pictures (a scale report's "The model" section, `compare predict`) are harness/reports/prediction.py.

Runs in: the parent (a rank measures the model's inputs with harness/rank/compute_profile.py, which imports none of
it)."""

import ast
import hashlib
from pathlib import Path

VERSION = 3
"""The model's version, kept in every sweep it judges (scale_sweep.model_version) and named in every prediction.
Sweeps made with the current version are its validation; sweeps made before are the data it was developed on."""
FINGERPRINT = "5ec6fab4ada7d4fc"
"""fingerprint() of the code VERSION names. A test holds them equal: a change to how the model prices or calibrates
(not to its comments or docstrings) must come with a new VERSION, so a sweep is never scored by a model that was
tuned after it."""
PRICED_BY = ("costmodel.py", "compute.py", "comm_cost.py", "hardware.py", "calibration.py")


def fingerprint() -> str:
    """sha256 of the model's code as Python sees it (the syntax trees of PRICED_BY without their docstrings and
    comments), its first 16 hex digits."""
    digest = hashlib.sha256()
    for name in PRICED_BY:
        tree = ast.parse((Path(__file__).parent / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            for key in ("body", "orelse", "finalbody"):
                body = getattr(node, key, None)
                if isinstance(body, list) and body and all(isinstance(n, ast.stmt) for n in body):
                    kept = [n for n in body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
                                                    and isinstance(n.value.value, str))]
                    setattr(node, key, kept or [ast.Pass()])
        digest.update(ast.dump(tree, annotate_fields=False).encode())
    return digest.hexdigest()[:16]
