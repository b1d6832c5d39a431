"""The option names the C library knows and their enum values, spelled once.

The block (:class:`blockc.BlockConfig`), the model (:class:`blockc.GPTConfig`),
the packed weights (:mod:`blockc.ops`) and the command line all read these.
"""
from __future__ import annotations

from typing import Dict, Tuple

from ._native import CFormat, c_formats, c_ggml_converts, lib

__all__ = ["NORMS", "PLACEMENTS", "ACTIVATIONS", "POSITIONS", "DTYPES",
           "C_NORM", "C_PLACE", "C_ACT", "C_POS", "C_DTYPE", "VALUE_LIMIT",
           "GPT_PLACEMENTS", "GPT_ACTIVATIONS", "C_GPT_PLACE", "C_GPT_ACT", "C_QK_NORM",
           "QK_NORMS",
           "WHOLE_BLOCKS", "MAX_COLS", "FORMATS", "GGML_CONVERTS"]

#: the norm: RMSNorm (gain), LayerNorm (gain and shift), none (chapter 24, exercise 2)
C_NORM: Dict[str, int] = {"rms": lib.BC_NORM_RMS, "layer": lib.BC_NORM_LAYER,
                          "none": lib.BC_NORM_NONE}
#: the norm before each sublayer or after each sum
C_PLACE: Dict[str, int] = {"pre": lib.BC_PLACE_PRE, "post": lib.BC_PLACE_POST}
#: the MLP's activation (swiglu: the gated MLP)
C_ACT: Dict[str, int] = {"gelu_tanh": lib.BC_ACT_GELU_TANH, "gelu": lib.BC_ACT_GELU,
                         "relu": lib.BC_ACT_RELU, "swiglu": lib.BC_ACT_SWIGLU}
#: the whole model's (GPTConfig's) placements and activations: the block's and the
#: checkpoint families' (sandwich: Gemma 2/3's norms before and after each sublayer; output:
#: OLMo2's norm on each sublayer's output; geglu: Gemma's gelu_tanh-gated MLP)
C_GPT_PLACE: Dict[str, int] = dict(C_PLACE, sandwich=lib.BC_PLACE_SANDWICH,
                                   output=lib.BC_PLACE_OUTPUT)
C_GPT_ACT: Dict[str, int] = dict(C_ACT, geglu=lib.BC_ACT_GEGLU)
#: the whole model's q/k norms: none, per head (Qwen3, Gemma 3), the whole projection (OLMo2)
C_QK_NORM: Dict[str, int] = {"none": lib.BC_QK_NORM_NONE, "head": lib.BC_QK_NORM_HEAD,
                             "all": lib.BC_QK_NORM_ALL}
#: a learned position table or rotary embeddings
C_POS: Dict[str, int] = {"learned": lib.BC_POS_LEARNED, "rope": lib.BC_POS_ROPE}
#: every weight format, a row of the C library's formats' table (csrc/kernels/formats.c)
#: each: its block, bytes, bounds, the GGUF type whose blocks it holds (``ggml_type``, a
#: GGUF type id, or -1), whether its products are integer dot products (``integer``), the
#: weights it cannot hold (``limit``)
FORMATS: Dict[str, CFormat] = {f.name: f for f in c_formats()}
#: how a packed matrix stores its weights: name -> BC_DTYPE_*, in the table's order
C_DTYPE: Dict[str, int] = {name: f.code for name, f in FORMATS.items()}
#: the formats whose matrices' rows must be whole blocks, and the block (K-quants: 256)
WHOLE_BLOCKS: Dict[str, int] = {name: f.block for name, f in FORMATS.items() if f.whole}
#: the formats whose matrices hold at most so many columns (the integer-dot ones: 65536)
MAX_COLS: Dict[str, int] = {name: f.max_cols for name, f in FORMATS.items() if f.max_cols}
#: what a format cannot hold (the C pack's BC_EVALUE), for the messages that say so
VALUE_LIMIT: Dict[str, str] = {name: f.limit for name, f in FORMATS.items() if f.limit}
#: GGUF type id -> the GGUF type ids whose blocks the C library converts to its blocks of
#: the same weights (:func:`blockc.ops.convert_ggml`)
GGML_CONVERTS: Dict[int, Tuple[int, ...]] = c_ggml_converts()

NORMS = tuple(C_NORM)
PLACEMENTS = tuple(C_PLACE)
ACTIVATIONS = tuple(C_ACT)
POSITIONS = tuple(C_POS)
GPT_PLACEMENTS = tuple(C_GPT_PLACE)
GPT_ACTIVATIONS = tuple(C_GPT_ACT)
QK_NORMS = tuple(C_QK_NORM)
DTYPES = tuple(C_DTYPE)
