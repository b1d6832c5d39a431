"""Rotary scaling in GGUF metadata (issue 50): llama.cpp's ``{arch}.rope.scaling.*`` keys
read into the same ``rope_parameters`` a Hugging Face config gives (so the C library
gets the same rope fields either way), and written back from them.

llama.cpp's converter (``convert_hf_to_gguf.py``, the text model's
``set_gguf_parameters``) writes, for a config's rope parameters:

- ``linear``: ``rope.scaling.type`` "linear" and ``rope.scaling.factor``;
- ``yarn``: ``rope.scaling.type`` "yarn", ``rope.scaling.factor``,
  ``rope.scaling.original_context_length`` (``original_max_position_embeddings``), and
  when the config has them ``rope.scaling.yarn_attn_factor`` (``attention_factor``),
  ``rope.scaling.yarn_beta_fast``, ``rope.scaling.yarn_beta_slow`` and
  ``rope.scaling.yarn_ext_factor`` (blockc writes these; it reads ``attention_factor``
  from ``rope.scaling.attn_factor`` too, where an older converter wrote OLMo2's);
- ``llama3``: no key, the tensor ``rope_freqs.weight`` (read by
  :func:`blockc.checkpoint.families.llama.gguf_rope`);
- ``dynamic``: nothing (llama.cpp has no dynamic NTK scaling), so blockc writes no
  such file; ``longrope``: its factors as tensors, not read here.

Anything else under ``rope.scaling`` that changes the angles (DeepSeek's
``yarn_log_multiplier``, an extrapolation factor other than 1) is refused by name.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from ..._errors import BlockcValueError
from .record import GGUFMetadata

__all__ = ["ROPE_SCALING_KEYS", "gguf_scaling", "gguf_scaling_keys", "gguf_scaling_check"]

#: the rope.scaling.* keys (under the architecture) :func:`gguf_scaling` reads
ROPE_SCALING_KEYS = ("rope.scaling.type", "rope.scaling.factor", "rope.scaling.attn_factor",
                     "rope.scaling.original_context_length", "rope.scaling.yarn_attn_factor",
                     "rope.scaling.yarn_beta_fast", "rope.scaling.yarn_beta_slow",
                     "rope.scaling.yarn_ext_factor", "rope.scaling.yarn_log_multiplier")

def gguf_scaling(md: GGUFMetadata, context: int) -> Optional[Dict[str, Any]]:
    """The rope_parameters of a file's ``rope.scaling.*`` keys (None: no scaling), as
    transformers would hold them for the config the file was converted from
    (``max_position_embeddings`` the file's context length); what blockc does not
    compute refused by key and value."""
    kind = md.get("rope.scaling.type", "none")
    if not isinstance(kind, str):
        raise md.fail(f"metadata key {md.key('rope.scaling.type')!r} must be a string, "
                      f"got {kind!r}")
    factor = md.real("rope.scaling.factor", 1.0)
    if kind == "none" and factor != 1.0:
        raise md.refuse(md.key("rope.scaling.factor"), factor,
                        "rotary angles scaled with no rope.scaling.type saying how")
    if kind == "yarn" and md.get("rope.scaling.factor") is None:
        raise md.fail(f"metadata key {md.key('rope.scaling.factor')!r} is missing: "
                      f"{md.key('rope.scaling.type')}='yarn' needs it")
    if kind == "none" or (kind == "linear" and factor == 1.0):
        for k in ROPE_SCALING_KEYS[2:]:
            neutral = {"rope.scaling.attn_factor": 1.0, "rope.scaling.yarn_log_multiplier": 0.0}
            v = md.get(k)
            if k in neutral and v is not None and v != neutral[k]:
                raise md.refuse(md.key(k), v, "attention scaled without rotary scaling")
        return None
    if not factor > 0:
        raise md.refuse(md.key("rope.scaling.factor"), factor, "a rotary scaling factor of 0")
    if kind == "linear":
        return {"rope_type": "linear", "factor": factor}
    if kind != "yarn":
        raise md.refuse(md.key("rope.scaling.type"), kind,
                        "rotary scaling blockc reads from GGUF only as none, linear, yarn "
                        "(and llama3's rope_freqs)")
    if md.real("rope.scaling.yarn_log_multiplier", 0.0) != 0.0:
        raise md.refuse(md.key("rope.scaling.yarn_log_multiplier"),
                        md.get("rope.scaling.yarn_log_multiplier"),
                        "yarn's attention scaled by DeepSeek's log multiplier")
    ext = md.file.get(md.key("rope.scaling.yarn_ext_factor"))
    if ext is not None and ext != 1.0:
        raise md.refuse(md.key("rope.scaling.yarn_ext_factor"), ext,
                        "yarn extrapolating by other than 1")
    out: Dict[str, Any] = {"rope_type": "yarn", "factor": factor,
                           "original_max_position_embeddings":
                           md.integer("rope.scaling.original_context_length", context),
                           "max_position_embeddings": context}
    attn = [md.real(k, 0.0) for k in ("rope.scaling.yarn_attn_factor", "rope.scaling.attn_factor")
            if md.get(k) is not None]
    if len(set(attn)) > 1:
        raise md.fail(f"{md.key('rope.scaling.yarn_attn_factor')}={attn[0]} and "
                      f"{md.key('rope.scaling.attn_factor')}={attn[1]} disagree")
    if attn:
        out["attention_factor"] = attn[0]
    for key, ours in (("rope.scaling.yarn_beta_fast", "beta_fast"),
                      ("rope.scaling.yarn_beta_slow", "beta_slow")):
        if md.get(key) is not None:
            out[ours] = md.real(key, 0.0)
    return out


def gguf_scaling_check(cfg: Any, arch: str) -> None:
    """Refuse (by field) a linear or yarn scaling a GGUF file cannot hold."""
    p = dict(cfg.rope_parameters or ())
    if p.get("rope_type") != "yarn":
        return
    for k in ("mscale", "mscale_all_dim"):
        if p.get(k):
            raise BlockcValueError(f"GPTConfig.rope_parameters.{k}={p[k]!r}: llama.cpp's converter "
                                   f"writes no {k} to a {arch} GGUF file")
    if p.get("truncate", True) is not True:
        raise BlockcValueError("GPTConfig.rope_parameters.truncate=False: a GGUF file's yarn "
                               "truncates its correction range")


def gguf_scaling_keys(cfg: Any, arch: str) -> Dict[str, Tuple[str, Any]]:
    """The ``rope.scaling.*`` metadata of a config's linear or yarn scaling, as llama.cpp's
    converter writes it for ``arch`` (none for other rope types)."""
    p = dict(cfg.rope_parameters or ())
    kind = p.get("rope_type", "default")
    if kind == "linear":
        return {"rope.scaling.type": ("STRING", "linear"),
                "rope.scaling.factor": ("FLOAT32", float(p["factor"]))}
    if kind != "yarn":
        return {}
    gguf_scaling_check(cfg, arch)
    orig = int(p["original_max_position_embeddings"])
    factor = p.get("factor")
    if factor is None:  # transformers' default: the context over the original one
        factor = p["max_position_embeddings"] / orig
    out = {"rope.scaling.type": ("STRING", "yarn"), "rope.scaling.factor": ("FLOAT32", float(factor)),
           "rope.scaling.original_context_length": ("UINT32", orig)}
    if p.get("attention_factor") is not None:
        out["rope.scaling.yarn_attn_factor"] = ("FLOAT32", float(p["attention_factor"]))
    for ours, key in (("beta_fast", "rope.scaling.yarn_beta_fast"),
                      ("beta_slow", "rope.scaling.yarn_beta_slow")):
        if p.get(ours) is not None:
            out[key] = ("FLOAT32", float(p[ours]))
    return out
