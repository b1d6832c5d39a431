"""One door to a checkpoint, whatever its kind: :func:`open` reads a Hugging Face directory
or a GGUF file into a :class:`Checkpoint` (its model config, generation config, tensors by
name, tokenizer and chat template) without building a model.

The files are read through :mod:`blockc.io` (every offset, size and shape checked before
memory is touched); the tensors stay in the files until asked for, one at a time.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Union

import numpy as np

from .._errors import BlockcValueError
from .._files import read_config
from ..generation.config import GenerationConfig
from ..io import gguf as gguf_io
from ..model import GPTConfig
from ..text.chat import load_chat_template
from ..text.tokenizer import Tokenizer
from .gguf import config_from_gguf, is_gguf
from .hf import config_from_hf, read_tensors, text_config

__all__ = ["Checkpoint", "open"]

PathLike = Union[str, "os.PathLike[str]"]


class Checkpoint:
    """A checkpoint's contents, read lazily: what :func:`open` returns.

    Attributes
    ----------
    path : str
    kind : {"directory", "gguf"}
    config : GPTConfig
        The model it holds (its family's record read the config).
    generation : GenerationConfig
        Its generation defaults and end ids (generation_config.json, or the GGUF file's
        token ids).
    chat_template : str or None
    """

    def __init__(self, path: str, kind: str, config: GPTConfig, generation: GenerationConfig,
                 tensors: Dict[str, Any], chat_template: Optional[str]) -> None:
        self.path, self.kind, self.config = path, kind, config
        self.generation, self.chat_template = generation, chat_template
        self._tensors = tensors
        self._tokenizer: Any = None

    def names(self) -> List[str]:
        """The tensors' names, as the file spells them (Hugging Face's or llama.cpp's).

        Returns
        -------
        list of str

        Raises
        ------
        Nothing.

        Examples
        --------
        >>> open("gpt2-dir").names()[:2]                       # doctest: +SKIP
        ['transformer.h.0.attn.c_attn.bias', 'transformer.h.0.attn.c_attn.weight']
        """
        return sorted(self._tensors)

    def tensor(self, name: str) -> np.ndarray:
        """One tensor as a new float32 array (a quantised GGUF tensor dequantised exactly as
        ggml does), read from the file now.

        Parameters
        ----------
        name : str
            As :meth:`names` spells it.

        Returns
        -------
        numpy.ndarray of float32

        Raises
        ------
        ValueError
            No such tensor (named), or a type blockc does not read.

        Examples
        --------
        >>> open("model.gguf").tensor("token_embd.weight").dtype      # doctest: +SKIP
        dtype('float32')
        """
        t = self._tensors.get(name)
        if t is None:
            raise BlockcValueError(f"{self.path}: no tensor {name!r}")
        if self.kind == "gguf":
            return np.array(t.to_float32(), dtype=np.float32)
        return np.array(t.to_float32(), dtype=np.float32)  # bfloat16, float16 widened

    @property
    def tokenizer(self) -> Optional[Tokenizer]:
        """The tokenizer it carries (``tokenizer.json``, or a GGUF file's vocabulary), read
        on first use; None when it carries none. Needs the ``text`` extra (tokenizers)."""
        if self._tokenizer is None:
            has = self.kind == "gguf" or os.path.isfile(os.path.join(self.path, "tokenizer.json"))
            if has:
                try:
                    self._tokenizer = Tokenizer.from_pretrained(self.path)
                except BlockcValueError:
                    if self.kind == "directory":
                        raise
                    return None  # a GGUF file without tokenizer.ggml.* keys
        return self._tokenizer

    def __repr__(self) -> str:
        return (f"Checkpoint({self.path!r}, kind={self.kind!r}, tensors={len(self._tensors)}, "
                f"chat_template={self.chat_template is not None})")


def open(path: PathLike) -> Checkpoint:  # noqa: A001 (blockc.checkpoint.open, as the issue names it)
    """Open a checkpoint: a Hugging Face directory (``config.json`` and safetensors) or a
    GGUF file, read into a :class:`Checkpoint` without building a model.

    Parameters
    ----------
    path : str or os.PathLike
        A directory or a ``.gguf`` file (a Hub id: resolve it first with
        :func:`blockc.checkpoint.locate.resolve`).

    Returns
    -------
    Checkpoint

    Raises
    ------
    ValueError
        Not a checkpoint (named), a family or field blockc does not run (named), a file
        that does not parse.
    OSError
        A file that cannot be read.

    Examples
    --------
    >>> import tempfile, blockc
    >>> m = blockc.GPT.random(blockc.GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
    >>> with tempfile.TemporaryDirectory() as d:
    ...     m.save_pretrained(d)
    ...     c = open(d)
    ...     (c.kind, c.config == m.config, c.tensor("transformer.h.0.ln_1.weight").shape)
    ('directory', True, (8,))
    """
    p = os.fspath(path)
    if is_gguf(p):
        f = gguf_io.read(p)
        cfg = GPTConfig(**config_from_gguf(f))
        gen = GenerationConfig.from_gguf(f.metadata, cfg.vocab)
        template = f.get("tokenizer.chat_template")
        return Checkpoint(p, "gguf", cfg, gen, dict(f.tensors),
                          template if isinstance(template, str) else None)
    if not os.path.isdir(p):
        raise BlockcValueError(f"{p}: not a checkpoint directory or a GGUF file")
    d = text_config(read_config(p))  # a wrapper's language model (Gemma 3's image-text one)
    cfg = config_from_hf(d)
    gen = GenerationConfig.from_pretrained(p, config=d, vocab=cfg.vocab)
    return Checkpoint(p, "directory", cfg, gen, read_tensors(p), load_chat_template(p))
