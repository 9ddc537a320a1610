"""The single-process fp32 reference: the plain model over the whole global batch, no wrapper.

Not a comparison row. The harness runs it once per comparison for `equiv_steps` steps, and every adapter's
parameters after the same number of steps are compared with it (`max_param_diff`).
"""

from __future__ import annotations

from adapters.base import SingleProcess


class ReferenceAdapter(SingleProcess):
    name = "reference"
    summary = "single process, plain module, fp32: the equivalence reference"
    launcher = "in-process"


ADAPTER = ReferenceAdapter
