"""What the experiments share: a seed spread, and writing a section of a Markdown file.

Every figure an experiment prints is written into its documentation by the
experiment itself: :func:`write_section` replaces the text between
``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` (appending the section when
the file has none), writing the file whole or not at all.
"""
from __future__ import annotations

import math
import os
from typing import Dict, Iterable, List

from .. import _files
from .._errors import BlockcValueError
from .._files import atomic_write

__all__ = ["spread", "write_section", "read_section_file", "fmt", "cpu_name"]


def spread(values: Iterable[float]) -> Dict[str, float]:
    """The mean, median, smallest and largest of ``values`` and their count (NaN when empty)."""
    v = sorted(float(x) for x in values)
    n = len(v)
    if not n:
        nan = float("nan")
        return {"n": 0, "mean": nan, "median": nan, "min": nan, "max": nan}
    mid = v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])
    return {"n": n, "mean": math.fsum(v) / n, "median": mid, "min": v[0], "max": v[-1]}


def cpu_name() -> str:
    """The processor's model name (from /proc/cpuinfo where there is one) and core count."""
    name = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    if not name:
        import platform
        name = platform.processor() or platform.machine() or "unknown CPU"
    return f"{name}, {os.cpu_count() or 1} cores"


def fmt(x: float, digits: int = 3) -> str:
    """A figure for a table: fixed point, or ``nan``/``inf`` spelled out."""
    if x != x:
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}f}"


def read_section_file(path: str, name: str, option: str = "--markdown") -> str:
    """The text of the Markdown file a section ``name`` goes into ("" when it does not
    exist yet), refused unless its markers are one begin before one end, or neither.
    Called before an experiment runs (a bad path fails at once) and again to write.

    Raises
    ------
    ValueError
        Markers repeated, one of the pair missing, or the end first (the text between
        them is the user's: blockc will not guess); a directory that does not exist;
        not a regular file or not UTF-8.
    OSError
        The file cannot be read.
    """
    _files.check_output_file(path, option)
    if not os.path.lexists(path):
        return ""
    raw = _files.read_bytes(path, 64 * 1024 * 1024, "a Markdown file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BlockcValueError(f"{option} {path}: not UTF-8 ({e})") from None
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    nb, ne = text.count(begin), text.count(end)
    if (nb, ne) not in ((0, 0), (1, 1)) or (nb and text.index(end) < text.index(begin)):
        raise BlockcValueError(f"{option} {path}: its section markers are not one {begin} "
                               f"followed by one {end} ({nb} begin, {ne} end"
                               + (", the end first" if nb == ne == 1 else "") + "); fix them "
                               "by hand, blockc will not guess which text is its own")
    return text


def write_section(path: str, name: str, lines: List[str]) -> None:
    """Put ``lines`` between the section markers of ``name`` in the Markdown file ``path``.

    Parameters
    ----------
    path : str
        The file (created when absent).
    name : str
        The section: ``<!-- name:begin -->`` ... ``<!-- name:end -->``.
    lines : list of str
        The section's body.

    Raises
    ------
    ValueError
        The file's markers are out of order or repeated (:func:`read_section_file`).
    OSError
        The file cannot be read or written (it is then unchanged).
    """
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = read_section_file(path, name)
    block = begin + "\n" + "\n".join(lines) + "\n" + end
    if begin in text:
        text = text[:text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text = text + ("\n" if text and not text.endswith("\n") else "") + block + "\n"
    with atomic_write(path) as f:
        f.write(text.encode("utf-8"))
