"""No request field is silently ignored (issue 52's first line): every field of OpenAI's
chat completions and completions request schemas is either carried out (200) or refused
with a 400 naming it; a field no schema has is refused too. blockc serve's app in this
process (uvicorn on a thread, 127.0.0.1)."""
import json

import pytest

import blockc
from chat_dirs import chat_model_dir
from serve_thread import ThreadServer

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
pytest.importorskip("jinja2")
pytest.importorskip("tokenizers")

from blockc.serve import Settings  # noqa: E402

MSGS = [{"role": "user", "content": "Hi"}]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}

#: every field of OpenAI's POST /v1/chat/completions request (its API reference), each with a
#: value that asks for something; True: the server carries it out, False: it refuses it
CHAT_FIELDS = {
    "messages": (MSGS, True), "model": ("m", True),
    "audio": ({"voice": "alloy", "format": "wav"}, False),
    "frequency_penalty": (0.5, True), "function_call": ("auto", True),
    "functions": ([TOOL["function"]], True), "logit_bias": ({"5": 1.0}, True),
    "logprobs": (True, True), "max_completion_tokens": (3, True), "max_tokens": (3, True),
    "metadata": ({"k": "v"}, True), "modalities": (["text", "audio"], False), "n": (2, True),
    "parallel_tool_calls": (False, True), "prediction": ({"type": "content", "content": "x"}, False),
    "presence_penalty": (0.5, True), "prompt_cache_key": ("k", True),
    "reasoning_effort": ("low", False), "response_format": ({"type": "json_object"}, True),
    "safety_identifier": ("s", True), "seed": (3, True), "service_tier": ("auto", True),
    "stop": (["\n"], True), "store": (True, True), "stream": (False, True),
    "stream_options": (None, True), "temperature": (0.5, True),
    "tool_choice": ("auto", True), "tools": ([TOOL], True), "top_logprobs": (2, True),
    "top_p": (0.9, True), "user": ("u", True), "verbosity": ("low", False),
    "web_search_options": ({}, False),
}
#: and of POST /v1/completions
COMPLETION_FIELDS = {
    "model": ("m", True), "prompt": ("Hi", True), "best_of": (2, False), "echo": (True, False),
    "frequency_penalty": (0.5, True), "logit_bias": ({"5": 1.0}, True), "logprobs": (2, True),
    "max_tokens": (3, True), "n": (2, True), "presence_penalty": (0.5, True), "seed": (3, True),
    "stop": (["\n"], True), "stream": (False, True), "stream_options": (None, True),
    "suffix": ("!", False), "temperature": (0.5, True), "top_p": (0.9, True), "user": ("u", True),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("fields")
    chat_model_dir(d, "chatml", context=256, seed=4, llama=True)
    s = ThreadServer(Settings(model=str(d), model_name="m", parallel=2, max_queue=8),
                     blockc.GPT.from_pretrained(d))
    yield s
    s.stop()


def _check(server, path, base, name, value, carried_out):
    body = dict(base, **{name: value})
    if name == "top_logprobs":
        body["logprobs"] = True
    r = server.post(path, json.dumps(body))
    if carried_out:
        assert r.status_code == 200, (name, r.text)
    else:
        assert r.status_code == 400, (name, r.status_code, r.text)
        assert r.json()["error"]["param"] == name, r.text


@pytest.mark.parametrize("name", sorted(CHAT_FIELDS))
def test_every_chat_field_is_carried_out_or_refused_by_name(server, name):
    value, carried_out = CHAT_FIELDS[name]
    _check(server, "/v1/chat/completions", {"model": "m", "messages": MSGS, "max_tokens": 3},
           name, value, carried_out)


@pytest.mark.parametrize("name", sorted(COMPLETION_FIELDS))
def test_every_completion_field_is_carried_out_or_refused_by_name(server, name):
    value, carried_out = COMPLETION_FIELDS[name]
    _check(server, "/v1/completions", {"model": "m", "prompt": "Hi", "max_tokens": 3},
           name, value, carried_out)


def test_a_field_carried_out_with_a_bad_value_is_refused_by_name(server):
    for name, value in (("response_format", {"type": "xml"}), ("tool_choice", "required"),
                        ("tools", [{"type": "function"}]), ("parallel_tool_calls", "yes"),
                        ("chat_template_kwargs", {"tools": []})):
        r = server.post("/v1/chat/completions", json.dumps(
            {"model": "m", "messages": MSGS, "max_tokens": 3, name: value}))
        assert r.status_code in (400, 422) and r.json()["error"]["param"] == name, (name, r.text)


def test_fields_that_ask_for_nothing_pass_and_unknown_fields_are_refused(server):
    neutral = {"model": "m", "messages": MSGS, "max_tokens": 3, "response_format": {"type": "text"},
               "tools": [], "tool_choice": "none", "modalities": ["text"], "audio": None,
               "parallel_tool_calls": True, "chat_template_kwargs": {"enable_thinking": False}}
    assert server.post("/v1/chat/completions", json.dumps(neutral)).status_code == 200
    for path, base in (("/v1/chat/completions", {"model": "m", "messages": MSGS}),
                       ("/v1/completions", {"model": "m", "prompt": "Hi"})):
        r = server.post(path, json.dumps(dict(base, temprature=0.5)))
        assert r.status_code == 400 and r.json()["error"]["param"] == "temprature", r.text
        assert "unknown field" in r.json()["error"]["message"]


#: every field of OpenAI's POST /v1/embeddings request: all carried out
EMBEDDING_FIELDS = {"input": ("Hi", True), "model": ("m", True),
                    "encoding_format": ("base64", True), "dimensions": (8, True),
                    "user": ("u", True)}
#: llama-server's POST /tokenize and /detokenize
TOKENIZE_FIELDS = {"content": ("Hi", True), "add_special": (True, True),
                   "with_pieces": (True, True), "model": ("m", True)}


@pytest.mark.parametrize("name", sorted(EMBEDDING_FIELDS))
def test_every_embeddings_field_is_carried_out(server, name):
    value, carried_out = EMBEDDING_FIELDS[name]
    _check(server, "/v1/embeddings", {"input": "Hi"}, name, value, carried_out)


@pytest.mark.parametrize("name", sorted(TOKENIZE_FIELDS))
def test_every_tokenize_field_is_carried_out(server, name):
    value, carried_out = TOKENIZE_FIELDS[name]
    _check(server, "/tokenize", {"content": "Hi"}, name, value, carried_out)


def test_unknown_fields_of_the_other_endpoints_are_refused(server):
    for path, base in (("/v1/embeddings", {"input": "Hi"}), ("/tokenize", {"content": "Hi"}),
                       ("/detokenize", {"tokens": [1, 2]})):
        assert server.post(path, json.dumps(base)).status_code == 200
        r = server.post(path, json.dumps(dict(base, temperature=0.5)))
        assert r.status_code == 400 and r.json()["error"]["param"] == "temperature", r.text
