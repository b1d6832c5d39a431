"""One request never takes down another, and the server never stalls (issue 49, classes
1-3): blockc serve's app in this process (uvicorn on a thread, 127.0.0.1) over a small
random model wrapped to sleep a little per step (so requests stay in flight) and to fail
on cue (tests/support/serve_thread.py). In every test, requests stream beside the one
under test and must finish with the bits they get alone."""
import json
import shutil
import socket
import threading
import time

import numpy as np
import pytest

import blockc
from chat_dirs import chat_model_dir
from serve_thread import (CUES, MARK, Companions, FaultyModel, FaultyTokenizer, ThreadServer,
                          companion_body, stream_completion)

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
pytest.importorskip("jinja2")
pytest.importorskip("tokenizers")

from blockc.serve import Settings  # noqa: E402
from blockc.serve.sampling import RowSampler  # noqa: E402

NAN_MARK = 8       # a prompt holding it gets NaN logits
DECODE_MARK = 9    # decoding ids holding it raises


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("faults")
    chat_model_dir(d, "chatml", context=512, seed=4, llama=True)
    return d


def _with_template(model_dir, tmp_path, source):
    """A copy of the checkpoint whose tokenizer_config.json carries ``source``."""
    d = tmp_path / "ckpt"
    shutil.copytree(model_dir, d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["chat_template"] = source
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    return d


def _server(model_dir, **settings):
    m = blockc.GPT.from_pretrained(model_dir)
    tok = blockc.Tokenizer.from_pretrained(model_dir)
    model = FaultyModel(m, delay=0.004, raise_on=MARK, nan_on=NAN_MARK)
    tok = FaultyTokenizer(tok, decode_on=DECODE_MARK)
    s = dict(model=str(model_dir), model_name="m", parallel=8, max_queue=16,
             template_timeout=2.0)
    s.update(settings)
    return ThreadServer(Settings(**s), model, tok)


@pytest.fixture(scope="module")
def server(model_dir):
    s = _server(model_dir)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def alone(server):
    """What each companion streams with nothing else running."""
    return [stream_completion(server.url, companion_body(i)) for i in range(4)]


def _idle(server, timeout=30):
    end = time.monotonic() + timeout
    while not server.service.engine.idle():
        assert time.monotonic() < end, "the engine did not become idle"
        time.sleep(0.01)


def _chat(server, content, **kw):
    return server.post("/v1/chat/completions", {"model": "m", "max_tokens": 4, **kw,
                                                "messages": [{"role": "user",
                                                              "content": content}]})


# ---- class 1: a failure ends its request alone --------------------------------------------

@pytest.fixture
def sample_fault(monkeypatch):
    """The sampler of a request seeded 666 raises."""
    real = RowSampler.__call__

    def call(self, logits, seen):
        if self.s.seed == 666:
            raise RuntimeError("injected: sample")
        return real(self, logits, seen)
    monkeypatch.setattr(RowSampler, "__call__", call)


STAGES = {  # stage: (a request failing there, its status, what its message names)
    "template": (lambda s: _chat(s, "BOOM-template"), 500, "RuntimeError"),
    "tokenize": (lambda s: s.post("/v1/completions", {"model": "m", "prompt": "BOOM-tokenize",
                                                      "max_tokens": 4}), 500, "RuntimeError"),
    "prefill": (lambda s: s.post("/v1/completions", {"model": "m", "prompt": [1, MARK, 2],
                                                     "max_tokens": 4}), 500, "injected: prefill"),
    "sample": (lambda s: s.post("/v1/completions", {"model": "m", "prompt": "hi", "seed": 666,
                                                    "max_tokens": 4}), 500, "injected: sample"),
    "detokenize": (lambda s: s.post("/v1/completions",
                                    {"model": "m", "prompt": "hi", "max_tokens": 4,
                                     "logit_bias": {str(DECODE_MARK): 100}}),
                   500, "injected: detokenize"),
}


@pytest.mark.parametrize("stage", list(STAGES))
def test_a_request_failing_at_any_stage_ends_alone_while_seven_stream_on(server, alone, stage,
                                                                         sample_fault):
    send, status, names = STAGES[stage]
    with Companions(server, alone, n=7):
        r = send(server)
        assert r.status_code == status, r.text
        assert names in r.json()["error"]["message"]
    _idle(server)
    assert server.get("/health").json()["active"] == 0
    # and the server serves on
    assert server.post("/v1/completions", {"model": "m", "prompt": "hi",
                                           "max_tokens": 2}).status_code == 200


def test_a_streamed_request_failing_in_its_sampler_ends_with_an_error_event(server, alone,
                                                                             sample_fault):
    with Companions(server, alone, n=3):
        text, reason, error = stream_completion(server.url, {"model": "m", "prompt": "hi",
                                                             "seed": 666, "max_tokens": 4})
        assert error is not None and "injected: sample" in error and reason is None


def test_a_model_whose_logits_are_not_finite_fails_the_request_not_the_server(server, alone):
    with Companions(server, alone, n=3):
        for temperature in (0.0, 1.0):
            r = server.post("/v1/completions", {"model": "m", "prompt": [1, NAN_MARK],
                                                "max_tokens": 4, "temperature": temperature})
            assert r.status_code == 500
            assert "inf or NaN" in r.json()["error"]["message"]


@pytest.mark.parametrize("extra", [
    dict(repetition_penalty=1e-300), dict(repetition_penalty=1e300),
    dict(repetition_penalty=5e-324, temperature=5e-324, top_p=0.0),
    dict(temperature=2.0, top_p=1e-300, min_p=1.0, frequency_penalty=-2.0,
         presence_penalty=-2.0, repetition_penalty=1e300),
])
def test_sampling_at_the_edges_of_its_ranges_with_logit_bias_is_served(server, alone, extra):
    bias = {str(i): (100 if i % 2 else -100) for i in range(10, 30)}
    with Companions(server, alone, n=2):
        r = server.post("/v1/completions", {"model": "m", "prompt": "the block reads the block",
                                            "max_tokens": 6, "logit_bias": bias, "seed": 1,
                                            **extra})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 6


def test_a_chat_whose_template_renders_nothing_is_400(model_dir, tmp_path):
    s = _server(_with_template(model_dir, tmp_path, "{% if false %}x{% endif %}"))
    try:
        alone = [stream_completion(s.url, companion_body(0))]
        with Companions(s, alone):
            r = _chat(s, "hello")
            assert r.status_code == 400
            assert "empty prompt" in r.json()["error"]["message"]
    finally:
        s.stop()


# ---- class 2: a client that goes away frees what it held -----------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_hangs_up_frees_its_slot_at_once(server, alone, stream):
    engine = server.service.engine
    with Companions(server, alone, n=1):
        before = engine.stats["completion_tokens"]
        body = {"model": "m", "prompt": "a residual stream", "max_tokens": 400,
                "ignore_eos": True, "stream": stream, "logit_bias": {str(c): -100 for c in CUES}}
        data = json.dumps(body).encode()
        with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Content-Type: application/json\r\nContent-Length: "
                         + str(len(data)).encode() + b"\r\n\r\n" + data)
            end = time.monotonic() + 30
            while engine.active < 2:  # both decoding
                assert time.monotonic() < end
                time.sleep(0.005)
            # hang up: the socket closes
    _idle(server)
    made = engine.stats["completion_tokens"] - before - 160  # the companion's: 160
    assert made < 400, "the request of a client gone ran to its max_tokens"
    assert made < 160, "the request of a client gone outlived its companion"


