"""What every figure of the reports shares (matplotlib, Agg, no pyplot): PNG bytes at one
resolution, and store strings made safe for matplotlib's text."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")

from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

DPI = 90


def label(s: object) -> str:
    """A store string safe for matplotlib (no mathtext)."""
    return str(s).replace("$", r"\$")


def png(fig: Figure) -> bytes:
    """The figure as PNG bytes."""
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()
