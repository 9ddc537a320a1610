"""Each fact about an option written once: a command's options are its request dataclass's declared fields
(harness/ground/argv.py, harness/commands/declare.py), a request turns back into the arguments that give it, and the
command a run records reproduces its plan."""

import ast
import dataclasses
import shlex
from pathlib import Path

import pytest
import typer

from harness.cli import app
from harness.commands import declare
from harness.core import comparison
from harness.ground.argv import declaring, options, to_argv
from harness.core.requests import RunRequest, SbatchRequest

REPO = Path(__file__).resolve().parents[2]
COMMANDS = list(typer.main.get_command(app).commands)

# A value unlike the default for each kind of option, as typed; a few options take only certain values.
TYPED = {"--world-sizes": ["1,2,4"], "--profile": [["a100-sxm-hdr200", "h100-sxm-ndr400"]],
         "--launcher": ["slurm", "ssh"], "--to": [64]}


def _value(opt, cls):
    """A value of field `opt.name` that is not its default, as the field holds it."""
    if opt.long in TYPED:
        typed = next(v for v in TYPED[opt.long] if v != opt.default)
    elif opt.kind is bool:
        typed = not opt.default
    elif opt.many:
        typed = [opt.kind("a"), opt.kind("b")] if opt.kind in (str, Path) else [opt.kind(3), opt.kind(5)]
    elif opt.kind is int:
        typed = 3 if opt.default != 3 else 4
    elif opt.kind is float:
        typed = 2.5
    elif opt.kind is Path:
        typed = Path("some/dir")
    else:
        assert opt.kind is str, (cls, opt.name, opt.kind)
        typed = "other"
    value = opt.spec.to_field(typed) if opt.spec.to_field else typed
    assert value != opt.default, (cls, opt.name)
    return value


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_of_every_command_parses_back_from_its_arguments(name):
    cls = declare.request_class(name)
    opts = options(cls)
    assert opts, name
    every = {}
    required = {o.name: _value(o, cls) for o in opts if o.spec.required}  # `compare diff` takes two directories
    for opt in opts:
        req = cls(**{**required, opt.name: _value(opt, cls)})
        argv = to_argv(req)
        assert argv, (name, opt.name)
        assert declare.parse(app, name, argv) == req, (name, opt.name, argv)
        every[opt.name] = _value(opt, cls)
    req = cls(**every)  # all of them at once
    assert declare.parse(app, name, to_argv(req)) == req
    assert to_argv(cls()) == []  # the defaults need no argument
    if not any(o.spec.required for o in opts):
        assert declare.parse(app, name, []) == cls()


