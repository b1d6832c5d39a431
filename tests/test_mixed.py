"""One storage format per matrix (issue 21): a model whose matrices have their own formats
(``Model(cfg, dtypes={name: format})``, and a mixed GGUF file such as Q4_K_M held
natively). Peers: a float32 model of the same (dequantised) weights, which a mixed model
must equal bit for bit (every format feeds the GEMM the same floats in the same order);
each format's own packing (blockc.ops.pack); the gguf package's dequantize and
transformers' GGUF loader on the files."""
import threading

import numpy as np
import pytest

import blockc
from blockc import BlockcError, BlockcTypeError, BlockcValueError, GPT, GPTConfig
from blockc import ops
from blockc._native import ffi, lib
from blockc.checkpoint import gguf as gm
from blockc.model import MIXED, formats, layout, matrix_slots
from support.gguf_files import assert_dequantised, native, write_model

LLAMA = GPTConfig(vocab=96, context=32, width=64, heads=4, kv_heads=2, layers=3, d_ff=96,
                  norm="rms", activation="swiglu", positions="rope", tie_weights=False,
                  qkv_bias=False, out_bias=False, mlp_bias=False, eps=1e-5)
GPT2 = GPTConfig(vocab=80, context=16, width=32, heads=2, layers=2)  # tied, no gate
# the formats these small models' rows fit (q4_k's are whole super-blocks of 256: its own test)
FITS = tuple(d for d in ops.DTYPES if d not in blockc._enums.WHOLE_BLOCKS)


def mix(cfg, shift=0):
    """Every format in turn over the matrices."""
    names = list(matrix_slots(cfg))
    return {n: FITS[(i + shift) % len(FITS)] for i, n in enumerate(names)}


