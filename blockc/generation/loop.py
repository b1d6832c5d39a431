"""The generate loop: :class:`GenerationMixin` (``generate`` and ``stream`` of
:class:`blockc.GPT`) and :class:`Generation`, the steps of one generation.

The loop reaches the model only through the core's interface (:mod:`blockc.model`):
``m.config``, ``m.run`` and ``m.new_cache``; the next token comes from
:mod:`blockc.generation.logits`, or, speculating, from
:mod:`blockc.generation.speculative`.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from .._args import as_int, to_numpy
from .._errors import BlockcTypeError, BlockcValueError
from ..model import Model, check_ids
from .config import GenerationConfig, ResolvedGeneration
from .logits import next_tokens
from .speculative import DraftModel, PromptLookup, SpeculativeStats, speculate

__all__ = ["GenerationMixin", "Generation", "StopStrings"]

#: the options generate and stream take by name (a checkpoint's bos id is not one)
_OPTIONS = frozenset(f.name for f in fields(GenerationConfig)) - {"bos_token_id"}
_DEFAULT = GenerationConfig()


class GenerationMixin:
    """``generate`` and ``stream`` for a :class:`blockc.model.Model` (Hugging Face's
    ``GenerationMixin`` role): mixed into :class:`blockc.GPT`.

    The model's :attr:`generation_config` (a :class:`GenerationConfig`: the
    defaults, or what a checkpoint directory's files say) is where every call
    starts; the keyword options of a call override it.
    """

    @property
    def generation_config(self) -> GenerationConfig:
        """The options generation starts from: a loaded checkpoint's (its end ids,
        pad and sampling defaults), else the defaults; assign a GenerationConfig to
        change them."""
        return self.__dict__.get("_generation_config", _DEFAULT)

    @generation_config.setter
    def generation_config(self, value: GenerationConfig) -> None:
        if not isinstance(value, GenerationConfig):
            raise BlockcTypeError("generation_config must be a blockc.generation.GenerationConfig, "
                                  f"got {type(value).__name__}")
        self.__dict__["_generation_config"] = value

    def astype(self, dtype: str) -> Any:
        m = super().astype(dtype)  # type: ignore[misc]
        m.generation_config = self.generation_config
        return m

    astype.__doc__ = Model.astype.__doc__

    def generate(self, ids: Any, max_new_tokens: int, temperature: Optional[float] = None,
                 top_k: Optional[int] = None, seed: Optional[int] = None,
                 use_cache: Optional[bool] = None, *, top_p: Optional[float] = None,
                 min_p: Optional[float] = None, repetition_penalty: Optional[float] = None,
                 eos_token_id: Union[int, Sequence[int], None] = None,
                 pad_token_id: Optional[int] = None, stop: Optional[Sequence[str]] = None,
                 cache_dtype: Optional[str] = None, tokenizer: Any = None,
                 streamer: Optional[Callable[[np.ndarray], None]] = None,
                 generation_config: Optional[GenerationConfig] = None,
                 constraint: Any = None, assistant_model: Any = None,
                 num_assistant_tokens: Optional[int] = None,
                 prompt_lookup_num_tokens: Optional[int] = None
                 ) -> Union[np.ndarray, List[np.ndarray]]:
        """Extend the prompts by up to ``max_new_tokens`` tokens each.

        Every option left at None is the model's :attr:`generation_config`'s (or
        ``generation_config``'s): the defaults named below for a new model, what
        its files say for a loaded checkpoint.

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
        cache_dtype : {"float32", "float16", "q8_0", "q4_0"}, optional
            What the KV cache keeps keys and values as (default ``"float32"``).
            ``"float16"`` halves the cache's memory and the bytes each step reads
            from it, storing keys and values rounded to half precision: the
            tokens are then those of that rounding (:class:`blockc.KVCache`), the
            same whatever the batch or the thread count.
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
            Default: the generation config's (a loaded checkpoint's end ids); ``()``
            for none.
        pad_token_id : int, optional
            Filler after a row's end (default: the config's, else the first
            eos_token_id, else 0).
        stop : sequence of str, optional
            Stop a row when its generated text contains one of these (needs
            ``tokenizer``; the token completing it is kept).
        tokenizer : blockc.text.Tokenizer, optional
            For ``stop``.
        streamer : callable, optional
            Called with each step's new tokens, an int64 array (B,), as they are made.
        generation_config : blockc.generation.GenerationConfig, optional
            The options to start from: by default the model's own
            (:attr:`generation_config`: a loaded checkpoint's end ids, pad and
            sampling defaults; a new model's are the defaults above). Every option
            given here as a keyword (not None) overrides it; ``eos_token_id=()``
            turns the end ids off.
        constraint : blockc.generation.constraints.Constraint or sequence, optional
            Constrained decoding (structured output, tool calls): each step, the tokens
            the grammar does not allow are masked (-inf) before the options apply; every
            row gets its own fresh state of it (or give one per row, None for a row
            left free). A row ends when its grammar is complete and has taken an end
            token. Not a GenerationConfig option: it is a request's grammar, not a
            setting.
        assistant_model : blockc.GPT, optional
            Speculative decoding with this draft model (a smaller model over the same
            vocabulary: transformers' assisted generation, llama.cpp's
            ``--model-draft``): it drafts ``num_assistant_tokens`` tokens (default 5),
            the model checks them in one forward. Greedy output is token for token the
            output without it; sampled output has the same distribution
            (:mod:`blockc.generation.speculative`). One prompt at a time; not with
            ``constraint`` or ``use_cache=False``.
        num_assistant_tokens : int in [1, 128], optional
            The tokens the draft model drafts per round.
        prompt_lookup_num_tokens : int in [1, 128], optional
            Speculative decoding without a draft model: up to this many tokens drafted
            per round from what followed the context's last n-gram earlier in it
            (prompt lookup). The same guarantees as ``assistant_model``.

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
        options = dict(temperature=temperature, top_k=top_k, seed=seed, use_cache=use_cache,
                       top_p=top_p, min_p=min_p, repetition_penalty=repetition_penalty,
                       eos_token_id=eos_token_id, pad_token_id=pad_token_id, stop=stop,
                       cache_dtype=cache_dtype, num_assistant_tokens=num_assistant_tokens,
                       prompt_lookup_num_tokens=prompt_lookup_num_tokens)
        run = self.prepare_generation(ids, max_new_tokens, generation_config, tokenizer,
                                      constraint=constraint, assistant_model=assistant_model,
                                      **options)
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
            repetition_penalty, eos_token_id, pad_token_id, stop, tokenizer, seed,
            use_cache, cache_dtype, generation_config, constraint, assistant_model,
            num_assistant_tokens, prompt_lookup_num_tokens).

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
        o = dict(options)
        unknown = sorted(set(o) - _OPTIONS - {"tokenizer", "generation_config", "constraint",
                                              "assistant_model"})
        if unknown:
            raise BlockcTypeError(f"stream() got an unexpected option {unknown[0]!r}")
        run = self.prepare_generation(a.reshape(1, -1), max_new_tokens,
                                      o.pop("generation_config", None), o.pop("tokenizer", None),
                                      constraint=o.pop("constraint", None),
                                      assistant_model=o.pop("assistant_model", None), **o)
        for toks in run:
            yield int(toks[0])  # a finished row ends the iteration

    def prepare_generation(self, ids: Any, max_new_tokens: int,
                           generation_config: Optional[GenerationConfig] = None,
                           tokenizer: Any = None, constraint: Any = None,
                           assistant_model: Any = None, **options: Any) -> "Generation":
        """A :class:`Generation` of the prompts ``ids``, every argument checked before
        any work: what :meth:`generate` and :meth:`stream` iterate (a server steps it).

        Parameters
        ----------
        ids : array_like of int, shape (B, T), or a sequence of 1-D prompts
        max_new_tokens : int >= 0
        generation_config : GenerationConfig, optional
            The options to start from (default: the model's :attr:`generation_config`).
        tokenizer : blockc.text.Tokenizer, optional
            For stop strings.
        constraint : Constraint or sequence of (Constraint or None), optional
            As :meth:`generate`.
        assistant_model : blockc.GPT, optional
            A draft model: speculative decoding, as :meth:`generate`.
        **options
            GenerationConfig options overriding it (None: not given).

        Returns
        -------
        Generation

        Raises
        ------
        TypeError, ValueError
            As :meth:`generate`.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> run = m.prepare_generation([[1, 2]], 2, top_k=1)
        >>> [t.tolist() for t in run]
        [[2], [7]]
        """
        cfg = self.config
        # a sequence of 1-D prompts of different lengths is a ragged batch
        ragged = (isinstance(ids, (list, tuple)) and len(ids) > 0
                  and all(np.ndim(r) == 1 for r in ids) and len({len(r) for r in ids}) > 1)
        if ragged:
            empty = [i for i, r in enumerate(ids) if len(r) == 0]
            if empty:
                raise BlockcValueError(f"ids: prompt {empty[0]} is empty (a prompt needs at "
                                       "least one token)")
            rows = [check_ids(np.asarray(r)[None], cfg)[0].astype(np.int64) for r in ids]
        else:
            a = check_ids(ids, cfg)
            rows = [r.astype(np.int64) for r in a]
        n = as_int(max_new_tokens, "max_new_tokens", 0)
        base = self.generation_config if generation_config is None else generation_config
        if not isinstance(base, GenerationConfig):
            raise BlockcTypeError("generation_config must be a blockc.generation.GenerationConfig, "
                                  f"got {type(base).__name__}")
        given = {k: v for k, v in options.items() if v is not None}
        g = base.replace(**given).resolve(cfg.vocab) if given else base.resolve(cfg.vocab)
        if g.stop is not None and tokenizer is None:
            raise BlockcValueError("stop strings need a tokenizer (to read the text)")
        longest = max(len(r) for r in rows)
        if n and longest + n - 1 > cfg.context:
            raise BlockcValueError(f"Sequence exceeds the model's context of {cfg.context} "
                                   f"({longest} prompt + {n} new tokens)")
        constraints = _constraints(constraint, len(rows))
        drafter = _drafter(assistant_model, g, rows, n, constraints, cfg.vocab)
        return Generation(self, rows, ragged, n, g, tokenizer, constraints, drafter)


