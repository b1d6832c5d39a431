"""llama.cpp's quantisation mixes (issue 51): which ggml type each matrix of a GGUF file of a
given dtype gets (:func:`recipe`, llama.cpp's llama_tensor_get_type and
tensor_type_fallback of src/llama-quant.cpp, read from their rules, not their code), and
the file types save writes (:data:`GGUF_DTYPES`)."""
from __future__ import annotations

from typing import Dict, Optional

from ..reference import ggml

__all__ = ["MIXES", "GGUF_DTYPES", "FILE_TYPE", "recipe"]

#: llama.cpp's mixes save writes (its LLAMA_FTYPE_MOSTLY_* recipes, :func:`recipe`) -> the
#: ggml type most matrices get. IQ4_NL, IQ4_XS and Q2_K are llama.cpp's ftypes of those
#: names (llama-quantize's IQ4_XS, Q2_K): mixes too, as there; Q3_K, Q4_K, Q5_K, Q6_K
#: and the other types are every matrix that type
MIXES: Dict[str, str] = {"Q4_K_M": "Q4_K", "Q5_K_M": "Q5_K", "Q4_K_S": "Q4_K", "Q5_K_S": "Q5_K",
                         "Q2_K": "Q2_K", "Q3_K_S": "Q3_K", "Q3_K_M": "Q3_K", "Q3_K_L": "Q3_K",
                         "IQ4_NL": "IQ4_NL", "IQ4_XS": "IQ4_XS"}

#: dtype names save accepts: ggml type names, and llama.cpp's mixed recipes
GGUF_DTYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K",
               "Q6_K", "Q3_K", "Q4_K_M", "Q5_K_M", "Q4_K_S", "Q5_K_S", "Q2_K", "Q3_K_S",
               "Q3_K_M", "Q3_K_L", "IQ4_NL", "IQ4_XS")

# a K-quant of rows that are not whole blocks of 256 falls back, as llama.cpp's quantiser
# does (tensor_type_fallback)
_FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0", "Q2_K": "Q4_0", "Q3_K": "Q4_0",
             "IQ4_XS": "IQ4_NL"}


def _more_bits(i: int, n: int) -> bool:
    """llama.cpp's use_more_bits: the first and last eighth of the layers, and every third."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _mix_type(dtype: str, name: str, layers: int, gqa: int) -> Optional[str]:
    """llama.cpp's llama_tensor_get_type for a layer matrix of a mix (None: the mix's base
    type). Its rules for attn_v, ffn_down (ffn_down_exps too), attn_output and a fused
    attn_qkv, as src/llama-quant.cpp has them for a model of fewer than 8 experts. Left out:
    the rules for 8 experts (attn_v and attn_k Q8_0, attn_output Q5_K), Falcon's and 70B
    models' (Llama 2 70B's attn_v one type up), an imatrix's (IQ4_NL/IQ4_XS's ffn_down
    bump is the one without). A fused attn_qkv follows llama.cpp's own branch for it
    (Q3_K_M/L: Q4_K; Q4_K_M: Q5_K; Q5_K_M: Q6_K), which newer llama.cpp reaches only
    through attn_v's."""
    parts = name.split(".")
    i = int(parts[1]) if len(parts) > 2 and parts[0] == "blk" else 0
    if ".attn_v." in name:
        return {"Q2_K": "Q4_K" if gqa >= 4 else "Q3_K",
                "Q3_K_M": "Q5_K" if i < 2 else "Q4_K",
                "Q3_K_L": "Q5_K",
                "IQ4_NL": "Q5_K" if gqa >= 4 else None,
                "IQ4_XS": "Q5_K" if gqa >= 4 else None,
                "Q4_K_M": "Q6_K" if _more_bits(i, layers) else None,
                "Q5_K_M": "Q6_K" if _more_bits(i, layers) else None,
                "Q4_K_S": "Q5_K" if i < 4 else None}.get(dtype)
    if ".ffn_down" in name:
        return {"Q2_K": "Q3_K",
                "Q3_K_M": "Q5_K" if i < layers // 16 else "Q4_K",
                "Q3_K_L": "Q5_K",
                "Q4_K_M": "Q6_K" if _more_bits(i, layers) else None,
                "IQ4_NL": "Q5_K" if i < layers // 8 else None,
                "IQ4_XS": "Q5_K" if i < layers // 8 else None,
                "Q5_K_M": "Q6_K" if _more_bits(i, layers) else None,
                "Q4_K_S": "Q5_K" if i < layers // 8 else None}.get(dtype)
    if ".attn_output." in name:
        return {"Q2_K": "Q3_K", "Q3_K_M": "Q4_K", "Q3_K_L": "Q5_K"}.get(dtype)
    if ".attn_qkv." in name:
        return {"Q3_K_M": "Q4_K", "Q3_K_L": "Q4_K", "Q4_K_M": "Q5_K",
                "Q5_K_M": "Q6_K"}.get(dtype)
    return None


def recipe(dtype: str, name: str, layers: int, cols: int, tied: bool = False,
           gqa: int = 1) -> str:
    """The ggml type of matrix ``name`` (llama.cpp's tensor name) with ``cols`` columns in a
    file of ``dtype``: the type itself, or for a mix (:data:`MIXES`) llama.cpp's choice:
    Q6_K for the output (the token embedding of a ``tied`` model with no output tensor),
    and by the mix attn_v (``gqa``: query heads per key/value head), ffn_down, attn_output
    and a fused attn_qkv of some layers a type up (:func:`_mix_type`: Q4_K_M's attn_v and
    ffn_down Q6_K in the layers ``use_more_bits`` picks, Q2_K's Q3_K or Q4_K, ...); a
    K-quant falls back when ``cols`` is not a multiple of 256 (Q6_K to Q8_0, Q4_K to Q5_0,
    Q2_K and Q3_K to Q4_0, IQ4_XS to IQ4_NL, ...), then F16, as llama.cpp's
    tensor_type_fallback."""
    base = MIXES.get(dtype)
    if base is not None:
        t = base
        if name == "output.weight" or (tied and name == "token_embd.weight"):
            t = "Q6_K"
        elif name.startswith("blk."):
            t = _mix_type(dtype, name, layers, gqa) or base
    else:
        t = dtype
    bs = ggml.BLOCKS[t][0]
    if cols % bs:
        t = _FALLBACK.get(t, t)
        if cols % ggml.BLOCKS[t][0]:
            t = "F16" if t not in ("F32", "BF16") else t
    return t


#: llama.cpp's LLAMA_FTYPE_* of each file type (general.file_type)
FILE_TYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9,
              "Q2_K": 10, "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13,
              "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18,
              "IQ4_NL": 25, "IQ4_XS": 30, "BF16": 32, "Q3_K": 11, "Q4_K": 15, "Q5_K": 17}