def packed_bytes(fmt, rows, cols):
    """bc_format.h's size: panels of 16 rows, ceil(cols / block) blocks a row."""
    block, bb = ffi.new("size_t *"), ffi.new("size_t *")
    assert lib.bc_dtype_info(ffi.NULL, 0, block, bb, blockc._enums.C_DTYPE[fmt]) == lib.BC_OK
    return -(-rows // 16) * 16 * -(-cols // int(block[0])) * int(bb[0])


@pytest.mark.parametrize("cfg", [LLAMA, GPT2], ids=["llama", "gpt2"])
@pytest.mark.parametrize("shift", [0, 1, 2])
def test_bytes_are_the_sum_of_each_matrix_format(cfg, shift):
    m = GPT.random(cfg, seed=1, dtypes=mix(cfg, shift))
    assert m.dtype == MIXED and m.dtypes == mix(cfg, shift)
    want, off = 0, 0
    for name, t in m.layout.items():
        if t.packed:
            assert blockc._enums.C_DTYPE[m.dtypes[name]] == t.dtype
            nb = packed_bytes(m.dtypes[name], *t.shape)
        else:
            nb = 4 * int(np.prod(t.shape))
        assert t.offset == off and t.nbytes == nb, name
        off += nb
        want += nb
    assert m.nbytes == want


@pytest.mark.parametrize("cfg", [LLAMA, GPT2], ids=["llama", "gpt2"])
def test_each_matrix_packed_in_its_own_format(cfg):
    src = GPT.random(cfg, seed=2)
    sd = src.state_dict()
    m = GPT.from_state_dict(sd, cfg, dtypes=mix(cfg))
    for name, t in m.layout.items():
        want = ops.pack(sd[name], m.dtypes[name]).unpack() if t.packed else sd[name]
        assert np.array_equal(m.read_tensor(name).view(np.uint32), want.view(np.uint32)), name
    # write_tensor packs in the matrix's own format too
    w = np.random.default_rng(3).standard_normal(m.layout["blocks.1.up.weight"].shape) * 0.1
    m.write_tensor("blocks.1.up.weight", w)
    assert np.array_equal(m.read_tensor("blocks.1.up.weight"),
                          ops.pack(w, m.dtypes["blocks.1.up.weight"]).unpack())


@pytest.mark.parametrize("cfg", [LLAMA, GPT2], ids=["llama", "gpt2"])
@pytest.mark.parametrize("shift", [0, 3])
def test_mixed_model_computes_with_its_weights(cfg, shift, threads):
    """logits == a float32 model of the same weights, bit for bit, at 1 and 2 threads
    (close to it when a matrix is q8_0i: 8-bit activations); cached == uncached; each
    row of a batch == the row alone."""
    m = GPT.random(cfg, seed=4, dtypes=mix(cfg, shift))
    f = GPT.from_state_dict(m.state_dict(), cfg)
    ids = np.random.default_rng(5).integers(0, cfg.vocab, (3, 12))
    threads(1)
    one = m(ids)
    threads(2)
    two = m(ids)
    np.testing.assert_array_equal(one, two)
    if "q8_0i" in m.dtypes.values():
        ref = f(ids)
        assert np.abs(one - ref).max() <= 0.05 * np.abs(ref).max()
    else:
        np.testing.assert_array_equal(one, f(ids))
    for b in range(3):
        np.testing.assert_array_equal(m(ids[b:b + 1]), one[b:b + 1])
    cache = m.new_cache(3, cfg.context)
    parts = [m(ids[:, :5], cache=cache)] + [m(ids[:, t:t + 1], cache=cache) for t in range(5, 12)]
    np.testing.assert_array_equal(np.concatenate(parts, axis=1), one)
    assert np.isfinite(one).all()


def test_astype_dtypes_and_repr():
    m = GPT.random(LLAMA, seed=6, dtypes={"blocks.0.up.weight": "q4_0", "head.weight": "q8_0"})
    assert m.dtype == MIXED and "dtype='mixed'" in repr(m)
    d = m.dtypes
    assert d["blocks.0.up.weight"] == "q4_0" and d["head.weight"] == "q8_0"
    assert set(d) == set(matrix_slots(LLAMA)) and d["token.weight"] == "float32"
    d["token.weight"] = "q4_0"  # a copy: the model is unchanged
    assert m.dtypes["token.weight"] == "float32"
    for target in FITS:
        u = m.astype(target)
        assert u.dtype == target and set(u.dtypes.values()) == {target}
        assert u.nbytes == GPT(LLAMA, dtype=target).nbytes
    # to float32: exactly the weights the mixed model computes with
    f = m.astype("float32")
    for name in m.layout:
        assert np.array_equal(f.read_tensor(name), m.read_tensor(name))
    # every matrix named in one format: that format's uniform model
    same = GPT(LLAMA, dtypes=dict.fromkeys(matrix_slots(LLAMA), "q8_0"))
    assert same.dtype == "q8_0" and same.c_config.dtypes == ffi.NULL
    assert same.nbytes == GPT(LLAMA, dtype="q8_0").nbytes


def test_refusals():
    with pytest.raises(BlockcValueError, match="not a matrix"):
        GPT(LLAMA, dtypes={"blocks.0.ln1.weight": "q8_0"})
    with pytest.raises(BlockcValueError, match="not a matrix"):
        GPT(GPT2, dtypes={"blocks.0.gate.weight": "q8_0"})  # no gate without SwiGLU
    with pytest.raises(BlockcValueError, match="not a matrix"):
        GPT(GPT2, dtypes={"head.weight": "q8_0"})  # tied
    with pytest.raises(BlockcValueError, match=r"dtypes\['token.weight'\]"):
        GPT(LLAMA, dtypes={"token.weight": "q3_x"})
    with pytest.raises(BlockcTypeError, match="dtypes"):
        GPT(LLAMA, dtypes=[("token.weight", "q8_0")])
    big = GPTConfig(vocab=16, context=8, width=32, heads=2, layers=lib.BC_GPT_FMT_LAYERS + 1)
    with pytest.raises(BlockcValueError, match="layers"):
        layout(big, dtypes={"token.weight": "q8_0"})
    assert len(layout(big, dtypes=dict.fromkeys(matrix_slots(big), "q8_0"))) > 0  # uniform
    m = GPT.random(LLAMA, seed=7, dtypes={"blocks.2.down.weight": "bfloat16"})
    ids = np.zeros((1, 4), np.int64)
    with pytest.raises(BlockcValueError, match="float32"):
        m.loss(ids, ids)
    m.astype("float32").loss(ids, ids)


def test_a_mapping_is_read_once():
    """A dtypes mapping that answers differently each time it is read: the model is built
    from one reading, its layout consistent with its formats."""
    class Fickle(dict):
        n = 0

        def items(self):
            Fickle.n += 1
            return {"blocks.0.up.weight": FITS[Fickle.n % len(FITS)]}.items()

        def __getitem__(self, k):
            Fickle.n += 1
            return FITS[Fickle.n % len(FITS)]

    m = GPT(LLAMA, dtypes=Fickle({"blocks.0.up.weight": "q8_0"}))
    t = m.layout["blocks.0.up.weight"]
    assert t.nbytes == packed_bytes(m.dtypes["blocks.0.up.weight"], *t.shape)
    assert m.nbytes == sum(t.nbytes for t in m.layout.values())


def test_changing_the_formats_array_during_calls_never_breaks_the_call():
    """The C struct's dtypes array, flipped to an unknown format and back by another thread
    while this one runs forwards (the GIL released): C reads each entry once into its own
    copy and checks that, so each call either gives the model's logits bit for bit or is
    refused (BC_EOPTION), never reads past the buffer or mixes two readings."""
    m = GPT.random(LLAMA, seed=8, dtypes=mix(LLAMA, 1))
    ids = np.random.default_rng(9).integers(0, LLAMA.vocab, (2, 16))
    want = m(ids)
    arr = m.c_config.dtypes
    slots = list(matrix_slots(LLAMA).values())
    stop = threading.Event()

    def flip():
        i = 0
        while not stop.is_set():
            s = slots[i % len(slots)]
            keep = arr[s]
            arr[s] = 99
            arr[s] = -1
            arr[s] = keep
            i += 1

    t = threading.Thread(target=flip)
    t.start()
    ok = refused = 0
    try:
        for _ in range(300):
            try:
                got = m(ids)
            except BlockcError:
                refused += 1
                continue
            np.testing.assert_array_equal(got, want)
            ok += 1
    finally:
        stop.set()
        t.join()
    assert ok + refused == 300 and ok > 0
    np.testing.assert_array_equal(m(ids), want)


# ---- mixed GGUF files ------------------------------------------------------------------------

SMOL = dict(width=128, heads=4, kv_heads=2, d_ff=256, layers=3, context=64)  # cols 128: fallbacks


@pytest.fixture(scope="module")
def gguf_files(tmp_path_factory):
    pytest.importorskip("gguf")
    d = tmp_path_factory.mktemp("mixed_gguf")
    # the gguf package writes a file of several types
    write_model(d / "mixed.gguf", "llama", kv_heads=2, d_ff=256, default_type="Q8_0",
                types={"output.weight": "Q4_0",  # (a suffix of attn_output: first)
                       "attn_q.weight": "Q4_0", "attn_k.weight": "Q4_0", "attn_v.weight": "Q4_0",
                       "attn_output.weight": "BF16", "ffn_gate.weight": "F32",
                       "ffn_up.weight": "Q5_0"})
    # blockc's own recipe: llama.cpp's Q4_K_M of a model whose rows are not whole K blocks
    cfg = GPTConfig(vocab=96, norm="rms", activation="swiglu", positions="rope",
                    tie_weights=False, qkv_bias=False, out_bias=False, mlp_bias=False, **SMOL)
    src = GPT.random(cfg, seed=10)
    src.save_gguf(d / "q4_k_m.gguf", dtype="Q4_K_M")
    return d


def _file_types(m, arch="llama"):
    types = {}
    for theirs, ours, _, _ in gm.names(arch, m.config):
        if m.layout[ours].packed:
            types.setdefault(ours, []).append(m.gguf_types[theirs])
    return types


@pytest.mark.parametrize("name", ["mixed.gguf", "q4_k_m.gguf"])
def test_mixed_file_held_in_its_formats(gguf_files, name, threads):
    pytest.importorskip("gguf")
    m = GPT.from_pretrained(gguf_files / name, dtype="exact")  # None: DEFAULT_FORMAT's
    types = _file_types(m)
    assert m.dtypes == {ours: native(t) for ours, t in types.items()}
    assert m.dtype == MIXED
    if name == "mixed.gguf":  # what each matrix is, spelled out
        d = m.dtypes
        assert d["token.weight"] == "q8_0" and d["head.weight"] == "q4_0"
        assert d["blocks.0.attn.qkv.weight"] == "q4_0" and d["blocks.0.attn.proj.weight"] == "bfloat16"
        assert d["blocks.0.gate.weight"] == "float32" and d["blocks.0.down.weight"] == "q8_0"
        assert d["blocks.1.up.weight"] == native(["Q5_0"])  # q8_0 until q5_0 exists
    else:  # Q5_0 (K fallback) and Q8_0 (Q6_K fallback) q/k/v: one exact q8_0 matrix
        assert {"Q5_0", "Q8_0"} <= set(sum(types.values(), []))
        assert m.dtypes["blocks.0.attn.qkv.weight"] == native(types["blocks.0.attn.qkv.weight"])
    # every tensor the file's, bit for bit
    assert_dequantised(m, gguf_files / name, "llama")
    # the float32 model of the same file computes the same bits; threads, cache, batch
    f = GPT.from_pretrained(gguf_files / name, dtype="float32")
    assert f.dtype == "float32" and m.nbytes < f.nbytes
    ids = np.random.default_rng(11).integers(0, m.config.vocab, (2, 10))
    threads(1)
    one = m(ids)
    threads(2)
    np.testing.assert_array_equal(m(ids), one)
    np.testing.assert_array_equal(f(ids), one)
    np.testing.assert_array_equal(m(ids[1:]), one[1:])
    cache = m.new_cache(2, 10)
    steps = [m(ids[:, :4], cache=cache)] + [m(ids[:, t:t + 1], cache=cache) for t in range(4, 10)]
    np.testing.assert_array_equal(np.concatenate(steps, axis=1), one)


def test_requantise_on_request_and_save(gguf_files, tmp_path):
    m = GPT.from_pretrained(gguf_files / "mixed.gguf")
    q = GPT.from_pretrained(gguf_files / "mixed.gguf", dtype="q8_0")
    assert q.dtype == "q8_0" and set(q.dtypes.values()) == {"q8_0"}
    # save_pretrained / save_gguf of a mixed model: its weights, exactly
    m.save_pretrained(tmp_path / "hf")
    back = GPT.from_pretrained(tmp_path / "hf")
    m.save_gguf(tmp_path / "f32.gguf", dtype="F32")
    back2 = GPT.from_pretrained(tmp_path / "f32.gguf")
    for name in m.layout:
        assert np.array_equal(back.read_tensor(name), m.read_tensor(name)), name
        assert np.array_equal(back2.read_tensor(name), m.read_tensor(name)), name


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mixed.gguf", "q4_k_m.gguf"])
def test_mixed_file_logits_match_transformers(gguf_files, name):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    transformers.logging.set_verbosity_error()
    m = GPT.from_pretrained(gguf_files / name, dtype="exact")
    assert m.dtype == MIXED
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(gguf_files), gguf_file=name,
                                                           dtype=torch.float32)
    ids = np.random.default_rng(12).integers(0, m.config.vocab, (2, 20))
    with torch.no_grad():
        theirs = hf(torch.tensor(ids)).logits.numpy()
    err = np.abs(m(ids) - theirs).max() / np.abs(theirs).max()
    assert err < 5e-6, (name, err)


