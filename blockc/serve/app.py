"""The OpenAI-compatible HTTP API on Starlette, over :class:`blockc.serve.engine.Engine`.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions`` (``stream: true`` as
server-sent events ending in ``data: [DONE]``), ``POST /v1/embeddings``, ``POST
/tokenize`` and ``POST /detokenize`` (llama-server's), ``GET /v1/models`` (and
``/v1/models/{id}``), ``GET /health`` (200 when serving, 503 while draining: a
readiness probe), ``GET /metrics`` (Prometheus text). Every error is OpenAI's JSON
error object with a fitting status, never a traceback. The models behind the routes are
:class:`blockc.serve.models.ModelPool`'s (one, or several loaded on first use).
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import json
import threading
import time
import uuid
import weakref
from typing import Any, AsyncIterator, Dict, List, Optional, Tuple


from .embed import detokenize_response, embedding_response, tokenize_response
from .engine import Draining, Job, QueueFull
from .metrics import AccessLog, metrics_text, timings
from .models import ModelPool, model_list
from .service import Service
from .settings import Settings
from .types import (APIError, SamplingRequest, chat_chunk, chat_response, completion_response,
                    error_body, model_object, parse_chat, parse_completion, parse_detokenize,
                    parse_embeddings, parse_tokenize, usage)

__all__ = ["Service", "create_app", "drain"]


def _starlette():
    try:
        import starlette  # noqa: F401
    except ImportError:
        raise ImportError("the server needs starlette and uvicorn: pip install 'blockc[serve]'"
                          ) from None


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


#: a text no piece is: where a chunk's text goes in its pre-encoded JSON (:class:`_Pieces`)
_HOLE = "\u0000blockc-piece\u0000"


class _Pieces:
    """The SSE event of a plain streamed piece (no logprobs, nothing read back), from a
    chunk's JSON encoded once per choice: the piece's JSON string between its halves.
    The same bytes :func:`_sse` makes of the whole chunk, without encoding it again
    per token."""

    def __init__(self, make):
        self._make = make
        self._halves: Dict[int, Tuple[str, str]] = {}

    def __call__(self, i: int, piece: str) -> str:
        h = self._halves.get(i)
        if h is None:
            pre, _, post = _sse(self._make(i, _HOLE)).partition(_dumps(_HOLE))
            h = self._halves[i] = (pre, post)
        return h[0] + _dumps(piece) + h[1]


class _Relay:
    """Events from the scheduler thread to the event loop's queues, a step's at once:
    :meth:`put` keeps them, :meth:`send` (the engine's step listener, after each step)
    wakes the loop once (``call_soon_threadsafe``: a write to its self-pipe, which
    takes the GIL back and forth) to deliver every event kept. One wake-up per step
    instead of one per token."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self._lock = threading.Lock()
        self._items: List[Tuple[asyncio.Queue, Any]] = []
        self._pending = False

    def put(self, queue: asyncio.Queue, item: Any) -> None:
        """Keep item for queue until the next :meth:`send` (any thread)."""
        with self._lock:
            self._items.append((queue, item))

    def send(self) -> None:
        """Deliver what is kept, on the loop (RuntimeError when the loop is closed)."""
        with self._lock:
            if not self._items or self._pending:
                return
            self._pending = True
        self.loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        with self._lock:
            items, self._items, self._pending = self._items, [], False
        for q, item in items:
            q.put_nowait(item)


def create_app(settings: Settings, model: Any = None, tokenizer: Any = None):
    """The Starlette application serving ``settings``' models (the first one loaded now,
    from ``model`` and ``tokenizer`` when given; the others on first use).

    Raises
    ------
    ImportError
        starlette is not installed.
    """
    _starlette()
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.middleware import Middleware
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    specs = model_list(settings)

    def load(name: str, path: Optional[str]) -> Service:
        # a draft model drafts for the first model only
        return Service(dataclasses.replace(settings, model=path, model_name=name,
                                           draft_model=settings.draft_model
                                           if (name, path) == specs[0] else None))

    pool = ModelPool(specs, load, settings.max_memory)
    svc = None
    if len(specs) == 1 or model is not None:  # one model: loaded now, as the server starts
        name, path = specs[0]
        svc = Service(dataclasses.replace(settings, model=path, model_name=name), model,
                      tokenizer)
        pool.preload(name, svc)
    created = int(time.time())
    state = {"draining": False}

    def check_auth(request) -> None:
        key = settings.api_key
        if key is None:
            return
        got = request.headers.get("authorization", "").encode("utf-8", "surrogateescape")
        # compared in constant time: how long a refusal takes tells nothing of the key
        if not hmac.compare_digest(got, f"Bearer {key}".encode("utf-8")):
            raise APIError(401, "Incorrect API key provided", type="invalid_request_error",
                           code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})

    def check_open(svc: Optional[Service] = None) -> None:
        if state["draining"] or (svc is not None and (svc.draining or svc.engine.draining)):
            raise APIError(503, "the server is shutting down", type="server_error",
                           code="unavailable")

    async def read_json(request) -> Any:
        check_auth(request)
        check_open()
        raw = await _read_body(request, settings.max_body_bytes)
        try:
            return json.loads(raw)
        except ValueError as e:
            raise APIError(400, f"the request body is not valid JSON: {e}",
                           code="invalid_json") from None
        except RecursionError:
            raise APIError(400, "the request body is JSON nested too deeply",
                           code="invalid_json") from None

    relays: "weakref.WeakKeyDictionary[Any, _Relay]" = weakref.WeakKeyDictionary()  # a loop's

    def served(request) -> Optional[List[str]]:
        """The names a request may give: any with one model (None), else the pool's."""
        return None if pool.single else pool.names

    async def generate(request, chat: bool):
        entry = None
        try:
            body = await read_json(request)
            req = (parse_chat if chat else parse_completion)(body, served(request))
            entry, svc = await pool.acquire(req.model)
            check_open(svc)
            request.state.model = svc.name
            loop = asyncio.get_running_loop()
            ids = await loop.run_in_executor(svc.prep, svc.prompt_ids, req)
            queue: asyncio.Queue = asyncio.Queue()
            relay = relays.get(loop)
            if relay is None:
                relay = relays[loop] = _Relay(loop)
            svc.engine.add_step_listener(relay.send)

            def emit_for(i):
                def emit(ev):
                    relay.put(queue, (i, ev))
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
        finally:  # submitted (its engine busy: never unloaded) or refused
            if entry is not None:
                pool.release(entry)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created_at = int(time.time())
        info = request.state
        info.id = rid
        if req.stream:
            return StreamingResponse(_stream(svc, req, jobs, queue, rid, created_at, chat, info),
                                     media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        return await _collect(request, svc, req, jobs, queue, rid, created_at, chat, info)

    async def chat_completions(request):
        return await generate(request, True)

    async def completions(request):
        return await generate(request, False)

    async def embeddings(request):
        try:
            body = await read_json(request)
            req = parse_embeddings(body, served(request))
            async with pool.using(req.model) as svc:
                request.state.model = svc.name
                loop = asyncio.get_running_loop()
                vecs, n = await loop.run_in_executor(svc.embedder, svc.embed, req)
        except APIError as e:
            return _error(e)
        request.state.tokens = (n, 0)
        return _json_response(embedding_response(req, svc.name, vecs, n))

    async def tokenize(request):
        try:
            body = await read_json(request)
            req = parse_tokenize(body, served(request))
            async with pool.using(req["model"]) as svc:
                request.state.model = svc.name
                loop = asyncio.get_running_loop()
                out = await loop.run_in_executor(svc.prep, tokenize_response, svc.tok,
                                                 req["content"], req["add_special"],
                                                 req["with_pieces"])
        except APIError as e:
            return _error(e)
        return _json_response(out)

    async def detokenize(request):
        try:
            body = await read_json(request)
            req = parse_detokenize(body, served(request))
            async with pool.using(req["model"]) as svc:
                request.state.model = svc.name
                out = detokenize_response(svc.tok, req["tokens"], svc.model.config.vocab)
        except APIError as e:
            return _error(e)
        return _json_response(out)

    async def models(request):
        try:
            check_auth(request)
        except APIError as e:
            return _error(e)
        return _json_response({"object": "list",
                               "data": [model_object(n, created) for n in pool.names]})

    async def model_info(request):
        try:
            check_auth(request)
            mid = request.path_params["model"]
            if mid not in pool.entries:
                raise APIError(404, f"The model '{mid}' does not exist", param="model",
                               code="model_not_found")
        except APIError as e:
            return _error(e)
        return _json_response(model_object(mid, created))

    async def health(request):
        loaded = [e.service for e in pool.loaded()]
        if state["draining"] or any(s.draining or s.engine.draining for s in loaded):
            return _json_response({"status": "draining"}, 503)
        body = {"status": "ok", "model": pool.names[0] if pool.single else None,
                "models": {e.name: ("loaded" if e.service is not None else "unloaded")
                           for e in pool.entries.values()},
                "slots": settings.parallel, "active": sum(s.engine.active for s in loaded),
                "queued": sum(s.engine.queue_depth for s in loaded)}
        return _json_response(body)

    async def metrics_route(request):
        try:
            check_auth(request)
        except APIError as e:
            return _error(e)
        text, media = metrics_text(pool)
        from starlette.responses import Response
        return Response(text, media_type=media)

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
              Route("/v1/embeddings", embeddings, methods=["POST"]),
              Route("/tokenize", tokenize, methods=["POST"]),
              Route("/detokenize", detokenize, methods=["POST"]),
              Route("/v1/models", models, methods=["GET"]),
              Route("/v1/models/{model:path}", model_info, methods=["GET"]),
              Route("/health", health, methods=["GET"]),
              Route("/metrics", metrics_route, methods=["GET"])]

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        pool.close()

    middleware = [Middleware(AccessLog)]
    if settings.cors_origins:
        from starlette.middleware.cors import CORSMiddleware
        middleware.append(Middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                                     allow_methods=["GET", "POST", "OPTIONS"],
                                     allow_headers=["*"]))
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error,
                                                       Exception: server_error},
                    lifespan=lifespan, middleware=middleware)
    app.state.service = svc  # the first model's (None until a server of several loads it)
    app.state.pool = pool
    app.state.serving = state  # {"draining": bool}: SIGTERM sets it
    return app


