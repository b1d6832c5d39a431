"""The chapter-6 GPT in C: the chapter's milestone tests, the NumPy oracle, the KV cache,
generation, the CLI and hostile input. PyTorch parity lives in test_gpt_torch.py."""
import dataclasses
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import blockc
from blockc import GPT, GPTConfig, gpt_parameter_count, gpt_parameter_formula
from blockc._enums import WHOLE_BLOCKS
from blockc._native import ffi, lib
from blockc.cli import main as cli_main
from blockc.reference import gpt_forward

from helpers import plots

SMALL = GPTConfig(vocab=101, context=24, width=32, heads=4, layers=3)
UNTIED = GPTConfig(vocab=67, context=16, width=24, heads=3, layers=2, tie_weights=False)


def perturbed(cfg, seed=0):
    """A random model whose biases, gains and shifts are not the trivial 0 / 1, so every
    parameter takes part in the comparison."""
    m = GPT.random(cfg, seed=seed)
    rng = np.random.default_rng(seed + 100)
    for name, a in m.state_dict().items():
        if a.ndim == 1:
            a += rng.normal(0.0, 0.1, a.shape).astype(np.float32)
    return m


def rand_ids(cfg, b, t, seed=0):
    return np.random.default_rng(seed).integers(0, cfg.vocab, size=(b, t))


# ---- milestone tests ---------------------------------------------------------

def test_logits_shape_and_dtype():
    m = GPT.random(SMALL, seed=0)
    logits = m(rand_ids(SMALL, 2, 7))
    assert logits.shape == (2, 7, SMALL.vocab)
    assert logits.dtype == np.float32
    assert np.isfinite(logits).all()


def test_causality_last_token_never_changes_earlier_logits():
    m = perturbed(SMALL, seed=1)
    ids = rand_ids(SMALL, 2, 12, seed=1)
    other = ids.copy()
    other[:, -1] = (other[:, -1] + 1) % SMALL.vocab
    a, b = m(ids), m(other)
    np.testing.assert_allclose(a[:, :-1], b[:, :-1], rtol=0, atol=1e-6)
    assert np.abs(a[:, -1] - b[:, -1]).max() > 1e-4  # the last position did see the change


def test_causality_every_position():
    """Changing token j leaves logits before j alone and changes those at j and after."""
    m = perturbed(SMALL, seed=2)
    ids = rand_ids(SMALL, 1, 10, seed=2)
    base = m(ids)
    for j in range(10):
        other = ids.copy()
        other[0, j] = (other[0, j] + 7) % SMALL.vocab
        out = m(other)
        np.testing.assert_allclose(out[0, :j], base[0, :j], rtol=0, atol=1e-6)
        assert (np.abs(out[0, j:] - base[0, j:]).max(axis=-1) > 1e-5).all()


@pytest.mark.parametrize("preset,expected", [("gpt2", 124_439_808), ("gpt2-medium", 354_823_168)])
def test_parameter_formula_equals_model_count(preset, expected):
    cfg = GPTConfig.preset(preset)
    assert gpt_parameter_formula(cfg) == expected
    assert gpt_parameter_count(cfg) == expected  # the buffer size C lays out


@settings(max_examples=40, deadline=None)
@given(v=st.integers(1, 5000), c=st.integers(1, 2048), h=st.integers(1, 16),
       dh=st.integers(1, 64), n_layers=st.integers(1, 48), tied=st.booleans())
