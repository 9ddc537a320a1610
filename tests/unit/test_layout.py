"""The packages import from this repository, not from the unrelated PyPI packages of the same names."""

import os
import shlex
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, RUNS


def test_packages_resolve_inside_this_repo():
    import adapters
    import harness
    import workloads

    for module in (adapters, harness, workloads):
        assert REPO in __import__("pathlib").Path(module.__file__).resolve().parents, module.__file__


def test_registries_do_not_import_frameworks_at_import_time():
    code = "import sys, adapters, workloads; adapters.names(); workloads.names(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.slow  # several interpreters started: seconds, so in make test, not in make test-fast
def test_console_script_is_the_same_cli(tmp_path):
    compare = REPO / ".venv" / "bin" / "compare"
    exe = compare if compare.exists() else __import__("pathlib").Path(sys.executable).parent / "compare"
    listed = subprocess.run([str(exe), "list"], capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    for name in ("dp", "ddp", "spawn", "amp", "digits", "resnet", "widemlp"):
        assert name in listed.stdout
    bad = subprocess.run([str(exe), "run", "--adapters", "nope", "--out", str(tmp_path / "x")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("error: unknown adapter 'nope'")
    assert "Traceback" not in bad.stderr
    module = subprocess.run([sys.executable, "-m", "harness", "run", "--adapters", "nope", "--out",
                             str(tmp_path / "x")], capture_output=True, text=True, timeout=120, cwd="/")
    assert module.returncode == 2 and module.stderr == bad.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.slow  # seconds: left out of make test-fast
def test_output_cut_short_by_a_closed_pipe_ends_quietly():
    # `compare env | head -c 10`: the reader goes away mid-output. Python raises BrokenPipeError in the print;
    # typer ends the command with exit 1, which must pass through the CLI's own error handling without a
    # traceback (an `except` naming a class that typer's vendored click lacks once turned it into three).
    proc = subprocess.run(f"{shlex.quote(sys.executable)} -m harness env | head -c 10", shell=True, cwd=REPO,
                          capture_output=True, text=True, timeout=120, executable="/bin/bash")
    assert len(proc.stdout) == 10
    assert "Traceback" not in proc.stderr and "Error" not in proc.stderr, proc.stderr


@pytest.mark.distributed  # it starts a training launch: `make test` runs it, `make test-fast` leaves it out
def test_a_run_whose_output_pipe_closes_still_writes_its_results(tmp_path):
    # `compare run | head -1`: the reader goes away after the first line. A command that measures drops the rest of
    # its printing and finishes, as with a full disk on stdout; it used to end there with exit 1 and leave a
    # results directory holding only an empty logs/.
    import json

    out = tmp_path / "run"
    proc = subprocess.run(f"{shlex.quote(sys.executable)} -m harness run -a dp --steps 3 --warmup 1 --equiv-steps 0 "
                          f"--repeats 1 --out {shlex.quote(str(out))} 2>&1 | head -1", shell=True, cwd=REPO, capture_output=True,
                          text=True, timeout=300, executable="/bin/bash")
    assert proc.stdout.startswith("compare run:") and proc.stdout.count("\n") == 1, proc.stdout
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert [(r["adapter"], r["status"]) for r in rows] == [("dp", "ok")]
    assert (out / "report.md").is_file() and not (out / ".compare.lock").exists()


def test_the_entry_point_is_the_guarded_one():
    # A Ctrl-C while the CLI is still being imported ends with exit 130 and one line (harness/entry.py).
    import tomllib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"compare": "harness.entry:main"}
    code = ("import builtins, sys; real = builtins.__import__\n"
            "def imp(name, *a, **k):\n"
            "    if name == 'harness.cli': raise KeyboardInterrupt\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = imp\n"
            "from harness.entry import main; main()")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (130, "interrupted\n")


@pytest.mark.slow  # seconds: left out of make test-fast
def test_listing_adapters_on_cpu_does_not_import_torch_once_its_build_is_known(tmp_path):
    code = ("import sys, adapters; a = adapters.availability_all('cpu', 2); "
            "print('torch' in sys.modules, sorted(n for n, v in a.items() if v))")
    env = {**__import__("os").environ, "COMPARE_CACHE": str(tmp_path)}
    first = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=env)
    second = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=env)
    assert first.stdout.split(" ", 1)[0] == "True"  # the first time, torch is imported to learn its build
    assert second.stdout.startswith("False ")  # then never again: `compare list` takes a fraction of a second
    assert first.stdout.split(" ", 1)[1] == second.stdout.split(" ", 1)[1]  # with the same answer


