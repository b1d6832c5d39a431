"""GGUF (llama.cpp's format): the file format (:mod:`blockc.gguf.format`), the tokenizer
a file describes (:mod:`blockc.gguf.tokenizer`) and the models (:mod:`blockc.gguf.model`).

The reader and writer are re-exported here: ``blockc.gguf.read(path)``,
``blockc.gguf.write(path, metadata, tensors)``.
"""
from .format import (DEFAULT_ALIGNMENT, MAGIC, TYPE_IDS, TYPES, VALUE_TYPES, GGUFFile, GGUFTensor,
                     Value, parse_bytes, read, row_bytes, type_size, write)

__all__ = ["read", "write", "parse_bytes", "GGUFFile", "GGUFTensor", "Value", "TYPES", "TYPE_IDS",
           "VALUE_TYPES", "MAGIC", "DEFAULT_ALIGNMENT", "type_size", "row_bytes"]
