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
