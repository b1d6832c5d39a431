"""The training loop behind ``blockc train`` and ``blockc experiment``: batches drawn
from a token array (the same batch for a step whatever run reaches it, so a
resumed run is the uninterrupted one), held-out evaluation, and a run directory
(a checkpoint ``from_pretrained`` loads, the optimizer's moments, the history).

A run directory is one step, complete, or it is not there: :func:`save_run` writes
every file into a new directory beside it and swaps that into place in one rename
(:func:`blockc._files.replace_dir`), so Ctrl-C, a full disk or a second writer at
any moment leaves the previous checkpoint or the new one, never a mixture. Its
``trainer_state.json``, written last, names the step and the SHA-256 of every other
file; :func:`read_state` (``--resume``) refuses a directory whose files do not
match it.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from .. import _files
from ..io import safetensors as stf
from .._errors import BlockcValueError
from . import AdamW

__all__ = ["batch_at", "evaluate", "fit", "save_run", "load_optimizer", "read_state",
           "split", "text_tokens", "sha256", "STATE", "OPTIMIZER", "RUN_FILES"]

STATE = "trainer_state.json"
OPTIMIZER = "optimizer.safetensors"

#: The files of a run directory that its manifest covers (tokenizer.json when the run has one).
RUN_FILES = ("config.json", "model.safetensors", OPTIMIZER, "tokenizer.json")


def text_tokens(path: str, tokenizer: Any = None) -> np.ndarray:
    """The tokens of a UTF-8 text file: the tokenizer's ids, or its bytes (0..255)."""
    with _files.open_regular(path, "a training text") as f:  # a FIFO or /dev/zero refused
        raw = f.read()
    if tokenizer is None:
        return np.frombuffer(raw, np.uint8).astype(np.int64)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BlockcValueError(f"{path}: not UTF-8 text ({e}); without a tokenizer any "
                               "bytes train") from None
    return np.asarray(tokenizer.encode(text, add_special_tokens=False), np.int64)


def split(tokens: np.ndarray, seq: int, eval_frac: float) -> Tuple[np.ndarray, np.ndarray]:
    """(train, held-out tail): the tail is eval_frac of the tokens, at least one window."""
    need = seq + 1
    tail = max(need, int(round(tokens.size * eval_frac))) if eval_frac > 0 else 0
    if tokens.size - tail < need:
        raise BlockcValueError(f"the text has {tokens.size} tokens: too few for --seq {seq} "
                               f"with a held-out tail of {tail} (need {need + tail})")
    return tokens[:tokens.size - tail], tokens[tokens.size - tail:]


def batch_at(tokens: np.ndarray, step: int, batch: int, seq: int, seed: int
             ) -> Tuple[np.ndarray, np.ndarray]:
    """Step ``step``'s (ids, targets), (batch, seq) windows at random offsets drawn
    from a generator seeded by (seed, step)."""
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, tokens.size - seq, batch)
    win = np.stack([tokens[s:s + seq + 1] for s in starts])
    return win[:, :-1], win[:, 1:]


def evaluate(m, tokens: np.ndarray, seq: int, batch: int, max_windows: int = 64) -> float:
    """The mean loss over non-overlapping windows of ``tokens`` (at most max_windows)."""
    n = min((tokens.size - 1) // seq, max_windows)
    if n < 1:
        return float("nan")
    total, count = 0.0, 0
    for i in range(0, n, batch):
        rows = range(i, min(n, i + batch))
        x = np.stack([tokens[r * seq:r * seq + seq] for r in rows])
        y = np.stack([tokens[r * seq + 1:r * seq + seq + 1] for r in rows])
        total += m.loss(x, y) * x.size
        count += x.size
    return total / count


def lr_at(step: int, lr: float, warmup: int, steps: int, schedule: str) -> float:
    """Linear warmup over ``warmup`` steps, then constant or cosine down to lr / 10."""
    if warmup and step < warmup:
        return lr * (step + 1) / warmup
    if schedule == "cosine" and steps > warmup:
        frac = (step - warmup) / max(1, steps - warmup)
        return lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, frac))))
    return lr


def fit(m, opt: AdamW, tokens: np.ndarray, *, steps: int, batch: int, seq: int, seed: int = 0,
        start: int = 0, lr: float, warmup: int = 0, schedule: str = "constant",
        max_grad_norm: Optional[float] = 1.0,
        on_step: Optional[Callable[[Dict[str, Any]], None]] = None) -> List[Dict[str, Any]]:
    """Train steps start..steps-1 of a run of ``steps`` (the schedule's length); each
    step's record (step, loss, lr, tokens/s) is passed to on_step and returned."""
    out = []
    for step in range(start, steps):
        x, y = batch_at(tokens, step, batch, seq, seed)
        opt.lr = lr_at(step, lr, warmup, steps, schedule)
        t0 = time.perf_counter()
        loss = m.train_step(x, y, opt, max_grad_norm=max_grad_norm)
        dt = time.perf_counter() - t0
        rec = {"step": step + 1, "loss": loss, "lr": opt.lr, "tokens_per_s": x.size / dt}
        out.append(rec)
        if on_step is not None:
            on_step(rec)
    return out


