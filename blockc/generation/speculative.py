"""Speculative decoding: a cheap drafter proposes a few tokens, the model checks them all
in one forward pass, and every token it agrees with costs no pass of its own.

Two drafters (transformers' names):

- a **draft model** (``assistant_model``: a smaller model over the same vocabulary,
  llama.cpp's ``--model-draft``) proposes up to ``num_assistant_tokens`` tokens, one
  forward of its own per token;
- **prompt lookup** (``prompt_lookup_num_tokens``, llama.cpp's lookup decoding): the
  tokens that followed the latest earlier occurrence of the sequence's last n-gram
  (n = 3, 2, then 1), in the prompt or the answer so far. No second model: it pays
  off where the answer repeats its context (editing code, summarising a document).

Each round the target model runs its last token and the K drafted ones through its
KV cache in one call, which gives the logits of every one of those K + 1 positions;
the KV cache is then truncated back past the positions of rejected tokens
(:meth:`blockc.KVCache.truncate`).

- Greedy (temperature 0): the longest prefix of the draft that equals the target's
  argmax at each position is kept, then the target's own next token. A sequence's
  logits are the same bits however its tokens are split into calls (blockc's cache
  promise: one call of K + 1 tokens gives each position the bits K + 1 one-token
  calls give), so the output is token for token what plain greedy decoding gives.
- Sampling: the standard rule (Leviathan et al. 2023, Chen et al. 2023): a drafted
  token d drawn from the drafter's q is accepted with probability min(1, p(d)/q(d)),
  p the target's distribution (after every processor: penalty, temperature, top-k,
  top-p, min-p); at the first rejection the token is drawn from max(0, p - q)
  normalised; when all K are accepted one more is drawn from p. Every token then has
  the target's distribution. Prompt lookup's q puts all its mass on the drafted token.

One prompt at a time (transformers' assisted generation also takes batch 1). The
rounds draw from the row's one generator, so a seed reproduces a sampled answer;
sampled answers differ from plain sampling's (the draws are used otherwise), their
distribution does not.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Optional, Tuple

import numpy as np

from .._errors import BlockcValueError
from .config import ResolvedGeneration
from .logits import next_tokens, processed_logits

__all__ = ["SpeculativeStats", "Speculator", "DraftModel", "PromptLookup", "lookup_draft",
           "accept_draft", "speculate", "LOOKUP_NGRAM"]

#: the longest n-gram prompt lookup matches (then shorter ones, down to one token)
LOOKUP_NGRAM = 3


@dataclass
class SpeculativeStats:
    """What a speculative generation did: ``rounds`` target forwards that checked a
    draft (the prompt's pass not counted), ``drafted`` tokens proposed, ``accepted`` of
    them kept, ``emitted`` tokens made."""
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    emitted: int = 0

    @property
    def acceptance_rate(self) -> float:
        """accepted / drafted (0 when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_forward(self) -> float:
        """Tokens made per target forward (1 without speculation)."""
        return self.emitted / self.rounds if self.rounds else 0.0

    def describe(self) -> str:
        """``acceptance 0.81 (130/160 drafted), 4.1 tokens per target forward``."""
        return (f"acceptance {self.acceptance_rate:.2f} ({self.accepted}/{self.drafted} "
                f"drafted), {self.tokens_per_forward:.2f} tokens per target forward")


def _probs(z: np.ndarray) -> np.ndarray:
    """softmax of processed logits (-inf: probability 0), float64."""
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _draw(p: np.ndarray, rng: np.random.Generator) -> int:
    """A token from the (unnormalised, non-negative) weights p: the first index whose
    cumulative weight passes u * total, never a zero-weight token."""
    cdf = np.cumsum(p)
    return min(int((cdf <= rng.random() * cdf[-1]).sum()), len(p) - 1)


def lookup_draft(seq: np.ndarray, k: int, ngram: int = LOOKUP_NGRAM) -> np.ndarray:
    """Prompt lookup: the up to ``k`` tokens that followed the latest earlier occurrence
    of ``seq``'s last n tokens, for n = ``ngram`` down to 1 (the longest that occurs).

    Parameters
    ----------
    seq : numpy.ndarray of int, shape (T,)
    k : int >= 0
    ngram : int >= 1, optional

    Returns
    -------
    numpy.ndarray of int64, shape (<= k,)
        Empty when no n-gram recurs.

    Examples
    --------
    >>> lookup_draft(np.array([5, 6, 7, 8, 1, 5, 6]), 3).tolist()
    [7, 8, 1]
    """
    t = len(seq)
    for n in range(min(ngram, t - 1), 0, -1):
        tail = seq[t - n:]
        # windows starting at 0 .. t-n-1: an occurrence ending before the tail itself
        win = np.lib.stride_tricks.sliding_window_view(seq[:t - 1], n)
        hits = np.flatnonzero((win == tail).all(axis=1))
        if hits.size:
            s = int(hits[-1]) + n
            return np.asarray(seq[s:s + k], np.int64)
    return np.zeros(0, np.int64)


class Speculator:
    """A drafter: proposes tokens continuing a sequence (:class:`DraftModel`,
    :class:`PromptLookup`)."""

    def draft(self, seq: np.ndarray, k: int, opts: ResolvedGeneration,
              rng: np.random.Generator) -> Tuple[np.ndarray, Optional[np.ndarray]]:
        """Up to ``k`` tokens continuing ``seq`` (T,), and the distributions q (k, V)
        they were drawn from (None: each drafted token had probability 1)."""
        raise NotImplementedError


class PromptLookup(Speculator):
    """Prompt lookup drafting (:func:`lookup_draft`); ``ngram`` the longest n-gram matched."""

    def __init__(self, ngram: int = LOOKUP_NGRAM):
        self.ngram = ngram

    def draft(self, seq, k, opts, rng):
        return lookup_draft(seq, k, self.ngram), None


class DraftModel(Speculator):
    """A smaller model over the same vocabulary drafting with the generation's own
    options, through its own KV cache (kept in step with the sequence: the positions
    after the first token it drafted wrongly are truncated away before the next round).

    Parameters
    ----------
    model : blockc.GPT
    vocab : int
        The target's vocabulary, which the draft's must equal.
    capacity : int
        The positions the generation can reach.
    cache_dtype : str
    """

    def __init__(self, model: Any, vocab: int, capacity: int, cache_dtype: str = "float32"):
        if not hasattr(model, "new_cache") or not hasattr(model, "run"):
            raise BlockcValueError("assistant_model must be a blockc model (GPT), got "
                                   f"{type(model).__name__}")
        if model.config.vocab != vocab:
            raise BlockcValueError(f"assistant_model's vocabulary ({model.config.vocab}) differs "
                                   f"from the model's ({vocab}): a draft must share the tokenizer")
        if capacity > model.config.context:
            raise BlockcValueError(f"assistant_model's context ({model.config.context}) is "
                                   f"shorter than this generation ({capacity} tokens)")
        self.model = model
        self.cache = model.new_cache(1, capacity, cache_dtype)
        self.fed = np.zeros(0, np.int64)  # the tokens its cache holds

    def draft(self, seq, k, opts, rng):
        if k == 0:
            return np.zeros(0, np.int64), None
        n = min(len(self.fed), len(seq) - 1)
        same = np.flatnonzero(self.fed[:n] != seq[:n])
        keep = int(same[0]) if same.size else n
        if keep < len(self.fed):
            self.cache.truncate(0, keep)
        feed, out, qs = seq[keep:], [], []
        cur = np.asarray(seq, np.int64)
        for _ in range(k):
            logits = self.model.run(np.asarray(feed, np.int64)[None], self.cache,
                                    last_only=True)[0][:, 0]
            if opts.greedy:
                tok = int(next_tokens(logits, opts, [rng], [cur])[0])
            else:
                q = _probs(processed_logits(logits, opts, [cur])[0])
                tok = _draw(q, rng)
                qs.append(q)
            out.append(tok)
            cur = np.append(cur, tok)
            feed = [tok]
        self.fed = cur[:-1]  # the last drafted token is not in its cache yet
        return np.asarray(out, np.int64), (np.stack(qs) if qs else None)


def accept_draft(logits: np.ndarray, seq: np.ndarray, draft: np.ndarray,
                 q: Optional[np.ndarray], opts: ResolvedGeneration,
                 rng: np.random.Generator) -> np.ndarray:
    """The tokens a round keeps: the accepted prefix of ``draft`` then one of the
    target's own.

    Parameters
    ----------
    logits : numpy.ndarray, shape (K + 1, V)
        The target's logits after ``seq`` and after each drafted token.
    seq : numpy.ndarray of int, shape (T,)
        The sequence so far (for the repetition penalty).
    draft : numpy.ndarray of int, shape (K,)
    q : numpy.ndarray, shape (K, V), or None
        The drafter's distributions (None: each drafted token had probability 1).
    opts : ResolvedGeneration
    rng : numpy.random.Generator

    Returns
    -------
    numpy.ndarray of int64, shape (n + 1,)
        n <= K accepted drafted tokens, then the target's token.
    """
    out = []
    for j in range(len(draft) + 1):
        seen = [np.concatenate([seq, draft[:j]])]
        if opts.greedy:
            t = int(next_tokens(logits[j:j + 1], opts, [rng], seen)[0])
            out.append(t)
            if j == len(draft) or t != draft[j]:
                break
            continue
        p = _probs(processed_logits(logits[j:j + 1], opts, seen)[0])
        if j == len(draft):
            out.append(_draw(p, rng))
            break
        d = int(draft[j])
        qd = 1.0 if q is None else float(q[j, d])
        if rng.random() * qd < p[d]:  # accept with probability min(1, p(d) / q(d))
            out.append(d)
            continue
        if q is None:
            r = p.copy()
            r[d] = 0.0
        else:
            r = np.maximum(p - q[j], 0.0)
        out.append(_draw(r if r.sum() > 0 else p, rng))
        break
    return np.asarray(out, np.int64)


def speculate(m: Any, prompt: np.ndarray, n: int, opts: ResolvedGeneration,
              rng: np.random.Generator, drafter: Speculator, k: int,
              stats: SpeculativeStats) -> Iterator[int]:
    """The new tokens of one prompt, speculatively decoded by ``m`` with ``drafter``
    proposing up to ``k`` tokens a round; ``stats`` counts as it goes.

    The target's cache holds the sequence but its last token; each round runs that
    token and the draft in one call and truncates the cache back to the kept tokens.
    """
    cache = m.new_cache(1, len(prompt) + n - 1, opts.cache_dtype)
    seq = np.empty(len(prompt) + n, np.int64)
    seq[:len(prompt)] = prompt
    t = len(prompt)
    if t > 1:  # the prompt but its last token, through the cache, no head
        m.run(seq[None, :t - 1], cache, want_logits=False)
    # longrope (Phi-3): a call's length picks the short or long factors. While the
    # sequence is no longer than the original length a round drafts no further than it
    # (each position's logits as its own length turns them); the round whose sequence
    # reaches original + 1 runs it whole again (every key turned by the long factors),
    # as transformers' Phi-3 generate recomputes its cache then
    original = m.config.rope_tables.long_after
    long_keys = t - 1 > original
    made = 0
    while made < n:
        # at most n - made - 1 drafted: the round's own token ends within n
        room = min(k, n - made - 1)
        if original and not long_keys and t <= original:
            room = min(room, original - t)
        draft, q = drafter.draft(seq[:t], room, opts, rng)
        if original and not long_keys and t > original:
            cache.truncate(0, 0)
            logits = m.run(np.concatenate([seq[:t], draft])[None], cache)[0][0][t - 1:]
            long_keys = True
        else:
            logits = m.run(np.concatenate([seq[t - 1:t], draft])[None], cache)[0][0]
        kept = accept_draft(logits, seq[:t], draft, q, opts, rng)
        stats.rounds += 1
        stats.drafted += len(draft)
        stats.accepted += len(kept) - 1
        cache.truncate(0, t - 1 + len(kept))  # the kept tokens, the new last one's excluded
        seq[t:t + len(kept)] = kept
        t += len(kept)
        for tok in kept:
            made += 1
            stats.emitted += 1
            yield int(tok)
