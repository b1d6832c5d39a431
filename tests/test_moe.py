"""Mixtures of experts (issue 50): Mixtral and Qwen3-MoE against transformers itself (tiny
random checkpoints made by transformers: AutoConfig.for_model, from_config, save_pretrained
into tmp_path; nothing downloaded): float32 logits within 1e-4 of the largest, 12 greedy
tokens identical, save_pretrained read back by transformers; the NumPy oracle against C in
every weight format (its dequantised weights); the same bits at 1 and 2 threads and at
batch 1 and 3; training refused by name."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

import blockc  # noqa: E402
from blockc import GPT, GPTConfig  # noqa: E402
from blockc.reference.gpt import gpt_forward  # noqa: E402
from test_families_new import hf_logits  # noqa: E402

V = 64
SMALL = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
KINDS = {
    "mixtral": dict(num_local_experts=8, num_experts_per_tok=2),
    "qwen3_moe": dict(num_experts=6, num_experts_per_tok=3, moe_intermediate_size=24,
                      norm_topk_prob=False, head_dim=16),
    "qwen3_moe_norm": dict(num_experts=6, num_experts_per_tok=2, moe_intermediate_size=24,
                           norm_topk_prob=True),
}


def hf_model(kind, seed=0):
    torch.manual_seed(seed)
    mt = "qwen3_moe" if kind.startswith("qwen3_moe") else kind
    cfg = AutoConfig.for_model(mt, **{**SMALL, **KINDS[kind]})
    m = AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():  # norms away from 1, weights away from their init's zeros
        for p in m.parameters():
            p.add_(torch.randn_like(p) * (0.3 if p.ndim == 1 else 0.05))
    return m


def close(got, ref, tol=1e-4):
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol * np.abs(ref).max())


@pytest.fixture(scope="module", params=sorted(KINDS))
def pair(request, tmp_path_factory):
    hm = hf_model(request.param)
    d = tmp_path_factory.mktemp(request.param)
    hm.save_pretrained(d)
    return request.param, hm, d, GPT.from_pretrained(d)


def test_config_reads_the_experts(pair):
    kind, hm, _, m = pair
    c = m.config
    assert (c.n_experts, c.experts_used) == (hm.config.num_local_experts,
                                             hm.config.num_experts_per_tok)
    assert c.router_norm == (kind != "qwen3_moe")  # Mixtral always, Qwen3-MoE by its flag
    assert c.d_ff_ == (48 if kind == "mixtral" else 24)
    assert "n_experts (a mixture of experts)" in c.family_features


def test_logits_and_greedy_match_transformers(pair):
    _, hm, _, m = pair
    ids = np.random.default_rng(1).integers(0, V, size=(1, 40))
    ref = hf_logits(hm, ids)
    close(m(ids), ref)
    with torch.no_grad():
        want = hm.generate(torch.as_tensor(ids[:, :6]), max_new_tokens=12, do_sample=False,
                           eos_token_id=None, pad_token_id=0,
                           attention_mask=torch.ones((1, 6), dtype=torch.long)).numpy()
    np.testing.assert_array_equal(m.generate(ids[:, :6], 12), want)


def test_oracle_matches_c_and_transformers(pair):
    _, hm, _, m = pair
    ids = np.random.default_rng(2).integers(0, V, size=(2, 17))
    ref = gpt_forward(m.state_dict(), m.config, ids)
    close(m(ids), ref)
    close(ref.astype(np.float32), hf_logits(hm, ids))


def test_same_bits_at_any_thread_count_and_batch(pair):
    _, _, _, m = pair
    ids = np.random.default_rng(3).integers(0, V, size=(3, 13))
    before = blockc.get_num_threads()
    try:
        blockc.set_num_threads(1)
        one = m(ids)
        blockc.set_num_threads(2)
        two = m(ids)
    finally:
        blockc.set_num_threads(before)
    assert one.tobytes() == two.tobytes()
    alone = np.concatenate([m(ids[b:b + 1]) for b in range(3)])
    assert alone.tobytes() == one.tobytes()
    # one token at a time through the cache: the full pass's bits
    cache = m.new_cache(3, 13)
    steps = np.concatenate([m(ids[:, t:t + 1], cache) for t in range(13)], axis=1)
    assert steps.tobytes() == one.tobytes()


def test_save_pretrained_reads_back_in_transformers(pair, tmp_path):
    kind, hm, _, m = pair
    m.save_pretrained(tmp_path)
    back = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert back.config.model_type == hm.config.model_type
    ids = np.random.default_rng(4).integers(0, V, size=(1, 11))
    close(hf_logits(back, ids), hf_logits(hm, ids))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "q8_0", "q4_0", "q4_k", "q6_k"])
def test_every_format_matches_the_oracle_on_its_weights(dtype):
    # the experts' matrices in each weight format: the C logits against the oracle on the
    # dequantised weights (width and expert widths of whole 256-column blocks for k-quants)
    cfg = GPTConfig(vocab=V, context=32, width=256, heads=4, layers=2, norm="rms",
                    activation="swiglu", positions="rope", d_ff=256, kv_heads=2,
                    qkv_bias=False, out_bias=False, mlp_bias=False, tie_weights=False,
                    n_experts=4, experts_used=2, router_norm=True, eps=1e-6)
    m = GPT.random(cfg, seed=5, dtype=dtype)
    rng = np.random.default_rng(6)  # a router whose choices are clear (no near-ties that
    for i in range(2):              # the formats' rounding could flip)
        m.write_tensor(f"blocks.{i}.router.weight", rng.normal(0, 0.5, (4, 256)))
    ids = np.random.default_rng(5).integers(0, V, size=(2, 9))
    close(m(ids), gpt_forward(m.state_dict(), cfg, ids), tol=2e-3)


def test_per_matrix_formats_of_the_experts():
    cfg = GPTConfig(vocab=V, context=16, width=32, heads=4, layers=2, norm="rms",
                    activation="swiglu", positions="rope", d_ff=32, qkv_bias=False,
                    out_bias=False, mlp_bias=False, n_experts=3, experts_used=2)
    down = {f"blocks.1.experts.{e}.down.weight": "q8_0" for e in range(3)}
    m = GPT.random(cfg, seed=7, dtypes=down)
    assert m.dtype == "mixed" and m.dtypes["blocks.1.experts.2.down.weight"] == "q8_0"
    assert m.dtypes["blocks.0.experts.2.down.weight"] == "float32"
    ids = np.random.default_rng(7).integers(0, V, size=(2, 9))
    close(m(ids), gpt_forward(m.state_dict(), cfg, ids), tol=2e-3)
    with pytest.raises(ValueError, match="experts of a layer"):
        GPT.random(cfg, dtypes={"blocks.0.experts.0.down.weight": "q8_0"})


def test_ties_take_the_lower_index_and_unchosen_experts_are_not_read():
    # a zero router: every expert's logit ties, so every token takes experts 0 and 1;
    # experts 2 and 3 may then hold NaN: their weights are never read
    cfg = GPTConfig(vocab=V, context=16, width=32, heads=4, layers=1, norm="rms",
                    activation="swiglu", positions="rope", d_ff=16, qkv_bias=False,
                    out_bias=False, mlp_bias=False, n_experts=4, experts_used=2)
    m = GPT.random(cfg, seed=6)
    sd = {k: np.array(v) for k, v in m.state_dict().items()}
    sd["blocks.0.router.weight"][:] = 0.0
    m.load_state_dict(sd)
    ids = np.arange(8)[None]
    want = gpt_forward(m.state_dict(), cfg, ids)  # the oracle's stable sort: 0 and 1
    got = m(ids)
    close(got, want)
    for e in (2, 3):
        for k in ("up", "gate", "down"):
            sd[f"blocks.0.experts.{e}.{k}.weight"][:] = np.nan
    m.load_state_dict(sd)
    assert m(ids).tobytes() == got.tobytes()


def test_refusals_name_the_field():
    base = dict(vocab=V, context=16, width=32, heads=4, layers=1, norm="rms",
                activation="swiglu", positions="rope", mlp_bias=False)
    with pytest.raises(ValueError, match="experts_used"):
        GPTConfig(**base, n_experts=4, experts_used=5)
    with pytest.raises(ValueError, match="n_experts"):
        GPTConfig(**{**base, "activation": "gelu_tanh"}, n_experts=4, experts_used=2)
    with pytest.raises(ValueError, match="decoder_sparse_step"):
        GPTConfig.from_hf(dict(model_type="qwen3_moe", num_experts=4, decoder_sparse_step=2))
    with pytest.raises(ValueError, match="mlp_only_layers"):
        GPTConfig.from_hf(dict(model_type="qwen3_moe", num_experts=4, mlp_only_layers=[0]))
    # absent counts: transformers' defaults for the family
    mix = GPTConfig.from_hf(dict(model_type="mixtral"))
    qwen = GPTConfig.from_hf(dict(model_type="qwen3_moe"))
    assert (mix.n_experts, mix.experts_used, mix.router_norm) == (8, 2, True)
    assert (qwen.n_experts, qwen.experts_used, qwen.router_norm) == (128, 8, False)
    # Llama's record still refuses experts by name
    with pytest.raises(ValueError, match="num_local_experts"):
        GPTConfig.from_hf(dict(model_type="llama", num_local_experts=4))


def test_training_refuses_experts_by_name(pair):
    _, _, _, m = pair
    ids = np.zeros((1, 4), np.int64)
    with pytest.raises(ValueError, match="n_experts"):
        m.loss(ids, ids)
