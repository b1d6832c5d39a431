"""Training a :class:`blockc.GPT` in C: the loss, its gradient, AdamW.

>>> from blockc import GPT, GPTConfig, AdamW
>>> m = GPT.random(GPTConfig(vocab=32, context=16, width=16, heads=2, layers=2), seed=0)
>>> ids = np.arange(16).reshape(1, 16) % 32
>>> opt = AdamW(m, lr=1e-2)
>>> first = m.train_step(ids[:, :-1], ids[:, 1:], opt)
>>> for _ in range(20):
...     last = m.train_step(ids[:, :-1], ids[:, 1:], opt)
>>> bool(last < first)
True

The gradient of :meth:`GPT.loss` (the mean next-token cross-entropy over the
positions whose target is not ``ignore_index``) comes from one C call that
runs the forward keeping what the backward needs, the head and the loss a
block of rows at a time (the logits are never whole), then the backward.
Gradients are computed in a buffer laid out as the parameters, matrices
packed as they are, so :class:`AdamW` updates the model element by element in
C; :meth:`GPT.grad` unpacks them into a dict keyed like ``state_dict()``.
Training needs float32 weights (``m.astype("float32")`` first). Every result is
the same bits at any thread count.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np
import numpy.typing as npt

from .._args import as_choice, as_int, as_real, check_keys, to_numpy
from .._errors import BlockcTypeError, BlockcValueError
from .._native import aligned_zeros, check, ffi, fptr, lib
from ..model import Model, check_ids

__all__ = ["AdamW", "DECAY", "TrainingMixin"]

#: Which tensors AdamW's weight decay applies to: every matrix (the 2-D tensors:
#: projections, embeddings, head; nanoGPT's rule, the default), all, none.
DECAY = {"matrices": lib.BC_DECAY_MATRICES, "all": lib.BC_DECAY_ALL, "none": lib.BC_DECAY_NONE}


def _trainable(m) -> None:
    if m.dtype != "float32":
        what = "matrices of mixed formats" if m.dtype == "mixed" else m.dtype
        raise BlockcValueError(f"training needs float32 weights, this model stores {what} "
                               "(m.astype('float32') first)")
    used = m.config.family_features
    if used:
        raise BlockcValueError(f"training does not compute {', '.join(used)} (a checkpoint "
                               "family's variant, issue 50): this model runs but is not trained")


def _batch(m, ids: Any, targets: Any, ignore_index: Any) -> Tuple[np.ndarray, np.ndarray, int]:
    """ids and targets as new int64 (B, T) arrays, checked (the copies are what C reads)."""
    cfg = m.config
    a = check_ids(ids, cfg).astype(np.int64)
    ign = as_int(ignore_index, "ignore_index", -2 ** 63, 2 ** 63 - 1)  # C's int64_t
    t = np.array(to_numpy(targets, "targets"), copy=True)
    if t.dtype.kind not in "iu" or t.dtype == np.bool_:
        raise BlockcTypeError(f"targets must be integers, got dtype {t.dtype}")
    if t.shape != a.shape:
        raise BlockcValueError(f"targets must have the shape of ids {a.shape}, got {t.shape}")
    # checked in their own dtype, before the cast: a uint64 2**64 - 100 must not wrap to -100
    bad = (t != ign) & ((t < 0) | (t >= cfg.vocab))
    if bad.any():
        v = int(t[bad][0])
        raise BlockcValueError(f"targets must lie in [0, {cfg.vocab}) or be ignore_index="
                               f"{ign}, got {v}")
    return a, np.ascontiguousarray(t, dtype=np.int64), ign


def _workspace(m, b: int, t: int):
    """This thread's training workspace for model m (kept on the model's thread-local
    storage, grown for a new (B, T)): (pointer, floats)."""
    tls = m.thread_state
    if getattr(tls, "train_shape", None) != (b, t):
        n = ffi.new("size_t *")
        check(lib.bc_gpt_train_workspace_size(n, m.c_config, b, t), "training workspace")
        tls.train_buf = aligned_zeros(int(n[0]))
        tls.train_ptr = fptr(tls.train_buf)
        tls.train_shape = (b, t)
    return tls.train_ptr, tls.train_buf.size


def _run_grad(m, ids, targets, ignore_index, grads: Optional[np.ndarray]) -> Tuple[float, int]:
    a, t, ign = _batch(m, ids, targets, ignore_index)
    b, s = a.shape
    w = m.config.sliding_window
    if w is not None and s > w:  # the backward has no window (inside it, none is needed)
        raise BlockcValueError(f"training a model with a sliding window takes sequences of "
                               f"at most the window ({w}), got {s}")
    work, wn = _workspace(m, b, s)
    loss = ffi.new("float *")
    count = ffi.new("size_t *")
    ip = ffi.from_buffer("int64_t[]", a, require_writable=False)
    tp = ffi.from_buffer("int64_t[]", t, require_writable=False)
    check(lib.bc_gpt_grad(loss, count, ffi.NULL if grads is None else ffi.from_buffer(grads),
                          m.c_params, m.c_config, ip, tp, lib.BC_IDS_INT64, ign, b, s, work, wn),
          "GPT training")
    return float(loss[0]), int(count[0])


def loss(m, ids: npt.ArrayLike, targets: npt.ArrayLike, ignore_index: int = -100) -> float:
    """See :meth:`blockc.GPT.loss`."""
    _trainable(m)
    return _run_grad(m, ids, targets, ignore_index, None)[0]


def unpack_grads(m, grads: np.ndarray) -> Dict[str, np.ndarray]:
    """The gradient buffer as new float32 arrays keyed like ``m.state_dict()``."""
    out = {}
    raw = ffi.from_buffer("char[]", grads, False)
    for name, t in m.layout.items():
        if name == "head.weight" and m.config.tie_weights:
            continue
        if not t.packed:
            out[name] = grads[t.offset // 4:(t.offset + t.nbytes) // 4].reshape(t.shape).copy()
            continue
        a = np.empty(t.shape, np.float32)
        check(lib.bc_unpack(fptr(a), raw + t.offset, t.nbytes, t.dtype, t.shape[0], t.shape[1]),
              f"gradient {name!r}")
        out[name] = a
    return out


def pack_grads(m, grads: Mapping[str, Any], name: str = "grads") -> np.ndarray:
    """A gradient buffer from arrays keyed like ``m.state_dict()`` (each read once)."""
    want = [n for n in m.layout if not (n == "head.weight" and m.config.tie_weights)]
    items = check_keys(grads, name, want, "of state_dict()")
    buf = aligned_zeros(m.nbytes // 4)
    raw = ffi.from_buffer("char[]", buf)
    for n in want:
        t = m.layout[n]
        a = np.ascontiguousarray(to_numpy(items[n], f"{name}[{n!r}]"), dtype=np.float32)
        if a.shape != t.shape:
            raise BlockcValueError(f"{name}[{n!r}] must have shape {t.shape}, got {a.shape}")
        if not t.packed:
            buf[t.offset // 4:(t.offset + t.nbytes) // 4] = a.reshape(-1)
            continue
        check(lib.bc_pack_strided(raw + t.offset, t.nbytes, ffi.from_buffer("float[]", a, False),
                                  t.shape[1], 1, lib.BC_DTYPE_F32, t.shape[0], t.shape[1]),
              f"{name}[{n!r}]")
    return buf


def grad(m, ids, targets, ignore_index: int = -100) -> Tuple[float, Dict[str, np.ndarray]]:
    """See :meth:`blockc.GPT.grad`."""
    _trainable(m)
    g = aligned_zeros(m.nbytes // 4)
    value, _ = _run_grad(m, ids, targets, ignore_index, g)
    return value, unpack_grads(m, g)


def grad_norm(m, grads: np.ndarray) -> float:
    out = ffi.new("double *")
    check(lib.bc_gpt_grad_norm(out, ffi.from_buffer(grads), m.c_config), "gradient norm")
    return float(out[0])


def _betas(betas: Any) -> Tuple[float, float]:
    """AdamW's (beta1, beta2), each a float in [0, 1)."""
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise BlockcTypeError(f"betas must be a pair of floats, got {betas!r}")
    out = (as_real(betas[0], "betas[0]", 0.0), as_real(betas[1], "betas[1]", 0.0))
    if not all(b < 1.0 for b in out):
        raise BlockcValueError(f"betas must lie in [0, 1), got {betas!r}")
    return out


