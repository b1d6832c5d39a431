"""Training (issue 14): the C backward, the loss, AdamW.

Three checks that do not share code: the NumPy backward oracle
(blockc.reference.grad, float64, written from the chain rule) checked against
finite differences of the forward oracle; blockc's C gradients against the
oracle for every block option and model shape; and PyTorch's autograd and
torch.optim.AdamW as the peers (skipped without torch; CI installs it)."""
import itertools
import math
import threading

import numpy as np
import pytest

import blockc
from blockc import AdamW, BlockConfig, GPT, GPTConfig
from blockc.reference import block as ref_block
from blockc.reference import gpt_forward
from blockc.reference import grad as ref


def rel(got, want):
    """Relative error of a whole tensor (its norm), the issue's per-tensor measure."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = np.linalg.norm(want)
    return float(np.linalg.norm(got - want) / (scale if scale > 0 else 1.0))


def assert_grads(got, want, tol=1e-4):
    assert sorted(got) == sorted(want)
    errs = {k: rel(got[k], want[k]) for k in want}
    worst = max(errs, key=errs.get)
    assert errs[worst] <= tol, (worst, errs[worst])


def block_weights(cfg, seed=0, bias=True, gains=True):
    """A block's weights with every bias and gain off its default (so each one matters)."""
    W = blockc.init_block(cfg, seed=seed, rand="normal")
    rng = np.random.default_rng(seed)
    out = {}
    for k, v in W.items():
        if k.endswith(".bias") and not k.startswith("ln") and not bias:
            continue
        if k.startswith("ln") and not gains:
            continue
        scale = 0.2 if v.ndim == 1 else 0.15
        out[k] = (v + rng.normal(0, scale, v.shape)).astype(np.float32)
    return out


OPTIONS = list(itertools.product(["layer", "rms", "none"], ["pre", "post"],
                                 ["gelu_tanh", "gelu", "relu", "swiglu"], [False, True],
                                 [True, False]))


# -- the oracle against finite differences --------------------------------------------------

def fd(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + eps
        hi = f()
        x[i] = old - eps
        lo = f()
        x[i] = old
        g[i] = (hi - lo) / (2 * eps)
    return g


@pytest.mark.parametrize("norm,placement,activation,causal,residual",
                         [("layer", "pre", "gelu_tanh", True, True), ("rms", "post", "swiglu", False, True),
                          ("none", "pre", "relu", True, False), ("layer", "post", "gelu", False, False)])
def test_the_oracle_is_the_finite_difference_of_the_forward(norm, placement, activation, causal,
                                                            residual):
    cfg = BlockConfig(d_model=4, n_heads=2, d_ff=6, norm=norm, placement=placement,
                      activation=activation, causal=causal, residual=residual)
    W = {k: v.astype(np.float64) for k, v in block_weights(cfg, seed=3).items()}
    rng = np.random.default_rng(4)
    x, dy = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 4))

    def f():
        return float((ref_block.block_forward(x, W, cfg) * dy).sum())
    dx, dW = ref.block_backward(x, W, cfg, dy)
    np.testing.assert_allclose(dx, fd(f, x), rtol=1e-6, atol=1e-7)
    for k in W:
        np.testing.assert_allclose(dW[k], fd(f, W[k]), rtol=1e-6, atol=1e-7, err_msg=k)


def test_the_gpt_oracle_is_the_finite_difference_of_its_loss():
    cfg = GPTConfig(vocab=7, context=5, width=4, heads=2, layers=2, tie_weights=True,
                    positions="rope", kv_heads=1, activation="swiglu", norm="rms", d_ff=5)
    sd = {k: v.astype(np.float64) for k, v in perturbed(cfg).state_dict().items()}
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 7, (2, 5))
    tg = rng.integers(0, 7, (2, 5))
    tg[0, 1] = -100

    def f():
        logits = gpt_forward(sd, cfg, ids, dtype=np.float64)
        return ref.cross_entropy(logits, tg)[0]
    loss, g = ref.gpt_grad(sd, cfg, ids, tg)
    assert loss == pytest.approx(f(), rel=1e-12)
    for k in ("token.weight", "blocks.1.attn.qkv.weight", "blocks.0.ln1.weight", "norm.weight"):
        np.testing.assert_allclose(g[k], fd(f, sd[k]), rtol=1e-5, atol=1e-8, err_msg=k)


