"""The modern decoder: RMSNorm, SwiGLU, rotary positions, grouped K/V heads.

The NumPy oracle (blockc.reference.gpt_forward) over random valid configs, and
transformers' Llama, Mistral and Qwen2 as the peers (those tests skip without
it; CI installs it). Every checkpoint is made here from random weights, its
norm gains and biases perturbed off their defaults so every tensor counts."""
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blockc
from blockc import BlockConfig, GPT, GPTConfig
from blockc.reference import gpt_forward

from helpers import close

LLAMA = dict(norm="rms", activation="swiglu", positions="rope", qkv_bias=False, out_bias=False,
             mlp_bias=False)


def perturbed(cfg, seed=0, dtype="float32"):
    m = GPT.random(cfg, seed=seed)
    rng = np.random.default_rng(seed + 1)
    sd = {k: (v + rng.normal(0, 0.3 if v.ndim == 1 else 0.03, v.shape)).astype(np.float32)
          for k, v in m.state_dict().items()}
    m.load_state_dict(sd)
    return m if dtype == "float32" else m.astype(dtype)


# -- the oracle -----------------------------------------------------------------------------

@st.composite
def configs(draw):
    heads = draw(st.integers(1, 4))
    kv = draw(st.sampled_from([d for d in range(1, heads + 1) if heads % d == 0]))
    positions = draw(st.sampled_from(["learned", "rope"]))
    head_dim = draw(st.one_of(st.none(), st.integers(1, 6).map(lambda x: 2 * x)))
    width = draw(st.integers(1, 5)) * heads * (2 if head_dim is None and positions == "rope" else 1)
    return GPTConfig(
        vocab=draw(st.integers(2, 40)), context=draw(st.integers(1, 12)), width=width, heads=heads,
        layers=draw(st.integers(1, 3)), eps=draw(st.sampled_from([1e-5, 1e-6, 1e-3])),
        tie_weights=draw(st.booleans()), norm=draw(st.sampled_from(["layer", "rms", "none"])),
        placement=draw(st.sampled_from(["pre", "post"])),
        activation=draw(st.sampled_from(["gelu_tanh", "gelu", "relu", "swiglu"])),
        d_ff=draw(st.one_of(st.none(), st.integers(1, 40))), positions=positions,
        rope_theta=draw(st.sampled_from([10000.0, 500000.0, 17.5])), kv_heads=kv,
        head_dim=head_dim, residual=draw(st.booleans()), qkv_bias=draw(st.booleans()),
        out_bias=draw(st.booleans()), mlp_bias=draw(st.booleans()))


@settings(max_examples=60, deadline=None)
@given(configs(), st.integers(0, 2 ** 16), st.integers(1, 3))
def test_random_configs_match_the_oracle(cfg, seed, batch):
    m = perturbed(cfg, seed)
    ids = np.random.default_rng(seed).integers(0, cfg.vocab, size=(batch, cfg.context))
    logits = m(ids)
    close(logits, gpt_forward(m.state_dict(), cfg, ids), tol=5e-5)
    assert m.num_parameters() == blockc.gpt_parameter_formula(cfg) == sum(
        v.size for v in m.state_dict().values())


