"""Hard to break, round two (issue 9): what changes under a call, the process
model, the edges of the Python layer, RMSNorm's range and the command line.

Each class of failure has a test here that failed before its fix. The ones
that race threads or fork run in a subprocess with a timeout: a hang or a
crash fails the test instead of the suite.
"""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import blockc
from blockc import ops
from blockc.cli import main
from blockc.reference import block as ref

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = blockc.GPTConfig(vocab=64, context=16, width=16, heads=2, layers=2)


def run_python(code, timeout=120, env=None):
    """Run ``code`` in a fresh interpreter (this blockc, this environment)."""
    e = dict(os.environ if env is None else env)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, e.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e,
                          capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------- check-then-use

@pytest.mark.slow
def test_ids_changed_during_calls_are_never_used_unchecked():
    # one thread flips a shared ids array between a valid id and one far outside the
    # table while another runs the model on it: every call must either refuse (the
    # bad id was seen) or give the logits of the ids it checked; before the fix a
    # flip between the check and the embedding read outside the parameter buffer
    r = run_python("""
        import threading, numpy as np, blockc
        cfg = blockc.GPTConfig(vocab=64, context=16, width=16, heads=2, layers=2)
        m = blockc.GPT.random(cfg, seed=0)
        ids = np.zeros((1, 8), np.int64)
        good = m(ids)
        stop = False
        def flip():
            while not stop:
                ids[0, 3] = 10**12
                ids[0, 3] = 0
        t = threading.Thread(target=flip); t.start()
        refused = same = 0
        try:
            for _ in range(1000):
                try:
                    out = m(ids)
                except ValueError:
                    refused += 1
                    continue
                assert np.array_equal(out, good), "logits of unchecked ids"
                same += 1
        finally:
            stop = True; t.join()
        print("ok", refused, same)
    """)
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stdout + r.stderr


def test_the_c_embedding_checks_each_id_as_it_reads_it():
    # C itself, not only the Python layer: a bad id reaching bc_gpt_forward is
    # refused with BC_ERANGE and nothing is written (the cache's length neither)
    from blockc._native import ffi, lib
    m = blockc.GPT.random(TINY, seed=0)
    ids = np.array([[1, 2, 10**9]], np.int64)
    logits = np.full((1, 3, TINY.vocab), 7.0, np.float32)
    n = ffi.new("size_t *")
    assert lib.bc_gpt_workspace_size(n, TINY.c_struct(), 1, 3, ffi.NULL) == lib.BC_OK
    work = np.empty(n[0], np.float32)
    st = lib.bc_gpt_forward(ffi.from_buffer("float[]", logits), ffi.NULL, ffi.NULL,
                            ffi.from_buffer("float[]", m.params), TINY.c_struct(),
                            ffi.from_buffer("int64_t[]", ids), lib.BC_IDS_INT64, 1, 3, 0,
                            ffi.from_buffer("float[]", work), work.size)
    assert st == lib.BC_ERANGE
    assert (logits == 7.0).all()


def test_a_dict_changed_during_calls_gives_one_of_its_states():
    # each call reads every entry once: with another thread swapping an entry, each
    # output is the block of the old weights or of the new ones, never a mix or a
    # stale cached view
    cfg = blockc.BlockConfig(d_model=32, n_heads=4, d_ff=64)
    W = blockc.init_block(cfg, 1, "normal")
    x = np.random.default_rng(0).standard_normal((2, 16, 32)).astype(np.float32)
    a_up, b_up = W["up.weight"], W["up.weight"] * 3
    want = set()
    for up in (a_up, b_up):
        want.add(blockc.block_forward(x, {**W, "up.weight": up}, cfg).tobytes())
    stop = threading.Event()

    def swap():
        while not stop.is_set():
            W["up.weight"] = b_up
            W["up.weight"] = a_up

    t = threading.Thread(target=swap)
    t.start()
    try:
        got = {blockc.block_forward(x, W, cfg).tobytes() for _ in range(300)}
    finally:
        stop.set()
        t.join()
    assert got <= want
    # and after the swapping stops, the dict's present state is what runs
    W["up.weight"] = b_up
    assert blockc.block_forward(x, W, cfg).tobytes() == blockc.block_forward(
        x, {**W, "up.weight": b_up}, cfg).tobytes()


