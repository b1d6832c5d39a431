"""Sentence embeddings from a decoder: the last hidden state after the final norm, pooled
over each input's tokens and L2-normalised (:meth:`EmbeddingMixin.embed`).

The hidden state is the one a head reads: the residual stream after the last block
(bc_gpt_forward's ``hidden``, the head skipped) through the model's final norm (the C
kernels :func:`blockc.block.ops.rmsnorm` / :func:`blockc.block.ops.layernorm`, as the
forward pass applies it). That is transformers' last ``hidden_states`` entry. Pooling
takes the last token (a decoder embedding model's choice: Qwen3-Embedding's, E5-Mistral's),
the mean over the tokens, the first, or the element-wise max (sentence-transformers'
``lasttoken``, ``mean``, ``cls``, ``max``).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import numpy.typing as npt

from .._args import as_choice, as_flag, as_int
from .._errors import BlockcTypeError, BlockcValueError
from ..block.ops import layernorm, rmsnorm

__all__ = ["EmbeddingMixin", "POOLINGS", "pool", "normalize_rows"]

#: the pooling modes :meth:`EmbeddingMixin.embed` knows
POOLINGS = ("last", "mean", "first", "max")

#: a sequence longer than this runs alone, this many tokens at a time through a KV cache (the
#: forward pass's hidden states hold every layer's: (layers, T, width) floats at once
#: otherwise); a prompt in chunks is the bits it is whole
CHUNK = 256


def pool(hidden: np.ndarray, pooling: str) -> np.ndarray:
    """One vector per sequence from final hidden states (B, T, D) -> (B, D)."""
    if pooling == "last":
        return hidden[:, -1, :]
    if pooling == "first":
        return hidden[:, 0, :]
    if pooling == "max":
        return hidden.max(axis=1)
    return (hidden.sum(axis=1, dtype=np.float64) / hidden.shape[1]).astype(np.float32)


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """Each row divided by its L2 norm (a zero row stays zero), norms summed in double."""
    n = np.sqrt(np.sum(np.square(x, dtype=np.float64), axis=-1, keepdims=True))
    return (x / np.where(n > 0, n, 1.0)).astype(np.float32)


def _sequences(inputs: Any) -> Tuple[List[np.ndarray], bool]:
    """(the input sequences as int64 arrays, whether one sequence was given)."""
    if isinstance(inputs, (str, bytes)):
        raise BlockcTypeError("inputs must be token ids (tokenize text first: "
                              "Tokenizer.encode), got a string")
    if isinstance(inputs, np.ndarray):
        if inputs.ndim == 1:
            return [inputs], True
        if inputs.ndim == 2:
            return list(inputs), False
        raise BlockcValueError(f"inputs must be 1-D (one sequence) or 2-D, got shape "
                               f"{inputs.shape}")
    if not isinstance(inputs, Sequence) or len(inputs) == 0:
        raise BlockcValueError("inputs must be a non-empty sequence of token ids or of "
                               "sequences of token ids")
    if all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in inputs):
        return [np.asarray(inputs)], True
    return [np.asarray(x) for x in inputs], False


class EmbeddingMixin:
    """:meth:`embed` for a model with :meth:`run`, :meth:`read_tensor` and :attr:`config`."""

    def final_hidden(self, ids: npt.ArrayLike, cache: Any = None) -> np.ndarray:
        """The last hidden state after the final norm (what the head reads).

        Parameters
        ----------
        ids : array_like of int, shape (B, T)
        cache : KVCache, optional
            Positions continue after its length (as :meth:`run`).

        Returns
        -------
        numpy.ndarray
            (B, T, width) float32.

        Raises
        ------
        TypeError, ValueError
            As :meth:`run`.

        Examples
        --------
        >>> from blockc import GPT, GPTConfig
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> m.final_hidden([[1, 2, 3]]).shape
        (1, 3, 8)
        """
        cfg = self.config
        _, hidden = self.run(ids, cache, want_hidden=True, want_logits=False)
        h = np.ascontiguousarray(hidden[-1])
        if cfg.placement != "pre" or cfg.norm == "none":  # a post-norm model: no final norm
            return h
        if cfg.norm == "rms":
            return rmsnorm(h, self.read_tensor("norm.weight"), cfg.eps)
        return layernorm(h, self.read_tensor("norm.weight"), self.read_tensor("norm.bias"),
                         cfg.eps)

    def embed(self, inputs: Any, pooling: str = "last", normalize: bool = True,
              batch_size: int = 8) -> np.ndarray:
        """Embeddings of token sequences: the final hidden state, pooled, L2-normalised.

        Parameters
        ----------
        inputs : array_like of int
            One sequence of token ids (1-D), or several (2-D, or a list of sequences of
            any lengths); each at most the model's context.
        pooling : {"last", "mean", "first", "max"}, optional
            The last token's state (a decoder embedding model's choice), the mean over
            the tokens, the first token's, the element-wise max.
        normalize : bool, optional
            Divide each vector by its L2 norm (cosine similarity is then a dot product).
        batch_size : int, optional
            Sequences of one length run together, this many at a time (the bits are the
            same at any batch).

        Returns
        -------
        numpy.ndarray
            (width,) float32 for one sequence, (N, width) for N.

        Raises
        ------
        TypeError
            Text instead of ids, ids that are not integers, a non-bool flag.
        ValueError
            No input, an empty sequence, ids out of range or past the context, an
            unknown pooling.

        Examples
        --------
        >>> from blockc import GPT, GPTConfig
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> m.embed([1, 2, 3]).shape, m.embed([[1, 2], [3, 4, 5]], pooling="mean").shape
        ((8,), (2, 8))
        """
        pooling = as_choice(pooling, "pooling", POOLINGS)
        normalize = as_flag(normalize, "normalize")
        batch_size = as_int(batch_size, "batch_size", 1)
        seqs, one = _sequences(inputs)
        for i, s in enumerate(seqs):
            if s.ndim != 1 or s.size == 0:
                raise BlockcValueError(f"inputs[{i}] must be a non-empty sequence of token "
                                       f"ids, got shape {s.shape}")
        out = np.empty((len(seqs), self.config.width), np.float32)
        by_len: Dict[int, List[int]] = {}
        for i, s in enumerate(seqs):
            if len(s) > CHUNK:
                out[i] = self._embed_long(s, pooling)
            else:
                by_len.setdefault(len(s), []).append(i)
        for idx in by_len.values():
            for k in range(0, len(idx), batch_size):
                part = idx[k:k + batch_size]
                h = self.final_hidden(np.stack([seqs[i] for i in part]))
                out[part] = pool(h, pooling)
        if normalize:
            out = normalize_rows(out)
        return out[0] if one else out

    def _embed_long(self, ids: np.ndarray, pooling: str) -> np.ndarray:
        """One long sequence's pooled state, :data:`CHUNK` tokens at a time through a cache
        (the same pooling as :func:`pool`: a float64 sum for the mean)."""
        t = len(ids)
        if t > self.config.context:
            raise BlockcValueError(f"a sequence of {t} tokens is longer than the model's "
                                   f"context of {self.config.context}")
        cache = self.new_cache(1, t)
        acc: Optional[np.ndarray] = None
        for k in range(0, t, CHUNK):
            h = self.final_hidden(np.asarray(ids[k:k + CHUNK])[None], cache)[0]
            if pooling == "mean":
                part = h.sum(axis=0, dtype=np.float64)
                acc = part if acc is None else acc + part
            elif pooling == "max":
                part = h.max(axis=0)
                acc = part if acc is None else np.maximum(acc, part)
            elif pooling == "first" and acc is None:
                acc = h[0].copy()
            elif pooling == "last":
                acc = h[-1].copy()
        if pooling == "mean":
            return (acc / t).astype(np.float32)
        return acc
