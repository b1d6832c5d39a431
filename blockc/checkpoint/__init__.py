"""Checkpoints: a model's files read into a model and written back.

- :mod:`blockc.checkpoint.families`: the model families, what each names in a checkpoint;
- :mod:`blockc.checkpoint.hf`: Hugging Face checkpoint directories (``from_pretrained``,
  ``save_pretrained``);
- :mod:`blockc.checkpoint.gguf`: models in llama.cpp's GGUF files (load, save, convert).

The bytes of the files go through :mod:`blockc.io` (safetensors, GGUF), which checks
every offset, size and shape before memory is touched.
"""
from . import families, gguf, hf

__all__ = ["families", "gguf", "hf"]
