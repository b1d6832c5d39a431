"""blockc serve's endpoints beyond chat and completions (issue 52): /v1/embeddings against
GPT.embed and the openai client (float and base64), /tokenize and /detokenize against the
tokenizer, several models (loaded on first use, least recently used unloaded past the
memory budget, a load never holding up another model's requests), CORS, the request log,
timings, the context-overflow policy, /metrics. The app in this process (uvicorn on a
thread, 127.0.0.1), tiny random checkpoints made here."""
import base64
import json
import logging
import re
import threading
import time

import numpy as np
import pytest

import blockc
from chat_dirs import chat_model_dir
from serve_thread import ThreadServer

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
pytest.importorskip("jinja2")
pytest.importorskip("tokenizers")

from blockc.serve import Settings  # noqa: E402
from blockc.serve.embed import pooling_of  # noqa: E402
from blockc.serve.models import parse_memory, split_model_arg  # noqa: E402

TEXTS = ["the block reads the stream", "Hello! How are you today?", "naïve café 🙂"]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    a = tmp_path_factory.mktemp("model_a")
    chat_model_dir(a, "chatml", context=128, seed=4, llama=True)
    b = tmp_path_factory.mktemp("model_b")
    chat_model_dir(b, "chatml", context=128, seed=9, llama=True)
    # b is a sentence-transformers directory that asks for mean pooling
    (b / "modules.json").write_text(json.dumps(
        [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
         {"idx": 1, "name": "1", "path": "1_Pooling",
          "type": "sentence_transformers.models.Pooling"}]))
    (b / "1_Pooling").mkdir()
    (b / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True,
         "pooling_mode_lasttoken": False}))
    return a, b


@pytest.fixture(scope="module")
def server(dirs):
    s = ThreadServer(Settings(model=str(dirs[0]), model_name="a", parallel=2, max_queue=8,
                              cors_origins=("http://allowed.example",)))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def local(dirs):
    return blockc.GPT.from_pretrained(dirs[0]), blockc.Tokenizer.from_pretrained(dirs[0])


def _client(s):
    return openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=60)


# ---- embeddings -------------------------------------------------------------------------

def test_embeddings_float_and_base64_equal_gpt_embed(server, local):
    m, tok = local
    want = m.embed([tok.encode(t) for t in TEXTS], pooling="last")
    c = _client(server)
    r = c.embeddings.create(model="anything", input=TEXTS, encoding_format="float")
    assert r.object == "list" and r.model == "a" and len(r.data) == 3
    assert [d.index for d in r.data] == [0, 1, 2]
    got = np.array([d.embedding for d in r.data], np.float32)
    assert np.array_equal(got, want)  # float32 -> JSON double -> float32: exact
    assert r.usage.prompt_tokens == sum(len(tok.encode(t)) for t in TEXTS)
    assert r.usage.total_tokens == r.usage.prompt_tokens
    # base64: little-endian float32, as OpenAI sends it (the client asks for it when no
    # encoding_format is given, and decodes it; asked for, it hands over the string)
    b = c.embeddings.create(model="a", input=TEXTS)
    assert np.array_equal(np.array([d.embedding for d in b.data], np.float32), want)
    b = c.embeddings.create(model="a", input=TEXTS, encoding_format="base64")
    assert np.array_equal(np.frombuffer(base64.b64decode(b.data[1].embedding), "<f4"), want[1])
    raw = server.post("/v1/embeddings", {"input": TEXTS[0], "encoding_format": "base64"}).json()
    vec = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), "<f4")
    assert np.array_equal(vec, want[0])
    # one string, token ids, a list of token-id lists
    one = c.embeddings.create(model="a", input=TEXTS[1])
    assert np.array_equal(np.array(one.data[0].embedding, np.float32), want[1])
    ids = [int(t) for t in tok.encode(TEXTS[2])]
    assert np.array_equal(np.array(c.embeddings.create(model="a", input=ids).data[0].embedding,
                                   np.float32), want[2])
    two = c.embeddings.create(model="a", input=[ids, ids[:3]])
    assert np.array_equal(np.array(two.data[1].embedding, np.float32),
                          m.embed(ids[:3], pooling="last"))


