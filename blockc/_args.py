"""The argument layer: every public function checks its arguments here, first.

One conversion per kind of argument, one message style naming the argument,
NumPy's conventions: ``TypeError`` (:class:`BlockcTypeError`) for a wrong type,
``ValueError`` (:class:`BlockcValueError`) for a wrong value. Integers go
through ``operator.index`` (so NumPy integers work and floats and bools do
not), flags must be bools, arrays go through one adapter that also reads torch
tensors (bfloat16 and float16 included) without importing torch.

Pure Python and NumPy (no C): :mod:`blockc.reference` imports it too.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from ._errors import BlockcTypeError, BlockcValueError

__all__ = ["F32", "MAX_ELEMENTS", "as_int", "as_size", "as_flag", "as_choice", "as_seed",
           "as_real", "check_eps", "to_numpy", "as_f32"]

F32 = np.dtype(np.float32)

#: Largest element count of any one tensor (the C library's BC_MAX_ELEMENTS, 2**40).
MAX_ELEMENTS = 2 ** 40


def as_int(value: Any, name: str, lo: Optional[int] = None, hi: Optional[int] = None) -> int:
    """``value`` as a Python int in ``[lo, hi]`` (either bound may be None).

    Anything ``operator.index`` accepts (int, NumPy integers); bools, floats and
    strings are a ``TypeError``; a value outside the range a ``ValueError``."""
    if isinstance(value, (bool, np.bool_)):
        raise BlockcTypeError(f"{name} must be an integer, got bool")
    try:
        v = operator.index(value)
    except TypeError:
        raise BlockcTypeError(f"{name} must be an integer, got {type(value).__name__}") from None
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        if hi is None:
            rng = f">= {lo}"
        elif lo is None:
            rng = f"<= {hi}"
        else:
            rng = f"in [{lo}, {_pow2(hi)}]"
        raise BlockcValueError(f"{name} must be {rng}, got {v}")
    return v


def _pow2(n: int) -> str:
    """2**k for powers of two past a million, so that limits read as written."""
    if n > 2 ** 20 and (n & (n - 1)) == 0:
        return f"2**{n.bit_length() - 1}"
    if n > 2 ** 20 and ((n + 1) & n) == 0:
        return f"2**{(n + 1).bit_length() - 1} - 1"
    return str(n)


def as_size(value: Any, name: str, lo: int = 1) -> int:
    """A size or count: an integer in ``[lo, 2**40]``."""
    return as_int(value, name, lo, MAX_ELEMENTS)


def as_flag(value: Any, name: str) -> bool:
    """A flag: ``True`` or ``False`` (NumPy bools too); anything else is a ``TypeError``
    (``"False"`` and ``0`` are not flags)."""
    if not isinstance(value, (bool, np.bool_)):
        raise BlockcTypeError(f"{name} must be a bool, got {type(value).__name__}")
    return bool(value)


def as_choice(value: Any, name: str, allowed: Sequence[str]) -> str:
    """One of the strings ``allowed``."""
    if not isinstance(value, str):
        raise BlockcTypeError(f"{name} must be a str, one of {', '.join(map(repr, allowed))}; "
                              f"got {type(value).__name__}")
    if value not in allowed:
        raise BlockcValueError(f"{name} must be one of {', '.join(map(repr, allowed))}; "
                               f"got {value!r}")
    return value


def as_seed(value: Any, name: str = "seed") -> int:
    """A generator seed: an integer in ``[0, 2**32)`` (srand's range)."""
    v = as_int(value, name)
    if not 0 <= v < 2 ** 32:
        raise BlockcValueError(f"{name} must be in [0, 2**32), got {v}")
    return v


def as_real(value: Any, name: str, lo: Optional[float] = None) -> float:
    """A finite real number (int or float, NumPy's too; not bool), >= ``lo`` if given."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)):
        raise BlockcTypeError(f"{name} must be a real number, got {type(value).__name__}")
    try:
        v = float(value)
    except OverflowError:
        v = math.inf
    if not math.isfinite(v) or (lo is not None and v < lo):
        bound = "" if lo is None else f" and >= {lo:g}"
        raise BlockcValueError(f"{name} must be finite{bound}, got {value!r}")
    return v


def check_eps(eps: Any, name: str = "eps") -> float:
    """A norm epsilon: a finite real number >= 0 that float32 can hold."""
    e = as_real(eps, name, 0.0)
    if e > float(np.finfo(np.float32).max):
        raise BlockcValueError(f"{name} must be finite and >= 0 in float32, got {eps!r}")
    return e


def _is_torch(a: Any) -> bool:
    """A torch tensor, duck-typed (blockc never imports torch)."""
    return hasattr(a, "detach") and hasattr(a, "cpu") and hasattr(a, "numpy")


def to_numpy(a: Any, name: str) -> np.ndarray:
    """An array-like or torch tensor as a NumPy array (a view when it can be).

    Torch dtypes NumPy lacks (bfloat16, the float8s) are widened to float32,
    exactly; the result's dtype is otherwise the input's."""
    if isinstance(a, np.ndarray):
        return a
    if _is_torch(a):
        t = a.detach().cpu()
        if t.is_floating_point() and str(t.dtype) not in (
                "torch.float16", "torch.float32", "torch.float64"):
            t = t.float()
        return t.numpy()
    try:
        return np.asarray(a)
    except (ValueError, TypeError) as e:
        raise BlockcTypeError(f"{name} must be an array of numbers: {e}") from None


def as_f32(a: Any, name: str) -> np.ndarray:
    """``a`` as a C-contiguous float32 ndarray, without a copy when it already is one.

    Floating dtypes only (float16/32/64, torch's bfloat16): others are a
    ``TypeError`` naming the argument."""
    if type(a) is np.ndarray and a.dtype == F32 and a.flags.c_contiguous:
        return a
    a = to_numpy(a, name)
    if a.dtype.kind != "f":
        raise BlockcTypeError(f"{name} must have a floating dtype (float16/32/64), got {a.dtype}")
    return np.asarray(a, dtype=F32, order="C")


def check_keys(value: Any, name: str, keys: Sequence[str], what: Optional[str] = None) -> dict:
    """``value`` as a new dict, when it is a mapping with exactly the keys ``keys``.

    The one message style for "a mapping has exactly these keys": a TypeError
    "NAME must be a mapping with the keys K, got T"; a ValueError "NAME must have
    exactly the keys K; missing [...]; unknown [...]" (at most three of each
    named). K is ``what`` (e.g. "of state_dict()") or the list of keys."""
    want = what if what is not None else str(list(keys))
    if not isinstance(value, Mapping):
        raise BlockcTypeError(f"{name} must be a mapping with the keys {want}, got "
                              f"{type(value).__name__}")
    items = dict(value)  # each entry read once: what is checked is what is used
    known = set(keys)
    missing = [k for k in keys if k not in items]
    extra = [k for k in items if k not in known]
    if missing or extra:
        raise BlockcValueError(f"{name} must have exactly the keys {want}"
                               + (f"; missing {missing[:3]}" if missing else "")
                               + (f"; unknown {extra[:3]}" if extra else ""))
    return items
