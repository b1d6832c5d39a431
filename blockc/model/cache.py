"""The KV cache: keys and values of every layer for a batch of sequences, in the storage
the C forward pass reads (:class:`KVCache`), made by a model's ``new_cache``.
"""
from __future__ import annotations

import threading
from typing import Any, Dict, Optional, Tuple

import numpy as np

from .._args import as_choice, as_int, as_size
from .._errors import BlockcValueError
from .._native import check, ffi, lib
from .config import C_DTYPE, GPTConfig, as_config

__all__ = ["KVCache", "CACHE_DTYPES", "ring_rows"]

#: the element types a KV cache can keep, and the NumPy type of its buffers (a quantised
#: cache's are bytes: ggml's q8_0 and q4_0 blocks of 32, each key and value row of a
#: head quantised when written; the head size must be a multiple of 32)
CACHE_DTYPES: Dict[str, Any] = {"float32": np.float32, "float16": np.float16,
                                "q8_0": np.uint8, "q4_0": np.uint8}

#: bytes of one block of 32 values of a quantised cache (bc_gpt.h)
_BLOCK_BYTES = {"q8_0": 34, "q4_0": 18}


class KVCache:
    """Keys and values of every layer for ``batch`` sequences of up to ``capacity`` tokens.

    Made by :meth:`GPT.new_cache`; ``m(ids, cache=cache)`` appends to it. A
    ``float16`` cache keeps IEEE halves (half the memory, half the bytes a decoding
    step reads at long contexts): each key and value is stored rounded to nearest,
    saturating at +-65504, and attention reads the rounded ones back, so a
    sequence's logits are the same bits however its tokens are split into calls,
    but differ from a ``float32`` cache's within half precision. A ``q8_0`` or
    ``q4_0`` cache (head size a multiple of 32) keeps each key and value row of a
    head quantised in ggml's blocks of 32 (1.0625 and 0.5625 bytes a value), which
    attention reads back a tile at a time, with the same guarantees. A cache
    belongs to the model that made it (another model, even of the same config,
    refuses it, and so does every model a cache constructed directly) and its state
    cannot be replaced from Python: ``k`` and ``v`` (layers, batch, capacity,
    kv_heads * head_dim; the keys after the rotary embedding) are read-only copies,
    (a sliding layer keeps a ring of about its window's positions: its positions
    outside the window of the next one are NaN there; ``truncate`` and
    ``copy_prefix`` refuse a length whose window the ring has already overwritten),
    ``length`` (positions filled), ``lengths`` (per sequence: generation with
    prompts of different lengths fills them unevenly), ``batch`` and ``capacity``
    read-only properties; :meth:`reset` empties it. Calls that share one cache take
    turns (a lock), so two threads appending to it never write the same positions.
    """
    __slots__ = ("_cfg", "_owner", "_k", "_v", "_batch", "_capacity", "_lengths", "_lock",
                 "_row_elems", "_dtype")

    def __init__(self, cfg: GPTConfig, batch: int, capacity: int, dtype: str = "float32",
                 _owner: object = None):
        cfg = as_config(cfg)
        batch = as_size(batch, "batch")
        capacity = as_size(capacity, "capacity")
        dtype = as_choice(dtype, "dtype", tuple(CACHE_DTYPES))
        if capacity > cfg.context:
            raise BlockcValueError("Requested cache exceeds the context limit "
                                   f"({capacity} > {cfg.context})")
        if dtype in _BLOCK_BYTES and cfg.head_dim_ % 32:
            raise BlockcValueError(f"dtype {dtype!r} needs a head size that is a multiple of "
                                   f"32 (blocks of 32 per key and value row), got "
                                   f"{cfg.head_dim_}")
        n = ffi.new("size_t *")
        check(lib.bc_gpt_cache_bytes(n, cfg.c_struct(), batch, capacity, C_DTYPE[dtype]),
              "new_cache")
        # the C layout: per sequence, each layer's (kv heads, R_l, head dim), R_l the
        # capacity rounded up to whole tiles of 64 positions or a sliding layer's ring
        # (bc_gpt_ring_rows); keys transposed tile by tile, or rows of blocks (bc_gpt.h)
        items = int(n[0]) // np.dtype(CACHE_DTYPES[dtype]).itemsize
        shape = (batch, items // batch)
        self._cfg, self._owner, self._dtype = cfg, _owner, dtype
        self._k = np.zeros(shape, dtype=CACHE_DTYPES[dtype])
        self._v = np.zeros(shape, dtype=CACHE_DTYPES[dtype])
        self._row_elems = items // batch  # of the buffers' type: bytes for a quantised cache
        self._batch, self._capacity = batch, capacity
        self._lengths = np.zeros(batch, dtype=np.uintp)  # size_t, written by C under the lock
        self._lock = threading.Lock()

    @property
    def k(self) -> np.ndarray:
        """The keys (layers, batch, capacity, kv_heads * head_dim) after the rotary
        embedding: a read-only float32 copy (the cache keeps them transposed in tiles)."""
        return self._logical(self._k, True)

    @property
    def v(self) -> np.ndarray:
        """The values (layers, batch, capacity, kv_heads * head_dim): a read-only
        float32 copy."""
        return self._logical(self._v, False)

    def layer_rows(self, layer: int) -> int:
        """Positions layer ``layer`` keeps per sequence and K/V head: the capacity in
        whole tiles of 64, or for a sliding layer the ring (about its window) when smaller.

        Parameters
        ----------
        layer : int in [0, layers)

        Returns
        -------
        int

        Raises
        ------
        TypeError, ValueError
            A layer that is not an integer in range.

        Examples
        --------
        >>> cfg = GPTConfig(vocab=16, context=512, width=8, heads=2, layers=1,
        ...                 positions="rope", sliding_window=8)
        >>> KVCache(cfg, 1, 512).layer_rows(0)
        192
        """
        return ring_rows(self._cfg.layer_window(layer), self._capacity)

    def _logical(self, a: np.ndarray, keys: bool) -> np.ndarray:
        """a (batch, one sequence's elements) -> a read-only (layers, batch, capacity,
        kv heads * head dim) float32 copy. A ring (a sliding layer keeping fewer positions
        than the capacity) shows the positions the next one reads, length-W+1..length-1,
        and NaN elsewhere (what it holds beyond them depends on the calls made)."""
        cfg, cap = self._cfg, self._capacity
        B, G, dh = a.shape[0], cfg.kv_heads_, cfg.head_dim_
        out = np.full((cfg.layers, B, cap, G * dh), np.nan, dtype=np.float32)
        lengths = self._lengths.astype(np.int64)
        at = 0
        for layer in range(cfg.layers):
            r = self.layer_rows(layer)
            if self._dtype in _BLOCK_BYTES:  # rows of blocks; keys in tiles of them
                size = G * r * dh // 32 * _BLOCK_BYTES[self._dtype]
                blk = a[:, at:at + size]
                blk = _key_tiles(blk, self._dtype, dh) if keys else _dequantise(blk, self._dtype)
                at += size
            else:
                blk = a[:, at:at + G * r * dh]
                at += G * r * dh
            if keys and self._dtype not in _BLOCK_BYTES:
                blk = blk.reshape(B, G, r // 64, dh, 64).transpose(0, 1, 2, 4, 3)
            blk = blk.reshape(B, G, r, dh).transpose(0, 2, 1, 3).reshape(B, r, G * dh)
            p = np.arange(cap)
            w = cfg.layer_window(layer)
            ring = r < -(-cap // 64) * 64
            for b in range(B):
                held = (p > lengths[b] - w) & (p < lengths[b]) if ring else p >= 0
                out[layer, b, held] = blk[b, p[held] % r]
        out.setflags(write=False)
        return out

    @property
    def dtype(self) -> str:
        """What the cache keeps its keys and values as: ``"float32"``, ``"float16"``,
        ``"q8_0"`` or ``"q4_0"``."""
        return self._dtype

    @property
    def nbytes(self) -> int:
        """Bytes of its keys and values (all ``batch`` sequences' whole capacity, in tiles
        of 64 positions; a sliding layer's only its ring, about its window)."""
        return int(self._k.nbytes + self._v.nbytes)

    @property
    def batch(self) -> int:
        return self._batch

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def length(self) -> int:
        """Positions filled (the largest over the sequences, when they differ)."""
        return int(self._lengths.max())

    @property
    def lengths(self) -> Tuple[int, ...]:
        """Positions filled, per sequence."""
        return tuple(int(n) for n in self._lengths)

    @property
    def cfg(self) -> GPTConfig:
        return self._cfg

    def reset(self) -> None:
        """Forget every stored position (length 0).

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> c = m.new_cache(1, 8); _ = m(np.array([[1, 2]]), cache=c); c.length
        2
        >>> c.reset(); c.length
        0
        """
        with self._lock:
            self._lengths[:] = 0

    def holds(self, seq: int, n: int) -> bool:
        """Whether sequence ``seq`` can continue at position ``n`` (``truncate`` or
        ``copy_prefix`` to ``n``): every position below its length can, unless a
        sliding layer's ring has already overwritten one that position ``n`` reads.

        Parameters
        ----------
        seq : int in [0, batch)
        n : int >= 0

        Returns
        -------
        bool
            False too for ``n`` past the sequence's length.

        Raises
        ------
        TypeError, ValueError
            Indices that are not integers in range.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> c = m.new_cache(1, 8); _ = m(np.array([[1, 2, 3]]), cache=c); c.holds(0, 2)
        True
        """
        seq = as_int(seq, "seq", 0, self._batch - 1)
        n = as_int(n, "n", 0)
        length = int(self._lengths[seq])
        if n > length:
            return False
        for layer in range(self._cfg.layers):
            w, r = self._cfg.layer_window(layer), self.layer_rows(layer)
            if w and n and length > r and n + r < length + w - 1:
                return False
        return True

    def truncate(self, seq: int, n: int) -> None:
        """Forget sequence ``seq``'s positions from ``n`` on: it continues at position ``n``.

        Parameters
        ----------
        seq : int in [0, batch)
        n : int in [0, lengths[seq]]

        Raises
        ------
        TypeError
            Indices that are not integers.
        ValueError
            ``seq`` outside the batch, ``n`` past the sequence's length, or a position
            ``n`` reads that a sliding layer's ring has overwritten (:meth:`holds`).

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> c = m.new_cache(2, 8); _ = m(np.array([[1, 2, 3], [4, 5, 6]]), cache=c)
        >>> c.truncate(1, 1); c.lengths
        (3, 1)
        """
        seq = as_int(seq, "seq", 0, self._batch - 1)
        n = as_int(n, "n", 0)
        with self._lock:
            if n > int(self._lengths[seq]):
                raise BlockcValueError(f"n must be at most sequence {seq}'s length "
                                       f"{int(self._lengths[seq])}, got {n}")
            check(lib.bc_gpt_cache_truncate(self.c_struct(), self._cfg.c_struct(), seq, n), "truncate")

    def copy_prefix(self, dst: int, src: int, n: int) -> None:
        """Copy sequence ``src``'s first ``n`` positions into sequence ``dst``, whose
        length becomes ``n``: ``dst`` then continues with the bits ``src`` would
        (a conversation's next turn reuses its earlier keys and values instead of
        recomputing them).

        Parameters
        ----------
        dst, src : int in [0, batch)
        n : int in [0, lengths[src]]

        Raises
        ------
        TypeError
            Indices that are not integers.
        ValueError
            An index outside the batch, ``n`` past ``src``'s length, or a position ``n``
            reads that a sliding layer's ring has overwritten (:meth:`holds`).

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> c = m.new_cache(2, 8); _ = m(np.array([[1, 2, 3], [4, 5, 6]]), cache=c)
        >>> c.copy_prefix(1, 0, 2); c.lengths
        (3, 2)
        """
        dst = as_int(dst, "dst", 0, self._batch - 1)
        src = as_int(src, "src", 0, self._batch - 1)
        n = as_int(n, "n", 0)
        with self._lock:
            if n > int(self._lengths[src]):
                raise BlockcValueError(f"n must be at most sequence {src}'s length "
                                       f"{int(self._lengths[src])}, got {n}")
            check(lib.bc_gpt_cache_copy(self.c_struct(), self._cfg.c_struct(), dst, src, n), "copy_prefix")

    def view(self, start: int, stop: int) -> "KVCache":
        """Sequences ``start`` .. ``stop - 1`` as a cache of their own, sharing this
        one's memory, lengths and lock: a model run on the view reads and appends to
        those sequences alone (a server decodes its active slots without touching
        the rest).

        Parameters
        ----------
        start : int in [0, batch)
        stop : int in (start, batch]

        Returns
        -------
        KVCache

        Raises
        ------
        TypeError
            Indices that are not integers.
        ValueError
            An empty or out-of-range span.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> c = m.new_cache(3, 8); _ = m(np.array([[1], [2]]), cache=c.view(1, 3)); c.lengths
        (0, 1, 1)
        """
        start = as_int(start, "start", 0, self._batch - 1)
        stop = as_int(stop, "stop", start + 1, self._batch)
        out = object.__new__(KVCache)
        out._cfg, out._owner, out._lock, out._dtype = self._cfg, self._owner, self._lock, self._dtype
        out._k, out._v = self._k[start:stop], self._v[start:stop]
        out._lengths = self._lengths[start:stop]
        out._row_elems, out._batch, out._capacity = self._row_elems, stop - start, self._capacity
        return out

    # -- what the owning model's forward pass uses (blockc.model's internal interface) --

    def belongs_to(self, model: object) -> bool:
        """Whether ``model`` made this cache (``new_cache``): only it may run on it.

        Parameters
        ----------
        model : object
            Any object; only the model whose ``new_cache`` made this cache is its owner.

        Returns
        -------
        bool

        Raises
        ------
        Nothing: any object may be asked about.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> m.new_cache(1, 8).belongs_to(m)
        True
        """
        return self._owner is model

    @property
    def lock(self) -> Any:
        """The lock calls on this cache (and every view of it) hold while they run."""
        return self._lock

    def start(self, row: Optional[int] = None) -> int:
        """Where the next tokens go: the longest sequence's length, or sequence ``row``'s.
        Read with :attr:`lock` held.

        Parameters
        ----------
        row : int, optional
            One sequence of the batch; None for the whole cache.

        Returns
        -------
        int

        Raises
        ------
        IndexError
            ``row`` outside the batch.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> c = m.new_cache(1, 8)
        >>> _ = m([[1, 2, 3]], cache=c)
        >>> c.start(), c.start(0)
        (3, 3)
        """
        lengths = self._lengths if row is None else self._lengths[row:row + 1]
        return int(lengths.max())

    def rows(self, row: Optional[int] = None) -> int:
        """The batch a call on the whole cache (``row`` None) or on one sequence runs.

        Parameters
        ----------
        row : int, optional
            One sequence of the batch; None for the whole cache.

        Returns
        -------
        int

        Raises
        ------
        Nothing.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> m.new_cache(3, 8).rows(), m.new_cache(3, 8).rows(1)
        (3, 1)
        """
        return self._batch if row is None else 1

    def c_struct(self, row: Optional[int] = None) -> Any:
        """The C struct over the whole cache, or over sequence ``row`` alone (batch 1),
        for the ``lib.bc_gpt_*`` entry points.

        Parameters
        ----------
        row : int, optional
            One sequence of the batch; None for the whole cache.

        Returns
        -------
        cffi pointer to ``bc_gpt_cache``
            Valid while this cache lives.

        Raises
        ------
        Nothing: ``row`` is the caller's, checked against the batch.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> m.new_cache(2, 8).c_struct(1).batch
        1
        """
        lengths = ffi.from_buffer("size_t[]", self._lengths)
        elem = {"float32": "float[]", "float16": "uint16_t[]"}.get(self._dtype, "uint8_t[]")
        k, v = ffi.from_buffer(elem, self._k), ffi.from_buffer(elem, self._v)
        code = C_DTYPE[self._dtype]
        if row is None:
            return ffi.new("bc_gpt_cache *", dict(k=k, v=v, batch=self._batch, dtype=code,
                                                  capacity=self._capacity, lengths=lengths))
        off = row * self._row_elems
        return ffi.new("bc_gpt_cache *", dict(k=k + off, v=v + off, batch=1, dtype=code,
                                              capacity=self._capacity, lengths=lengths + row))

    def __repr__(self):
        dt = "" if self._dtype == "float32" else f", dtype={self._dtype!r}"
        return f"KVCache(batch={self._batch}, capacity={self._capacity}, length={self.length}{dt})"


def _dequantise(b: np.ndarray, dtype: str) -> np.ndarray:
    """(batch, bytes) of q8_0 or q4_0 blocks -> (batch, values) float32: half(d) * q
    (q8_0) or half(d) * (nibble - 8) (q4_0, values j and j + 16 in byte j's low and high
    nibbles), what attention reads back."""
    blocks = np.ascontiguousarray(b).reshape(b.shape[0], -1, _BLOCK_BYTES[dtype])
    d = blocks[..., :2].copy().view(np.float16).astype(np.float32)  # (batch, blocks, 1)
    if dtype == "q8_0":
        q = blocks[..., 2:].view(np.int8).astype(np.float32)
    else:
        qs = blocks[..., 2:].astype(np.int16)
        q = np.concatenate([qs & 15, qs >> 4], axis=-1).astype(np.float32) - 8
    return (d * q).reshape(b.shape[0], -1)


def _key_tiles(b: np.ndarray, dtype: str, dh: int) -> np.ndarray:
    """(batch, bytes) of tiles of 64 quantised keys (bc_format.h: nb = dh / 32 rows of
    64 half scales, then the values' rows of 64 bytes: q8_0 dh rows of int8, q4_0
    nb * 16 rows of two nibbles) -> (batch, keys * dh) float32, key by key."""
    nb = dh // 32
    t = np.ascontiguousarray(b).reshape(b.shape[0], -1, 64 * nb * _BLOCK_BYTES[dtype])
    d = t[..., :nb * 128].copy().view(np.float16).astype(np.float32)
    d = d.reshape(*t.shape[:2], nb, 1, 64)  # (batch, tiles, block, 1, lane)
    q = t[..., nb * 128:]
    if dtype == "q8_0":
        q = q.view(np.int8).astype(np.float32).reshape(*t.shape[:2], nb, 32, 64)
    else:
        by = q.astype(np.int16).reshape(*t.shape[:2], nb, 16, 64)
        q = np.concatenate([by & 15, by >> 4], axis=-2).astype(np.float32) - 8
    vals = (d * q).reshape(*t.shape[:2], dh, 64)  # (batch, tiles, dimension, lane)
    return vals.transpose(0, 1, 3, 2).reshape(b.shape[0], -1)


def ring_rows(window: Optional[int], capacity: int) -> int:
    """Positions a layer's cache keeps per sequence and K/V head (``bc_gpt_ring_rows``):
    ``capacity`` in whole tiles of 64, or for a sliding layer of ``window`` the ring
    (about the window) when that is smaller.

    Examples
    --------
    >>> ring_rows(None, 100), ring_rows(8, 512), ring_rows(8, 64)
    (128, 192, 64)
    """
    rows = ffi.new("size_t *")
    check(lib.bc_gpt_ring_rows(rows, window or 0, capacity), "ring_rows")
    return int(rows[0])
