"""Generation: the logits processors against their definitions and against
transformers' (the peer; those tests skip without it), the sampler's distribution,
end tokens, streaming, ragged batches, seeds at any thread count, and what the
arguments may and may not be."""
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import blockc
from blockc import GPT, GPTConfig
from blockc.generation import (SamplingOptions, apply_penalty, min_p_mask, next_tokens,
                               processed_logits, top_k_mask, top_p_mask)

CFG = GPTConfig(vocab=61, context=40, width=32, heads=4, layers=2)


def model(seed=0):
    m = GPT.random(CFG, seed=seed)
    rng = np.random.default_rng(seed + 7)
    for a in m.state_dict().values():
        if a.ndim == 1:
            a += rng.normal(0.0, 0.1, a.shape).astype(np.float32)
    return m


def softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


logit_rows = hnp.arrays(np.float64, st.tuples(st.integers(1, 3), st.integers(2, 40)),
                        elements=st.floats(-20, 20, allow_nan=False, width=32))


# -- the masks against their definitions -------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(logit_rows, st.integers(1, 45))
def test_top_k_keeps_the_k_largest(z, k):
    keep = top_k_mask(z, k)
    for zr, kr in zip(z, keep):
        assert kr.sum() >= min(k, len(zr))  # ties at the k-th are all kept
        if (~kr).any():
            assert zr[kr].min() > zr[~kr].max()
            assert np.sort(zr)[::-1][min(k, len(zr)) - 1] == zr[kr].min()


@settings(max_examples=200, deadline=None)
@given(logit_rows, st.floats(0.01, 0.99))
def test_top_p_keeps_the_fewest_likeliest_past_p(z, p):
    keep = top_p_mask(z, p)
    probs = softmax(z)
    for pr, kr in zip(probs, keep):
        assert kr.any() and pr[kr].max() == pr.max()  # a likeliest token is kept
        if (~kr).any():
            assert pr[kr].min() >= pr[~kr].max()                    # the likeliest are kept
            assert pr[~kr].sum() <= 1 - p + 1e-12                   # what is dropped is <= 1 - p
            if kr.sum() > 1:                                        # and dropping one more
                assert pr[~kr].sum() + pr[kr].min() > 1 - p - 1e-12  # would pass it


@settings(max_examples=200, deadline=None)
@given(logit_rows, st.floats(0.0, 1.0))
def test_min_p_keeps_the_tokens_near_the_likeliest(z, min_p):
    keep = min_p_mask(z, min_p)
    probs = softmax(z)
    np.testing.assert_array_equal(keep, probs >= min_p * probs.max(-1, keepdims=True))
    assert keep.any(-1).all()


def test_repetition_penalty_divides_positives_and_multiplies_negatives():
    z = np.array([[2.0, -2.0, 1.0, -1.0], [3.0, 3.0, -3.0, 0.5]])
    out = apply_penalty(z, [np.array([0, 1, 1]), np.array([3])], 2.0)
    np.testing.assert_array_equal(out, [[1.0, -4.0, 1.0, -1.0], [3.0, 3.0, -3.0, 0.25]])
    assert z[0, 0] == 2.0  # a new array


def test_sampling_follows_the_filtered_softmax():
    z = np.log(np.array([[0.05, 0.4, 0.25, 0.2, 0.1]]))
    opts = SamplingOptions(temperature=1.0, top_p=0.8, vocab=5)
    rng = np.random.default_rng(1)
    draws = np.array([next_tokens(z, opts, [rng])[0] for _ in range(6000)])
    freq = np.bincount(draws, minlength=5) / len(draws)
    # top_p 0.8 drops 0.05 and 0.1 (their sum 0.15 <= 0.2) and keeps 0.4, 0.25, 0.2
    np.testing.assert_allclose(freq, np.array([0, 0.4, 0.25, 0.2, 0]) / 0.85, atol=0.025)
    assert freq[0] == 0 and freq[4] == 0


