"""What agent frameworks send to blockc serve, through the official openai client:
structured output (json_schema strict, json_object, the regex extension), tool calls
(required, named, parallel, streamed, their results fed back through the template) and
reasoning (``reasoning_content``). The model has random weights, so its text is junk:
that is the point, the constraint must hold all the same. A Qwen3-style template
written here, ``<tool_call>`` markers as control tokens of a tokenizer trained on a few
lines, the app served in this process on 127.0.0.1."""
import json

import numpy as np

import pytest

import blockc
from chat_dirs import chat_dir
from helpers import schema_valid as valid
from serve_thread import Companions, ThreadServer, companion_body, stream_completion

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
pytest.importorskip("jinja2")
pytest.importorskip("tokenizers")
pytest.importorskip("llguidance")

from blockc.serve import Settings  # noqa: E402

QWEN3 = (
    "{%- if tools %}<|im_start|>system\n# Tools\n<tools>"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools>\n"
    "Call as <tool_call>\n{\"name\": <name>, \"arguments\": <args>}\n</tool_call><|im_end|>\n"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant\n"
    "{%- for tc in message.tool_calls %}<tool_call>\n{\"name\": \"{{ tc.function.name }}\", "
    "\"arguments\": {{ tc.function.arguments | tojson }}}\n</tool_call>{%- endfor %}"
    "<|im_end|>\n"
    "{%- elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n"
    "{{ message.content }}\n</tool_response><|im_end|>\n"
    "{%- else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{%- else %}<think>\n{%- endif %}{%- endif %}")

SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["user", "tags", "unit"],
    "properties": {
        "user": {"type": "object", "additionalProperties": False, "required": ["name", "age"],
                 "properties": {"name": {"type": "string", "maxLength": 8},
                                "age": {"type": "integer", "minimum": 0, "maximum": 120}}},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3},
        "unit": {"enum": ["celsius", "fahrenheit"]}}}

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["city", "unit"],
                   "properties": {"city": {"enum": ["Paris", "Rome", "Oslo"]},
                                  "unit": {"enum": ["c", "f"]}}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "additionalProperties": False, "required": ["tz"],
        "properties": {"tz": {"type": "string", "maxLength": 6}}}}}]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
NOTHINK = {"chat_template_kwargs": {"enable_thinking": False}}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("agents")
    tok = chat_dir(d, "chatml")
    tok.add_special_tokens(["<tool_call>", "</tool_call>"])  # control tokens, as Qwen's
    tok.add_tokens(["<think>", "</think>"])                   # plain added tokens, as Qwen3's
    tok.save(str(d / "tokenizer.json"))
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["chat_template"] = QWEN3
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    m = blockc.GPT.random(blockc.GPTConfig(
        vocab=tok.get_vocab_size(), context=1536, width=32, heads=4, layers=2, norm="rms",
        activation="swiglu", positions="rope", kv_heads=2, d_ff=88, qkv_bias=False,
        out_bias=False, mlp_bias=False, tie_weights=False), seed=11)
    m.save_pretrained(d)
    c = json.loads((d / "config.json").read_text())
    c["eos_token_id"] = tok.token_to_id("<|im_end|>")
    (d / "config.json").write_text(json.dumps(c))
    return d


@pytest.fixture(scope="module")
def server(model_dir):
    s = ThreadServer(Settings(model=str(model_dir), model_name="m", parallel=4, max_queue=16),
                     blockc.GPT.from_pretrained(model_dir))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def tok(model_dir):
    return blockc.Tokenizer.from_pretrained(model_dir)


# ---- structured output ---------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_json_schema_strict_always_parses_and_validates(client, seed):
    r = client.chat.completions.create(
        model="m", messages=ASK, max_tokens=200, temperature=1.2, seed=seed,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}})
    ch = r.choices[0]
    assert ch.finish_reason == "stop", ch
    doc = json.loads(ch.message.content)
    assert valid(doc, SCHEMA), doc


