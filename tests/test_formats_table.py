"""The weight formats are rows of the C library's table (csrc/kernels/formats.c), and
Python reads what it needs from there: no Python table or list of them (issue 48)."""
import os
import re

import gguf
import numpy as np
import pytest

import blockc
from blockc import ops
from blockc._enums import C_DTYPE, DTYPES, FORMATS, GGML_CONVERTS, MAX_COLS, VALUE_LIMIT, WHOLE_BLOCKS
from blockc._native import ffi, lib
from blockc.gguf import TYPES
from blockc.checkpoint import gguf as gm
from blockc.reference import ggml


def test_every_format_is_a_row_of_the_c_table():
    """Every BC_DTYPE_* with a row is a format Python knows through the table, with the
    C library's sizes, and every dict of formats is derived from it."""
    n = ffi.new("size_t *")
    known = []
    for code in range(lib.BC_NDTYPE):
        if lib.bc_pack_size(n, code, 1, 256) == lib.BC_EOPTION:
            continue
        known.append(code)
    assert sorted(C_DTYPE.values()) == known and tuple(FORMATS) == DTYPES
    for name, f in FORMATS.items():
        assert lib.bc_pack_size(n, f.code, 16, 256) == 0 and n[0] == 256 // f.block * f.block_bytes * 16
        assert (name in WHOLE_BLOCKS) == f.whole and MAX_COLS.get(name, 0) == f.max_cols
        assert VALUE_LIMIT.get(name) == f.limit
        if f.ggml_type >= 0:  # a GGUF type of ggml's table, of the same block
            assert TYPES[f.ggml_type][1] == f.block
    # the C library's sizes of ggml's types agree with the one Python table
    for t in {f.ggml_type for f in FORMATS.values() if f.ggml_type >= 0} | {
            s for v in GGML_CONVERTS.values() for s in v}:
        name, bs, bb = TYPES[t]
        assert lib.bc_ggml_size(n, t, 3, 2 * bs) == 0 and n[0] == 3 * 2 * bb, name
        assert ggml.BLOCKS[name] == (bs, bb)


def test_gguf_tables_come_from_the_c_table():
    """EXACT and INTEGER: every format that holds a type's blocks, by the table's facts."""
    assert gm.EXACT["Q4_0"] == ("q4_0", "q8_0") and gm.EXACT["Q5_0"] == ("q5_0", "q8_0")
    assert gm.EXACT["Q8_0"] == ("q8_0",) and gm.EXACT["F16"] == ("float16",)
    assert gm.EXACT["Q4_K"] == ("q4_k",) and gm.EXACT["Q6_K"] == ("q6_k",)
    assert gm.EXACT["BF16"] == ("bfloat16",) and gm.EXACT["F32"] == ("float32",)
    assert gm.EXACT["Q4_1"] == ("q4_1",) and gm.EXACT["Q5_1"] == ("q5_1",)
    assert gm.EXACT["Q5_K"] == ("q5_k",)
    assert gm.EXACT["IQ4_NL"] == ("iq4_nl",) and gm.EXACT["IQ4_XS"] == ("iq4_xs",)
    assert gm.EXACT["Q2_K"] == ("q2_k",) and gm.EXACT["Q3_K"] == ("q3_k",)
    assert set(gm.INTEGER) == {"Q8_0", "Q4_0", "Q5_0", "Q4_K", "Q6_K", "Q5_K", "IQ4_NL",
                               "IQ4_XS", "Q4_1", "Q5_1", "Q2_K", "Q3_K"}
    for typ, fm in gm.INTEGER.items():
        assert FORMATS[fm].integer and TYPES[FORMATS[fm].ggml_type][0] == typ
    assert gm.integer_formats(["Q4_0", "Q8_0"])[0] == gm.INTEGER["Q8_0"]
    assert gm.integer_formats(["Q4_K", "Q6_K"]) == gm.exact_formats(["Q4_K", "Q6_K"])


def test_no_python_list_of_the_formats():
    """The newest format is named by the oracle alone (blockc/reference/), not by a
    Python table, list or docstring of the formats elsewhere."""
    root = os.path.dirname(blockc.__file__)
    newest = max(FORMATS.values(), key=lambda f: f.code).name
    word = re.compile(r"\b%s\b" % re.escape(newest))
    found = []
    for d, _, files in os.walk(root):
        for fn in files:
            if fn.endswith(".py"):
                p = os.path.join(d, fn)
                with open(p, encoding="utf-8") as fh:
                    if word.search(fh.read()):
                        found.append(os.path.relpath(p, root))
    assert found and all(p.startswith("reference" + os.sep) for p in found), found


