"""Text: tokenizers and chat templates.

- :mod:`blockc.text.tokenizer`: :class:`Tokenizer` (a ``tokenizer.json`` through the
  ``tokenizers`` package, or a GGUF file's vocabulary) and :class:`TextStream`;
- :mod:`blockc.text.gguf`: the tokenizer a GGUF file's metadata describes;
- :mod:`blockc.text.chat`: chat templates (jinja2, sandboxed);
- :mod:`blockc.text.tools`: the families' tool-call formats and the parser of a reply
  into content, reasoning and tool calls (whole or streamed).
"""
from . import chat, gguf, tokenizer, tools
from .tokenizer import TextStream, Tokenizer

__all__ = ["chat", "gguf", "tokenizer", "tools", "Tokenizer", "TextStream"]
