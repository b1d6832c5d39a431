"""The checks of GPTConfig's newer fields, one function per group, called by
:class:`blockc.model.GPTConfig` as it is made (``set_`` writes a normalised field back):
the sliding window (:func:`check_window`) and the checkpoint families' variants
(:func:`check_variants`: rotary scaling, NoPE and local layers, q/k norms, scales).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

import numpy as np

from .._args import as_flag, as_int, as_real, as_size
from .._errors import BlockcTypeError, BlockcValueError
from .._native import ffi
from .rope import rope_tables

__all__ = ["check_window", "check_variants"]


def check_window(cfg: Any, set_: Callable[[str, Any], None]) -> None:
    """sliding_window a size or None; sliding_layers one flag per layer, with a window."""
    if cfg.sliding_window is not None:
        set_("sliding_window", as_size(cfg.sliding_window, "GPTConfig.sliding_window"))
    if cfg.sliding_layers is None:
        return
    flags = cfg.sliding_layers
    if isinstance(flags, (str, bytes)) or not hasattr(flags, "__len__"):
        raise BlockcTypeError("GPTConfig.sliding_layers must be a sequence of bools, "
                              f"got {type(flags).__name__}")
    if len(flags) != cfg.layers:
        raise BlockcValueError(f"GPTConfig.sliding_layers must have one flag per layer "
                               f"({cfg.layers}), got {len(flags)}")
    if cfg.sliding_window is None:
        raise BlockcValueError("GPTConfig.sliding_layers needs a sliding_window")
    set_("sliding_layers", tuple(as_flag(f, f"GPTConfig.sliding_layers[{i}]")
                                 for i, f in enumerate(flags)))


def check_experts(cfg: Any, set_: Callable[[str, Any], None]) -> None:
    """n_experts 0 or 2.., experts_used 1..n_experts with experts (0 without), SwiGLU
    experts without biases."""
    n = as_int(cfg.n_experts, "GPTConfig.n_experts", 0)
    k = as_int(cfg.experts_used, "GPTConfig.experts_used", 0)
    set_("n_experts", n)
    set_("experts_used", k)
    set_("router_norm", as_flag(cfg.router_norm, "GPTConfig.router_norm"))
    if not n:
        if k or cfg.router_norm:
            raise BlockcValueError("GPTConfig.experts_used and router_norm need n_experts")
        return
    if n < 2:
        raise BlockcValueError(f"GPTConfig.n_experts must be 0 or >= 2, got {n}")
    if not 1 <= k <= n:
        raise BlockcValueError(f"GPTConfig.experts_used must lie in [1, n_experts={n}], "
                               f"got {k}")
    if cfg.activation != "swiglu" or cfg.mlp_bias:
        raise BlockcValueError("GPTConfig.n_experts: experts are SwiGLU MLPs without biases "
                               f"(activation {cfg.activation!r}, mlp_bias {cfg.mlp_bias})")


def check_variants(cfg: Any, set_: Callable[[str, Any], None]) -> None:
    """The families' fields checked and normalised; the rope tables built."""
    check_experts(cfg, set_)
    for name in ("embed_scale", "residual_scale", "logit_scale"):
        v = as_real(getattr(cfg, name), f"GPTConfig.{name}", 0.0)
        if not 0.0 < v < float(np.finfo(np.float32).max):
            raise BlockcValueError(f"GPTConfig.{name} must be > 0 in float32, got {v!r}")
        set_(name, v)
    if cfg.attn_scale is not None:
        v = as_real(cfg.attn_scale, "GPTConfig.attn_scale", 0.0)
        if not 0.0 < v < float(np.finfo(np.float32).max):
            raise BlockcValueError(f"GPTConfig.attn_scale must be > 0, got {v!r}")
        set_("attn_scale", v)
    for name in ("attn_softcap", "logit_softcap"):
        if getattr(cfg, name) is not None:
            v = as_real(getattr(cfg, name), f"GPTConfig.{name}", 0.0)
            if not 0.0 < v < float(np.finfo(np.float32).max):
                raise BlockcValueError(f"GPTConfig.{name} must be > 0 in float32, got {v!r}")
            set_(name, v)
    for name in ("nope_layers", "local_layers"):
        v = getattr(cfg, name)
        if not isinstance(v, (tuple, list)) or not all(
                type(i) is int and 0 <= i < cfg.layers for i in v):
            raise BlockcValueError(f"GPTConfig.{name} must be layer numbers in "
                                   f"[0, {cfg.layers}), got {v!r}")
        set_(name, tuple(sorted(set(v))))
    if set(cfg.nope_layers) & set(cfg.local_layers):
        raise BlockcValueError("GPTConfig: a layer is in both nope_layers and local_layers")
    if cfg.rope_local_theta is not None:
        v = as_real(cfg.rope_local_theta, "GPTConfig.rope_local_theta", 0.0)
        if not 0.0 < v <= float(np.finfo(np.float32).max):
            raise BlockcValueError(f"GPTConfig.rope_local_theta must be > 0, got {v!r}")
        set_("rope_local_theta", v)
    if cfg.local_layers and cfg.rope_local_theta is None:
        raise BlockcValueError("GPTConfig.local_layers needs rope_local_theta")
    rp = cfg.rope_parameters
    if rp is not None:
        try:
            items = dict(rp.items() if isinstance(rp, Mapping) else rp)
        except (TypeError, ValueError):
            raise BlockcTypeError(f"GPTConfig.rope_parameters must be a mapping, got "
                                  f"{type(rp).__name__}") from None
        if not all(isinstance(k, str) for k in items):
            raise BlockcTypeError("GPTConfig.rope_parameters' keys must be strings")
        items.pop("rope_theta", None)  # the rope_theta field is the one read
        items.setdefault("rope_type", "default")
        rp = tuple(sorted((k, tuple(v) if isinstance(v, list) else v)
                          for k, v in items.items()))
        if rp == (("rope_type", "default"),):
            rp = None
        set_("rope_parameters", rp)
    if cfg.rotary_dim is not None:
        set_("rotary_dim", as_size(cfg.rotary_dim, "GPTConfig.rotary_dim"))
        if cfg.rotary_dim == cfg.head_dim_:
            set_("rotary_dim", None)
    rot = cfg.rotary_dim_
    if cfg.positions == "rope" and (rot % 2 or rot > cfg.head_dim_):
        raise BlockcValueError(f"GPTConfig.rotary_dim must be even and <= head_dim "
                               f"{cfg.head_dim_}, got {rot}")
    tables = rope_tables(dict(rp) if rp else None, cfg.rope_theta, rot)
    keep = dict(tables=tables)
    for name, arr in (("inv", tables.inv), ("inv_long", tables.inv_long)):
        keep[name] = ffi.new("float[]", [float(x) for x in arr]) if arr is not None else \
            ffi.NULL
    keep["nope"] = ffi.NULL
    if cfg.nope_layers or cfg.local_layers:  # (layers) kinds, only when some layer has one
        kinds = bytearray(cfg.layers)
        for i in cfg.nope_layers:
            kinds[i] = 1
        for i in cfg.local_layers:
            kinds[i] = 2
        keep["nope"] = ffi.new("unsigned char[]", bytes(kinds))
    set_("_rope", keep)
