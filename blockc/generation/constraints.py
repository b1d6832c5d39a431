"""Constrained decoding: a token mask on each step's logits, so that what is generated
always matches a grammar (structured output, tool calls).

A :class:`Constraint` is the state of one sequence under a grammar: :meth:`~Constraint.mask`
sets the logits of every token the grammar does not allow next to -inf (in place, from
the sequence's own tokens only: the same bits whatever the batch, so a constrained row
gets the tokens it gets alone), :meth:`~Constraint.advance` takes the token chosen, and
:meth:`~Constraint.is_done` tells the grammar is complete and has taken its end token.
Made from

- a JSON Schema (:meth:`Constraint.json_schema`: OpenAI's ``response_format`` of type
  ``json_schema``; ``strict`` or not, the output validates),
- any JSON object (:meth:`Constraint.json_object`: ``json_object``),
- the engine's own grammar forms (:meth:`Constraint.regex`, :meth:`Constraint.lark`,
  :meth:`Constraint.gbnf`),
- a tool call (:meth:`Constraint.tool_calls`: ``tool_choice`` ``"required"`` or a named
  function, in the model family's tool-call syntax of :mod:`blockc.text.tools`, its
  arguments matching the function's parameters schema),

or an OpenAI request's ``response_format`` (:meth:`Constraint.from_response_format`).
``GPT.generate`` / ``GPT.stream`` take one as ``constraint=`` (every row its own
:meth:`~Constraint.fresh` state).

The engine is llguidance (MIT; docs/design.md says why it was chosen over xgrammar and
outlines-core): ``pip install blockc[structured]``.
"""
from __future__ import annotations

import json
import weakref
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .._errors import BlockcTypeError, BlockcValueError
from ..text.tools import ToolFormat, get_format, tool_specs

__all__ = ["Constraint", "engine", "ENGINE_EXTRA"]

#: the pyproject extra that installs the grammar engine
ENGINE_EXTRA = "structured"

#: LLTokenizer per (tokenizer, end ids): building one reads the whole vocabulary
_TOKENIZERS: "weakref.WeakKeyDictionary[Any, Dict[Tuple[int, ...], Any]]" = (
    weakref.WeakKeyDictionary())


def engine() -> Any:
    """The grammar engine's module (llguidance).

    Raises
    ------
    ImportError
        It is not installed: the message names blockc's extra that installs it.
    """
    try:
        import llguidance
        import llguidance.numpy  # noqa: F401  (the bitmask helpers)
    except ImportError:
        raise ImportError("constrained decoding (response_format, tool_choice required or a "
                          "named function) needs the grammar engine llguidance: "
                          f"pip install 'blockc[{ENGINE_EXTRA}]'") from None
    return llguidance


def _backend(tokenizer: Any) -> Any:
    """The tokenizers.Tokenizer of a blockc Tokenizer (or the tokenizers.Tokenizer given)."""
    b = getattr(tokenizer, "backend", None)
    if b is not None and hasattr(b, "to_str"):
        return b
    if hasattr(tokenizer, "to_str") and hasattr(tokenizer, "get_vocab_size"):
        return tokenizer
    raise BlockcTypeError("tokenizer must be a blockc.text.Tokenizer (or a tokenizers.Tokenizer), "
                          f"got {type(tokenizer).__name__}")


def _end_ids(tokenizer: Any, end_ids: Union[int, Sequence[int], None]) -> Tuple[int, ...]:
    if end_ids is None:
        end_ids = getattr(tokenizer, "eos_token_id", None)
        if end_ids is None:
            raise BlockcValueError("end_ids: the tokenizer names no end token; give the ids that "
                                   "end a generation (the model's end-of-turn id)")
    ids = (end_ids,) if isinstance(end_ids, (int, np.integer)) else tuple(end_ids)
    if not ids or not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) and i >= 0
                          for i in ids):
        raise BlockcValueError(f"end_ids must be a token id or a non-empty sequence of them, "
                               f"got {end_ids!r}")
    return tuple(int(i) for i in ids)


def _lltokenizer(tokenizer: Any, ends: Tuple[int, ...]) -> Tuple[Any, int]:
    """(llguidance's tokenizer, the vocabulary size) of ``tokenizer``, built once."""
    ll = engine()
    back = _backend(tokenizer)
    try:
        per = _TOKENIZERS.setdefault(tokenizer, {})
    except TypeError:  # not weakly referable: built every time
        per = {}
    if ends not in per:
        n = int(back.get_vocab_size())
        if max(ends) >= n:
            raise BlockcValueError(f"end_ids: {max(ends)} is not a token of the tokenizer "
                                   f"({n} words)")
        try:
            per[ends] = (ll.LLTokenizer(back.to_str(), n_vocab=n, eos_token=list(ends)), n)
        except (ValueError, RuntimeError) as e:
            raise BlockcValueError(f"the grammar engine cannot read this tokenizer: {e}") from None
    return per[ends]


