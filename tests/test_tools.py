"""Tool calls and reasoning (blockc.text.tools): the tools reach chat templates written
here in the style of Qwen2.5 (Hermes), Llama 3.1 and Mistral; the format is detected
from the template; replies parse into OpenAI's tool_calls, whole and streamed."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("jinja2")

from blockc.text.chat import ChatTemplate  # noqa: E402
from blockc.text.tools import (FORMATS, ReplyParser, detect_format, parse_reply,  # noqa: E402
                               tool_specs)

QWEN = (
    "{%- if tools %}<|im_start|>system\n# Tools\n<tools>"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools>\n"
    "For each call return <tool_call>\n{\"name\": <name>, \"arguments\": <args>}\n</tool_call>"
    "<|im_end|>\n{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant\n"
    "{%- for tc in message.tool_calls %}<tool_call>\n{\"name\": \"{{ tc.function.name }}\", "
    "\"arguments\": {{ tc.function.arguments }}}\n</tool_call>{%- endfor %}<|im_end|>\n"
    "{%- elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n"
    "{{ message.content }}\n</tool_response><|im_end|>\n"
    "{%- else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}")

LLAMA31 = (
    "{{- bos_token }}<|start_header_id|>system<|end_header_id|>\n\n"
    "{%- if tools is not none %}Environment: ipython\n{%- endif %}<|eot_id|>"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' and tools is not none and loop.last %}"
    "<|start_header_id|>user<|end_header_id|>\n\nRespond with {\"name\": function name, "
    "\"parameters\": dict of arguments}.\n\n"
    "{%- for t in tools %}{{ t | tojson(indent=4) }}\n\n{%- endfor %}"
    "{{ message.content }}<|eot_id|>"
    "{%- elif message.tool_calls %}<|start_header_id|>assistant<|end_header_id|>\n\n"
    "{%- for tc in message.tool_calls %}{\"name\": \"{{ tc.function.name }}\", \"parameters\": "
    "{{ tc.function.arguments }}}{%- endfor %}<|eot_id|>"
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
    "{\"name\": \"{{ tc.function.name }}\", \"arguments\": {{ tc.function.arguments }}, "
    "\"id\": \"{{ tc.id }}\"}{%- if not loop.last %}, {% endif %}{%- endfor %}]{{ eos_token }}"
    "{%- elif message.role == 'tool' %}[TOOL_RESULTS]{\"call_id\": \"{{ message.tool_call_id }}\", "
    "\"content\": {{ message.content | tojson }}}[/TOOL_RESULTS]"
    "{%- else %}{{ message.content }}{{ eos_token }}{%- endif %}{%- endfor %}")

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "required": ["city"],
                   "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"tz": {"type": "string"}}}}}]

CALL = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
CONVO = [{"role": "user", "content": "Weather in Paris?"},
         {"role": "assistant", "content": "", "tool_calls": [CALL]},
         {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"},
         {"role": "user", "content": "And the time?"}]

# (template, format, a reply with two parallel calls)
CASES = {
    "hermes": (QWEN, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", '
                     '"unit": "c"}}\n</tool_call>\n<tool_call>\n{"name": "get_time", '
                     '"arguments": {"tz": "CET"}}\n</tool_call>'),
    "llama3": (LLAMA31, '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", '
                        '"unit": "c"}}; {"name": "get_time", "parameters": {"tz": "CET"}}'),
    "mistral": (MISTRAL, '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", '
                         '"unit": "c"}}, {"name": "get_time", "arguments": {"tz": "CET"}}]'),
}
WANT = [("get_weather", {"city": "Paris", "unit": "c"}), ("get_time", {"tz": "CET"})]


def ids():
    n = iter(range(100))
    return lambda: f"call_{next(n)}"


@pytest.mark.parametrize("fmt", list(CASES))
def test_tools_reach_the_template_and_the_format_is_detected(fmt):
    src, _ = CASES[fmt]
    t = ChatTemplate(src, {"bos_token": "<s>", "eos_token": "</s>"})
    text = t.render(CONVO, tools=TOOLS)
    assert "get_weather" in text and "The weather in a city" in text  # the tools
    assert "18 C, sunny" in text                                        # the tool's result
    assert '"city": "Paris"' in text                                    # the earlier call
    if fmt == "mistral":
        assert '"call_id": "call_1"' in text                            # tool_call_id
    assert detect_format(t) is FORMATS[fmt]
    plain = t.render([{"role": "user", "content": "hi"}])
    assert "get_weather" not in plain


@pytest.mark.parametrize("fmt", list(CASES))
def test_whole_reply_parses_into_parallel_calls(fmt):
    _, reply = CASES[fmt]
    msg = parse_reply(reply, fmt, ids=ids())
    assert msg["content"] is None
    got = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
           for c in msg["tool_calls"]]
    assert got == WANT
    assert [c["id"] for c in msg["tool_calls"]] == ["call_0", "call_1"]


@pytest.mark.parametrize("fmt", list(CASES))
@pytest.mark.parametrize("step", [1, 3, 7])
def test_streamed_reply_gives_openai_deltas(fmt, step):
    _, reply = CASES[fmt]
    text = "<think>check the tools</think>\n" + reply
    p = ReplyParser(fmt, ids=ids())
    deltas = []
    for i in range(0, len(text), step):
        deltas += p.feed(text[i:i + step])
    deltas += p.close()
    ds = [d.to_openai() for d in deltas]
    assert "".join(d.get("reasoning_content", "") for d in ds) == "check the tools"
    assert "".join(d.get("content", "") for d in ds).strip() == ""
    calls = {}
    for d in ds:
        for c in d.get("tool_calls", []):
            e = calls.setdefault(c["index"], {"id": None, "name": None, "arguments": ""})
            if "id" in c:
                assert e["id"] is None  # id and name come once, first
                e["id"], e["name"] = c["id"], c["function"]["name"]
            e["arguments"] += c["function"]["arguments"]
    assert [(calls[i]["name"], json.loads(calls[i]["arguments"])) for i in sorted(calls)] == WANT
    assert [calls[i]["id"] for i in sorted(calls)] == ["call_0", "call_1"]
    assert p.finish_reason == "tool_calls"


@pytest.mark.parametrize("step", [1, 2, 5])
def test_reasoning_split_streamed(step):
    text = "<think>Paris is in France.\n</think>\n\nThe capital is Paris."
    p = ReplyParser(None)
    out = []
    for i in range(0, len(text), step):
        out += p.feed(text[i:i + step])
    out += p.close()
    assert "".join(d.reasoning for d in out) == "Paris is in France.\n"
    assert "".join(d.content for d in out) == "The capital is Paris."
    msg = p.message()
    assert msg == {"role": "assistant", "content": "The capital is Paris.",
                   "reasoning_content": "Paris is in France."}
    assert p.finish_reason is None


def test_reasoning_opened_by_the_prompt_and_plain_text():
    assert parse_reply("hm, so</think>yes", starts_in_reasoning=True) == {
        "role": "assistant", "content": "yes", "reasoning_content": "hm, so"}
    # text that only looks like a marker's start is content, once the reply ends
    assert parse_reply("a < b and [TOOL", "mistral")["content"] == "a < b and [TOOL"
    assert parse_reply("Hello <tool", "hermes")["content"] == "Hello <tool"
    msg = parse_reply('Sure.\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>', "hermes")
    assert msg["content"] == "Sure." and msg["tool_calls"][0]["function"]["name"] == "f"
    # an unfinished call is content, not a call
    assert "tool_calls" not in parse_reply('<tool_call>\n{"name": "f", "argu', "hermes")
    # llama3: JSON that is not a call is content
    assert parse_reply('{"a": 1}', "llama3")["content"] == '{"a": 1}'


def test_tool_specs_and_errors():
    assert list(tool_specs(TOOLS)) == ["get_weather", "get_time"]
    with pytest.raises(ValueError, match=r"tools\[0\]"):
        tool_specs([{"type": "function"}])
    with pytest.raises(ValueError, match="format must be one of"):
        ReplyParser("xml")
    assert detect_format("{{ messages }}") is None


def test_tool_choice_modes():
    from blockc.text.tools import tool_choice_mode
    assert tool_choice_mode(None, TOOLS) == ("auto", None)
    assert tool_choice_mode(None, None) == ("none", None)
    assert tool_choice_mode("required", TOOLS) == ("required", None)
    named = {"type": "function", "function": {"name": "get_time"}}
    assert tool_choice_mode(named, TOOLS) == ("named", "get_time")
    with pytest.raises(ValueError, match="not one of the tools"):
        tool_choice_mode({"type": "function", "function": {"name": "x"}}, TOOLS)
    with pytest.raises(ValueError, match="needs tools"):
        tool_choice_mode("required", [])
    with pytest.raises(TypeError, match="tool_choice"):
        tool_choice_mode("sometimes", TOOLS)


def test_opens_reasoning():
    from blockc.text.tools import opens_reasoning
    assert opens_reasoning("<|im_start|>assistant\n<think>\n")
    assert not opens_reasoning("<think>a</think>b<|im_start|>assistant\n")
    assert not opens_reasoning("plain")


@pytest.mark.parametrize("fmt", list(CASES))
def test_arguments_stream_in_pieces_as_they_come(fmt):
    _, reply = CASES[fmt]
    p = ReplyParser(fmt, ids=ids())
    seen_name_at = None
    pieces = []
    for i, ch in enumerate(reply):
        for d in p.feed(ch):
            if d.tool_index == 0 and d.tool_name is not None:
                seen_name_at = i
            if d.tool_index == 0 and d.arguments:
                pieces.append(d.arguments)
    p.close()
    whole = p.calls[0].arguments
    assert seen_name_at is not None and seen_name_at < reply.index("Paris")  # name first
    assert len(pieces) > 5 and "".join(pieces) == whole                  # then the pieces
    assert json.loads(whole) == WANT[0][1]
