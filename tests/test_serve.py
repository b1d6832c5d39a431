"""blockc serve against the official openai client (the protocol's peer) and against
GPT.generate (the tokens): a live server in a subprocess on 127.0.0.1, a random-weight
Llama-shaped model, a tokenizer trained on a few lines and a ChatML template written by
tests/support/chat_dirs.py. Every connection goes to 127.0.0.1, bounded in count and time."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import blockc
from blockc.generation.defaults import LLAMA_CPP_SAMPLING
from chat_dirs import chat_model_dir
from serve_proc import NAME, Server

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
pytest.importorskip("jinja2")
pytest.importorskip("tokenizers")



@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("chatmodel")
    chat_model_dir(d, "chatml", context=256, seed=4, llama=True)
    return d


@pytest.fixture(scope="module")
def slow_dir(tmp_path_factory):
    """A model big enough that a long answer takes seconds (requests that stay in flight)."""
    d = tmp_path_factory.mktemp("slowmodel")
    chat_model_dir(d, "chatml", context=1024, seed=5, llama=True, width=256, layers=6, d_ff=768)
    return d


@pytest.fixture(scope="module")
def server(model_dir):
    s = Server(model_dir, "--parallel", "8", "--max-queue", "64", "--prefill-chunk", "16")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def local(model_dir):
    """The same model and tokenizer in this process: GPT.generate is the reference."""
    m = blockc.GPT.from_pretrained(model_dir)
    tok = blockc.Tokenizer.from_pretrained(model_dir)
    eos = json.loads((model_dir / "config.json").read_text())["eos_token_id"]
    return m, tok, eos


def _generate(local, ids, n, **kw):
    """The text GPT.generate makes from ids (the end token not shown), and its token count."""
    m, tok, eos = local
    out = m.generate(np.asarray(ids)[None], n, eos_token_id=eos, **kw)[0, len(ids):]
    toks = list(out)
    if eos in toks:
        toks = toks[:toks.index(eos) + 1]
    shown = [t for t in toks if t != eos]
    return tok.decode(shown, skip_special_tokens=True), len(toks), (toks[-1] == eos)


def _msgs(q):
    return [{"role": "user", "content": q}]


QUESTIONS = ["Hello! How are you today?", "What is the capital of France?",
             "the block reads the stream", "a residual stream flows", "naïve café 🙂",
             "tokens are ids", "Paris is the capital.", "I am fine, thank you."]


# ---- the protocol, against the openai client ----------------------------------------------

def test_chat_streamed_equals_non_streamed_equals_generate(server, local):
    c = server.client()
    ids = local[1].apply_chat_template(_msgs(QUESTIONS[0])).ids
    want, n, ended = _generate(local, ids, 24)
    r = c.chat.completions.create(model=NAME, messages=_msgs(QUESTIONS[0]), max_tokens=24,
                                  temperature=0)
    assert r.object == "chat.completion" and r.model == NAME and r.id.startswith("chatcmpl-")
    ch = r.choices[0]
    assert ch.message.role == "assistant" and ch.message.content == want
    assert ch.finish_reason == ("stop" if ended else "length")
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(ids), n)
    assert r.usage.total_tokens == len(ids) + n
    chunks = list(c.chat.completions.create(model=NAME, messages=_msgs(QUESTIONS[0]),
                                            max_tokens=24, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    assert len({k.id for k in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
    assert all(k.object == "chat.completion.chunk" for k in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(k.choices[0].delta.role is None for k in chunks[1:] if k.choices)
    text = "".join(k.choices[0].delta.content or "" for k in chunks if k.choices)
    assert text == want
    reasons = [k.choices[0].finish_reason for k in chunks if k.choices]
    assert reasons[-1] == ch.finish_reason and all(x is None for x in reasons[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == n
    assert all(k.usage is None for k in chunks[:-1])


def test_completions_streamed_equals_non_streamed_equals_generate(server, local):
    c = server.client()
    prompt = "the residual stream"
    ids = local[1].encode(prompt)
    want, n, ended = _generate(local, ids, 20)
    r = c.completions.create(model=NAME, prompt=prompt, max_tokens=20, temperature=0)
    assert r.object == "text_completion" and r.choices[0].text == want
    assert r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == n
    chunks = list(c.completions.create(model=NAME, prompt=prompt, max_tokens=20, temperature=0,
                                       stream=True))
    assert "".join(k.choices[0].text for k in chunks) == want
    assert len({k.id for k in chunks}) == 1
    assert chunks[-1].choices[0].finish_reason == ("stop" if ended else "length")
    # token ids as the prompt: the same answer
    r2 = c.completions.create(model=NAME, prompt=[int(t) for t in ids], max_tokens=20,
                              temperature=0)
    assert r2.choices[0].text == want


def test_seeds_reproduce_and_equal_generate_with_that_seed(server, local):
    c = server.client()
    ids = local[1].apply_chat_template(_msgs(QUESTIONS[1])).ids
    kw = dict(model=NAME, messages=_msgs(QUESTIONS[1]), max_tokens=16, temperature=0.9,
              top_p=0.95)
    a = c.chat.completions.create(seed=7, **kw).choices[0].message.content
    b = c.chat.completions.create(seed=7, **kw).choices[0].message.content
    other = c.chat.completions.create(seed=8, **kw).choices[0].message.content
    assert a == b
    # the fields the request omits (top_k, min_p) are the model's defaults: llama.cpp's here
    d = dict(LLAMA_CPP_SAMPLING, temperature=0.9, top_p=0.95)
    assert a == _generate(local, ids, 16, seed=7, **d)[0]
    assert other == _generate(local, ids, 16, seed=8, **d)[0]
    # n choices: choice i draws from seed + i
    r = c.chat.completions.create(seed=7, n=3, **kw)
    assert [x.index for x in r.choices] == [0, 1, 2]
    for x in r.choices:
        assert x.message.content == _generate(local, ids, 16, **d,
                                              seed=7 + x.index)[0]
    assert r.usage.completion_tokens == sum(
        _generate(local, ids, 16, **d, seed=7 + i)[1] for i in range(3))


def test_stop_and_max_tokens_by_their_definitions(server, local):
    c = server.client()
    full = c.completions.create(model=NAME, prompt="Hello", max_tokens=30, temperature=0,
                                extra_body={"ignore_eos": True})
    text = full.choices[0].text
    assert full.usage.completion_tokens == 30 and full.choices[0].finish_reason == "length"
    stop = text[6:9]
    assert len(stop) == 3 and stop.strip()
    want = text[:text.find(stop)]
    for stream in (False, True):
        if stream:
            got = "".join(k.choices[0].text for k in c.completions.create(
                model=NAME, prompt="Hello", max_tokens=30, temperature=0, stop=[stop, "\x00"],
                stream=True, extra_body={"ignore_eos": True}))
        else:
            r = c.completions.create(model=NAME, prompt="Hello", max_tokens=30, temperature=0,
                                     stop=stop, extra_body={"ignore_eos": True})
            got = r.choices[0].text
            assert r.choices[0].finish_reason == "stop"
        assert got == want  # everything before the stop string, nothing of it
    r = c.completions.create(model=NAME, prompt="Hello", max_tokens=5, temperature=0,
                             extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 5 and r.choices[0].finish_reason == "length"
    assert text.startswith(r.choices[0].text)
    r = c.chat.completions.create(model=NAME, messages=_msgs("hi"), max_completion_tokens=3,
                                  temperature=0, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 3


def test_logprobs_are_the_models_log_softmax(server, local):
    m, tok, _ = local
    c = server.client()
    msgs = _msgs(QUESTIONS[2])
    ids = tok.apply_chat_template(msgs).ids
    r = c.chat.completions.create(model=NAME, messages=msgs, max_tokens=6, temperature=0,
                                  logprobs=True, top_logprobs=3,
                                  extra_body={"ignore_eos": True})
    entries = r.choices[0].logprobs.content
    assert len(entries) == r.usage.completion_tokens == 6
    toks = m.generate(ids[None], 6)[0, len(ids):]
    logits = m(np.concatenate([ids, toks])[None])[0, len(ids) - 1:-1].astype(np.float64)
    lsm = logits - logits.max(-1, keepdims=True)
    lsm -= np.log(np.exp(lsm).sum(-1, keepdims=True))
    for e, t, row in zip(entries, toks, lsm):
        raw = tok.token_bytes(int(t))  # the token's own bytes, part of a character or not
        text = tok.decode([int(t)])
        assert e.token == (text if text.encode("utf-8") == raw
                           else "bytes:" + "".join(f"\\x{b:02x}" for b in raw))
        assert abs(e.logprob - row[t]) < 1e-6
        assert e.bytes == list(raw)
        assert [x.logprob for x in e.top_logprobs] == sorted((x.logprob for x in e.top_logprobs),
                                                             reverse=True)
        best = np.sort(row)[::-1][:3]
        np.testing.assert_allclose([x.logprob for x in e.top_logprobs], best, atol=1e-6)
        assert e.top_logprobs[0].logprob == e.logprob  # greedy: the chosen is the most likely
    r = c.completions.create(model=NAME, prompt="Hello", max_tokens=4, temperature=0, logprobs=2,
                             extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    # keyed by token text: two partial-character tokens may share one key
    assert lp.text_offset[0] == 0 and all(1 <= len(d) <= 2 for d in lp.top_logprobs)


def test_penalties_follow_openai_definition(server, local):
    """frequency/presence penalties subtract count * f + (count > 0) * p from the logits of
    the tokens generated so far (not the multiplicative repetition penalty)."""
    m, tok, eos = local
    c = server.client()
    ids = tok.encode("Hello")
    r = c.completions.create(model=NAME, prompt="Hello", max_tokens=12, temperature=0,
                             frequency_penalty=1.5, presence_penalty=0.5,
                             extra_body={"ignore_eos": True})
    seq, counts = list(ids), np.zeros(m.config.vocab)
    for _ in range(12):
        z = m(np.array(seq)[None], last_only=True)[0, 0].astype(np.float64)
        z -= counts * 1.5 + (counts > 0) * 0.5
        t = int(np.argmax(z))
        counts[t] += 1
        seq.append(t)
    assert r.choices[0].text == tok.decode(seq[len(ids):], skip_special_tokens=True)


def test_models_health_metrics(server):
    c = server.client()
    ms = c.models.list()
    assert [x.id for x in ms.data] == [NAME] and ms.data[0].object == "model"
    assert c.models.retrieve(NAME).id == NAME
    h = server.get("/health")
    assert h.status_code == 200 and h.json()["status"] == "ok"
    text = server.get("/metrics").text
    # integers, or prometheus-client's floats of them
    assert re.search(r"^blockc_requests_total \d+(\.0)?$", text, re.M)
    assert re.search(r"^blockc_time_to_first_token_seconds_count \d+(\.0)?$", text, re.M)


def test_a_second_turn_reuses_the_first_turns_cache(server, local):
    c = server.client()
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}]
    a = c.chat.completions.create(model=NAME, messages=msgs, max_tokens=8, temperature=0)
    turn2 = msgs + [{"role": "assistant", "content": a.choices[0].message.content},
                    {"role": "user", "content": "And then?"}]
    b = c.chat.completions.create(model=NAME, messages=turn2, max_tokens=8, temperature=0)
    ids = local[1].apply_chat_template(turn2).ids
    assert b.choices[0].message.content == _generate(local, ids, 8)[0]
    assert b.usage.prompt_tokens_details.cached_tokens >= a.usage.prompt_tokens - 2


def _answers_as_generate(c, local, dtype, k, n):
    """k concurrent greedy chats of n tokens, then a second turn of the first from its
    reused prefix, each the text generate(cache_dtype=dtype) makes; their requests."""
    reqs = [dict(model=NAME, messages=_msgs(q), max_tokens=n, temperature=0)
            for q in QUESTIONS[:k]]
    got = _run_all([lambda kw=kw: c.chat.completions.create(**kw) for kw in reqs])
    for kw, r in zip(reqs, got):
        ids = local[1].apply_chat_template(kw["messages"]).ids
        assert r.choices[0].message.content == _generate(local, ids, n, cache_dtype=dtype)[0]
    turn2 = reqs[0]["messages"] + [
        {"role": "assistant", "content": got[0].choices[0].message.content},
        {"role": "user", "content": "And then?"}]
    b = c.chat.completions.create(model=NAME, messages=turn2, max_tokens=n, temperature=0)
    assert b.usage.prompt_tokens_details.cached_tokens > 0
    ids = local[1].apply_chat_template(turn2).ids
    assert b.choices[0].message.content == _generate(local, ids, n, cache_dtype=dtype)[0]
    return reqs


@pytest.mark.slow
def test_a_q8_0_cache_server_answers_what_generate_does_with_one(tmp_path):
    """--cache-dtype q8_0 (heads of 32, whole blocks): concurrent requests, chunked prompts
    and a second turn from a reused prefix, each the tokens generate(cache_dtype="q8_0")
    makes."""
    d = tmp_path / "m"
    chat_model_dir(d, "chatml", context=256, seed=6, llama=True, width=128)
    local = (blockc.GPT.from_pretrained(d), blockc.Tokenizer.from_pretrained(d),
             json.loads((d / "config.json").read_text())["eos_token_id"])
    s = Server(d, "--parallel", "3", "--prefill-chunk", "8", "--cache-dtype", "q8_0")
    try:
        _answers_as_generate(s.client(), local, "q8_0", 3, 12)
    finally:
        s.stop()


def test_a_half_cache_server_answers_what_generate_does_with_one(model_dir, local):
    """--cache-dtype float16: concurrent requests, chunked prompts and a second turn
    from a reused prefix, each the tokens generate(cache_dtype="float16") makes."""
    s = Server(model_dir, "--parallel", "3", "--prefill-chunk", "8", "--cache-dtype", "float16")
    try:
        c = s.client()
        reqs = _answers_as_generate(c, local, "float16", 4, 16)
        # the log-probabilities are the half cache's, not a float cache's
        m = local[0]
        r = c.chat.completions.create(model=NAME, messages=reqs[1]["messages"], max_tokens=6,
                                      temperature=0, logprobs=True,
                                      extra_body={"ignore_eos": True})
        ids = local[1].apply_chat_template(reqs[1]["messages"]).ids
        toks = m.generate(ids[None], 6, cache_dtype="float16")[0, len(ids):]
        seq = np.concatenate([ids, toks])[None]
        gaps = {}
        for dt in ("float16", "float32"):
            logits = m(seq, cache=m.new_cache(1, seq.shape[1], dtype=dt))
            row = logits[0, len(ids) - 1:-1].astype(np.float64)
            row = row - row.max(-1, keepdims=True)
            row -= np.log(np.exp(row).sum(-1, keepdims=True))
            gaps[dt] = max(abs(e.logprob - row[i, t])
                           for i, (e, t) in enumerate(zip(r.choices[0].logprobs.content, toks)))
        assert gaps["float16"] < 1e-7 and gaps["float32"] > 1e-6, gaps
    finally:
        s.stop()


# ---- concurrency --------------------------------------------------------------------------

def _run_all(fns):
    out, errs = [None] * len(fns), []

    def go(i):
        try:
            out[i] = fns[i]()
        except Exception as e:  # reported below
            errs.append(e)
    ts = [threading.Thread(target=go, args=(i,)) for i in range(len(fns))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(180)
    assert not errs, errs
    return out


def test_sixteen_concurrent_clients_each_equal_its_solo_run(server, local):
    c = server.client()
    reqs = [dict(model=NAME, messages=_msgs(QUESTIONS[i % 8] + " " * (i // 8)), max_tokens=20,
                 temperature=0 if i % 2 else 0.8, seed=i) for i in range(16)]

    def streamed(kw):
        return "".join(k.choices[0].delta.content or "" for k in
                       c.chat.completions.create(stream=True, **kw) if k.choices)
    solo = [streamed(kw) for kw in reqs]
    for kw, s in zip(reqs, solo):  # solo runs are GPT.generate's tokens
        ids = local[1].apply_chat_template(kw["messages"]).ids
        opts = ({} if kw["temperature"] == 0
                else dict(LLAMA_CPP_SAMPLING, temperature=0.8, seed=kw["seed"]))
        assert s == _generate(local, ids, 20, **opts)[0]
    together = _run_all([lambda kw=kw: streamed(kw) for kw in reqs])
    assert together == solo


def test_one_request_with_seven_in_flight_equals_its_solo_run(server):
    """The batch-invariance promise: greedy and seeded, with 7 others decoding beside it
    the whole time (checked: all 7 still streaming when it ends), the same tokens and the
    same logprobs, bit for bit, as alone."""
    c = server.client()
    for temperature in (0.0, 1.0):
        kw = dict(model=NAME, prompt="a residual stream flows", max_tokens=24,
                  temperature=temperature, seed=123, logprobs=1, extra_body={"ignore_eos": True})
        solo = c.completions.create(**kw).choices[0]
        started, running = threading.Semaphore(0), [0]
        lock = threading.Lock()

        def other(i):
            with lock:
                running[0] += 1
            try:
                for k, _ in enumerate(c.completions.create(
                        model=NAME, prompt=QUESTIONS[i], max_tokens=230 - 4 * i, temperature=0.7,
                        seed=i, stream=True, extra_body={"ignore_eos": True})):
                    if k == 0:
                        started.release()
            finally:
                with lock:
                    running[0] -= 1

        def target():
            for _ in range(7):
                assert started.acquire(timeout=60)
            r = c.completions.create(**kw)
            with lock:
                return r, running[0]
        # equal bits every round; all 7 others still streaming in at least one of five (a
        # loaded machine can start the target so late that the others have ended: a round
        # without company proves nothing, so it is run again; a full suite on a 2-core Zen 5
        # once saw 4, 6 and 3 in three rounds)
        seen = []
        for _ in range(5):
            res = _run_all([lambda i=i: other(i) for i in range(7)] + [target])
            got, in_flight = res[-1]
            assert got.choices[0].text == solo.text
            assert got.choices[0].logprobs.token_logprobs == solo.logprobs.token_logprobs
            seen.append(in_flight)
            if in_flight == 7:
                break
        assert 7 in seen, seen


def test_a_client_killed_mid_stream_frees_its_slot(server):
    body = {"model": NAME, "prompt": "Hello", "max_tokens": 200, "temperature": 0,
            "stream": True, "ignore_eos": True}
    before = int(float(re.search(r"^blockc_completion_tokens_total ([\d.]+)$",
                           server.get("/metrics").text, re.M).group(1)))
    with httpx.Client(timeout=30) as h:
        with h.stream("POST", server.url + "/v1/completions", json=body) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            got = [next(lines) for _ in range(3)]
            assert got[0].startswith("data: ")
    end = time.monotonic() + 10
    while time.monotonic() < end and server.get("/health").json()["active"]:
        time.sleep(0.05)
    assert server.get("/health").json()["active"] == 0
    after = int(float(re.search(r"^blockc_completion_tokens_total ([\d.]+)$",
                          server.get("/metrics").text, re.M).group(1)))
    assert after - before < 200  # it stopped generating
    assert server.client().completions.create(model=NAME, prompt="Hi", max_tokens=2).choices


@pytest.mark.slow
def test_queue_overflow_is_429_with_retry_after(slow_dir):
    """One slot and a queue of one: of 10 requests sent at once, one runs, one waits and
    the others are turned away with 429 and Retry-After (OpenAI's rate-limit shape)."""
    s = Server(slow_dir, "--parallel", "1", "--max-queue", "1")
    try:
        body = {"model": NAME, "prompt": "Hello", "max_tokens": 200, "temperature": 0,
                "ignore_eos": True}
        barrier = threading.Barrier(10)

        def send():
            barrier.wait()
            return s.post("/v1/completions", body)
        res = _run_all([send] * 10)
        codes = sorted(r.status_code for r in res)
        assert codes.count(200) >= 2 and codes.count(429) >= 1 and set(codes) <= {200, 429}
        for r in res:
            if r.status_code == 429:
                assert r.headers["retry-after"] == "1"
                _is_error(r, 429, "rate_limit_exceeded")
            else:
                assert r.json()["usage"]["completion_tokens"] == 200
        # the openai client raises its RateLimitError for them
        def one():
            try:
                s.client().completions.create(model=NAME, prompt="x", max_tokens=200,
                                              extra_body={"ignore_eos": True})
                return "ok"
            except openai.RateLimitError:
                return "429"
        kinds = _run_all([one] * 8)
        assert "429" in kinds and set(kinds) <= {"ok", "429"}
    finally:
        s.stop()


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM")
def test_sigterm_drains_running_streams_then_exits(slow_dir):
    s = Server(slow_dir, "--parallel", "4")
    try:
        body = {"model": NAME, "prompt": "Hello", "max_tokens": 400, "temperature": 0,
                "stream": True, "ignore_eos": True}
        results, started = [], threading.Semaphore(0)

        def stream():
            with httpx.Client(timeout=120) as h:
                with h.stream("POST", s.url + "/v1/completions", json=body) as r:
                    lines = []
                    for ln in r.iter_lines():
                        if ln and not lines:
                            started.release()
                        if ln:
                            lines.append(ln)
                    results.append(lines)
        ts = [threading.Thread(target=stream) for _ in range(3)]
        for t in ts:
            t.start()
        for _ in ts:
            assert started.acquire(timeout=60)
        s.p.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        assert s.p.poll() is None  # still running the streams
        r = s.post("/v1/completions", {**body, "stream": False})
        assert r.status_code == 503 and r.json()["error"]["code"] == "unavailable"
        assert s.get("/health").status_code == 503
        for t in ts:
            t.join(120)
        assert len(results) == 3
        for lines in results:
            assert lines[-1] == "data: [DONE]"
            last = json.loads(lines[-2][6:])
            assert last["choices"][0]["finish_reason"] == "length"
        assert s.p.wait(60) == 0
    finally:
        s.stop()


def _rss_growth(server, n):
    c = server.client()
    for i in range(20):
        c.chat.completions.create(model=NAME, messages=_msgs(QUESTIONS[i % 8]), max_tokens=8)
    base = server.rss_kb()
    for i in range(n):
        c.chat.completions.create(model=NAME, messages=_msgs(QUESTIONS[i % 8] + str(i)),
                                  max_tokens=8, temperature=0.7, seed=i)
    return server.rss_kb() - base


_rss = pytest.mark.skipif(bool(os.environ.get("BLOCKC_UNDER_SANITIZER")),
                          reason="ASan's quarantine and shadow memory distort the resident set")


@_rss
def test_sequential_requests_keep_memory_flat(server):
    assert _rss_growth(server, 100) < 8 * 1024  # KiB: no per-request leak (noise of the heap)


@pytest.mark.slow
@_rss
def test_a_thousand_sequential_requests_keep_memory_flat(server):
    assert _rss_growth(server, 1000) < 8 * 1024


# ---- faults: every error in OpenAI's shape -------------------------------------------------

def _is_error(r, status, code=None, param=None):
    assert r.status_code == status, r.text
    e = r.json()["error"]
    assert set(e) == {"message", "type", "param", "code"} and e["message"]
    assert "Traceback" not in r.text
    if code is not None:
        assert e["code"] == code, e
    if param is not None:
        assert e["param"] == param, e
    return e


def test_malformed_requests(server):
    ok = {"model": NAME, "messages": _msgs("hi"), "max_tokens": 2}
    p = server.post
    _is_error(p("/v1/chat/completions", b"{not json"), 400, "invalid_json")
    _is_error(p("/v1/chat/completions", b"\xff\xfe"), 400, "invalid_json")
    _is_error(p("/v1/chat/completions", "[1, 2]"), 422, "invalid_type")
    # one model: any name, or none, is it (as llama-server); a name must still be a string
    for body in ({"messages": _msgs("hi"), "max_tokens": 2}, {**ok, "model": "gpt-4"}):
        r = p("/v1/chat/completions", body)
        assert r.status_code == 200 and r.json()["model"] == NAME, r.text
    _is_error(p("/v1/chat/completions", {**ok, "model": 3}), 422, "invalid_type", "model")
    _is_error(p("/v1/chat/completions", {**ok, "messages": "hi"}), 422, "invalid_type",
              "messages")
    _is_error(p("/v1/chat/completions", {**ok, "messages": []}), 400, "invalid_value")
    _is_error(p("/v1/chat/completions", {**ok, "messages": [{"content": "x"}]}), 422,
              "invalid_type", "messages[0].role")
    _is_error(p("/v1/chat/completions", {**ok, "messages": [{"role": "user", "content": 3}]}),
              422, "invalid_type")
    for field, bad, status in [("max_tokens", "5", 422), ("max_tokens", 0, 400),
                               ("temperature", 2.5, 400), ("temperature", "hot", 422),
                               ("top_p", 1.5, 400), ("n", 0, 400), ("n", 1.5, 422),
                               ("stream", "yes", 422), ("stop", 3, 422),
                               ("stop", ["a", "b", "c", "d", "e"], 400), ("seed", -1, 400),
                               ("frequency_penalty", 3, 400), ("presence_penalty", [], 422),
                               ("top_logprobs", 3, 400), ("logit_bias", {"x": 1}, 400),
                               ("logit_bias", {"99999": 1}, 400), ("top_k", 0, 400),
                               ("stream_options", {"include_usage": True}, 400)]:
        _is_error(p("/v1/chat/completions", {**ok, field: bad}), status, param=None)
    e = _is_error(p("/v1/chat/completions", {**ok, "messages": _msgs("word " * 400)}), 400,
                  "context_length_exceeded")
    assert re.search(r"maximum context length is 256 tokens.*resulted in \d+ tokens", e["message"])
    e = _is_error(p("/v1/completions", {"model": NAME, "prompt": "Hello", "max_tokens": 300}),
                  400, "context_length_exceeded")
    assert "300 in the completion" in e["message"]
    _is_error(p("/v1/completions", {"model": NAME, "prompt": [1, 99999]}), 400, "invalid_value")
    _is_error(p("/v1/completions", {"model": NAME, "prompt": ["a", "b"]}), 400, "invalid_value")
    _is_error(p("/v1/completions", {"model": NAME}), 400, "missing")
    _is_error(p("/v1/completions", {"model": NAME, "prompt": ""}), 400, "invalid_value")
    _is_error(p("/v1/chat/completions", b"{" + b" " * (1 << 20) + b"}"), 413,
              "request_too_large")
    _is_error(server.get("/v1/chat/completions"), 405)
    _is_error(server.get("/v2/nothing"), 404, "not_found")
    _is_error(server.get("/v1/models/gpt-4"), 404, "model_not_found")
    # the openai client maps them to its exceptions
    c = server.client()
    with pytest.raises(openai.NotFoundError):
        c.models.retrieve("gpt-4")
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model=NAME, messages=_msgs("hi"), temperature=5)
    # and the server still serves
    assert p("/v1/chat/completions", ok).status_code == 200