def test_json_object_and_regex_extension(client):
    # any object: a junk model may write one string for ever (finish "length"); each
    # reply that ends on its own parses (one at least here)
    ended = 0
    for seed in range(4):
        r = client.chat.completions.create(model="m", messages=ASK, max_tokens=150, seed=seed,
                                           temperature=0.7, response_format={"type": "json_object"})
        ch = r.choices[0]
        if ch.finish_reason == "stop":
            assert isinstance(json.loads(ch.message.content), dict)
            ended += 1
        else:
            assert ch.finish_reason == "length" and ch.message.content.startswith("{")
    assert ended >= 1
    r = client.completions.create(model="m", prompt="the block reads", max_tokens=20, seed=3,
                                  temperature=1.0,
                                  extra_body={"response_format": {"type": "regex",
                                                                  "regex": "[0-9]{3}-[a-z]{2}"}})
    import re
    assert re.fullmatch("[0-9]{3}-[a-z]{2}", r.choices[0].text), r.choices[0].text
    assert r.choices[0].finish_reason == "stop"


def test_bad_schema_grammar_or_tool_choice_is_a_400_naming_the_field(server):
    bad = [({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "nope"}}}}}},
        "response_format"),
        ({"response_format": {"type": "regex", "regex": "(unclosed"}}, "response_format"),
        ({"response_format": {"type": "yaml"}}, "response_format"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
         "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [{"type": "function", "function": {"parameters": {}}}]}, "tools"),
        ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}},
         "tool_choice"),
        ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs")]
    for extra, param in bad:
        r = server.post("/v1/chat/completions", {"model": "m", "messages": ASK, "max_tokens": 4,
                                                 **extra})
        assert r.status_code == 400, (extra, r.text)
        assert r.json()["error"]["param"] == param, r.text


def test_a_constrained_row_gets_the_same_tokens_beside_others(server, client):
    # measured alone first (the companions too), then beside three companions decoding
    kw = dict(model="m", messages=ASK, max_tokens=200, temperature=1.0, seed=21,
              logprobs=True, response_format={"type": "json_schema", "json_schema": {
                  "name": "p", "schema": SCHEMA, "strict": True}})
    solo = client.chat.completions.create(**kw).choices[0]
    alone = [stream_completion(server.url, companion_body(i)) for i in range(3)]
    with Companions(server, alone, n=3):
        beside = client.chat.completions.create(**kw).choices[0]
    assert beside.message.content == solo.message.content
    assert ([t.logprob for t in beside.logprobs.content]
            == [t.logprob for t in solo.logprobs.content])
    assert valid(json.loads(solo.message.content), SCHEMA)


# ---- tool calls ----------------------------------------------------------------------------

def _args(call):
    doc = json.loads(call.function.arguments)
    assert valid(doc, PARAMS[call.function.name]), (call.function.name, doc)
    return doc


@pytest.mark.parametrize("seed", range(3))
def test_tool_choice_required_gives_calls_whose_arguments_validate(client, seed):
    r = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, max_tokens=120,
                                       tool_choice="required", parallel_tool_calls=False,
                                       temperature=1.0, seed=seed, extra_body=NOTHINK)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls", ch
    assert len(ch.message.tool_calls) == 1
    call = ch.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name in PARAMS
    _args(call)


def test_a_named_function_is_the_one_called_and_parallel_calls_parse(client):
    for seed in range(2):  # n=2: each choice its own grammar state
        r = client.chat.completions.create(
            model="m", messages=ASK, tools=TOOLS, max_tokens=80, temperature=1.0, seed=seed, n=2,
            tool_choice={"type": "function", "function": {"name": "get_time"}}, extra_body=NOTHINK)
        for ch in r.choices:
            calls = ch.message.tool_calls
            assert [c.function.name for c in calls] == ["get_time"]
            assert isinstance(_args(calls[0])["tz"], str) and ch.finish_reason == "tool_calls"
    # parallel calls allowed: every one of them parses and validates, their ids differ
    r = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, max_tokens=300,
                                       tool_choice="required", temperature=1.0, seed=5,
                                       extra_body=NOTHINK)
    calls = r.choices[0].message.tool_calls
    assert calls and len({c.id for c in calls}) == len(calls)
    done = calls if r.choices[0].finish_reason == "tool_calls" else calls[:-1]  # cut: the last
    assert r.choices[0].finish_reason in ("tool_calls", "length")
    for c in done:
        _args(c)


def _whole(tok, extra=None):
    """Sampling from the whole distribution at temperature 1 (a request that omits the
    fields gets the model's defaults, llama.cpp's here: top-k 40, top-p 0.95, min-p 0.05)."""
    return dict(temperature=1.0, top_p=1.0,
                extra_body=dict(extra or {}, top_k=tok.vocab_size, min_p=0.0))


