"""Kernel variants chosen by timing (blockc.runtime.kernel_choices, csrc/runtime/tune.c):
the slower variant is not chosen, the cache is validated, and every choice gives the
same bits."""
import itertools
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import blockc
from blockc import runtime
from blockc._native import lib

HAS_TWO = blockc.best_isa() == "avx512"  # two FMA candidates: avx2 and avx512
two_candidates = pytest.mark.skipif(not HAS_TWO, reason="one FMA instruction set: nothing to choose")


@pytest.fixture
def restore_choices():
    before = blockc.get_isa()
    yield
    for f in range(len(runtime.FAMILIES)):
        for isa in range(len(runtime.ISAS)):
            lib.bc_tune_handicap(f, isa, 0.0)
    runtime.set_isa("auto")
    if HAS_TWO:
        runtime.tune_kernels(save=False)
    runtime.set_isa(before)


def _families():
    """kernel_choices() of the kernel families (its prefetch groups: test_prefetch.py)."""
    c = runtime.kernel_choices()
    return {f: c[f] for f in runtime.FAMILIES}


def test_every_family_reports_a_variant_and_why():
    c = runtime.kernel_choices()
    assert list(c) == list(runtime.FAMILIES + runtime.PREFETCH_GROUPS)
    assert len(runtime.FAMILIES) == lib.BC_NFAMILIES
    c = _families()
    for name, v in c.items():
        assert v["variant"] in runtime.ISAS, name
        assert v["why"] in ("timed", "cached", "forced", "only candidate"), name
        if HAS_TWO and v["why"] in ("timed", "cached"):
            assert set(v["seconds"]) == {"avx2", "avx512"}, name
            assert all(0 < s < 0.1 for s in v["seconds"].values()), name
    assert (runtime.describe_choices().count("\n")
            == len(runtime.FAMILIES) + len(runtime.PREFETCH_GROUPS) - 1)


def test_forcing_an_isa_reports_it_for_every_family(restore_choices):
    runtime.set_isa("generic")
    assert runtime.get_isa() == "generic"
    assert {v["variant"] for v in _families().values()} == {"generic"}
    assert {v["why"] for v in _families().values()} == {"forced"}
    runtime.set_isa("auto")
    assert runtime.get_isa() == "auto"
    assert "forced" not in {v["why"] for v in _families().values()}


@two_candidates
@pytest.mark.parametrize("slow", ["avx512", "avx2"])
@pytest.mark.parametrize("family", ["decode_q8_0", "decode_q8_0i", "decode_bf16i", "decode_q4_ki",
                                    "gemm", "attention"])
def test_a_deliberately_slow_variant_is_not_chosen(restore_choices, family, slow):
    runtime.set_isa("auto")
    f = runtime.FAMILIES.index(family)
    # the handicap is several times the slower probe as measured here (2 ms at least): an
    # instrumented build (ASan) runs the probes themselves past a fixed 2 ms
    plain = runtime.tune_kernels(save=False)[family]["seconds"]
    handicap = min(1.0, max(0.002, 5 * max(plain.values())))
    assert lib.bc_tune_handicap(f, runtime.ISAS.index(slow), handicap) == 0
    c = runtime.tune_kernels(save=False)[family]
    fast = "avx2" if slow == "avx512" else "avx512"
    assert c["variant"] == fast and c["why"] == "timed", c
    assert c["seconds"][slow] >= handicap > c["seconds"][fast]


def test_the_tuning_entry_points_refuse_bad_arguments():
    isa, how = blockc._native.ffi.new("int *"), blockc._native.ffi.new("int *")
    sec = blockc._native.ffi.new("double[3]")
    assert lib.bc_kernel_choice(isa, how, sec, lib.BC_NFAMILIES, 3) == lib.BC_EOPTION
    assert lib.bc_kernel_choice(isa, how, sec, -1, 3) == lib.BC_EOPTION
    assert lib.bc_kernel_choice(isa, how, sec, 0, 2) == lib.BC_ESIZE
    assert lib.bc_kernel_choice(blockc._native.ffi.NULL, how, sec, 0, 3) == lib.BC_ENULL
    assert lib.bc_set_kernel_choice(0, 0) == lib.BC_EOPTION or not HAS_TWO  # generic: never mixed
    assert lib.bc_set_kernel_choice(0, 3) == lib.BC_EOPTION
    assert lib.bc_set_kernel_choice(lib.BC_NFAMILIES, 1) == lib.BC_EOPTION
    for bad in (-0.1, 1.5, float("nan")):
        assert lib.bc_tune_handicap(0, 1, bad) == lib.BC_EOPTION
    assert lib.bc_tune_handicap(0, 3, 0.0) == lib.BC_EOPTION


