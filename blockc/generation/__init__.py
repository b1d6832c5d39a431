"""Generation: choosing the next token and the loop that extends prompts.

- :mod:`blockc.generation.config`: :class:`GenerationConfig`, every option of a
  generation in one place, read from a checkpoint's config.json and
  generation_config.json (each option declared once, with what the commands' flags
  and the server's request fields are made from), and :func:`end_ids`, the one rule
  of where a generation ends.
- :mod:`blockc.generation.logits`: the logits processors and the sampler
  (:class:`SamplingOptions`, :func:`next_tokens`, ...), in NumPy.
- :mod:`blockc.generation.loop`: :class:`GenerationMixin` (``GPT.generate`` and
  ``GPT.stream``, ``prepare_generation``), :class:`Generation`, the steps of one
  generation, and :class:`StopStrings`, the incremental stop-string check.
- :mod:`blockc.generation.constraints`: :class:`Constraint`, constrained decoding (a
  grammar's token mask on each row's logits: JSON Schema, regex, Lark, GBNF, tool calls;
  the engine, llguidance, is the ``structured`` extra and imported only when used).
- :mod:`blockc.generation.defaults`: what a run takes from its model by default: the
  sampling (:func:`default_sampling`, the model's stated options, else llama.cpp's) and
  the context (:func:`context_size`, the model's bounded by a memory budget).
- :mod:`blockc.generation.chat`: :class:`Conversation`, kept inside a context.
"""
from __future__ import annotations

from .chat import Conversation
from .config import GenerationConfig, ResolvedGeneration
from .ends import end_ids, end_token_ids
from .constraints import Constraint
from .logits import (SamplingOptions, apply_penalty, min_p_mask, next_tokens, processed_logits,
                     top_k_mask, top_p_mask)
from .defaults import context_size, default_sampling
from .loop import Generation, GenerationMixin, StopStrings

__all__ = ["SamplingOptions", "next_tokens", "processed_logits", "apply_penalty", "top_k_mask",
           "top_p_mask", "min_p_mask", "GenerationMixin", "Generation", "StopStrings",
           "GenerationConfig", "ResolvedGeneration", "end_ids", "end_token_ids", "Constraint",
           "Conversation", "default_sampling", "context_size"]
