"""One end-id rule (issue 48): a GGUF chat file whose end of text and end of turn are
different ids stops at the same ids in GPT.generate, ``blockc generate``, ``blockc
chat`` and the server (blockc.generation.ends.end_ids, the GGUF loader's generation
config). The file is made here: a random-weight model, a tokenizer trained on a few
lines and a ChatML template (tests/support/chat_dirs.py); nothing downloaded."""
import io
import sys

import pytest

import blockc
from blockc.cli import main
from blockc.generation.config import GenerationConfig
from blockc.generation.ends import end_ids

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

MSGS = [{"role": "user", "content": "Hello! How are you today?"}]
N = 16


@pytest.fixture(scope="module")
def gguf_chat(tmp_path_factory):
    """(path, tokenizer, prompt ids, the free continuation, k): the file's end of turn is
    the token the greedy answer makes first at step k, its end of text one it never makes."""
    from chat_dirs import chat_model_dir
    from blockc.io.gguf import Value
    from blockc.checkpoint.gguf import save
    from blockc.text.gguf import metadata_of
    d = tmp_path_factory.mktemp("gguf_chat")
    m, _ = chat_model_dir(d, "chatml", context=128, seed=6, llama=True)
    tok = blockc.Tokenizer.from_pretrained(d)
    prompt = tok.apply_chat_template(MSGS).ids
    free = [int(t) for t in m.generate(prompt[None], N, eos_token_id=())[0, len(prompt):]]
    k = next(k for k in range(2, N) if free[k] not in free[:k])
    eos = tok.token_to_id("<|endoftext|>")
    assert eos not in free
    meta = metadata_of(tok)
    meta["tokenizer.ggml.eos_token_id"] = Value("UINT32", eos)
    meta["tokenizer.ggml.eot_token_id"] = Value("UINT32", free[k])
    path = d / "m.gguf"
    save(m, str(path), "F32", meta)
    g = blockc.Tokenizer.from_pretrained(path)
    assert g.apply_chat_template(MSGS).ids.tolist() == prompt.tolist()
    return path, g, prompt, free, k


def test_the_loader_records_the_files_end_of_text_and_end_of_turn(gguf_chat):
    path, g, _, free, k = gguf_chat
    m = blockc.GPT.from_pretrained(path)
    eos = g.token_to_id("<|endoftext|>")
    # and <|im_end|>, which llama.cpp ends at by its text whatever ids the file names
    want = tuple(dict.fromkeys((eos, free[k], g.token_to_id("<|im_end|>"))))
    assert m.generation_config.eos_token_id == want
    assert end_ids(m.generation_config, g, m.config.vocab) == want
    assert m.special_ids["eos_token_id"] == eos  # config.json's eos, as before


def test_generate_and_the_cli_stop_at_the_end_of_turn(gguf_chat, capsys, monkeypatch):
    path, g, prompt, free, k = gguf_chat
    m = blockc.GPT.from_pretrained(path)
    want = free[:k + 1]
    assert m.generate(prompt[None], N)[0, len(prompt):].tolist() == want
    assert list(m.stream(prompt, N)) == want
    assert main(["generate", "--temperature", "0", "--model", str(path), "--ids", ",".join(map(str, prompt)),
                 "--max-new-tokens", str(N)]) == 0
    assert capsys.readouterr().out.split() == [str(t) for t in want]
    monkeypatch.setattr(sys, "stdin", io.StringIO(MSGS[0]["content"] + "\n"))
    assert main(["chat", "--model", str(path), "--max-new-tokens", str(N), "--temperature", "0"]) == 0
    assert capsys.readouterr().out == g.decode(free[:k]) + "\n"


@pytest.mark.slow
def test_the_server_stops_at_the_end_of_turn(gguf_chat):
    pytest.importorskip("openai")
    pytest.importorskip("uvicorn")
    from serve_proc import NAME, Server
    path, g, prompt, free, k = gguf_chat
    s = Server(path)
    try:
        r = s.client().chat.completions.create(model=NAME, messages=MSGS, max_tokens=N,
                                               temperature=0)
    finally:
        s.stop()
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == g.decode(free[:k])
    assert r.usage.prompt_tokens == len(prompt) and r.usage.completion_tokens == k + 1


def test_end_ids_is_the_config_then_the_tokenizer():
    class Tok:
        eos_token_id = 5
    assert end_ids(GenerationConfig(eos_token_id=(2, 7)), Tok(), 16) == (2, 7, 5)
    assert end_ids(GenerationConfig(eos_token_id=5), Tok()) == (5,)
    assert end_ids(GenerationConfig(), None, 16) == ()
    assert end_ids(GenerationConfig(eos_token_id=(2, 20)), None, 16) == (2,)
    with pytest.warns(UserWarning, match="not a token id of this model"):
        assert end_ids(GenerationConfig(eos_token_id=2), Tok(), 4) == (2,)
    with pytest.raises(TypeError, match="config"):
        end_ids({"eos_token_id": 2})
    g = GenerationConfig.from_gguf({"tokenizer.ggml.tokens": ["a"] * 8,
                                    "tokenizer.ggml.bos_token_id": 1,
                                    "tokenizer.ggml.eos_token_id": 2,
                                    "tokenizer.ggml.eot_token_id": 2,
                                    "tokenizer.ggml.padding_token_id": 9}, vocab=16)
    assert (g.bos_token_id, g.eos_token_id, g.pad_token_id) == (1, 2, None)  # 9: not a token
