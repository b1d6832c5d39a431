"""The GGUF side of issue 50's families (Llama 3.x, Qwen3, Granite, SmolLM3, OLMo2) and of
the rotary scalings a GGUF file holds (llama3's rope_freqs, linear, yarn).

Each model is a tiny random checkpoint made by transformers itself (nothing downloaded):

- written by blockc's ``save_gguf`` in F32, Q8_0 and Q4_K_M, it loads with every weight
  the gguf package's dequantisation of the file's tensor (bit for bit) and computes what
  the NumPy oracle computes on those weights (F32: what transformers computes);
- written as llama.cpp's converter lays it out (``convert_hf_to_gguf.py``: the keys of
  its ``set_gguf_parameters``, Granite's ``*_scale`` keys, the tensor names of gguf-py's
  ``constants.py``, q/k rows reordered for the LlamaModel descendants, llama3's
  ``rope_freqs.weight`` as the frequencies' divisors, linear and yarn as
  ``rope.scaling.*``), here with the gguf package's writer, it loads and computes
  transformers' logits (1e-4 of the largest) and greedy tokens, positions past
  ``original_max_position_embeddings`` included."""
import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

import blockc  # noqa: E402
from blockc import GPT  # noqa: E402
from blockc.reference.gpt import gpt_forward  # noqa: E402
from support.gguf_files import assert_dequantised, permute_qk  # noqa: E402
from test_families_new import FAMILY_CASES, LLAMA3, V, check_against, close, hf_logits, hf_model  # noqa: E402

# widths of whole K-quant blocks (256), so Q4_K_M's Q4_K and Q6_K are not fallbacks
K_SIZES = dict(hidden_size=256, intermediate_size=256)

FAMILIES = {  # name -> (model_type, config keys, llama.cpp architecture)
    "llama3.2": ("llama", dict(rope_parameters=dict(LLAMA3)), "llama"),
    "qwen3": ("qwen3", dict(head_dim=16), "qwen3"),
    "granite": ("granite", FAMILY_CASES["granite"], "granite"),
    "smollm3": ("smollm3", FAMILY_CASES["smollm3"], "smollm3"),
    "olmo2": ("olmo2", FAMILY_CASES["olmo2"], "olmo2"),
}

YARN = dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=16,
            attention_factor=0.8, beta_fast=16.0, beta_slow=2.0)
LINEAR = dict(rope_type="linear", rope_theta=10000.0, factor=2.0)


def same_config(got, want):
    """``got`` is ``want``; llama3's scaling read back as rope_freqs.weight's divisors (the
    same angles, to float32 rounding)."""
    if want.rope_kind == "llama3":
        assert got.rope_kind == "factors"
        np.testing.assert_allclose(got.rope_tables.inv, want.rope_tables.inv, rtol=1e-6)
        got = dataclasses.replace(got, rope_parameters=want.rope_parameters)
    assert got == want


def _ids(seed=2, length=40):
    return np.random.default_rng(seed).integers(0, V, size=(1, length))


# ---- save_gguf in F32, Q8_0 and Q4_K_M --------------------------------------------------------

@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_save_gguf_f32_q8_0_q4_k_m_load_as_their_dequantised_weights(tmp_path, name):
    model_type, kw, arch = FAMILIES[name]
    hm = hf_model(model_type, **{**kw, **K_SIZES})
    hm.save_pretrained(tmp_path)
    m = GPT.from_pretrained(tmp_path)
    ids = _ids()
    ref = hf_logits(hm, ids)
    close(m(ids), ref)
    for dtype in ("F32", "Q8_0", "Q4_K_M"):
        path = tmp_path / f"{name}-{dtype}.gguf"
        m.save_gguf(path, dtype)
        f = blockc.io.gguf.read(str(path))
        assert f.get("general.architecture") == arch
        g = GPT.from_pretrained(path, dtype="exact")
        same_config(g.config, m.config)
        assert_dequantised(g, path, arch)  # every weight: the gguf package's dequantisation
        types = {t.type for t in f.tensors.values() if len(t.shape) == 2}  # the matrices
        if dtype == "Q4_K_M":  # llama.cpp's mix: Q4_K, with Q6_K for the output and some v/down
            assert {"Q4_K", "Q6_K"} <= types, types
        else:
            assert types == {dtype}
        got = g(ids)
        close(got, ref if dtype == "F32" else gpt_forward(g.state_dict(), g.config, ids))
        if dtype == "F32":
            prompt = ids[:, :6]
            with torch.no_grad():
                want = hm.generate(torch.as_tensor(prompt), max_new_tokens=12, do_sample=False,
                                   eos_token_id=None, pad_token_id=0,
                                   attention_mask=torch.ones(prompt.shape, dtype=torch.long))
            np.testing.assert_array_equal(g.generate(prompt, 12, eos_token_id=()), want.numpy())


