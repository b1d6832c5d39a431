"""The generate loop: :class:`GenerationMixin` (``generate`` and ``stream`` of
:class:`blockc.GPT`) and :class:`Generation`, the steps of one generation.

The loop reaches the model only through the core's interface (:mod:`blockc.model`):
``m.config``, ``m.run`` and ``m.new_cache``; the next token comes from
:mod:`blockc.generation.logits`.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, List, Optional, Sequence, Union

import numpy as np

from .._args import as_flag, as_int, to_numpy
from .._errors import BlockcTypeError, BlockcValueError
from ..model import check_ids
from .logits import SamplingOptions, next_tokens

__all__ = ["GenerationMixin", "Generation"]


class GenerationMixin:
    """``generate`` and ``stream`` for a :class:`blockc.model.Model` (Hugging Face's
    ``GenerationMixin`` role): mixed into :class:`blockc.GPT`."""

    def generate(self, ids: Any, max_new_tokens: int, temperature: float = 0.0,
                 top_k: Optional[int] = None, seed: Optional[int] = None,
                 use_cache: bool = True, *, top_p: Optional[float] = None,
                 min_p: Optional[float] = None, repetition_penalty: Optional[float] = None,
                 eos_token_id: Union[int, Sequence[int], None] = None,
                 pad_token_id: Optional[int] = None, stop: Optional[Sequence[str]] = None,
                 tokenizer: Any = None,
                 streamer: Optional[Callable[[np.ndarray], None]] = None
                 ) -> Union[np.ndarray, List[np.ndarray]]:
        """Extend the prompts by up to ``max_new_tokens`` tokens each.

        Parameters
        ----------
        ids : array_like of int, shape (B, T), or a sequence of 1-D prompts
            The prompts. A list of 1-D prompts of different lengths is a ragged
            batch, returned as a list: every prompt gets exactly the tokens it would
            get alone (each row's
            logits are the bits it gets alone; the decoding steps still run the rows
            together through one KV cache, each at its own position).
        max_new_tokens : int >= 0
        temperature : float >= 0, optional
            0 (the default) takes the argmax (first maximum on ties); otherwise a
            sample from softmax(logits / temperature). However small a positive
            temperature is, it gives the greedy limit, never NaN probabilities.
        top_k : int >= 1, optional
            Sample among the logits >= the ``top_k``-th largest.
        seed : int >= 0, optional
            Seed of ``numpy.random.default_rng``: reproducible samples, whatever the
            thread count. Every row draws from its own generator seeded with it, so
            a row's samples are the ones it gets alone (identical prompts in one
            batch then sample alike: give them different seeds in separate calls).
        use_cache : bool, optional
            Run the prompt once and feed each new token alone through a KV cache
            (the default); False recomputes the whole sequence for every token
            (same tokens, slower).
        top_p : float in (0, 1], optional
            Sample among the fewest most likely tokens whose probabilities sum past
            ``top_p`` (nucleus sampling).
        min_p : float in [0, 1], optional
            Sample among the tokens at least ``min_p`` times as likely as the most
            likely one.
        repetition_penalty : float > 0, optional
            Divide the positive logits (multiply the negative ones) of every token
            already in the row, prompt included (1: none).
        eos_token_id : int or sequence of int, optional
            Stop a row when it emits one (kept in the output); the batch stops when
            every row has. Later positions of a finished row hold ``pad_token_id``.
        pad_token_id : int, optional
            Filler after a row's end (default: the first eos_token_id).
        stop : sequence of str, optional
            Stop a row when its generated text contains one of these (needs
            ``tokenizer``; the token completing it is kept).
        tokenizer : blockc.text.Tokenizer, optional
            For ``stop``.
        streamer : callable, optional
            Called with each step's new tokens, an int64 array (B,), as they are made.

        The options apply in Hugging Face's order (:mod:`blockc.generation`):
        repetition penalty, temperature, top-k, top-p, min-p.

        Returns
        -------
        numpy.ndarray or list of numpy.ndarray
            (B, T + n) int64: the prompt, then the new tokens (n = max_new_tokens, or
            fewer when every row stopped); for a ragged batch, a list of 1-D arrays,
            each its prompt and its own tokens up to its end.

        Raises
        ------
        TypeError, ValueError
            As :meth:`__call__`; a prompt that with max_new_tokens - 1 would pass the
            context; an option out of range; ``stop`` without a tokenizer.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> m.generate(np.array([[1, 2]]), 3).shape
        (1, 5)
        >>> [len(r) for r in m.generate([[1, 2, 3], [4]], 2)]
        [5, 3]
        """
        run = self._generation(ids, max_new_tokens, temperature, top_k, seed, use_cache, top_p,
                               min_p, repetition_penalty, eos_token_id, pad_token_id, stop,
                               tokenizer)
        rows, steps = run.rows, []
        for toks in run:
            steps.append(toks)
            if streamer is not None:
                streamer(toks.copy())
        new = np.stack(steps, axis=1) if steps else np.zeros((len(rows), 0), np.int64)
        if not run.ragged:
            return np.concatenate([np.stack(rows), new], axis=1)
        return [np.concatenate([r, new[i, :run.ends[i]]]) for i, r in enumerate(rows)]

    def stream(self, ids: Any, max_new_tokens: int, **options: Any) -> Iterator[int]:
        """The new tokens of one prompt, yielded one by one as they are made.

        Parameters
        ----------
        ids : array_like of int, shape (T,) or (1, T)
        max_new_tokens : int >= 0
        **options
            As :meth:`generate` (temperature, top_k, top_p, min_p,
            repetition_penalty, eos_token_id, stop, tokenizer, seed, use_cache).

        Yields
        ------
        int
            Each new token; after an end token or a stop string, nothing more.

        Raises
        ------
        TypeError, ValueError
            As :meth:`generate`, or ids of more than one row.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> list(m.stream([1, 2], 3)) == list(m.generate(np.array([[1, 2]]), 3)[0, 2:])
        True
        """
        a = to_numpy(ids, "ids")
        if a.ndim not in (1, 2) or (a.ndim == 2 and a.shape[0] != 1):
            # never flattened: a (2, 1, 3) batch is not one 6-token prompt
            raise BlockcValueError(f"stream takes one prompt, shape (T,) or (1, T); got ids of "
                                   f"shape {a.shape}")
        if a.size == 0:
            raise BlockcValueError("ids is empty: a prompt needs at least one token")
        known = {"temperature", "top_k", "seed", "use_cache", "top_p", "min_p",
                 "repetition_penalty", "eos_token_id", "pad_token_id", "stop", "tokenizer"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise BlockcTypeError(f"stream() got an unexpected option {unknown[0]!r}")
        o = dict(temperature=0.0, top_k=None, seed=None, use_cache=True, top_p=None, min_p=None,
                 repetition_penalty=None, eos_token_id=None, pad_token_id=None, stop=None,
                 tokenizer=None)
        o.update(options)
        for toks in self._generation(a.reshape(1, -1), max_new_tokens, **o):
            yield int(toks[0])  # a finished row ends the iteration

    def _generation(self, ids, max_new_tokens, temperature=0.0, top_k=None, seed=None,
                    use_cache=True, top_p=None, min_p=None, repetition_penalty=None,
                    eos_token_id=None, pad_token_id=None, stop=None, tokenizer=None):
        """A :class:`Generation`: every argument checked, before any work."""
        cfg = self.config
        # a sequence of 1-D prompts of different lengths is a ragged batch
        ragged = (isinstance(ids, (list, tuple)) and len(ids) > 0
                  and all(np.ndim(r) == 1 for r in ids) and len({len(r) for r in ids}) > 1)
        if ragged:
            rows = [check_ids(np.asarray(r)[None], cfg)[0].astype(np.int64) for r in ids]
        else:
            a = check_ids(ids, cfg)
            rows = [r.astype(np.int64) for r in a]
        n = as_int(max_new_tokens, "max_new_tokens", 0)
        opts = SamplingOptions(temperature, top_k, top_p, min_p, repetition_penalty, cfg.vocab)
        if seed is not None:
            seed = as_int(seed, "seed", 0)
        use_cache = as_flag(use_cache, "use_cache")
        if eos_token_id is None:
            eos = ()
        elif isinstance(eos_token_id, (list, tuple)):
            eos = tuple(as_int(e, "eos_token_id", 0, cfg.vocab - 1) for e in eos_token_id)
        else:
            eos = (as_int(eos_token_id, "eos_token_id", 0, cfg.vocab - 1),)
        pad = eos[0] if pad_token_id is None and eos else pad_token_id
        pad = 0 if pad is None else as_int(pad, "pad_token_id", 0, cfg.vocab - 1)
        if stop is not None:
            if isinstance(stop, str) or not all(isinstance(x, str) and x for x in stop):
                raise BlockcTypeError("stop must be a sequence of non-empty str")
            if tokenizer is None:
                raise BlockcValueError("stop strings need a tokenizer (to read the text)")
            stop = tuple(stop)
        longest = max(len(r) for r in rows)
        if n and longest + n - 1 > cfg.context:
            raise BlockcValueError(f"Sequence exceeds the model's context of {cfg.context} "
                                   f"({longest} prompt + {n} new tokens)")
        # every row its own generator: with a seed, a row draws what it draws alone
        rngs = [np.random.default_rng(seed) for _ in rows]
        return Generation(self, rows, ragged, n, opts, rngs, use_cache, eos, pad, stop, tokenizer)



class Generation:
    """The steps of one generation: iterating yields each step's new tokens (B,);
    ``ends[i]`` counts row i's tokens (its end included), ``done[i]`` tells it ended."""

    def __init__(self, m, rows, ragged, n, opts, rngs, use_cache, eos, pad, stop, tokenizer):
        self.m, self.rows, self.ragged, self.n, self.opts, self.rngs = m, rows, ragged, n, opts, rngs
        self.use_cache, self.eos, self.pad, self.stop, self.tok = use_cache, eos, pad, stop, tokenizer
        self.ends = [0] * len(rows)
        self.done = [False] * len(rows)

    def _logits(self, seqs, cache, first):
        """The last position's logits (B, V) of every row: the whole prompts the first
        time (one by one when their lengths differ), then the last tokens."""
        m, b = self.m, len(seqs)
        if not self.use_cache:
            return np.concatenate([m.run(s[None], last_only=True)[0][:, 0] for s in seqs])
        if first:
            if len({len(s) for s in seqs}) == 1:
                return m.run(np.stack(seqs), cache, last_only=True)[0][:, 0]
            return np.concatenate([m.run(s[None], cache, last_only=True, row=i)[0][:, 0]
                                   for i, s in enumerate(seqs)])
        return m.run(np.array([[s[-1]] for s in seqs]), cache, last_only=True)[0][:, 0]

    def __iter__(self) -> Iterator[np.ndarray]:
        m, b = self.m, len(self.rows)
        if self.n == 0:
            return
        seqs = [r.copy() for r in self.rows]
        cache = None
        if self.use_cache:
            cache = m.new_cache(b, max(len(r) for r in self.rows) + self.n - 1)
        texts = [""] * b
        for step in range(self.n):
            logits = self._logits(seqs, cache, step == 0)
            toks = next_tokens(logits, self.opts, self.rngs,
                               seqs if self.opts.repetition_penalty else None)
            for i in range(b):
                if self.done[i]:
                    toks[i] = self.pad
                    continue
                self.ends[i] += 1
                if int(toks[i]) in self.eos:
                    self.done[i] = True
                elif self.stop is not None:
                    new = seqs[i][len(self.rows[i]):]
                    texts[i] = self.tok.decode(np.append(new, toks[i]))
                    if any(x in texts[i] for x in self.stop):
                        self.done[i] = True
            seqs = [np.append(s, t) for s, t in zip(seqs, toks)]
            yield toks
            if all(self.done):
                return


