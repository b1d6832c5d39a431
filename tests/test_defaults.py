"""What a run takes from its model by default (issue 53): the sampling of ``blockc chat``,
``blockc generate`` and ``blockc serve`` (the model's generation_config.json or a GGUF
file's general.sampling.* keys, written here by the gguf package, else llama.cpp's; a
flag or request field wins) and the context (the model's, bounded by a memory budget read
from /proc/meminfo; the server's per-request cap follows it)."""
import json
import os

import numpy as np
import pytest

import blockc
from blockc.cli import main
from blockc.generation import GenerationConfig
from blockc.generation.defaults import (LLAMA_CPP_SAMPLING, cache_bytes_per_token, context_size,
                                        default_sampling, describe_sampling, memory_budget)
from blockc.io.gguf import read as read_gguf

STATED = {"do_sample": True, "temperature": 0.6, "top_k": 3}


def test_the_models_options_then_llama_cpps():
    g, where = default_sampling(GenerationConfig(eos_token_id=5))
    assert g.to_dict() == dict(LLAMA_CPP_SAMPLING, eos_token_id=5)
    assert where == "llama.cpp's defaults (the model states none)"
    g, where = default_sampling(GenerationConfig.from_dict(STATED), "some/dir")
    assert (g.temperature, g.top_k, g.top_p, g.min_p, g.repetition_penalty) == (
        0.6, 3, 0.95, 0.05, 1.0)
    assert where == ("generation_config.json (temperature, top_k), llama.cpp's defaults "
                     "(top_p, min_p, repetition_penalty)")
    # do_sample false: the file states no sampling (transformers would be greedy)
    g, _ = default_sampling(GenerationConfig.from_dict({"do_sample": False, "temperature": 0.1}))
    assert g.temperature == 0.8
    assert describe_sampling(g) == ("temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, "
                                    "repetition_penalty 1")
    assert describe_sampling(g.replace(temperature=0.0)) == "greedy"


