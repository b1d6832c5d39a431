"""GPT.from_pretrained("model.gguf") and save_gguf: random-weight Llama (MHA/GQA/MQA, tied
and untied), Qwen2 and GPT-2 files written by the gguf package in every supported type and
mixed like Q4_K_M. Peers: the gguf package's dequantize (the weights, bit for bit) and
transformers' from_pretrained(dir, gguf_file=...) (the logits, float32 tolerance, and greedy
tokens), both reading the same file."""
import os

import numpy as np
import pytest

import blockc
from blockc import BlockcValueError, GPT, GPTConfig, ops
from blockc import gguf as bg
from blockc.checkpoint import gguf as gm
from blockc.checkpoint import gguf_tensors as gt
from blockc.reference import ggml
from support.gguf_files import assert_dequantised, native, permute_qk, write_model

gguf = pytest.importorskip("gguf")
gq = pytest.importorskip("gguf.quants")


Q4_K_M = {"attn_v.weight": "Q6_K", "ffn_down.weight": "Q6_K", "output.weight": "Q6_K"}

CASES = {  # name -> (arch, write_model options)
    "llama-gqa": ("llama", dict(kv_heads=2)),
    "llama-mqa-tied": ("llama", dict(kv_heads=1, tied=True)),
    "llama-mha-q8_0": ("llama", dict(default_type="Q8_0")),
    "llama-q4_k_m": ("llama", dict(width=256, d_ff=512, kv_heads=2, default_type="Q4_K",
                                   types=Q4_K_M)),
    "llama-bf16": ("llama", dict(default_type="BF16", kv_heads=2)),
    "llama-f16": ("llama", dict(default_type="F16", kv_heads=2)),
    "llama-q5_0": ("llama", dict(default_type="Q5_0", kv_heads=1)),
    "qwen2-tied": ("qwen2", dict(kv_heads=2, tied=True, theta=1e6)),
    "qwen2-q5": ("qwen2", dict(kv_heads=2, default_type="Q5_0", types={"ffn_down.weight": "Q5_1",
                                                                       "attn_q.weight": "Q4_1"})),
    "gpt2": ("gpt2", dict(context=1024, d_ff=256)),
    "gpt2-q4_0-tied": ("gpt2", dict(context=1024, d_ff=256, default_type="Q4_0", tied=True)),
    "llama-q4_k": ("llama", dict(width=256, d_ff=512, kv_heads=2, default_type="Q4_K")),
    "llama-q6_k": ("llama", dict(width=256, d_ff=512, kv_heads=2, default_type="Q6_K")),
    "llama-q5_k": ("llama", dict(width=256, d_ff=512, kv_heads=2, default_type="Q5_K")),
    "llama-iq4": ("llama", dict(width=256, d_ff=512, kv_heads=2, default_type="IQ4_XS",
                                types={"ffn_down.weight": "IQ4_NL", "token_embd.weight": "IQ4_NL",
                                       "attn_v.weight": "Q8_0"})),
    # llama.cpp's Q3_K_M and Q2_K mixes (their q/k/v split by type: Q3_K/Q2_K q and k)
    "llama-q3_k_m": ("llama", dict(width=256, d_ff=512, kv_heads=2, default_type="Q3_K",
                                   types={"attn_v.weight": "Q5_K", "ffn_down.weight": "Q4_K",
                                          "output.weight": "Q6_K"})),
    "llama-q2_k": ("llama", dict(width=256, d_ff=512, kv_heads=2, default_type="Q2_K",
                                 types={"attn_v.weight": "Q3_K", "ffn_down.weight": "Q3_K",
                                        "output.weight": "Q6_K", "token_embd.weight": "Q2_K"})),
    "llama-k-quants": ("llama", dict(width=256, d_ff=256, default_type="Q5_K",
                                     types={"ffn_up.weight": "Q6_K", "attn_k.weight": "Q4_K",
                                            "ffn_gate.weight": "F16"})),
    # every native format in one model, and a fused qkv of Q8_0/Q4_0/Q5_0 parts
    "llama-mixed-native": ("llama", dict(kv_heads=2, d_ff=256, default_type="Q8_0",
                                         types={"attn_k.weight": "Q4_0", "attn_v.weight": "Q5_0",
                                                "attn_output.weight": "Q4_0",
                                                "ffn_up.weight": "BF16", "ffn_gate.weight": "F32",
                                                "output.weight": "Q4_0",
                                                "blk.1.ffn_down.weight": "Q4_K"})),
}



