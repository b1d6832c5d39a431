"""Speculative decoding in the server (``blockc serve --draft-model PATH``): a smaller
model over the same vocabulary drafts a few tokens for every decoding row, the target
checks them all in one forward call of ``k + 1`` tokens per row, and the row keeps the
drafted tokens its own sampler would have chosen.

The rule that keeps a request's tokens what they are without a draft, for any sampling
and the same seed (:meth:`blockc.serve.engine.Engine` applies it): at each of the row's
``k + 1`` positions the row's own sampler chooses the token from the target's logits
there, exactly as a plain step would (one draw of the row's generator per token, the
same penalties, bias, grammar state and logprobs); the draft is kept while the chosen
token equals the drafted one, and the first token that differs (or the token after the
last drafted one) ends the round. The target's logits at a position are the same bits
whether the position is computed alone or among ``k + 1`` (blockc's cache promise), so
the chosen tokens are the plain ones; the draft decides how many come out of one
target call, never which. (transformers' and llama.cpp's rejection sampling keeps the
distribution but not the seeded tokens; this exact-match rule keeps both, accepting a
drafted token only when the sample equals it.)

The draft drafts greedily (its argmax: no draw from the row's generator), its KV cache
one slot per engine slot, kept lazily in step with the slot's sequence
(:class:`DraftSlots`: the tokens each slot's cache holds are remembered and the cache
cut back to the common prefix before it drafts).
"""
from __future__ import annotations

from typing import Any, List, Sequence

import numpy as np

from .._errors import BlockcValueError

__all__ = ["DraftSlots", "DEFAULT_DRAFT_MAX"]

#: tokens drafted per round by default (transformers' num_assistant_tokens default)
DEFAULT_DRAFT_MAX = 5


class DraftSlots:
    """A draft model and its KV cache of ``slots`` slots, mirroring the engine's.

    Parameters
    ----------
    model : blockc.GPT
        The draft: the target's vocabulary, a context of at least ``capacity``.
    slots : int
        The engine's slots (its scratch slot included).
    capacity : int
        Positions per slot.
    vocab : int
        The target's vocabulary size.
    k : int >= 1
        Tokens drafted per round at most.
    cache_dtype : str
    target : blockc.GPT, optional
        The model it drafts for (checked: no sliding-window layers).

    Raises
    ------
    BlockcValueError
        Another vocabulary, a shorter context, k < 1, a target with sliding windows.
    """

    def __init__(self, model: Any, slots: int, capacity: int, vocab: int,
                 k: int = DEFAULT_DRAFT_MAX, cache_dtype: str = "float32",
                 target: Any = None):
        if target is not None and any(target.config.layer_window(i) is not None
                                      for i in range(target.config.layers)):
            # a sliding layer's ring may have overwritten what a rejected draft's
            # positions are cut back to
            raise BlockcValueError("a draft model needs a model without sliding-window layers "
                                   "(its cache cannot be cut back past a rejected draft)")
        if model.config.vocab != vocab:
            raise BlockcValueError(f"the draft model's vocabulary ({model.config.vocab}) differs "
                                   f"from the model's ({vocab}): a draft must share the tokenizer")
        if model.config.context < capacity:
            raise BlockcValueError(f"the draft model's context ({model.config.context}) is "
                                   f"shorter than a slot's ({capacity} tokens)")
        if int(k) < 1:
            raise BlockcValueError(f"draft_max must be >= 1, got {k}")
        self.model, self.k = model, int(k)
        self.cache = model.new_cache(slots, capacity, cache_dtype)
        self.fed: List[List[int]] = [[] for _ in range(slots)]  # the ids each slot holds

    @property
    def nbytes(self) -> int:
        """The draft's weights and cache."""
        return int(self.model.nbytes) + int(self.cache.nbytes)

    def swap(self, a: int, b: int, scratch: int) -> None:
        """Exchange slots a and b, as the engine exchanges its own (through ``scratch``)."""
        c = self.cache
        la, lb = c.lengths[a], c.lengths[b]
        c.copy_prefix(scratch, a, la)
        c.copy_prefix(a, b, lb)
        c.copy_prefix(b, scratch, la)
        self.fed[a], self.fed[b] = self.fed[b], self.fed[a]

    def forget(self, i: int) -> None:
        """Slot i's draft cache holds nothing (its target slot was emptied)."""
        self.cache.truncate(i, 0)
        self.fed[i] = []

    def reset(self) -> None:
        self.cache.reset()
        self.fed = [[] for _ in self.fed]

    def propose(self, seqs: Sequence[Sequence[int]], k: int) -> np.ndarray:
        """The draft's greedy ``k`` tokens after each row's sequence.

        Parameters
        ----------
        seqs : sequence of sequences of int
            Row i (slot i) is its prompt and output so far (the last token not yet in the
            target's cache).
        k : int >= 1

        Returns
        -------
        numpy.ndarray of int64, shape (len(seqs), k)
        """
        n = len(seqs)
        for i, seq in enumerate(seqs):  # each slot's cache to the row's tokens but the last
            fed, want = self.fed[i], seq[:-1]
            m = min(len(fed), len(want))
            bad = np.flatnonzero(np.asarray(fed[:m], np.int64) != np.asarray(want[:m], np.int64))
            same = int(bad[0]) if bad.size else m
            if same < len(fed):
                self.cache.truncate(i, same)
            if len(want) > same:
                self.model.run(np.asarray(want[same:], np.int64)[None],
                               self.cache.view(i, i + 1), want_logits=False)
            self.fed[i] = list(want)
        cur = np.array([[s[-1]] for s in seqs], np.int64)
        out = np.empty((n, k), np.int64)
        view = self.cache.view(0, n)
        for step in range(k):
            logits = self.model(cur, cache=view, last_only=True)  # (n, 1, V)
            out[:, step] = np.argmax(logits[:, 0], axis=-1)
            cur = out[:, step:step + 1]
        for i, seq in enumerate(seqs):  # the last drafted token is not in its cache
            self.fed[i] += [int(seq[-1])] + [int(t) for t in out[i, :k - 1]]
        return out
