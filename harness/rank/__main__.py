"""`python -m harness.rank SPEC`: the command every launcher starts per rank."""

import sys

from harness.rank.life import run

# Some launchers append their own flags (the deepspeed launcher adds --local_rank=N): the spec is the first
# positional argument.
run(next(a for a in sys.argv[1:] if not a.startswith("--")))