def _streamed_message(client, **kw):
    """(content, reasoning, [(id, name, arguments)], finish_reason) of a streamed chat."""
    content, reasoning, calls, reason = [], [], {}, None
    for k in client.chat.completions.create(stream=True, **kw):
        if not k.choices:
            continue
        d = k.choices[0].delta
        content.append(d.content or "")
        reasoning.append(getattr(d, "reasoning_content", None) or "")
        for tc in d.tool_calls or []:
            c = calls.setdefault(tc.index, {"id": None, "name": None, "args": ""})
            if tc.id:
                assert c["id"] is None  # the id and name come once, in the call's first piece
                c["id"], c["name"] = tc.id, tc.function.name
            c["args"] += tc.function.arguments or ""
        reason = k.choices[0].finish_reason or reason
    return ("".join(content), "".join(reasoning),
            [(calls[i]["id"], calls[i]["name"], calls[i]["args"]) for i in sorted(calls)], reason)


def test_streamed_tool_calls_reassemble_to_the_unstreamed_reply(client, tok):
    for choice, seed in (("required", 1), ({"type": "function", "function": {"name": "get_weather"}},
                                           2), ("auto", 3)):
        kw = _whole(tok, NOTHINK)
        kw.update(model="m", messages=ASK, tools=TOOLS, max_tokens=150, seed=seed,
                  tool_choice=choice)
        whole = client.chat.completions.create(**kw).choices[0]
        content, _, calls, reason = _streamed_message(client, **kw)
        assert reason == whole.finish_reason
        want = [(c.function.name, c.function.arguments) for c in whole.message.tool_calls or []]
        assert [(n, a) for _, n, a in calls] == want
        assert all(i and i.startswith("call_") for i, _, _ in calls)
        assert content == (whole.message.content or ""), (content, whole.message.content)
        if choice != "auto":
            assert want and reason == "tool_calls"


