"""A GGUF header's array of strings (a vocabulary: ~1e5 tokens, its merges) parsed in one
vectorised pass, no Python step per string.

A string is a uint64 length and its bytes. Where every length is below 256 and no string
holds a NUL, a length field is the one place where a nonzero-or-zero byte is followed by
seven zero bytes: those places are found at once (NumPy), and the chain they must form is
checked exactly (the first at the array's start, each one 8 bytes plus its length after the
one before). Then the length fields are zeroed and the whole decoded as UTF-8 at once and
split at the fields (a character cannot span a NUL: the whole decodes iff every string does).

Only the fast path: :func:`strings` returns None whenever it cannot prove the array whole and
valid (a length of 256 or more, an empty string or a NUL making the places ambiguous,
invalid UTF-8), and :mod:`blockc.io.gguf` then parses the array
string by string, every length checked, naming the string at fault. Whatever it returns is
what that parse returns; where the strings proven so far run past the bytes at hand (a
header read as a prefix of the file) it says how far, as that parse would.
"""
from __future__ import annotations

from typing import Any, List, Tuple, Union

import numpy as np

__all__ = ["strings"]


def strings(buf: Any, pos: int, n: int,
            limit: int) -> Union[None, int, Tuple[List[str], int]]:
    """The ``n`` strings (each a uint64 length and its UTF-8 bytes) of ``buf`` at ``pos``
    and the offset past them, if found as the module says, whole before ``limit`` (at most
    ``len(buf)``) and each valid UTF-8; an offset (an int) when the strings proven so far
    run past ``limit``: the bytes needed up to there (the careful parse would ask for them
    too); else None. Reads nothing past ``limit``."""
    if n == 0:
        return [], pos
    # the array's bytes lie in its first 8 + 255 bytes a string, and within limit
    w = min(limit, len(buf)) - pos
    w = min(w, n * 263)
    if w < 8:
        return None
    region = np.frombuffer(buf, np.uint8, count=w, offset=pos)
    z = region == 0
    z2 = z[:-1] & z[1:]  # z2[q]: bytes q, q+1 zero
    z4 = z2[:-2] & z2[2:]  # q .. q+3
    z7 = z4[:-3] & z4[3:]  # q .. q+6
    c = np.flatnonzero(z7[1:])  # c: bytes c+1 .. c+7 zero
    if c.size == 0 or c[0] != 0:
        return None
    c = c[:n]
    step = 8 + region[c].astype(np.int64)  # 8 + the length (below 256)
    if np.any(c[1:] != c[:-1] + step[:-1]):
        return None
    end = int(c[-1] + step[-1])  # (c: the first c.size strings' length fields, proven)
    if c.size < n:  # the next length field runs past the bytes at hand?
        return pos + end + 8 if end + 8 > w else None
    if end > w:  # the last string does
        return pos + end
    r = region[:end].copy()
    for k in range(8):  # the length fields zeroed: 8 NULs part the strings
        r[c + k] = 0
    if np.count_nonzero(r == 0) != 8 * n:  # a NUL in a string
        return None
    try:
        parts = r.tobytes().decode("utf-8").split("\0" * 8)
    except UnicodeDecodeError:
        return None
    return parts[1:], pos + end
