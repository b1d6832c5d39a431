"""What book mode (:mod:`blockc.book`, in C) and its NumPy oracle
(:mod:`blockc.reference.book`) share: 130_Real_Params' model table and the
checks of the listings' fixed-size arguments.

Pure Python and NumPy (no C): the oracle imports it.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Mapping, Tuple

import numpy as np

from .._args import as_f32, check_keys as _check_keys
from .._errors import BlockcValueError

__all__ = ["REAL_MODELS", "book_array", "check_keys", "real_params_rows"]

#: 130_Real_Params' models: (name, d_model, n_heads, d_ff, n_layers, published count).
REAL_MODELS: Tuple[Tuple[str, int, int, int, int, int], ...] = (
    ("GPT-2 Small", 768, 12, 3072, 12, 124_000_000),
    ("GPT-2 Medium", 1024, 16, 4096, 24, 355_000_000),
    ("GPT-2 Large", 1280, 20, 5120, 36, 774_000_000),
    ("LLaMA-7B", 4096, 32, 11008, 32, 6_700_000_000),
    ("DeepSeek-V3", 7168, 128, 18432, 61, 671_000_000_000),
)


def book_array(a, name: str, shape: Tuple[int, ...]) -> np.ndarray:
    """``a`` as a C-contiguous float32 array of exactly ``shape`` (a copy when needed).

    The dtype rule and message are :func:`blockc.ops`'s (``as_f32``): floating
    dtypes only, anything else is a TypeError naming the argument."""
    arr = as_f32(a, name)
    if arr.shape != shape:
        raise BlockcValueError(f"{name} must have shape {shape} (the book's size), got {arr.shape}")
    return arr


def check_keys(weights: Mapping[str, object], name: str, shapes: Mapping[str, tuple]) -> None:
    """``weights`` is a mapping with exactly the keys of ``shapes`` (:func:`blockc._args.check_keys`)."""
    _check_keys(weights, name, list(shapes))


def real_params_rows(block_params: Callable[[int, int, int], Dict[str, int]]
                     ) -> List[Dict[str, object]]:
    """130_Real_Params' table: for each of :data:`REAL_MODELS`, its name, sizes,
    published count and the counts ``block_params(d_model, d_ff, n_layers)`` gives
    (the C library's or the oracle's)."""
    rows = []
    for name, d_model, n_heads, d_ff, n_layers, published in REAL_MODELS:
        row = {"name": name, "d_model": d_model, "n_heads": n_heads, "d_ff": d_ff,
               "n_layers": n_layers, "published": published}
        row.update(block_params(d_model, d_ff, n_layers))
        rows.append(row)
    return rows
