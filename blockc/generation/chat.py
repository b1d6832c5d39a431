"""What an interactive conversation needs besides the model: a :class:`Conversation`
that keeps its messages inside a context (its sampling and context defaults are every
run's: :mod:`blockc.generation.defaults`).

::

    c = Conversation(system="Be terse.")
    c.add("user", "Hello")
    dropped = c.fit(lambda msgs: len(tok.apply_chat_template(msgs).ids), n - 128)
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from .._errors import BlockcTypeError, BlockcValueError

__all__ = ["Conversation", "ROLES"]

#: the roles a saved conversation's messages may have
ROLES = ("system", "user", "assistant")


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
