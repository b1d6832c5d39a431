"""GPT.embed (issue 52): the last hidden state after the final norm, pooled and normalised,
against transformers' last ``hidden_states`` entry (which transformers takes after the
final norm) pooled the same way, on tiny random Llama and Qwen2 models made by transformers
itself and loaded from their directories."""
import numpy as np
import pytest

from blockc import GPT, GPTConfig

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SEQS = [[3, 7, 1, 9, 4], [5, 2, 8], [1, 1, 2, 3, 5, 8, 13, 21], [6, 4, 2]]


def _hf_model(tmp_path, model_type):
    torch.manual_seed(0)
    hc = transformers.AutoConfig.for_model(
        model_type, vocab_size=40, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        rms_norm_eps=1e-6, tie_word_embeddings=False)
    hm = transformers.AutoModelForCausalLM.from_config(hc).eval()
    with torch.no_grad():  # gains away from 1, so a missing final norm shows
        hm.model.norm.weight.uniform_(0.5, 1.5)
    hm.save_pretrained(tmp_path)
    return hm


def _hf_embed(hm, seq, pooling, normalize=True):
    with torch.no_grad():
        out = hm(torch.tensor([seq]), output_hidden_states=True)
    h = out.hidden_states[-1][0].double().numpy()
    v = {"last": h[-1], "mean": h.mean(0), "first": h[0], "max": h.max(0)}[pooling]
    return v / np.linalg.norm(v) if normalize else v


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
@pytest.mark.parametrize("pooling", ["last", "mean"])
def test_embed_matches_transformers_hidden_states(tmp_path, model_type, pooling):
    hm = _hf_model(tmp_path, model_type)
    m = GPT.from_pretrained(tmp_path)
    got = m.embed(SEQS, pooling=pooling)
    assert got.shape == (len(SEQS), 32) and got.dtype == np.float32
    want = np.stack([_hf_embed(hm, s, pooling) for s in SEQS])
    np.testing.assert_allclose(got, want, atol=2e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    # one sequence: a vector; unnormalised: transformers' raw pooled state
    raw = m.embed(SEQS[2], pooling=pooling, normalize=False)
    assert raw.shape == (32,)
    np.testing.assert_allclose(raw, _hf_embed(hm, SEQS[2], pooling, False), rtol=1e-4,
                               atol=1e-4)


def test_embed_same_bits_at_any_batch_and_checks_its_arguments():
    m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1), seed=1)
    seqs = [[1, 2, 3], [4, 5, 6], [7, 8]]
    together = m.embed(seqs, pooling="max")
    alone = np.stack([m.embed(s, pooling="max") for s in seqs])
    assert np.array_equal(together.view(np.uint32), alone.view(np.uint32))
    assert np.array_equal(m.embed(seqs, batch_size=1), m.embed(seqs))
    # first-token pooling of a causal model sees only the first token
    assert np.array_equal(m.embed([[5, 1]], pooling="first"), m.embed([[5, 9]], pooling="first"))
    with pytest.raises(TypeError, match="string"):
        m.embed("hello")
    with pytest.raises(ValueError, match="pooling"):
        m.embed([1, 2], pooling="cls")
    with pytest.raises(ValueError, match=r"inputs\[1\]"):
        m.embed([[1, 2], []])
    with pytest.raises(ValueError):
        m.embed([[1, 99]])
    with pytest.raises(TypeError, match="normalize"):
        m.embed([1, 2], normalize=1)


@pytest.mark.parametrize("pooling", ["last", "mean", "first", "max"])
def test_a_long_sequence_in_chunks_is_the_whole(pooling):
    from blockc.model import embed as embed_mod
    from blockc.model.embed import pool
    cfg = GPTConfig(vocab=40, context=embed_mod.CHUNK * 2 + 64, width=16, heads=2, layers=2,
                    norm="rms", positions="rope", activation="swiglu", d_ff=24)
    m = GPT.random(cfg, seed=3)
    ids = np.random.default_rng(0).integers(0, 40, embed_mod.CHUNK * 2 + 37)
    whole = pool(m.final_hidden(ids[None]), pooling)[0]  # one forward call, every position
    got = m.embed(ids, pooling=pooling, normalize=False)  # in chunks through a cache
    if pooling == "mean":  # a sum in another order: the last float32 bit
        np.testing.assert_allclose(got, whole, rtol=1e-6, atol=1e-7)
    else:
        assert np.array_equal(got.view(np.uint32), whole.view(np.uint32))
    with pytest.raises(ValueError, match="context"):
        m.embed(np.zeros(cfg.context + 1, int))