def test_the_options_are_the_requests_and_nothing_else_declares_one():
    """No command module writes a typer.Option or typer.Argument: the only ones are made from requests
    (harness/commands/declare.py) and compare's own --version flag (harness/commands/common.py: flag)."""
    found = []
    for path in [REPO / "harness" / "cli.py", *(REPO / "harness" / "commands").glob("*.py")]:
        if path.name in ("declare.py", "common.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("Option", "Argument")):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not found, found
    for name, sub in typer.main.get_command(app).commands.items():
        declared = {o.long for o in options(declare.request_class(name)) if not o.spec.argument}
        given = {max(p.opts, key=len) for p in sub.params if p.opts[0].startswith("-")}
        assert given == declared, (name, given ^ declared)


def test_no_help_text_is_written_twice():
    """A help text lives on one field; a command that means something of its own by an inherited field says so in
    its HELP, once."""
    seen: dict[str, str] = {}
    twice = []
    for name in COMMANDS:
        cls = declare.request_class(name)
        for klass in cls.__mro__:
            if not dataclasses.is_dataclass(klass):
                continue
            texts = [o.help for o in options(klass) if o.name in klass.__dict__.get("__annotations__", {})]
            texts += list(vars(klass).get("HELP", {}).values())
            for text in texts:
                if seen.setdefault(text, klass.__qualname__) != klass.__qualname__:
                    twice.append((text, seen[text], klass.__qualname__))
    assert not twice, twice


def test_sbatch_takes_every_option_of_run_and_passes_each_on():
    run, sbatch = options(RunRequest), options(SbatchRequest)
    assert {o.long for o in run} <= {o.long for o in sbatch}
    for opt in run:
        value = _value(opt, RunRequest)
        req = SbatchRequest(**{opt.name: value})
        assert getattr(req.run_request(), opt.name) == value, opt.name


@pytest.mark.parametrize("args", [
    ["-a", "ddp,spawn", "--steps", "5", "--warmup", "1", "--repeats", "2"],
    ["-a", "ddp,ddp:bucket_cap_mb=1", "-w", "widemlp", "-o", "width=256", "--precision", "10%", "--budget", "2m"],
    ["-a", "ddp", "--until-target", "--baseline", "ddp"],
    ["-a", "ddp,spawn"],  # the default rounds: 3, then as many as fit the 3-minute budget
])
def test_a_run_reexecuted_from_its_recorded_command_resolves_to_the_same_plan(tmp_path, args):
    first = comparison.plan(declare.parse(app, "run", [*args, "--out", str(tmp_path / "a")]))
    recorded = shlex.split(first.rerun)
    assert recorded[:2] == ["compare", "run"]
    again = comparison.plan(declare.parse(app, "run", recorded[2:]))
    for attr in ("global_batch", "steps", "warmup", "equiv_steps", "order_seed", "until_target", "precision",
                 "budget_s", "oversubscribed"):
        assert getattr(again, attr) == getattr(first, attr), attr
    assert [r.label for r in again.rows] == [r.label for r in first.rows]
    assert again.request.world_size == first.request.world_size and again.out == first.out
    # and the recorded command is itself what it resolves to: running it again records the same line
    assert again.rerun == first.rerun
    if args == ["-a", "ddp,spawn"]:
        assert (first.budget_s, first.precision, first.request.repeats) == (180.0, None, None)
        assert "--budget 180s" in first.rerun and "--repeats" not in first.rerun


def test_no_option_default_is_written_twice():
    """A request field's default written as a literal that some module also keeps as a constant of the same name is
    one fact on two walls (--stall-timeout's 300 s was once both STALL_S in launch.py and a literal in
    requests.py): the field must name the constant. (Same value and a word of the name in common: 10 steps and a
    loss window of 10 are two facts.)"""
    generic = {"s", "default", "max", "min", "n", "ms", "mb"}

    def words(name):
        return {w for w in name.lower().split("_") if w not in generic}

    constants: dict[object, list[str]] = {}
    for path in (REPO / "harness").rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id.isupper() and isinstance(node.value, ast.Constant)):
                v = node.value.value
                if isinstance(v, (int, float, str)) and not isinstance(v, bool) and v not in (0, 1, 2, ""):
                    constants.setdefault((type(v), v), []).append(node.targets[0].id)
    twice = []
    for path in [REPO / "harness" / "core" / "requests.py", *(REPO / "harness" / "commands").glob("*.py")]:
        for stmt in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                    and isinstance(stmt.value, ast.Call) and getattr(stmt.value.func, "id", None) == "field"):
                continue
            node, field_name = stmt.value, stmt.target.id
            for kw in node.keywords:
                values = [kw.value] if kw.arg == "default" else (
                    [e for e in ast.walk(kw.value) if isinstance(e, ast.Constant)] if kw.arg == "default_factory"
                    else [])
                for v in values:
                    if not isinstance(v, ast.Constant):
                        continue
                    same = [c for c in constants.get((type(v.value), v.value), []) if words(c) & words(field_name)]
                    if same:
                        twice.append(f"{path.relative_to(REPO)}:{v.lineno} {field_name}={v.value!r} is also "
                                     f"{', '.join(same)}")
    assert not twice, twice


def test_the_options_docstrings_come_from_the_cache_only_while_their_file_is_unchanged(tmp_path, monkeypatch):
    import importlib
    import os
    import sys

    from harness.ground import argv

    monkeypatch.setenv("COMPARE_CACHE", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(tmp_path))
    source = tmp_path / "probe_request.py"

    def declare(doc: str, mtime_ns: int):
        source.write_text("from dataclasses import dataclass\n\n\n@dataclass\nclass Probe:\n    steps: int = 3\n"
                          f'    """{doc}"""\n')
        os.utime(source, ns=(mtime_ns, mtime_ns))
        sys.modules.pop("probe_request", None)
        importlib.invalidate_caches()
        return importlib.import_module("probe_request").Probe

    assert argv._field_docs(declare("Timed steps.", 10**18)) == {"steps": "Timed steps."}
    assert list((tmp_path / "cache" / "field_docs").glob("probe_request.Probe.json"))  # kept
    assert argv._field_docs(declare("Timed steps.", 10**18)) == {"steps": "Timed steps."}  # read back
    assert argv._field_docs(declare("Steps timed, after the warm-up.", 2 * 10**18)) == {
        "steps": "Steps timed, after the warm-up."}  # the file changed: read from it again
    sys.modules.pop("probe_request", None)


