"""``POST /v1/embeddings``, ``POST /tokenize`` and ``POST /detokenize``: what they compute
and the JSON they answer, over a model and its tokenizer (the routes are in
:mod:`blockc.serve.app`).

Pooling is the model directory's own where it says: sentence-transformers'
``modules.json`` naming a ``Pooling`` module whose ``config.json`` sets
``pooling_mode_lasttoken`` / ``pooling_mode_mean_tokens`` / ``pooling_mode_cls_token`` /
``pooling_mode_max_tokens``; otherwise the last token (a decoder's: every token before it
is in its state).
"""
from __future__ import annotations

import base64
import json
import os
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from ..model.embed import normalize_rows
from .types import APIError, EmbeddingRequest

__all__ = ["pooling_of", "embedding_response", "encode_embedding", "truncate_dimensions",
           "tokenize_response", "detokenize_response", "token_ids"]

_ST_MODES = (("pooling_mode_lasttoken", "last"), ("pooling_mode_mean_tokens", "mean"),
             ("pooling_mode_cls_token", "first"), ("pooling_mode_max_tokens", "max"))


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def pooling_of(path: Optional[str]) -> str:
    """The pooling a model directory asks for (sentence-transformers' Pooling module's
    config), else "last".

    Parameters
    ----------
    path : str or None
        The model's directory (a GGUF file or None: "last").

    Returns
    -------
    str
        One of :data:`blockc.model.POOLINGS`.
    """
    if not path or not os.path.isdir(path):
        return "last"
    where = []
    modules = _read_json(os.path.join(path, "modules.json"))
    if isinstance(modules, list):
        where = [m.get("path", "") for m in modules
                 if isinstance(m, dict) and str(m.get("type", "")).endswith("Pooling")]
    for sub in where or ["1_Pooling"]:
        cfg = _read_json(os.path.join(path, sub, "config.json"))
        if isinstance(cfg, dict):
            for key, mode in _ST_MODES:
                if cfg.get(key) is True:
                    return mode
    return "last"


def token_ids(tok: Any, inputs: Sequence[Union[str, List[int]]], vocab: int,
              limit: int, truncate: bool) -> List[np.ndarray]:
    """Each input's token ids (texts tokenized with the tokenizer's special tokens, as an
    embedding model's tokenizer adds its end token); ids checked against the vocabulary; an
    input longer than ``limit`` tokens refused (400 naming the limit) or, with
    ``truncate``, cut to its last ``limit`` tokens."""
    out = []
    for i, x in enumerate(inputs):
        if isinstance(x, str):
            try:
                ids = np.asarray(tok.encode(x), np.int64)
            except ValueError as e:
                raise APIError(400, f"input[{i}]: {e}", param="input",
                               code="invalid_value") from None
        else:
            if not all(0 <= t < vocab for t in x):
                raise APIError(400, f"'input[{i}]' token ids must be in [0, {vocab})",
                               param="input", code="invalid_value")
            ids = np.asarray(x, np.int64)
        if len(ids) == 0:
            raise APIError(400, f"'input[{i}]' made no tokens", param="input",
                           code="invalid_value")
        if len(ids) > limit:
            if not truncate:
                raise APIError(400, f"This model's maximum context length is {limit} tokens. "
                               f"However, input[{i}] resulted in {len(ids)} tokens.",
                               param="input", code="context_length_exceeded")
            ids = ids[-limit:]
        out.append(ids)
    return out


def truncate_dimensions(vectors: np.ndarray, dimensions: Optional[int]) -> np.ndarray:
    """The first ``dimensions`` features of each (normalised) vector, renormalised, as
    OpenAI's text-embedding-3 models shorten theirs (Matryoshka); 400 past the width."""
    if dimensions is None:
        return vectors
    width = vectors.shape[-1]
    if dimensions > width:
        raise APIError(400, f"'dimensions' is {dimensions}, more than this model's "
                       f"{width}", param="dimensions", code="invalid_value")
    return normalize_rows(np.ascontiguousarray(vectors[:, :dimensions]))


def encode_embedding(v: np.ndarray, fmt: str) -> Union[List[float], str]:
    """A vector as the API sends it: floats, or base64 of its little-endian float32 bytes."""
    if fmt == "base64":
        return base64.b64encode(np.asarray(v, "<f4").tobytes()).decode("ascii")
    return [float(x) for x in v]


def embedding_response(req: EmbeddingRequest, model: str, vectors: np.ndarray,
                       prompt_tokens: int) -> Dict[str, Any]:
    """OpenAI's ``list`` of ``embedding`` objects with usage."""
    data = [{"object": "embedding", "index": i,
             "embedding": encode_embedding(v, req.encoding_format)}
            for i, v in enumerate(vectors)]
    return {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}


def tokenize_response(tok: Any, content: str, add_special: bool,
                      with_pieces: bool) -> Dict[str, Any]:
    """llama-server's ``/tokenize`` answer: {"tokens": [id, ...]}, or with pieces
    [{"id", "piece"}, ...], a piece its text when it is whole UTF-8, else its bytes."""
    try:
        ids = [int(t) for t in tok.encode(content, add_special_tokens=add_special)]
    except ValueError as e:
        raise APIError(400, str(e), param="content", code="invalid_value") from None
    if not with_pieces:
        return {"tokens": ids}
    pieces = []
    for t in ids:
        raw = tok.token_bytes(t)
        try:
            piece: Any = raw.decode("utf-8")
        except UnicodeDecodeError:
            piece = list(raw)
        pieces.append({"id": t, "piece": piece})
    return {"tokens": pieces}


def detokenize_response(tok: Any, tokens: Sequence[int], vocab: int) -> Dict[str, Any]:
    """llama-server's ``/detokenize`` answer: {"content": text} (special tokens kept)."""
    if not all(0 <= t < vocab for t in tokens):
        raise APIError(400, f"'tokens' must be in [0, {vocab})", param="tokens",
                       code="invalid_value")
    return {"content": tok.decode(list(tokens), skip_special_tokens=False)}
