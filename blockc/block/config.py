"""A block's shape and options (:class:`BlockConfig`), the weights it accepts and its
parameter count; the calls on it are in :mod:`blockc.block.engine`, its weights in
:mod:`blockc.block.weights`."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Dict, Tuple

from .._native import ffi, lib
from .._args import MAX_ELEMENTS, as_choice, as_flag, as_int, as_size, check_eps
from .._enums import ACTIVATIONS, C_ACT, C_NORM, C_PLACE, NORMS, PLACEMENTS
from .._errors import BlockcTypeError, BlockcValueError

__all__ = ["BlockConfig", "WEIGHT_FIELDS", "check_config", "count_parameters", "NORMS",
           "PLACEMENTS", "ACTIVATIONS"]

_MAX = MAX_ELEMENTS
assert _MAX == int(lib.BC_MAX_ELEMENTS)

#: (state-dict key, bc_block_weights field) of every weight a block can have
WEIGHT_FIELDS = (
    ("attn.qkv.weight", "qkv_w"), ("attn.qkv.bias", "qkv_b"),
    ("attn.proj.weight", "proj_w"), ("attn.proj.bias", "proj_b"),
    ("up.weight", "up_w"), ("up.bias", "up_b"),
    ("gate.weight", "gate_w"), ("gate.bias", "gate_b"),
    ("down.weight", "down_w"), ("down.bias", "down_b"),
    ("ln1.weight", "ln1_w"), ("ln1.bias", "ln1_b"),
    ("ln2.weight", "ln2_w"), ("ln2.bias", "ln2_b"),
)



@dataclass(frozen=True)
class BlockConfig:
    """Shape and options of one transformer block. The defaults are the
    chapter-24 block (128_Block): D=8, 2 heads, F=32, pre-norm RMSNorm,
    GELU-tanh, no mask, residuals on, eps 1e-5.

    Every field is validated on construction (ValueError/TypeError naming it).
    """
    d_model: int = 8
    n_heads: int = 2
    d_ff: int = 32
    norm: str = "rms"             # "rms" | "layer" | "none"
    placement: str = "pre"        # "pre" | "post"
    activation: str = "gelu_tanh"  # "gelu_tanh" | "gelu" | "relu" | "swiglu"
    causal: bool = False
    residual: bool = True
    eps: float = 1e-5
    # also set on construction, outside the dataclass fields: ``_c`` (the C struct,
    # built once), ``_shapes`` and ``_plan`` (the weights this config accepts)

    def __post_init__(self):
        d = as_size(self.d_model, "d_model")
        h = as_size(self.n_heads, "n_heads")
        f = as_size(self.d_ff, "d_ff")
        if d % h:
            raise BlockcValueError(f"n_heads must divide d_model: d_model={d}, n_heads={h}")
        if 3 * d * d > _MAX or f * d > _MAX:
            raise BlockcValueError(f"d_model={d}, d_ff={f}: a weight matrix would exceed 2**40 elements")
        as_choice(self.norm, "norm", NORMS)
        as_choice(self.placement, "placement", PLACEMENTS)
        as_choice(self.activation, "activation", ACTIVATIONS)
        causal = as_flag(self.causal, "causal")
        residual = as_flag(self.residual, "residual")
        eps = check_eps(self.eps)
        for k, v in (("d_model", d), ("n_heads", h), ("d_ff", f), ("causal", causal),
                     ("residual", residual), ("eps", eps)):
            object.__setattr__(self, k, v)
        object.__setattr__(self, "_c", ffi.new("bc_block_config *", {
            "d_model": d, "n_heads": h, "d_ff": f, "norm": C_NORM[self.norm],
            "placement": C_PLACE[self.placement], "activation": C_ACT[self.activation],
            "causal": int(causal), "residual": int(residual), "eps": eps}))
        object.__setattr__(self, "_shapes", _expected_shapes(self))
        # (key, C field, shape, description, required) in C-field order, for the checks
        object.__setattr__(self, "_plan", tuple((key, fld) + self._shapes[key]
                                                for key, fld in WEIGHT_FIELDS if key in self._shapes))

    def __reduce__(self):  # pickle / copy by the fields; the C struct is rebuilt
        return (type(self), tuple(getattr(self, f.name) for f in fields(self)))

    @property
    def c_config(self) -> Any:
        """The ``bc_block_config *`` the C library reads, built once (the engine's
        internal interface, with :attr:`PreparedBlock.c_weights` and :func:`workspace`)."""
        return self._c

    @property
    def weight_shapes(self) -> Dict[str, tuple]:
        """key -> (shape, description, required) for every weight this config accepts."""
        return dict(self._shapes)

    @property
    def weight_plan(self) -> Tuple[tuple, ...]:
        """(key, C field, shape, description, required) of every weight this config
        accepts, in the order of ``bc_block_weights``' fields."""
        return self._plan

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


