"""The option helpers the commands share, written once: ``--threads``, positive
integers, output paths, the architecture options, and writing to stdout."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, Optional, Tuple

from .. import runtime
from .._errors import BlockcValueError
from .._plot import plot_path, pyplot, save_figure
from ..checkpoint.locate import resolve
from ..generation.config import GenerationConfig, options
from ..generation.defaults import LLAMA_CPP_SAMPLING, context_size, default_sampling, describe_context
from ..model import ACTIVATIONS, NORMS, PLACEMENTS, POSITIONS

__all__ = ["add_model", "model_path", "add_threads", "apply_threads", "positive_int", "require_positive", "plot_path",
           "pyplot", "save_figure", "write", "add_shape_options", "overrides", "add_sampling_options",
           "sampling_options", "add_cache_dtype", "CACHE_ALIASES", "add_generation_option", "SAMPLING", "add_ctx_size",
           "ctx_size", "ctx_note", "add_prompt", "read_prompt", "model_sampling",
           "add_speculative_options", "speculative_options", "draft_path"]


def add_model(p: argparse.ArgumentParser, required: bool = True, what: str = "") -> None:
    """``--model PATH|ID`` (with ``--file`` and ``--revision`` for a Hub id): what
    :func:`model_path` resolves."""
    p.add_argument("--model", required=required, metavar="PATH|ID",
                   help=(what or "the model") + ": a checkpoint directory (config.json and "
                        "safetensors), a .gguf file, or a Hugging Face Hub id already in the "
                        "local Hugging Face cache ($HF_HUB_CACHE, $HF_HOME; `blockc models` "
                        "lists them, `blockc pull ID` downloads one)")
    p.add_argument("--file", default=None, metavar="NAME.gguf",
                   help="with a Hub id whose repository holds several GGUF files: the one to load")
    p.add_argument("--revision", default="main",
                   help="with a Hub id: the branch, tag or commit of the cache (main)")


def model_path(args: argparse.Namespace) -> str:
    """The path ``--model`` names (:func:`blockc.checkpoint.locate.resolve`): the file or
    directory itself, or a Hub id's snapshot in the local cache; an error names what is
    wrong (no such file, a directory without config.json, a Hub id not in the cache)."""
    return resolve(args.model, file=args.file, revision=args.revision)


def add_threads(p: argparse.ArgumentParser) -> None:
    """``--threads N``: the C library's thread count for this run (:func:`apply_threads`)."""
    p.add_argument("--threads", type=int, default=None)


def apply_threads(args: argparse.Namespace) -> None:
    """Set the thread count ``--threads`` asked for (checked by the runtime)."""
    if args.threads is not None:
        runtime.set_num_threads(args.threads)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


_GIVEN = object()


def add_generation_option(p: argparse.ArgumentParser, name: str, default: Any = _GIVEN,
                          note: str = "") -> None:
    """The flag of the GenerationConfig option ``name`` (``top_p`` -> ``--top-p``), made
    from its declaration: its type, choices, help and range, its default the option's
    (or ``default``: None for "not given", the command then choosing; ``note`` says what
    it chooses). Values are checked as the option checks them (:func:`sampling_options`)."""
    o, own = options()[name]
    default = own if default is _GIVEN else default
    help = o.help + (f"; {o.span()}" if o.span() else "") + (f" ({note})" if note else "")
    if o.kind == "choice" and name == "cache_dtype":  # llama.cpp's names too
        p.add_argument(_flag(name), choices=o.choices, default=default,
                       type=lambda s: CACHE_ALIASES.get(s, s),
                       help=help + "; f32 and f16 (llama.cpp's --cache-type names) also")
    elif o.kind == "choice":
        p.add_argument(_flag(name), choices=o.choices, default=default, help=help)
    else:
        p.add_argument(_flag(name), type=int if o.kind == "int" else float, default=default,
                       help=help)


#: ``--cache-dtype``'s other names: llama.cpp's ``--cache-type-k/v`` ones
CACHE_ALIASES = {"f32": "float32", "f16": "float16"}


def add_cache_dtype(p: argparse.ArgumentParser) -> None:
    """``--cache-dtype``: what the KV cache keeps keys and values as (float32; float16
    halves its memory and what each decoding step reads from it; q8_0 and q4_0 keep
    blocks of 32, about 0.27 and 0.14 of float32's bytes; f32 and f16 name the first two
    as llama.cpp does)."""
    add_generation_option(p, "cache_dtype")


#: the GenerationConfig options the commands that generate take as flags (its ``cli`` ones)
SAMPLING = tuple(name for name, (o, _) in options().items() if o.cli)


