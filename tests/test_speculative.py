"""Speculative decoding (issue 51): a draft model (``assistant_model``) or prompt lookup
(``prompt_lookup_num_tokens``). Greedy output is token for token plain greedy decoding's,
which rests on the cache's promise, tested here on the very calls the loop makes (a
K + 1-token forward gives each position the bits one-token forwards give, after a
truncation too); sampled output has the target's distribution, tested against the exact
joint distribution of two tokens computed by the NumPy oracle (chi-square, fixed seeds),
with the draft's own distribution shown to fail the same test; the CLI flags."""
import dataclasses
import io
import sys

import numpy as np
import pytest

import blockc
from blockc import GPT, GPTConfig
from blockc.cli import main
from blockc.generation.speculative import (SpeculativeStats, accept_draft, lookup_draft)
from blockc.reference.gpt import gpt_forward

CFG = GPTConfig(vocab=48, context=96, width=32, heads=4, layers=3)
LLAMA = dict(norm="rms", activation="swiglu", positions="rope", kv_heads=2, d_ff=96,
             qkv_bias=False, out_bias=False, mlp_bias=False, tie_weights=False)


def sharp(cfg, seed, scale=12.0, dtype="float32"):
    """A random model whose logits are far from uniform (the weights scaled up): its
    greedy tokens vary and its distributions are lopsided."""
    m = GPT.random(cfg, seed=seed)
    sd = {k: v * (scale if v.ndim == 2 else 1.0) for k, v in m.state_dict().items()}
    return GPT.from_state_dict(sd, cfg, dtype=dtype)


def first_layers(m, n):
    """The model cut to its first n blocks: a draft that agrees with it partly."""
    cfg = dataclasses.replace(m.config, layers=n)
    sd = {k: v for k, v in m.state_dict().items()
          if not k.startswith("blocks.") or int(k.split(".")[1]) < n}
    return GPT.from_state_dict(sd, cfg)


@pytest.fixture(scope="module")
def target():
    return sharp(CFG, 1)


# -- the cache's promise, on the calls speculation makes ---------------------------------

@pytest.mark.parametrize("dtype,cache", [("float32", "float32"), ("float32", "float16"),
                                         ("bfloat16", "float32"), ("q8_0i", "float32"),
                                         ("q4_0", "float16"), ("q4_ki", "float32")])
def test_a_verify_call_gives_the_bits_of_one_token_calls(dtype, cache):
    wide = dtype.startswith("q4_k")  # k-quants: rows of whole 256-column blocks
    cfg = GPTConfig(vocab=40, context=80, width=256 if wide else 64, heads=4, layers=2,
                    **dict(LLAMA, d_ff=512 if wide else 96))
    m = GPT.random(cfg, seed=1, dtype=dtype)
    ids = np.random.default_rng(0).integers(0, 40, 60)
    one = m.new_cache(1, 80, cache)
    m.run(ids[None, :11], one)  # prefill-shaped, as plain generation runs the prompt
    want = np.concatenate([m.run(ids[None, j:j + 1], one)[0][0] for j in range(11, 60)])
    spec = m.new_cache(1, 80, cache)
    m.run(ids[None, :11], spec, want_logits=False)  # speculation's prefill: no head
    for lo, hi in ((11, 12), (12, 17), (17, 50)):  # verify calls of 1, 5 and 33 tokens
        got = m.run(ids[None, lo:hi], spec)[0][0]
        assert np.array_equal(got, want[lo - 11:hi - 11]), (lo, hi)
    spec.truncate(0, 20)  # rejected positions forgotten: the same bits again from 20
    got = m.run(ids[None, 20:60], spec)[0][0]
    assert np.array_equal(got, want[20 - 11:])


# -- greedy: token for token ---------------------------------------------------------------

PROMPTS = [[5], [1, 2, 3, 4, 1, 2], list(range(10, 22)), [7, 7, 7, 3, 7, 7]]


@pytest.mark.parametrize("how", ["self", "half", "other", "lookup1", "lookup4", "lookup20"])
def test_greedy_output_is_plain_greedy_output(target, how):
    draft = {"self": target, "half": first_layers(target, 1),
             "other": sharp(GPTConfig(vocab=48, context=96, width=16, heads=2, layers=1), 5)
             }.get(how)
    opts = (dict(assistant_model=draft, num_assistant_tokens=3) if draft is not None
            else dict(prompt_lookup_num_tokens=int(how[6:])))
    for p in PROMPTS:
        want = target.generate(np.array([p]), 40)
        got = target.generate(np.array([p]), 40, **opts)
        assert np.array_equal(got, want), (how, p)
        assert list(target.stream(p, 40, **opts)) == want[0, len(p):].tolist()


