"""Each fact about an option written once: an option of `run`, `scale`, `comm` or `sbatch` that fills a field of
harness/core/requests.py's Request takes that field's default, and its help is the field's docstring, except where a
command means something of its own by it (listed here, each with why)."""

import dataclasses

import typer

from harness.cli import app
from harness.core.requests import Request
from harness.shared.options import attribute_docs

FIELD = {"--timeout": "timeout_s", "--stall-timeout": "stall_s", "--launcher": "launcher"}
OWN_HELP = {
    ("sbatch", "--force"): "replaces --script as well",
    ("scale", "--threads"): "per rank at every point of the sweep",
    ("run", "--out"): "each command's own default directory",
    ("scale", "--out"): "each command's own default directory",
    ("comm", "--out"): "each command's own default directory",
    ("sbatch", "--out"): "passed on to the run",
}
NOT_REQUEST_DEFAULT = {"--world-size": "the planner resolves None: 2 on CPU, every GPU, or the hosts' slots"}


def test_shared_options_take_their_default_and_help_from_the_request():
    defaults = {f.name: f.default for f in dataclasses.fields(Request)}
    docs = attribute_docs(Request)
    commands = typer.main.get_command(app).commands
    checked = 0
    for name in ("run", "scale", "comm", "sbatch"):
        for prm in commands[name].params:
            flag = max(prm.opts, key=len)
            field = FIELD.get(flag, flag[2:].replace("-", "_"))
            if field not in defaults or flag in NOT_REQUEST_DEFAULT or field in ("device",):
                continue
            assert prm.default == defaults[field], (name, flag, prm.default, defaults[field])
            if (name, flag) not in OWN_HELP and field in docs:
                assert prm.help == docs[field], (name, flag, prm.help)
                checked += 1
    assert checked >= 35  # timeout, stall, strict, oversubscribe, bind-cores, threads, hosts... on four commands