@settings(max_examples=25, deadline=None)
@given(configs(), st.integers(0, 2 ** 16))
def test_cached_steps_are_the_bits_of_the_whole_sequence(cfg, seed):
    m = perturbed(cfg, seed)
    ids = np.random.default_rng(seed).integers(0, cfg.vocab, size=(2, cfg.context))
    whole = m(ids)
    cache = m.new_cache(2, cfg.context)
    cut = max(1, cfg.context // 2)
    steps = [m(ids[:, :cut], cache=cache)] + [m(ids[:, t:t + 1], cache=cache)
                                              for t in range(cut, cfg.context)]
    np.testing.assert_array_equal(np.concatenate(steps, axis=1), whole)


@pytest.mark.parametrize("head_dim", [16, 32, 64, 80])
@pytest.mark.parametrize("kv", [1, 3, 9])
def test_decoding_attention_over_several_key_tiles_is_the_whole_passs_bits(isa, threads,
                                                                          head_dim, kv):
    # 9 query heads on 1, 3 or 9 K/V heads (decoding runs up to 4 of a group side by
    # side), head sizes of 1-8 vectors on every instruction set (whole vectors, the
    # 4-vector path, a partial last vector), 150 keys: three tiles of 64, the last short
    cfg = GPTConfig(vocab=50, context=150, width=48, heads=9, layers=1, kv_heads=kv,
                    head_dim=head_dim, **LLAMA)
    m = perturbed(cfg, seed=head_dim + kv)
    ids = np.random.default_rng(kv).integers(0, cfg.vocab, size=(1, cfg.context))
    close(m(ids), gpt_forward(m.state_dict(), cfg, ids), tol=5e-5)
    for n in (1, 2):
        threads(n)
        whole = m(ids)
        cache = m.new_cache(1, cfg.context)
        steps = [m(ids[:, :70], cache=cache)] + [m(ids[:, t:t + 1], cache=cache)
                                                 for t in range(70, cfg.context)]
        np.testing.assert_array_equal(np.concatenate(steps, axis=1), whole)


def test_rope_is_the_rotate_half_layout():
    # a vector at position p: pair (i, i + Dh/2) turned by p * theta^(-2i/Dh)
    from blockc.reference.gpt import rope, rope_angles
    x = np.arange(8, dtype=np.float64)[None] + 1
    a = rope_angles(np.array([3]), 8, 10000.0)
    y = rope(x, a)
    for i in range(4):
        t = 3 * 10000.0 ** (-2 * i / 8)
        np.testing.assert_allclose(y[0, i], x[0, i] * np.cos(t) - x[0, i + 4] * np.sin(t), rtol=1e-6)
        np.testing.assert_allclose(y[0, i + 4], x[0, i + 4] * np.cos(t) + x[0, i] * np.sin(t),
                                   rtol=1e-6)


@pytest.mark.parametrize("kw,match", [
    (dict(kv_heads=3), "kv_heads"), (dict(kv_heads=0), "kv_heads"),
    (dict(positions="rope", head_dim=5), "head_dim"), (dict(positions="rope", rope_theta=0.0), "rope_theta"),
    (dict(positions="rope", rope_theta=float("nan")), "rope_theta"), (dict(d_ff=0), "d_ff"),
    (dict(activation="geglu"), "activation"), (dict(positions="alibi"), "positions"),
    (dict(norm="batch"), "norm"), (dict(head_dim=0), "head_dim"),
])
def test_invalid_configs_name_the_field(kw, match):
    with pytest.raises(ValueError, match=match):
        GPTConfig(vocab=10, context=4, width=8, heads=4, layers=1, **kw)


# -- the book's block as a decoder ---------------------------------------------------------

def test_the_books_block_stacks_into_a_decoder():
    blk = BlockConfig()  # 128_Block: D=8, 2 heads, F=32, pre-norm RMSNorm, GELU-tanh, no biases
    cfg = GPTConfig.from_block(blk, vocab=30, context=12, layers=3, positions="learned")
    m = perturbed(cfg, 4)
    sd = m.state_dict()
    per_block = blockc.book.block_params(8, 32, 1)["per_block"]  # the book's count of a block
    assert blockc.gpt_parameter_count(cfg) == 30 * 8 + 12 * 8 + 3 * per_block + 8 + 0
    ids = np.random.default_rng(4).integers(0, 30, size=(2, 12))
    # each layer is the dynamic engine's block with the causal mask (the decoder's)
    x = sd["token.weight"][ids] + sd["position.weight"][:12]
    hidden = m.hidden_states(ids)
    causal = BlockConfig(causal=True)
    for i in range(3):
        w = {k[len(f"blocks.{i}."):]: v for k, v in sd.items() if k.startswith(f"blocks.{i}.")}
        x = blockc.block_forward(x, w, causal)
        np.testing.assert_allclose(hidden[i], x, rtol=1e-5, atol=1e-5)
    # with rotary positions, exercise 6's gated MLP, generating
    gated = GPTConfig.from_block(BlockConfig(activation="swiglu", d_ff=24), vocab=30, context=12,
                                 layers=2)
    g = perturbed(gated, 5)
    close(g(ids), gpt_forward(g.state_dict(), gated, ids))
    out = g.generate(ids[:, :4], 8)
    np.testing.assert_array_equal(out[:, 4:], g(out[:, :-1])[:, 3:].argmax(-1))
    with pytest.raises(TypeError, match="BlockConfig"):
        GPTConfig.from_block(dict(d_model=8), vocab=30, context=12)


def test_cli_params_counts_llama_7b(capsys):
    from blockc.cli import main
    assert main(["gpt", "--params", "--preset", "llama-7b"]) == 0
    out = capsys.readouterr().out
    # 32 (4D^2 + 3DF + 2D) + 2VD + D, the published "6.7B"; the book's 2DF block is 157,294,592
    assert out.count("6,738,415,616") == 2 and "157,294,592" in out and "202,383,360" in out
    assert main(["gpt", "--params", "--preset", "gpt2", "--norm", "rms", "--activation", "swiglu",
                 "--positions", "rope", "--kv-heads", "4", "--d-ff", "2048", "--bias", "none",
                 "--untied"]) == 0
    out = capsys.readouterr().out
    cfg = GPTConfig.preset("gpt2", tie_weights=False, d_ff=2048, kv_heads=4, **LLAMA)
    assert out.count(f"{blockc.gpt_parameter_count(cfg):,}") == 2


# -- transformers as the peer --------------------------------------------------------------

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


def test_a_sliding_window_caps_the_context_where_it_is_exact(tmp_path):
    hm = hf_model("mistral", seed=5, num_key_value_heads=2, sliding_window=16)
    hm.save_pretrained(tmp_path)
    m = GPT.from_pretrained(tmp_path)
    assert m.config.context == 16
    ids = np.random.default_rng(5).integers(0, 97, size=(1, 16))
    ref = hf_logits(hm, ids)
    np.testing.assert_allclose(m(ids), ref, rtol=0, atol=2e-5 * max(1.0, np.abs(ref).max()))
    with pytest.raises(ValueError, match="context of 16"):
        m(np.zeros((1, 17), np.int64))


@pytest.mark.parametrize("edit,match", [
    (dict(rope_scaling={"rope_type": "llama3", "factor": 8.0}), "rope"),
    (dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}), "rope_type"),
    (dict(hidden_act="gelu"), "hidden_act"),
    (dict(partial_rotary_factor=0.5), "partial_rotary_factor"),
    (dict(model_type="mixtral"), "model_type 'mixtral'"),
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
