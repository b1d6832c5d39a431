"""``blockc generate`` (issue 53): the prompt echoed (--no-echo), an end token's text never
printed, --prompt - and --prompt-file, --ctx-size, --stats on stderr when it is a terminal."""
import io
import json
import sys

import pytest

import blockc
from blockc.cli import main

pytest.importorskip("tokenizers")

PROMPT = "What is the capital of France?"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from chat_dirs import chat_model_dir
    d = tmp_path_factory.mktemp("gen")
    m, _ = chat_model_dir(d, "chatml", context=64, llama=True, seed=3)
    tok = blockc.Tokenizer.from_pretrained(d)
    ids = tok.encode(PROMPT)
    free = [int(t) for t in m.generate(ids[None], 12, eos_token_id=())[0, len(ids):]]
    return d, m, tok, ids, free


def _run(capsys, *argv):
    assert main(["generate", "--temperature", "0", *argv]) == 0
    return capsys.readouterr()


def test_the_prompt_is_echoed_and_the_end_token_not_printed(model, capsys, tmp_path):
    d, m, tok, ids, free = model
    r = _run(capsys, "--model", str(d), "--prompt", PROMPT, "-n", "6", "--no-eos")
    assert r.out == PROMPT + tok.decode(free[:6], skip_special_tokens=True) + "\n"
    assert r.err == ""  # stderr is not a terminal: no statistics
    r = _run(capsys, "--model", str(d), "--prompt", PROMPT, "-n", "6", "--no-eos", "--no-echo")
    assert r.out == tok.decode(free[:6], skip_special_tokens=True) + "\n"
    # an end token (here the one the model makes at step k) ends the text, unprinted
    k = next(k for k in range(2, 12) if free[k] not in free[:k])
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors",
              "chat_template.json"):
        if (d / f).exists():
            (tmp_path / f).write_bytes((d / f).read_bytes())
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": free[k]}))
    r = _run(capsys, "--model", str(tmp_path), "--prompt", PROMPT, "-n", "12", "--no-echo")
    assert r.out == tok.decode(free[:k], skip_special_tokens=True) + "\n"


def test_prompt_from_stdin_and_from_a_file(model, capsys, monkeypatch, tmp_path):
    d, m, tok, ids, free = model
    want = _run(capsys, "--model", str(d), "--prompt", PROMPT, "-n", "4").out
    monkeypatch.setattr(sys, "stdin", io.StringIO(PROMPT))
    assert _run(capsys, "--model", str(d), "--prompt", "-", "-n", "4").out == want
    f = tmp_path / "p.txt"
    f.write_text(PROMPT, encoding="utf-8")
    assert _run(capsys, "--model", str(d), "--prompt-file", str(f), "-n", "4").out == want
    f.write_bytes(b"\xff\xfe")
    assert main(["generate", "--temperature", "0", "--model", str(d), "--prompt-file", str(f)]) == 2
    assert f"--prompt-file {f}: not UTF-8 text" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a usage error: one source of the prompt
        main(["generate", "--temperature", "0", "--model", str(d), "--prompt", "x", "--prompt-file", str(f)])
    assert "not allowed with argument" in capsys.readouterr().err


def test_ctx_size_bounds_the_continuation_and_stats_on_request(model, capsys):
    d, m, tok, ids, free = model
    r = _run(capsys, "--model", str(d), "--prompt", PROMPT, "-n", "50", "--no-eos", "--no-echo",
             "--ctx-size", str(len(ids) + 3), "--stats")
    assert r.out == tok.decode(free[:3], skip_special_tokens=True) + "\n"
    lines = r.err.splitlines()
    assert lines[0] == (f"context {len(ids) + 3} tokens (--ctx-size; the model's is 64; KV cache "
                        f"{m.config.layers * 2 * m.config.kv_heads_ * m.config.head_dim_ * 4 * (len(ids) + 3) / 1024:.1f} KiB)")
    assert lines[1] == "sampling: greedy (from llama.cpp's defaults (the model states none); " \
                       "flags: --temperature)"
    assert lines[2].startswith("loaded in ") and "; 3 tokens in " in r.err and "tokens/s" in r.err
    assert main(["generate", "--temperature", "0", "--model", str(d), "--prompt", PROMPT, "--ctx-size",
                 str(len(ids))]) == 2
    assert f"the prompt is {len(ids)} tokens: no room" in capsys.readouterr().err
    assert main(["generate", "--temperature", "0", "--model", str(d), "--prompt", PROMPT, "--ctx-size", "65"]) == 2
    assert "--ctx-size must be in [1, 64]" in capsys.readouterr().err
