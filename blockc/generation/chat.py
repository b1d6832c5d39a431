"""What an interactive conversation needs besides the model: sampling and context
defaults, and a :class:`Conversation` that keeps its messages inside a context.

- :func:`chat_sampling`: the sampling options of a chat, the checkpoint's
  ``generation_config.json`` when it samples, else llama.cpp's (:data:`LLAMA_CPP_SAMPLING`).
- :func:`context_size`: the context a run uses by default, the model's bounded by the
  memory its KV cache would take.
- :class:`Conversation`: the messages, the system prompt kept, the oldest turns dropped
  when the rendered conversation passes a token limit, saved to and loaded from JSON.

::

    g = chat_sampling(m.generation_config)        # the file's, else temperature 0.8 ...
    n = context_size(m.config)                    # <= m.config.context
    c = Conversation(system="Be terse.")
    c.add("user", "Hello")
    dropped = c.fit(lambda msgs: len(tok.apply_chat_template(msgs).ids), n - 128)
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from .._args import as_int
from .._errors import BlockcTypeError, BlockcValueError
from .config import GenerationConfig

__all__ = ["LLAMA_CPP_SAMPLING", "SAMPLING_NAMES", "chat_sampling", "context_size",
           "cache_bytes_per_token", "DEFAULT_CACHE_BUDGET", "Conversation", "ROLES"]

#: llama.cpp's sampling defaults (common/common.h): what a chat samples with when the
#: checkpoint's generation_config.json does not sample
LLAMA_CPP_SAMPLING: Dict[str, Any] = {"temperature": 0.8, "top_k": 40, "top_p": 0.95,
                                      "min_p": 0.05}

#: the sampling options a chat's defaults set (the others stay as the user gives them)
SAMPLING_NAMES = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty")

#: the KV cache's default memory budget (bytes): the context of a run is bounded by it
DEFAULT_CACHE_BUDGET = 4 << 30

#: the roles a saved conversation's messages may have
ROLES = ("system", "user", "assistant")


def chat_sampling(config: GenerationConfig) -> GenerationConfig:
    """The sampling of a conversation: ``config``'s own when it samples (a checkpoint's
    ``generation_config.json`` with ``do_sample``), else :data:`LLAMA_CPP_SAMPLING`
    (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05), as llama-cli and Ollama sample.

    Parameters
    ----------
    config : GenerationConfig
        The model's (``m.generation_config``).

    Returns
    -------
    GenerationConfig
        ``config`` with the sampling options set (its end ids and the rest unchanged).

    Raises
    ------
    TypeError
        ``config`` is not a GenerationConfig.

    Examples
    --------
    >>> chat_sampling(GenerationConfig()).temperature
    0.8
    >>> chat_sampling(GenerationConfig(temperature=0.6, top_p=0.9)).top_k is None
    True
    """
    if not isinstance(config, GenerationConfig):
        raise BlockcTypeError("config must be a blockc.generation.GenerationConfig, got "
                              f"{type(config).__name__}")
    if config.temperature > 0.0:
        return config
    return config.replace(**LLAMA_CPP_SAMPLING)


def cache_bytes_per_token(config: Any, cache_dtype: str = "float32") -> int:
    """The KV cache's bytes per position of one row: keys and values of every layer.

    Parameters
    ----------
    config : blockc.GPTConfig
    cache_dtype : {"float32", "float16"}, optional

    Returns
    -------
    int

    Examples
    --------
    >>> from blockc import GPTConfig
    >>> cache_bytes_per_token(GPTConfig(vocab=8, context=8, width=8, heads=2, layers=3))
    192
    """
    if cache_dtype not in ("float32", "float16"):
        raise BlockcValueError(f"cache_dtype must be 'float32' or 'float16', got {cache_dtype!r}")
    item = 4 if cache_dtype == "float32" else 2
    return 2 * config.layers * config.kv_heads_ * config.head_dim_ * item


def context_size(config: Any, cache_dtype: str = "float32",
                 budget: Optional[int] = None) -> int:
    """The context a run uses by default: the model's (``config.context``), bounded by
    the tokens whose KV cache fits in ``budget`` bytes (a sliding layer's ring counted
    once: it does not grow with the context).

    Parameters
    ----------
    config : blockc.GPTConfig
    cache_dtype : {"float32", "float16"}, optional
    budget : int >= 1, optional
        Bytes (default :data:`DEFAULT_CACHE_BUDGET`, 4 GiB, or a quarter of the
        machine's memory when that is less).

    Returns
    -------
    int
        In [1, config.context].

    Examples
    --------
    >>> from blockc import GPTConfig
    >>> context_size(GPTConfig(vocab=8, context=64, width=8, heads=2, layers=1), budget=64 * 20)
    20
    """
    if budget is None:
        budget = DEFAULT_CACHE_BUDGET
        try:
            budget = min(budget, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4)
        except (ValueError, OSError, AttributeError):  # not on this system
            pass
    budget = as_int(budget, "budget", 1)
    per = cache_bytes_per_token(config, cache_dtype)
    w = getattr(config, "sliding_window", None)
    if w is not None:  # a sliding layer's ring (about W + 127 positions) does not grow
        flags = config.sliding_layers or (True,) * config.layers
        sliding = sum(flags)
        ring = -(-(min(w, config.context) + 127) // 64) * 64
        layer = per // config.layers
        budget -= sliding * layer * ring
        per = layer * (config.layers - sliding)
        if per == 0:
            return config.context
    return max(1, min(config.context, budget // per))


def _message(m: Any, where: str) -> Dict[str, str]:
    if not isinstance(m, dict):
        raise BlockcTypeError(f"{where} must be an object with role and content, got "
                              f"{type(m).__name__}")
    role, content = m.get("role"), m.get("content")
    if role not in ROLES:
        raise BlockcValueError(f"{where}.role must be one of {', '.join(ROLES)}, got {role!r}")
    if not isinstance(content, str):
        raise BlockcTypeError(f"{where}.content must be a str, got {type(content).__name__}")
    return {"role": role, "content": content}


class Conversation:
    """The messages of a conversation: an optional system prompt, then the turns.

    Parameters
    ----------
    system : str, optional
        The system prompt (kept when turns are dropped, and by :meth:`reset`).

    Examples
    --------
    >>> c = Conversation("Be terse.")
    >>> c.add("user", "Hi"); c.add("assistant", "Hello."); c.add("user", "Bye")
    >>> c.fit(lambda msgs: sum(len(m["content"]) for m in msgs), 15)
    2
    >>> [m["content"] for m in c.messages]
    ['Be terse.', 'Bye']
    """

    def __init__(self, system: Optional[str] = None) -> None:
        if system is not None and not isinstance(system, str):
            raise BlockcTypeError(f"system must be a str, got {type(system).__name__}")
        self.system = system or None
        self.turns: List[Dict[str, str]] = []

    @property
    def messages(self) -> List[Dict[str, str]]:
        """The system prompt (when there is one) and the turns: what a chat template renders."""
        head = [{"role": "system", "content": self.system}] if self.system else []
        return head + [dict(t) for t in self.turns]

    def add(self, role: str, content: str) -> None:
        """Append a message (``role`` "user" or "assistant")."""
        self.turns.append(_message({"role": role, "content": content}, "message"))

    def pop(self) -> Dict[str, str]:
        """Remove and return the last turn."""
        return self.turns.pop()

    def reset(self) -> None:
        """Forget the turns (the system prompt stays)."""
        self.turns = []

    def fit(self, count: Callable[[List[Dict[str, str]]], int], limit: int) -> int:
        """Drop the oldest turns (the system prompt and the last message kept) until
        ``count(self.messages) <= limit``; a user message and the answers after it go
        together, as one turn.

        Parameters
        ----------
        count : callable
            The length of a list of messages (the tokens of its rendering).
        limit : int

        Returns
        -------
        int
            The number of messages dropped.

        Raises
        ------
        ValueError
            The system prompt and the last message alone pass ``limit``.
        """
        dropped = 0
        while count(self.messages) > limit:
            if len(self.turns) <= 1:
                raise BlockcValueError(
                    f"the message is {count(self.messages)} tokens with the system prompt, "
                    f"more than the {limit} the context leaves")
            self.turns.pop(0)
            dropped += 1
            while len(self.turns) > 1 and self.turns[0]["role"] != "user":
                self.turns.pop(0)
                dropped += 1
        return dropped

    def to_dict(self) -> Dict[str, Any]:
        """``{"messages": [...]}``: what :meth:`save` writes."""
        return {"messages": self.messages}

    def save(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Write the conversation as JSON (``{"messages": [{"role", "content"}, ...]}``)."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, ensure_ascii=False, indent=1)
            f.write("\n")

    @classmethod
    def from_messages(cls, messages: Sequence[Any]) -> "Conversation":
        """A conversation of a list of messages (a first ``system`` one is its system prompt).

        Raises
        ------
        TypeError, ValueError
            A message that is not ``{"role": ..., "content": str}`` (named by its index).
        """
        if not isinstance(messages, (list, tuple)):
            raise BlockcTypeError(f"messages must be a list, got {type(messages).__name__}")
        msgs = [_message(m, f"messages[{i}]") for i, m in enumerate(messages)]
        system = msgs.pop(0)["content"] if msgs and msgs[0]["role"] == "system" else None
        for i, m in enumerate(msgs):
            if m["role"] == "system":
                raise BlockcValueError(f"messages[{i + (system is not None)}]: a system message "
                                       "only comes first")
        c = cls(system)
        c.turns = msgs
        return c

    @classmethod
    def load(cls, path: Union[str, "os.PathLike[str]"]) -> "Conversation":
        """Read what :meth:`save` wrote (or a bare JSON list of messages).

        Raises
        ------
        ValueError
            Not JSON, or not a conversation (the error names the file).
        OSError
            The file cannot be read.
        """
        with open(path, encoding="utf-8") as f:
            try:
                d = json.load(f)
            except ValueError as e:
                raise BlockcValueError(f"{os.fspath(path)}: not JSON ({e})") from None
        msgs = d.get("messages") if isinstance(d, dict) else d
        try:
            return cls.from_messages(msgs)
        except (TypeError, ValueError) as e:
            raise BlockcValueError(f"{os.fspath(path)}: {e}") from None
