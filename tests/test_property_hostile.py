"""Property tests (issue 6): random shapes, configs, dtypes and weight mutations
thrown at block_forward and the GPT. Each draw is predicted valid or invalid up
front; a valid one must equal the NumPy oracle, an invalid one must raise a clean
ValueError or TypeError. Nothing may crash the process."""
import numpy as np
from hypothesis import HealthCheck, event, given, settings, strategies as st

import blockc
from blockc.reference import block as ref
from blockc.reference import gpt_forward

SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
FLOATS = ("float32", "float64", "float16")
NON_FLOATS = ("int32", "int64", "bool", "complex64", "object", "str")
MUTATIONS = ("none", "drop", "extra", "transpose", "int-dtype", "float64", "fortran", "strided",
             "bias", "reshape")


def _array(shape, dtype, rng):
    a = rng.standard_normal(shape)
    if dtype == "str":
        return a.astype(str)
    if dtype == "object":
        return a.astype(object)
    if dtype == "bool":
        return a > 0
    if dtype.startswith("int"):
        return np.round(a * 3).astype(dtype)
    return a.astype(dtype)


def _pick(draw, broken, name, good, bad):
    """The field's bad value when it is the one field this draw breaks, else a good one."""
    return draw(bad) if broken == name else draw(good)


BLOCK_FIELDS = ("d_model", "n_heads", "d_ff", "norm", "placement", "activation", "causal", "eps")


@st.composite
def block_cases(draw):
    broken = draw(st.sampled_from((None,) * len(BLOCK_FIELDS) + BLOCK_FIELDS))
    d = _pick(draw, broken, "d_model", st.integers(1, 12), st.integers(-1, 0))
    divisors = [k for k in range(1, d + 1) if d % k == 0] if d >= 1 else [1]
    non_divisors = [k for k in range(2, 8) if d >= 1 and d % k] or [0]
    h = _pick(draw, broken, "n_heads", st.sampled_from(divisors), st.sampled_from(non_divisors + [0, -1]))
    f = _pick(draw, broken, "d_ff", st.integers(1, 12), st.integers(-1, 0))
    norm = _pick(draw, broken, "norm", st.sampled_from(blockc.engine.NORMS), st.just("batch"))
    placement = _pick(draw, broken, "placement", st.sampled_from(blockc.engine.PLACEMENTS), st.just("mid"))
    act = _pick(draw, broken, "activation", st.sampled_from(blockc.engine.ACTIVATIONS), st.just("silu"))
    causal = _pick(draw, broken, "causal", st.booleans(), st.just(1))
    residual = draw(st.booleans())
    eps = _pick(draw, broken, "eps", st.sampled_from([1e-5, 0.1, 0.0]),
                st.sampled_from([-1.0, float("nan")]))
    ndim = draw(st.sampled_from([2, 3, 2, 3, 1, 4]))
    lead = draw(st.lists(st.sampled_from([0, 1, 1, 2, 3, 4, 5]), min_size=ndim - 1, max_size=ndim - 1))
    last = draw(st.sampled_from(["d", "d", "d", "other"]))
    dtype = draw(st.sampled_from(FLOATS * 4 + NON_FLOATS))
    mutation = draw(st.sampled_from(("none",) * 6 + MUTATIONS))
    seed = draw(st.integers(0, 2**16))
    return dict(cfg=dict(d_model=d, n_heads=h, d_ff=f, norm=norm, placement=placement,
                         activation=act, causal=causal, residual=residual, eps=eps),
                lead=lead, last=last, dtype=dtype, mutation=mutation, seed=seed)


def _cfg_valid(c):
    d, h, f = c["d_model"], c["n_heads"], c["d_ff"]
    return (d >= 1 and h >= 1 and f >= 1 and d % h == 0 and c["norm"] in blockc.engine.NORMS
            and c["placement"] in blockc.engine.PLACEMENTS and c["activation"] in blockc.engine.ACTIVATIONS
            and isinstance(c["causal"], bool) and c["eps"] >= 0)


def _mutate(W, mutation, rng):
    """Returns (weights, still valid?)."""
    W = dict(W)
    keys = sorted(W)
    key = keys[rng.integers(len(keys))]
    a = W[key]
    if mutation == "drop":
        del W[key]      # every key init_blocks draws for the chapter-24 way is required
        return W, False
    if mutation == "extra":
        W["attn.out.weight"] = a
        return W, False
    if mutation == "transpose":
        W[key] = a.T.copy()
        return W, a.ndim < 2 or a.shape[0] == a.shape[1]
    if mutation == "int-dtype":
        W[key] = np.round(a * 10).astype(np.int32)
        return W, False
    if mutation == "float64":
        W[key] = a.astype(np.float64)
    elif mutation == "fortran":
        W[key] = np.asfortranarray(a)
    elif mutation == "strided":
        W[key] = np.repeat(a, 2, axis=-1)[..., ::2]
    elif mutation == "bias":       # an optional part, correctly shaped
        W["down.bias"] = rng.standard_normal(W["down.weight"].shape[0]).astype(np.float32)
    elif mutation == "reshape":
        W[key] = a.reshape(-1)
        return W, a.ndim == 1
    return W, True


