"""Depth experiments: chapter 24's stacking experiment (129_Stack) at any depth, and
the residual stream's norm block by block in a whole random model.

``blockc depth`` and ``blockc gpt --norms`` print what these compute.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from .. import book
from .._progress import Progress
from ..block.engine import BlockConfig, avg_norm, block_forward, iter_blocks
from ..model import GPTConfig, Model

__all__ = ["BOOK_INPUT", "BOOK_WORDS", "depth_input", "depth_norms", "residual_norms"]

#: 128_Block / 129_Stack's input: the four positions "The", "cat", "sat", "down"
#: (the chapter's data, :data:`blockc.book.BLOCK_INPUT`; read-only)
BOOK_INPUT = book.BLOCK_INPUT
BOOK_WORDS = book.WORDS


def depth_input(d_model: int, seq_len: int, seed: int) -> np.ndarray:
    """The 128_Block input for d_model=8 and seq_len=4 (a writable copy); otherwise
    (seq_len, d_model) uniform in [-1, 1) from numpy's default_rng(seed)."""
    if d_model == 8 and seq_len == 4:
        return BOOK_INPUT.copy()
    return np.random.default_rng(seed).uniform(-1.0, 1.0, (seq_len, d_model)).astype(np.float32)


def depth_norms(cfg: BlockConfig, n_blocks: int, seed: int = 42, rand: str = "msvc",
                x: Optional[np.ndarray] = None, seq_len: int = 4,
                progress: Optional[Progress] = None) -> List[float]:
    """The average norm of the input and after each of n_blocks blocks, the blocks
    drawn, applied and dropped one at a time (the bits of stack_forward over
    init_blocks: the same kernels in the same order)."""
    if x is None:
        x = depth_input(cfg.d_model, seq_len, seed)
    norms = [avg_norm(x)]
    for W in iter_blocks(cfg, n_blocks, seed, rand):
        x = block_forward(x, W, cfg)
        norms.append(avg_norm(x))
        if progress is not None:
            progress.step()
    return norms


def residual_norms(cfg: GPTConfig, seq: int, seed: int) -> np.ndarray:
    """Mean L2 norm over tokens of the residual stream: after the embedding (entry 0),
    then after every block (entries 1..L), for a random model on a random input."""
    m = Model.random(cfg, seed=seed)
    ids = np.random.default_rng(seed + 1).integers(0, cfg.vocab, size=(1, seq))
    hidden = m.hidden_states(ids)
    sd = m.state_dict()
    x0 = sd["token.weight"][ids[0]] + sd["position.weight"][:seq]
    norms = [np.linalg.norm(x0, axis=-1).mean()]
    norms += [np.linalg.norm(h[0], axis=-1).mean() for h in hidden]
    return np.array(norms)
