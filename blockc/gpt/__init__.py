"""The whole decoder-only model in C: chapter 6's GPT-2, and every variant of chapter
24's block as a whole model (Llama's RMSNorm, RoPE, SwiGLU, grouped K/V heads).

::

    cfg = blockc.GPTConfig(vocab=50257, context=1024, width=768, heads=12, layers=12)
    m = blockc.GPT.random(cfg, seed=0)        # N(0, 0.02) weights, zero biases, unit gains
    m = blockc.GPT.from_state_dict(sd, cfg)   # NumPy arrays or torch tensors
    logits = m(ids)                           # ids (B, T) ints -> (B, T, vocab) float32
    out = m.generate(ids, max_new_tokens=20)  # greedy; temperature/top_k/seed to sample
    q = m.astype("q8_0")                      # 8-bit weights ("bfloat16", "float16", "q4_0", ...)

All parameters live in one buffer whose layout (the byte offset, storage and
shape of every tensor) the C library computes, in the chapter's PyTorch
``GPT.state_dict()`` order and names. The weight matrices are stored packed
for the kernels (panels of 16 rows, in the model's :attr:`GPT.dtype`:
float32, bfloat16, float16 or llama.cpp's q8_0, q4_0 and q5_0; or each matrix in its own
format, :attr:`GPT.dtypes`, when ``dtype`` is "mixed", as a Q4_K_M GGUF file loads);
vectors (biases, norm gains) and the position table are float32.
:meth:`GPT.state_dict` gives the vectors and the position table as views of the buffer and the matrices unpacked, as float32
copies (a quantised model's dequantised weights: exactly what it computes
with); :meth:`GPT.load_state_dict` writes weights back.

Tied head and ``head.weight``: PyTorch's ``state_dict()`` of the tied chapter
model lists ``head.weight`` too (the same tensor as ``token.weight`` under a
second name). :meth:`GPT.from_state_dict` therefore accepts ``head.weight`` for
a tied config when it equals ``token.weight`` exactly (anything else is a
``ValueError``), and :meth:`GPT.state_dict` of a tied model lists only
``token.weight`` (pass ``keep_tied=True`` to also get ``head.weight``, e.g. for
``torch``'s ``load_state_dict(strict=True)``).

Computation is float32 throughout (lower-precision weights are converted to
float32 in registers); float64 parameters are converted to float32.

The model core is :mod:`blockc.model`; this module composes :class:`GPT` from it
and the mixins, and keeps every name it always had.
"""
from __future__ import annotations

from ..generation import GenerationMixin
from ..checkpoint.gguf import GGUFMixin
from ..checkpoint.hf import PretrainedMixin
from ..model import (ACTIVATIONS, DTYPES, GPT_PRESETS, EmbeddingMixin, NORMS, PLACEMENTS, POSITIONS, GPTConfig,  # noqa: F401
                    KVCache, Model, gpt_parameter_count, gpt_parameter_formula)
from ..train import TrainingMixin

__all__ = ["GPTConfig", "GPT", "KVCache", "gpt_parameter_count", "gpt_parameter_formula",
           "GPT_PRESETS", "DTYPES"]

class GPT(GenerationMixin, TrainingMixin, PretrainedMixin, GGUFMixin, EmbeddingMixin, Model):
    """The model, its parameters in one buffer (matrices packed in :attr:`dtype`), computed in C.

    The model core (:class:`blockc.model.Model`: the buffer, tensors, forward pass
    and cache) with checkpoint I/O (:class:`blockc.hf.PretrainedMixin`), training
    (:class:`blockc.train.TrainingMixin`) and generation
    (:class:`blockc.generation.GenerationMixin`) and embeddings
    (:class:`blockc.model.EmbeddingMixin`) mixed in.
    """