@settings(max_examples=600, **SETTINGS)
@given(block_cases())
def test_block_forward_never_crashes(case):
    rng = np.random.default_rng(case["seed"])
    c = case["cfg"]
    try:
        cfg = blockc.BlockConfig(**c)
    except (ValueError, TypeError):
        assert not _cfg_valid(c)
        event("bad config refused")
        return
    assert _cfg_valid(c)
    W, w_ok = _mutate(blockc.init_block(cfg, seed=case["seed"]), case["mutation"], rng)
    d = cfg.d_model
    shape = tuple(case["lead"]) + ((d if case["last"] == "d" else d + 1),)
    x = _array(shape, case["dtype"], rng)
    valid = w_ok and len(shape) in (2, 3) and case["last"] == "d" and case["dtype"] in FLOATS
    try:
        y = blockc.block_forward(x, W, cfg)
    except (ValueError, TypeError):
        assert not valid, "a valid input was refused"
        event("bad input refused")
        return
    assert valid, "an invalid input went through"
    event("valid: checked against the oracle" if y.size else "valid: empty")
    assert y.shape == x.shape and y.dtype == np.float32
    if y.size == 0:  # an empty batch or sequence: an empty result, by design
        return
    with np.errstate(all="ignore"):
        want = ref.block_forward(x.astype(np.float32).astype(np.float64), W, cfg)
    np.testing.assert_allclose(y, want, rtol=2e-4, atol=2e-5)


@st.composite
def gpt_cases(draw):
    broken = draw(st.sampled_from((None,) * 14 + ("vocab", "context", "width", "heads", "layers", "eps")))
    heads = _pick(draw, broken, "heads", st.integers(1, 4), st.just(0))
    width = heads * draw(st.integers(1, 4)) + (draw(st.integers(1, heads - 1)) if broken == "width" and heads > 1 else 0)
    cfg = dict(vocab=_pick(draw, broken, "vocab", st.integers(1, 20), st.just(0)),
               context=_pick(draw, broken, "context", st.integers(1, 8), st.just(0)),
               width=0 if broken == "width" and heads == 1 else width,
               heads=heads, layers=_pick(draw, broken, "layers", st.integers(1, 3), st.just(0)),
               tie_weights=draw(st.booleans()),
               eps=_pick(draw, broken, "eps", st.sampled_from([1e-5, 0.0]), st.just(-1.0)))
    rare = st.integers(0, 9)
    b = draw(st.integers(1, 3)) if draw(rare) else 0
    t = draw(st.integers(1, 8)) if draw(rare) else draw(st.sampled_from([0, 9, 10]))
    ids = draw(st.sampled_from(["ok"] * 8 + ["high", "negative", "float", "1-D", "bool"]))
    dtype = draw(st.sampled_from(["int64", "int32", "uint8", "int16"]))
    chunks = draw(st.integers(0, 3))  # 0: no cache; else feed through a cache in chunks
    return dict(cfg=cfg, b=b, t=t, ids=ids, dtype=dtype, chunks=chunks, seed=draw(st.integers(0, 999)))


@settings(max_examples=400, **SETTINGS)
@given(gpt_cases())
def test_gpt_never_crashes(case):
    c = case["cfg"]
    try:
        cfg = blockc.GPTConfig(**c)
    except (ValueError, TypeError):
        assert min(c["vocab"], c["context"], c["width"], c["heads"], c["layers"]) < 1 \
            or c["width"] % c["heads"] or c["eps"] < 0
        event("bad config refused")
        return
    rng = np.random.default_rng(case["seed"])
    m = blockc.GPT.random(cfg, seed=case["seed"])
    for a in m.state_dict().values():
        if a.ndim == 1:
            a += rng.standard_normal(a.shape).astype(np.float32) * 0.1
    b, t = case["b"], case["t"]
    ids = rng.integers(0, cfg.vocab, size=(b, t))
    kind = case["ids"]
    if kind == "high" and ids.size:
        ids.flat[rng.integers(ids.size)] = cfg.vocab + rng.integers(0, 1000)
    elif kind == "negative" and ids.size:
        ids.flat[rng.integers(ids.size)] = -1 - rng.integers(0, 1000)
    if kind not in ("high", "negative") or np.iinfo(case["dtype"]).min < 0:
        ids = ids.astype(case["dtype"]) if ids.min(initial=0) >= np.iinfo(case["dtype"]).min \
            and ids.max(initial=0) <= np.iinfo(case["dtype"]).max else ids
    if kind == "float":
        ids = ids.astype(np.float64)
    elif kind == "1-D":
        ids = ids.reshape(-1)
    elif kind == "bool":
        ids = ids > 0
    valid = (kind in ("ok",) or (kind in ("high", "negative") and ids.size == 0)) \
        and b >= 1 and t >= 1 and t <= cfg.context and ids.ndim == 2
    sd = {k: v.copy() for k, v in m.state_dict().items()}
    try:
        if case["chunks"] and ids.ndim == 2 and t >= 1 and b >= 1:
            cache = m.new_cache(b, min(t, cfg.context)) if t <= cfg.context else m.new_cache(b, cfg.context)
            bounds = sorted(set([0, t] + list(rng.integers(0, t + 1, size=case["chunks"] - 1))))
            parts = [m(ids[:, i:j], cache=cache) for i, j in zip(bounds, bounds[1:]) if j > i]
            y = np.concatenate(parts, axis=1)
        else:
            y = m(ids)
    except (ValueError, TypeError):
        assert not valid, "a valid input was refused"
        event("bad input refused")
        return
    assert valid, "an invalid input went through"
    event("valid: checked against the oracle" + (" (cached, in chunks)" if case["chunks"] else ""))
    assert y.shape == (b, t, cfg.vocab) and y.dtype == np.float32
    with np.errstate(all="ignore"):  # eps 0 on a constant row: NaN in the oracle too
        want = gpt_forward(sd, cfg, np.asarray(ids, np.int64))
    np.testing.assert_allclose(y, want, rtol=2e-4, atol=2e-5)
