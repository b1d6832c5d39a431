"""The modern decoder against transformers' Llama, Mistral and Qwen2.

These skip without PyTorch and transformers (CI installs them); the NumPy
oracle's tests are test_llama.py. Every checkpoint is made here from random
weights, its norm gains and biases perturbed off their defaults so every tensor
counts."""
import json

import numpy as np
import pytest

import blockc
from blockc import GPT, GPTConfig

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

BASE = dict(vocab_size=97, hidden_size=32, intermediate_size=50, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=48, rms_norm_eps=1e-6)
LLAMAS = {
    "mha": dict(num_key_value_heads=4),
    "gqa": dict(num_key_value_heads=2, rope_theta=500000.0),
    "mqa": dict(num_key_value_heads=1, intermediate_size=37),
    "tied": dict(num_key_value_heads=2, tie_word_embeddings=True),
    "head_dim": dict(num_key_value_heads=2, head_dim=12),
    "biases": dict(num_key_value_heads=2, attention_bias=True, mlp_bias=True, rope_theta=100.0),
    "wide": dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=3, num_hidden_layers=3,
                 intermediate_size=131, rms_norm_eps=1e-5),
}
QWENS = {
    "gqa": dict(num_key_value_heads=2),
    "tied_mqa": dict(num_key_value_heads=1, tie_word_embeddings=True, rope_theta=1e6),
    "head_dim": dict(num_key_value_heads=2, head_dim=16),
}


def hf_model(kind, seed=0, **kw):
    torch.manual_seed(seed)
    cls, cfg_cls = {"llama": (transformers.LlamaForCausalLM, transformers.LlamaConfig),
                    "qwen2": (transformers.Qwen2ForCausalLM, transformers.Qwen2Config),
                    "mistral": (transformers.MistralForCausalLM, transformers.MistralConfig)}[kind]
    m = cls(cfg_cls(**{**BASE, **kw})).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * (0.3 if p.ndim == 1 else 0.03))
    return m


def hf_logits(m, ids):
    with torch.no_grad():
        return m(torch.as_tensor(ids)).logits.float().numpy()


def hf_greedy(m, ids, n):
    with torch.no_grad():
        return m.generate(torch.as_tensor(ids), max_new_tokens=n, do_sample=False, eos_token_id=None,
                          pad_token_id=0, attention_mask=torch.ones(ids.shape, dtype=torch.long)).numpy()


CASES = [("llama", k, v) for k, v in LLAMAS.items()] + [("qwen2", k, v) for k, v in QWENS.items()] \
    + [("mistral", "no_window", dict(num_key_value_heads=2, sliding_window=None))]


@pytest.mark.parametrize("kind,name,kw", CASES, ids=[f"{k}-{n}" for k, n, _ in CASES])
def test_logits_and_greedy_tokens_match_transformers(tmp_path, kind, name, kw):
    hm = hf_model(kind, **kw)
    hm.save_pretrained(tmp_path)
    m = GPT.from_pretrained(tmp_path)
    assert m.num_parameters() == sum(p.numel() for p in hm.parameters())
    ids = np.random.default_rng(1).integers(0, BASE["vocab_size"], size=(2, 40))
    ref = hf_logits(hm, ids)
    np.testing.assert_allclose(m(ids), ref, rtol=0, atol=2e-5 * max(1.0, np.abs(ref).max()))
    want = hf_greedy(hm, ids[:, :6], 24)
    np.testing.assert_array_equal(m.generate(ids[:, :6], 24), want)
    np.testing.assert_array_equal(m.generate(ids[:, :6], 24, use_cache=False), want)


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_save_pretrained_round_trips_through_transformers(tmp_path, kind):
    hm = hf_model(kind, seed=2, num_key_value_heads=2)
    hm.save_pretrained(tmp_path / "a")
    m = GPT.from_pretrained(tmp_path / "a")
    m.save_pretrained(tmp_path / "b")
    cfg = json.loads((tmp_path / "b" / "config.json").read_text())
    assert cfg["model_type"] == kind
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "b").eval()
    assert type(back) is type(hm)
    ids = np.random.default_rng(2).integers(0, 97, size=(1, 20))
    np.testing.assert_array_equal(hf_logits(back, ids), hf_logits(hm, ids))
    np.testing.assert_array_equal(GPT.from_pretrained(tmp_path / "b").params, m.params)


