"""The file formats blockc reads and writes, as formats: no model knowledge.

- :mod:`blockc.io.safetensors`: the safetensors reader and writer;
- :mod:`blockc.io.gguf`: llama.cpp's GGUF reader and writer (``blockc.gguf.read(path)``,
  ``blockc.gguf.write(path, metadata, tensors)``).

Every file is hostile input: each offset, size and shape is checked before memory is
touched, nothing is unpickled, and what is not a regular file is refused. Every file
written appears whole or not at all. What the tensors of a file mean (a model family,
a tokenizer) is :mod:`blockc.checkpoint`'s and :mod:`blockc.text`'s.
"""
from . import gguf, safetensors

__all__ = ["gguf", "safetensors"]
