"""The tokenizer a GGUF file describes, built as a ``tokenizers`` tokenizer.

A GGUF carries no ``tokenizer.json``: its vocabulary, merges, scores, token types
and special ids are metadata under llama.cpp's keys (``tokenizer.ggml.*``). This
module builds from them the tokenizer transformers' GGUF loader builds (so both
encode a text to the same ids), for the two models a file states in
``tokenizer.ggml.model``:

- ``gpt2``: byte-level BPE. Tokens are spelled in GPT-2's byte alphabet (a token
  spelled otherwise is respelled byte by byte); ``merges`` as stored; the text split
  by GPT-2's pattern, or by the pattern of the pre-tokenizer ``tokenizer.ggml.pre``
  names (``llama-bpe`` for Llama 3, ``qwen2`` for Qwen2 and Qwen3, ...); Qwen2's text
  normalised to NFC first, as its tokenizer.json does (:data:`NFC_PRE_TOKENIZERS`);
  ``refact``, ``smollm``, ``starcoder``, ...'s digits split one by one before GPT-2's
  split (:data:`DIGITS_FIRST_PRE_TOKENIZERS`: SmolLM2's, StarCoder-style ones).
- ``llama``: SentencePiece-style BPE with byte fallback (``<0x0A>`` tokens), spaces
  as ``▁`` and one ``▁`` prepended to each piece of text between special tokens, as
  llama.cpp and Llama 2's tokenizer.json do (none when
  ``tokenizer.ggml.add_space_prefix`` is false); the merges as stored, or, as
  SentencePiece files have none, every split of a token into two tokens, ranked by
  the token's score. Gemma's (:data:`GEMMA_ARCHITECTURES`, by ``general.architecture``)
  prepends nothing, its tokens of spaces are stored as spaces (read as ``▁``s) and its
  merges follow its tokens' order, as transformers reads Gemma files.

Tokens of type CONTROL (3) become special tokens and USER_DEFINED (4) added tokens,
both matched whole in the text; in a file whose ``general.name`` names Phi-3, the control
tokens (but ``<unk>``, ``<s>``, ``<|endoftext|>``) take the whitespace after them, as
llama.cpp does and Phi-3's tokenizer.json says. ``tokenizer.ggml.add_bos_token`` (true by default
for ``llama``) and ``add_eos_token`` make the post-processor add them when
``add_special_tokens=True``. The chat template (``tokenizer.chat_template``) and
the special ids are returned alongside.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from .._errors import BlockcTypeError, BlockcValueError
from ..io.gguf import GGUFFile, Value, read
from .chat import ChatTemplate

__all__ = ["build", "TokenizerInfo", "PRE_TOKENIZER_SPLITS", "NFC_PRE_TOKENIZERS",
           "DIGITS_FIRST_PRE_TOKENIZERS", "GEMMA_ARCHITECTURES"]

# CONTROL and USER_DEFINED in llama.cpp's token types
_CONTROL, _USER_DEFINED = 3, 4

# general.name parts (lower case) whose control tokens strip the whitespace after them, and
# the tokens that do not (llama.cpp's Phi-3 rule)
_RSTRIP_NAMES = ("phi-3", "phi3")
_NOT_RSTRIPPED = frozenset({"<unk>", "<s>", "<|endoftext|>"})

# the split patterns of the pre-tokenizers a file may name (the tokenizers' own regexes)
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_GPT4O = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
          r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
          r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
          r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
          r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
           r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
           r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

#: tokenizer.ggml.pre -> the regex splitting the text before byte-level BPE (others: GPT-2's)
PRE_TOKENIZER_SPLITS: Dict[str, str] = {
    **{k: _LLAMA3 for k in ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                            "midm-2.0", "lfm2", "dbrx", "smaug-bpe")},
    **{k: _QWEN2 for k in ("qwen2", "deepseek-r1-qwen", "megrez")},
    **{k: _GPT4O for k in ("gpt-4o", "llama4", "minimax-m2")},
    "tekken": _TEKKEN,
}


#: tokenizer.ggml.pre values whose text is split into single digits first, then as GPT-2's
#: (llama.cpp's starcoder, refact, command-r, smollm, codeshell, exaone, minerva-7b: their
#: tokenizer.json's Digits(individual_digits) before ByteLevel: SmolLM2's, StarCoder's)
DIGITS_FIRST_PRE_TOKENIZERS = frozenset({"starcoder", "refact", "command-r", "smollm",
                                         "codeshell", "exaone", "minerva-7b"})

#: tokenizer.ggml.pre values whose tokenizer.json normalises the text to NFC first (Qwen2's)
NFC_PRE_TOKENIZERS = frozenset({"qwen2", "deepseek-r1-qwen", "megrez"})

#: general.architecture values whose 'llama' (SentencePiece) vocabulary is Gemma's: no
#: prefix space, tokens of spaces stored as spaces, merges in the tokens' order
GEMMA_ARCHITECTURES = frozenset({"gemma", "gemma2", "gemma3"})


class TokenizerInfo(dict):
    """What a file says beside the vocabulary: ``bos_token_id``, ``eos_token_id``,
    ``unk_token_id``, ``pad_token_id`` (None when absent), ``add_bos_token``,
    ``add_eos_token``, ``chat_template`` (None when absent)."""


def _byte_alphabet() -> Dict[int, str]:
    """GPT-2's bytes -> printable characters (the printable bytes map to themselves,
    the others to 256, 257, ... in order)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def _merges_from_scores(tokens: List[str], scores: List[float]) -> List[Tuple[str, str]]:
    """The merges a SentencePiece vocabulary implies: for each token, every split into two
    tokens of the vocabulary, ranked by the merged token's score (higher first; ties by
    the longer left, then the longer right part), the splits of one token in the order
    of their parts' ids."""
    vocab = {t: i for i, t in enumerate(tokens)}
    score = dict(zip(tokens, scores))
    ranked = []
    for tok, sc in score.items():
        splits = [(tok[:k], tok[k:]) for k in range(1, len(tok))
                  if tok[:k] in vocab and tok[k:] in vocab]
        splits.sort(key=lambda p: (vocab[p[0]], vocab[p[1]]))
        ranked.extend((a, b, sc) for a, b in splits)
    ranked.sort(key=lambda r: (r[2], len(r[0]), len(r[1])), reverse=True)
    return [(a, b) for a, b, _ in ranked]


