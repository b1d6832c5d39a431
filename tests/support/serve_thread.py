"""``blockc serve``'s app in this process: uvicorn on a thread, on a free port of
127.0.0.1, so a test can hand the server a model or tokenizer that misbehaves on cue
(fault injection) and still talk HTTP to it."""
from __future__ import annotations

import asyncio
import json
import threading
import time

__all__ = ["ThreadServer"]


class ThreadServer:
    """create_app(settings, model, tokenizer) served by uvicorn on a daemon thread."""

    def __init__(self, settings, model=None, tokenizer=None):
        import uvicorn
        from blockc.serve import create_app
        self.app = create_app(settings, model, tokenizer)
        self.service = self.app.state.service
        config = uvicorn.Config(self.app, host="127.0.0.1", port=0, log_level="error",
                                access_log=False, lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)
        self.thread.start()
        end = time.monotonic() + 60
        while not (self.server.started and self.server.servers):
            if time.monotonic() > end or not self.thread.is_alive():
                raise RuntimeError("the in-process server did not start")
            time.sleep(0.02)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def post(self, path, body, **kw):
        import httpx
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return httpx.post(self.url + path, content=data, timeout=kw.pop("timeout", 60),
                          headers={"Content-Type": "application/json", **kw.pop("headers", {})},
                          **kw)

    def get(self, path, **kw):
        import httpx
        return httpx.get(self.url + path, timeout=kw.pop("timeout", 60), **kw)

    def stop(self):
        self.server.should_exit = True
        self.thread.join(30)


# ---- misbehaving on cue: the model and tokenizer a fault-injection test hands the server ----

class FaultyModel:
    """A model that sleeps ``delay`` seconds per call (so requests stay in flight) and
    fails on cue: a prompt holding token ``raise_on`` raises in its prefill, one holding
    ``nan_on`` gets logits of NaN. Everything else is the wrapped model's."""

    def __init__(self, model, delay=0.0, raise_on=None, nan_on=None):
        self._m, self.delay, self.raise_on, self.nan_on = model, delay, raise_on, nan_on

    def __getattr__(self, name):
        return getattr(self._m, name)

    def __call__(self, ids, *args, **kwargs):
        import numpy as np
        if self.delay:
            time.sleep(self.delay)
        if ids.shape[0] == 1 and self.raise_on is not None and (ids == self.raise_on).any():
            raise RuntimeError("injected: prefill")
        out = self._m(ids, *args, **kwargs)
        if self.nan_on is not None:
            rows = (ids == self.nan_on).any(axis=1)
            if rows.any():
                out = out.copy()
                out[rows] = np.nan
        return out


class FaultyTemplate:
    def __init__(self, template, word):
        self._t, self.word = template, word

    def __getattr__(self, name):
        return getattr(self._t, name)

    def render(self, messages, *args, **kwargs):
        if any(self.word in str(m.get("content", "")) for m in messages):
            raise RuntimeError("injected: template")
        return self._t.render(messages, *args, **kwargs)


class FaultyTokenizer:
    """A tokenizer that fails on cue: its template on a message holding
    ``"BOOM-template"``, encode on a text holding ``"BOOM-tokenize"``, decode on ids
    holding ``decode_on``."""

    def __init__(self, tok, decode_on=None):
        self._t, self.decode_on = tok, decode_on
        self._template = FaultyTemplate(tok.chat_template, "BOOM-template")

    def __getattr__(self, name):
        return getattr(self._t, name)

    @property
    def chat_template(self):
        return self._template

    def encode(self, text, *args, **kwargs):
        if "BOOM-tokenize" in text:
            raise RuntimeError("injected: tokenize")
        return self._t.encode(text, *args, **kwargs)

    def decode(self, ids, *args, **kwargs):
        if self.decode_on is not None and self.decode_on in list(ids):
            raise RuntimeError("injected: detokenize")
        return self._t.decode(ids, *args, **kwargs)


# ---- a request streaming beside the one under test --------------------------------------

def stream_completion(url, body, timeout=120, headers=None):
    """(text, finish_reason, error) of a streamed completion (an error event's message)."""
    import httpx
    text, reason, error = [], None, None
    with httpx.Client(timeout=timeout) as c:
        with c.stream("POST", url + "/v1/completions", json={**body, "stream": True},
                      headers=headers or {}) as r:
            if r.status_code != 200:
                r.read()
                return "", None, f"{r.status_code}: {r.text}"
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                if "error" in ev:
                    error = ev["error"]["message"]
                    continue
                for ch in ev["choices"]:
                    text.append(ch["text"])
                    reason = ch["finish_reason"] or reason
    return "".join(text), reason, error


class Companions:
    """``n`` streamed completions (seeded, sampling) started beside a request under test;
    :meth:`check` asserts each finished with the text it gets alone (``alone``, measured
    on the same server before). Use as ``with Companions(srv, alone) as c: ...``."""

    def __init__(self, server, alone, n=1, headers=None):
        self.server, self.alone, self.n, self.headers = server, alone, n, headers
        self.results = [None] * n

    def __enter__(self):
        self.threads = []
        for i in range(self.n):
            def run(i=i):
                self.results[i] = stream_completion(self.server.url,
                                                    companion_body(i % len(self.alone)),
                                                    headers=self.headers)
            t = threading.Thread(target=run, daemon=True)
            t.start()
            self.threads.append(t)
        end = time.monotonic() + 60  # every companion decoding before the test goes on
        while self.server.service.engine.active < min(self.n, self.server.service.settings.parallel):
            if time.monotonic() > end:
                raise RuntimeError("the companions did not start")
            time.sleep(0.005)
        return self

    def __exit__(self, *exc):
        for t in self.threads:
            t.join(120)
        if exc[0] is None:
            self.check()

    def check(self):
        for i, got in enumerate(self.results):
            want = self.alone[i % len(self.alone)]
            assert got == want, f"companion {i} was harmed: {got!r} != alone {want!r}"


#: token ids the companions never choose (logit_bias -100): the faults' cues
MARK, CUES = 7, (7, 8, 9)


def companion_body(i, tokens=160):
    return {"model": "m", "prompt": ["the block reads", "a residual stream", "Hello! How",
                                     "What is the capital"][i % 4], "max_tokens": tokens,
            "temperature": 0.9, "seed": 100 + i, "ignore_eos": True,
            "logit_bias": {str(c): -100 for c in CUES}}