# -- block_backward against the oracle ------------------------------------------------------

@pytest.mark.parametrize("norm,placement,activation,causal,residual", OPTIONS)
def test_block_backward_every_option_matches_the_oracle(norm, placement, activation, causal,
                                                        residual):
    cfg = BlockConfig(d_model=12, n_heads=3, d_ff=20, norm=norm, placement=placement,
                      activation=activation, causal=causal, residual=residual)
    W = block_weights(cfg, seed=1)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 7, 12)).astype(np.float32)
    dy = rng.standard_normal((2, 7, 12)).astype(np.float32)
    dx, dW = blockc.block_backward(x, W, cfg, dy)
    rdx, rdW = ref.block_backward(x, W, cfg, dy)
    assert dx.dtype == np.float32 and dx.shape == x.shape
    assert rel(dx, rdx) <= 1e-4
    assert_grads(dW, rdW)


@pytest.mark.parametrize("t,d,heads,f", [(1, 8, 2, 8), (17, 32, 2, 33), (65, 48, 3, 100),
                                         (130, 64, 2, 130)])
@pytest.mark.parametrize("activation,causal", [("gelu_tanh", True), ("swiglu", False)])
def test_block_backward_crosses_tile_edges_on_every_isa(isa, t, d, heads, f, activation, causal):
    cfg = BlockConfig(d_model=d, n_heads=heads, d_ff=f, norm="layer", activation=activation,
                      causal=causal)
    W = block_weights(cfg, seed=t)
    rng = np.random.default_rng(t)
    x = rng.standard_normal((2, t, d)).astype(np.float32)
    dy = rng.standard_normal((2, t, d)).astype(np.float32)
    dx, dW = blockc.block_backward(x, W, cfg, dy)
    rdx, rdW = ref.block_backward(x, W, cfg, dy)
    assert rel(dx, rdx) <= 1e-4
    assert_grads(dW, rdW)


def test_block_backward_without_biases_or_gains_keys_like_the_weights():
    cfg = BlockConfig(d_model=8, n_heads=2, d_ff=16, norm="rms", activation="swiglu", causal=True)
    W = block_weights(cfg, bias=False, gains=False)
    x = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    dx, dW = blockc.block_backward(x, W, cfg, np.ones_like(x))
    assert sorted(dW) == sorted(W) and dx.shape == (5, 8)
    assert_grads(dW, ref.block_backward(x, W, cfg, np.ones_like(x))[1])


def test_stack_backward_is_the_chain_of_its_blocks():
    cfg = BlockConfig(d_model=8, n_heads=2, d_ff=24, norm="layer", causal=True)
    Ws = [block_weights(cfg, seed=s) for s in range(3)]
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 6, 8)).astype(np.float32)
    dy = rng.standard_normal((2, 6, 8)).astype(np.float32)
    dx, dWs = blockc.stack_backward(x, Ws, cfg, dy)
    xs = [x.astype(np.float64)]
    for W in Ws[:-1]:
        xs.append(ref_block.block_forward(xs[-1], W, cfg))
    d, want = dy.astype(np.float64), [None] * 3
    for i in reversed(range(3)):
        d, want[i] = ref.block_backward(xs[i], Ws[i], cfg, d)
    assert rel(dx, d) <= 1e-4
    for got, w in zip(dWs, want):
        assert_grads(got, w)
    # the stack's gradient equals block_backward's at one block
    one = blockc.block_backward(x, Ws[0], cfg, dy)
    s1 = blockc.stack_backward(x, Ws[:1], cfg, dy)
    np.testing.assert_array_equal(one[0], s1[0])


def test_block_backward_is_the_same_bits_at_any_thread_count(threads):
    cfg = BlockConfig(d_model=32, n_heads=4, d_ff=64, norm="layer", causal=True)
    W = block_weights(cfg)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 70, 32)).astype(np.float32)
    dy = rng.standard_normal((3, 70, 32)).astype(np.float32)
    runs = []
    for n in (1, 2, 3):
        threads(n)
        runs.append(blockc.block_backward(x, W, cfg, dy))
    for dx, dW in runs[1:]:
        np.testing.assert_array_equal(dx, runs[0][0])
        for k in dW:
            np.testing.assert_array_equal(dW[k], runs[0][1][k], err_msg=k)


