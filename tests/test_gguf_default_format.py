"""The format a quantised GGUF file loads as by default (issue 53): the table
blockc.checkpoint.gguf.DEFAULT_FORMAT, chosen by benches/bench_formats.py, loads each type's
matrices as it says, and its choice stays within the KL budget the bench chose it by (the KL
from the float32 model of llama.cpp's arithmetic on the same file, which blockc's
dtype="integer" reproduces; for a type without an integer format, the exact path's plus the
most 8-bit activations in blocks of 32 add on the Q4_0, Q5_0 and Q8_0 files), computed here
against float32 logits on a model of other shapes than the bench's. No timing: the speed is
the bench's."""
import numpy as np
import pytest

import blockc
from blockc.checkpoint.gguf import DEFAULT_FORMAT, INTEGER, default_formats, exact_formats, names
from helpers import mean_kl

TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q6_K", "Q4_K_M", "Q5_K_M", "IQ4_XS")


def _has_integer(m):
    """Whether every quantised matrix of ``m``'s file has an integer format of its type."""
    return all(x in INTEGER for x in set(m.gguf_types.values()) if x not in ("F32", "F16", "BF16"))


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    d = tmp_path_factory.mktemp("formats")
    cfg = blockc.GPTConfig(vocab=512, context=64, width=256, heads=4, kv_heads=2, layers=2,
                           d_ff=512, eps=1e-5, tie_weights=True, norm="rms",
                           activation="swiglu", positions="rope", qkv_bias=False,
                           out_bias=False, mlp_bias=False)
    m32 = blockc.GPT.random(cfg, seed=1)
    for name, t in m32.layout.items():  # logits that are not flat, as the bench's
        if t.packed:
            m32.write_tensor(name, m32.read_tensor(name) * np.float32(2.5))
    text = np.random.default_rng(0).integers(0, cfg.vocab, (1, 48))
    ref = m32(text)[0]
    out = {}
    for t in TYPES:
        path = d / f"m-{t}.gguf"
        m32.save_gguf(path, t)
        got = {}
        for dt in (None, "exact", "integer"):
            m = blockc.GPT.from_pretrained(path, dtype=dt)
            got[dt] = (m, mean_kl(ref, m(text)[0]))
        out[t] = got
    return out


@pytest.mark.parametrize("t", TYPES)
def test_the_default_loads_as_the_table_says_within_the_kl_budget(measured, t):
    got = measured[t]
    m, k = got[None]
    # every matrix in the format the table names for its file type
    for name, types in _parts(m).items():
        assert m.dtypes[name] == _first(types, default_formats), (t, name, types, m.dtypes[name])
    # the bench's budget: llama.cpp's arithmetic (blockc's integer path); for Q4_1 the exact
    # path's plus the most 8-bit activations in blocks of 32 add on Q4_0, Q5_0 and Q8_0
    excess = max(measured[x]["integer"][1] - measured[x]["exact"][1]
                 for x in ("Q4_0", "Q5_0", "Q8_0"))
    budget = got["integer"][1] if _has_integer(m) else got["exact"][1] + excess
    assert k <= budget * (1 + 1e-9), (t, k, budget)
    # the exact path is one flag away: the file's very weights
    e = got["exact"][0]
    for name, types in _parts(e).items():
        assert e.dtypes[name] == _first(types, exact_formats), (t, name)
    if all(DEFAULT_FORMAT.get(x, "exact") == "exact" for x in set(m.gguf_types.values())):
        assert k == got["exact"][1]


def _first(types, choices):
    """The format a matrix of parts of these file types loads in: ``choices(types)``'s first,
    or, when that is float32 for a q/k/v of types sharing no format, each part's own."""
    pick = choices(types)[0]
    if pick == "float32" and len(types) == 3 and len(set(types)) > 1:
        return tuple(choices([x])[0] for x in types)
    return pick


def _parts(m):
    """blockc matrix name -> the file types of its parts (q, k and v are one matrix)."""
    out = {}
    for n, ours, _, _ in names("llama", m.config):
        if ours in m.dtypes:  # the packed matrices
            out.setdefault(ours, []).append(m.gguf_types[n])
    return out