def test_parameter_count_matches_formula_and_layout(v, c, h, dh, n_layers, tied):
    cfg = GPTConfig(vocab=v, context=c, width=h * dh, heads=h, layers=n_layers, tie_weights=tied)
    n = gpt_parameter_count(cfg)
    assert n == gpt_parameter_formula(cfg)
    if n_layers <= 4 and v * h * dh < 200_000:
        # the layout tiles the buffer exactly: no gaps, no overlaps, every dtype
        for dtype in blockc.gpt.DTYPES:
            if (h * dh) % 256 and dtype in WHOLE_BLOCKS:  # whole super-blocks only
                with pytest.raises(blockc.BlockcValueError, match="whole blocks of 256"):
                    blockc.model.layout(cfg, dtype)
                continue
            layout = blockc.model.layout(cfg, dtype)
            assert sum(int(np.prod(t.shape)) for t in layout.values()) == n
            covered = sorted((t.offset, t.offset + t.nbytes) for t in layout.values())
            assert covered[0][0] == 0 and covered[-1][1] == GPT(cfg, dtype=dtype).nbytes
            assert all(a[1] == b[0] for a, b in zip(covered, covered[1:]))


def test_actual_model_count_gpt2_small_layout():
    m = GPT(GPTConfig(vocab=50257, context=1024, width=768, heads=12, layers=1))
    sd = m.state_dict()
    assert m.num_parameters() == sum(a.size for a in sd.values()) == 50257 * 768 + 1024 * 768 + \
        12 * 768 ** 2 + 13 * 768 + 2 * 768


def test_tied_head_is_the_token_embedding():
    m = perturbed(SMALL, seed=3)
    sd = m.state_dict()
    assert "head.weight" not in sd
    assert m.num_parameters() == gpt_parameter_formula(SMALL)
    # a change through state_dict()["token.weight"] changes the head too
    ids = rand_ids(SMALL, 1, 5, seed=3)
    before, hidden = m(ids, return_hidden=True)
    sd["token.weight"][42] += 0.5  # token 42 is not in ids, so only the head sees it
    assert 42 not in ids
    m.load_state_dict(sd)
    after, hidden2 = m(ids, return_hidden=True)
    np.testing.assert_array_equal(hidden, hidden2)
    changed = np.abs(after - before).max(axis=(0, 1)) > 0
    assert changed[42] and changed.sum() == 1
    np.testing.assert_allclose(after, gpt_forward(sd, SMALL, ids), rtol=0, atol=2e-5)
    kept = m.state_dict(keep_tied=True)
    assert kept["head.weight"] is kept["token.weight"]


def test_untied_head_is_separate():
    m = perturbed(UNTIED, seed=4)
    sd = m.state_dict()
    assert sd["head.weight"].shape == (UNTIED.vocab, UNTIED.width)
    assert not np.shares_memory(sd["head.weight"], sd["token.weight"])
    assert m.num_parameters() == gpt_parameter_formula(UNTIED) == \
        gpt_parameter_formula(dataclasses.replace(UNTIED, tie_weights=True)) + 67 * 24
    ids = rand_ids(UNTIED, 2, 6, seed=4)
    np.testing.assert_allclose(m(ids), gpt_forward(sd, UNTIED, ids), rtol=0, atol=2e-5)
    before = m(ids)
    sd["head.weight"][:] = 0.0
    m.load_state_dict({"head.weight": sd["head.weight"]}, strict=False)
    assert np.abs(m(ids)).max() == 0.0 and np.abs(before).max() > 0


def test_zeroed_output_projections_make_every_block_the_identity():
    m = perturbed(SMALL, seed=5)
    sd = m.state_dict()
    for i in range(SMALL.layers):
        for name in ("attn.proj.weight", "attn.proj.bias", "down.weight", "down.bias"):
            sd[f"blocks.{i}.{name}"][:] = 0.0
    m.load_state_dict(sd)
    ids = rand_ids(SMALL, 2, 9, seed=5)
    logits, hidden = m(ids, return_hidden=True)
    x0 = sd["token.weight"][ids] + sd["position.weight"][:9]
    for i in range(SMALL.layers):
        np.testing.assert_array_equal(hidden[i], x0)
    np.testing.assert_allclose(logits, gpt_forward(sd, SMALL, ids), rtol=0, atol=2e-5)


# ---- the NumPy oracle ----------------------------------------------------------

@pytest.mark.parametrize("cfg", [SMALL, UNTIED, GPTConfig(vocab=50, context=40, width=64, heads=1,
                                                          layers=1, eps=1e-3)])