def drain(app, timeout: Optional[float]) -> None:
    """Refuse new requests (503, /health 503) and wait up to ``timeout`` seconds for the
    running ones of every loaded model to finish."""
    app.state.serving["draining"] = True
    services = [e.service for e in app.state.pool.loaded()]
    for s in services:
        s.draining = True
    end = None if timeout is None else time.monotonic() + timeout
    for s in services:
        s.engine.drain(None if end is None else max(0.0, end - time.monotonic()))


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
                   queue: asyncio.Queue, rid: str, created: int, chat: bool, info: Any):
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
    info.tokens = (use["prompt_tokens"], use["completion_tokens"])
    if chat:
        choices = []
        for i in sorted(texts):
            message = {"role": "assistant", "content": "".join(texts[i]), "refusal": None}
            reason = reasons[i]
            shaper = req.plan.shaper() if req.plan is not None else None
            if shaper is not None:  # tool calls, reasoning: read back from the text
                shaper.feed(message["content"])
                shaper.close()
                message, reason = shaper.message(), shaper.finish_reason(reason)
            choices.append({"index": i, "message": message,
                            "logprobs": _chat_logprobs(svc, lps[i]) if req.logprobs else None,
                            "finish_reason": reason})
        out = chat_response(rid, created, svc.name, choices, use)
        out["timings"] = timings(ends, use)
        return _json_response(out)
    choices = [{"index": i, "text": "".join(texts[i]),
                "logprobs": _completion_logprobs(svc, lps[i]) if req.logprobs else None,
                "finish_reason": reasons[i]} for i in sorted(texts)]
    out = completion_response(rid, created, svc.name, choices, use)
    out["timings"] = timings(ends, use)
    return _json_response(out)


