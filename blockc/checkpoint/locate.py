"""Where a model named by a user is: a checkpoint directory, a GGUF file, or a Hugging Face
Hub id (``HuggingFaceTB/SmolLM2-135M-Instruct``) already in the local Hugging Face cache.

The cache is ``huggingface_hub``'s layout, read without it: ``$HF_HUB_CACHE``, else
``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``, else
``~/.cache/huggingface/hub``; a model ``org/name`` is the folder ``models--org--name``,
whose ``refs/<revision>`` names a commit and ``snapshots/<commit>/`` holds its files, each
a symbolic link into ``blobs/``. The links are followed; what a link resolves to is
checked by the loaders like any file (a regular file, or refused). Nothing here reaches
the network: :func:`resolve` names the ``blockc pull`` command to run for a model that is
not in the cache.
"""
from __future__ import annotations

import os
import re
from typing import List, NamedTuple, Optional, Union

from .._errors import BlockcTypeError, BlockcValueError
from .._files import PICKLE_SUFFIXES

__all__ = ["hub_cache_dir", "resolve", "find_models", "FoundModel", "is_hub_id"]

PathLike = Union[str, "os.PathLike[str]"]

# an id as the Hub spells them: "name" or "owner/name", letters, digits, '-', '_', '.'
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


class FoundModel(NamedTuple):
    """A model :func:`find_models` found: its name (a Hub id, or a file or folder name),
    the path to load, ``"directory"`` or ``"gguf"``, and where it was found."""
    name: str
    path: str
    kind: str
    source: str


def hub_cache_dir() -> str:
    """The Hugging Face cache folder huggingface_hub itself would use (its environment
    variables, in its order of precedence); it need not exist.

    Returns
    -------
    str

    Examples
    --------
    >>> hub_cache_dir()                                          # doctest: +SKIP
    '/root/.cache/huggingface/hub'
    """
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "huggingface", "hub")


def is_hub_id(name: str) -> bool:
    """Whether ``name`` is spelled as a Hub model id (``owner/name`` or ``name``).

    Parameters
    ----------
    name : str

    Returns
    -------
    bool

    Raises
    ------
    Nothing.

    Examples
    --------
    >>> is_hub_id("HuggingFaceTB/SmolLM2-135M-Instruct"), is_hub_id("./model.gguf")
    (True, False)
    """
    return bool(_HUB_ID.match(name)) and ".." not in name.split("/")


def _snapshot(cache: str, hub_id: str, revision: str) -> Optional[str]:
    """The snapshot folder of ``hub_id`` at ``revision`` (a ref or a commit), or None."""
    repo = os.path.join(cache, "models--" + hub_id.replace("/", "--"))
    if not os.path.isdir(repo):
        return None
    commit = revision
    ref = os.path.join(repo, "refs", revision)
    if os.path.isfile(ref):
        with open(ref, encoding="utf-8") as f:
            commit = f.read(256).strip()
    snap = os.path.join(repo, "snapshots", commit)
    return snap if re.fullmatch(r"[0-9A-Za-z._-]+", commit) and os.path.isdir(snap) else None


def _gguf_files(folder: str) -> List[str]:
    return sorted(f for f in os.listdir(folder) if f.endswith(".gguf"))


def resolve(name: PathLike, file: Optional[str] = None, revision: str = "main",
            cache_dir: Optional[str] = None) -> str:
    """The path to load for a model named ``name``: the file or directory itself when it
    exists, else the Hub id's snapshot in the local Hugging Face cache.

    Parameters
    ----------
    name : str or os.PathLike
        A checkpoint directory, a ``.gguf`` file, or a Hub id.
    file : str, optional
        For a Hub id: the file of the snapshot to load (a ``.gguf`` file of a repository
        that holds several).
    revision : str
        For a Hub id: a branch or tag the cache has a ref of, or a commit.
    cache_dir : str, optional
        The Hugging Face cache; :func:`hub_cache_dir` when None.

    Returns
    -------
    str
        A directory holding ``config.json``, or a ``.gguf`` file (links not resolved: the
        loaders open what they point to and refuse what is not a regular file).

    Raises
    ------
    TypeError
        ``name`` is not a path.
    ValueError
        Naming what is wrong: no such file; a directory without ``config.json`` or
        ``.gguf`` files; a Hub id not in the cache (with the ``blockc pull`` command); a
        snapshot with several GGUF files and no ``file``; a pickle checkpoint.

    Examples
    --------
    >>> resolve("HuggingFaceTB/SmolLM2-135M-Instruct")      # doctest: +SKIP
    '/root/.cache/huggingface/hub/models--HuggingFaceTB--SmolLM2-135M-Instruct/snapshots/12fd25f7...'
    """
    if not isinstance(name, (str, os.PathLike)):
        raise BlockcTypeError(f"model must be a path or a Hub id, got {type(name).__name__}")
    p = os.fspath(name)
    if os.path.lexists(p):
        return _checked_local(p, file)
    if is_hub_id(p) and not p.endswith((".gguf", ".json", ".safetensors")):
        cache = cache_dir if cache_dir is not None else hub_cache_dir()
        snap = _snapshot(cache, p, revision)
        if snap is None:
            pull = f"blockc pull {p}" + (f" --file {file}" if file else "")
            raise BlockcValueError(f"{p}: no such file or directory, and no model {p!r} in the "
                                   f"Hugging Face cache ({cache}); to download it: {pull}")
        return _checked_local(snap, file, hub_id=p)
    raise BlockcValueError(f"{p}: no such file or directory")