def test_forward_matches_numpy_oracle(cfg):
    m = perturbed(cfg, seed=6)
    ids = rand_ids(cfg, 3, cfg.context, seed=6)
    logits, hidden = m(ids, return_hidden=True)
    ref_logits, ref_hidden = gpt_forward(m.state_dict(), cfg, ids, return_hidden=True)
    np.testing.assert_allclose(hidden, ref_hidden, rtol=0, atol=2e-5)
    np.testing.assert_allclose(logits, ref_logits, rtol=0, atol=2e-5)


def test_gpt2_small_widths_match_oracle():
    cfg = GPTConfig(vocab=1000, context=64, width=768, heads=12, layers=2)
    m = perturbed(cfg, seed=7)
    ids = rand_ids(cfg, 1, 12, seed=7)
    np.testing.assert_allclose(m(ids), gpt_forward(m.state_dict(), cfg, ids), rtol=0, atol=1e-4)


def test_return_hidden_last_block_feeds_the_head():
    m = perturbed(SMALL, seed=8)
    ids = rand_ids(SMALL, 2, 5, seed=8)
    logits, hidden = m(ids, return_hidden=True)
    assert hidden.shape == (SMALL.layers, 2, 5, SMALL.width)
    np.testing.assert_array_equal(logits, m(ids))
    sd = m.state_dict()
    ln = blockc.reference.block.layernorm(hidden[-1].astype(np.float64), sd["norm.weight"],
                                          sd["norm.bias"], SMALL.eps)
    np.testing.assert_allclose(logits, ln @ sd["token.weight"].T.astype(np.float64), atol=2e-5)


def test_random_init_statistics():
    cfg = GPTConfig(vocab=500, context=64, width=64, heads=4, layers=2)
    sd = GPT.random(cfg, seed=0).state_dict()
    w = np.concatenate([sd[k].ravel() for k in sd if sd[k].ndim == 2])
    assert abs(w.std() - 0.02) < 5e-4 and abs(w.mean()) < 5e-4
    for k, a in sd.items():
        if a.ndim == 1:
            assert (a == (1.0 if k.endswith("weight") else 0.0)).all(), k
    np.testing.assert_array_equal(GPT.random(cfg, seed=0).params, GPT.random(cfg, seed=0).params)
    assert not np.array_equal(GPT.random(cfg, seed=0).params, GPT.random(cfg, seed=1).params)


# ---- state dicts ----------------------------------------------------------------

def test_state_dict_roundtrip_and_views():
    m = perturbed(SMALL, seed=9)
    sd = m.state_dict()
    names = list(sd)
    assert names[:2] == ["token.weight", "position.weight"]
    assert names[2:14] == [f"blocks.0.{n}" for n in (
        "ln1.weight", "ln1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight",
        "attn.proj.bias", "ln2.weight", "ln2.bias", "up.weight", "up.bias", "down.weight",
        "down.bias")]
    assert names[-2:] == ["norm.weight", "norm.bias"]
    # vectors and the position table are views of the buffer; the packed matrices copies
    assert all(np.shares_memory(a, m.params) == (a.ndim == 1 or k == "position.weight")
               for k, a in sd.items())
    copy = GPT.from_state_dict({k: v.astype(np.float64) for k, v in sd.items()}, SMALL)
    np.testing.assert_array_equal(copy.params, m.params)
    assert not np.shares_memory(copy.params, m.params)
    ids = rand_ids(SMALL, 1, 6)
    np.testing.assert_array_equal(copy(ids), m(ids))
    # the PyTorch-style tied dict (head.weight listed) loads too
    again = GPT.from_state_dict(m.state_dict(keep_tied=True), SMALL)
    np.testing.assert_array_equal(again.params, m.params)


def _sd(cfg=SMALL):
    return {k: v.copy() for k, v in GPT.random(cfg, seed=0).state_dict().items()}


