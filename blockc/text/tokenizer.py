"""Text in and out: a checkpoint directory's tokenizer, through the ``tokenizers``
package (an optional extra: ``pip install 'blockc[text]'``).

>>> tok = Tokenizer.from_pretrained("path/to/gpt2")   # doctest: +SKIP
>>> tok.decode(tok.encode("naïve café 🙂")) == "naïve café 🙂"   # doctest: +SKIP
True

GPT-2's byte-level BPE maps any UTF-8 text to ids and back exactly. Decoding a
stream of ids a token at a time can split a character's bytes between tokens:
:class:`TextStream` holds such a partial character back until it is whole, so
streamed text is always valid and, joined, equals ``decode`` of all the ids.

``encode`` adds the tokenizer's special tokens (a Llama tokenizer's ``<s>``) as
transformers' tokenizers do by default; ``add_special_tokens=False`` leaves them out.

The ``tokenizers`` package is a Rust library: a malformed tokenizer.json can make
it panic (``PanicException``, a ``BaseException``), and it raises its own
exceptions for a vocabulary it cannot use (a WordPiece model without its
``[UNK]`` token). Every call into it here turns those into a
:class:`blockc.BlockcValueError` naming the tokenizer and the problem.
"""
from __future__ import annotations

import os
from typing import Any, Iterable, List, Optional, Sequence, Union

import numpy as np

from .. import _files
from .._args import as_flag, as_int, to_numpy
from .._errors import BlockcTypeError, BlockcValueError
from . import chat, gguf

__all__ = ["Tokenizer", "TextStream"]


def _tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise ImportError("text needs the tokenizers package: pip install 'blockc[text]' "
                          "(or pass token ids)") from None
    return tokenizers


#: The largest tokenizer.json blockc reads (Llama 3's is 9 MB).
MAX_TOKENIZER_BYTES = 512 * 1024 * 1024

#: Ids a tokenizer can take (the tokenizers package holds them as 32-bit unsigned).
MAX_ID = 2 ** 32


def _guarded(where: str, fn, *args, **kwargs):
    """fn(*args) with the tokenizers package's failures as BlockcValueError: its own
    exceptions and its Rust panics (PanicException derives from BaseException, so
    ``except Exception`` misses it; Ctrl-C and exit still pass through)."""
    try:
        return fn(*args, **kwargs)
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BlockcValueError:
        raise
    except BaseException as e:  # noqa: B036 (a PanicException is a BaseException)
        kind = "panicked" if type(e).__name__ == "PanicException" else "failed"
        raise BlockcValueError(f"{where}: the tokenizers package {kind}: "
                               f"{str(e).strip() or type(e).__name__}") from None


