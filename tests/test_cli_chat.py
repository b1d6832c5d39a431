"""``blockc chat`` read from a pipe (issue 53): its sampling defaults, the slash commands,
the conversation kept inside the context; and the library parts (blockc.generation.chat).
The terminal itself (prompt_toolkit under a pseudo-terminal) is tests/test_cli_chat_tty.py."""
import io
import json
import sys

import numpy as np
import pytest

import blockc
from blockc.cli import main
from blockc.generation.chat import Conversation
from blockc.generation.defaults import (LLAMA_CPP_SAMPLING, cache_bytes_per_token, context_size,
                                        default_sampling)
from blockc.generation.config import GenerationConfig
from blockc.generation.ends import end_ids

pytest.importorskip("jinja2")
pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def chat(tmp_path_factory):
    from chat_dirs import chat_model_dir
    d = tmp_path_factory.mktemp("chat")
    m, _ = chat_model_dir(d, "chatml", context=256, llama=True, seed=2)
    return d, m, blockc.Tokenizer.from_pretrained(d)


def _chat(monkeypatch, capsys, d, text, *flags):
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert main(["chat", "--model", str(d), *flags]) == 0
    return capsys.readouterr()


def _answer(m, tok, msgs, n, **opts):
    ids = tok.apply_chat_template(msgs).ids
    ends = end_ids(m.generation_config, tok, m.config.vocab)
    out = [int(t) for t in m.generate(ids[None], n, eos_token_id=ends, **opts)[0, len(ids):]]
    cut = next((i for i, t in enumerate(out) if t in ends), len(out))
    return tok.decode(out[:cut], skip_special_tokens=True)


def test_chat_samples_with_llama_cpps_defaults_unless_the_checkpoint_says(chat, monkeypatch,
                                                                           capsys):
    d, m, tok = chat
    msgs = [{"role": "user", "content": "Hello"}]
    want = _answer(m, tok, msgs, 10, seed=3, **LLAMA_CPP_SAMPLING)
    assert want != _answer(m, tok, msgs, 10)  # not the greedy answer
    r = _chat(monkeypatch, capsys, d, "Hello\n", "-n", "10", "--seed", "3")
    assert r.out == want + "\n" and r.err == ""  # a pipe: only the answers
    # a flag overrides one default, the others stay
    want = _answer(m, tok, msgs, 10, seed=3, **dict(LLAMA_CPP_SAMPLING, top_k=5))
    assert _chat(monkeypatch, capsys, d, "Hello\n", "-n", "10", "--seed", "3",
                 "--top-k", "5").out == want + "\n"
    # the checkpoint's generation_config.json, when it samples, is the default
    g = GenerationConfig(temperature=1.3, top_p=0.5)
    assert default_sampling(g)[0].to_dict() == dict(LLAMA_CPP_SAMPLING, temperature=1.3,
                                                     top_p=0.5)
    assert default_sampling(GenerationConfig())[0].to_dict() == LLAMA_CPP_SAMPLING


def test_slash_commands_are_never_sent_to_the_model(chat, monkeypatch, capsys, tmp_path):
    d, m, tok = chat
    path = tmp_path / "c.json"
    r = _chat(monkeypatch, capsys, d,
              "/help\n/set temperature 0\n/set top_k off\n/set nonsense 1\n/set top_p 2\n"
              "/system Be terse.\nHello\nsecond \\\nline\n/save " + str(path) + "\n/frob\n"
              "/reset\n/load " + str(path) + "\nmore\n/exit\nnever read\n", "-n", "6")
    lines = r.out.splitlines()
    assert lines[0].startswith("/help") and "/save PATH" in r.out
    assert "(temperature 0.0)" in lines and "(top_k None)" in lines
    assert "(/set: no setting 'nonsense' (temperature, top_k, top_p, min_p, " \
           "repetition_penalty, seed, max_new_tokens))" in lines
    assert "(top_p must be in (0, 1], got 2.0)" in lines
    assert "(unknown command /frob (/help lists them))" in lines
    # greedy now (temperature 0), top-k off: the answers are generate's
    h = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hello"}]
    a1 = _answer(m, tok, h, 6, top_p=0.95, min_p=0.05)
    h += [{"role": "assistant", "content": a1}, {"role": "user", "content": "second \nline"}]
    a2 = _answer(m, tok, h, 6, top_p=0.95, min_p=0.05)
    saved = json.loads(path.read_text())["messages"]
    assert saved == h + [{"role": "assistant", "content": a2}]
    h += [{"role": "assistant", "content": a2}, {"role": "user", "content": "more"}]
    a3 = _answer(m, tok, h, 6, top_p=0.95, min_p=0.05)
    i = lines.index("(system prompt set)")
    assert r.out.split("(system prompt set)\n", 1)[1].startswith(f"{a1}\n{a2}\n")
    assert f"(saved 5 messages to {path})" in lines and "(conversation reset)" in lines
    assert r.out.endswith(f"(loaded 5 messages from {path})\n{a3}\n") and i > 0


