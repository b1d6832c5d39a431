"""The families of issue 50 against transformers itself: tiny random checkpoints made by
transformers (AutoConfig.for_model, from_config, save_pretrained into tmp_path; nothing
downloaded), blockc's float32 logits within 1e-4 of the largest of transformers', 12
greedy tokens identical; the same model written as GGUF (F32, Q8_0) and read back; the
rotary variants' frequency tables bit for bit against transformers' rope init functions;
each new C feature's bits the same at 1 and 2 threads and at batch 1 and 2."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

import blockc  # noqa: E402
from blockc import GPT, GPTConfig  # noqa: E402
from blockc.model.rope import rope_tables  # noqa: E402
from blockc.reference.gpt import gpt_forward  # noqa: E402
from helpers import same_bits_any_threads  # noqa: E402

V = 64
SMALL = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)

LLAMA3 = dict(rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0,
              high_freq_factor=4.0, original_max_position_embeddings=16)
ROPES = {
    "llama3": LLAMA3,
    "linear": dict(rope_type="linear", rope_theta=10000.0, factor=2.0),
    # max_position_embeddings 16: the 40-token prompt runs past it (the base grows)
    "dynamic": dict(rope_type="dynamic", rope_theta=10000.0, factor=4.0),
    "yarn": dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                 original_max_position_embeddings=16),
    "longrope": dict(rope_type="longrope", rope_theta=10000.0, short_factor=[1.0, 1.1, 1.2, 1.5],
                     long_factor=[2.0, 3.0, 4.0, 5.0], original_max_position_embeddings=16),
}


def hf_model(model_type, seed=0, **kw):
    torch.manual_seed(seed)
    cfg = AutoConfig.for_model(model_type, **{**SMALL, **kw})
    m = AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():  # norms away from 1, weights away from their init's zeros
        for p in m.parameters():
            p.add_(torch.randn_like(p) * (0.3 if p.ndim == 1 else 0.05))
    return m


def hf_logits(m, ids):
    with torch.no_grad():
        return m(torch.as_tensor(ids)).logits.float().numpy()


def hf_greedy(m, ids, n):
    with torch.no_grad():
        return m.generate(torch.as_tensor(ids), max_new_tokens=n, do_sample=False,
                          eos_token_id=None, pad_token_id=0,
                          attention_mask=torch.ones(ids.shape, dtype=torch.long)).numpy()


def close(got, ref):
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4 * np.abs(ref).max())


def check_against(hm, m, prompt=6, length=40):
    ids = np.random.default_rng(1).integers(0, V, size=(1, length))
    ref = hf_logits(hm, ids)
    close(m(ids), ref)
    np.testing.assert_array_equal(m.generate(ids[:, :prompt], 12), hf_greedy(hm, ids[:, :prompt], 12))
    return ids, ref


# ---- the frequency tables -------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(ROPES))
def test_frequency_tables_are_transformers_bits(name):
    hc = AutoConfig.for_model("llama", **SMALL, rope_parameters=dict(ROPES[name]))
    want, attn = ROPE_INIT_FUNCTIONS[hc.rope_parameters["rope_type"]](hc, "cpu")
    cfg = GPTConfig.from_hf(hc.to_dict())
    t = rope_tables(dict(cfg.rope_parameters), cfg.rope_theta, cfg.rotary_dim_)
    assert t.attn == pytest.approx(attn, rel=1e-15)
    if name == "dynamic":  # in C, by length: up to max_position_embeddings the default
        assert t.inv is None and t.dynamic == 4.0 and t.original == 64
        return
    np.testing.assert_array_equal(t.inv, want.numpy())
    if name == "longrope":
        long_, _ = ROPE_INIT_FUNCTIONS["longrope"](hc, "cpu", seq_len=17)
        np.testing.assert_array_equal(t.inv_long, long_.numpy())


def test_unknown_rope_types_and_keys_are_refused_by_name():
    with pytest.raises(ValueError, match="rope_type.*'mrope'"):
        GPTConfig.from_hf(dict(model_type="llama", rope_scaling=dict(rope_type="mrope")))
    with pytest.raises(ValueError, match="rope_parameters.beta_fast"):
        GPTConfig.from_hf(dict(model_type="llama", rope_scaling=dict(rope_type="linear", factor=2.0,
                                                                     beta_fast=3)))


# ---- Llama with every rope type -----------------------------------------------------------

@pytest.mark.parametrize("name", sorted(ROPES))
def test_llama_rope_types_match_transformers(tmp_path, name):
    kw = dict(max_position_embeddings=16) if name == "dynamic" else {}
    hm = hf_model("llama", rope_parameters=dict(ROPES[name]), **kw)
    hm.save_pretrained(tmp_path)
    m = GPT.from_pretrained(tmp_path)
    ids, ref = check_against(hm, m)  # 40 positions: past every original length
    # the oracle computes the same
    close(gpt_forward(m.state_dict(), m.config, ids), ref)
    # and back through save_pretrained: transformers reads the same rope
    m.save_pretrained(tmp_path / "back")
    hb = AutoModelForCausalLM.from_pretrained(tmp_path / "back").eval()
    close(hf_logits(hb, ids), ref)


def test_llama3_gguf_carries_rope_freqs(tmp_path):
    hm = hf_model("llama", rope_parameters=dict(LLAMA3))
    hm.save_pretrained(tmp_path)
    m = GPT.from_pretrained(tmp_path)
    ids = np.random.default_rng(2).integers(0, V, size=(1, 40))
    ref = hf_logits(hm, ids)
    for dtype in ("F32", "Q8_0"):
        path = tmp_path / f"m-{dtype}.gguf"
        m.save_gguf(path, dtype)
        g = GPT.from_pretrained(path, dtype="exact")
        assert g.config.rope_kind == "factors"
        f = blockc.io.gguf.read(str(path))
        assert f.tensors["rope_freqs.weight"].shape == (4,)
        # the factors are llama.cpp's divisors of the frequencies: the same angles
        np.testing.assert_allclose(g.config.rope_tables.inv, m.config.rope_tables.inv, rtol=1e-6)
        got = g(ids)
        if dtype == "F32":
            close(got, ref)
        else:  # its dequantised weights: the oracle on them
            close(got, gpt_forward(g.state_dict(), g.config, ids))
        # and written again: the same factors
        g.save_gguf(tmp_path / f"again-{dtype}.gguf", "F32")
        f2 = blockc.io.gguf.read(str(tmp_path / f"again-{dtype}.gguf"))
        np.testing.assert_array_equal(f2.tensors["rope_freqs.weight"].to_float32(),
                                      f.tensors["rope_freqs.weight"].to_float32())


# ---- threads and batch ----------------------------------------------------------------------

VARIANTS = {
    "llama3": dict(rope_parameters=dict(LLAMA3, rope_theta=None)),
    "longrope": dict(rope_parameters={k: v for k, v in ROPES["longrope"].items()
                                      if k != "rope_theta"} | {"factor": 2.0},
                 rotary_dim=8, head_dim=16),
    "dynamic": dict(rope_parameters=dict(rope_type="dynamic", factor=2.0,
                                         max_position_embeddings=8)),
    "nope_qk_head": dict(nope_layers=(1,), qk_norm="head"),
    "qk_all_output": dict(qk_norm="all", placement="output"),
    "sandwich_geglu_scales": dict(placement="sandwich", activation="geglu", embed_scale=5.5,
                                  attn_scale=0.3, logit_scale=2.5),
    "residual_scale": dict(residual_scale=0.4),
}


def _model(cfg):
    m = GPT.random(cfg, seed=3)
    rng = np.random.default_rng(5)
    for name, a in m.state_dict().items():  # every gain away from 1 (q/k and post norms too)
        if a.ndim == 1:
            m.write_tensor(name, (a + rng.normal(0, 0.3, a.shape)).astype(np.float32))
    return m


def _variant(kw):
    kw = {k: v for k, v in kw.items()}
    if "rope_parameters" in kw:
        kw["rope_parameters"] = {k: v for k, v in kw["rope_parameters"].items() if v is not None}
    base = dict(vocab=V, context=48, width=32, heads=4, layers=2, kv_heads=2, norm="rms",
                activation="swiglu", positions="rope", tie_weights=False, qkv_bias=False,
                out_bias=False, mlp_bias=False)
    return GPTConfig(**{**base, **kw})


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variants_same_bits_at_any_threads_and_batch_and_the_oracle(name):
    cfg = _variant(VARIANTS[name])
    assert cfg.family_features
    m = _model(cfg)
    ids = np.random.default_rng(4).integers(0, V, size=(2, 20))
    out = same_bits_any_threads(m, ids)
    ref = gpt_forward(m.state_dict(), cfg, ids)
    close(out, ref)
    # through the cache, token by token: the same tokens (a dynamic or long rope turns
    # each call's keys by the length so far, as transformers' generate does)
    c = m.new_cache(2, 48)
    got = np.concatenate([m(ids[:, i:i + 1], cache=c) for i in range(20)], axis=1)
    if name not in ("dynamic", "longrope"):
        close(got, ref)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_training_refuses_the_variants_by_name(name):
    m = _model(_variant(VARIANTS[name]))
    ids = np.zeros((1, 4), np.int64)
    with pytest.raises(ValueError, match="training does not compute"):
        m.loss(ids, ids)


# ---- Qwen3 ------------------------------------------------------------------------------------

@pytest.mark.parametrize("bias", [False, True])
def test_qwen3_hf_and_gguf_match_transformers(tmp_path, bias):
    # head_dim 16 (not width / heads = 8): Qwen3's own
    hm = hf_model("qwen3", head_dim=16, attention_bias=bias)
    hm.save_pretrained(tmp_path)
    m = GPT.from_pretrained(tmp_path)
    assert m.config.qk_norm == "head" and m.config.head_dim_ == 16
    assert m.num_parameters() == sum(p.numel() for p in hm.parameters())
    ids, ref = check_against(hm, m)
    m.save_pretrained(tmp_path / "back")
    close(hf_logits(AutoModelForCausalLM.from_pretrained(tmp_path / "back").eval(), ids), ref)
    if bias:  # llama.cpp's qwen3 files have no attention biases
        return
    for dtype in ("F32", "Q8_0"):
        path = tmp_path / f"q3-{dtype}.gguf"
        m.save_gguf(path, dtype)
        f = blockc.io.gguf.read(str(path))
        assert f.get("general.architecture") == "qwen3"
        assert f.tensors["blk.1.attn_q_norm.weight"].shape == (16,)
        assert f.get("qwen3.attention.key_length") == 16
        g = GPT.from_pretrained(path, dtype="exact")
        assert g.config == m.config
        close(g(ids), ref if dtype == "F32" else gpt_forward(g.state_dict(), g.config, ids))


# ---- Granite and SmolLM3 ----------------------------------------------------------------------

FAMILY_CASES = {
    "granite": dict(embedding_multiplier=3.0, residual_multiplier=0.5, attention_multiplier=0.2,
                    logits_scaling=2.5),
    # layers 0..3: layer 3 without rotary; 2 and 3 explicitly without, by the list
    "smollm3": dict(num_hidden_layers=4, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "olmo2": dict(pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "olmo2-bias": dict(attention_bias=True, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "smollm3-list": dict(num_hidden_layers=4, no_rope_layers=[1, 1, 0, 0], pad_token_id=0,
                         bos_token_id=1, eos_token_id=2),
}


@pytest.mark.parametrize("name", sorted(FAMILY_CASES))
def test_families_match_transformers_from_hf_and_gguf(tmp_path, name):
    hm = hf_model(name.split("-")[0], **FAMILY_CASES[name])
    hm.save_pretrained(tmp_path)
    m = GPT.from_pretrained(tmp_path)
    assert m.num_parameters() == sum(p.numel() for p in hm.parameters())
    ids, ref = check_against(hm, m)
    m.save_pretrained(tmp_path / "back")
    close(hf_logits(AutoModelForCausalLM.from_pretrained(tmp_path / "back").eval(), ids), ref)
    if name == "smollm3-list":  # llama.cpp's smollm3 skips every 4th layer only
        with pytest.raises(ValueError, match="nope_layers"):
            m.save_gguf(tmp_path / "x.gguf")
        return
    name = name.split("-")[0]
    for dtype in ("F32", "Q8_0"):
        path = tmp_path / f"{name}-{dtype}.gguf"
        m.save_gguf(path, dtype)
        assert blockc.io.gguf.read(str(path)).get("general.architecture") == name
        g = GPT.from_pretrained(path, dtype="exact")
        assert g.config == m.config
        close(g(ids), ref if dtype == "F32" else gpt_forward(g.state_dict(), g.config, ids))


# ---- Gemma 3 ----------------------------------------------------------------------------------

GEMMA3 = dict(head_dim=16, query_pre_attn_scalar=12, sliding_window=12, num_hidden_layers=3,
              layer_types=["sliding_attention", "full_attention", "sliding_attention"],
              rope_parameters={"full_attention": dict(rope_type="linear", factor=2.0,
                                                      rope_theta=100000.0),
                               "sliding_attention": dict(rope_type="default", rope_theta=500.0)})


def test_gemma_norm_fold_is_transformers_float32_bits():
    w = torch.randn(64) * 0.5
    x = torch.randn(3, 64)
    hm = AutoConfig.for_model("gemma3_text", **SMALL)
    norm = transformers.models.gemma3.modeling_gemma3.Gemma3RMSNorm(64, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(w)
        want = norm(x).numpy()
    folded = np.float32(1.0) + w.numpy()  # what blockc stores
    xs = x.numpy().astype(np.float32)
    normed = xs * (1 / np.sqrt((xs.astype(np.float32) ** 2).mean(-1, keepdims=True) + np.float32(1e-6)))
    assert np.array_equal((np.float32(1.0) + w.numpy()).view(np.uint32),
                          (1.0 + w.float()).numpy().view(np.uint32))
    np.testing.assert_allclose(normed.astype(np.float32) * folded, want, rtol=1e-6, atol=1e-6)
    assert hm.model_type == "gemma3_text"


def test_gemma3_matches_transformers(tmp_path):
    hm = hf_model("gemma3_text", **GEMMA3)
    hm.save_pretrained(tmp_path)
    m = GPT.from_pretrained(tmp_path)
    cfg = m.config
    assert (cfg.placement, cfg.activation, cfg.qk_norm, cfg.local_layers) == (
        "sandwich", "geglu", "head", (0, 2))
    # the sliding layers attend within 12 positions: the 40-token check and the 18 positions
    # of the greedy run go past the window
    assert (cfg.context, cfg.sliding_window, cfg.sliding_layers) == (64, 12, (True, False, True))
    assert cfg.embed_scale == float(np.float32(32 ** 0.5))
    assert m.num_parameters() == sum(p.numel() for p in hm.parameters())
    # the norm gains folded: blockc's are transformers' 1 + w in float32, bit for bit
    w = hm.model.layers[1].post_feedforward_layernorm.weight.detach()
    np.testing.assert_array_equal(m.read_tensor("blocks.1.ln2_post.weight"),
                                  (1.0 + w.float()).numpy())
    ids, ref = check_against(hm, m)
    close(gpt_forward(m.state_dict(), cfg, ids), ref)
    m.save_pretrained(tmp_path / "back")
    hb = AutoModelForCausalLM.from_pretrained(tmp_path / "back").eval()
    close(hf_logits(hb, ids), ref)
    with pytest.raises(ValueError, match="GGUF|gemma3"):
        m.save_gguf(tmp_path / "g.gguf")


def test_gemma3_reads_its_softcapping_fields():
    # transformers' Gemma 3 soft-caps when its config says so (tests/test_gemma.py runs them)
    cfg = GPTConfig.from_hf(dict(model_type="gemma3_text", final_logit_softcapping=30.0))
    assert (cfg.logit_softcap, cfg.attn_softcap) == (30.0, None)
    with pytest.raises(ValueError, match="final_logit_softcapping"):
        GPTConfig.from_hf(dict(model_type="gemma3_text", final_logit_softcapping=0))
