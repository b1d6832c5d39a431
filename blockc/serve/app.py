"""The OpenAI-compatible HTTP API on Starlette, over :class:`blockc.serve.engine.Engine`.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions`` (``stream: true`` as
server-sent events ending in ``data: [DONE]``), ``GET /v1/models`` (and
``/v1/models/{id}``), ``GET /health`` (200 when serving, 503 while draining: a
readiness probe), ``GET /metrics`` (Prometheus text). Every error is OpenAI's JSON
error object with a fitting status, never a traceback.
"""
from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, AsyncIterator, Dict, List, Optional, Tuple

import numpy as np

from ..generation.config import end_ids
from ..generation.defaults import context_size, default_sampling, describe_context, describe_sampling
from ..gpt import GPT
from ..runtime import set_num_threads
from ..text.tokenizer import Tokenizer
from ..text.chat import ChatTemplateError
from .engine import Draining, Engine, Job, QueueFull, TextTail
from .sampling import RowSampler, sampling_from_request
from .settings import Settings
from .types import (APIError, ChatRequest, CompletionRequest, SamplingRequest, chat_chunk,
                    chat_response, completion_response, error_body, model_object, parse_chat,
                    parse_completion, usage)

__all__ = ["Service", "create_app"]


def _starlette():
    try:
        import starlette  # noqa: F401
    except ImportError:
        raise ImportError("the server needs starlette and uvicorn: pip install 'blockc[serve]'"
                          ) from None


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
        self.engine = Engine(self.model, s.parallel, self.capacity, s.max_queue, s.prefill_chunk,
                             s.prefix_reuse, s.cache_dtype)
        self.draining = False
        # a prompt's template and tokens are made on these threads, never on the event
        # loop (tokenizing releases the GIL: Tokenizer.encode); a few at a time
        self.prep = ThreadPoolExecutor(max_workers=2, thread_name_prefix="blockc-prompt")
        # a text longer than this has more tokens than a slot holds: refused untokenized
        self.max_chars = self.capacity * max(1, self.tok.max_token_chars)

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
            try:
                text = template.render(
                    req.messages, req.add_generation_prompt, max_chars=self.max_chars,
                    timeout=self.settings.template_timeout)
            except ChatTemplateError as e:  # raise_exception, a failure, too long or slow
                raise APIError(400, str(e), param="messages", code="invalid_chat_template"
                               ) from None
            except ValueError as e:
                raise APIError(400, str(e), param="messages", code="invalid_value") from None
            if not text:
                raise APIError(400, "the chat template rendered these messages as an empty "
                               "prompt", param="messages", code="invalid_value")
            try:
                return self.tok.encode(text, add_special_tokens=False)
            except ValueError as e:
                raise APIError(400, str(e), param="messages", code="invalid_value") from None
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
        skip = req.skip_special_tokens
        decode = lambda ids: self.tok.decode(ids, skip_special_tokens=skip)  # noqa: E731
        return [Job(prompt=ids, max_tokens=max_tokens,
                    sampler=RowSampler(samp, i, self.model.config.vocab),
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


def _dumps(obj: Any) -> str:
    """JSON text that always encodes to UTF-8 (a lone surrogate escaped, never an error)."""
    text = json.dumps(obj, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(obj)
    return text


def _json_response(body: Any, status: int = 200, headers: Optional[Dict[str, str]] = None):
    from starlette.responses import Response
    return Response(_dumps(body), status_code=status, media_type="application/json",
                    headers=headers)


def _error(e: APIError):
    return _json_response(e.body(), e.status, e.headers)


async def _read_body(request, limit: int) -> bytes:
    cl = request.headers.get("content-length")
    if cl is not None:
        try:
            if int(cl) > limit:
                raise APIError(413, f"the request body is {int(cl)} bytes, over the limit of "
                               f"{limit}", code="request_too_large")
        except ValueError:
            raise APIError(400, "a bad Content-Length header", code="invalid_request") from None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise APIError(413, f"the request body is over the limit of {limit} bytes",
                           code="request_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


def _sse(obj: Any) -> str:
    return f"data: {_dumps(obj)}\n\n"


def create_app(settings: Settings, model: Any = None, tokenizer: Any = None):
    """The Starlette application serving ``settings.model`` (or ``model`` and
    ``tokenizer`` when given).

    Raises
    ------
    ImportError
        starlette is not installed.
    """
    _starlette()
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.responses import PlainTextResponse, StreamingResponse
    from starlette.routing import Route

    svc = Service(settings, model, tokenizer)

    def check_auth(request) -> None:
        key = settings.api_key
        if key is None:
            return
        got = request.headers.get("authorization", "").encode("utf-8", "surrogateescape")
        # compared in constant time: how long a refusal takes tells nothing of the key
        if not hmac.compare_digest(got, f"Bearer {key}".encode("utf-8")):
            raise APIError(401, "Incorrect API key provided", type="invalid_request_error",
                           code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})

    async def generate(request, chat: bool):
        try:
            check_auth(request)
            if svc.draining or svc.engine.draining:
                raise APIError(503, "the server is shutting down", type="server_error",
                               code="unavailable")
            raw = await _read_body(request, settings.max_body_bytes)
            try:
                body = json.loads(raw)
            except ValueError as e:
                raise APIError(400, f"the request body is not valid JSON: {e}",
                               code="invalid_json") from None
            except RecursionError:
                raise APIError(400, "the request body is JSON nested too deeply",
                               code="invalid_json") from None
            req = (parse_chat if chat else parse_completion)(body, [svc.name])
            loop = asyncio.get_running_loop()
            ids = await loop.run_in_executor(svc.prep, svc.prompt_ids, req)
            queue: asyncio.Queue = asyncio.Queue()

            def emit_for(i):
                def emit(ev):
                    loop.call_soon_threadsafe(queue.put_nowait, (i, ev))
                return emit
            jobs = svc.jobs(req, ids, emit_for)
            try:
                svc.engine.submit(jobs)
            except QueueFull:
                raise APIError(429, f"the server is busy: {settings.max_queue} requests are "
                               "waiting already; retry later", type="server_error",
                               code="rate_limit_exceeded",
                               headers={"Retry-After": str(settings.retry_after)}) from None
            except Draining:
                raise APIError(503, "the server is shutting down", type="server_error",
                               code="unavailable") from None
        except APIError as e:
            return _error(e)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        if req.stream:
            return StreamingResponse(_stream(svc, req, jobs, queue, rid, created, chat),
                                     media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        return await _collect(request, svc, req, jobs, queue, rid, created, chat)

    async def chat_completions(request):
        return await generate(request, True)

    async def completions(request):
        return await generate(request, False)

    async def models(request):
        try:
            check_auth(request)
        except APIError as e:
            return _error(e)
        return _json_response({"object": "list", "data": [model_object(svc.name, svc.created)]})

    async def model_info(request):
        try:
            check_auth(request)
            mid = request.path_params["model"]
            if mid != svc.name:
                raise APIError(404, f"The model '{mid}' does not exist", param="model",
                               code="model_not_found")
        except APIError as e:
            return _error(e)
        return _json_response(model_object(svc.name, svc.created))

    async def health(request):
        if svc.draining or svc.engine.draining:
            return _json_response({"status": "draining"}, 503)
        return _json_response({"status": "ok", "model": svc.name,
                               "slots": settings.parallel, "active": svc.engine.active,
                               "queued": svc.engine.queue_depth})

    async def metrics(request):
        st, e = svc.engine.stats, svc.engine
        lines = [
            "# TYPE blockc_requests_total counter",
            f"blockc_requests_total {int(st['requests_total'])}",
            "# TYPE blockc_prompt_tokens_total counter",
            f"blockc_prompt_tokens_total {int(st['prompt_tokens'])}",
            "# TYPE blockc_prompt_tokens_cached_total counter",
            f"blockc_prompt_tokens_cached_total {int(st['prompt_tokens_cached'])}",
            "# TYPE blockc_completion_tokens_total counter",
            f"blockc_completion_tokens_total {int(st['completion_tokens'])}",
            "# TYPE blockc_queue_depth gauge", f"blockc_queue_depth {e.queue_depth}",
            "# TYPE blockc_active_requests gauge", f"blockc_active_requests {e.active}",
            "# TYPE blockc_time_to_first_token_seconds summary",
            f"blockc_time_to_first_token_seconds_sum {st['ttft_seconds_sum']:.6f}",
            f"blockc_time_to_first_token_seconds_count {int(st['ttft_count'])}",
        ]
        return PlainTextResponse("\n".join(lines) + "\n",
                                 media_type="text/plain; version=0.0.4")

    async def http_error(request, exc):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        msg = {404: f"no route {request.url.path}",
               405: f"{request.method} is not allowed on {request.url.path}"}.get(
            exc.status_code, str(exc.detail))
        return _json_response(error_body(msg, "invalid_request_error", None, code),
                              exc.status_code)

    async def server_error(request, exc):
        return _json_response(error_body(f"internal error: {type(exc).__name__}", "server_error",
                                         None, "internal_error"), 500)

    routes = [Route("/v1/chat/completions", chat_completions, methods=["POST"]),
              Route("/v1/completions", completions, methods=["POST"]),
              Route("/v1/models", models, methods=["GET"]),
              Route("/v1/models/{model:path}", model_info, methods=["GET"]),
              Route("/health", health, methods=["GET"]),
              Route("/metrics", metrics, methods=["GET"])]
    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        svc.engine.close()
        svc.prep.shutdown(wait=False, cancel_futures=True)

    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error,
                                                       Exception: server_error},
                    lifespan=lifespan)
    app.state.service = svc
    return app


# ---- answers ------------------------------------------------------------------------------

def _chat_logprobs(svc: Service, entries) -> Optional[Dict[str, Any]]:
    out = []
    for tok, lp, top in entries:
        out.append({"token": svc.token_label(tok), "logprob": lp,
                    "bytes": list(svc.tok.token_bytes(tok)),
                    "top_logprobs": [{"token": svc.token_label(i), "logprob": v,
                                      "bytes": list(svc.tok.token_bytes(i))}
                                     for i, v in top]})
    return {"content": out, "refusal": None}


def _completion_logprobs(svc: Service, entries, offset0: int = 0) -> Dict[str, Any]:
    toks, lps, tops, offs = [], [], [], []
    at = offset0
    for tok, lp, top in entries:
        t = svc.token_text(tok)
        toks.append(svc.token_label(tok))
        lps.append(lp)
        entry: Dict[str, float] = {}
        for i, v in top:  # one entry per token: two that print alike are told apart by id
            label = svc.token_label(i)
            entry[label if label not in entry else f"{label} (id {i})"] = v
        tops.append(entry)
        offs.append(at)
        at += len(t)
    return {"tokens": toks, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offs}


def _usage(ends: Dict[int, Dict[str, int]], prompt: int) -> Dict[str, Any]:
    comp = sum(u["completion_tokens"] for u in ends.values())
    u = usage(prompt, comp)
    u["prompt_tokens_details"] = {"cached_tokens": max((x["cached_tokens"] for x in ends.values()),
                                                       default=0)}
    return u


async def _next(queue: asyncio.Queue) -> Tuple[int, tuple]:
    """The next event (ConnectionError when the client went away: :func:`_watch`)."""
    i, ev = await queue.get()
    if ev[0] == "gone":
        raise ConnectionError("client gone")
    return i, ev


async def _watch(request, svc: "Service", jobs: List[Job], queue: asyncio.Queue) -> None:
    """Wait for the client of a request whose body is read to hang up; then cancel its
    jobs at once (the scheduler frees their slots at its next step) and tell the
    collector. The server tells of a hang-up as soon as the socket closes, whatever the
    collector is doing (a poll between events would never run while tokens arrive)."""
    while True:
        message = await request.receive()
        if message.get("type") == "http.disconnect":
            break
    for j in jobs:
        j.cancel()
    svc.engine.wake()
    queue.put_nowait((-1, ("gone",)))


async def _collect(request, svc: Service, req: SamplingRequest, jobs: List[Job],
                   queue: asyncio.Queue, rid: str, created: int, chat: bool):
    texts = {j.index: [] for j in jobs}
    lps: Dict[int, list] = {j.index: [] for j in jobs}
    ends: Dict[int, Dict[str, int]] = {}
    reasons: Dict[int, Optional[str]] = {}
    watcher = asyncio.ensure_future(_watch(request, svc, jobs, queue))
    try:
        while len(ends) < len(jobs):
            i, ev = await _next(queue)
            if ev[0] == "end" and ev[1] == "error":
                reasons[i], ends[i] = ev[1], ev[2]
                break
            if ev[0] == "token":
                texts[i].append(ev[1])
                if req.logprobs:
                    lps[i].append((ev[2], ev[3], ev[4]))
            else:
                reasons[i], ends[i] = ev[1], ev[2]
                texts[i].append(ev[3])
    except (ConnectionError, asyncio.CancelledError) as e:
        for j in jobs:
            j.cancel()
        svc.engine.wake()
        if isinstance(e, asyncio.CancelledError):
            raise
        from starlette.responses import Response
        return Response(status_code=499)  # nginx's "client closed request": no one reads it
    finally:
        watcher.cancel()
    for i, u in ends.items():
        if reasons[i] == "error":  # this request's other choices end with it
            for j in jobs:
                j.cancel()
            svc.engine.wake()
            return _error(APIError(500, f"generation failed: {u.get('error')}",
                                   type="server_error", code="internal_error"))
    use = _usage(ends, len(jobs[0].prompt))
    if chat:
        choices = [{"index": i, "message": {"role": "assistant", "content": "".join(texts[i]),
                                            "refusal": None},
                    "logprobs": _chat_logprobs(svc, lps[i]) if req.logprobs else None,
                    "finish_reason": reasons[i]} for i in sorted(texts)]
        return _json_response(chat_response(rid, created, svc.name, choices, use))
    choices = [{"index": i, "text": "".join(texts[i]),
                "logprobs": _completion_logprobs(svc, lps[i]) if req.logprobs else None,
                "finish_reason": reasons[i]} for i in sorted(texts)]
    return _json_response(completion_response(rid, created, svc.name, choices, use))


async def _stream(svc: Service, req: SamplingRequest, jobs: List[Job], queue: asyncio.Queue,
                  rid: str, created: int, chat: bool) -> AsyncIterator[str]:
    name = svc.name
    ends: Dict[int, Dict[str, int]] = {}
    offsets = {j.index: 0 for j in jobs}

    def chunk(i, piece, reason=None, entry=None, first=False):
        if chat:
            delta: Dict[str, Any] = {"role": "assistant", "content": ""} if first else {}
            if piece:
                delta["content"] = piece
            lp = _chat_logprobs(svc, [entry]) if entry is not None else None
            return chat_chunk(rid, created, name, [{"index": i, "delta": delta, "logprobs": lp,
                                                    "finish_reason": reason}])
        lp = None
        if entry is not None:
            lp = _completion_logprobs(svc, [entry], offsets[i])
        offsets[i] += len(piece)
        return completion_response(rid, created, name, [{"index": i, "text": piece,
                                                         "logprobs": lp,
                                                         "finish_reason": reason}], None)
    try:
        if chat:
            for j in jobs:
                yield _sse(chunk(j.index, "", first=True))
        while len(ends) < len(jobs):
            i, ev = await _next(queue)
            if ev[0] == "token":
                entry = (ev[2], ev[3], ev[4]) if req.logprobs else None
                if ev[1] or entry is not None:
                    yield _sse(chunk(i, ev[1], entry=entry))
            else:
                reason, ends[i], tail = ev[1], ev[2], ev[3]
                if reason == "error":
                    yield _sse(error_body(f"generation failed: {ends[i].get('error')}",
                                          "server_error", None, "internal_error"))
                    yield "data: [DONE]\n\n"
                    return
                if tail:
                    yield _sse(chunk(i, tail))
                yield _sse(chunk(i, "", reason=reason))
        if req.include_usage:
            u = _usage(ends, len(jobs[0].prompt))
            yield _sse(chat_chunk(rid, created, name, [], u) if chat
                       else completion_response(rid, created, name, [], u))
        yield "data: [DONE]\n\n"
    finally:  # the client went away (or the stream ended): nothing more to compute
        if len(ends) < len(jobs):
            for j in jobs:
                j.cancel()
            svc.engine.wake()
