"""Tool calls and reasoning in a model's reply: the families' tool-call formats, which
one a chat template uses, and the parsers that turn generated text into OpenAI's
``content``, ``reasoning_content`` and ``tool_calls`` (whole, or streamed as deltas).

The formats (facts of each family's chat template; nothing of another project's code):

- ``hermes``: Hermes / Qwen2.5 / Qwen3, ``<tool_call>\\n{"name": ..., "arguments": {...}}
  \\n</tool_call>``, one block per call (parallel calls: several blocks);
- ``llama3``: Llama 3.1 / 3.2 / 3.3 JSON tool calling, ``{"name": ..., "parameters":
  {...}}`` (optionally after ``<|python_tag|>``; parallel calls separated by ``;``);
- ``mistral``: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``.

Thinking: text between ``<think>`` and ``</think>`` (a template that opens the tag in
the generation prompt, as Qwen3's and DeepSeek-R1's do, makes the reply start inside it:
``starts_in_reasoning``) is ``reasoning_content``; the rest is ``content``.

The tools reach the template as ``tools=`` (transformers' convention: a list of
OpenAI's ``{"type": "function", "function": {...}}``), through
:meth:`blockc.text.ChatTemplate.render`'s variables.
"""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .._errors import BlockcTypeError, BlockcValueError

__all__ = ["ToolFormat", "FORMATS", "get_format", "detect_format", "tool_specs", "tool_choice_mode",
           "opens_reasoning", "ToolCall",
           "Delta", "ReplyParser", "parse_reply", "THINK_OPEN", "THINK_CLOSE"]

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


@dataclass(frozen=True)
class ToolFormat:
    """A family's tool-call syntax: ``begin`` (call_open JSON call_close) separated by
    ``separator`` ... ``end``; the JSON is ``{"name": NAME, args_key: {...}}``.

    Attributes
    ----------
    name : str
    begin, end : str
        Around all the calls ("" for none).
    call_open, call_close : str
        Around each call's JSON.
    separator : str
        Between two calls.
    args_key : str
        The arguments' key in a call's JSON (``arguments`` or ``parameters``).
    parallel : bool
        Whether the syntax carries several calls.
    starts : tuple of str
        The texts that begin a reply of tool calls (the parser watches for them).
    """
    name: str
    begin: str
    end: str
    call_open: str
    call_close: str
    separator: str
    args_key: str
    parallel: bool = True
    starts: Tuple[str, ...] = field(default=())


FORMATS: Dict[str, ToolFormat] = {
    "hermes": ToolFormat("hermes", "", "", "<tool_call>\n", "\n</tool_call>", "\n", "arguments",
                         starts=("<tool_call>",)),
    "llama3": ToolFormat("llama3", "", "", "", "", "; ", "parameters",
                         starts=("<|python_tag|>", "{\"name\"", "{\"type\": \"function\"")),
    "mistral": ToolFormat("mistral", "[TOOL_CALLS][", "]", "", "", ", ", "arguments",
                          starts=("[TOOL_CALLS]",)),
}


def get_format(name: str) -> ToolFormat:
    """The format named ``name`` (a key of :data:`FORMATS`).

    Raises
    ------
    ValueError
        An unknown name.
    """
    if not isinstance(name, str):
        raise BlockcTypeError(f"format must be a str, got {type(name).__name__}")
    try:
        return FORMATS[name]
    except KeyError:
        raise BlockcValueError(f"format must be one of {', '.join(FORMATS)}, got {name!r}") from None


def detect_format(template: Any) -> Optional[ToolFormat]:
    """The tool-call format a chat template (its source, or a ChatTemplate) writes, or
    None when it shows none: ``<tool_call>`` -> hermes, ``[TOOL_CALLS]`` -> mistral,
    ``<|python_tag|>`` or Llama 3's headers with ``tools`` -> llama3.

    Examples
    --------
    >>> detect_format("{% if tools %}<tool_call>{% endif %}").name
    'hermes'
    """
    src = getattr(template, "source", template)
    if not isinstance(src, str):
        raise BlockcTypeError(f"template must be a chat template's source or a ChatTemplate, "
                              f"got {type(template).__name__}")
    if "<tool_call>" in src:
        return FORMATS["hermes"]
    if "[TOOL_CALLS]" in src:
        return FORMATS["mistral"]
    if "<|python_tag|>" in src or ("<|start_header_id|>" in src and "tools" in src):
        return FORMATS["llama3"]
    return None


