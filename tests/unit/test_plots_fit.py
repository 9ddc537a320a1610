"""Nothing in a figure is cut off: every report's every figure is drawn at its saved size, and each text (titles,
labels, tick labels, legends, notes) must lie inside the canvas. Rendered from the fixture runs of every kind."""

import shutil

import pytest

from harness import outdir, report
from harness.record import read_records

from conftest import RUNS

KINDS = sorted({p.name.rsplit("_", 1)[0] for p in RUNS.iterdir() if (p / "records.jsonl").exists()})


def _outside(fig) -> list[str]:
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    width, height = fig.canvas.get_width_height()
    cut = []
    for t in fig.findobj(Text):
        if not t.get_visible() or not t.get_text().strip():
            continue
        box = t.get_window_extent(renderer)
        if box.x0 < -1 or box.y0 < -1 or box.x1 > width + 1 or box.y1 > height + 1:
            cut.append(f"{t.get_text()[:60]!r} at x {box.x0:.0f}..{box.x1:.0f}, y {box.y0:.0f}..{box.y1:.0f} "
                       f"of {width}x{height}")
    return cut


@pytest.mark.parametrize("kind", KINDS)
def test_no_text_of_any_figure_is_cut_off(tmp_path, monkeypatch, kind):
    src = sorted(p for p in RUNS.iterdir() if p.name.rsplit("_", 1)[0] == kind)[-1]
    out = tmp_path / src.name
    out.mkdir()
    shutil.copy(src / "records.jsonl", out / "records.jsonl")
    for extra in src.glob("comm_n*"):  # a scale sweep's calibration
        shutil.copytree(extra, out / extra.name)
    cut = {}
    real = outdir.save_figure

    def checked(fig, path, dpi):
        fig.set_dpi(dpi)
        found = _outside(fig)
        if found:
            cut[path.name] = found
        real(fig, path, dpi)

    monkeypatch.setattr(outdir, "save_figure", checked)
    for module in ("run", "epoch", "comm", "scale", "scale_model", "ttt"):
        mod = __import__(f"harness.report.{module}", fromlist=["save_figure"])
        if hasattr(mod, "save_figure"):
            monkeypatch.setattr(mod, "save_figure", checked)
    report.render(out, read_records(out / "records.jsonl"))
    assert list(out.glob("*.png")), "no figure was drawn"
    assert not cut, cut