# ---- files as llama.cpp's converter writes them -----------------------------------------------

#: transformers' names -> llama.cpp's (gguf-py's tensor names), per layer
_LAYER = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
          "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
          "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
          "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "ffn_norm",
          "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
#: OLMo2's norms are on the sublayers' outputs
_OLMO2 = {"post_attention_layernorm": "post_attention_norm",
          "post_feedforward_layernorm": "post_ffw_norm"}
#: the converter's classes that are LlamaModel's: q/k rows reordered, vocab_size and
#: rope.dimension_count written, llama3 as rope_freqs.weight
_LLAMA_LINE = ("llama", "granite", "smollm3")


def _gguf_name(hf: str, arch: str) -> str:
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    _, _, i, rest = hf.split(".", 3)
    part, kind = rest.rsplit(".", 1)
    table = {**_LAYER, **_OLMO2} if arch == "olmo2" else _LAYER
    return f"blk.{i}.{table[part]}.{kind}"


def _llama3_divisors(hc):
    """rope_freqs.weight of a llama3 config: the default frequencies over transformers'
    llama3 ones (what the converter's generate_extra_tensors computes)."""
    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](hc, "cpu")
    dim = getattr(hc, "head_dim", None) or hc.hidden_size // hc.num_attention_heads
    plain = 1.0 / (hc.rope_parameters["rope_theta"] ** (np.arange(0, dim, 2) / dim))
    return (plain / scaled.double().numpy()).astype(np.float32)


def write_converted(path, hm, arch):
    """``hm`` as convert_hf_to_gguf.py writes it (F32): its set_gguf_parameters' keys,
    gguf-py's tensor names, llama.cpp's q/k order for the LlamaModel line."""
    c = hm.config
    d = c.to_dict()
    rp = dict(c.rope_parameters)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    kind = rp.get("rope_type", "default")
    if kind == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rp["factor"])
    elif kind == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rp["factor"])
        w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
        w.add_rope_scaling_yarn_attn_factor(rp["attention_factor"])
        w.add_rope_scaling_yarn_beta_fast(rp["beta_fast"])
        w.add_rope_scaling_yarn_beta_slow(rp["beta_slow"])
    w.add_rope_freq_base(rp["rope_theta"])
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    if d.get("head_dim") is not None and arch != "granite":  # Granite's converter drops it
        w.add_key_length(d["head_dim"])
        w.add_value_length(d["head_dim"])
    w.add_file_type(0)
    hd = d.get("head_dim") or c.hidden_size // c.num_attention_heads
    if arch in _LLAMA_LINE:
        w.add_vocab_size(c.vocab_size)
        w.add_rope_dimension_count(hd)
    if arch == "granite":
        w.add_attention_scale(c.attention_multiplier)
        w.add_embedding_scale(c.embedding_multiplier)
        w.add_residual_scale(c.residual_multiplier)
        w.add_logit_scale(c.logits_scaling)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"<t{i}>" for i in range(c.vocab_size)])
    tied = c.tie_word_embeddings
    for name, t in hm.state_dict().items():
        if tied and name == "lm_head.weight":
            continue
        a = t.detach().float().numpy()
        if arch in _LLAMA_LINE and ".q_proj." in name:
            a = permute_qk(a, c.num_attention_heads)
        elif arch in _LLAMA_LINE and ".k_proj." in name:
            a = permute_qk(a, c.num_key_value_heads)
        w.add_tensor(_gguf_name(name, arch), np.ascontiguousarray(a))
    if kind == "llama3":
        w.add_tensor("rope_freqs.weight", _llama3_divisors(c))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


