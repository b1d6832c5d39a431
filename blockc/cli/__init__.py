"""The ``blockc`` command. Each subcommand lives in its own module of this
package, listed in :data:`COMMANDS`; the module exposes ``register(subparsers)``,
which adds its parser and sets ``func=handler`` where ``handler(args) -> int`` is
the exit status. The options several commands share are in :mod:`._options`.
A command is thin: it parses, calls the library, prints.

No traceback reaches the user: every failure is one line on stderr,
``blockc COMMAND: error: ...``, and the exit status says what kind it was.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from typing import List, Optional

from .. import __version__
from .._errors import BlockcError
from . import book, chat, convert, depth, experiment, generate, gpt, models, pull, serve, train

__all__ = ["main", "build_parser", "COMMANDS"]

#: the command modules, in the order their commands are listed in --help
COMMANDS = (book, gpt, depth, generate, chat, serve, models, pull, convert, train, experiment)

EPILOG = """exit status:
  0  success
  1  a runtime failure (out of memory, a file that cannot be written, a figure
     that disagrees with the book)
  2  a usage error (an unknown option, a value out of range, a size the model
     cannot have)
  130  interrupted (Ctrl-C)"""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one clear line on stderr, exit status 2, no usage dump
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def _version() -> str:
    return f"blockc {__version__}"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="blockc", description="Transformer-block kernels in C.",
                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for command in COMMANDS:
        command.register(sub)
    for p in sub.choices.values():
        p.epilog = EPILOG
        p.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # bare `blockc`: the usage, as a usage error
        parser.print_help(sys.stderr)
        return 2
    where = f"blockc {args.command}"
    try:
        with warnings.catch_warnings():  # a warning is one line too, naming the command
            warnings.showwarning = lambda message, *a, **k: sys.stderr.write(
                f"{where}: warning: {message}\n")
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        sys.stderr.write(f"{where}: interrupted\n")
        return 130
    except MemoryError as e:
        sys.stderr.write(f"{where}: error: out of memory{': ' + str(e) if str(e) else ''}\n")
        return 1
    except (ValueError, TypeError) as e:
        sys.stderr.write(f"{where}: error: {e}\n")
        return 2
    except (OSError, BlockcError) as e:
        sys.stderr.write(f"{where}: error: {e}\n")
        return 1
    except Exception as e:  # a bug of ours: still one line, and the kind of failure
        sys.stderr.write(f"{where}: internal error: {type(e).__name__}: {e}\n")
        return 1