def test_bad_state_dicts_name_the_tensor():
    sd = _sd()
    del sd["blocks.1.up.bias"]
    with pytest.raises(ValueError, match=r"missing.*blocks\.1\.up\.bias"):
        GPT.from_state_dict(sd, SMALL)
    sd = _sd()
    sd["blocks.0.attn.bias"] = np.zeros(3)
    with pytest.raises(ValueError, match=r"unexpected.*blocks\.0\.attn\.bias"):
        GPT.from_state_dict(sd, SMALL)
    sd = _sd()
    sd["blocks.2.attn.qkv.weight"] = sd["blocks.2.attn.qkv.weight"].T
    with pytest.raises(ValueError, match=r"blocks\.2\.attn\.qkv\.weight.*shape"):
        GPT.from_state_dict(sd, SMALL)
    sd = _sd()
    sd["head.weight"] = sd["token.weight"] + 1.0
    with pytest.raises(ValueError, match=r"head\.weight.*differs"):
        GPT.from_state_dict(sd, SMALL)
    sd = _sd()
    sd["head.weight"] = sd["token.weight"][:-1]
    with pytest.raises(ValueError, match=r"head\.weight.*shape"):
        GPT.from_state_dict(sd, SMALL)
    sd = _sd()
    sd["norm.bias"] = np.array(["a"] * SMALL.width)
    with pytest.raises(ValueError, match=r"norm\.bias"):
        GPT.from_state_dict(sd, SMALL)
    sd = _sd(SMALL)
    with pytest.raises(ValueError, match=r"missing.*head\.weight"):  # untied needs a head
        GPT.from_state_dict(sd, dataclasses.replace(SMALL, tie_weights=False))
    with pytest.raises(ValueError, match=r"missing.*blocks\.3\."):  # more layers than the dict
        GPT.from_state_dict(_sd(), dataclasses.replace(SMALL, layers=4))
    with pytest.raises(ValueError, match=r"token\.weight.*shape"):
        GPT.from_state_dict(_sd(), dataclasses.replace(SMALL, vocab=100))
    with pytest.raises(TypeError):
        GPT.from_state_dict([("token.weight", 1)], SMALL)


# bad configs: tests/test_gpt_inputs.py (test_bad_gpt_config)


# ---- hostile ids ----------------------------------------------------------------

# bad ids: tests/test_gpt_inputs.py (test_bad_ids)


def test_ids_int32_uint8_and_lists_agree():
    m = perturbed(SMALL, seed=10)
    ids = rand_ids(SMALL, 2, 6, seed=10)
    ref = m(ids)
    np.testing.assert_array_equal(m(ids.astype(np.int32)), ref)  # handed to C as int32
    np.testing.assert_array_equal(m(ids.astype(np.int32)[:, ::-1].T.T[:, ::-1]), ref)
    assert m.generate(ids.astype(np.int32), 0).dtype == np.int64
    np.testing.assert_array_equal(m.generate(ids.astype(np.int32), 3), m.generate(ids, 3))
    np.testing.assert_array_equal(m(ids.tolist()), ref)
    np.testing.assert_array_equal(m(np.asfortranarray(ids)), ref)
    small = np.array([[1, 2, 3]], dtype=np.uint8)
    np.testing.assert_array_equal(m(small), m(small.astype(np.int64)))


def test_inputs_are_not_modified():
    m = perturbed(SMALL, seed=11)
    ids = rand_ids(SMALL, 1, 5)
    keep_ids, keep_params = ids.copy(), m.params.copy()
    m(ids)
    m.generate(ids, 3)
    np.testing.assert_array_equal(ids, keep_ids)
    np.testing.assert_array_equal(m.params, keep_params)


# ---- the C entry point directly: status codes, nothing written on error ---------

