"""GenerationConfig (issue 18): one home for the generation options, read from a
checkpoint's config.json and generation_config.json, used by generate, stream and
``blockc generate``; the incremental stop-string check."""
import json

import numpy as np
import pytest

import blockc
from blockc import GPT, GPTConfig, GenerationConfig
from blockc.cli import main
from blockc.generation import StopStrings

CFG = GPTConfig(vocab=64, context=48, width=16, heads=2, layers=2)


def model(seed=0):
    return GPT.random(CFG, seed=seed)


def test_options_are_checked_once_and_named():
    g = GenerationConfig(temperature=1, top_k=3, eos_token_id=[5, 7], stop=["ab"])
    assert (g.temperature, g.top_k, g.eos_token_id, g.stop) == (1.0, 3, (5, 7), ("ab",))
    assert g.eos_ids == (5, 7) and GenerationConfig(eos_token_id=4).eos_ids == (4,)
    assert GenerationConfig().eos_ids == ()
    for kw, exc, match in [(dict(top_p=0.0), ValueError, "top_p"), (dict(top_p="1"), TypeError, "top_p"),
                           (dict(min_p=2.0), ValueError, "min_p"),
                           (dict(repetition_penalty=0), ValueError, "repetition_penalty"),
                           (dict(temperature=-1), ValueError, "temperature"),
                           (dict(top_k=0), ValueError, "top_k"), (dict(seed=-1), ValueError, "seed"),
                           (dict(use_cache=1), TypeError, "use_cache"),
                           (dict(eos_token_id=[1, -1]), ValueError, "eos_token_id"),
                           (dict(eos_token_id=1.0), TypeError, "eos_token_id"),
                           (dict(pad_token_id=-2), ValueError, "pad_token_id"),
                           (dict(stop="ab"), TypeError, "stop"), (dict(stop=[""]), TypeError, "stop")]:
        with pytest.raises(exc, match=match):
            GenerationConfig(**kw)
    with pytest.raises(TypeError, match="no option 'topk'"):
        g.replace(topk=3)
    with pytest.raises(ValueError, match="top_p"):
        g.replace(top_p=3.0)  # replace checks as construction does


def test_resolve_checks_ids_against_the_vocabulary_and_picks_the_pad():
    assert GenerationConfig(eos_token_id=(9, 4)).resolve(16).pad == 9
    assert GenerationConfig(eos_token_id=(9, 4), pad_token_id=2).resolve(16).pad == 2
    assert GenerationConfig().resolve(16).pad == 0
    assert GenerationConfig(top_k=100).resolve(16).top_k == 16
    with pytest.raises(ValueError, match="eos_token_id"):
        GenerationConfig(eos_token_id=16).resolve(16)
    with pytest.raises(ValueError, match="pad_token_id"):
        GenerationConfig(pad_token_id=16).resolve(16)


def test_from_pretrained_reads_config_then_generation_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(
        {"eos_token_id": 3, "bos_token_id": 1, "pad_token_id": "x"}))
    g = GenerationConfig.from_pretrained(tmp_path)
    assert (g.eos_token_id, g.bos_token_id, g.pad_token_id, g.temperature) == (3, 1, None, 0.0)
    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": [3, 9], "pad_token_id": 0, "temperature": 0.6, "top_p": 0.9}))
    g = GenerationConfig.from_pretrained(tmp_path)
    # generation_config.json wins; without do_sample its sampling fields mean nothing (greedy)
    assert (g.eos_token_id, g.bos_token_id, g.pad_token_id, g.temperature, g.top_p) == (
        (3, 9), 1, 0, 0.0, None)
    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"do_sample": True, "temperature": 0.6, "top_p": 0.9, "top_k": 20}))
    g = GenerationConfig.from_pretrained(tmp_path)
    assert (g.eos_token_id, g.temperature, g.top_p, g.top_k) == (3, 0.6, 0.9, 20)
    assert GenerationConfig.from_dict({"do_sample": True}).temperature == 1.0
    (tmp_path / "generation_config.json").write_text(json.dumps({"do_sample": True, "top_p": 7}))
    with pytest.raises(ValueError, match="top_p"):
        GenerationConfig.from_pretrained(tmp_path)
    assert GenerationConfig(top_k=4, eos_token_id=(1, 2)).to_dict() == {"top_k": 4,
                                                                       "eos_token_id": [1, 2]}