def test_a_format_that_would_store_other_weights_gives_way_to_the_next(gguf_files, monkeypatch):
    """A format EXACT lists whose packing of the dequantised weights does not give them
    back bit for bit (bfloat16 for Q8_0's d * q: more than 8 significant bits) is checked
    tensor by tensor and replaced by the next (q8_0, the file's blocks)."""
    monkeypatch.setitem(gm.EXACT, "Q8_0", ("bfloat16", "q8_0"))
    m = GPT.from_pretrained(gguf_files / "mixed.gguf", dtype="exact")
    assert m.dtypes["blocks.0.down.weight"] == "q8_0" and m.dtypes["token.weight"] == "q8_0"
    ref = GPT.from_pretrained(gguf_files / "mixed.gguf", dtype="float32")
    for name in m.layout:
        assert np.array_equal(m.read_tensor(name).view(np.uint32),
                              ref.read_tensor(name).view(np.uint32)), name


def test_q4_k_matrices_in_a_mixed_model():
    """q4_k beside other formats (a model 256 wide): the float32 model of its weights gives
    the same bits; a q4_k matrix whose rows are not whole super-blocks refused by name."""
    cfg = GPTConfig(vocab=96, context=16, width=256, heads=4, kv_heads=2, layers=1, d_ff=320,
                    norm="rms", activation="swiglu", positions="rope", tie_weights=False,
                    qkv_bias=False, out_bias=False, mlp_bias=False, eps=1e-5)
    m = GPT.random(cfg, seed=3, dtypes={"blocks.0.up.weight": "q4_k", "token.weight": "q4_k",
                                        "blocks.0.attn.qkv.weight": "q8_0"})
    assert m.dtypes["blocks.0.up.weight"] == "q4_k" and m.dtype == MIXED
    f = m.astype("float32")
    ids = np.random.default_rng(2).integers(0, cfg.vocab, (2, 9))
    assert np.array_equal(m(ids), f(ids))
    with pytest.raises(BlockcValueError, match=r"'blocks.0.down.weight' \(256, 320\) has 320"):
        GPT(cfg, dtypes={"blocks.0.down.weight": "q4_k"})