@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("gguf_models")
    out = {}
    for name, (arch, kw) in CASES.items():
        sd = write_model(d / f"{name}.gguf", arch, **kw)
        out[name] = (d, f"{name}.gguf", arch, kw, sd)
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_weights_are_the_dequantised_tensors_bit_for_bit(files, case):
    """Every blockc tensor equals gguf.quants.dequantize of the file's tensor (the Llama q/k
    rows put back in transformers' order), bit for bit."""
    d, name, arch, kw, _ = files[case]
    m = GPT.from_pretrained(d / name, dtype="exact")  # the exact path
    assert_dequantised(m, d / name, arch)
    peer = gguf.GGUFReader(str(d / name))
    # each matrix in the native format of its file type(s)
    types = {}
    for theirs, ours, rows, heads in gm.names(arch, m.config):
        if m.layout[ours].packed:
            types.setdefault(ours, []).append(m.gguf_types[theirs])
    want = {ours: native(t) for ours, t in types.items()}
    assert m.dtypes == want
    assert m.dtype == (want["token.weight"] if len(set(want.values())) == 1 else "mixed")
    assert m.gguf_types["blk.0.ffn_down.weight"] == [t.tensor_type.name for t in peer.tensors
                                                     if t.name == "blk.0.ffn_down.weight"][0]


def test_unpermute_undoes_llama_cpp_permutation():
    rng = np.random.default_rng(0)
    for heads, hd in ((4, 16), (1, 8), (3, 2)):
        w = rng.standard_normal((heads * hd, 5)).astype(np.float32)
        assert np.array_equal(gm.unpermute(permute_qk(w, heads), heads), w)
        assert np.array_equal(gm.permute(w, heads), permute_qk(w, heads))
        b = rng.standard_normal(heads * hd).astype(np.float32)
        assert np.array_equal(gm.unpermute(permute_qk(b, heads), heads), b)
    # row 2i of a head is rotary pair element i, row 2i + 1 element i + hd/2
    w = np.arange(8, dtype=np.float32)[:, None]
    assert gm.permute(w, 1)[:, 0].tolist() == [0, 4, 1, 5, 2, 6, 3, 7]


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_logits_and_greedy_tokens_match_transformers(files, case):
    """blockc computes with exactly the dequantised weights transformers computes with:
    logits within float32 tolerance, the same greedy tokens."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    transformers.logging.set_verbosity_error()
    d, name, arch, kw, _ = files[case]
    m = GPT.from_pretrained(d / name, dtype="exact")
    if m.dtype == "bfloat16":  # transformers dequantises BF16 to float32: the same values
        pass
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(d), gguf_file=name,
                                                           dtype=torch.float32)
    ids = np.random.default_rng(1).integers(0, m.config.vocab, (2, 24))
    ours = m(ids)
    with torch.no_grad():
        theirs = hf(torch.tensor(ids)).logits.numpy()
    err = np.abs(ours - theirs).max() / np.abs(theirs).max()
    assert err < 5e-6, (case, err)
    prompt = ids[:1, :6]
    got = m.generate(prompt, max_new_tokens=12, eos_token_id=())
    with torch.no_grad():
        want = hf.generate(torch.tensor(prompt), max_new_tokens=12, do_sample=False,
                           eos_token_id=None, pad_token_id=0).numpy()
    assert np.array_equal(np.asarray(got).reshape(-1)[-12:], want.reshape(-1)[-12:]), case


def test_special_ids_and_tokenizer_come_from_the_file(files):
    d, name, *_ = files["llama-gqa"]
    m = GPT.from_pretrained(d / name)
    assert m.special_ids == {"bos_token_id": 1, "eos_token_id": 2}
    # generate, chat and serve stop where the file says (a GGUF has no generation_config.json)
    assert m.generation_config.eos_token_id == 2 and m.generation_config.bos_token_id == 1
    tok = blockc.Tokenizer.from_pretrained(d / name)
    out = m.generate(tok.encode("The quick")[None], max_new_tokens=4)
    assert len(np.asarray(out).reshape(-1)) >= 4


def test_the_k_quant_mixes_follow_llama_cpp_for_the_output_and_a_tied_embedding():
    """llama.cpp's rule: the output, or the token embedding of a model without one, is
    Q6_K in every K mix, Q8_0 when its rows are not whole 256-blocks; an untied model's
    embedding is the mix's base type (its fallback for such rows)."""
    for mix in ("Q4_K_M", "Q5_K_M", "Q4_K_S", "Q5_K_S"):
        base = mix[:4]
        assert gm.recipe(mix, "output.weight", 12, 768) == "Q6_K"
        assert gm.recipe(mix, "output.weight", 30, 576) == "Q8_0"
        assert gm.recipe(mix, "token_embd.weight", 12, 768, tied=True) == "Q6_K"
        assert gm.recipe(mix, "token_embd.weight", 30, 576, tied=True) == "Q8_0"
        assert gm.recipe(mix, "token_embd.weight", 12, 768, tied=False) == base
        assert gm.recipe(mix, "token_embd.weight", 30, 576, tied=False) == \
            {"Q4_K": "Q5_0", "Q5_K": "Q5_1"}[base]
    assert gm.recipe("Q4_0", "token_embd.weight", 12, 768, tied=True) == "Q4_0"


