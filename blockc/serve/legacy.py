"""OpenAI's legacy function calling on chat completions (``functions``, ``function_call``),
carried out as the ``tools`` / ``tool_choice`` it was replaced by, as OpenAI documents
the correspondence:

- request: ``functions: [F, ...]`` is ``tools: [{"type": "function", "function": F}, ...]``;
  ``function_call`` ``"none"`` / ``"auto"`` / ``{"name": N}`` is ``tool_choice``
  ``"none"`` / ``"auto"`` / ``{"type": "function", "function": {"name": N}}``; one call
  per reply (``parallel_tool_calls: false``: the legacy reply holds one);
- history: an assistant message's ``function_call: {name, arguments}`` is a
  ``tool_calls`` entry, a ``{"role": "function", "name", "content"}`` message the
  ``{"role": "tool", "tool_call_id", "content"}`` that answers the latest call;
- reply: ``message.function_call: {name, arguments}`` instead of ``tool_calls``,
  ``finish_reason: "function_call"``, and streamed as ``delta.function_call`` pieces
  (the name in the first, argument text after).

A request with both ``functions`` and ``tools`` (or ``function_call`` and
``tool_choice``) is refused with 400 naming the legacy field.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

from .._errors import BlockcValueError

__all__ = ["from_legacy", "legacy_message", "legacy_delta", "LEGACY_FIELDS", "LegacyError"]

#: the legacy fields and the ones they stand for
LEGACY_FIELDS = {"functions": "tools", "function_call": "tool_choice"}


class LegacyError(BlockcValueError):
    """A legacy field refused: ``param`` names it, ``status`` is the HTTP status (400 a
    value, 422 a JSON type)."""

    def __init__(self, message: str, param: str, status: int = 400):
        super().__init__(message)
        self.param, self.status = param, status


def _history(messages: Any) -> Any:
    """The messages with legacy function calls and results in the tools' shape."""
    if not isinstance(messages, list):
        return messages
    out, last, n = [], None, 0
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "assistant" and isinstance(
                m.get("function_call"), dict) and m.get("tool_calls") is None:
            last, n = f"call_{n}", n + 1
            fc = m["function_call"]
            m = {k: v for k, v in m.items() if k != "function_call"}
            m["tool_calls"] = [{"id": last, "type": "function", "function": dict(fc)}]
        elif isinstance(m, dict) and m.get("role") == "function":
            m = {**{k: v for k, v in m.items() if k != "role"}, "role": "tool"}
            if last is not None:
                m.setdefault("tool_call_id", last)
        out.append(m)
    return out


def from_legacy(body: Mapping[str, Any]) -> Tuple[Mapping[str, Any], bool]:
    """(the body with ``functions`` / ``function_call`` as ``tools`` / ``tool_choice``,
    True when it used them). A body without them is returned as it is.

    Raises
    ------
    LegacyError
        Both a legacy field and its replacement (400), ``functions`` not an array (422).
    """
    fns, call = body.get("functions"), body.get("function_call")
    if fns is None and call is None and not _has_legacy_history(body.get("messages")):
        return body, False
    for old, new in LEGACY_FIELDS.items():
        if body.get(old) is not None and body.get(new) is not None:
            raise LegacyError(f"'{old}' is the legacy form of '{new}': send one of them",
                              old)
    out = {k: v for k, v in body.items() if k not in LEGACY_FIELDS}
    out["messages"] = _history(body.get("messages"))
    if fns is not None:
        if not isinstance(fns, list):
            raise LegacyError(f"'functions' must be an array, got {type(fns).__name__}",
                              "functions", 422)
        out["tools"] = [{"type": "function", "function": f} for f in fns]
        out["parallel_tool_calls"] = False
    if call is not None:
        if isinstance(call, dict):
            out["tool_choice"] = {"type": "function", "function": dict(call)}
        else:
            out["tool_choice"] = call
    return out, fns is not None or call is not None


def _has_legacy_history(messages: Any) -> bool:
    return isinstance(messages, list) and any(
        isinstance(m, dict) and (m.get("role") == "function" or m.get("function_call") is not None)
        for m in messages)


def legacy_message(msg: Dict[str, Any]) -> Dict[str, Any]:
    """An assistant message with ``tool_calls`` as the legacy reply: its first call as
    ``function_call`` ({name, arguments})."""
    calls = msg.pop("tool_calls", None)
    if calls:
        fn = calls[0]["function"]
        msg["function_call"] = {"name": fn["name"], "arguments": fn["arguments"]}
    return msg


def legacy_delta(delta: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """A streamed ``delta`` with ``tool_calls`` as the legacy ``function_call`` piece
    (None: a piece of a call after the first, which the legacy reply has not)."""
    calls = delta.pop("tool_calls", None)
    if not calls:
        return delta
    c = calls[0]
    if c.get("index", 0) > 0:
        return delta or None
    fn = c.get("function", {})
    piece = {"arguments": fn.get("arguments", "")}
    if "name" in fn:
        piece["name"] = fn["name"]
    delta["function_call"] = piece
    return delta
