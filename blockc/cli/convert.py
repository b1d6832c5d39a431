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

from .. import safetensors as stf
from .._errors import BlockcValueError
from ..gpt import GPT, GPTConfig


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
                        "Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) or llama.cpp mix (Q4_K_M, Q5_K_M, "
                        "Q4_K_S, Q5_K_S); default F32")
    c.set_defaults(func=run_convert)


def run_convert(args: argparse.Namespace) -> int:
    from ..gguf.model import is_gguf
    if args.dst.endswith(".gguf"):
        m = GPT.from_pretrained(args.src)
        tok = None  # a GGUF source's own tokenizer is carried over by save_gguf
        if os.path.isdir(args.src) and os.path.exists(os.path.join(args.src, "tokenizer.json")):
            tok = args.src
        m.save_gguf(args.dst, dtype=args.type, tokenizer=tok)
        print(f"wrote {args.dst}: {args.type.upper()}, {m.num_parameters():,} parameters"
              + ("" if tok or is_gguf(args.src) else " (no tokenizer.json: no tokenizer in it)"))
        return 0
    if is_gguf(args.src):
        from ..text import Tokenizer
        m = GPT.from_pretrained(args.src, dtype="float32")
        m.save_pretrained(args.dst)
        try:
            Tokenizer.from_pretrained(args.src).backend.save(os.path.join(args.dst, "tokenizer.json"))
        except (ImportError, BlockcValueError) as e:
            print(f"(no tokenizer.json written: {e})")
        print(f"wrote {args.dst}: config.json and model.safetensors (float32), "
              f"{m.num_parameters():,} parameters")
        return 0
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
        cfg = GPTConfig.from_hf(json.loads(meta["config"]))
    else:
        raise BlockcValueError(f"{args.src}: no config in its metadata: pass --config-json")
    m = GPT.from_state_dict({k: t.to_float32() for k, t in tensors.items()}, cfg)
    m.save_pretrained(args.dst)
    print(f"wrote {args.dst}: config.json and model.safetensors, {m.num_parameters():,} parameters")
    return 0


def _dumps(d) -> str:
    return json.dumps(d, separators=(",", ":"))