def _strings(f: GGUFFile, key: str) -> Optional[List[str]]:
    v = f.fields.get(key)
    if v is None:
        return None
    if v.type != "ARRAY" or v.element != "STRING":
        raise BlockcValueError(f"{f.path}: metadata key {key!r} must be an array of strings, "
                               f"got {v.type} {v.element or ''}".rstrip())
    return v.value


def _id(f: GGUFFile, key: str, n: int) -> Optional[int]:
    v = f.fields.get(key)
    if v is None:
        return None
    if v.type not in ("UINT32", "INT32", "UINT64", "INT64", "UINT16", "UINT8") or \
            not 0 <= v.value < n:
        raise BlockcValueError(f"{f.path}: metadata key {key!r} must be a token id in [0, {n}), "
                               f"got {v.type} {v.value!r}")
    return int(v.value)


def _flag(f: GGUFFile, key: str, default: bool) -> bool:
    v = f.fields.get(key)
    if v is None:
        return default
    if v.type != "BOOL":
        raise BlockcValueError(f"{f.path}: metadata key {key!r} must be a BOOL, got {v.type}")
    return bool(v.value)


def _check_merges(f: GGUFFile, merges: List[Tuple[str, str]], vocab: Dict[str, int]) -> None:
    """Each merge joins two tokens into a third, all of the vocabulary (tokenizers' BPE
    aborts the process on one that does not)."""
    for i, (a, b) in enumerate(merges):
        if a not in vocab or b not in vocab or a + b not in vocab:
            raise BlockcValueError(f"{f.path}: metadata key 'tokenizer.ggml.merges'[{i}] merges "
                                   f"{a!r} and {b!r}, but the vocabulary lacks "
                                   f"{next(t for t in (a, b, a + b) if t not in vocab)!r}")