def test_a_tiny_temperature_is_the_greedy_limit_not_nan():
    z = np.array([[1.0, 3.0, 2.999]], np.float32)
    opts = SamplingOptions(temperature=1e-30, vocab=3)
    assert all(next_tokens(z, opts, [np.random.default_rng(s)])[0] == 1 for s in range(20))


def test_sampling_refuses_nonfinite_logits():
    with pytest.raises(ValueError, match="inf or NaN"):
        next_tokens(np.array([[0.0, np.nan]]), SamplingOptions(1.0, vocab=2),
                    [np.random.default_rng(0)])
    # greedy does not sample: the argmax of whatever is there
    assert next_tokens(np.array([[0.0, np.inf]]), SamplingOptions(vocab=2), [None])[0] == 1


# -- against transformers' processors ------------------------------------------------------

@pytest.mark.parametrize("opts", [
    dict(temperature=0.7), dict(temperature=1.3, top_k=5), dict(temperature=1.0, top_p=0.6),
    dict(temperature=0.9, min_p=0.05), dict(temperature=1.2, top_k=12, top_p=0.9, min_p=0.02),
    dict(temperature=0.8, repetition_penalty=1.4, top_k=20),
])
def test_processors_match_transformers(opts):
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    rng = np.random.default_rng(3)
    z = (rng.normal(size=(4, 97)) * 3).astype(np.float32)
    seen = rng.integers(0, 97, size=(4, 9))
    chain = []
    if "repetition_penalty" in opts:
        chain.append(tf.RepetitionPenaltyLogitsProcessor(opts["repetition_penalty"]))
    chain.append(tf.TemperatureLogitsWarper(opts["temperature"]))
    if "top_k" in opts:
        chain.append(tf.TopKLogitsWarper(opts["top_k"]))
    if "top_p" in opts:
        chain.append(tf.TopPLogitsWarper(opts["top_p"]))
    if "min_p" in opts:
        chain.append(tf.MinPLogitsWarper(opts["min_p"]))
    scores = torch.from_numpy(z.copy())
    for f in chain:
        scores = f(torch.from_numpy(seen), scores)
    want = scores.numpy().astype(np.float64)
    got = processed_logits(z, SamplingOptions(vocab=97, **opts), list(seen))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    # theirs unshifted float32, ours shifted float64: the same up to each row's constant
    for g, w in zip(got, want):
        live = ~np.isinf(w)
        assert live.sum() >= 1
        np.testing.assert_allclose(w[live] - g[live], w[live][0] - g[live][0], atol=1e-4)


def test_greedy_repetition_penalty_matches_transformers_generate(tmp_path):
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    tf.logging.set_verbosity_error()
    m = model(1)
    m.save_pretrained(tmp_path)
    hf = tf.GPT2LMHeadModel.from_pretrained(tmp_path, torch_dtype=torch.float32).eval()
    prompt = np.random.default_rng(1).integers(0, CFG.vocab, size=(2, 5))
    ours = m.generate(prompt, 15, repetition_penalty=1.5)
    with torch.no_grad():
        theirs = hf.generate(torch.as_tensor(prompt), max_new_tokens=15, do_sample=False,
                             repetition_penalty=1.5, pad_token_id=0,
                             attention_mask=torch.ones(prompt.shape, dtype=torch.long)).numpy()
    np.testing.assert_array_equal(ours, theirs)
    assert not np.array_equal(ours, m.generate(prompt, 15))  # the penalty changed something


# -- generate ----------------------------------------------------------------------------

SAMPLE = dict(temperature=1.1, top_k=30, top_p=0.95, min_p=0.01, repetition_penalty=1.2, seed=11)