@pytest.mark.parametrize("bad, exc, match", [
    (dict(dy=np.ones((4, 9), np.float32)), ValueError, "dy"),
    (dict(dy="x"), TypeError, "dy"),
    (dict(x=np.ones((4, 7), np.float32)), ValueError, "x"),
])
def test_block_backward_refuses_bad_arguments(bad, exc, match):
    cfg = BlockConfig()
    args = dict(x=np.ones((4, 8), np.float32), W=blockc.init_block(cfg), cfg=cfg,
                dy=np.ones((4, 8), np.float32))
    args.update(bad)
    with pytest.raises(exc, match=match):
        blockc.block_backward(**args)


# -- the whole model against the oracle -----------------------------------------------------

def perturbed(cfg, seed=0):
    m = GPT.random(cfg, seed=seed)
    rng = np.random.default_rng(seed + 1)
    m.load_state_dict({k: (v + rng.normal(0, 0.2 if v.ndim == 1 else 0.02, v.shape)).astype(np.float32)
                       for k, v in m.state_dict().items()})
    return m


MODELS = {
    "gpt2_tied": dict(vocab=61, context=16, width=32, heads=4, layers=2),
    "gpt2_untied": dict(vocab=61, context=16, width=32, heads=4, layers=2, tie_weights=False),
    "llama": dict(vocab=70, context=16, width=32, heads=4, kv_heads=2, layers=2, norm="rms",
                  activation="swiglu", positions="rope", d_ff=40, qkv_bias=False, out_bias=False,
                  mlp_bias=False, tie_weights=False),
    "qwen_mqa_tied": dict(vocab=50, context=12, width=24, heads=3, kv_heads=1, layers=2,
                          norm="rms", activation="swiglu", positions="rope", qkv_bias=True,
                          out_bias=False, mlp_bias=False, head_dim=10),
    "post_norm_relu": dict(vocab=40, context=8, width=16, heads=2, layers=3, placement="post",
                           activation="relu"),
    "no_residual_no_norm": dict(vocab=40, context=8, width=16, heads=2, layers=2, norm="none",
                                residual=False, activation="gelu"),
}


def batch(cfg, b=2, seed=0, ignore=True):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, cfg.vocab, (b, cfg.context))
    tg = rng.integers(0, cfg.vocab, (b, cfg.context))
    if ignore:
        tg[0, :3] = -100
        tg[-1, -1] = -100
    return ids, tg


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_grad_matches_the_oracle(name):
    cfg = GPTConfig(**MODELS[name])
    m = perturbed(cfg)
    ids, tg = batch(cfg)
    loss, g = m.grad(ids, tg)
    rloss, rg = ref.gpt_grad(m.state_dict(), cfg, ids, tg)
    assert loss == pytest.approx(rloss, rel=2e-6)
    assert m.loss(ids, tg) == loss
    assert_grads(g, rg)



@pytest.mark.parametrize("heads,kv_heads,head_dim,t,width", [(4, 2, 20, 150, 32),
                                                            (3, 1, 36, 129, 32),
                                                            (2, 2, 64, 65, 136)])
def test_model_grad_crosses_attention_tiles_with_shared_kv_heads_on_every_isa(
        isa, heads, kv_heads, head_dim, t, width):
    # the attention backward's register tiles: contexts past one and two key tiles (64),
    # head sizes that are not a whole number of vectors, query heads sharing a K/V head;
    # a width past the 112 rows of x^T the weight gradients' product packs at once
    cfg = GPTConfig(vocab=40, context=t, width=width, heads=heads, kv_heads=kv_heads,
                    head_dim=head_dim, layers=1, norm="rms", activation="swiglu",
                    positions="rope", d_ff=24, qkv_bias=False, out_bias=False, mlp_bias=False)
    m = perturbed(cfg, seed=t)
    ids, tg = batch(cfg, b=2, seed=t)
    loss, g = m.grad(ids, tg)
    rloss, rg = ref.gpt_grad(m.state_dict(), cfg, ids, tg)
    assert loss == pytest.approx(rloss, rel=2e-6)
    assert_grads(g, rg)

