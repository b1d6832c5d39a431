"""blockc.runtime: thread count and instruction-set selection."""
import os
import subprocess
import sys

import pytest

import blockc
from blockc import runtime


def test_set_get_num_threads_roundtrip():
    before = blockc.get_num_threads()
    try:
        blockc.set_num_threads(1)
        assert blockc.get_num_threads() == 1
        blockc.set_num_threads(3)
        # a build without threads runs everything on one thread and says so
        assert blockc.get_num_threads() in (1, 3)
    finally:
        blockc.set_num_threads(0)
    assert blockc.get_num_threads() == before


@pytest.mark.parametrize("bad", [-1, 5000])
def test_set_num_threads_rejects_out_of_range(bad):
    with pytest.raises(ValueError, match="n must be"):
        blockc.set_num_threads(bad)


@pytest.mark.parametrize("bad", [1.5, "2", None, True])
def test_set_num_threads_rejects_non_integers(bad):
    with pytest.raises(TypeError, match="n must be an integer"):
        blockc.set_num_threads(bad)


def test_isa_names_and_order():
    best = blockc.best_isa()
    assert best in runtime.ISAS
    isa = blockc.get_isa()
    assert isa == "auto" or runtime.ISAS.index(isa) <= runtime.ISAS.index(best)


def test_set_isa_switches_and_rejects():
    before = blockc.get_isa()
    try:
        blockc.set_isa("generic")
        assert blockc.get_isa() == "generic"
        with pytest.raises(ValueError, match="name must be one of"):
            blockc.set_isa("sse9")
        if blockc.best_isa() != "avx512":
            with pytest.raises(ValueError, match="supports at most"):
                blockc.set_isa("avx512")
    finally:
        blockc.set_isa(before)
    assert blockc.get_isa() == before


def _child(code, **env):
    e = dict(os.environ)
    e.update(env)
    r = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_environment_forces_isa_and_threads():
    out = _child("import blockc; print(blockc.get_isa(), blockc.get_num_threads())",
                 BLOCKC_ISA="generic", BLOCKC_NUM_THREADS="1")
    assert out == "generic 1"


def test_environment_cannot_ask_for_more_than_the_cpu_has():
    out = _child("import blockc; print(blockc.get_isa())", BLOCKC_ISA="avx512")
    assert out == blockc.best_isa()


def test_bad_environment_values_fall_back_to_defaults():
    out = _child("import blockc; print(blockc.get_isa(), blockc.get_num_threads() >= 1)",
                 BLOCKC_ISA="nonsense", BLOCKC_NUM_THREADS="-4")
    assert out == "auto True"  # each kernel family its measured variant