# ---------------------------------------------------------------- the cache

@pytest.fixture
def cache_file(tmp_path, monkeypatch, restore_choices):
    path = tmp_path / "kernels.json"
    monkeypatch.setenv("BLOCKC_KERNEL_CACHE", str(path))
    runtime.set_isa("auto")
    return path


@two_candidates
def test_the_cache_is_written_whole_and_read_back(cache_file):
    runtime.tune_kernels()
    data = json.loads(cache_file.read_text())
    assert data["format"] == 2 and data["key"] == runtime._cache_key()
    assert set(data["choices"]) == set(runtime.FAMILIES)
    assert not [p for p in os.listdir(cache_file.parent) if p != cache_file.name]  # no temp left
    # a cache that says avx2 everywhere is obeyed, and reported as cached
    data["choices"] = {f: "avx2" for f in runtime.FAMILIES}
    cache_file.write_text(json.dumps(data))
    runtime._load_choices()
    c = _families()
    assert {v["variant"] for v in c.values()} == {"avx2"}
    assert {v["why"] for v in c.values()} == {"cached"}


def _corruptions(good):
    wrong_key = dict(good, key="another CPU")
    wrong_isa = dict(good, choices=dict(good["choices"], gemm="sse9"))
    generic = dict(good, choices=dict(good["choices"], gemm="generic"))  # never a candidate
    missing = dict(good, choices={k: v for k, v in good["choices"].items() if k != "gemm"})
    return {"not json": b"{\"format\": 2, ", "binary": bytes(range(256)) * 4,
            "a list": b"[1, 2, 3]", "wrong key": json.dumps(wrong_key).encode(),
            "wrong isa": json.dumps(wrong_isa).encode(), "generic": json.dumps(generic).encode(),
            "missing family": json.dumps(missing).encode(),
            "old format": json.dumps(dict(good, format=1)).encode(),
            "too large": b" " * 70000 + json.dumps(good).encode()}


@two_candidates
def test_a_corrupt_cache_is_ignored_and_replaced(cache_file):
    runtime.tune_kernels()
    good = json.loads(cache_file.read_text())
    for what, raw in _corruptions(good).items():
        cache_file.write_bytes(raw)
        assert runtime._read_cache(str(cache_file)) is None, what
        runtime._load_choices()  # measures again and rewrites the file
        assert runtime._read_cache(str(cache_file)) is not None, what
        assert {v["why"] for v in _families().values()} == {"timed"}, what


@two_candidates
def test_a_cache_that_is_not_a_regular_file_is_ignored(cache_file):
    cache_file.mkdir()
    assert runtime._read_cache(str(cache_file)) is None
    runtime._load_choices()  # cannot write over a directory: quietly measured only
    assert {v["why"] for v in _families().values()} == {"timed"}


def test_an_empty_setting_turns_the_cache_off(monkeypatch):
    monkeypatch.setenv("BLOCKC_KERNEL_CACHE", "")
    assert runtime.kernel_cache_path() is None
    monkeypatch.delenv("BLOCKC_KERNEL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere/cache")
    assert runtime.kernel_cache_path().startswith("/somewhere/cache/blockc/kernels-")


@two_candidates
def test_a_fresh_process_uses_the_cache(tmp_path):
    path = tmp_path / "k.json"
    env = dict(os.environ, BLOCKC_KERNEL_CACHE=str(path))
    env.pop("BLOCKC_ISA", None)
    env.pop("BLOCKC_PREFETCH", None)
    code = ("import blockc.runtime as r; import json; "
            "print(json.dumps({k: v['why'] for k, v in r.kernel_choices().items()}))")
    whys = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        whys.append(set(json.loads(out.stdout).values()))
    assert whys == [{"timed"}, {"cached"}]


# ---------------------------------------------------------------- bits

def _small_models():
    llama = blockc.GPTConfig(vocab=300, context=128, width=96, heads=3, layers=2, kv_heads=1,
                             d_ff=160, tie_weights=True, norm="rms", activation="swiglu",
                             positions="rope", qkv_bias=False, out_bias=False, mlp_bias=False)
    gpt2 = blockc.GPTConfig.preset("gpt2", layers=1, width=128, heads=4, vocab=300, context=128)
    return [blockc.GPT.random(llama, seed=1), blockc.GPT.random(gpt2, seed=2)]


def _prompt_and_steps(m, ids):
    full = m(ids)
    cache = m.new_cache(ids.shape[0], ids.shape[1])
    first = m(ids[:, :-3], cache=cache)[:, -1:]
    steps = [m(ids[:, t:t + 1], cache=cache) for t in range(ids.shape[1] - 3, ids.shape[1])]
    return full, np.concatenate([first] + steps, axis=1)


