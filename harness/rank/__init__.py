"""Code that runs inside every rank (never in the parent): the entry point, the training loop, the comm benchmark.

Every launcher ends up in `harness.rank.life.run(SPEC)`: `python -m harness.rank SPEC` (torchrun, horovodrun,
the deepspeed launcher, in-process), or the same module run by name in each process mp.spawn starts
(adapters/spawn.py). Nothing here imports
the parent's modules (cli, run, launch, report): as torchrun's agent never imports training code, the code a rank
runs never imports the agent.
"""