def build(f: GGUFFile) -> Tuple[Any, TokenizerInfo]:
    """The ``tokenizers.Tokenizer`` of a parsed GGUF file, and its :class:`TokenizerInfo`.

    Parameters
    ----------
    f : GGUFFile

    Returns
    -------
    (tokenizers.Tokenizer, TokenizerInfo)

    Raises
    ------
    ImportError
        tokenizers is not installed.
    ValueError
        The file has no tokenizer, or one of a model other than gpt2 and llama, or its
        metadata is inconsistent (counts that differ, ids out of range), naming the key.
    """
    try:
        from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                                pre_tokenizers, processors)
    except ImportError:
        raise ImportError("a GGUF file's tokenizer needs the tokenizers package: pip install "
                          "'blockc[text]'") from None
    kind = f.get("tokenizer.ggml.model")
    if kind is None:
        raise BlockcValueError(f"{f.path}: no tokenizer (no metadata key 'tokenizer.ggml.model')")
    if kind not in ("gpt2", "llama"):
        raise BlockcValueError(f"{f.path}: tokenizer.ggml.model {kind!r}: blockc builds the "
                               "'gpt2' (byte-level BPE) and 'llama' (SentencePiece BPE) tokenizers")
    tokens = _strings(f, "tokenizer.ggml.tokens")
    if not tokens:
        raise BlockcValueError(f"{f.path}: metadata key 'tokenizer.ggml.tokens' is missing or empty")
    n = len(tokens)
    types = f.get("tokenizer.ggml.token_type")
    if types is not None and len(types) != n:
        raise BlockcValueError(f"{f.path}: metadata key 'tokenizer.ggml.token_type' has "
                               f"{len(types)} entries for {n} tokens")
    merges_raw = _strings(f, "tokenizer.ggml.merges")
    merges: List[Tuple[str, str]] = []
    if merges_raw is not None:
        for i, m in enumerate(merges_raw):
            parts = m.split(" ")
            if len(parts) != 2:
                raise BlockcValueError(f"{f.path}: metadata key 'tokenizer.ggml.merges'[{i}] is "
                                       f"{m!r}, not two tokens separated by one space")
            merges.append((parts[0], parts[1]))
    if kind == "gpt2":
        alpha = _byte_alphabet()
        spelled = set(alpha.values())
        vocab = {}
        for i, t in enumerate(tokens):
            if not set(t) <= spelled:
                t = "".join(alpha[b] for b in t.encode("utf-8"))
            vocab[t] = i
        _check_merges(f, merges, vocab)
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, dropout=None,
                                   continuing_subword_prefix="", end_of_word_suffix="",
                                   fuse_unk=False))
        pre = f.get("tokenizer.ggml.pre")
        split = PRE_TOKENIZER_SPLITS.get(pre)
        if pre in NFC_PRE_TOKENIZERS:  # Qwen2's tokenizer.json normalises to NFC first
            tok.normalizer = normalizers.NFC()
        if pre in DIGITS_FIRST_PRE_TOKENIZERS:
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False)])
        elif split is None:
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        else:
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(split), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        byte_level = spelled
    else:
        scores = f.get("tokenizer.ggml.scores")
        gemma = f.get("general.architecture") in GEMMA_ARCHITECTURES
        if gemma:  # a token of spaces only is stored as spaces: ▁s, as the text's become
            tokens = ["▁" * len(t) if " " in t and not t.strip() else t for t in tokens]
        if merges_raw is None:
            if scores is None or len(scores) != n:
                raise BlockcValueError(f"{f.path}: a 'llama' tokenizer without merges needs "
                                       f"'tokenizer.ggml.scores' for its {n} tokens")
            # Gemma's merges follow its tokens' order, not their scores
            merges = _merges_from_scores(tokens, [-float(i) for i in range(n)] if gemma
                                         else [float(s) for s in scores])
        vocab = {t: i for i, t in enumerate(tokens)}
        _check_merges(f, merges, vocab)
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=True, byte_fallback=True,
                                   dropout=None))
        # Gemma's (and any file saying add_space_prefix false): spaces as ▁, none prepended;
        # else one ▁ before each piece of text between special tokens, as llama.cpp does
        # and Llama 2's tokenizer.json (Prepend then Replace: "  hi" is "▁▁▁hi")
        prefix = _flag(f, "tokenizer.ggml.add_space_prefix", not gemma)
        if prefix:
            tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                                   normalizers.Replace(" ", "▁")])
            tok.pre_tokenizer = None
        else:
            tok.normalizer = None
            tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never",
                                                         split=False)
        steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
        tok.decoder = decoders.Sequence(steps + ([decoders.Strip(content=" ", left=1)]
                                                 if prefix else []))
        byte_level = None
    info = TokenizerInfo(
        bos_token_id=_id(f, "tokenizer.ggml.bos_token_id", n),
        eos_token_id=_id(f, "tokenizer.ggml.eos_token_id", n),
        unk_token_id=_id(f, "tokenizer.ggml.unknown_token_id", n),
        pad_token_id=_id(f, "tokenizer.ggml.padding_token_id", n),
        add_bos_token=_flag(f, "tokenizer.ggml.add_bos_token", kind == "llama"),
        add_eos_token=_flag(f, "tokenizer.ggml.add_eos_token", False),
        chat_template=f.get("tokenizer.chat_template"))
    if info["chat_template"] is not None and not isinstance(info["chat_template"], str):
        raise BlockcValueError(f"{f.path}: metadata key 'tokenizer.chat_template' must be a string")
    types = [int(t) for t in types] if types is not None else [1] * n
    # llama.cpp's rule for a file named Phi-3: its control tokens but <unk>, <s> and
    # <|endoftext|> (and </s>) take the whitespace after them, as Phi-3's tokenizer.json says
    name = f.get("general.name")
    phi3 = isinstance(name, str) and any(k in name.lower() for k in _RSTRIP_NAMES)
    special = [AddedToken(t, normalized=False, special=True,
                          rstrip=phi3 and t not in _NOT_RSTRIPPED)
               for t, ty in zip(tokens, types)
               if ty == _CONTROL and (byte_level is None or set(t) <= byte_level)]
    # the special tokens a tokenizer names (bos, eos, unk, pad) are special wherever they are
    named = {tokens[i] for k in ("bos_token_id", "eos_token_id", "unk_token_id", "pad_token_id")
             if (i := info[k]) is not None}
    have = {a.content for a in special}
    special += [AddedToken(t, normalized=False, special=True,
                           rstrip=phi3 and t not in _NOT_RSTRIPPED) for t in tokens
                if t in named and t not in have]
    if special:
        tok.add_special_tokens(special)
    vocab = tok.get_vocab()  # once: a dict of the whole vocabulary per token was quadratic
    user = [AddedToken(t, normalized=False, special=False) for t, ty in zip(tokens, types)
            if ty == _USER_DEFINED and t in vocab]
    if user:
        tok.add_tokens(user)
    single, pairs, used = "$A:0", "$A:0 $B:1", []
    if info["add_bos_token"] and info["bos_token_id"] is not None:
        b = tokens[info["bos_token_id"]]
        single, pairs = f"{b}:0 {single}", f"{b}:0 $A:0 {b}:1 $B:1"
        used.append((b, info["bos_token_id"]))
    if info["add_eos_token"] and info["eos_token_id"] is not None:
        e = tokens[info["eos_token_id"]]
        single += f" {e}:0"
        pairs = pairs.replace("$A:0", f"$A:0 {e}:0") + f" {e}:1"
        if (e, info["eos_token_id"]) not in used:
            used.append((e, info["eos_token_id"]))
    if used:
        tok.post_processor = processors.TemplateProcessing(single=single, pair=pairs,
                                                           special_tokens=used)
    return tok, info