class Tokenizer:
    """A tokenizer.json (Hugging Face ``tokenizers``) with the ids a model needs.

    Made by :meth:`from_pretrained` (or around a ``tokenizers.Tokenizer``).
    """

    def __init__(self, tok: Any, eos_token_id: Optional[int] = None,
                 bos_token_id: Optional[int] = None, chat_template: Any = None):
        self._tok = tok
        self.eos_token_id = eos_token_id
        self.bos_token_id = bos_token_id
        self._chat = chat_template  # a blockc.chat.ChatTemplate, or None: read on first use
        self._dir: Optional[str] = None
        self._max_chars: Optional[int] = None
        self._bytelevel: Optional[bool] = None

    @classmethod
    def from_pretrained(cls, path: Union[str, "os.PathLike[str]"]) -> "Tokenizer":
        """The tokenizer of a checkpoint directory (its ``tokenizer.json``), or of a GGUF
        file (built from its metadata, as transformers' GGUF loader builds it).

        The end-of-text id comes from ``generation_config.json`` or ``config.json``
        (``eos_token_id``), else from ``tokenizer_config.json``'s ``eos_token``.

        Parameters
        ----------
        path : str or os.PathLike
            The directory, the tokenizer.json file, or a ``.gguf`` file.

        Returns
        -------
        Tokenizer

        Raises
        ------
        ImportError
            tokenizers is not installed.
        ValueError
            There is no tokenizer.json, or it does not load.

        Examples
        --------
        >>> tok = Tokenizer.from_pretrained("gpt2-dir")   # doctest: +SKIP
        >>> tok.decode(tok.encode("naïve café 🙂"))       # doctest: +SKIP
        'naïve café 🙂'
        """
        tk = _tokenizers()
        path = os.fspath(path)
        if path.endswith(".gguf") and os.path.isfile(path):  # the tokenizer a GGUF describes
            return gguf.load(path, cls)
        d = path if os.path.isdir(path) else os.path.dirname(path)
        f = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
        if not os.path.lexists(f):
            raise BlockcValueError(f"{path}: no tokenizer.json (pass token ids instead)")
        # read here (a regular file, bounded), parsed from the text: tokenizers' own
        # from_file would block forever on a FIFO and read /dev/zero without end
        raw = _files.read_bytes(f, MAX_TOKENIZER_BYTES, "a tokenizer.json")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise BlockcValueError(f"{f}: not a tokenizer.json (not UTF-8: {e})") from None
        if _files.json_depth(text) > _files.MAX_JSON_DEPTH:
            raise BlockcValueError(f"{f}: not a tokenizer.json blockc reads: JSON nested more "
                                   f"than {_files.MAX_JSON_DEPTH} deep")
        tok = _guarded(f"{f}: not a tokenizer.json the tokenizers package reads",
                       tk.Tokenizer.from_str, text)
        eos = bos = None
        for name in ("generation_config.json", "config.json"):
            cfg = _json(os.path.join(d, name))
            if eos is None and cfg.get("eos_token_id") is not None:
                eos = cfg["eos_token_id"]
            if bos is None and cfg.get("bos_token_id") is not None:
                bos = cfg["bos_token_id"]
        if eos is None:
            tc = _json(os.path.join(d, "tokenizer_config.json"))
            e = tc.get("eos_token")
            e = e.get("content") if isinstance(e, dict) else e
            if isinstance(e, str):
                eos = tok.token_to_id(e)
        if isinstance(eos, list):  # several end ids: the first is the one a tokenizer has
            eos = eos[0] if eos else None
        out = cls(tok, eos if isinstance(eos, int) else None, bos if isinstance(bos, int) else None)
        out._dir = d
        return out

    @property
    def backend(self) -> Any:
        """The ``tokenizers.Tokenizer`` this wraps (what a GGUF file's tokenizer is written from)."""
        return self._tok

    @property
    def vocab_size(self) -> int:
        return int(self._tok.get_vocab_size())

    def encode(self, text: str, add_special_tokens: bool = True) -> np.ndarray:
        """Token ids of ``text``, as a 1-D int64 array.

        Parameters
        ----------
        text : str
        add_special_tokens : bool, optional
            Let the tokenizer's post-processor add its special tokens (a Llama
            tokenizer's ``<s>``), as transformers does by default; False leaves them out.

        Returns
        -------
        numpy.ndarray

        Raises
        ------
        TypeError
            ``text`` is not a str, or the flag not a bool.
        ValueError
            ``text`` is not valid Unicode (lone surrogates: bytes that were not UTF-8),
            or the tokenizer cannot encode it (a WordPiece vocabulary without [UNK]).

        Examples
        --------
        >>> tok = Tokenizer.from_pretrained("gpt2-dir")   # doctest: +SKIP
        >>> tok.encode("Hello world")                      # doctest: +SKIP
        array([15496,   995])
        """
        if not isinstance(text, str):
            raise BlockcTypeError(f"text must be a str, got {type(text).__name__}")
        as_flag(add_special_tokens, "add_special_tokens")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:  # a command line's non-UTF-8 bytes arrive as surrogates
            bad = text[e.start:e.end]
            raise BlockcValueError(
                f"text is not valid Unicode at character {e.start} ({bad!r}: bytes that were not "
                "UTF-8, as a non-UTF-8 command-line argument or file name decodes)") from None
        # encode_batch releases the GIL while it works (encode holds it: a long text would
        # stall every other thread, a server's event loop included); the same ids
        enc = _guarded("encode", self._tok.encode_batch, [text],
                       add_special_tokens=add_special_tokens)[0]
        return np.array(enc.ids, dtype=np.int64)

    def decode(self, ids: Any, skip_special_tokens: bool = False) -> str:
        """The text of a sequence of ids.

        Parameters
        ----------
        ids : array_like of int
        skip_special_tokens : bool, optional

        Returns
        -------
        str

        Raises
        ------
        TypeError
            Ids that are not integers, or the flag not a bool.
        ValueError
            An id outside [0, 2**32) (an id in that range the vocabulary lacks decodes
            to nothing, as in tokenizers and transformers).

        Examples
        --------
        >>> tok.decode([15496, 995])                       # doctest: +SKIP
        'Hello world'
        """
        as_flag(skip_special_tokens, "skip_special_tokens")
        return self._decode(_ids_list(ids), skip_special_tokens)

    def _decode(self, ids: List[int], skip: bool) -> str:
        return _guarded("decode", self._tok.decode, ids, skip_special_tokens=skip)

    @property
    def max_token_chars(self) -> int:
        """The most characters one token can stand for (its longest vocabulary entry, a
        byte-level entry counted in bytes): a text longer than ``n * max_token_chars``
        characters has more than ``n`` tokens, known before tokenizing it."""
        if self._max_chars is None:
            vocab = self._tok.get_vocab(with_added_tokens=True)
            self._max_chars = max((len(t) for t in vocab), default=1) or 1
        return self._max_chars

    def token_bytes(self, token: int) -> bytes:
        """The bytes token ``token`` stands for: a token that is part of a multi-byte
        character has its own bytes (decoding it alone gives U+FFFD).

        Parameters
        ----------
        token : int

        Returns
        -------
        bytes

        Raises
        ------
        ValueError
            An id outside [0, 2**32).

        Examples
        --------
        >>> tok.token_bytes(tok.encode("🙂")[0])           # doctest: +SKIP
        b'\\xf0\\x9f'
        """
        token = as_int(token, "token", 0, MAX_ID - 1)
        piece = self._tok.id_to_token(token)
        if piece is None:
            return b""
        if self._byte_level():
            table = _unicode_to_byte()
            if all(c in table for c in piece):
                return bytes(table[c] for c in piece)
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            try:  # SentencePiece's byte fallback: <0xE2>
                return bytes([int(piece[3:5], 16)])
            except ValueError:
                pass
        return self._decode([token], False).encode("utf-8", "surrogatepass")

    def _byte_level(self) -> bool:
        if self._bytelevel is None:
            dec = self._tok.decoder
            self._bytelevel = dec is not None and "ByteLevel" in repr(dec)
        return self._bytelevel

    def token_to_id(self, token: str) -> Optional[int]:
        """The id of a token of the vocabulary, or None.

        Parameters
        ----------
        token : str

        Returns
        -------
        int or None

        Raises
        ------
        TypeError
            ``token`` is not a str.

        Examples
        --------
        >>> tok.token_to_id("<|endoftext|>")                # doctest: +SKIP
        50256
        """
        if not isinstance(token, str):
            raise BlockcTypeError(f"token must be a str, got {type(token).__name__}")
        return self._tok.token_to_id(token)

    @property
    def chat_template(self) -> Any:
        """The checkpoint's :class:`blockc.chat.ChatTemplate` (read on first use), or None."""
        if self._chat is None and self._dir is not None:
            src = chat.load_chat_template(self._dir)
            if src is not None:
                self._chat = chat.ChatTemplate(src, chat.special_tokens(self._dir))
        return self._chat

    def apply_chat_template(self, messages: Sequence[Any], add_generation_prompt: bool = True,
                            *, tokenize: Optional[bool] = None, return_dict: bool = False,
                            continue_final_message: bool = False, **variables: Any) -> Any:
        """A conversation as the checkpoint's chat template renders it, and its ids.

        The text and ids are transformers' ``apply_chat_template`` on the same
        directory: the ids are the text's tokens with no special token added (a BOS
        the template writes is the only one). See :mod:`blockc.chat`.

        Parameters
        ----------
        messages : sequence of dict
            ``{"role": ..., "content": ...}`` each.
        add_generation_prompt : bool, optional
            End with the assistant turn's header (the default; transformers' is False).
        tokenize : bool, optional
            transformers' keyword: False gives the text alone, True the ids alone; not
            given, both (a ``ChatPrompt``).
        return_dict : bool, optional
            ``{"input_ids": ids, "attention_mask": ones}``, as transformers returns it.
        continue_final_message : bool, optional
            Leave the last message open: the text ends with its content (a prefill the
            model continues), as transformers' keyword does.
        **variables
            More template variables (``tools``, ``enable_thinking``, ...).

        Returns
        -------
        blockc.text.chat.ChatPrompt, str, numpy.ndarray of int64, or dict
            ``(text, ids)`` by default; see ``tokenize`` and ``return_dict``.

        Raises
        ------
        ValueError
            The checkpoint has no chat template, or the template refused the
            conversation (:class:`blockc.chat.ChatTemplateError`).
        TypeError
            Messages that are not dicts of JSON-like values.
        ImportError
            jinja2 is not installed.

        Examples
        --------
        >>> tok.apply_chat_template([{"role": "user", "content": "Hi"}]).text  # doctest: +SKIP
        '<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'
        """
        template = self.chat_template
        if template is None:
            raise BlockcValueError("this tokenizer has no chat template (chat_template.jinja, "
                                   "tokenizer_config.json's chat_template or chat_template.json)")
        return chat.apply_chat_template(self, template, messages, add_generation_prompt,
                                        tokenize=tokenize, return_dict=return_dict,
                                        continue_final_message=continue_final_message,
                                        **variables)

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, eos_token_id={self.eos_token_id})"


