"""The training loop behind ``blockc train`` and ``blockc experiment``: batches drawn
from a token array (the same batch for a step whatever run reaches it, so a
resumed run is the uninterrupted one), held-out evaluation, and a run directory
(a checkpoint ``from_pretrained`` loads, the optimizer's moments, the history).
"""
from __future__ import annotations

import json
import math
import os
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from . import safetensors as stf
from ._errors import BlockcValueError
from .train import AdamW

__all__ = ["batch_at", "evaluate", "fit", "save_run", "load_optimizer", "read_state",
           "split", "text_tokens"]

STATE = "trainer_state.json"
OPTIMIZER = "optimizer.safetensors"


def text_tokens(path: str, tokenizer: Any = None) -> np.ndarray:
    """The tokens of a UTF-8 text file: the tokenizer's ids, or its bytes (0..255)."""
    with open(path, "rb") as f:
        raw = f.read()
    if tokenizer is None:
        return np.frombuffer(raw, np.uint8).astype(np.int64)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BlockcValueError(f"{path}: not UTF-8 text ({e}); without a tokenizer any "
                               "bytes train") from None
    return np.asarray(tokenizer.encode(text), np.int64)


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


def save_run(path: str, m, opt: AdamW, state: Dict[str, Any], tokenizer_file: Optional[str]
             ) -> None:
    """A run directory: the checkpoint (config.json, model.safetensors), the tokenizer
    it was trained with, the optimizer's moments and hyperparameters, the history."""
    os.makedirs(path, exist_ok=True)
    m.save_pretrained(path)
    if tokenizer_file is not None:
        import shutil
        dst = os.path.join(path, "tokenizer.json")
        if os.path.abspath(tokenizer_file) != os.path.abspath(dst):
            shutil.copyfile(tokenizer_file, dst)
    st = opt.state_dict()
    tensors = {f"exp_avg.{k}": v for k, v in st["exp_avg"].items()}
    tensors.update({f"exp_avg_sq.{k}": v for k, v in st["exp_avg_sq"].items()})
    hyper = {k: st[k] for k in ("lr", "betas", "eps", "weight_decay", "decay", "steps")}
    stf.write(os.path.join(path, OPTIMIZER), tensors, {"format": "blockc-adamw",
                                                      "hyper": json.dumps(hyper)})
    with open(os.path.join(path, STATE), "w", encoding="utf-8") as f:
        json.dump(state, f, indent=1)
        f.write("\n")


def read_state(path: str) -> Dict[str, Any]:
    f = os.path.join(path, STATE)
    if not os.path.exists(f):
        raise BlockcValueError(f"--resume {path}: no {STATE} (not a directory blockc train wrote)")
    with open(f, encoding="utf-8") as fh:
        try:
            st = json.load(fh)
        except ValueError as e:
            raise BlockcValueError(f"{f}: not JSON: {e}") from None
    if not isinstance(st, dict) or not isinstance(st.get("step"), int):
        raise BlockcValueError(f"{f}: no step count")
    return st


def load_optimizer(path: str, opt: AdamW) -> None:
    """The moments and hyperparameters save_run wrote, into opt."""
    tensors, meta = stf.read(os.path.join(path, OPTIMIZER))
    try:
        hyper = json.loads(meta.get("hyper", ""))
    except ValueError:
        raise BlockcValueError(f"{path}: {OPTIMIZER} has no hyperparameters") from None
    ea = {k[len("exp_avg."):]: t.to_float32() for k, t in tensors.items() if k.startswith("exp_avg.")}
    eb = {k[len("exp_avg_sq."):]: t.to_float32() for k, t in tensors.items()
          if k.startswith("exp_avg_sq.")}
    opt.load_state_dict({**hyper, "exp_avg": ea, "exp_avg_sq": eb})
