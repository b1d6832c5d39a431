"""Chat templates: a conversation as the prompt text a chat model was trained on.

A Hugging Face checkpoint carries its template as Jinja source, in
``chat_template.jinja``, in ``tokenizer_config.json``'s ``chat_template`` field, or
in a processor's ``chat_template.json``. :class:`ChatTemplate` renders it exactly as
transformers' ``apply_chat_template`` does: jinja2's ``ImmutableSandboxedEnvironment``
(``trim_blocks``, ``lstrip_blocks``, loop controls), the variables transformers
passes (``messages``, ``add_generation_prompt``, ``tools=None``, ``documents=None``,
the special tokens ``bos_token``, ``eos_token``, ...), the globals
``raise_exception``, ``strftime_now``, ``dict`` and a ``namespace`` refusing
underscore names, and a ``tojson`` that does not escape HTML. The text is then
tokenized with no special tokens added: a template that writes its BOS itself gets
one BOS, not two.

jinja2 (>= 3.1.6: older versions have known sandbox escapes, and templates are
untrusted code) is an optional extra: ``pip install 'blockc[chat]'``.

>>> t = ChatTemplate("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\\n{% endfor %}"
...                  "{% if add_generation_prompt %}<|assistant|>{% endif %}")
>>> t.render([{"role": "user", "content": "Hi"}])   # doctest: +SKIP
'<|user|>Hi\\n<|assistant|>'
"""
from __future__ import annotations

import contextlib
import copy
import ctypes
import json
import os
import threading
from datetime import datetime
from typing import Any, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Union

import numpy as np

from .. import _files
from .._args import as_int, as_real
from .._errors import BlockcTypeError, BlockcValueError
from ..io.gguf import read as read_gguf

__all__ = ["ChatTemplate", "ChatPrompt", "ChatTemplateError", "load_chat_template",
           "special_tokens", "apply_chat_template"]

# the named special tokens transformers passes to a template (its SPECIAL_TOKENS_ATTRIBUTES)
_SPECIAL = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
            "mask_token")
_REASONING = ("reasoning_content", "thinking", "reasoning")
_MAX_TEMPLATE = 1 << 20  # bytes: a template is a page of Jinja, not a megabyte

#: The largest string or list a template's ``*``, ``+`` or ``**`` may make.
MAX_VALUE_CHARS = 1 << 24


class ChatTemplateError(BlockcValueError):
    """A template refused the conversation (its ``raise_exception``), or does not compile."""


class ChatPrompt(NamedTuple):
    """A rendered conversation: the text and its token ids (int64)."""
    text: str
    ids: np.ndarray


def _jinja():
    try:
        import jinja2
        import jinja2.ext
        import jinja2.sandbox
    except ImportError:
        raise ImportError("chat templates need jinja2: pip install 'blockc[chat]'") from None
    major, minor, patch = (tuple(int(x) for x in jinja2.__version__.split(".")[:3] if x.isdigit())
                           + (0, 0, 0))[:3]
    if (major, minor, patch) < (3, 1, 6):
        raise ImportError(f"chat templates need jinja2 >= 3.1.6 (sandbox fixes), found "
                          f"{jinja2.__version__}: pip install -U jinja2")
    return jinja2