def load(path: str, cls: Any) -> Any:
    """A :class:`blockc.Tokenizer` (``cls``) of the GGUF file ``path``: its tokenizer, end
    and begin ids, and chat template (a :class:`blockc.chat.ChatTemplate` seeing the file's
    special tokens, when jinja2 is installed)."""
    f = read(path)
    tok, info = build(f)
    tokens = f.get("tokenizer.ggml.tokens")
    chat = None
    if info["chat_template"] is not None:
        try:
            specials = {k: tokens[info[k + "_id"]] for k in ("bos_token", "eos_token", "unk_token",
                                                            "pad_token")
                        if info[k + "_id"] is not None}
            chat = ChatTemplate(info["chat_template"], specials)
        except ImportError:  # jinja2 absent: the template is there, unused
            chat = None
    out = cls(tok, info["eos_token_id"], info["bos_token_id"], chat_template=chat)
    out.add_bos_token = info["add_bos_token"]
    return out


def _fields_of_file(path: str) -> Dict[str, Any]:
    return {k: v for k, v in read(path).fields.items() if k.startswith("tokenizer.")}


def export(tok: Any, add_bos: Optional[bool] = None, chat_template: Optional[str] = None,
           eos_id: Optional[int] = None, bos_id: Optional[int] = None) -> Dict[str, Any]:
    """The ``tokenizer.*`` metadata (name -> :class:`blockc.gguf.Value`) of a ``tokenizers``
    BPE tokenizer: ``gpt2`` for a byte-level one (tokens, merges, the pre-tokenizer's
    name when its split pattern is one :data:`PRE_TOKENIZER_SPLITS` knows), ``llama`` for
    a SentencePiece-style one (tokens, scores by rank, the merges too, byte tokens typed
    BYTE, ``add_space_prefix`` as its normalizer or Metaspace says); added special tokens
    CONTROL, other added tokens USER_DEFINED.

    Raises
    ------
    ValueError
        A tokenizer that is not BPE, or neither byte-level nor SentencePiece-style.
    """
    import json
    d = json.loads(tok.to_str())
    model = d.get("model") or {}
    if model.get("type") != "BPE":
        raise BlockcValueError(f"a {model.get('type')} tokenizer: GGUF files store BPE ones "
                               "(gpt2, llama) here")
    vocab = dict(model.get("vocab") or {})
    added = d.get("added_tokens") or []
    for a in added:
        vocab.setdefault(a["content"], a["id"])
    n = max(vocab.values()) + 1
    tokens: List[Optional[str]] = [None] * n
    for t, i in vocab.items():
        tokens[i] = t
    for i, t in enumerate(tokens):
        if t is None:
            tokens[i] = f"[PAD{i}]"
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    text = json.dumps(d.get("pre_tokenizer"))
    norm = json.dumps(d.get("normalizer"), ensure_ascii=False)
    byte_level = "ByteLevel" in text
    types = [1] * n
    for a in added:
        types[a["id"]] = _CONTROL if a.get("special") else _USER_DEFINED
    out: Dict[str, Any] = {}
    if byte_level:
        out["tokenizer.ggml.model"] = Value("STRING", "gpt2")
        pre = "gpt-2"
        if '"individual_digits": true' in text:  # digits one by one, then GPT-2's split
            pre = "starcoder"
        for name, pattern in PRE_TOKENIZER_SPLITS.items():
            if json.dumps(pattern)[1:-1] in text:
                pre = name
                break
        out["tokenizer.ggml.pre"] = Value("STRING", pre)
    elif model.get("byte_fallback") and ("Metaspace" in text or "▁" in norm):
        out["tokenizer.ggml.model"] = Value("STRING", "llama")
        out["tokenizer.ggml.pre"] = Value("STRING", "default")
        # a ▁ before the text: Llama 2's Prepend normalizer, or a Metaspace that prepends
        prefix = "Prepend" in norm or ("Metaspace" in text and '"never"' not in text)
        out["tokenizer.ggml.add_space_prefix"] = Value("BOOL", prefix)
        for i, t in enumerate(tokens):
            if len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
                types[i] = 6
        unk = model.get("unk_token")
        if unk in vocab:
            types[vocab[unk]] = 2
            out["tokenizer.ggml.unknown_token_id"] = Value("UINT32", vocab[unk])
        out["tokenizer.ggml.scores"] = Value("ARRAY", [-float(i) for i in range(n)], "FLOAT32")
    else:
        raise BlockcValueError("a BPE tokenizer that is neither byte-level nor SentencePiece-style "
                               "(Metaspace with byte fallback): no GGUF tokenizer model fits")
    out["tokenizer.ggml.tokens"] = Value("ARRAY", tokens, "STRING")
    out["tokenizer.ggml.token_type"] = Value("ARRAY", types, "INT32")
    out["tokenizer.ggml.merges"] = Value("ARRAY", merges, "STRING")
    if bos_id is not None:
        out["tokenizer.ggml.bos_token_id"] = Value("UINT32", bos_id)
    if eos_id is not None:
        out["tokenizer.ggml.eos_token_id"] = Value("UINT32", eos_id)
    if add_bos is None:
        pp = d.get("post_processor") or {}
        single = pp.get("single") or []
        add_bos = bool(single) and "SpecialToken" in single[0]
    out["tokenizer.ggml.add_bos_token"] = Value("BOOL", bool(add_bos))
    if chat_template:
        out["tokenizer.chat_template"] = Value("STRING", chat_template)
    return out


