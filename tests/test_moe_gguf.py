"""GGUF files of mixtures of experts (issue 50): Mixtral (llama.cpp's ``llama`` architecture
with ``llama.expert_count``) and Qwen3-MoE (``qwen3moe``), in llama.cpp's layout: the router
``blk.N.ffn_gate_inp.weight`` (experts, width) F32 and every expert of a kind stacked in one
3-D tensor, ``ffn_gate_exps``/``ffn_up_exps`` (experts, d_ff, width) and ``ffn_down_exps``
(experts, width, d_ff) in NumPy order.

Tiny random checkpoints made by transformers itself (tests/test_moe.py's), nothing
downloaded:

- saved by blockc as F32, Q8_0 and Q4_K_M: the gguf package's reader sees the 3-D stacks
  (shape, type), every weight reloaded equals the gguf package's dequantisation bit for
  bit, and the logits are transformers' (F32) or the oracle's on the file's weights;
- written independently with ``gguf.GGUFWriter`` the way llama.cpp's converter lays
  them out (Mixtral's q/k rows reordered, the experts ``np.stack``-ed): loads and
  computes transformers' logits and greedy tokens;
- malformed expert tensors (a stack of the wrong shape, one missing) and metadata
  llama.cpp would compute otherwise are refused by name."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
safetensors = pytest.importorskip("safetensors")
import safetensors.numpy  # noqa: E402
from gguf import quants  # noqa: E402

import blockc  # noqa: E402
from blockc import GPT  # noqa: E402
from blockc.reference.gpt import gpt_forward  # noqa: E402
from support.gguf_files import permute_qk  # noqa: E402
from test_moe import V, close, hf_logits, hf_model  # noqa: E402

ARCH = {"mixtral": "llama", "qwen3_moe_norm": "qwen3moe"}
KINDS = ("mixtral", "qwen3_moe_norm")


@pytest.fixture(scope="module", params=KINDS)
def pair(request, tmp_path_factory):
    hm = hf_model(request.param)
    d = tmp_path_factory.mktemp(request.param)
    hm.save_pretrained(d)
    return request.param, hm, d, GPT.from_pretrained(d)


def _ids(seed=1, n=40):
    return np.random.default_rng(seed).integers(0, V, size=(1, n))


def assert_experts_dequantised(g, path):
    """Every expert and router weight of ``g`` is, bit for bit, the gguf package's
    dequantisation of its slice of the file's stacked tensor (3-D, (experts, rows, cols))."""
    c = g.config
    peer = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
    for i in range(c.layers):
        r = peer[f"blk.{i}.ffn_gate_inp.weight"]
        assert r.tensor_type == gguf.GGMLQuantizationType.F32
        w = np.asarray(quants.dequantize(r.data, r.tensor_type), np.float32)
        assert w.shape == (c.n_experts, c.width)
        assert np.array_equal(g.read_tensor(f"blocks.{i}.router.weight").view(np.uint32),
                              w.view(np.uint32))
        for kind in ("gate", "up", "down"):
            t = peer[f"blk.{i}.ffn_{kind}_exps.weight"]
            want = (c.n_experts,) + ((c.width, c.d_ff_) if kind == "down" else (c.d_ff_, c.width))
            w = np.asarray(quants.dequantize(t.data, t.tensor_type), np.float32)
            assert w.shape == want, (t.name, w.shape)
            for e in range(c.n_experts):
                got = g.read_tensor(f"blocks.{i}.experts.{e}.{kind}.weight")
                assert np.array_equal(got.view(np.uint32), w[e].view(np.uint32)), (t.name, e)


def test_save_gguf_f32_q8_0_q4_k_m_reload_as_their_dequantised_weights(pair, tmp_path):
    kind, hm, _, m = pair
    ids = _ids()
    ref = hf_logits(hm, ids)
    for dtype in ("F32", "Q8_0", "Q4_K_M"):
        path = tmp_path / f"{dtype}.gguf"
        m.save_gguf(path, dtype)
        f = blockc.io.gguf.read(str(path))
        arch = ARCH[kind]
        assert f.get("general.architecture") == arch
        assert f.get(f"{arch}.expert_count") == m.config.n_experts
        assert f.get(f"{arch}.expert_used_count") == m.config.experts_used
        assert not any(".ffn_gate." in n or ".ffn_up." in n for n in f.tensors)
        assert all(len(f.tensors[n].shape) == 3 for n in f.tensors if "_exps." in n)
        # gate/up stacks have rows of width 32: whole Q8_0 blocks, and Q4_K_M's Q4_K falls
        # back to Q5_0 (rows not whole 256-blocks), as llama.cpp's quantiser does
        exps = {t.type for n, t in f.tensors.items() if "_gate_exps." in n or "_up_exps." in n}
        assert exps == {"F32": {"F32"}, "Q8_0": {"Q8_0"}, "Q4_K_M": {"Q5_0"}}[dtype], exps
        g = GPT.from_pretrained(path, dtype="exact")
        assert g.config == m.config
        assert_experts_dequantised(g, path)
        got = g(ids)
        close(got, ref if dtype == "F32" else gpt_forward(g.state_dict(), g.config, ids))
        if dtype == "F32":
            assert got.tobytes() == m(ids).tobytes()


