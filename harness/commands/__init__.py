"""Runs in: the parent. One module per `compare` command: each declares nothing of its options (its request
dataclass does: harness/ground/argv.py, harness/commands/declare.py), checks and dispatches to the core, and prints.
harness/cli.py only registers them; the progress lines are harness/commands/ui.py's."""
