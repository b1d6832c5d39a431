"""Checkpoints: a model's files read into a model and written back.

- :mod:`blockc.checkpoint.families`: the model families, what each names in a checkpoint;
- :mod:`blockc.checkpoint.hf`: Hugging Face checkpoint directories (``from_pretrained``,
  ``save_pretrained``);
- :mod:`blockc.checkpoint.gguf`: models in llama.cpp's GGUF files (load, save, convert);
- :mod:`blockc.checkpoint.locate`: where a model named by a path or a Hub id is;
- :func:`open` (:mod:`blockc.checkpoint.reader`): either kind read into a
  :class:`Checkpoint` (config, generation config, tensors by name, tokenizer, template)
  without building a model.

The bytes of the files go through :mod:`blockc.io` (safetensors, GGUF), which checks
every offset, size and shape before memory is touched.
"""
from . import families, gguf, hf, locate, reader
from .reader import Checkpoint, open  # noqa: A004 (blockc.checkpoint.open)

__all__ = ["families", "gguf", "hf", "locate", "reader", "Checkpoint", "open"]