def tool_specs(tools: Any) -> Dict[str, Dict[str, Any]]:
    """The function names of OpenAI's ``tools`` -> their parameters' JSON Schema.

    Raises
    ------
    TypeError, ValueError
        A malformed tool (the message names which).
    """
    if isinstance(tools, (str, bytes)) or not isinstance(tools, Sequence):
        raise BlockcTypeError(f"tools must be a list of tools, got {type(tools).__name__}")
    out: Dict[str, Dict[str, Any]] = {}
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, Mapping) else None
        if not isinstance(t, Mapping) or t.get("type", "function") != "function" or \
                not isinstance(fn, Mapping):
            raise BlockcValueError(f"tools[{i}] must be {{\"type\": \"function\", \"function\": "
                                   "{...}}")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise BlockcValueError(f"tools[{i}].function.name must be a non-empty str")
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, Mapping):
            raise BlockcTypeError(f"tools[{i}].function.parameters must be a JSON Schema object")
        out[name] = dict(params)
    return out


def opens_reasoning(prompt: str) -> bool:
    """Whether a rendered prompt leaves a ``<think>`` open (its last tag is ``<think>``:
    Qwen3's and DeepSeek-R1's generation prompts), so the reply starts as reasoning.

    Examples
    --------
    >>> opens_reasoning("<|im_start|>assistant <think>"), opens_reasoning("Hi")
    (True, False)
    """
    if not isinstance(prompt, str):
        raise BlockcTypeError(f"prompt must be a str, got {type(prompt).__name__}")
    return prompt.rfind(THINK_OPEN) > prompt.rfind(THINK_CLOSE)


def tool_choice_mode(tool_choice: Any, tools: Any) -> Tuple[str, Optional[str]]:
    """OpenAI's ``tool_choice`` checked against ``tools``: (mode, function name).

    The mode is ``"none"`` (no calls: the tools need not reach the template),
    ``"auto"`` (the model decides: the reply is parsed, nothing constrained),
    ``"required"`` (one or more calls: :meth:`Constraint.tool_calls
    <blockc.generation.constraints.Constraint.tool_calls>`) or ``"named"`` (one call of
    the function named, constrained likewise). Absent (None): ``"auto"`` when there are
    tools, else ``"none"``, as OpenAI's default.

    Parameters
    ----------
    tool_choice : None, "none", "auto", "required" or dict
        ``{"type": "function", "function": {"name": NAME}}`` names one.
    tools : sequence of dict or None

    Returns
    -------
    (str, str or None)

    Raises
    ------
    TypeError, ValueError
        A malformed tool_choice, one naming no tool, or required/named without tools.

    Examples
    --------
    >>> tool_choice_mode(None, [])
    ('none', None)
    """
    names = list(tool_specs(tools)) if tools else []
    if tool_choice is None:
        return ("auto" if names else "none"), None
    if tool_choice in ("none", "auto", "required"):
        if tool_choice == "required" and not names:
            raise BlockcValueError("tool_choice \"required\" needs tools")
        return tool_choice, None
    if isinstance(tool_choice, Mapping):
        fn = tool_choice.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if tool_choice.get("type", "function") != "function" or not isinstance(name, str):
            raise BlockcValueError("tool_choice must be {\"type\": \"function\", \"function\": "
                                   "{\"name\": NAME}}")
        if name not in names:
            raise BlockcValueError(f"tool_choice names function {name!r}, which is not one of "
                                   f"the tools ({', '.join(names) or 'none'})")
        return "named", name
    raise BlockcTypeError("tool_choice must be \"none\", \"auto\", \"required\" or "
                          f"{{\"type\": \"function\", ...}}, got {tool_choice!r}")


@dataclass
class ToolCall:
    """One parsed call: OpenAI's ``{"id", "type": "function", "function": {"name",
    "arguments"}}`` (``arguments`` a JSON str)."""
    index: int
    id: str
    name: str
    arguments: str

    def to_openai(self) -> Dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class Delta:
    """One streamed piece: content, reasoning, or a tool call's piece (OpenAI's
    ``delta.tool_calls[i]``: the first piece of a call carries ``id`` and ``name``, the
    next ones argument text)."""
    content: str = ""
    reasoning: str = ""
    tool_index: Optional[int] = None
    tool_id: Optional[str] = None
    tool_name: Optional[str] = None
    arguments: str = ""

    def to_openai(self) -> Dict[str, Any]:
        """OpenAI's ``choices[0].delta`` of this piece."""
        d: Dict[str, Any] = {}
        if self.content:
            d["content"] = self.content
        if self.reasoning:
            d["reasoning_content"] = self.reasoning
        if self.tool_index is not None:
            call: Dict[str, Any] = {"index": self.tool_index}
            fn: Dict[str, Any] = {}
            if self.tool_id is not None:
                call["id"], call["type"] = self.tool_id, "function"
                fn["name"] = self.tool_name
            fn["arguments"] = self.arguments
            call["function"] = fn
            d["tool_calls"] = [call]
        return d


