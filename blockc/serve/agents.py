"""What agent frameworks send and expect back: structured output, tool calls, reasoning.

One request's plan (:class:`ReplyPlan`, made by :func:`plan_reply` once its prompt is
rendered) tells the server

- the grammar every choice is decoded under (a :class:`blockc.generation.constraints.
  Constraint`; each choice its own :meth:`~ReplyPlan.row_constraint` state, masked and
  advanced by :class:`blockc.serve.sampling.RowSampler`): ``response_format``
  ``json_object`` / ``json_schema`` (``strict`` or not, the output validates), blockc's
  extensions ``{"type": "regex", "regex": ...}``, ``{"type": "lark", "lark": ...}``,
  ``{"type": "gbnf", "gbnf": ...}``, or the tool call that ``tool_choice`` ``"required"``
  or a named function asks for (the family's syntax around arguments that validate
  against the function's ``parameters``);
- how the reply's text is read back (:class:`ReplyShaper` over
  :class:`blockc.text.tools.ReplyParser`): ``tool_calls`` in the chat template's format
  (:func:`blockc.text.tools.detect_format`; Hermes' ``<tool_call>`` when a required or
  named call meets a template that shows none), ``<think>`` ... ``</think>`` as
  ``reasoning_content`` when the template or the vocabulary has the tag, the rest as
  ``content``;
- which special tokens the text keeps (the markers of the format and of thinking, when
  the tokenizer holds them as control tokens, which ``skip_special_tokens`` would drop).

:func:`template_variables` gives the chat template what transformers passes it:
``tools=`` (unless ``tool_choice`` is ``"none"``) and the request's
``chat_template_kwargs`` (``enable_thinking``...).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Sequence

from .._errors import BlockcTypeError, BlockcValueError
from ..generation.constraints import Constraint
from ..text.tools import (FORMATS, THINK_CLOSE, THINK_OPEN, ReplyParser, ToolFormat,
                          detect_format, opens_reasoning)
from .legacy import legacy_delta, legacy_message
from .types import APIError, ChatRequest, SamplingRequest

__all__ = ["ReplyPlan", "ReplyShaper", "template_variables", "check_reasoning_effort",
           "plan_reply"]

#: the format of required / named calls when the chat template shows none
FALLBACK_FORMAT = "hermes"


@dataclass(frozen=True)
class ReplyPlan:
    """What :func:`plan_reply` made of a request's structured fields.

    Attributes
    ----------
    constraint : Constraint or None
        The grammar every choice is decoded under (compiled once; each choice its own
        state by :meth:`row_constraint`).
    constraint_ends : frozenset of int
        The tokens that end a completed grammar.
    format : ToolFormat or None
        The tool-call syntax the reply is parsed in (None: no tool calls).
    reasoning : bool
        Split ``<think>`` blocks into ``reasoning_content``.
    starts_in_reasoning : bool
        The prompt left ``<think>`` open: the reply begins as reasoning.
    parallel : bool
        ``parallel_tool_calls``: False keeps the first call only.
    keep_ids, drop_ids : frozenset of int
        The special tokens the reply's text keeps (the markers) and the other ones
        (dropped when ``skip_special_tokens``).
    legacy : bool
        The request used ``functions``: the call is told as ``function_call``
        (:mod:`blockc.serve.legacy`).
    """
    constraint: Optional[Constraint] = None
    constraint_ends: FrozenSet[int] = frozenset()
    format: Optional[ToolFormat] = None
    reasoning: bool = False
    starts_in_reasoning: bool = False
    parallel: bool = True
    keep_ids: FrozenSet[int] = frozenset()
    drop_ids: FrozenSet[int] = frozenset()
    legacy: bool = False

    @property
    def parses(self) -> bool:
        """Whether the reply is read back (tool calls or reasoning), not sent as it is."""
        return self.format is not None or self.reasoning

    def row_constraint(self) -> Optional[Constraint]:
        """A choice's own constraint state (None: unconstrained)."""
        return None if self.constraint is None else self.constraint.fresh()

    def decoder(self, tokenizer: Any, skip_special_tokens: bool) -> Callable[[List[int]], str]:
        """The text of a choice's ids: the markers kept, the other special tokens
        dropped when ``skip_special_tokens``."""
        if not self.keep_ids:
            return lambda ids: tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
        drop = self.drop_ids if skip_special_tokens else frozenset()

        def decode(ids: List[int]) -> str:
            kept = [t for t in ids if t not in drop]
            return tokenizer.decode(kept, skip_special_tokens=False) if kept else ""
        return decode

    def shaper(self) -> Optional["ReplyShaper"]:
        """A choice's reply reader (None when the text is sent as it is)."""
        return ReplyShaper(self) if self.parses else None


