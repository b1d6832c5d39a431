"""blockc.reference: the pure-NumPy oracle (no C). Same generators, same
initialisation order, same computations as the C library."""
from . import block
from . import book
from .gpt import gpt_forward
