"""``blockc serve``: an OpenAI-compatible server with continuous batching.

    blockc serve --model PATH|ID [--host 127.0.0.1] [--port 8000] [--parallel N]
                 [--api-key K] [--ctx-size N] [--max-queue N] [--model-name NAME] ...

A request that omits a sampling field (temperature, top_p, top_k, min_p,
repetition_penalty) gets the model's default (``generation_config.json``, a GGUF file's
``general.sampling.*``, else llama.cpp's), as llama-server does; the startup line names them.

Needs the 'serve' extra (uvicorn, starlette, jinja2). Binds 127.0.0.1 unless --host
says otherwise; SIGTERM drains (running requests finish, new ones get 503) and exits.
"""
from __future__ import annotations

import argparse
import os
import sys

from .._errors import BlockcValueError
from ..checkpoint.hf import LOAD_DTYPES
from ..checkpoint.gguf import is_gguf
from ..serve import Settings, serve
from ._options import add_cache_dtype, add_model, add_threads, model_path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "serve", help="an OpenAI-compatible HTTP server (chat and completions, streaming)",
        description="Serve a checkpoint directory over the OpenAI API (POST /v1/chat/completions, "
                    "POST /v1/completions, GET /v1/models, GET /health, GET /metrics), requests "
                    "batched together as they come and go; each request's tokens are the bits it "
                    "gets alone.")
    add_model(p, what="the model to serve")
    p.add_argument("--model-name", default=None,
                   help="the id clients send as 'model' (default: the Hub id, or the "
                        "directory's or file's name)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (8000; 0: any free port)")
    p.add_argument("--parallel", type=int, default=4, help="requests decoded together (4)")
    p.add_argument("--ctx-size", "-c", type=int, default=None,
                   help="positions per request, prompt + completion (default: the model's "
                        "context, bounded so the slots' KV cache takes at most a quarter of "
                        "the available memory)")
    p.add_argument("--max-queue", type=int, default=64,
                   help="requests waiting for a slot before 429 (64)")
    p.add_argument("--max-body", type=int, default=1 << 20, help="largest request body in bytes")
    p.add_argument("--prefill-chunk", type=int, default=128,
                   help="prompt tokens per scheduler step (128)")
    p.add_argument("--no-prefix-reuse", action="store_true",
                   help="recompute every prompt (no reuse of cached prefixes)")
    p.add_argument("--template-timeout", type=float, default=5.0,
                   help="seconds a chat template may take to render a request (5; 400 past it)")
    p.add_argument("--api-key", default=os.environ.get("BLOCKC_API_KEY"),
                   help="require 'Authorization: Bearer KEY' (default: $BLOCKC_API_KEY)")
    p.add_argument("--dtype", choices=LOAD_DTYPES, default=None,
                   help="weight storage (default: bfloat16 for a bfloat16 checkpoint, else float32; a "
                        "GGUF file's matrices as its type's measured default, 'exact' for "
                        "its very weights with float activations, 'integer' for llama.cpp's "
                        "8-bit activations)")
    add_cache_dtype(p)
    add_threads(p)
    p.set_defaults(func=run_serve)


def settings_from_args(args: argparse.Namespace) -> Settings:
    for name in ("parallel", "max_queue", "max_body", "prefill_chunk"):
        if getattr(args, name) < 1:
            raise BlockcValueError(f"--{name.replace('_', '-')} must be >= 1")
    if not 0 <= args.port <= 65535:
        raise BlockcValueError(f"--port must be in [0, 65535], got {args.port}")
    if args.ctx_size is not None and args.ctx_size < 2:
        raise BlockcValueError("--ctx-size must be >= 2")
    if not args.template_timeout > 0:  # NaN too
        raise BlockcValueError(f"--template-timeout must be > 0, got {args.template_timeout}")
    path = model_path(args)  # a path, or a Hub id in the local cache
    if not os.path.isdir(path) and not is_gguf(path):
        raise BlockcValueError(f"--model {args.model}: not a directory or a GGUF file")
    name = args.model_name
    if name is None and path != args.model:  # a Hub id: clients name it so
        name = args.model
    return Settings(model=path, model_name=name, host=args.host, port=args.port,
                    parallel=args.parallel, ctx_size=args.ctx_size, max_queue=args.max_queue,
                    max_body_bytes=args.max_body, prefill_chunk=args.prefill_chunk,
                    prefix_reuse=not args.no_prefix_reuse, cache_dtype=args.cache_dtype,
                    api_key=args.api_key, template_timeout=args.template_timeout,
                    dtype=args.dtype, threads=args.threads)


def run_serve(args: argparse.Namespace) -> int:
    s = settings_from_args(args)

    def ready(host, port, summary):
        sys.stderr.write(f"blockc serve: {s.served_name} on http://{host}:{port}/v1 "
                         f"({s.parallel} slots)\n{summary}\n")
        sys.stderr.flush()
    return serve(s, ready=ready)
