"""An OpenAI-compatible server with continuous batching: ``blockc serve --model DIR``.

The optional extra ``pip install 'blockc[serve]'`` (uvicorn and Starlette, jinja2 for
chat templates). Layers, each over the public API of the one below:

- :mod:`blockc.serve.settings`: :class:`Settings`, what the command line sets;
- :mod:`blockc.serve.types`: the API's request and response types, declared once
  (parsing and checking every field, OpenAI's error shape);
- :mod:`blockc.serve.sampling`: a request's fields as generation options (one place);
- :mod:`blockc.serve.engine`: the scheduler thread, its KV cache slots, chunked
  prefill, prefix reuse; a row's tokens are the same bits whatever else is running;
- :mod:`blockc.serve.app`: the Starlette routes;
- :func:`serve`: uvicorn, with SIGTERM draining (running requests finish, new ones get
  503, /health turns 503 so a load balancer stops sending, then the process exits).

The server keeps no state between requests but a cache of recent prompts' keys and
values (a speed-up only), so replicas behind an ordinary load balancer serve many
users: see docs/serving.md.
"""
from __future__ import annotations

import signal
import sys
import threading
from typing import Any, Optional

from .app import create_app
from .settings import Settings

__all__ = ["Settings", "create_app", "serve"]


def serve(settings: Settings, ready: Optional[Any] = None) -> int:
    """Load the model and serve until SIGTERM (drained) or Ctrl-C.

    Parameters
    ----------
    settings : Settings
    ready : callable, optional
        Called with the bound (host, port) and a line naming the context and the
        default sampling (and where it came from) once the server listens.

    Returns
    -------
    int
        The exit status (0).

    Raises
    ------
    ImportError
        uvicorn or starlette is not installed.
    """
    try:
        import uvicorn
    except ImportError:
        raise ImportError("the server needs uvicorn and starlette: pip install 'blockc[serve]'"
                          ) from None
    app = create_app(settings)
    svc = app.state.service

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            if sig == signal.SIGTERM and not svc.draining:
                svc.draining = True  # /health 503, new requests 503, running ones finish

                def drain():
                    svc.engine.drain(settings.drain_timeout)
                    self.should_exit = True
                threading.Thread(target=drain, name="blockc-drain", daemon=True).start()
                return
            super().handle_exit(sig, frame)

        async def startup(self, sockets=None):
            await super().startup(sockets)
            if ready is not None and self.servers:
                host, port = self.servers[0].sockets[0].getsockname()[:2]
                ready(host, port, svc.summary())

    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning",
                            access_log=False, timeout_graceful_shutdown=5, lifespan="on")
    server = Server(config)
    server.run()
    return 0