def test_each_request_is_the_sections_it_takes_and_each_section_means_the_same_everywhere():
    """A command's options are its own and whole sections (harness/core/requests.py): a section is taken whole or
    not at all, so no command has an option it then ignores, and `--help` lists them under the sections' titles in
    the order the request names them."""
    from harness.core import requests

    sections = [k for k in vars(requests).values()
                if isinstance(k, type) and issubclass(k, requests.Section) and vars(k).get("SECTION")]
    assert {k.__name__ for k in sections} >= {"Rows", "Training", "Rounds", "Breakdown", "Launch", "Hosts", "Output"}
    for name in COMMANDS:
        cls = declare.request_class(name)
        assert not hasattr(cls, "NOT_OPTIONS"), name
        names = {o.name for o in options(cls)}
        for section in sections:
            if not issubclass(cls, section):
                continue
            mine = {o.name for o in options(section)}
            assert mine <= names, (name, section.__name__, mine - names)  # taken whole
            overridden = {n for n in mine if declaring(cls, n) is not section}  # sbatch's own --launcher
            panels = {o.panel for o in options(cls) if o.name in mine - overridden}
            assert panels == {section.SECTION}, (name, section.__name__, panels)
    run = [o.panel for o in options(RunRequest)]
    titles = list(dict.fromkeys(run))
    assert titles == ["Rows", "Workload", "Rounds", "Time to target", "Breakdown", "Launch", "Ranks and hosts",
                      "Output"]
    assert run == sorted(run, key=titles.index)  # one block per section
    scale = declare.request_class("scale")
    assert not {"world_size", "hosts", "budget", "precision", "join", "until_target"} & set(
        f.name for f in dataclasses.fields(scale))
    tune = declare.request_class("tune")
    assert not {"repeats", "precision", "plots", "breakdown", "until_target", "tuned"} & set(
        f.name for f in dataclasses.fields(tune))


def test_a_sweep_point_and_a_tune_comparison_are_run_requests_of_the_sections_they_share():
    from harness.core.requests import ScaleRequest, taken

    req = declare.parse(app, "scale", ["-a", "ddp", "-w", "widemlp", "-o", "width=64", "--steps", "7", "--breakdown",
                                       "--threads", "1", "--timeout", "60", "--no-plots", "--repeats", "2"])
    assert isinstance(req, ScaleRequest)
    point = req.point(world_size=4, global_batch=32)
    assert type(point) is RunRequest
    assert (point.adapters, point.workload, point.options, point.steps, point.breakdown, point.threads,
            point.timeout_s, point.plots, point.repeats) == (["ddp"], "widemlp", ["width=64"], 7, True, 1, 60.0,
                                                             False, 2)
    assert (point.world_size, point.global_batch, point.hosts, point.until_target) == (4, 32, None, False)
    tune = declare.parse(app, "tune", ["-a", "ddp", "--budget", "2m", "--margin", "3%", "-n", "2"])
    shared = taken(tune, RunRequest)
    assert shared["budget"] == "2m" and shared["margin"] == "3%" and shared["world_size"] == 2
    assert "min_gain" not in shared and "repeats" not in shared


def test_a_repeatable_option_may_be_given_again_and_an_option_after_the_double_dash_is_an_argument():
    # Refusing an option given twice (tests/unit/test_bad_input.py) must not refuse the options declared repeatable,
    # nor a value that looks like an option, nor what follows `--`.
    req = declare.parse(app, "run", ["-o", "a=1", "-o", "b=2", "-k", "x=1", "-k", "y=2", "--out", "--steps",
                                     "--steps", "3"])
    assert req.options == ["a=1", "b=2"] and req.knobs == ["x=1", "y=2"] and str(req.out) == "--steps" and req.steps == 3
    with pytest.raises(Exception, match="--steps is given twice"):
        declare.parse(app, "run", ["--steps", "2", "--steps", "3"])
    assert declare.parse(app, "report", ["--", "--force"]).directory == Path("--force")