@pytest.mark.parametrize("dtype", ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                                   "Q4_K", "Q5_K", "Q6_K", "Q4_K_M"])
def test_save_gguf_round_trip(files, tmp_path, dtype):
    """save_gguf -> the gguf package reads the same tensors (blockc's weights quantised by
    the oracle, in llama.cpp's names and q/k order; a matrix blockc holds in the type
    itself, q4_k or q6_k here, its very blocks: the source file's) -> blockc reads the same bits
    back."""
    d, name, arch, *_ = files["llama-q4_k_m"]
    m = GPT.from_pretrained(d / name)
    src = {t.name: t for t in gguf.GGUFReader(str(d / name)).tensors}
    p = tmp_path / "out.gguf"
    m.save_gguf(p, dtype=dtype.lower() if dtype == "Q4_K_M" else dtype)
    peer = gguf.GGUFReader(str(p))
    got = {t.name: t for t in peer.tensors}
    assert bytes(peer.fields["general.architecture"].parts[-1]).decode() == "llama"
    for theirs, ours, rows, heads in gm.names(arch, m.config):
        w = m.read_tensor(ours)
        if rows is not None:
            w = w[rows[0]:rows[1]]
        if heads is not None:
            w = gm.permute(w, heads)
        t = got[theirs]
        want_type = gm.recipe(dtype, theirs, m.config.layers, w.shape[-1], m.config.tie_weights) \
            if m.layout[ours].packed else "F32"
        assert t.tensor_type.name == want_type, theirs
        blob = ggml.quantise(w, want_type)
        fm = m.dtypes.get(ours, "")
        if isinstance(fm, tuple):  # a split q/k/v: the format of these rows
            fm = fm[[(p.row0, p.row1) for p in m.layout[ours].parts].index(tuple(rows))]
        if want_type in ("Q4_K", "Q6_K") and fm in (want_type.lower(), want_type.lower() + "i"):
            blob = np.asarray(src[theirs].data).reshape(blob.shape)
        assert np.array_equal(np.asarray(t.data).view(np.uint8).reshape(blob.shape), blob), theirs
    back = GPT.from_pretrained(p, dtype="exact")  # the exact path (None: DEFAULT_FORMAT's)
    if dtype in ("F32",):  # the model's weights exactly (its q4_k matrices dequantised)
        assert np.array_equal(back.params, m.astype("float32").params)
    types = {}
    for theirs, ours, rows, heads in gm.names(arch, m.config):
        if m.layout[ours].packed:
            types.setdefault(ours, []).append(got[theirs].tensor_type.name)
    assert back.dtypes == {ours: native(t) for ours, t in types.items()}
    f32 = GPT.from_pretrained(p, dtype="float32")  # the file's weights, dequantised
    for ours in m.layout:
        assert np.array_equal(back.read_tensor(ours).view(np.uint32),
                              f32.read_tensor(ours).view(np.uint32)), ours
    assert blockc.Tokenizer.from_pretrained(p).encode("hello world").tolist() == \
        blockc.Tokenizer.from_pretrained(d / name).encode("hello world").tolist()
    if dtype == "Q4_K_M":
        assert got["output.weight"].tensor_type.name == "Q6_K"
        assert got["blk.1.attn_v.weight"].tensor_type.name == "Q6_K"  # use_more_bits(1, 2)
        assert got["blk.0.attn_v.weight"].tensor_type.name == "Q4_K"


def test_blockc_to_gguf_to_blockc_same_bits(tmp_path):
    """A model blockc made (GPT-2 and Llama shapes, tied and not): F32 GGUF and back, the
    same parameter bytes; Q8_0 GGUF of a q8_0 model and back, the same bytes too."""
    for cfg in (GPTConfig(vocab=96, context=32, width=64, heads=4, layers=2),
                GPTConfig.preset("llama-7b", vocab=96, context=32, width=64, heads=4, layers=2,
                                 d_ff=96, kv_heads=2),
                GPTConfig.preset("qwen2-0.5b", vocab=96, context=32, width=64, heads=4,
                                 layers=1, d_ff=64, kv_heads=1)):
        m = GPT.random(cfg, seed=3)
        m.save_gguf(tmp_path / "a.gguf")
        back = GPT.from_pretrained(tmp_path / "a.gguf")
        assert back.config == cfg and np.array_equal(back.params, m.params)
        q = m.astype("q8_0")
        q.save_gguf(tmp_path / "b.gguf", dtype="Q8_0")
        qb = GPT.from_pretrained(tmp_path / "b.gguf", dtype="exact")
        assert qb.dtype == "q8_0" and np.array_equal(qb.params, q.params)


