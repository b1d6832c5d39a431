"""``blockc generate``: a checkpoint's continuation of a prompt, streamed.

    blockc generate --model DIR --prompt TEXT [--max-new-tokens N] [--temperature T]
                    [--top-k K] [--top-p P] [--min-p P] [--repetition-penalty R]
                    [--seed S] [--dtype float32|bfloat16|float16|q8_0|q4_0|q5_0] [--threads N]
    blockc generate --model DIR --ids 1,2,3 ...       (no tokenizer needed)

The continuation is streamed to stdout as it is made (text with the directory's
tokenizer.json; with --ids, the new ids separated by spaces), and generation
stops at the model's end tokens (:func:`blockc.generation.config.end_ids`: its
generation config's, a GGUF file's end of text and end of turn, and the tokenizer's
end token), as ``blockc chat`` and the server do.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from .._errors import BlockcValueError
from ..generation.config import end_ids
from ..gpt import GPT
from ..checkpoint.hf import LOAD_DTYPES
from ..text.tokenizer import TextStream, Tokenizer
from ._options import add_model, add_sampling_options, add_threads, apply_threads, model_path, sampling_options, write


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "generate", help="generate text (or ids) with a checkpoint directory",
        description="Load a Hugging Face checkpoint directory (config.json and safetensors; "
                    "never the network, never a pickle) and stream a continuation of the prompt "
                    "to stdout.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="the prompt text (needs the directory's tokenizer.json)")
    src.add_argument("--ids", help="the prompt as comma-separated token ids")
    add_model(p, what="the model")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate (64)")
    add_sampling_options(p)
    p.add_argument("--dtype", choices=LOAD_DTYPES, default=None,
                   help="weight storage (default: bfloat16 for a bfloat16 checkpoint, else float32)")
    add_threads(p)
    p.add_argument("--no-eos", action="store_true",
                   help="do not stop at the end ids (end of text, end of turn)")
    p.add_argument("--no-special-tokens", action="store_true",
                   help="encode --prompt without the tokenizer's special tokens (by default "
                        "they are added, as transformers' tokenizers add them: a Llama "
                        "tokenizer's <s>)")
    p.add_argument("--stats", action="store_true",
                   help="print the load time and tokens/s on stderr")
    p.set_defaults(func=run_generate)


def _write(text: str) -> None:
    if not write(text):  # the reader has gone: stop generating
        raise SystemExit(0)


def run_generate(args: argparse.Namespace) -> int:
    apply_threads(args)
    sampling = sampling_options(args)  # the flags checked before any file is looked at
    args.model = model_path(args)  # a path, or a Hub id in the cache
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
        bad = [i for i in ids if not 0 <= i < 2 ** 63]
        if bad:
            raise BlockcValueError(f"--ids must be token ids in [0, 2**63), got {bad[0]}")
    t0 = time.perf_counter()
    m = GPT.from_pretrained(args.model, dtype=args.dtype)
    load = time.perf_counter() - t0
    if tok is not None:
        ids = list(tok.encode(args.prompt, add_special_tokens=not args.no_special_tokens))
        if not ids:
            raise BlockcValueError("--prompt encodes to no tokens")
    # the end ids: the one rule (the checkpoint's generation config, a GGUF file's end of
    # text and end of turn, and the tokenizer's end token)
    gen = m.generation_config
    gen = gen.replace(eos_token_id=end_ids(gen, tok, m.config.vocab))
    if args.no_eos:
        gen = gen.replace(eos_token_id=())
    opts = dict(sampling, generation_config=gen)
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