def _new_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


class ReplyParser:
    """Generated text in, :class:`Delta` pieces out: reasoning (``<think>``...), content,
    and tool calls in ``format``'s syntax, as OpenAI streams them.

    A call's JSON is held until it is whole (so its name is known and its arguments
    parse), then given as two deltas: the id and name, then the arguments. Text that
    could still become a marker (a partial ``<tool_call>`` at the end of a piece) is
    held back until the next piece tells.

    Feed it the text decoded with the special tokens kept (``skip_special_tokens=False``):
    Mistral's ``[TOOL_CALLS]`` and Llama's ``<|python_tag|>`` are control tokens.

    Parameters
    ----------
    format : ToolFormat or str, optional
        None: no tool calls (reasoning and content only).
    starts_in_reasoning : bool, optional
        The prompt opened ``<think>`` (the reply begins as reasoning).
    reasoning : bool, optional
        Split out ``<think>`` blocks (default True).
    ids : callable, optional
        Makes each call's id (default: ``call_`` and 24 random hex digits).

    Examples
    --------
    >>> p = ReplyParser("hermes")
    >>> ds = p.feed('<tool_call>\\n{"name": "f", "arguments": {"x": 1}}\\n</tool_call>')
    >>> ds += p.close()
    >>> p.calls[0].name, p.calls[0].arguments
    ('f', '{"x": 1}')
    """

    def __init__(self, format: Any = None, starts_in_reasoning: bool = False,
                 reasoning: bool = True, ids: Any = None):
        self.fmt = (format if isinstance(format, ToolFormat) or format is None
                    else get_format(format))
        self.reasoning_on = reasoning
        self.in_think = bool(starts_in_reasoning)
        self.ids = ids or _new_id
        self.buf = ""
        self.mode = "text"          # text | calls
        self.calls: List[ToolCall] = []
        self.content: List[str] = []
        self.reasoning: List[str] = []
        self._seen_text = False     # content before any call (llama3's JSON only at the start)
        self._after_think = False
        self._cur: Optional[Dict[str, Any]] = None   # the call being read
        self._opened = False                          # mistral's [TOOL_CALLS][ read
        self._pending_close = False

    # ---- the markers ---------------------------------------------------------------

    def _markers(self) -> List[str]:
        m = []
        if self.reasoning_on:
            m.append(THINK_CLOSE if self.in_think else THINK_OPEN)
        if self.fmt is not None and not self.in_think:
            m += list(self.fmt.starts)
        return m

    @staticmethod
    def _held(text: str, markers: Sequence[str]) -> int:
        """How many characters at the end of ``text`` could begin a marker."""
        best = 0
        for mk in markers:
            for k in range(min(len(mk) - 1, len(text)), 0, -1):
                if text.endswith(mk[:k]):
                    best = max(best, k)
                    break
        return best

    def feed(self, piece: str) -> List[Delta]:
        """The deltas that ``piece`` (the next generated text) completes."""
        if not isinstance(piece, str):
            raise BlockcTypeError(f"piece must be a str, got {type(piece).__name__}")
        self.buf += piece
        return self._drain(final=False)

    def close(self) -> List[Delta]:
        """The deltas of what is left at the end of the reply (an unfinished call's text
        becomes content)."""
        return self._drain(final=True)

    def _emit_text(self, text: str, out: List[Delta]) -> None:
        if not text:
            return
        if self.in_think:
            self.reasoning.append(text)
            out.append(Delta(reasoning=text))
        else:
            if self._after_think:  # the newlines after </think> separate, they are not content
                text = text.lstrip("\n")
                if not text:
                    return
                self._after_think = False
            if text.strip():
                self._seen_text = True
            self.content.append(text)
            out.append(Delta(content=text))

    def _drain(self, final: bool) -> List[Delta]:
        out: List[Delta] = []
        while True:
            if self.mode == "calls":
                if not self._take_calls(final, out):
                    break
                continue
            markers = self._markers()
            if self.fmt is not None and self.fmt.name == "llama3" and self._seen_text:
                markers = [m for m in markers if m == "<|python_tag|>" or m.startswith("<")]
            hits = [(self.buf.find(m), m) for m in markers if m in self.buf]
            if not hits:
                keep = 0 if final else self._held(self.buf, markers)
                self._emit_text(self.buf[:len(self.buf) - keep], out)
                self.buf = self.buf[len(self.buf) - keep:]
                break
            at, mk = min(hits)
            before = self.buf[:at]
            if mk in (THINK_OPEN, THINK_CLOSE):
                self._emit_text(before, out)
                self.buf = self.buf[at + len(mk):]
                self.in_think = mk == THINK_OPEN
                self._after_think = not self.in_think
                continue
            if before.strip():
                self._emit_text(before, out)
            elif before and self.content:
                self._emit_text(before, out)
            self.buf = self.buf[at:]
            self.mode = "calls"
        return out

    # ---- the calls -------------------------------------------------------------------

    def _take_calls(self, final: bool, out: List[Delta]) -> bool:
        """Take what the buffer holds of the calls region; True when something changed
        (the caller loops), False when it waits for more text."""
        if self._cur is not None:
            return self._in_call(final, out)
        fmt = self.fmt
        assert fmt is not None
        s = self.buf.lstrip()
        if self._pending_close:  # hermes: the </tool_call> after a call's JSON
            if s.startswith("</tool_call>"):
                s = s[len("</tool_call>"):]
            elif "</tool_call>".startswith(s) and not final:
                self.buf = s
                return False
            self._pending_close = False
        if fmt.name == "hermes":
            return self._opener(s, "<tool_call>", final, out)
        if fmt.name == "mistral":
            if not self._opened:
                return self._opener(s, "[TOOL_CALLS]", final, out)
            if s.startswith("["):  # the array's opening, after [TOOL_CALLS]
                s = s[1:].lstrip()
            if s.startswith(","):
                s = s[1:].lstrip()
            if s.startswith("{"):
                self.buf, self._cur = s, {}
                return True
            if s.startswith("]"):
                self.buf, self.mode, self._opened = s[1:], "text", False
                return True
            if not s and not final:
                self.buf = ""
                return False
            self.buf, self.mode, self._opened = s, "text", False
            return bool(s)
        # llama3: "<|python_tag|>" and ";" between JSON calls
        if s.startswith("<|python_tag|>"):
            s = s[len("<|python_tag|>"):].lstrip()
        if s.startswith(";"):
            s = s[1:].lstrip()
        if s.startswith("{"):
            self.buf, self._cur = s, {}
            return True
        if not final and (not s or "<|python_tag|>".startswith(s)):
            self.buf = s
            return False
        self.buf, self.mode = s, "text"
        return bool(s)

    def _opener(self, s: str, opener: str, final: bool, out: List[Delta]) -> bool:
        """The text at a call's (or the calls') opening marker: the call begins after it."""
        if s.startswith(opener):
            rest = s[len(opener):].lstrip()
            if opener == "[TOOL_CALLS]":
                self._opened = True
                self.buf = rest
                return True
            self.buf, self._cur = rest, {}
            return True
        if s and opener.startswith(s) and not final:
            self.buf = s
            return False
        if not s and not final:
            self.buf = ""
            return False
        self.buf, self.mode = s, "text"  # not a call: text (the marker is not at its start)
        return bool(s)

    def _in_call(self, final: bool, out: List[Delta]) -> bool:
        """A call's JSON at the buffer's start: its name as soon as it is read, then its
        arguments' text as it comes, then the rest of the call."""
        fmt = self.fmt
        assert fmt is not None and self._cur is not None
        cur, s = self._cur, self.buf
        if "call" not in cur:
            s = self.buf = s.lstrip()
            m = _HEADER.match(s)
            if m is None:
                obj, end = _json_prefix(s)
                if obj is not None:  # whole, but not name first: taken as it is
                    self._cur = None
                    if self._call_obj(obj, out, fmt.args_key, s[:end]):
                        self.buf = self._after_call(s[end:])
                    else:
                        self.mode, self.buf = "text", s
                    return True
                if final or (s and not s.startswith("{")) or len(s) > 4096:
                    self._cur = None
                    self.mode = "text"
                    return self._give_up(final, out) or True
                return False
            try:
                name = json.loads('"' + m.group(1) + '"')
            except ValueError:
                name = m.group(1)
            c = ToolCall(len(self.calls), self.ids(), name, "")
            self.calls.append(c)
            out.append(Delta(tool_index=c.index, tool_id=c.id, tool_name=c.name))
            cur.update(call=c, at=m.end())
        c, at = cur["call"], cur["at"]
        end = _value_end(s, at)
        text = s[at:len(s) if end is None else end]
        if end is None and not final:
            new = text[len(c.arguments):]
            # a scalar's or a number's last characters may still grow: sent when whole
            if new:
                c.arguments += new
                out.append(Delta(tool_index=c.index, arguments=new))
            return False
        new = text[len(c.arguments):]
        if new:
            c.arguments += new
            out.append(Delta(tool_index=c.index, arguments=new))
        if end is None:  # the reply ended inside the arguments
            self._cur, self.buf, self.mode = None, "", "text"
            return False
        rest = s[end:].lstrip()
        if not rest.startswith("}"):
            # more keys after the arguments (an "id"): up to the object's end
            obj_end = _value_end(s, 0)
            if obj_end is None:
                if final:
                    self._cur, self.buf, self.mode = None, "", "text"
                return False
            rest = s[obj_end:]
        else:
            rest = rest[1:]
        self._cur = None
        self.buf = self._after_call(rest)
        return True

    def _after_call(self, rest: str) -> str:
        """What follows a call's JSON, its closing marker taken off (hermes)."""
        fmt = self.fmt
        assert fmt is not None
        if fmt.name == "hermes":
            self._pending_close = True
        return rest

    def _give_up(self, final: bool, out: List[Delta]) -> bool:
        if not final:
            return False
        self.mode = "text"
        self._emit_text(self.buf, out)  # an unfinished call: its text is the content
        self.buf = ""
        return False

    def _call_obj(self, obj: Any, out: List[Delta], key: str, raw: str) -> bool:
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return False
        args = obj.get(key, obj.get("arguments", obj.get("parameters", {})))
        text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        c = ToolCall(len(self.calls), self.ids(), obj["name"], text)
        self.calls.append(c)
        out.append(Delta(tool_index=c.index, tool_id=c.id, tool_name=c.name))
        out.append(Delta(tool_index=c.index, arguments=text))
        return True

    # ---- the result ------------------------------------------------------------------

    def message(self) -> Dict[str, Any]:
        """OpenAI's assistant message of what was fed (``close`` first): ``content``
        (None when empty and there are calls), ``reasoning_content`` when there was
        any, ``tool_calls`` when there were any."""
        content = "".join(self.content)
        msg: Dict[str, Any] = {"role": "assistant",
                               "content": content.strip() if self.calls else content}
        if self.calls and not msg["content"]:
            msg["content"] = None
        if self.reasoning:
            msg["reasoning_content"] = "".join(self.reasoning).strip("\n")
        if self.calls:
            msg["tool_calls"] = [c.to_openai() for c in self.calls]
        return msg

    @property
    def finish_reason(self) -> Optional[str]:
        """``"tool_calls"`` when the reply made calls, else None (the generation's own)."""
        return "tool_calls" if self.calls else None