def test_model_grad_past_the_products_row_blocks_on_every_isa(isa, threads):
    # 2 x 460 tokens: the forward's products take their output rows in blocks (16 MR
    # rows on float32 weights), dx's products in blocks of 64 MR (896 with AVX-512):
    # the oracle's gradient, and the same bits on 1 and 2 threads (whose units block
    # the rows differently)
    cfg = GPTConfig(vocab=40, context=460, width=40, heads=2, layers=1)
    m = perturbed(cfg, seed=3)
    ids, tg = batch(cfg, b=2, seed=3)
    threads(1)
    loss, g = m.grad(ids, tg)
    rloss, rg = ref.gpt_grad(m.state_dict(), cfg, ids, tg)
    assert loss == pytest.approx(rloss, rel=2e-6)
    assert_grads(g, rg)
    threads(2)
    loss2, g2 = m.grad(ids, tg)
    assert loss2 == loss
    for k in g:
        np.testing.assert_array_equal(g2[k], g[k])


def test_loss_over_only_ignored_targets_is_nan_and_the_step_changes_nothing():
    cfg = GPTConfig(**MODELS["gpt2_tied"])
    m = perturbed(cfg)
    ids, _ = batch(cfg)
    tg = np.full_like(ids, -1)
    loss, g = m.grad(ids, tg, ignore_index=-1)
    assert np.isnan(loss)  # as torch's mean over no element
    assert all(not v.any() for v in g.values())
    before = m.params.copy()
    assert np.isnan(m.train_step(ids, tg, AdamW(m), ignore_index=-1))
    np.testing.assert_array_equal(m.params, before)


def test_a_whole_training_step_is_the_same_bits_at_any_thread_count(threads):
    cfg = GPTConfig(**MODELS["llama"])
    ids, tg = batch(cfg, b=3)
    params = []
    for n in (1, 2, 3):
        threads(n)
        m = perturbed(cfg)
        opt = AdamW(m, lr=1e-2)
        for _ in range(3):
            m.train_step(ids, tg, opt, max_grad_norm=0.5)
        params.append(m.params.copy())
    for p in params[1:]:
        np.testing.assert_array_equal(p, params[0])


# -- training works -------------------------------------------------------------------------

TEXT = (b"the quick brown fox jumps over the lazy dog. " * 8
        + b"a stitch in time saves nine. " * 8)


def test_training_a_tiny_model_on_a_tiny_text_lowers_the_loss_below_a_bound():
    data = np.frombuffer(TEXT, np.uint8).astype(np.int64)
    cfg = GPTConfig(vocab=256, context=32, width=32, heads=4, layers=2)
    m = GPT.random(cfg, seed=0)
    opt = AdamW(m, lr=3e-3, weight_decay=0.0)
    rng = np.random.default_rng(0)
    first = None
    for _ in range(150):
        starts = rng.integers(0, data.size - 33, 8)
        x = np.stack([data[s:s + 32] for s in starts])
        y = np.stack([data[s + 1:s + 33] for s in starts])
        loss = m.train_step(x, y, opt, max_grad_norm=1.0)
        first = loss if first is None else first
    # from ln(256) = 5.5; the text's unigram entropy is ~3.9 nats per byte, so a model
    # that learned nothing of the order (a broken gradient) stays above it
    assert first > 5.0
    x = np.stack([data[s:s + 32] for s in range(0, 320, 40)])
    y = np.stack([data[s + 1:s + 33] for s in range(0, 320, 40)])
    assert m.loss(x, y) < 1.5


# -- AdamW against torch.optim.AdamW --------------------------------------------------------

def _torch():
    return pytest.importorskip("torch")


def random_grads(m, seed):
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in m.state_dict().items()}


