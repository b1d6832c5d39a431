"""``blockc serve``: an OpenAI-compatible server with continuous batching.

    blockc serve --model PATH|ID [--host 127.0.0.1] [--port 8000] [--parallel N]
                 [--api-key K] [--ctx-size N] [--max-queue N] [--alias NAME] ...
    blockc serve --model a.gguf --model name=dir/ [--models-dir DIR] [--max-memory 8G]

A request that omits a sampling field (temperature, top_p, top_k, min_p,
repetition_penalty) gets the model's default (``generation_config.json``, a GGUF file's
``general.sampling.*``, else llama.cpp's), as llama-server does; the startup line names them.

Needs the 'serve' extra (uvicorn, starlette, jinja2). Binds 127.0.0.1 unless --host
says otherwise; a port in use is refused before any model loads (exit status 1);
SIGTERM drains (running requests finish, new ones get 503) and exits.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys

from .._errors import BlockcValueError
from ..checkpoint.hf import LOAD_DTYPES
from ..checkpoint.gguf import is_gguf
from ..checkpoint.locate import resolve
from ..serve import Settings, serve
from ..serve.models import parse_memory, split_model_arg
from ._options import add_cache_dtype, add_threads


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "serve", help="an OpenAI-compatible HTTP server (chat, completions, embeddings)",
        description="Serve checkpoints over the OpenAI API (POST /v1/chat/completions, "
                    "POST /v1/completions, POST /v1/embeddings, GET /v1/models; POST "
                    "/tokenize and /detokenize; GET /health, GET /metrics), requests "
                    "batched together as they come and go; each request's tokens are the bits it "
                    "gets alone.")
    p.add_argument("--model", action="append", default=[], metavar="[NAME=]PATH|ID",
                   help="a model to serve: a checkpoint directory (config.json and "
                        "safetensors), a .gguf file, or a Hugging Face Hub id already in the "
                        "local cache; NAME= names it. Repeat for several models (each loads "
                        "on its first request)")
    p.add_argument("--file", default=None, metavar="NAME.gguf",
                   help="with a Hub id whose repository holds several GGUF files: the one to load")
    p.add_argument("--revision", default="main",
                   help="with a Hub id: the branch, tag or commit of the cache (main)")
    p.add_argument("--models-dir", default=None, metavar="DIR",
                   help="serve every .gguf file and checkpoint directory in DIR (named by "
                        "file stem or directory name), each loaded on its first request")
    p.add_argument("--max-memory", default=None, metavar="BYTES",
                   help="unload the least recently used idle model while the loaded ones "
                        "hold more than this (K, M, G suffixes: 8G)")
    p.add_argument("--model-name", "--alias", dest="model_name", default=None,
                   help="the id /v1/models lists for the (first) model (default: the Hub "
                        "id, or the directory's or file's name). With one model, requests "
                        "may name any model, or none")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (8000; 0: any free port)")
    p.add_argument("--parallel", type=int, default=4, help="requests decoded together (4)")
    p.add_argument("--ctx-size", "-c", type=int, default=None,
                   help="positions per request, prompt + completion (default: the model's "
                        "context, bounded so the slots' KV cache takes at most a quarter of "
                        "the available memory)")
    p.add_argument("--context-overflow", choices=("error", "truncate", "truncate-middle"),
                   default="error",
                   help="a prompt longer than the context: refused with 400 naming the "
                        "limit (error), cut to its last tokens (truncate), or to its first "
                        "and last halves of that (truncate-middle)")
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
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="let browser pages of ORIGIN call the API ('*': any); repeatable; "
                        "off by default")
    p.add_argument("--quiet", action="store_true", help="no log line per request")
    p.add_argument("--dtype", choices=LOAD_DTYPES, default=None,
                   help="weight storage (default: bfloat16 for a bfloat16 checkpoint, else float32; a "
                        "GGUF file's matrices as its type's measured default, 'exact' for "
                        "its very weights with float activations, 'integer' for llama.cpp's "
                        "8-bit activations)")
    p.add_argument("--draft-model", "--model-draft", dest="model_draft", default=None,
                   metavar="PATH|ID",
                   help="speculative decoding of the (first) model with this draft model (a "
                        "smaller model with the same tokenizer): every request's tokens are the "
                        "ones it gets without it, seeded samples included; loaded with --dtype")
    p.add_argument("--draft-max", type=int, default=None, metavar="N",
                   help="tokens the draft model drafts per round (5)")
    add_cache_dtype(p)
    add_threads(p)
    p.set_defaults(func=run_serve)


def _model_path(value: str, args: argparse.Namespace) -> str:
    path = resolve(value, file=args.file, revision=args.revision)
    if not os.path.isdir(path) and not is_gguf(path):
        raise BlockcValueError(f"--model {value}: not a directory or a GGUF file")
    return path


def settings_from_args(args: argparse.Namespace) -> Settings:
    for name in ("parallel", "max_queue", "max_body", "prefill_chunk"):
        if getattr(args, name) < 1:
            raise BlockcValueError(f"--{name.replace('_', '-')} must be >= 1")
    if not 0 <= args.port <= 65535:
        raise BlockcValueError(f"--port must be in [0, 65535], got {args.port}")
    if args.draft_max is not None and args.model_draft is None:
        raise BlockcValueError("--draft-max needs --draft-model")
    if args.draft_max is not None and not 1 <= args.draft_max <= 128:
        raise BlockcValueError(f"--draft-max must be in [1, 128], got {args.draft_max}")
    draft = None if args.model_draft is None else _model_path(args.model_draft, args)
    if args.ctx_size is not None and args.ctx_size < 2:
        raise BlockcValueError("--ctx-size must be >= 2")
    if not args.template_timeout > 0:  # NaN too
        raise BlockcValueError(f"--template-timeout must be > 0, got {args.template_timeout}")
    if not args.model and not args.models_dir:
        raise BlockcValueError("give a model: --model PATH (or --models-dir DIR)")
    max_memory = None
    if args.max_memory is not None:
        try:
            max_memory = parse_memory(args.max_memory)
        except ValueError as e:
            raise BlockcValueError(f"--max-memory: {e}") from None
    if args.models_dir is not None and not os.path.isdir(args.models_dir):
        raise BlockcValueError(f"--models-dir {args.models_dir}: not a directory")
    first, models = None, []
    name = args.model_name
    for i, value in enumerate(args.model):
        given, where = split_model_arg(value)
        path = _model_path(where, args)  # a path, or a Hub id in the local cache
        if given is None and path != where:  # a Hub id: clients name it so
            given = where
        if i == 0:
            first, name = path, given if given is not None else name
        else:
            models.append((given if given is not None else
                           os.path.basename(os.path.normpath(path)).removesuffix(".gguf"), path))
    return Settings(model=first, model_name=name, host=args.host, port=args.port,
                    parallel=args.parallel, ctx_size=args.ctx_size, max_queue=args.max_queue,
                    max_body_bytes=args.max_body, prefill_chunk=args.prefill_chunk,
                    prefix_reuse=not args.no_prefix_reuse, cache_dtype=args.cache_dtype,
                    api_key=args.api_key, template_timeout=args.template_timeout,
                    dtype=args.dtype, threads=args.threads, models=tuple(models),
                    models_dir=args.models_dir, max_memory=max_memory,
                    cors_origins=tuple(args.cors_origin),
                    context_overflow=args.context_overflow, draft_model=draft,
                    draft_max=args.draft_max)


def run_serve(args: argparse.Namespace) -> int:
    s = settings_from_args(args)
    if not args.quiet:  # one line per request on stderr
        log = logging.getLogger("blockc.serve")
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("blockc serve: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    names = [n for n in ([s.served_name] if s.model else []) + [n for n, _ in s.models]]
    if s.models_dir:
        names.append(f"{s.models_dir}/*")

    def ready(host, port, summary):
        sys.stderr.write(f"blockc serve: {', '.join(names)} on http://{host}:{port}/v1 "
                         f"({s.parallel} slots)\n{summary}\n")
        sys.stderr.flush()
    return serve(s, ready=ready)