@pytest.mark.slow
def test_api_key_is_checked_and_binds_localhost(model_dir):
    s = Server(model_dir, "--api-key", "sekrit", "--parallel", "1")
    try:
        ok = {"model": NAME, "messages": _msgs("hi"), "max_tokens": 2}
        _is_error(s.post("/v1/chat/completions", ok), 401, "invalid_api_key")
        _is_error(s.post("/v1/chat/completions", ok, headers={"Authorization": "Bearer nope"}),
                  401, "invalid_api_key")
        with pytest.raises(openai.AuthenticationError):
            s.client(api_key="wrong").models.list()
        assert s.client(api_key="sekrit").chat.completions.create(**ok).choices
        assert s.get("/health").status_code == 200  # the probe needs no key
        # bound to 127.0.0.1 only: no socket of it listens on another address
        conns = subprocess.run(["ss", "-ltnp"], capture_output=True, text=True).stdout \
            if os.path.exists("/usr/bin/ss") or os.path.exists("/bin/ss") else ""
        for line in conns.splitlines():
            if f":{s.port} " in line:
                assert "127.0.0.1:" in line
    finally:
        s.stop()


@pytest.mark.slow
def test_a_gguf_file_serves_what_its_directory_serves(model_dir, server, local):
    m, tok, _ = local
    path = model_dir / "m.gguf"
    m.save_gguf(path, tokenizer=tok)
    s = Server(path)
    try:
        kw = dict(model=NAME, messages=_msgs(QUESTIONS[3]), max_tokens=12, temperature=0)
        a = server.client().chat.completions.create(**kw)
        b = s.client().chat.completions.create(**kw)
        assert b.choices[0].message.content == a.choices[0].message.content
        assert b.usage.prompt_tokens == a.usage.prompt_tokens
    finally:
        s.stop()