class ReplyShaper:
    """One choice's generated text in, OpenAI's deltas and message out (a
    :class:`blockc.text.tools.ReplyParser` in the plan's format; with
    ``parallel_tool_calls`` false the calls after the first are dropped)."""

    def __init__(self, plan: ReplyPlan):
        self.parser = ReplyParser(plan.format, starts_in_reasoning=plan.starts_in_reasoning,
                                  reasoning=plan.reasoning)
        self.one = not plan.parallel
        self.legacy = plan.legacy

    def _out(self, deltas: Sequence[Any]) -> List[Dict[str, Any]]:
        out = []
        for d in deltas:
            if self.one and d.tool_index is not None and d.tool_index > 0:
                continue
            o = d.to_openai()
            if o and self.legacy:
                o = legacy_delta(o)
            if o:
                out.append(o)
        return out

    def feed(self, piece: str) -> List[Dict[str, Any]]:
        """The ``delta`` objects that ``piece`` completes."""
        return self._out(self.parser.feed(piece))

    def close(self) -> List[Dict[str, Any]]:
        """The ``delta`` objects of what was held back, at the end."""
        return self._out(self.parser.close())

    def message(self) -> Dict[str, Any]:
        """OpenAI's assistant ``message`` (``close`` first)."""
        msg = self.parser.message()
        if self.one and msg.get("tool_calls"):
            msg["tool_calls"] = msg["tool_calls"][:1]
        msg["refusal"] = None
        return legacy_message(msg) if self.legacy else msg

    def finish_reason(self, reason: Optional[str]) -> Optional[str]:
        """``"tool_calls"`` (legacy: ``"function_call"``) when the reply made calls and
        ended on its own, else ``reason``."""
        if self.parser.calls and reason == "stop":
            return "function_call" if self.legacy else "tool_calls"
        return reason


def template_variables(req: ChatRequest) -> Dict[str, Any]:
    """The chat template's variables beyond the messages: ``tools`` as transformers
    passes them (None when there are none or ``tool_choice`` is ``"none"``) and the
    request's ``chat_template_kwargs``, and ``reasoning_effort`` when the request
    gives it (:func:`check_reasoning_effort`: only to a template that reads it)."""
    tools = req.tools if req.tools and req.tool_mode != "none" else None
    out = {**req.chat_template_kwargs, "tools": tools}
    if req.reasoning_effort is not None:
        out["reasoning_effort"] = req.reasoning_effort
    return out


def check_reasoning_effort(req: ChatRequest, template: Any) -> None:
    """Refuse a ``reasoning_effort`` the chat template has no switch for (it would be
    ignored: 400 naming it). A template that reads the variable ``reasoning_effort``
    (gpt-oss's does) gets it."""
    if req.reasoning_effort is None:
        return
    if not re.search(r"\breasoning_effort\b", getattr(template, "source", "") or ""):
        raise APIError(400, "'reasoning_effort' is not supported by this model: its chat "
                       "template has no reasoning_effort switch (it would be ignored: refused "
                       "instead; chat_template_kwargs sets a template's own switches, such as "
                       "enable_thinking)", param="reasoning_effort", code="unsupported")


