"""The OpenAI API's request and response types, declared once.

A request body (parsed JSON) becomes a :class:`ChatRequest` or :class:`CompletionRequest`
through :func:`parse_chat` / :func:`parse_completion`, which check every field the
server reads and raise :class:`APIError` with OpenAI's error shape otherwise: a field
of the wrong JSON type is 422, a value out of range 400 (both name the field).
No field is ignored: each is read, informational (``user``, ``metadata``...: they change
nothing a completion holds), or refused with 400 naming it (a field of OpenAI's the
server does not carry out yet, such as ``audio`` or ``functions``, when it asks for
something; a field no schema has). ``response_format``, ``tools``, ``tool_choice``,
``parallel_tool_calls`` and the extension ``chat_template_kwargs`` are read here (their
JSON types, the tools' shape, a tool_choice naming one of them);
:mod:`blockc.serve.agents` carries them out. The response builders return the JSON objects of
OpenAI's reference: ``chat.completion``, ``chat.completion.chunk``,
``text_completion``, ``model``, ``list`` and ``{"error": {...}}``.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from .._errors import BlockcTypeError, BlockcValueError
from ..generation.config import options
from ..text.tools import tool_choice_mode
from .legacy import LEGACY_FIELDS, LegacyError, from_legacy

__all__ = ["APIError", "SamplingRequest", "ChatRequest", "CompletionRequest", "parse_chat",
           "parse_completion", "EmbeddingRequest", "parse_embeddings", "parse_tokenize",
           "parse_detokenize", "MAX_EMBEDDING_INPUTS", "error_body", "usage", "chat_response",
           "chat_chunk",
           "completion_response", "model_object"]


class APIError(Exception):
    """An error a client gets as ``{"error": {message, type, param, code}}`` with ``status``."""

    def __init__(self, status: int, message: str, param: Optional[str] = None,
                 code: Optional[str] = None, type: str = "invalid_request_error",
                 headers: Optional[Mapping[str, str]] = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = (status, message, param,
                                                                       code, type)
        self.headers = dict(headers or {})

    def body(self) -> Dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type: str = "invalid_request_error", param: Optional[str] = None,
               code: Optional[str] = None) -> Dict[str, Any]:
    """OpenAI's error object."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


@dataclass
class SamplingRequest:
    """What every generating request carries (the chat and completion fields alike).

    ``generation`` holds the request's :class:`blockc.generation.GenerationConfig`
    options, checked: one per option that declares a request field
    (:func:`blockc.generation.config.options`: ``temperature``, ``top_p``, ``seed``,
    and the extensions ``top_k``, ``min_p``, ``repetition_penalty``), OpenAI's default
    where the body has none; ``req.temperature`` reads it there.
    """
    model: Optional[str]  # None: the request named none (a server of one model takes it)
    max_tokens: Optional[int] = None
    n: int = 1
    stream: bool = False
    include_usage: bool = False
    stop: List[str] = field(default_factory=list)
    logprobs: bool = False
    top_logprobs: int = 0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: Dict[int, float] = field(default_factory=dict)
    ignore_eos: bool = False  # an extension (vLLM's name)
    skip_special_tokens: bool = True  # an extension (vLLM's name)
    generation: Dict[str, Any] = field(default_factory=lambda: _generation({}))
    #: None, or OpenAI's ``response_format`` object other than ``{"type": "text"}``
    #: (and blockc's grammar forms: :mod:`blockc.serve.agents`)
    response_format: Optional[Dict[str, Any]] = None
    #: what the server made of the structured fields once the prompt was rendered (an
    #: :class:`blockc.serve.agents.ReplyPlan`; not a request field)
    plan: Any = None

    def __getattr__(self, name: str) -> Any:
        g = self.__dict__.get("generation")
        if g is not None and name in g:
            return g[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")


@dataclass
class ChatRequest(SamplingRequest):
    messages: List[Dict[str, Any]] = field(default_factory=list)
    add_generation_prompt: bool = True
    tools: List[Dict[str, Any]] = field(default_factory=list)
    #: ``tool_choice`` checked against ``tools``: "none", "auto", "required" or "named"
    tool_mode: str = "none"
    tool_name: Optional[str] = None  # the function a named tool_choice calls
    parallel_tool_calls: bool = True
    #: more variables for the chat template (an extension: vLLM's and llama-server's name)
    chat_template_kwargs: Dict[str, Any] = field(default_factory=dict)
    #: the request used the legacy ``functions`` / ``function_call`` (:mod:`.legacy`):
    #: the reply says ``function_call``
    legacy_functions: bool = False
    #: ``reasoning_effort``: passed to a chat template that reads it (else refused)
    reasoning_effort: Optional[str] = None


@dataclass
class CompletionRequest(SamplingRequest):
    prompt: Union[str, List[int]] = ""


# ---- field checks: 422 for a JSON type that is wrong, 400 for a value out of range -------

_JSON_TYPES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
               list: "an array", dict: "an object"}


