"""matplotlib, where it is installed: every figure of every report goes through `pyplot()`, so a machine without
matplotlib (a lent GPU image, a minimal container) still gets its report.md, whose plots section says why it has
none, instead of losing the report of a run that measured everything."""

from __future__ import annotations

NO_PLOTS = ("No plots: matplotlib is not installed where this report was written (`pip install matplotlib`, then "
            "`compare report DIR` draws them from records.jsonl).")


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True
