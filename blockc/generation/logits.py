"""Choosing the next token: the logits processors and the sampler, in NumPy.

:func:`next_tokens` applies, in Hugging Face's order, the repetition penalty
(every token already in the sequence: a positive logit divided by the penalty,
a negative one multiplied), then the temperature (logits / T), top-k (keep the
logits >= the k-th largest), top-p (keep the smallest set of most likely tokens
whose probabilities sum past p; at least one), min-p (keep the tokens at least
min_p times as likely as the most likely), and draws from the softmax of what
is left with the inverse of its cumulative sum against each row's own
``rng.random()`` (every row of a batch has its generator, so that with a seed
it draws what it would draw alone). A
temperature of 0 is greedy: the first largest logit (no other option applies
but the penalty). Computed in float64 on the float32 logits, the same every run
for a seed, whatever blockc's thread count.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from .._errors import BlockcTypeError, BlockcValueError
from .config import GenerationConfig, ResolvedGeneration

__all__ = ["SamplingOptions", "next_tokens", "processed_logits", "apply_penalty", "top_k_mask", "top_p_mask",
           "min_p_mask", "LOGIT_LIMIT"]


#: SamplingOptions' positional options, in its signature's order
_POSITIONAL = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty")


def SamplingOptions(*args: Any, vocab: int = 1, **options: Any) -> ResolvedGeneration:
    """The sampler's options: ``GenerationConfig(**options).resolve(vocab)`` (checked once,
    there; kept as the spelling of callers that sample without a generation).

    Parameters
    ----------
    *args
        temperature, top_k, top_p, min_p, repetition_penalty, in that order.
    vocab : int >= 1, optional
    **options
        Those options (and any other GenerationConfig option) by name.

    Returns
    -------
    ResolvedGeneration

    Examples
    --------
    >>> SamplingOptions(1.0, top_k=50, vocab=8).top_k
    8
    """
    if len(args) > len(_POSITIONAL):
        raise BlockcTypeError(f"SamplingOptions takes at most {len(_POSITIONAL)} positional "
                              f"options, got {len(args)}")
    twice = sorted(set(_POSITIONAL[:len(args)]) & set(options))
    if twice:
        raise BlockcTypeError(f"SamplingOptions got {twice[0]!r} twice")
    options.update(zip(_POSITIONAL, args))
    return GenerationConfig(**options).resolve(vocab)


#: The largest magnitude a processed logit keeps: a penalty at the edge of its range
#: (1e-300, 1e300) saturates here instead of reaching inf, and two such logits still
#: differ by a finite amount (the sampler subtracts the largest).
LOGIT_LIMIT = float(np.finfo(np.float64).max) / 4


def apply_penalty(z: np.ndarray, seen: Sequence[np.ndarray], penalty: float) -> np.ndarray:
    """z (B, V) with the logits of each row's seen tokens penalised (a new array), each
    within +-LOGIT_LIMIT whatever the penalty (finite logits stay finite)."""
    z = z.copy()
    for b, ids in enumerate(seen):
        u = np.unique(ids)
        v = z[b, u]
        with np.errstate(over="ignore", under="ignore"):
            p = np.clip(np.where(v > 0, v / penalty, v * penalty), -LOGIT_LIMIT, LOGIT_LIMIT)
        z[b, u] = np.where(np.isneginf(v), v, p)  # a masked token stays masked
    return z


def top_k_mask(z: np.ndarray, k: int) -> np.ndarray:
    """Keep (True) the logits >= each row's k-th largest."""
    if k >= z.shape[-1]:
        return np.ones(z.shape, bool)
    kth = np.partition(z, -k, axis=-1)[:, -k][:, None]
    return z >= kth


def _softmax(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def top_p_mask(z: np.ndarray, p: float) -> np.ndarray:
    """Keep the fewest most likely tokens whose probabilities sum to more than 1 - (1 - p)
    (Hugging Face's rule: drop the least likely while their cumulative sum is <= 1 - p),
    at least one."""
    order = np.argsort(z, axis=-1, kind="stable")          # ascending
    probs = np.take_along_axis(_softmax(z), order, axis=-1)
    drop_sorted = np.cumsum(probs, axis=-1) <= 1.0 - p
    drop_sorted[:, -1] = False                               # the most likely stays
    keep = np.ones(z.shape, bool)
    np.put_along_axis(keep, order, ~drop_sorted, axis=-1)
    return keep


def min_p_mask(z: np.ndarray, min_p: float) -> np.ndarray:
    """Keep the tokens whose probability is >= min_p times the row's largest."""
    probs = _softmax(z)
    return probs >= min_p * probs.max(axis=-1, keepdims=True)


def processed_logits(logits: np.ndarray, opts: ResolvedGeneration,
                     seen: Optional[Sequence[np.ndarray]] = None) -> np.ndarray:
    """The logits (B, V) after the processors, float64: penalised; then, unless greedy,
    shifted so each row's largest is 0, divided by the temperature, and -inf where
    top-k, top-p or min-p drop a token. A token is drawn from their softmax."""
    z = logits.astype(np.float64)
    # what the model gave is checked before sampling: the options themselves never make
    # a logit that is not finite (the penalty saturates), so a distribution the sampler
    # cannot sample from is the model's, refused, never drawn from (greedy does not
    # sample: it takes the argmax of whatever is there)
    # (-inf is a token masked out, a constraint's mask: blockc.generation.constraints)
    if not opts.greedy:
        bad = np.isnan(z) | np.isposinf(z)
        if bad.any():
            row = int(np.flatnonzero(bad.any(axis=-1))[0])
            raise BlockcValueError(f"cannot sample: the logits of row {row} hold inf or NaN "
                                   "(the model's weights do?); temperature=0 takes the argmax")
        if np.isneginf(z).all(axis=-1).any():
            row = int(np.flatnonzero(np.isneginf(z).all(axis=-1))[0])
            raise BlockcValueError(f"cannot sample: every token of a row is masked (-inf): row {row}")
    if opts.repetition_penalty is not None and opts.repetition_penalty != 1.0 and seen is not None:
        z = apply_penalty(z, seen, opts.repetition_penalty)
    if opts.greedy:
        return z
    # shifted first, so z <= 0 and the largest is exactly 0: dividing by any positive
    # temperature, however small, gives no NaN (the greedy limit)
    with np.errstate(over="ignore"):
        z = (z - z.max(axis=-1, keepdims=True)) / opts.temperature
    keep = np.ones(z.shape, bool)
    if opts.top_k is not None:
        keep &= top_k_mask(z, opts.top_k)
    if opts.top_p is not None and opts.top_p < 1.0:
        keep &= top_p_mask(np.where(keep, z, -np.inf), opts.top_p)
    if opts.min_p is not None and opts.min_p > 0.0:
        keep &= min_p_mask(np.where(keep, z, -np.inf), opts.min_p)
    return np.where(keep, z, -np.inf)


def next_tokens(logits: np.ndarray, opts: ResolvedGeneration, rngs: Sequence[np.random.Generator],
                seen: Optional[Sequence[np.ndarray]] = None) -> np.ndarray:
    """The next token of every row of logits (B, V): int64 (B,); row b draws from rngs[b]."""
    z = processed_logits(logits, opts, seen)
    if opts.greedy:
        return np.argmax(z, axis=-1).astype(np.int64)
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    cdf = np.cumsum(p, axis=-1)
    u = np.array([g.random() for g in rngs])
    idx = (cdf <= u[:, None] * cdf[:, -1:]).sum(axis=-1)  # first cdf > u: never a p=0 token
    return np.minimum(idx, z.shape[-1] - 1).astype(np.int64)
