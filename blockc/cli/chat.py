"""``blockc chat``: a conversation in the terminal.

    blockc chat --model PATH|ID [--system TEXT] [--ctx-size N] [--max-new-tokens N]
                [--temperature T] [--top-k K] ... [--plain]
                [--model-draft PATH|ID [--draft-max N] | --lookup N]

Each turn the whole conversation is rendered with the checkpoint's chat template and
the answer streamed until an end-of-turn id. It samples as llama-cli and Ollama do: the
options the model states (``generation_config.json`` when it samples, a GGUF file's
``general.sampling.*`` keys), each other one llama.cpp's: temperature 0.8, top-k 40,
top-p 0.95, min-p 0.05, repetition penalty 1
(:func:`blockc.generation.defaults.default_sampling`); each flag overrides one, and the
banner says which came from where. The context is the model's, bounded so its KV cache
takes at most a quarter of the available memory (``--ctx-size``);
when the conversation fills it, its oldest turns are dropped (the system prompt kept),
with a notice.

In a terminal, with ``prompt_toolkit`` (``pip install 'blockc[chat]'``), the input line
has history (the arrow keys) and editing, a paste of several lines is one message, and
Alt-Enter starts a new line; without it, or when stdin is not a terminal (or with
``--plain``), lines are read as they come. Everywhere a line ending with ``\\``
continues on the next one, and the slash commands (``/help``) are commands, never sent
to the model. Ctrl-C during an answer stops it and keeps the conversation (the partial
answer included); Ctrl-D or ``/exit`` leaves.

The answers go to stdout; the banner (model, family, format, context, threads,
sampling) and the tokens/s after each answer go to stderr, when stdin or stderr is a
terminal, with the draft's acceptance rate when speculating (``--model-draft``,
``--lookup``: :mod:`blockc.generation.speculative`).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from .. import runtime
from .._errors import BlockcValueError
from .._progress import Progress
from .._files import read_config
from ..io import gguf
from ..checkpoint.hf import LOAD_DTYPES
from ..generation.chat import Conversation
from ..generation.config import SAMPLING_FIELDS, GenerationConfig, options
from ..generation.ends import end_ids
from ..generation.defaults import describe_sampling
from ..gpt import GPT
from ..text.tokenizer import TextStream, Tokenizer
from ._options import (add_ctx_size, add_model, add_sampling_options, add_speculative_options,
                       add_threads, apply_threads, ctx_note, ctx_size, draft_path, model_path,
                       model_sampling, sampling_options, speculative_options, write)

__all__ = ["register", "run_chat", "ChatSession", "HELP"]

#: the slash commands, as /help lists them
HELP = """\
/help                 this list
/system [TEXT]        show or set the system prompt (kept when old turns are dropped)
/set [NAME VALUE]     show the settings, or set one: /set temperature 0.7, /set top_k off,
                      /set max_new_tokens 200 (temperature top_k top_p min_p
                      repetition_penalty seed max_new_tokens)
/save PATH            write the conversation as JSON
/load PATH            read a conversation /save wrote
/reset                forget the conversation (the system prompt stays)
/exit, /quit          leave (Ctrl-D too)
A line ending with \\ continues on the next; Alt-Enter starts a new line; Ctrl-C stops an
answer. Start a message with // to send one beginning with /."""

#: the settings /set changes: the sampling options and the answer's length
SETTINGS = SAMPLING_FIELDS + ("seed", "max_new_tokens")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "chat", help="talk to a chat model in the terminal (its chat template)",
        description="A terminal conversation with a chat model (a checkpoint directory or a "
                    "GGUF file with a chat template): history kept and re-templated each turn, "
                    "answers streamed, the oldest turns dropped when the context fills; "
                    "/help lists the commands; Ctrl-C stops the current answer.")
    add_model(p, what="the chat model")
    p.add_argument("--system", default=None, help="a system prompt")
    p.add_argument("--max-new-tokens", "-n", type=int, default=None,
                   help="longest answer (default: until the end of the turn or the context)")
    add_sampling_options(p)
    add_speculative_options(p)
    add_ctx_size(p)
    p.add_argument("--dtype", choices=LOAD_DTYPES, default=None,
                   help="weight storage (default: bfloat16 for a bfloat16 checkpoint, else float32; a "
                        "GGUF file's matrices as its type's measured default, 'exact' for "
                        "its very weights with float activations, 'integer' for llama.cpp's "
                        "8-bit activations)")
    add_threads(p)
    p.add_argument("--plain", action="store_true",
                   help="read plain lines, without prompt_toolkit's line editing")
    p.set_defaults(func=run_chat)


