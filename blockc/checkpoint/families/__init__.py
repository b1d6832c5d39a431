"""Model families: one record per family, naming it on both checkpoint sides.

A :class:`Family` holds everything blockc knows of a family, written once: its Hugging
Face ``model_type`` values and how a ``config.json`` maps onto :class:`blockc.GPTConfig`
(refusing, by field and value, anything the engine would compute differently) and back;
its llama.cpp ``general.architecture`` names and how a GGUF file's metadata maps onto
GPTConfig and back; which configs it is (:attr:`Family.check`, what the savers pick a
family by); and one table of its tensors, each row blockc's name beside the Hugging Face
name and the GGUF name (:class:`TensorName`: GPT-2's ``Conv1D`` weights stored transposed,
``(in, out)``, so a square ``attn.c_proj`` cannot load the wrong way round; row slices of
a fused tensor, q, k and v of ``attn.qkv``; the heads of llama.cpp's q/k reordering).

Both loaders (:mod:`blockc.checkpoint.hf`, :mod:`blockc.checkpoint.gguf`) and both
savers read these records and nothing else about a family: no module outside this one
compares a family's name. A new family is one record here (and :data:`REGISTRY` lists
it); a new way of computing is a GPTConfig field and its C side.

The model core (:mod:`blockc.model`) imports nothing of this layer:
``GPTConfig.from_hf``/``to_hf`` call the converters this module registers with it
(:func:`blockc.model.config.register_hf_codec`) when :mod:`blockc.checkpoint` is
imported, as ``import blockc`` does.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Pattern, Tuple, Union

from ..._errors import BlockcTypeError, BlockcValueError
from ..._files import read_config
from ...model.config import register_hf_codec
from .decoders import GRANITE, OLMO2, SMOLLM3
from .gemma import GEMMA, GEMMA2, GEMMA3
from .gpt2 import GPT2
from .llama import LLAMA, MISTRAL, QWEN2, QWEN3
from .moe import MIXTRAL, QWEN3_MOE
from .phi3 import PHI3
from .record import GGUF_REFUSE, Family, GGUFMetadata, Name, Spec, TensorName

__all__ = ["Family", "TensorName", "GGUFMetadata", "REGISTRY", "FAMILIES", "GGUF_FAMILIES",
           "GGUF_REFUSE", "Name", "Spec", "GPT2", "LLAMA", "QWEN2", "QWEN3", "GRANITE", "SMOLLM3",
           "OLMO2", "GEMMA", "GEMMA2", "GEMMA3", "MISTRAL", "PHI3", "MIXTRAL", "QWEN3_MOE", "family_of",
           "family_of_arch", "family_of_config", "config_to_hf", "hf_fields", "read_config",
           "Wrapper", "WRAPPERS", "wrapper_of", "text_config"]

#: Every family, in the order the savers try them (Phi-3 before Llama: a longrope config
#: is Phi-3's)
REGISTRY: Tuple[Family, ...] = (GPT2, PHI3, LLAMA, QWEN2, QWEN3, GRANITE, SMOLLM3, OLMO2,
                                GEMMA, GEMMA2, GEMMA3, MISTRAL, MIXTRAL, QWEN3_MOE)


def _index(key: Callable[[Family], Tuple[str, ...]]) -> Dict[str, Family]:
    out: Dict[str, Family] = {}
    for fam in REGISTRY:
        for k in key(fam):
            if k in out:
                raise RuntimeError(f"{k!r} names two families")  # pragma: no cover
            out[k] = fam
    return out


#: Hugging Face model_type -> its family
FAMILIES: Dict[str, Family] = _index(lambda fam: fam.model_types)
#: llama.cpp general.architecture -> its family
GGUF_FAMILIES: Dict[str, Family] = _index(lambda fam: fam.architectures)


@dataclass(frozen=True)
class Wrapper:
    """A checkpoint whose language model is one family's, inside a model of more parts
    (Gemma 3's image-text ``Gemma3ForConditionalGeneration``): blockc runs the language
    model on text and loads nothing else.

    Attributes
    ----------
    key : str
        The ``config.json`` field holding the language model's config.
    inner : str
        The language model's ``model_type`` when its config does not say.
    prefix : str
        The language model's tensor names' prefix (taken off on load).
    others : compiled regex
        The other parts' tensor names, which are not loaded (any other name is refused).
    inherited : tuple of str
        Fields of the outer config that override the inner one's (transformers reads them
        from the outer model).
    """

    key: str
    inner: str
    prefix: str
    others: Pattern[str]
    inherited: Tuple[str, ...] = ("tie_word_embeddings", "bos_token_id", "eos_token_id",
                                  "pad_token_id")


#: Hugging Face model_type of a wrapper -> how its language model is found
WRAPPERS: Dict[str, Wrapper] = {
    "gemma3": Wrapper("text_config", "gemma3_text", "language_model.",
                      re.compile(r"^(vision_tower|multi_modal_projector)\.")),
}


def wrapper_of(d: Mapping[str, Any]) -> Optional[Wrapper]:
    """The :class:`Wrapper` of a ``config.json`` dict, or None for a plain language model."""
    mt = d.get("model_type")
    return WRAPPERS.get(mt) if isinstance(mt, str) else None


def text_config(d: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's config of a ``config.json`` dict: ``d`` itself, or a
    wrapper's inner config (a mapping with a ``model_type`` one of :data:`FAMILIES`) with
    the outer fields transformers reads from the outer model."""
    w = wrapper_of(d)
    if w is None:
        return d
    inner = d.get(w.key)
    if not isinstance(inner, Mapping):
        raise BlockcValueError(f"config.json: {w.key} must be an object (a {d['model_type']} "
                               f"model's language model), got {type(inner).__name__}")
    out = dict(inner)
    out.setdefault("model_type", w.inner)
    out.update({k: d[k] for k in w.inherited if d.get(k) is not None})
    if wrapper_of(out) is not None:
        raise BlockcValueError(f"config.json: {w.key}.model_type {out['model_type']!r} wraps "
                               "another model")
    return out