def write_converted(path, hm, d, arch, drop=(), reshape=None, **more):
    """``hm`` (saved by transformers in directory ``d``: what the converter reads) as
    llama.cpp's convert_hf_to_gguf.py lays it out (F32), with the gguf package's writer:
    its metadata keys, gguf-py's tensor names, q/k rows reordered for the llama
    architecture, each kind of expert stacked along a first axis, the router F32.
    ``drop``: tensor names left out; ``reshape``: {name: shape} written instead;
    ``more``: extra boolean/uint32 keys under the architecture."""
    c = hm.config
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_expert_count(c.num_local_experts if arch == "llama" else c.num_experts)
    w.add_expert_used_count(c.num_experts_per_tok)
    hd = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    if arch == "llama":
        w.add_vocab_size(c.vocab_size)
        w.add_rope_dimension_count(hd)
    else:
        w.add_expert_feed_forward_length(c.moe_intermediate_size)
        if hd * c.num_attention_heads != c.hidden_size:
            w.add_key_length(hd)
            w.add_value_length(hd)
    for k, v in more.items():
        (w.add_bool if isinstance(v, bool) else w.add_uint32)(f"{arch}.{k}", v)
    w.add_file_type(0)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"<t{i}>" for i in range(c.vocab_size)])
    sd = safetensors.numpy.load_file(str(d / "model.safetensors"))
    out = {"token_embd.weight": sd["model.embed_tokens.weight"],
           "output_norm.weight": sd["model.norm.weight"]}
    if not c.tie_word_embeddings:
        out["output.weight"] = sd["lm_head.weight"]
    n = c.num_local_experts if arch == "llama" else c.num_experts
    for i in range(c.num_hidden_layers):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        q, k = sd[p + "self_attn.q_proj.weight"], sd[p + "self_attn.k_proj.weight"]
        if arch == "llama":
            q, k = permute_qk(q, c.num_attention_heads), permute_qk(k, c.num_key_value_heads)
        out.update({b + "attn_norm.weight": sd[p + "input_layernorm.weight"],
                    b + "attn_q.weight": q, b + "attn_k.weight": k,
                    b + "attn_v.weight": sd[p + "self_attn.v_proj.weight"],
                    b + "attn_output.weight": sd[p + "self_attn.o_proj.weight"],
                    b + "ffn_norm.weight": sd[p + "post_attention_layernorm.weight"]})
        if arch == "llama":
            src = {kind: "block_sparse_moe.experts.{}." + w
                   for kind, w in (("gate", "w1"), ("up", "w3"), ("down", "w2"))}
            out[b + "ffn_gate_inp.weight"] = sd[p + "block_sparse_moe.gate.weight"]
        else:
            for part in ("q", "k"):
                out[b + f"attn_{part}_norm.weight"] = sd[p + f"self_attn.{part}_norm.weight"]
            src = {kind: "mlp.experts.{}." + f"{kind}_proj" for kind in ("gate", "up", "down")}
            out[b + "ffn_gate_inp.weight"] = sd[p + "mlp.gate.weight"]
        for kind, name in src.items():
            out[b + f"ffn_{kind}_exps.weight"] = np.stack(
                [sd[p + name.format(e) + ".weight"] for e in range(n)])
    for name, a in out.items():
        if name in drop:
            continue
        if reshape and name in reshape:
            a = a.reshape(reshape[name])
        w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_loads_files_laid_out_as_llama_cpp_converter_writes_them(pair, tmp_path):
    kind, hm, d, m = pair
    path = tmp_path / "c.gguf"
    write_converted(path, hm, d, ARCH[kind])
    g = GPT.from_pretrained(path)
    assert g.config == m.config
    assert_experts_dequantised(g, path)
    ids = _ids(3)
    close(g(ids), hf_logits(hm, ids))
    with torch.no_grad():
        want = hm.generate(torch.as_tensor(ids[:, :6]), max_new_tokens=12, do_sample=False,
                           eos_token_id=None, pad_token_id=0,
                           attention_mask=torch.ones((1, 6), dtype=torch.long)).numpy()
    np.testing.assert_array_equal(g.generate(ids[:, :6], 12, eos_token_id=()), want)
    # saved again by blockc: the converter's tensors, bytes for bytes (F32)
    g.save_gguf(tmp_path / "again.gguf")
    a, b = (blockc.io.gguf.read(str(tmp_path / n)) for n in ("c.gguf", "again.gguf"))
    for n, t in a.tensors.items():
        assert b.tensors[n].shape == t.shape and b.tensors[n].type == t.type, n
        assert np.array_equal(b.tensors[n].data, t.data), n