def _environment():
    jinja2 = _jinja()
    from jinja2 import nodes
    from jinja2.ext import Extension

    class Generation(Extension):
        """``{% generation %}...{% endgeneration %}`` (marks assistant text for training
        masks in transformers): rendered as its body."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # Jinja's own tojson escapes <, >, & and ' for HTML: a prompt is not HTML
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    class TemplateDict:
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        # no underscore names: nothing reaches CPython's internals through a namespace
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"a chat template cannot set the underscore name {name!r} on a namespace")

    class Environment(jinja2.sandbox.ImmutableSandboxedEnvironment):
        # the operators that make a value of any size from small ones (a string or a list
        # times a count, a sum of two large ones, a power): checked before they run, as
        # one C call cannot be stopped by a deadline
        intercepted_binops = frozenset({"*", "+", "**"})

        def call_binop(self, context, operator, left, right):
            if operator == "**" and isinstance(left, int) and isinstance(right, int):
                if abs(left) > 1 and right > 0 and right * abs(left).bit_length() > 1 << 16:
                    raise jinja2.exceptions.SecurityError(
                        f"a chat template's power {left} ** {right} is too large")
            sizes = [len(x) for x in (left, right) if isinstance(x, (str, list, tuple))]
            if sizes:
                counts = [x for x in (left, right)
                          if isinstance(x, int) and not isinstance(x, bool)]
                n = sizes[0] * counts[0] if operator == "*" and counts else sum(sizes)
                if n > MAX_VALUE_CHARS:
                    raise jinja2.exceptions.SecurityError(
                        f"a chat template made a value of {n} items (the limit is "
                        f"{MAX_VALUE_CHARS})")
            return super().call_binop(context, operator, left, right)

    env = Environment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now,
                       dict=TemplateDict(), namespace=TemplateNamespace)
    return env


class _Deadline(BaseException):
    """Raised inside a rendering thread whose time is up (a BaseException: the
    template's own ``except Exception`` paths, if any, do not swallow it)."""


@contextlib.contextmanager
def _deadline(timeout: Optional[float]) -> Iterator[None]:
    """Raise _Deadline in this thread when ``timeout`` seconds pass inside the block:
    a watchdog timer sets it as the thread's pending exception, which CPython raises
    between two bytecodes, so a template's loop stops wherever it is. At most once,
    and never after the block is left (the state is shared under a lock)."""
    if timeout is None:
        yield
        return
    set_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    tid = ctypes.c_ulong(threading.get_ident())
    lock, state = threading.Lock(), {"inside": True, "fired": False}

    def fire():
        with lock:
            if state["inside"]:
                state["fired"] = True
                set_exc(tid, ctypes.py_object(_Deadline))

    timer = threading.Timer(timeout, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            state["inside"] = False
            if state["fired"]:  # set, maybe not raised yet: cleared, never raised later
                set_exc(tid, None)


def _plain(x: Any, where: str) -> Any:
    """A deep copy of JSON-like data (dict, list, str, numbers, bool, None) the template
    may read but never change the caller's copy of."""
    if isinstance(x, Mapping):
        return {str(k): _plain(v, where) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v, where) for v in x]
    if x is None or isinstance(x, (str, bool, int, float)):
        return x
    raise BlockcTypeError(f"{where}: values must be JSON-like (dict, list, str, number, bool, "
                          f"None), got {type(x).__name__}")


def _messages(messages: Any) -> List[Dict[str, Any]]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise BlockcTypeError("messages must be a sequence of dicts with 'role' and 'content', "
                              f"got {type(messages).__name__}")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise BlockcTypeError(f"messages[{i}] must be a dict, got {type(m).__name__}")
        if not isinstance(m.get("role"), str):
            raise BlockcValueError(f"messages[{i}] needs a str 'role'")
        m = _plain(m, f"messages[{i}]")
        reasoning = next((m[k] for k in _REASONING if m.get(k) is not None), None)
        if reasoning is not None:  # transformers' aliases for the reasoning field
            m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
        out.append(m)
    return out


class ChatTemplate:
    """A chat template's Jinja source, compiled once, with the special tokens it sees.

    Parameters
    ----------
    source : str
        The template.
    special_tokens : mapping of str to str, optional
        ``bos_token``, ``eos_token``, ... as the tokenizer's config names them.

    Raises
    ------
    ImportError
        jinja2 (>= 3.1.6) is not installed.
    TypeError
        ``source`` is not a str.
    ChatTemplateError
        The template does not compile.
    """

    def __init__(self, source: str, special_tokens: Optional[Mapping[str, str]] = None):
        if not isinstance(source, str):
            raise BlockcTypeError(f"source must be a str, got {type(source).__name__}")
        jinja2 = _jinja()
        self.source = source
        self.special_tokens = {k: str(v) for k, v in (special_tokens or {}).items()
                               if v is not None}
        try:
            self._template = _environment().from_string(source)
        except jinja2.exceptions.TemplateError as e:
            raise ChatTemplateError(f"the chat template does not compile: {e}") from None

    @classmethod
    def from_pretrained(cls, path: Union[str, "os.PathLike[str]"]) -> "ChatTemplate":
        """The template of a checkpoint directory (see :func:`load_chat_template`).

        Parameters
        ----------
        path : str or os.PathLike

        Returns
        -------
        ChatTemplate

        Raises
        ------
        ValueError
            The directory has no chat template, or it does not compile.
        ImportError
            jinja2 is not installed.

        Examples
        --------
        >>> ChatTemplate.from_pretrained("chat-model-dir")   # doctest: +SKIP
        ChatTemplate(1234 characters)
        """
        src = load_chat_template(path)
        if src is None:
            raise BlockcValueError(f"{os.fspath(path)}: no chat template (chat_template.jinja, "
                                   "tokenizer_config.json's chat_template or chat_template.json)")
        return cls(src, special_tokens(path))

    def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
               *, max_chars: Optional[int] = None, timeout: Optional[float] = None,
               **variables: Any) -> str:
        """The prompt text of a conversation.

        Parameters
        ----------
        messages : sequence of dict
            Each with a ``role`` (str) and usually a ``content``.
        add_generation_prompt : bool, optional
            End with the header of the assistant's turn (the default), so the model's
            next tokens are its answer.
        max_chars : int, optional
            Refuse (ChatTemplateError) a text longer than this, as soon as it is
            (a server's bound tied to its context).
        timeout : float, optional
            Seconds the rendering may take: past it the template is stopped inside
            whatever loop it is running (ChatTemplateError). CPython only.
        **variables
            More template variables (they override the special tokens, as in
            transformers).

        Returns
        -------
        str

        Raises
        ------
        TypeError
            Messages that are not dicts of JSON-like values.
        ChatTemplateError
            The template refused the conversation (``raise_exception``), or failed
            in any way (a division by zero, an overflow, a recursion too deep, a
            value too large), or its text is longer than ``max_chars``, or it ran
            past ``timeout``.

        Examples
        --------
        >>> t = ChatTemplate("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}",
        ...                  {"bos_token": "<s>"})            # doctest: +SKIP
        >>> t.render([{"role": "user", "content": "Hi"}])   # doctest: +SKIP
        '<s>Hi'
        """
        jinja2 = _jinja()
        if not isinstance(add_generation_prompt, bool):
            raise BlockcTypeError("add_generation_prompt must be a bool")
        msgs = _messages(messages)
        kw = {**self.special_tokens, **_plain(variables, "variables")}
        kw.setdefault("tools", None)
        kw.setdefault("documents", None)
        if max_chars is not None:
            max_chars = as_int(max_chars, "max_chars", 0)
        if timeout is not None:
            timeout = as_real(timeout, "timeout", 0.0)
        try:
            with _deadline(timeout):
                parts, size = [], 0
                for piece in self._template.generate(
                        messages=msgs, add_generation_prompt=add_generation_prompt, **kw):
                    size += len(piece)
                    if max_chars is not None and size > max_chars:
                        raise ChatTemplateError(f"the chat template's text is over {max_chars} "
                                                "characters")
                    parts.append(piece)
                return "".join(parts)
        except ChatTemplateError:
            raise
        except _Deadline:
            raise ChatTemplateError(f"the chat template ran for more than {timeout} s: "
                                    "stopped") from None
        except jinja2.exceptions.TemplateError as e:
            raise ChatTemplateError(f"the chat template refused the conversation: {e}") from None
        except (Exception, RecursionError) as e:  # any failure of the template's own code
            raise ChatTemplateError(f"the chat template failed: {type(e).__name__}: "
                                    f"{str(e)[:200]}") from None

    def __repr__(self) -> str:
        return f"ChatTemplate({len(self.source)} characters)"


