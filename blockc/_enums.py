"""The option names the C library knows and their enum values, spelled once.

The block (:class:`blockc.BlockConfig`), the model (:class:`blockc.GPTConfig`),
the packed weights (:mod:`blockc.ops`) and the command line all read these.
"""
from __future__ import annotations

from typing import Dict

from ._native import c_dtypes, c_max_cols, c_whole_blocks, lib

__all__ = ["NORMS", "PLACEMENTS", "ACTIVATIONS", "POSITIONS", "DTYPES",
           "C_NORM", "C_PLACE", "C_ACT", "C_POS", "C_DTYPE", "VALUE_LIMIT",
           "WHOLE_BLOCKS", "MAX_COLS"]

#: the norm: RMSNorm (gain), LayerNorm (gain and shift), none (chapter 24, exercise 2)
C_NORM: Dict[str, int] = {"rms": lib.BC_NORM_RMS, "layer": lib.BC_NORM_LAYER,
                          "none": lib.BC_NORM_NONE}
#: the norm before each sublayer or after each sum
C_PLACE: Dict[str, int] = {"pre": lib.BC_PLACE_PRE, "post": lib.BC_PLACE_POST}
#: the MLP's activation (swiglu: the gated MLP)
C_ACT: Dict[str, int] = {"gelu_tanh": lib.BC_ACT_GELU_TANH, "gelu": lib.BC_ACT_GELU,
                         "relu": lib.BC_ACT_RELU, "swiglu": lib.BC_ACT_SWIGLU}
#: a learned position table or rotary embeddings
C_POS: Dict[str, int] = {"learned": lib.BC_POS_LEARNED, "rope": lib.BC_POS_ROPE}
#: how a packed matrix stores its weights
#: (the C library's formats table, csrc/kernels/formats.c: float32, bfloat16, q8_0, q4_0,
#: float16, q5_0, ...)
C_DTYPE: Dict[str, int] = c_dtypes()
#: the formats whose matrices' rows must be whole blocks, and the block (q4_k: 256)
WHOLE_BLOCKS: Dict[str, int] = c_whole_blocks()
#: the formats whose matrices hold at most so many columns (q8_0i, q4_0i, q5_0i, q4_ki, q6_ki, bfloat16i: 65536)
MAX_COLS: Dict[str, int] = c_max_cols()

#: what a format cannot hold (the C pack's BC_EVALUE), for the messages that say so
VALUE_LIMIT: Dict[str, str] = {
    "q8_0": "finite weights of magnitude <= 65504 * 127 (the block scale is a half)",
    "q4_0": "finite weights of magnitude <= 65504 * 8 (the block scale is a half)",
    "q5_0": "finite weights of magnitude <= 65504 * 16 (the block scale is a half)",
    "q8_0i": "finite weights of magnitude <= 65504 * 127 (the block scale is a half)",
    "q4_0i": "finite weights of magnitude <= 65504 * 8 (the block scale is a half)",
    "q5_0i": "finite weights of magnitude <= 65504 * 16 (the block scale is a half)",
    "q4_k": "finite weights of magnitude <= 65504 * 8 (the super-block scales are halves)",
    "q6_k": "finite weights of magnitude <= 65504 * 8 (the super-block scales are halves)",
    "q4_ki": "finite weights of magnitude <= 65504 * 8 (the super-block scales are halves)",
    "q6_ki": "finite weights of magnitude <= 65504 * 8 (the super-block scales are halves)",
    "float16": "finite weights of magnitude <= 65504 (the largest half; larger ones are "
               "refused, not made infinite)",
}

NORMS = tuple(C_NORM)
PLACEMENTS = tuple(C_PLACE)
ACTIVATIONS = tuple(C_ACT)
POSITIONS = tuple(C_POS)
DTYPES = tuple(C_DTYPE)