def _expected_shapes(cfg: BlockConfig) -> Dict[str, tuple]:
    """key -> (shape, description, required) for the keys this config accepts."""
    d, f = cfg.d_model, cfg.d_ff
    s = {
        "attn.qkv.weight": ((3 * d, d), "(3*d_model, d_model)", True),
        "attn.qkv.bias": ((3 * d,), "(3*d_model,)", False),
        "attn.proj.weight": ((d, d), "(d_model, d_model)", True),
        "attn.proj.bias": ((d,), "(d_model,)", False),
        "up.weight": ((f, d), "(d_ff, d_model)", True),
        "up.bias": ((f,), "(d_ff,)", False),
        "down.weight": ((d, f), "(d_model, d_ff)", True),
        "down.bias": ((d,), "(d_model,)", False),
    }
    if cfg.activation == "swiglu":
        s["gate.weight"] = ((f, d), "(d_ff, d_model)", True)
        s["gate.bias"] = ((f,), "(d_ff,)", False)
    if cfg.norm != "none":
        for i in (1, 2):
            s[f"ln{i}.weight"] = ((d,), "(d_model,)", False)
    if cfg.norm == "layer":
        for i in (1, 2):
            s[f"ln{i}.bias"] = ((d,), "(d_model,)", False)
    return s


def check_config(cfg: Any) -> "BlockConfig":
    """``cfg`` itself when it is a :class:`BlockConfig`, else a BlockcTypeError."""
    if type(cfg) is not BlockConfig:
        raise BlockcTypeError(f"cfg must be a blockc.BlockConfig, got {type(cfg).__name__}")
    return cfg


# ---- accounting -----------------------------------------------------------------

def count_parameters(cfg: BlockConfig, bias: bool = False, n_blocks: int = 1) -> int:
    """Parameters of ``n_blocks`` blocks.

    Per block: attention ``4*D**2`` (Q, K, V, O); FFN ``2*D*F`` (up, down),
    plus ``D*F`` for the swiglu gate (exercise 6); norms ``D`` per norm for
    rms (the gain), ``2*D`` for layer (gain and shift), 0 for none (the
    listings count the two RMSNorm gains although they don't store them);
    with ``bias=True`` the linear biases ``3D + D + F + D`` (+ ``F`` for the
    gate).

    - 128_Block (the defaults): 4*8**2 + 2*8*32 + 2*8 = 256 + 512 + 16 = 784.
    - Exercise 5, six blocks with D=256, 4 heads, F=1024: per block
      4*256**2 + 2*256*1024 + 2*256 = 262144 + 524288 + 512 = 786944, times 6
      = 4,721,664. (An LSTM with hidden and input size 256 has
      4*(256*(256+256) + 256) = 525,312: one block is 1.5 of those.)
    - Exercise 6, SwiGLU at the same sizes: + 256*1024 = 262144 per block,
      1,049,088 per block and 6,294,528 for six; models using it shrink F to
      about 2/3 of 4D to keep the count level.
    - Chapter 6, GPT-2 block (layer norm, biases, F=4D): 12*D**2 + 13*D.

    Parameters
    ----------
    cfg : BlockConfig
    bias : bool, optional
        Count the linear biases too.
    n_blocks : int >= 0, optional

    Returns
    -------
    int

    Raises
    ------
    TypeError
        A non-BlockConfig ``cfg``, a non-bool ``bias``, a non-integer ``n_blocks``.
    ValueError
        ``n_blocks`` below 0.

    Examples
    --------
    >>> count_parameters(BlockConfig())
    784
    >>> count_parameters(BlockConfig(d_model=256, n_heads=4, d_ff=1024), n_blocks=6)
    4721664
    """
    check_config(cfg)
    as_flag(bias, "bias")
    n_blocks = as_int(n_blocks, "n_blocks", 0, _MAX)
    d, f = cfg.d_model, cfg.d_ff
    swiglu = cfg.activation == "swiglu"
    per = 4 * d * d + 2 * d * f + (d * f if swiglu else 0)
    per += {"rms": 2 * d, "layer": 4 * d, "none": 0}[cfg.norm]
    if bias:
        per += 3 * d + d + f + d + (f if swiglu else 0)
    return per * n_blocks