@pytest.mark.parametrize("decay", ["matrices", "all", "none"])
@pytest.mark.parametrize("clip", [None, 0.5])
def test_adamw_five_steps_equal_torch(decay, clip):
    T = _torch()
    cfg = GPTConfig(**MODELS["llama"])
    m = perturbed(cfg)
    sd = m.state_dict()
    tp = {k: T.nn.Parameter(T.from_numpy(v.copy())) for k, v in sd.items()}
    wd = 0.1
    groups = [{"params": [p for k, p in tp.items() if (decay == "all" or (decay == "matrices"
                                                                          and p.ndim == 2))],
               "weight_decay": wd},
              {"params": [p for k, p in tp.items() if not (decay == "all" or (
                  decay == "matrices" and p.ndim == 2))], "weight_decay": 0.0}]
    topt = T.optim.AdamW([g for g in groups if g["params"]], lr=2e-2, betas=(0.8, 0.95), eps=1e-6)
    opt = AdamW(m, lr=2e-2, betas=(0.8, 0.95), eps=1e-6, weight_decay=wd, decay=decay)
    for step in range(5):
        g = random_grads(m, step)
        for k, p in tp.items():
            p.grad = T.from_numpy(g[k].copy())
        if clip is not None:
            norm = T.nn.utils.clip_grad_norm_(list(tp.values()), clip)
        topt.step()
        opt.step(g, max_grad_norm=clip)
        if clip is not None:
            assert opt.last_grad_norm == pytest.approx(float(norm), rel=1e-5)
    got = m.state_dict()
    for k, p in tp.items():
        np.testing.assert_allclose(got[k], p.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=k)
    assert opt.steps == 5


def _adamw_numpy(p, m, v, g, step, lr, betas, eps, wd, gscale):
    """torch's single-tensor AdamW step in float32, one IEEE operation at a time, in
    blockc's documented order (bc_adamw_args), the scalars as blockc forms them (double,
    then float32): NumPy rounds each operation once, as the kernels do."""
    f = np.float32
    b1, b2 = betas
    bc1, bc2 = 1.0 - b1 ** step, 1.0 - b2 ** step
    if gscale != 1.0:
        g = g * f(gscale)
    m = m + f(1.0 - b1) * (g - m)
    v = v * f(b2) + (f(1.0 - b2) * g) * g
    den = np.sqrt(v) / f(math.sqrt(bc2)) + f(eps)
    p = p * f(1.0 - lr * wd) + f(-lr / bc1) * (m / den)
    return p, m, v


def test_adamw_is_numpys_float32_update_bit_for_bit_on_every_isa(isa):
    """The vector kernel's AdamW (with tails: tensors of 15, 32 x 15, ... floats) gives
    the bits of the update written out in NumPy float32, clipped and not, with decay on
    the matrices only: the same bits on every instruction set."""
    blockc.set_isa(isa)
    cfg = GPTConfig(vocab=37, context=8, width=30, heads=2, layers=2, d_ff=45)
    m = perturbed(cfg)
    lr, betas, eps, wd = 2e-2, (0.8, 0.95), 1e-6, 0.1
    opt = AdamW(m, lr=lr, betas=betas, eps=eps, weight_decay=wd)
    p = {k: a.copy() for k, a in m.state_dict().items()}  # (views of the parameters)
    mom = {k: np.zeros_like(a) for k, a in p.items()}
    sq = {k: np.zeros_like(a) for k, a in p.items()}
    for step, clip in enumerate([None, 0.05, 1e3], start=1):
        g = random_grads(m, step)
        opt.step(g, max_grad_norm=clip)
        scale = 1.0
        if clip is not None:
            scale = min(1.0, clip / (opt.last_grad_norm + 1e-6))
        for k in p:
            p[k], mom[k], sq[k] = _adamw_numpy(p[k], mom[k], sq[k], g[k], step, lr, betas, eps,
                                               wd if p[k].ndim == 2 else 0.0, scale)
    got, st = m.state_dict(), opt.state_dict()
    for k in p:
        np.testing.assert_array_equal(got[k].view(np.uint32), p[k].view(np.uint32), err_msg=k)
        np.testing.assert_array_equal(st["exp_avg"][k], mom[k], err_msg=k)
        np.testing.assert_array_equal(st["exp_avg_sq"][k], sq[k], err_msg=k)