def _type_error(name: str, want: str, got: Any) -> APIError:
    return APIError(422, f"'{name}' must be {want}, got {_json_type(got)}", param=name,
                    code="invalid_type")


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, float):
        return "a number"
    return _JSON_TYPES.get(type(v), type(v).__name__)


def _range(name: str, v: Any, lo: Optional[float], hi: Optional[float]) -> None:
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        span = (f"in [{lo}, {hi}]" if lo is not None and hi is not None
                else f">= {lo}" if lo is not None else f"<= {hi}")
        raise APIError(400, f"'{name}' must be {span}, got {v!r}", param=name,
                       code="invalid_value")


def _bool(body: Mapping[str, Any], name: str, default: bool) -> bool:
    v = body.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise _type_error(name, "a boolean", v)
    return v


def _int(body: Mapping[str, Any], name: str, default: Optional[int], lo: Optional[int] = None,
         hi: Optional[int] = None) -> Optional[int]:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, float) and v.is_integer():
        v = int(v)  # JSON has one number type: 3.0 is 3
    if isinstance(v, bool) or not isinstance(v, int):
        raise _type_error(name, "an integer", v)
    _range(name, v, lo, hi)
    return v


def _num(body: Mapping[str, Any], name: str, default: Optional[float], lo: Optional[float] = None,
         hi: Optional[float] = None) -> Optional[float]:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _type_error(name, "a number", v)
    v = float(v)
    if not math.isfinite(v):
        raise APIError(400, f"'{name}' must be finite, got {v!r}", param=name, code="invalid_value")
    _range(name, v, lo, hi)
    return v


def _check_unicode(x: Any, where: str) -> None:
    """Every string of parsed JSON (keys too) valid Unicode: JSON's ``\\ud800`` escapes
    parse to lone surrogates, which no text can hold (400, naming the field)."""
    stack = [(x, where)]
    while stack:
        v, at = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as e:
                raise APIError(400, f"'{at}' is not valid Unicode: a lone surrogate "
                               f"(U+{ord(v[e.start]):04X}) at character {e.start}",
                               param=at, code="invalid_value") from None
        elif isinstance(v, dict):
            for k, item in v.items():
                stack.append((k, at))
                stack.append((item, f"{at}.{k}" if at else str(k)))
        elif isinstance(v, list):
            stack.extend((item, f"{at}[{i}]") for i, item in enumerate(v))


def _object(body: Any) -> None:
    if not isinstance(body, dict):
        raise APIError(422, f"the request body must be a JSON object, got {_json_type(body)}",
                       code="invalid_type")
    _check_unicode(body, "")