class _C:
    def __init__(self, cfg, b, t):
        self.m = perturbed(cfg, seed=12)
        self.cfg = cfg.c_struct()
        self.b, self.t = b, t
        n = ffi.new("size_t *")
        assert lib.bc_gpt_workspace_size(n, self.cfg, b, t, ffi.NULL) == lib.BC_OK
        self.work = np.zeros(int(n[0]), np.float32)
        self.logits = np.full((b, t, cfg.vocab), 7.0, np.float32)

    def run(self, ids, ids_type=lib.BC_IDS_INT64, work_size=None, t=None, params=True):
        return lib.bc_gpt_forward(
            ffi.from_buffer("float[]", self.logits), ffi.NULL, ffi.NULL,
            ffi.from_buffer("char[]", self.m.params) if params else ffi.NULL, self.cfg,
            ffi.from_buffer(ids), ids_type, self.b, self.t if t is None else t, 0,
            ffi.from_buffer("float[]", self.work),
            self.work.size if work_size is None else work_size)


def test_c_forward_status_codes_and_no_write_on_error():
    c = _C(SMALL, 2, 5)
    ids = rand_ids(SMALL, 2, 5)
    bad = ids.copy()
    bad[1, 4] = SMALL.vocab  # the very last id: the whole array is checked first
    assert c.run(bad) == lib.BC_ERANGE
    bad[1, 4] = -3
    assert c.run(bad) == lib.BC_ERANGE
    assert c.run(ids.astype(np.int32).copy(), ids_type=lib.BC_IDS_INT32) == lib.BC_OK
    assert c.run(ids, ids_type=16) == lib.BC_EOPTION
    assert c.run(ids, work_size=c.work.size - 1) == lib.BC_EWORKSPACE
    assert c.run(ids, params=False) == lib.BC_ENULL
    # nothing above wrote to logits except the one successful call; redo from scratch
    c.logits[:] = 7.0
    for args in [dict(ids=bad), dict(ids=ids, work_size=0), dict(ids=ids, ids_type=0)]:
        assert c.run(**args) != lib.BC_OK
        assert (c.logits == 7.0).all()
    big = np.zeros((2, SMALL.context + 1), np.int64)
    c.t = SMALL.context + 1
    assert c.run(big, work_size=10 ** 9) == lib.BC_ECONTEXT
    assert (c.logits == 7.0).all()
    c.t = 5
    assert c.run(ids) == lib.BC_OK
    np.testing.assert_array_equal(c.logits, c.m(ids))
    c.logits[:] = 0
    assert c.run(ids.astype(np.int32).copy(), ids_type=lib.BC_IDS_INT32) == lib.BC_OK
    np.testing.assert_array_equal(c.logits, c.m(ids))


def test_c_forward_refuses_overlapping_buffers():
    c = _C(SMALL, 1, 4)
    ids = rand_ids(SMALL, 1, 4)
    f = lambda a: ffi.from_buffer("float[]", a)  # noqa: E731
    params = ffi.cast("float *", ffi.from_buffer("char[]", c.m.params))
    keep = c.m.params.copy()
    run = lambda logits, work, wsize=c.work.size: lib.bc_gpt_forward(  # noqa: E731
        logits, ffi.NULL, ffi.NULL, params, c.cfg, ffi.from_buffer(ids), lib.BC_IDS_INT64,
        1, 4, 0, work, wsize)
    # logits written over the parameters, or the workspace over the logits
    assert run(params + 5, f(c.work)) == lib.BC_EALIAS
    big = np.zeros(c.logits.size + c.work.size, np.float32)
    assert run(f(big), f(big) + c.logits.size - 1) == lib.BC_EALIAS
    assert run(f(big), f(big) + c.logits.size) == lib.BC_OK  # adjacent is fine
    np.testing.assert_array_equal(big[:c.logits.size].reshape(c.logits.shape), c.m(ids))
    np.testing.assert_array_equal(c.m.params, keep)


