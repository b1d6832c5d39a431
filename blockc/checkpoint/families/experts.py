"""Mixtures of experts on both checkpoint sides (issue 50): the rows of a family's tensor
table for a layer's router and experts, and llama.cpp's GGUF metadata of them.

llama.cpp's layout (its converter and loader; Mixtral is a ``llama`` file, Qwen3-MoE a
``qwen3moe`` one):

- ``{arch}.expert_count`` and ``{arch}.expert_used_count``; a ``qwen3moe`` file's expert
  width is ``expert_feed_forward_length`` (a ``llama`` file's experts are
  ``feed_forward_length`` wide).
- ``blk.N.ffn_gate_inp.weight``: the router, (experts, width) in NumPy order, kept F32
  (llama.cpp's quantiser never quantises it).
- ``blk.N.ffn_gate_exps.weight`` and ``ffn_up_exps``: (experts, d_ff, width);
  ``ffn_down_exps``: (experts, width, d_ff): every expert's matrix of a kind stacked along
  a first axis, one ggml type for all of them; in a quantised type each expert's matrix
  is whole rows of blocks, so expert e is rows e * rows to (e + 1) * rows of the
  (experts * rows, cols) matrix of the same bytes (:func:`blockc.checkpoint.fused.split_gguf`).
- Both architectures' graphs take the softmax of the router's logits, keep the top
  ``expert_used_count`` and renormalise them over the chosen, whatever the file says
  (llama.cpp's ``build_moe_ffn`` with its weights normalised, for ``llama`` and
  ``qwen3moe`` alike): a GGUF file of either is ``router_norm=True``; a config without
  renormalising (Qwen3-MoE's ``norm_topk_prob`` false) has no GGUF file llama.cpp would
  compute the same, and is refused by name on save. Metadata that would compute
  otherwise (``expert_weights_norm`` false, ``expert_weights_scale`` other than 1,
  shared experts, a gating function other than softmax) is refused by name.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Tuple

from ..._errors import BlockcValueError
from .record import GGUFMetadata, TensorName

__all__ = ["EXPERT_KEYS", "MIXTRAL_NAMES", "QWEN3_MOE_NAMES", "expert_rows", "gguf_experts",
           "experts_to_gguf"]

#: the GGUF metadata (under the architecture) naming a mixture of experts
EXPERT_KEYS = ("expert_count", "expert_used_count")

#: the Hugging Face names of a layer's router and experts (:func:`expert_rows`' arguments)
MIXTRAL_NAMES: Dict[str, Any] = dict(
    router="block_sparse_moe.gate.weight", experts="block_sparse_moe.experts",
    parts={"gate": "w1.weight", "up": "w3.weight", "down": "w2.weight"})
QWEN3_MOE_NAMES: Dict[str, Any] = dict(
    router="mlp.gate.weight", experts="mlp.experts",
    parts={"gate": "gate_proj.weight", "up": "up_proj.weight", "down": "down_proj.weight"})

#: llama.cpp's ExpertGatingFuncType of a softmax over the router's logits
_SOFTMAX = 1


def expert_rows(table: List[TensorName], cfg: Any, *, router: str, experts: str,
                parts: Mapping[str, str]) -> List[TensorName]:
    """A Llama-shaped ``table`` with each layer's gate/up/down rows replaced by the
    router's and every expert's (``router``, ``experts``: the Hugging Face names under
    the layer, ``parts``: blockc's gate/up/down -> the expert's tensor there), each named
    on the GGUF side as llama.cpp stacks them."""
    out: List[TensorName] = []
    for t in table:
        head, _, last = t.ours.rpartition(".weight")[0].rpartition(".")
        if not t.ours.startswith("blocks.") or last not in parts or head.count(".") != 1:
            out.append(t)
            continue
        b = head + "."
        h = t.hf[:t.hf.index(".mlp.")] + "."
        g = "blk." + head.split(".")[1] + "."
        if last == "gate":  # the first of the three: the router before them
            out.append(TensorName(b + "router.weight", h + router, g + "ffn_gate_inp.weight"))
        rows = cfg.width if last == "down" else cfg.d_ff_
        out += [TensorName(f"{b}experts.{e}.{last}.weight", f"{h}{experts}.{e}.{parts[last]}",
                           f"{g}ffn_{last}_exps.weight", stack=(e * rows, (e + 1) * rows))
                for e in range(cfg.n_experts)]
    return out


def gguf_experts(md: GGUFMetadata) -> Dict[str, Any]:
    """The GPTConfig expert fields of a GGUF file declaring ``expert_count``, what
    llama.cpp would compute otherwise refused by key."""
    md.shape("blk.0.ffn_gate_inp.weight")  # a file saying experts has a router (by name)
    n = md.integer("expert_count")
    if n < 2:
        raise md.refuse(md.key("expert_count"), n, "fewer than two experts")
    k = md.integer("expert_used_count")
    if k > n:
        raise md.fail(f"{md.key('expert_used_count')}={k} exceeds {md.key('expert_count')}={n}")
    number = (lambda *ok: lambda v: type(v) is not bool and isinstance(v, (int, float))
              and v in ok)
    checks: Tuple[Tuple[str, Callable[[Any], bool], str], ...] = (
        ("expert_shared_count", number(0), "shared experts beside the routed ones"),
        ("expert_weights_scale", number(0.0, 1.0), "the experts' weights scaled"),
        ("expert_weights_norm", lambda v: v is True, "the chosen experts' weights not "
         "renormalised (llama.cpp renormalises them for this architecture)"),
        ("expert_gating_func", number(_SOFTMAX), "a gating function other than softmax"),
        ("expert_group_count", number(0, 1), "experts chosen by groups"))
    for suffix, ok, why in checks:
        v = md.get(suffix)
        if v is not None and not ok(v):
            raise md.refuse(md.key(suffix), v, why)
    return dict(n_experts=n, experts_used=k, router_norm=True)


def experts_to_gguf(cfg: Any, arch: str) -> Dict[str, Tuple[str, Any]]:
    """The expert metadata of a GGUF file of ``cfg`` (architecture ``arch``), refusing a
    config llama.cpp would compute otherwise."""
    if not cfg.router_norm:
        raise BlockcValueError(f"GPTConfig.router_norm=False: llama.cpp's {arch} renormalises "
                               "the chosen experts' weights; a GGUF file cannot hold this model")
    return {"expert_count": ("UINT32", cfg.n_experts),
            "expert_used_count": ("UINT32", cfg.experts_used)}
