"""Gemma (the first: Gemma 2B/7B, CodeGemma; issue 50) against transformers and llama.cpp's
``gemma`` files: a tiny random ``gemma`` checkpoint made by transformers (nothing
downloaded), blockc's float32 logits within 1e-4 of the largest of transformers', 12
greedy tokens identical, saved back as a directory transformers loads and as GGUF files
(F32, Q8_0, Q4_K_M) the gguf package reads; a file laid out as llama.cpp's converter writes
one (its names and keys, every norm gain plus 1) read by blockc."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
from transformers import AutoModelForCausalLM  # noqa: E402

from blockc import GPT  # noqa: E402
from blockc.reference.gpt import gpt_forward  # noqa: E402
from support.gguf_files import assert_dequantised  # noqa: E402
from test_families_new import V, check_against, close, hf_greedy, hf_logits  # noqa: E402
from test_gemma import _converter_names, _peer_read, hf_model, write_converter_file  # noqa: E402

# the legacy "gelu" of Gemma's releases: transformers reads it as the tanh GELU
GEMMA = dict(head_dim=16, hidden_act="gelu")


def test_gemma_matches_transformers_and_saves_back(tmp_path):
    hm = hf_model("gemma", **GEMMA)
    hm.save_pretrained(tmp_path)
    m = GPT.from_pretrained(tmp_path)
    cfg = m.config
    assert (cfg.placement, cfg.activation, cfg.qk_norm, cfg.sliding_window) == (
        "pre", "geglu", "none", None)
    assert cfg.embed_scale == float(np.float32(32 ** 0.5)) and cfg.attn_scale is None
    assert m.num_parameters() == sum(p.numel() for p in hm.parameters())
    w = hm.model.layers[1].post_attention_layernorm.weight.detach()
    np.testing.assert_array_equal(m.read_tensor("blocks.1.ln2.weight"), (1.0 + w.float()).numpy())
    ids, ref = check_against(hm, m)
    close(gpt_forward(m.state_dict(), cfg, ids), ref)
    m.save_pretrained(tmp_path / "back")
    hb = AutoModelForCausalLM.from_pretrained(tmp_path / "back").eval()
    assert hb.config.model_type == "gemma"
    close(hf_logits(hb, ids), ref)


def test_gemma_gguf_written_read_and_dequantised(tmp_path):
    hm = hf_model("gemma", **GEMMA)
    hm.save_pretrained(tmp_path / "hf")
    m = GPT.from_pretrained(tmp_path / "hf")
    ids, ref = check_against(hm, m)
    for dtype in ("F32", "Q8_0", "Q4_K_M"):
        path = tmp_path / f"gemma-{dtype}.gguf"
        m.save_gguf(path, dtype)
        keys, tensors = _peer_read(path)
        assert keys["general.architecture"] == "gemma"
        assert "gemma.attention.sliding_window" not in keys
        assert keys["gemma.attention.key_length"] == 16
        assert "blk.1.ffn_norm.weight" in tensors and "blk.1.post_ffw_norm.weight" not in tensors
        g = GPT.from_pretrained(path, dtype="exact")
        assert g.config == m.config
        assert_dequantised(g, path, "gemma")
        close(g(ids), ref if dtype == "F32" else gpt_forward(g.state_dict(), g.config, ids))


def test_a_converter_shaped_gemma_file_matches_transformers(tmp_path):
    hm = hf_model("gemma", seed=7, **GEMMA)
    # pre-norm Gemma: the norm before its MLP is llama.cpp's ffn_norm
    path = write_converter_file(tmp_path / "peer.gguf", hm, "gemma", lambda w: None,
                                lambda n: _converter_names(n).replace("post_attention_norm",
                                                                      "ffn_norm"))
    g = GPT.from_pretrained(path)
    ids = np.random.default_rng(3).integers(0, V, size=(1, 40))
    close(g(ids), hf_logits(hm, ids))
    np.testing.assert_array_equal(g.generate(ids[:, :6], 12), hf_greedy(hm, ids[:, :6], 12))