def test_refusals_by_name(tmp_path):
    p = tmp_path / "m.gguf"
    for extra, match in (({"llama.rope.scaling.type": "yarn"}, "rope.scaling.type='yarn'"),
                         ({"llama.rope.scaling.factor": 4.0}, "rope.scaling.factor"),
                         # experts declared, none in the file (issue 50 reads them)
                         ({"llama.expert_count": 8, "llama.expert_used_count": 2},
                          "'blk.0.ffn_gate_inp.weight' is missing"),
                         ({"llama.rope.dimension_count": 8}, "part of each head"),
                         ({"llama.logit_scale": 0.5}, "scaled output logits")):
        write_model(p, "llama", extra=extra)
        with pytest.raises(BlockcValueError, match=match) as e:
            GPT.from_pretrained(p)
        assert str(p) in str(e.value)
    write_model(p, "llama", extra={"llama.attention.sliding_window": 64})  # as wide: none
    assert GPT.from_pretrained(p).config.sliding_window is None
    write_model(p, "llama", extra={"llama.attention.sliding_window": 16})  # every layer's
    assert GPT.from_pretrained(p).config.sliding_window == 16
    write_model(p, "llama", drop=("blk.1.ffn_up.weight",))
    with pytest.raises(BlockcValueError, match="'blk.1.ffn_up.weight' is missing"):
        GPT.from_pretrained(p)
    bg.write(p, {"general.architecture": "falcon"}, [])
    with pytest.raises(BlockcValueError, match="'falcon' is not one blockc runs"):
        GPT.from_pretrained(p)
    # a tensor of a type blockc does not read (IQ2_XXS), by name
    write_model(p, "llama", width=256, d_ff=256)
    g = bg.read(p)
    tensors = [(t.name, t.type, t.shape, t.data) for t in g.tensors.values()]
    tensors = [(n, "IQ2_XXS", s, np.zeros((s[0], 66), np.uint8)) if n == "blk.0.ffn_up.weight"
               else (n, ty, s, dat) for n, ty, s, dat in tensors]
    bg.write(tmp_path / "q2.gguf", dict(g.fields), tensors)
    with pytest.raises(BlockcValueError, match="'blk.0.ffn_up.weight' has type IQ2_XXS"):
        GPT.from_pretrained(tmp_path / "q2.gguf")
    write_model(p, "llama", extra={"llama.rope.scaling.type": "none"})  # neutral values load
    GPT.from_pretrained(p)


def test_save_gguf_refuses(files, tmp_path):
    d, name, *_ = files["llama-gqa"]
    m = GPT.from_pretrained(d / name)
    with pytest.raises(BlockcValueError, match="dtype must be one of"):
        m.save_gguf(tmp_path / "x.gguf", dtype="IQ2_XXS")
    assert not (tmp_path / "x.gguf").exists()


def test_cli_convert_both_ways_and_generate(files, tmp_path, capsys):
    """blockc convert FILE.gguf DIR writes a transformers directory (tokenizer.json too);
    blockc convert DIR OUT.gguf --type Q8_0 a file of the same weights quantised; blockc
    generate --model FILE.gguf runs it."""
    from blockc.cli import main
    d, name, *_ = files["llama-gqa"]
    src = d / name
    out_dir = tmp_path / "hf"
    assert main(["convert", str(src), str(out_dir)]) == 0
    m = GPT.from_pretrained(src, dtype="exact")
    back = GPT.from_pretrained(out_dir)
    assert np.array_equal(back.params, m.params)
    text = "naïve café 🙂 1234"
    want = blockc.Tokenizer.from_pretrained(src).encode(text).tolist()
    assert blockc.Tokenizer.from_pretrained(out_dir).encode(text).tolist() == want
    q = tmp_path / "q.gguf"
    assert main(["convert", str(out_dir), str(q), "--type", "Q8_0"]) == 0
    mq = GPT.from_pretrained(q, dtype="exact")
    assert mq.dtype == "q8_0" and np.array_equal(mq.params, m.astype("q8_0").params)
    assert blockc.Tokenizer.from_pretrained(q).encode(text).tolist() == want
    capsys.readouterr()
    assert main(["generate", "--temperature", "0", "--model", str(q), "--prompt", "The quick", "--max-new-tokens", "3"]) == 0
    assert capsys.readouterr().out.strip()  # the three new tokens, streamed