def sha256(path: str) -> str:
    """The SHA-256 of a regular file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with _files.open_regular(path) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _carry_over(old: str, new: str) -> None:
    """Hard-link (else copy) into ``new`` what the user kept in the run directory ``old``
    besides the run's own files (a plot, notes), so a save does not lose them."""
    if not os.path.isdir(old):
        return
    for name in os.listdir(old):
        if name in RUN_FILES or name == STATE or os.path.lexists(os.path.join(new, name)):
            continue
        src, dst = os.path.join(old, name), os.path.join(new, name)
        if os.path.islink(src) or not os.path.isdir(src):
            try:
                if os.path.islink(src):
                    os.symlink(os.readlink(src), dst)
                else:
                    os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)
        else:
            shutil.copytree(src, dst, symlinks=True)


def save_run(path: str, m, opt: AdamW, state: Dict[str, Any], tokenizer_file: Optional[str]
             ) -> None:
    """A run directory: the checkpoint (config.json, model.safetensors), the tokenizer
    it was trained with, the optimizer's moments and hyperparameters, and last the
    state (the history, and a manifest: the step and each file's SHA-256), written
    into a new directory that then replaces ``path`` whole (see the module)."""
    tmp = _files.temp_dir_for(path)
    try:
        m.save_pretrained(tmp)
        if tokenizer_file is not None:
            with _files.open_regular(tokenizer_file) as src, \
                    _files.atomic_write(os.path.join(tmp, "tokenizer.json")) as dst:
                shutil.copyfileobj(src, dst)
        st = opt.state_dict()
        tensors = {f"exp_avg.{k}": v for k, v in st["exp_avg"].items()}
        tensors.update({f"exp_avg_sq.{k}": v for k, v in st["exp_avg_sq"].items()})
        hyper = {k: st[k] for k in ("lr", "betas", "eps", "weight_decay", "decay", "steps")}
        stf.write(os.path.join(tmp, OPTIMIZER), tensors,
                  {"format": "blockc-adamw", "hyper": json.dumps(hyper)})
        files = {f: sha256(os.path.join(tmp, f)) for f in RUN_FILES
                 if os.path.exists(os.path.join(tmp, f))}
        _files.write_json(os.path.join(tmp, STATE), {**state, "files": files}, indent=1)
        _carry_over(path, tmp)
        _files.replace_dir(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_state(path: str) -> Dict[str, Any]:
    """The state of the run directory ``path``, after checking that it is one step:
    every file its manifest names is there with the SHA-256 it names.

    Raises
    ------
    ValueError
        No state, a state that is not JSON or has no step or manifest, a file missing or
        changed since the state was written.
    """
    f = os.path.join(path, STATE)
    if not os.path.lexists(f):
        raise BlockcValueError(f"--resume {path}: no {STATE} (not a directory blockc train wrote)")
    st = _files.read_json(f, "a run's state")
    if not isinstance(st, dict) or type(st.get("step")) is not int or st["step"] < 0:
        raise BlockcValueError(f"{f}: no step count")
    files = st.get("files")
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in files.items()):
        raise BlockcValueError(f"{f}: no manifest of the run's files (written by an older "
                               "blockc, or not by blockc train): cannot tell that the directory "
                               "is one step, so it is not resumed")
    for need in ("config.json", "model.safetensors", OPTIMIZER):
        if need not in files:
            raise BlockcValueError(f"{f}: the manifest does not name {need}")
    for name, digest in files.items():
        if name not in RUN_FILES:
            raise BlockcValueError(f"{f}: the manifest names {name!r}, not a file of a run")
        p = os.path.join(path, name)
        if not os.path.lexists(p):
            raise BlockcValueError(f"--resume {path}: {name} is missing (the state of step "
                                   f"{st['step']} names it): not one consistent checkpoint")
        if sha256(p) != digest:
            raise BlockcValueError(f"--resume {path}: {name} is not the file the state of step "
                                   f"{st['step']} was written with (changed or torn since): not "
                                   "one consistent checkpoint")
    return st


def load_optimizer(path: str, opt: AdamW) -> None:
    """The moments and hyperparameters save_run wrote, into opt."""
    f = os.path.join(path, OPTIMIZER)
    tensors, meta = stf.read(f)
    if "hyper" not in meta:
        raise BlockcValueError(f"{f}: no hyperparameters in its metadata")
    hyper = _files.loads_json(meta["hyper"], f"{f}: the hyperparameters")
    if not isinstance(hyper, dict):
        raise BlockcValueError(f"{f}: the hyperparameters must be a JSON object")
    ea = {k[len("exp_avg."):]: t.to_float32() for k, t in tensors.items() if k.startswith("exp_avg.")}
    eb = {k[len("exp_avg_sq."):]: t.to_float32() for k, t in tensors.items()
          if k.startswith("exp_avg_sq.")}
    opt.load_state_dict({**hyper, "exp_avg": ea, "exp_avg_sq": eb})
