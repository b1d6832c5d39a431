"""Gemma 2 and Gemma 3 (issue 50) against transformers itself and llama.cpp's file format:
tiny random checkpoints made by transformers (AutoConfig.for_model, from_config,
save_pretrained into tmp_path; nothing downloaded), blockc's float32 logits within 1e-4 of
the largest of transformers' (eager attention: Gemma 2's soft-capping), 12 greedy tokens
identical, prompts longer than the sliding window; the same models as GGUF (F32, Q8_0,
Q4_K_M) written by blockc and read by the gguf package, and a file laid out as llama.cpp's
converter writes it (its names, its keys, its norm gains with the 1 added) read by blockc;
the soft-caps' bits the same at 1 and 2 threads, batch 1 and 2, and through the cache."""
import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

from blockc import GPT, GPTConfig  # noqa: E402
from blockc.reference.gpt import gpt_forward  # noqa: E402
from helpers import same_bits_any_threads  # noqa: E402
from support.gguf_files import assert_dequantised  # noqa: E402
from test_families_new import check_against, close, hf_greedy, hf_logits  # noqa: E402

V = 64
SMALL = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
             pad_token_id=0, bos_token_id=1, eos_token_id=2)
# caps small enough to bend these random models' scores and logits
CAPS = dict(attn_logit_softcapping=1.5, final_logit_softcapping=2.0)


def hf_model(model_type, seed=0, **kw):
    torch.manual_seed(seed)
    cfg = AutoConfig.for_model(model_type, **{**SMALL, **kw})
    m = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()
    with torch.no_grad():  # norms away from 1 (Gemma's are 0: 1 + w), weights larger
        for p in m.parameters():
            p.add_(torch.randn_like(p) * (0.3 if p.ndim == 1 else 0.1))
    return m


# ---- Gemma 2 from a Hugging Face directory ----------------------------------------------------

GEMMA2 = dict(head_dim=16, query_pre_attn_scalar=12, sliding_window=12, num_hidden_layers=3,
              **CAPS)


def test_gemma2_matches_transformers(tmp_path):
    hm = hf_model("gemma2", **GEMMA2)
    hm.save_pretrained(tmp_path)
    m = GPT.from_pretrained(tmp_path)
    cfg = m.config
    assert (cfg.placement, cfg.activation, cfg.qk_norm, cfg.local_layers) == (
        "sandwich", "geglu", "none", ())
    assert (cfg.attn_softcap, cfg.logit_softcap) == (1.5, 2.0)
    # transformers' default pattern: layers 0 and 2 slide (12 positions), 1 is global
    assert (cfg.sliding_window, cfg.sliding_layers) == (12, (True, False, True))
    assert cfg.attn_scale == 12 ** -0.5
    assert m.num_parameters() == sum(p.numel() for p in hm.parameters())
    w = hm.model.layers[2].post_attention_layernorm.weight.detach()
    np.testing.assert_array_equal(m.read_tensor("blocks.2.ln1_post.weight"),
                                  (1.0 + w.float()).numpy())
    ids, ref = check_against(hm, m)  # 40 and 18 positions: past the window
    close(gpt_forward(m.state_dict(), cfg, ids), ref)
    # the caps bend these logits: without either, blockc is far from transformers
    for field in ("attn_softcap", "logit_softcap"):
        off = GPT(dataclasses.replace(cfg, **{field: None}), m.params)
        assert np.abs(off(ids) - ref).max() > 1e-2 * np.abs(ref).max(), field
    m.save_pretrained(tmp_path / "back")
    hb = AutoModelForCausalLM.from_pretrained(tmp_path / "back", attn_implementation="eager")
    close(hf_logits(hb.eval(), ids), ref)
    assert hb.config.attn_logit_softcapping == 1.5 and hb.config.query_pre_attn_scalar == 12
    # llama.cpp fixes a gemma2 file's attention scale by the model's size: refused by name
    with pytest.raises(ValueError, match="attn_scale"):
        m.save_gguf(tmp_path / "g.gguf")


def test_gemma2_without_caps_and_bad_caps():
    cfg = GPTConfig.from_hf(dict(model_type="gemma2", **SMALL, attn_logit_softcapping=None,
                                 final_logit_softcapping=None, sliding_window=8))
    assert cfg.attn_softcap is None and cfg.logit_softcap is None
    assert cfg.sliding_layers == (True, False)
    with pytest.raises(ValueError, match="attn_logit_softcapping"):
        GPTConfig.from_hf(dict(model_type="gemma2", attn_logit_softcapping=-1.0))
    with pytest.raises(ValueError, match="GPTConfig.logit_softcap"):
        GPTConfig(vocab=8, context=8, width=8, heads=2, layers=1, logit_softcap=0.0)
    with pytest.raises(TypeError, match="GPTConfig.attn_softcap"):
        GPTConfig(vocab=8, context=8, width=8, heads=2, layers=1, attn_softcap="50")
    # and a config of no family llama.cpp or transformers softcaps is not saved as one
    with pytest.raises(ValueError, match="attn_softcap"):
        GPTConfig(vocab=8, context=8, width=8, heads=2, layers=1, norm="rms",
                  activation="swiglu", positions="rope", qkv_bias=False, out_bias=False,
                  mlp_bias=False, tie_weights=False, attn_softcap=5.0).to_hf()