def family_of(d: Mapping[str, Any]) -> Family:
    """The family of a ``config.json`` dict (by its ``model_type``; a wrapper's by its
    language model's, :func:`text_config`)."""
    d = text_config(d)
    mt = d.get("model_type")
    if not isinstance(mt, str):
        raise BlockcValueError(f"config.json: model_type must be a string, one of "
                               f"{', '.join(sorted(FAMILIES))}; got {mt!r}")
    fam = FAMILIES.get(mt)
    if fam is None:
        raise BlockcValueError(f"config.json: model_type {mt!r} is not one blockc runs "
                               f"({', '.join(sorted(FAMILIES))})")
    return fam


def family_of_arch(arch: Any, path: str) -> Family:
    """The family of a GGUF file's ``general.architecture`` (``path`` names the file)."""
    fam = GGUF_FAMILIES.get(arch) if isinstance(arch, str) else None
    if fam is None:
        raise BlockcValueError(f"{path}: general.architecture {arch!r} is not one blockc runs "
                               f"({', '.join(GGUF_FAMILIES)})")
    return fam


def family_of_config(cfg: Any) -> Family:
    """The family a GPTConfig is saved as: the first of :data:`REGISTRY` whose ``check``
    passes (refusing, with every family's reason, a config of none)."""
    why = []
    for fam in REGISTRY:
        if fam.check is None:
            continue
        try:
            fam.check(cfg)
            return fam
        except BlockcValueError as e:
            why.append(f"not {fam.name}: {e}")
    raise BlockcValueError("no checkpoint family blockc writes has this architecture (" +
                           "; ".join(why) + ")")


def config_to_hf(cfg: Any) -> Dict[str, Any]:
    """The transformers config dict of a GPTConfig (the family its architecture is)."""
    fam = family_of_config(cfg)
    assert fam.to_hf is not None  # a family that checks configs writes them
    return fam.to_hf(cfg)


def hf_fields(config: Union[Mapping[str, Any], str, "os.PathLike[str]"]) -> Dict[str, Any]:
    """The GPTConfig fields of a Hugging Face config (a dict, or a ``config.json`` file or
    its directory): what :meth:`blockc.GPTConfig.from_hf` builds its config from."""
    if isinstance(config, (str, os.PathLike)):
        config = read_config(config)
    if not isinstance(config, Mapping):
        raise BlockcTypeError(f"config must be a mapping or a path, got {type(config).__name__}")
    config = text_config(config)
    return family_of(config).config(config)


register_hf_codec(hf_fields, config_to_hf)
