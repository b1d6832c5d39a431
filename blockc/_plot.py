"""The optional matplotlib behind ``--plot`` (``pip install 'blockc[plot]'``)."""
from __future__ import annotations

import os

from ._errors import BlockcValueError
from ._files import atomic_write

__all__ = ["plot_path", "pyplot", "save_figure"]


def plot_path(path: str) -> str:
    """The file ``--plot PATH`` writes: PATH itself, with ``.png`` added when it has no
    extension (matplotlib would add it silently). A ValueError, before any work, when
    PATH is a directory or its directory does not exist."""
    if os.path.isdir(path):
        raise BlockcValueError(f"--plot {path}: is a directory; give a file name such as "
                               f"{os.path.join(path, 'plot.png')}")
    if not os.path.splitext(path)[1]:
        path += ".png"
    parent = os.path.dirname(path) or os.curdir
    if not os.path.isdir(parent):
        raise BlockcValueError(f"--plot {path}: the directory {parent} does not exist")
    return path


def pyplot():
    """matplotlib.pyplot on the Agg backend; a ValueError naming the extra without it."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise BlockcValueError("--plot needs matplotlib (pip install 'blockc[plot]')") from None
    return plt


def save_figure(fig, path: str, dpi: "int | None" = None) -> None:
    """Write matplotlib figure ``fig`` to ``path`` whole or not at all (a temporary file
    in the same directory renamed over it, :func:`blockc._files.atomic_write`), in the
    format its extension names (PNG without one)."""
    ext = os.path.splitext(path)[1].lstrip(".").lower() or "png"
    with atomic_write(path) as f:
        fig.savefig(f, format=ext, dpi=dpi)