# ---- class 3: the event loop never stalls ---------------------------------------------------

# loops with a body (Jinja drops an empty one), its output nothing
NESTED = ("{% set ns = namespace(n=0) %}{% for a in range(100000) %}{% for b in range(100000) %}"
          "{% set ns.n = ns.n + 1 %}{% endfor %}{% endfor %}{{ messages[0].content }}")


def test_a_template_with_nested_loops_is_stopped_and_health_answers(model_dir, tmp_path):
    s = _server(_with_template(model_dir, tmp_path, NESTED), template_timeout=1.0)
    try:
        alone = [stream_completion(s.url, companion_body(0))]
        with Companions(s, alone):
            got = {}
            t = threading.Thread(target=lambda: got.update(r=_chat(s, "hello")))
            t.start()
            for _ in range(5):  # /health answers while the template runs
                assert s.get("/health", timeout=10).status_code == 200
            t.join(60)
            r = got["r"]
            assert r.status_code == 400
            assert "ran for more than" in r.json()["error"]["message"]
    finally:
        s.stop()


def test_a_prompt_longer_than_the_context_can_hold_is_refused_untokenized(server, alone):
    limit = server.service.max_chars
    with Companions(server, alone):
        r = server.post("/v1/completions", {"model": "m", "prompt": "BOOM-tokenize" +
                                            "x" * limit, "max_tokens": 2})
        assert r.status_code == 400  # BOOM-tokenize: tokenizing would have raised (500)
        assert r.json()["error"]["code"] == "context_length_exceeded"
        r = _chat(server, "x" * limit)
        assert r.status_code == 400
        assert r.json()["error"]["code"] == "invalid_chat_template"
        assert f"over {limit} characters" in r.json()["error"]["message"]


def test_the_character_bound_never_refuses_a_prompt_that_fits(model_dir):
    from chat_dirs import LINES
    tok = blockc.Tokenizer.from_pretrained(model_dir)
    bound = tok.max_token_chars
    assert bound >= max(len(tok.decode([i])) for i in range(tok.vocab_size))
    for text in LINES + ["".join(LINES) * 3, "🙂" * 50, " " * 300, "<|im_start|>" * 5]:
        assert len(tok.encode(text)) * bound >= len(text)
