"""Chat templates (blockc.chat, Tokenizer.apply_chat_template) against transformers'
apply_chat_template on the same directory: text and ids, for templates in the styles
the families use, written by chat_dirs (nothing downloaded)."""
import json

import numpy as np
import pytest

import blockc
from blockc.text.chat import ChatTemplate, ChatTemplateError, load_chat_template, special_tokens
from chat_dirs import STYLES, chat_dir

pytest.importorskip("jinja2")
pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

CONVERSATIONS = [
    [{"role": "user", "content": "Hello! How are you today?"}],
    [{"role": "system", "content": "You are terse."},
     {"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "What is the capital of France?"},
     {"role": "assistant", "content": "Paris is the capital."},
     {"role": "user", "content": "naïve café: <b>bold</b> & 'quotes' 🙂  "}],
]

# the conversations each family's template takes (Mistral and Gemma refuse a system turn)
ACCEPTS = {"chatml": [0, 1, 2], "llama3": [0, 1, 2], "mistral": [0, 2], "gemma": [0, 2],
           "jsony": [0, 1, 2]}


def _peer(d):
    return transformers.AutoTokenizer.from_pretrained(str(d))


@pytest.mark.parametrize("style", sorted(STYLES))
def test_text_and_ids_equal_transformers(tmp_path, style):
    chat_dir(tmp_path, style)
    tok = blockc.Tokenizer.from_pretrained(tmp_path)
    peer = _peer(tmp_path)
    for i in ACCEPTS[style]:
        msgs = CONVERSATIONS[i]
        for gen in (True, False):
            want_text = peer.apply_chat_template(msgs, add_generation_prompt=gen, tokenize=False)
            want_ids = peer.apply_chat_template(msgs, add_generation_prompt=gen, tokenize=True,
                                                return_dict=False)
            got = tok.apply_chat_template(msgs, add_generation_prompt=gen)
            assert got.text == want_text, (style, i, gen)
            assert got.ids.dtype == np.int64
            assert got.ids.tolist() == list(want_ids), (style, i, gen)


def test_a_template_writing_bos_gets_one_bos(tmp_path):
    chat_dir(tmp_path, "llama3")
    tok = blockc.Tokenizer.from_pretrained(tmp_path)
    bos = tok.token_to_id("<|begin_of_text|>")
    ids = tok.apply_chat_template(CONVERSATIONS[0]).ids
    assert ids[0] == bos and int((ids == bos).sum()) == 1
    # the special tokens are single ids, not their characters' bytes
    assert tok.token_to_id("<|eot_id|>") in ids.tolist()


def test_tojson_does_not_escape_html_and_leaves_the_caller_messages_alone(tmp_path):
    chat_dir(tmp_path, "jsony")
    tok = blockc.Tokenizer.from_pretrained(tmp_path)
    msgs = [{"role": "user", "content": "<b>a & b</b> 'x'"}]
    before = json.dumps(msgs)
    text = tok.apply_chat_template(msgs).text
    assert '"<b>a & b</b> \'x\'"' in text and "\\u003c" not in text and "&amp;" not in text
    assert json.dumps(msgs) == before


@pytest.mark.parametrize("style,msgs,words", [
    ("mistral", [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
     "alternate"),
    ("mistral", [{"role": "system", "content": "a"}], "alternate"),
    ("gemma", [{"role": "system", "content": "a"}, {"role": "user", "content": "b"}],
     "System role not supported"),
    ("gemma", [{"role": "assistant", "content": "a"}], "alternate"),
])
def test_raise_exception_refuses_like_transformers(tmp_path, style, msgs, words):
    chat_dir(tmp_path, style)
    tok = blockc.Tokenizer.from_pretrained(tmp_path)
    with pytest.raises(ChatTemplateError, match=words):
        tok.apply_chat_template(msgs)
    with pytest.raises(Exception, match=words):  # the peer refuses it too (jinja2's TemplateError)
        _peer(tmp_path).apply_chat_template(msgs, tokenize=False)
    assert issubclass(ChatTemplateError, ValueError)


def test_where_templates_are_found(tmp_path):
    (tmp_path / "a").mkdir()
    assert load_chat_template(tmp_path / "a") is None
    (tmp_path / "a" / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": [{"name": "tool_use", "template": "T"},
                           {"name": "default", "template": "D"}], "bos_token": {"content": "<s>"}}))
    assert load_chat_template(tmp_path / "a") == "D"
    assert special_tokens(tmp_path / "a") == {"bos_token": "<s>"}
    (tmp_path / "a" / "chat_template.json").write_text(json.dumps({"chat_template": "J"}))
    assert load_chat_template(tmp_path / "a") == "D"  # tokenizer_config before the processor file
    (tmp_path / "a" / "chat_template.jinja").write_text("F")
    assert load_chat_template(tmp_path / "a") == "F"  # the .jinja file first, as transformers
    (tmp_path / "a" / "chat_template.jinja").write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match="UTF-8"):
        load_chat_template(tmp_path / "a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "tokenizer_config.json").write_text('{"chat_template": 3}')
    with pytest.raises(ValueError, match="chat_template must be"):
        load_chat_template(tmp_path / "b")
    (tmp_path / "b" / "tokenizer_config.json").write_text('{"chat_template": ')
    with pytest.raises(ValueError, match="JSON"):
        load_chat_template(tmp_path / "b")


def test_refusals(tmp_path):
    chat_dir(tmp_path, "chatml")
    tok = blockc.Tokenizer.from_pretrained(tmp_path)
    with pytest.raises(TypeError, match="messages"):
        tok.apply_chat_template("hello")
    with pytest.raises(TypeError, match=r"messages\[0\]"):
        tok.apply_chat_template([3])
    with pytest.raises(ValueError, match="role"):
        tok.apply_chat_template([{"content": "x"}])
    with pytest.raises(TypeError, match="JSON-like"):
        tok.apply_chat_template([{"role": "user", "content": object()}])
    with pytest.raises(TypeError, match="add_generation_prompt"):
        tok.apply_chat_template(CONVERSATIONS[0], add_generation_prompt=1)
    with pytest.raises(ChatTemplateError, match="compile"):
        ChatTemplate("{% for %}")
    with pytest.raises(TypeError):
        ChatTemplate(b"x")
    # the sandbox: no attribute escapes, no underscore names on a namespace
    with pytest.raises(ChatTemplateError):
        ChatTemplate("{{ ''.__class__.__mro__ }}").render(CONVERSATIONS[0])
    with pytest.raises(ChatTemplateError):
        ChatTemplate("{% set ns = namespace(_x=1) %}").render(CONVERSATIONS[0])
    bare = tmp_path / "bare"
    chat_dir(bare, "chatml")
    (bare / "tokenizer_config.json").write_text("{}")
    with pytest.raises(ValueError, match="no chat template"):
        blockc.Tokenizer.from_pretrained(bare).apply_chat_template(CONVERSATIONS[0])


def test_generation_tag_and_loop_controls_render(tmp_path):
    t = ChatTemplate("{% for m in messages %}{% if m.role == 'x' %}{% continue %}{% endif %}"
                     "{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}")
    assert t.render([{"role": "user", "content": "a"}, {"role": "x", "content": "b"},
                     {"role": "assistant", "content": "c"}]) == "[a][c]"


@pytest.mark.slow
def test_blockc_chat_answers_what_generate_makes_from_the_templated_history(tmp_path):
    import subprocess
    import sys
    from chat_dirs import chat_model_dir
    m, _ = chat_model_dir(tmp_path, "chatml", llama=True, seed=2)
    tok = blockc.Tokenizer.from_pretrained(tmp_path)
    eos = tok.eos_token_id

    def answer(history):
        ids = tok.apply_chat_template(history).ids
        out = list(m.generate(ids[None], 12, eos_token_id=eos)[0, len(ids):])
        return tok.decode(out[:out.index(eos)] if eos in out else out)
    root = __file__.rsplit("/tests/", 1)[0]
    r = subprocess.run([sys.executable, "-m", "blockc", "chat", "--model", str(tmp_path),
                        "--max-new-tokens", "12", "--system", "Be terse.", "--temperature", "0"],
                       input="Hello\nWhat is the capital of France?\n/reset\nHello\n",
                       capture_output=True, text=True, timeout=120, cwd=root)
    assert r.returncode == 0, r.stderr
    h = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hello"}]
    a1 = answer(h)
    h += [{"role": "assistant", "content": a1},
          {"role": "user", "content": "What is the capital of France?"}]
    a2 = answer(h)
    assert r.stdout == f"{a1}\n{a2}\n(conversation reset)\n{a1}\n"


def test_a_gguf_files_template_renders_as_the_directorys(tmp_path):
    from chat_dirs import chat_model_dir
    from blockc.generation.ends import end_token_ids
    m, _ = chat_model_dir(tmp_path, "llama3", llama=True)
    tok = blockc.Tokenizer.from_pretrained(tmp_path)
    m.save_gguf(tmp_path / "m.gguf", tokenizer=tok)
    assert load_chat_template(tmp_path / "m.gguf") == load_chat_template(tmp_path)
    g = blockc.Tokenizer.from_pretrained(tmp_path / "m.gguf")
    for msgs in CONVERSATIONS:
        a, b = tok.apply_chat_template(msgs), g.apply_chat_template(msgs)
        assert a.text == b.text and a.ids.tolist() == b.ids.tolist()
    assert end_token_ids(tmp_path, tok) == {tok.token_to_id("<|eot_id|>")}
    # the file's, and <|end_of_text|>, which llama.cpp ends at by its text
    assert end_token_ids(tmp_path / "m.gguf", g) == {tok.token_to_id("<|eot_id|>"),
                                                     tok.token_to_id("<|end_of_text|>")}


@pytest.mark.parametrize("style", sorted(STYLES))
def test_transformers_keywords_mean_what_they_mean_there(tmp_path, style):
    """tokenize, return_dict and continue_final_message (issue 53): the text, the ids and the
    open last message are transformers' own, never template variables."""
    chat_dir(tmp_path, style)
    tok = blockc.Tokenizer.from_pretrained(tmp_path)
    peer = _peer(tmp_path)
    msgs = CONVERSATIONS[0] + [{"role": "assistant", "content": "I am well, and you "}]
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert isinstance(text, str)
    assert text == peer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    ids = tok.apply_chat_template(msgs, tokenize=True)
    assert ids.tolist() == list(peer.apply_chat_template(msgs, add_generation_prompt=True,
                                                         tokenize=True, return_dict=False))
    d = tok.apply_chat_template(msgs, return_dict=True)
    assert d["input_ids"].tolist() == ids.tolist() and d["attention_mask"].tolist() == [1] * len(ids)
    got = tok.apply_chat_template(msgs, add_generation_prompt=False, tokenize=False,
                                  continue_final_message=True)
    assert got.endswith("I am well, and you") or got.endswith("I am well, and you ")
    try:  # transformers 5 refuses a template that names no 'content' field (the jsony style)
        want = peer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=False,
                                        continue_final_message=True)
    except ValueError:
        want = None
    assert want is None or got == want, (got, want)
    with pytest.raises(ValueError, match="cannot both be true"):
        tok.apply_chat_template(msgs, continue_final_message=True)
    with pytest.raises(ValueError, match="return_dict=True needs the ids"):
        tok.apply_chat_template(msgs, tokenize=False, return_dict=True)
    with pytest.raises(TypeError, match="tokenize must be a bool"):
        tok.apply_chat_template(msgs, tokenize="no")
