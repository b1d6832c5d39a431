"""The model core: what a GPT is, without checkpoint I/O, training or generation.

- :mod:`blockc.model.config`: :class:`GPTConfig`, the presets, the parameter
  counts (the formula and its breakdown), and the option tuples with their C
  enum values.
- :mod:`blockc.model.layout`: where each tensor of the parameter buffer lives
  (:func:`layout`, :class:`Tensor`), each matrix's format, the C config struct;
- :mod:`blockc.model.cache`: :class:`KVCache`;
- :mod:`blockc.model.core`: :class:`Model` (the parameter buffer, tensor reads and
  writes, the C handles, the per-thread workspace, the forward pass).

:class:`blockc.GPT` (in :mod:`blockc.gpt`) is ``Model`` with three mixins, each in
its own module, each importing this package and never :mod:`blockc.gpt`:
:class:`blockc.hf.PretrainedMixin` (``from_pretrained``, ``save_pretrained``),
:class:`blockc.train.TrainingMixin` (``loss``, ``grad``, ``train_step``) and
:class:`blockc.generation.GenerationMixin` (``generate``, ``stream``).

The internal interface
----------------------
Code outside this package (the mixins, :mod:`blockc.hf`, :mod:`blockc.train`,
:mod:`blockc.generation`, the benches and the tests) uses only these names,
never a model's underscored attributes:

``m.config``, ``m.dtype``, ``m.dtypes``, ``m.params``, ``m.nbytes``
    Public: the config, the matrices' storage (one format, or ``"mixed"``:
    :data:`MIXED`), each matrix's format (name -> format, always), the raw buffer
    (1-D uint8), its size. ``Model(cfg, dtype=..., dtypes={name: format})`` and
    ``from_state_dict``/``random`` with ``dtypes=`` give matrices their own formats;
    ``m.astype(d)`` makes every one ``d``. Training needs every matrix float32.
``m.layout``
    ``name -> Tensor(offset, nbytes, dtype, packed, shape, parts)`` of every tensor of the
    buffer, in state-dict order (``parts``: an attn.qkv.weight whose q, k and v rows have
    different formats, ``m.dtypes[name]`` then a (q, k, v) tuple, is three packed
    matrices, :meth:`Tensor.pieces` each one's rows, offset, bytes and format) (:func:`layout` computes it for any config/dtype/
    dtypes; :func:`formats` resolves a ``dtypes`` mapping, :func:`matrix_slots`
    numbers the matrices as ``bc_gpt_config.dtypes`` does).
``m.read_tensor(name)``, ``m.write_tensor(name, a, transposed=False)``
    One tensor as float32 (a view for vectors, an unpacked copy for matrices);
    store one (packed again for a matrix; GPT-2's transposed Conv1D weights too).
``m.c_config``, ``m.c_params``
    The C handles: ``bc_gpt_config *`` (``cfg.c_struct(dtype)``, or for a mixed model
    its own struct whose ``dtypes`` points to an ``int[]`` the model owns) and ``char *``
    over the buffer, for the ``lib.bc_gpt_*`` entry points.
``m.thread_state``
    A ``threading.local``: each thread's workspaces (training keeps its own there).
``m.run(ids, cache=None, *, last_only, want_hidden, want_logits, row)``
    The forward pass: (logits, hidden). ``m(ids)`` and the generation loop call it.
``m.new_cache(batch, capacity, dtype)``, :data:`CACHE_DTYPES`
    A :class:`KVCache` for ``run``; the element types a cache can keep (name ->
    NumPy type).
``m.special_ids``
    config.json's bos/eos/pad token ids of a loaded checkpoint (written back on save).
:func:`check_ids`, :func:`as_config`, :func:`same_bits`, :func:`aligned_copy`
    Validation of token ids against a config, of a config's type; the bitwise
    float32 comparison (a tied head); a 64-byte aligned copy of a buffer.
"""
from __future__ import annotations

from .config import (ACTIVATIONS, C_DTYPE, DTYPES, GPT_PRESETS, NORMS, PLACEMENTS, POSITIONS,
                     GPTConfig, as_config, block_parameter_parts, gpt2_shaped,
                     gpt_parameter_count, gpt_parameter_formula, parameter_breakdown)
from .cache import CACHE_DTYPES, KVCache
from .core import Model, same_bits
from .embed import POOLINGS, EmbeddingMixin
from .layout import MIXED, QKV, Format, Tensor, check_ids, formats, layout, matrix_slots
from .._native import aligned_copy

__all__ = ["EmbeddingMixin", "POOLINGS", "GPTConfig", "GPT_PRESETS", "NORMS", "PLACEMENTS", "ACTIVATIONS", "POSITIONS",
           "DTYPES", "C_DTYPE", "as_config", "gpt_parameter_count", "gpt_parameter_formula",
           "block_parameter_parts", "parameter_breakdown", "gpt2_shaped",
           "Model", "KVCache", "CACHE_DTYPES", "Tensor", "layout", "formats", "matrix_slots", "MIXED", "QKV", "Format",
           "check_ids",
           "same_bits", "aligned_copy"]