def test_a_loaded_model_carries_its_generation_config_and_calls_override_it(tmp_path):
    m = model(1)
    prompt = np.array([[1, 2, 3]])
    free = m.generate(prompt, 12)[0, 3:]
    assert m.generation_config == GenerationConfig()
    eos = int(free[4])
    m.save_pretrained(tmp_path)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [eos],
                                                                 "pad_token_id": 0}))
    m2 = GPT.from_pretrained(tmp_path)
    assert m2.generation_config.eos_token_id == (eos,)
    first = list(free).index(eos)
    got = m2.generate(prompt, 12)[0, 3:]
    np.testing.assert_array_equal(got, free[:first + 1])       # stops at the checkpoint's end id
    assert list(m2.stream(prompt[0], 12)) == list(free[:first + 1])
    np.testing.assert_array_equal(m2.generate(prompt, 12, eos_token_id=()), m.generate(prompt, 12))
    other = int(free[1])
    np.testing.assert_array_equal(m2.generate(prompt, 12, eos_token_id=other)[0, 3:],
                                  free[:list(free).index(other) + 1])
    # a config passed in is the base instead of the model's
    np.testing.assert_array_equal(m2.generate(prompt, 12, generation_config=GenerationConfig()),
                                  m.generate(prompt, 12))
    # the config goes with the model through astype, and the file's ids are not config.json's
    assert m2.astype("bfloat16").generation_config == m2.generation_config
    m2.generation_config = m2.generation_config.replace(temperature=1.0, seed=3)
    np.testing.assert_array_equal(m2.generate(prompt, 6, eos_token_id=()),
                                  m.generate(prompt, 6, temperature=1.0, seed=3))
    with pytest.raises(TypeError, match="generation_config"):
        m2.generation_config = {"temperature": 1.0}
    with pytest.raises(TypeError, match="generation_config"):
        m.generate(prompt, 2, generation_config={"top_k": 1})


def test_blockc_generate_stops_at_the_generation_config_end_id(tmp_path, capsys):
    m = model(2)
    prompt = [4, 5, 6]
    free = m.generate(np.array([prompt]), 10)[0, 3:]
    m.save_pretrained(tmp_path)
    eos = int(free[3])
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}))
    assert main(["generate", "--temperature", "0", "--model", str(tmp_path), "--ids", "4,5,6",
                 "--max-new-tokens", "10"]) == 0
    want = [int(t) for t in free[:list(free).index(eos) + 1]]
    assert capsys.readouterr().out.split() == [str(t) for t in want]
    assert main(["generate", "--temperature", "0", "--model", str(tmp_path), "--ids", "4,5,6",
                 "--max-new-tokens", "10", "--no-eos"]) == 0
    assert capsys.readouterr().out.split() == [str(int(t)) for t in free]


class ByteTokens:
    """A tokenizer of bytes: decode counts the tokens it is given."""

    def __init__(self):
        self.decoded = 0

    def decode(self, ids):
        self.decoded += len(ids)
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")


def _first_stop_by_whole_decoding(ids, stops):
    tok = ByteTokens()
    for k in range(1, len(ids) + 1):
        if any(x in tok.decode(ids[:k]) for x in stops):
            return k
    return None


def _first_stop_incrementally(ids, stops, tok=None):
    s = StopStrings(tok or ByteTokens(), stops)
    for k, t in enumerate(ids, 1):
        if s.push(t):
            return k
    return None


def test_incremental_stop_strings_stop_where_whole_decoding_does():
    rng = np.random.default_rng(0)
    pieces = ["a", "b", "ab", " ", "é", "日", "🙂", "\n"]
    for trial in range(300):
        text = "".join(rng.choice(pieces, size=int(rng.integers(1, 40))))
        ids = list(text.encode("utf-8"))
        if trial % 3 == 0:  # a cut character in the middle of the stream
            ids.insert(int(rng.integers(0, len(ids))), 0xE6)
        whole = bytes(ids).decode("utf-8", errors="replace")
        a = int(rng.integers(0, len(whole)))
        stops = [whole[a:a + int(rng.integers(1, 4))], "zz"]
        if "\ufffd" in stops[0]:  # a cut character is text only once it is whole
            continue
        assert _first_stop_incrementally(ids, stops) == _first_stop_by_whole_decoding(ids, stops), \
            (ids, stops)