def _plain_reader(interactive: bool) -> Callable[[str], str]:
    if interactive:  # the arrow keys edit and recall lines, not print ^[[A, where it exists
        try:
            import readline  # noqa: F401
        except ImportError:
            pass

    def read(prompt: str) -> str:
        return input(prompt if interactive else "")
    return read


def _terminal_reader() -> Optional[Callable[[str], str]]:
    """prompt_toolkit's line editor (history, arrow keys, bracketed paste, Alt-Enter for a
    new line), or None when it is not installed."""
    try:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import InMemoryHistory
        from prompt_toolkit.key_binding import KeyBindings
    except ImportError:
        return None
    keys = KeyBindings()

    @keys.add("escape", "enter")  # Alt-Enter: a new line in the message
    def _newline(event: Any) -> None:
        event.current_buffer.insert_text("\n")

    session: Any = PromptSession(history=InMemoryHistory(), key_bindings=keys,
                                 prompt_continuation="... ")

    def read(prompt: str) -> str:
        return session.prompt(prompt)
    return read


def _family(path: str) -> str:
    """The model family named by the checkpoint (config.json's model_type, a GGUF file's
    general.architecture), for the banner."""
    try:
        if os.path.isdir(path):
            return str(read_config(path).get("model_type", "?"))
        return str(gguf.read(path).metadata.get("general.architecture", "?"))
    except (OSError, ValueError):
        return "?"


def _parse_setting(name: str, text: str) -> Any:
    """The value of ``/set NAME TEXT``, checked as its option (``off``/``none``: unset)."""
    if text.lower() in ("off", "none", "default"):
        return None
    if name == "max_new_tokens":
        try:
            v = int(text)
        except ValueError:
            raise BlockcValueError(f"max_new_tokens must be an integer, got {text!r}") from None
        if v < 1:
            raise BlockcValueError(f"max_new_tokens must be >= 1, got {v}")
        return v
    o = options()[name][0]
    try:
        v = int(text) if o.kind == "int" else float(text)
    except ValueError:
        raise BlockcValueError(f"{name} must be a number, got {text!r}") from None
    return o.check(v, name)