@pytest.mark.parametrize("dtype", [d for d in DTYPES if FORMATS[d].ggml_type >= 0])
def test_blocks_move_both_ways(dtype):
    """ops.pack_ggml(ops.unpack_ggml(p)) is p for a matrix bc_pack made (rows not whole
    panels, runs of 4 and a short one), and the rows are the oracle quantiser's blocks
    of the weights (the gguf package's type), which the format's unpack dequantises as
    the oracle does, bit for bit."""
    f = FORMATS[dtype]
    typ = TYPES[f.ggml_type][0]
    rng = np.random.default_rng(5)
    rows, cols = 70, 512
    w = (rng.standard_normal((rows, cols)) * 0.3).astype(np.float32)
    p = ops.pack(w, dtype)
    raw = np.array(p._buf)
    blocks = ops.unpack_ggml(raw, dtype, (rows, cols))
    assert blocks.shape == (rows, cols // TYPES[f.ggml_type][1] * TYPES[f.ggml_type][2])
    assert np.array_equal(ops.pack_ggml(blocks, dtype, (rows, cols)), raw)
    deq = ggml.dequantise(blocks.reshape(-1), typ).reshape(rows, cols)
    assert np.array_equal(p.unpack().view(np.uint32), deq.view(np.uint32))
    if typ in ggml.QUANTISE:
        assert np.array_equal(blocks.reshape(-1), ggml.quantise(w, typ).reshape(-1))


def test_convert_and_refusals():
    """Q4_0's and Q5_0's blocks as Q8_0's hold the same weights; the refusals name the
    argument."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((5, 64)).astype(np.float32)
    for typ in ("Q4_0", "Q5_0"):
        b = ggml.quantise(w, typ).reshape(5, -1)
        q8 = ops.convert_ggml(b, gm.fmt.TYPE_IDS[typ], gm.fmt.TYPE_IDS["Q8_0"])
        assert q8.shape == (5, 68)
        assert np.array_equal(ggml.dequantise(q8.reshape(-1), "Q8_0"),
                              ggml.dequantise(b.reshape(-1), typ))
    with pytest.raises(blockc.BlockcValueError, match="do not convert"):
        ops.convert_ggml(b, gm.fmt.TYPE_IDS["Q8_0"], gm.fmt.TYPE_IDS["Q4_0"])
    with pytest.raises(blockc.BlockcValueError, match="bfloat16i holds no GGUF type"):
        ops.pack_ggml(np.zeros(4, np.uint8), "bfloat16i", (1, 2))
    with pytest.raises(blockc.BlockcValueError, match="blocks must hold 34 bytes"):
        ops.pack_ggml(np.zeros(33, np.uint8), "q8_0", (1, 32))
    with pytest.raises(blockc.BlockcTypeError, match="blocks must be a numpy uint8"):
        ops.pack_ggml(np.zeros(34, np.int8), "q8_0", (1, 32))
    with pytest.raises(blockc.BlockcValueError, match="whole blocks"):
        ops.pack_ggml(np.zeros(34, np.uint8), "q8_0", (1, 33))


def _corner_weights(rows: int, cols: int) -> np.ndarray:
    """Normal weights with the corners of the quantisers' rules: near-ties of the
    rounding, an all-zero block, a block whose scale underflows a half, equal weights,
    a negative largest weight, wide and narrow ranges, weights near the largest a half
    scale allows."""
    rng = np.random.default_rng(11)
    w = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
    w[0, :32] = np.arange(32) - 15.5
    w[1, :32] = np.arange(32) * np.float32(-0.5)
    w[2, :256] = 0.0
    w[3, :256] *= np.float32(1e-30)
    w[4, :256] = np.float32(0.25)
    w[5, :32] = -np.abs(w[5, :32]) * 100
    w[6] *= np.float32(1e4)
    w[7, :256] = np.float32(65504 * 7.9) * np.sign(w[7, :256])
    w[8, 32:64] = np.float32(1.0) + np.arange(32, dtype=np.float32) * np.float32(2 ** -11)
    return w


def _k_corners(rows: int, cols: int) -> np.ndarray:
    """:func:`_corner_weights` and the K-quants' own corners: rows whose every sub-block
    min is zero (constant positive sub-blocks: dmin +0 in llama.cpp, issue 51), zero rows,
    negative-only rows, a row of one sign per sub-block, a positive-only one."""
    w = _corner_weights(rows, cols)
    w[10] = np.float32(0.125) * (1 + np.arange(cols) // 32)  # each sub-block one positive value
    w[11] = 0.0
    w[12] = -np.abs(w[12])
    w[13] = np.where(np.arange(cols) // 32 % 2 == 0, np.abs(w[13]), -np.abs(w[13]))
    w[14, :256] = np.abs(w[14, :256]) + np.float32(1.0)  # (no negative weight)
    return w


@pytest.mark.parametrize("typ", ["Q8_0", "Q4_0", "Q5_0", "Q4_K", "Q6_K", "F16", "BF16", "F32",
                                 "Q4_1", "Q5_1", "Q5_K"])
def test_saving_quantises_as_the_oracle(typ):
    """save_gguf's quantise (the C quantiser where the C table has a plain format of the
    type, the oracle's otherwise or for weights the C format refuses) writes the oracle's
    very bytes (reference/ggml.py, llama.cpp's reference quantisers), Q4_K and Q5_K too
    (issue 51: the C quantisers' panels of 16 rows at once, on every corner)."""
    w = _k_corners(40, 512)
    assert np.array_equal(gm.quantise(w, typ), ggml.quantise(w, typ))
    assert set(gm._C_QUANTISED) == {"Q8_0", "Q4_0", "Q5_0", "Q6_K", "Q4_1", "Q5_1", "Q4_K",
                                    "Q5_K", "IQ4_NL", "IQ4_XS", "Q2_K", "Q3_K"}
    assert set(gm.OWN_RULE) == {"IQ4_NL", "IQ4_XS", "Q2_K", "Q3_K"}
    if typ in gm._C_QUANTISED:  # the C library's own bytes, and beyond a half scale: the oracle's
        ok = w[[i for i in range(40) if i not in (6, 7)]]  # (within every C format's bound)
        assert np.array_equal(ops.unpack_ggml(ops.pack(ok, gm._C_QUANTISED[typ])),
                              ggml.quantise(ok, typ))
        big = w.copy()
        big[9, 0] = np.float32(3e10)
        assert np.array_equal(gm.quantise(big, typ), ggml.quantise(big, typ))


@pytest.mark.parametrize("typ", ["Q4_K", "Q5_K"])
def test_k_quants_zero_dmin_is_llama_cpps_plus_zero(typ):
    """A super-block whose every sub-block min is zero stores dmin +0 (llama.cpp's
    quantize_row_q4_K_ref starts its largest min at 0), in the oracle and in C alike; a
    negative-only row's dmin is positive; the gguf package dequantises the blocks to the
    oracle's weights, and rows of 1..16 (a panel's short runs) quantise as whole ones."""
    w = _k_corners(40, 512)
    o = ggml.quantise(w, typ).reshape(40, 2, -1)
    assert np.all(o[[10, 11], :, 2:4] == 0)  # dmin +0: both bytes zero (-0.0 has 0x80)
    assert np.all(o[12, :, 2:4].view(np.float16) > 0)
    want = ggml.dequantise(o.reshape(-1), typ)
    got = gguf.quants.dequantize(o.reshape(40, -1), gguf.GGMLQuantizationType[typ])
    got = np.asarray(got, np.float32).reshape(-1)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    for n in (1, 5, 16, 17):
        assert np.array_equal(gm.quantise(w[:n], typ), o[:n].reshape(n, -1))


def test_blocks_move_the_same_at_any_thread_count():
    """bc_pack_ggml and bc_unpack_ggml spread their panels over the pool: the same bytes
    on 1 and 2 threads (runs of 4 panels and a short one)."""
    w = _corner_weights(90, 768)
    w[7] = 1.0  # (float16 holds no weight beyond 65504)
    n0 = blockc.get_num_threads()
    out = {}
    try:
        for n in (1, 2):
            blockc.set_num_threads(n)
            for dtype in ("q4_ki", "q6_k", "q8_0i", "float16", "q4_k", "q5_k"):
                p = ops.pack(w, dtype)
                b = ops.unpack_ggml(p)
                out[n, dtype] = (b, ops.pack_ggml(b, dtype, w.shape))
    finally:
        blockc.set_num_threads(n0)
    for dtype in ("q4_ki", "q6_k", "q8_0i", "float16", "q4_k", "q5_k"):
        assert all(np.array_equal(a, b) for a, b in zip(out[1, dtype], out[2, dtype])), dtype


@pytest.mark.parametrize("dtype", ["q8_0", "q4_0", "iq4_nl", "q4_k", "q6_k", "q8_0i"])
def test_blocks_of_any_bytes_move_into_panels_whole_or_not(dtype):
    """Loading moves a file's blocks into panels 16 rows at a time (16 x 16 byte
    transposes) where the format has that path, row by row otherwise (a short last
    panel, the other formats): any blocks (random bytes, not made by a quantiser) read
    back by bc_unpack_ggml (row by row) as the very bytes, on 1 and 2 threads, chunks of
    columns beyond the first; and packed into a slice of a larger buffer (``out=``, as
    loading packs into the model's buffer) they are the same bytes, nothing else written."""
    f = FORMATS[dtype]
    _, bs, bb = TYPES[f.ggml_type]
    rows, cols = 16 * 3 + 5, 4 * 256 + (0 if f.whole else 64)
    rng = np.random.default_rng(11)
    blocks = rng.integers(0, 256, (rows, cols // bs * bb), dtype=np.uint8)
    n0 = blockc.get_num_threads()
    got = {}
    try:
        for n in (1, 2):
            blockc.set_num_threads(n)
            got[n] = ops.pack_ggml(blocks, dtype, (rows, cols))
    finally:
        blockc.set_num_threads(n0)
    assert np.array_equal(got[1], got[2])
    assert np.array_equal(ops.unpack_ggml(got[1], dtype, (rows, cols)), blocks)
    if f.group == 1:  # each panel its own bytes: rows 16.. alone pack to the rest
        panel = got[1].size // -(-rows // 16)
        assert np.array_equal(ops.pack_ggml(blocks[16:], dtype, (rows - 16, cols)),
                              got[1][panel:])
    buf = np.full(got[1].size + 128, 7, np.uint8)
    back = ops.pack_ggml(blocks, dtype, (rows, cols), out=buf[64:-64])
    assert back.base is buf or np.shares_memory(back, buf)
    assert np.array_equal(buf[64:-64], got[1])
    assert (buf[:64] == 7).all() and (buf[-64:] == 7).all()


def test_pack_ggml_out_refusals():
    """``out=`` must be a writeable contiguous 1-D uint8 array of the packed size, apart
    from the blocks; each refusal names it."""
    blocks = np.zeros((16, 34), np.uint8)
    n = ops.pack_ggml(blocks, "q8_0", (16, 32)).size
    with pytest.raises(blockc.BlockcTypeError, match="out must be a 1-D numpy uint8"):
        ops.pack_ggml(blocks, "q8_0", (16, 32), out=np.zeros(n, np.int8))
    with pytest.raises(blockc.BlockcValueError, match=f"out must be a writeable contiguous "
                                                      f"array of {n} bytes"):
        ops.pack_ggml(blocks, "q8_0", (16, 32), out=np.zeros(n + 1, np.uint8))
    ro = np.zeros(n, np.uint8)
    ro.flags.writeable = False
    with pytest.raises(blockc.BlockcValueError, match="writeable"):
        ops.pack_ggml(blocks, "q8_0", (16, 32), out=ro)
    with pytest.raises(blockc.BlockcValueError, match="writeable contiguous"):
        ops.pack_ggml(blocks, "q8_0", (16, 32), out=np.zeros(2 * n, np.uint8)[::2])
    both = np.zeros(n + blocks.size, np.uint8)
    with pytest.raises(blockc.BlockcValueError, match="must not overlap"):
        ops.pack_ggml(both[:blocks.size].reshape(16, 34), "q8_0", (16, 32), out=both[n // 2:][:n])


def test_convert_over_the_pool_is_the_oracles_weights_at_any_thread_count():
    """bc_ggml_convert spreads its blocks over the pool (4096 a unit): for a tensor of
    several units and a short one, Q4_0's and Q5_0's blocks as Q8_0's dequantise to the
    oracle's weights of the original blocks, the same bytes on 1 and 2 threads."""
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((300, 1024)) * 0.2).astype(np.float32)  # 9,600 blocks
    n0 = blockc.get_num_threads()
    for typ in ("Q4_0", "Q5_0"):
        b = ggml.quantise(w, typ).reshape(300, -1)
        got = {}
        try:
            for n in (1, 2):
                blockc.set_num_threads(n)
                got[n] = ops.convert_ggml(b, gm.fmt.TYPE_IDS[typ], gm.fmt.TYPE_IDS["Q8_0"])
        finally:
            blockc.set_num_threads(n0)
        assert np.array_equal(got[1], got[2])
        assert np.array_equal(ggml.dequantise(got[1].reshape(-1), "Q8_0").view(np.uint32),
                              ggml.dequantise(b.reshape(-1), typ).view(np.uint32))
