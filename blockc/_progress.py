"""Progress of long command-line runs, on stderr when it is a terminal (and nowhere
otherwise, so that pipes and logs get only the results)."""
from __future__ import annotations

import sys
import time
from typing import Optional, TextIO

__all__ = ["Progress"]


class Progress:
    """``with Progress(total, "blocks") as p: ... p.step()``: a ``label i/total``
    line redrawn in place at most ten times a second, erased at the end."""

    def __init__(self, total: int, label: str, stream: Optional[TextIO] = None):
        self.total, self.label, self.done = total, label, 0
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.on = bool(isatty and isatty())
        self._last = 0.0

    def step(self, n: int = 1) -> None:
        self.done += n
        if self.on and (time.monotonic() - self._last > 0.1 or self.done == self.total):
            self._last = time.monotonic()
            self.stream.write(f"\r{self.label} {self.done}/{self.total}")
            self.stream.flush()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        if self.on:
            self.stream.write("\r" + " " * (len(self.label) + 2 * len(str(self.total)) + 2) + "\r")
            self.stream.flush()
