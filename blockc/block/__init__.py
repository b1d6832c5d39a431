"""The dynamic engine: chapter 24's block at any size, every variant the two chapters
discuss, on NumPy arrays.

- :mod:`blockc.block.engine`: :func:`block_forward`, :func:`stack_forward` and their
  backward passes, one C call per block or stack (it re-exports the two below);
- :mod:`blockc.block.config`: :class:`BlockConfig`, the weights it accepts, its
  parameter count;
- :mod:`blockc.block.weights`: the weights checked per call or once (:func:`prepare`),
  and drawn (:func:`init_blocks`);
- :mod:`blockc.block.ops`: the single kernels (linear, attention, norms, activations,
  packing into a weight format), each a validated C call.
"""
from . import config, engine, ops, weights
from .engine import (BlockConfig, PreparedBlock, block_backward, block_forward, count_parameters,
                     init_block, init_blocks, prepare, stack_backward, stack_forward)

__all__ = ["config", "engine", "ops", "weights", "BlockConfig", "PreparedBlock", "prepare", "block_forward",
           "stack_forward", "block_backward", "stack_backward", "init_block", "init_blocks",
           "count_parameters"]
