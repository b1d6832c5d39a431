"""``blockc pull``: download a model from the Hugging Face Hub into the local cache.

    blockc pull ID [--file NAME.gguf] [--revision REV]

Through ``huggingface_hub`` (``pip install 'blockc[hub]'``), into its cache (the one
:func:`blockc.checkpoint.locate.hub_cache_dir` reads), so that ``--model ID`` finds it
afterwards without the network. A checkpoint directory brings its config, tokenizer,
template and safetensors files, never a pickle; a repository of GGUF files brings the one
``--file`` names (they are several quantisations of one model: the command lists them
when none is named). Each file is a line on stderr when it is in (``[2/5] config.json
(1.2 kB)``), besides huggingface_hub's own progress bars. ``HF_ENDPOINT`` points at another hub (a mirror); ``HF_HUB_OFFLINE=1``
or no network is a clear error.
"""
from __future__ import annotations

import argparse
import os
import sys
from fnmatch import fnmatch

from .._errors import BlockcError, BlockcValueError
from ..checkpoint.locate import is_hub_id
from ._options import write

__all__ = ["register", "run_pull", "CHECKPOINT_FILES"]

#: what a checkpoint directory needs, as huggingface_hub's patterns (no pickles, no
#: other framework's weights)
CHECKPOINT_FILES = ("*.json", "*.safetensors", "*.jinja", "tokenizer.model", "*.txt")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "pull", help="download a model from the Hugging Face Hub into the local cache",
        description="Download a checkpoint directory (config, tokenizer, template, safetensors) "
                    "or one GGUF file of a Hub repository into the Hugging Face cache, where "
                    "--model ID then finds it offline. Needs huggingface_hub and the network.")
    p.add_argument("id", metavar="ID", help="the Hub id, e.g. HuggingFaceTB/SmolLM2-135M-Instruct")
    p.add_argument("--file", default=None, metavar="NAME.gguf",
                   help="the GGUF file to download from a repository of GGUF files")
    p.add_argument("--revision", default="main", help="branch, tag or commit (main)")
    p.set_defaults(func=run_pull)


def _hub():
    try:
        import huggingface_hub
    except ImportError:
        raise BlockcError("blockc pull needs huggingface_hub: pip install 'blockc[hub]'") from None
    return huggingface_hub


def _size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n} bytes"


def _download(hub, args: argparse.Namespace, names: list, directory: bool = False) -> str:
    """Download ``names`` of the repository one by one into the cache (huggingface_hub's
    own bars show each file's bytes), a line on stderr per file done; the path of the one
    file, or of the snapshot directory holding them."""
    path = ""
    for i, name in enumerate(names, 1):
        path = hub.hf_hub_download(args.id, name, revision=args.revision)
        sys.stderr.write(f"blockc pull: [{i}/{len(names)}] {name} ({_size(os.path.getsize(path))})"
                         "\n")
        sys.stderr.flush()
    if directory:  # .../snapshots/<commit>/<name>: the snapshot
        path = path[:len(path) - len(names[-1])].rstrip("/" + os.sep)
    return path


def run_pull(args: argparse.Namespace) -> int:
    if not is_hub_id(args.id):
        raise BlockcValueError(f"{args.id!r} is not a Hub id (owner/name)")
    if args.file is not None and (not args.file.endswith(".gguf") or "/" in args.file):
        raise BlockcValueError(f"--file must name a .gguf file of the repository, got {args.file!r}")
    hub = _hub()
    from huggingface_hub import errors as hub_errors
    try:
        if args.file is not None:
            path = _download(hub, args, [args.file])
        else:
            files = hub.HfApi().list_repo_files(args.id, revision=args.revision)
            if "config.json" not in files:
                ggufs = sorted(f for f in files if f.endswith(".gguf"))
                if ggufs:
                    raise BlockcValueError(f"{args.id} holds GGUF files: name one with --file "
                                           f"({', '.join(ggufs)})")
                raise BlockcValueError(f"{args.id}: no config.json and no .gguf file: not a "
                                       "model blockc loads")
            wanted = sorted(f for f in files if any(fnmatch(f, p) for p in CHECKPOINT_FILES))
            path = _download(hub, args, wanted, directory=True)
    except hub_errors.OfflineModeIsEnabled:
        raise BlockcError(f"cannot download {args.id}: HF_HUB_OFFLINE is set") from None
    except hub_errors.RepositoryNotFoundError:
        raise BlockcValueError(f"{args.id}: no such repository on the Hub (or it is private: "
                               "`hf auth login`)") from None
    except (hub_errors.RevisionNotFoundError, hub_errors.EntryNotFoundError) as e:
        raise BlockcValueError(f"{args.id}: {str(e).splitlines()[0]}") from None
    except hub_errors.LocalEntryNotFoundError:  # the network unreachable, nothing cached
        raise BlockcError(f"cannot download {args.id}: the Hub cannot be reached "
                          "(no network, or HF_ENDPOINT is wrong)") from None
    except hub_errors.HfHubHTTPError as e:
        raise BlockcError(f"cannot download {args.id}: {str(e).splitlines()[0]}") from None
    except Exception as e:  # the HTTP client's own errors: a connection refused, a timeout
        client = type(e).__module__.split(".")[0]
        if isinstance(e, OSError) or client in ("httpx", "httpx2", "requests", "urllib3"):
            raise BlockcError(f"cannot download {args.id}: the Hub cannot be reached ({e}; "
                              "no network, or HF_ENDPOINT is wrong)") from None
        raise
    write(f"{path}\n")
    name = args.id + (f" --file {args.file}" if args.file else "")
    sys.stderr.write(f"blockc pull: done; run it with: blockc chat --model {name}\n")
    return 0