def _read_text(path: str) -> Optional[str]:
    if not os.path.isfile(path):
        return None
    if os.path.getsize(path) > _MAX_TEMPLATE:
        raise BlockcValueError(f"{path}: larger than {_MAX_TEMPLATE} bytes")
    raw = _files.read_bytes(path, _MAX_TEMPLATE, "a chat template")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BlockcValueError(f"{path}: not UTF-8: {e}") from None


def _read_json(path: str) -> dict:
    if not os.path.isfile(path):
        return {}
    # bounded in size and depth, a regular file at the open (blockc._files)
    d = _files.read_json(path, "a tokenizer config", limit=64 * _MAX_TEMPLATE)
    return d if isinstance(d, dict) else {}


def _pick(template: Any, where: str) -> Optional[str]:
    """A template field: a str, or transformers' list of {name, template} (the 'default')."""
    if template is None or isinstance(template, str):
        return template
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        if isinstance(named.get("default"), str):
            return named["default"]
    raise BlockcValueError(f"{where}: chat_template must be a str or a list of named "
                           "templates with a 'default'")


def load_chat_template(path: Union[str, "os.PathLike[str]"]) -> Optional[str]:
    """The Jinja source of a checkpoint's chat template, or None.

    Looked for, in transformers' order: ``chat_template.jinja``, then
    ``tokenizer_config.json``'s ``chat_template`` (a str, or a list of named
    templates: the ``default``), then ``chat_template.json``'s ``chat_template``; a
    ``.gguf`` file's ``tokenizer.chat_template`` when ``path`` is one.

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint directory (or a file in it).

    Returns
    -------
    str or None

    Raises
    ------
    ValueError
        A file that is there but unreadable (not UTF-8, not JSON, over a megabyte,
        a template field of the wrong type).

    Examples
    --------
    >>> load_chat_template("gpt2-dir") is None          # doctest: +SKIP
    True
    """
    p = os.fspath(path)
    if os.path.isfile(p) and p.endswith(".gguf"):
        return _gguf_template(p)
    d = p if os.path.isdir(p) else os.path.dirname(p)
    try:
        src = _read_text(os.path.join(d, "chat_template.jinja"))
        if src is not None:
            return src
        f = os.path.join(d, "tokenizer_config.json")
        src = _pick(_read_json(f).get("chat_template"), f)
        if src is not None:
            return src
        f = os.path.join(d, "chat_template.json")
        return _pick(_read_json(f).get("chat_template"), f)
    except UnicodeDecodeError as e:
        raise BlockcValueError(f"{d}: a chat template file is not UTF-8: {e}") from None


