"""Sliding-window attention and its ring cache (issue 50): a sliding layer's query at
position p sees p-W+1..p, and its cache keeps a ring of about W positions.

Checked against the NumPy oracle (every instruction set, every way of splitting the
tokens into calls, threads and batch), against transformers' Mistral and Qwen2 past
the window (tiny random checkpoints made here), and the GGUF key through the ``gguf``
package."""
import numpy as np
import pytest

import blockc
from blockc import GPT, GPTConfig
from blockc import train as tr
from blockc._native import ffi, lib
from blockc.generation.defaults import context_size
from blockc.reference.gpt import gpt_forward

W = 8


def small(**kw):
    base = dict(vocab=41, context=512, width=32, heads=4, layers=2, kv_heads=2, norm="rms",
                activation="swiglu", d_ff=48, positions="rope", qkv_bias=False,
                out_bias=False, mlp_bias=False, tie_weights=False, sliding_window=W)
    return GPTConfig(**{**base, **kw})


def ids_of(n, seed=0, b=1):
    return np.random.default_rng(seed).integers(0, 41, size=(b, n))


def err(a, ref):
    return np.abs(a - ref).max() / np.abs(ref).max()


@pytest.mark.parametrize("layers", [None, (False, True)])
def test_the_window_matches_the_oracle_on_every_isa_and_every_split(isa, layers):
    cfg = small(sliding_layers=layers)
    m = GPT.random(cfg, seed=1)
    ids = ids_of(260)  # past the ring of 192 positions
    ref = gpt_forward(m.state_dict(), cfg, ids)
    full = m(ids)
    assert err(full, ref) < 1e-5
    # the window matters: full attention differs past it
    assert err(full, gpt_forward(m.state_dict(), small(sliding_window=None), ids)) > 1e-3
    c = m.new_cache(1, 512)
    assert c.layer_rows(1) == 192 and c.layer_rows(0) == (512 if layers else 192)
    # one chunk longer than the ring's slack, then single tokens: the same bits
    parts = [m(ids[:, :230], cache=c)] + [m(ids[:, t:t + 1], cache=c) for t in range(230, 260)]
    np.testing.assert_array_equal(np.concatenate(parts, 1), full)
    h = m.new_cache(1, 512, "float16")
    halves = np.concatenate([m(ids[:, :5], cache=h), m(ids[:, 5:200], cache=h),
                             m(ids[:, 200:], cache=h)], 1)
    assert err(halves, gpt_forward(m.state_dict(), cfg, ids, kv_dtype=np.float16)) < 1e-4


def test_same_bits_at_any_thread_count_and_batch(threads):
    cfg = small(width=64, heads=4, kv_heads=4, d_ff=64)
    m = GPT.random(cfg, seed=2)
    a, b = ids_of(300, 3), ids_of(120, 4)
    threads(1)
    one = m(a)
    c1 = m.new_cache(1, 512)
    alone = np.concatenate([m(a[:, :250], cache=c1), m(a[:, 250:], cache=c1)], 1)
    threads(2)
    np.testing.assert_array_equal(m(a), one)
    np.testing.assert_array_equal(alone, one)
    # two sequences of different lengths in one cache: each its own bits
    c = m.new_cache(2, 512)
    m(b[:, :1], cache=c.view(1, 2))  # sequence 1 one position ahead
    ab = np.concatenate([a[:, :250], b[:, 1:251] if b.shape[1] > 250 else
                         np.pad(b[:, 1:], ((0, 0), (0, 251 - b.shape[1])))], 0)
    out = m(ab, cache=c)
    np.testing.assert_array_equal(out[0], one[0, :250])
    assert c.lengths == (250, 251)
    np.testing.assert_array_equal(m(np.stack([a[0, 250:251], b[0, :1]]), cache=c)[0, 0],
                                  one[0, 250])


