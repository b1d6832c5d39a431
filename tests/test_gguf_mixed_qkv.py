"""A fused q/k/v whose parts are of different GGUF types (issue 51): a Q4_K_M file stores
attn_q and attn_k as Q4_K and attn_v as Q6_K; blockc holds attn.qkv.weight as three packed
matrices, each in its file type's own format (no float32 expansion). Peers: the gguf
package's dequantize (the weights, bit for bit) and the float32 model of those very weights
(the logits, bit for bit: every format feeds the products the same floats); the same bits
at 1 and 2 threads, for a sequence alone or in a batch, and decoding with a cache."""
import numpy as np
import pytest

import blockc
from blockc import GPT, GPTConfig
from blockc._enums import FORMATS
from blockc.model import formats
from support.gguf_files import assert_dequantised, write_model

gguf = pytest.importorskip("gguf")

Q4_K_M = {"attn_v.weight": "Q6_K", "ffn_down.weight": "Q6_K", "output.weight": "Q6_K"}
QKV = "blocks.0.attn.qkv.weight"


@pytest.fixture(scope="module")
def q4_k_m(tmp_path_factory):
    p = tmp_path_factory.mktemp("mixed_qkv") / "q4_k_m.gguf"
    write_model(p, "llama", width=256, d_ff=512, heads=4, kv_heads=2, default_type="Q4_K",
                types=Q4_K_M)
    return p