def test_adamw_state_round_trips_and_training_resumes_exactly():
    cfg = GPTConfig(**MODELS["gpt2_untied"])
    ids, tg = batch(cfg)
    a = perturbed(cfg)
    oa = AdamW(a, lr=1e-2)
    for _ in range(3):
        a.train_step(ids, tg, oa)
    b = GPT.from_state_dict(a.state_dict(), cfg)
    ob = AdamW(b, lr=5.0, weight_decay=0.5)  # the loaded state replaces these
    ob.load_state_dict(oa.state_dict())
    assert (ob.lr, ob.weight_decay, ob.steps) == (oa.lr, oa.weight_decay, 3)
    for _ in range(2):
        la, lb = a.train_step(ids, tg, oa), b.train_step(ids, tg, ob)
        assert la == lb
    np.testing.assert_array_equal(a.params, b.params)
    # the state is new arrays: changing it does not reach the optimizer
    st = oa.state_dict()
    st["exp_avg"]["head.weight"][...] = 1e9
    assert np.abs(oa.state_dict()["exp_avg"]["head.weight"]).max() < 1e9


@pytest.mark.parametrize("kw, exc, match", [
    (dict(lr=-1.0), ValueError, "lr"),
    (dict(lr="fast"), TypeError, "lr"),
    (dict(betas=(0.9, 1.0)), ValueError, "betas"),
    (dict(betas=0.9), TypeError, "betas"),
    (dict(eps=-1e-8), ValueError, "eps"),
    (dict(weight_decay=-0.1), ValueError, "weight_decay"),
    (dict(decay="biases"), ValueError, "decay"),
])
def test_adamw_refuses_bad_options(kw, exc, match):
    m = GPT.random(GPTConfig(**MODELS["gpt2_tied"]))
    with pytest.raises(exc, match=match):
        AdamW(m, **kw)


def test_training_refusals_name_the_argument():
    cfg = GPTConfig(**MODELS["gpt2_tied"])
    m = GPT.random(cfg)
    ids, tg = batch(cfg)
    with pytest.raises(ValueError, match="targets must lie in"):
        m.grad(ids, tg + cfg.vocab + 100)
    with pytest.raises(ValueError, match="targets must have the shape"):
        m.grad(ids, tg[:, :-1])
    with pytest.raises(TypeError, match="targets must be integers"):
        m.grad(ids, tg.astype(np.float32))
    with pytest.raises(ValueError, match="float32"):
        m.astype("bfloat16").grad(ids, tg)
    with pytest.raises(TypeError, match="model must be a blockc.GPT"):
        AdamW({"w": 1})
    with pytest.raises(ValueError, match="another model"):
        GPT.random(cfg).train_step(ids, tg, AdamW(m))
    with pytest.raises(ValueError, match="keys of state_dict"):
        AdamW(m).step({"token.weight": np.zeros((cfg.vocab, cfg.width))})
    g = random_grads(m, 0)
    g["token.weight"] = g["token.weight"][:-1]
    with pytest.raises(ValueError, match=r"grads\['token.weight'\] must have shape"):
        AdamW(m).step(g)
    with pytest.raises(ValueError, match="max_grad_norm"):
        AdamW(m).step(random_grads(m, 0), max_grad_norm=-1.0)
    with pytest.raises(ValueError, match="missing 'steps'"):
        AdamW(m).load_state_dict({"exp_avg": {}, "exp_avg_sq": {}})


# -- concurrency ----------------------------------------------------------------------------

