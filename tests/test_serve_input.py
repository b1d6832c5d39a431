"""Bad input is 400, never 500, and the message names the real problem (issue 49, class
6): deeply nested JSON, lone surrogates in any string field, ``n`` past what the queue
ever holds, every kind of template error (as :class:`blockc.chat.ChatTemplateError`);
in Python, a ragged batch with an empty prompt. blockc serve's app in this process
(uvicorn on a thread, 127.0.0.1); a request streams beside each one under test and must
finish with the bits it gets alone."""
import json
import shutil

import numpy as np
import pytest

import blockc
from chat_dirs import CHATML, chat_model_dir
from serve_thread import Companions, FaultyModel, ThreadServer, companion_body, stream_completion

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
pytest.importorskip("jinja2")
pytest.importorskip("tokenizers")

from blockc.chat import ChatTemplate, ChatTemplateError  # noqa: E402
from blockc.serve import Settings  # noqa: E402

# a ChatML template that fails on cue: the first message's content picks the failure
HOSTILE = (
    "{% macro deeper(n) %}{{ deeper(n + 1) }}{% endmacro %}"
    "{% set c = messages[0]['content'] %}"
    "{% if c == 'div' %}{{ 1 / 0 }}{% elif c == 'mod' %}{{ 1 % 0 }}"
    "{% elif c == 'overflow' %}{{ 2.0 ** 100000 }}{% elif c == 'recursion' %}{{ deeper(0) }}"
    "{% elif c == 'power' %}{{ 7 ** 10000000 }}{% elif c == 'huge' %}{{ 'x' * 10 ** 12 }}"
    "{% elif c == 'index' %}{{ messages[99] }}{% elif c == 'raise' %}"
    "{{ raise_exception('roles must alternate') }}{% endif %}" + CHATML)

CASES = {  # content: what the message names
    "div": "ZeroDivisionError", "mod": "ZeroDivisionError", "overflow": "OverflowError",
    "recursion": "RecursionError", "power": "too large", "huge": "the limit is",
    "raise": "roles must alternate",
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("input")
    chat_model_dir(d, "chatml", context=512, seed=4, llama=True)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["chat_template"] = HOSTILE
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    return d


@pytest.fixture(scope="module")
def server(model_dir):
    m = blockc.GPT.from_pretrained(model_dir)
    s = ThreadServer(Settings(model=str(model_dir), model_name="m", parallel=4, max_queue=12),
                     FaultyModel(m, delay=0.004))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def alone(server):
    return [stream_completion(server.url, companion_body(0))]


def _error(r, status=400):
    assert r.status_code == status, r.text
    return r.json()["error"]


def test_deeply_nested_json_is_400(server, alone):
    with Companions(server, alone):
        for depth in (10 ** 5, 10 ** 6 // 2):
            body = '{"model": "m", "prompt": ' + "[" * depth + "]" * depth + "}"
            e = _error(server.post("/v1/completions", body))
            assert e["code"] == "invalid_json" and "nested" in e["message"]


@pytest.mark.parametrize("field,body", [
    ("model", '{"model": "m\\ud800", "prompt": "hi"}'),
    ("prompt", '{"model": "m", "prompt": "hi \\udfff there"}'),
    ("stop[0]", '{"model": "m", "prompt": "hi", "stop": ["\\ud83d"]}'),
    ("messages[0].content", '{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}]}'),
    ("messages[0].role", '{"model": "m", "messages": [{"role": "us\\udc00er", "content": "x"}]}'),
    ("user", '{"model": "m", "prompt": "hi", "user": "\\ud800"}'),
])
def test_a_lone_surrogate_in_any_string_is_400_naming_the_field(server, alone, field, body):
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    with Companions(server, alone):
        e = _error(server.post(path, body))
    assert e["param"] == field and "lone surrogate" in e["message"]


def test_n_past_what_the_queue_ever_holds_is_400_not_429(server, alone):
    with Companions(server, alone):
        e = _error(server.post("/v1/completions", {"model": "m", "prompt": "hi", "n": 13,
                                                   "max_tokens": 2}))
        assert e["param"] == "n" and "12" in e["message"]
        r = server.post("/v1/completions", {"model": "m", "prompt": "hi", "n": 3, "max_tokens": 2})
        assert r.status_code == 200 and len(r.json()["choices"]) == 3


@pytest.mark.parametrize("content", list(CASES))
def test_every_template_error_is_400_naming_it(server, alone, content):
    with Companions(server, alone):
        e = _error(server.post("/v1/chat/completions", {
            "model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": content}]}))
    assert e["param"] == "messages" and CASES[content] in e["message"]
    assert "chat template" in e["message"]


@pytest.mark.parametrize("content", list(CASES))
def test_every_template_error_is_a_chat_template_error(model_dir, content):
    tok = blockc.Tokenizer.from_pretrained(model_dir)
    with pytest.raises(ChatTemplateError, match=CASES[content]):
        tok.apply_chat_template([{"role": "user", "content": content}])


def test_a_template_that_does_not_compile_is_400_and_completions_serve_on(model_dir, tmp_path):
    d = tmp_path / "ckpt"
    shutil.copytree(model_dir, d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["chat_template"] = "{% for m in messages %}{{ m.content }"
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    s = ThreadServer(Settings(model=str(d), model_name="m", parallel=2),
                     FaultyModel(blockc.GPT.from_pretrained(d), delay=0.004))
    try:
        alone = [stream_completion(s.url, companion_body(0))]
        with Companions(s, alone):
            e = _error(s.post("/v1/chat/completions", {
                "model": "m", "messages": [{"role": "user", "content": "hi"}]}))
            assert e["code"] == "invalid_chat_template" and "does not compile" in e["message"]
    finally:
        s.stop()


def test_a_template_that_fits_is_unchanged(model_dir):
    msgs = [{"role": "user", "content": "Hello"}]
    assert ChatTemplate(HOSTILE).render(msgs) == ChatTemplate(CHATML).render(msgs)


def test_generate_with_an_empty_prompt_says_so():
    m = blockc.GPT.random(blockc.GPTConfig(vocab=32, context=16, width=16, heads=2, layers=1))
    for ids, where in (([[1, 2], []], "prompt 1 is empty"), ([[]], "at least one token"),
                       ([], "at least one token"), (np.zeros((2, 0), np.int64),
                                                    "at least one token")):
        with pytest.raises(ValueError, match=where):
            m.generate(ids, 2)
