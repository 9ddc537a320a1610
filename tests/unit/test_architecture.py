"""The shape of the code: no import cycles, no private names across modules, rank code apart from parent code,
contracts that enforce themselves, committed reports that re-render identically."""

import ast
import functools
import inspect
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

import adapters
import workloads
from adapters.base import Adapter, Cost, Launch, LaunchPlan, Role, Strategy
from workloads.base import Workload

from conftest import REPO, RUNS, records_text

PACKAGES = ("adapters", "workloads", "harness")


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*.py"):
            rel = path.relative_to(REPO).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module an import refers to (longest match), or None for a third-party one."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


@functools.cache
def _imports(module: str, path: Path) -> tuple[tuple[str, list[str], int], ...]:
    """(imported project module, names taken from it, line) for every import outside `if TYPE_CHECKING:`; each
    module is read once per session (a dozen tests ask, and parsing and walking every module took 19 s)."""
    return tuple(_scan(module, path))


def _scan(module: str, path: Path):
    tree = ast.parse(path.read_text())
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            skip.update(id(n) for n in ast.walk(node))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _resolve(alias.name)
                if target:
                    yield target, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                sub = _resolve(f"{base}.{alias.name}")
                if sub and sub != _resolve(base):  # `from harness import report`: the submodule itself
                    yield sub, [], node.lineno
                elif _resolve(base):
                    yield _resolve(base), [alias.name], node.lineno


def _graph():
    return {m: {t for t, _, _ in _imports(m, p) if t != m} for m, p in MODULES.items()}


def test_there_is_no_import_cycle():
    graph = _graph()
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                cycle = stack[stack.index(n):] + [n]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_no_private_name_is_imported_across_modules():
    found = []
    for m, path in MODULES.items():
        for target, names, line in _imports(m, path):
            found += [f"{path.relative_to(REPO)}:{line}: {target}.{n}" for n in names
                      if n.startswith("_") and not n.startswith("__")]
        # module._private attribute access on an imported project module
        tree = ast.parse(path.read_text())
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if _resolve(a.name):
                        aliases[a.asname or a.name.split(".")[0]] = a.name
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    if _resolve(f"{node.module}.{a.name}") == f"{node.module}.{a.name}":
                        aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {aliases[node.value.id]}.{node.attr}")
    assert not found, "private names used across modules:\n" + "\n".join(found)


# The modules a rank may use besides harness.rank.*, adapters and workloads: what both sides share, the package
# harness.shared. Everything else under harness/ is parent code, found from the tree.
SHARED_WITH_RANKS = {"harness"} | {m for m in MODULES if m == "harness.shared" or m.startswith("harness.shared.")}


def test_rank_code_never_imports_parent_code():
    """As torchrun's agent never imports training code and the training code never imports the agent: what runs
    in a rank (harness.rank.*) reaches only the shared modules, adapters and workloads."""
    parent = {m for m in MODULES if m.startswith("harness") and not m.startswith("harness.rank")} - SHARED_WITH_RANKS
    assert {"harness.core.runner", "harness.cli", "harness.model.calibration", "harness.model.costmodel"} <= parent
    graph = _graph()
    seen, todo = set(), [m for m in MODULES if m.startswith("harness.rank")]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo += graph[m]
    reached = sorted(seen & parent)
    assert not reached, f"rank code reaches parent modules: {reached}"


def test_the_shared_modules_import_no_parent_module():
    """A shared module that imported parent code would carry it into every rank."""
    graph = _graph()
    parent = {m for m in MODULES if m.startswith("harness") and not m.startswith("harness.rank")} - SHARED_WITH_RANKS
    leaks = {m: sorted(graph[m] & parent) for m in SHARED_WITH_RANKS if m in graph and graph[m] & parent}
    assert not leaks, f"shared modules importing parent code: {leaks}"


def _floors() -> dict[str, int]:
    graph = _graph()
    height: dict[str, int] = {}

    def h(m):
        if m not in height:
            height[m] = 1 + max((h(n) for n in graph[m]), default=0)
        return height[m]

    return {m: h(m) for m in graph}


LAYERS = ("harness", "harness.shared", "workloads", "adapters", "harness.rank", "harness.ground", "harness.launching",
          "harness.model", "harness.core", "harness.reports", "harness.commands", "harness.cli", "harness.entry",
          "harness.__main__", "harness.gpu", "harness.cluster")
"""The folders (and the few top-level modules) from the ground up: what both sides share (the package's own
__init__, harness/shared/), the workloads, the adapters, the ranks' code, then the parent's: its ground floor (leaf
modules: errors, records and their schema, statistics, provenance, sizes, the output directory, options as a command
line), launching one launch, the performance model, the core (requests, the runner, each command's domain), the
reports, the commands, the entry. docs/extending.md's table lists them in this order."""