def test_embeddings_dimensions_truncate_then_renormalise(server, local):
    m, tok = local
    full = m.embed(tok.encode(TEXTS[0]))
    r = _client(server).embeddings.create(model="a", input=TEXTS[0], dimensions=8)
    v = np.array(r.data[0].embedding)
    assert v.shape == (8,)
    np.testing.assert_allclose(v, full[:8] / np.linalg.norm(full[:8]), rtol=1e-6, atol=1e-7)
    assert abs(np.linalg.norm(v) - 1) < 1e-6


@pytest.mark.parametrize("body,status,param", [
    ({"input": []}, 422, "input"), ({"input": ""}, 400, "input"), ({}, 400, "input"),
    ({"input": [[]]}, 400, "input"), ({"input": [1, "a"]}, 422, "input"),
    ({"input": "x", "encoding_format": "int8"}, 400, "encoding_format"),
    ({"input": "x", "dimensions": 0}, 400, "dimensions"),
    ({"input": "x", "dimensions": 33}, 400, "dimensions"),
    ({"input": [[1, 99999]]}, 400, "input"), ({"input": "x", "pooling": "mean"}, 400, "pooling"),
    ({"input": "word " * 200}, 400, "input")])
def test_embeddings_refusals_name_the_field(server, body, status, param):
    r = server.post("/v1/embeddings", body)
    assert r.status_code == status and r.json()["error"]["param"] == param, r.text
    assert "Traceback" not in r.text


def test_pooling_is_the_directorys_own(dirs):
    assert pooling_of(str(dirs[0])) == "last" and pooling_of(str(dirs[1])) == "mean"
    assert pooling_of(None) == "last"


# ---- tokenize / detokenize ----------------------------------------------------------------

def test_tokenize_and_detokenize_against_the_tokenizer(server, local):
    tok = local[1]
    text = "Hello! naïve café 🙂"
    r = server.post("/tokenize", {"content": text})
    assert r.status_code == 200
    assert r.json() == {"tokens": [int(t) for t in tok.encode(text, add_special_tokens=False)]}
    r = server.post("/tokenize", {"content": text, "add_special": True, "with_pieces": True})
    ids = [int(t) for t in tok.encode(text, add_special_tokens=True)]
    pieces = r.json()["tokens"]
    assert [p["id"] for p in pieces] == ids
    for p in pieces:
        raw = tok.token_bytes(p["id"])
        assert (p["piece"].encode("utf-8") if isinstance(p["piece"], str)
                else bytes(p["piece"])) == raw
    r = server.post("/detokenize", {"tokens": ids})
    assert r.status_code == 200 and r.json() == {"content": tok.decode(ids)}
    for path, body, param in (("/tokenize", {"content": 3}, "content"),
                              ("/tokenize", {"content": "a", "bogus": 1}, "bogus"),
                              ("/detokenize", {"tokens": [-1]}, "tokens"),
                              ("/detokenize", {"tokens": "abc"}, "tokens")):
        r = server.post(path, body)
        assert r.status_code in (400, 422) and r.json()["error"]["param"] == param, r.text


# ---- the rest: CORS, the log line, timings, metrics ---------------------------------------

