"""An OpenAI-compatible server with continuous batching: ``blockc serve --model DIR``.

The optional extra ``pip install 'blockc[serve]'`` (uvicorn and Starlette, jinja2 for
chat templates). Layers, each over the public API of the one below:

- :mod:`blockc.serve.settings`: :class:`Settings`, what the command line sets;
- :mod:`blockc.serve.types`: the API's request and response types, declared once
  (parsing and checking every field, OpenAI's error shape);
- :mod:`blockc.serve.sampling`: a request's fields as generation options (one place);
- :mod:`blockc.serve.agents`: structured output, tool calls and reasoning (a request's
  grammar, its tools in the template, the reply read back into ``tool_calls`` and
  ``reasoning_content``);
- :mod:`blockc.serve.engine`: the scheduler thread, its KV cache slots, chunked
  prefill, prefix reuse; a row's tokens are the same bits whatever else is running;
- :mod:`blockc.serve.embed`: embeddings (pooling as the model directory says), tokenize
  and detokenize;
- :mod:`blockc.serve.models`: the models served (one, or several loaded on first use and
  unloaded least-recently-used past a memory budget);
- :mod:`blockc.serve.metrics`: /metrics, the request log line, timings;
- :mod:`blockc.serve.app`: the Starlette routes;
- :func:`serve`: uvicorn, with SIGTERM draining (running requests finish, new ones get
  503, /health turns 503 so a load balancer stops sending, then the process exits).

The server keeps no state between requests but a cache of recent prompts' keys and
values (a speed-up only), so replicas behind an ordinary load balancer serve many
users: see docs/serving.md.
"""
from __future__ import annotations

import errno
import signal
import socket
import threading
from typing import Any, Optional

from .app import create_app, drain
from .settings import Settings

__all__ = ["Settings", "create_app", "serve", "check_port"]


def check_port(host: str, port: int) -> None:
    """Refuse a port another process listens on, before any model loads (bound as uvicorn
    binds it, SO_REUSEADDR, then closed at once).

    Raises
    ------
    OSError
        The port is in use, or the address cannot be bound, in one sentence.
    """
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise OSError(f"cannot bind {host}:{port}: {e.strerror or e}") from None
    family, kind, proto, _, addr = infos[0]
    s = socket.socket(family, kind, proto)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(addr)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise OSError(f"port {port} on {host} is in use by another process: stop it or "
                          "choose another with --port") from None
        raise OSError(f"cannot bind {host}:{port}: {e.strerror or e}") from None
    finally:
        s.close()


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
    check_port(settings.host, settings.port)
    app = create_app(settings)
    serving = app.state.serving

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            if sig == signal.SIGTERM and not serving["draining"]:
                serving["draining"] = True  # /health 503, new requests 503, running ones finish

                def run_drain():
                    drain(app, settings.drain_timeout)
                    self.should_exit = True
                threading.Thread(target=run_drain, name="blockc-drain", daemon=True).start()
                return
            super().handle_exit(sig, frame)

        async def startup(self, sockets=None):
            await super().startup(sockets)
            if ready is not None and self.servers:
                host, port = self.servers[0].sockets[0].getsockname()[:2]
                svc = app.state.service  # None: several models, each loaded on first use
                ready(host, port, svc.summary() if svc is not None
                      else "each model loads on its first request")

    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning",
                            access_log=False, timeout_graceful_shutdown=5, lifespan="on")
    server = Server(config)
    server.run()
    return 0