def _layer(module: str) -> str:
    """The entry of LAYERS a module belongs to (the longest that is it or a package above it)."""
    found = [layer for layer in LAYERS if module == layer or module.startswith(layer + ".")]
    assert found, f"{module} belongs to no layer of LAYERS"
    return max(found, key=len)


def test_every_import_runs_down_the_layers():
    """No import runs up a floor, with no exemption: the whole folder order of LAYERS holds for every import of every
    module (at module level or inside a function alike), so a leaf module sits below everything that uses it and the
    core never reaches the reports (each command hands its execute() the renderer)."""
    up = [f"{m} -> {n} ({_layer(m)} imports {_layer(n)}, a floor above it)" for m, targets in sorted(_graph().items())
          for n in sorted(targets) if LAYERS.index(_layer(n)) > LAYERS.index(_layer(m))]
    assert not up, "imports that run up the layers:\n" + "\n".join(up)


def test_the_parent_side_stands_in_layers():
    """Errors at the bottom (writing a file does not depend on every adapter), the commands as siblings over the
    runner core. Floors: the longest chain of imports below a module, itself included."""
    floors, graph = _floors(), _graph()
    assert floors["harness.shared.bad_input"] == 1 and floors["harness.ground.errors"] == 2
    assert "harness.core.requests" not in graph["harness.ground.outdir"] | graph["harness.launching.hosts"]
    assert floors["harness.core.comparison"] > floors["harness.core.runner"]
    assert floors["harness.core.sweep"] > floors["harness.core.runner"]
    assert "harness.core.comparison" not in (graph["harness.core.comm_bench"] | graph["harness.core.sweep"]
                                             | graph["harness.core.slurm_script"])
    # 11: launching's log reading asks the adapter registry what each framework declares of its logs
    # (adapters.declared), so launch_logs sits above adapters/ and everything above it one floor higher
    assert floors["harness.cli"] <= 11, floors["harness.cli"]
    # the entry only registers the commands (each in its own module; the error handling in usage_errors.py)
    assert len((REPO / "harness" / "cli.py").read_text().splitlines()) <= 150


def test_the_tree_shows_the_layers_and_no_module_name_is_used_twice():
    """harness/ is its packages, each one layer (shared: both sides; rank: every rank; launching, core, model,
    reports: the parent), and a module's name says what it is wherever it is met: no two modules (or a module and a
    package) share one, so "run", "comm", "plan" and "profile" mean one thing each."""
    ours = [m for m in MODULES if m.startswith("harness.")]
    flat = sorted(m for m in ours if m.count(".") == 1 and m not in ("harness.cli", "harness.entry", "harness.__main__")
                  and not (REPO / Path(*m.split("."))).is_dir())
    assert not flat, f"modules outside the layers' packages: {flat}"
    names: dict[str, list[str]] = {}
    for m in ours:
        last = m.rpartition(".")[2]
        if last not in ("__main__", "harness"):
            names.setdefault(last, []).append(m)
    twice = {n: ms for n, ms in names.items() if len(ms) > 1}
    assert not twice, f"module names used more than once: {twice}"


# ---- contracts that enforce themselves ---------------------------------------------------------------------

def test_a_misspelt_override_is_an_error_when_the_adapter_is_defined():
    with pytest.raises(TypeError, match=r"\.stepp is not part of the Adapter contract"):
        class Typo(Adapter):  # noqa: F841
            name, summary, launcher = "typo", "x", "x"

            def stepp(self):
                pass


def test_a_role_holds_only_its_own_members_and_an_adapter_composes_them():
    """The adapter by role: a backend's Strategy class that defines a Cost member is an error when it is defined,
    and every built-in adapter is its roles composed (each of its methods found on the role that declares it)."""
    with pytest.raises(TypeError, match=r"\.plan_knobs is not part of the Strategy contract"):
        class Muddled(Strategy):  # noqa: F841
            @classmethod
            def plan_knobs(cls, dtype):
                return "none"

    roles = {r: {n for n in vars(r) if not n.startswith("_")} for r in (Launch, Strategy, Cost)}
    for name in [*adapters.names(), "reference"]:
        cls = adapters.get(name)
        assert issubclass(cls, Adapter) and all(issubclass(cls, r) for r in roles), name
        own = {n for k in cls.__mro__ if k.__module__ == cls.__module__ and issubclass(k, Adapter)
               for n, v in vars(k).items() if callable(v) and not n.startswith("_")}
        assert not own - set(dir(Role)), (name, "role members defined on the composed class", own - set(dir(Role)))


def test_an_adapter_without_launch_or_setup_cannot_be_instantiated():
    class NoSetup(Adapter):
        name, summary, launcher = "nosetup", "x", "x"

        def launch(self, spec_path, spec):
            return LaunchPlan(["true"])

    with pytest.raises(TypeError, match="abstract method.*setup"):
        NoSetup()