def test_cors_only_for_the_origins_given(server):
    pre = httpx.options(server.url + "/v1/chat/completions", timeout=10, headers={
        "Origin": "http://allowed.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,authorization"})
    assert pre.status_code == 200
    assert pre.headers["access-control-allow-origin"] == "http://allowed.example"
    r = server.get("/v1/models", headers={"Origin": "http://allowed.example"})
    assert r.headers["access-control-allow-origin"] == "http://allowed.example"
    r = server.get("/v1/models", headers={"Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in r.headers


def test_one_log_line_per_request_and_timings(server, caplog):
    caplog.set_level(logging.INFO, logger="blockc.serve")
    r = server.post("/v1/completions", {"prompt": "the block", "max_tokens": 5,
                                        "ignore_eos": True, "temperature": 0})
    assert r.status_code == 200
    body = r.json()
    t = body["timings"]
    assert t["predicted_n"] == body["usage"]["completion_tokens"] == 5
    assert t["prompt_n"] == (body["usage"]["prompt_tokens"]
                             - body["usage"]["prompt_tokens_details"]["cached_tokens"])
    assert t["prompt_ms"] > 0 and t["predicted_ms"] > 0
    assert abs(t["predicted_per_second"] - 5000 / t["predicted_ms"]) < 1e-2 * t["predicted_per_second"]
    server.post("/v1/embeddings", {"input": "x y"})
    deadline = time.monotonic() + 5

    def posts():  # this test's two requests (the shared server logs a request after its
        # response is sent: the previous test's GET /v1/models landed in this capture once)
        return [rec.getMessage() for rec in caplog.records
                if rec.name == "blockc.serve" and rec.getMessage().startswith("POST ")]
    while time.monotonic() < deadline and len(posts()) < 2:
        time.sleep(0.01)
    lines = posts()
    assert len(lines) == 2, lines
    assert re.fullmatch(rf"POST /v1/completions 200 id={body['id']} model=a "
                        rf"prompt_tokens={body['usage']['prompt_tokens']} "
                        r"completion_tokens=5 ms=[\d.]+", lines[0]), lines
    assert re.fullmatch(r"POST /v1/embeddings 200 id=- model=a prompt_tokens=\d+ "
                        r"completion_tokens=0 ms=[\d.]+", lines[1]), lines


def _parse_metrics(text):
    """{sample name with its labels: value}: prometheus_client's own parser when installed,
    else a strict reading of the text format (every line a comment or 'name{le="x"} value')."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        out = {}
        for line in text.splitlines():
            if line.startswith("#"):
                assert re.fullmatch(r"# (HELP|TYPE) \w+ .+", line), line
                continue
            m = re.fullmatch(r'(\w+)(?:\{le="([^"]+)"\})? (\S+)', line)
            assert m, line
            out[m.group(1) + (f"|{float(m.group(2))}" if m.group(2) else "")] = float(m.group(3))
        return out
    return {s.name + (f"|{float(s.labels['le'])}" if "le" in s.labels else ""): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_metrics_parse_and_count(server):
    before = _parse_metrics(server.get("/metrics").text)
    server.post("/v1/completions", {"prompt": "a", "max_tokens": 3, "ignore_eos": True})
    after = _parse_metrics(server.get("/metrics").text)
    assert after["blockc_requests_total"] == before["blockc_requests_total"] + 1
    assert after["blockc_completion_tokens_total"] == before["blockc_completion_tokens_total"] + 3
    assert after["blockc_models_loaded"] == 1
    for h in ("queue_wait", "time_to_first_token", "time_per_output_token"):
        name = f"blockc_{h}_seconds"
        assert after[name + "_count"] == before[name + "_count"] + 1, h
        assert after[name + "_sum"] > before[name + "_sum"], h
        buckets = sorted((float(k.split("|")[1]), v) for k, v in after.items()
                         if k.startswith(name + "_bucket|"))
        assert len(buckets) == 19 and buckets[-1] == (float("inf"), after[name + "_count"])
        assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:]))  # cumulative


def test_context_overflow_truncate_keeps_the_last_tokens(dirs, local):
    s = ThreadServer(Settings(model=str(dirs[0]), model_name="a", parallel=1, max_queue=4,
                              context_overflow="truncate"))
    try:
        tok = local[1]
        ids = [int(t) for t in tok.encode("the block reads the stream " * 40)]
        assert len(ids) > 128
        r = s.post("/v1/completions", {"prompt": ids, "max_tokens": 8, "temperature": 0,
                                       "ignore_eos": True})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["prompt_tokens"] == 120
        want = s.post("/v1/completions", {"prompt": ids[-120:], "max_tokens": 8,
                                          "temperature": 0, "ignore_eos": True}).json()
        assert r.json()["choices"][0]["text"] == want["choices"][0]["text"]
        r = s.post("/v1/embeddings", {"input": ids})
        assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 128
    finally:
        s.stop()


def test_context_overflow_truncate_middle_keeps_the_start_and_the_end(dirs, local):
    s = ThreadServer(Settings(model=str(dirs[0]), model_name="a", parallel=1, max_queue=4,
                              context_overflow="truncate-middle"))
    try:
        ids = [int(t) for t in local[1].encode("the block reads the stream " * 40)]
        ask = {"max_tokens": 8, "temperature": 0, "ignore_eos": True}
        r = s.post("/v1/completions", dict(ask, prompt=ids))
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["prompt_tokens"] == 120
        want = s.post("/v1/completions", dict(ask, prompt=ids[:60] + ids[-60:])).json()
        assert r.json()["choices"][0]["text"] == want["choices"][0]["text"]
        assert want["usage"]["prompt_tokens"] == 120
    finally:
        s.stop()


# ---- several models ---------------------------------------------------------------------

def test_memory_sizes_and_model_arguments():
    assert parse_memory("512") == 512 and parse_memory("2K") == 2048
    assert parse_memory("1.5G") == 3 << 29 and parse_memory("8GiB") == 8 << 30
    for bad in ("", "G", "-1", "3X", "0"):
        with pytest.raises(ValueError):
            parse_memory(bad)
    assert split_model_arg("chat=dir/x") == ("chat", "dir/x")
    assert split_model_arg("dir/x.gguf") == (None, "dir/x.gguf")


def test_two_models_load_on_first_use_and_the_lru_unloads(dirs):
    a, b = dirs
    ma, mb = blockc.GPT.from_pretrained(a), blockc.GPT.from_pretrained(b)
    tok = blockc.Tokenizer.from_pretrained(a)
    # room for one model and its slots, not two
    s = ThreadServer(Settings(model=str(a), model_name="a", models=(("b", str(b)),),
                              parallel=1, max_queue=4, max_memory=int(ma.nbytes * 1.5)))
    try:
        pool = s.app.state.pool
        c = _client(s)
        assert [x.id for x in c.models.list().data] == ["a", "b"]
        assert s.get("/health").json()["models"] == {"a": "unloaded", "b": "unloaded"}
        ids = tok.encode(TEXTS[0])
        ra = c.embeddings.create(model="a", input=TEXTS[0])  # a loads
        assert np.array_equal(np.array(ra.data[0].embedding, np.float32), ma.embed(ids))
        assert s.get("/health").json()["models"] == {"a": "loaded", "b": "unloaded"}
        rb = c.embeddings.create(model="b", input=TEXTS[0])  # b loads; its pooling: mean
        assert rb.model == "b"
        assert np.array_equal(np.array(rb.data[0].embedding, np.float32),
                              mb.embed(ids, pooling="mean"))
        assert s.get("/health").json()["models"] == {"a": "unloaded", "b": "loaded"}
        r = c.completions.create(model="a", prompt="the block", max_tokens=4, temperature=0)
        assert r.model == "a" and s.get("/health").json()["models"]["b"] == "unloaded"
        with pytest.raises(openai.NotFoundError) as e:
            c.embeddings.create(model="c", input="x")
        assert "'a', 'b'" in str(e.value)
        r = s.post("/v1/embeddings", {"input": "x"})  # several models: a name is needed
        assert r.status_code == 400 and r.json()["error"]["param"] == "model"

        # a slow load of b holds up no request for a
        real, loads = pool._load, []

        def slow(name, path):
            loads.append(name)
            if name == "b":
                time.sleep(3)
            return real(name, path)
        pool._load = slow
        done = []
        ts = [threading.Thread(target=lambda: done.append(
            s.post("/v1/embeddings", {"model": "b", "input": "x"}).status_code))
            for _ in range(2)]  # two requests for b while it loads: one load
        t0 = time.monotonic()
        for t in ts:
            t.start()
        time.sleep(0.3)
        assert s.get("/health").json()["models"]["b"] == "unloaded"  # still loading
        ra = s.post("/v1/embeddings", {"model": "a", "input": "x"})
        assert ra.status_code == 200 and time.monotonic() - t0 < 2.5
        for t in ts:
            t.join(30)
        assert done == [200, 200] and loads == ["b"]
    finally:
        s.stop()


@pytest.mark.slow
def test_a_busy_port_is_refused_before_the_model_loads(dirs):
    import os
    import socket
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "blockc", "serve", "--model", str(dirs[0]),
                            "--port", str(port)], capture_output=True, text=True, timeout=60,
                           cwd=root)
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip() == (f"blockc serve: error: port {port} on 127.0.0.1 is in use by "
                                "another process: stop it or choose another with --port")
    assert "Traceback" not in r.stderr and time.monotonic() - t0 < 30


def test_the_command_line_names_models(dirs):
    from blockc.cli import build_parser
    from blockc.cli.serve import settings_from_args
    a, b = dirs
    args = build_parser().parse_args(["serve", "--model", str(a), "--alias", "chat",
                                      "--model", f"emb={b}", "--max-memory", "1G",
                                      "--cors-origin", "*", "--context-overflow", "truncate"])
    s = settings_from_args(args)
    assert (s.model, s.served_name, s.models) == (str(a), "chat", (("emb", str(b)),))
    assert s.max_memory == 1 << 30 and s.cors_origins == ("*",)
    assert s.context_overflow == "truncate"
    s = settings_from_args(build_parser().parse_args(["serve", "--model", str(a), "--model",
                                                      str(b)]))
    assert s.served_name == a.name and s.models == ((b.name, str(b)),)
    with pytest.raises(ValueError, match="--max-memory"):
        settings_from_args(build_parser().parse_args(["serve", "--model", str(a),
                                                      "--max-memory", "lots"]))
    with pytest.raises(ValueError, match="give a model"):
        settings_from_args(build_parser().parse_args(["serve"]))
    s = settings_from_args(build_parser().parse_args(["serve", "--model", str(a), "--draft-model",
                                                      str(b), "--draft-max", "3"]))
    assert (s.draft_model, s.draft_max) == (str(b), 3)
    for extra, msg in ((["--draft-max", "3"], "needs --draft-model"),
                       (["--draft-model", str(b), "--draft-max", "0"], "--draft-max must be"),
                       (["--draft-model", str(a / "nope")], "no such file")):
        with pytest.raises(ValueError, match=msg):
            settings_from_args(build_parser().parse_args(["serve", "--model", str(a), *extra]))


def test_a_model_that_fails_to_load_is_500_and_metrics_need_the_key(dirs, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{}")  # no weights
    s = ThreadServer(Settings(model=str(dirs[0]), model_name="a", models=(("bad", str(bad)),),
                              parallel=1, max_queue=4, api_key="k"))
    try:
        key = {"Authorization": "Bearer k"}
        for _ in range(2):  # the next request tries again, and fails the same way
            r = s.post("/v1/embeddings", {"model": "bad", "input": "x"}, headers=key)
            assert r.status_code == 500 and r.json()["error"]["code"] == "model_load_failed"
            assert "'bad'" in r.json()["error"]["message"] and "Traceback" not in r.text
        assert s.post("/v1/embeddings", {"model": "a", "input": "x"},
                      headers=key).status_code == 200
        assert s.get("/metrics").status_code == 401
        assert s.get("/metrics", headers=key).status_code == 200
        assert s.post("/tokenize", {"content": "x"}).status_code == 401
    finally:
        s.stop()
