"""``blockc chat``: a conversation in the terminal.

    blockc chat --model DIR [--system TEXT] [--max-new-tokens N] [--temperature T] ...

Each turn the whole conversation is rendered with the checkpoint's chat template and
the answer streamed until an end-of-turn id. ``/reset`` forgets the conversation,
``/exit`` (or Ctrl-D) leaves; Ctrl-C during an answer stops it and keeps the
conversation (the partial answer included).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from .._errors import BlockcValueError
from ..generation.config import end_ids
from ..gpt import GPT
from ..checkpoint.hf import LOAD_DTYPES
from ..text.tokenizer import TextStream, Tokenizer
from ._options import add_model, add_sampling_options, add_threads, apply_threads, model_path, sampling_options, write


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "chat", help="talk to a chat model in the terminal (its chat template)",
        description="A terminal conversation with a checkpoint directory that has a chat "
                    "template: history kept and re-templated each turn, answers streamed, "
                    "/reset and /exit; Ctrl-C stops the current answer.")
    add_model(p, what="the chat model")
    p.add_argument("--system", default=None, help="a system prompt")
    p.add_argument("--max-new-tokens", type=int, default=512, help="longest answer (512)")
    add_sampling_options(p)
    p.add_argument("--dtype", choices=LOAD_DTYPES, default=None)
    add_threads(p)
    p.set_defaults(func=run_chat)


def run_chat(args: argparse.Namespace) -> int:
    apply_threads(args)
    sampling = sampling_options(args)  # checked before any file is read
    args.model = model_path(args)  # a path, or a Hub id in the cache
    tok = Tokenizer.from_pretrained(args.model)
    if tok.chat_template is None:
        raise BlockcValueError(f"{args.model}: no chat template (blockc generate takes raw text)")
    m = GPT.from_pretrained(args.model, dtype=args.dtype)
    ends = end_ids(m.generation_config, tok, m.config.vocab)  # as generate and the server
    opts = dict(sampling, eos_token_id=ends)
    history = [{"role": "system", "content": args.system}] if args.system else []
    start = list(history)
    interactive = sys.stdin.isatty()
    while True:
        try:
            line = input("> " if interactive else "")
        except EOFError:
            break
        text = line.strip()
        if not text:
            continue
        if text in ("/exit", "/quit"):
            break
        if text == "/reset":
            history = list(start)
            write("(conversation reset)\n")
            continue
        history.append({"role": "user", "content": line})
        ids = tok.apply_chat_template(history).ids
        room = m.config.context - len(ids)
        if room < 1:
            history.pop()
            write(f"(the conversation is {len(ids)} tokens, the model's context "
                 f"{m.config.context}: /reset)\n")
            continue
        stream, answer = TextStream(tok), []
        try:
            for t in m.stream(np.asarray(ids), min(args.max_new_tokens, room), **opts):
                if t in ends:
                    break
                piece = stream.push(t)
                answer.append(piece)
                write(piece)
        except KeyboardInterrupt:
            write(" [stopped]")
        answer.append(stream.flush())
        write(answer[-1] + "\n")
        history.append({"role": "assistant", "content": "".join(answer)})
    return 0