@pytest.mark.slow  # seconds: left out of make test-fast
def test_a_built_in_workload_is_checked_for_fit_without_importing_torch_once_its_size_is_known(tmp_path):
    # check_fits counts a built-in model's parameters on the meta device once per workload, options, torch and
    # workload files; a later run takes the count from the cache directory and its start imports no torch (3.5 s).
    code = ("import sys; from harness.core.requests import RunRequest\n"
            "from harness.core.workload_checks import check_fits, load_workload\n"
            "from harness.ground.errors import BadInput\n"
            "for opts in ([], ['hidden=300000']):\n"
            "    req = RunRequest(workload='digits', options=opts)\n"
            "    try:\n"
            "        check_fits(load_workload(req), req, 2); print('fits')\n"
            "    except BadInput as exc:\n"
            "        print(str(exc).split(':')[0])\n"
            "print('torch' in sys.modules)")
    env = {**os.environ, "COMPARE_CACHE": str(tmp_path)}
    first, second = (subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=env,
                                    timeout=120) for _ in range(2))
    refused = "workload digits (hidden=300000) has 90,022,800,010 parameters"
    assert first.stdout.splitlines() == ["fits", refused, "True"], first.stderr
    assert second.stdout.splitlines() == ["fits", refused, "False"], second.stderr


def _committed_run(tmp_path):
    import shutil

    src = RUNS / "digits_cpu2_20261124-083538"
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return src, dst


@pytest.mark.slow  # seconds: left out of make test-fast
def test_a_locale_that_is_not_utf8_degrades_the_terminal_and_writes_the_same_files(tmp_path):
    # LC_ALL=POSIX without Python's locale coercion: stdout is ASCII. The report file is UTF-8 all the same, byte
    # for byte what the committed one is, and the terminal gets '?' for what it cannot show.
    import os

    src, dst = _committed_run(tmp_path)
    env = {**os.environ, "LC_ALL": "POSIX", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}
    for args in (["report", str(dst)], ["list"]):
        proc = subprocess.run([sys.executable, "-m", "harness", *args], cwd=REPO, capture_output=True, text=True,
                              timeout=120, env=env)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert (dst / "report.md").read_bytes() == (src / "report.md").read_bytes()


@pytest.mark.slow  # several interpreters started: seconds, so in make test, not in make test-fast
def test_a_full_or_closed_standard_output_loses_the_printing_not_the_files_and_says_so(tmp_path):
    src, dst = _committed_run(tmp_path)
    (dst / "report.md").unlink()
    # a command whose product is a file keeps its exit code; one whose product is what it prints fails, as
    # `ls > /dev/full` does, in one line (it had exited 0 with nothing said); a closed standard output (`>&-`) alike
    # (it had been a traceback: "'NoneType' object has no attribute 'isatty'")
    for args, redirect, code, why in ((f"report {dst}", "> /dev/full", 0, None),
                                      ("list", "> /dev/full", 1, "no space left on device"),
                                      ("env", "> /dev/full", 1, "no space left on device"),
                                      ("knobs ddp", ">&-", 1, "it is closed")):
        proc = subprocess.run(f"{shlex.quote(sys.executable)} -m harness {args} {redirect}", shell=True, cwd=REPO,
                              capture_output=True, text=True, timeout=120, executable="/bin/bash")
        assert proc.returncode == code, proc.stderr
        assert proc.stderr == ("" if why is None else f"error: could not write to standard output ({why}): what this "
                                                      f"command printed is lost\n")
    assert (dst / "report.md").read_bytes() == (src / "report.md").read_bytes()


def test_a_module_shadowing_the_projects_own_is_named_in_one_line(tmp_path):
    import os
    from pathlib import Path

    compare = Path(sys.executable).parent / "compare"
    (tmp_path / "site" / "workloads").mkdir(parents=True)
    (tmp_path / "site" / "workloads" / "__init__.py").write_text("")
    (tmp_path / "site" / "adapters.py").write_text("x = 1\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'site'}:{REPO}"}
    proc = subprocess.run([str(compare), "list"], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (f"error: the module 'adapters' was loaded from {tmp_path / 'site' / 'adapters.py'}, not "
                           f"from this project ({REPO / 'adapters'}): something on PYTHONPATH shadows it; remove it "
                           "from there\n")
    (tmp_path / "site" / "adapters.py").unlink()
    proc = subprocess.run([str(compare), "list"], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2 and proc.stderr.startswith(
        f"error: the module 'workloads' was loaded from {tmp_path / 'site' / 'workloads'}, not from this project")


@pytest.mark.slow  # an interpreter started: seconds
def test_the_path_a_command_wrote_is_one_line_however_long(tmp_path):
    src, _ = _committed_run(tmp_path)
    deep = tmp_path / ("a-directory-name-long-enough-to-wrap-" * 5) / "run"
    shutil.copytree(src, deep)
    proc = subprocess.run([sys.executable, "-m", "harness", "report", str(deep)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {deep}/report.md and plots\n" in proc.stdout  # not cut at the console's width (150 in a pipe)