# ---- the GGUF files --------------------------------------------------------------------------

def _peer_read(path):
    r = gguf.GGUFReader(str(path))
    keys = {f.name: f.contents() for f in r.fields.values()}
    tensors = {t.name: t for t in r.tensors}
    return keys, tensors


GGUF_CASES = {
    # llama.cpp's patterns: gemma2 slides layers 0, 2, ...; gemma3 five layers of six
    "gemma2": ("gemma2", dict(head_dim=16, query_pre_attn_scalar=16, sliding_window=12,
                              **CAPS)),
    "gemma3": ("gemma3_text", dict(head_dim=16, query_pre_attn_scalar=16, sliding_window=12,
                                   num_hidden_layers=6, rope_local_base_freq=10000.0,
                                   rope_parameters={"full_attention": dict(
                                       rope_type="linear", factor=2.0, rope_theta=100000.0),
                                       "sliding_attention": dict(rope_type="default",
                                                                 rope_theta=10000.0)})),
}


@pytest.mark.parametrize("name", sorted(GGUF_CASES))
def test_gguf_written_read_and_dequantised(tmp_path, name):
    model_type, kw = GGUF_CASES[name]
    hm = hf_model(model_type, **kw)
    hm.save_pretrained(tmp_path / "hf")
    m = GPT.from_pretrained(tmp_path / "hf")
    ids, ref = check_against(hm, m)
    for dtype in ("F32", "Q8_0", "Q4_K_M"):
        path = tmp_path / f"{name}-{dtype}.gguf"
        m.save_gguf(path, dtype)
        keys, tensors = _peer_read(path)
        assert keys["general.architecture"] == name
        assert keys[f"{name}.attention.sliding_window"] == 12
        assert keys[f"{name}.attention.key_length"] == 16
        if name == "gemma2":
            assert keys["gemma2.attn_logit_softcapping"] == pytest.approx(1.5)
            assert keys["gemma2.final_logit_softcapping"] == pytest.approx(2.0)
        else:
            assert keys["gemma3.rope.freq_base"] == pytest.approx(100000.0)
            assert keys["gemma3.rope.scaling.type"] == "linear"
            assert tensors["blk.5.attn_q_norm.weight"].data.shape == (16,)
        for t in ("post_attention_norm", "post_ffw_norm", "ffn_norm", "attn_norm"):
            assert f"blk.1.{t}.weight" in tensors
        if dtype == "F32":  # llama.cpp's norm gains: transformers' w plus 1, in the file
            w = hm.model.layers[1].post_feedforward_layernorm.weight.detach()
            np.testing.assert_array_equal(np.asarray(tensors["blk.1.post_ffw_norm.weight"].data),
                                          (1.0 + w.float()).numpy())
        g = GPT.from_pretrained(path, dtype="exact")
        assert g.config == m.config
        assert_dequantised(g, path, name)
        close(g(ids), ref if dtype == "F32" else gpt_forward(g.state_dict(), g.config, ids))
    if name == "gemma3":  # its caps are not written to a gemma3 file: refused by name
        capped = GPT(dataclasses.replace(m.config, logit_softcap=30.0), m.params)
        with pytest.raises(ValueError, match="logit_softcap"):
            capped.save_gguf(tmp_path / "capped.gguf")


def _converter_names(name):
    """transformers' names -> llama.cpp's, as its converter maps a Gemma checkpoint."""
    if name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if name == "model.norm.weight":
        return "output_norm.weight"
    _, _, i, *rest = name.split(".")
    part = ".".join(rest)
    table = {"input_layernorm.weight": "attn_norm", "self_attn.q_proj.weight": "attn_q",
             "self_attn.k_proj.weight": "attn_k", "self_attn.v_proj.weight": "attn_v",
             "self_attn.o_proj.weight": "attn_output", "self_attn.q_norm.weight": "attn_q_norm",
             "self_attn.k_norm.weight": "attn_k_norm",
             "post_attention_layernorm.weight": "post_attention_norm",
             "pre_feedforward_layernorm.weight": "ffn_norm", "mlp.gate_proj.weight": "ffn_gate",
             "mlp.up_proj.weight": "ffn_up", "mlp.down_proj.weight": "ffn_down",
             "post_feedforward_layernorm.weight": "post_ffw_norm"}
    return f"blk.{i}.{table[part]}.weight"