def add_sampling_options(p: argparse.ArgumentParser,
                         notes: Optional[Dict[str, str]] = None) -> None:
    """The generation options of the commands that generate, one flag per option
    GenerationConfig declares for the command line (``--temperature``, ``--top-k``,
    ``--top-p``, ``--min-p``, ``--repetition-penalty``, ``--seed``, ``--cache-dtype``):
    read back and checked by :func:`sampling_options`. Each defaults to None, "not
    given": the model's generation config then decides (``notes[name]``, when given,
    says what the command's default is instead, in the flag's help)."""
    for name in SAMPLING:
        own = (f"default: the model's (generation_config.json, a GGUF file's general.sampling."
               f"*), else llama.cpp's {LLAMA_CPP_SAMPLING[name]:g}"
               if name in LLAMA_CPP_SAMPLING else "default: the model's generation config")
        add_generation_option(p, name, None, (notes or {}).get(name, own))


def sampling_options(args: argparse.Namespace) -> Dict[str, Any]:
    """The keyword options of ``GPT.generate``/``stream`` that :func:`add_sampling_options`
    read, each checked as its GenerationConfig option (before any weights are read).

    Raises
    ------
    ValueError
        A value out of its option's range, naming the flag.
    """
    out = {}
    for name in SAMPLING:
        v = getattr(args, name)
        out[name] = None if v is None else options()[name][0].check(v, _flag(name))
    return out


def add_speculative_options(p: argparse.ArgumentParser) -> None:
    """Speculative decoding's flags (llama.cpp's names): ``--model-draft PATH|ID`` (also
    spelt ``--draft-model``) a draft model over the same vocabulary, ``--draft-max N`` the
    tokens it drafts per round, ``--lookup N`` prompt lookup drafting N tokens per round
    instead; :func:`speculative_options` reads them back."""
    p.add_argument("--model-draft", "--draft-model", dest="model_draft", default=None,
                   metavar="PATH|ID",
                   help="speculative decoding with this draft model (a smaller model with the "
                        "same tokenizer): greedy output unchanged, sampled output from the same "
                        "distribution; loaded with --dtype")
    for flag, name in (("--draft-max", "num_assistant_tokens"),
                       ("--lookup", "prompt_lookup_num_tokens")):
        o, _ = options()[name]
        p.add_argument(flag, dest=name, type=int, default=None, metavar="N",
                       help=f"{o.help}; {o.span()}")


def speculative_options(args: argparse.Namespace) -> Dict[str, Any]:
    """The GenerationConfig options ``--draft-max`` and ``--lookup`` give (the ones given),
    checked as the options check them (before any file is read).

    Raises
    ------
    ValueError
        A value out of range, naming the flag; ``--draft-max`` without ``--model-draft``,
        or ``--lookup`` with it.
    """
    out = {}
    for flag, name in (("--draft-max", "num_assistant_tokens"),
                       ("--lookup", "prompt_lookup_num_tokens")):
        v = getattr(args, name, None)
        if v is not None:
            out[name] = options()[name][0].check(v, flag)
    draft = getattr(args, "model_draft", None)
    if "num_assistant_tokens" in out and draft is None:
        raise BlockcValueError("--draft-max needs --model-draft (--lookup drafts without one)")
    if "prompt_lookup_num_tokens" in out and draft is not None:
        raise BlockcValueError("--lookup and --model-draft: give one drafter")
    return out


def draft_path(args: argparse.Namespace) -> Optional[str]:
    """The path ``--model-draft`` names (a file, a directory, or a Hub id in the local
    cache, as ``--model``), or None."""
    if getattr(args, "model_draft", None) is None:
        return None
    return resolve(args.model_draft)


def model_sampling(config: GenerationConfig, path: str, flags: Dict[str, Any]
                   ) -> Tuple[GenerationConfig, str]:
    """The sampling of a run: the model's defaults
    (:func:`blockc.generation.defaults.default_sampling`: what ``config`` states, else
    llama.cpp's), then each flag given (``flags``, :func:`sampling_options`: None is not
    given), which wins; and where it came from in words, for the banner.

    Returns
    -------
    (GenerationConfig, str)
    """
    g, where = default_sampling(config, path)
    given = {k: v for k, v in flags.items() if v is not None}
    if given:
        g = g.replace(**given)
        where += "; flags: " + ", ".join(_flag(k) for k in given)
    return g, where


def add_ctx_size(p: argparse.ArgumentParser) -> None:
    """``--ctx-size N``: the tokens a run keeps in context (:func:`ctx_size`)."""
    p.add_argument("--ctx-size", "-c", type=int, default=None, metavar="N",
                   help="the context in tokens, prompt and answer (default: the model's, "
                        "bounded so its KV cache takes at most a quarter of the available "
                        "memory)")