def test_a_full_context_drops_the_oldest_turns_and_keeps_the_system_prompt(chat, monkeypatch,
                                                                            capsys):
    d, m, tok = chat
    ctx, n = 60, 8
    r = _chat(monkeypatch, capsys, d, "Hello there\nWhat is the capital of France?\n"
              "And of Spain?\n", "--system", "Be terse.", "-n", str(n), "--temperature", "0",
              "--ctx-size", str(ctx))
    sys_ = [{"role": "system", "content": "Be terse."}]
    count = lambda msgs: len(tok.apply_chat_template(msgs).ids)  # noqa: E731
    c = Conversation("Be terse.")
    want, notices = [], []
    for q in ("Hello there", "What is the capital of France?", "And of Spain?"):
        c.add("user", q)
        dropped = c.fit(count, ctx - n)
        if dropped:
            notices.append(dropped)
            want.append(f"(the context of {ctx} tokens is full: the {dropped} oldest "
                        f"message{'s' if dropped > 1 else ''} dropped)")
        a = _answer(m, tok, c.messages, n)
        want.append(a)
        c.add("assistant", a)
    assert notices, "the test's conversation must overflow"
    assert c.messages[0] == sys_[0]
    assert r.out == "".join(w + "\n" for w in want)
    # a message that cannot fit at all is not sent, and says why
    r = _chat(monkeypatch, capsys, d, "word " * 80 + "\n", "--ctx-size", "40", "-n", "4")
    assert r.out.startswith("(not sent: the message is ") and "--ctx-size is 40" in r.out


def test_ctx_size_and_the_default_context(chat, monkeypatch, capsys):
    d, m, tok = chat
    monkeypatch.setattr(sys, "stdin", io.StringIO("Hi\n"))
    assert main(["chat", "--model", str(d), "--ctx-size", "257"]) == 2
    assert "--ctx-size must be in [1, 256]" in capsys.readouterr().err
    cfg = m.config
    per = 2 * cfg.layers * cfg.kv_heads_ * cfg.head_dim_ * 4
    assert cache_bytes_per_token(cfg) == per
    assert cache_bytes_per_token(cfg, "float16") == per // 2
    assert context_size(cfg) == 256
    assert context_size(cfg, budget=per * 10 + 3) == 10
    assert context_size(cfg, budget=1) == 1


def test_conversation_json_and_refusals(tmp_path):
    c = Conversation("S")
    c.add("user", "a")
    c.add("assistant", "b")
    c.save(tmp_path / "c.json")
    back = Conversation.load(tmp_path / "c.json")
    assert back.messages == c.messages and back.system == "S"
    (tmp_path / "bad.json").write_text('{"messages": [{"role": "wizard", "content": "x"}]}')
    with pytest.raises(ValueError, match=r"bad.json: messages\[0\].role must be one of"):
        Conversation.load(tmp_path / "bad.json")
    (tmp_path / "bad.json").write_text("[{")
    with pytest.raises(ValueError, match="not JSON"):
        Conversation.load(tmp_path / "bad.json")
    with pytest.raises(TypeError, match="content must be a str"):
        c.add("user", 3)
    with pytest.raises(ValueError, match="more than the 1 the context leaves"):
        c.fit(lambda msgs: 5, 1)
    with pytest.raises(TypeError, match="GenerationConfig"):
        default_sampling({"temperature": 1})


def test_loading_reports_progress_per_tensor(chat, tmp_path):
    from blockc._progress import Progress, bar
    d, m, tok = chat
    m.save_gguf(tmp_path / "m.gguf", tokenizer=tok)
    for path in (d, tmp_path / "m.gguf"):
        calls = []
        m2 = blockc.GPT.from_pretrained(path, progress=lambda done, total: calls.append(
            (done, total)))
        total = calls[-1][1]
        assert calls == [(i, total) for i in range(1, total + 1)]
        assert total >= 2 * m.config.layers  # a call per tensor
        assert np.array_equal(m2.params, m.params)

    class Tty(io.StringIO):
        def isatty(self):
            return True
    out = Tty()
    with Progress(0, "loading", stream=out) as p:
        blockc.GPT.from_pretrained(d, progress=p)
    text = out.getvalue()
    assert f"\rloading {bar(p.total, p.total)} {p.total}/{p.total}" in text
    assert text.endswith("\r" + " " * len(f"loading {bar(1, 1)} {p.total}/{p.total}") + "\r")
    assert bar(0, 0, 4) == "[....]" and bar(3, 4, 4) == "[###.]" and bar(9, 4, 4) == "[####]"
