"""The model families (issue 48): one record per family, read by both loaders and both
savers, and what docs/design.md claims of them ("Adding a model family"): a family is its
record in blockc/checkpoint/families/, and no other module branches on a family's name.

Each record's tensor table is checked against the peers: its Hugging Face names and shapes
are transformers' state dict of a model of that model_type, its GGUF names and metadata
keys are the gguf package's (llama.cpp's) for that architecture."""
import dataclasses
import ast
import os
import re

import numpy as np
import pytest

from blockc import GPT, GPTConfig, gguf
from blockc.checkpoint import families as fam_mod
from blockc.checkpoint.families import (FAMILIES, GGUF_FAMILIES, LLAMA, QWEN2, QWEN3, REGISTRY,
                                        GEMMA, GEMMA2, GEMMA3, GPT2, GRANITE, MISTRAL, MIXTRAL, OLMO2,
                                        PHI3, QWEN3_MOE, SMOLLM3, family_of, family_of_config)
from blockc.checkpoint import gguf as gm
from blockc.model import layout

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "blockc")
REGISTRY_DIR = os.path.join("checkpoint", "families") + os.sep

SMALL = dict(vocab=40, context=16, width=16, heads=4, layers=2)


def _configs(fam):
    """Configs of a family (Mistral's are Llama's: it reads them, Llama writes them)."""
    if fam is GPT2:
        return [GPTConfig(**SMALL), GPTConfig(**SMALL, tie_weights=False, d_ff=24)]
    if fam is QWEN2:
        return [GPTConfig.preset("qwen2-0.5b", **SMALL, d_ff=24, kv_heads=2),
                GPTConfig.preset("qwen2-0.5b", **SMALL, d_ff=24, kv_heads=1, head_dim=6,
                                 tie_weights=False)]
    if fam is GRANITE:
        scales = dict(embed_scale=2.0, residual_scale=0.5, attn_scale=0.25, logit_scale=3.0)
        return [GPTConfig.preset("llama-7b", **SMALL, d_ff=24, kv_heads=2, **scales),
                GPTConfig.preset("llama-7b", **SMALL, d_ff=24, head_dim=6, kv_heads=1,
                                 tie_weights=True, qkv_bias=True, out_bias=True, **scales)]
    if fam is GEMMA3:  # llama.cpp's gemma3 turns layers 0..4 of 6 by the local base
        gem = dict(placement="sandwich", activation="geglu", qk_norm="head", embed_scale=4.0,
                   rope_local_theta=10000.0, local_layers=(0, 1), rope_theta=1e6,
                   tie_weights=True)
        return [GPTConfig.preset("llama-7b", **{**SMALL, **gem}, d_ff=24, kv_heads=2),
                GPTConfig.preset("llama-7b", **{**SMALL, **gem}, d_ff=24, head_dim=6,
                                 kv_heads=1)]
    if fam is GEMMA:  # pre-norm; llama.cpp's gemma always ties the output
        gem = dict(activation="geglu", embed_scale=4.0, tie_weights=True)
        return [GPTConfig.preset("llama-7b", **{**SMALL, **gem}, d_ff=24, kv_heads=2),
                GPTConfig.preset("llama-7b", **{**SMALL, **gem}, d_ff=24, head_dim=6,
                                 kv_heads=1)]
    if fam is GEMMA2:  # llama.cpp's gemma2 slides layer 0 of 2
        gem = dict(placement="sandwich", activation="geglu", embed_scale=4.0, attn_softcap=50.0,
                   logit_softcap=30.0, tie_weights=True)
        return [GPTConfig.preset("llama-7b", **{**SMALL, **gem}, d_ff=24, kv_heads=2),
                GPTConfig.preset("llama-7b", **{**SMALL, **gem}, d_ff=24, head_dim=6,
                                 kv_heads=1, sliding_window=8, sliding_layers=(True, False))]
    if fam is OLMO2:
        olmo = dict(placement="output", qk_norm="all")
        return [GPTConfig.preset("llama-7b", **SMALL, d_ff=24, kv_heads=2, **olmo),
                GPTConfig.preset("llama-7b", **SMALL, d_ff=24, head_dim=6, kv_heads=1,
                                 tie_weights=True, qkv_bias=True, out_bias=True, **olmo)]
    if fam is SMOLLM3:
        four = dict(SMALL, layers=4)
        return [GPTConfig.preset("llama-7b", **four, d_ff=24, kv_heads=2, nope_layers=(3,)),
                GPTConfig.preset("llama-7b", **four, d_ff=24, head_dim=6, kv_heads=1,
                                 tie_weights=True, nope_layers=(3,))]
    if fam is PHI3:  # told from Llama by partial rotary or longrope
        longrope = dict(rope_type="longrope", short_factor=(1.0, 1.5), long_factor=(2.0, 4.0),
                        original_max_position_embeddings=8, max_position_embeddings=16)
        return [GPTConfig.preset("llama-7b", **SMALL, d_ff=24, kv_heads=2, rotary_dim=2),
                GPTConfig.preset("llama-7b", **SMALL, d_ff=24, kv_heads=1, tie_weights=True,
                                 sliding_window=8, rope_parameters=longrope)]
    if fam is QWEN3:
        return [GPTConfig.preset("llama-7b", **SMALL, d_ff=24, kv_heads=2, qk_norm="head"),
                GPTConfig.preset("llama-7b", **SMALL, d_ff=24, head_dim=6, kv_heads=1,
                                 tie_weights=True, qk_norm="head", qkv_bias=True,
                                 out_bias=True)]
    if fam is MIXTRAL:
        moe = dict(n_experts=4, experts_used=2, router_norm=True)
        return [GPTConfig.preset("llama-7b", **SMALL, d_ff=24, kv_heads=2, **moe),
                GPTConfig.preset("llama-7b", **SMALL, d_ff=24, head_dim=6, kv_heads=1,
                                 tie_weights=True, sliding_window=8, **moe)]
    if fam is QWEN3_MOE:
        return [GPTConfig.preset("llama-7b", **SMALL, d_ff=24, kv_heads=2, qk_norm="head",
                                 n_experts=4, experts_used=2),
                GPTConfig.preset("llama-7b", **SMALL, d_ff=24, head_dim=6, kv_heads=1,
                                 tie_weights=True, qk_norm="head", qkv_bias=True,
                                 out_bias=True, n_experts=3, experts_used=1, router_norm=True)]
    biased = fam is LLAMA  # transformers' Mistral has no biases
    return [GPTConfig.preset("llama-7b", **SMALL, d_ff=24, kv_heads=2),
            GPTConfig.preset("llama-7b", **SMALL, d_ff=24, head_dim=6, kv_heads=1,
                             tie_weights=True, qkv_bias=biased, out_bias=biased)]


