"""Parity of blockc's C GPT with the chapter-6 PyTorch GPT, fed the same state dict.

The PyTorch model (tests/support/torch_ref.py) is written from the chapter's description:
same module names (token, position, blocks.i.{ln1, attn.qkv, attn.proj, ln2, up, down},
norm, head), pre-norm blocks, packed QKV, causal attention, GELU-tanh MLP, tied head.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import blockc  # noqa: E402
from blockc import GPT, GPTConfig  # noqa: E402
from torch_ref import GPT as TorchGPT  # noqa: E402


def torch_model(cfg, seed):
    """GPT-2's initialisation (weights N(0, 0.02), zero biases), then non-trivial biases
    and LayerNorm parameters, so that every tensor takes part."""
    torch.manual_seed(seed)
    m = TorchGPT(cfg).eval()
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, std=0.02)
            if isinstance(mod, nn.Linear) and mod.bias is not None:
                nn.init.zeros_(mod.bias)
        for name, p in m.named_parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.1)
    return m


SMALL = GPTConfig(vocab=211, context=32, width=48, heads=6, layers=3)
GPT2_WIDTHS = GPTConfig(vocab=1000, context=64, width=768, heads=12, layers=2)


def test_torch_state_dict_lists_head_weight_when_tied():
    m = torch_model(SMALL, 0)
    sd = m.state_dict()
    assert "head.weight" in sd and sd["head.weight"].data_ptr() == sd["token.weight"].data_ptr()
    assert sum(p.numel() for p in m.parameters()) == blockc.gpt_parameter_count(SMALL)
    ours = GPT.from_state_dict(sd, SMALL)  # loads unchanged
    assert set(ours.state_dict()) == set(sd) - {"head.weight"}
    assert set(ours.state_dict(keep_tied=True)) == set(sd)


@pytest.mark.parametrize("cfg,t", [(SMALL, 32), (GPT2_WIDTHS, 16)], ids=["small", "gpt2-widths"])
def test_logits_match_torch(cfg, t):
    tm = torch_model(cfg, 1)
    ours = GPT.from_state_dict(tm.state_dict(), cfg)
    ids = np.random.default_rng(1).integers(0, cfg.vocab, size=(2, t))
    with torch.no_grad():
        ref = tm(torch.as_tensor(ids)).numpy()
    got = ours(ids)
    assert got.shape == ref.shape == (2, t, cfg.vocab)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4)


def test_untied_logits_match_torch():
    cfg = GPTConfig(vocab=97, context=16, width=32, heads=2, layers=2, tie_weights=False)
    tm = torch_model(cfg, 2)
    sd = tm.state_dict()
    assert sd["head.weight"].data_ptr() != sd["token.weight"].data_ptr()
    ours = GPT.from_state_dict(sd, cfg)
    ids = np.random.default_rng(2).integers(0, cfg.vocab, size=(3, 16))
    with torch.no_grad():
        ref = tm(torch.as_tensor(ids)).numpy()
    np.testing.assert_allclose(ours(ids), ref, rtol=0, atol=1e-4)


def test_blockc_state_dict_loads_into_torch_strict():
    ours = GPT.random(SMALL, seed=3)
    tm = TorchGPT(SMALL).eval()
    tm.load_state_dict({k: torch.from_numpy(v) for k, v in ours.state_dict(keep_tied=True).items()},
                       strict=True)
    ids = np.random.default_rng(3).integers(0, SMALL.vocab, size=(1, 20))
    with torch.no_grad():
        ref = tm(torch.as_tensor(ids)).numpy()
    np.testing.assert_allclose(ours(ids), ref, rtol=0, atol=1e-4)


def test_bfloat16_and_float64_tensors_load():
    tm = torch_model(SMALL, 4)
    sd64 = {k: v.double() for k, v in tm.state_dict().items()}
    ours = GPT.from_state_dict(sd64, SMALL)
    np.testing.assert_array_equal(ours.state_dict()["token.weight"], tm.token.weight.detach().numpy())
    sd16 = {k: v.bfloat16() for k, v in tm.state_dict().items()}
    low = GPT.from_state_dict(sd16, SMALL)
    np.testing.assert_array_equal(low.state_dict()["blocks.0.up.weight"],
                                  tm.blocks[0].up.weight.detach().bfloat16().float().numpy())


@pytest.mark.parametrize("cfg,prompt_len,n_new", [(SMALL, 5, 20), (GPT2_WIDTHS, 6, 10)],
                         ids=["small", "gpt2-widths"])
def test_cached_generation_equals_torch_greedy_recomputation(cfg, prompt_len, n_new):
    tm = torch_model(cfg, 5)
    with torch.no_grad():
        # A wider position table keeps the random model from locking onto one repeated
        # token, which would make the comparison weak.
        tm.position.weight.normal_(0.0, 0.1)
    ours = GPT.from_state_dict(tm.state_dict(), cfg)
    prompt = np.random.default_rng(5).integers(0, cfg.vocab, size=(2, prompt_len))
    got = ours.generate(prompt, max_new_tokens=n_new)  # KV cache, greedy
    want = tm.generate_uncached(prompt, n_new).numpy()
    assert len(np.unique(want[:, prompt_len:])) >= 5
    np.testing.assert_array_equal(got, want)


def test_torch_reference_cache_equals_its_recomputation():
    # the reference's own KV cache (the benches' peer) against its full recomputation
    tm = torch_model(SMALL, 6)
    prompt = np.random.default_rng(6).integers(0, SMALL.vocab, size=(2, 4))
    np.testing.assert_array_equal(tm.generate(prompt, 8).numpy(),
                                  tm.generate_uncached(prompt, 8).numpy())