def _specials(tokenizer: Any) -> Dict[str, int]:
    """The tokenizer's special (control) tokens: text -> id."""
    back = getattr(tokenizer, "backend", None)
    get = getattr(back, "get_added_tokens_decoder", None)
    if get is None:
        return {}
    return {t.content: int(i) for i, t in get().items() if getattr(t, "special", False)}


def _has_thinking(template: Any, tokenizer: Any) -> bool:
    src = getattr(template, "source", "") or ""
    if THINK_OPEN in src:
        return True
    try:
        return tokenizer.token_to_id(THINK_OPEN) is not None
    except (AttributeError, TypeError, ValueError):
        return False


def _grammar_error(e: Exception, param: str) -> APIError:
    if isinstance(e, ImportError):
        return APIError(400, f"'{param}' needs constrained decoding, which this server cannot "
                        f"do: {e}", param=param, code="unsupported")
    return APIError(400, f"'{param}': {e}", param=param, code="invalid_value")


def plan_reply(req: SamplingRequest, tokenizer: Any, template: Any = None,
               prompt: Optional[str] = None, end_ids: Sequence[int] = ()) -> ReplyPlan:
    """The plan of one request (run where its prompt is made: compiling a grammar reads
    the vocabulary once per tokenizer).

    Parameters
    ----------
    req : ChatRequest or CompletionRequest
    tokenizer : blockc.text.Tokenizer
    template : blockc.text.ChatTemplate, optional
        The chat template (a chat request's).
    prompt : str, optional
        The rendered prompt (whether it leaves ``<think>`` open).
    end_ids : sequence of int
        The tokens that end a generation (they end a completed grammar).

    Returns
    -------
    ReplyPlan

    Raises
    ------
    APIError
        400 naming the field: a schema or grammar the engine refuses, a function's
        parameters it refuses, both a response_format and an enforced tool call, the
        engine not installed.
    """
    ends = tuple(sorted(int(t) for t in end_ids)) or None
    constraint = None
    if req.response_format is not None:
        try:
            constraint = Constraint.from_response_format(req.response_format, tokenizer, ends)
        except (BlockcTypeError, BlockcValueError, ImportError) as e:
            raise _grammar_error(e, "response_format") from None
    if not isinstance(req, ChatRequest):
        return ReplyPlan(constraint, _ends(constraint))
    fmt = detect_format(template) if template is not None and req.tool_mode != "none" else None
    if req.tool_mode in ("required", "named"):
        if constraint is not None:
            raise APIError(400, "'tool_choice' asks for a tool call and 'response_format' for "
                           "a format: one reply cannot be both", param="tool_choice",
                           code="invalid_value")
        fmt = fmt or FORMATS[FALLBACK_FORMAT]
        choice: Any = ("required" if req.tool_mode == "required" else
                       {"type": "function", "function": {"name": req.tool_name}})
        try:
            constraint = Constraint.tool_calls(req.tools, choice, tokenizer, fmt, ends,
                                               parallel=req.parallel_tool_calls)
        except (BlockcTypeError, BlockcValueError, ImportError) as e:
            raise _grammar_error(e, "tools") from None
    # a grammar holds the whole reply: no thinking before it
    reasoning = constraint is None and _has_thinking(template, tokenizer)
    starts = reasoning and prompt is not None and opens_reasoning(prompt)
    markers = set()
    if fmt is not None:
        markers |= {fmt.begin, fmt.end, fmt.call_open.strip(), fmt.call_close.strip(),
                    *fmt.starts, "</tool_call>"}
    if reasoning:
        markers |= {THINK_OPEN, THINK_CLOSE}
    specials = _specials(tokenizer)
    keep = frozenset(i for s, i in specials.items() if s in markers)
    return ReplyPlan(constraint, _ends(constraint), fmt, reasoning, starts,
                     req.parallel_tool_calls, keep, frozenset(specials.values()) - keep,
                     req.legacy_functions)


def _ends(constraint: Optional[Constraint]) -> FrozenSet[int]:
    return frozenset() if constraint is None else frozenset(constraint.end_ids)
