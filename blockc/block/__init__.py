"""The dynamic engine: chapter 24's block at any size, every variant the two chapters
discuss, on NumPy arrays.

- :mod:`blockc.block.engine`: :class:`BlockConfig`, :func:`block_forward`,
  :func:`stack_forward` and their backward passes, one C call per block or stack;
- :mod:`blockc.block.ops`: the single kernels (linear, attention, norms, activations,
  packing into a weight format), each a validated C call.
"""
from . import engine, ops
from .engine import (BlockConfig, PreparedBlock, block_backward, block_forward, count_parameters,
                     init_block, init_blocks, prepare, stack_backward, stack_forward)

__all__ = ["engine", "ops", "BlockConfig", "PreparedBlock", "prepare", "block_forward",
           "stack_forward", "block_backward", "stack_backward", "init_block", "init_blocks",
           "count_parameters"]