def test_seeded_samples_are_the_same_at_any_thread_count():
    m = model(2)
    prompt = np.random.default_rng(2).integers(0, CFG.vocab, size=(3, 6))
    old = blockc.get_num_threads()
    try:
        outs = []
        for n in (1, 2, 3):
            blockc.set_num_threads(n)
            outs.append(m.generate(prompt, 20, **SAMPLE))
    finally:
        blockc.set_num_threads(old)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])
    np.testing.assert_array_equal(outs[0], m.generate(prompt, 20, use_cache=False, **SAMPLE))
    assert not np.array_equal(outs[0], m.generate(prompt, 20, **{**SAMPLE, "seed": 12}))


def test_each_sampled_token_is_one_the_options_allow():
    m = model(3)
    prompt = np.random.default_rng(3).integers(0, CFG.vocab, size=(2, 4))
    out = m.generate(prompt, 16, temperature=1.0, top_k=4, seed=0)
    logits = m(out[:, :-1])[:, 3:]
    opts = SamplingOptions(temperature=1.0, top_k=4, vocab=CFG.vocab)
    for t in range(16):
        allowed = ~np.isinf(processed_logits(logits[:, t], opts))
        assert allowed[np.arange(2), out[:, 4 + t]].all()


R = 3.0  # a random model repeats itself greedily; the penalty varies its tokens


def _first_greedy(m, prompt, n):
    return m.generate(prompt, n, repetition_penalty=R)[:, prompt.shape[1]:]


def test_an_end_token_stops_its_row_and_pads_it():
    m = model(4)
    for seed in range(100):  # a prompt pair whose row 0 makes a token (at k > 0) row 1 never does
        prompt = np.random.default_rng(seed).integers(0, CFG.vocab, size=(2, 3))
        free = _first_greedy(m, prompt, 12)
        ks = [k for k in range(1, 11) if free[0, k] not in free[1] and free[0, k] not in free[0, :k]]
        if ks:
            break
    k = ks[0]
    eos = int(free[0, k])
    other = next(t for t in range(CFG.vocab) if t not in free)  # an end token no row makes
    out = m.generate(prompt, 12, eos_token_id=[other, eos], pad_token_id=5,
                     repetition_penalty=R)
    new = out[:, 3:]
    np.testing.assert_array_equal(new[1], free[1])
    np.testing.assert_array_equal(new[0, :k + 1], free[0, :k + 1])
    assert (new[0, k + 1:] == 5).all()
    # the pad defaults to the first end token; when every row has ended, the batch stops
    solo = m.generate(prompt[:1], 12, eos_token_id=eos, repetition_penalty=R)
    np.testing.assert_array_equal(solo[0, 3:], free[0, :k + 1])
    ragged = m.generate([prompt[0], prompt[1, :2]], 12, eos_token_id=eos, repetition_penalty=R)
    np.testing.assert_array_equal(ragged[0][3:], free[0, :k + 1])


def test_streamer_and_stream_see_the_tokens_as_made():
    m = model(5)
    prompt = np.random.default_rng(5).integers(0, CFG.vocab, size=(2, 4))
    steps = []

    def streamer(toks):
        steps.append(toks.copy())
        toks[:] = -1  # a streamer's array is its own

    out = m.generate(prompt, 9, streamer=streamer, **SAMPLE)
    np.testing.assert_array_equal(np.stack(steps, 1), out[:, 4:])
    assert all(s.dtype == np.int64 and s.shape == (2,) for s in steps)
    np.testing.assert_array_equal(list(m.stream(prompt[1], 9, **SAMPLE)),
                                  m.generate(prompt[1:], 9, **SAMPLE)[0, 4:])
    free = _first_greedy(m, prompt[:1], 9)[0]
    eos = int(free[4])
    k = list(free).index(eos)
    assert list(m.stream(prompt[0], 9, eos_token_id=eos, repetition_penalty=R)) == list(free[:k + 1])