def test_tool_results_are_fed_back_through_the_template(client, tok):
    call = {"id": "call_7", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}}
    msgs = ASK + [{"role": "assistant", "content": None, "tool_calls": [call]},
                  {"role": "tool", "tool_call_id": "call_7", "content": "18 C, sunny"},
                  {"role": "user", "content": "And in Rome?"}]
    r = client.chat.completions.create(model="m", messages=msgs, tools=TOOLS, max_tokens=2,
                                       temperature=0, extra_body=NOTHINK)
    local = [dict(m) for m in msgs]
    local[1] = {**local[1], "content": "", "tool_calls": [{**call, "function": {
        "name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}]}
    p = tok.apply_chat_template(local, tools=TOOLS, enable_thinking=False)
    assert "<tool_response>\n18 C, sunny\n</tool_response>" in p.text
    assert '"arguments": {"city": "Paris", "unit": "c"}' in p.text and "get_time" in p.text
    assert r.usage.prompt_tokens == len(p.ids)  # the server rendered just this


# ---- legacy functions / function_call ----------------------------------------------------

FUNCTIONS = [t["function"] for t in TOOLS]


def test_legacy_functions_are_carried_out_as_tools(client, tok):
    # the legacy request and its tools form: the same tokens, told as function_call
    named = {"name": "get_weather"}
    for seed in range(2):
        kw = dict(model="m", messages=ASK, max_tokens=120, temperature=1.0, seed=seed,
                  extra_body=NOTHINK)
        old = client.chat.completions.create(functions=FUNCTIONS, function_call=named, **kw)
        new = client.chat.completions.create(
            tools=TOOLS, tool_choice={"type": "function", "function": named},
            parallel_tool_calls=False, **kw)
        o, n = old.choices[0], new.choices[0]
        assert o.finish_reason == "function_call" and n.finish_reason == "tool_calls"
        assert o.message.tool_calls is None
        (call,) = n.message.tool_calls
        assert (o.message.function_call.name, o.message.function_call.arguments) == (
            "get_weather", call.function.arguments)
        _args(call)
        assert old.usage.prompt_tokens == new.usage.prompt_tokens
        # streamed: delta.function_call pieces, the name once, reassembling the reply
        name, args, reason = [], "", None
        for k in client.chat.completions.create(stream=True, functions=FUNCTIONS,
                                                function_call=named, **kw):
            if not k.choices:
                continue
            d = k.choices[0].delta
            assert not d.tool_calls
            if d.function_call is not None:
                name += [d.function_call.name] if d.function_call.name else []
                args += d.function_call.arguments or ""
            reason = k.choices[0].finish_reason or reason
        assert (name, args, reason) == (["get_weather"], call.function.arguments,
                                        "function_call")
    # "auto" and "none", and a function_call naming no function: 400 naming the field
    auto = client.chat.completions.create(model="m", messages=ASK, functions=FUNCTIONS,
                                          function_call="none", max_tokens=3, temperature=0,
                                          extra_body=NOTHINK)
    plain = client.chat.completions.create(model="m", messages=ASK, max_tokens=3, temperature=0,
                                           extra_body=NOTHINK)
    assert auto.choices[0].message.content == plain.choices[0].message.content
    assert auto.usage.prompt_tokens == plain.usage.prompt_tokens  # no tools in the prompt
    for extra, param in (({"function_call": {"name": "nope"}}, "function_call"),
                         ({"tools": TOOLS}, "functions")):
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model="m", messages=ASK, functions=FUNCTIONS,
                                           max_tokens=3, **{"extra_body": extra})
        assert e.value.body["param"] == param, e.value.body


def test_legacy_function_messages_are_fed_back_as_tool_messages(client, tok):
    fc = {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}
    old = ASK + [{"role": "assistant", "content": None, "function_call": fc},
                 {"role": "function", "name": "get_weather", "content": "18 C, sunny"},
                 {"role": "user", "content": "And in Rome?"}]
    r = client.chat.completions.create(model="m", messages=old, functions=FUNCTIONS,
                                       max_tokens=4, temperature=0, extra_body=NOTHINK)
    local = ASK + [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_0", "type": "function", "function": {
            "name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": "18 C, sunny"},
        {"role": "user", "content": "And in Rome?"}]
    p = tok.apply_chat_template(local, tools=TOOLS, enable_thinking=False)
    assert "<tool_response>\n18 C, sunny\n</tool_response>" in p.text
    assert r.usage.prompt_tokens == len(p.ids)  # the server rendered just this
    raw = client.completions.create(model="m", prompt=[int(t) for t in p.ids], max_tokens=4,
                                    temperature=0)
    assert r.choices[0].message.content == raw.choices[0].text


def test_reasoning_effort_reaches_a_template_with_the_switch(model_dir, tmp_path, client):
    d = tmp_path / "effort"
    d.mkdir()
    for f in model_dir.iterdir():
        if f.is_file():
            (d / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["chat_template"] = ("{%- if reasoning_effort is defined %}<|im_start|>system\n"
                            "Reasoning: {{ reasoning_effort }}<|im_end|>\n{%- endif %}" + QWEN3)
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    s = ThreadServer(Settings(model=str(d), model_name="m", parallel=1, max_queue=4),
                     blockc.GPT.from_pretrained(d))
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=60)
        tok = blockc.Tokenizer.from_pretrained(d)
        for effort in ("low", "high"):
            r = c.chat.completions.create(model="m", messages=ASK, max_tokens=1, temperature=0,
                                          reasoning_effort=effort)
            p = tok.apply_chat_template(ASK, reasoning_effort=effort)
            assert f"Reasoning: {effort}" in p.text
            assert r.usage.prompt_tokens == len(p.ids)
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(model="m", messages=ASK, max_tokens=1,
                                      reasoning_effort="extreme")
        assert e.value.body["param"] == "reasoning_effort"
    finally:
        s.stop()
    # the module's template has no such switch: refused by name, not ignored
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="m", messages=ASK, max_tokens=1,
                                       reasoning_effort="low")
    assert e.value.body["param"] == "reasoning_effort" and "switch" in e.value.body["message"]


# ---- reasoning -----------------------------------------------------------------------------

def test_reasoning_is_split_from_the_answer(client, tok):
    close = tok.token_to_id("</think>")
    bias = {str(close): 2.5}  # the junk model closes its thinking now and then
    prompt = tok.apply_chat_template(ASK)
    assert prompt.text.endswith("<think>")  # the template opened it: the reply is reasoning
    found = False
    for seed in range(16):
        kw = dict(model="m", messages=ASK, max_tokens=30, seed=seed, logit_bias=bias,
                  **_whole(tok))
        r = client.chat.completions.create(**kw).choices[0]
        whole = (r.message.content or "", getattr(r.message, "reasoning_content", None) or "")
        content, reasoning, calls, _ = _streamed_message(client, **kw)
        assert (content, reasoning.strip("\n"), calls) == (*whole, [])
        # the same tokens as a plain completion of the prompt's ids: split at </think>
        raw = client.completions.create(model="m", prompt=[int(t) for t in prompt.ids],
                                         max_tokens=30, seed=seed, logit_bias=bias,
                                         **_whole(tok)).choices[0].text
        think, sep, answer = raw.partition("</think>")
        if raw.count("</think>") == 1 and "<think>" not in raw and think.strip() and \
                answer.strip():
            assert whole == (answer.lstrip("\n"), think.strip("\n"))
            found = True
            break
        assert "</think>" in raw or whole == ("", raw.strip("\n"))
    assert found, "no seed closed its thinking once: the bias is off"
    # enable_thinking false: the template closes the block itself, all is the answer
    r = client.chat.completions.create(model="m", messages=ASK, max_tokens=12, temperature=0,
                                       extra_body=NOTHINK).choices[0]
    assert getattr(r.message, "reasoning_content", None) is None
    assert r.message.content


# ---- the other families' formats: Llama 3.1 JSON and Mistral [TOOL_CALLS] ------------------

LLAMA31 = (
    "{{- bos_token }}<|start_header_id|>system<|end_header_id|>\n\n"
    "{%- if tools is not none %}Environment: ipython\n{%- endif %}<|eot_id|>"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' and tools is not none and loop.last %}"
    "<|start_header_id|>user<|end_header_id|>\n\nRespond with {\"name\": function name, "
    "\"parameters\": dict of arguments}.\n\n"
    "{%- for t in tools %}{{ t | tojson }}\n\n{%- endfor %}{{ message.content }}<|eot_id|>"
    "{%- elif message.tool_calls %}<|start_header_id|>assistant<|end_header_id|>\n\n"
    "{%- for tc in message.tool_calls %}<|python_tag|>{\"name\": \"{{ tc.function.name }}\", "
    "\"parameters\": {{ tc.function.arguments | tojson }}}{%- endfor %}<|eot_id|>"
    "{%- elif message.role == 'tool' %}<|start_header_id|>ipython<|end_header_id|>\n\n"
    "{{ message.content }}<|eot_id|>"
    "{%- else %}<|start_header_id|>{{ message.role }}<|end_header_id|>\n\n"
    "{{ message.content }}<|eot_id|>{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n"
    "{%- endif %}")

MISTRAL = (
    "{{ bos_token }}{%- for message in messages %}"
    "{%- if message.role == 'user' %}"
    "{%- if tools and loop.last %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]"
    "{%- endif %}[INST]{{ message.content }}[/INST]"
    "{%- elif message.tool_calls %}[TOOL_CALLS][{%- for tc in message.tool_calls %}"
    "{\"name\": \"{{ tc.function.name }}\", \"arguments\": {{ tc.function.arguments | tojson }}"
    ", \"id\": \"{{ tc.id }}\"}{%- if not loop.last %}, {% endif %}{%- endfor %}]{{ eos_token }}"
    "{%- elif message.role == 'tool' %}[TOOL_RESULTS]{\"call_id\": \"{{ message.tool_call_id }}\","
    " \"content\": {{ message.content | tojson }}}[/TOOL_RESULTS]"
    "{%- else %}{{ message.content }}{{ eos_token }}{%- endif %}{%- endfor %}")

#: style: (template, the control tokens the family's tokenizer holds beyond chat_dirs' ones)
FAMILIES = {"llama3": (LLAMA31, ["<|python_tag|>"]),
            "mistral": (MISTRAL, ["[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                                  "[TOOL_RESULTS]", "[/TOOL_RESULTS]"])}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    style = request.param
    template, extra = FAMILIES[style]
    d = tmp_path_factory.mktemp(style)
    tok = chat_dir(d, style)
    tok.add_special_tokens(extra)
    tok.save(str(d / "tokenizer.json"))
    (d / "chat_template.jinja").write_text(template, encoding="utf-8")
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    m = blockc.GPT.random(blockc.GPTConfig(vocab=tok.get_vocab_size(), context=1536, width=32,
                                           heads=4, layers=2), seed=12)
    m.save_pretrained(d)
    c = json.loads((d / "config.json").read_text())
    c["eos_token_id"] = tok.token_to_id(cfg["eos_token"])
    (d / "config.json").write_text(json.dumps(c))
    s = ThreadServer(Settings(model=str(d), model_name="m", parallel=2, max_queue=8),
                     blockc.GPT.from_pretrained(d))
    yield style, s, openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0,
                                  timeout=120), blockc.Tokenizer.from_pretrained(d)
    s.stop()


def test_each_family_format_required_streamed_and_fed_back(family):
    style, server, client, tok = family
    for seed, choice in ((0, "required"), (1, {"type": "function", "function": {"name": "get_time"}})):
        kw = dict(model="m", messages=ASK, tools=TOOLS, max_tokens=120, temperature=1.0,
                  seed=seed, tool_choice=choice, parallel_tool_calls=False)
        whole = client.chat.completions.create(**kw).choices[0]
        assert whole.finish_reason == "tool_calls", (style, whole)
        (call,) = whole.message.tool_calls
        _args(call)
        if choice != "required":
            assert call.function.name == "get_time"
        _, _, calls, reason = _streamed_message(client, **kw)
        assert reason == "tool_calls"
        assert [(n, a) for _, n, a in calls] == [(call.function.name, call.function.arguments)]
    # the call and its result back through the family's template
    msgs = ASK + [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                  {"role": "tool", "tool_call_id": call.id, "content": "18 C"}]
    if style == "mistral":  # its template takes the conversation back to the user
        msgs.append({"role": "user", "content": "Thanks"})
    r = client.chat.completions.create(model="m", messages=msgs, tools=TOOLS, max_tokens=2,
                                       temperature=0)
    local = [dict(m) for m in msgs]
    local[1] = {**local[1], "content": "", "tool_calls": [{**call.model_dump(), "function": {
        "name": call.function.name, "arguments": json.loads(call.function.arguments)}}]}
    p = tok.apply_chat_template(local, tools=TOOLS)
    assert "18 C" in p.text and call.function.name in p.text
    assert r.usage.prompt_tokens == len(p.ids)


def test_parallel_tool_calls_false_keeps_the_first_call_of_an_auto_reply():
    # under "auto" nothing constrains the count: the server keeps the first call, streamed
    # and whole alike
    from blockc.serve.agents import ReplyPlan
    from blockc.text.tools import FORMATS
    text = ('<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>')
    for parallel, want in ((True, ["get_time", "get_weather"]), (False, ["get_time"])):
        sh = ReplyPlan(format=FORMATS["hermes"], parallel=parallel).shaper()
        deltas = [d for k in range(0, len(text), 7) for d in sh.feed(text[k:k + 7])] + sh.close()
        streamed = [c["function"]["name"] for d in deltas for c in d.get("tool_calls", ())
                    if "id" in c]
        msg = sh.message()
        assert streamed == [c["function"]["name"] for c in msg["tool_calls"]] == want
        assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"tz": "CET"}
        assert sh.finish_reason("stop") == "tool_calls" and sh.finish_reason("length") == "length"
        assert msg["content"] is None


@pytest.mark.parametrize("opts", [dict(temperature=0.0), dict(temperature=1.0),
                                  dict(temperature=0.8, top_k=3),
                                  dict(temperature=1.0, top_p=0.9, repetition_penalty=1.3),
                                  dict(temperature=1.2, min_p=0.05)])
def test_a_constrained_row_draws_among_the_allowed_tokens_as_from_the_whole_row(tok, opts):
    # the server's sampler draws a masked row's token among the allowed ones only; the
    # oracle: the whole masked row through GPT.generate's own sampler, the same generator
    from blockc.generation import next_tokens
    from blockc.generation.constraints import Constraint
    from blockc.serve.sampling import RowSampler, sampling_from_request
    from blockc.serve.types import SamplingRequest
    req = SamplingRequest(model="m")
    req.generation.update(opts, seed=9)
    samp = sampling_from_request(req, tok.vocab_size)
    c = Constraint.json_schema(SCHEMA, tok)
    mine = RowSampler(samp, 0, tok.vocab_size, c.fresh(), frozenset((tok.eos_token_id,)))
    theirs, rng = c.fresh(), np.random.default_rng(9)
    logits = np.random.default_rng(1).standard_normal((200, tok.vocab_size)).astype(np.float32)
    seen = list(tok.encode("the block", add_special_tokens=False))
    for z in logits:
        got = mine(z, np.asarray(seen))[0]
        full = z.copy()
        theirs.mask(full)
        want = int(next_tokens(full[None], samp.options, [rng],
                               [np.asarray(seen)] if "repetition_penalty" in opts else None)[0])
        assert got == want
        theirs.advance(want)
        seen.append(want)
        if mine.finished:
            break
    assert mine.finished == theirs.is_done()
