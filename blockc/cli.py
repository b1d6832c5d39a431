"""The ``blockc`` command. Each subcommand lives in its own module, which
exposes ``register(subparsers)``; the module adds its parser and sets
``func=handler`` where ``handler(args) -> int`` is the exit status."""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import List, Optional

# subcommand modules, in the order their commands are listed in --help
_COMMANDS = ["_cli_book", "_cli_gpt", "_cli_depth"]


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one clear line on stderr, exit status 2, no usage dump
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def pyplot(command: str):
    """matplotlib.pyplot on the Agg backend for ``blockc COMMAND --plot``; without
    matplotlib, None after one error line on stderr (the caller exits with 2)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.stderr.write(f"blockc {command}: error: --plot needs matplotlib "
                         "(pip install 'blockc[plot]')\n")
        return None
    return plt


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="blockc", description="Transformer-block kernels in C.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in _COMMANDS:
        importlib.import_module(f"blockc.{name}").register(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, TypeError) as e:
        sys.stderr.write(f"blockc {args.command}: error: {e}\n")
        return 2
