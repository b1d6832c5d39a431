"""``blockc convert``: a chapter-6 state dict in safetensors <-> a checkpoint directory, and
GGUF files (llama.cpp's) from or to either.

    blockc convert DIR FILE.safetensors        (the directory's model as blockc's state dict)
    blockc convert FILE.safetensors DIR [--config-json config.json]
    blockc convert DIR|FILE.gguf OUT.gguf [--type Q4_K_M]   (a GGUF file llama.cpp runs)
    blockc convert FILE.gguf DIR               (a transformers directory, tokenizer.json too)
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Optional

from .. import _files
from ..checkpoint.gguf import is_gguf
from ..io import safetensors as stf
from .._errors import BlockcValueError
from .._progress import Progress
from ..gpt import GPT, GPTConfig
from ..text.tokenizer import Tokenizer


def register(subparsers) -> None:
    c = subparsers.add_parser(
        "convert", help="a chapter-6 state dict (safetensors) <-> a checkpoint directory",
        description="SRC a directory -> DST a .safetensors file of blockc's state dict (the "
                    "chapter's names), or SRC such a file -> DST a Hugging Face directory (its "
                    "config from --config-json, a config.json of the architecture).")
    c.add_argument("src")
    c.add_argument("dst")
    c.add_argument("--config-json", default=None,
                   help="file -> directory: the config.json describing the state dict")
    c.add_argument("--type", default="F32", metavar="TYPE",
                   help="-> .gguf: the matrices' ggml type (F32, F16, BF16, Q8_0, Q4_0, Q4_1, "
                        "Q5_0, Q5_1, Q3_K, Q4_K, Q5_K, Q6_K) or llama.cpp mix (Q2_K, Q3_K_S, "
                        "Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, IQ4_NL, IQ4_XS); "
                        "default F32")
    c.set_defaults(func=run_convert)


def _inputs(src: str, config_json) -> set:
    """The real paths of every file a conversion of ``src`` reads."""
    paths = {os.path.realpath(config_json)} if config_json else set()
    if os.path.isdir(src):
        paths |= {os.path.realpath(os.path.join(src, f)) for f in os.listdir(src)}
    else:
        paths.add(os.path.realpath(src))
    return paths


def _check_dst(args: argparse.Namespace) -> None:
    """The destination, checked before anything is read: never one of the inputs (the
    checkpoint's own weights written over while they are read), a file where a file
    goes, a directory where a directory goes, in a directory that exists."""
    inputs = _inputs(args.src, args.config_json)
    if os.path.isdir(args.src) or args.dst.endswith(".gguf"):  # a file out
        _files.check_output_file(args.dst, "DST")
        clash = [args.dst] if os.path.realpath(args.dst) in inputs else []
    else:  # a checkpoint directory out
        _files.check_output_dir(args.dst, "DST")
        clash = [p for p in (os.path.join(args.dst, f) for f in
                             ("model.safetensors", "config.json", "tokenizer.json"))
                 if os.path.realpath(p) in inputs]
    if clash:
        raise BlockcValueError(f"DST {args.dst}: would write over {clash[0]}, an input of this "
                               "conversion; give another destination")


def _load(src: str, dtype: Optional[str] = None) -> GPT:
    """GPT.from_pretrained with a progress bar on stderr when it is a terminal."""
    with Progress(0, "loading") as bar:
        return GPT.from_pretrained(src, dtype=dtype, progress=bar)


def run_convert(args: argparse.Namespace) -> int:
    _check_dst(args)
    if args.dst.endswith(".gguf"):
        m = _load(args.src)
        tok = None  # a GGUF source's own tokenizer is carried over by save_gguf
        if os.path.isdir(args.src) and os.path.exists(os.path.join(args.src, "tokenizer.json")):
            tok = args.src
        m.save_gguf(args.dst, dtype=args.type, tokenizer=tok)
        print(f"wrote {args.dst}: {args.type.upper()}, {m.num_parameters():,} parameters"
              + ("" if tok or is_gguf(args.src) else " (no tokenizer.json: no tokenizer in it)"))
        return 0
    if is_gguf(args.src):
        m = _load(args.src, dtype="float32")
        m.save_pretrained(args.dst)
        try:
            backend = Tokenizer.from_pretrained(args.src).backend  # written whole, atomically
            _files.write_bytes(os.path.join(args.dst, "tokenizer.json"),
                               backend.to_str().encode("utf-8"))
        except (ImportError, BlockcValueError) as e:
            print(f"(no tokenizer.json written: {e})")
        print(f"wrote {args.dst}: config.json and model.safetensors (float32), "
              f"{m.num_parameters():,} parameters")
        return 0
    if os.path.isdir(args.src):
        m = _load(args.src)
        sd = m.state_dict()
        stf.write(args.dst, sd, {"format": "blockc", "config": _dumps(m.config.to_hf())})
        print(f"wrote {args.dst}: {len(sd)} tensors, {m.num_parameters():,} parameters")
        return 0
    tensors, meta = stf.read(args.src)
    if args.config_json:
        cfg = GPTConfig.from_hf(args.config_json)
    elif "config" in meta:
        d = _files.loads_json(meta["config"], f"{args.src}: the config in its metadata")
        if not isinstance(d, dict):
            raise BlockcValueError(f"{args.src}: the config in its metadata must be a JSON object")
        cfg = GPTConfig.from_hf(d)
    else:
        raise BlockcValueError(f"{args.src}: no config in its metadata: pass --config-json")
    m = GPT.from_state_dict({k: t.to_float32() for k, t in tensors.items()}, cfg)
    m.save_pretrained(args.dst)
    print(f"wrote {args.dst}: config.json and model.safetensors, {m.num_parameters():,} parameters")
    return 0


def _dumps(d) -> str:
    return json.dumps(d, separators=(",", ":"))