def test_two_threads_appending_to_one_cache_take_turns():
    # the cache's length is read once per call under its lock: two threads each
    # appending one token at a time fill it exactly, and the stored keys are those
    # of a sequential run with the same tokens in the order the calls happened
    m = blockc.GPT.random(TINY, seed=0)
    cache = m.new_cache(1, 16)
    errors = []

    def feed():
        try:
            for _ in range(8):
                m(np.array([[5]]), cache=cache)
        except Exception as e:  # pragma: no cover - the assertion reports it
            errors.append(e)

    ts = [threading.Thread(target=feed) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors and cache.length == 16
    solo = m.new_cache(1, 16)
    m(np.full((1, 16), 5), cache=solo)
    np.testing.assert_allclose(cache.k, solo.k, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="exceeds the model's context of 16"):
        m(np.array([[5]]), cache=cache)


# ---------------------------------------------------------------- the process model

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


# ---------------------------------------------------------------- edges of the Python layer

@pytest.mark.parametrize("call, exc, match", [
    (lambda: blockc.init_blocks(blockc.BlockConfig(), np.uint64(2**63)), ValueError,
     r"^n must be in \[0, 2\*\*40\], got 9223372036854775808$"),
    (lambda: blockc.init_blocks(blockc.BlockConfig(), 2.0), TypeError, r"^n must be an integer, got float$"),
    (lambda: blockc.init_blocks(blockc.BlockConfig(), True), TypeError, r"^n must be an integer, got bool$"),
    (lambda: blockc.count_parameters(blockc.BlockConfig(), n_blocks=2.0), TypeError,
     r"^n_blocks must be an integer, got float$"),
    (lambda: blockc.GPTConfig(vocab=2**64), ValueError, r"^GPTConfig.vocab must be in \[1, 2\*\*40\], got 18446744073709551616$"),
    (lambda: blockc.GPT.random(TINY).new_cache(2**64, 4), ValueError, r"^batch must be in \[1, 2\*\*40\]"),
    (lambda: blockc.GPT.random(TINY).new_cache(1, np.int8(4)).capacity == 4 or 1 / 0, None, None),
    (lambda: blockc.GPT.random(TINY, seed=-1), ValueError, r"^seed must be >= 0, got -1$"),
    (lambda: blockc.GPTConfig(tie_weights="False"), TypeError, r"^GPTConfig.tie_weights must be a bool, got str$"),
    (lambda: blockc.GPTConfig(tie_weights=0), TypeError, r"^GPTConfig.tie_weights must be a bool, got int$"),
    (lambda: blockc.GPT.random(TINY)(np.zeros((1, 2), np.int64), return_hidden="no"), TypeError,
     r"^return_hidden must be a bool, got str$"),
    (lambda: blockc.GPT.random(TINY).generate(np.zeros((1, 2), np.int64), 2.0), TypeError,
     r"^max_new_tokens must be an integer, got float$"),
    (lambda: blockc.GPT.random(TINY).generate(np.zeros((1, 2), np.int64), 2, top_k=2.0), TypeError,
     r"^top_k must be an integer, got float$"),
    (lambda: blockc.GPT.random(TINY).generate(np.zeros((1, 2), np.int64), 2, temperature=np.inf),
     ValueError, r"^temperature must be finite and >= 0, got inf$"),
    (lambda: blockc.GPT.random(TINY).generate(np.zeros((1, 2), np.int64), 2, use_cache=1), TypeError,
     r"^use_cache must be a bool, got int$"),
    (lambda: blockc.GPT.random(TINY).state_dict(keep_tied="yes"), TypeError,
     r"^keep_tied must be a bool, got str$"),
    (lambda: blockc.stack_forward(np.zeros((4, 8), np.float32), [], blockc.BlockConfig(),
                                  return_hidden=1), TypeError, r"^return_hidden must be a bool, got int$"),
    (lambda: blockc.book.ffn_init(seed=1.0), TypeError, r"^seed must be an integer, got float$"),
    (lambda: blockc.CRand(seed=-1), ValueError, r"^seed must be in \[0, 2\*\*32\), got -1$"),
    (lambda: blockc.GPTConfig.preset("gpt2", heads=7), ValueError, r"width 768 is not divisible by heads 7"),
    (lambda: blockc.GPTConfig.preset("gpt2", depth=7), TypeError, r"GPTConfig has no field 'depth'"),
], ids=lambda v: "" if callable(v) or v is None or isinstance(v, type) else None)
def test_one_argument_layer(call, exc, match):
    # every integer through operator.index and one range check, flags bools only,
    # one message style naming the argument, and all of it a BlockcError
    if exc is None:
        assert call()
        return
    with pytest.raises(exc, match=match) as info:
        call()
    assert isinstance(info.value, blockc.BlockcError)


def test_tiny_temperatures_are_the_greedy_limit():
    m = blockc.GPT.random(TINY, seed=3)
    prompt = np.array([[1, 2, 3], [4, 5, 6]])
    greedy = m.generate(prompt, 6)
    for t in (1e-310, 5e-324, 1e-30):
        np.testing.assert_array_equal(m.generate(prompt, 6, temperature=t, seed=0), greedy)


def test_a_tied_state_dict_with_a_nan_reloads():
    m = blockc.GPT.random(TINY, seed=0)
    sd = m.state_dict()
    sd["token.weight"][3, 5] = np.nan
    m.load_state_dict(sd)
    sd = m.state_dict(keep_tied=True)  # head.weight: the same tensor
    m2 = blockc.GPT.from_state_dict(sd, TINY)
    assert np.isnan(m2.state_dict()["token.weight"][3, 5])
    sd = {k: v.copy() for k, v in sd.items()}
    sd["head.weight"][0, 0] += 1.0
    with pytest.raises(ValueError, match="differs from 'token.weight'"):
        blockc.GPT.from_state_dict(sd, TINY)


def test_bfloat16_and_float16_torch_tensors_everywhere():
    torch = pytest.importorskip("torch")
    cfg = blockc.BlockConfig(d_model=16, n_heads=2, d_ff=32)
    W = blockc.init_block(cfg, 0, "normal")
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    for dt in (torch.bfloat16, torch.float16):
        tx = torch.from_numpy(x).to(dt)
        tW = {k: torch.from_numpy(v).to(dt) for k, v in W.items()}
        xs = tx.float().numpy()
        Ws = {k: v.float().numpy() for k, v in tW.items()}
        np.testing.assert_array_equal(blockc.block_forward(tx, tW, cfg),
                                      blockc.block_forward(xs, Ws, cfg))
        np.testing.assert_array_equal(ops.rmsnorm(tx), ops.rmsnorm(xs))
        np.testing.assert_array_equal(ops.linear(tx, tW["up.weight"]), ops.linear(xs, Ws["up.weight"]))


# ---------------------------------------------------------------- numerics

@pytest.mark.parametrize("scale", [1e20, 1e30, 3e38, 1e-25])
def test_rmsnorm_of_huge_and_tiny_rows(scale):
    # mean(x^2) of rows near 1e20 overflows float32: RMSNorm used to return 0 (so
    # does PyTorch); every finite row now normalises, in ops and in the block
    rng = np.random.default_rng(0)
    x = (rng.uniform(-1, 1, (3, 48)) * scale).astype(np.float32)
    eps = 0.0 if scale < 1 else 1e-5
    y = ops.rmsnorm(x, eps=eps)
    rms = np.sqrt(np.mean(y.astype(np.float64) ** 2, axis=-1))
    np.testing.assert_allclose(rms, 1.0, rtol=1e-5)
    np.testing.assert_allclose(y, ref.rmsnorm(x.astype(np.float64), eps=eps), rtol=1e-5, atol=1e-6)
    # the block's norms: with zero weights attention and FFN add nothing, so the
    # post-norm block is norm2(norm1(x)) = rmsnorm(x) (y has RMS 1 already)
    cfg = blockc.BlockConfig(d_model=48, n_heads=4, d_ff=8, placement="post", eps=eps)
    Z = {k: np.zeros_like(v) for k, v in blockc.init_block(cfg).items()}
    np.testing.assert_allclose(blockc.block_forward(x, Z, cfg), y, rtol=1e-5, atol=1e-6)


def test_rmsnorm_bits_unchanged_in_range():
    # rows whose mean square is a normal float32 take the float32 path as before
    x = np.random.default_rng(1).standard_normal((64, 96)).astype(np.float32)
    y = ops.rmsnorm(x)
    ss = (x.astype(np.float64) ** 2).sum(axis=-1) / 96
    inv = np.float32(1) / np.sqrt(ss.astype(np.float32) + np.float32(1e-5))
    np.testing.assert_array_equal(y, x * inv[:, None])


# ---------------------------------------------------------------- the command line

@pytest.mark.parametrize("argv, code, match", [
    (["gpt", "--params", "--vocab", str(2**64)], 2,
     r"^blockc gpt: error: GPTConfig.vocab must be in \[1, 2\*\*40\], got 18446744073709551616$"),
    (["gpt", "--params", "--heads", "5"], 2, r"^blockc gpt: error: GPTConfig: width 768 is not divisible by heads 5$"),
    (["gpt", "--norms", "--seed", "-1"], 2, r"^blockc gpt: error: --seed must be >= 0, got -1$"),
    # 3.4 TB of parameters: refused by the allocator, not the size checks (not under ASan,
    # whose allocator logs a warning for an allocation it refuses)
    pytest.param(["gpt", "--norms", "--preset", "gpt2-xl", "--vocab", str(2**29), "--layers", "1"], 1,
                 r"^blockc gpt: error: out of memory",
                 marks=pytest.mark.skipif(os.environ.get("BLOCKC_UNDER_SANITIZER") == "1",
                                          reason="ASan's allocator logs refused allocations")),
    (["depth", "--plot", "{tmp}/missing/x.png"], 2,
     r"^blockc depth: error: --plot .*x\.png: the directory .*missing does not exist$"),
    (["depth", "--plot", "{tmp}"], 2, r"^blockc depth: error: --plot .*: is a directory"),
    (["gpt", "--norms", "--layers", "1", "--plot", "{tmp}/nope/n.png"], 2,
     r"^blockc gpt: error: --plot .*: the directory .*nope does not exist$"),
    ([], 2, r"usage: blockc"),
])
def test_cli_errors_are_one_line(argv, code, match, tmp_path, capsys):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(argv) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    import re
    assert re.search(match, err.strip(), flags=re.M), err
    if argv:
        assert len(err.strip().splitlines()) == 1, err


def test_cli_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"blockc {blockc.__version__}"


def test_cli_help_documents_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        main(["depth", "--help"])
    out = capsys.readouterr().out
    assert "exit status:" in out and "2  a usage error" in out and "130  interrupted" in out


@pytest.mark.skipif(os.environ.get("BLOCKC_UNDER_SANITIZER") == "1",
                    reason="matplotlib's C++ extension aborts under an LD_PRELOADed ASan")
def test_cli_plot_without_extension_says_what_it_wrote(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    target = tmp_path / "curve"
    assert main(["depth", "--blocks", "3", "--plot", str(target)]) == 0
    out = capsys.readouterr().out
    assert out.strip().endswith(f"wrote {target}.png")
    assert (tmp_path / "curve.png").stat().st_size > 1000 and not target.exists()