def test_c_layout_queries():
    cfg = SMALL.c_struct()
    n = ffi.new("size_t *")
    assert lib.bc_gpt_tensor_count(n, cfg) == lib.BC_OK and n[0] == 4 + 12 * SMALL.layers
    name = ffi.new("char[]", lib.BC_GPT_NAME_MAX)
    off, nb, nd, shape = ffi.new("size_t *"), ffi.new("size_t *"), ffi.new("size_t *"), ffi.new("size_t[2]")
    dt, packed = ffi.new("int *"), ffi.new("int *")
    info = lambda cap, i: lib.bc_gpt_tensor_info(name, cap, off, nb, dt, packed, nd, shape, cfg, i)  # noqa: E731
    assert info(64, n[0]) == lib.BC_ERANGE
    assert info(5, 0) == lib.BC_ESIZE
    assert info(64, 4) == lib.BC_OK
    assert ffi.string(name) == b"blocks.0.attn.qkv.weight"
    assert (nd[0], shape[0], shape[1], dt[0], packed[0]) == (2, 3 * SMALL.width, SMALL.width,
                                                             lib.BC_DTYPE_F32, 1)
    # the token table packed in panels of 16 rows (101 -> 112), then the position table
    # and the first norm's gain and shift
    assert off[0] == (112 + SMALL.context) * SMALL.width * 4 + 2 * SMALL.width * 4
    assert nb[0] == 3 * SMALL.width * SMALL.width * 4
    assert info(64, 3) == lib.BC_OK and (dt[0], packed[0], nb[0]) == (lib.BC_DTYPE_F32, 0, 4 * SMALL.width)
    assert lib.bc_gpt_param_count(ffi.NULL, cfg) == lib.BC_ENULL
    assert lib.bc_gpt_param_count(n, ffi.NULL) == lib.BC_ENULL
    assert lib.bc_gpt_cache_size(n, cfg, 1, SMALL.context + 1) == lib.BC_ECONTEXT
    assert lib.bc_gpt_cache_size(n, cfg, 0, 4) == lib.BC_ESIZE
    assert lib.bc_gpt_cache_size(n, cfg, 2, 5) == lib.BC_OK
    assert n[0] == SMALL.layers * 2 * 64 * SMALL.width  # whole tiles of 64 positions
    bad = ffi.new("bc_gpt_config *", dict(vocab=10, context=4, width=10, heads=3, layers=1, eps=1e-5,
                                          norm=lib.BC_NORM_LAYER))
    assert lib.bc_gpt_config_check(bad) == lib.BC_EHEADS
    huge = ffi.new("bc_gpt_config *", dict(vocab=2 ** 63, context=2 ** 63, width=2 ** 62,
                                           heads=1, layers=2 ** 62, eps=1e-5, norm=lib.BC_NORM_LAYER))
    assert lib.bc_gpt_param_count(n, huge) == lib.BC_EOVERFLOW
    nan = ffi.new("bc_gpt_config *", dict(vocab=10, context=4, width=4, heads=1, layers=1,
                                          eps=float("inf"), norm=lib.BC_NORM_LAYER))
    assert lib.bc_gpt_config_check(nan) == lib.BC_EOPTION


# ---- KV cache ---------------------------------------------------------------------

def test_cache_chunks_equal_full_forward():
    m = perturbed(SMALL, seed=13)
    ids = rand_ids(SMALL, 2, SMALL.context, seed=13)
    full = m(ids)
    cache = m.new_cache(2, SMALL.context)
    parts, start = [], 0
    for size in (5, 1, 1, 9, 1, 7):  # 24 = context
        parts.append(m(ids[:, start:start + size], cache=cache))
        start += size
        assert cache.length == start
    # bit for bit: a step of 1 or 2 rows streams the packed weights, the full pass runs
    # the GEMM; both run the same chain of sums, and attention is per query
    np.testing.assert_array_equal(np.concatenate(parts, axis=1), full)
    # the cache is full now: positions would pass the context
    with pytest.raises(ValueError, match="context"):
        m(ids[:, :1], cache=cache)
    assert cache.length == SMALL.context