@two_candidates
def test_every_mix_of_variants_gives_the_same_bits(restore_choices):
    """GEMM, decoding, attention and elementwise variants in any mix: the logits of a
    prompt, of its KV-cache steps (== the full pass), at 1 and 2 threads, equal
    the all-AVX-512 ones bit for bit, for float32, bfloat16, float16, q8_0, q4_0, q5_0,
    q8_0i and bfloat16i weights (whose prompts and decoding run their own family's
    variant, the float GEMM's on the other instruction set in the last two mixes)."""
    ids = np.random.default_rng(0).integers(0, 300, size=(2, 40))
    rng = np.random.default_rng(5)
    nf = lib.BC_NFAMILIES
    mixes = [[1] * nf, [2] * nf] + [list(rng.integers(1, 3, size=nf)) for _ in range(4)]
    gemm, bf16i = runtime.FAMILIES.index("gemm"), runtime.FAMILIES.index("decode_bf16i")
    q8i = runtime.FAMILIES.index("decode_q8_0i")
    for a, b in ((1, 2), (2, 1)):  # float GEMM on one instruction set, rounded x on the other
        mixes.append([2] * nf)
        mixes[-1][gemm], mixes[-1][bf16i], mixes[-1][q8i] = a, b, b
    for m32 in _small_models():
        for dtype in ("float32", "bfloat16", "float16", "q8_0", "q4_0", "q5_0", "q8_0i",
                      "bfloat16i"):
            m = m32 if dtype == "float32" else m32.astype(dtype)
            runtime.set_isa("avx512")
            blockc.set_num_threads(1)
            ref_full, ref_steps = _prompt_and_steps(m, ids)
            assert np.array_equal(ref_full[:, -4:], ref_steps), dtype  # cached == uncached
            runtime.set_isa("auto")
            try:
                for mix in mixes:
                    for f, isa in enumerate(mix):
                        assert lib.bc_set_kernel_choice(f, int(isa)) == 0
                    for th in (1, 2):
                        blockc.set_num_threads(th)
                        full, steps = _prompt_and_steps(m, ids)
                        assert np.array_equal(full, ref_full), (dtype, mix, th)
                        assert np.array_equal(steps, ref_steps), (dtype, mix, th)
            finally:
                blockc.set_num_threads(0)


@two_candidates
def test_k_quant_integer_prompts_give_the_same_bits_on_either_family_variant(restore_choices):
    """q4_ki and q6_ki prompts (xq_gemm) run decode_q8_0i's variant, the float GEMM's
    apart, and q4_ki's decoding decode_q4_ki's (issue 51): every triple of the three
    families' variants, at 1 and 2 threads, gives the all-AVX-512 logits of a prompt and
    of its KV-cache steps bit for bit (a row rounded by one variant, multiplied by another)."""
    cfg = blockc.GPTConfig(vocab=300, context=64, width=256, heads=2, layers=1, kv_heads=1,
                           d_ff=256, tie_weights=True, norm="rms", activation="swiglu",
                           positions="rope", qkv_bias=False, out_bias=False, mlp_bias=False)
    ids = np.random.default_rng(3).integers(0, 300, size=(2, 24))
    gemm, q8i = runtime.FAMILIES.index("gemm"), runtime.FAMILIES.index("decode_q8_0i")
    q4k = runtime.FAMILIES.index("decode_q4_ki")
    for dtype in ("q4_ki", "q6_ki"):
        m = blockc.GPT.random(cfg, seed=4, dtype=dtype)
        runtime.set_isa("avx512")
        blockc.set_num_threads(1)
        ref_full, ref_steps = _prompt_and_steps(m, ids)
        assert np.array_equal(ref_full[:, -4:], ref_steps), dtype
        runtime.set_isa("auto")
        try:
            for a, b, c in itertools.product((1, 2), repeat=3):
                for f in range(lib.BC_NFAMILIES):
                    assert lib.bc_set_kernel_choice(f, 2) == 0
                assert lib.bc_set_kernel_choice(gemm, a) == 0
                assert lib.bc_set_kernel_choice(q8i, b) == 0
                assert lib.bc_set_kernel_choice(q4k, c) == 0
                for th in (1, 2):
                    blockc.set_num_threads(th)
                    full, steps = _prompt_and_steps(m, ids)
                    assert np.array_equal(full, ref_full), (dtype, a, b, c, th)
                    assert np.array_equal(steps, ref_steps), (dtype, a, b, c, th)
        finally:
            blockc.set_num_threads(0)
