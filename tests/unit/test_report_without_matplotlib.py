"""A machine without matplotlib (the lent GPU image had one; a minimal container may not) still gets every report:
the same report.md, no figures, and a line saying why and how to draw them later."""

import shutil
import sys

import pytest

from harness import reports as report
from harness.ground.record import read_records, records_file
from harness.reports import figures

from conftest import RUNS as FIXTURE_RUNS


@pytest.mark.parametrize("kind", ["digits_cpu2", "comm_cpu2", "scale_digits_cpu2"])
def test_every_report_kind_renders_without_matplotlib(tmp_path, monkeypatch, kind):
    src = sorted(p for p in FIXTURE_RUNS.iterdir() if p.name.startswith(kind + "_"))[-1]
    out = tmp_path / src.name
    out.mkdir()
    shutil.copy(records_file(src), out / records_file(src).name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    assert figures.pyplot() is None and not figures.available()
    report.render(out, read_records(records_file(out)))
    md = (out / "report.md").read_text()
    assert figures.NO_PLOTS in md and "](" not in md.split(figures.NO_PLOTS)[0].split("## Plots")[-1]
    assert not list(out.glob("*.png"))


def test_report_says_plots_only_where_it_drew_some(tmp_path, monkeypatch):
    # "wrote DIR/report.md and plots" was printed with no plot written (matplotlib missing; a tune draws none)
    from typer.testing import CliRunner

    from harness.cli import app

    src = sorted(p for p in FIXTURE_RUNS.iterdir() if p.name.startswith("digits_cpu2_"))[-1]
    out = tmp_path / src.name
    out.mkdir()
    shutil.copy(records_file(src), out / records_file(src).name)
    drawn = CliRunner().invoke(app, ["report", str(out)])
    assert drawn.exit_code == 0 and drawn.stdout.endswith(f"wrote {out}/report.md and plots\n"), drawn.output
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    shown = CliRunner().invoke(app, ["report", str(out)])
    assert shown.exit_code == 0 and shown.stdout.endswith(f"wrote {out}/report.md\n"), shown.output