def test_cache_positions_continue_after_length():
    """A token fed at cache length p gets position p's embedding: with attention and MLP
    branches zeroed, the hidden state is exactly token + position[p]."""
    m = perturbed(SMALL, seed=14)
    sd = m.state_dict()
    for i in range(SMALL.layers):
        for name in ("attn.proj.weight", "attn.proj.bias", "down.weight", "down.bias"):
            sd[f"blocks.{i}.{name}"][:] = 0.0
    m.load_state_dict(sd)
    cache = m.new_cache(1, 10)
    m([[1, 2, 3]], cache=cache)
    _, hidden = m([[4]], cache=cache, return_hidden=True)
    np.testing.assert_array_equal(hidden[-1, 0, 0], sd["token.weight"][4] + sd["position.weight"][3])


def test_cache_errors():
    m = GPT.random(SMALL, seed=0)
    with pytest.raises(ValueError, match="context limit"):
        m.new_cache(1, SMALL.context + 1)
    with pytest.raises(ValueError):
        m.new_cache(0, 4)
    cache = m.new_cache(2, 6)
    with pytest.raises(ValueError, match="batch"):
        m(rand_ids(SMALL, 1, 3), cache=cache)
    m(rand_ids(SMALL, 2, 4), cache=cache)
    with pytest.raises(ValueError, match="capacity"):
        m(rand_ids(SMALL, 2, 3), cache=cache)
    assert cache.length == 4  # a refused call leaves the cache alone
    with pytest.raises(ValueError, match=r"\[0, 101\)"):
        m([[1, 200], [1, 2]], cache=cache)
    assert cache.length == 4
    other = GPT.random(UNTIED, seed=0).new_cache(2, 6)
    with pytest.raises(ValueError, match="cache belongs to another model"):
        m(rand_ids(SMALL, 2, 1), cache=other)
    cache.reset()
    assert cache.length == 0


# ---- generation -----------------------------------------------------------------------

def test_greedy_cached_generation_equals_recomputation():
    m = perturbed(SMALL, seed=15)
    prompt = rand_ids(SMALL, 3, 4, seed=15)
    cached = m.generate(prompt, max_new_tokens=SMALL.context - 3)
    full = m.generate(prompt, max_new_tokens=SMALL.context - 3, use_cache=False)
    assert cached.shape == (3, SMALL.context + 1)
    np.testing.assert_array_equal(cached, full)
    np.testing.assert_array_equal(cached[:, :4], prompt)
    # and each greedy token really is the argmax of a full forward
    logits = m(cached[:, :-1])
    np.testing.assert_array_equal(cached[:, 4:], logits[:, 3:].argmax(-1))


def test_sampling_is_reproducible_and_respects_top_k():
    m = perturbed(SMALL, seed=16)
    prompt = rand_ids(SMALL, 2, 3, seed=16)
    a = m.generate(prompt, 12, temperature=1.5, top_k=5, seed=123)
    b = m.generate(prompt, 12, temperature=1.5, top_k=5, seed=123)
    c = m.generate(prompt, 12, temperature=1.5, top_k=5, seed=124, use_cache=False)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    np.testing.assert_array_equal(a, m.generate(prompt, 12, temperature=1.5, top_k=5, seed=123,
                                                use_cache=False))
    logits = m(a[:, :-1])[:, 2:]  # the logits each sampled token was drawn from
    top5 = np.argsort(logits, axis=-1)[..., -5:]
    assert (top5 == a[:, 3:, None]).any(-1).all()
    greedy = m.generate(prompt, 12)
    np.testing.assert_array_equal(m.generate(prompt, 12, temperature=0.7, top_k=1, seed=5), greedy)


def test_sampling_distribution_follows_softmax():
    from blockc.generation import SamplingOptions, next_tokens
    rng = np.random.default_rng(0)
    logits = np.log(np.array([[0.1, 0.6, 0.0, 0.3]], dtype=np.float32) + 1e-30)
    opts = SamplingOptions(temperature=1.0, vocab=4)
    draws = np.array([next_tokens(logits, opts, [rng])[0] for _ in range(4000)])
    freq = np.bincount(draws, minlength=4) / 4000
    np.testing.assert_allclose(freq, [0.1, 0.6, 0.0, 0.3], atol=0.03)
    assert freq[2] == 0.0


