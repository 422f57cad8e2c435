"""Matplotlib figures as the base64 PNGs the HTML reports inline (no display: the Agg backend)."""

from __future__ import annotations

import base64
import io

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display on a cluster node

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

__all__ = ["png_base64", "plt"]


def png_base64(figure: Figure) -> str:
    """``figure`` as a base64 PNG (for ``<img src="data:image/png;base64,...">``); closes it."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode("ascii")
