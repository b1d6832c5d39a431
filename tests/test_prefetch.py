"""Integer decoding's software prefetch (blockc.runtime.set_prefetch, kernel_choices;
csrc/runtime/prefetch.c, issue 51): every mode gives the oracle's bits for every integer
format; forcing is reported as forced, for every group; a bad mode is refused naming the
argument; a cached choice is installed; a deliberately slow mode is not chosen."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import bits, rnd

import blockc
from blockc import ops, runtime
from blockc._errors import BlockcValueError
from blockc._native import ffi, lib
from blockc.reference import intdot

#: each integer format and its oracle product
ORACLE = {"q8_0i": intdot.linear_q8_0i, "q4_0i": intdot.linear_q4_0i,
          "q5_0i": intdot.linear_q5_0i, "q4_ki": intdot.linear_q4_ki,
          "q6_ki": intdot.linear_q6_ki, "q5_ki": intdot.linear_q5_ki,
          "iq4_nli": intdot.linear_iq4_nli, "iq4_xsi": intdot.linear_iq4_xsi,
          "q4_1i": intdot.linear_q4_1i, "q5_1i": intdot.linear_q5_1i,
          "q2_ki": intdot.linear_q2_ki, "q3_ki": intdot.linear_q3_ki}
FORWARD = ("q4_ki", "q5_ki", "q6_ki", "iq4_xsi")  # the group whose compiled default is off
FMA_ISAS = [i for i in ("avx2", "avx512")
            if runtime.ISAS.index(i) <= runtime.ISAS.index(blockc.best_isa())]


@pytest.fixture
def restore_prefetch():
    """The mode before the test, every group measured again after (no handicap)."""
    before = runtime.get_prefetch()
    yield
    for g in range(len(runtime.PREFETCH_GROUPS)):
        for on in (0, 1):
            assert lib.bc_prefetch_handicap(g, on, 0.0) == 0
    runtime.set_prefetch("auto")
    assert lib.bc_tune_prefetch() == 0
    runtime.set_prefetch(before)


def test_the_groups_cover_every_integer_format():
    assert len(runtime.PREFETCH_GROUPS) == lib.BC_NPF_GROUPS
    assert runtime.PREFETCH_MODES.index("auto") == lib.BC_PREFETCH_AUTO
    assert runtime.PREFETCH_MODES.index("off") == lib.BC_PREFETCH_OFF
    assert set(FORWARD) < set(ORACLE)


@pytest.mark.parametrize("fmt", list(ORACLE))
def test_every_mode_gives_the_oracles_bits(restore_prefetch, fmt):
    """Decoding (1-3 rows: the products that prefetch) and a prompt's rows, every mode,
    every instruction set, 1 and 2 threads: the oracle's bits. 13 panels of 16 outputs:
    three runs of 4 and a short one; 512 inputs: two super-blocks."""
    c, oc = 512, 200
    w, b = rnd(oc, c, seed=2) * np.float32(0.1), rnd(oc, seed=3)
    x = rnd(5, c, seed=4)
    p = ops.pack(w, fmt)
    want = ORACLE[fmt](x, w, b)
    before = blockc.get_isa()
    try:
        for isa in ["generic"] + FMA_ISAS:
            blockc.set_isa(isa)
            for mode in ("on", "off", "default", "auto"):
                runtime.set_prefetch(mode)
                for th in (1, 2):
                    blockc.set_num_threads(th)
                    for n in (1, 2, 3, 5):
                        got = ops.linear(x[:n], p, b)
                        np.testing.assert_array_equal(bits(got), bits(want[:n]),
                                                      err_msg=f"{isa} {mode} {th} {n}")
    finally:
        blockc.set_isa(before)
        blockc.set_num_threads(0)


def _prefetch_choices():
    c = runtime.kernel_choices()
    return {g: c[g] for g in runtime.PREFETCH_GROUPS}


def test_a_forced_mode_is_reported_for_every_group(restore_prefetch):
    want = {"on": ("on", "on"), "off": ("off", "off"), "default": ("off", "on")}
    for mode, variants in want.items():
        runtime.set_prefetch(mode)
        assert runtime.get_prefetch() == mode
        c = _prefetch_choices()
        assert tuple(c[g]["variant"] for g in runtime.PREFETCH_GROUPS) == variants, mode
        assert {v["why"] for v in c.values()} == {"forced"}, mode
    runtime.set_prefetch("auto")
    assert runtime.get_prefetch() == "auto"
    for name, v in _prefetch_choices().items():
        assert v["variant"] in ("on", "off"), name
        assert v["why"] in ("timed", "cached", "default"), name
        if v["why"] == "timed":
            assert set(v["seconds"]) == {"on", "off"}, name
            assert all(0 < s < 1 for s in v["seconds"].values()), name
    lines = runtime.describe_choices().splitlines()
    assert [ln.split()[0] for ln in lines] == list(runtime.FAMILIES + runtime.PREFETCH_GROUPS)


def test_a_given_choice_is_run_and_reported_as_cached(restore_prefetch):
    runtime.set_prefetch("auto")
    for g, name in enumerate(runtime.PREFETCH_GROUPS):
        for on in (1, 0):
            assert lib.bc_set_prefetch_choice(g, on) == 0
            v = _prefetch_choices()[name]
            assert (v["variant"], v["why"]) == (("off", "on")[on], "cached")


def test_bad_modes_and_arguments_are_refused():
    before = runtime.get_prefetch()
    with pytest.raises(ValueError, match="mode"):
        runtime.set_prefetch("sometimes")
    with pytest.raises(BlockcValueError, match="mode"):
        runtime.set_prefetch("ON")
    with pytest.raises(TypeError, match="mode"):
        runtime.set_prefetch(2)
    assert runtime.get_prefetch() == before  # a refused setting changes nothing
    on, how, sec = ffi.new("int *"), ffi.new("int *"), ffi.new("double[2]")
    for bad in (-1, 4, 99):
        assert lib.bc_set_prefetch(bad) == lib.BC_EOPTION
    assert lib.bc_get_prefetch(ffi.NULL) == lib.BC_ENULL
    assert lib.bc_prefetch_choice(ffi.NULL, how, sec, 0, 2) == lib.BC_ENULL
    assert lib.bc_prefetch_choice(on, how, sec, lib.BC_NPF_GROUPS, 2) == lib.BC_EOPTION
    assert lib.bc_prefetch_choice(on, how, sec, -1, 2) == lib.BC_EOPTION
    assert lib.bc_prefetch_choice(on, how, sec, 0, 1) == lib.BC_ESIZE
    assert lib.bc_set_prefetch_choice(0, 2) == lib.BC_EOPTION
    assert lib.bc_set_prefetch_choice(lib.BC_NPF_GROUPS, 1) == lib.BC_EOPTION
    for bad in (-0.1, 1.5, float("nan")):
        assert lib.bc_prefetch_handicap(0, 1, bad) == lib.BC_EOPTION
    assert lib.bc_prefetch_handicap(0, 2, 0.0) == lib.BC_EOPTION
    assert lib.bc_prefetch_handicap(2, 0, 0.0) == lib.BC_EOPTION


@pytest.mark.skipif(not FMA_ISAS, reason="no FMA kernels: nothing to time")
@pytest.mark.parametrize("group", runtime.PREFETCH_GROUPS)
def test_a_deliberately_slow_mode_is_not_chosen(restore_prefetch, group):
    runtime.set_prefetch("auto")
    g = runtime.PREFETCH_GROUPS.index(group)
    assert lib.bc_tune_prefetch() == 0
    plain = _prefetch_choices()[group]["seconds"]
    handicap = min(1.0, max(0.002, 5 * max(plain.values())))
    for slow in ("on", "off"):
        assert lib.bc_prefetch_handicap(g, ("off", "on").index(slow), handicap) == 0
        assert lib.bc_tune_prefetch() == 0
        c = _prefetch_choices()[group]
        fast = "off" if slow == "on" else "on"
        assert (c["variant"], c["why"]) == (fast, "timed"), c
        assert c["seconds"][slow] >= handicap > c["seconds"][fast]
        assert lib.bc_prefetch_handicap(g, ("off", "on").index(slow), 0.0) == 0


def test_the_environment_forces_a_mode_in_a_fresh_process(tmp_path):
    code = ("import blockc.runtime as r, json; c = r.kernel_choices(); "
            "print(json.dumps([r.get_prefetch()] + [[c[g]['variant'], c[g]['why']] "
            "for g in r.PREFETCH_GROUPS]))")
    env = dict(os.environ, BLOCKC_PREFETCH="on", BLOCKC_KERNEL_CACHE=str(tmp_path / "k.json"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["on", ["on", "forced"], ["on", "forced"]]


@pytest.mark.skipif(not FMA_ISAS, reason="no FMA kernels: nothing to time or cache")
def test_the_cache_keeps_the_prefetch_choice(tmp_path, monkeypatch, restore_prefetch):
    path = tmp_path / "kernels.json"
    monkeypatch.setenv("BLOCKC_KERNEL_CACHE", str(path))
    isa_before = blockc.get_isa()
    runtime.set_prefetch("auto")
    try:
        runtime.tune_kernels()
        data = json.loads(path.read_text())
        assert data["format"] == 2 and set(data["prefetch"]) == set(runtime.PREFETCH_GROUPS)
        assert set(data["prefetch_seconds"][runtime.PREFETCH_GROUPS[0]]) == {"on", "off"}
        # a cache that says the opposite of the defaults is obeyed, and reported as cached
        data["prefetch"] = {"prefetch_forward": "on", "prefetch_blocks": "off"}
        path.write_text(json.dumps(data))
        runtime._load_choices()
        c = _prefetch_choices()
        assert [(c[g]["variant"], c[g]["why"]) for g in runtime.PREFETCH_GROUPS] == \
            [("on", "cached"), ("off", "cached")]
        # a mode that is neither: the file is ignored
        data["prefetch"]["prefetch_blocks"] = "sometimes"
        path.write_text(json.dumps(data))
        assert runtime._read_cache(str(path)) is None
    finally:
        runtime.set_isa("auto")
        if blockc.best_isa() == "avx512":
            runtime.tune_kernels(save=False)
        runtime.set_isa(isa_before)
