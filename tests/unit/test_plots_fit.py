"""Nothing in a figure is cut off: every report's every figure is drawn at its saved size, and everything matplotlib
draws (titles, labels, tick labels, legends, notes) must lie inside the canvas. Rendered from the fixture runs of
every kind."""

import json
import shutil

import pytest

from harness import reports as report
from harness.ground import outdir
from harness.ground.record import read_records, records_file

from conftest import RUNS

pytestmark = pytest.mark.slow  # draws every figure: seconds, so not in make test-fast
KINDS = sorted({p.name.rsplit("_", 1)[0] for p in RUNS.iterdir() if records_file(p) is not None})


def _outside(fig) -> list[str]:
    """What of the drawn figure lies outside its canvas: matplotlib's own tight box of every artist it draws (tick
    labels outside an axis's view are not drawn, and not counted), against the canvas, in pixels."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    width, height = fig.canvas.get_width_height()
    box = fig.get_tightbbox(renderer).transformed(fig.dpi_scale_trans)  # inches -> pixels
    cut = []
    if box.x0 < -1:
        cut.append(f"{-box.x0:.0f} px cut on the left")
    if box.y0 < -1:
        cut.append(f"{-box.y0:.0f} px cut at the bottom")
    if box.x1 > width + 1:
        cut.append(f"{box.x1 - width:.0f} px cut on the right")
    if box.y1 > height + 1:
        cut.append(f"{box.y1 - height:.0f} px cut at the top")
    return cut


@pytest.mark.parametrize("kind", KINDS + ["one launch per row"])
def test_no_text_of_any_figure_is_cut_off(tmp_path, monkeypatch, kind):
    if kind == "one launch per row":  # bars without whiskers, labelled "n=1: no interval" instead
        src = RUNS / "resnet_cpu2_20261126-052328"  # schema 2: an interval per row, none at n=1
        out = tmp_path / src.name
        out.mkdir()
        once = [r for r in read_records(records_file(src)) if r.get("repeat", 0) == 0]
        (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in once))
    else:
        src = sorted(p for p in RUNS.iterdir() if p.name.rsplit("_", 1)[0] == kind)[-1]
        out = tmp_path / src.name
        out.mkdir()
        shutil.copy(records_file(src), out / records_file(src).name)
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

    monkeypatch.setattr(outdir, "save_figure", checked)  # every report's figures end in figures.save, here
    report.render(out, read_records(records_file(out)))
    assert list(out.glob("*.png")), "no figure was drawn"
    assert not cut, cut