class StopStrings:
    """Whether one row's generated text contains a stop string, read incrementally.

    Each pushed token's text is found by decoding a short window of the last
    tokens (from the last point where the text was whole: the offsets of
    incremental detokenization), never the whole continuation; a stop string can
    only newly appear across the new text's end, so only the text's tail is
    searched. O(1) per token for the usual tokenizers, where decoding the
    whole continuation every step was O(n) (O(n^2) per generation).
    """

    def __init__(self, tokenizer: Any, stops: Sequence[str]):
        self.tok, self.stops = tokenizer, tuple(stops)
        self.longest = max(len(x) for x in self.stops)
        self.ids: List[int] = []
        self.prefix = self.read = 0   # ids[prefix:read] decode to the text's last piece
        self.text = ""

    def push(self, token: int) -> bool:
        """Add a generated token; True when the text now contains a stop string."""
        self.ids.append(int(token))
        before = self.tok.decode(self.ids[self.prefix:self.read]) if self.read > self.prefix else ""
        after = self.tok.decode(self.ids[self.prefix:])
        piece = after[len(before):] if len(after) > len(before) else ""
        if after.endswith("\ufffd"):
            # a character still cut between tokens: look at the whole part, keep the offsets
            new = piece.rstrip("\ufffd")
            text = self.text + new
        else:
            self.prefix, self.read = self.read, len(self.ids)
            self.text += piece
            new, text = piece, self.text
        if not new:
            return False
        tail = text[-(len(new) + self.longest - 1):]
        return any(x in tail for x in self.stops)


