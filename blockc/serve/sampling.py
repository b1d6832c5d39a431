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

A constrained row (``response_format``, an enforced tool call: :mod:`blockc.serve.agents`)
has its own :class:`blockc.generation.constraints.Constraint` state: its mask is applied
after the bias and penalties, before the processors and the sampler (so top-k/top-p
act on what the grammar allows), the token is drawn among the allowed tokens only (the
token the whole masked row would give, cheaper: tests/test_serve_tools.py checks it
against the whole row), and the chosen token advances it; ``finished`` tells the
grammar is complete. The mask reads the row's own tokens only: a constrained row
gets the same tokens alone or beside other requests.

``logprobs`` are the log-softmax of the model's logits (before any processing), the
chosen token's and the ``top_logprobs`` most likely.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, FrozenSet, List, Optional, Tuple

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
    """The next tokens of one choice: its options, its own generator, and its
    constraint's state (``constraint``: a fresh :class:`Constraint
    <blockc.generation.constraints.Constraint>` state, or None) whose end tokens are
    ``constraint_ends``."""

    def __init__(self, s: Sampling, index: int, vocab: int, constraint: Any = None,
                 constraint_ends: FrozenSet[int] = frozenset()):
        self.s = s
        self.constraint = constraint
        self.constraint_ends = frozenset(constraint_ends)
        #: the constraint is complete: the row ends ("stop")
        self.finished = False
        self.rng = np.random.default_rng(None if s.seed is None else s.seed + index)
        self.counts = np.zeros(vocab, np.int64)
        self._plain = (s.frequency_penalty == 0.0 and s.presence_penalty == 0.0
                       and s.bias_ids.size == 0)
        #: the sampler reads the row's tokens (``seen``): the repetition penalty is on
        self.needs_seen = s.options.repetition_penalty is not None

    def __call__(self, logits: np.ndarray, seen: np.ndarray
                 ) -> Tuple[int, Optional[float], List[Tuple[int, float]]]:
        """(token, its logprob or None, the top logprobs [(id, logprob)]) from one row's
        logits (V,) float32; ``seen``: prompt and output so far (the repetition penalty;
        read only when :attr:`needs_seen`, else it may be None)."""
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
        if self.constraint is not None:
            tok = self._draw_allowed(z, seen_rows)
        else:
            tok = int(next_tokens(z, s.options, [self.rng], seen_rows)[0])
        if self.constraint is not None:
            self.constraint.advance(tok)
            self.finished = self.constraint.is_done()
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

    def _draw_allowed(self, z: np.ndarray, seen_rows: Optional[List[np.ndarray]]) -> int:
        """The next token of row z (1, V) under the constraint, drawn among the tokens it
        allows only: the same token as from the whole row with the others at -inf (a
        masked token's probability is 0: it adds nothing to the sampler's cumulative
        sum, it is never the largest, never in the top k unless fewer than k are
        allowed, when every token is kept), at a cost that falls with what the grammar
        allows, with no -inf to exponentiate and no copy of the row to mask."""
        v = z.shape[1]
        allowed = np.flatnonzero(self.constraint.allowed()[:v])
        if allowed.size == 0:  # the sampler refuses a row with every token masked
            full = np.array(z, copy=True)
            self.constraint.mask(full[0])
            return int(next_tokens(full, self.s.options, [self.rng], seen_rows)[0])
        if seen_rows is not None:  # the seen tokens' places among the allowed ones
            at = np.minimum(np.searchsorted(allowed, seen_rows[0]), allowed.size - 1)
            seen_rows = [at[allowed[at] == seen_rows[0]]]
        j = int(next_tokens(z[:, allowed], self.s.options, [self.rng], seen_rows)[0])
        return int(allowed[j])

    def ends_row(self, token: int) -> bool:
        """Whether ``token`` is the end token that completed the constraint (counted,
        never shown, whatever ``ignore_eos`` says: the grammar chose it)."""
        return self.finished and token in self.constraint_ends