CONVERTED = {
    **{name: spec for name, spec in FAMILIES.items()},
    "llama-linear": ("llama", dict(rope_parameters=dict(LINEAR)), "llama"),
    "llama-yarn": ("llama", dict(rope_parameters=dict(YARN)), "llama"),
    "qwen3-yarn": ("qwen3", dict(head_dim=16, rope_parameters=dict(YARN)), "qwen3"),
    "granite-linear": ("granite", dict(FAMILY_CASES["granite"], rope_parameters=dict(LINEAR)),
                       "granite"),
    "olmo2-yarn": ("olmo2", dict(FAMILY_CASES["olmo2"], rope_parameters=dict(YARN)), "olmo2"),
    # SmolLM3's converter is LlamaModel's: llama3 as rope_freqs.weight
    "smollm3-llama3": ("smollm3", dict(FAMILY_CASES["smollm3"], rope_parameters=dict(LLAMA3)),
                       "smollm3"),
}


@pytest.mark.parametrize("name", sorted(CONVERTED))
def test_loads_files_laid_out_as_llama_cpp_converter_writes_them(tmp_path, name):
    model_type, kw, arch = CONVERTED[name]
    hm = hf_model(model_type, **kw)
    write_converted(tmp_path / "c.gguf", hm, arch)
    g = GPT.from_pretrained(tmp_path / "c.gguf")
    # 40 positions: past original_max_position_embeddings (16) of llama3 and yarn
    check_against(hm, g)
    # the same config as from the Hugging Face directory (llama3 aside: its factors)
    hm.save_pretrained(tmp_path / "hf")
    m = GPT.from_pretrained(tmp_path / "hf")
    same_config(g.config, m.config)
    # and saved again by blockc: the same metadata the converter wrote
    g.save_gguf(tmp_path / "again.gguf")
    a, b = blockc.io.gguf.read(str(tmp_path / "c.gguf")), blockc.io.gguf.read(str(tmp_path / "again.gguf"))
    for k in a.fields:
        if ".rope.scaling." in k or k.endswith((".embedding_scale", ".residual_scale",
                                                ".attention.scale", ".logit_scale")):
            assert b.get(k) == a.get(k), k


# ---- rope scaling: save_gguf against the HF twin ----------------------------------------------

@pytest.mark.parametrize("arch,rope", [("llama", "linear"), ("llama", "yarn"), ("qwen3", "yarn"),
                                       ("olmo2", "yarn"), ("smollm3", "linear")])
def test_save_gguf_writes_linear_and_yarn_scaling_back(tmp_path, arch, rope):
    kw = {"qwen3": dict(head_dim=16), "olmo2": FAMILY_CASES["olmo2"],
          "smollm3": FAMILY_CASES["smollm3"]}.get(arch, {})
    hm = hf_model(arch, rope_parameters=dict(LINEAR if rope == "linear" else YARN), **kw)
    hm.save_pretrained(tmp_path)
    m = GPT.from_pretrained(tmp_path)
    m.save_gguf(tmp_path / "m.gguf")
    f = blockc.io.gguf.read(str(tmp_path / "m.gguf"))
    assert f.get(f"{arch}.rope.scaling.type") == rope
    assert f.get(f"{arch}.rope.scaling.factor") == (2.0 if rope == "linear" else 4.0)
    if rope == "yarn":
        assert f.get(f"{arch}.rope.scaling.original_context_length") == 16
        assert f.get(f"{arch}.rope.scaling.yarn_attn_factor") == pytest.approx(0.8)
        assert f.get(f"{arch}.rope.scaling.yarn_beta_fast") == 16.0
    g = GPT.from_pretrained(tmp_path / "m.gguf")
    assert g.config == m.config
    # the C library's rope fields: the same tables, bit for bit
    a, b = g.config.rope_tables, m.config.rope_tables
    assert np.array_equal(a.inv.view(np.uint32), b.inv.view(np.uint32)) and a.attn == b.attn
    check_against(hm, g)


