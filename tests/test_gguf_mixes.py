"""llama.cpp's quantisation mixes and the types save_gguf writes by blockc's own rule
(issue 51): each tensor's type is the one llama.cpp's own quantiser picks for the same
file (llama-cpp-python's llama_model_quantize, the peer), and the gguf package reads and
dequantises every type blockc writes to blockc's weights."""
import numpy as np
import pytest

import gguf

import blockc
from blockc.checkpoint import gguf as gm
from blockc.model import layout
from blockc.reference import ggml


def _cfg(kv: int, layers: int, tied: bool) -> blockc.GPTConfig:
    return blockc.GPTConfig(vocab=512, context=64, width=256, heads=4, kv_heads=kv,
                            layers=layers, d_ff=512, tie_weights=tied, norm="rms",
                            activation="swiglu", positions="rope", qkv_bias=False,
                            out_bias=False, mlp_bias=False)


def _weights(cfg: blockc.GPTConfig):
    lay = layout(cfg)

    def get(name: str) -> np.ndarray:
        shape = lay[name].shape
        rng = np.random.default_rng(sum(map(ord, name)))
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)
    return get


def _types(path) -> dict:
    return {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(path)).tensors}


def test_the_mixes_pick_llama_cpps_types_by_rule():
    """The rules as read from src/llama-quant.cpp, for 16 layers: use_more_bits' layers
    (0, 1, 4, 7, 10, 13, 14, 15), Q3_K_M's first two attn_v and first ffn_down Q5_K,
    IQ4_XS's attn_v Q5_K only under grouped-query attention of 4 heads a group or more."""
    more = [i for i in range(16) if gm.recipe("Q4_K_M", f"blk.{i}.attn_v.weight", 16, 256)
            == "Q6_K"]
    assert more == [0, 1, 4, 7, 10, 13, 14, 15]
    r = gm.recipe
    assert [r("Q3_K_M", f"blk.{i}.attn_v.weight", 16, 256) for i in range(3)] == \
        ["Q5_K", "Q5_K", "Q4_K"]
    assert [r("Q3_K_M", f"blk.{i}.ffn_down.weight", 16, 256) for i in range(2)] == ["Q5_K", "Q4_K"]
    assert r("Q2_K", "blk.3.attn_v.weight", 16, 256, gqa=4) == "Q4_K"
    assert r("Q2_K", "blk.3.attn_v.weight", 16, 256, gqa=2) == "Q3_K"
    assert r("Q2_K", "blk.3.ffn_down.weight", 16, 256) == "Q3_K"
    assert r("Q2_K", "blk.3.attn_output.weight", 16, 256) == "Q3_K"
    assert r("Q2_K", "blk.3.ffn_up.weight", 16, 256) == "Q2_K"
    assert r("IQ4_XS", "blk.3.attn_v.weight", 16, 256, gqa=4) == "Q5_K"
    assert r("IQ4_XS", "blk.3.attn_v.weight", 16, 256, gqa=1) == "IQ4_XS"
    assert r("IQ4_XS", "blk.1.ffn_down.weight", 16, 256) == "Q5_K"
    assert r("IQ4_XS", "blk.2.ffn_down.weight", 16, 256) == "IQ4_XS"
    assert r("Q3_K_L", "blk.9.attn_output.weight", 16, 256) == "Q5_K"
    assert r("Q3_K_S", "blk.0.attn_v.weight", 16, 256, gqa=4) == "Q3_K"
    for mix in ("Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "IQ4_XS", "IQ4_NL"):
        assert r(mix, "output.weight", 16, 256) == "Q6_K"
        assert r(mix, "token_embd.weight", 16, 256, tied=True) == "Q6_K"
        assert r(mix, "output.weight", 16, 288) == "Q8_0"
    # rows not whole 256-blocks: llama.cpp's fallbacks
    assert r("Q2_K", "blk.0.ffn_up.weight", 16, 288) == "Q4_0"
    assert r("IQ4_XS", "blk.5.ffn_up.weight", 16, 288) == "IQ4_NL"
    assert r("IQ4_XS", "blk.5.ffn_up.weight", 16, 80) == "F16"


def test_the_mixes_are_llama_cpps_own(tmp_path):
    """For every mix blockc writes, each tensor's type is the one llama.cpp's quantiser
    (llama_model_quantize of an F32 file of the same model) gives it: 16 layers (every
    use_more_bits case), 4 query heads a key/value head, an output apart from the
    embedding (a tied one: test_the_mixes_pick_llama_cpps_types_by_rule)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    cfg = _cfg(1, 16, False)
    src = tmp_path / "f32.gguf"
    gm.save_streaming(str(src), cfg, "F32", _weights(cfg))
    for mix in gm.MIXES:
        theirs = tmp_path / f"theirs-{mix}.gguf"
        p = llama_cpp.llama_model_quantize_default_params()
        p.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{mix}")
        assert gm.FILE_TYPE[mix] == p.ftype
        p.nthread = 1
        assert llama_cpp.llama_model_quantize(str(src).encode(), str(theirs).encode(), p) == 0
        ours = tmp_path / f"ours-{mix}.gguf"
        gm.save_streaming(str(ours), cfg, mix, _weights(cfg))
        want, got = _types(theirs), _types(ours)
        assert got == want, (mix, {n: (got[n], want.get(n)) for n in got if got[n] != want.get(n)})


@pytest.mark.parametrize("typ", ["IQ4_NL", "IQ4_XS", "Q2_K", "Q3_K", "Q4_K", "Q5_K"])
def test_each_type_reads_back_as_the_gguf_package_dequantises_it(tmp_path, typ):
    """A model saved with every matrix of ``typ`` (the plain types; the mixes' base type
    for IQ4_NL, IQ4_XS and Q2_K: their attn_q): the gguf package dequantises each of those
    tensors to the weights blockc's format of the type holds and the oracle reads, and
    blockc loads the file to those very weights."""
    cfg = _cfg(2, 2, True)
    m = blockc.GPT.random(cfg, seed=3)
    p = tmp_path / "m.gguf"
    m.save_gguf(p, dtype=typ)
    r = gguf.GGUFReader(str(p))
    seen = 0
    for t in r.tensors:
        if t.tensor_type.name != typ:
            continue
        seen += 1
        theirs = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float32)
        blocks = np.asarray(t.data).view(np.uint8)
        ours = ggml.dequantise(blocks.reshape(-1), typ).reshape(theirs.shape)
        assert np.array_equal(theirs.view(np.uint32), ours.view(np.uint32)), t.name
    assert seen >= 2
    back = blockc.GPT.from_pretrained(p, dtype="exact")
    for t in r.tensors:
        if t.name == "blk.0.ffn_up.weight" and t.tensor_type.name == typ:
            theirs = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float32)
            assert np.array_equal(back.read_tensor("blocks.0.up.weight"), theirs)


def _llama_quantised(llama_cpp, src, out, ftype: int) -> dict:
    """llama.cpp's quantiser's tensors of F32 file ``src``, every matrix of the ftype's
    own type (pure)."""
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype, p.pure, p.nthread = ftype, True, 1
    assert llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), p) == 0
    return {t.name: t for t in gguf.GGUFReader(str(out)).tensors}


def test_quantisers_against_llama_cpps(tmp_path):
    """On the same Gaussian weights (corner rows among them: zero, negative-only, constant
    positive sub-blocks), blockc's Q4_K, Q5_K, Q6_K, Q8_0 and Q4_0 are llama.cpp's very
    bytes, and blockc's own rules for IQ4_NL, IQ4_XS, Q2_K and Q3_K have a root-mean-square
    error within 15% of llama.cpp's search (measured: 1.05, 1.04, 1.11, 1.03 times)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    cfg = blockc.GPTConfig(vocab=512, context=64, width=1024, heads=8, layers=1, d_ff=512,
                           tie_weights=True, norm="rms", activation="swiglu", positions="rope",
                           qkv_bias=False, out_bias=False, mlp_bias=False)
    get = _weights(cfg)

    def weights(name: str) -> np.ndarray:
        w = get(name) * np.float32(20)  # (standard deviation 1)
        if name == "blocks.0.up.weight":
            w[0] = 0.0
            w[1] = -np.abs(w[1])
            w[2] = np.float32(0.5) * (1 + np.arange(w.shape[1]) // 32)
        return w if w.ndim > 1 else np.ones_like(w)
    src = tmp_path / "f32.gguf"
    gm.save_streaming(str(src), cfg, "F32", weights)
    w = {t.name: np.asarray(t.data, np.float32) for t in gguf.GGUFReader(str(src)).tensors}[
        "blk.0.ffn_up.weight"]
    for typ in ("Q4_K", "Q5_K", "Q6_K", "Q8_0", "Q4_0"):
        t = _llama_quantised(llama_cpp, src, tmp_path / f"{typ}.gguf",
                             getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{typ}"
                                     + ("_M" if typ in ("Q4_K", "Q5_K") else "")))[
            "blk.0.ffn_up.weight"]
        ours = gm.quantise(w, typ)
        assert t.tensor_type.name == typ
        assert np.array_equal(np.asarray(t.data).view(np.uint8).reshape(ours.shape), ours), typ
    g = w[3:]
    for typ, ftype in (("IQ4_NL", "IQ4_NL"), ("IQ4_XS", "IQ4_XS"), ("Q2_K", "Q2_K"),
                       ("Q3_K", "Q3_K_S")):
        t = _llama_quantised(llama_cpp, src, tmp_path / f"{typ}.gguf",
                             getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}"))[
            "blk.0.ffn_up.weight"]
        assert t.tensor_type.name == typ
        theirs = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float32)[3:]
        ours = ggml.dequantise(gm.quantise(g, typ).reshape(-1), typ).reshape(g.shape)
        e_ours, e_theirs = (float(np.sqrt(np.mean((a - g) ** 2))) for a in (ours, theirs))
        assert e_ours < 1.15 * e_theirs, (typ, e_ours, e_theirs)