def test_ragged_rows_get_their_solo_tokens():
    m = model(6)
    rng = np.random.default_rng(6)
    prompts = [rng.integers(0, CFG.vocab, size=n) for n in (5, 1, 9, 3)]
    for opts in ({}, SAMPLE, dict(SAMPLE, use_cache=False)):
        batch = m.generate(prompts, 11, **opts)
        assert isinstance(batch, list) and len(batch) == 4
        for p, row in zip(prompts, batch):
            np.testing.assert_array_equal(row, m.generate(p[None], 11, **opts)[0])


def test_what_the_caller_changes_after_the_call_starts_changes_nothing():
    m = model(7)
    prompt = np.random.default_rng(7).integers(0, CFG.vocab, size=(2, 5))
    prompts = [prompt[0].copy(), prompt[1, :3].copy()]
    want = m.generate(prompt, 8, **SAMPLE)
    want_r = m.generate([p.copy() for p in prompts], 8, **SAMPLE)
    a = prompt.copy()

    def zero_array(_):  # runs between steps, as another thread could while C runs
        a[:] = 0

    np.testing.assert_array_equal(m.generate(a, 8, streamer=zero_array, **SAMPLE), want)

    def empty_list(_):
        if prompts:
            prompts[0][:] = 0
            prompts.pop()

    got = m.generate(prompts, 8, streamer=empty_list, **SAMPLE)
    assert len(got) == 2 and prompts == []
    for g, w in zip(got, want_r):
        np.testing.assert_array_equal(g, w)
    eos = [3, 4]
    ref = m.generate(prompt, 8, eos_token_id=(3, 4), **SAMPLE)
    np.testing.assert_array_equal(m.generate(prompt, 8, eos_token_id=eos,
                                             streamer=lambda _: eos.append(7), **SAMPLE), ref)


def test_two_threads_generating_on_one_model_get_their_solo_tokens():
    m = model(8)
    rng = np.random.default_rng(8)
    jobs = [([rng.integers(0, CFG.vocab, size=n) for n in (4, 7)], dict(SAMPLE, seed=s))
            for s in range(6)]
    want = [m.generate(p, 10, **o) for p, o in jobs]
    got = [None] * len(jobs)

    def run(i):
        got[i] = m.generate(*jobs[i][:1], 10, **jobs[i][1])

    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kw,exc,match", [
    (dict(top_p=0.0, temperature=1.0), ValueError, "top_p"),
    (dict(top_p=1.5, temperature=1.0), ValueError, "top_p"),
    (dict(top_p="0.5", temperature=1.0), TypeError, "top_p"),
    (dict(min_p=1.5, temperature=1.0), ValueError, "min_p"),
    (dict(min_p=-0.1, temperature=1.0), ValueError, "min_p"),
    (dict(repetition_penalty=0.0), ValueError, "repetition_penalty"),
    (dict(repetition_penalty=np.nan), ValueError, "repetition_penalty"),
    (dict(eos_token_id=61), ValueError, "eos_token_id"),
    (dict(eos_token_id=[1, -1]), ValueError, "eos_token_id"),
    (dict(eos_token_id=1.0), TypeError, "eos_token_id"),
    (dict(pad_token_id=99), ValueError, "pad_token_id"),
    (dict(stop="ab"), TypeError, "stop"),
    (dict(stop=["ab", ""]), TypeError, "stop"),
    (dict(stop=["ab"]), ValueError, "tokenizer"),
    (dict(seed=-1, temperature=1.0), ValueError, "seed"),
])
def test_generate_names_a_bad_option(kw, exc, match):
    m = model(0)
    with pytest.raises(exc, match=match):
        m.generate([[1, 2]], 3, **kw)


def test_stream_refuses_batches_and_unknown_options():
    m = model(0)
    with pytest.raises(ValueError, match="one prompt"):
        next(m.stream([[1, 2], [3, 4]], 3))
    with pytest.raises(TypeError, match="streamr"):
        next(m.stream([1, 2], 3, streamr=print))