#: the start of a call's JSON, name first: {"name": "NAME", "arguments" (or "parameters"):
_HEADER = re.compile(r'\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*')


def _value_end(s: str, i: int) -> Optional[int]:
    """Where the JSON value starting at s[i] (after blanks) ends, or None while it is
    incomplete (an object, array or string: its closing character; a scalar: the
    character after it, which must be there)."""
    n = len(s)
    while i < n and s[i] in " \t\r\n":
        i += 1
    if i >= n:
        return None
    if s[i] not in "{[\"":
        j = i
        while j < n and s[j] not in ",}] \t\r\n":
            j += 1
        return j if j < n else None
    depth, in_str, esc = 0, False, False
    for j in range(i, n):
        ch = s[j]
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
                if depth == 0:
                    return j + 1
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return j + 1
    return None


def _json_prefix(s: str) -> Tuple[Any, int]:
    """(the JSON value at the start of ``s``, where it ends), or (None, 0) while incomplete."""
    try:
        obj, end = json.JSONDecoder().raw_decode(s)
    except ValueError:
        return None, 0
    return obj, end


def parse_reply(text: str, format: Any = None, starts_in_reasoning: bool = False,
                ids: Any = None) -> Dict[str, Any]:
    """OpenAI's assistant message of a whole reply (see :class:`ReplyParser`).

    Examples
    --------
    >>> parse_reply("<think>hm</think>Paris.")["reasoning_content"]
    'hm'
    """
    p = ReplyParser(format, starts_in_reasoning=starts_in_reasoning, ids=ids)
    p.feed(text)
    p.close()
    return p.message()