@pytest.mark.parametrize("dtype, typ", [("q4_0", "Q4_0"), ("q5_0", "Q5_0"), ("q8_0", "Q8_0"),
                                        ("float16", "F16"), ("q4_1", "Q4_1"), ("q5_1", "Q5_1")])
def test_packed_blocks_are_gguf_quants_blocks(dtype, typ):
    """blockc's C quantiser (m.astype from float32) stores, matrix by matrix, the very
    blocks gguf.quants.quantize makes of the same weights (rearranged into panels of 16
    rows: ops.pack_ggml, and back), corner cases included: near-ties of the rounding, an all-zero
    block, blocks whose scale underflows a half, rows that are not whole panels."""
    cfg = GPTConfig.preset("llama-7b", vocab=97, context=32, width=64, heads=4, layers=1,
                           d_ff=96, kv_heads=2)
    m = GPT.random(cfg, seed=3)
    w = m.read_tensor("blocks.0.up.weight") * np.float32(25)
    w[0, :32] = np.arange(32) - 15.5   # x / d + 16.5 lands on and beside integers
    w[1, :32] = np.arange(32) * np.float32(-0.5)
    w[2, :32] = 0.0
    w[3, :32] *= np.float32(1e-30)
    w[4, 32:64] = np.float32(1.0) + np.arange(32, dtype=np.float32) * np.float32(2 ** -11)
    m.write_tensor("blocks.0.up.weight", w)
    q = m.astype(dtype)
    gt = getattr(gguf.GGMLQuantizationType, typ)
    for name, t in q.layout.items():
        if not t.packed:
            continue
        a = m.read_tensor(name)
        blocks = np.asarray(gq.quantize(a, gt)).view(np.uint8).reshape(a.shape[0], -1)
        got = q.params[t.offset:t.offset + t.nbytes].view(np.uint8)
        assert np.array_equal(got, ops.pack_ggml(blocks, dtype, t.shape)), name
        assert np.array_equal(ops.unpack_ggml(got, dtype, t.shape), blocks), name


@pytest.mark.parametrize("dtype, typ, ratio", [("q4_0", "Q4_0", 5), ("q5_0", "Q5_0", 4),
                                               ("float16", "F16", 1.9), ("q4_1", "Q4_1", 4.5),
                                               ("q5_1", "Q5_1", 3.5)])
def test_native_kernels(tmp_path, dtype, typ, ratio):
    """blockc's q4_0, q5_0 and float16 (the packed weights streamed by the decode kernel, no
    float copy): their blocks are gguf.quants.quantize's, bit for bit; the model computes
    what float32 does with the dequantised weights, on every instruction set; the same
    bits at 1 and 2 threads and through the cache; a GGUF file of the type loads in the
    format with the same bytes."""
    from blockc import get_isa, get_num_threads, set_isa, set_num_threads
    cfg = GPTConfig.preset("llama-7b", vocab=96, context=64, width=128, heads=4, layers=2,
                           d_ff=160, kv_heads=2)
    m = GPT.random(cfg, seed=5)
    q = m.astype(dtype)
    assert q.dtype == dtype and q.nbytes < m.nbytes / ratio
    gt = getattr(gguf.GGMLQuantizationType, typ)
    for name, t in q.layout.items():
        if t.packed:
            w = m.read_tensor(name)
            ref = gq.dequantize(gq.quantize(w, gt), gt)
            assert np.array_equal(q.read_tensor(name).view(np.uint32),
                                  np.asarray(ref, np.float32).view(np.uint32)), name
    f = GPT.from_state_dict(q.state_dict(), cfg)  # float32, the same (dequantised) weights
    ids = np.random.default_rng(0).integers(0, cfg.vocab, (2, 40))
    want = f(ids)
    isa0, th0 = get_isa(), get_num_threads()
    try:
        for isa in ("generic", "avx2", "avx512"):
            try:
                set_isa(isa)
            except (ValueError, RuntimeError):
                continue
            got = q(ids)
            assert np.abs(got - want).max() <= 2e-5 * np.abs(want).max(), isa
        set_isa(isa0)
        set_num_threads(1)
        one = q(ids)
        set_num_threads(2)
        assert np.array_equal(q(ids), one)
        cache = q.new_cache(2, 40)
        steps = [q(ids[:, :30], cache=cache)[:, -1]]
        for i in range(30, 40):
            steps.append(q(ids[:, i:i + 1], cache=cache)[:, -1])
        assert np.abs(steps[-1] - one[:, -1]).max() <= 2e-5 * np.abs(one).max()
    finally:
        set_isa(isa0)
        set_num_threads(th0)
    q.save_gguf(tmp_path / "q.gguf", dtype=typ)
    back = GPT.from_pretrained(tmp_path / "q.gguf", dtype="exact")
    assert back.dtype == dtype and np.array_equal(back.params, q.params)
    peer = {t.name: t for t in gguf.GGUFReader(str(tmp_path / "q.gguf")).tensors}
    assert peer["blk.0.attn_q.weight"].tensor_type.name == peer["output.weight"].tensor_type.name == typ
    # the file holds the model's very blocks (the gguf package quantises its weights to them)
    w = q.read_tensor("blocks.1.down.weight")
    assert np.array_equal(np.asarray(peer["blk.1.ffn_down.weight"].data).view(np.uint8).ravel(),
                          np.asarray(gq.quantize(w, gt)).view(np.uint8).ravel())


