"""One home for every generation option: :class:`GenerationConfig`.

A GenerationConfig holds the sampling options, the seed, the cache switch, the
end-of-sequence ids, the pad id and the stop strings, each checked once, here.
:meth:`blockc.GPT.generate`, :meth:`blockc.GPT.stream`, ``blockc generate`` and the
server build on it; a model loaded from a checkpoint directory carries the one
its files describe (``m.generation_config``: ``config.json``'s token ids, then
``generation_config.json``'s, which win, as in ``transformers``).

::

    g = GenerationConfig(temperature=0.7, top_p=0.9, eos_token_id=[2, 32000])
    g2 = g.replace(seed=1)                      # a new, checked config
    r = g2.resolve(vocab=32000 + 1)             # against a model: ids in range, pad chosen
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field, fields, replace as _dc_replace
from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple, Union

from .._args import as_choice, as_flag, as_int, as_real
from .._errors import BlockcTypeError, BlockcValueError
from .._files import read_config
from ..model import CACHE_DTYPES

__all__ = ["GenerationConfig", "ResolvedGeneration", "Option", "API", "options",
           "TOKEN_ID_FIELDS", "token_ids", "checked_token_ids", "GGUF_END_KEYS",
           "GGUF_END_TEXTS",
           "SAMPLING_FIELDS", "GGUF_SAMPLING_KEYS"]

#: the token ids a checkpoint's config.json / generation_config.json may give
TOKEN_ID_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id")

#: a GGUF file's metadata keys of the ids that end a generation: llama.cpp's end of text
#: and end of turn (a chat model's answer ends at its end-of-turn token)
GGUF_END_KEYS = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                 "tokenizer.ggml.eom_token_id")

#: the tokens llama.cpp ends a generation at by their text, whatever ids the file names
#: (its converter writes no end-of-turn id for Gemma, Phi-3, Qwen, ...: ``<end_of_turn>``,
#: ``<|end|>``, ``<|im_end|>`` are found so)
GGUF_END_TEXTS = frozenset({"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
                            "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>",
                            "<|end_of_text|>", "<end_of_utterance>"})

#: GenerationConfig's token ids -> a GGUF file's metadata keys of them (besides the end ids)
_GGUF_IDS = (("bos_token_id", "tokenizer.ggml.bos_token_id"),
             ("pad_token_id", "tokenizer.ggml.padding_token_id"))

#: generation_config.json's sampling fields blockc reads (when its do_sample is true)
SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty")

#: a GGUF file's sampling metadata (llama.cpp's ``general.sampling.*`` keys, gguf-py's
#: ``Keys.General.SAMPLING_*``) -> the GenerationConfig option it gives (a top_k of 0 is
#: llama.cpp's "no top-k")
GGUF_SAMPLING_KEYS = (("general.sampling.temp", "temperature"), ("general.sampling.top_k", "top_k"),
                      ("general.sampling.top_p", "top_p"), ("general.sampling.min_p", "min_p"),
                      ("general.sampling.penalty_repeat", "repetition_penalty"))


def _is_id(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2 ** 63


def token_ids(d: Mapping[str, Any]) -> Dict[str, Any]:
    """The special token ids of a config dict that are ids (an int, or a list of at
    most 1024 ints); anything else is left out (a file's malformed id is ignored,
    as before blockc read it)."""
    out: Dict[str, Any] = {}
    for k in TOKEN_ID_FIELDS:
        v = d.get(k)
        if _is_id(v) or (isinstance(v, list) and v and len(v) <= 1024 and all(map(_is_id, v))):
            out[k] = list(v) if isinstance(v, list) else v
    return out


def checked_token_ids(d: Mapping[str, Any], where: str,
                      vocab: Optional[int] = None) -> Dict[str, Any]:
    """The special token ids of a checkpoint file's dict, as :func:`token_ids`, but each
    value that cannot be an id of the model (the wrong type, negative, at or past
    ``vocab``) dropped with a one-line warning naming the file and the field, as
    transformers generates past them instead of failing as if the user had passed them."""
    out: Dict[str, Any] = {}
    for k in TOKEN_ID_FIELDS:
        v = d.get(k)
        if v is None:
            continue
        vals = v if isinstance(v, list) else [v]
        good = [x for x in vals[:1024] if _is_id(x) and (vocab is None or x < vocab)]
        if len(good) != len(vals):
            bad = [x for x in vals if x not in good]
            lim = "" if vocab is None else f" (the vocabulary has {vocab})"
            warnings.warn(f"{where}: {k} {bad[0] if bad else v!r} is not a token id of this "
                          f"model{lim}: ignored", UserWarning, stacklevel=3)
        if good:
            out[k] = good if isinstance(v, list) else good[0]
    return out


@dataclass(frozen=True)
class API:
    """How the server's requests give an option (OpenAI's field, or an extension's).

    Parameters
    ----------
    default : object
        The request's value when the field is absent (None: the model's default,
        :func:`blockc.generation.defaults.default_sampling`, as llama-server does).
    lo, hi : float, optional
        The request's range when the API's differs from the option's (OpenAI's
        temperature in [0, 2]; top_p from 0).
    least : float, optional
        A request's value below the option's range (an API's 0 that the option
        excludes) is raised to this one: OpenAI's top_p of 0 keeps the most likely token.
    """
    default: Any = None
    lo: Optional[float] = None
    hi: Optional[float] = None
    least: Optional[float] = None


@dataclass(frozen=True)
class Option:
    """One option of :class:`GenerationConfig`, declared once: its kind, range and help,
    from which its check, ``blockc generate``'s and ``blockc chat``'s flag (``--top-p``)
    and the server's request field are made.

    Parameters
    ----------
    help : str
        One line: what the option does.
    kind : {"real", "int", "flag", "choice", "id", "ids", "strs"}
        A finite real, an int, a bool, one of ``choices``, a token id, an id or a
        sequence of ids, a sequence of non-empty strings.
    lo, hi : float, optional
        The range (None: unbounded on that side).
    lo_open, hi_open : bool, optional
        ``lo`` (``hi``) itself excluded.
    choices : tuple of str, optional
        For ``kind="choice"``.
    cli : bool, optional
        A flag of the commands that generate.
    api : API, optional
        A field of the server's requests.
    """
    help: str
    kind: str = "real"
    lo: Optional[float] = None
    hi: Optional[float] = None
    lo_open: bool = False
    hi_open: bool = False
    choices: Tuple[str, ...] = ()
    cli: bool = False
    api: Optional[API] = None

    def span(self) -> str:
        """The range in words ("in (0, 1]", ">= 0"; "" when unbounded)."""
        lo, hi = self.lo, self.hi
        if lo is not None and hi is not None:
            return f"in {'(' if self.lo_open else '['}{lo:g}, {hi:g}{')' if self.hi_open else ']'}"
        if lo is not None:
            return f"{'>' if self.lo_open else '>='} {lo:g}"
        if hi is not None:
            return f"{'<' if self.hi_open else '<='} {hi:g}"
        return ""

    def check(self, value: Any, name: str) -> Any:
        """``value`` as the option holds it, checked (the errors name ``name``).

        Raises
        ------
        TypeError
            A value of the wrong type.
        ValueError
            A value out of range.
        """
        k = self.kind
        if k == "flag":
            return as_flag(value, name)
        if k == "choice":
            return as_choice(value, name, self.choices)
        if k == "id":
            return as_int(value, name, 0)
        if k == "ids":
            if isinstance(value, (list, tuple)):
                return tuple(as_int(e, name, 0) for e in value)
            return as_int(value, name, 0)
        if k == "strs":
            if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(
                    isinstance(x, str) and x for x in value):
                raise BlockcTypeError(f"{name} must be a sequence of non-empty str")
            return tuple(value)
        lo, hi = self.lo, self.hi
        v: Union[int, float] = (as_int(value, name, None if lo is None else int(lo)) if k == "int"
                                else as_real(value, name, lo))
        if ((lo is not None and (v < lo or (self.lo_open and v == lo)))
                or (hi is not None and (v > hi or (self.hi_open and v == hi)))):
            raise BlockcValueError(f"{name} must be {self.span()}, got {value!r}")
        return v


def _option(default: Any, help: str, **spec: Any) -> Any:
    return field(default=default, metadata={"option": Option(help, **spec)})


@dataclass(frozen=True)
class GenerationConfig:
    """Every option of a generation, declared once and checked when the config is made.

    Each field's :class:`Option` (:func:`options`) gives its kind, range and help; the
    commands' flags (``--temperature``, ...) and the server's request fields
    (``temperature``, with OpenAI's defaults) are made from them.

    Parameters
    ----------
    temperature : float >= 0, optional
        0 (the default) takes the argmax (the first maximum on ties); otherwise a
        sample from softmax(logits / temperature).
    top_k : int >= 1, optional
        Sample among the logits >= the ``top_k``-th largest.
    top_p : float in (0, 1], optional
        Nucleus sampling: the fewest most likely tokens whose probabilities sum past it.
    min_p : float in [0, 1], optional
        The tokens at least ``min_p`` times as likely as the most likely one.
    repetition_penalty : float > 0, optional
        Divide the positive logits (multiply the negative ones) of every token already
        in the row, prompt included (1: none).
    seed : int >= 0, optional
        Seed of each row's ``numpy.random.default_rng``.
    use_cache : bool, optional
        Decode through a KV cache (the default) or recompute every step.
    cache_dtype : {"float32", "float16", "q8_0", "q4_0"}, optional
        What that cache keeps keys and values as (:meth:`blockc.GPT.new_cache`):
        ``"float16"`` halves its memory and what each step reads at long contexts.
    eos_token_id : int or sequence of int, optional
        The end ids: a row stops when it emits one. An empty sequence: none.
    pad_token_id : int, optional
        Filler after a row's end (default: the first end id, else 0).
    bos_token_id : int, optional
        The checkpoint's beginning-of-sequence id (carried, written back on save).
    stop : sequence of non-empty str, optional
        Stop a row when its generated text contains one (needs a tokenizer).
    num_assistant_tokens : int in [1, 128], optional
        Speculative decoding with a draft model (``assistant_model``): the tokens it
        drafts per round (default 5; :mod:`blockc.generation.speculative`).
    prompt_lookup_num_tokens : int in [1, 128], optional
        Speculative decoding by prompt lookup: the tokens drafted per round from the
        context's n-grams (None: off).

    Raises
    ------
    TypeError
        An option of the wrong type (named).
    ValueError
        An option out of range (named).

    Examples
    --------
    >>> g = GenerationConfig(temperature=0.7, eos_token_id=[2, 3])
    >>> g.eos_token_id, g.replace(top_k=5).top_k
    ((2, 3), 5)
    >>> g.resolve(vocab=8).pad
    2
    """

    temperature: float = _option(
        0.0, "0: greedy; else sample from softmax(logits / temperature)",
        lo=0.0, cli=True, api=API(hi=2.0))
    top_k: Optional[int] = _option(
        None, "sample among the logits >= the k-th largest", kind="int", lo=1, cli=True,
        api=API())
    top_p: Optional[float] = _option(
        None, "nucleus sampling: the fewest most likely tokens whose probabilities sum past it",
        lo=0.0, hi=1.0, lo_open=True, cli=True, api=API(lo=0.0, least=1e-12))
    min_p: Optional[float] = _option(
        None, "the tokens at least min_p times as likely as the most likely one",
        lo=0.0, hi=1.0, cli=True, api=API())
    repetition_penalty: Optional[float] = _option(
        None, "divide the positive logits (multiply the negative ones) of the tokens already "
        "in the row (1: none)", lo=0.0, lo_open=True, cli=True, api=API())
    seed: Optional[int] = _option(
        None, "seed of each row's random generator", kind="int", lo=0, cli=True,
        api=API(hi=2 ** 63 - 1))
    use_cache: bool = _option(True, "decode through a KV cache", kind="flag")
    cache_dtype: str = _option(
        "float32", "the KV cache's element type (float32; float16: half the memory; q8_0, "
        "q4_0: blocks of 32, about 0.27 and 0.14 of it, head size a multiple of 32)",
        kind="choice", choices=tuple(CACHE_DTYPES), cli=True)
    eos_token_id: Union[int, Tuple[int, ...], None] = _option(
        None, "the end ids: a row stops when it emits one", kind="ids")
    pad_token_id: Optional[int] = _option(None, "filler after a row's end", kind="id")
    bos_token_id: Optional[int] = _option(None, "the checkpoint's beginning-of-sequence id",
                                          kind="id")
    stop: Optional[Tuple[str, ...]] = _option(
        None, "stop a row when its text contains one", kind="strs")
    num_assistant_tokens: Optional[int] = _option(
        None, "speculative decoding: the tokens the draft model drafts per round (5)",
        kind="int", lo=1, hi=128)
    prompt_lookup_num_tokens: Optional[int] = _option(
        None, "speculative decoding by prompt lookup: the tokens drafted per round from the "
        "context's n-grams (off)", kind="int", lo=1, hi=128)

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None or f.default is not None:  # None: unset, where that is the default
                object.__setattr__(self, f.name, f.metadata["option"].check(v, f.name))

    # ---- making one -------------------------------------------------------------

    def replace(self, **changes: Any) -> "GenerationConfig":
        """This config with some options changed: a new config, checked.

        Parameters
        ----------
        **changes
            Options by name (None sets an option to None).

        Returns
        -------
        GenerationConfig

        Raises
        ------
        TypeError
            A name that is not an option, or a value of the wrong type.
        ValueError
            A value out of range.

        Examples
        --------
        >>> GenerationConfig().replace(temperature=1.0, seed=3).seed
        3
        """
        unknown = sorted(set(changes) - {f.name for f in fields(self)})
        if unknown:
            raise BlockcTypeError(f"GenerationConfig has no option {unknown[0]!r}")
        return _dc_replace(self, **changes)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "GenerationConfig":
        """The config of a ``generation_config.json``-style dict (or a config.json):
        its token ids (the malformed ones ignored, as ``transformers`` writes
        none), and, when ``do_sample`` is true, the sampling options it states
        (``temperature``, ``top_k``, ``top_p``, ``min_p``, ``repetition_penalty``;
        ``do_sample`` false or absent means greedy, as in ``transformers``).

        Parameters
        ----------
        d : mapping

        Returns
        -------
        GenerationConfig

        Raises
        ------
        TypeError
            ``d`` is not a mapping, or a sampling option of the wrong type.
        ValueError
            A sampling option out of range.

        Examples
        --------
        >>> GenerationConfig.from_dict({"eos_token_id": [1, 2], "do_sample": True,
        ...                             "temperature": 0.6}).temperature
        0.6
        """
        if not isinstance(d, Mapping):
            raise BlockcTypeError(f"a generation config must be a mapping, got {type(d).__name__}")
        kw: Dict[str, Any] = dict(token_ids(d))
        if d.get("do_sample") is True:
            kw.update({k: d[k] for k in SAMPLING_FIELDS if d.get(k) is not None})
            kw.setdefault("temperature", 1.0)  # transformers' default when sampling
        return cls(**kw)

    @classmethod
    def from_pretrained(cls, path: Union[str, "os.PathLike[str]"],
                        config: Optional[Mapping[str, Any]] = None,
                        vocab: Optional[int] = None) -> "GenerationConfig":
        """The generation config of a checkpoint directory: ``config.json``'s token
        ids, then ``generation_config.json``'s fields (see :meth:`from_dict`), which
        win when the directory has one. An id that cannot be one (the wrong type, or
        outside ``vocab``) is dropped with a warning naming its file.

        Parameters
        ----------
        path : str or os.PathLike
            The directory.
        config : mapping, optional
            Its config.json, already read (it is read when None).
        vocab : int, optional
            The model's vocabulary: ids at or past it are dropped (with a warning).

        Returns
        -------
        GenerationConfig

        Raises
        ------
        ValueError
            A config file that is not a JSON object, or a sampling option out of range.
        OSError
            A file that cannot be read.

        Examples
        --------
        >>> import json, tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = open(os.path.join(d, "config.json"), "w").write('{"eos_token_id": 5}')
        ...     GenerationConfig.from_pretrained(d).eos_token_id
        5
        """
        path = os.fspath(path)
        d = dict(checked_token_ids(read_config(path) if config is None else config,
                                   os.path.join(path, "config.json"), vocab))
        gen = os.path.join(path, "generation_config.json")
        if os.path.lexists(gen):  # read bounded and regular-file-checked (read_config)
            g = read_config(gen)
            ids = checked_token_ids(g, gen, vocab)
            d.update({k: g[k] for k in g if k not in TOKEN_ID_FIELDS})
            d.update(ids)
        return cls.from_dict(d)

    @classmethod
    def from_gguf(cls, metadata: Mapping[str, Any], vocab: Optional[int] = None
                  ) -> "GenerationConfig":
        """The generation config of a GGUF file's metadata (a GGUF file has no
        ``generation_config.json``): its bos and pad ids, as end ids its end of
        text, end of turn and end of message (:data:`GGUF_END_KEYS`, in that order), then
        the tokens spelled as an end (:data:`GGUF_END_TEXTS`, in id order; once each), as
        llama.cpp stops at all of them, and the sampling options its ``general.sampling.*``
        keys state (:data:`GGUF_SAMPLING_KEYS`; a value out of range is left out). An id that is not an int below both the file's token
        count and ``vocab`` is left out.

        Parameters
        ----------
        metadata : mapping
            The file's metadata, key -> value (:attr:`blockc.gguf.GGUFFile.metadata`).
        vocab : int, optional
            The model's vocabulary.

        Returns
        -------
        GenerationConfig

        Raises
        ------
        TypeError
            ``metadata`` is not a mapping.

        Examples
        --------
        >>> GenerationConfig.from_gguf({"tokenizer.ggml.eos_token_id": 2,
        ...                             "tokenizer.ggml.eot_token_id": 7}).eos_token_id
        (2, 7)
        """
        if not isinstance(metadata, Mapping):
            raise BlockcTypeError(f"metadata must be a mapping, got {type(metadata).__name__}")
        toks = metadata.get("tokenizer.ggml.tokens")
        n = len(toks) if isinstance(toks, (list, tuple)) and toks else None
        n = vocab if n is None else n if vocab is None else min(n, vocab)

        def ok(v: Any) -> bool:
            return _is_id(v) and (n is None or v < n)
        kw: Dict[str, Any] = {ours: metadata[key] for ours, key in _GGUF_IDS
                              if ok(metadata.get(key))}
        ends = tuple(dict.fromkeys([metadata[k] for k in GGUF_END_KEYS if ok(metadata.get(k))]
                                   + [i for i, t in enumerate(toks or ()) if t in GGUF_END_TEXTS
                                      and ok(i)]))
        if ends:
            kw["eos_token_id"] = ends[0] if len(ends) == 1 else ends
        for key, ours in GGUF_SAMPLING_KEYS:  # general.sampling.*: each valid one kept
            v = metadata.get(key)
            if ours == "top_k" and v == 0:
                continue  # llama.cpp's top_k 0: none
            try:
                kw[ours] = options()[ours][0].check(v, key)
            except (TypeError, ValueError):
                continue  # absent, or a value blockc cannot sample with: not the file's
        return cls(**kw)

    def to_dict(self) -> Dict[str, Any]:
        """The options that differ from the defaults, JSON-ready (tuples as lists).

        Returns
        -------
        dict

        Examples
        --------
        >>> GenerationConfig(top_k=4, eos_token_id=(1, 2)).to_dict()
        {'top_k': 4, 'eos_token_id': [1, 2]}
        """
        out: Dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v != f.default:
                out[f.name] = list(v) if isinstance(v, tuple) else v
        return out

    def token_ids(self) -> Dict[str, Any]:
        """bos/eos/pad as a config.json gives them (an eos list as a list), the unset
        ones left out: what ``save_pretrained`` writes back.

        Returns
        -------
        dict

        Examples
        --------
        >>> GenerationConfig(eos_token_id=[5, 7], pad_token_id=1).token_ids()
        {'eos_token_id': [5, 7], 'pad_token_id': 1}
        """
        return {k: v for k, v in self.to_dict().items() if k in TOKEN_ID_FIELDS}

    def to_hf_dict(self) -> Dict[str, Any]:
        """The ``generation_config.json`` transformers reads for this config: the token
        ids, ``do_sample`` (true when the temperature is above 0) and, when sampling, the
        sampling options set; :meth:`from_dict` reads it back to this config's ids and
        sampling options (``seed``, ``stop``, ``use_cache`` and ``cache_dtype`` are blockc's per-call
        options and are not written).

        Returns
        -------
        dict

        Examples
        --------
        >>> GenerationConfig(temperature=0.7, top_k=40, eos_token_id=2).to_hf_dict()
        {'eos_token_id': 2, 'do_sample': True, 'temperature': 0.7, 'top_k': 40}
        """
        out: Dict[str, Any] = dict(self.token_ids())
        out["do_sample"] = self.temperature > 0.0
        if out["do_sample"]:
            out.update({k: getattr(self, k) for k in SAMPLING_FIELDS
                        if getattr(self, k) is not None})
        return out

    # ---- against a model --------------------------------------------------------

    @property
    def eos_ids(self) -> Tuple[int, ...]:
        """The end ids as a tuple (empty: none)."""
        e = self.eos_token_id
        return () if e is None else e if isinstance(e, tuple) else (e,)

    def resolve(self, vocab: int) -> "ResolvedGeneration":
        """The options checked against a vocabulary of ``vocab`` tokens: the end and
        pad ids in range, the pad chosen (``pad_token_id``, else the first end id,
        else 0), top-k capped at the vocabulary. Done once per generation: the loop
        and the sampler read what it returns.

        Parameters
        ----------
        vocab : int >= 1

        Returns
        -------
        ResolvedGeneration

        Raises
        ------
        ValueError
            An end or pad id outside [0, vocab).

        Examples
        --------
        >>> r = GenerationConfig(top_k=50, eos_token_id=3).resolve(vocab=16)
        >>> r.top_k, r.eos, r.pad
        (16, (3,), 3)
        """
        vocab = as_int(vocab, "vocab", 1)
        eos = tuple(as_int(e, "eos_token_id", 0, vocab - 1) for e in self.eos_ids)
        pad = self.pad_token_id
        pad = eos[0] if pad is None and eos else pad
        pad = 0 if pad is None else as_int(pad, "pad_token_id", 0, vocab - 1)
        top_k = None if self.top_k is None else min(self.top_k, vocab)
        return ResolvedGeneration(_dc_replace(self, top_k=top_k, eos_token_id=eos,
                                              pad_token_id=pad), vocab)


_NAMES = frozenset(f.name for f in fields(GenerationConfig))


def options() -> Dict[str, Tuple[Option, Any]]:
    """Every option of :class:`GenerationConfig`: name -> (its :class:`Option`, its
    default), in the fields' order: what the commands' flags and the server's request
    fields are made from.

    Returns
    -------
    dict

    Examples
    --------
    >>> o, default = options()["top_p"]
    >>> o.span(), default, o.api.lo
    ('in (0, 1]', None, 0.0)
    """
    return {f.name: (f.metadata["option"], f.default) for f in fields(GenerationConfig)}


class ResolvedGeneration(NamedTuple):
    """A GenerationConfig checked against a model's vocabulary (:meth:`GenerationConfig.resolve`):
    what the loop and the sampler read.

    ``config`` is the resolved config (top-k at most ``vocab``, the end ids a tuple, the
    pad chosen); its options read through (``r.temperature`` is ``r.config.temperature``).
    """
    config: GenerationConfig
    vocab: int

    @property
    def eos(self) -> Tuple[int, ...]:
        """The end ids (empty: none)."""
        return self.config.eos_ids

    @property
    def pad(self) -> int:
        """The pad id (pad_token_id, else the first end id, else 0)."""
        return self.config.pad_token_id

    @property
    def greedy(self) -> bool:
        """Temperature 0: the argmax."""
        return self.config.temperature == 0.0

    def __getattr__(self, name: str) -> Any:
        if name in _NAMES:
            return getattr(self.config, name)
        raise AttributeError(f"ResolvedGeneration has no attribute {name!r}")