def test_greedy_with_penalty_end_ids_half_cache_and_a_quantised_model():
    m = sharp(GPTConfig(vocab=48, context=64, width=64, heads=4, layers=2, **LLAMA), 3,
              scale=6.0, dtype="q8_0i")
    d = first_layers(m.astype("float32"), 1)
    p = np.array([[3, 9, 4, 3, 9]])
    for kw in (dict(repetition_penalty=1.5), dict(cache_dtype="float16"),
               dict(repetition_penalty=0.7, cache_dtype="float16")):
        want = m.generate(p, 30, **kw)
        assert np.array_equal(m.generate(p, 30, assistant_model=d, **kw), want), kw
        assert np.array_equal(m.generate(p, 30, prompt_lookup_num_tokens=5, **kw), want), kw
    free = m.generate(p, 30)[0, 5:]
    end = int(free[7])  # an end id the answer reaches at its first occurrence
    cut = int(np.flatnonzero(free == end)[0]) + 1
    for opts in (dict(assistant_model=m, num_assistant_tokens=6),
                 dict(prompt_lookup_num_tokens=6)):
        got = m.generate(p, 30, eos_token_id=end, **opts)
        assert got[0, 5:].tolist() == free[:cut].tolist()
    # the whole context: the prompt and max_new_tokens - 1 fill it
    full = m.generate(p, 60)
    assert np.array_equal(m.generate(p, 60, assistant_model=d, num_assistant_tokens=8), full)


def test_statistics_count_rounds_drafts_and_acceptances(target):
    p = np.array([[1, 2, 3]])
    run = target.prepare_generation(p, 13, assistant_model=target, num_assistant_tokens=3)
    list(run)
    # a self-draft is always right: rounds of 3 drafted + 1, the last round's 1 token alone
    assert (run.stats.rounds, run.stats.drafted, run.stats.accepted,
            run.stats.emitted) == (4, 9, 9, 13)
    assert run.stats.acceptance_rate == 1.0 and run.stats.tokens_per_forward == 13 / 4
    run = target.prepare_generation(p, 20, assistant_model=first_layers(target, 1))
    toks = list(run)
    s = run.stats
    assert s.emitted == len(toks) == 20 and s.accepted <= s.drafted
    assert s.emitted == s.accepted + s.rounds  # every round adds the target's own token
    assert target.prepare_generation(p, 5).stats is None
    assert "acceptance 0.50 (1/2 drafted)" in SpeculativeStats(2, 2, 1, 3).describe()


def test_lookup_draft_takes_what_followed_the_latest_longest_ngram():
    s = np.array([4, 5, 6, 9, 4, 5, 7, 8, 1, 4, 5])
    assert lookup_draft(s, 3).tolist() == [7, 8, 1]       # latest "4 5"
    assert lookup_draft(s, 10).tolist() == [7, 8, 1, 4, 5]
    assert lookup_draft(np.array([1, 2, 3, 9, 2, 3, 1, 2, 3]), 2).tolist() == [9, 2]  # "1 2 3"
    assert lookup_draft(np.array([1, 2, 3]), 4).tolist() == []
    assert lookup_draft(np.array([3, 3]), 4).tolist() == [3]
    assert lookup_draft(np.array([8]), 4).tolist() == []
    assert lookup_draft(s, 0).tolist() == []


# -- sampling: the target's distribution -----------------------------------------------

TINY = GPTConfig(vocab=5, context=16, width=8, heads=2, layers=1)


def _joint(m, prompt, opts):
    """The exact distribution of the next two tokens (5 x 5), from the NumPy oracle's
    logits through blockc's own processors (temperature, top-k, penalty)."""
    def probs(seq):
        z = gpt_forward(m.state_dict(), m.config, np.array([seq]))[0, -1:].astype(np.float32)
        z = blockc.generation.processed_logits(z, opts, [np.array(seq)])[0]
        e = np.exp(z - z.max())
        return e / e.sum()
    p1 = probs(prompt)
    return np.stack([p1[a] * probs(prompt + [a]) for a in range(5)])


def _chi2(counts, p):
    """Pearson's chi-square and its degrees of freedom, the cells expecting fewer than 5
    counts pooled into one (the statistic's usual condition)."""
    n = counts.sum()
    assert counts[p == 0].sum() == 0  # never a token the target cannot draw
    big = n * p >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(n * p[big], n * p[~big].sum())
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    return float(((obs - exp) ** 2 / exp).sum()), len(exp) - 1