@pytest.mark.parametrize("fmt", ["q4_k", "q5_k", "q6_k"])
def test_k_quant_native_kernels(files, tmp_path, fmt):
    """An all-Q4_K (all-Q6_K) file (the gguf package writes the oracle's blocks) loads as
    q4_k (q6_k) with its very blocks (the panels give back the file's bytes; no float
    copy); blockc's C quantiser finds the same blocks from the float weights
    (astype(fmt)); the model computes what float32 does with the dequantised weights on
    every instruction set, the same bits at 1 and 2 threads, for a row alone, through the
    cache; save_gguf writes the file's bytes again."""
    from blockc import get_isa, get_num_threads, set_isa, set_num_threads
    typ = fmt.upper()
    d, name, arch, kw, _ = files[f"llama-{fmt}"]
    q = GPT.from_pretrained(d / name, dtype="exact")
    assert q.dtype == fmt and q.nbytes < GPT.random(q.config).nbytes / {"q4_k": 6, "q5_k": 5, "q6_k": 3.5}[fmt]
    peer = {t.name: t for t in gguf.GGUFReader(str(d / name)).tensors}
    cfg = q.config
    for theirs, ours, rows, heads in gm.names(arch, cfg):
        tl = q.layout[ours]
        if not tl.packed:
            continue
        raw = ops.unpack_ggml(q.params[tl.offset:tl.offset + tl.nbytes], fmt, tl.shape)
        if rows is not None:
            raw = raw[rows[0]:rows[1]]
        if heads is not None:
            raw = gm.permute(raw, heads)
        assert np.array_equal(raw, np.asarray(peer[theirs].data).reshape(raw.shape)), theirs
    f = GPT.from_state_dict(q.state_dict(), cfg)  # float32, the same (dequantised) weights
    m = GPT.random(cfg, seed=2)  # the C quantiser against the oracle's blocks
    qm = m.astype(fmt)
    for ours in ("blocks.0.attn.qkv.weight", "blocks.1.down.weight", "token.weight"):
        tl = qm.layout[ours]
        got = ops.unpack_ggml(qm.params[tl.offset:tl.offset + tl.nbytes], fmt, tl.shape)
        assert np.array_equal(got, ggml.quantise(m.read_tensor(ours), typ).reshape(got.shape))
    ids = np.random.default_rng(0).integers(0, cfg.vocab, (2, 40))
    want = f(ids)
    isa0, th0 = get_isa(), get_num_threads()
    try:
        by_isa = {}
        for isa in ("generic", "avx2", "avx512"):
            try:
                set_isa(isa)
            except (ValueError, RuntimeError):
                continue
            got = by_isa[isa] = q(ids)
            assert np.abs(got - want).max() <= 2e-5 * np.abs(want).max(), isa
        if "avx2" in by_isa and "avx512" in by_isa:  # the same FMA chain: the same bits
            assert np.array_equal(by_isa["avx2"], by_isa["avx512"])
        set_isa(isa0)
        set_num_threads(1)
        one = q(ids)
        set_num_threads(2)
        assert np.array_equal(q(ids), one)
        assert np.array_equal(q(ids[1:]), one[1:])
        cache = q.new_cache(2, 40)
        steps = [q(ids[:, :30], cache=cache)[:, -1:]]
        for i in range(30, 40):
            steps.append(q(ids[:, i:i + 1], cache=cache))
        assert np.array_equal(np.concatenate(steps, axis=1), one[:, 29:])
    finally:
        set_isa(isa0)
        set_num_threads(th0)
    q.save_gguf(tmp_path / "k.gguf", dtype=typ)
    back = {t.name: t for t in gguf.GGUFReader(str(tmp_path / "k.gguf")).tensors}
    for n, t in peer.items():
        assert back[n].tensor_type == t.tensor_type and np.array_equal(back[n].data, t.data), n
    assert np.array_equal(GPT.from_pretrained(tmp_path / "k.gguf", dtype="exact").params, q.params)


