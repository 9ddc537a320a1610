"""`python harness/rank/as_script.py SPEC`: the rank entry point as a script file, for launchers that can start a
script but not a module (DeepSpeed's `--launcher slurm` runs `srun python -u SCRIPT ARGS`).

Runs in: every rank started that way; the same as `python -m harness.rank SPEC`.
"""

import os
import sys

# Python put this file's directory first on sys.path, where harness/rank/compute_profile.py would shadow the standard
# library's `profile`: the repository goes there instead, before anything else is imported.
sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness.rank.life import run  # noqa: E402

# Launchers may append their own flags (--local_rank=N): the spec is the first positional argument.
run(next(a for a in sys.argv[1:] if not a.startswith("--")))
