"""The models a server answers for: one, or several loaded on first use and unloaded
least-recently-used past a memory budget.

- One model: every request is its, whatever ``model`` it names (or none), as llama-server
  does; ``/v1/models`` lists it under its served name (``--alias`` / ``--model-name``).
- Several (``--model a.gguf --model name=dir/``, ``--models-dir DIR``): a request's
  ``model`` picks one (404 naming the others when none has that name). Each model loads on
  its first request, on a thread of its own (a load never waits on another model's load),
  behind its own lock (requests for a model that is loading wait for that load, once).
  After a load, while the loaded models' bytes (weights and KV cache slots) are over
  ``max_memory``, the least recently used one with nothing running is unloaded.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Dict, List, Optional, Sequence, Tuple

from ..checkpoint.gguf import is_gguf
from .types import APIError

__all__ = ["ModelEntry", "ModelPool", "parse_memory", "models_in_dir", "split_model_arg",
           "model_list", "served_name"]

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_memory(text: str) -> int:
    """Bytes from ``123``, ``512M``, ``8G``, ``1.5G`` (K, M, G, T: powers of 1024; a
    trailing ``B``/``iB`` allowed).

    Raises
    ------
    ValueError
        Anything else, or a size < 1.
    """
    t = str(text).strip().upper()
    for suffix in ("IB", "B"):
        if t.endswith(suffix) and len(t) > len(suffix) and t[-len(suffix) - 1].isalpha():
            t = t[:-len(suffix)]
            break
    unit = t[-1:] if t[-1:].isalpha() else ""
    if unit not in _UNITS:
        raise ValueError(f"a memory size is a number with K, M, G or T, got {text!r}")
    try:
        n = float(t[:len(t) - len(unit)])
    except ValueError:
        raise ValueError(f"a memory size is a number with K, M, G or T, got {text!r}") from None
    size = int(n * _UNITS[unit])
    if not size >= 1:
        raise ValueError(f"a memory size must be >= 1 byte, got {text!r}")
    return size


def split_model_arg(value: str) -> Tuple[Optional[str], str]:
    """``--model`` as (name, path): ``name=path`` names it, a plain path (or a path that
    exists whole, '=' and all) does not."""
    if "=" in value and not os.path.exists(value):
        name, path = value.split("=", 1)
        if name and path:
            return name, path
    return None, value


def models_in_dir(path: str) -> List[Tuple[str, str]]:
    """(name, path) of each model in a directory: every ``*.gguf`` file (its stem) and every
    subdirectory holding a config.json (its name), sorted by name."""
    out = []
    for entry in sorted(os.listdir(path)):
        full = os.path.join(path, entry)
        if os.path.isdir(full) and os.path.isfile(os.path.join(full, "config.json")):
            out.append((entry, full))
        elif entry.endswith(".gguf") and is_gguf(full):
            out.append((entry[:-5], full))
    return out


def served_name(path: str) -> str:
    """The name a model is served under when nothing names it: the directory's name, the
    file's without .gguf."""
    base = os.path.basename(os.path.normpath(path))
    return base[:-5] if base.endswith(".gguf") else base


def model_list(settings: Any) -> List[Tuple[str, Optional[str]]]:
    """(name, path) of every model a server's settings name: ``model`` (named
    ``model_name``, else :func:`served_name`), then ``models``, then the models of
    ``models_dir``.

    Raises
    ------
    ValueError
        No model, or two of one name.
    """
    out: List[Tuple[str, Optional[str]]] = []
    if settings.model is not None:
        out.append((settings.served_name, settings.model))
    out += [(n, p) for n, p in settings.models]
    if settings.models_dir:
        out += models_in_dir(settings.models_dir)
    if not out:
        raise ValueError("no model to serve: give --model or --models-dir (with a model in it)")
    seen = set()
    for n, _ in out:
        if n in seen:
            raise ValueError(f"two models are named {n!r}: name one with --model NAME=PATH")
        seen.add(n)
    return out