CASES = [(f, c) for f in REGISTRY for c in _configs(f)]
IDS = [f"{f.name}-{i}" for f in REGISTRY for i in range(len(_configs(f)))]


def _covers(pairs, cfg):
    """Each (blockc name, rows) pair fills every tensor of cfg's layout, each row once."""
    lay = layout(cfg)
    filled = {name: np.zeros(t.shape[0], int) for name, t in lay.items()}
    for ours, rows in pairs:
        a, b = rows if rows is not None else (0, lay[ours].shape[0])
        filled[ours][a:b] += 1
    assert {n: f.tolist() for n, f in filled.items() if not (f == 1).all()} == {}


@pytest.mark.parametrize("fam,cfg", CASES, ids=IDS)
def test_both_tables_fill_every_tensor_once(fam, cfg):
    hf = fam.names(cfg)
    assert len({n for n, _, _, _ in hf}) == len(hf)
    _covers([(ours, rows) for _, ours, _, rows in hf], cfg)
    if fam.architectures:
        spec = fam.gguf_names(cfg)
        assert len({n for n, _, _, _ in spec}) == len(spec)
        _covers([(ours, rows) for _, ours, rows, _ in spec], cfg)
        # the rows of a fused tensor are the same slices on both sides
        assert [(o, r) for _, o, _, r in hf if r] == [(o, r) for _, o, r, _ in spec if r]


