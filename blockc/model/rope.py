"""Rotary position embeddings' frequencies: Hugging Face's rope parameters -> the tables the
C library reads (``bc_gpt_config.rope_*``).

transformers computes each scaled variant's inverse frequencies once, in float32 torch
arithmetic (``modeling_rope_utils``: ``default``, ``linear``, ``dynamic``, ``yarn``,
``longrope``, ``llama3``); these are the same steps in NumPy float32, each rounding where
torch rounds (a Python float meeting a float32 tensor is rounded to float32 first;
``a / t`` of a scalar ``a`` is ``reciprocal(t) * a``). What depends on the sequence's
length is left to the C library, which knows it per call: ``longrope``'s long factors
(past ``original_max_position_embeddings``) and ``dynamic``'s base (past
``max_position_embeddings``), as transformers' ``dynamic_rope_update`` recomputes them.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, NamedTuple, Optional

import numpy as np

from .._errors import BlockcValueError

__all__ = ["RopeTables", "ROPE_TYPES", "rope_tables", "default_inv_freq"]

#: the rope_type values blockc computes
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3", "factors")

_F = np.float32


class RopeTables(NamedTuple):
    """What the C library reads for one rope configuration.

    ``inv`` (R/2,) float32 or None (theta^(-2i/R), computed in C); ``inv_long`` the
    frequencies of a sequence longer than ``original`` (longrope) or None; ``dynamic``
    the dynamic NTK factor (0: none); ``original`` the length past which ``inv_long``
    or the dynamic base applies (0: never); ``attn`` the factor on cos and sin."""

    inv: Optional[np.ndarray]
    inv_long: Optional[np.ndarray]
    dynamic: float
    original: int
    attn: float

    @property
    def long_after(self) -> int:
        """The length past which a sequence's every position, cached ones too, turns by
        the long factors (longrope's ``original``); 0: no long factors."""
        return int(self.original) if self.inv_long is not None else 0


def default_inv_freq(theta: float, rot: int) -> np.ndarray:
    """(R/2,) float32: 1 / theta ** (float32(2i) / R), as transformers takes it."""
    e = np.arange(0, rot, 2, dtype=np.int64).astype(_F) / _F(rot)
    return (_F(1.0) / np.power(_F(theta), e)).astype(_F)


def _num(p: Mapping[str, Any], key: str, default: Any = None) -> Any:
    v = p.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise BlockcValueError(f"rope_parameters.{key} must be a finite number, got {v!r}")
    return v


def _need(p: Mapping[str, Any], key: str, kind: str) -> Any:
    v = _num(p, key)
    if v is None:
        raise BlockcValueError(f"rope_parameters.rope_type={kind!r} needs {key}")
    return v


def _llama3(inv: np.ndarray, p: Mapping[str, Any]) -> np.ndarray:
    factor = _need(p, "factor", "llama3")
    low, high = _need(p, "low_freq_factor", "llama3"), _need(p, "high_freq_factor", "llama3")
    old = _need(p, "original_max_position_embeddings", "llama3")
    low_wl, high_wl = _F(old / low), _F(old / high)
    wavelen = (_F(1.0) / inv) * _F(2 * math.pi)
    scaled = np.where(wavelen > low_wl, inv / _F(factor), inv).astype(_F)
    smooth = ((_F(1.0) / wavelen) * _F(old) - _F(low)) / _F(high - low)
    smoothed = (_F(1.0) - smooth) * scaled / _F(factor) + smooth * scaled
    medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
    return np.where(medium, smoothed, scaled).astype(_F)


def _yarn(theta: float, rot: int, p: Mapping[str, Any]) -> RopeTables:
    orig = _need(p, "original_max_position_embeddings", "yarn")
    factor = _num(p, "factor")
    if factor is None:
        factor = _need(p, "max_position_embeddings", "yarn") / orig
    attn = _num(p, "attention_factor")
    mscale, mscale_all = _num(p, "mscale"), _num(p, "mscale_all_dim")

    def get_mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if attn is None:
        attn = (get_mscale(factor, mscale) / get_mscale(factor, mscale_all)
                if mscale and mscale_all else get_mscale(factor))
    beta_fast = _num(p, "beta_fast") or 32
    beta_slow = _num(p, "beta_slow") or 1

    def corr(rotations: float) -> float:
        return (rot * math.log(orig / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    lo, hi = corr(beta_fast), corr(beta_slow)
    if p.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, rot - 1)
    if lo == hi:
        hi += 0.001
    e = np.arange(0, rot, 2, dtype=np.int64).astype(_F) / _F(rot)
    pos = np.power(_F(theta), e).astype(_F)
    extra = _F(1.0) / pos
    inter = _F(1.0) / (_F(factor) * pos)
    ramp = np.clip((np.arange(rot // 2, dtype=_F) - _F(lo)) / _F(hi - lo), 0, 1).astype(_F)
    ext = _F(1.0) - ramp
    inv = (inter * (_F(1.0) - ext) + extra * ext).astype(_F)
    return RopeTables(inv, None, 0.0, 0, float(attn))


def _longrope(theta: float, rot: int, p: Mapping[str, Any]) -> RopeTables:
    orig = _need(p, "original_max_position_embeddings", "longrope")
    factors = []
    for key in ("short_factor", "long_factor"):
        v = p.get(key)
        if not isinstance(v, (list, tuple)) or len(v) != rot // 2:
            raise BlockcValueError(f"rope_parameters.{key} must be a list of {rot // 2} "
                                   f"numbers (rotary dims / 2), got {v!r}")
        f = np.asarray(v, dtype=np.float64)
        if not np.all(np.isfinite(f)) or not np.all(f > 0):
            raise BlockcValueError(f"rope_parameters.{key} must be positive numbers")
        factors.append(f.astype(_F))
    factor = _num(p, "factor")
    if factor is None:
        factor = _need(p, "max_position_embeddings", "longrope") / orig
    attn = _num(p, "attention_factor")
    if attn is None:
        attn = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
    e = np.arange(0, rot, 2, dtype=np.int64).astype(_F) / _F(rot)
    base = np.power(_F(theta), e).astype(_F)
    short, long_ = ((_F(1.0) / (f * base)).astype(_F) for f in factors)
    return RopeTables(short, long_, 0.0, int(orig), float(attn))


def rope_tables(params: Optional[Mapping[str, Any]], theta: float, rot: int) -> RopeTables:
    """The tables of Hugging Face rope parameters ``params`` (None: the default rotary
    embedding) for base ``theta`` and ``rot`` rotated dimensions.

    Parameters
    ----------
    params : mapping or None
        ``rope_type`` and its keys (``factor``, ``original_max_position_embeddings``,
        ``low_freq_factor``, ``high_freq_factor``, ``beta_fast``, ``beta_slow``,
        ``attention_factor``, ``mscale``, ``mscale_all_dim``, ``short_factor``,
        ``long_factor``, ``truncate``; ``max_position_embeddings`` where the type reads
        the model's, as transformers does); or blockc's ``factors`` (llama.cpp's
        ``rope_freqs.weight``: theta^(-2i/R) / factors[i]).
    theta : float
    rot : int
        R, even.

    Returns
    -------
    RopeTables

    Raises
    ------
    ValueError
        An unknown rope_type, or a key it needs missing or malformed (named).
    """
    kind = (params or {}).get("rope_type", "default")
    p = params or {}
    if kind not in ROPE_TYPES:
        raise BlockcValueError(f"rope_parameters.rope_type={kind!r}: blockc computes "
                               f"{', '.join(ROPE_TYPES)}")
    if kind == "default":
        return RopeTables(None, None, 0.0, 0, 1.0)
    if kind == "linear":
        inv = (default_inv_freq(theta, rot) / _F(_need(p, "factor", kind))).astype(_F)
        return RopeTables(inv, None, 0.0, 0, 1.0)
    if kind == "dynamic":
        factor = float(_need(p, "factor", kind))
        if factor < 1.0:
            raise BlockcValueError(f"rope_parameters.factor must be >= 1 for dynamic, got {factor}")
        if rot <= 2:
            raise BlockcValueError("dynamic rotary scaling needs more than 2 rotated dimensions")
        return RopeTables(None, None, factor, int(_need(p, "max_position_embeddings", kind)), 1.0)
    if kind == "factors":  # llama.cpp's rope_freqs.weight: each frequency divided by its factor
        f = np.asarray(p.get("factors", ()), dtype=np.float64)
        if f.shape != (rot // 2,) or not np.all(np.isfinite(f)) or not np.all(f > 0):
            raise BlockcValueError(f"rope_parameters.factors must be {rot // 2} positive numbers")
        return RopeTables((default_inv_freq(theta, rot) / f.astype(_F)).astype(_F), None, 0.0,
                          0, 1.0)
    if kind == "llama3":
        return RopeTables(_llama3(default_inv_freq(theta, rot), p), None, 0.0, 0, 1.0)
    if kind == "yarn":
        return _yarn(theta, rot, p)
    return _longrope(theta, rot, p)