def write_converter_file(path, hm, arch, keys, names):
    """A GGUF file of transformers model ``hm`` written by the gguf package as llama.cpp's
    converter lays a Gemma one out: its size keys, ``keys(writer)`` for the architecture's
    own, no lm_head (tied), every gain ending in norm.weight plus 1, ``names(hf_name)``."""
    hc = hm.config
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(hc.max_position_embeddings)
    w.add_embedding_length(hc.hidden_size)
    w.add_block_count(hc.num_hidden_layers)
    w.add_feed_forward_length(hc.intermediate_size)
    w.add_head_count(hc.num_attention_heads)
    w.add_head_count_kv(hc.num_key_value_heads)
    w.add_layer_norm_rms_eps(hc.rms_norm_eps)
    w.add_key_length(hc.head_dim)
    w.add_value_length(hc.head_dim)
    keys(w)
    for n, t in hm.state_dict().items():
        if n == "lm_head.weight":
            continue
        a = t.detach().float().numpy()
        if n.endswith("norm.weight"):
            a = a + np.float32(1.0)
        w.add_tensor(names(n), np.ascontiguousarray(a, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("name", sorted(GGUF_CASES))
def test_a_converter_shaped_file_matches_transformers(tmp_path, name):
    """A file written by the gguf package as llama.cpp's converter lays one out (its keys;
    gemma2's without rope.freq_base; every gain ending in norm.weight plus 1), not by blockc."""
    model_type, kw = GGUF_CASES[name]
    hm = hf_model(model_type, seed=7, **kw)
    hc = hm.config

    def keys(w):
        w.add_sliding_window(hc.sliding_window)
        if name == "gemma2":
            w.add_attn_logit_softcapping(hc.attn_logit_softcapping)
            w.add_final_logit_softcapping(hc.final_logit_softcapping)
        else:
            w.add_rope_freq_base(100000.0)
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(2.0)
    path = write_converter_file(tmp_path / "peer.gguf", hm, name, keys, _converter_names)
    g = GPT.from_pretrained(path)
    ids = np.random.default_rng(3).integers(0, V, size=(1, 40))
    ref = hf_logits(hm, ids)
    close(g(ids), ref)
    np.testing.assert_array_equal(g.generate(ids[:, :6], 12), hf_greedy(hm, ids[:, :6], 12))


def test_gguf_refusals_name_the_field(tmp_path):
    # Gemma 3 sliding layers llama.cpp would not slide (its five of six)
    hm = hf_model("gemma3_text", head_dim=16, query_pre_attn_scalar=16, sliding_window=12,
                  layer_types=["full_attention", "sliding_attention"],
                  rope_local_base_freq=10000.0)
    hm.save_pretrained(tmp_path)
    m = GPT.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="sliding_layers"):
        m.save_gguf(tmp_path / "x.gguf")
    # Gemma 2 without soft-caps: llama.cpp's gemma2 always caps
    hm = hf_model("gemma2", head_dim=16, query_pre_attn_scalar=16, attn_logit_softcapping=None)
    hm.save_pretrained(tmp_path / "g2")
    with pytest.raises(ValueError, match="attn_softcap"):
        GPT.from_pretrained(tmp_path / "g2").save_gguf(tmp_path / "y.gguf")


# ---- threads, batch, the cache ----------------------------------------------------------------

def test_softcaps_same_bits_at_any_threads_and_batch_and_through_the_cache(tmp_path):
    cfg = GPTConfig(vocab=V, context=48, width=32, heads=4, layers=2, kv_heads=2, head_dim=16,
                    norm="rms", placement="sandwich", activation="geglu", positions="rope",
                    tie_weights=True, qkv_bias=False, out_bias=False, mlp_bias=False,
                    embed_scale=5.5, sliding_window=7, sliding_layers=(True, False),
                    attn_softcap=1.5, logit_softcap=2.0)
    assert "attn_softcap" in cfg.family_features and "logit_softcap" in cfg.family_features
    m = GPT.random(cfg, seed=3)
    rng = np.random.default_rng(5)
    for name, a in m.state_dict().items():
        m.write_tensor(name, (a * (3.0 if a.ndim > 1 else 1.0)
                              + (rng.normal(0, 0.3, a.shape) if a.ndim == 1 else 0)
                              ).astype(np.float32))
    ids = np.random.default_rng(4).integers(0, V, size=(2, 30))
    out = same_bits_any_threads(m, ids)
    ref = gpt_forward(m.state_dict(), cfg, ids)
    close(out, ref)
    assert np.abs(ref).max() <= 2.0  # the logits capped
    # token by token through the cache (the decoding kernel): the prefill's bits
    c = m.new_cache(2, 48)
    got = np.concatenate([m(ids[:, i:i + 1], cache=c) for i in range(30)], axis=1)
    assert np.array_equal(got.view(np.uint32), out.view(np.uint32))
    with pytest.raises(ValueError, match="training does not compute"):
        m.loss(ids[:, :4], ids[:, :4])