def test_generate_errors():
    m = GPT.random(SMALL, seed=0)
    with pytest.raises(ValueError, match="context"):
        m.generate(rand_ids(SMALL, 1, 5), SMALL.context - 3)
    m.generate(rand_ids(SMALL, 1, 5), SMALL.context - 4)  # exactly fits
    with pytest.raises(ValueError, match="temperature"):
        m.generate([[1]], 2, temperature=-1.0)
    with pytest.raises(ValueError, match="top_k"):
        m.generate([[1]], 2, temperature=1.0, top_k=0)
    with pytest.raises(ValueError, match=r"\[0, 101\)"):
        m.generate([[101]], 2)
    np.testing.assert_array_equal(m.generate([[3, 4]], 0), [[3, 4]])


# ---- CLI -----------------------------------------------------------------------------

def test_cli_params(capsys):
    assert cli_main(["gpt", "--params"]) == 0
    out = capsys.readouterr().out
    assert out.count("124,439,808") == 2  # formula and the model C lays out
    assert "38,597,376" in out and "7,087,872" in out and "85,054,464" in out
    assert cli_main(["gpt", "--params", "--preset", "gpt2-medium"]) == 0
    assert capsys.readouterr().out.count("354,823,168") == 2
    assert cli_main(["gpt", "--params", "--preset", "gpt2-xl"]) == 0
    assert capsys.readouterr().out.count("1,557,611,200") == 2
    assert cli_main(["gpt", "--params", "--untied"]) == 0
    assert capsys.readouterr().out.count(f"{124_439_808 + 50257 * 768:,}") == 2


def test_cli_norms(capsys):
    args = ["gpt", "--norms", "--vocab", "300", "--width", "64", "--heads", "4", "--layers", "3",
            "--seq", "8", "--seed", "2"]
    assert cli_main(args) == 0
    lines = [ln.split() for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith(
        ("embedding", "block"))]
    printed = [float(ln[1] if ln[0] == "embedding" else ln[2]) for ln in lines]
    cfg = GPTConfig(vocab=300, context=1024, width=64, heads=4, layers=3)
    m = GPT.random(cfg, seed=2)
    ids = np.random.default_rng(3).integers(0, 300, size=(1, 8))
    _, ref_hidden = gpt_forward(m.state_dict(), cfg, ids, return_hidden=True)
    sd = m.state_dict()
    x0 = sd["token.weight"][ids[0]] + sd["position.weight"][:8]
    expect = [np.linalg.norm(x0, axis=-1).mean()] + \
        [np.linalg.norm(h[0], axis=-1).mean() for h in ref_hidden]
    np.testing.assert_allclose(printed, expect, atol=1e-4)
    assert cli_main(["gpt", "--norms", "--seq", "0", "--layers", "1", "--vocab", "10"]) == 2


@plots
def test_cli_norms_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "norms.png"
    assert cli_main(["gpt", "--norms", "--vocab", "50", "--width", "32", "--heads", "2",
                     "--layers", "2", "--seq", "4", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {png}" in capsys.readouterr().out


def test_cli_norms_plot_without_matplotlib(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    png = tmp_path / "norms.png"
    assert cli_main(["gpt", "--norms", "--vocab", "50", "--width", "32", "--heads", "2",
                     "--layers", "1", "--seq", "4", "--plot", str(png)]) == 2
    assert "needs matplotlib" in capsys.readouterr().err
    assert not png.exists()


def test_last_only_is_the_last_row_of_the_whole():
    m = perturbed(SMALL, seed=21)
    ids = rand_ids(SMALL, 3, 9, seed=21)
    whole = m(ids)
    last = m(ids, last_only=True)
    assert last.shape == (3, 1, SMALL.vocab)
    np.testing.assert_array_equal(last, whole[:, -1:])
    cache = m.new_cache(3, 12)
    np.testing.assert_array_equal(m(ids, cache=cache, last_only=True), last)
    with pytest.raises(TypeError, match="last_only"):
        m(ids, last_only=1)