def test_the_ring_costs_the_window_not_the_context():
    cfg = small(sliding_layers=(True, False))
    c = GPT.random(cfg, seed=0).new_cache(2, 512)
    per_row = 2 * cfg.kv_heads * (cfg.width // cfg.heads) * 4  # k and v, float32
    assert c.nbytes == 2 * per_row * (192 + 512)
    # a Mistral-7B shape at a 32k context: 32 sliding layers of 4096 + slack
    mistral = GPTConfig(vocab=32000, context=32768, width=4096, heads=32, layers=32, kv_heads=8,
                        d_ff=14336, norm="rms", activation="swiglu", positions="rope",
                        qkv_bias=False, out_bias=False, mlp_bias=False, sliding_window=4096)
    n = ffi.new("size_t *")
    blockc._native.check(lib.bc_gpt_cache_size(n, mistral.c_struct(), 1, 32768), "size")
    assert int(n[0]) == 32 * 8 * 128 * 4224
    full = GPTConfig(**{**{f: getattr(mistral, f) for f in ("vocab", "context", "width", "heads",
                        "layers", "kv_heads", "d_ff", "norm", "activation", "positions",
                        "qkv_bias", "out_bias", "mlp_bias")}})
    blockc._native.check(lib.bc_gpt_cache_size(n, full.c_struct(), 1, 32768), "size")
    assert int(n[0]) == 32 * 8 * 128 * 32768


@pytest.mark.parametrize("layers", [None, (False, True)])
def test_rollback_into_overwritten_positions_is_refused(layers):
    cfg = small(sliding_layers=layers)
    m = GPT.random(cfg, seed=5)
    ids = ids_of(300, 6)
    full = m(ids)
    c = m.new_cache(2, 512)
    m(np.repeat(ids[:, :300], 2, 0), cache=c)
    # the ring (192) holds positions 108..299; position n reads n-7..n-1
    assert [c.holds(0, n) for n in (0, 114, 115, 300, 301)] == [True, False, True, True, False]
    with pytest.raises(ValueError, match="ring cache no longer holds"):
        c.truncate(0, 114)
    with pytest.raises(ValueError, match="ring cache no longer holds"):
        c.copy_prefix(1, 0, 100)
    assert c.lengths == (300, 300)
    c.truncate(0, 115)  # the oldest n whose window is still held
    np.testing.assert_array_equal(m(ids[:, 115:116], cache=c.view(0, 1))[0, 0], full[0, 115])
    c.copy_prefix(1, 0, 116)
    np.testing.assert_array_equal(m(ids[:, 116:150], cache=c.view(1, 2))[0], full[0, 116:150])
    # the logical view: a ring shows the window of the next position, NaN elsewhere
    k, v = c.k, c.v
    assert c.lengths == (116, 150)
    assert not np.isnan(k[:, 0, 109:116]).any() and np.isnan(k[1, 0, :109]).all()
    assert np.isnan(v[1, 1, 150:]).all() and not np.isnan(v[:, 1, 143:150]).any()
    assert not np.isnan(k[0, 0]).any() if layers else np.isnan(k[0, 0, :109]).all()


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="sliding_window"):
        small(sliding_window=0)
    with pytest.raises(TypeError, match="sliding_window"):
        small(sliding_window=2.5)
    with pytest.raises(ValueError, match="one flag per layer"):
        small(sliding_layers=(True,))
    with pytest.raises(ValueError, match="needs a sliding_window"):
        small(sliding_window=None, sliding_layers=(True, True))
    with pytest.raises(TypeError, match=r"sliding_layers\[0\] must be a bool"):
        small(sliding_layers=[1, 0])
    assert small(sliding_layers=[True, False]).sliding_layers == (True, False)
    assert small(sliding_layers=(True, False)).layer_window(1) is None


def test_training_past_the_window_is_refused():
    cfg = small(context=64)
    m = GPT.random(cfg, seed=0)
    ids = ids_of(20)
    with pytest.raises(ValueError, match="at most the window"):
        tr.loss(m, ids[:, :-1], ids[:, 1:])
    # inside the window the window changes nothing: the loss is the full model's
    full = GPT.random(small(context=64, sliding_window=None), seed=0)
    assert tr.loss(m, ids[:, :W], ids[:, 1:W + 1]) == tr.loss(full, ids[:, :W], ids[:, 1:W + 1])


