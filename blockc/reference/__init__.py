"""blockc.reference: the pure-NumPy oracle (no C). Same generators, same
initialisation order, same computations as the C library, and the same
quantisers (bfloat16, q8_0) and q8_0i's and q4_0i's integer products (intdot)."""
from . import block
from . import book
from . import quant
from . import ggml
from . import intdot
from .gpt import gpt_forward
