"""Argument checks shared by the C-backed modules and the NumPy oracle.

Pure Python and NumPy (no C): :mod:`blockc.reference` may import it.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["F32", "as_f32", "check_eps"]

F32 = np.dtype(np.float32)


def as_f32(a: Any, name: str) -> np.ndarray:
    """``a`` as a C-contiguous float32 ndarray, without a copy when it already is one.

    Raises TypeError for non-floating dtypes, naming the argument."""
    if type(a) is np.ndarray and a.dtype == F32 and a.flags.c_contiguous:
        return a
    if not isinstance(a, np.ndarray):
        if hasattr(a, "detach") and hasattr(a, "numpy"):  # a torch tensor, duck-typed
            a = a.detach().cpu().numpy()
        try:
            a = np.asarray(a)
        except (ValueError, TypeError) as e:
            raise TypeError(f"{name} must be an array of floats: {e}") from None
    if a.dtype.kind != "f":
        raise TypeError(f"{name} must have a floating dtype (float16/32/64), got {a.dtype}")
    return np.asarray(a, dtype=F32, order="C")


def check_eps(eps: Any, name: str = "eps") -> float:
    """A norm epsilon: a finite real number >= 0."""
    if isinstance(eps, (bool, np.bool_)) or not isinstance(eps, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {type(eps).__name__}")
    e = float(eps)
    if not math.isfinite(e) or e < 0 or e > float(np.finfo(np.float32).max):
        raise ValueError(f"{name} must be finite and >= 0, got {eps!r}")
    return e
