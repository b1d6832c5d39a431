"""``blockc models``: the models blockc can load on this machine.

    blockc models [--models-dir DIR]

Each Hub id in the local Hugging Face cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub``, or
``~/.cache/huggingface/hub``) and each checkpoint directory or ``.gguf`` file directly in
``--models-dir``, one a line: the name to pass as ``--model``, its kind and its path.
"""
from __future__ import annotations

import argparse

from ..checkpoint.locate import find_models, hub_cache_dir
from ._options import write

__all__ = ["register", "run_models"]


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "models", help="list the models on this machine (Hugging Face cache, a models folder)",
        description="List the models blockc can load without the network: the Hugging Face "
                    "cache's and a folder's own.")
    p.add_argument("--models-dir", default=None, metavar="DIR",
                   help="also list the checkpoint directories and .gguf files in DIR")
    p.set_defaults(func=run_models)


def run_models(args: argparse.Namespace) -> int:
    found = find_models(args.models_dir)
    if not found:
        where = hub_cache_dir() + (f" or {args.models_dir}" if args.models_dir else "")
        write(f"no models in {where} (blockc pull ID downloads one)\n")
        return 0
    width = max(len(m.name) for m in found)
    for m in found:
        write(f"{m.name:<{width}}  {m.kind:<9}  {m.path}\n")
    return 0