def test_an_adapter_must_name_itself_and_declare_knobs_as_a_dataclass():
    with pytest.raises(TypeError, match="must set launcher"):
        class Nameless(Adapter):  # noqa: F841
            name, summary = "n", "x"

    with pytest.raises(TypeError, match="Knobs must be a dataclass"):
        class BadKnobs(Adapter):  # noqa: F841
            name, summary, launcher = "b", "x", "x"

            class Knobs:
                pass


def test_a_workload_must_set_its_hyperparameters_and_implement_model_and_data():
    with pytest.raises(TypeError, match="must set global_batch, base_lr"):
        class Half(Workload):  # noqa: F841
            name, summary = "half", "x"

    class NoData(Workload):
        name, summary, global_batch, base_lr, base_batch, steps, warmup = "n", "x", 8, 0.1, 8, 1, 0

        def build_model(self):
            return None

    with pytest.raises(TypeError, match="abstract method.*materialize"):
        NoData()


@pytest.mark.parametrize("base", [Role, Launch, Strategy, Cost, Workload])
def test_every_contract_method_is_documented(base):
    undocumented = [n for n, f in vars(base).items() if callable(getattr(base, n)) and not n.startswith("_")
                    and inspect.isfunction(inspect.unwrap(getattr(f, "__func__", f))) and not inspect.getdoc(f)]
    assert not undocumented, f"{base.__name__} methods without a docstring: {undocumented}"


def test_every_registered_adapter_and_workload_satisfies_its_contract():
    for name in adapters.names():
        cls = adapters.get(name)
        assert not inspect.isabstract(cls), name
        assert cls.name == name
    for name in workloads.names():
        w = workloads.get(name)
        assert not inspect.isabstract(type(w))
        assert w.train_samples(w.global_batch) == w.materialize("cpu", w.global_batch).n_train, name


def test_knob_choices_are_checked_once_generically():
    """No adapter checks its choices by hand: a Literal field is refused by harness/shared/options.py for every one."""
    for name in adapters.names():
        source = inspect.getsource(adapters.get(name))
        assert "must be one of" not in source, name

    from harness.shared.options import OptionError, build
    with pytest.raises(OptionError, match="knob 'mode' must be a or b; got 'c'"):
        build(_Modes, {"mode": "c"}, "knob")


@dataclass
class _Modes:
    mode: Literal["a", "b"] = "a"


# ---- behaviour unchanged: the fixture runs re-render to their reports --------------------------------------------
# tests/fixtures/runs/ holds copies of committed runs of every kind (run, repeats, time to target, two nodes, SLURM,
# comm at 2 and 4 ranks and over two nodes, scale sweeps with their comm_n*/ and an oversubscribed one). A change to
# how reports render shows here as a diff; regenerate a fixture's report.md only for a deliberate change.

@pytest.mark.slow  # every figure of every fixture drawn: seconds each
@pytest.mark.parametrize("run", sorted(p.parent.name for p in RUNS.glob("*/records.jsonl.gz")))
def test_fixture_reports_rerender_identically(tmp_path, run):
    from harness import reports as report
    from harness.ground.record import read_records

    records = read_records(RUNS / run / "records.jsonl.gz")
    for comm in (RUNS / run).glob("comm_n*/records.jsonl.gz"):  # a scale sweep's own collectives
        (tmp_path / comm.parent.name).mkdir()
        (tmp_path / comm.parent.name / comm.name).write_bytes(comm.read_bytes())
    report.render(tmp_path, records)
    assert (tmp_path / "report.md").read_text() == (RUNS / run / "report.md").read_text()


@pytest.mark.parametrize("comm", sorted(str(p.parent.relative_to(RUNS)) for p in RUNS.glob("*/comm_n*/report.md")))
def test_a_sweeps_own_comm_reports_rerender_identically(tmp_path, comm):
    """A scale sweep keeps each world size's `compare comm` run with its report (seven of them once went stale
    unseen: the top-level test above renders the sweep, not them)."""
    from harness import reports as report
    from harness.ground.record import read_records

    report.render(tmp_path, read_records(RUNS / comm / "records.jsonl.gz"))
    assert (tmp_path / "report.md").read_text() == (RUNS / comm / "report.md").read_text()


def test_fixture_index_regenerates_identically(tmp_path):
    from harness import reports as report

    for p in RUNS.glob("*/records.jsonl.gz"):
        (tmp_path / p.parent.name).mkdir()
        (tmp_path / p.parent.name / p.name).write_bytes(p.read_bytes())
    assert report.index(tmp_path).read_text() == (RUNS / "README.md").read_text()


