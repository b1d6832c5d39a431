"""``blockc convert``: a chapter-6 state dict in safetensors <-> a checkpoint directory.

    blockc convert DIR FILE.safetensors        (the directory's model as blockc's state dict)
    blockc convert FILE.safetensors DIR [--config-json config.json]
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
    c.set_defaults(func=run_convert)


def run_convert(args: argparse.Namespace) -> int:
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
