"""``blockc generate`` and ``blockc convert``: checkpoints on the command line.

    blockc generate --model DIR --prompt TEXT [--max-new-tokens N] [--temperature T]
                    [--top-k K] [--top-p P] [--min-p P] [--repetition-penalty R]
                    [--seed S] [--dtype float32|bfloat16|q8_0] [--threads N]
    blockc generate --model DIR --ids 1,2,3 ...       (no tokenizer needed)
    blockc convert SRC DST       (a chapter-6 state dict in safetensors <-> a checkpoint directory)

The continuation is streamed to stdout as it is made (text with the directory's
tokenizer.json; with --ids, the new ids separated by spaces), and generation
stops at the model's end-of-text token (config.json's eos_token_id).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from .gpt import DTYPES, GPT, GPTConfig
from ._errors import BlockcValueError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "generate", help="generate text (or ids) with a checkpoint directory",
        description="Load a Hugging Face checkpoint directory (config.json and safetensors; "
                    "never the network, never a pickle) and stream a continuation of the prompt "
                    "to stdout.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="the prompt text (needs the directory's tokenizer.json)")
    src.add_argument("--ids", help="the prompt as comma-separated token ids")
    p.add_argument("--model", required=True, metavar="DIR", help="the checkpoint directory")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate (64)")
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy (the default)")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--min-p", type=float, default=None)
    p.add_argument("--repetition-penalty", type=float, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--dtype", choices=DTYPES, default=None,
                   help="weight storage (default: bfloat16 for a bfloat16 checkpoint, else float32)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--no-eos", action="store_true", help="do not stop at the end-of-text token")
    p.add_argument("--stats", action="store_true",
                   help="print the load time and tokens/s on stderr")
    p.set_defaults(func=run_generate)

    c = subparsers.add_parser(
        "convert", help="a chapter-6 state dict (safetensors) <-> a checkpoint directory",
        description="SRC a directory -> DST a .safetensors file of blockc's state dict (the "
                    "chapter's names), or SRC such a file -> DST a Hugging Face directory (its "
                    "config from --config-json, a config.json of the architecture).")
    c.add_argument("src")
    c.add_argument("dst")
    c.add_argument("--config-json", default=None,
                   help="file -> directory: the config.json describing the state dict")
    c.set_defaults(func=run_convert)


def _write(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(0)


def run_generate(args: argparse.Namespace) -> int:
    from . import runtime
    from .text import TextStream, Tokenizer
    if args.threads is not None:
        runtime.set_num_threads(args.threads)
    tok = None
    if args.prompt is not None:
        tok = Tokenizer.from_pretrained(args.model)  # checked before the weights are read
    else:
        try:
            ids = [int(x) for x in args.ids.split(",") if x.strip()]
        except ValueError:
            raise BlockcValueError(f"--ids must be comma-separated integers, got {args.ids!r}") from None
        if not ids:
            raise BlockcValueError("--ids is empty")
    t0 = time.perf_counter()
    m = GPT.from_pretrained(args.model, dtype=args.dtype)
    load = time.perf_counter() - t0
    from .hf import read_config
    eos = None if args.no_eos else read_config(args.model).get("eos_token_id")
    if tok is not None:
        ids = list(tok.encode(args.prompt))
        if not ids:
            raise BlockcValueError("--prompt encodes to no tokens")
        if eos is None and not args.no_eos:
            eos = tok.eos_token_id
    opts = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                min_p=args.min_p, repetition_penalty=args.repetition_penalty, seed=args.seed,
                eos_token_id=eos)
    stream = TextStream(tok) if tok is not None else None
    n, t1 = 0, time.perf_counter()
    for token in m.stream(np.array(ids), args.max_new_tokens, **opts):
        n += 1
        _write(stream.push(token) if stream is not None else f"{' ' if n > 1 else ''}{token}")
    _write((stream.flush() if stream is not None else "") + "\n")
    if args.stats:
        dt = time.perf_counter() - t1
        sys.stderr.write(f"loaded in {load:.2f} s; {n} tokens in {dt:.2f} s "
                         f"({n / dt if dt > 0 else 0:.1f} tokens/s)\n")
    return 0


def run_convert(args: argparse.Namespace) -> int:
    from . import hf, safetensors as stf
    if os.path.isdir(args.src):
        m = GPT.from_pretrained(args.src)
        sd = m.state_dict()
        stf.write(args.dst, sd, {"format": "blockc", "config": _dumps(m.config.to_hf())})
        print(f"wrote {args.dst}: {len(sd)} tensors, {m.num_parameters():,} parameters")
        return 0
    tensors, meta = stf.read(args.src)
    if args.config_json:
        cfg = GPTConfig.from_hf(args.config_json)
    elif "config" in meta:
        import json
        cfg = GPTConfig.from_hf(json.loads(meta["config"]))
    else:
        raise BlockcValueError(f"{args.src}: no config in its metadata: pass --config-json")
    m = GPT.from_state_dict({k: t.to_float32() for k, t in tensors.items()}, cfg)
    m.save_pretrained(args.dst)
    print(f"wrote {args.dst}: config.json and model.safetensors, {m.num_parameters():,} parameters")
    return 0


def _dumps(d) -> str:
    import json
    return json.dumps(d, separators=(",", ":"))