def ctx_size(args: argparse.Namespace, config: Any, cache_dtype: Optional[str] = None,
             rows: int = 1) -> int:
    """The context ``--ctx-size`` asks for, checked against the model's ``config``
    (1 to ``config.context``), or by default the model's bounded by a memory budget
    for ``rows`` sequences (:func:`blockc.generation.defaults.context_size`).

    Raises
    ------
    ValueError
        ``--ctx-size`` below 1 or past the model's context.
    """
    n = getattr(args, "ctx_size", None)
    if n is None:
        return context_size(config, cache_dtype or "float32", rows=rows)
    if not 1 <= n <= config.context:
        raise BlockcValueError(f"--ctx-size must be in [1, {config.context}] (the model's "
                               f"context), got {n}")
    return n


def ctx_note(args: argparse.Namespace, config: Any, n: int, cache_dtype: Optional[str] = None,
             rows: int = 1) -> str:
    """What a command prints about the context :func:`ctx_size` chose (``n``): the
    model's, bounded by the memory budget, or ``--ctx-size``; and its KV cache's size."""
    return describe_context(config, n, cache_dtype or "float32", rows,
                            given=getattr(args, "ctx_size", None) is not None)


def add_prompt(p: Any, required: bool = False) -> None:
    """``--prompt TEXT`` (``-`` reads stdin) and ``--prompt-file PATH`` (:func:`read_prompt`),
    added to ``p`` (a parser or a mutually exclusive group)."""
    p.add_argument("--prompt", "-p", default=None,
                   help="the prompt text; - reads it from stdin")
    p.add_argument("--prompt-file", "-f", default=None, metavar="PATH",
                   help="read the prompt from a file (UTF-8)")


def read_prompt(args: argparse.Namespace) -> Optional[str]:
    """The prompt ``--prompt`` or ``--prompt-file`` gives (None when neither does):
    ``--prompt -`` reads stdin to its end.

    Raises
    ------
    ValueError
        Both given, or a file that is not UTF-8 text (named).
    OSError
        A file that cannot be read.
    """
    text, path = getattr(args, "prompt", None), getattr(args, "prompt_file", None)
    if text is not None and path is not None:
        raise BlockcValueError("--prompt and --prompt-file: give one")
    if path is not None:
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except UnicodeDecodeError:
            raise BlockcValueError(f"--prompt-file {path}: not UTF-8 text") from None
    if text == "-":
        return sys.stdin.read()
    return text


def positive_int(text: str) -> int:
    """An argparse ``type``: an integer in [1, 100000] (a usage error otherwise)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if not 1 <= v <= 100000:
        raise argparse.ArgumentTypeError(f"expected an integer in [1, 100000], got {v}")
    return v


def require_positive(args: argparse.Namespace, *names: str) -> None:
    """A ValueError naming the first of the options ``names`` that is given and < 1."""
    for n in names:
        v = getattr(args, n)
        if v is not None and v < 1:
            raise BlockcValueError(f"--{n.replace('_', '-')} must be >= 1, got {v}")


def write(text: str) -> bool:
    """Write ``text`` to stdout now; False when the reader has gone (``blockc ... |
    head``): stdout is then pointed at the null device, so nothing more fails."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
        return True
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return False


_SHAPE = ("vocab", "context", "width", "heads", "layers", "kv_heads", "head_dim", "d_ff")
_CHOICES = {"norm": NORMS, "placement": PLACEMENTS, "activation": ACTIVATIONS,
            "positions": POSITIONS}


def add_shape_options(p: argparse.ArgumentParser, what: str = "the preset's") -> None:
    """The architecture options (--width ... --untied) that override a preset;
    :func:`overrides` reads them back."""
    for name in _SHAPE:
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int, default=None,
                       help=f"override {what} {name}")
    for name, choices in _CHOICES.items():
        p.add_argument(f"--{name}", choices=choices, default=None,
                       help=f"override {what} {name}")
    p.add_argument("--bias", choices=("all", "none", "qkv"), default=None,
                   help="biases on every projection, none, or on q/k/v only (Qwen2)")
    p.add_argument("--untied", action="store_true", help="a separate head instead of the tied one")


def overrides(args: argparse.Namespace) -> Dict[str, Any]:
    """The GPTConfig fields the architecture options set."""
    over = {k: getattr(args, k) for k in _SHAPE + tuple(_CHOICES) if getattr(args, k) is not None}
    if args.untied:
        over["tie_weights"] = False
    if args.bias is not None:
        over.update(qkv_bias=args.bias != "none", out_bias=args.bias == "all",
                    mlp_bias=args.bias == "all")
    return over