def test_two_threads_training_two_models_get_the_serial_results():
    cfg = GPTConfig(**MODELS["gpt2_untied"])
    ids, tg = batch(cfg)

    def run(out, seed):
        m = perturbed(cfg, seed)
        opt = AdamW(m, lr=1e-2)
        out[seed] = [m.train_step(ids, tg, opt) for _ in range(4)] + [m.params.copy()]
    serial, par = {}, {}
    run(serial, 0)
    run(serial, 1)
    ts = [threading.Thread(target=run, args=(par, s)) for s in (0, 1)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for s in (0, 1):
        assert par[s][:4] == serial[s][:4]
        np.testing.assert_array_equal(par[s][4], serial[s][4])


def test_targets_changed_by_another_thread_give_one_of_the_checked_results():
    """The targets are copied and checked before C reads them: a second thread
    switching them between two valid batches and an invalid one never gives a
    mixture or a crash, only one of the two results or the refusal."""
    cfg = GPTConfig(**MODELS["gpt2_tied"])
    m = perturbed(cfg)
    ids, t1 = batch(cfg, seed=1)
    _, t2 = batch(cfg, seed=2, ignore=False)
    allowed = {m.loss(ids, t1), m.loss(ids, t2)}
    bad = np.full_like(t1, cfg.vocab + 5)
    shared = t1.copy()
    stop = threading.Event()

    def flip():
        i = 0
        while not stop.is_set():
            shared[...] = (t1, t2, bad)[i % 3]
            i += 1
    th = threading.Thread(target=flip)
    th.start()
    try:
        for _ in range(60):
            try:
                loss = m.loss(ids, shared)
            except ValueError:
                continue
            assert loss in allowed
    finally:
        stop.set()
        th.join()


# -- the peers: torch.autograd ------------------------------------------------------------

@pytest.mark.parametrize("t,d,heads,f", [(9, 16, 2, 40), (65, 48, 3, 100), (130, 64, 2, 33)])
def test_block_backward_matches_torch_autograd(isa, t, d, heads, f):
    T = _torch()
    import torch_ref
    for norm, placement, activation, causal, residual in OPTIONS[::5]:
        cfg = BlockConfig(d_model=d, n_heads=heads, d_ff=f, norm=norm, placement=placement,
                          activation=activation, causal=causal, residual=residual)
        W = block_weights(cfg, seed=9)
        tb = torch_ref.Block.like(cfg, W)
        rng = np.random.default_rng(3)
        x = rng.standard_normal((2, t, d)).astype(np.float32)
        dy = rng.standard_normal((2, t, d)).astype(np.float32)
        tx = T.from_numpy(x.copy()).requires_grad_(True)
        (tb(tx) * T.from_numpy(dy)).sum().backward()
        dx, dW = blockc.block_backward(x, W, cfg, dy)
        assert rel(dx, tx.grad.numpy()) <= 1e-4, cfg
        assert_grads(dW, {k: p.grad.numpy() for k, p in tb.named_parameters()})


def _hf_grads_as_ours(hm, m):
    """transformers' gradients keyed and laid out like m.state_dict()."""
    from blockc import hf
    grads = {n: p.grad for n, p in hm.named_parameters()}
    sd = m.state_dict()
    out = {k: np.zeros_like(v) for k, v in sd.items()}
    fam = hf.family_of(hf.config_to_hf(m.config))
    for name, ours, transposed, rows in fam.names(m.config):
        g = None
        for n in (name, "transformer." + name, "model." + name):
            if n in grads:
                g = grads[n]
        if g is None:
            continue
        a = g.detach().numpy()
        a = a.T if transposed else a
        if ours not in out:
            continue
        if rows is None:
            out[ours] = out[ours] + a
        else:
            out[ours][rows[0]:rows[1]] += a
    return out


@pytest.mark.parametrize("kind", ["gpt2", "gpt2_untied", "llama"])
def test_model_grad_matches_transformers_autograd(tmp_path, kind):
    T = _torch()
    transformers = pytest.importorskip("transformers")
    T.manual_seed(0)
    if kind.startswith("gpt2"):
        hc = transformers.GPT2Config(vocab_size=83, n_positions=24, n_embd=32, n_layer=2, n_head=4,
                                     tie_word_embeddings=kind == "gpt2", resid_pdrop=0.0,
                                     embd_pdrop=0.0, attn_pdrop=0.0)
        hm = transformers.GPT2LMHeadModel(hc)
    else:
        hc = transformers.LlamaConfig(vocab_size=83, hidden_size=32, intermediate_size=44,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=24,
                                      tie_word_embeddings=False)
        hm = transformers.LlamaForCausalLM(hc)
    with T.no_grad():
        for p in hm.parameters():
            p.add_(T.randn_like(p) * (0.2 if p.ndim == 1 else 0.02))
    hm.eval().save_pretrained(tmp_path)
    m = GPT.from_pretrained(tmp_path)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 83, (2, 24))
    tg = rng.integers(0, 83, (2, 24))
    tg[1, 5:9] = -100
    logits = hm(T.as_tensor(ids)).logits
    tl = T.nn.functional.cross_entropy(logits.reshape(-1, 83), T.as_tensor(tg).reshape(-1),
                                       ignore_index=-100)
    tl.backward()
    loss, g = m.grad(ids, tg)
    assert loss == pytest.approx(float(tl.detach()), rel=1e-5)
    assert_grads(g, _hf_grads_as_ours(hm, m))
