"""Constrained decoding (blockc.generation.constraints): JSON Schema, json_object, the
engine's grammar forms and tool calls, on tiny random models with a trained tokenizer:
the output always parses and validates, and a constrained row gets the same tokens
alone and in a batch."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

pytest.importorskip("llguidance")

import blockc  # noqa: E402
from blockc.generation.constraints import Constraint  # noqa: E402
from blockc.text import Tokenizer  # noqa: E402
from blockc.text.tools import FORMATS, parse_reply  # noqa: E402
from support.chat_dirs import chat_model_dir  # noqa: E402
from support.helpers import schema_valid  # noqa: E402

SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["user", "tags", "unit"],
    "properties": {
        "user": {"type": "object", "additionalProperties": False, "required": ["name", "age"],
                 "properties": {"name": {"type": "string", "maxLength": 8},
                                "age": {"type": "integer", "minimum": 0, "maximum": 120}}},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3},
        "unit": {"enum": ["celsius", "fahrenheit"]}}}


def valid(doc, schema=SCHEMA):
    return schema_valid(doc, schema)


@pytest.fixture(scope="module")
def chat(tmp_path_factory):
    d = tmp_path_factory.mktemp("constrain")
    m, _ = chat_model_dir(d, "chatml", context=256)
    tok = Tokenizer.from_pretrained(d)
    return m, tok


def reply(tok, new):
    """The text of the new tokens, which must have ended (by the grammar, or its end token
    when the grammar allowed more)."""
    new = [int(t) for t in new]
    if new and new[-1] == tok.eos_token_id:
        new = new[:-1]
    return tok.decode(new)


def prompt(tok, text="the block reads"):
    return tok.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("seed,opts", [(0, {}), (1, {"temperature": 1.0}),
                                       (2, {"temperature": 1.3, "top_k": 40}),
                                       (3, {"temperature": 0.8, "top_p": 0.9}),
                                       (4, {"temperature": 1.0, "min_p": 0.02})])
def test_json_schema_always_parses_and_validates(chat, seed, opts):
    m, tok = chat
    c = Constraint.json_schema(SCHEMA, tok)
    out = m.generate(prompt(tok)[None], 180, seed=seed, constraint=c, **opts)[0]
    new = out[len(prompt(tok)):]
    assert len(new) < 180  # ended by the grammar
    doc = json.loads(reply(tok, new))
    assert valid(doc), doc


def test_json_object_and_stream_agree(chat):
    m, tok = chat
    c = Constraint.from_response_format({"type": "json_object"}, tok)
    got = list(m.stream(prompt(tok), 120, temperature=1.0, seed=5, constraint=c))
    assert len(got) < 120
    assert isinstance(json.loads(reply(tok, got)), dict)
    whole = m.generate(prompt(tok)[None], 120, temperature=1.0, seed=5, constraint=c)[0]
    assert whole[len(prompt(tok)):].tolist() == got


def test_batch_invariance(chat):
    m, tok = chat
    c = Constraint.json_schema(SCHEMA, tok)
    p = prompt(tok)
    alone = m.generate(p[None], 100, temperature=1.0, seed=7, constraint=c)[0]
    others = [prompt(tok, "a residual stream flows"), prompt(tok, "Hello! How")]
    batch = m.generate([p, *others], 100, temperature=1.0, seed=7, constraint=[c, None, c])
    assert batch[0].tolist() == alone.tolist()
    free = m.generate(others[0][None], 100, temperature=1.0, seed=7)[0]
    assert batch[1].tolist() == free.tolist()[:len(batch[1])]


def test_regex_extension_is_obeyed(chat):
    m, tok = chat
    c = Constraint.from_response_format({"type": "regex", "regex": r"[a-c]{2,4}-[0-9]{3}"}, tok)
    for seed in range(3):
        out = m.generate(prompt(tok)[None], 20, temperature=1.0, seed=seed, constraint=c)[0]
        new = out[len(prompt(tok)):]
        assert len(new) < 20
        assert re.fullmatch(r"[a-c]{2,4}-[0-9]{3}", reply(tok, new))


def test_lark_and_gbnf_forms(chat):
    m, tok = chat
    for c in (Constraint.lark('start: ("yes" | "no") "!"', tok),
              Constraint.gbnf('root ::= ("yes" | "no") "!"', tok)):
        new = m.generate(prompt(tok)[None], 10, temperature=1.0, seed=1, constraint=c)[0]
        assert reply(tok, new[len(prompt(tok)):]) in ("yes!", "no!")


def test_mask_is_in_place_and_deterministic(chat):
    _, tok = chat
    c = Constraint.json_object(tok)
    row = np.zeros(tok.vocab_size + 5, np.float32)
    assert c.mask(row) is row
    allowed = np.flatnonzero(np.isfinite(row))
    assert [tok.decode([int(i)]) for i in allowed] == ["{"]   # compact: only the brace
    assert np.isneginf(row[tok.vocab_size:]).all()
    c.advance(int(allowed[0]))
    with pytest.raises(ValueError, match="not allowed by the constraint"):
        c.advance(tok.eos_token_id)
    r2 = np.zeros(tok.vocab_size, np.float64)
    c.fresh().mask(r2)
    np.testing.assert_array_equal(np.isfinite(r2), np.isfinite(row[:tok.vocab_size]))


@pytest.mark.parametrize("fmt", ["hermes", "llama3", "mistral"])
def test_tool_choice_named_and_required(chat, fmt):
    m, tok = chat
    tools = [{"type": "function", "function": {
        "name": "get_weather", "parameters": {
            "type": "object", "additionalProperties": False, "required": ["city", "unit"],
            "properties": {"city": {"type": "string", "maxLength": 6},
                           "unit": {"enum": ["c", "f"]}}}}},
        {"type": "function", "function": {"name": "noop", "parameters": {
            "type": "object", "properties": {}, "additionalProperties": False}}}]
    named = Constraint.tool_calls(tools, {"type": "function", "function": {"name": "get_weather"}},
                                  tok, fmt)
    for seed in range(2):
        new = m.generate(prompt(tok)[None], 120, temperature=1.0, seed=seed,
                         constraint=named)[0][len(prompt(tok)):]
        assert len(new) < 120
        msg = parse_reply(reply(tok, new), FORMATS[fmt])
        assert [c["function"]["name"] for c in msg["tool_calls"]] == ["get_weather"]
        args = json.loads(msg["tool_calls"][0]["function"]["arguments"])
        assert set(args) == {"city", "unit"} and args["unit"] in ("c", "f")
    req = Constraint.tool_calls(tools, "required", tok, fmt)
    new = m.generate(prompt(tok)[None], 200, temperature=1.0, seed=3,
                     constraint=req)[0][len(prompt(tok)):]
    assert len(new) < 200
    msg = parse_reply(reply(tok, new), FORMATS[fmt])
    assert msg["tool_calls"] and all(c["function"]["name"] in ("get_weather", "noop")
                                     for c in msg["tool_calls"])


def test_errors_name_the_field(chat):
    _, tok = chat
    with pytest.raises(ValueError, match="response_format.type"):
        Constraint.from_response_format({"type": "xml"}, tok)
    with pytest.raises(ValueError, match="json_schema"):
        Constraint.from_response_format({"type": "json_schema", "json_schema": {}}, tok)
    with pytest.raises(ValueError, match="regex"):
        Constraint.regex("[a-", tok)
    with pytest.raises(ValueError, match="not one of the tools"):
        Constraint.tool_calls([], {"type": "function", "function": {"name": "x"}}, tok, "hermes")
    assert Constraint.from_response_format({"type": "text"}, tok) is None


def test_missing_engine_names_the_extra(monkeypatch):
    import sys
    from blockc.generation import constraints
    monkeypatch.setitem(sys.modules, "llguidance", None)
    with pytest.raises(ImportError, match=r"blockc\[structured\]"):
        constraints.engine()


@pytest.mark.parametrize("fmt,marker", [("hermes", "<tool_call>"), ("mistral", "[TOOL_CALLS]")])
def test_tool_call_markers_that_are_special_tokens(tmp_path, fmt, marker):
    # the families' tokenizers hold these markers as control tokens: the grammar must
    # ask for the token, whose text is not the token
    d = tmp_path / "special"
    _, _ = chat_model_dir(d, "chatml")
    tok = Tokenizer.from_pretrained(d)
    tok.backend.add_special_tokens(["<tool_call>", "</tool_call>", "[TOOL_CALLS]"])
    m = blockc.GPT.random(blockc.GPTConfig(vocab=tok.vocab_size, context=128, width=32, heads=4,
                                           layers=1), seed=1)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "required": ["n"], "additionalProperties": False,
        "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}}}}}]
    c = Constraint.tool_calls(tools, "required", tok, fmt, parallel=False)
    new = m.generate(prompt(tok)[None], 60, temperature=1.0, seed=2, constraint=c)[0]
    new = new[len(prompt(tok)):]
    assert tok.token_to_id(marker) in new.tolist()   # the control token, not its spelling
    msg = parse_reply(reply(tok, new), FORMATS[fmt])
    assert len(msg["tool_calls"]) == 1
    assert 0 <= json.loads(msg["tool_calls"][0]["function"]["arguments"])["n"] <= 9


def test_argument_checks(chat):
    _, tok = chat
    with pytest.raises(TypeError, match="strict"):
        Constraint.json_schema({"type": "object"}, tok, strict="yes")
    with pytest.raises(ValueError, match="schema is not valid JSON"):
        Constraint.json_schema("{", tok)
    with pytest.raises(TypeError, match="tokenizer"):
        Constraint.json_object(object())
    with pytest.raises(ValueError, match="end_ids"):
        Constraint.json_object(tok, end_ids=10 ** 6)
    with pytest.raises(TypeError, match="logits_row"):
        Constraint.json_object(tok).mask(np.zeros((2, 3)))
    with pytest.raises(TypeError, match="constraint"):
        blockc.GPT.random(blockc.GPTConfig(vocab=8, context=8, width=8, heads=2, layers=1)
                          ).generate([[1, 2]], 2, constraint="json")


def test_sampler_takes_masked_logits():
    from blockc.generation import SamplingOptions, next_tokens
    z = np.array([[0.5, -np.inf, 2.0, -np.inf]], np.float32)
    for opts in (dict(temperature=1.0), dict(temperature=0.7, top_k=3), dict(temperature=1.0,
                 top_p=0.5), dict(temperature=1.0, min_p=0.1), dict(repetition_penalty=1.3)):
        got = {int(next_tokens(z, SamplingOptions(vocab=4, **opts), [np.random.default_rng(s)],
                               [np.array([1, 3])])[0]) for s in range(30)}
        assert got <= {0, 2} and 2 in got
    with pytest.raises(ValueError, match="every token of a row is masked"):
        next_tokens(np.full((1, 3), -np.inf), SamplingOptions(1.0, vocab=3),
                    [np.random.default_rng(0)])
    with pytest.raises(ValueError, match="inf or NaN"):
        next_tokens(np.array([[0.0, np.inf, -np.inf]]), SamplingOptions(1.0, vocab=3),
                    [np.random.default_rng(0)])


def test_tool_call_round_trip_through_the_template(tmp_path):
    # the server's path: tools into the template, a forced call, parsed, its result fed back
    from blockc.text.tools import ReplyParser, detect_format, tool_choice_mode
    qwen = ("{%- if tools %}<|im_start|>system\n<tools>{% for t in tools %}{{ t | tojson }}"
            "{% endfor %}</tools> Call as <tool_call>\n{json}\n</tool_call><|im_end|>\n"
            "{%- endif %}{%- for m in messages %}"
            "{%- if m.role == 'tool' %}<|im_start|>user\n<tool_response>{{ m.content }}"
            "</tool_response><|im_end|>\n"
            "{%- elif m.tool_calls %}<|im_start|>assistant\n{% for c in m.tool_calls %}"
            "<tool_call>\n{\"name\": \"{{ c.function.name }}\", \"arguments\": "
            "{{ c.function.arguments }}}\n</tool_call>{% endfor %}<|im_end|>\n"
            "{%- else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endif %}"
            "{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}")
    d = tmp_path / "qwenish"
    m, _ = chat_model_dir(d, "chatml", context=512)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["chat_template"] = qwen
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    tok = Tokenizer.from_pretrained(d)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "required": ["city"], "additionalProperties": False,
        "properties": {"city": {"enum": ["Paris", "Rome"]}}}}}]
    msgs = [{"role": "user", "content": "Weather?"}]
    p = tok.apply_chat_template(msgs, tools=tools)
    assert "get_weather" in p.text
    fmt = detect_format(tok.chat_template)
    assert fmt.name == "hermes" and tool_choice_mode("required", tools) == ("required", None)
    c = Constraint.tool_calls(tools, "required", tok, fmt, parallel=False)
    new = m.generate(p.ids[None], 80, temperature=1.0, seed=0, constraint=c)[0][len(p.ids):]
    parser = ReplyParser(fmt)
    parser.feed(reply(tok, new))
    parser.close()
    msg = parser.message()
    assert parser.finish_reason == "tool_calls"
    call = msg["tool_calls"][0]
    assert json.loads(call["function"]["arguments"])["city"] in ("Paris", "Rome")
    msgs += [msg, {"role": "tool", "tool_call_id": call["id"], "content": "18 C"}]
    again = tok.apply_chat_template(msgs, tools=tools).text
    assert "<tool_response>18 C</tool_response>" in again
    assert call["function"]["arguments"] in again


def test_batch_invariance_same_length_rows(chat):
    # one (B, T) batch: the rows run through one cache together from the first step
    m, tok = chat
    c = Constraint.json_schema(SCHEMA, tok)
    rows = np.stack([prompt(tok, "the block"), prompt(tok, "a residual")]) \
        if len(prompt(tok, "the block")) == len(prompt(tok, "a residual")) else None
    if rows is None:
        p = prompt(tok, "the block")
        rows = np.stack([p, p[::-1]])
    alone = [m.generate(r[None], 90, temperature=1.0, seed=11, constraint=c)[0] for r in rows]
    both = m.generate(rows, 90, temperature=1.0, seed=11, constraint=c)
    for i in range(2):
        k = len(alone[i])
        assert both[i, :k].tolist() == alone[i].tolist()
