"""The modern decoder: RMSNorm, SwiGLU, rotary positions, grouped K/V heads.

The NumPy oracle (blockc.reference.gpt_forward) over random valid configs, the
KV cache's bits and the config rules; transformers' Llama, Mistral and Qwen2 as
the peers are test_llama_peers.py (they skip without it, and these do not)."""
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
    (dict(activation="reglu"), "activation"), (dict(positions="alibi"), "positions"),
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