@pytest.mark.parametrize("typ", ["Q8_0", "Q4_0", "Q5_0"])
def test_a_block_scale_that_is_not_a_number_is_refused_by_name(tmp_path, typ):
    """A Q8_0, Q4_0 or Q5_0 block whose half scale is infinite or NaN: the file is refused,
    naming the tensor, the row and the block (its weights are not numbers; the kernels read a
    block as fma(f, 2^e d, -(2^e + z) d), exact for finite scales only). The same file with
    the scale finite loads."""
    p = tmp_path / "m.gguf"
    write_model(p, "llama", kv_heads=2, default_type=typ)
    g = bg.read(p)
    bb = {"Q8_0": 34, "Q4_0": 18, "Q5_0": 22}[typ]
    for half, ok in ((0x7C00, False), (0xFE00, False), (0xFC00, False), (0x7BFF, True)):
        tensors = []
        for t in g.tensors.values():
            data = np.array(t.data, np.uint8)  # a copy: (rows, row bytes)
            if t.name == "blk.1.ffn_up.weight":
                data.reshape(data.shape[0], -1, bb)[2, 1, :2] = np.frombuffer(
                    np.uint16(half).tobytes(), np.uint8)
            tensors.append((t.name, t.type, t.shape, data))
        bg.write(tmp_path / "bad.gguf", dict(g.fields), tensors)
        if ok:
            GPT.from_pretrained(tmp_path / "bad.gguf")
            continue
        with pytest.raises(BlockcValueError, match=r"'blk.1.ffn_up.weight': row 2, block 1 has "
                                                   "an infinite or NaN scale"):
            GPT.from_pretrained(tmp_path / "bad.gguf")


def _integer(types):
    """The format dtype="integer" holds a matrix of these file types in (spelled here,
    apart from blockc.checkpoint.gguf's table): the type's integer format, Q4_0/Q5_0/Q8_0
    parts mixed as q8_0i, anything else as dtype=None does."""
    own = {"Q8_0": "q8_0i", "Q4_0": "q4_0i", "Q5_0": "q5_0i", "Q4_K": "q4_ki", "Q6_K": "q6_ki",
           "Q5_K": "q5_ki", "IQ4_NL": "iq4_nli", "IQ4_XS": "iq4_xsi", "Q4_1": "q4_1i",
           "Q5_1": "q5_1i", "Q2_K": "q2_ki", "Q3_K": "q3_ki"}
    if len(set(types)) == 1 and types[0] in own:
        return own[types[0]]
    if set(types) <= {"Q4_0", "Q5_0", "Q8_0"}:
        return "q8_0i"
    if len(types) == 3 and all(t in own for t in types):  # q, k, v split: each its own
        return tuple(own[t] for t in types)
    return native(types)


@pytest.mark.parametrize("case", ["llama-q4_k_m", "llama-q5_0", "llama-mixed-native",
                                  "llama-q4_k", "llama-q6_k", "gpt2-q4_0-tied", "llama-mha-q8_0",
                                  "llama-q5_k", "llama-iq4", "llama-k-quants", "qwen2-q5",
                                  "llama-q3_k_m", "llama-q2_k"])
def test_integer_dtype_holds_each_matrix_in_its_types_integer_format(files, tmp_path, case):
    """from_pretrained(file, dtype="integer"): each matrix in the integer format of its
    file type (8-bit activations, as llama.cpp multiplies them), holding the dequantised
    tensors bit for bit (the same weights as dtype=None); the logits near those of the
    exact activations (8-bit x: about 1e-2 of each product); a Q4_K file saves back
    byte for byte, and a Q6_K file (q4_ki's and q6_ki's blocks read back, not quantised
    again); a directory, which
    has no blocks, is refused by name."""
    d, name, arch, kw, _ = files[case]
    plain = GPT.from_pretrained(d / name, dtype="exact")
    m = GPT.from_pretrained(d / name, dtype="integer")
    assert_dequantised(m, d / name, arch)
    types = {}
    for theirs, ours, rows, heads in gm.names(arch, m.config):
        if m.layout[ours].packed:
            types.setdefault(ours, []).append(m.gguf_types[theirs])
    assert m.dtypes == {ours: _integer(t) for ours, t in types.items()}
    assert any(f.endswith("i") for f in m.dtypes.values())
    ids = np.random.default_rng(3).integers(0, m.config.vocab, (2, 24))
    want, got = plain(ids), m(ids)
    rel = np.sqrt(np.mean((got - want) ** 2) / np.mean(want ** 2))
    assert 0 < rel < 5e-2, rel
    if case in ("llama-q4_k", "llama-q6_k"):
        m.save_gguf(tmp_path / "back.gguf", case[-4:].upper())
        peer = {t.name: t for t in gguf.GGUFReader(str(d / name)).tensors}
        back = {t.name: t for t in gguf.GGUFReader(str(tmp_path / "back.gguf")).tensors}
        for n, t in peer.items():
            assert back[n].tensor_type == t.tensor_type and np.array_equal(back[n].data, t.data), n
    m.save_pretrained(tmp_path / "hf")
    with pytest.raises(BlockcValueError, match="dtype 'integer' takes a GGUF file's blocks"):
        GPT.from_pretrained(tmp_path / "hf", dtype="integer")


