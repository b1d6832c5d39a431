"""The model's configuration: :class:`GPTConfig`, the presets, the parameter counts.

Part of the model core (:mod:`blockc.model`); the option tuples (``NORMS``, ...)
and their C enum values are :mod:`blockc._enums`'s.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from .._args import as_choice, as_flag, as_int, as_real, as_size, check_eps
from .._enums import (ACTIVATIONS, C_DTYPE, C_GPT_ACT, C_GPT_PLACE, C_NORM, C_POS, C_QK_NORM,
                      DTYPES, GPT_ACTIVATIONS, GPT_PLACEMENTS, NORMS, MAX_COLS, PLACEMENTS,
                      POSITIONS, QK_NORMS, WHOLE_BLOCKS)
from .._errors import BlockcTypeError, BlockcValueError
from .._native import check, ffi, lib
from ..block.engine import BlockConfig
from .variants import check_variants, check_window

__all__ = ["GPTConfig", "GPT_PRESETS", "NORMS", "PLACEMENTS", "ACTIVATIONS", "POSITIONS", "DTYPES",
           "C_DTYPE", "as_config", "gpt_parameter_count", "gpt_parameter_formula",
           "block_parameter_parts", "parameter_breakdown", "gpt2_shaped", "register_hf_codec"]

_LLAMA = dict(norm="rms", activation="swiglu", positions="rope", tie_weights=False,
              qkv_bias=False, out_bias=False, mlp_bias=False)
# GPT-2 sizes (Radford et al., 2019): vocab 50,257, context 1,024; and the shapes of
# three modern decoders, as their published config.json files give them (LLaMA-7B:
# Touvron et al., 2023; Llama 3 8B; Qwen2 0.5B): for parameter counts and benches
GPT_PRESETS: Dict[str, Dict[str, Any]] = {
    "gpt2": dict(vocab=50257, context=1024, width=768, heads=12, layers=12),
    "gpt2-medium": dict(vocab=50257, context=1024, width=1024, heads=16, layers=24),
    "gpt2-large": dict(vocab=50257, context=1024, width=1280, heads=20, layers=36),
    "gpt2-xl": dict(vocab=50257, context=1024, width=1600, heads=25, layers=48),
    "llama-7b": dict(vocab=32000, context=2048, width=4096, heads=32, layers=32, d_ff=11008,
                     eps=1e-6, **_LLAMA),
    "llama3-8b": dict(vocab=128256, context=8192, width=4096, heads=32, layers=32, kv_heads=8,
                      d_ff=14336, rope_theta=500000.0, **_LLAMA),
    "qwen2-0.5b": dict(vocab=151936, context=32768, width=896, heads=14, layers=24, kv_heads=2,
                       d_ff=4864, eps=1e-6, rope_theta=1000000.0,
                       **dict(_LLAMA, tie_weights=True, qkv_bias=True)),
}


# The Hugging Face config converters (GPTConfig fields of a config.json, and the way back):
# the model core knows no checkpoint family; blockc.checkpoint.families registers them at
# import (as ``import blockc`` does), and GPTConfig.from_hf / to_hf call them
_HF_CODEC: Dict[str, Callable[..., Any]] = {}


def register_hf_codec(fields_of: Callable[[Any], Dict[str, Any]],
                      to_hf: Callable[["GPTConfig"], Dict[str, Any]]) -> None:
    """Register what :meth:`GPTConfig.from_hf` and :meth:`GPTConfig.to_hf` call (done by
    :mod:`blockc.checkpoint.families`, the registry of the model families).

    Parameters
    ----------
    fields_of : callable
        A Hugging Face config (a mapping, a ``config.json`` file or its directory) ->
        the GPTConfig fields, refusing what blockc computes differently.
    to_hf : callable
        GPTConfig -> its ``config.json`` dict.

    Raises
    ------
    TypeError
        Either is not callable.
    """
    if not callable(fields_of) or not callable(to_hf):
        raise BlockcTypeError("register_hf_codec takes two callables")
    _HF_CODEC.update(fields_of=fields_of, to_hf=to_hf)


def _hf_codec(name: str) -> Callable[..., Any]:
    f = _HF_CODEC.get(name)
    if f is None:  # pragma: no cover - import blockc registers them
        raise BlockcValueError("no Hugging Face families are registered (import blockc.checkpoint)")
    return f


@dataclass(frozen=True)
class GPTConfig:
    """The model's architecture (dropout is a training concern and absent).

    The defaults beyond the sizes are chapter 6's GPT-2: LayerNorm before each
    sublayer, learned positions, GELU-tanh, an MLP of 4 * width, as many K/V
    heads as query heads, every bias, a tied head.

    Parameters
    ----------
    vocab, context, width, heads, layers : int >= 1
        V, C (the longest sequence, rows of a learned position table), D, H, L.
    eps : float >= 0
        The norms' epsilon.
    tie_weights : bool
        The head is ``token.weight``.
    norm : {"layer", "rms", "none"}
        LayerNorm (gain and shift), RMSNorm (gain) or none (chapter 24, exercise 2).
    placement : {"pre", "post"}
        Norm before each sublayer (GPT-2, Llama) or after each sum (2017); a
        post-norm model has no final norm.
    activation : {"gelu_tanh", "gelu", "relu", "swiglu"}
        The MLP: ``down(act(up(x)))``, or ``down(silu(gate(x)) * up(x))``.
    d_ff : int >= 1 or None
        The MLP's width F (None: 4 * width).
    positions : {"learned", "rope"}
        A learned position table, or rotary embeddings on q and k (Hugging
        Face's rotate-half layout) with base ``rope_theta``.
    rope_theta : float > 0
    kv_heads : int >= 1 or None
        Key/value heads KV, dividing ``heads`` (grouped-query attention; 1 is
        multi-query); None: ``heads``.
    head_dim : int >= 1 or None
        Dh (None: width / heads). The attention output is H * Dh wide.
    residual : bool
        Add each sublayer's input back (chapter 24, exercise 1 turns it off).
    qkv_bias, out_bias, mlp_bias : bool
        Biases on the q/k/v projection, the output projection, the MLP.
    sliding_window : int >= 1 or None
        W: a sliding layer's query at position p attends to positions p-W+1..p
        only (Mistral v0.1, Qwen2's ``use_sliding_window``), and its KV cache keeps
        a ring of about W positions (:attr:`KVCache.nbytes` is W x sliding layers
        + capacity x the others). None: every layer sees every earlier position.
    sliding_layers : tuple of bool or None
        Which layers slide (one flag per layer), with ``sliding_window``; None:
        every layer.

    The checkpoint families' variants (issue 50; training refuses a config using any,
    :attr:`family_features` names them):

    rope_parameters : mapping or None
        Hugging Face's rope parameters (``rope_type`` one of ``default``, ``linear``,
        ``dynamic``, ``yarn``, ``longrope``, ``llama3``, and that type's keys; a type that
        reads the model's ``max_position_embeddings`` has it here), kept as a sorted tuple
        of (key, value) pairs (lists as tuples) so the config stays hashable.
    rotary_dim : int or None
        R: each head's first R dimensions rotate (``partial_rotary_factor``); None: Dh.
    nope_layers : tuple of int
        Layers without rotary embeddings (SmolLM3's NoPE layers).
    rope_local_theta : float > 0 or None
        The base of the ``local_layers``' plain rotary embeddings (Gemma 3's sliding
        layers: ``rope_local_base_freq``); the other layers turn by ``rope_theta`` and
        ``rope_parameters``.
    local_layers : tuple of int
        The layers turning by ``rope_local_theta`` (the sliding-window layers of a model
        whose window the sliding-window fields will hold: issue 50's lead wires them).
    qk_norm : {"none", "head", "all"}
        RMSNorm of q and k before rotary: per head (Qwen3), over the whole projection (OLMo2).
    embed_scale, residual_scale : float > 0
        The embedding multiplied by ``embed_scale`` (Gemma, Granite); ``x + residual_scale *
        sublayer`` (Granite).
    attn_scale : float > 0 or None
        The attention scores' scale (None: 1 / sqrt(Dh)).
    logit_scale : float > 0
        The logits divided by it (Granite's ``logits_scaling``).
    n_experts, experts_used : int
        A mixture of experts in every layer's MLP (Mixtral, Qwen3-MoE): ``n_experts`` E
        SwiGLU experts of width ``d_ff`` and a router (``router.weight`` (E, D),
        ``experts.e.{up,gate,down}.weight``); each token runs the ``experts_used`` K most
        probable of a softmax over all E, weighted by their probabilities. 0: a dense MLP.
    router_norm : bool
        The K weights renormalised to sum 1 (Mixtral; Qwen3-MoE's ``norm_topk_prob``).
    attn_softcap, logit_softcap : float > 0 or None
        Soft-capping (Gemma 2's ``attn_logit_softcapping``, ``final_logit_softcapping``):
        each attention score (after its scale, before the mask), and each logit (after
        ``logit_scale``), x becomes ``c * tanh(x / c)``; None: not capped.

    ``placement`` may also be ``"sandwich"`` (Gemma 2/3: norms before and after each
    sublayer, ``ln1_post``/``ln2_post``) or ``"output"`` (OLMo2: ``x + norm(sublayer(x))``);
    ``activation`` ``"geglu"`` (``down(gelu_tanh(gate(x)) * up(x))``).
    """

    vocab: int = 50257
    context: int = 1024
    width: int = 768
    heads: int = 12
    layers: int = 12
    eps: float = 1e-5
    tie_weights: bool = True
    norm: str = "layer"
    placement: str = "pre"
    activation: str = "gelu_tanh"
    d_ff: Optional[int] = None
    positions: str = "learned"
    rope_theta: float = 10000.0
    kv_heads: Optional[int] = None
    head_dim: Optional[int] = None
    residual: bool = True
    qkv_bias: bool = True
    out_bias: bool = True
    mlp_bias: bool = True
    sliding_window: Optional[int] = None
    sliding_layers: Optional[Tuple[bool, ...]] = None
    rope_parameters: Optional[Tuple[Tuple[str, Any], ...]] = None
    rotary_dim: Optional[int] = None
    nope_layers: Tuple[int, ...] = ()
    rope_local_theta: Optional[float] = None
    local_layers: Tuple[int, ...] = ()
    qk_norm: str = "none"
    embed_scale: float = 1.0
    residual_scale: float = 1.0
    attn_scale: Optional[float] = None
    logit_scale: float = 1.0
    n_experts: int = 0
    experts_used: int = 0
    router_norm: bool = False
    attn_softcap: Optional[float] = None
    logit_softcap: Optional[float] = None

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen)
        for name in ("vocab", "context", "width", "heads", "layers"):
            set_(name, as_size(getattr(self, name), f"GPTConfig.{name}"))
        for name in ("d_ff", "kv_heads", "head_dim"):
            if getattr(self, name) is not None:
                set_(name, as_size(getattr(self, name), f"GPTConfig.{name}"))
        set_("eps", check_eps(self.eps, "GPTConfig.eps"))
        for name in ("tie_weights", "residual", "qkv_bias", "out_bias", "mlp_bias"):
            set_(name, as_flag(getattr(self, name), f"GPTConfig.{name}"))
        for name, allowed in (("norm", NORMS), ("placement", GPT_PLACEMENTS),
                              ("activation", GPT_ACTIVATIONS), ("positions", POSITIONS),
                              ("qk_norm", QK_NORMS)):
            as_choice(getattr(self, name), f"GPTConfig.{name}", allowed)
        self._check_variants(set_)
        theta = as_real(self.rope_theta, "GPTConfig.rope_theta", 0.0)
        if not 0.0 < theta <= float(np.finfo(np.float32).max):
            raise BlockcValueError(f"GPTConfig.rope_theta must be > 0 in float32, got {self.rope_theta!r}")
        set_("rope_theta", theta)
        if self.head_dim is None and self.width % self.heads:
            raise BlockcValueError(f"GPTConfig: width {self.width} is not divisible by heads {self.heads}")
        kv = self.heads if self.kv_heads is None else self.kv_heads
        if kv > self.heads or self.heads % kv:
            raise BlockcValueError(f"GPTConfig.kv_heads must divide heads={self.heads}, got {kv}")
        if self.positions == "rope" and self.head_dim_ % 2:
            raise BlockcValueError(f"GPTConfig: rotary embeddings need an even head_dim, got {self.head_dim_}")
        self._check_window(set_)
        # the C structs, one per storage dtype, built once from the checked fields
        set_("_cs", {})
        # the sliding flags as C reads them (every call), alive with the config
        set_("_sliding_c", None if self.sliding_layers is None else
             ffi.new("unsigned char[]", [int(f) for f in self.sliding_layers]))
        st = lib.bc_gpt_config_check(self.c_struct())
        if st == lib.BC_EOVERFLOW:
            raise BlockcValueError(f"GPTConfig: a model of vocab={self.vocab}, context={self.context}, "
                                   f"width={self.width}, layers={self.layers} exceeds 2**40 parameters")
        check(st, "GPTConfig")

    def _check_window(self, set_: Any) -> None:
        check_window(self, set_)

    def layer_window(self, layer: int) -> Optional[int]:
        """Layer ``layer``'s sliding window W, or None when it sees every earlier position.

        Parameters
        ----------
        layer : int in [0, layers)

        Returns
        -------
        int or None

        Raises
        ------
        TypeError, ValueError
            A layer that is not an integer in range.

        Examples
        --------
        >>> GPTConfig(vocab=16, context=32, width=8, heads=2, layers=2, sliding_window=4,
        ...           sliding_layers=(True, False)).layer_window(1) is None
        True
        """
        layer = as_int(layer, "layer", 0, self.layers - 1)
        if self.sliding_window is None or (self.sliding_layers is not None
                                           and not self.sliding_layers[layer]):
            return None
        return self.sliding_window

    def _check_variants(self, set_: Callable[[str, Any], None]) -> None:
        check_variants(self, set_)

    def _variant_fields(self) -> Dict[str, Any]:
        """The bc_gpt_config fields of the families' variants (zero: not used)."""
        k = self._rope
        t = k["tables"]
        return dict(rope_dim=self.rotary_dim_ if self.rotary_dim is not None else 0,
                    rope_freqs=k["inv"], rope_freqs_long=k["inv_long"], rope_dynamic=t.dynamic,
                    rope_original=t.original, rope_attn=0.0 if t.attn == 1.0 else t.attn,
                    nope_layers=k["nope"], qk_norm=C_QK_NORM[self.qk_norm],
                    rope_local_theta=self.rope_local_theta or 0.0,
                    embed_scale=0.0 if self.embed_scale == 1.0 else self.embed_scale,
                    residual_scale=0.0 if self.residual_scale == 1.0 else self.residual_scale,
                    attn_scale=self.attn_scale or 0.0,
                    logit_scale=0.0 if self.logit_scale == 1.0 else self.logit_scale,
                    n_experts=self.n_experts, n_experts_used=self.experts_used,
                    router_norm=int(self.router_norm),
                    attn_softcap=self.attn_softcap or 0.0,
                    logit_softcap=self.logit_softcap or 0.0)

    @property
    def rotary_dim_(self) -> int:
        """R, resolved (``rotary_dim`` or Dh)."""
        return self.rotary_dim if self.rotary_dim is not None else self.head_dim_

    @property
    def rope_tables(self) -> Any:
        """The rotary frequencies the C library reads (:class:`blockc.model.rope.RopeTables`)."""
        return self._rope["tables"]

    @property
    def rope_kind(self) -> str:
        """The rope_type of :attr:`rope_parameters` ("default" when there are none)."""
        return dict(self.rope_parameters or ()).get("rope_type", "default")

    @property
    def family_features(self) -> Tuple[str, ...]:
        """The families' variants this config uses (the fields' names; training refuses
        them): empty for the configs training computes."""
        out = []
        if self.rope_parameters is not None and self.positions == "rope":
            out.append(f"rope_parameters (rope_type {self.rope_kind!r})")
        for name, neutral in (("rotary_dim", None), ("nope_layers", ()), ("qk_norm", "none"),
                              ("rope_local_theta", None), ("local_layers", ()),
                              ("embed_scale", 1.0), ("residual_scale", 1.0),
                              ("attn_scale", None), ("logit_scale", 1.0),
                              ("attn_softcap", None), ("logit_softcap", None)):
            if getattr(self, name) != neutral:
                out.append(name)
        if self.placement in ("sandwich", "output"):
            out.append(f"placement {self.placement!r}")
        if self.activation == "geglu":
            out.append("activation 'geglu'")
        if self.n_experts:
            out.append("n_experts (a mixture of experts)")
        return tuple(out)

    def __reduce__(self):  # pickle / copy by the fields; the C structs are rebuilt
        return (type(self), tuple(getattr(self, f.name) for f in fields(self)))

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "GPTConfig":
        """A model shape by name: GPT-2's 'gpt2', 'gpt2-medium', 'gpt2-large',
        'gpt2-xl'; the modern decoders 'llama-7b', 'llama3-8b', 'qwen2-0.5b' (their
        published shapes, for counts and benches: blockc has none of their weights).

        Parameters
        ----------
        name : str
            The preset.
        **overrides
            Fields to change (``layers=2``, ``tie_weights=False``, ...).

        Returns
        -------
        GPTConfig

        Raises
        ------
        TypeError
            A name that is not a str, or an override that is not a field.
        ValueError
            An unknown preset, or an override the config refuses.

        Examples
        --------
        >>> GPTConfig.preset("gpt2", layers=2).layers
        2
        """
        as_choice(name, "preset", sorted(GPT_PRESETS))
        unknown = sorted(set(overrides) - {f.name for f in fields(cls)})
        if unknown:
            raise BlockcTypeError(f"GPTConfig has no field {unknown[0]!r}")
        kw = dict(GPT_PRESETS[name])
        kw.update(overrides)
        return cls(**kw)

    @classmethod
    def from_block(cls, block: Any, vocab: int, context: int, layers: int = 1,
                   positions: str = "rope", rope_theta: float = 10000.0,
                   kv_heads: Optional[int] = None, bias: bool = False,
                   tie_weights: bool = True) -> "GPTConfig":
        """A decoder-only stack of the book's block: ``layers`` copies of the block
        ``block`` describes, a token embedding before them and a head after.

        Chapter 24's block (RMSNorm, no biases, GELU-tanh or exercise 6's gated
        MLP) becomes a whole model: the causal mask is what makes the stack a
        decoder (every GPT layer applies it, whatever ``block.causal`` says), and
        the positions come from rotary embeddings (or a learned table).

        Parameters
        ----------
        block : blockc.BlockConfig
            d_model, n_heads, d_ff, norm, placement, activation, residual, eps.
        vocab, context : int >= 1
        layers : int >= 1, optional
        positions : {"rope", "learned"}, optional
        rope_theta : float > 0, optional
        kv_heads : int, optional
            K/V heads (None: as many as query heads).
        bias : bool, optional
            Biases on every projection (the book's block has none).
        tie_weights : bool, optional

        Returns
        -------
        GPTConfig

        Raises
        ------
        TypeError
            ``block`` is not a BlockConfig.
        ValueError
            A size or option the config refuses (named).

        Examples
        --------
        >>> from blockc import BlockConfig
        >>> cfg = GPTConfig.from_block(BlockConfig(), vocab=16, context=8, layers=2)
        >>> (cfg.width, cfg.heads, cfg.d_ff, cfg.norm, cfg.positions)
        (8, 2, 32, 'rms', 'rope')
        """
        if type(block) is not BlockConfig:
            raise BlockcTypeError(f"block must be a blockc.BlockConfig, got {type(block).__name__}")
        bias = as_flag(bias, "bias")
        return cls(vocab=vocab, context=context, width=block.d_model, heads=block.n_heads,
                   layers=layers, eps=block.eps, tie_weights=tie_weights, norm=block.norm,
                   placement=block.placement, activation=block.activation, d_ff=block.d_ff,
                   positions=positions, rope_theta=rope_theta, kv_heads=kv_heads,
                   residual=block.residual, qkv_bias=bias, out_bias=bias, mlp_bias=bias)

    @classmethod
    def from_hf(cls, config: Union[Mapping[str, Any], str, "os.PathLike[str]"]) -> "GPTConfig":
        """The config of a Hugging Face model: its ``config.json`` (a dict, the file or
        its directory), read by its family's record (:mod:`blockc.checkpoint.families`).

        Parameters
        ----------
        config : mapping or path

        Returns
        -------
        GPTConfig

        Raises
        ------
        TypeError
            ``config`` is neither a mapping nor a path.
        ValueError
            A model_type blockc does not run, or a field whose value would compute
            differently (named, with the value): never loaded silently.

        Examples
        --------
        >>> GPTConfig.from_hf({"model_type": "gpt2", "n_layer": 2}).layers
        2
        """
        return cls(**_hf_codec("fields_of")(config))

    def to_hf(self) -> Dict[str, Any]:
        """This config as a Hugging Face ``config.json`` dict (written by the record of the
        family it is, :mod:`blockc.checkpoint.families`).

        Returns
        -------
        dict

        Raises
        ------
        ValueError
            An architecture no Hugging Face family blockc writes has.

        Examples
        --------
        >>> GPTConfig.preset("gpt2", layers=2).to_hf()["n_layer"]
        2
        """
        return _hf_codec("to_hf")(self)

    @property
    def head_dim_(self) -> int:
        """Dh, resolved (``head_dim`` or width / heads)."""
        return self.head_dim if self.head_dim is not None else self.width // self.heads

    @property
    def kv_heads_(self) -> int:
        """KV, resolved (``kv_heads`` or heads)."""
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def d_ff_(self) -> int:
        """F, resolved (``d_ff`` or 4 * width)."""
        return self.d_ff if self.d_ff is not None else 4 * self.width

    def c_struct(self, dtype: str = "float32") -> Any:
        """The ``bc_gpt_config *`` the C library reads, for matrices stored as ``dtype``
        (built once per dtype; part of the model core's internal interface).

        Parameters
        ----------
        dtype : str, optional
            A format of :data:`blockc.DTYPES` (the C library's formats' table).

        Returns
        -------
        cffi pointer
            A ``bc_gpt_config *`` owned by this config (alive as long as it is).

        Raises
        ------
        ValueError
            An unknown dtype, or one of whole blocks (q4_k) the matrices' columns are not,
            or one of bounded columns (q8_0i) a matrix has more columns than.

        Examples
        --------
        >>> GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1).c_struct().width
        8
        """
        c = self._cs.get(dtype)
        if c is None:
            as_choice(dtype, "dtype", DTYPES)
            whole, most = WHOLE_BLOCKS.get(dtype), MAX_COLS.get(dtype)
            # every matrix's columns: the width, the heads' width, d_ff
            for what, cols in (("width", self.width), ("heads * head_dim",
                               self.heads * self.head_dim_), ("d_ff", self.d_ff_)):
                if whole and cols % whole:
                    raise BlockcValueError(f"{dtype} needs matrices of whole blocks of "
                                           f"{whole} columns; {what} is {cols}")
                if most and cols > most:
                    raise BlockcValueError(f"{dtype} holds matrices of at most {most} "
                                           f"columns; {what} is {cols}")
            c = ffi.new("bc_gpt_config *", dict(
                vocab=self.vocab, context=self.context, width=self.width, heads=self.heads,
                layers=self.layers, kv_heads=self.kv_heads_, head_dim=self.head_dim_,
                d_ff=self.d_ff_, norm=C_NORM[self.norm], placement=C_GPT_PLACE[self.placement],
                activation=C_GPT_ACT[self.activation], positions=C_POS[self.positions],
                rope_theta=self.rope_theta, residual=int(self.residual),
                qkv_bias=int(self.qkv_bias), out_bias=int(self.out_bias),
                mlp_bias=int(self.mlp_bias), eps=self.eps, tie_weights=int(self.tie_weights),
                dtype=C_DTYPE[dtype], window=self.sliding_window or 0,
                **self._variant_fields()))
            if self._sliding_c is not None:
                c.sliding = self._sliding_c
            self._cs[dtype] = c
        return c


def as_config(cfg: Any) -> GPTConfig:
    """``cfg`` itself when it is a GPTConfig, else a TypeError naming it."""
    if type(cfg) is not GPTConfig:
        raise BlockcTypeError(f"cfg must be a blockc.GPTConfig, got {type(cfg).__name__}")
    return cfg


def gpt_parameter_count(cfg: GPTConfig) -> int:
    """Parameters of an actual model built in C: the elements of its layout.

    Parameters
    ----------
    cfg : GPTConfig

    Returns
    -------
    int
        The count, a tied head counted once.

    Raises
    ------
    TypeError
        A non-GPTConfig ``cfg``.

    Examples
    --------
    >>> gpt_parameter_count(GPTConfig.preset("gpt2"))
    124439808
    """
    n = ffi.new("size_t *")
    check(lib.bc_gpt_param_count(n, as_config(cfg).c_struct()), "gpt_parameter_count")
    return int(n[0])


def gpt_parameter_formula(cfg: GPTConfig) -> int:
    """The closed form of the parameter count.

    For chapter 6's GPT-2 it is N = VD + CD + L(12D^2 + 13D) + 2D (+ VD untied);
    in general VD (+ CD, learned positions) + L * (per block) + the final norm
    (+ VD untied), a block being D(H + 2KV)Dh + DHDh (q/k/v and output) +
    (2 or 3)DF (the MLP, 3 with a gate) + the biases and norm parameters it has.

    Parameters
    ----------
    cfg : GPTConfig

    Returns
    -------
    int

    Raises
    ------
    TypeError
        A non-GPTConfig ``cfg``.

    Examples
    --------
    >>> gpt_parameter_formula(GPTConfig.preset("gpt2-medium"))
    354823168
    """
    return sum(n for _, _, n in _model_parts(as_config(cfg)))


_NORM_PARAMS = {"layer": 2, "rms": 1, "none": 0}   # parameters per norm, in units of D
_NORM_TERM = {"layer": "2D", "rms": "D", "none": "0"}


def gpt2_shaped(cfg: GPTConfig) -> bool:
    """The config is chapter 6's GPT-2 block (whatever its sizes): the closed form
    L(12D^2 + 13D) holds."""
    return (cfg.norm, cfg.placement, cfg.activation, cfg.positions, cfg.d_ff_, cfg.kv_heads_,
            cfg.head_dim_ * cfg.heads, cfg.qkv_bias, cfg.out_bias, cfg.mlp_bias) == (
        "layer", "pre", "gelu_tanh", "learned", 4 * cfg.width, cfg.heads, cfg.width,
        True, True, True)


def block_parameter_parts(cfg: GPTConfig) -> List[Tuple[str, str, int]]:
    """(part, formula term, count) rows of one block: q/k/v, the output projection,
    the MLP, the two norms and (when it has them) the biases."""
    d, f, h, kv, dh = cfg.width, cfg.d_ff_, cfg.heads, cfg.kv_heads_, cfg.head_dim_
    gated = cfg.activation in ("swiglu", "geglu")
    norm = _NORM_PARAMS[cfg.norm] * d
    rows = [("attention q, k, v", "D(H + 2KV)Dh", d * (h + 2 * kv) * dh),
            ("attention output", "(H Dh)D", h * dh * d),
            ("MLP gate, up, down" if gated else "MLP up, down", "3DF" if gated else "2DF",
             (3 if gated else 2) * d * f),
            ("two norms", {"layer": "4D", "rms": "2D", "none": "0"}[cfg.norm], 2 * norm)]
    biases = (cfg.qkv_bias * (h + 2 * kv) * dh + cfg.out_bias * d
              + cfg.mlp_bias * ((2 if gated else 1) * f + d))
    if biases:
        rows.append(("biases", "", biases))
    return rows


def _model_parts(cfg: GPTConfig) -> List[Tuple[str, str, int]]:
    """(part, formula term, count) rows that sum to the model's parameter count."""
    v, c, d = cfg.vocab, cfg.context, cfg.width
    per_block = sum(n for _, _, n in block_parameter_parts(cfg))
    final = _NORM_PARAMS[cfg.norm] * d if cfg.placement == "pre" else 0
    rows = [("token embedding", "V*D", v * d)]
    if cfg.positions == "learned":
        rows.append(("position embedding", "C*D", c * d))
    rows += [("blocks", "L*(12D^2 + 13D)" if gpt2_shaped(cfg) else "L*(per block)",
              cfg.layers * per_block),
             ("final norm", _NORM_TERM[cfg.norm] if final else "0", final)]
    rows.append(("head (tied: token embedding)", "0", 0) if cfg.tie_weights
                else ("head", "V*D", v * d))
    return rows


def parameter_breakdown(cfg: GPTConfig) -> List[Tuple[str, str, int]]:
    """(part, formula term, count) rows of the parameter formula, as ``blockc gpt
    --params`` prints them: the embeddings, one block (its parts too, unless it is
    GPT-2's), all blocks, the final norm, the head. The rows other than "per block"
    and the indented parts sum to :func:`gpt_parameter_formula`."""
    cfg = as_config(cfg)
    per_block = sum(n for _, _, n in block_parameter_parts(cfg))
    rows = _model_parts(cfg)
    at = [p for p, _, _ in rows].index("blocks")
    inner: List[Tuple[str, str, int]] = []
    if not gpt2_shaped(cfg):
        inner += [("  " + part, t, n) for part, t, n in block_parameter_parts(cfg)]
    inner.append(("per block", "12D^2 + 13D" if gpt2_shaped(cfg) else "(the parts above)",
                  per_block))
    return rows[:at] + inner + rows[at:]