def test_no_test_reads_the_working_trees_results_directory():
    """A user's own `compare run` writes into results/ (`make compare` before `make test` is what a newcomer does),
    so a test that globbed results/ failed on the first run a user made. Tests read tests/fixtures/runs/."""
    pattern = re.compile(r"""(REPO|parents\[\d\]|parent\.parent)\s*/\s*["']results["']""")
    found = [f"{p.relative_to(REPO)}:{n}" for p in (REPO / "tests").rglob("*.py")
             for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not found, "tests that read the working tree's results/: " + ", ".join(found)


def test_records_of_every_kind_pass_the_shape_check():
    from harness.ground.record import check_record

    for p in RUNS.glob("*/records.jsonl.gz"):
        for n, line in enumerate(records_text(p.parent).splitlines(), 1):
            check_record(json.loads(line), f"{p}:{n}")


def test_no_report_or_environment_code_names_an_adapter():
    """What a report or `compare env` needs to know of a backend it reads from what the adapter declares (its
    seed-figure name, its launcher) or from the records, never from an `if name == "horovod"`. The published
    checks' backend names ("ddp" and "horovod" in harness/model/profiles/published.json) are data about other people's
    runs, not our adapters: the model's package (harness/model/) is not among the modules read here."""
    names = set(adapters.names())
    found = []
    for path in [*(REPO / "harness" / "reports").glob("*.py"), REPO / "harness" / "ground" / "provenance.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}")
    assert not found, "report/env code naming adapters: " + ", ".join(found)


def test_the_module_table_in_docs_extending_names_every_module():
    """docs/extending.md's table is where a newcomer finds what a file does: a module it does not name is one they
    cannot find (nine were missing from it once)."""
    text = (REPO / "docs" / "extending.md").read_text()
    rows = {line.split("|")[1].strip().strip("`"): line for line in text.splitlines()
            if line.startswith("| `harness/")}
    missing = []
    for m, path in MODULES.items():
        if not m.startswith("harness"):
            continue
        if path.name == "__init__.py" and not any(isinstance(n, (ast.FunctionDef, ast.ClassDef))
                                                  for n in ast.parse(path.read_text()).body):
            continue  # a package's docstring only
        package = "/".join(path.relative_to(REPO).parts[:-1]) + "/"
        if f"`{path.name}`" not in rows.get(package, ""):
            missing.append(str(path.relative_to(REPO)))
    assert not missing, f"modules docs/extending.md's table does not name: {missing}"


def test_every_distributed_test_file_has_its_place_in_the_order_make_test_hands_them_out():
    # A renamed or new file would fall to "not listed, first" unnoticed, and a name left behind would order nothing
    from conftest import DISTRIBUTED_LONGEST_FIRST

    files = (REPO / "tests" / "distributed").glob("test_*.py")
    assert sorted(DISTRIBUTED_LONGEST_FIRST) == sorted(p.name for p in files)
    recipe = (REPO / "Makefile").read_text().split("\ntest: setup\n")[1].split("\n\n")[0]
    assert "--dist loadfile --no-loadscope-reorder" in recipe


PROSE_NAMING_A_FRAMEWORK = {
    "harness/launching/hosts.py": ("as horovodrun and DeepSpeed's pdsh start them",),
    "harness/core/slurm_script.py": ("DeepSpeed's", "for horovodrun, over ssh"),
    "harness/reports/host_layout.py": ("horovodrun reaches its nodes over ssh",),
    "harness/reports/epoch.py": ("the seed blog's chart",),
    "harness/reports/prediction.py": ("published result",),
}
"""Sentences a user reads that name a launcher as an example; no branch depends on them."""


def test_the_parents_launching_and_core_code_know_no_framework_by_name():
    """A framework's words in its logs, its launcher's summary of a failed worker and where its communication code
    lives are declared by its adapter (Launch.LOG_PEER_GONE, LOG_LAUNCHER_SUMMARY, COMM_PATHS) and gathered with
    adapters.declared(): a new backend's "peer gone" line is then never taken for a failure's cause. No constant of
    the launching, core, report or command code (docstrings aside) names an installed framework."""
    frameworks = {cls.distribution for cls in map(adapters.get, adapters.names()) if cls.distribution}
    assert {"horovod", "deepspeed"} <= frameworks
    word = re.compile(r"\b(" + "|".join(sorted(frameworks)) + r")", re.I)
    found = []
    for folder in ("launching", "core", "reports", "commands"):
        for path in sorted((REPO / "harness" / folder).glob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            tree = ast.parse(path.read_text())
            docs = {id(s.value) for n in ast.walk(tree) if isinstance(getattr(n, "body", None), list) for s in n.body
                    if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)}
            for node in ast.walk(tree):
                if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                        and word.search(node.value)
                        and not any(t in node.value for t in PROSE_NAMING_A_FRAMEWORK.get(rel, ()))):
                    found.append(f"{rel}:{node.lineno}: {node.value[:60]!r}")
    assert not found, "framework knowledge outside its adapter: " + ", ".join(found)