@pytest.mark.parametrize("case", ["draft", "lookup", "top_k_penalty"])
def test_sampled_tokens_have_the_targets_distribution(case):
    m, d = sharp(TINY, 11, scale=40.0), sharp(TINY, 12, scale=40.0)
    prompt = [1, 2, 0, 1, 2] if case == "lookup" else [1, 2]
    kw = dict(temperature=1.0)
    if case == "top_k_penalty":
        kw = dict(temperature=0.8, top_k=3, repetition_penalty=1.4)
    opts = blockc.generation.SamplingOptions(vocab=5, **kw)
    spec = (dict(prompt_lookup_num_tokens=3) if case == "lookup"
            else dict(assistant_model=d, num_assistant_tokens=2))
    n = 1000
    counts = np.zeros((5, 5))
    for s in range(n):
        a, b = m.generate(np.array([prompt]), 2, seed=s, **kw, **spec)[0, -2:]
        counts[a, b] += 1
    p = _joint(m, prompt, opts)
    chi2, df = _chi2(counts, p)
    assert chi2 < df + 6 * np.sqrt(2 * df), (chi2, df)  # about p < 1e-4: fixed seeds
    # the test can fail: taking every draft (the draft model's distribution; lookup's
    # "0 1", what followed the earlier "1 2") fails it
    if case == "lookup":
        q = np.zeros((5, 5))
        q[0, 1] = 1.0
    else:
        q = _joint(d, prompt, opts)
    wrong, _ = _chi2(np.round(n * q) * (p > 0), p)
    assert wrong > 10 * (df + 6 * np.sqrt(2 * df)), wrong


def test_the_acceptance_rule_alone():
    """One drafted token, many trials: accepted with min(1, p/q), else drawn from
    max(0, p - q) normalised; the first token is p-distributed, whatever q."""
    rng = np.random.default_rng(0)
    p_logits = np.log(np.array([[0.5, 0.2, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25]]))
    opts = blockc.generation.SamplingOptions(1.0, vocab=4)
    p = np.exp(p_logits[0])
    q = np.array([0.1, 0.6, 0.1, 0.2])
    counts, accepted, n = np.zeros(4), 0, 6000
    for _ in range(n):
        d = int(rng.choice(4, p=q))
        kept = accept_draft(p_logits, np.array([0]), np.array([d]), q[None], opts, rng)
        counts[kept[0]] += 1
        accepted += len(kept) == 2
    assert np.abs(counts / n - p).max() < 0.025  # 4 standard errors at most
    # accepted with probability sum min(p, q) = 0.1 + 0.2 + 0.1 + 0.1
    assert abs(accepted / n - 0.5) < 0.025
    assert np.abs(q - p).max() > 0.3  # what taking every draft would give: far from p


def test_a_seed_reproduces_a_sampled_answer(target):
    kw = dict(temperature=1.0, top_p=0.9)
    d = first_layers(target, 1)
    a = target.generate(np.array([[1, 2, 3]]), 25, seed=4, assistant_model=d, **kw)
    assert np.array_equal(a, target.generate(np.array([[1, 2, 3]]), 25, seed=4,
                                             assistant_model=d, **kw))
    assert not np.array_equal(a, target.generate(np.array([[1, 2, 3]]), 25, seed=5,
                                                 assistant_model=d, **kw))
    b = target.generate(np.array([[1, 2, 3]]), 25, seed=4, prompt_lookup_num_tokens=4, **kw)
    assert np.array_equal(b, target.generate(np.array([[1, 2, 3]]), 25, seed=4,
                                             prompt_lookup_num_tokens=4, **kw))


# -- what is refused ------------------------------------------------------------------------

def test_refusals(target):
    p = np.array([[1, 2]])
    with pytest.raises(ValueError, match="one prompt"):
        target.generate(np.array([[1, 2], [3, 4]]), 3, assistant_model=target)
    with pytest.raises(ValueError, match="vocabulary"):
        target.generate(p, 3, assistant_model=GPT.random(TINY))
    with pytest.raises(ValueError, match="context"):
        target.generate(p, 40, assistant_model=GPT.random(
            GPTConfig(vocab=48, context=16, width=8, heads=2, layers=1)))
    with pytest.raises(ValueError, match="give one drafter"):
        target.generate(p, 3, assistant_model=target, prompt_lookup_num_tokens=2)
    with pytest.raises(ValueError, match="use_cache"):
        target.generate(p, 3, prompt_lookup_num_tokens=2, use_cache=False)
    with pytest.raises(ValueError, match="num_assistant_tokens"):
        target.generate(p, 3, assistant_model=target, num_assistant_tokens=0)
    with pytest.raises(ValueError, match="prompt_lookup_num_tokens"):
        target.generate(p, 3, prompt_lookup_num_tokens=129)
    with pytest.raises(TypeError, match="prompt_lookup_num_tokens"):
        target.generate(p, 3, prompt_lookup_num_tokens=2.5)
    with pytest.raises(ValueError, match="assistant_model must be a blockc model"):
        target.generate(p, 3, assistant_model="draft.gguf")