def test_stop_strings_decode_a_short_window_per_token():
    ids = list(("the residual stream é 日本 " * 200).encode("utf-8"))
    tok = ByteTokens()
    assert _first_stop_incrementally(ids, ["never"], tok) is None
    assert tok.decoded <= 8 * len(ids)  # whole decoding would be about len(ids)**2 / 2


def test_generate_stop_strings_match_the_whole_decoding_rule(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    # an alphabet of the training text's characters only: every id sequence decodes whole
    # (the cut characters are test_incremental_stop_strings_stop_where_whole_decoding_does's)
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=80)
    tok.train_from_iterator(["the block and the stream, the residual, a sum"] * 5, trainer)
    tok.save(str(tmp_path / "tokenizer.json"))
    btok = blockc.Tokenizer.from_pretrained(tmp_path)
    m = GPT.random(GPTConfig(vocab=btok.vocab_size, context=48, width=16, heads=2, layers=2), seed=4)
    prompt = np.array([[1, 2, 3]])
    free = m.generate(prompt, 30)[0, 3:]
    text = btok.decode(free)
    assert "\ufffd" not in text and len(text) > 20
    for a in range(0, len(text) - 2, 3):
        stop = text[a:a + 2]
        got = m.generate(prompt, 30, stop=[stop], tokenizer=btok)[0, 3:]
        k = next(k for k in range(1, len(free) + 1) if stop in btok.decode(free[:k]))
        np.testing.assert_array_equal(got, free[:k])


def test_save_pretrained_writes_the_generation_config_transformers_reads(tmp_path):
    """save_pretrained writes generation_config.json: transformers' GenerationConfig reads
    the same ids and sampling options from it, and blockc loads the model's config back."""
    m = model()
    m.generation_config = GenerationConfig(temperature=0.7, top_k=12, top_p=0.9,
                                           repetition_penalty=1.1, eos_token_id=(5, 7),
                                           pad_token_id=1, seed=4)
    m.save_pretrained(tmp_path)
    m2 = GPT.from_pretrained(tmp_path)
    assert m2.generation_config == m.generation_config.replace(seed=None)  # seed: per call
    greedy = model()
    greedy.generation_config = GenerationConfig(eos_token_id=3)
    greedy.save_pretrained(tmp_path / "greedy")
    assert GPT.from_pretrained(tmp_path / "greedy").generation_config == GenerationConfig(eos_token_id=3)
    transformers = pytest.importorskip("transformers")
    g = transformers.GenerationConfig.from_pretrained(str(tmp_path))
    assert (g.do_sample, g.temperature, g.top_k, g.top_p, g.repetition_penalty) == (True, 0.7, 12, 0.9, 1.1)
    assert (g.eos_token_id, g.pad_token_id) == ([5, 7], 1)
    assert transformers.GenerationConfig.from_pretrained(str(tmp_path / "greedy")).do_sample is False


# ---- one spelling (issue 48): the flags and the request fields are the options ----------

def test_resolve_runs_once_per_generation(monkeypatch):
    from blockc.serve.sampling import sampling_from_request
    from blockc.serve.types import parse_chat
    calls = []
    resolve = GenerationConfig.resolve

    def counted(self, vocab):
        calls.append(vocab)
        return resolve(self, vocab)
    monkeypatch.setattr(GenerationConfig, "resolve", counted)
    m = model(1)
    m.generate(np.array([[1, 2], [3, 4]]), 5, temperature=1.0, top_k=3, top_p=0.9, seed=2,
               repetition_penalty=1.2)
    assert calls == [CFG.vocab]
    list(m.stream([1, 2], 4, temperature=0.5, min_p=0.1, seed=1))
    assert calls == [CFG.vocab] * 2
    req = parse_chat({"model": "x", "messages": [{"role": "user", "content": "hi"}],
                      "temperature": 0.7, "top_k": 5, "n": 3}, ["x"])
    s = sampling_from_request(req, CFG.vocab)
    assert calls == [CFG.vocab] * 3
    assert (s.options.temperature, s.options.top_k, s.config.top_p) == (0.7, 5, None)
    # the fields a request omits are the model's defaults (llama-server's rule)
    s = sampling_from_request(req, CFG.vocab, GenerationConfig(top_p=0.5, top_k=9))
    assert (s.options.temperature, s.options.top_k, s.config.top_p) == (0.7, 5, 0.5)