class _sigint_deferred:
    """Hold back SIGINT's KeyboardInterrupt until the block ends (main thread only: Python
    runs signal handlers there alone). A SIGINT in the block is raised at its end, after
    the block's work is whole; nothing changes when the handler is not Python's own."""

    def __enter__(self):
        import signal
        import threading
        self._old, self._hit = None, None
        if threading.current_thread() is not threading.main_thread():
            return self
        old = signal.getsignal(signal.SIGINT)
        if not callable(old):
            return self

        def hold(signum, frame):
            self._hit = (signum, frame)
        signal.signal(signal.SIGINT, hold)
        self._old = old
        return self

    def __exit__(self, *exc):
        import signal
        if self._old is None:
            return False
        signal.signal(signal.SIGINT, self._old)
        if self._hit is not None and exc[0] is None:
            self._old(*self._hit)  # Python's default handler raises KeyboardInterrupt here
        return False


class AdamW:
    """AdamW (Loshchilov and Hutter), with the update of ``torch.optim.AdamW``.

    Decoupled weight decay, bias-corrected moments:

        p <- p (1 - lr wd);  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
        p <- p - lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps)

    Parameters
    ----------
    model : blockc.GPT
        The model (float32) whose parameters :meth:`step` updates in place.
    lr : float > 0, optional
        Learning rate (``opt.lr`` may be changed between steps: a schedule).
    betas : (float, float) in [0, 1), optional
    eps : float >= 0, optional
    weight_decay : float >= 0, optional
    decay : {"matrices", "all", "none"}, optional
        The tensors decay applies to: by default every 2-D tensor (the projections,
        the embeddings, the head), never a bias or a norm's gain or shift.

    Raises
    ------
    TypeError, ValueError
        A model that is not a float32 GPT, an option out of range.

    Examples
    --------
    >>> from blockc import GPT, GPTConfig
    >>> m = GPT.random(GPTConfig(vocab=8, context=4, width=8, heads=2, layers=1))
    >>> opt = AdamW(m, lr=1e-3)
    >>> loss, grads = m.grad([[1, 2, 3]], [[2, 3, 4]])
    >>> opt.step(grads)
    >>> opt.steps
    1
    """

    def __init__(self, model: Any, lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01, decay: str = "matrices"):
        if not isinstance(model, Model):
            raise BlockcTypeError(f"model must be a blockc.GPT, got {type(model).__name__}")
        _trainable(model)
        self.model = model
        self.lr = lr
        self.betas = _betas(betas)
        self.eps = as_real(eps, "eps", 0.0)
        self.weight_decay = as_real(weight_decay, "weight_decay", 0.0)
        self.decay = as_choice(decay, "decay", list(DECAY))
        n = model.nbytes // 4
        self._m, self._v = aligned_zeros(n), aligned_zeros(n)
        self._grads = aligned_zeros(n)  # train_step's gradient buffer
        self.steps = 0
        self._check_lr()

    def _check_lr(self) -> float:
        return as_real(self.lr, "lr", 0.0)

    def _apply(self, grads: np.ndarray, grad_scale: float = 1.0) -> None:
        c = ffi.new("bc_adamw_config *", dict(
            lr=self._check_lr(), beta1=self.betas[0], beta2=self.betas[1], eps=self.eps,
            weight_decay=self.weight_decay, decay=DECAY[self.decay], grad_scale=grad_scale,
            step=self.steps + 1))
        m = self.model
        # the update and the step count are one: a SIGINT between them would leave weights
        # and moments a step ahead of the count (a resumed run then differs)
        with _sigint_deferred():
            check(lib.bc_gpt_adamw(ffi.from_buffer(m.params), fptr(self._m), fptr(self._v),
                                   ffi.from_buffer("char[]", grads, False), m.c_config, c),
                  "AdamW step")
            self.steps += 1

    def step(self, grads: Mapping[str, npt.ArrayLike], max_grad_norm: Optional[float] = None
             ) -> None:
        """One update of the model's parameters from ``grads``.

        Parameters
        ----------
        grads : mapping of str to array_like
            Keyed like ``model.state_dict()`` (what :meth:`blockc.GPT.grad` returns).
        max_grad_norm : float > 0, optional
            Scale the gradients down to this global L2 norm when they exceed it
            (``torch.nn.utils.clip_grad_norm_``'s rule) before the update.

        Raises
        ------
        TypeError, ValueError
            Gradients not keyed or shaped like the state dict; an option out of range.

        Examples
        --------
        >>> from blockc import GPT, GPTConfig
        >>> m = GPT.random(GPTConfig(vocab=8, context=4, width=8, heads=2, layers=1))
        >>> opt = AdamW(m)
        >>> opt.step(m.grad([[1, 2]], [[2, 3]])[1], max_grad_norm=1.0)
        """
        buf = pack_grads(self.model, grads)
        self._apply(buf, self._clip(buf, max_grad_norm))

    def _clip(self, buf: np.ndarray, max_grad_norm: Optional[float]) -> float:
        if max_grad_norm is None:
            return 1.0
        mx = as_real(max_grad_norm, "max_grad_norm", 0.0)
        norm = grad_norm(self.model, buf)
        self.last_grad_norm = norm
        coef = mx / (norm + 1e-6)
        return coef if coef < 1.0 else 1.0

    def state_dict(self) -> Dict[str, Any]:
        """The optimizer's state: hyperparameters, the step count, and the moments
        keyed like the model's ``state_dict()`` (new arrays).

        Returns
        -------
        dict

        Examples
        --------
        >>> from blockc import GPT, GPTConfig
        >>> opt = AdamW(GPT.random(GPTConfig(vocab=8, context=4, width=8, heads=2, layers=1)))
        >>> sorted(opt.state_dict())
        ['betas', 'decay', 'eps', 'exp_avg', 'exp_avg_sq', 'lr', 'steps', 'weight_decay']
        """
        return {"lr": self.lr, "betas": self.betas, "eps": self.eps,
                "weight_decay": self.weight_decay, "decay": self.decay, "steps": self.steps,
                "exp_avg": unpack_grads(self.model, self._m),
                "exp_avg_sq": unpack_grads(self.model, self._v)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s result (to resume training).

        Parameters
        ----------
        state : mapping

        Raises
        ------
        TypeError, ValueError
            A state of another model's shapes, or a malformed one.

        Examples
        --------
        >>> from blockc import GPT, GPTConfig
        >>> m = GPT.random(GPTConfig(vocab=8, context=4, width=8, heads=2, layers=1))
        >>> a = AdamW(m); a.step(m.grad([[1, 2]], [[2, 3]])[1])
        >>> b = AdamW(m); b.load_state_dict(a.state_dict()); b.steps
        1
        """
        if not isinstance(state, Mapping):
            raise BlockcTypeError(f"state must be a mapping, got {type(state).__name__}")
        st = dict(state)
        for key in ("exp_avg", "exp_avg_sq", "steps"):
            if key not in st:
                raise BlockcValueError(f"state is missing {key!r}")
        m = pack_grads(self.model, st["exp_avg"], "state['exp_avg']")
        v = pack_grads(self.model, st["exp_avg_sq"], "state['exp_avg_sq']")
        steps = as_int(st["steps"], "state['steps']", 0)
        betas = _betas(st.get("betas", self.betas))  # every value checked before any is set
        eps = as_real(st.get("eps", self.eps), "eps", 0.0)
        wd = as_real(st.get("weight_decay", self.weight_decay), "weight_decay", 0.0)
        decay = as_choice(st.get("decay", self.decay), "decay", list(DECAY))
        lr = as_real(st.get("lr", self.lr), "lr", 0.0)
        self._m[...], self._v[...] = m, v
        self.steps, self.betas, self.eps, self.weight_decay, self.decay, self.lr = (
            steps, betas, eps, wd, decay, lr)

    def __repr__(self) -> str:
        return (f"AdamW(lr={self.lr}, betas={self.betas}, eps={self.eps}, "
                f"weight_decay={self.weight_decay}, decay={self.decay!r}, steps={self.steps})")


def train_step(m, ids, targets, opt: AdamW, ignore_index: int = -100,
               max_grad_norm: Optional[float] = None) -> float:
    """See :meth:`blockc.GPT.train_step`."""
    if not isinstance(opt, AdamW):
        raise BlockcTypeError(f"opt must be a blockc.AdamW, got {type(opt).__name__}")
    if opt.model is not m:
        raise BlockcValueError("opt was made for another model")
    _trainable(m)
    g = opt._grads
    g[...] = 0.0
    value, count = _run_grad(m, ids, targets, ignore_index, g)
    if count == 0:
        return value
    opt._apply(g, opt._clip(g, max_grad_norm))
    return value


class TrainingMixin:
    """``loss``, ``grad`` and ``train_step`` for a :class:`blockc.model.Model`: mixed
    into :class:`blockc.GPT`."""

    def loss(self, ids: npt.ArrayLike, targets: npt.ArrayLike, ignore_index: int = -100) -> float:
        """The mean next-token cross-entropy of the logits of ``ids`` against ``targets``.

        The head and the loss run a block of rows at a time: the (B, T, vocab)
        logits are never held.

        Parameters
        ----------
        ids : array_like of int, shape (B, T)
        targets : array_like of int, shape (B, T)
            The token each position should predict (usually ``ids`` shifted by
            one), in [0, vocab), or ``ignore_index`` for a position that does not
            count (PyTorch's convention, -100 by default).
        ignore_index : int, optional

        Returns
        -------
        float
            The mean over the positions that count (NaN when none does).

        Raises
        ------
        TypeError
            Ids or targets that are not integers.
        ValueError
            Values out of range, shapes that differ, a sequence past the context,
            weights that are not float32.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> loss = m.loss([[1, 2, 3]], [[2, 3, -100]])      # two positions count
        >>> bool(abs(loss - np.log(16)) < 0.1)               # random init: about log(vocab)
        True
        """
        return loss(self, ids, targets, ignore_index)

    def grad(self, ids: npt.ArrayLike, targets: npt.ArrayLike, ignore_index: int = -100
             ) -> Tuple[float, Dict[str, np.ndarray]]:
        """The loss (see :meth:`loss`) and its gradient with respect to every parameter.

        Parameters
        ----------
        ids, targets : array_like of int, shape (B, T)
        ignore_index : int, optional

        Returns
        -------
        loss : float
        grads : dict of str to numpy.ndarray
            New float32 arrays keyed and shaped like :meth:`state_dict` (a tied
            head's gradient is part of ``token.weight``'s).

        Raises
        ------
        TypeError, ValueError
            As :meth:`loss`.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> loss, grads = m.grad([[1, 2, 3]], [[2, 3, 4]])
        >>> grads["blocks.0.up.weight"].shape
        (32, 8)
        """
        return grad(self, ids, targets, ignore_index)

    def train_step(self, ids: npt.ArrayLike, targets: npt.ArrayLike, opt: Any,
                   ignore_index: int = -100, max_grad_norm: Optional[float] = None) -> float:
        """One training step: the loss and its gradient, then ``opt``'s update, in C
        with one workspace (kept for the next step of the same shape).

        Parameters
        ----------
        ids, targets : array_like of int, shape (B, T)
        opt : blockc.AdamW
            This model's optimizer.
        ignore_index : int, optional
        max_grad_norm : float > 0, optional
            Clip the gradient to this global L2 norm first.

        Returns
        -------
        float
            The loss before the update.

        Raises
        ------
        TypeError, ValueError
            As :meth:`loss`; an optimizer of another model.

        Examples
        --------
        >>> from blockc import AdamW
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> opt = AdamW(m, lr=1e-2)
        >>> losses = [m.train_step([[1, 2, 3, 4]], [[2, 3, 4, 5]], opt) for _ in range(30)]
        >>> bool(losses[-1] < losses[0])
        True
        """
        return train_step(self, ids, targets, opt, ignore_index, max_grad_norm)

