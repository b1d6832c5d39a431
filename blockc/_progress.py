"""Progress of long command-line runs, on stderr when it is a terminal (and nowhere
otherwise, so that pipes and logs get only the results)."""
from __future__ import annotations

import sys
import time
from typing import Optional, TextIO

__all__ = ["Progress", "bar"]

#: the width of the bar, in characters
WIDTH = 24


def bar(done: int, total: int, width: int = WIDTH) -> str:
    """``[#########...............]``: ``done`` of ``total`` as a bar of ``width``.

    Examples
    --------
    >>> bar(1, 4, 8)
    '[##......]'
    """
    n = 0 if total <= 0 else min(width, max(0, done) * width // total)
    return "[" + "#" * n + "." * (width - n) + "]"


class Progress:
    """``with Progress(total, "blocks") as p: ... p.step()``: a ``label [###...] i/total``
    line redrawn in place at most ten times a second, erased at the end. A Progress is
    also a ``progress(done, total)`` callback (what ``GPT.from_pretrained`` calls while it
    loads), ``total`` then the callback's."""

    def __init__(self, total: int, label: str, stream: Optional[TextIO] = None):
        self.total, self.label, self.done = total, label, 0
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.on = bool(isatty and isatty())
        self._last = 0.0
        self._width = 0

    def _draw(self) -> None:
        if self.on and (time.monotonic() - self._last > 0.1 or self.done >= self.total):
            self._last = time.monotonic()
            line = f"{self.label} {bar(self.done, self.total)} {self.done}/{self.total}"
            self.stream.write("\r" + line)
            self._width = max(self._width, len(line))
            self.stream.flush()

    def step(self, n: int = 1) -> None:
        """``n`` more done."""
        self.done += n
        self._draw()

    def __call__(self, done: int, total: int) -> None:
        """``done`` of ``total`` done."""
        self.done, self.total = done, total
        self._draw()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        if self.on and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