def test_malformed_expert_tensors_are_refused_by_name(tmp_path):
    hm = hf_model("mixtral")
    hm.save_pretrained(tmp_path)
    c = hm.config
    E, F, D = c.num_local_experts, c.intermediate_size, c.hidden_size
    cases = [  # (what is wrong, the name the refusal must give)
        (dict(reshape={"blk.1.ffn_up_exps.weight": (F, E, D)}), "blk.1.ffn_up_exps.weight"),
        (dict(reshape={"blk.0.ffn_down_exps.weight": (E * D, F)}), "blk.0.ffn_down_exps.weight"),
        (dict(reshape={"blk.0.ffn_gate_exps.weight": (E, D, F)}), "blk.0.ffn_gate_exps.weight"),
        (dict(drop=("blk.1.ffn_down_exps.weight",)), "blk.1.ffn_down_exps.weight"),
        (dict(drop=("blk.0.ffn_gate_inp.weight",)), "blk.0.ffn_gate_inp.weight"),
        (dict(reshape={"blk.0.ffn_gate_inp.weight": (D, E)}), "blk.0.ffn_gate_inp.weight"),
    ]
    for i, (how, name) in enumerate(cases):
        path = tmp_path / f"bad{i}.gguf"
        write_converted(path, hm, tmp_path, "llama", **how)
        with pytest.raises(ValueError, match=name.replace(".", r"\.")):
            GPT.from_pretrained(path)


@pytest.mark.parametrize("key,value", [("expert_weights_norm", False),
                                       ("expert_shared_count", 2),
                                       ("expert_gating_func", 2)])
def test_expert_metadata_llama_cpp_computes_otherwise_is_refused_by_name(tmp_path, key, value):
    hm = hf_model("qwen3_moe_norm")
    hm.save_pretrained(tmp_path)
    write_converted(tmp_path / "q.gguf", hm, tmp_path, "qwen3moe", **{key: value})
    with pytest.raises(ValueError, match=f"qwen3moe.{key}"):
        GPT.from_pretrained(tmp_path / "q.gguf")


def test_qwen3_moe_without_renormalising_has_no_gguf_file(tmp_path):
    # llama.cpp's qwen3moe renormalises the chosen experts' weights whatever the file says
    hm = hf_model("qwen3_moe")
    hm.save_pretrained(tmp_path)
    m = GPT.from_pretrained(tmp_path)
    assert not m.config.router_norm
    with pytest.raises(ValueError, match="router_norm"):
        m.save_gguf(tmp_path / "q.gguf")
    # and a dense file holding experts' tensors without expert_count is refused by name
    hn = hf_model("qwen3_moe_norm")
    hn.save_pretrained(tmp_path / "n")
    write_converted(tmp_path / "r.gguf", hn, tmp_path / "n", "qwen3moe")
    f = blockc.io.gguf.read(str(tmp_path / "r.gguf"))
    fields = {k: v for k, v in f.fields.items() if k != "qwen3moe.expert_count"}
    blockc.io.gguf.write(str(tmp_path / "s.gguf"), fields,
                         [(t.name, t.type, t.shape, t.data) for t in f.tensors.values()])
    with pytest.raises(ValueError, match="expert_count"):
        GPT.from_pretrained(tmp_path / "s.gguf")


def test_k_quant_stacks_hold_whole_blocks(tmp_path):
    # width and expert width of whole 256-column blocks: Q4_K_M's Q4_K gate/up stacks and
    # its Q6_K (use_more_bits layers) or Q4_K down stacks, llama.cpp's rule for ffn_down
    # (which matches ffn_down_exps too); sliced per expert on load as the gguf package
    # dequantises them, and the logits the oracle's on those weights
    cfg = blockc.GPTConfig(vocab=V, context=32, width=256, heads=4, layers=2, norm="rms",
                           activation="swiglu", positions="rope", d_ff=256, kv_heads=2,
                           qkv_bias=False, out_bias=False, mlp_bias=False, tie_weights=False,
                           n_experts=4, experts_used=2, router_norm=True, eps=1e-6)
    m = GPT.random(cfg, seed=5)
    path = tmp_path / "k.gguf"
    m.save_gguf(path, "Q4_K_M")
    f = blockc.io.gguf.read(str(path))
    types = {n: t.type for n, t in f.tensors.items() if "_exps." in n}
    assert types["blk.0.ffn_up_exps.weight"] == types["blk.1.ffn_gate_exps.weight"] == "Q4_K"
    assert {types["blk.0.ffn_down_exps.weight"], types["blk.1.ffn_down_exps.weight"]} <= {
        "Q4_K", "Q6_K"} and "Q6_K" in types.values()
    assert f.tensors["blk.0.ffn_down_exps.weight"].shape == (4, 256, 256)
    g = GPT.from_pretrained(path, dtype="exact")
    assert g.dtypes["blocks.0.experts.3.up.weight"] == "q4_k"
    assert_experts_dequantised(g, path)
    ids = _ids(4, 9)
    close(g(ids), gpt_forward(g.state_dict(), cfg, ids), tol=2e-3)
    # saved again in its own types: the same blocks, byte for byte
    g.save_gguf(tmp_path / "again.gguf", "Q4_K_M")
    b = blockc.io.gguf.read(str(tmp_path / "again.gguf"))
    for n in types:
        assert np.array_equal(b.tensors[n].data, f.tensors[n].data), n