def _json(path: str) -> dict:
    """A directory's optional JSON file (missing: {}); one that is there but is not a
    regular file, too large or too deep is refused by name, never read without end."""
    if not os.path.lexists(path):
        return {}
    try:
        d = _files.read_json(path)
    except OSError:
        return {}
    return d if isinstance(d, dict) else {}


_BYTE_TABLE: dict = {}


def _unicode_to_byte() -> dict:
    """GPT-2's byte-level alphabet, character to byte: the 188 printable bytes stand for
    themselves, the other 68 for chr(256 + i) in order."""
    if not _BYTE_TABLE:
        keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1))
                + list(range(ord("\u00ae"), ord("\u00ff") + 1)))
        extra = 0
        for b in range(256):
            if b in keep:
                _BYTE_TABLE[chr(b)] = b
            else:
                _BYTE_TABLE[chr(256 + extra)] = b
                extra += 1
    return _BYTE_TABLE


def _ids_list(ids: Any) -> List[int]:
    a = to_numpy(ids, "ids")
    if a.size == 0 and a.dtype.kind == "f" and isinstance(ids, (list, tuple)):
        return []  # [] is no ids (NumPy makes it float64)
    if a.dtype.kind not in "iu" or a.dtype == np.bool_:
        raise BlockcTypeError(f"ids must be integers, got dtype {a.dtype}")
    out = [int(i) for i in a.reshape(-1)]
    bad = [i for i in out if not 0 <= i < MAX_ID]
    if bad:
        raise BlockcValueError(f"ids must lie in [0, 2**32), got {bad[0]}")
    return out


