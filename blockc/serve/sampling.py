"""A request's sampling fields as blockc's generation options: the one place the server
maps the OpenAI fields (and its extensions) to what chooses each next token.

OpenAI's semantics, on each row's float32 logits, in this order:
``logit_bias`` added; ``frequency_penalty`` and ``presence_penalty`` subtracted
(``z[j] -= c[j] * frequency_penalty + (c[j] > 0) * presence_penalty``, ``c[j]`` the
count of token j among the tokens generated so far: additive, not the multiplicative
``repetition_penalty``, which is an extension field); then blockc.generation's
processors and sampler (``repetition_penalty`` over prompt and output, temperature,
``top_k``, ``top_p``, ``min_p``; temperature 0 is greedy), the fields blockc's one
:class:`blockc.generation.GenerationConfig` holds and checks. Each choice draws from its
own generator, ``numpy.random.default_rng(seed + index)``, so a choice's tokens are
the ones it gets alone, whatever else the server is running; with the penalties and
bias at their defaults, choice 0 of a request is exactly
``GPT.generate(prompt, seed=seed, temperature=..., top_k=..., top_p=..., min_p=...)``.

``logprobs`` are the log-softmax of the model's logits (before any processing), the
chosen token's and the ``top_logprobs`` most likely.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np

from .._errors import BlockcValueError
from ..generation import GenerationConfig, ResolvedGeneration, next_tokens
from ..generation.config import SAMPLING_FIELDS
from .types import APIError, SamplingRequest

__all__ = ["Sampling", "sampling_from_request", "RowSampler"]


@dataclass(frozen=True)
class Sampling:
    """One request's options, checked: ``config`` what GPT.generate takes, ``options``
    it resolved against the vocabulary (what the sampler reads), the rest OpenAI's
    fields it has not."""
    config: GenerationConfig
    options: ResolvedGeneration
    seed: Optional[int]
    frequency_penalty: float
    presence_penalty: float
    bias_ids: np.ndarray
    bias_values: np.ndarray
    top_logprobs: int
    logprobs: bool


def sampling_from_request(req: SamplingRequest, vocab: int,
                          defaults: Optional[GenerationConfig] = None) -> Sampling:
    """The generation options of a request (every choice shares them; the seed differs):
    each sampling field the request gives, else ``defaults``' (the model's,
    :func:`blockc.generation.defaults.default_sampling`, as llama-server does).

    Raises
    ------
    APIError
        A logit_bias key outside the vocabulary, a top_k or option blockc refuses.
    """
    try:  # every option checked already (types.py, by its declaration): resolved once
        base = {k: getattr(defaults, k) for k in SAMPLING_FIELDS} if defaults is not None else {}
        g = GenerationConfig(**dict(base, **{k: v for k, v in req.generation.items()
                                             if v is not None}))
        r = g.resolve(vocab)
    except ValueError as e:
        raise APIError(400, str(e), code="invalid_value") from None
    bad = [k for k in req.logit_bias if not 0 <= k < vocab]
    if bad:
        raise APIError(400, f"'logit_bias' token {bad[0]} is outside the vocabulary "
                       f"[0, {vocab})", param="logit_bias", code="invalid_value")
    ids = np.array(sorted(req.logit_bias), dtype=np.int64)
    return Sampling(g, r, g.seed, req.frequency_penalty, req.presence_penalty, ids,
                    np.array([req.logit_bias[int(i)] for i in ids], np.float64),
                    req.top_logprobs, req.logprobs)


class RowSampler:
    """The next tokens of one choice: its options and its own generator."""

    def __init__(self, s: Sampling, index: int, vocab: int):
        self.s = s
        self.rng = np.random.default_rng(None if s.seed is None else s.seed + index)
        self.counts = np.zeros(vocab, np.int64)
        self._plain = (s.frequency_penalty == 0.0 and s.presence_penalty == 0.0
                       and s.bias_ids.size == 0)

    def __call__(self, logits: np.ndarray, seen: np.ndarray
                 ) -> Tuple[int, Optional[float], List[Tuple[int, float]]]:
        """(token, its logprob or None, the top logprobs [(id, logprob)]) from one row's
        logits (V,) float32; ``seen``: prompt and output so far (the repetition penalty)."""
        s = self.s
        if not np.isfinite(logits).all():  # a model's failure: this request fails with it
            raise BlockcValueError("the model's logits hold inf or NaN (its weights do?): "
                                   "no token can be chosen")
        z = logits[None]
        if not self._plain:
            z = z.astype(np.float64)
            if s.bias_ids.size:
                z[0, s.bias_ids] += s.bias_values
            c = self.counts
            z[0] -= c * s.frequency_penalty + (c > 0) * s.presence_penalty
        seen_rows = [seen] if s.options.repetition_penalty is not None else None
        tok = int(next_tokens(z, s.options, [self.rng], seen_rows)[0])
        self.counts[tok] += 1
        if not s.logprobs:
            return tok, None, []
        x = logits.astype(np.float64)
        lp = x - x.max()
        lp -= np.log(np.exp(lp).sum())
        top: List[Tuple[int, float]] = []
        if s.top_logprobs:
            k = min(s.top_logprobs, lp.size)
            idx = np.argpartition(-lp, k - 1)[:k]
            idx = idx[np.lexsort((idx, -lp[idx]))]  # most likely first, ties by id
            top = [(int(i), float(lp[i])) for i in idx]
        return tok, float(lp[tok]), top