def test_a_gguf_files_general_sampling_keys(tmp_path):
    gguf = pytest.importorskip("gguf")
    path = str(tmp_path / "s.gguf")
    w = gguf.GGUFWriter(path, "llama")  # the keys as llama.cpp's converter writes them
    w.add_sampling_temp(0.7)
    w.add_sampling_top_p(0.8)
    w.add_sampling_top_k(0)  # llama.cpp's "no top-k"
    w.add_sampling_penalty_repeat(1.1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    md = read_gguf(path).metadata
    g = GenerationConfig.from_gguf(md)
    assert g.temperature == pytest.approx(0.7) and g.top_p == pytest.approx(0.8)
    assert g.top_k is None and g.repetition_penalty == pytest.approx(1.1)
    g, where = default_sampling(g, path)
    assert g.top_k == 40 and g.min_p == 0.05  # not stated: llama.cpp's
    assert where.startswith("the GGUF file's general.sampling keys (temperature, top_p, "
                            "repetition_penalty), llama.cpp's defaults (top_k, min_p)")
    # a value blockc cannot sample with is not the file's
    assert GenerationConfig.from_gguf({"general.sampling.top_p": 2.0}).top_p is None


def _meminfo_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024


@pytest.mark.skipif(not os.path.exists("/proc/meminfo"), reason="no /proc/meminfo")
def test_the_default_context_is_bounded_by_a_quarter_of_the_available_memory():
    cfg = blockc.GPTConfig(vocab=16, context=1 << 22, width=64, heads=4, layers=8)
    per = 2 * 8 * 4 * 16 * 4
    assert cache_bytes_per_token(cfg) == per
    avail = _meminfo_available()
    assert abs(memory_budget() - avail // 4) < 256 << 20  # the machine's memory moves a little
    n = context_size(cfg)
    assert n < cfg.context and abs(n - avail // 4 // per) <= (256 << 20) // per
    assert context_size(cfg, budget=per * 100, rows=4) == 25
    small = blockc.GPTConfig(vocab=16, context=64, width=8, heads=2, layers=1)
    assert context_size(small) == 64


@pytest.fixture(scope="module")
def stated_dir(tmp_path_factory):
    pytest.importorskip("tokenizers")
    pytest.importorskip("jinja2")
    from chat_dirs import chat_model_dir
    d = tmp_path_factory.mktemp("stated")
    chat_model_dir(d, "chatml", context=128, seed=5, llama=True)
    cfg = json.loads((d / "config.json").read_text())
    (d / "generation_config.json").write_text(json.dumps(dict(STATED,
                                                              eos_token_id=cfg["eos_token_id"])))
    return d, blockc.GPT.from_pretrained(d), blockc.Tokenizer.from_pretrained(d)


def test_generate_samples_with_the_models_defaults_and_a_flag_wins(stated_dir, capsys):
    d, m, tok = stated_dir
    prompt = [5, 6, 7]
    base = dict(LLAMA_CPP_SAMPLING, temperature=0.6, top_k=3)

    def run(*flags):
        assert main(["generate", "--model", str(d), "--ids", "5,6,7", "-n", "12", "--no-eos",
                     "--stats", *flags]) == 0
        r = capsys.readouterr()
        return [int(x) for x in r.out.split()], r.err

    got, err = run("--seed", "4")
    want = m.generate(np.array([prompt]), 12, eos_token_id=(), seed=4, **base)[0, 3:]
    assert got == want.tolist()
    assert ("sampling: temperature 0.6, top_k 3, top_p 0.95, min_p 0.05, repetition_penalty 1 "
            "(from generation_config.json (temperature, top_k), llama.cpp's defaults") in err
    assert "context 128 tokens (the model's; KV cache" in err
    got, err = run("--seed", "4", "--top-k", "9", "--min-p", "0")
    want = m.generate(np.array([prompt]), 12, eos_token_id=(), seed=4,
                      **dict(base, top_k=9, min_p=0.0))[0, 3:]
    assert got == want.tolist() and "flags: --top-k, --min-p" in err
    got, _ = run("--temperature", "0")
    assert got == m.generate(np.array([prompt]), 12, eos_token_id=(), temperature=0.0)[0, 3:].tolist()


def test_serve_fills_omitted_fields_with_the_models_defaults(stated_dir):
    pytest.importorskip("httpx")
    pytest.importorskip("uvicorn")
    pytest.importorskip("starlette")
    from serve_thread import ThreadServer
    from blockc.serve import Settings
    d, m, tok = stated_dir
    s = ThreadServer(Settings(model=str(d), model_name="m", parallel=2, max_queue=8), m, tok)
    try:
        svc = s.service
        # the per-request cap follows the default context (the model's 128 here, not 2048's cap)
        assert svc.capacity == context_size(m.config, rows=2) == 128
        assert svc.summary().startswith("context 128 tokens (the model's; KV cache")
        assert ("sampling by default: temperature 0.6, top_k 3, top_p 0.95, min_p 0.05, "
                "repetition_penalty 1 (from generation_config.json") in svc.summary()
        ids = [int(t) for t in tok.encode("the block")]
        ends = set(svc.end_ids)

        def want(**opts):
            out = m.generate(np.array([ids]), 10, eos_token_id=(), **opts)[0, len(ids):]
            return tok.decode([int(t) for t in out if t not in ends], skip_special_tokens=True)

        def text(**fields):
            r = s.post("/v1/completions", {"model": "m", "prompt": ids, "max_tokens": 10,
                                           "ignore_eos": True, **fields})
            assert r.status_code == 200, r.text
            return r.json()["choices"][0]["text"]

        base = dict(LLAMA_CPP_SAMPLING, temperature=0.6, top_k=3)
        assert text(seed=2) == want(seed=2, **base)  # omitted: the model's
        assert text(seed=2, top_k=7, temperature=1.0) == want(seed=2, **dict(base, top_k=7,
                                                                            temperature=1.0))
        assert text(temperature=0) == want(temperature=0.0)  # a field given wins: greedy
    finally:
        s.stop()
