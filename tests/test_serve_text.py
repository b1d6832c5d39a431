"""The server's text is the model's own (issue 49, classes 4, 5 and 7): stop strings never
leak, log-probabilities carry each token's own bytes and as many alternatives as asked,
special tokens stay out of the text unless asked for, the API key is compared in
constant time. blockc serve's app in this process (uvicorn on a thread, 127.0.0.1), a
small random model whose byte-level tokenizer has tokens that end inside a character
(``b" caf\\xc3"``); logit_bias makes the model choose them. A request streams beside
each one under test and must finish with the bits it gets alone."""
import hmac

import numpy as np
import pytest

import blockc
from chat_dirs import chat_model_dir
from serve_thread import (CUES, Companions, FaultyModel, ThreadServer, companion_body,
                          stream_completion)

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
pytest.importorskip("jinja2")
pytest.importorskip("tokenizers")

from blockc.serve import Settings  # noqa: E402
from blockc.serve.engine import TextTail  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("text")
    chat_model_dir(d, "chatml", context=512, seed=4, llama=True)
    return d


@pytest.fixture(scope="module")
def tok(model_dir):
    return blockc.Tokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def server(model_dir):
    m = blockc.GPT.from_pretrained(model_dir)
    s = ThreadServer(Settings(model=str(model_dir), model_name="m", parallel=4, api_key="sekret"),
                     FaultyModel(m, delay=0.004))
    yield s
    s.stop()


AUTH = {"Authorization": "Bearer sekret"}


@pytest.fixture(scope="module")
def alone(server):
    return [stream_completion(server.url, companion_body(0), headers=AUTH)]


def _partial(tok, text):
    """The id of the token whose text is ``text`` and then the start of a character."""
    for i in range(tok.vocab_size):
        t = tok.decode([i])
        if t.endswith("\ufffd") and t[:-1] == text:
            return i
    pytest.skip(f"no token {text!r} + a partial character in this vocabulary")


def _post(server, body):
    return server.post("/v1/completions", {"model": "m", "prompt": "hello", **body},
                       headers=AUTH)


# ---- class 4: stop sequences never leak -------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_string_completed_by_a_token_ending_inside_a_character_never_leaks(
        server, alone, tok, stream):
    caf = _partial(tok, " caf")  # b" caf\xc3"
    body = {"max_tokens": 1, "stop": ["caf"], "logit_bias": {str(caf): 100}}
    with Companions(server, alone, headers=AUTH):
        if stream:
            text, reason, error = stream_completion(server.url, {"model": "m", "prompt": "hello",
                                                                 **body}, headers=AUTH)
            assert error is None
        else:
            r = _post(server, body).json()
            text, reason = r["choices"][0]["text"], r["choices"][0]["finish_reason"]
    assert "caf" not in text and text == " "
    assert reason == "stop"


def test_a_stop_string_is_cut_however_the_request_ends(tok):
    caf = _partial(tok, " caf")
    for stops, want in ((["caf"], " "), (["\ufffd"], " caf"), (["af"], " c")):
        t = TextTail(tok.decode, stops)
        piece, stopped = t.push(caf)
        assert (piece + t.flush(), t.stopped) == (want, True)
    # an incomplete character at the end, no stop string: flushed as it decodes
    t = TextTail(tok.decode, ["zzz"])
    assert t.push(caf) == ("", False) and t.flush() == " caf\ufffd" and not t.stopped


# ---- class 5: log-probabilities are the token's own ------------------------------------------

def test_logprobs_bytes_are_the_tokens_own_bytes(server, alone, tok):
    part = _partial(tok, " caf")
    with Companions(server, alone, headers=AUTH):
        r = server.post("/v1/chat/completions", {
            "model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
            "logprobs": True, "top_logprobs": 5, "logit_bias": {str(part): 100}},
            headers=AUTH).json()
    for e in r["choices"][0]["logprobs"]["content"]:
        assert bytes(e["bytes"]) == b" caf\xc3"
        assert e["token"] == "bytes:\\x20\\x63\\x61\\x66\\xc3"
        assert len(e["top_logprobs"]) == 5
        for alt in e["top_logprobs"]:
            assert "\ufffd" not in bytes(alt["bytes"]).decode("utf-8", "replace") or \
                alt["token"].startswith("bytes:")


def test_completions_top_logprobs_has_as_many_entries_as_asked(server, alone, tok):
    with Companions(server, alone, headers=AUTH):
        r = _post(server, {"max_tokens": 40, "logprobs": 5, "temperature": 1.0, "seed": 3,
                           "ignore_eos": True, "logit_bias": {str(c): -100 for c in CUES}})
    lp = r.json()["choices"][0]["logprobs"]
    assert len(lp["top_logprobs"]) == 40
    assert all(len(top) == 5 for top in lp["top_logprobs"])
    # the byte-level vocabulary: half its bytes alone decode to U+FFFD, so 40 steps see
    # several in one top 5 (each named by its bytes)
    assert any(k.startswith("bytes:") for top in lp["top_logprobs"] for k in top)


# ---- class 7: special tokens, the API key -------------------------------------------------------

def test_special_tokens_are_not_in_the_text_unless_asked(server, alone, tok):
    start = tok.token_to_id("<|im_start|>")
    body = {"max_tokens": 3, "logit_bias": {str(start): 100}, "ignore_eos": True}
    with Companions(server, alone, headers=AUTH):
        r = _post(server, body).json()
        assert r["choices"][0]["text"] == "" and r["usage"]["completion_tokens"] == 3
        text, _, _ = stream_completion(server.url, {"model": "m", "prompt": "hello", **body},
                                       headers=AUTH)
        assert text == ""
        r = _post(server, {**body, "skip_special_tokens": False}).json()
        assert r["choices"][0]["text"] == "<|im_start|>" * 3


def test_the_api_key_is_compared_in_constant_time(server, alone, monkeypatch):
    seen = []
    real = hmac.compare_digest

    def spy(a, b):
        seen.append((a, b))
        return real(a, b)
    monkeypatch.setattr(hmac, "compare_digest", spy)
    with Companions(server, alone, headers=AUTH):
        assert server.get("/v1/models", headers=AUTH).status_code == 200
        for bad in ("Bearer sekreT", "Bearer x", "sekret", "Bearer sekret2"):
            r = server.get("/v1/models", headers={"Authorization": bad})
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert server.get("/v1/models").status_code == 401
    assert len(seen) == 7 and all(b == b"Bearer sekret" for _, b in seen)  # the companion too
