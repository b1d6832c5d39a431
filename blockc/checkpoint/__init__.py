"""Checkpoints: what is read from and written to files.

- :mod:`blockc.checkpoint.safetensors`: the safetensors reader and writer;
- :mod:`blockc.checkpoint.hf`: Hugging Face checkpoint directories (``from_pretrained``,
  ``save_pretrained``);
- :mod:`blockc.checkpoint.families`: the model families, what each names in a checkpoint;
- :mod:`blockc.checkpoint.gguf`: llama.cpp's GGUF files (the format, the models).

Every file is hostile input: offsets, sizes and shapes are checked before memory is
touched, nothing is unpickled, and what is not a regular file is refused.
"""
from . import families, gguf, hf, safetensors

__all__ = ["families", "gguf", "hf", "safetensors"]
