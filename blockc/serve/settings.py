"""The server's settings: one dataclass, filled by ``blockc serve``'s options."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Tuple

__all__ = ["Settings"]


@dataclass
class Settings:
    """Everything ``blockc serve`` can be told.

    model: the checkpoint directory (config.json, safetensors, tokenizer.json and a
    chat template for /v1/chat/completions) or a GGUF file. model_name: the id clients
    send as ``model`` (default: the directory's name, the file's without .gguf). host: 127.0.0.1 unless told otherwise.
    parallel: requests decoded together (KV cache slots). ctx_size: positions per slot
    (prompt + completion; default the model's context, bounded so every slot's KV cache
    takes at most a quarter of the available memory). max_queue:
    requests waiting for a slot before 429. max_body_bytes: the largest request
    body (413 past it). prefill_chunk: prompt tokens per scheduler step. cache_dtype:
    what the slots' KV cache keeps ("float32", or "float16": half the memory). api_key: when
    set, every /v1 request needs ``Authorization: Bearer <api_key>``. drain_timeout:
    seconds SIGTERM waits for running requests. template_timeout: seconds a chat
    template may take to render one request's messages (400 past it).

    Several models: ``models`` ((name, path) pairs) and ``models_dir`` (each GGUF file and
    checkpoint directory in it) beside ``model``; each loads on its first request, and the
    least recently used idle one is unloaded while the loaded ones hold more than
    ``max_memory`` bytes. cors_origins: the origins a browser page may call from (none:
    no CORS headers). context_overflow: a prompt longer than the context is refused
    ("error", 400 naming the limit), cut to its last tokens ("truncate"), or to the
    first and last halves of that ("truncate-middle"). draft_model: speculative decoding
    of the first model with this draft (a checkpoint directory or GGUF file over the same
    vocabulary; the tokens are the ones without it), drafting draft_max tokens a round
    (default 5).
    """
    model: Optional[str] = None
    model_name: Optional[str] = None
    host: str = "127.0.0.1"
    port: int = 8000
    parallel: int = 4
    ctx_size: Optional[int] = None
    max_queue: int = 64
    max_body_bytes: int = 1 << 20
    prefill_chunk: int = 128
    prefix_reuse: bool = True
    cache_dtype: str = "float32"
    api_key: Optional[str] = None
    dtype: Optional[str] = None
    threads: Optional[int] = None
    drain_timeout: float = 60.0
    retry_after: int = 1
    template_timeout: float = 5.0
    models: Tuple[Tuple[str, str], ...] = ()
    models_dir: Optional[str] = None
    max_memory: Optional[int] = None
    cors_origins: Tuple[str, ...] = ()
    context_overflow: str = "error"
    draft_model: Optional[str] = None
    draft_max: Optional[int] = None

    @property
    def served_name(self) -> str:
        if self.model_name:
            return self.model_name
        if self.model is None:
            return ""
        base = os.path.basename(os.path.normpath(self.model))
        return base[:-5] if base.endswith(".gguf") else base
