"""Chapter 24's listings, run: the text each listing's program prints, and the
chapter's headline figures set against the values the book prints.

The numbers are computed by the C library (:mod:`blockc.book`); this module only
formats them, with the listings' own printf formats. Pass ``backend=`` another
module with the same functions (:mod:`blockc.reference.book`, the NumPy oracle)
to print the oracle's numbers instead.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from types import ModuleType
from typing import Iterable, List, Optional

from .. import book
from .._errors import BlockcValueError

__all__ = ["LISTINGS", "listing_name", "render", "Figure", "figures", "BOOK_FIGURES",
           "GLIBC_FIGURES", "format_figures"]

LISTINGS = ("126_Ffn", "127_Residual", "128_Block", "129_Stack", "130_Real_Params")


def listing_name(name: str) -> str:
    """The canonical listing name for ``126_Ffn``, ``126``, ``126_ffn.c`` ...; ValueError otherwise."""
    key = str(name).strip()
    key = re.sub(r"\.c$", "", key)
    for full in LISTINGS:
        if key == full[:3] or key.lower() == full.lower():
            return full
    raise BlockcValueError(f"unknown listing {name!r}; choose one of {', '.join(LISTINGS)} "
                           f"(or just the number, 126..130)")


def _vec(values: Iterable[float], fmt: str, sep: str) -> str:
    return "[" + sep.join(fmt % float(v) for v in values) + "]"


def _rows(x, words) -> str:
    return "".join("  %-5s %s\n" % (w, _vec(row, "%+.2f", ",")) for w, row in zip(words, x))


def _human(v: int) -> str:
    """130_Real_Params' unit: B above 1e9, M above 1e6, else K (integer thousands)."""
    if v >= 1_000_000_000:
        return "%6.1fB" % (v / 1e9)
    if v >= 1_000_000:
        return "%6.1fM" % (v / 1e6)
    return "%6dK" % (v // 1000)


def _ffn(seed: int, rand: str, be: ModuleType) -> str:
    out = be.ffn_forward(book.FFN_INPUT, be.ffn_init(seed, rand))
    dm, dff = book.FFN_D_MODEL, book.FFN_D_FF
    return ("Feed-Forward Network, d_model=%d d_ff=%d\n\n" % (dm, dff)
            + "  Input:  %s\n" % _vec(book.FFN_INPUT, "%+.3f", ", ")
            + "  Output: %s\n\n" % _vec(out, "%+.3f", ", ")
            + "  Parameters: %d\n" % be.ffn_params(dm, dff)
            + "  Shape: %d -> %d (GELU) -> %d\n" % (dm, dff, dm)
            + "  Applied independently to each position.\n")


def _residual(seed: int, rand: str, be: ModuleType) -> str:
    out = be.residual_add(book.RESIDUAL_INPUT, book.RESIDUAL_SUBLAYER)
    return ("Residual, out = x + sublayer(x)\n\n"
            + "  Input:     %s\n" % _vec(book.RESIDUAL_INPUT, "%.1f", ", ")
            + "  Sublayer:  %s\n" % _vec(book.RESIDUAL_SUBLAYER, "%+.1f", ", ")
            + "  Output:    %s\n\n" % _vec(out, "%.1f", ", ")
            + "  In backprop, d_out/d_x is\n"
            + "  1 + d_sublayer/d_x\n"
            + "  Even when d_sublayer/d_x is small,\n"
            + "  the gradient through the identity\n"
            + "  path is always 1.\n"
            + "  Deep transformers train because of it.\n")


def _block(seed: int, rand: str, be: ModuleType) -> str:
    y = be.block_forward(book.BLOCK_INPUT, be.block_init(seed, rand))
    p = be.block_params(book.D_MODEL, book.D_FF, 1)
    d, f = book.D_MODEL, book.D_FF
    return ("Transformer block, d_model=%d heads=%d d_ff=%d\n\n" % (d, book.N_HEADS, f)
            + "Input:\n" + _rows(book.BLOCK_INPUT, book.WORDS)
            + "\nOutput (after 1 transformer block):\n" + _rows(y, book.WORDS)
            + "\nOutput shape equals input shape.\n"
            + "This is critical: blocks can be stacked.\n"
            + "\nParameter count per block:\n"
            + "  Attention: 4 * %d^2 = %d\n" % (d, p["attn"])
            + "  FFN:       2 * %d * %d = %d\n" % (d, f, p["ffn"])
            + "  Norms:     2 * %d = %d\n" % (d, p["norms"])
            + "  Total:     %d\n" % p["per_block"])


def _stack(seed: int, rand: str, be: ModuleType) -> str:
    y, norms = be.stack_forward(book.BLOCK_INPUT, be.stack_init(seed, rand))
    text = "Stacking %d transformer blocks:\n\n" % book.N_BLOCKS
    for b, n in enumerate(norms):
        if b == 0:
            text += "  input           avg norm = %.4f\n" % float(n)
        else:
            text += "  after block %d   avg norm = %.4f\n" % (b, float(n))
    return (text + "\nFinal representations:\n" + _rows(y, book.WORDS)
            + "\nThe norms stay controlled because of:\n"
            + "  1. RMSNorm before each sublayer\n"
            + "  2. Small random weights at init\n"
            + "  3. Residuals preserving magnitude\n")


def _real_params(seed: int, rand: str, be: ModuleType) -> str:
    text = ("Transformer block parameters in real models\n\n"
            "  model          d_model  d_ff   L  per block  all blocks  published\n"
            "  -------------  -------  -----  --  -------  ---------  ---------\n")
    for r in be.real_params():
        text += ("  %-13s  %7d  %5d  %2d  " % (r["name"], r["d_model"], r["d_ff"], r["n_layers"])
                 + _human(r["per_block"]) + "  " + _human(r["all_blocks"]) + "  "
                 + _human(r["published"]) + "\n")
    return (text
            + "\n  The last two columns disagree, and the\n"
            + "  gap is what the block accounting leaves\n"
            + "  out. Token embeddings, the output head\n"
            + "  and the final norm all sit outside the\n"
            + "  blocks. For GPT-2 Small the embedding\n"
            + "  table alone is 50257 x 768, about 39M.\n\n"
            + "  DeepSeek-V3 is the extreme case. Its FFN\n"
            + "  is a mixture of experts, so the real\n"
            + "  count is far above a dense estimate, and\n"
            + "  only 37B of the 671B are active per\n"
            + "  token. Chapter 36 builds that.\n\n"
            + "  Within a block, attention costs 4*d^2\n"
            + "  and the FFN costs 2*d*d_ff, so the FFN\n"
            + "  dominates whenever d_ff exceeds 2*d.\n")


_RENDER = dict(zip(LISTINGS, (_ffn, _residual, _block, _stack, _real_params)))


def render(name: str, seed: int = 42, rand: str = "msvc",
           backend: Optional[ModuleType] = None) -> str:
    """What listing ``name`` prints when compiled with the ``rand`` C runtime
    (``msvc`` or ``glibc``) and run with ``srand(seed)``, byte for byte.

    ``seed`` is any integer in [0, 2**32) (127 and 130 draw no random numbers).
    ``backend`` computes the numbers: :mod:`blockc.book` (the C library, default)
    or :mod:`blockc.reference.book` (the NumPy oracle).
    """
    full = listing_name(name)
    be = book if backend is None else backend
    book.c_rng(seed, rand)  # validates seed and generator for every listing
    return _RENDER[full](int(seed), rand, be)


# --- the headline figures ----------------------------------------------------------
@dataclass(frozen=True)
class Figure:
    """One headline figure: what blockc prints, what the book prints, whether they agree."""
    listing: str
    what: str
    value: str
    expected: Optional[str]  # None: no published value for this generator

    @property
    def agree(self) -> Optional[bool]:
        return None if self.expected is None else self.value == self.expected


#: (listing, figure, value the book prints), seed 42, MSVC rand().
BOOK_FIGURES = (
    ("126_Ffn", "parameters", "162"),
    ("126_Ffn", "output", "[+0.000, +0.006, -0.006, +0.004, -0.007, -0.002]"),
    ("127_Residual", "output", "[1.1, 1.8, 3.3, 3.9]"),
    ("128_Block", "parameters", "784 (256 + 512 + 16)"),
    ("128_Block", '"The" after 1 block', "[+0.97,+0.16,-0.29,+0.54,-0.09,+0.81,+0.31,-0.17]"),
    ("129_Stack", "avg norms", "1.3809, 1.3990, 1.4163, 1.4205, 1.4256"),
    ("130_Real_Params", "GPT-2 Small per block", "7.1M"),
    ("130_Real_Params", "GPT-2 Small all blocks", "85.0M"),
    ("130_Real_Params", "GPT-2 Large all blocks", "707.9M"),
    ("130_Real_Params", "LLaMA-7B all blocks", "5.0B"),
    ("130_Real_Params", "DeepSeek-V3 per block", "469.8M"),
    ("130_Real_Params", "DeepSeek-V3 all blocks", "28.7B"),
)

#: The figures that depend on rand(), as the listings print them compiled with gcc
#: on Linux (glibc rand()), seed 42 (issue 2). The rest do not depend on rand().
GLIBC_FIGURES = {
    ("126_Ffn", "output"): "[+0.004, -0.005, +0.009, -0.006, -0.005, +0.004]",
    ("128_Block", '"The" after 1 block'): None,  # not published for glibc
    ("129_Stack", "avg norms"): "1.3809, 1.3935, 1.4311, 1.4277, 1.4008",
}


def _computed(rand: str, be: ModuleType) -> dict:
    seed = 42
    ffn_out = be.ffn_forward(book.FFN_INPUT, be.ffn_init(seed, rand))
    res = be.residual_add(book.RESIDUAL_INPUT, book.RESIDUAL_SUBLAYER)
    p = be.block_params(book.D_MODEL, book.D_FF, 1)
    y = be.block_forward(book.BLOCK_INPUT, be.block_init(seed, rand))
    _, norms = be.stack_forward(book.BLOCK_INPUT, be.stack_init(seed, rand))
    rows = {r["name"]: r for r in be.real_params()}
    v = {
        ("126_Ffn", "parameters"): "%d" % be.ffn_params(book.FFN_D_MODEL, book.FFN_D_FF),
        ("126_Ffn", "output"): _vec(ffn_out, "%+.3f", ", "),
        ("127_Residual", "output"): _vec(res, "%.1f", ", "),
        ("128_Block", "parameters"): "%d (%d + %d + %d)" % (
            p["per_block"], p["attn"], p["ffn"], p["norms"]),
        ("128_Block", '"The" after 1 block'): _vec(y[0], "%+.2f", ","),
        ("129_Stack", "avg norms"): ", ".join("%.4f" % float(n) for n in norms),
    }
    for model in ("GPT-2 Small", "GPT-2 Large", "LLaMA-7B", "DeepSeek-V3"):
        v[("130_Real_Params", model + " per block")] = _human(rows[model]["per_block"]).strip()
        v[("130_Real_Params", model + " all blocks")] = _human(rows[model]["all_blocks"]).strip()
    return v


def figures(rand: str = "msvc", backend: Optional[ModuleType] = None) -> List[Figure]:
    """The chapter's headline figures (seed 42) computed with generator ``rand``, each
    with the value published for it: the book's for ``msvc``; for ``glibc`` the
    figures issue 2 lists from the listings compiled with gcc on Linux (figures
    that do not depend on rand() keep the book's value)."""
    book.c_rng(42, rand)
    computed = _computed(rand, book if backend is None else backend)
    out = []
    for listing, what, expected in BOOK_FIGURES:
        if rand == "glibc":
            expected = GLIBC_FIGURES.get((listing, what), expected)
        out.append(Figure(listing, what, computed[(listing, what)], expected))
    return out


def format_figures(figs: List[Figure], rand: str) -> str:
    """The figures as one table, with a closing summary line."""
    source = ("the book (MSVC rand())" if rand == "msvc"
              else "the listings built with gcc on Linux (glibc rand()), issue 2")
    head = ("listing", "figure", "blockc", "published", "agree")
    rows = [(f.listing, f.what, f.value, "-" if f.expected is None else f.expected,
             {True: "yes", False: "NO", None: "n/a"}[f.agree]) for f in figs]
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n"
    checked = [f for f in figs if f.agree is not None]
    bad = [f for f in checked if not f.agree]
    text = (f"Chapter 24's figures, seed 42, rand {rand}; published values: {source}\n\n"
            + line(head) + line(tuple("-" * w for w in widths)) + "".join(map(line, rows)))
    text += ("\n%d of %d figures agree" % (len(checked) - len(bad), len(checked))
             + (" (%d with no published value)" % (len(figs) - len(checked))
                if len(figs) > len(checked) else "") + ".\n")
    return text
