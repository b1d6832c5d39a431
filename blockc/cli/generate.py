"""``blockc generate``: a checkpoint's continuation of a prompt, streamed.

    blockc generate --model PATH|ID --prompt TEXT [--max-new-tokens N] [--temperature T]
                    [--top-k K] [--top-p P] [--min-p P] [--repetition-penalty R]
                    [--seed S] [--ctx-size N] [--dtype ...] [--threads N] [--no-echo]
                    [--model-draft PATH|ID [--draft-max N] | --lookup N]
    blockc generate --model PATH|ID --prompt - ...            (the prompt from stdin)
    blockc generate --model PATH|ID --prompt-file FILE ...
    blockc generate --model PATH|ID --ids 1,2,3 ...           (no tokenizer needed)

The prompt is echoed (``--no-echo``: not), then the continuation streamed to stdout as
it is made (text with the checkpoint's tokenizer, special tokens left out; with --ids,
the new ids separated by spaces, the prompt not echoed), and generation stops at the
model's end tokens (:func:`blockc.generation.ends.end_ids`: its generation config's,
a GGUF file's end of text and end of turn, and the tokenizer's end token), as ``blockc
chat`` and the server do; the text of an end token is not printed. It samples as
``blockc chat`` and the server do: each option the model states (``generation_config.json``
when it samples, a GGUF file's ``general.sampling.*`` keys), else llama.cpp's
(temperature 0.8, top-k 40, top-p 0.95, min-p 0.05; :func:`blockc.generation.defaults.
default_sampling`); each flag wins (``--temperature 0``: greedy). The context is the
model's, bounded by a memory budget (``--ctx-size``). The load time, the context, the
sampling and tokens/s go to stderr when it is a terminal (``--stats``/``--no-stats``),
with, when speculating (``--model-draft``, ``--lookup``: :mod:`blockc.generation.speculative`),
the draft's acceptance rate and the tokens made per forward of the model.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from .._errors import BlockcValueError
from .._progress import Progress
from ..generation.ends import end_ids
from ..gpt import GPT
from ..checkpoint.hf import LOAD_DTYPES
from ..text.tokenizer import TextStream, Tokenizer
from ._options import (add_ctx_size, add_model, add_prompt, add_sampling_options,
                       add_speculative_options, add_threads, apply_threads, ctx_note, ctx_size,
                       draft_path, model_path, model_sampling, read_prompt, sampling_options,
                       speculative_options, write)
from ..generation.defaults import describe_sampling


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "generate", help="generate text (or ids) with a checkpoint directory",
        description="Load a Hugging Face checkpoint directory (config.json and safetensors; "
                    "never the network, never a pickle) and stream a continuation of the prompt "
                    "to stdout.")
    src = p.add_mutually_exclusive_group(required=True)
    add_prompt(src)
    src.add_argument("--ids", help="the prompt as comma-separated token ids")
    add_model(p, what="the model")
    p.add_argument("--max-new-tokens", "-n", type=int, default=64, help="tokens to generate (64)")
    add_sampling_options(p)
    add_speculative_options(p)
    add_ctx_size(p)
    p.add_argument("--dtype", choices=LOAD_DTYPES, default=None,
                   help="weight storage (default: bfloat16 for a bfloat16 checkpoint, else float32; a "
                        "GGUF file's matrices as its type's measured default, 'exact' for "
                        "its very weights with float activations, 'integer' for llama.cpp's "
                        "8-bit activations)")
    add_threads(p)
    p.add_argument("--no-eos", action="store_true",
                   help="do not stop at the end ids (end of text, end of turn)")
    p.add_argument("--no-special-tokens", action="store_true",
                   help="encode --prompt without the tokenizer's special tokens (by default "
                        "they are added, as transformers' tokenizers add them: a Llama "
                        "tokenizer's <s>)")
    p.add_argument("--stats", action=argparse.BooleanOptionalAction, default=None,
                   help="print the load time and tokens/s on stderr (default: when stderr is "
                        "a terminal)")
    p.add_argument("--no-echo", action="store_true", help="do not print the prompt first")
    p.set_defaults(func=run_generate)


def _write(text: str) -> None:
    if not write(text):  # the reader has gone: stop generating
        raise SystemExit(0)


def run_generate(args: argparse.Namespace) -> int:
    apply_threads(args)
    sampling = sampling_options(args)  # the flags checked before any file is looked at
    speculate = speculative_options(args)
    args.model = model_path(args)  # a path, or a Hub id in the cache
    draft = draft_path(args)
    prompt = read_prompt(args)  # --prompt - reads stdin, --prompt-file a file
    tok = None
    if prompt is not None:
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
    with Progress(0, "loading") as bar:  # drawn when stderr is a terminal
        m = GPT.from_pretrained(args.model, dtype=args.dtype, progress=bar)
        if draft is not None:
            draft = GPT.from_pretrained(draft, dtype=args.dtype, progress=bar)
    load = time.perf_counter() - t0
    if tok is not None:
        ids = list(tok.encode(prompt, add_special_tokens=not args.no_special_tokens))
        if not ids:
            raise BlockcValueError("--prompt encodes to no tokens")
    gen, where = model_sampling(m.generation_config, args.model, sampling)  # flags win
    gen = gen.replace(**speculate)
    ctx = ctx_size(args, m.config, gen.cache_dtype)
    if len(ids) >= ctx:
        raise BlockcValueError(f"the prompt is {len(ids)} tokens: no room in a context of {ctx} "
                               "(--ctx-size)")
    n_max = min(args.max_new_tokens, ctx - len(ids))
    # the end ids: the one rule (the checkpoint's generation config, a GGUF file's end of
    # text and end of turn, and the tokenizer's end token)
    gen = gen.replace(eos_token_id=end_ids(gen, tok, m.config.vocab))
    if args.no_eos:
        gen = gen.replace(eos_token_id=())
    ends = set(gen.eos_ids)
    stats = sys.stderr.isatty() if args.stats is None else args.stats
    if stats:
        sys.stderr.write(f"{ctx_note(args, m.config, ctx, gen.cache_dtype)}\n"
                         f"sampling: {describe_sampling(gen)} (from {where})\n")
    stream = TextStream(tok, skip_special_tokens=True) if tok is not None else None
    if stream is not None and not args.no_echo:
        _write(prompt)
    n, t1 = 0, time.perf_counter()
    run = m.prepare_generation(np.array(ids)[None], n_max, generation_config=gen,
                               assistant_model=draft)
    for toks in run:  # as stream: one token a step, none after the end
        token = int(toks[0])
        n += 1
        if stream is None:
            _write(f"{' ' if n > 1 else ''}{token}")
        elif token not in ends:  # an end token's text (<|im_end|>) is not printed
            _write(stream.push(token))
    _write((stream.flush() if stream is not None else "") + "\n")
    if stats:
        dt = time.perf_counter() - t1
        sys.stderr.write(f"loaded in {load:.2f} s; {n} tokens in {dt:.2f} s "
                         f"({n / dt if dt > 0 else 0:.1f} tokens/s)"
                         + (f"; {run.stats.describe()}" if run.stats is not None else "") + "\n")
    return 0