async def _stream(svc: Service, req: SamplingRequest, jobs: List[Job], queue: asyncio.Queue,
                  rid: str, created: int, chat: bool, info: Any) -> AsyncIterator[str]:
    name = svc.name
    ends: Dict[int, Dict[str, int]] = {}
    offsets = {j.index: 0 for j in jobs}
    plan = req.plan if chat else None
    shapers = {j.index: plan.shaper() for j in jobs} if plan is not None and plan.parses else {}

    def chunks(i, piece, reason=None, entry=None):
        """The chunks of a piece of a choice's text (read back by its shaper, if any)."""
        sh = shapers.get(i)
        if sh is None:
            if piece or entry is not None or reason is not None:
                yield chunk(i, piece, reason, entry)
            return
        deltas = sh.feed(piece) if piece else []
        if reason is not None:
            deltas += sh.close()
            reason = sh.finish_reason(reason)
        if not deltas and (entry is not None or reason is not None):
            deltas = [{}]
        for k, d in enumerate(deltas):
            last = k == len(deltas) - 1
            yield chunk(i, "", reason if last else None, entry if k == 0 else None, delta=d)

    def chunk(i, piece, reason=None, entry=None, first=False, delta=None):
        if chat:
            if delta is None:
                delta = {"role": "assistant", "content": ""} if first else {}
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
    plain = _Pieces(lambda i, piece: chunk(i, piece)) if not req.logprobs and not shapers \
        else None

    def events(i, ev, out: List[str]) -> bool:
        """The SSE text of one event into out; True when the stream must end (an error)."""
        if ev[0] == "token":
            if plain is not None:
                if ev[1]:
                    out.append(plain(i, ev[1]))
                return False
            entry = (ev[2], ev[3], ev[4]) if req.logprobs else None
            out.extend(_sse(c) for c in chunks(i, ev[1], entry=entry))
            return False
        reason, ends[i], tail = ev[1], ev[2], ev[3]
        if reason == "error":
            out.append(_sse(error_body(f"generation failed: {ends[i].get('error')}",
                                       "server_error", None, "internal_error")))
            out.append("data: [DONE]\n\n")
            return True
        if shapers:
            out.extend(_sse(c) for c in chunks(i, tail, reason=reason))
            return False
        if tail:
            out.append(_sse(chunk(i, tail)))
        out.append(_sse(chunk(i, "", reason=reason)))
        return False
    try:
        if chat:
            for j in jobs:
                yield _sse(chunk(j.index, "", first=True))
        while len(ends) < len(jobs):
            # every event already delivered goes out in one write
            batch = [await _next(queue)]
            while not queue.empty():
                batch.append(queue.get_nowait())
            out: List[str] = []
            for i, ev in batch:
                if ev[0] == "gone":
                    raise ConnectionError("client gone")
                if events(i, ev, out):
                    yield "".join(out)
                    return
            if out:
                yield "".join(out)
        u = _usage(ends, len(jobs[0].prompt))
        info.tokens = (u["prompt_tokens"], u["completion_tokens"])
        if req.include_usage:
            last = (chat_chunk(rid, created, name, [], u) if chat
                    else completion_response(rid, created, name, [], u))
            last["timings"] = timings(ends, u)
            yield _sse(last)
        yield "data: [DONE]\n\n"
    finally:  # the client went away (or the stream ended): nothing more to compute
        if len(ends) < len(jobs):
            for j in jobs:
                j.cancel()
            svc.engine.wake()
