"""blockc: transformer-block kernels in C, wrapped with cffi.

- ``blockc.book``: the chapter's listings at the book's fixed sizes, exact.
- ``blockc.reference``: the pure-NumPy oracle.
- ``blockc.rng``: the portable C-runtime ``rand()`` generators.
"""
from ._native import BlockcError
from .rng import CRand
from . import book
from .gpt import GPT, GPTConfig, KVCache, gpt_parameter_count, gpt_parameter_formula

from . import ops
from .engine import BlockConfig, BlockWeights, block_forward, count_parameters, init_block, init_blocks, stack_forward

__version__ = "0.1.0"
from .runtime import set_num_threads, get_num_threads, get_isa, set_isa, best_isa
