"""The defaults a run takes from its model: sampling and context size, one rule for
``blockc chat``, ``blockc generate`` and ``blockc serve``.

- :func:`default_sampling`: the sampling options the model states (a checkpoint's
  ``generation_config.json`` when it samples, a GGUF file's ``general.sampling.*``
  keys: :meth:`GenerationConfig.from_pretrained`, :meth:`GenerationConfig.from_gguf`),
  each one it does not state llama.cpp's (:data:`LLAMA_CPP_SAMPLING`), with where
  they came from in words. An explicit flag or request field is applied on top by
  the caller (``config.replace(...)``) and always wins.
- :func:`context_size`: the context a run uses by default, the model's bounded by the
  tokens whose KV cache fits a memory budget (:func:`memory_budget`: a quarter of the
  memory available, ``MemAvailable`` of ``/proc/meminfo``), and
  :func:`describe_context`, the sentence a command prints about it.

::

    g, where = default_sampling(m.generation_config, path)   # llama.cpp's unless stated
    g = g.replace(temperature=0.7)                            # a flag wins
    n = context_size(m.config)                                # <= m.config.context
"""
from __future__ import annotations

import os
from typing import Any, Dict, Optional, Tuple

from .._args import as_int
from .._errors import BlockcTypeError, BlockcValueError
from ..model.cache import ring_rows
from .config import SAMPLING_FIELDS, GenerationConfig

__all__ = ["LLAMA_CPP_SAMPLING", "default_sampling", "describe_sampling", "sampling_source",
           "cache_bytes_per_token", "memory_budget", "context_size", "describe_context",
           "MEMORY_FRACTION"]

#: llama.cpp's sampling defaults (common/common.h: temp 0.80, top_k 40, top_p 0.95,
#: min_p 0.05, penalty_repeat 1.00): each option the model does not state
LLAMA_CPP_SAMPLING: Dict[str, Any] = {"temperature": 0.8, "top_k": 40, "top_p": 0.95,
                                      "min_p": 0.05, "repetition_penalty": 1.0}

#: the share of the available memory a run's KV cache may take by default
MEMORY_FRACTION = 0.25


def _check(config: Any) -> None:
    if not isinstance(config, GenerationConfig):
        raise BlockcTypeError("config must be a blockc.generation.GenerationConfig, got "
                              f"{type(config).__name__}")


def sampling_source(path: Optional[str]) -> str:
    """Where a model at ``path`` states its sampling: ``"generation_config.json"`` for
    a checkpoint directory, ``"the GGUF file's general.sampling keys"`` for a .gguf
    file, ``"the model's generation config"`` when unknown."""
    if path is None:
        return "the model's generation config"
    if str(path).endswith(".gguf") and not os.path.isdir(path):
        return "the GGUF file's general.sampling keys"
    return "generation_config.json"


def default_sampling(config: GenerationConfig, path: Optional[str] = None
                     ) -> Tuple[GenerationConfig, str]:
    """The sampling a run takes by default from its model, and where it came from.

    The options ``config`` states (a temperature above 0, or any of top-k, top-p,
    min-p, repetition penalty) are kept; each other one is llama.cpp's
    (:data:`LLAMA_CPP_SAMPLING`), as llama.cpp does with a GGUF file's
    ``general.sampling.*`` keys. A config stating none (a checkpoint without
    ``generation_config.json``, or whose ``do_sample`` is false) gets llama.cpp's
    defaults whole: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, repetition
    penalty 1 (none).

    Parameters
    ----------
    config : GenerationConfig
        The model's (``m.generation_config``).
    path : str, optional
        The model's directory or file, to name the source (:func:`sampling_source`).

    Returns
    -------
    (GenerationConfig, str)
        ``config`` with every sampling option set (its end ids and the rest unchanged),
        and where they came from in words.

    Raises
    ------
    TypeError
        ``config`` is not a GenerationConfig.

    Examples
    --------
    >>> g, where = default_sampling(GenerationConfig())
    >>> g.temperature, g.top_k, where
    (0.8, 40, "llama.cpp's defaults (the model states none)")
    >>> g, where = default_sampling(GenerationConfig(temperature=0.6, top_p=0.9))
    >>> g.temperature, g.top_p, g.top_k
    (0.6, 0.9, 40)
    """
    _check(config)
    stated = [k for k in SAMPLING_FIELDS if getattr(config, k) is not None
              and not (k == "temperature" and config.temperature == 0.0)]
    if not stated:
        return config.replace(**LLAMA_CPP_SAMPLING), "llama.cpp's defaults (the model states none)"
    rest = [k for k in SAMPLING_FIELDS if k not in stated]
    where = f"{sampling_source(path)} ({', '.join(stated)})"
    if rest:
        where += f", llama.cpp's defaults ({', '.join(rest)})"
    return config.replace(**{k: LLAMA_CPP_SAMPLING[k] for k in rest}), where