@dataclass(eq=False)
class ModelEntry:
    """One model of the pool: its name and path, and its service once loaded."""
    name: str
    path: Optional[str]
    service: Any = None
    last_used: float = 0.0
    users: int = 0
    loading: Optional["asyncio.Future"] = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class ModelPool:
    """The models a server answers for.

    Parameters
    ----------
    models : sequence of (name, path)
        In order; names unique.
    load : callable
        ``load(name, path) -> service``: a loaded model (an object with ``memory_bytes()``,
        ``idle()`` and ``close()``), run on a loader thread.
    max_memory : int, optional
        Bytes the loaded models may hold before the least recently used idle one is
        unloaded (None: no budget).
    """

    def __init__(self, models: Sequence[Tuple[str, Optional[str]]], load: Callable[[str, Any], Any],
                 max_memory: Optional[int] = None):
        if not models:
            raise ValueError("a server needs at least one model")
        self.entries: Dict[str, ModelEntry] = {}
        for name, path in models:
            if name in self.entries:
                raise ValueError(f"two models are named {name!r}")
            self.entries[name] = ModelEntry(name, path)
        self._load, self.max_memory = load, max_memory
        self._loader = ThreadPoolExecutor(max_workers=min(8, len(self.entries)),
                                          thread_name_prefix="blockc-load")
        self._lock = threading.Lock()

    @property
    def names(self) -> List[str]:
        return list(self.entries)

    @property
    def single(self) -> bool:
        return len(self.entries) == 1

    def entry(self, name: Optional[str]) -> ModelEntry:
        """The model a request names: the only one of a single-model server (any name or
        none), else the one of that name.

        Raises
        ------
        APIError
            400 for no name and 404 for an unknown one (both naming the models).
        """
        if self.single:
            return next(iter(self.entries.values()))
        have = ", ".join(repr(n) for n in self.entries)
        if name is None:
            raise APIError(400, f"'model' is required: this server has {have}", param="model",
                           code="missing")
        e = self.entries.get(name)
        if e is None:
            raise APIError(404, f"The model '{name}' does not exist (this server has {have})",
                           param="model", code="model_not_found")
        return e

    def preload(self, name: str, service: Any) -> None:
        """Hand the pool a model loaded already (the first model of a server)."""
        e = self.entries[name]
        e.service, e.last_used = service, time.monotonic()

    def loaded(self) -> List[ModelEntry]:
        return [e for e in self.entries.values() if e.service is not None]

    async def acquire(self, name: Optional[str]) -> Tuple[ModelEntry, Any]:
        """(entry, service) of the model a request names, loading it if need be; the
        caller holds it (never unloaded) until :meth:`release`.

        Raises
        ------
        APIError
            As :meth:`entry`; 500 when the model fails to load (the next request tries
            again).
        """
        e = self.entry(name)
        with self._lock:  # held or not, as evict() sees it
            e.users += 1
        try:
            while True:
                with self._lock:
                    svc = e.service
                if svc is not None:
                    break
                if e.loading is None:
                    loop = asyncio.get_running_loop()
                    e.loading = loop.run_in_executor(self._loader, self._load_entry, e)
                fut = e.loading
                try:
                    await asyncio.shield(fut)
                except Exception as exc:
                    raise APIError(500, f"model '{e.name}' failed to load: "
                                   f"{type(exc).__name__}: {exc}", type="server_error",
                                   code="model_load_failed") from None
                finally:
                    if e.loading is fut and fut.done():
                        e.loading = None
        except BaseException:
            self.release(e)
            raise
        e.last_used = time.monotonic()
        return e, svc

    @contextlib.asynccontextmanager
    async def using(self, name: Optional[str]) -> AsyncIterator[Any]:
        """``async with pool.using(name) as svc``: :meth:`acquire` on entry (raising as it
        does), :meth:`release` on exit, whatever the block raises."""
        e, svc = await self.acquire(name)
        try:
            yield svc
        finally:
            self.release(e)

    def release(self, e: ModelEntry) -> None:
        """The request holding ``e`` (from :meth:`acquire`) is done with it."""
        with self._lock:
            e.users -= 1
            e.last_used = time.monotonic()

    def _load_entry(self, e: ModelEntry) -> None:
        with e.lock:  # this model's own lock: one load of it at a time
            if e.service is None:
                svc = self._load(e.name, e.path)
                with self._lock:
                    e.service, e.last_used = svc, time.monotonic()
        self.evict(keep=e)

    def memory_bytes(self) -> int:
        return sum(e.service.memory_bytes() for e in self.loaded())

    def evict(self, keep: Optional[ModelEntry] = None) -> List[str]:
        """Unload the least recently used idle models (nothing running, no request holding
        them) while the loaded ones hold more than ``max_memory``; the names unloaded."""
        gone: List[str] = []
        if self.max_memory is None:
            return gone
        while True:
            with self._lock:  # chosen and taken out under the lock, closed outside it
                if self.memory_bytes() <= self.max_memory:
                    return gone
                idle = [e for e in self.loaded()
                        if e is not keep and e.users == 0 and e.service.idle()]
                if not idle:
                    return gone
                victim = min(idle, key=lambda x: x.last_used)
                svc, victim.service = victim.service, None
            svc.close()
            gone.append(victim.name)

    def close(self) -> None:
        for e in self.loaded():
            e.service.close()
        self._loader.shutdown(wait=False, cancel_futures=True)
