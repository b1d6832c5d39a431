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


#: the fewest tokens a row's nucleus is first looked for among (then more, while fewer
#: than a quarter of the vocabulary: past that the whole sort is as cheap)
_NUCLEUS_FIRST = 256


def _top_p_sorted(z: np.ndarray, probs: np.ndarray, t: float) -> np.ndarray:
    """top_p_mask of one row z (V,) by the whole sort (probs: softmax of the whole rows)."""
    order = np.argsort(z, kind="stable")                      # ascending
    drop_sorted = np.cumsum(probs[order]) <= t
    drop_sorted[-1] = False                                   # the most likely stays
    keep = np.ones(z.shape, bool)
    keep[order] = ~drop_sorted
    return keep


def _top_p_candidates(z: np.ndarray, probs: np.ndarray, t: float) -> Optional[np.ndarray]:
    """top_p_mask of one row z (V,) from a sort of its largest logits only, or None when
    it cannot tell (then the whole sort decides).

    The whole sort's rule drops the least likely tokens while the running sum of their
    probabilities (in ascending order) is <= t. Taking the candidates as every token with
    z >= a threshold, the others precede them all in that order; they are all dropped
    when their sum is at most t, and the candidates' running sums start from it. When
    the others' probabilities are all exactly 0 (the logits top-k or a constraint left
    at -inf) that start is exactly 0 and the sums are the whole sort's bit for bit;
    otherwise the sums are float sums of the same numbers in another order, each within
    2 * V * 2**-53 of its value of the exact one, and the answer is kept only when no
    comparison with t is closer than twice that (else None)."""
    v = z.size
    if not np.isfinite(probs).all():  # NaN (a refused row): the whole sort's own answer
        return None
    finite = z > -np.inf
    n_finite = int(np.count_nonzero(finite))
    if n_finite == 0:
        return None
    m = n_finite if n_finite <= v // 4 else _NUCLEUS_FIRST
    slack = 4.0 * v * 2.0 ** -53
    while m <= v // 4:
        if m == n_finite:  # top-k's (a constraint's) few: the others' probabilities are 0
            cand, rest = np.flatnonzero(finite), 0.0
        else:
            thr = np.partition(z, v - m)[v - m]
            cand = np.flatnonzero(z >= thr)
            rest = probs[z < thr].sum()
        exact = rest == 0.0
        if exact or rest <= t - slack * t:
            sub = cand[np.argsort(z[cand], kind="stable")]
            sums = np.cumsum(np.concatenate(([rest], probs[sub])))[1:]
            if exact or (np.abs(sums - t) > slack * np.maximum(sums, t)).all():
                drop = sums <= t
                drop[-1] = False                              # the most likely stays
                keep = np.zeros(z.shape, bool)
                keep[sub] = ~drop
                return keep
            return None
        # the top m' tokens hold at most m'/m times the top m's mass: grow m to where the
        # nucleus may fit, giving up at once when even a quarter of the vocabulary cannot
        mass = 1.0 - rest
        m = max(8 * m, int(np.ceil(m * (1.0 - t) / mass)) if mass > 0 else v)
    return None


def top_p_mask(z: np.ndarray, p: float) -> np.ndarray:
    """Keep the fewest most likely tokens whose probabilities sum to more than 1 - (1 - p)
    (Hugging Face's rule: drop the least likely while their cumulative sum is <= 1 - p),
    at least one.

    Each row's nucleus is looked for among its largest logits first (all of its finite
    ones when top-k or a constraint masked the rest), sorted alone; the whole vocabulary
    is sorted only when that cannot tell the same mask bit for bit
    (:func:`_top_p_candidates`)."""
    probs = _softmax(z)
    t = 1.0 - p
    keep = np.empty(z.shape, bool)
    for b in range(z.shape[0]):
        row = _top_p_candidates(z[b], probs[b], t)
        keep[b] = row if row is not None else _top_p_sorted(z[b], probs[b], t)
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
