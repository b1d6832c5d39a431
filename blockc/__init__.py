"""blockc: transformer-block kernels in C, wrapped with cffi.

- :mod:`blockc.book`: the chapter's listings at the book's fixed sizes, exact.
- :func:`block_forward`, :func:`stack_forward`, :mod:`blockc.ops`: the dynamic
  engine, every variant the chapters discuss, at any size.
- :class:`GPT`: chapter 6's whole model with a KV cache.
- :mod:`blockc.reference`: the pure-NumPy oracle.
- :mod:`blockc.rng`: the portable C-runtime ``rand()`` generators.

Every exception blockc raises derives from :class:`BlockcError` (and from
``ValueError``, ``TypeError`` or ``MemoryError`` as fits).
"""
from __future__ import annotations

from ._errors import BlockcError, BlockcMemoryError, BlockcTypeError, BlockcValueError
import sys as _sys

from . import block, book, checkpoint, io, text
from .block import engine, ops
from .book import listings, rng
from .checkpoint import families, hf
from .io import gguf, safetensors
from .text import chat
from .text import tokenizer as _text_tokenizer
from .text.tokenizer import TextStream, Tokenizer
from .block.engine import (BlockConfig, PreparedBlock, block_backward, block_forward,
                           count_parameters, init_block, init_blocks, prepare, stack_backward,
                           stack_forward)
from .gpt import GPT, GPTConfig, KVCache, gpt_parameter_count, gpt_parameter_formula
from .generation import GenerationConfig
from .train import AdamW
from .book.rng import CRand
from .runtime import best_isa, get_isa, get_num_threads, set_isa, set_num_threads

#: The modules that moved into folders (issue 48) keep their old import paths:
#: ``import blockc.hf`` is :mod:`blockc.checkpoint.hf`, ``blockc.gguf.model`` is
#: :mod:`blockc.checkpoint.gguf`, and so on. Attributes of the package
#: (``blockc.hf``) come from the imports above; these entries serve ``import``.
MOVED_MODULES = {
    "engine": "block.engine", "ops": "block.ops", "listings": "book.listings",
    "rng": "book.rng", "hf": "checkpoint.hf", "safetensors": "io.safetensors",
    "families": "checkpoint.families", "gguf": "io.gguf", "gguf.format": "io.gguf",
    "gguf.model": "checkpoint.gguf",
    "gguf.tokenizer": "text.gguf", "chat": "text.chat",
}
for _old, _new in MOVED_MODULES.items():
    _sys.modules[f"{__name__}.{_old}"] = _sys.modules[f"{__name__}.{_new}"]
del _old, _new


def _version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover - Python < 3.8
        return "unknown"
    try:
        return version("blockc")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown"


__version__ = _version()

__all__ = [
    "BlockcError", "BlockcValueError", "BlockcTypeError", "BlockcMemoryError",
    "book", "ops", "safetensors", "Tokenizer", "TextStream",
    "BlockConfig", "PreparedBlock", "prepare", "block_forward", "stack_forward",
    "block_backward", "stack_backward", "AdamW",
    "init_block", "init_blocks", "count_parameters",
    "GPT", "GPTConfig", "KVCache", "gpt_parameter_count", "gpt_parameter_formula",
    "GenerationConfig",
    "CRand",
    "set_num_threads", "get_num_threads", "get_isa", "set_isa", "best_isa",
    "__version__",
]
