"""blockc.reference: the pure-NumPy oracle (no C). Same generators, same
initialisation order, same computations as the C library, and the same
quantisers (bfloat16, q8_0), q8_0i's and q4_0i's integer products (intdot) and
bfloat16i's bfloat16 dot products (bf16dot)."""
from . import block
from . import book
from . import quant
from . import ggml
from . import intdot
from . import bf16dot
from .gpt import gpt_forward
