"""An A/B inside one run (issue 65, item 4): a row that differs from another only by its interpreter
(`python=PATH`) and an environment variable (`env.NAME=VALUE`), launched for real, paired within rounds with the
row it is compared with, and recorded."""

import json
import os
import stat
import sys

import pytest

from conftest import run_compare

pytestmark = pytest.mark.distributed


def test_a_row_with_another_interpreter_and_a_variable_runs_through_them_and_is_recorded(tmp_path):
    # a stand-in for a second venv's python: it notes that it started, and the row's variable, then is the real one
    marker = tmp_path / "started"
    wrapper = tmp_path / "venv2" / "bin" / "python"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text(f'#!/bin/sh\necho "$AB_MARK" >> {marker}\nexec {sys.executable} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    b = f"ddp:python={wrapper}:env.AB_MARK=on"
    rows, proc = run_compare(tmp_path / "run", "-a", f"ddp,{b}", "--steps", "3", "--warmup", "1",
                             "--equiv-steps", "2", "--repeats", "1")
    assert rows["ddp"]["status"] == "ok" and rows[b]["status"] == "ok", proc.stdout
    assert rows[b]["equivalence"]["passed"] is True  # the same arithmetic through the other interpreter
    env = rows[b]["row_env"]
    assert env["python"] == str(wrapper) and env["env"] == {"AB_MARK": "on"}
    assert env["python_version"] == sys.version.split()[0] and env["torch"]
    assert "row_env" not in rows["ddp"]
    # the launch command of that row (and only of that row) started the other interpreter, with the variable set
    started = marker.read_text().split()
    assert started and set(started) == {"on"}, started
    assert rows[b]["topology"]["launcher_argv"][0] == str(wrapper)
    assert rows["ddp"]["topology"]["launcher_argv"][0] != str(wrapper)
    report = (tmp_path / "run" / "report.md").read_text()
    assert f"- Row environment of {b}: Python {env['python_version']}, torch {env['torch']} at {wrapper}; AB_MARK=on" \
        in report
