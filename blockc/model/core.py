"""The model core: the parameter buffer and its layout, tensor reads and writes, the
C model handle, the per-thread workspace, the KV cache and the forward pass.

:class:`Model` is everything a GPT is without checkpoint I/O, training or
generation; :class:`blockc.GPT` adds those as mixins (:mod:`blockc.hf`,
:mod:`blockc.train`, :mod:`blockc.generation`), which reach the core only through
the internal interface :mod:`blockc.model` documents.
"""
from __future__ import annotations

import threading
from typing import Any, Dict, Mapping, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

from .._args import as_choice, as_flag, as_int, to_numpy
from .._enums import FORMATS, VALUE_LIMIT
from .._errors import BlockcTypeError, BlockcValueError
from .._native import aligned_copy, check, cptr, ffi, fptr, lib, output_empty, thread_buffer
from ..block.ops import pack_ggml, unpack_ggml
from .cache import KVCache
from .config import C_DTYPE, DTYPES, GPTConfig, as_config, gpt_parameter_count
from .layout import MIXED, Format, Tensor, c_struct, check_ids, formats, layout

__all__ = ["Model", "same_bits"]

_DTYPE_NAME = {v: k for k, v in C_DTYPE.items()}



def _state_array(name: str, value: Any) -> np.ndarray:
    """A state-dict entry (NumPy array-like or torch tensor) as a NumPy array of reals."""
    a = to_numpy(value, f"state dict entry {name!r}")
    if a.dtype.kind not in "fiu":
        raise BlockcValueError(f"state dict entry {name!r} must hold real numbers, got dtype {a.dtype}")
    return a