# -- the commands -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    pytest.importorskip("tokenizers")
    pytest.importorskip("jinja2")
    from chat_dirs import chat_model_dir
    d = tmp_path_factory.mktemp("spec")
    m, _ = chat_model_dir(d, "chatml", context=64, llama=True, seed=3)
    return d, m


def test_generate_flags(model_dir, capsys):
    d, m = model_dir
    base = ["generate", "--model", str(d), "--ids", "5,6,7,5,6", "-n", "12", "--no-eos",
            "--temperature", "0"]
    assert main(base) == 0
    want = capsys.readouterr().out
    assert want.split() == [str(t) for t in m.generate(np.array([[5, 6, 7, 5, 6]]), 12,
                                                       eos_token_id=())[0, 5:]]
    assert main(base + ["--model-draft", str(d), "--draft-max", "3", "--stats"]) == 0
    r = capsys.readouterr()
    assert r.out == want and "acceptance 1.00 (9/9 drafted), 4.00 tokens per target forward" in r.err
    assert main(base + ["--lookup", "4", "--stats"]) == 0
    r = capsys.readouterr()
    assert r.out == want and "tokens per target forward" in r.err
    assert main(base + ["--draft-max", "3"]) == 2
    assert "--draft-max needs --model-draft" in capsys.readouterr().err
    assert main(base + ["--lookup", "0"]) == 2
    assert "--lookup must be >= 1, got 0" in capsys.readouterr().err


def test_chat_flags(model_dir, capsys, monkeypatch):
    d, m = model_dir
    outs = []
    for flags in ((), ("--model-draft", str(d), "--draft-max", "2"), ("--lookup", "3")):
        monkeypatch.setattr(sys, "stdin", io.StringIO("Hello\nWhat is it?\n"))
        assert main(["chat", "--model", str(d), "--temperature", "0", "-n", "10", *flags]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] and outs[1] == outs[0] and outs[2] == outs[0]


def test_stop_strings_and_thread_counts(model_dir, threads):
    d, m = model_dir
    tok = blockc.Tokenizer.from_pretrained(d)
    ids = tok.encode("the block reads the stream")
    free = m.generate(ids[None], 24, eos_token_id=())[0, len(ids):]
    text = tok.decode(free[:8].tolist())
    stop = text[-3:] if text[-3:].strip() else text[-4:]
    want = m.generate(ids[None], 24, eos_token_id=(), stop=[stop], tokenizer=tok)
    assert want.shape[1] < len(ids) + 24  # the stop string ended it early
    for opts in (dict(prompt_lookup_num_tokens=4), dict(assistant_model=m)):
        got = m.generate(ids[None], 24, eos_token_id=(), stop=[stop], tokenizer=tok, **opts)
        assert np.array_equal(got, want), opts
    got = []
    for n in (1, 2, 3):  # the same tokens at any thread count
        threads(n)
        got.append(m.generate(ids[None], 24, eos_token_id=(), temperature=0.9, seed=2,
                              assistant_model=first_layers(m, 1)))
    assert np.array_equal(got[0], got[1]) and np.array_equal(got[0], got[2])


def test_greedy_matches_transformers_assisted_generation_and_prompt_lookup(tmp_path):
    """transformers' own speculative greedy decoding (assistant_model, prompt lookup) on the
    same weights gives the tokens blockc's gives."""
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    tf.logging.set_verbosity_error()
    m = sharp(GPTConfig(vocab=61, context=64, width=32, heads=4, layers=2), 8, scale=4.0)
    d = first_layers(m, 1)
    m.save_pretrained(tmp_path / "m")
    d.save_pretrained(tmp_path / "d")
    hf = tf.GPT2LMHeadModel.from_pretrained(tmp_path / "m", torch_dtype=torch.float32).eval()
    hd = tf.GPT2LMHeadModel.from_pretrained(tmp_path / "d", torch_dtype=torch.float32).eval()
    prompt = np.array([[3, 14, 15, 9, 26, 3, 14]])
    kw = dict(max_new_tokens=20, do_sample=False, pad_token_id=0,
              attention_mask=torch.ones(prompt.shape, dtype=torch.long))
    with torch.no_grad():
        assisted = hf.generate(torch.as_tensor(prompt), assistant_model=hd, **kw).numpy()
        lookup = hf.generate(torch.as_tensor(prompt), prompt_lookup_num_tokens=4, **kw).numpy()
    ours = m.generate(prompt, 20, assistant_model=d, num_assistant_tokens=4)
    np.testing.assert_array_equal(ours, assisted)
    np.testing.assert_array_equal(m.generate(prompt, 20, prompt_lookup_num_tokens=4), lookup)
    assert len(set(ours[0, 7:].tolist())) > 3  # an answer, not one token repeated