def _gguf_template(path: str) -> Optional[str]:
    t = read_gguf(path).get("tokenizer.chat_template")  # blockc's reader: lengths checked, tensors untouched
    if t is not None and not isinstance(t, str):
        raise BlockcValueError(f"{path}: metadata key 'tokenizer.chat_template' must be a string")
    return t


def special_tokens(path: Union[str, "os.PathLike[str]"]) -> Dict[str, str]:
    """The named special tokens (``bos_token``, ``eos_token``, ...) of a checkpoint, as
    strings: from ``tokenizer_config.json``, else ``special_tokens_map.json``.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    dict of str to str

    Raises
    ------
    ValueError
        A config file that is not JSON.

    Examples
    --------
    >>> special_tokens("gpt2-dir")                       # doctest: +SKIP
    {'bos_token': '<|endoftext|>', 'eos_token': '<|endoftext|>', 'unk_token': '<|endoftext|>'}
    """
    p = os.fspath(path)
    d = p if os.path.isdir(p) else os.path.dirname(p)
    out: Dict[str, str] = {}
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        cfg = _read_json(os.path.join(d, name))
        for k in _SPECIAL:
            v = cfg.get(k)
            v = v.get("content") if isinstance(v, dict) else v
            if isinstance(v, str) and k not in out:
                out[k] = v
    return out