class Generation:
    """The steps of one generation: iterating yields each step's new tokens (B,);
    ``ends[i]`` counts row i's tokens (its end included), ``done[i]`` tells it ended.

    Made by :meth:`GenerationMixin.prepare_generation` from the checked options
    (``options``, a :class:`~blockc.generation.config.ResolvedGeneration`). With a
    ``drafter`` (speculative decoding, one row), ``stats`` is a
    :class:`~blockc.generation.speculative.SpeculativeStats`, counted as it goes.
    """

    def __init__(self, m: Any, rows: List[np.ndarray], ragged: bool, n: int,
                 options: ResolvedGeneration, tokenizer: Any = None,
                 constraints: Optional[Sequence[Any]] = None, drafter: Any = None):
        self.m, self.rows, self.ragged, self.n, self.options = m, rows, ragged, n, options
        self.opts = options  # resolved once (prepare_generation): what the sampler reads
        # every row its own generator: with a seed, a row draws what it draws alone
        self.rngs = [np.random.default_rng(options.seed) for _ in rows]
        self.use_cache, self.eos, self.pad = options.use_cache, options.eos, options.pad
        self.stop, self.tok = options.stop, tokenizer
        self.ends = [0] * len(rows)
        self.done = [False] * len(rows)
        #: each row's constraint state (None: free), masked and advanced every step
        self.constraints: List[Any] = list(constraints) if constraints else [None] * len(rows)
        #: the speculative drafter (None: one token per forward) and what it achieved
        self.drafter = drafter
        self.stats: Optional[SpeculativeStats] = None if drafter is None else SpeculativeStats()

    def _logits(self, seqs, cache, first):
        """The last position's logits (B, V) of every row: the whole prompts the first
        time (one by one when their lengths differ), then the last tokens."""
        m = self.m
        if not self.use_cache:
            return np.concatenate([m.run(s[None], last_only=True)[0][:, 0] for s in seqs])
        if first:
            if len({len(s) for s in seqs}) == 1:
                return m.run(np.stack(seqs), cache, last_only=True)[0][:, 0]
            return np.concatenate([m.run(s[None], cache, last_only=True, row=i)[0][:, 0]
                                   for i, s in enumerate(seqs)])
        # longrope: a row whose length passes the original length now turns every position
        # by the long factors, its cached ones too: run whole again (transformers' Phi-3
        # generate recomputes its cache then), so each step is the forward of the sequence
        long_after = m.config.rope_tables.long_after
        if long_after and any(len(s) == long_after + 1 for s in seqs):
            out = []
            for i, s in enumerate(seqs):
                if len(s) == long_after + 1:
                    cache.truncate(i, 0)
                else:
                    s = s[-1:]
                out.append(m.run(s[None], cache, last_only=True, row=i)[0][:, 0])
            return np.concatenate(out)
        return m.run(np.array([[s[-1]] for s in seqs]), cache, last_only=True)[0][:, 0]

    def _record(self, i: int, tok: int, stops: Optional[List[StopStrings]]) -> None:
        """Count row i's new token ``tok``, and mark the row done when it ends it."""
        self.ends[i] += 1
        c = self.constraints[i]
        if c is not None:
            c.advance(tok)
        if tok in self.eos or (c is not None and c.is_done()):
            self.done[i] = True
        elif stops is not None and stops[i].push(tok):
            self.done[i] = True

    def _speculate(self) -> Iterator[np.ndarray]:
        stops = [StopStrings(self.tok, self.stop)] if self.stop is not None else None
        for tok in speculate(self.m, self.rows[0], self.n, self.opts, self.rngs[0],
                             self.drafter[0], self.drafter[1], self.stats):
            self._record(0, tok, stops)
            yield np.array([tok], np.int64)
            if self.done[0]:
                return

    def __iter__(self) -> Iterator[np.ndarray]:
        m, b = self.m, len(self.rows)
        if self.n == 0:
            return
        if self.drafter is not None:
            yield from self._speculate()
            return
        # each row's tokens in a buffer of its final length: a step appends in place
        bufs = [np.empty(len(r) + self.n, np.int64) for r in self.rows]
        lens = [len(r) for r in self.rows]
        for buf, r in zip(bufs, self.rows):
            buf[:len(r)] = r
        cache = None
        if self.use_cache:
            cache = m.new_cache(b, max(lens) + self.n - 1, self.options.cache_dtype)
        stops = ([StopStrings(self.tok, self.stop) for _ in range(b)]
                 if self.stop is not None else None)
        for step in range(self.n):
            seqs = [buf[:k] for buf, k in zip(bufs, lens)]
            logits = self._logits(seqs, cache, step == 0)
            if any(c is not None for c in self.constraints) and not logits.flags.writeable:
                logits = logits.copy()
            for i, c in enumerate(self.constraints):
                if c is not None and not self.done[i]:
                    c.mask(logits[i])  # the row's own state only: the same bits in any batch
            toks = next_tokens(logits, self.opts, self.rngs,
                               seqs if self.opts.repetition_penalty else None)
            for i in range(b):
                if self.done[i]:
                    toks[i] = self.pad
                    continue
                self._record(i, int(toks[i]), stops)
            for i in range(b):
                bufs[i][lens[i]] = toks[i]
                lens[i] += 1
            yield toks
            if all(self.done):
                return