def describe_sampling(config: GenerationConfig) -> str:
    """``"temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, repetition_penalty 1"``: the
    sampling options set (``"greedy"`` at temperature 0, where only the repetition
    penalty applies).

    Examples
    --------
    >>> describe_sampling(GenerationConfig(temperature=0.7, top_k=5))
    'temperature 0.7, top_k 5'
    """
    _check(config)
    names = SAMPLING_FIELDS if config.temperature > 0.0 else ("repetition_penalty",)
    text = ", ".join(f"{k} {getattr(config, k):g}" for k in names if getattr(config, k) is not None
                     and not (k == "repetition_penalty" and config.temperature == 0.0
                              and config.repetition_penalty == 1.0))
    return text if config.temperature > 0.0 else ", ".join(filter(None, ("greedy", text)))


def cache_bytes_per_token(config: Any, cache_dtype: str = "float32") -> int:
    """The KV cache's bytes per position of one row: keys and values of every layer.

    Parameters
    ----------
    config : blockc.GPTConfig
    cache_dtype : {"float32", "float16", "q8_0", "q4_0"}, optional

    Returns
    -------
    int

    Examples
    --------
    >>> from blockc import GPTConfig
    >>> cache_bytes_per_token(GPTConfig(vocab=8, context=8, width=8, heads=2, layers=3))
    192
    """
    per = {"float32": 4.0, "float16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}
    if cache_dtype not in per:
        raise BlockcValueError(f"cache_dtype must be one of {tuple(per)}, got {cache_dtype!r}")
    return int(2 * config.layers * config.kv_heads_ * config.head_dim_ * per[cache_dtype])


def _available_memory() -> Optional[int]:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    try:  # not Linux: the physical memory
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def memory_budget() -> int:
    """The bytes a run's KV cache may take by default: :data:`MEMORY_FRACTION` (a
    quarter) of the memory available now (``MemAvailable`` in ``/proc/meminfo``; the
    physical memory where there is none; of 4 GiB when neither can be read), at least 64 MiB.

    Returns
    -------
    int
    """
    avail = _available_memory()
    return max(64 << 20, int((4 << 30 if avail is None else avail) * MEMORY_FRACTION))


def context_size(config: Any, cache_dtype: str = "float32", budget: Optional[int] = None,
                 rows: int = 1) -> int:
    """The context a run uses by default: the model's (``config.context``), bounded by
    the tokens whose KV cache, for ``rows`` sequences, fits in ``budget`` bytes.

    Parameters
    ----------
    config : blockc.GPTConfig
    cache_dtype : {"float32", "float16", "q8_0", "q4_0"}, optional
    budget : int >= 1, optional
        Bytes (default :func:`memory_budget`: a quarter of the available memory).
    rows : int >= 1, optional
        The sequences cached at once (the server's slots).

    Returns
    -------
    int
        In [1, config.context].

    Examples
    --------
    >>> from blockc import GPTConfig
    >>> context_size(GPTConfig(vocab=8, context=64, width=8, heads=2, layers=1), budget=64 * 20)
    20
    """
    budget = memory_budget() if budget is None else as_int(budget, "budget", 1)
    rows = as_int(rows, "rows", 1)
    per = cache_bytes_per_token(config, cache_dtype) * rows
    sliding = [] if config.sliding_window is None else [
        l for l in range(config.layers) if config.layer_window(l) is not None]
    if sliding:  # a sliding layer's ring (about its window) does not grow with the context
        layer = per // config.layers
        budget -= layer * sum(ring_rows(config.layer_window(l), config.context) for l in sliding)
        per = layer * (config.layers - len(sliding))
        if per == 0:
            return config.context
    return max(1, min(config.context, budget // per))


def describe_context(config: Any, n: int, cache_dtype: str = "float32", rows: int = 1,
                     given: bool = False) -> str:
    """The sentence a command prints about its context of ``n`` tokens: the model's, or
    bounded by the memory budget (with the cache's size), or ``--ctx-size``.

    Examples
    --------
    >>> from blockc import GPTConfig
    >>> describe_context(GPTConfig(vocab=8, context=64, width=8, heads=2, layers=1), 64)
    "context 64 tokens (the model's; KV cache 4.0 KiB)"
    """
    size = cache_bytes_per_token(config, cache_dtype) * n * as_int(rows, "rows", 1)
    mem = (f"{size / (1 << 30):.1f} GiB" if size >= 1 << 30 else f"{size / (1 << 20):.1f} MiB"
           if size >= 1 << 20 else f"{size / 1024:.1f} KiB")
    if given:
        why = f"--ctx-size; the model's is {config.context}"
    elif n < config.context:
        why = (f"the model's {config.context} bounded by a KV cache budget of "
               f"{memory_budget() / (1 << 30):.1f} GiB, a quarter of the available memory")
    else:
        why = "the model's"
    return f"context {n} tokens ({why}; KV cache {mem})"
