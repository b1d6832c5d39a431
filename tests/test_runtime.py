"""blockc.runtime: thread count and instruction-set selection, their bad arguments, and
the process model (issue 9): a forked child, a huge OMP_NUM_THREADS, Ctrl-C."""
import os
import signal
import subprocess
import sys
import time

import pytest

import blockc
from blockc import runtime

from helpers import run_python

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


# ---- bad arguments -----------------------------------------------------------------------

@pytest.mark.parametrize("n, exc, match", [
    (-1, ValueError, r"n must be in \[0, 4096\], got -1"),
    (4097, ValueError, r"n must be in \[0, 4096\]"),
    (2**31, ValueError, r"n must be in \[0, 4096\]"),
    (2.0, TypeError, r"n must be an integer, got float"),
    (True, TypeError, r"n must be an integer, got bool"),
    ("4", TypeError, r"n must be an integer, got str"),
], ids=["neg", "4097", "2^31", "float", "bool", "str"])
def test_bad_thread_count(n, exc, match):
    before = blockc.get_num_threads()
    with pytest.raises(exc, match=match):
        blockc.set_num_threads(n)
    assert blockc.get_num_threads() == before


@pytest.mark.parametrize("name, exc, match", [
    ("sse", ValueError, r"^name must be one of 'generic', 'avx2', 'avx512', 'auto'; got 'sse'$"),
    ("AVX2", ValueError, r"^name must be one of 'generic', 'avx2', 'avx512', 'auto'; got 'AVX2'$"),
    ("", ValueError, r"^name must be one of 'generic', 'avx2', 'avx512', 'auto'; got ''$"),
    (None, TypeError, r"^name must be a str, one of 'generic', 'avx2', 'avx512', 'auto'; got NoneType$"),
    (1, TypeError, r"^name must be a str, one of 'generic', 'avx2', 'avx512', 'auto'; got int$"),
], ids=repr)
def test_bad_isa_name(name, exc, match):
    before = blockc.get_isa()
    with pytest.raises(exc, match=match):
        blockc.set_isa(name)
    assert blockc.get_isa() == before


# ---- the process model (issue 9) ---------------------------------------------------------

@pytest.mark.slow
def test_a_forked_child_runs_blockc():
    # after the parent's kernels have run on the pool's threads, a forked child (which
    # has none of them; under OpenMP it hung forever) runs on one thread and gives
    # the parent's bits (they do not depend on the thread count)
    r = run_python("""
        import os, multiprocessing as mp, numpy as np, blockc
        from blockc import ops
        blockc.set_num_threads(2)
        x = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)
        want = ops.linear(x, x)          # 268 Mflop: a parallel region in the parent
        pid = os.fork()
        if pid == 0:
            ok = np.array_equal(ops.linear(x, x), want) and blockc.get_num_threads() == 1
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0, status
        with mp.get_context("fork").Pool(2) as pool:
            outs = pool.starmap(ops.linear, [(x, x), (x, x)], 1)
        assert all(np.array_equal(o, want) for o in outs)
        print("ok")
    """, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


@pytest.mark.slow
def test_a_huge_omp_num_threads_is_capped_at_the_processors():
    # OMP_NUM_THREADS=1000000 used to be reported and to make libgomp abort the
    # process ("Thread creation failed") at the first parallel region
    env = dict(os.environ, OMP_NUM_THREADS="1000000")
    env.pop("BLOCKC_NUM_THREADS", None)
    r = run_python("""
        import os, numpy as np, blockc
        from blockc import ops
        n = blockc.get_num_threads()
        x = np.ones((256, 256), np.float32)
        assert (ops.linear(x, x) == 256).all()
        print(n, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    """, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    n, procs = map(int, r.stdout.split())
    assert 1 <= n <= procs


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
def test_ctrl_c_stops_a_long_run_with_one_line():
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.Popen([sys.executable, "-m", "blockc", "depth", "--blocks", "100000",
                          "--d-model", "128", "--heads", "4", "--seq-len", "64"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(2.0)
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # pragma: no cover - the failure being tested
        p.kill()
        raise
    assert p.returncode == 130, err
    assert err.strip() == "blockc depth: interrupted", err