def _packed_bytes(fm: str, rows: int, cols: int) -> int:
    """A (rows, cols) matrix's bytes in format fm: panels of 16 rows, blocks of its block."""
    f = FORMATS[fm]
    return -(-rows // 16) * 16 * (-(-cols // f.block)) * f.block_bytes


def test_q4_k_m_qkv_keeps_each_part_in_its_own_format(q4_k_m):
    m = GPT.from_pretrained(q4_k_m, dtype="exact")
    assert m.dtype == "mixed"
    assert m.dtypes[QKV] == ("q4_k", "q4_k", "q6_k")
    t = m.layout[QKV]
    cfg = m.config
    kw = cfg.kv_heads * (cfg.width // cfg.heads)
    assert [(p.row0, p.row1) for p in t.parts] == [(0, cfg.width), (cfg.width, cfg.width + kw),
                                                     (cfg.width + kw, cfg.width + 2 * kw)]
    # the quantised size: each part at its format's bytes, far below float32's
    want = (_packed_bytes("q4_k", cfg.width, cfg.width) + _packed_bytes("q4_k", kw, cfg.width)
            + _packed_bytes("q6_k", kw, cfg.width))
    assert t.nbytes == want == sum(p.nbytes for p in t.parts)
    assert t.nbytes < t.shape[0] * t.shape[1]  # under a byte a weight (float32: 4)
    f32 = GPT.from_pretrained(q4_k_m, dtype="float32")
    assert m.nbytes < f32.nbytes / 4
    # the weights: the gguf package's dequantisation, bit for bit
    assert_dequantised(m, q4_k_m, "llama")
    # the logits: the float32 model of the same weights, bit for bit
    ids = np.random.default_rng(0).integers(0, cfg.vocab, (2, 9))
    got = m(ids)
    np.testing.assert_array_equal(got.view(np.uint32), f32(ids).view(np.uint32))


def test_q4_k_m_qkv_by_default_is_each_parts_integer_format(q4_k_m):
    """dtype=None (DEFAULT_FORMAT: every quantised type "integer"): q, k and v each in their
    own type's integer format, the file's very weights; the logits those of
    dtype="integer"."""
    m = GPT.from_pretrained(q4_k_m)
    assert m.dtypes[QKV] == ("q4_ki", "q4_ki", "q6_ki")
    assert_dequantised(m, q4_k_m, "llama")
    ids = np.random.default_rng(0).integers(0, m.config.vocab, (2, 9))
    np.testing.assert_array_equal(m(ids), GPT.from_pretrained(q4_k_m, dtype="integer")(ids))


def test_split_qkv_same_bits_at_any_thread_count_batch_and_cache(q4_k_m):
    m = GPT.from_pretrained(q4_k_m)
    assert isinstance(m.dtypes[QKV], tuple)
    ids = np.random.default_rng(1).integers(0, m.config.vocab, (3, 7))
    n0 = blockc.get_num_threads()
    try:
        blockc.set_num_threads(1)
        one = m(ids)
        blockc.set_num_threads(2)
        np.testing.assert_array_equal(m(ids), one)
    finally:
        blockc.set_num_threads(n0)
    for b in range(ids.shape[0]):  # a sequence alone gets its bits within the batch
        np.testing.assert_array_equal(m(ids[b:b + 1]), one[b:b + 1])
    cache = m.new_cache(1, 16)  # a prompt, then one token at a time: the full pass's bits
    first = m(ids[:1, :4], cache=cache)
    steps = [m(ids[:1, t:t + 1], cache=cache) for t in range(4, 7)]
    np.testing.assert_array_equal(np.concatenate([first] + steps, axis=1), one[:1])


def test_split_qkv_from_dtypes_writes_and_reads_each_part():
    """Model(dtypes={qkv: (q, k, v)}) packs each part in its own format (read back as that
    format's weights: the NumPy oracle's), a uniform tuple is one format, and a bad tuple
    is refused by name."""
    from blockc.reference import quant
    cfg = GPTConfig(vocab=32, context=16, width=256, heads=4, layers=1, kv_heads=2,
                    positions="rope", norm="rms", activation="swiglu", d_ff=256)
    m = GPT.random(cfg, seed=3)
    w = m.read_tensor(QKV)
    s = GPT(cfg, dtypes={QKV: ("q8_0", "q4_k", "float16")})
    assert s.dtypes[QKV] == ("q8_0", "q4_k", "float16") and s.dtype == "mixed"
    s.write_tensor(QKV, w)
    got = s.read_tensor(QKV)
    np.testing.assert_array_equal(got[:256], quant.q8_0(w[:256]))
    np.testing.assert_array_equal(got[256:384], quant.q4_k(w[256:384]))
    np.testing.assert_array_equal(got[384:], quant.float16(w[384:]))
    u = GPT(cfg, dtypes={QKV: ["q8_0"] * 3})
    assert u.dtypes[QKV] == "q8_0" and not u.layout[QKV].parts
    with pytest.raises(ValueError, match="dtypes"):
        GPT(cfg, dtypes={QKV: ("q8_0", "q4_k")})
    with pytest.raises(ValueError, match="dtypes"):
        formats(cfg, dtypes={"blocks.0.up.weight": ("q8_0",) * 3})


def test_q4_k_m_save_round_trip_keeps_the_file_blocks(q4_k_m, tmp_path):
    """save_gguf of a split q/k/v writes each part's very blocks (the source file's bytes)
    and loads back split the same."""
    m = GPT.from_pretrained(q4_k_m, dtype="exact")
    p = tmp_path / "again.gguf"
    m.save_gguf(p, dtype="Q4_K_M")
    src = {t.name: t for t in gguf.GGUFReader(str(q4_k_m)).tensors}
    got = {t.name: t for t in gguf.GGUFReader(str(p)).tensors}
    # (llama.cpp's recipe: attn_v Q6_K in layer 1 of 2 (use_more_bits), Q4_K in layer 0)
    assert got["blk.1.attn_v.weight"].tensor_type.name == "Q6_K"
    same = 0
    for name in (f"blk.{i}.attn_{x}.weight" for i in (0, 1) for x in "qkv"):
        if got[name].tensor_type == src[name].tensor_type:  # the part's very blocks
            assert np.array_equal(np.asarray(got[name].data), np.asarray(src[name].data)), name
            same += 1
    assert same == 5
    back = GPT.from_pretrained(p, dtype="exact")
    assert back.dtypes["blocks.1.attn.qkv.weight"] == ("q4_k", "q4_k", "q6_k")
    assert back.dtypes[QKV] == "q4_k"  # layer 0 now all Q4_K: one matrix
    for name in ("blocks.1.attn.qkv.weight", "blocks.0.attn.qkv.weight"):
        np.testing.assert_array_equal(back.read_tensor(name)[:384], m.read_tensor(name)[:384])