# ---- against transformers ---------------------------------------------------------------


def _hf_model(kind, **kw):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    base = dict(vocab_size=97, hidden_size=32, intermediate_size=50, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                rms_norm_eps=1e-6, sliding_window=W)
    cls, cfg_cls = {"mistral": (transformers.MistralForCausalLM, transformers.MistralConfig),
                    "qwen2": (transformers.Qwen2ForCausalLM, transformers.Qwen2Config)}[kind]
    m = cls(cfg_cls(**{**base, **kw}), ).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * (0.3 if p.ndim == 1 else 0.03))
    return torch, m


@pytest.mark.slow
@pytest.mark.parametrize("kind,kw,flags", [
    ("mistral", {}, None),
    ("qwen2", dict(use_sliding_window=True, max_window_layers=1), (False, True)),
])
def test_past_the_window_matches_transformers(tmp_path, kind, kw, flags):
    torch, hm = _hf_model(kind, **kw)
    hm.save_pretrained(tmp_path)
    m = GPT.from_pretrained(tmp_path)
    assert m.config.sliding_window == W and m.config.sliding_layers == flags
    assert m.config.context == 512
    ids = np.random.default_rng(1).integers(0, 97, size=(1, 200))
    with torch.no_grad():
        ref = hm(torch.as_tensor(ids)).logits.float().numpy()
    out = m(ids)
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-4 * np.abs(ref).max())
    c = m.new_cache(1, 512)  # one chunk, then token by token past the ring
    parts = [m(ids[:, :150], cache=c)] + [m(ids[:, t:t + 1], cache=c) for t in range(150, 200)]
    np.testing.assert_array_equal(np.concatenate(parts, 1), out)
    with torch.no_grad():
        want = hm.generate(torch.as_tensor(ids), max_new_tokens=12, do_sample=False,
                           eos_token_id=None, pad_token_id=0,
                           attention_mask=torch.ones(ids.shape, dtype=torch.long)).numpy()
    np.testing.assert_array_equal(m.generate(ids, 12), want)
    np.testing.assert_array_equal(m.generate(ids, 12, use_cache=False), want)
    # saved back, transformers reads the same window
    m.save_pretrained(tmp_path / "b")
    back = type(hm).from_pretrained(tmp_path / "b").eval()
    with torch.no_grad():
        np.testing.assert_array_equal(back(torch.as_tensor(ids[:, :60])).logits.numpy(),
                                      hm(torch.as_tensor(ids[:, :60])).logits.numpy())


def test_gguf_round_trips_the_window_key(tmp_path):
    gguf = pytest.importorskip("gguf")
    cfg = small(vocab=64, context=256, width=64, heads=4, kv_heads=2, d_ff=64)
    m = GPT.random(cfg, seed=3)
    p = tmp_path / "m.gguf"
    m.save_gguf(p)
    r = gguf.GGUFReader(str(p))
    field = r.fields["llama.attention.sliding_window"]
    assert int(field.parts[field.data[0]][0]) == W
    back = GPT.from_pretrained(p)
    assert back.config == cfg
    ids = ids_of(100, 7) % 64
    np.testing.assert_array_equal(back(ids), m(ids))
    with pytest.raises(ValueError, match="some layers only"):
        GPT.random(small(vocab=64, context=256, width=64, heads=4, d_ff=64, qkv_bias=True,
                         sliding_layers=(False, True))).save_gguf(tmp_path / "q.gguf")


def test_the_default_context_counts_a_ring_once():
    per_layer = 2 * 2 * 8 * 4  # k and v, 2 K/V heads of 8, float32: bytes per position
    cfg = small(sliding_layers=(True, False))
    # the ring of layer 0 (192 positions) once, then layer 1's positions
    assert context_size(cfg, budget=per_layer * (192 + 100)) == 100
    assert context_size(small(), budget=per_layer * 2 * 192) == 512
    assert context_size(small(sliding_window=None), budget=per_layer * (192 + 100)) == 146