def test_bfloat16_and_q8_0_run_within_their_budgets(tmp_path):
    hm = hf_model("llama", seed=3, num_key_value_heads=2)
    hm.to(torch.bfloat16).save_pretrained(tmp_path)
    m16 = GPT.from_pretrained(tmp_path)
    assert m16.dtype == "bfloat16"
    ids = np.random.default_rng(3).integers(0, 97, size=(2, 30))
    ref = hf_logits(hm.float(), ids)  # the bfloat16 weights, computed in float32
    scale = np.abs(ref).max()
    np.testing.assert_allclose(m16(ids), ref, rtol=0, atol=2e-5 * max(1.0, scale))
    q8 = GPT.from_pretrained(tmp_path, dtype="q8_0")
    err = np.abs(q8(ids) - ref).max() / scale
    assert 0 < err < 0.03  # q8_0's budget on this model: 3% of the largest logit
    # the generation options, batching and streaming work on the modern decoder too
    prompts = [ids[0, :3], ids[1, :7]]
    opts = dict(temperature=0.9, top_p=0.9, repetition_penalty=1.1, seed=4)
    for p, row in zip(prompts, q8.generate(prompts, 10, **opts)):
        np.testing.assert_array_equal(row, q8.generate(p[None], 10, **opts)[0])
    assert list(m16.stream(prompts[0], 5)) == list(m16.generate(prompts[0][None], 5)[0, 3:])


def test_a_sliding_window_runs_past_itself(tmp_path):
    # (the window and its ring against transformers in detail: test_sliding_window.py)
    hm = hf_model("mistral", seed=5, num_key_value_heads=2, sliding_window=16)
    hm.save_pretrained(tmp_path)
    m = GPT.from_pretrained(tmp_path)
    assert m.config.context == 48 and m.config.sliding_window == 16
    ids = np.random.default_rng(5).integers(0, 97, size=(1, 48))
    ref = hf_logits(hm, ids)
    np.testing.assert_allclose(m(ids), ref, rtol=0, atol=2e-5 * max(1.0, np.abs(ref).max()))


@pytest.mark.parametrize("edit,match", [
    (dict(rope_scaling={"rope_type": "llama3", "factor": 8.0}), "rope"),
    (dict(rope_parameters={"rope_type": "mrope", "rope_theta": 1e4, "factor": 4.0}), "rope_type"),
    (dict(hidden_act="gelu"), "hidden_act"),
    (dict(partial_rotary_factor=0.5), "partial_rotary_factor"),
    (dict(model_type="deepseek_v2"), "model_type 'deepseek_v2'"),  # (mixtral now runs)
    (dict(num_local_experts=8), "num_local_experts"),
    (dict(num_key_value_heads=3), "kv_heads"),
    (dict(head_dim=7), "head_dim"),
])
def test_configs_that_compute_differently_are_refused_by_name(edit, match):
    d = transformers.LlamaConfig(**BASE, num_key_value_heads=2).to_dict()
    d.update(edit)
    with pytest.raises(ValueError, match=match):
        GPTConfig.from_hf(d)


def test_llama_7b_shape_counts_as_transformers_does():
    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                                   num_hidden_layers=32, num_attention_heads=32,
                                   max_position_embeddings=2048)
    with torch.device("meta"):
        hm = transformers.LlamaForCausalLM(cfg)
    ours = GPTConfig.from_hf(cfg.to_dict())
    assert ours == GPTConfig.preset("llama-7b", eps=cfg.rms_norm_eps)
    assert blockc.gpt_parameter_count(ours) == sum(p.numel() for p in hm.parameters()) \
        == 6_738_415_616
