"""top-p's candidate sort (issue 52): the nucleus looked for among the largest logits (all
the finite ones after top-k) gives the mask of the whole-vocabulary sort bit for bit, so
the same token ids for a seed and the same logprobs. The reference is the whole sort as
blockc computed it before, kept here."""
import numpy as np
import pytest

from blockc.generation import logits as L
from blockc.generation.logits import SamplingOptions, next_tokens, processed_logits, top_p_mask
from blockc.serve.sampling import RowSampler, Sampling

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402


def reference_top_p_mask(z, p):
    """The whole sort (blockc's top_p_mask before the candidate sort)."""
    order = np.argsort(z, axis=-1, kind="stable")
    probs = np.take_along_axis(L._softmax(z), order, axis=-1)
    drop_sorted = np.cumsum(probs, axis=-1) <= 1.0 - p
    drop_sorted[:, -1] = False
    keep = np.ones(z.shape, bool)
    np.put_along_axis(keep, order, ~drop_sorted, axis=-1)
    return keep


def _logits(seed, v, scale, ties=False, rows=2):
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((rows, v)) * scale
    if ties:  # many equal logits, across any candidate threshold
        z = np.round(z)
    return z.astype(np.float32)


CASES = [(s, v, scale, ties) for s, (v, scale, ties) in enumerate(
    [(5000, 1.0, False), (5000, 4.0, False), (5000, 12.0, False), (5000, 0.05, False),
     (4096, 3.0, True), (2000, 1.0, True), (300, 2.0, False), (32000, 6.0, False)])]


@pytest.mark.parametrize("seed,v,scale,ties", CASES)
@pytest.mark.parametrize("p", [0.05, 0.5, 0.9, 0.95, 0.999])
def test_top_p_mask_is_the_whole_sort(seed, v, scale, ties, p):
    z = _logits(seed, v, scale, ties).astype(np.float64)
    z -= z.max(axis=-1, keepdims=True)
    np.testing.assert_array_equal(top_p_mask(z, p), reference_top_p_mask(z, p))
    for k in (1, 40, 1000):  # after top-k: the finite ones are the candidates
        zk = np.where(L.top_k_mask(z, k), z, -np.inf)
        np.testing.assert_array_equal(top_p_mask(zk, p), reference_top_p_mask(zk, p))


def test_a_nucleus_at_the_edge_of_a_sum_falls_back_to_the_whole_sort():
    # p placed exactly on a running sum of the sorted probabilities: the candidate sums
    # cannot tell which side, the whole sort decides (the same mask)
    z = _logits(3, 5000, 3.0)[:1].astype(np.float64)
    z -= z.max()
    probs = L._softmax(z)[0]
    sums = np.cumsum(probs[np.argsort(z[0], kind="stable")])
    for j in (-2, -5, -50):
        t = sums[j]
        assert L._top_p_candidates(z[0], probs, t) is None
        np.testing.assert_array_equal(top_p_mask(z, 1.0 - t), reference_top_p_mask(z, 1.0 - t))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), v=st.integers(1, 3000),
       scale=st.floats(0.01, 30.0), p=st.floats(0.001, 0.999), ties=st.booleans())
def test_top_p_mask_hypothesis(seed, v, scale, p, ties):
    z = _logits(seed, v, scale, ties).astype(np.float64)
    z -= z.max(axis=-1, keepdims=True)
    np.testing.assert_array_equal(top_p_mask(z, p), reference_top_p_mask(z, p))


@pytest.mark.parametrize("opts", [dict(temperature=0.8, top_p=0.9),
                                  dict(temperature=1.3, top_p=0.5, top_k=200),
                                  dict(temperature=1.0, top_p=0.95, min_p=0.01)])
def test_draws_and_logprobs_are_the_whole_sorts(opts, monkeypatch):
    # the same token ids for the same seed, the same logprobs, through the server's
    # sampler and next_tokens, as with the reference mask
    v = 6000
    logits = [_logits(100 + i, v, 3.0, rows=1)[0] for i in range(25)]
    o = SamplingOptions(vocab=v, **opts)

    def run():
        s = Sampling(config=None, options=o, seed=7, frequency_penalty=0.0,
                     presence_penalty=0.0, bias_ids=np.zeros(0, np.int64),
                     bias_values=np.zeros(0), top_logprobs=3, logprobs=True)
        rs = RowSampler(s, 0, v)
        out = [rs(x, None) for x in logits]
        toks = next_tokens(np.stack(logits), o, [np.random.default_rng(i) for i in range(25)])
        return out, toks.tolist(), processed_logits(np.stack(logits), o)
    fast = run()
    monkeypatch.setattr(L, "top_p_mask", reference_top_p_mask)
    ref = run()
    assert fast[0] == ref[0] and fast[1] == ref[1]
    np.testing.assert_array_equal(fast[2], ref[2])
