"""Phi-3 / Phi-3.5 / Phi-4-mini (model_type "phi3", issue 50) against transformers itself: a
tiny random checkpoint made by transformers (AutoConfig.for_model, from_config,
save_pretrained into tmp_path; nothing downloaded) with longrope, Phi-4-mini's partial
rotary (0.75) and a sliding window; blockc's float32 logits within 1e-4 of the largest of
transformers' past the window and past original_max_position_embeddings, 12 greedy tokens
identical, save_pretrained read back by transformers; the GGUF file as llama.cpp's
converter lays it out (checked with the gguf package's reader) in F32, Q8_0 and Q4_K_M,
loaded back onto its dequantised weights; the same bits at 1 and 2 threads, batch 1 and 2."""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

import blockc  # noqa: E402
from blockc import GPT, GPTConfig  # noqa: E402
from blockc.reference.gpt import gpt_forward  # noqa: E402
from helpers import same_bits_any_threads  # noqa: E402
from test_families_new import close, hf_greedy, hf_logits  # noqa: E402

V, ORIGINAL, WINDOW = 64, 16, 12


def phi3(seed=0, hidden=32, heads=4, d_ff=48, layers=2, **kw):
    """A transformers Phi-3 of Phi-4-mini's shape of rotary (partial 0.75, longrope)."""
    rot = int(hidden // heads * 0.75)
    rng = np.random.default_rng(seed)
    short = [round(float(x), 3) for x in 1 + rng.random(rot // 2)]
    long_ = [round(float(x), 3) for x in 2 + 4 * rng.random(rot // 2)]
    args = dict(vocab_size=V, hidden_size=hidden, intermediate_size=d_ff,
                num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=2,
                max_position_embeddings=64, original_max_position_embeddings=ORIGINAL,
                partial_rotary_factor=0.75, sliding_window=WINDOW, pad_token_id=0,
                bos_token_id=1, eos_token_id=2,
                rope_scaling=dict(rope_type="longrope", short_factor=short, long_factor=long_))
    args.update(kw)
    torch.manual_seed(seed)
    m = AutoModelForCausalLM.from_config(AutoConfig.for_model("phi3", **args)).eval()
    with torch.no_grad():  # norms away from 1, weights away from their init's zeros
        for p in m.parameters():
            p.add_(torch.randn_like(p) * (0.3 if p.ndim == 1 else 0.05))
    return m


def ids_of(n, seed=1):
    return np.random.default_rng(seed).integers(0, V, size=(1, n))


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    path = tmp_path_factory.mktemp("phi3")
    hm = phi3()
    hm.save_pretrained(path)
    return hm, GPT.from_pretrained(path), path


def test_phi3_config_and_fused_tensors_split(pair):
    hm, m, path = pair
    cfg = m.config
    p = dict(cfg.rope_parameters)
    assert (cfg.rotary_dim, cfg.sliding_window, cfg.context, cfg.d_ff) == (6, WINDOW, 64, 48)
    assert (p["rope_type"], p["original_max_position_embeddings"]) == ("longrope", ORIGINAL)
    assert m.num_parameters() == sum(t.numel() for t in hm.parameters())
    layer = hm.model.layers[1]
    qkv = layer.self_attn.qkv_proj.weight.detach().numpy()
    gate_up = layer.mlp.gate_up_proj.weight.detach().numpy()
    np.testing.assert_array_equal(m.read_tensor("blocks.1.attn.qkv.weight"), qkv)
    # transformers' chunk(2): the first half is SiLU-gated (gate), the second multiplied (up)
    np.testing.assert_array_equal(m.read_tensor("blocks.1.gate.weight"), gate_up[:48])
    np.testing.assert_array_equal(m.read_tensor("blocks.1.up.weight"), gate_up[48:])


@pytest.mark.parametrize("n", [10, ORIGINAL, ORIGINAL + 1, 40])
def test_phi3_logits_match_transformers(pair, n):
    # 10: short factors, inside the window; 16: short factors, past the window; 17 and 40:
    # long factors (past original_max_position_embeddings) and the attention factor
    hm, m, _ = pair
    ids = ids_of(n)
    ref = hf_logits(hm, ids)
    close(m(ids), ref)
    close(gpt_forward(m.state_dict(), m.config, ids), ref)


@pytest.mark.parametrize("prompt", [3, 6, ORIGINAL, 20])
def test_phi3_greedy_matches_transformers(pair, prompt):
    # 3 + 12 tokens stay below the original length; 6 + 12 and 16 + 12 pass it on the way
    # (the cache run again whole then, as transformers' Phi-3 generate does); a 20-token
    # prompt is past it (and past the window) from the start
    hm, m, _ = pair
    for seed in (7, 8, 9):
        ids = ids_of(prompt, seed=seed)
        np.testing.assert_array_equal(m.generate(ids, 12), hf_greedy(hm, ids, 12))


def test_phi3_generate_passing_the_original_length_is_the_whole_forward(pair):
    # each step's token: from the forward of the whole sequence so far (long factors on
    # every position once it is longer than 16: use_cache=False), not from a cache of
    # short-turned keys; rows of a batch pass 16 at their own steps, each as alone
    _, m, _ = pair
    for seed in (11, 12, 13):
        ids = ids_of(ORIGINAL, seed=seed)[0]
        rows = [ids[:ORIGINAL - 2], ids[:ORIGINAL - 5]]
        both = m.generate(rows, 12)
        for r, b in zip(rows, both):
            whole = m.generate(r[None], 12, use_cache=False)[0]
            np.testing.assert_array_equal(b[:len(r) + 12], whole)
            np.testing.assert_array_equal(m.generate(r[None], 12)[0], whole)


def test_phi3_save_pretrained_is_read_by_transformers(pair, tmp_path):
    hm, m, _ = pair
    m.save_pretrained(tmp_path)
    d = json.loads((tmp_path / "config.json").read_text())
    assert (d["model_type"], d["partial_rotary_factor"], d["sliding_window"],
            d["original_max_position_embeddings"]) == ("phi3", 0.75, WINDOW, ORIGINAL)
    hb = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    for name, t in hm.state_dict().items():  # fused again, bit for bit
        np.testing.assert_array_equal(hb.state_dict()[name].numpy(), t.numpy(), err_msg=name)
    ids = ids_of(40)
    close(hf_logits(hb, ids), hf_logits(hm, ids))
    assert GPT.from_pretrained(tmp_path).config == m.config
    # bfloat16: the fused matrices written BF16 whole, read back to the same bits
    b = m.astype("bfloat16")
    b.save_pretrained(tmp_path / "bf16")
    tensors, _ = blockc.io.safetensors.read(str(tmp_path / "bf16" / "model.safetensors"))
    assert tensors["model.layers.0.mlp.gate_up_proj.weight"].dtype == "BF16"
    back = GPT.from_pretrained(tmp_path / "bf16")
    assert back.dtype == "bfloat16" and np.array_equal(back.params, b.params)


def _dequantised(reader, name):
    t = next(t for t in reader.tensors if t.name == name)
    return np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float32).reshape(
        [int(x) for x in reversed(t.shape)])


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """A Phi-3 whose rows are whole K-quant blocks (width and d_ff 256): Q4_K_M's own types."""
    path = tmp_path_factory.mktemp("phi3w")
    hm = phi3(seed=3, hidden=256, heads=4, d_ff=256)
    hm.save_pretrained(path)
    return hm, GPT.from_pretrained(path), path


@pytest.mark.parametrize("dtype", ["F32", "Q8_0", "Q4_K_M"])
def test_phi3_gguf_is_llama_cpps_layout_and_loads(wide, tmp_path, dtype):
    hm, m, _ = wide
    path = tmp_path / f"phi3-{dtype}.gguf"
    m.save_gguf(path, dtype)
    r = gguf.GGUFReader(str(path))
    field = lambda k: r.fields[k].contents()  # noqa: E731
    cfg, p = m.config, dict(m.config.rope_parameters)
    assert field("general.architecture") == "phi3"
    assert (field("phi3.context_length"), field("phi3.rope.scaling.original_context_length"),
            field("phi3.rope.dimension_count"), field("phi3.attention.sliding_window"),
            field("phi3.feed_forward_length")) == (64, ORIGINAL, 48, WINDOW, 256)
    # llama.cpp's converter: sqrt(1 + ln(max / original) / ln(original))
    assert field("phi3.rope.scaling.attn_factor") == pytest.approx(
        np.sqrt(1 + np.log(64 / ORIGINAL) / np.log(ORIGINAL)), rel=1e-7)
    names = {t.name: t for t in r.tensors}
    assert not any(".attn_q." in n or ".ffn_gate." in n for n in names)
    assert tuple(names["blk.0.attn_qkv.weight"].shape) == (256, 256 + 2 * 2 * 64)
    assert tuple(names["blk.0.ffn_up.weight"].shape) == (256, 2 * 256)
    np.testing.assert_array_equal(_dequantised(r, "rope_factors_long.weight"),
                                  np.float32(p["long_factor"]))
    np.testing.assert_array_equal(_dequantised(r, "rope_factors_short.weight"),
                                  np.float32(p["short_factor"]))
    if dtype == "Q4_K_M":  # llama.cpp's mix: Q4_K, attn_qkv Q5_K, the last ffn_down Q6_K
        assert names["blk.0.ffn_up.weight"].tensor_type.name == "Q4_K"
        assert names["blk.0.attn_qkv.weight"].tensor_type.name == "Q5_K"
        assert names["blk.1.ffn_down.weight"].tensor_type.name == "Q6_K"
    g = GPT.from_pretrained(path, dtype="exact")
    assert g.config.rope_tables.inv.tobytes() == cfg.rope_tables.inv.tobytes()
    assert g.config.rope_tables.inv_long.tobytes() == cfg.rope_tables.inv_long.tobytes()
    assert g.config.rope_tables.attn == pytest.approx(cfg.rope_tables.attn, rel=1e-15)
    assert (g.config.rotary_dim, g.config.sliding_window) == (48, WINDOW)
    # blockc's tensors are the file's dequantised ones (gate and up: ffn_up's halves)
    up = _dequantised(r, "blk.1.ffn_up.weight")
    np.testing.assert_array_equal(g.read_tensor("blocks.1.gate.weight"), up[:256])
    np.testing.assert_array_equal(g.read_tensor("blocks.1.up.weight"), up[256:])
    np.testing.assert_array_equal(g.read_tensor("blocks.0.attn.qkv.weight"),
                                  _dequantised(r, "blk.0.attn_qkv.weight"))
    ids = ids_of(40)
    ref = hf_logits(hm, ids)
    if dtype == "F32":
        close(g(ids), ref)
    else:
        close(g(ids), gpt_forward(g.state_dict(), g.config, ids))
    # and written again: the same blocks
    g.save_gguf(tmp_path / "again.gguf", dtype)
    r2 = gguf.GGUFReader(str(tmp_path / "again.gguf"))
    for t in r.tensors:
        t2 = next(x for x in r2.tensors if x.name == t.name)
        assert t2.tensor_type == t.tensor_type and np.array_equal(t2.data, t.data), t.name


def test_phi3_gguf_without_longrope_or_window(tmp_path):
    # Phi-4-mini's partial rotary with plain angles and no window: llama.cpp's converter
    # writes sliding_window 0 and no rope factors; written tensor by tensor (save_streaming)
    hm = phi3(seed=5, rope_scaling=None, sliding_window=None)
    hm.save_pretrained(tmp_path)
    m = GPT.from_pretrained(tmp_path)
    assert m.config.rope_parameters is None and m.config.sliding_window is None
    ids = ids_of(40)
    ref = hf_logits(hm, ids)
    close(m(ids), ref)
    path = tmp_path / "m.gguf"
    blockc.checkpoint.gguf.save_streaming(str(path), m.config, "F32", m.read_tensor)
    r = gguf.GGUFReader(str(path))
    assert r.fields["phi3.attention.sliding_window"].contents() == 0
    assert not any(t.name.startswith("rope_factors") for t in r.tensors)
    g = GPT.from_pretrained(path)
    assert g.config == m.config
    close(g(ids), ref)


def test_phi3_same_bits_at_any_threads_and_batch(pair):
    _, m, _ = pair
    ids = np.random.default_rng(4).integers(0, V, size=(2, 24))  # past the window and 16
    same_bits_any_threads(m, ids)


def test_phi3_refusals_name_the_field():
    base = dict(model_type="phi3", vocab_size=V, hidden_size=32, num_attention_heads=4,
                intermediate_size=48, num_hidden_layers=1)
    with pytest.raises(ValueError, match="rope_type 'linear'"):
        GPTConfig.from_hf(dict(base, rope_scaling=dict(rope_type="linear", factor=2.0)))
    with pytest.raises(ValueError, match="hidden_act"):
        GPTConfig.from_hf(dict(base, hidden_act="gelu"))


def test_phi3_fused_tensors_missing_or_misshapen_are_refused_by_name(pair, tmp_path):
    _, m, path = pair
    gate_up = "model.layers.0.mlp.gate_up_proj.weight"
    tensors, _ = blockc.io.safetensors.read(str(path / "model.safetensors"))
    arrays = {k: np.array(v.data) for k, v in tensors.items()}
    for case, change in (("missing", lambda a: a.pop(gate_up)),
                         ("shape", lambda a: a.__setitem__(gate_up, a[gate_up][:90]))):
        d = tmp_path / case
        d.mkdir()
        (d / "config.json").write_text((path / "config.json").read_text())
        a = dict(arrays)
        change(a)
        blockc.io.safetensors.write(str(d / "model.safetensors"), a, {"format": "pt"})
        with pytest.raises(ValueError,
                           match=rf"tensor '{gate_up}' (is missing|has shape \(90, 32\))"):
            GPT.from_pretrained(d)
    m.save_gguf(tmp_path / "m.gguf", "F32")
    f = blockc.io.gguf.read(str(tmp_path / "m.gguf"))
    meta = {k: v for k, v in f.fields.items()}
    kept = [(t.name, t.type, t.shape, t.data) for t in f.tensors.values()
            if t.name != "blk.1.ffn_up.weight"]
    blockc.io.gguf.write(str(tmp_path / "cut.gguf"), meta, kept)
    with pytest.raises(ValueError, match="tensor 'blk.1.ffn_up.weight' is missing"):
        GPT.from_pretrained(tmp_path / "cut.gguf")
    # an attention factor without longrope's factors: nothing blockc computes so
    kept = [(t.name, t.type, t.shape, t.data) for t in f.tensors.values()
            if not t.name.startswith("rope_factors")]
    blockc.io.gguf.write(str(tmp_path / "nofactors.gguf"), meta, kept)
    with pytest.raises(ValueError, match="phi3.rope.scaling.attn_factor"):
        GPT.from_pretrained(tmp_path / "nofactors.gguf")


def test_phi3_mini_shape_is_mistrals_computation(tmp_path):
    # Phi-3-mini-4k: plain rotary over the whole head and a window (its 2047 here 12): Llama's
    # computation with a window, saved as Mistral's (transformers computes the same)
    hm = phi3(seed=6, rope_scaling=None, partial_rotary_factor=1.0)
    hm.save_pretrained(tmp_path)
    m = GPT.from_pretrained(tmp_path)
    assert (m.config.rotary_dim, m.config.sliding_window) == (None, WINDOW)
    ids = ids_of(40)
    ref = hf_logits(hm, ids)
    close(m(ids), ref)
    m.save_pretrained(tmp_path / "back")
    assert json.loads((tmp_path / "back" / "config.json").read_text())["model_type"] == "mistral"
    close(hf_logits(AutoModelForCausalLM.from_pretrained(tmp_path / "back").eval(), ids), ref)


def test_phi3_su_is_longrope():
    # Phi-3-mini-128k's older spelling, as transformers' Phi3Config reads it
    d = dict(model_type="phi3", vocab_size=V, hidden_size=32, num_attention_heads=4,
             intermediate_size=48, num_hidden_layers=1, max_position_embeddings=64,
             original_max_position_embeddings=16,
             rope_scaling=dict(type="su", short_factor=[1.0] * 4, long_factor=[2.0] * 4))
    cfg = GPTConfig.from_hf(d)
    assert cfg.rope_kind == "longrope" and cfg.rope_tables.original == 16
    assert cfg.rope_tables.attn == pytest.approx(np.sqrt(1 + np.log(4) / np.log(16)))
