"""Hugging Face checkpoints: transformers is the peer (these tests skip without it;
CI installs it). Every checkpoint is made here, from random weights: nothing is
downloaded. Biases and LayerNorm parameters are perturbed off their defaults so
every tensor takes part in the comparison."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import blockc
from blockc import GPT, GPTConfig

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BASE = dict(vocab_size=101, n_positions=40, n_embd=32, n_layer=2, n_head=4,
            initializer_range=0.2, bos_token_id=0, eos_token_id=1)
VARIANTS = {
    "tied": {},
    "untied": dict(tie_word_embeddings=False),
    "eps": dict(layer_norm_epsilon=1e-3),
    "gelu": dict(activation_function="gelu"),
    "gelu_pytorch_tanh": dict(activation_function="gelu_pytorch_tanh"),
    "relu_inner": dict(activation_function="relu", n_inner=50),
    "wide": dict(n_embd=48, n_head=3, n_layer=3, vocab_size=257),
}


def hf_model(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(**{**BASE, **kw})
    m = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for p in m.parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.1)
    return m


def hf_logits(m, ids):
    with torch.no_grad():
        return m(torch.as_tensor(ids)).logits.float().numpy()


def ids_for(vocab, b=2, t=12, seed=0):
    return np.random.default_rng(seed).integers(0, vocab, size=(b, t))


@pytest.mark.parametrize("name", list(VARIANTS))
def test_logits_and_greedy_tokens_match_transformers(tmp_path, name):
    hm = hf_model(**VARIANTS[name])
    hm.save_pretrained(tmp_path)
    m = GPT.from_pretrained(tmp_path)
    ids = ids_for(hm.config.vocab_size)
    ref = hf_logits(hm, ids)
    np.testing.assert_allclose(m(ids), ref, rtol=0, atol=2e-5 * max(1, np.abs(ref).max()))
    want = hm.generate(torch.as_tensor(ids[:1, :5]), max_new_tokens=12, do_sample=False,
                       eos_token_id=None, pad_token_id=0).numpy()
    np.testing.assert_array_equal(m.generate(ids[:1, :5], 12), want)
    np.testing.assert_array_equal(m.generate(ids[:1, :5], 12, use_cache=False), want)


def test_greedy_with_an_eos_stops_as_transformers_does(tmp_path):
    hm = hf_model(seed=3)
    hm.save_pretrained(tmp_path)
    m = GPT.from_pretrained(tmp_path)
    prompt = ids_for(101, 1, 4, seed=3)
    free = m.generate(prompt, 16)[0, 4:]
    eos = int(free[5])  # a token the greedy run emits: it must stop there
    want = hm.generate(torch.as_tensor(prompt), max_new_tokens=16, do_sample=False,
                       eos_token_id=eos, pad_token_id=eos).numpy()
    got = m.generate(prompt, 16, eos_token_id=eos)
    np.testing.assert_array_equal(got, want)
    assert got[0, -1] == eos and got.shape[1] < 4 + 16


def test_bfloat16_checkpoint_loads_as_bfloat16_and_matches(tmp_path):
    hm = hf_model(seed=4).to(torch.bfloat16)
    hm.save_pretrained(tmp_path)
    m = GPT.from_pretrained(tmp_path)
    assert m.dtype == "bfloat16"
    ids = ids_for(101, seed=4)
    # the same bfloat16 weights, computed in float32 on both sides
    ref = hf_logits(hm.float(), ids)
    np.testing.assert_allclose(m(ids), ref, rtol=0, atol=5e-5 * np.abs(ref).max())
    assert GPT.from_pretrained(tmp_path, dtype="float32").dtype == "float32"


def test_float16_checkpoint_loads(tmp_path):
    hm = hf_model(seed=5).to(torch.float16)
    hm.save_pretrained(tmp_path)
    m = GPT.from_pretrained(tmp_path)
    assert m.dtype == "float32"
    ids = ids_for(101, seed=5)
    ref = hf_logits(hm.float(), ids)
    np.testing.assert_allclose(m(ids), ref, rtol=0, atol=5e-5 * np.abs(ref).max())


def test_sharded_checkpoint_loads(tmp_path):
    hm = hf_model(seed=6, n_layer=3)
    hm.save_pretrained(tmp_path, max_shard_size="60KB")
    assert os.path.exists(tmp_path / "model.safetensors.index.json")
    assert len([f for f in os.listdir(tmp_path) if f.endswith(".safetensors")]) > 1
    ids = ids_for(101, seed=6)
    ref = hf_logits(hm, ids)
    np.testing.assert_allclose(GPT.from_pretrained(tmp_path)(ids), ref, rtol=0,
                               atol=2e-5 * np.abs(ref).max())


def test_names_without_the_transformer_prefix_load(tmp_path):
    hm = hf_model(seed=7)
    hm.transformer.save_pretrained(tmp_path)  # GPT2Model: wte, h.0..., no prefix, no head
    names = blockc.safetensors.read(tmp_path / "model.safetensors")[0]
    assert not any(n.startswith("transformer.") for n in names)
    ids = ids_for(101, seed=7)
    ref = hf_logits(hm, ids)
    np.testing.assert_allclose(GPT.from_pretrained(tmp_path)(ids), ref, rtol=0,
                               atol=2e-5 * np.abs(ref).max())


@pytest.mark.parametrize("name", ["tied", "untied", "relu_inner"])
def test_save_pretrained_loads_in_transformers_and_back(tmp_path, name):
    hm = hf_model(seed=8, **VARIANTS[name])
    hm.save_pretrained(tmp_path / "hf")
    m = GPT.from_pretrained(tmp_path / "hf")
    m.save_pretrained(tmp_path / "ours")
    back = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "ours").eval()
    ids = ids_for(hm.config.vocab_size, seed=8)
    np.testing.assert_array_equal(hf_logits(back, ids), hf_logits(hm, ids))
    again = GPT.from_pretrained(tmp_path / "ours")
    np.testing.assert_array_equal(again.params, m.params)


def test_a_bfloat16_model_saves_bfloat16_matrices(tmp_path):
    m = GPT.random(GPTConfig(vocab=101, context=40, width=32, heads=4, layers=2), seed=1,
                   dtype="bfloat16")
    m.save_pretrained(tmp_path)
    tensors, meta = blockc.safetensors.read(tmp_path / "model.safetensors")
    assert meta == {"format": "pt"}
    assert tensors["transformer.h.0.mlp.c_fc.weight"].dtype == "BF16"
    assert tensors["transformer.h.0.ln_1.bias"].dtype == "F32"
    back = transformers.GPT2LMHeadModel.from_pretrained(tmp_path, torch_dtype=torch.float32).eval()
    ids = ids_for(101, seed=1)
    np.testing.assert_allclose(hf_logits(back, ids), m(ids), rtol=0, atol=2e-5)
    np.testing.assert_array_equal(GPT.from_pretrained(tmp_path).params, m.params)


def test_config_mapping_both_ways():
    hm = hf_model(**VARIANTS["relu_inner"])
    cfg = GPTConfig.from_hf(hm.config.to_dict())
    assert (cfg.vocab, cfg.context, cfg.width, cfg.heads, cfg.layers, cfg.d_ff_, cfg.activation,
            cfg.tie_weights) == (101, 40, 32, 4, 2, 50, "relu", True)
    d = cfg.to_hf()
    again = transformers.GPT2Config(**d)
    assert (again.n_inner, again.activation_function, again.n_embd) == (50, "relu", 32)
    assert GPTConfig.from_hf(d) == cfg


@pytest.mark.parametrize("field,value,match", [
    ("scale_attn_by_inverse_layer_idx", True, "scale_attn_by_inverse_layer_idx=True"),
    ("reorder_and_upcast_attn", True, "reorder_and_upcast_attn=True"),
    ("scale_attn_weights", False, "scale_attn_weights=False"),
    ("add_cross_attention", True, "add_cross_attention=True"),
    ("activation_function", "quick_gelu", "activation_function='quick_gelu'"),
    ("model_type", "bert", "model_type 'bert'"),
])
def test_configs_that_compute_differently_are_refused_by_name(tmp_path, field, value, match):
    hm = hf_model()
    hm.save_pretrained(tmp_path)
    d = json.loads((tmp_path / "config.json").read_text())
    d[field] = value
    (tmp_path / "config.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match=match):
        GPT.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match=match):
        GPTConfig.from_hf(d)


def test_hostile_directories(tmp_path):
    hm = hf_model()
    good = tmp_path / "good"
    hm.save_pretrained(good)
    tensors = {k: t.data for k, t in blockc.safetensors.read(good / "model.safetensors")[0].items()}

    def variant(name, tensors, config=None):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text((good / "config.json").read_text() if config is None
                                       else json.dumps(config))
        blockc.safetensors.write(d / "model.safetensors", tensors, {"format": "pt"})
        return d

    shapes = dict(tensors)
    shapes["transformer.h.1.mlp.c_fc.bias"] = np.zeros(7, np.float32)
    with pytest.raises(ValueError, match=r"model.safetensors: tensor 'transformer.h.1.mlp.c_fc.bias' "
                                         r"has shape \(7,\), expected \(128,\)"):
        GPT.from_pretrained(variant("shape", shapes))
    missing = {k: v for k, v in tensors.items() if k != "transformer.h.0.ln_2.weight"}
    with pytest.raises(ValueError, match="tensor 'transformer.h.0.ln_2.weight' is missing"):
        GPT.from_pretrained(variant("missing", missing))
    extra = dict(tensors, **{"transformer.h.9.ln_1.weight": np.ones(32, np.float32)})
    with pytest.raises(ValueError, match="tensor 'transformer.h.9.ln_1.weight' is not part"):
        GPT.from_pretrained(variant("extra", extra))
    ints = dict(tensors, **{"transformer.wpe.weight": np.zeros((40, 32), np.int64)})
    with pytest.raises(ValueError, match="tensor 'transformer.wpe.weight' has dtype I64, not a floating"):
        GPT.from_pretrained(variant("ints", ints))
    lying_head = dict(tensors, **{"lm_head.weight": tensors["transformer.wte.weight"] + 1})
    with pytest.raises(ValueError, match="differs from the token embedding"):
        GPT.from_pretrained(variant("head", lying_head))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text((good / "config.json").read_text())
    with pytest.raises(ValueError, match="no weights"):
        GPT.from_pretrained(tmp_path / "empty")
    pick = tmp_path / "pickle"
    pick.mkdir()
    (pick / "config.json").write_text((good / "config.json").read_text())
    (pick / "pytorch_model.bin").write_bytes(b"\x80\x04not really")
    with pytest.raises(ValueError, match="pytorch_model.bin: a pickle checkpoint; blockc never "
                                         "unpickles.*safe_serialization=True"):
        GPT.from_pretrained(pick)
    with pytest.raises(ValueError, match="not a directory"):
        GPT.from_pretrained(good / "config.json")
    with pytest.raises(ValueError, match="no such file"):
        GPT.from_pretrained(tmp_path / "empty" / "..")


def test_hostile_shard_indexes(tmp_path):
    hm = hf_model(n_layer=3)
    d = tmp_path / "shards"
    hm.save_pretrained(d, max_shard_size="60KB")
    index = json.loads((d / "model.safetensors.index.json").read_text())
    first = next(iter(index["weight_map"]))
    for target, match in (("../outside.safetensors", "not a file of this directory"),
                          ("absent.safetensors", "lists 'absent.safetensors'")):
        bad = dict(index, weight_map=dict(index["weight_map"], **{first: target}))
        (d / "model.safetensors.index.json").write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=match):
            GPT.from_pretrained(d)
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    # one tensor in two shards
    files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    a = blockc.safetensors.read(d / files[0])[0]
    b = {k: t.data for k, t in blockc.safetensors.read(d / files[1])[0].items()}
    name = next(iter(a))
    b[name] = a[name].data
    blockc.safetensors.write(d / files[1], b, {"format": "pt"})
    with pytest.raises(ValueError, match=f"tensor '{name}' is in both"):
        GPT.from_pretrained(d)


# ---- text -------------------------------------------------------------------------

TEXT = ["the block reads the stream and writes a small update back into it",
        "a residual stream flows from the embedding to the output",
        "naïve café: the attention mixes positions, the MLP mixes features 🙂",
        "tokens are ids; ids are rows of the embedding table"]


def trained_tokenizer(path, vocab=300):
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=["<|endoftext|>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TEXT * 5, trainer)
    tok.save(str(path / "tokenizer.json"))
    return tok


def test_tokenizer_round_trips_any_utf8(tmp_path):
    trained_tokenizer(tmp_path)
    tok = blockc.Tokenizer.from_pretrained(tmp_path)
    for text in TEXT + ["", "\x00\n\t", "日本語のテキスト", "emoji 🧪🙂 and ZWJ 👩‍👩‍👧", "é" * 50]:
        ids = tok.encode(text)
        assert ids.dtype == np.int64
        assert tok.decode(ids) == text
    # streamed a token at a time, the pieces join to the whole text, never a split character
    ids = tok.encode("emoji 🧪🙂 café")
    s = blockc.TextStream(tok)
    pieces = [s.push(i) for i in ids] + [s.flush()]
    assert "".join(pieces) == "emoji 🧪🙂 café"
    assert all("\ufffd" not in p for p in pieces)


def _tiny_text_model(tmp_path):
    tok = trained_tokenizer(tmp_path)
    hm = hf_model(seed=11, vocab_size=tok.get_vocab_size(), n_positions=64,
                  eos_token_id=tok.token_to_id("<|endoftext|>"))
    hm.save_pretrained(tmp_path)
    return hm, tok


@pytest.mark.slow
def test_blockc_generate_prints_what_transformers_decodes(tmp_path):
    hm, tok = _tiny_text_model(tmp_path)
    prompt = "the residual stream"
    ids = tok.encode(prompt).ids
    out = hm.generate(torch.as_tensor([ids]), max_new_tokens=20, do_sample=False,
                      pad_token_id=0).numpy()[0, len(ids):]
    eos = hm.config.eos_token_id
    if eos in out:
        out = out[:list(out).index(eos) + 1]
    want = prompt + tok.decode(list(out))  # the prompt echoed; the end token's text not printed
    r = subprocess.run([sys.executable, "-m", "blockc", "generate", "--temperature", "0", "--model", str(tmp_path),
                        "--prompt", prompt, "--max-new-tokens", "20"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout == want + "\n"
    r = subprocess.run([sys.executable, "-m", "blockc", "generate", "--temperature", "0", "--model", str(tmp_path),
                        "--ids", ",".join(map(str, ids)), "--max-new-tokens", "5", "--no-eos"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(t) for t in hm.generate(
        torch.as_tensor([ids]), max_new_tokens=5, do_sample=False, eos_token_id=None,
        pad_token_id=0).numpy()[0, len(ids):]]


def test_stop_strings_end_a_generation(tmp_path):
    hm, _ = _tiny_text_model(tmp_path)
    tok = blockc.Tokenizer.from_pretrained(tmp_path)
    m = GPT.from_pretrained(tmp_path)
    prompt = tok.encode("the block")
    free = m.generate(prompt[None], 20)[0, len(prompt):]
    text = tok.decode(free)
    stop = text[len(text) // 2: len(text) // 2 + 2]
    assert stop
    got = m.generate(prompt[None], 20, stop=[stop], tokenizer=tok)[0, len(prompt):]
    assert stop in tok.decode(got) and stop not in tok.decode(got[:-1])
    np.testing.assert_array_equal(got, free[:len(got)])
    with pytest.raises(ValueError, match="stop strings need a tokenizer"):
        m.generate(prompt[None], 4, stop=["x"])


def test_cli_generate_errors_are_one_line(tmp_path):
    from blockc.cli import main
    with pytest.raises(SystemExit):
        main(["generate", "--model", str(tmp_path)])  # neither --prompt nor --ids
    assert main(["generate", "--model", str(tmp_path / "none"), "--ids", "1,2"]) == 2
    hm = hf_model()
    hm.save_pretrained(tmp_path / "m")
    assert main(["generate", "--model", str(tmp_path / "m"), "--prompt", "hi"]) == 2  # no tokenizer
    assert main(["generate", "--model", str(tmp_path / "m"), "--ids", "1,x"]) == 2
    assert main(["generate", "--model", str(tmp_path / "m"), "--ids", "1,2", "--top-p", "2"]) == 2


def test_save_pretrained_keeps_the_special_token_ids(tmp_path):
    hm = hf_model(bos_token_id=3, eos_token_id=[5, 7], pad_token_id=1)
    hm.save_pretrained(tmp_path / "a")
    m = GPT.from_pretrained(tmp_path / "a")
    m.astype("bfloat16").save_pretrained(tmp_path / "b")
    d = json.loads((tmp_path / "b" / "config.json").read_text())
    assert (d["bos_token_id"], d["eos_token_id"], d["pad_token_id"]) == (3, [5, 7], 1)
    # ids that are not ids are not carried over
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    cfg["eos_token_id"] = "end"
    (tmp_path / "a" / "config.json").write_text(json.dumps(cfg))
    GPT.from_pretrained(tmp_path / "a").save_pretrained(tmp_path / "c")
    assert "eos_token_id" not in json.loads((tmp_path / "c" / "config.json").read_text())


def test_cli_convert_both_ways(tmp_path, capsys):
    from blockc.cli import main
    hm = hf_model(seed=12)
    hm.save_pretrained(tmp_path / "hf")
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "sd.safetensors")]) == 0
    tensors, meta = blockc.safetensors.read(tmp_path / "sd.safetensors")
    assert "blocks.0.attn.qkv.weight" in tensors and "config" in meta
    assert main(["convert", str(tmp_path / "sd.safetensors"), str(tmp_path / "back")]) == 0
    back = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "back").eval()
    ids = ids_for(101, seed=12)
    np.testing.assert_array_equal(hf_logits(back, ids), hf_logits(hm, ids))