def test_rope_scalings_a_gguf_file_cannot_hold_are_refused_by_name(tmp_path):
    hm = hf_model("llama", rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0,
                                                factor=4.0), max_position_embeddings=16)
    hm.save_pretrained(tmp_path / "dynamic")
    with pytest.raises(ValueError, match="rope_type 'dynamic'"):
        GPT.from_pretrained(tmp_path / "dynamic").save_gguf(tmp_path / "x.gguf")
    # longrope is held by phi3 files only (its factors as tensors): a Llama longrope model
    # is written as one, and reads back as the same computation
    rp = dict(rope_type="longrope", rope_theta=10000.0, short_factor=[1.0] * 4,
              long_factor=[2.0] * 4, original_max_position_embeddings=16)
    hm = hf_model("llama", rope_parameters=rp, max_position_embeddings=64)
    hm.save_pretrained(tmp_path / "longrope")
    m = GPT.from_pretrained(tmp_path / "longrope")
    m.save_gguf(tmp_path / "l.gguf")
    r = gguf.GGUFReader(str(tmp_path / "l.gguf"))
    assert r.fields["general.architecture"].contents() == "phi3"
    back = GPT.from_pretrained(tmp_path / "l.gguf")
    assert back.config.rope_kind == "longrope"
    ids = np.arange(40, dtype=np.int64)[None] % V
    np.testing.assert_array_equal(back(ids), m(ids))
    # llama3 as rope_freqs only where llama.cpp's tensor list has it
    hm = hf_model("qwen3", rope_parameters=dict(LLAMA3))
    hm.save_pretrained(tmp_path / "q3")
    with pytest.raises(ValueError, match="rope_type 'llama3'.*qwen3"):
        GPT.from_pretrained(tmp_path / "q3").save_gguf(tmp_path / "x.gguf")


def _rewrite(src, dst, arch, drop=(), **more):
    """The GGUF file ``src`` again as ``dst``, its ``{arch}.`` keys ``drop`` left out and
    ``more`` (suffix -> Value) set."""
    f = blockc.io.gguf.read(str(src))
    fields = {k: v for k, v in f.fields.items() if k[len(arch) + 1:] not in drop}
    fields.update({f"{arch}.{k}": v for k, v in more.items()})
    blockc.io.gguf.write(str(dst), fields,
                         [(t.name, t.type, t.shape, t.data) for t in f.tensors.values()])


def test_yarn_attention_factor_read_from_rope_scaling_attn_factor_too(tmp_path):
    # an older converter wrote OLMo2's yarn attention factor as rope.scaling.attn_factor
    hm = hf_model("olmo2", rope_parameters=dict(YARN), **FAMILY_CASES["olmo2"])
    write_converted(tmp_path / "c.gguf", hm, "olmo2")
    _rewrite(tmp_path / "c.gguf", tmp_path / "old.gguf", "olmo2",
             drop=("rope.scaling.yarn_attn_factor",),
             **{"rope.scaling.attn_factor": blockc.io.gguf.Value("FLOAT32", 0.8)})
    g = GPT.from_pretrained(tmp_path / "old.gguf")
    assert dict(g.config.rope_parameters)["attention_factor"] == 0.8
    check_against(hm, g)
    # two keys that disagree: refused by name
    _rewrite(tmp_path / "c.gguf", tmp_path / "two.gguf", "olmo2",
             **{"rope.scaling.attn_factor": blockc.io.gguf.Value("FLOAT32", 0.5)})
    with pytest.raises(ValueError, match="yarn_attn_factor.*disagree"):
        GPT.from_pretrained(tmp_path / "two.gguf")


@pytest.mark.parametrize("key,value,match", [
    ("rope.scaling.type", "longrope", "rope.scaling.type='longrope'"),
    ("rope.scaling.yarn_log_multiplier", 0.1, "yarn_log_multiplier"),
    ("rope.scaling.yarn_ext_factor", 0.5, "yarn_ext_factor"),
])
def test_gguf_rope_keys_blockc_does_not_compute_are_refused_by_name(tmp_path, key, value, match):
    hm = hf_model("llama", rope_parameters=dict(YARN))
    write_converted(tmp_path / "c.gguf", hm, "llama")
    _rewrite(tmp_path / "c.gguf", tmp_path / "bad.gguf", "llama", **{key: blockc.io.gguf.Value(
        "STRING" if isinstance(value, str) else "FLOAT32", value)})
    with pytest.raises(ValueError, match=match):
        GPT.from_pretrained(tmp_path / "bad.gguf")