def apply_chat_template(tokenizer: Any, template: ChatTemplate,
                        messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
                        *, tokenize: Optional[bool] = None, return_dict: bool = False,
                        continue_final_message: bool = False, **variables: Any) -> Any:
    """Render ``messages`` with ``template`` and tokenize the text with ``tokenizer``
    adding no special tokens (a BOS the template writes is the only BOS).

    The keywords are transformers' ``apply_chat_template``'s, with their meanings:
    ``tokenize=False`` gives the text alone, ``tokenize=True`` the ids alone,
    ``return_dict=True`` ``{"input_ids": ..., "attention_mask": ...}``, and
    ``continue_final_message=True`` leaves the last message open (the text ends with its
    content, no end-of-turn after it: the model continues that message). Without
    ``tokenize``, both: a :class:`ChatPrompt` ``(text, ids)``.

    Parameters
    ----------
    tokenizer : blockc.text.Tokenizer
    template : ChatTemplate
    messages : sequence of dict
    add_generation_prompt : bool, optional
        End with the assistant turn's header (blockc's default: True; transformers'
        is False).
    tokenize : bool, optional
    return_dict : bool, optional
    continue_final_message : bool, optional
    **variables
        More template variables (``tools``, ``documents``, ``enable_thinking``, ...).

    Returns
    -------
    ChatPrompt, str, numpy.ndarray of int64, or dict

    Raises
    ------
    TypeError, ChatTemplateError
        As :meth:`ChatTemplate.render`.
    ValueError
        ``continue_final_message`` with ``add_generation_prompt``, or a last message whose
        content the rendered text does not hold; ``return_dict`` with ``tokenize=False``.

    Examples
    --------
    >>> apply_chat_template(tok, ChatTemplate.from_pretrained(d), msgs).ids   # doctest: +SKIP
    array([...])
    """
    for name, v in (("return_dict", return_dict), ("continue_final_message", continue_final_message)):
        if not isinstance(v, bool):
            raise BlockcTypeError(f"{name} must be a bool, got {type(v).__name__}")
    if tokenize is not None and not isinstance(tokenize, bool):
        raise BlockcTypeError(f"tokenize must be a bool or None, got {type(tokenize).__name__}")
    if return_dict and tokenize is False:
        raise BlockcValueError("return_dict=True needs the ids: tokenize must not be False")
    if continue_final_message:
        if add_generation_prompt:
            raise BlockcValueError("continue_final_message and add_generation_prompt cannot "
                                   "both be true: the last message is continued, not answered")
        last = messages[-1].get("content") if len(messages) else None
        if not isinstance(last, str):
            raise BlockcValueError("continue_final_message needs a last message whose content "
                                   "is a string")
    text = template.render(messages, add_generation_prompt, **variables)
    if continue_final_message:
        # the text up to the end of the last message's content (as transformers cuts it:
        # the content, or its stripped form, found last in the rendered text)
        for needle in (last, last.strip()):
            at = text.rfind(needle) if needle else -1
            if at >= 0:
                text = text[:at + len(needle)]
                break
        else:
            raise BlockcValueError("continue_final_message: the rendered text does not hold the "
                                   "last message's content (the template changes it)")
    if tokenize is False:
        return text
    ids = tokenizer.encode(text, add_special_tokens=False)
    if return_dict:
        return {"input_ids": ids, "attention_mask": np.ones(ids.shape, np.int64)}
    if tokenize:
        return ids
    return ChatPrompt(text, ids)