class TextStream:
    """The text of a growing sequence of ids, piece by piece.

    ``push(id)`` returns the text the new id completes ("" while it ends inside a
    character whose bytes are still to come); ``flush()`` returns what is left.
    The pieces joined equal ``tok.decode(all ids)``.
    """

    def __init__(self, tok: Tokenizer, skip_special_tokens: bool = False):
        self._tok, self._skip = tok, skip_special_tokens
        self._ids: List[int] = []
        self._done = 0  # characters of the decoded text already returned

    def push(self, token: int) -> str:
        """Add a token; the text it completes.

        Parameters
        ----------
        token : int

        Returns
        -------
        str
            "" while the text ends inside a character whose bytes are still to come.

        Raises
        ------
        TypeError
            ``token`` is not an integer.
        ValueError
            ``token`` is outside [0, 2**32), or the tokenizer fails on it; the stream is
            as it was before the call (later pushes work).

        Examples
        --------
        >>> s = TextStream(tok)                            # doctest: +SKIP
        >>> s.push(15496), s.push(995), s.flush()          # doctest: +SKIP
        ('Hello', ' world', '')
        """
        t = as_int(token, "token")
        if not 0 <= t < MAX_ID:
            raise BlockcValueError(f"token must lie in [0, 2**32), got {t}")
        ids = self._ids + [t]
        text = self._tok._decode(ids, self._skip)  # checked and decoded before it is kept
        self._ids = ids
        if text.endswith("\ufffd"):  # a character cut between tokens: wait for its rest
            return ""
        piece, self._done = text[self._done:], len(text)
        return piece

    def flush(self) -> str:
        """The text not returned yet (a character left incomplete at the end included).

        Returns
        -------
        str

        Examples
        --------
        >>> s.flush()                                      # doctest: +SKIP
        ''
        """
        text = self._tok._decode(self._ids, self._skip)
        piece, self._done = text[self._done:], len(text)
        return piece