def _model(body: Mapping[str, Any], served: Optional[Sequence[str]]) -> Optional[str]:
    """The ``model`` field: a string; one of ``served`` (404 naming them), or any name or
    none when ``served`` is None (the server's models are resolved by name elsewhere)."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise _type_error("model", "a string", model)
    if served is None:
        return model
    if model is None:
        raise APIError(400, "'model' is required", param="model", code="missing")
    if model not in served:
        raise APIError(404, f"The model '{model}' does not exist (this server has "
                       f"{', '.join(repr(s) for s in served)})", param="model",
                       code="model_not_found")
    return model


def _common(body: Any, served: Optional[Sequence[str]]) -> Dict[str, Any]:
    _object(body)
    model = _model(body, served)
    max_tokens = _int(body, "max_tokens", None, 1)
    max_tokens = _int(body, "max_completion_tokens", max_tokens, 1)
    stop = body.get("stop")
    if stop is None:
        stops: List[str] = []
    elif isinstance(stop, str):
        stops = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = list(stop)
    else:
        raise _type_error("stop", "a string or an array of strings", stop)
    if len(stops) > 4:
        raise APIError(400, f"'stop' takes at most 4 sequences, got {len(stops)}", param="stop",
                       code="invalid_value")
    if any(s == "" for s in stops):
        raise APIError(400, "'stop' sequences must not be empty", param="stop",
                       code="invalid_value")
    so = body.get("stream_options")
    if so is not None and not isinstance(so, dict):
        raise _type_error("stream_options", "an object", so)
    include_usage = _bool(so or {}, "include_usage", False)
    stream = _bool(body, "stream", False)
    if so is not None and not stream:
        raise APIError(400, "'stream_options' is only allowed with 'stream': true",
                       param="stream_options", code="invalid_value")
    bias = body.get("logit_bias")
    logit_bias: Dict[int, float] = {}
    if bias is not None:
        if not isinstance(bias, dict):
            raise _type_error("logit_bias", "an object", bias)
        for k, v in bias.items():
            try:
                tok = int(k)
            except (TypeError, ValueError):
                raise APIError(400, f"'logit_bias' keys must be token ids, got {k!r}",
                               param="logit_bias", code="invalid_value") from None
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise _type_error("logit_bias", "an object of numbers", v)
            if not math.isfinite(v):  # JSON's NaN would pass the range and poison the logits
                raise APIError(400, f"'logit_bias' values must be finite, got {v!r}",
                               param="logit_bias", code="invalid_value")
            _range("logit_bias", float(v), -100.0, 100.0)
            logit_bias[tok] = float(v)
    return dict(
        response_format=_response_format(body.get("response_format")),
        model=model, max_tokens=max_tokens, stream=stream, include_usage=include_usage,
        n=_int(body, "n", 1, 1, 16), stop=stops,
        frequency_penalty=_num(body, "frequency_penalty", 0.0, -2.0, 2.0),
        presence_penalty=_num(body, "presence_penalty", 0.0, -2.0, 2.0),
        logit_bias=logit_bias, ignore_eos=_bool(body, "ignore_eos", False),
        skip_special_tokens=_bool(body, "skip_special_tokens", True),
        generation=_generation(body))


#: the forms ``response_format.type`` takes: OpenAI's, and blockc's extensions (the
#: grammar engine's own: a regular expression, a Lark grammar, llama.cpp's GBNF)
RESPONSE_FORMATS = ("text", "json_object", "json_schema", "regex", "lark", "gbnf")


def _response_format(rf: Any) -> Optional[Dict[str, Any]]:
    """The response_format object's shape (its grammar is compiled later, when a bad
    schema or grammar is a 400 naming the field too); None for absent or text."""
    if rf is None:
        return None
    if not isinstance(rf, dict):
        raise _type_error("response_format", "an object", rf)
    kind = rf.get("type")
    if kind not in RESPONSE_FORMATS:
        raise APIError(400, f"'response_format.type' must be one of {', '.join(RESPONSE_FORMATS)}"
                       f", got {kind!r}", param="response_format", code="invalid_value")
    if kind == "text":
        return None
    if kind == "json_schema":
        js = rf.get("json_schema")
        if not isinstance(js, dict):
            raise _type_error("response_format.json_schema", "an object", js)
        if not isinstance(js.get("schema", {}), (dict, bool)):
            raise _type_error("response_format.json_schema.schema", "an object",
                              js.get("schema"))
        if not isinstance(js.get("strict", False), (bool, type(None))):
            raise _type_error("response_format.json_schema.strict", "a boolean",
                              js.get("strict"))
    elif kind in ("regex", "lark", "gbnf"):
        if not isinstance(rf.get(kind), str):
            raise _type_error(f"response_format.{kind}", "a string", rf.get(kind))
    return dict(rf)


def _tools(body: Mapping[str, Any]) -> Dict[str, Any]:
    """``tools``, ``tool_choice``, ``parallel_tool_calls`` and ``chat_template_kwargs``
    checked (400 or 422 naming the field)."""
    tools = body.get("tools")
    if tools is None:
        tools = []
    if not isinstance(tools, list):
        raise _type_error("tools", "an array", tools)
    choice = body.get("tool_choice")
    if choice is not None and not isinstance(choice, (str, dict)):
        raise _type_error("tool_choice", "a string or an object", choice)
    try:
        tool_choice_mode(None, tools)  # the tools' shape first: a bad one names 'tools'
    except (BlockcTypeError, BlockcValueError) as e:
        raise APIError(400, str(e), param="tools", code="invalid_value") from None
    try:
        mode, name = tool_choice_mode(choice, tools)
    except (BlockcTypeError, BlockcValueError) as e:
        raise APIError(400, str(e), param="tool_choice", code="invalid_value") from None
    kw = body.get("chat_template_kwargs")
    if kw is None:
        kw = {}
    if not isinstance(kw, dict):
        raise _type_error("chat_template_kwargs", "an object", kw)
    clash = sorted(set(kw) & {"messages", "add_generation_prompt", "tools", "max_chars",
                              "timeout"})
    if clash:
        raise APIError(400, f"'chat_template_kwargs' must not set {clash[0]!r} (a request "
                       "field of its own)", param="chat_template_kwargs", code="invalid_value")
    return dict(tools=tools, tool_mode=mode, tool_name=name,
                parallel_tool_calls=_bool(body, "parallel_tool_calls", True),
                chat_template_kwargs=kw)


def _generation(body: Mapping[str, Any]) -> Dict[str, Any]:
    """The GenerationConfig options a body gives, made from their declarations (each
    option's ``api``): the JSON type (422), the API's range where it differs from the
    option's (OpenAI's temperature <= 2), then the option's own check (400), each error
    naming the field; absent fields take the API's default (OpenAI's)."""
    out: Dict[str, Any] = {}
    for name, (o, _) in options().items():
        a = o.api
        if a is None:
            continue
        v = (_int if o.kind == "int" else _num)(body, name, a.default, a.lo, a.hi)
        if v is not None:
            if a.least is not None:
                v = max(v, a.least)
            try:
                v = o.check(v, f"'{name}'")
            except (TypeError, ValueError) as e:
                raise APIError(400, str(e), param=name, code="invalid_value") from None
        out[name] = v
    return out


#: The fields each endpoint reads (OpenAI's, and blockc's extensions); the sampling
#: options' fields come from their GenerationConfig declarations.
_READ = {
    "chat": ("model", "messages", "max_tokens", "max_completion_tokens", "stop", "stream",
             "stream_options", "logit_bias", "n", "frequency_penalty", "presence_penalty",
             "logprobs", "top_logprobs", "ignore_eos", "skip_special_tokens",
             "add_generation_prompt", "response_format", "tools", "tool_choice",
             "parallel_tool_calls", "chat_template_kwargs", "reasoning_effort"),
    "completion": ("model", "prompt", "max_tokens", "stop", "stream", "stream_options",
                   "logit_bias", "n", "frequency_penalty", "presence_penalty", "logprobs",
                   "echo", "ignore_eos", "skip_special_tokens", "response_format"),
    "embeddings": ("model", "input", "encoding_format", "dimensions"),
    "tokenize": ("model", "content", "add_special", "with_pieces"),
    "detokenize": ("model", "tokens"),
}
#: OpenAI's values of ``reasoning_effort``
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high")
#: Fields that change nothing a completion holds (who asks, where OpenAI would bill or keep
#: it): read and accepted as they are.
_INFORMATIONAL = ("user", "metadata", "store", "service_tier", "safety_identifier",
                  "prompt_cache_key")
#: OpenAI's fields the server does not carry out, each with the values that ask for
#: nothing (besides absent and null): any other value is refused with 400 naming the field,
#: never ignored (a client asking for JSON or a tool call must not get plain text).
_NOT_CARRIED_OUT: Dict[str, Dict[str, Sequence[Any]]] = {
    "chat": {"modalities": (["text"],), "audio": (), "prediction": (),
             "verbosity": (), "web_search_options": ()},
    "completion": {"best_of": (1,), "suffix": ("",)},
    "embeddings": {}, "tokenize": {}, "detokenize": {},
}


def _account_for_every_field(body: Mapping[str, Any], kind: str) -> None:
    """Every field of a request is read, informational, or refused (400 naming it): a
    field the server would otherwise skip over changes what the client gets silently."""
    sampling = ({name for name, (o, _) in options().items() if o.api is not None}
                if kind in ("chat", "completion") else ())
    for name, v in body.items():
        if name in _READ[kind] or name in sampling or name in _INFORMATIONAL:
            continue
        neutral = _NOT_CARRIED_OUT[kind].get(name)
        if neutral is not None:
            if v is None or v in neutral:
                continue
            raise APIError(400, f"'{name}' is not supported by this server yet (it would be "
                                f"ignored: refused instead)", param=name, code="unsupported")
        raise APIError(400, f"unknown field '{name}' (not a {kind} request field nor "
                            "a blockc extension: docs/serving.md lists them)", param=name,
                       code="unknown_field")


def _message_tool_calls(calls: Any, where: str) -> List[Dict[str, Any]]:
    """An assistant message's ``tool_calls`` for the chat template: each
    ``{id, type, function: {name, arguments}}`` with the arguments' JSON text read into
    an object, as chat templates expect them (they print ``arguments | tojson``: vLLM
    and transformers' examples hand them objects)."""
    if not isinstance(calls, list):
        raise _type_error(where, "an array", calls)
    out = []
    for i, c in enumerate(calls):
        at = f"{where}[{i}]"
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise APIError(400, f"'{at}' must be {{\"type\": \"function\", \"function\": "
                           "{\"name\": ..., \"arguments\": ...}}", param=at, code="invalid_value")
        args = fn.get("arguments", "{}")
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                raise APIError(400, f"'{at}.function.arguments' is not JSON", param=at,
                               code="invalid_value") from None
        out.append({**c, "type": c.get("type", "function"), "function": {**fn, "arguments": args}})
    return out


def parse_chat(body: Any, served: Optional[Sequence[str]]) -> ChatRequest:
    """The checked fields of a ``POST /v1/chat/completions`` body.

    ``served``: the model names the server answers to (an unknown one is 404), or None
    (any name or none: the caller resolves it).

    Raises
    ------
    APIError
        A missing, mistyped or out-of-range field; an unknown model (404).
    """
    try:  # functions / function_call: as the tools / tool_choice they stand for
        body, legacy = from_legacy(body) if isinstance(body, dict) else (body, False)
    except LegacyError as e:
        raise APIError(e.status, str(e), param=e.param, code="invalid_value") from None
    kw = _common(body, served)
    _account_for_every_field(body, "chat")
    effort = body.get("reasoning_effort")
    if effort is not None and effort not in REASONING_EFFORTS:
        raise APIError(400, f"'reasoning_effort' must be one of {list(REASONING_EFFORTS)}, got "
                       f"{effort!r}", param="reasoning_effort", code="invalid_value")
    msgs = body.get("messages")
    if msgs is None:
        raise APIError(400, "'messages' is required", param="messages", code="missing")
    if not isinstance(msgs, list):
        raise _type_error("messages", "an array", msgs)
    if not msgs:
        raise APIError(400, "'messages' must not be empty", param="messages", code="invalid_value")
    out = []
    for i, m in enumerate(msgs):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise _type_error(where, "an object", m)
        if not isinstance(m.get("role"), str):
            raise _type_error(f"{where}.role", "a string", m.get("role"))
        content = m.get("content")
        if isinstance(content, list):  # content parts: the text ones, joined
            texts = []
            for part in content:
                if not (isinstance(part, dict) and part.get("type") == "text"
                        and isinstance(part.get("text"), str)):
                    raise APIError(400, f"{where}.content: only text parts are supported",
                                   param=f"{where}.content", code="invalid_value")
                texts.append(part["text"])
            content = "".join(texts)
        elif content is not None and not isinstance(content, str):
            raise _type_error(f"{where}.content", "a string or an array of text parts", content)
        m = {**m, "content": content if content is not None else ""}
        if m.get("tool_calls") is not None:
            m["tool_calls"] = _message_tool_calls(m["tool_calls"], f"{where}.tool_calls")
        out.append(m)
    logprobs = _bool(body, "logprobs", False)
    top = _int(body, "top_logprobs", 0, 0, 20)
    if top and not logprobs:
        raise APIError(400, "'top_logprobs' needs 'logprobs': true", param="top_logprobs",
                       code="invalid_value")
    try:
        tools = _tools(body)
    except APIError as e:  # named as the request named it
        if legacy:
            back = {new: old for old, new in LEGACY_FIELDS.items()}
            e.param = back.get(e.param, e.param)
            e.message = e.message.replace("tool_choice", "function_call")
        raise
    return ChatRequest(messages=out, logprobs=logprobs, top_logprobs=top,
                       add_generation_prompt=_bool(body, "add_generation_prompt", True),
                       legacy_functions=legacy, reasoning_effort=effort, **tools, **kw)


def parse_completion(body: Any, served: Optional[Sequence[str]]) -> CompletionRequest:
    """The checked fields of a ``POST /v1/completions`` body (one prompt: a string or
    an array of token ids).

    Raises
    ------
    APIError
        As :func:`parse_chat`; a list of several prompts (400).
    """
    kw = _common(body, served)
    _account_for_every_field(body, "completion")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # one prompt in an array
    if prompt is None:
        raise APIError(400, "'prompt' is required", param="prompt", code="missing")
    if isinstance(prompt, list):
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            raise APIError(400, "'prompt' must be a string, or one array of token ids "
                           "(several prompts: one request each)", param="prompt",
                           code="invalid_value")
        if not prompt:
            raise APIError(400, "'prompt' must not be empty", param="prompt", code="invalid_value")
    elif not isinstance(prompt, str):
        raise _type_error("prompt", "a string or an array of token ids", prompt)
    if _bool(body, "echo", False):
        raise APIError(400, "'echo' is not supported", param="echo", code="unsupported")
    top = _int(body, "logprobs", None, 0, 5)
    return CompletionRequest(prompt=prompt, logprobs=top is not None, top_logprobs=top or 0, **kw)


@dataclass
class EmbeddingRequest:
    """``POST /v1/embeddings``: each input a text or token ids; ``encoding_format``
    "float" or "base64" (little-endian float32 bytes); ``dimensions``: the first that many
    features, renormalised."""
    model: Optional[str]
    inputs: List[Union[str, List[int]]]
    encoding_format: str = "float"
    dimensions: Optional[int] = None


#: at most this many inputs in one embeddings request (OpenAI's limit)
MAX_EMBEDDING_INPUTS = 2048


def _ids(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in v)


def parse_embeddings(body: Any, served: Optional[Sequence[str]]) -> EmbeddingRequest:
    """The checked fields of a ``POST /v1/embeddings`` body: ``input`` a string, an array
    of strings, an array of token ids or an array of such arrays (none empty).

    Raises
    ------
    APIError
        A missing, mistyped or empty input, an unknown encoding, ``dimensions`` < 1, a
        field no schema has.
    """
    _object(body)
    model = _model(body, served)
    _account_for_every_field(body, "embeddings")
    x = body.get("input")
    if x is None:
        raise APIError(400, "'input' is required", param="input", code="missing")
    if isinstance(x, str) or (_ids(x) and x):
        inputs: List[Union[str, List[int]]] = [x]
    elif isinstance(x, list) and x and all(isinstance(v, str) or _ids(v) for v in x):
        inputs = list(x)
    else:
        raise _type_error("input", "a string, an array of strings, an array of token ids or "
                          "an array of arrays of token ids (none empty)", x)
    if len(inputs) > MAX_EMBEDDING_INPUTS:
        raise APIError(400, f"'input' holds {len(inputs)} inputs, more than "
                       f"{MAX_EMBEDDING_INPUTS}", param="input", code="invalid_value")
    for i, v in enumerate(inputs):
        if len(v) == 0:
            raise APIError(400, f"'input[{i}]' is empty", param="input", code="invalid_value")
    fmt = body.get("encoding_format")
    if fmt is None:
        fmt = "float"
    if fmt not in ("float", "base64"):
        raise APIError(400, f"'encoding_format' must be 'float' or 'base64', got {fmt!r}",
                       param="encoding_format", code="invalid_value")
    return EmbeddingRequest(model=model, inputs=inputs, encoding_format=fmt,
                            dimensions=_int(body, "dimensions", None, 1))


def parse_tokenize(body: Any, served: Optional[Sequence[str]]) -> Dict[str, Any]:
    """``POST /tokenize`` (llama-server's shape): {model, content, add_special, with_pieces}."""
    _object(body)
    model = _model(body, served)
    _account_for_every_field(body, "tokenize")
    content = body.get("content")
    if not isinstance(content, str):
        raise (_type_error("content", "a string", content) if content is not None
               else APIError(400, "'content' is required", param="content", code="missing"))
    return {"model": model, "content": content,
            "add_special": _bool(body, "add_special", False),
            "with_pieces": _bool(body, "with_pieces", False)}


def parse_detokenize(body: Any, served: Optional[Sequence[str]]) -> Dict[str, Any]:
    """``POST /detokenize`` (llama-server's shape): {model, tokens}."""
    _object(body)
    model = _model(body, served)
    _account_for_every_field(body, "detokenize")
    tokens = body.get("tokens")
    if not _ids(tokens):
        raise (_type_error("tokens", "an array of token ids", tokens) if tokens is not None
               else APIError(400, "'tokens' is required", param="tokens", code="missing"))
    return {"model": model, "tokens": list(tokens)}


# ---- responses ------------------------------------------------------------------------

def usage(prompt: int, completion: int) -> Dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def chat_response(rid: str, created: int, model: str, choices: List[Dict[str, Any]],
                  use: Dict[str, int]) -> Dict[str, Any]:
    """``chat.completion``; each choice {index, message {role, content}, logprobs, finish_reason}."""
    return {"id": rid, "object": "chat.completion", "created": created, "model": model,
            "choices": choices, "usage": use, "system_fingerprint": None}


def chat_chunk(rid: str, created: int, model: str, choices: List[Dict[str, Any]],
               use: Optional[Dict[str, int]] = None) -> Dict[str, Any]:
    """``chat.completion.chunk``; each choice {index, delta, logprobs, finish_reason}."""
    return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": choices, "usage": use, "system_fingerprint": None}


def completion_response(rid: str, created: int, model: str, choices: List[Dict[str, Any]],
                        use: Optional[Dict[str, int]]) -> Dict[str, Any]:
    """``text_completion`` (also each streamed chunk); choice {index, text, logprobs,
    finish_reason}."""
    return {"id": rid, "object": "text_completion", "created": created, "model": model,
            "choices": choices, "usage": use, "system_fingerprint": None}


def model_object(name: str, created: int) -> Dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "blockc"}