class ChatSession:
    """One conversation with a loaded model: the slash commands, the context kept, the
    answers streamed (what ``blockc chat`` runs; its output goes through ``out`` and its
    notices through ``info``).

    Parameters
    ----------
    model : GPT
    tokenizer : Tokenizer
        With a chat template.
    generation : GenerationConfig
        The sampling options and end ids of every answer.
    context : int
        The tokens a rendered conversation and its answer may take.
    system : str, optional
    max_new_tokens : int, optional
        The longest answer (None: until the end of the turn or the context).
    out, info : callable, optional
        Write text (default: stdout, and stderr).
    draft : GPT, optional
        A draft model: answers decoded speculatively (``assistant_model``).
    """

    def __init__(self, model: GPT, tokenizer: Tokenizer, generation: GenerationConfig,
                 context: int, system: Optional[str] = None,
                 max_new_tokens: Optional[int] = None,
                 out: Callable[[str], Any] = write,
                 info: Optional[Callable[[str], Any]] = None,
                 draft: Optional[GPT] = None) -> None:
        self.model, self.tok, self.generation, self.draft = model, tokenizer, generation, draft
        self.context, self.max_new_tokens = context, max_new_tokens
        self.conversation = Conversation(system)
        self.out = out
        self.info = info if info is not None else (lambda s: (sys.stderr.write(s),
                                                              sys.stderr.flush()))
        self.ends = tuple(generation.eos_ids)
        self.stats = True

    # ---- settings -----------------------------------------------------------------

    def settings(self) -> Dict[str, Any]:
        """The sampling options, the seed and the longest answer, by name."""
        d = {k: getattr(self.generation, k) for k in SAMPLING_FIELDS + ("seed",)}
        d["max_new_tokens"] = self.max_new_tokens
        return d

    def describe_sampling(self) -> str:
        """``temperature 0.8, top_k 40, ...``: the options that are set."""
        d = describe_sampling(self.generation)
        seed, n = self.generation.seed, self.max_new_tokens
        return d + (f", seed {seed}" if seed is not None else "") + (
            f", max_new_tokens {n}" if n is not None else "")

    def set(self, name: str, text: str) -> None:
        """``/set NAME VALUE``.

        Raises
        ------
        ValueError
            An unknown name, or a value its option refuses.
        """
        if name not in SETTINGS:
            raise BlockcValueError(f"/set: no setting {name!r} ({', '.join(SETTINGS)})")
        v = _parse_setting(name, text)
        if name == "max_new_tokens":
            self.max_new_tokens = v
        elif name == "temperature" and v is None:
            self.generation = self.generation.replace(temperature=0.0)
        else:
            self.generation = self.generation.replace(**{name: v})

    # ---- one line -----------------------------------------------------------------

    def command(self, text: str) -> bool:
        """Run the slash command ``text``; False when it asks to leave."""
        name, _, rest = text.partition(" ")
        rest = rest.strip()
        c = self.conversation
        if name in ("/exit", "/quit"):
            return False
        if name in ("/help", "/?"):
            self.out(HELP + "\n")
        elif name == "/reset":
            c.reset()
            self.out("(conversation reset)\n")
        elif name == "/system":
            if rest:
                c.system = rest
                self.out("(system prompt set)\n")
            else:
                self.out(f"(system prompt: {c.system!r})\n" if c.system else "(no system prompt)\n")
        elif name == "/set":
            if not rest:
                self.out("".join(f"{k} {v}\n" for k, v in self.settings().items()))
            else:
                key, _, value = rest.partition(" ")
                if not value.strip():
                    raise BlockcValueError(f"/set {key}: give a value (/set {key} VALUE, or off)")
                self.set(key, value.strip())
                self.out(f"({key} {self.settings()[key]})\n")
        elif name == "/save":
            if not rest:
                raise BlockcValueError("/save: give a path (/save chat.json)")
            c.save(rest)
            self.out(f"(saved {len(c.messages)} messages to {rest})\n")
        elif name == "/load":
            if not rest:
                raise BlockcValueError("/load: give a path (/load chat.json)")
            self.conversation = Conversation.load(rest)
            self.out(f"(loaded {len(self.conversation.messages)} messages from {rest})\n")
        else:
            raise BlockcValueError(f"unknown command {name} (/help lists them)")
        return True

    def count(self, messages: List[Dict[str, str]]) -> int:
        """The tokens of ``messages`` rendered with the generation prompt."""
        return len(self.tok.apply_chat_template(messages).ids)

    def answer(self, text: str) -> Optional[str]:
        """Add the user message ``text`` and stream the model's answer to it (the oldest
        turns dropped first when the conversation would leave too little room); the
        answer, or None when the message alone does not fit."""
        c = self.conversation
        c.add("user", text)
        reserve = min(self.max_new_tokens or self.context // 4, self.context // 2)
        try:
            dropped = c.fit(self.count, self.context - max(reserve, 1))
        except ValueError as e:
            c.pop()
            self.out(f"(not sent: {e}; --ctx-size is {self.context})\n")
            return None
        if dropped:
            self.out(f"(the context of {self.context} tokens is full: the {dropped} oldest "
                     f"message{'s' if dropped > 1 else ''} dropped)\n")
        ids = self.tok.apply_chat_template(c.messages).ids
        room = self.context - len(ids)
        n_max = room if self.max_new_tokens is None else min(self.max_new_tokens, room)
        stream, parts, n, stopped = TextStream(self.tok, skip_special_tokens=True), [], 0, False
        t0 = time.perf_counter()
        run = self.model.prepare_generation(np.asarray(ids)[None], n_max, self.generation,
                                            assistant_model=self.draft)
        try:
            for toks in run:  # as stream: one token a step, none after the end
                t = int(toks[0])
                n += 1
                if t in self.ends:
                    break
                piece = stream.push(t)
                parts.append(piece)
                self.out(piece)
        except KeyboardInterrupt:
            stopped = True
        dt = time.perf_counter() - t0
        parts.append(stream.flush())
        self.out(parts[-1] + (" [stopped]\n" if stopped else "\n"))
        reply = "".join(parts)
        c.add("assistant", reply)
        if self.stats:
            spec = f", {run.stats.describe()}" if run.stats is not None else ""
            self.info(f"[{n} tokens, {n / dt if dt > 0 else 0.0:.1f} tokens/s, context "
                      f"{len(ids) + n}/{self.context}{spec}]\n")
        return reply

    def run(self, read: Callable[[str], str]) -> None:
        """The loop: read a message (``read(prompt)``; EOFError ends it), run it."""
        while True:
            try:
                line = read("> ")
                while line.endswith("\\"):  # continued on the next line
                    line = line[:-1] + "\n" + read("... ")
            except EOFError:
                break
            except KeyboardInterrupt:  # Ctrl-C at the prompt: a new prompt
                self.out("\n")
                continue
            text = line.strip()
            if not text:
                continue
            if text.startswith("/") and not text.startswith("//"):
                try:
                    if not self.command(text):
                        break
                except (OSError, TypeError, ValueError) as e:
                    self.out(f"({e})\n")
                continue
            self.answer(text[1:] if text.startswith("//") else text)


def run_chat(args: argparse.Namespace) -> int:
    apply_threads(args)
    sampling = sampling_options(args)  # the flags checked before any file is looked at
    speculate = speculative_options(args)
    args.model = model_path(args)  # a path, or a Hub id in the cache
    draft = draft_path(args)
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise BlockcValueError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    tok = Tokenizer.from_pretrained(args.model)
    if tok.chat_template is None:
        raise BlockcValueError(f"{args.model}: no chat template (blockc generate takes raw text)")
    interactive = sys.stdin.isatty()
    chatty = interactive or sys.stderr.isatty()
    with Progress(0, "loading") as bar:  # drawn when stderr is a terminal
        m = GPT.from_pretrained(args.model, dtype=args.dtype, progress=bar)
        if draft is not None:
            draft = GPT.from_pretrained(draft, dtype=args.dtype, progress=bar)
    ends = end_ids(m.generation_config, tok, m.config.vocab)  # as generate and the server
    gen, where = model_sampling(m.generation_config, args.model, sampling)  # flags win
    gen = gen.replace(**speculate)
    gen = gen.replace(eos_token_id=ends)
    ctx = ctx_size(args, m.config, gen.cache_dtype)
    if draft is not None:  # the draft runs every position the model does
        ctx = min(ctx, draft.config.context)
    s = ChatSession(m, tok, gen, ctx, system=args.system, max_new_tokens=args.max_new_tokens,
                    draft=draft)
    s.stats = chatty
    if chatty:
        cfg = m.config
        sys.stderr.write(
            f"model {args.model}\n"
            f"family {_family(args.model)}, format {m.dtype}, {cfg.layers} layers, width "
            f"{cfg.width}, vocabulary {cfg.vocab}\n"
            f"{ctx_note(args, cfg, ctx, gen.cache_dtype)}, {runtime.get_num_threads()} "
            f"threads\nsampling: {s.describe_sampling()} (from {where})\n"
            + (f"speculative: draft {args.model_draft}, up to "
               f"{gen.num_assistant_tokens or 5} tokens a round\n" if draft is not None else "")
            + (f"speculative: prompt lookup, up to {gen.prompt_lookup_num_tokens} tokens a "
               "round\n" if gen.prompt_lookup_num_tokens else "") +
            "/help lists the commands; Ctrl-C stops an answer, Ctrl-D leaves\n")
        sys.stderr.flush()
    read = None
    if interactive and not args.plain:
        read = _terminal_reader()
    s.run(read or _plain_reader(interactive))
    return 0