def _specials(tokenizer: Any) -> Dict[str, int]:
    """The tokenizer's special (control) tokens: text -> id."""
    back = _backend(tokenizer)
    added = back.get_added_tokens_decoder() if hasattr(back, "get_added_tokens_decoder") else {}
    return {t.content: int(i) for i, t in added.items() if getattr(t, "special", False)}


def _lark_literal(tokenizer: Any, text: str) -> str:
    """Lark items matching ``text``: each special token in it as that token (``<[id]>``:
    a control token's spelling is not the token), the rest as quoted strings."""
    specials = _specials(tokenizer)
    if not text:
        return ""
    found = sorted((s for s in specials if s and s in text), key=len, reverse=True)
    if not found:
        return json.dumps(text)
    import re
    parts = re.split("(" + "|".join(map(re.escape, found)) + ")", text)
    return " ".join(f"<[{specials[p]}]>" if p in specials else json.dumps(p) for p in parts if p)


class Constraint:
    """The state of one sequence under a grammar (see the module's docstring).

    Made by the class methods; :meth:`fresh` gives another sequence's state at the
    start, sharing the compiled grammar.

    Examples
    --------
    >>> c = Constraint.json_schema({"type": "object"}, tok)          # doctest: +SKIP
    >>> m.generate(prompt, 40, constraint=c)                          # doctest: +SKIP
    """

    def __init__(self, grammar: str, tokenizer: Any, end_ids: Union[int, Sequence[int], None] = None,
                 *, what: str = "grammar"):
        ll = engine()
        _backend(tokenizer)  # a tokenizer before anything is read from it
        self._ends = _end_ids(tokenizer, end_ids)
        self._lltok, self.vocab = _lltokenizer(tokenizer, self._ends)
        self.tokenizer, self.grammar, self.what = tokenizer, grammar, what
        err = ll.LLMatcher.validate_grammar(grammar, self._lltok)
        if err:
            raise BlockcValueError(f"{what}: the grammar engine refused it: {err.strip()}")
        self._new()

    def _new(self) -> None:
        ll = engine()
        self._m = ll.LLMatcher(self._lltok, self.grammar, log_level=0)
        if self._m.is_error():
            raise BlockcValueError(f"{self.what}: {self._m.get_error()}")
        self._bits = ll.numpy.allocate_token_bitmask(1, self.vocab)

    # ---- the grammars -----------------------------------------------------------

    @classmethod
    def json_schema(cls, schema: Any, tokenizer: Any, end_ids: Union[int, Sequence[int], None] = None,
                    strict: bool = True) -> "Constraint":
        """JSON that validates against ``schema`` (written compactly: no whitespace between
        tokens, so a model cannot pad it forever).

        Parameters
        ----------
        schema : dict or str
            A JSON Schema (OpenAI's ``json_schema.schema``).
        tokenizer : blockc.text.Tokenizer
        end_ids : int or sequence of int, optional
            The tokens that end the generation once the JSON is complete (default: the
            tokenizer's end token).
        strict : bool, optional
            OpenAI's flag. The output validates either way; with ``strict`` a schema the
            engine cannot enforce in full is an error rather than a looser grammar.

        Returns
        -------
        Constraint

        Raises
        ------
        TypeError
            ``schema`` is not a dict or a JSON str; a bad tokenizer.
        ValueError
            The schema is not valid JSON, or the engine refuses it.
        ImportError
            The engine is not installed (``blockc[structured]``).
        """
        if not isinstance(strict, bool):
            raise BlockcTypeError(f"strict must be a bool, got {type(strict).__name__}")
        s = _schema(schema, "schema")
        s.setdefault("x-guidance", {"whitespace_flexible": False,
                                    "lenient": not strict})
        g = engine().LLMatcher.grammar_from_json_schema(json.dumps(s))
        return cls(g, tokenizer, end_ids, what="json_schema")

    @classmethod
    def json_object(cls, tokenizer: Any,
                    end_ids: Union[int, Sequence[int], None] = None) -> "Constraint":
        """Any JSON object (OpenAI's ``response_format`` ``{"type": "json_object"}``)."""
        return cls.json_schema({"type": "object"}, tokenizer, end_ids)

    @classmethod
    def regex(cls, pattern: str, tokenizer: Any,
              end_ids: Union[int, Sequence[int], None] = None) -> "Constraint":
        """Text matching the regular expression ``pattern`` in full (the engine's syntax:
        Rust's regex crate, no backreferences or lookaround)."""
        if not isinstance(pattern, str):
            raise BlockcTypeError(f"pattern must be a str, got {type(pattern).__name__}")
        return cls(engine().LLMatcher.grammar_from_regex(pattern), tokenizer, end_ids,
                   what="regex")

    @classmethod
    def lark(cls, grammar: str, tokenizer: Any,
             end_ids: Union[int, Sequence[int], None] = None) -> "Constraint":
        """Text of a Lark grammar (llguidance's dialect: ``start`` is the rule, ``%json
        {schema}`` embeds a JSON Schema, ``<name>`` is a special token)."""
        if not isinstance(grammar, str):
            raise BlockcTypeError(f"grammar must be a str, got {type(grammar).__name__}")
        return cls(engine().LLMatcher.grammar_from_lark(grammar), tokenizer, end_ids, what="lark")

    @classmethod
    def gbnf(cls, grammar: str, tokenizer: Any,
             end_ids: Union[int, Sequence[int], None] = None) -> "Constraint":
        """Text of a GBNF grammar (llama.cpp's; ``root`` is the rule), read as Lark."""
        if not isinstance(grammar, str):
            raise BlockcTypeError(f"grammar must be a str, got {type(grammar).__name__}")
        engine()
        from llguidance.gbnf_to_lark import gbnf_to_lark
        try:
            lark = gbnf_to_lark(grammar)
        except Exception as e:  # the converter raises its own types on a bad grammar
            raise BlockcValueError(f"gbnf: {e}") from None
        return cls(engine().LLMatcher.grammar_from_lark(lark), tokenizer, end_ids, what="gbnf")

    @classmethod
    def tool_calls(cls, tools: Sequence[Mapping[str, Any]], tool_choice: Any, tokenizer: Any,
                   format: Any, end_ids: Union[int, Sequence[int], None] = None,
                   parallel: bool = True) -> "Constraint":
        """Tool calls in the family's syntax, each calling one of ``tools`` with arguments
        that validate against its ``parameters`` schema.

        Parameters
        ----------
        tools : sequence of dict
            OpenAI's ``tools``: ``{"type": "function", "function": {"name", "parameters"}}``.
        tool_choice : "required" or dict
            ``"required"``: one or more calls (one when ``parallel`` is False) of any of
            the tools; ``{"type": "function", "function": {"name": NAME}}``: one call of it.
        tokenizer : blockc.text.Tokenizer
        format : blockc.text.tools.ToolFormat or str
            The family's syntax (:func:`blockc.text.tools.detect_format`), or its name.
        end_ids : int or sequence of int, optional
        parallel : bool, optional
            OpenAI's ``parallel_tool_calls`` (default True).

        Returns
        -------
        Constraint

        Raises
        ------
        TypeError, ValueError
            Malformed tools, a tool_choice that is not "required" nor names one of them.
        """
        if not isinstance(parallel, bool):
            raise BlockcTypeError(f"parallel must be a bool, got {type(parallel).__name__}")
        fmt = format if isinstance(format, ToolFormat) else get_format(format)
        specs = tool_specs(tools)
        if tool_choice == "required":
            chosen, many = list(specs), parallel and fmt.parallel
        elif isinstance(tool_choice, Mapping):
            fn = tool_choice.get("function")
            name = fn.get("name") if isinstance(fn, Mapping) else None
            if name not in specs:
                raise BlockcValueError(f"tool_choice names function {name!r}, which is not one "
                                       f"of the tools ({', '.join(specs) or 'none'})")
            chosen, many = [name], False
        else:
            raise BlockcValueError("tool_choice: constrained decoding needs \"required\" or "
                                   f"{{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, "
                                   f"got {tool_choice!r}")
        one = {"anyOf": [{
            "type": "object", "additionalProperties": False,
            "required": ["name", fmt.args_key],
            "properties": {"name": {"const": n}, fmt.args_key: specs[n]}} for n in chosen],
            "x-guidance": {"whitespace_flexible": False}}
        lit = lambda s: _lark_literal(tokenizer, s) if s else ""  # noqa: E731
        call = " ".join(x for x in (lit(fmt.call_open), "args", lit(fmt.call_close)) if x)
        body = f"call ({lit(fmt.separator)} call)*" if many else "call"
        start = " ".join(x for x in (lit(fmt.begin), body, lit(fmt.end)) if x)
        grammar = f"start: {start}\ncall: {call}\nargs: %json {json.dumps(one)}\n"
        return cls(engine().LLMatcher.grammar_from_lark(grammar), tokenizer, end_ids,
                   what="tool_choice")

    @classmethod
    def from_response_format(cls, response_format: Any, tokenizer: Any,
                             end_ids: Union[int, Sequence[int], None] = None
                             ) -> Optional["Constraint"]:
        """The constraint of an OpenAI request's ``response_format`` (None for ``text``).

        ``{"type": "json_object"}``; ``{"type": "json_schema", "json_schema": {"name",
        "schema", "strict"}}``; and blockc's extensions, the engine's own grammar forms:
        ``{"type": "regex", "regex": PATTERN}``, ``{"type": "lark", "lark": GRAMMAR}``,
        ``{"type": "gbnf", "gbnf": GRAMMAR}``.

        Raises
        ------
        TypeError, ValueError
            A malformed response_format (the message names the field).
        """
        rf = response_format
        if not isinstance(rf, Mapping):
            raise BlockcTypeError(f"response_format must be an object, got {type(rf).__name__}")
        kind = rf.get("type")
        if kind == "text":
            return None
        if kind == "json_object":
            return cls.json_object(tokenizer, end_ids)
        if kind == "json_schema":
            js = rf.get("json_schema")
            if not isinstance(js, Mapping) or "schema" not in js:
                raise BlockcValueError("response_format.json_schema must be an object with a "
                                       "'schema'")
            strict = js.get("strict", False)
            if not isinstance(strict, bool):
                raise BlockcTypeError("response_format.json_schema.strict must be a bool")
            return cls.json_schema(js["schema"], tokenizer, end_ids, strict=bool(strict))
        if kind in ("regex", "lark", "gbnf"):
            src = rf.get(kind)
            if not isinstance(src, str):
                raise BlockcTypeError(f"response_format.{kind} must be a str")
            return getattr(cls, kind)(src, tokenizer, end_ids)
        raise BlockcValueError("response_format.type must be one of text, json_object, "
                               f"json_schema, regex, lark, gbnf; got {kind!r}")

    # ---- one sequence's state ---------------------------------------------------

    def fresh(self) -> "Constraint":
        """A new state at the grammar's start (the compiled grammar shared)."""
        c = object.__new__(type(self))
        c.__dict__.update({k: v for k, v in self.__dict__.items() if k not in ("_m", "_bits")})
        c._new()
        return c

    def allowed(self) -> np.ndarray:
        """The tokens the grammar allows next: a bool array (vocab,)."""
        engine().numpy.fill_next_token_bitmask(self._m, self._bits, 0)
        keep = np.unpackbits(self._bits.view(np.uint8), bitorder="little")
        return keep[:self.vocab].astype(bool)

    def mask(self, logits_row: np.ndarray) -> np.ndarray:
        """Set the logits of the tokens not allowed next to -inf, in place.

        Parameters
        ----------
        logits_row : numpy.ndarray of float, shape (V,)
            V may pass the tokenizer's vocabulary (a padded embedding): those tokens are
            never allowed.

        Returns
        -------
        numpy.ndarray
            ``logits_row``.

        Raises
        ------
        TypeError
            Not a 1-D float array.
        """
        if not isinstance(logits_row, np.ndarray) or logits_row.ndim != 1 or \
                logits_row.dtype.kind != "f":
            raise BlockcTypeError("logits_row must be a 1-D float numpy array")
        engine().numpy.fill_next_token_bitmask(self._m, self._bits, 0)
        keep = np.unpackbits(self._bits.view(np.uint8), bitorder="little")
        n = min(self.vocab, logits_row.shape[0])
        logits_row[:n][keep[:n] == 0] = -np.inf
        logits_row[n:] = -np.inf
        return logits_row

    def advance(self, token_id: int) -> None:
        """Take the token generated next.

        Raises
        ------
        ValueError
            The grammar does not allow it.
        """
        t = int(token_id)
        if not (0 <= t < self.vocab) or not self._m.consume_token(t) or self._m.is_error():
            raise BlockcValueError(f"token {t} is not allowed by the constraint ({self.what})")

    def is_done(self) -> bool:
        """Whether the grammar is complete and has taken an end token (or can take
        nothing more)."""
        return bool(self._m.is_stopped())

    @property
    def end_ids(self) -> Tuple[int, ...]:
        """The tokens that end the generation once the grammar is complete."""
        return self._ends

    def is_accepting(self) -> bool:
        """Whether the text so far is complete (an end token would be allowed)."""
        return bool(self._m.is_accepting())

    def __repr__(self) -> str:
        return f"Constraint({self.what}, vocab={self.vocab})"


def _schema(schema: Any, name: str) -> Dict[str, Any]:
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as e:
            raise BlockcValueError(f"{name} is not valid JSON: {e}") from None
    if isinstance(schema, bool):
        schema = {} if schema else {"not": {}}
    if not isinstance(schema, Mapping):
        raise BlockcTypeError(f"{name} must be a JSON Schema (a dict), got "
                              f"{type(schema).__name__}")
    return dict(schema)