def test_the_commands_flags_are_the_options_declarations(capsys):
    from blockc.cli import build_parser
    from blockc.generation.config import options
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices
    cli = {n: o for n, (o, _) in options().items() if o.cli}
    assert set(cli) == {"temperature", "top_k", "top_p", "min_p", "repetition_penalty", "seed",
                        "cache_dtype"}
    for command in ("generate", "chat"):
        acts = {a.dest: a for a in sub[command]._actions}
        for name, o in cli.items():
            a = acts[name]
            assert a.option_strings == ["--" + name.replace("_", "-")]
            assert a.default is None  # not given: the model's (default_sampling)
            assert a.help.startswith(o.help) and o.span() in a.help
    assert sub["generate"]._option_string_actions["--top-k"].type is int
    assert sub["serve"]._option_string_actions["--cache-dtype"].choices == ("float32", "float16",
                                                                             "q8_0", "q4_0")
    # checked as the option is, before any file is read (the model does not exist)
    for flag, bad, words in [("--top-p", "2", "--top-p must be in (0, 1], got 2.0"),
                             ("--min-p", "1.5", "--min-p must be in [0, 1]"),
                             ("--repetition-penalty", "0", "--repetition-penalty must be > 0"),
                             ("--temperature", "-1", "--temperature must be finite and >= 0")]:
        assert main(["generate", "--temperature", "0", "--model", "no-such-dir", "--ids", "1", flag, bad]) == 2
        assert words in capsys.readouterr().err


def test_the_servers_fields_are_the_options_absent_ones_none():
    from blockc.serve.types import APIError, parse_completion
    body = {"model": "x", "prompt": "hi"}
    req = parse_completion(body, ["x"])  # absent: None, the model's default (sampling.py)
    assert req.generation == {"temperature": None, "top_k": None, "top_p": None, "min_p": None,
                              "repetition_penalty": None, "seed": None}
    assert req.temperature is None and req.seed is None  # read through
    assert parse_completion({**body, "top_p": 0}, ["x"]).generation["top_p"] == 1e-12
    assert parse_completion({**body, "seed": 3, "min_p": 0.5}, ["x"]).generation["min_p"] == 0.5
    for field, bad, status in [("temperature", 2.5, 400), ("temperature", -0.5, 400),
                               ("temperature", "hot", 422), ("top_p", 1.5, 400),
                               ("top_p", -1, 400), ("top_k", 0, 400), ("top_k", 1.5, 422),
                               ("min_p", 1.5, 400), ("repetition_penalty", 0, 400),
                               ("seed", -1, 400), ("seed", 2 ** 63, 400)]:
        with pytest.raises(APIError) as e:
            parse_completion({**body, field: bad}, ["x"])
        assert (e.value.status, e.value.param) == (status, field), (field, bad)
        assert f"'{field}'" in e.value.message


def test_temperature_is_declared_once():
    """`grep -rn 'temperature:' blockc` finds GenerationConfig's field and generate's keyword."""
    import os
    import re
    root = os.path.dirname(blockc.__file__)
    found = []
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                text = open(os.path.join(d, f), encoding="utf-8").read()
                found += [os.path.relpath(os.path.join(d, f), root)
                          for _ in re.finditer(r"temperature:", text)]
    assert sorted(found) == [os.path.join("generation", "config.py"),
                             os.path.join("generation", "loop.py")]


def test_a_logit_bias_of_nan_is_refused_naming_the_field():
    from blockc.serve.types import APIError, parse_completion
    import json as _json
    body = _json.loads('{"model": "x", "prompt": "hi", "logit_bias": {"5": NaN}}')
    with pytest.raises(APIError) as e:
        parse_completion(body, ["x"])
    assert (e.value.status, e.value.param) == (400, "logit_bias")