def test_cli_generate_takes_the_integer_dtype(files, capsys):
    from blockc.cli import main
    d, name, *_ = files["llama-q4_k_m"]
    assert main(["generate", "--temperature", "0", "--model", str(d / name), "--dtype", "integer", "--prompt",
                 "The quick", "--max-new-tokens", "3"]) == 0
    assert capsys.readouterr().out.strip()


@pytest.mark.parametrize("case", ["llama-mha-q8_0", "gpt2-q4_0-tied", "llama-q4_k_m",
                                  "llama-q5_0", "llama-mixed-native"])
def test_matrices_read_piece_by_piece_are_the_bytes_read_whole(files, case, monkeypatch):
    """Loading reads a matrix whose format's panels are each their own bytes a few panels'
    rows at a time into one reused buffer (gguf_tensors.fill_blocks; dtype="exact": the integer
    formats interleave rows across panels and are read whole): with pieces of 16
    rows (many pieces, a short last panel, Q5_0 blocks converted piece by piece), the
    model's buffer is byte for byte the one reading each tensor whole gives."""
    d, name, *_ = files[case]
    monkeypatch.setattr(gt, "_PIECE", 1)
    used = []
    real = gt.fill_blocks
    monkeypatch.setattr(gm, "fill_blocks", lambda *a: used.append(a[1]) or real(*a))
    pieces = GPT.from_pretrained(d / name, dtype="exact")
    assert used  # the piecewise path ran
    monkeypatch.setattr(gm, "piecewise", lambda *a: False)
    whole = GPT.from_pretrained(d / name, dtype="exact")
    assert pieces.dtypes == whole.dtypes
    assert np.array_equal(pieces.params, whole.params)


def test_a_bad_scale_in_a_later_piece_names_its_row_and_a_file_cut_short_is_refused(
        tmp_path, monkeypatch):
    """Read piece by piece, a scale that is not a number is named by its row in the
    tensor (not in the piece); a file truncated after its header was read (another
    process rewriting it) is refused naming the tensor, never SIGBUS."""
    monkeypatch.setattr(gt, "_PIECE", 1)  # pieces of 16 rows
    p = tmp_path / "m.gguf"
    write_model(p, "llama", kv_heads=2, default_type="Q8_0")
    g = bg.read(p)
    tensors = []
    for t in g.tensors.values():
        data = np.array(t.data, np.uint8)
        if t.name == "blk.1.ffn_up.weight":
            assert data.shape[0] > 21
            data.reshape(data.shape[0], -1, 34)[21, 1, :2] = np.frombuffer(
                np.uint16(0x7C00).tobytes(), np.uint8)
        tensors.append((t.name, t.type, t.shape, data))
    bg.write(tmp_path / "bad.gguf", dict(g.fields), tensors)
    with pytest.raises(BlockcValueError, match=r"'blk.1.ffn_up.weight': row 21, block 1 has "):
        GPT.from_pretrained(tmp_path / "bad.gguf")
    q = tmp_path / "f32.gguf"  # an F32 matrix: its element counted in the tensor
    write_model(q, "llama", kv_heads=2, default_type="F32")
    h = bg.read(q)
    tensors = []
    for t in h.tensors.values():
        data = np.array(t.data, np.uint8)
        if t.name == "blk.1.ffn_up.weight":
            data.view(np.float32)[21, 3] = np.nan
            cols = data.view(np.float32).shape[1]
        tensors.append((t.name, t.type, t.shape, data))
    bg.write(tmp_path / "nan.gguf", dict(h.fields), tensors)
    with pytest.raises(BlockcValueError, match=rf"'blk.1.ffn_up.weight' holds an infinity or a "
                                               rf"NaN at element {21 * cols + 3} "):
        GPT.from_pretrained(tmp_path / "nan.gguf")
    last = max(g.tensors.values(), key=lambda t: t.offset)
    cut = g.data_offset + last.offset + 10
    read = gm.fmt.read

    def read_then_truncate(path):
        f = read(path)
        os.truncate(path, cut)
        return f
    monkeypatch.setattr(gm.fmt, "read", read_then_truncate)
    with pytest.raises(BlockcValueError, match=rf"tensor '{last.name}'.*truncated while blockc "
                                               "read it"):
        GPT.from_pretrained(p)
