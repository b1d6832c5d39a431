"""The ids that end a generation: :func:`end_ids`, the one rule ``blockc generate``,
``blockc chat`` and the server ask, and :func:`end_token_ids` for a checkpoint on disk.
"""
from __future__ import annotations

import os
import warnings
from typing import Any, Optional, Tuple, Union

from .._args import as_int
from .._errors import BlockcTypeError
from .._files import read_config
from ..io.gguf import read as read_gguf
from .config import GenerationConfig

__all__ = ["end_ids", "end_token_ids"]


def end_ids(config: GenerationConfig, tokenizer: Any = None,
            vocab: Optional[int] = None) -> Tuple[int, ...]:
    """The ids that end a generation: the one rule ``blockc generate``, ``blockc chat``
    and the server ask (:meth:`blockc.GPT.generate` stops at ``config``'s own).

    ``config``'s end ids (a loaded checkpoint's: ``generation_config.json``'s, else
    ``config.json``'s; a GGUF file's end of text and end of turn), then the
    tokenizer's end token when it has one that ``config`` does not list (vLLM's rule:
    a chat tokenizer names its end of turn). Ids at or past ``vocab`` are left out
    (the tokenizer's with a warning: it is not a token of this model).

    Parameters
    ----------
    config : GenerationConfig
    tokenizer : blockc.text.Tokenizer, optional
        Anything with an ``eos_token_id`` (an int or None).
    vocab : int, optional
        The model's vocabulary.

    Returns
    -------
    tuple of int
        In that order, each once (empty: nothing ends the generation but its length).

    Raises
    ------
    TypeError
        ``config`` is not a GenerationConfig.

    Examples
    --------
    >>> end_ids(GenerationConfig(eos_token_id=(2, 7)), vocab=16)
    (2, 7)
    """
    if not isinstance(config, GenerationConfig):
        raise BlockcTypeError("config must be a blockc.generation.GenerationConfig, got "
                              f"{type(config).__name__}")
    if vocab is not None:
        vocab = as_int(vocab, "vocab", 1)
    ids = [e for e in config.eos_ids if vocab is None or e < vocab]
    t = getattr(tokenizer, "eos_token_id", None)
    if isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 2 ** 63 and t not in ids:
        if vocab is not None and t >= vocab:
            warnings.warn(f"the tokenizer's end token {t} is not a token id of this model (the "
                          f"vocabulary has {vocab}): ignored", UserWarning, stacklevel=2)
        else:
            ids.append(int(t))
    return tuple(dict.fromkeys(ids))


def end_token_ids(path: Union[str, "os.PathLike[str]"], tokenizer: Any = None,
                  vocab: Optional[int] = None) -> frozenset:
    """Every id that ends a chat model's turn, by the one rule
    (:func:`end_ids`) over the checkpoint's generation config
    without loading its weights: ``generation_config.json``'s ``eos_token_id``, else
    ``config.json``'s (an int or a list: chat models list their end-of-turn token
    there), or a GGUF file's ``tokenizer.ggml.eos_token_id`` and ``eot_token_id``;
    and the tokenizer's ``eos_token_id``.

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint directory, or a ``.gguf`` file.
    tokenizer : blockc.text.Tokenizer, optional
    vocab : int, optional
        Ids at or past it are dropped.

    Returns
    -------
    frozenset of int

    Raises
    ------
    ValueError
        A config file that is not JSON, a GGUF file that does not parse.

    Examples
    --------
    >>> sorted(end_token_ids("llama3-instruct-dir"))     # doctest: +SKIP
    [128001, 128008, 128009]
    """
    p = os.fspath(path)
    if os.path.isfile(p) and p.endswith(".gguf"):  # llama.cpp's end-of-text and end-of-turn ids
        g = GenerationConfig.from_gguf(read_gguf(p).metadata, vocab)
    else:
        d = p if os.path.isdir(p) else os.path.dirname(p)
        cfg = read_config(d) if os.path.isfile(os.path.join(d, "config.json")) else {}
        g = GenerationConfig.from_pretrained(d, cfg, vocab)
    return frozenset(end_ids(g, tokenizer, vocab))