def _checked_local(p: str, file: Optional[str], hub_id: Optional[str] = None) -> str:
    what = hub_id or p
    if not os.path.isdir(p):
        if file is not None:
            raise BlockcValueError(f"{p}: file={file!r} names a file inside a directory, but "
                                   "this is a file")
        if p.endswith(PICKLE_SUFFIXES):
            raise BlockcValueError(f"{p}: a pickle checkpoint, which blockc never loads (it can "
                                   "run code); convert it to safetensors first")
        return p
    if file is not None:
        f = os.path.join(p, file)
        if os.path.normpath(file).startswith("..") or os.path.isabs(file):
            raise BlockcValueError(f"file must be a name inside {what}, got {file!r}")
        if not os.path.lexists(f):
            have = _gguf_files(p)
            raise BlockcValueError(f"{what}: no file {file!r}"
                                   + (f" (its GGUF files: {', '.join(have)})" if have else ""))
        return f
    if os.path.isfile(os.path.join(p, "config.json")):
        return p
    ggufs = _gguf_files(p)
    if len(ggufs) == 1:
        return os.path.join(p, ggufs[0])
    if ggufs:
        raise BlockcValueError(f"{what}: several GGUF files ({', '.join(ggufs)}): name one "
                               "(--file NAME, or its path)")
    pickles = [f for f in os.listdir(p) if f.endswith(PICKLE_SUFFIXES)]
    extra = (f" (it has {', '.join(sorted(pickles))}: pickle files, which blockc never loads)"
             if pickles else "")
    raise BlockcValueError(f"{what}: a directory without config.json or a .gguf file{extra}")


def find_models(models_dir: Optional[PathLike] = None,
                cache_dir: Optional[str] = None) -> List[FoundModel]:
    """Every model blockc can load that is on this machine: each Hub id of the Hugging
    Face cache (its ``main`` snapshot, a directory with ``config.json`` or each ``.gguf``
    file), and each ``.gguf`` file and checkpoint directory directly in ``models_dir``.

    Parameters
    ----------
    models_dir : str or os.PathLike, optional
        A folder of models of the user's own.
    cache_dir : str, optional
        The Hugging Face cache; :func:`hub_cache_dir` when None.

    Returns
    -------
    list of FoundModel
        Sorted by source, then name.

    Raises
    ------
    ValueError
        ``models_dir`` is not a directory.

    Examples
    --------
    >>> [m.name for m in find_models()]                      # doctest: +SKIP
    ['HuggingFaceTB/SmolLM2-135M-Instruct']
    """
    out: List[FoundModel] = []
    cache = cache_dir if cache_dir is not None else hub_cache_dir()
    if os.path.isdir(cache):
        for entry in sorted(os.listdir(cache)):
            if not entry.startswith("models--"):
                continue
            hub_id = entry[len("models--"):].replace("--", "/", 1)
            snap = _snapshot(cache, hub_id, "main")
            if snap is None:
                continue
            if os.path.isfile(os.path.join(snap, "config.json")):
                out.append(FoundModel(hub_id, snap, "directory", "hf-cache"))
            for g in _gguf_files(snap):
                out.append(FoundModel(f"{hub_id} --file {g}", os.path.join(snap, g), "gguf",
                                      "hf-cache"))
    if models_dir is not None:
        d = os.fspath(models_dir)
        if not os.path.isdir(d):
            raise BlockcValueError(f"models_dir: {d}: not a directory")
        for entry in sorted(os.listdir(d)):
            p = os.path.join(d, entry)
            if entry.endswith(".gguf") and os.path.isfile(p):
                out.append(FoundModel(entry, p, "gguf", "models-dir"))
            elif os.path.isfile(os.path.join(p, "config.json")):
                out.append(FoundModel(entry, p, "directory", "models-dir"))
    return out