@pytest.mark.parametrize("fam,cfg", CASES, ids=IDS)
def test_hf_names_and_shapes_are_transformers_state_dict(fam, cfg, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    d = (fam if fam.to_hf else LLAMA).to_hf(cfg)
    d["model_type"] = fam.model_types[0]
    hc = transformers.AutoConfig.for_model(**d)
    if cfg.n_experts:  # transformers 5 fuses the experts in memory, one tensor each on disk
        transformers.AutoModelForCausalLM.from_config(hc).save_pretrained(tmp_path)
        st = pytest.importorskip("safetensors")
        with st.safe_open(str(tmp_path / "model.safetensors"), "np") as f:
            sd = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    else:
        with torch.device("meta"):
            hm = transformers.AutoModelForCausalLM.from_config(hc)
        sd = {k: tuple(v.shape) for k, v in hm.state_dict().items() if not fam.ignore.match(k)}
    if cfg.tie_weights:
        sd.pop("lm_head.weight", None)  # the embedding under a second name
    lay = layout(cfg)
    ours = {}
    for name, b, transposed, rows in fam.names(cfg):
        shape = lay[b].shape if rows is None else (rows[1] - rows[0],) + tuple(lay[b].shape[1:])
        ours[name] = tuple(shape[::-1] if transposed else shape)
    for fused, parts in fam.hf_parts(cfg).items():  # Phi-3's gate_up_proj: its parts' rows
        shapes = [ours.pop(p) for p, _, _ in parts]
        assert [a for _, a, _ in parts] == [0] + list(np.cumsum([s[0] for s in shapes])[:-1])
        ours[fused] = (parts[-1][2],) + shapes[0][1:]
    assert ours == sd
    assert GPTConfig.from_hf(hc.to_dict()) == cfg


def _gguf_keys():
    out = set()
    for group in vars(gguf_pkg().Keys).values():
        if isinstance(group, type):
            out |= {v for k, v in vars(group).items() if k.isupper() and isinstance(v, str)}
    return out


def gguf_pkg():
    return pytest.importorskip("gguf")


@pytest.mark.parametrize("fam,cfg", [(f, c) for f, c in CASES if f.architectures],
                         ids=[i for i, (f, _) in zip(IDS, CASES) if f.architectures])
def test_gguf_names_and_keys_are_llama_cpp_ones(fam, cfg):
    g = gguf_pkg()
    arch = fam.architectures[0]
    enum = next(a for a, n in g.MODEL_ARCH_NAMES.items() if n == arch)
    known = {g.TENSOR_NAMES[t] for t in g.MODEL_TENSORS[enum]}
    fused = {p: name for name, ps in fam.gguf_parts(cfg).items() for p, _, _ in ps}
    for name, _, _, _ in fam.gguf_names(cfg):
        base, kind = fused.get(name, name).rsplit(".", 1)
        generic = re.sub(r"^blk\.\d+\.", "blk.{bid}.", base)
        assert kind in ("weight", "bias") and generic in known, name
    keys = _gguf_keys()
    if cfg.n_experts and not cfg.router_norm:  # llama.cpp renormalises: no file holds it
        with pytest.raises(ValueError, match="router_norm"):
            fam.to_gguf(cfg)
        cfg = dataclasses.replace(cfg, router_norm=True)
    for suffix in list(fam.to_gguf(cfg)) + list(fam.gguf_refuse):
        assert "{arch}." + suffix in keys, suffix


@pytest.mark.parametrize("fam,cfg", [(f, c) for f, c in CASES if f.check],
                         ids=[i for i, (f, _) in zip(IDS, CASES) if f.check])
def test_configs_round_trip_through_both_savers_and_loaders(tmp_path, fam, cfg):
    assert family_of_config(cfg) is fam
    assert family_of(cfg.to_hf()) is fam and GPTConfig.from_hf(cfg.to_hf()) == cfg
    m = GPT.random(cfg, seed=1)
    m.save_pretrained(tmp_path / "d")
    if cfg.n_experts and not cfg.router_norm:  # llama.cpp renormalises: no file holds it
        with pytest.raises(ValueError, match="router_norm"):
            m.save_gguf(tmp_path / "m.gguf")
        back = GPT.from_pretrained(tmp_path / "d")
        assert back.config == cfg and np.array_equal(back.params, m.params)
        return
    m.save_gguf(tmp_path / "m.gguf")
    f = gguf.read(tmp_path / "m.gguf")
    assert f.get("general.architecture") == (fam.architectures or (fam.gguf_as,))[0]
    assert GPTConfig(**gm.config_from_gguf(f)) == cfg
    for path in (tmp_path / "d", tmp_path / "m.gguf"):
        back = GPT.from_pretrained(path)
        assert back.config == cfg and np.array_equal(back.params, m.params)


def test_the_registry_indexes_each_name_once():
    assert set(FAMILIES) == {"gpt2", "llama", "mistral", "qwen2", "qwen3", "phi3",
                             "granite", "smollm3", "olmo2", "gemma", "gemma2", "gemma3_text",
                             "mixtral", "qwen3_moe"}
    assert set(GGUF_FAMILIES) == set(gm.ARCHITECTURES) == {"gpt2", "llama", "qwen2", "qwen3",
                                                               "granite", "smollm3", "olmo2",
                                                               "phi3", "gemma", "gemma2",
                                                               "gemma3",
                                                               "qwen3moe"}
    assert all(FAMILIES[t] is f for f in REGISTRY for t in f.model_types)
    assert all(GGUF_FAMILIES[a] is f for f in REGISTRY for a in f.architectures)
    # Mistral reads as itself and saves through Llama's record, as Mistral's config.json
    # when it has a window (llama.cpp's files of it are llama files)
    mistral = dict(LLAMA.to_hf(_configs(LLAMA)[0]), model_type="mistral", sliding_window=8)
    cfg = GPTConfig.from_hf(mistral)
    assert family_of(mistral) is MISTRAL and cfg.sliding_window == 8
    assert cfg.context == mistral["max_position_embeddings"]
    assert family_of_config(cfg) is LLAMA and cfg.to_hf()["model_type"] == "mistral"
    assert GPTConfig.from_hf(cfg.to_hf()) == cfg
    plain = GPTConfig.from_hf(dict(mistral, sliding_window=None))
    assert plain.to_hf()["model_type"] == "llama"


def test_savers_refuse_what_no_family_is_by_each_familys_reason(tmp_path):
    post = GPTConfig(**SMALL, placement="post")
    with pytest.raises(ValueError, match="not gpt2: .*placement.*not llama: .*not qwen2: "):
        post.to_hf()
    with pytest.raises(ValueError, match="no checkpoint family"):
        GPT.random(post).save_gguf(tmp_path / "x.gguf")
    # a llama.cpp gpt2 file runs GELU-tanh: another activation is refused, not saved as it
    relu = GPTConfig(**SMALL, activation="relu")
    assert GPTConfig.from_hf(relu.to_hf()) == relu
    with pytest.raises(ValueError, match="activation='relu'"):
        GPT.random(relu).save_gguf(tmp_path / "x.gguf")
    # a llama.cpp llama file has no MLP biases: such a model is refused, not saved without them
    biased = GPTConfig.preset("llama-7b", **SMALL, d_ff=24, mlp_bias=True)
    assert GPTConfig.from_hf(biased.to_hf()) == biased
    with pytest.raises(ValueError, match="no tensor for 'blocks.0.gate.bias'"):
        GPT.random(biased).save_gguf(tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()


def _family_names():
    return {n for f in REGISTRY for n in (f.name,) + f.model_types + f.architectures}


#: comparisons with a string that happens to spell a family's name but names something else
#: (file, the compared expression): why
OTHER_VOCABULARIES = {
    ("text/gguf.py", "kind"): "tokenizer.ggml.model: the tokenizer's kind (BPE or SentencePiece)",
    ("experiments/gradients.py", "init"): "an initialisation scheme (GPT-2's scaled init)",
    ("text/tools.py", "fmt.name"): "a tool-call syntax (Llama 3.x's JSON), which several "
                                   "families' templates share",
}


def _compares_a_family_name(tree, names, rel=""):
    """(line, compared expression) of every comparison with a family's name."""
    def named(node):
        if isinstance(node, ast.Constant):
            return node.value in names if isinstance(node.value, str) else False
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(named(e) for e in node.elts)
        return False
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Compare):
            ops = [n.left] + n.comparators
            if any(named(x) for x in ops):
                what = " ".join(ast.unparse(x) for x in ops if not named(x))
                if (rel, what) not in OTHER_VOCABULARIES:
                    out.append((n.lineno, what))
    return out


def test_no_module_outside_the_registry_branches_on_a_family_name():
    """docs/design.md: a new family is its record; the loaders, savers and everything else
    compare no family name (model_type, general.architecture, the record's name)."""
    names = _family_names()
    found = []
    for d, _, files in os.walk(PKG):
        for fn in files:
            path = os.path.join(d, fn)
            rel = os.path.relpath(path, PKG)
            if not fn.endswith(".py") or rel.startswith(REGISTRY_DIR):
                continue
            src = open(path, encoding="utf-8").read()
            found += [f"{rel}:{i + 1}" for i, line in enumerate(src.splitlines())
                      if re.search(r"\b(arch|mt) ==", line)]
            found += [f"{rel}:{ln} {what}"
                      for ln, what in _compares_a_family_name(ast.parse(src), names, rel)]
    assert found == []
    # the check sees a comparison when there is one
    assert _compares_a_family_name(ast.parse('if arch in ("llama", "x"): pass'), names) == \
        [(1, "arch")]


def test_a_family_is_one_record_in_the_registry():
    """What docs/design.md says a new family touches: its Family record, listed in REGISTRY;
    the indexes and gguf.model.ARCHITECTURES follow from it."""
    assert all(isinstance(f, fam_mod.Family) for f in REGISTRY)
    assert len({id(f) for f in REGISTRY}) == len(REGISTRY)
    design = open(os.path.join(ROOT, "docs", "design.md"), encoding="utf-8").read()
    section = design.split("### Adding a model family", 1)[1].split("\n### ", 1)[0]
    for claim in ("blockc/checkpoint/families/", "REGISTRY", "tests/test_families.py"):
        assert claim in section, claim
