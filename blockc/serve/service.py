"""The service behind the routes: one model, its tokenizer and template, and the engine
that batches its requests (:class:`Service`); :mod:`blockc.serve.app` routes to it and
:mod:`blockc.serve.models` keeps several.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, List, Tuple

import numpy as np

from ..generation.ends import end_ids
from ..generation.defaults import (context_size, default_sampling, describe_context,
                                   describe_sampling)
from ..gpt import GPT
from ..runtime import set_num_threads
from ..text.tokenizer import Tokenizer
from ..text.chat import ChatTemplateError
from .embed import pooling_of, token_ids, truncate_dimensions
from .agents import ReplyPlan, check_reasoning_effort, plan_reply, template_variables
from .engine import Engine, Job, TextTail
from .sampling import RowSampler, sampling_from_request
from .settings import Settings
from .types import APIError, ChatRequest, SamplingRequest

__all__ = ["Service"]


class Service:
    """The model, tokenizer, template and engine behind the routes."""

    def __init__(self, settings: Settings, model: Any = None, tokenizer: Any = None):
        self.settings = s = settings
        if s.threads:
            set_num_threads(s.threads)
        self.model = model if model is not None else GPT.from_pretrained(s.model, dtype=s.dtype)
        if tokenizer is None:
            tokenizer = Tokenizer.from_pretrained(s.model)
        self.tok = tokenizer
        cfg = self.model.config
        # a slot's context: --ctx-size, else the model's bounded by the memory budget for
        # every slot's KV cache (blockc.generation.defaults, as blockc chat and generate)
        self.capacity = min(cfg.context, s.ctx_size or context_size(cfg, s.cache_dtype,
                                                                     rows=s.parallel))
        self.context_note = describe_context(cfg, self.capacity, s.cache_dtype, s.parallel,
                                             given=s.ctx_size is not None)
        # a request's sampling fields it omits: the model's (llama-server's rule)
        self.sampling, self.sampling_source = default_sampling(self.model.generation_config,
                                                               s.model)
        self.name = s.served_name
        # the one end-id rule, as blockc generate and blockc chat ask it
        self.end_ids = frozenset(end_ids(self.model.generation_config, tokenizer,
                                         self.model.config.vocab))
        self.created = int(time.time())
        draft = (GPT.from_pretrained(s.draft_model, dtype=s.dtype) if s.draft_model is not None
                 else None)
        self.engine = Engine(self.model, s.parallel, self.capacity, s.max_queue, s.prefill_chunk,
                             s.prefix_reuse, s.cache_dtype, draft, s.draft_max)
        self.draining = False
        # a prompt's template and tokens are made on these threads, never on the event
        # loop (tokenizing releases the GIL: Tokenizer.encode); a few at a time
        self.prep = ThreadPoolExecutor(max_workers=2, thread_name_prefix="blockc-prompt")
        # embeddings run here, one request at a time, beside the scheduler's steps
        self.embedder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="blockc-embed")
        self.pooling = pooling_of(s.model)
        self.truncate = s.context_overflow in ("truncate", "truncate-middle")
        self.middle = s.context_overflow == "truncate-middle"
        # a text longer than this has more tokens than a slot holds: refused untokenized
        # (when a long prompt is cut to its last tokens instead: no text is too long)
        self.max_chars = (self.capacity * max(1, self.tok.max_token_chars) if not self.truncate
                          else max(s.max_body_bytes, self.capacity * self.tok.max_token_chars))

    # ---- the pool's view of it ---------------------------------------------------------

    def memory_bytes(self) -> int:
        """The weights' and the KV cache slots' bytes (a draft's included)."""
        d = self.engine.drafter
        return (int(self.model.nbytes) + int(self.engine.cache.nbytes)
                + (d.nbytes if d is not None else 0))

    def idle(self) -> bool:
        return self.engine.idle()

    def close(self) -> None:
        self.engine.close()
        self.prep.shutdown(wait=False, cancel_futures=True)
        self.embedder.shutdown(wait=False, cancel_futures=True)

    # ---- embeddings --------------------------------------------------------------------

    def embed(self, req) -> Tuple[np.ndarray, int]:
        """(vectors (N, width) or (N, dimensions), prompt tokens) of an embeddings request
        (run on :attr:`embedder`)."""
        seqs = token_ids(self.tok, req.inputs, self.model.config.vocab,
                         self.model.config.context, self.truncate)
        vecs = self.model.embed(seqs, pooling=self.pooling)
        return truncate_dimensions(vecs, req.dimensions), sum(len(x) for x in seqs)

    # ---- requests to jobs -------------------------------------------------------------

    def summary(self) -> str:
        """The lines ``blockc serve`` prints when it listens: the context of a slot and
        the sampling a request gets when it omits the fields, and where it came from."""
        return (f"{self.context_note}\nsampling by default: {describe_sampling(self.sampling)} "
                f"(from {self.sampling_source}; a request's fields win)")

    def _too_long(self, what: str, chars: int) -> APIError:
        return APIError(400, f"This model's maximum context length is {self.capacity} tokens. "
                        f"However, your {what} is {chars} characters or more: more tokens than "
                        "that, as no token of this model stands for more than "
                        f"{self.tok.max_token_chars} characters.", param=what,
                        code="context_length_exceeded")

    def prompt_ids(self, req: SamplingRequest) -> np.ndarray:
        """The prompt's ids (run on :attr:`prep`'s threads: it renders and tokenizes).

        Raises
        ------
        APIError
            400: the template refused the conversation or failed, a text longer than the
            context can hold (known before tokenizing it), an empty prompt.
        """
        if isinstance(req, ChatRequest):
            try:
                template = self.tok.chat_template  # read (and compiled) on first use
            except ChatTemplateError as e:
                raise APIError(400, f"this model's chat template cannot be used: {e}",
                               param="messages", code="invalid_chat_template") from None
            if template is None:
                raise APIError(400, "this model has no chat template: use /v1/completions",
                               code="no_chat_template")
            check_reasoning_effort(req, template)
            try:
                text = template.render(
                    req.messages, req.add_generation_prompt, max_chars=self.max_chars,
                    timeout=self.settings.template_timeout, **template_variables(req))
            except ChatTemplateError as e:  # raise_exception, a failure, too long or slow
                raise APIError(400, str(e), param="messages", code="invalid_chat_template"
                               ) from None
            except ValueError as e:
                raise APIError(400, str(e), param="messages", code="invalid_value") from None
            if not text:
                raise APIError(400, "the chat template rendered these messages as an empty "
                               "prompt", param="messages", code="invalid_value")
            req.plan = plan_reply(req, self.tok, template, text, self.end_ids)
            try:
                return self.tok.encode(text, add_special_tokens=False)
            except ValueError as e:
                raise APIError(400, str(e), param="messages", code="invalid_value") from None
        req.plan = plan_reply(req, self.tok, None, None, self.end_ids)
        p = req.prompt
        if isinstance(p, str):
            if not p:
                raise APIError(400, "'prompt' must not be empty", param="prompt",
                               code="invalid_value")
            if len(p) > self.max_chars:
                raise self._too_long("prompt", len(p))
            try:
                return self.tok.encode(p)
            except ValueError as e:
                raise APIError(400, str(e), param="prompt", code="invalid_value") from None
        v = self.model.config.vocab
        if not all(0 <= t < v for t in p):
            raise APIError(400, f"'prompt' token ids must be in [0, {v})", param="prompt",
                           code="invalid_value")
        return np.asarray(p, np.int64)

    def jobs(self, req: SamplingRequest, ids: np.ndarray, emit_for) -> List[Job]:
        n, cap = len(ids), self.capacity
        what = "messages" if isinstance(req, ChatRequest) else "prompt"
        if n == 0:
            raise APIError(400, f"the {what} made no tokens: a prompt needs at least one",
                           param=what, code="invalid_value")
        if req.n > self.settings.max_queue:
            raise APIError(400, f"'n' is {req.n}, more choices than this server's queue ever "
                           f"holds ({self.settings.max_queue})", param="n", code="invalid_value")
        if self.truncate and (n >= cap or (req.max_tokens is not None
                                            and n + req.max_tokens > cap)):
            # --context-overflow truncate: the prompt's last tokens, room left to answer;
            # truncate-middle: its first and last halves of that (the system prompt and
            # the latest turn, as llama.cpp keeps n_keep and the end)
            keep = cap - req.max_tokens if req.max_tokens is not None else cap // 2
            if keep < 1:
                raise APIError(400, f"'max_tokens' is {req.max_tokens}: no room for a prompt "
                               f"in this model's context of {cap} tokens",
                               param="max_tokens", code="context_length_exceeded")
            if n > keep:
                head = keep // 2 if self.middle else 0
                ids = np.concatenate([ids[:head], ids[n - (keep - head):]])
            n = len(ids)
        if n >= cap:
            raise APIError(400, f"This model's maximum context length is {cap} tokens. However, "
                           f"your {what} resulted in {n} tokens.", param=what,
                           code="context_length_exceeded")
        max_tokens = req.max_tokens if req.max_tokens is not None else cap - n
        if n + max_tokens > cap:
            raise APIError(400, f"This model's maximum context length is {cap} tokens. However, "
                           f"you requested {n + max_tokens} tokens ({n} in the {what}, "
                           f"{max_tokens} in the completion). Please reduce the length of the "
                           f"{what} or the completion.", param="max_tokens",
                           code="context_length_exceeded")
        samp = sampling_from_request(req, self.model.config.vocab, self.sampling)
        ends = frozenset() if req.ignore_eos else self.end_ids
        plan = req.plan if req.plan is not None else ReplyPlan()
        decode = plan.decoder(self.tok, req.skip_special_tokens)
        return [Job(prompt=ids, max_tokens=max_tokens,
                    sampler=RowSampler(samp, i, self.model.config.vocab, plan.row_constraint(),
                                       plan.constraint_ends),
                    text=TextTail(decode, req.stop), end_ids=ends, emit=emit_for(i), index=i)
                for i in range(req.n)]

    def token_text(self, t: int) -> str:
        return self.tok.decode([t])

    def token_label(self, t: int) -> str:
        """The token as logprobs name it: its text, or ``bytes:\\xNN...`` when it is part
        of a character (its text alone would be U+FFFD), as OpenAI names such tokens."""
        text = self.tok.decode([t])
        raw = self.tok.token_bytes(t)
        if "\ufffd" in text and text.encode("utf-8") != raw:
            return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)
        return text
