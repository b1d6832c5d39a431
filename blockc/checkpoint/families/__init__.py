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
from typing import Any, Callable, Dict, Mapping, Tuple, Union

from ..._errors import BlockcTypeError, BlockcValueError
from ..._files import read_config
from ...model.config import register_hf_codec
from .decoders import GRANITE, OLMO2, SMOLLM3
from .gemma import GEMMA2, GEMMA3
from .gpt2 import GPT2
from .llama import LLAMA, MISTRAL, QWEN2, QWEN3
from .moe import MIXTRAL, QWEN3_MOE
from .phi3 import PHI3
from .record import GGUF_REFUSE, Family, GGUFMetadata, Name, Spec, TensorName

__all__ = ["Family", "TensorName", "GGUFMetadata", "REGISTRY", "FAMILIES", "GGUF_FAMILIES",
           "GGUF_REFUSE", "Name", "Spec", "GPT2", "LLAMA", "QWEN2", "QWEN3", "GRANITE", "SMOLLM3",
           "OLMO2", "GEMMA2", "GEMMA3", "MISTRAL", "PHI3", "MIXTRAL", "QWEN3_MOE", "family_of",
           "family_of_arch", "family_of_config", "config_to_hf", "hf_fields", "read_config"]

#: Every family, in the order the savers try them (Phi-3 before Llama: a longrope config
#: is Phi-3's)
REGISTRY: Tuple[Family, ...] = (GPT2, PHI3, LLAMA, QWEN2, QWEN3, GRANITE, SMOLLM3, OLMO2,
                                GEMMA2, GEMMA3, MISTRAL, MIXTRAL, QWEN3_MOE)


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


def family_of(d: Mapping[str, Any]) -> Family:
    """The family of a ``config.json`` dict (by its ``model_type``)."""
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
    return family_of(config).config(config)


register_hf_codec(hf_fields, config_to_hf)