def _drafter(assistant_model: Any, g: ResolvedGeneration, rows: List[np.ndarray], n: int,
             constraints: Optional[List[Any]], vocab: int) -> Optional[Tuple[Any, int]]:
    """The speculative drafter the options ask for and its tokens per round, checked
    (None: plain decoding)."""
    lookup = g.prompt_lookup_num_tokens
    if assistant_model is None and lookup is None:
        return None
    if assistant_model is not None and lookup is not None:
        raise BlockcValueError("assistant_model and prompt_lookup_num_tokens: give one drafter")
    if len(rows) != 1:
        raise BlockcValueError(f"speculative decoding takes one prompt, got {len(rows)}")
    if constraints is not None:
        raise BlockcValueError("speculative decoding does not take a constraint")
    if not g.use_cache:
        raise BlockcValueError("speculative decoding needs use_cache=True")
    if lookup is not None:
        return PromptLookup(), lookup
    k = g.num_assistant_tokens or 5
    return DraftModel(assistant_model, vocab, max(len(rows[0]) + n - 1, 1), g.cache_dtype), k


def _constraints(constraint: Any, b: int) -> Optional[List[Any]]:
    """Each row's constraint state: a fresh one of a single Constraint for every row, or
    one of each per row (None: free)."""
    if constraint is None:
        return None
    if hasattr(constraint, "fresh"):
        return [constraint.fresh() for _ in range(b)]
    if isinstance(constraint, (list, tuple)):
        if len(constraint) != b:
            raise BlockcValueError(f"constraint: {len(constraint)} given for {b} rows")
        for c in constraint:
            if c is not None and not hasattr(c, "fresh"):
                raise BlockcTypeError("constraint must be a blockc.generation.constraints."
                                      f"Constraint, got {type(c).__name__}")
        return [None if c is None else c.fresh() for c in constraint]
    raise BlockcTypeError("constraint must be a blockc.generation.constraints.Constraint or a "
                          f"sequence of them, got {type(constraint).__name__}")