def metadata_of(tokenizer: Any, m: Any = None) -> Dict[str, Any]:
    """The ``tokenizer.*`` metadata to write: of a :class:`blockc.Tokenizer`, a directory's
    tokenizer.json, a GGUF file's; None: the GGUF file ``m`` was loaded from, or none.

    Raises
    ------
    ValueError
        A tokenizer that cannot be stored (see :func:`export`).
    """
    import os
    if tokenizer is None:
        return dict(getattr(m, "gguf_tokenizer", None) or {})
    if isinstance(tokenizer, (str, os.PathLike)):
        p = os.fspath(tokenizer)
        if os.path.isfile(p) and p.endswith(".gguf"):
            return _fields_of_file(p)
        raise BlockcTypeError(f"tokenizer must be a blockc.Tokenizer or a .gguf file here, got "
                              f"the path {p!r} (save_gguf loads a directory's tokenizer)")
    chat = getattr(tokenizer, "chat_template", None)
    src = getattr(chat, "source", None)
    return export(getattr(tokenizer, "backend", tokenizer),
                  getattr(tokenizer, "add_bos_token", None), src,
                  getattr(tokenizer, "eos_token_id", None), getattr(tokenizer, "bos_token_id", None))


def placeholder(vocab: int) -> Dict[str, Any]:
    """A byte-level vocabulary of ``vocab`` tokens (``<t0>``, ``<t1>``, ..., then ``a``,
    ``b``, ``ab`` and one merge): what llama.cpp needs to load a model that has no
    tokenizer and run its token ids."""
    n = max(int(vocab), 3)
    tokens = [f"<t{i}>" for i in range(n - 3)] + ["a", "b", "ab"]
    return {"tokenizer.ggml.model": Value("STRING", "gpt2"),
            "tokenizer.ggml.pre": Value("STRING", "gpt-2"),
            "tokenizer.ggml.tokens": Value("ARRAY", tokens, "STRING"),
            "tokenizer.ggml.token_type": Value("ARRAY", [1] * n, "INT32"),
            "tokenizer.ggml.merges": Value("ARRAY", ["a b"], "STRING")}
