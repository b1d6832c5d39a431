"""A longrope model (Phi-3) served (issue 50): a sequence longer than
original_max_position_embeddings has every position turned by the long factors, as
transformers' forward of it (its generate recomputes the cache when a sequence passes
the original length). Through the HTTP API (``blockc serve`` in a subprocess, prompts
prefilled in chunks of 4 tokens, prefixes reused between requests): the greedy tokens of
prompts below, at and past the original length (16), decoding past it, equal
GPT.generate's and transformers' greedy tokens, unstreamed and streamed, with and
without a draft model; GPT.generate's speculative decoding gives the plain tokens too."""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
pytest.importorskip("jinja2")
pytest.importorskip("tokenizers")
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

import blockc  # noqa: E402
from chat_dirs import chat_dir  # noqa: E402
from serve_proc import Server  # noqa: E402

ORIGINAL, NEW = 16, 20
# (prompt length, seed): decoding across 16; 16 then across; past 16 from the start (read
# in chunks of 4); the same long prompt again (its prefix reused, long-turned); a short
# prompt that is the start of the long one (its keys must not be the long-turned ones); a
# long prompt continuing the first one's 5 long-turned tokens (its first call reaches 17)
CASES = [(5, 1), (ORIGINAL, 2), (22, 3), (22, 3), (9, 3), (30, 4), (20, 1)]


@pytest.fixture(scope="module")
def phi(tmp_path_factory):
    d = tmp_path_factory.mktemp("phi3serve")
    tok = chat_dir(d, "chatml")
    vocab = tok.get_vocab_size()
    rot = 6
    rng = np.random.default_rng(0)
    short = [round(float(x), 3) for x in 1 + rng.random(rot // 2)]
    long_ = [round(float(x), 3) for x in 2 + 4 * rng.random(rot // 2)]
    cfg = AutoConfig.for_model(
        "phi3", vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        original_max_position_embeddings=ORIGINAL, partial_rotary_factor=0.75,
        pad_token_id=0, bos_token_id=1, eos_token_id=tok.token_to_id("<|im_end|>"),
        rope_scaling=dict(rope_type="longrope", short_factor=short, long_factor=long_))
    torch.manual_seed(0)
    hm = AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():  # weights away from their init's zeros: tokens that vary
        for p in hm.parameters():
            p.add_(torch.randn_like(p) * (0.3 if p.ndim == 1 else 0.3))
    hm.save_pretrained(d)
    m = blockc.GPT.from_pretrained(d)
    assert m.config.rope_tables.inv_long is not None
    assert m.config.rope_tables.original == ORIGINAL
    return d, hm, m, tok


def _prompt(n, seed, vocab):
    return [int(t) for t in np.random.default_rng(seed).integers(3, vocab, size=30)[:n]]


def _hf_greedy(hm, ids, n):
    with torch.no_grad():
        x = torch.as_tensor([ids])
        return hm.generate(x, max_new_tokens=n, do_sample=False, eos_token_id=None,
                           pad_token_id=0, attention_mask=torch.ones_like(x))[0, len(ids):].tolist()


def _ask(server, ids, stream=False):
    body = {"model": "m", "prompt": ids, "max_tokens": NEW, "temperature": 0,
            "ignore_eos": True, "logprobs": 1}
    if not stream:
        r = server.post("/v1/completions", body)
        assert r.status_code == 200, r.text
        c = r.json()["choices"][0]
        return c["text"], len(c["logprobs"]["tokens"])
    body["stream"] = True
    text, n = [], 0
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                c = json.loads(line[6:])["choices"][0]
                text.append(c["text"])
                n += len((c.get("logprobs") or {}).get("tokens") or [])
    return "".join(text), n


@pytest.fixture(scope="module")
def expected(phi):
    d, hm, m, tok = phi
    out = []
    for n, seed in CASES:
        ids = _prompt(n, seed, m.config.vocab)
        got = m.generate(np.asarray([ids]), NEW, eos_token_id=())[0, n:].tolist()
        assert got == _hf_greedy(hm, ids, NEW), (n, seed)  # blockc = transformers
        out.append((ids, tok.decode(got), got))
    # the test has teeth: a long prompt read in chunks of 4 without care (its first keys
    # turned by the short factors) ends on other logits than its one forward
    ids = np.asarray([out[2][0]])
    cache = m.new_cache(1, 64)
    for a in range(0, ids.shape[1], 4):
        last = m(ids[:, a:a + 4], cache=cache, last_only=True)[0, 0]
    assert np.abs(last - m(ids)[0, -1]).max() > 1e-2
    return out


@pytest.mark.slow
@pytest.mark.parametrize("draft", [False, True])
def test_served_longrope_greedy_is_transformers(phi, expected, draft):
    d = phi[0]
    args = ["--parallel", "2", "--prefill-chunk", "4", "--ctx-size", "64"]
    if draft:
        args += ["--draft-model", str(d), "--draft-max", "3"]
    s = Server(d, *args, name="m")
    try:
        for stream in (False, True):
            for ids, text, toks in expected:
                got, n = _ask(s, ids, stream)
                assert (got, n) == (text, len(toks)), (len(ids), stream, draft)
    finally:
        s.stop()


def test_generate_speculative_longrope_is_plain_greedy(phi):
    _, hm, m, _ = phi
    for n, seed in [(5, 1), (ORIGINAL - 1, 2), (ORIGINAL, 5), (22, 3)]:
        ids = np.asarray([_prompt(n, seed, m.config.vocab)])
        plain = m.generate(ids, NEW, eos_token_id=())
        for kw in (dict(assistant_model=m, num_assistant_tokens=4),
                   dict(prompt_lookup_num_tokens=3)):
            np.testing.assert_array_equal(m.generate(ids, NEW, eos_token_id=(), **kw), plain)