class Model:
    """The model core: parameters in one buffer (matrices packed in :attr:`dtype`),
    computed in C. :class:`blockc.GPT` is this with checkpoint I/O, training and
    generation mixed in; see :mod:`blockc.model` for the internal interface."""

    def __init__(self, cfg: GPTConfig, params: Optional[npt.ArrayLike] = None,
                 dtype: str = "float32", dtypes: Optional[Mapping[str, Format]] = None) -> None:
        """A model of config ``cfg`` storing its matrices as ``dtype`` (or each matrix
        named in the mapping ``dtypes`` as its format there), on ``params``: the raw
        parameter buffer (1-D uint8 of :attr:`nbytes`, as :attr:`params` returns; adopted
        without a copy when it is one), or all zeros when None."""
        self._cfg = as_config(cfg)
        fmts = formats(self._cfg, dtype, dtypes)
        # the C struct and the dtypes array it points to (None: one format), kept alive
        # together; C reads the array once per call into its own checked copy
        self._c, self._c_formats = c_struct(self._cfg, fmts)
        self._dtypes = fmts
        kinds = set(fmts.values())
        self._dtype = kinds.pop() if len(kinds) == 1 else MIXED
        self._layout = layout(self._cfg, dtype, fmts)
        n = ffi.new("size_t *")
        check(lib.bc_gpt_param_bytes(n, self._c), "GPT")
        nbytes = int(n[0])
        if params is None:
            params = np.zeros(nbytes, dtype=np.uint8)
        else:
            params = to_numpy(params, "params")
            if params.dtype != np.uint8 or params.shape != (nbytes,):
                raise BlockcValueError(f"params must be a uint8 array of shape ({nbytes},), "
                                       f"got {params.dtype} {params.shape}")
            if not params.flags.c_contiguous or params.ctypes.data % 64:
                params = aligned_copy(params)
        self._params = params
        self._cptr = ffi.from_buffer("char[]", params, False)  # made once: params is never replaced
        self._tls = threading.local()  # each thread's workspace
        #: config.json's bos/eos/pad ids when loaded from a checkpoint (written back on save)
        self.special_ids: Dict[str, Any] = {}

    # ---- construction -------------------------------------------------------

    @classmethod
    def random(cls, cfg: GPTConfig, seed: Optional[int] = 0, dtype: str = "float32",
               dtypes: Optional[Mapping[str, Format]] = None) -> "Model":
        """GPT-2 initialisation: weights N(0, 0.02), biases 0, norm gains 1, shifts 0.

        Parameters
        ----------
        cfg : GPTConfig
        seed : int >= 0 or None, optional
            Seed of ``numpy.random.default_rng``, drawn from tensor by tensor in
            state-dict order (None: fresh entropy).
        dtype : str, optional
            A format of :data:`blockc.DTYPES` (the C library's formats' table): how
            the matrices are stored (the same float32 draws, then rounded
            or quantised). q8_0i holds q8_0's weights and multiplies them by
            integer dot products (each activation row quantised to 8 bits per
            block of 32): faster decoding, about 1e-2 relative error per product
            where q8_0 keeps the activations exact. bfloat16i holds bfloat16's
            weights and multiplies them by bfloat16 dot products (each activation
            row rounded to bfloat16; AVX512_BF16's vdpbf16ps where the CPU has it).
        dtypes : mapping of str to str, optional
            Matrix name -> its own format (the others in ``dtype``).

        Returns
        -------
        GPT

        Raises
        ------
        TypeError
            A non-GPTConfig ``cfg`` or a non-integer seed.
        ValueError
            A negative seed, an unknown dtype, or (q4_k, q6_k) a matrix whose columns are
            not a multiple of 256 (named).

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> m(np.array([[1, 2, 3]])).shape
        (1, 3, 16)
        """
        seed = None if seed is None else as_int(seed, "seed", 0)
        m = cls(cfg, dtype=dtype, dtypes=dtypes)
        rng = np.random.default_rng(seed)
        for name, t in m._layout.items():
            if len(t.shape) == 2:  # Linear and Embedding weights
                m.write_tensor(name, rng.standard_normal(t.shape, dtype=np.float32) * np.float32(0.02))
            elif name.endswith(".weight"):  # the 1-D weights are norm gains
                m._vector(name)[:] = 1.0
            # biases stay zero
        return m

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, Any], cfg: GPTConfig,
                        dtype: str = "float32",
                        dtypes: Optional[Mapping[str, Format]] = None) -> "Model":
        """Load a state dict keyed as the chapter's PyTorch ``GPT.state_dict()``.

        Parameters
        ----------
        sd : mapping of str to array_like
            NumPy arrays, array-likes or torch tensors (any real dtype, bfloat16
            included; converted to float32, then stored as ``dtype``). Each entry is
            read once.
        cfg : GPTConfig
            Every key and shape is checked against it. For a tied config,
            ``head.weight`` may be present (PyTorch lists it) and must equal
            ``token.weight`` bit for bit.
        dtype : str, optional
            How the matrices are stored: a format of :data:`blockc.DTYPES`.
        dtypes : mapping of str to str, optional
            Matrix name -> its own format (the others in ``dtype``): each matrix
            is packed in its own.

        Returns
        -------
        GPT
            A new model owning a copy of the weights.

        Raises
        ------
        TypeError
            ``sd`` is not a mapping or ``cfg`` not a GPTConfig.
        ValueError
            A missing, unexpected or mis-shaped tensor (named), a tied head
            that differs from the token embedding, an unknown format or a name
            in ``dtypes`` that is not a matrix of the model, or (q4_k, q6_k) a matrix
            whose columns are not a multiple of 256 (named).

        Examples
        --------
        >>> cfg = GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1)
        >>> m = GPT.random(cfg, seed=1)
        >>> m2 = GPT.from_state_dict(m.state_dict(), cfg)
        >>> bool((m2.params == m.params).all())
        True
        """
        cfg = as_config(cfg)
        m = cls(cfg, dtype=dtype, dtypes=dtypes)
        m._load(sd, strict=True)
        return m

    def load_state_dict(self, sd: Mapping[str, Any], strict: bool = True) -> None:
        """Write weights into this model (each matrix packed again in its format,
        :attr:`dtypes`).

        Parameters
        ----------
        sd : mapping of str to array_like
            As :meth:`from_state_dict`, keyed like :meth:`state_dict`.
        strict : bool, optional
            Every tensor must be present (the default); False writes the ones given.

        Raises
        ------
        TypeError, ValueError
            As :meth:`from_state_dict`; with ``strict``, a missing tensor.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> sd = m.state_dict(); sd["blocks.0.up.weight"][:] = 0
        >>> m.load_state_dict(sd); float(abs(m.state_dict()["blocks.0.up.weight"]).max())
        0.0
        """
        self._load(sd, as_flag(strict, "strict"))

    def _load(self, sd: Mapping[str, Any], strict: bool) -> None:
        if not isinstance(sd, Mapping):
            raise BlockcTypeError(f"state dict must be a mapping, got {type(sd).__name__}")
        sd = dict(sd)  # each entry read once: what is checked is what is loaded
        cfg, expected = self._cfg, self._layout
        keys = set(sd.keys())
        tied_head = cfg.tie_weights and "head.weight" in keys
        missing = [k for k in expected if k not in keys]
        unexpected = sorted(str(k) for k in keys
                            if k not in expected and not (tied_head and k == "head.weight"))
        if missing and strict:
            raise BlockcValueError(f"state dict is missing {missing}")
        if unexpected:
            raise BlockcValueError(f"state dict has unexpected keys {unexpected}")
        arrays = {}
        for name, t in expected.items():
            if name not in sd:
                continue
            a = _state_array(name, sd[name])
            if a.shape != t.shape:
                raise BlockcValueError(f"state dict entry {name!r} has shape {a.shape}, expected {t.shape}")
            arrays[name] = a
        if tied_head:
            head = _state_array("head.weight", sd["head.weight"])
            shape = expected["token.weight"].shape
            if head.shape != shape:
                raise BlockcValueError(f"state dict entry 'head.weight' has shape {head.shape}, "
                                       f"expected {shape}")
            token = arrays["token.weight"] if "token.weight" in arrays else self.read_tensor("token.weight")
            if not same_bits(head, token):
                raise BlockcValueError("state dict entry 'head.weight' differs from 'token.weight' "
                                       "but the config ties them (tie_weights=True)")
        for name, a in arrays.items():
            self.write_tensor(name, a)

    def astype(self, dtype: str) -> "Model":
        """This model with every matrix stored as ``dtype``: a new (uniform) model.

        Parameters
        ----------
        dtype : str
            A format of :data:`blockc.DTYPES`. From float32 the weights are rounded (bfloat16, float16) or quantised
            (q8_0, q4_0, q5_0, q4_k, q6_k: llama.cpp's reference quantisers; q8_0i (q4_0i,
            ...) q8_0's (q4_0's, q5_0's, ...) weights, multiplied by integer
            dot products on 8-bit activations;
            bfloat16i bfloat16's, on bfloat16 activations); from a lower precision
            (or a mixed model's formats) they are the weights this model computes
            with, exactly, stored anew (q8_0 <-> q8_0i, q4_0 <-> q4_0i, q5_0 <-> q5_0i,
            q4_k <-> q4_ki (their very blocks) and bfloat16 <-> bfloat16i keep every weight
            but bfloat16i's subnormals, zeros).

        Returns
        -------
        GPT

        Raises
        ------
        ValueError
            An unknown dtype, or (q4_k, q6_k) a matrix whose columns are not a multiple of
            256 (named).

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=32, heads=2, layers=1))
        >>> m.astype("q8_0").dtype, m.astype("q8_0").nbytes < m.nbytes
        ('q8_0', True)
        """
        dtype = as_choice(dtype, "dtype", DTYPES)
        m = type(self)(self._cfg, dtype=dtype)
        m.special_ids = dict(self.special_ids)
        for name, t in self._layout.items():
            src = self._dtypes.get(name) if t.packed and not t.parts else None
            own = FORMATS[src].ggml_type if src else -1
            if src is not None and src != dtype and own >= 0 and FORMATS[dtype].ggml_type == own:
                # the same GGUF type's blocks in another layout (q4_k <-> q4_ki): moved
                # through that type's rows, not requantised
                u = m._layout[name]
                rows = unpack_ggml(self._params[t.offset:t.offset + t.nbytes], src, t.shape)
                m._params[u.offset:u.offset + u.nbytes] = pack_ggml(rows, dtype, t.shape)
            else:
                m.write_tensor(name, self.read_tensor(name))
        return m

    # ---- tensors in the buffer ----------------------------------------------

    def _vector(self, name: str) -> np.ndarray:
        """A float32 (unpacked) tensor of the buffer, as a writable view."""
        t = self._layout[name]
        return self._params[t.offset:t.offset + t.nbytes].view(np.float32).reshape(t.shape)

    def read_tensor(self, name: str) -> np.ndarray:
        """Tensor ``name`` as float32: a writable view of the buffer for vectors and the
        position table, an unpacked copy for the (packed) matrices.

        Parameters
        ----------
        name : str
            A key of :attr:`layout`.

        Returns
        -------
        numpy.ndarray

        Raises
        ------
        KeyError
            A name that is not in the layout.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> m.read_tensor("blocks.0.up.weight").shape
        (32, 8)
        """
        t = self._layout[name]
        if not t.packed:
            return self._vector(name)
        out = np.empty(t.shape, np.float32)
        for p in t.pieces():  # a split attn.qkv.weight's q, k and v rows in turn
            check(lib.bc_unpack(fptr(out[p.row0:p.row1]), self._cptr + p.offset, p.nbytes,
                                p.dtype, p.row1 - p.row0, t.shape[1]),
                  f"state dict entry {name!r}")
        return out

    def write_tensor(self, name: str, a: npt.ArrayLike, transposed: bool = False) -> None:
        """Store the float32-convertible array ``a`` as tensor ``name`` (packed again in
        its format, ``dtypes[name]``, for a matrix). The caller has checked the shape.

        Parameters
        ----------
        name : str
            A key of :attr:`layout`.
        a : array_like
            Of the tensor's shape, or (``transposed``) of its transpose, as GPT-2's
            Conv1D stores weights (a packed matrix is packed from it directly,
            without a transposed copy).
        transposed : bool, optional

        Raises
        ------
        KeyError
            A name that is not in the layout.
        ValueError
            q8_0 weights that are not finite or too large.

        Examples
        --------
        >>> m = GPT(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> m.write_tensor("norm.weight", np.full(8, 2.0)); float(m.read_tensor("norm.weight")[0])
        2.0
        """
        t = self._layout[name]
        if not (type(a) is np.ndarray and a.dtype == np.float32 and a.flags.c_contiguous
                and a.flags.aligned):
            a = np.ascontiguousarray(a, dtype=np.float32)
        if not t.packed:
            self._vector(name)[...] = a.T if transposed else a
            return
        rows, cols = t.shape
        rs, cs = (1, rows) if transposed else (cols, 1)
        base = cptr(a)
        for p in t.pieces():  # a split attn.qkv.weight's q, k and v rows in turn
            st = lib.bc_pack_strided(self._cptr + p.offset, p.nbytes, base + p.row0 * rs,
                                     rs, cs, p.dtype, p.row1 - p.row0, cols)
            if st == lib.BC_EVALUE:
                fm = _DTYPE_NAME[p.dtype]
                raise BlockcValueError(f"state dict entry {name!r}: {fm} needs {VALUE_LIMIT[fm]}")
            check(st, f"state dict entry {name!r}")

    # ---- the internal interface (see blockc.model) ---------------------------

    @property
    def layout(self) -> Dict[str, Tensor]:
        """name -> :class:`Tensor` (offset, bytes, storage, packed, shape) of every
        tensor of the buffer, in state-dict order (do not modify)."""
        return self._layout

    @property
    def c_config(self) -> Any:
        """The ``bc_gpt_config *`` of this model (its config at its dtype, or with
        ``dtypes`` pointing to its per-matrix formats: an ``int[]`` the model owns)."""
        return self._c

    @property
    def c_params(self) -> Any:
        """A ``char *`` over :attr:`params`, made once (the buffer is never replaced)."""
        return self._cptr

    @property
    def thread_state(self) -> threading.local:
        """This model's per-thread storage: each thread's workspaces (the forward
        pass keeps its buffer there; training keeps its own under other names)."""
        return self._tls

    # ---- access -------------------------------------------------------------

    @property
    def config(self) -> GPTConfig:
        return self._cfg

    @property
    def dtype(self) -> str:
        """How the matrices are stored: their one format, one of
        :data:`blockc.DTYPES` (the C library's formats' table), or "mixed" when they do
        not share one (see :attr:`dtypes`)."""
        return self._dtype

    @property
    def dtypes(self) -> Dict[str, Format]:
        """Matrix name -> its format, for every matrix (a new dict each time): an
        attn.qkv.weight whose q, k and v rows have different formats (a Q4_K_M file's
        Q6_K attn_v) a (q, k, v) tuple of them."""
        return dict(self._dtypes)

    @property
    def params(self) -> np.ndarray:
        """The whole parameter buffer: 1-D uint8, writable, shared with the model (the
        layout is the C library's: the packed matrices and the float32 vectors)."""
        return self._params

    @property
    def nbytes(self) -> int:
        """Bytes of the parameter buffer."""
        return int(self._params.size)

    def num_parameters(self) -> int:
        """The model's parameter count: a tied head counted once.

        Returns
        -------
        int

        Examples
        --------
        >>> GPT(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1)).num_parameters()
        1080
        """
        return gpt_parameter_count(self._cfg)

    def state_dict(self, keep_tied: bool = False) -> Dict[str, np.ndarray]:
        """The parameters, in the chapter's order and names, as float32 arrays.

        Vectors (biases, norm gains and shifts) and the position table are
        writable views of the parameter buffer; the matrices, stored packed, are
        unpacked into new arrays (a quantised model's dequantised weights, exactly
        the ones it computes with): change them with :meth:`load_state_dict`.

        Parameters
        ----------
        keep_tied : bool, optional
            A tied model lists ``token.weight`` only, unless this adds ``head.weight``
            (the same array), as PyTorch's ``state_dict()`` does.

        Returns
        -------
        dict of str to numpy.ndarray

        Raises
        ------
        TypeError
            A non-bool ``keep_tied``.

        Examples
        --------
        >>> m = GPT(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> list(m.state_dict())[:3]
        ['token.weight', 'position.weight', 'blocks.0.ln1.weight']
        """
        keep_tied = as_flag(keep_tied, "keep_tied")
        out = {name: self.read_tensor(name) for name in self._layout}
        if keep_tied and self._cfg.tie_weights:
            out["head.weight"] = out["token.weight"]
        return out

    def new_cache(self, batch: int, capacity: int, dtype: str = "float32") -> KVCache:
        """An empty KV cache, owned by this model.

        Parameters
        ----------
        batch : int >= 1
            Sequences.
        capacity : int in [1, context]
            Positions each sequence can hold.
        dtype : {"float32", "float16"}, optional
            What it keeps keys and values as: ``"float16"`` halves its memory and
            what a long context's decoding step reads, rounding each key and value
            to half precision (see :class:`KVCache`).

        Returns
        -------
        KVCache

        Raises
        ------
        TypeError
            Sizes that are not integers.
        ValueError
            Sizes below 1, a capacity past the context, or another dtype.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> m.new_cache(2, 8)
        KVCache(batch=2, capacity=8, length=0)
        >>> m.new_cache(1, 8, dtype="float16").dtype
        'float16'
        """
        return KVCache(self._cfg, batch, capacity, dtype, _owner=self)

    # ---- forward ------------------------------------------------------------

    def run(self, ids: Any, cache: Optional["KVCache"] = None, *, last_only: bool = False,
            want_hidden: bool = False, want_logits: bool = True, row: Optional[int] = None
            ) -> Tuple[Optional[np.ndarray], Optional[np.ndarray]]:
        """The forward pass as the mixins call it: logits and/or hidden states.

        With a cache, the call holds the cache's lock (one call at a time per cache:
        the lengths C reads are the ones checked here, and C advances them).

        Parameters
        ----------
        ids : array_like of int, shape (B, T)
        cache : KVCache, optional
            This model's cache; positions continue after its length.
        last_only : bool, optional
            Only the last position's logits, (B, 1, vocab).
        want_hidden : bool, optional
            Also the residual stream after every block, (layers, B, T, width).
        want_logits : bool, optional
            False skips the head (logits None).
        row : int, optional
            Run on that sequence of the cache alone (ids of batch 1).

        Returns
        -------
        logits : numpy.ndarray or None
        hidden : numpy.ndarray or None

        Raises
        ------
        TypeError, ValueError
            As :meth:`__call__`.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> logits, hidden = m.run([[1, 2, 3]], last_only=True)
        >>> logits.shape, hidden
        ((1, 1, 16), None)
        """
        if cache is None:
            return self._run_at(ids, None, 0, last_only, want_hidden, want_logits, None)
        self._own(cache)
        with cache.lock:
            return self._run_at(ids, cache, cache.start(row), last_only, want_hidden,
                                want_logits, row)

    def _own(self, cache: Any) -> None:
        if not isinstance(cache, KVCache):
            raise BlockcTypeError(f"cache must be a blockc.KVCache, got {type(cache).__name__}")
        if not cache.belongs_to(self):
            raise BlockcValueError("cache belongs to another model: make it with this "
                                   "model's new_cache()")

    def _run_at(self, ids: Any, cache: Optional[KVCache], start: int, last_only: bool,
             want_hidden: bool, want_logits: bool, row: Optional[int]):
        cfg = self._cfg
        a = check_ids(ids, cfg, start)
        b, t = a.shape
        c_cache = ffi.NULL
        if cache is not None:
            rows = cache.rows(row)
            if rows != b:
                raise BlockcValueError(f"ids have batch {b} but the cache holds {rows} rows")
            if start + t > cache.capacity:
                raise BlockcValueError(f"Sequence exceeds the cache's capacity of {cache.capacity} "
                                       f"(length {start} + {t} tokens)")
            c_cache = cache.c_struct(row)
        n = ffi.new("size_t *")
        check(lib.bc_gpt_workspace_size(n, self._c, b, t, c_cache), "GPT forward")
        work, buf = thread_buffer(self._tls, int(n[0]))
        logits = None
        if want_logits:
            logits = output_empty((b, 1 if last_only else t, cfg.vocab))
        hidden = output_empty((cfg.layers, b, t, cfg.width)) if want_hidden else None
        wide = a.dtype == np.int64
        ids_ptr = ffi.from_buffer("int64_t[]" if wide else "int32_t[]", a, require_writable=False)
        check(lib.bc_gpt_forward(fptr(logits) if logits is not None else ffi.NULL,
                                 fptr(hidden) if hidden is not None else ffi.NULL,
                                 c_cache, self._cptr, self._c, ids_ptr,
                                 lib.BC_IDS_INT64 if wide else lib.BC_IDS_INT32, b, t,
                                 int(last_only), work, buf.size),
              "GPT forward")
        return logits, hidden

    def hidden_states(self, ids: npt.ArrayLike) -> np.ndarray:
        """The residual stream after every block, without the head.

        Parameters
        ----------
        ids : array_like of int, shape (B, T)

        Returns
        -------
        numpy.ndarray
            (layers, B, T, width) float32.

        Raises
        ------
        TypeError
            Ids that are not integers.
        ValueError
            Ids out of range or a sequence past the context.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=3))
        >>> m.hidden_states(np.array([[1, 2]])).shape
        (3, 1, 2, 8)
        """
        return self.run(ids, want_hidden=True, want_logits=False)[1]

    def __call__(self, ids: Any, cache: Optional[KVCache] = None, return_hidden: bool = False,
                 *, last_only: bool = False) -> Union[np.ndarray, Tuple[np.ndarray, np.ndarray]]:
        """The logits of every position (or of the last).

        Parameters
        ----------
        ids : array_like of int, shape (B, T)
            Token ids in [0, vocab) (copied, then checked).
        cache : KVCache, optional
            This model's cache: positions continue after ``cache.length`` and the
            new keys and values are appended. Without one, positions are 0..T-1.
        return_hidden : bool, optional
            Also return the residual stream after every block.
        last_only : bool, optional
            Only the last position's logits, (B, 1, vocab): a prompt's prefill, without
            the head's work and memory for the other positions (the same bits as the
            last row of the whole).

        Returns
        -------
        logits : numpy.ndarray
            (B, T, vocab) float32; (B, 1, vocab) with ``last_only``.
        hidden : numpy.ndarray
            (layers, B, T, width) float32, with ``return_hidden`` only.

        Raises
        ------
        TypeError
            Ids that are not integers, a non-bool flag, a cache of another type.
        ValueError
            Ids out of range, a sequence past the context or the cache's capacity,
            a cache of another model.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> m(np.array([[1, 2, 3]])).shape
        (1, 3, 16)
        """
        return_hidden = as_flag(return_hidden, "return_hidden")
        logits, hidden = self.run(ids, cache, last_only=as_flag(last_only, "last_only"),
                                  want_hidden=return_hidden)
        return (logits, hidden) if return_hidden else logits

    forward = __call__

    def __repr__(self):
        c = self._cfg
        return (f"{type(self).__name__}(vocab={c.vocab}, context={c.context}, width={c.width}, heads={c.heads}, "
                f"layers={c.layers}, tie_weights={c.tie_weights}, dtype={self._dtype!r}, "
                f"parameters={self.num_parameters():,})")


def same_bits(a: Any, b: Any) -> bool:
    """The two tensors hold the same float32 values bit for bit (NaN equals itself)."""
    a32 = np.ascontiguousarray(a, dtype=np.float32)
    b32 = np.ascontiguousarray(b, dtype=np.float32)
    return a32.shape == b32.shape and np.array_equal(a32.view(np.uint32), b32.view(np.uint32))
