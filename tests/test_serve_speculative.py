"""Speculative decoding in blockc serve (``--draft-model``): through the HTTP API, every
request's tokens with a draft are the ones it gets without one, greedy and seeded
sampling alike, with logprobs, stop strings, ``n`` and concurrent requests; the draft
only changes how many tokens one target call makes. A tiny target made here, and
three drafts: the target itself (every drafted token accepted), the target cut to its
first layer (some accepted), and an unrelated random model (few). The app is served in
this process on 127.0.0.1."""
import dataclasses
import json
import shutil
import threading

import numpy as np

import pytest

import blockc
from chat_dirs import chat_model_dir
from serve_thread import ThreadServer

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
pytest.importorskip("jinja2")
pytest.importorskip("tokenizers")

from blockc.serve import Settings  # noqa: E402

PROMPTS = ["Hello there", "The block reads the stream", "A residual stream flows", "Hi"]


def _checkpoint(src, dst, model):
    """model saved in dst with src's tokenizer files and config's end ids."""
    dst.mkdir()
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and f.name != "config.json":
            shutil.copy(f, dst / f.name)
    model.save_pretrained(dst)
    c, src_c = json.loads((dst / "config.json").read_text()), json.loads(
        (src / "config.json").read_text())
    c.update({k: src_c[k] for k in ("eos_token_id", "bos_token_id") if k in src_c})
    (dst / "config.json").write_text(json.dumps(c))
    return dst


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("spec")
    target = root / "target"
    target.mkdir()
    m, _ = chat_model_dir(target, "chatml", context=256, seed=4, llama=True, layers=3)
    first = {k: v for k, v in m.state_dict().items()
             if not k.startswith("blocks.") or int(k.split(".")[1]) < 1}
    cut = blockc.GPT.from_state_dict(first, dataclasses.replace(m.config, layers=1))
    other = blockc.GPT.random(dataclasses.replace(m.config, layers=1), seed=99)
    return {"target": target, "self": _checkpoint(target, root / "self", m),
            "first layer": _checkpoint(target, root / "cut", cut),
            "other": _checkpoint(target, root / "other", other)}


def _server(target, draft=None, draft_max=None, parallel=4):
    return ThreadServer(Settings(model=str(target), model_name="m", parallel=parallel,
                                 max_queue=32, draft_model=None if draft is None else str(draft),
                                 draft_max=draft_max))


@pytest.fixture(scope="module")
def plain(dirs):
    s = _server(dirs["target"])
    yield s
    s.stop()


REQUESTS = [
    dict(temperature=0, max_tokens=24),
    dict(temperature=1.0, top_p=1.0, seed=3, max_tokens=24, extra_body={"top_k": 100000, "min_p": 0}),
    dict(temperature=0.8, seed=11, max_tokens=20, logprobs=2, n=2),
    dict(temperature=0.7, seed=5, max_tokens=30, stop=["e", "a b"], frequency_penalty=0.5),
]


def _answers(client, stream=False):
    """Every (prompt, request) answer, sent four at a time (they share the batch)."""
    jobs = [(p, dict(r)) for p in PROMPTS for r in REQUESTS]
    out = [None] * len(jobs)

    def run(k):
        try:
            ask(k)
        except Exception as e:  # told to the test below
            out[k] = e

    def ask(k):
        p, r = jobs[k]
        extra = dict(r.pop("extra_body", {}), ignore_eos=True)
        if stream:
            pieces, reason = {}, {}
            for ch in client.completions.create(model="m", prompt=p, stream=True,
                                                extra_body=extra, **r):
                for c in ch.choices:
                    pieces.setdefault(c.index, []).append(c.text)
                    reason[c.index] = c.finish_reason or reason.get(c.index)
            out[k] = sorted((i, "".join(t), reason[i]) for i, t in pieces.items())
        else:
            res = client.completions.create(model="m", prompt=p, extra_body=extra, **r)
            out[k] = ([(c.index, c.text, c.finish_reason,
                        c.logprobs.model_dump() if c.logprobs else None) for c in res.choices],
                      res.usage.completion_tokens)
    for start in range(0, len(jobs), 4):
        ts = [threading.Thread(target=run, args=(k,)) for k in range(start, min(start + 4, len(jobs)))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    errors = [e for e in out if isinstance(e, Exception)]
    if errors:
        raise errors[0]
    return out


def _client(s):
    return openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def want(plain):
    c = _client(plain)
    return _answers(c), _answers(c, stream=True)


@pytest.mark.parametrize("draft,draft_max", [("self", 4), ("first layer", 3), ("other", 5)])
def test_a_draft_changes_no_token(dirs, want, draft, draft_max):
    s = _server(dirs["target"], dirs[draft], draft_max)
    try:
        c = _client(s)
        got = _answers(c)
        assert got == want[0]
        assert _answers(c, stream=True) == want[1]
        st = s.service.engine.stats
        # it speculated; sampled rows refuse some of a greedy draft's tokens
        assert st["draft_accepted"] < st["draft_tokens"]
        assert st["draft_accepted"] > 0 or draft == "other"  # (a random draft: maybe none)
    finally:
        s.stop()


@pytest.mark.parametrize("draft", ["self", "first layer"])
def test_greedy_with_a_draft_is_generate(dirs, draft):
    # the peer: GPT.generate's greedy tokens of the same prompt ids
    m = blockc.GPT.from_pretrained(dirs["target"])
    ids = [5, 17, 9, 30, 2]
    ref = m.generate(np.array([ids]), 16, temperature=0, eos_token_id=())[0, len(ids):]
    s = _server(dirs["target"], dirs[draft], 4, parallel=2)
    try:
        r = _client(s).completions.create(model="m", prompt=ids, max_tokens=16, temperature=0,
                                          logprobs=0, extra_body={"ignore_eos": True})
        toks = s.service.tok
        assert r.usage.completion_tokens == 16
        assert r.choices[0].text == toks.decode([int(t) for t in ref])
        st = s.service.engine.stats
        if draft == "self":  # the target drafting for itself: every greedy draft right
            assert st["draft_accepted"] == st["draft_tokens"] > 0
        else:
            assert 0 < st["draft_accepted"] <= st["draft_tokens"]
    finally:
        s.stop()


def test_a_draft_of_another_vocabulary_is_refused(dirs, tmp_path):
    m = blockc.GPT.from_pretrained(dirs["target"])
    small = blockc.GPT.random(dataclasses.replace(m.config, vocab=m.config.vocab - 1, layers=1))
    d = tmp_path / "small"
    small.save_pretrained(d)
    with pytest.raises(ValueError, match="vocabulary"):
        _server(dirs["target"], d)


def test_a_sliding_window_model_takes_no_draft():
    from blockc.serve.engine import Engine
    arch = dict(vocab=40, context=64, width=16, heads=2, layers=2, positions="rope")
    m = blockc.GPT.random(blockc.GPTConfig(**arch, sliding_window=8), seed=1)
    d = blockc.GPT.random(blockc.GPTConfig(**dict(arch, layers=1)), seed=2)
    with pytest.raises(ValueError, match="sliding-window"):
        Engine(m, parallel=1, capacity=32, draft=d)
    e = Engine(blockc.GPT.random(blockc.GPTConfig(**arch), seed=1), parallel=1, capacity=32,
               draft=d)  # the same draft for a model without windows
    e.close()
