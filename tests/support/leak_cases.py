"""The leak cases: every public C entry point (through cffi, good and failing
arguments alternately, so the error paths run too) and the main Python API
calls, and the in-process measurement of one case (peak RSS and glibc's
malloc'd bytes before and after). tests/test_leaks.py runs them in-process;
benches/leaks.py runs each in a fresh process for the 20,000-call figures.
"""
from __future__ import annotations

import ctypes
import os
import re
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


# cases that take milliseconds a call (bc_tune_kernels times every kernel
# family): at most this many calls, in the test and in benches/leaks.py
CALL_CAP = {"bc_tune_kernels": 40, "bc_tune_prefetch": 20}


def c_entry_points():
    """Names of the public C functions: every declaration in the part headers."""
    sys.path.insert(0, ROOT)
    try:
        import build_ffi
        text = build_ffi.cdef_source()
    finally:
        sys.path.remove(ROOT)
    return sorted(set(re.findall(r"\b(bc_\w+)\s*\(", text)))


# ---------------------------------------------------------------- the cases

def _cases():
    """name -> factory; factory() returns a zero-argument callable doing one call."""
    import numpy as np

    import blockc
    from blockc import book, ops
    from blockc._native import cptr, ffi, fptr, lib

    rng = np.random.default_rng(0)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    cases = {}

    def case(name):
        def deco(factory):
            cases[name] = factory
            return factory
        return deco

    def alternate(good, bad):
        state = [0]

        def call():
            state[0] ^= 1
            return good() if state[0] else bad()
        return call

    # -- core
    @case("bc_strerror")
    def _():
        return lambda: ffi.string(lib.bc_strerror(lib.BC_ESIZE))

    @case("bc_rng_init")
    def _():
        g = ffi.new("bc_rng *")
        return alternate(lambda: lib.bc_rng_init(g, lib.BC_RAND_GLIBC, 7),
                         lambda: lib.bc_rng_init(g, 9, 7))

    @case("bc_rng_rand_max")
    def _():
        g, out = ffi.new("bc_rng *"), ffi.new("uint32_t *")
        lib.bc_rng_init(g, 0, 1)
        return alternate(lambda: lib.bc_rng_rand_max(out, g), lambda: lib.bc_rng_rand_max(ffi.NULL, g))

    @case("bc_rng_rand")
    def _():
        g, out = ffi.new("bc_rng *"), ffi.new("uint32_t[]", 64)
        lib.bc_rng_init(g, 1, 1)
        return alternate(lambda: lib.bc_rng_rand(out, g, 64), lambda: lib.bc_rng_rand(out, g, 2**62))

    @case("bc_rng_uniform")
    def _():
        g, out = ffi.new("bc_rng *"), ffi.new("float[]", 64)
        lib.bc_rng_init(g, 0, 1)
        return alternate(lambda: lib.bc_rng_uniform(out, g, 64, 0.1),
                         lambda: lib.bc_rng_uniform(ffi.NULL, g, 64, 0.1))

    # -- runtime (thread count, instruction set)
    @case("bc_set_num_threads")
    def _():
        return alternate(lambda: lib.bc_set_num_threads(0), lambda: lib.bc_set_num_threads(-1))

    @case("bc_get_num_threads")
    def _():
        out = ffi.new("int *")
        return alternate(lambda: lib.bc_get_num_threads(out), lambda: lib.bc_get_num_threads(ffi.NULL))

    @case("bc_get_isa")
    def _():
        out = ffi.new("int *")
        return alternate(lambda: lib.bc_get_isa(out), lambda: lib.bc_get_isa(ffi.NULL))

    @case("bc_best_isa")
    def _():
        out = ffi.new("int *")
        return alternate(lambda: lib.bc_best_isa(out), lambda: lib.bc_best_isa(ffi.NULL))

    @case("bc_set_isa")
    def _():
        out = ffi.new("int *")
        lib.bc_get_isa(out)
        isa = out[0]
        return alternate(lambda: lib.bc_set_isa(isa), lambda: lib.bc_set_isa(99))

    @case("bc_kernel_choice")
    def _():
        isa, how, sec = ffi.new("int *"), ffi.new("int *"), ffi.new("double[3]")
        return alternate(lambda: lib.bc_kernel_choice(isa, how, sec, 1, 3),
                         lambda: lib.bc_kernel_choice(isa, how, sec, 99, 3))

    @case("bc_set_kernel_choice")
    def _():
        isa, how = ffi.new("int *"), ffi.new("int *")
        lib.bc_kernel_choice(isa, how, ffi.NULL, 1, 0)
        chosen = isa[0]
        return alternate(lambda: lib.bc_set_kernel_choice(1, chosen),
                         lambda: lib.bc_set_kernel_choice(1, 99))

    @case("bc_advise_small_pages")
    def _():
        buf = np.empty(3 << 20, np.float32)  # 12 MiB: whole huge pages inside
        ptr = ffi.from_buffer(buf)  # keeps buf alive
        return alternate(lambda: lib.bc_advise_small_pages(ptr, buf.nbytes),
                         lambda: lib.bc_advise_small_pages(ffi.NULL, 1))

    out = ffi.new("void **")
    nblk, nbytes = ffi.new("size_t *"), ffi.new("size_t *")

    def take_give(n):
        assert lib.bc_out_take(out, n) == lib.BC_OK
        return lib.bc_out_give(out[0])

    @case("bc_out_take")
    def _():  # sizes the kept list takes turns holding: its steady state, then nothing more
        sizes = [1000, 3000, 700000]
        turn = [0]

        def good():
            turn[0] += 1
            return take_give(sizes[turn[0] % 3])
        return alternate(good, lambda: lib.bc_out_take(out, 0))

    @case("bc_out_give")
    def _():
        return alternate(lambda: take_give(5000), lambda: lib.bc_out_give(ffi.NULL))

    @case("bc_out_kept")
    def _():
        return alternate(lambda: lib.bc_out_kept(nblk, nbytes),
                         lambda: lib.bc_out_kept(ffi.NULL, nbytes))

    @case("bc_out_release")
    def _():
        return alternate(lambda: (take_give(2000), lib.bc_out_release()), lib.bc_out_release)

    @case("bc_tune_kernels")
    def _():
        return alternate(lambda: lib.bc_tune_kernels(), lambda: lib.bc_tune_handicap(0, 1, -1.0))

    @case("bc_set_prefetch")
    def _():
        out = ffi.new("int *")
        lib.bc_get_prefetch(out)
        mode = out[0]
        return alternate(lambda: lib.bc_set_prefetch(mode), lambda: lib.bc_set_prefetch(99))

    @case("bc_get_prefetch")
    def _():
        out = ffi.new("int *")
        return alternate(lambda: lib.bc_get_prefetch(out), lambda: lib.bc_get_prefetch(ffi.NULL))

    @case("bc_prefetch_choice")
    def _():
        on, how, sec = ffi.new("int *"), ffi.new("int *"), ffi.new("double[2]")
        return alternate(lambda: lib.bc_prefetch_choice(on, how, sec, 0, 2),
                         lambda: lib.bc_prefetch_choice(on, how, sec, 99, 2))

    @case("bc_set_prefetch_choice")
    def _():
        on, how = ffi.new("int *"), ffi.new("int *")
        lib.bc_prefetch_choice(on, how, ffi.NULL, 0, 0)
        chosen = on[0]
        return alternate(lambda: lib.bc_set_prefetch_choice(0, chosen),
                         lambda: lib.bc_set_prefetch_choice(0, 99))

    @case("bc_tune_prefetch")
    def _():
        return alternate(lambda: lib.bc_tune_prefetch(),
                         lambda: lib.bc_prefetch_handicap(0, 1, -1.0))

    @case("bc_prefetch_handicap")
    def _():
        return alternate(lambda: lib.bc_prefetch_handicap(0, 1, 0.0),
                         lambda: lib.bc_prefetch_handicap(99, 1, 0.0))

    @case("bc_tune_handicap")
    def _():
        return alternate(lambda: lib.bc_tune_handicap(0, 1, 0.0),
                         lambda: lib.bc_tune_handicap(99, 1, 0.0))

    # -- engine kernels
    x, w, b, y = f32(16, 32), f32(24, 32), f32(24), np.empty((16, 24), np.float32)

    @case("bc_linear")
    def _():
        return alternate(lambda: lib.bc_linear(fptr(y), cptr(x), cptr(w), cptr(b), 16, 32, 24),
                         lambda: lib.bc_linear(fptr(y), cptr(x), cptr(w), cptr(b), 2**40, 2**40, 24))

    xn, yn, g = f32(16, 32), np.empty((16, 32), np.float32), f32(32)

    @case("bc_rmsnorm")
    def _():
        return alternate(lambda: lib.bc_rmsnorm(fptr(yn), cptr(xn), cptr(g), 16, 32, 1e-5),
                         lambda: lib.bc_rmsnorm(fptr(yn), cptr(xn), cptr(g), 16, 32, -1.0))

    @case("bc_layernorm")
    def _():
        return alternate(lambda: lib.bc_layernorm(fptr(yn), cptr(xn), cptr(g), cptr(g), 16, 32, 1e-5),
                         lambda: lib.bc_layernorm(fptr(yn), cptr(xn), cptr(g), cptr(g), 0, 32, 1e-5))

    q, k, v, o = f32(2, 2, 8, 4), f32(2, 2, 8, 4), f32(2, 2, 8, 4), np.empty((2, 2, 8, 4), np.float32)

    @case("bc_attention")  # allocates its scratch on every call
    def _():
        return alternate(lambda: lib.bc_attention(fptr(o), cptr(q), cptr(k), cptr(v), 2, 2, 8, 8, 4, 1),
                         lambda: lib.bc_attention(fptr(o), cptr(q), cptr(k), cptr(v), 2, 2, 8, 8, 0, 1))

    @case("bc_activation")
    def _():
        return alternate(lambda: lib.bc_activation(fptr(yn), cptr(xn), xn.size, lib.BC_ACT_GELU),
                         lambda: lib.bc_activation(fptr(yn), cptr(xn), xn.size, 99))

    @case("bc_swiglu")
    def _():
        return alternate(lambda: lib.bc_swiglu(fptr(yn), cptr(xn), cptr(xn), xn.size),
                         lambda: lib.bc_swiglu(fptr(yn), cptr(xn), ffi.NULL, xn.size))

    @case("bc_residual_add")
    def _():
        return alternate(lambda: lib.bc_residual_add(fptr(yn), cptr(xn), cptr(xn), xn.size),
                         lambda: lib.bc_residual_add(fptr(yn), cptr(xn), cptr(xn), 0))

    # -- the block
    cfg = blockc.BlockConfig(d_model=16, n_heads=4, d_ff=32, norm="layer", activation="swiglu")
    Ws = blockc.init_blocks(cfg, 2, seed=1, rand="normal")
    xb = f32(2, 5, 16)

    def c_block():
        ps = [blockc.prepare(W, cfg) for W in Ws]
        arr = ffi.new("bc_block_weights[]", 2)
        for i, p in enumerate(ps):
            arr[i] = p.c_weights[0]
        n = ffi.new("size_t *")
        lib.bc_block_workspace_size(n, cfg.c_config, 2, 5)
        work = np.empty(n[0], np.float32)
        out, hid = np.empty_like(xb), np.empty((2,) + xb.shape, np.float32)
        return ps, arr, n, work, out, hid

    @case("bc_block_workspace_size")
    def _():
        n = ffi.new("size_t *")
        bad = ffi.new("bc_block_config *", {"d_model": 6, "n_heads": 4, "d_ff": 1})
        return alternate(lambda: lib.bc_block_workspace_size(n, cfg.c_config, 2, 5),
                         lambda: lib.bc_block_workspace_size(n, bad, 2, 5))

    @case("bc_block_forward")
    def _():
        ps, arr, n, work, out, hid = c_block()
        return alternate(
            lambda: lib.bc_block_forward(fptr(out), cptr(xb), cfg.c_config, ps[0].c_weights, 2, 5, fptr(work), work.size),
            lambda: lib.bc_block_forward(fptr(out), cptr(xb), cfg.c_config, ps[0].c_weights, 2, 5, fptr(work), 1))

    @case("bc_stack_forward")
    def _():
        ps, arr, n, work, out, hid = c_block()
        # the lambdas hold ps: arr points into the prepared weights
        return alternate(
            lambda ps=ps: lib.bc_stack_forward(fptr(out), fptr(hid), cptr(xb), cfg.c_config, arr, 2, 2, 5,
                                               fptr(work), work.size),
            lambda: lib.bc_stack_forward(fptr(out), fptr(hid), cptr(xb), cfg.c_config, arr, 0, 2, 5,
                                         fptr(work), work.size))

    @case("bc_stack_backward_workspace_size")
    def _():
        n = ffi.new("size_t *")
        return alternate(lambda: lib.bc_stack_backward_workspace_size(n, cfg.c_config, 2, 2, 5),
                         lambda: lib.bc_stack_backward_workspace_size(n, cfg.c_config, 0, 2, 5))

    @case("bc_stack_backward")
    def _():
        ps, arr, n, work, out, hid = c_block()
        lib.bc_stack_backward_workspace_size(n, cfg.c_config, 2, 2, 5)
        bwork = np.empty(n[0], np.float32)
        dx, dy = np.empty_like(xb), f32(2, 5, 16)
        gs = ffi.new("bc_block_grads[]", 2)
        gbufs = [np.zeros((48, 16), np.float32) for _ in range(2)]
        for i in range(2):
            gs[i].qkv_w = fptr(gbufs[i])
        keep = (ps, gbufs)  # arr and gs point into these
        return alternate(
            lambda keep=keep: lib.bc_stack_backward(fptr(dx), gs, cptr(dy), cptr(xb), cfg.c_config, arr,
                                                    2, 2, 5, fptr(bwork), bwork.size),
            lambda: lib.bc_stack_backward(fptr(dx), gs, cptr(dy), cptr(xb), cfg.c_config, arr, 2, 2, 5,
                                          fptr(bwork), 1))

    # -- packed weights
    wp = f32(48, 40)
    pk, n_pack = {}, ffi.new("size_t *")
    for dt in (lib.BC_DTYPE_F32, lib.BC_DTYPE_BF16, lib.BC_DTYPE_Q8_0, lib.BC_DTYPE_F16,
               lib.BC_DTYPE_Q5_0, lib.BC_DTYPE_Q8_0I, lib.BC_DTYPE_Q4_0I, lib.BC_DTYPE_Q5_0I, lib.BC_DTYPE_BF16I):
        lib.bc_pack_size(n_pack, dt, 48, 40)
        pk[dt] = np.zeros(int(n_pack[0]), np.uint8)
    wk = f32(20, 256)  # q4_k, q6_k, q4_ki, q6_ki: rows of whole super-blocks of 256
    for dt in (lib.BC_DTYPE_Q4_K, lib.BC_DTYPE_Q6_K, lib.BC_DTYPE_Q4_KI, lib.BC_DTYPE_Q6_KI):
        lib.bc_pack_size(n_pack, dt, 20, 256)
        pk[dt] = np.zeros(int(n_pack[0]), np.uint8)
    char = lambda a: ffi.from_buffer("char[]", a)  # noqa: E731

    @case("bc_pack_size")
    def _():
        n = ffi.new("size_t *")
        return alternate(lambda: lib.bc_pack_size(n, lib.BC_DTYPE_Q8_0, 48, 40),
                         lambda: lib.bc_pack_size(n, lib.BC_NDTYPE, 48, 40))

    @case("bc_dtype_info")
    def _():
        name, blk, nb = ffi.new("char[]", lib.BC_DTYPE_NAME_MAX), ffi.new("size_t *"), ffi.new("size_t *")
        return alternate(lambda: lib.bc_dtype_info(name, lib.BC_DTYPE_NAME_MAX, blk, nb, lib.BC_DTYPE_Q8_0),
                         lambda: lib.bc_dtype_info(name, lib.BC_DTYPE_NAME_MAX, blk, nb, lib.BC_NDTYPE))

    @case("bc_dtype_traits_of")
    def _():
        t = ffi.new("bc_dtype_traits *")
        return alternate(lambda: lib.bc_dtype_traits_of(t, lib.BC_DTYPE_Q4_KI),
                         lambda: lib.bc_dtype_traits_of(t, lib.BC_NDTYPE))

    @case("bc_ggml_size")
    def _():
        n = ffi.new("size_t *")
        return alternate(lambda: lib.bc_ggml_size(n, lib.BC_GGML_Q6_K, 20, 256),
                         lambda: lib.bc_ggml_size(n, lib.BC_GGML_Q6_K, 20, 255))

    gg = np.zeros(20 * 210, np.uint8)  # 20 rows of one Q6_K super-block
    gq = pk[lib.BC_DTYPE_Q6_KI]

    @case("bc_pack_ggml")
    def _():
        return alternate(lambda: lib.bc_pack_ggml(char(gq), gq.size, char(gg), gg.size,
                                                  lib.BC_DTYPE_Q6_KI, 20, 256),
                         lambda: lib.bc_pack_ggml(char(gq), gq.size, char(gg), gg.size - 1,
                                                  lib.BC_DTYPE_Q6_KI, 20, 256))

    @case("bc_unpack_ggml")
    def _():
        return alternate(lambda: lib.bc_unpack_ggml(char(gg), gg.size, char(gq), gq.size,
                                                    lib.BC_DTYPE_Q6_KI, 20, 256),
                         lambda: lib.bc_unpack_ggml(char(gg), gg.size, char(gq), gq.size,
                                                    lib.BC_DTYPE_BF16I, 20, 256))

    @case("bc_ggml_convert")
    def _():
        q4, q8 = np.zeros(8 * 18, np.uint8), np.zeros(8 * 34, np.uint8)
        return alternate(lambda: lib.bc_ggml_convert(char(q8), q8.size, char(q4), q4.size,
                                                     lib.BC_GGML_Q8_0, lib.BC_GGML_Q4_0, 8),
                         lambda: lib.bc_ggml_convert(char(q8), q8.size, char(q4), q4.size,
                                                     lib.BC_GGML_Q4_0, lib.BC_GGML_Q8_0, 8))

    @case("bc_ggml_from_f32")
    def _():
        x, h = np.zeros(40, np.float32), np.zeros(80, np.uint8)
        return alternate(lambda: lib.bc_ggml_from_f32(char(h), h.size, cptr(x), 40, lib.BC_GGML_F16),
                         lambda: lib.bc_ggml_from_f32(char(h), h.size, cptr(x), 40, lib.BC_GGML_Q8_0))

    @case("bc_pack")
    def _():
        q = pk[lib.BC_DTYPE_Q8_0]
        return alternate(lambda: lib.bc_pack(char(q), q.size, cptr(wp), lib.BC_DTYPE_Q8_0, 48, 40),
                         lambda: lib.bc_pack(char(q), q.size - 1, cptr(wp), lib.BC_DTYPE_Q8_0, 48, 40))

    @case("bc_pack_strided")
    def _():
        q = pk[lib.BC_DTYPE_BF16]
        return alternate(lambda: lib.bc_pack_strided(char(q), q.size, cptr(wp), 1, 48, lib.BC_DTYPE_BF16, 40, 48),
                         lambda: lib.bc_pack_strided(char(q), q.size, cptr(wp), 1, 2**62, lib.BC_DTYPE_BF16, 40, 48))

    @case("bc_unpack")
    def _():
        q, out = pk[lib.BC_DTYPE_BF16], np.empty((48, 40), np.float32)
        lib.bc_pack(char(q), q.size, cptr(wp), lib.BC_DTYPE_BF16, 48, 40)
        return alternate(lambda: lib.bc_unpack(fptr(out), char(q), q.size, lib.BC_DTYPE_BF16, 48, 40),
                         lambda: lib.bc_unpack(fptr(out), char(q), q.size, lib.BC_DTYPE_BF16, 0, 40))

    @case("bc_linear_packed")
    def _():
        q, xl, yl = pk[lib.BC_DTYPE_Q8_0], f32(3, 40), np.empty((3, 48), np.float32)
        lib.bc_pack(char(q), q.size, cptr(wp), lib.BC_DTYPE_Q8_0, 48, 40)
        return alternate(
            lambda: lib.bc_linear_packed(fptr(yl), cptr(xl), char(q), q.size, lib.BC_DTYPE_Q8_0,
                                         ffi.NULL, 3, 40, 48),
            lambda: lib.bc_linear_packed(fptr(yl), cptr(xl), char(q), q.size, lib.BC_NDTYPE,
                                         ffi.NULL, 3, 40, 48))

    def packed_format(dt):  # pack (good / a weight it refuses), then decode and the GEMM
        def make():
            q, xl, yl = pk[dt], f32(5, 40), np.empty((5, 48), np.float32)
            bad = wp.copy()
            bad[3, 7] = np.inf
            lib.bc_pack(char(q), q.size, cptr(wp), dt, 48, 40)
            calls = [lambda: lib.bc_pack(char(q), q.size, cptr(wp), dt, 48, 40),
                     lambda: lib.bc_pack(char(q), q.size, cptr(bad), dt, 48, 40),
                     lambda: lib.bc_linear_packed(fptr(yl), cptr(xl), char(q), q.size, dt,
                                                  ffi.NULL, 1, 40, 48),
                     lambda: lib.bc_linear_packed(fptr(yl), cptr(xl), char(q), q.size, dt,
                                                  ffi.NULL, 5, 40, 48)]
            state = [0]

            def call():
                state[0] += 1
                return calls[state[0] % len(calls)]()
            return call
        return make

    case("bc_linear_packed float16")(packed_format(lib.BC_DTYPE_F16))
    case("bc_linear_packed q5_0")(packed_format(lib.BC_DTYPE_Q5_0))

    def intdot_case(di):
        """the products on rounded x (q8_0i, q4_0i, bfloat16i): x rounded into the call's
        scratch, decoding and GEMM"""
        q, xl, yl = pk[di], f32(9, 40), np.empty((9, 48), np.float32)
        lib.bc_pack(char(q), q.size, cptr(wp), di, 48, 40)
        return alternate(
            lambda: lib.bc_linear_packed(fptr(yl), cptr(xl), char(q), q.size, di,
                                         ffi.NULL, 9, 40, 48),
            lambda: lib.bc_linear_packed(fptr(yl), cptr(xl), char(q), q.size, di,
                                         ffi.NULL, 1, 40, 48))

    @case("bc_linear_packed q8_0i")
    def _():
        return intdot_case(lib.BC_DTYPE_Q8_0I)

    @case("bc_linear_packed q4_0i")
    def _():
        return intdot_case(lib.BC_DTYPE_Q4_0I)

    @case("bc_linear_packed q5_0i")
    def _():
        return intdot_case(lib.BC_DTYPE_Q5_0I)

    @case("bc_linear_packed bfloat16i")
    def _():
        return intdot_case(lib.BC_DTYPE_BF16I)

    def whole_k_case(dk):
        """rows of whole super-blocks: pack (good / a weight it refuses / short rows),
        then decode and the GEMM"""
        k, xk, yk = pk[dk], f32(5, 256), np.empty((5, 20), np.float32)
        bad = wk.copy()
        bad[3, 7] = np.inf
        lib.bc_pack(char(k), k.size, cptr(wk), dk, 20, 256)
        calls = [lambda: lib.bc_pack(char(k), k.size, cptr(wk), dk, 20, 256),
                 lambda: lib.bc_pack(char(k), k.size, cptr(bad), dk, 20, 256),
                 lambda: lib.bc_pack(char(k), k.size, cptr(wk), dk, 40, 128),
                 lambda: lib.bc_linear_packed(fptr(yk), cptr(xk), char(k), k.size,
                                              dk, ffi.NULL, 1, 256, 20),
                 lambda: lib.bc_linear_packed(fptr(yk), cptr(xk), char(k), k.size,
                                              dk, ffi.NULL, 5, 256, 20)]
        state = [0]

        def call():
            state[0] += 1
            return calls[state[0] % len(calls)]()
        return call

    @case("bc_linear_packed q4_k")
    def _():
        return whole_k_case(lib.BC_DTYPE_Q4_K)

    @case("bc_linear_packed q6_k")
    def _():
        return whole_k_case(lib.BC_DTYPE_Q6_K)

    @case("bc_linear_packed q4_ki")
    def _():  # (and x quantised into the call's scratch)
        return whole_k_case(lib.BC_DTYPE_Q4_KI)

    @case("bc_linear_packed q6_ki")
    def _():
        return whole_k_case(lib.BC_DTYPE_Q6_KI)

    # -- book mode
    def book_structs():
        gg = ffi.new("bc_rng *")
        lib.bc_rng_init(gg, 0, 42)
        ffn, blk = ffi.new("bc_book_ffn *"), ffi.new("bc_book_block[]", lib.BC_BOOK_N_BLOCKS)
        lib.bc_book_ffn_init(ffn, gg)
        lib.bc_book_stack_init(blk, gg)
        return gg, ffn, blk

    xt = f32(lib.BC_BOOK_SEQ_LEN, lib.BC_BOOK_D_MODEL)
    yt = np.empty_like(xt)

    @case("bc_book_ffn_init")
    def _():
        gg, ffn, blk = book_structs()
        return alternate(lambda: lib.bc_book_ffn_init(ffn, gg), lambda: lib.bc_book_ffn_init(ffn, ffi.NULL))

    @case("bc_book_block_init")
    def _():
        gg, ffn, blk = book_structs()
        return alternate(lambda: lib.bc_book_block_init(blk, gg), lambda: lib.bc_book_block_init(ffi.NULL, gg))

    @case("bc_book_stack_init")
    def _():
        gg, ffn, blk = book_structs()
        return alternate(lambda: lib.bc_book_stack_init(blk, gg), lambda: lib.bc_book_stack_init(blk, ffi.NULL))

    @case("bc_book_ffn_forward")
    def _():
        gg, ffn, blk = book_structs()
        xf, of = f32(lib.BC_BOOK_FFN_D_MODEL), np.empty(lib.BC_BOOK_FFN_D_MODEL, np.float32)
        return alternate(lambda: lib.bc_book_ffn_forward(fptr(of), ffn, cptr(xf)),
                         lambda: lib.bc_book_ffn_forward(fptr(of), ffi.NULL, cptr(xf)))

    @case("bc_book_ffn_params")
    def _():
        out = ffi.new("int64_t *")
        return alternate(lambda: lib.bc_book_ffn_params(out, 6, 12), lambda: lib.bc_book_ffn_params(out, -6, 12))

    @case("bc_book_residual_add")
    def _():
        a4, o4 = f32(4), np.empty(4, np.float32)
        return alternate(lambda: lib.bc_book_residual_add(fptr(o4), cptr(a4), cptr(a4)),
                         lambda: lib.bc_book_residual_add(fptr(o4), ffi.NULL, cptr(a4)))

    @case("bc_book_block_forward")
    def _():
        gg, ffn, blk = book_structs()
        return alternate(lambda: lib.bc_book_block_forward(fptr(yt), blk, cptr(xt)),
                         lambda: lib.bc_book_block_forward(fptr(yt), ffi.NULL, cptr(xt)))

    @case("bc_book_avg_norm")
    def _():
        out = ffi.new("float *")
        return alternate(lambda: lib.bc_book_avg_norm(out, cptr(xt)), lambda: lib.bc_book_avg_norm(out, ffi.NULL))

    @case("bc_book_stack_forward")
    def _():
        gg, ffn, blk = book_structs()
        norms = np.empty(lib.BC_BOOK_N_BLOCKS + 1, np.float32)
        return alternate(lambda: lib.bc_book_stack_forward(fptr(yt), fptr(norms), blk, cptr(xt)),
                         lambda: lib.bc_book_stack_forward(ffi.NULL, fptr(norms), blk, cptr(xt)))

    @case("bc_book_block_params")
    def _():
        out = ffi.new("bc_book_params *")
        return alternate(lambda: lib.bc_book_block_params(out, 8, 32, 4),
                         lambda: lib.bc_book_block_params(out, 2**40, 2**40, 2**40))

    # -- the GPT
    gcfg = blockc.GPTConfig(vocab=64, context=16, width=16, heads=4, layers=2)
    model = blockc.GPT.random(gcfg, seed=0)
    cc = gcfg.c_struct()
    bad_cc = ffi.new("bc_gpt_config *", dict(vocab=64, context=16, width=16, heads=3, layers=2,
                                             eps=1e-5, tie_weights=1, norm=lib.BC_NORM_LAYER))
    n_out = ffi.new("size_t *")

    @case("bc_gpt_config_check")
    def _():
        return alternate(lambda: lib.bc_gpt_config_check(cc), lambda: lib.bc_gpt_config_check(bad_cc))

    @case("bc_gpt_param_count")
    def _():
        return alternate(lambda: lib.bc_gpt_param_count(n_out, cc), lambda: lib.bc_gpt_param_count(n_out, bad_cc))

    @case("bc_gpt_param_bytes")
    def _():
        return alternate(lambda: lib.bc_gpt_param_bytes(n_out, cc), lambda: lib.bc_gpt_param_bytes(n_out, bad_cc))

    @case("bc_gpt_tensor_count")
    def _():
        return alternate(lambda: lib.bc_gpt_tensor_count(n_out, cc), lambda: lib.bc_gpt_tensor_count(n_out, bad_cc))

    @case("bc_gpt_tensor_info")
    def _():
        name = ffi.new("char[]", lib.BC_GPT_NAME_MAX)
        off, nb, nd, shp = ffi.new("size_t *"), ffi.new("size_t *"), ffi.new("size_t *"), ffi.new("size_t[2]")
        dt, pk = ffi.new("int *"), ffi.new("int *")
        return alternate(
            lambda: lib.bc_gpt_tensor_info(name, lib.BC_GPT_NAME_MAX, off, nb, dt, pk, nd, shp, cc, 5),
            lambda: lib.bc_gpt_tensor_info(name, lib.BC_GPT_NAME_MAX, off, nb, dt, pk, nd, shp, cc, 999))

    @case("bc_gpt_cache_size")
    def _():
        return alternate(lambda: lib.bc_gpt_cache_size(n_out, cc, 2, 8), lambda: lib.bc_gpt_cache_size(n_out, cc, 2, 17))

    @case("bc_gpt_cache_bytes")
    def _():  # a float cache's bytes, and a quantised one refused (heads not of 32)
        return alternate(lambda: lib.bc_gpt_cache_bytes(n_out, cc, 2, 8, lib.BC_DTYPE_F32),
                         lambda: lib.bc_gpt_cache_bytes(n_out, cc, 2, 8, lib.BC_DTYPE_Q8_0))

    @case("bc_gpt_ring_rows")
    def _():
        return alternate(lambda: lib.bc_gpt_ring_rows(n_out, 8, 1000),
                         lambda: lib.bc_gpt_ring_rows(ffi.NULL, 8, 1000))

    @case("bc_gpt_workspace_size")
    def _():
        return alternate(lambda: lib.bc_gpt_workspace_size(n_out, cc, 2, 8, ffi.NULL),
                         lambda: lib.bc_gpt_workspace_size(n_out, cc, 0, 8, ffi.NULL))

    @case("bc_gpt_forward")
    def _():
        ids = rng.integers(0, 64, size=(2, 8))
        bad_ids = ids.copy()
        bad_ids[1, 7] = 64
        lib.bc_gpt_workspace_size(n_out, cc, 2, 8, ffi.NULL)
        work = np.empty(n_out[0], np.float32)
        logits = np.empty((2, 8, 64), np.float32)
        p = ffi.from_buffer("char[]", model.params, False)

        def fwd(i):
            return lib.bc_gpt_forward(fptr(logits), ffi.NULL, ffi.NULL, p, cc,
                                      ffi.from_buffer("int64_t[]", i), lib.BC_IDS_INT64, 2, 8, 0,
                                      fptr(work), work.size)
        return alternate(lambda: fwd(ids), lambda: fwd(bad_ids))

    # a model of per-matrix formats (bc_gpt_config.dtypes), and one bad entry
    mixed = blockc.GPT.random(gcfg, seed=0, dtypes={"blocks.0.up.weight": "q4_0",
                                                    "blocks.1.attn.qkv.weight": "q8_0",
                                                    "token.weight": "bfloat16"})
    mc = mixed.c_config
    bad_fmt = ffi.new("int[]", 2 + 5 * gcfg.layers)
    bad_fmt[3] = 99
    bad_mc = ffi.new("bc_gpt_config *")
    bad_mc[0] = mc[0]
    bad_mc.dtypes = bad_fmt

    @case("bc_gpt_config_check (per-matrix formats)")
    def _():
        return alternate(lambda: lib.bc_gpt_config_check(mc), lambda: lib.bc_gpt_config_check(bad_mc))

    @case("bc_gpt_forward (per-matrix formats)")
    def _():
        ids = rng.integers(0, 64, size=(2, 8))
        lib.bc_gpt_workspace_size(n_out, mc, 2, 8, ffi.NULL)
        work = np.empty(n_out[0], np.float32)
        logits = np.empty((2, 8, 64), np.float32)
        p = ffi.from_buffer("char[]", mixed.params, False)

        def fwd(c):
            return lib.bc_gpt_forward(fptr(logits), ffi.NULL, ffi.NULL, p, c,
                                      ffi.from_buffer("int64_t[]", ids), lib.BC_IDS_INT64, 2, 8, 0,
                                      fptr(work), work.size)
        return alternate(lambda: fwd(mc), lambda: fwd(bad_mc))

    lib.bc_gpt_cache_size(n_out, cc, 2, 16)
    ck, cv = np.zeros(n_out[0], np.float32), np.zeros(n_out[0], np.float32)
    clens = np.array([5, 0], np.uintp)

    def cache_struct():
        return ffi.new("bc_gpt_cache *", dict(k=fptr(ck), v=fptr(cv), batch=2, capacity=16,
                                              lengths=ffi.from_buffer("size_t[]", clens)))

    @case("bc_gpt_cache_truncate")
    def _():
        c = cache_struct()
        return alternate(lambda: lib.bc_gpt_cache_truncate(c, cc, 0, 5),
                         lambda: lib.bc_gpt_cache_truncate(c, cc, 0, 6))

    @case("bc_gpt_cache_copy")
    def _():
        c = cache_struct()
        return alternate(lambda: lib.bc_gpt_cache_copy(c, cc, 1, 0, 4),
                         lambda: lib.bc_gpt_cache_copy(c, cc, 1, 0, 6))

    tids = rng.integers(0, 64, size=(2, 8))
    ttg = rng.integers(0, 64, size=(2, 8))
    ttg[0, :3] = -100

    @case("bc_gpt_train_workspace_size")
    def _():
        return alternate(lambda: lib.bc_gpt_train_workspace_size(n_out, cc, 2, 8),
                         lambda: lib.bc_gpt_train_workspace_size(n_out, cc, 2, 17))

    grads_buf = np.zeros(model.nbytes // 4, np.float32)

    @case("bc_gpt_grad")
    def _():
        lib.bc_gpt_train_workspace_size(n_out, cc, 2, 8)
        work = np.empty(n_out[0], np.float32)
        loss, cnt = ffi.new("float *"), ffi.new("size_t *")
        p = ffi.from_buffer("char[]", model.params, False)
        bad_tg = ttg.copy()
        bad_tg[1, 1] = 64

        def grad(t):
            return lib.bc_gpt_grad(loss, cnt, ffi.from_buffer("char[]", grads_buf), p, cc,
                                   ffi.from_buffer("int64_t[]", tids), ffi.from_buffer("int64_t[]", t),
                                   lib.BC_IDS_INT64, -100, 2, 8, fptr(work), work.size)
        return alternate(lambda: grad(ttg), lambda: grad(bad_tg))

    @case("bc_gpt_grad_norm")
    def _():
        out = ffi.new("double *")
        g = ffi.from_buffer("char[]", grads_buf, False)
        return alternate(lambda: lib.bc_gpt_grad_norm(out, g, cc), lambda: lib.bc_gpt_grad_norm(out, g, bad_cc))

    @case("bc_gpt_adamw")
    def _():
        prm = model.params.copy()
        mom, vel = np.zeros(prm.size // 4, np.float32), np.zeros(prm.size // 4, np.float32)
        ok = ffi.new("bc_adamw_config *", dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
                                               weight_decay=0.01, decay=0, grad_scale=1.0, step=1))
        bad = ffi.new("bc_adamw_config *", dict(lr=1e-3, beta1=1.5, beta2=0.999, eps=1e-8,
                                                weight_decay=0.01, decay=0, grad_scale=1.0, step=1))
        g = ffi.from_buffer("char[]", grads_buf, False)
        pp = ffi.from_buffer("char[]", prm)
        return alternate(lambda: lib.bc_gpt_adamw(pp, fptr(mom), fptr(vel), g, cc, ok),
                         lambda: lib.bc_gpt_adamw(pp, fptr(mom), fptr(vel), g, cc, bad))

    # -- the Python API (each call allocates its results, workspaces and C views)
    def fails(fn, *a, **kw):
        try:
            fn(*a, **kw)
        except (ValueError, TypeError):
            return
        raise AssertionError("expected a refusal")

    @case("block_forward")
    def _():
        bad = dict(Ws[0])
        del bad["up.weight"]
        return alternate(lambda: blockc.block_forward(xb, Ws[0], cfg),
                         lambda: fails(blockc.block_forward, xb, bad, cfg))

    @case("block_forward(dict)")
    def _():
        W = dict(Ws[0])
        return lambda: blockc.block_forward(xb.astype(np.float64), W, cfg)

    @case("stack_forward")
    def _():
        return lambda: blockc.stack_forward(xb, Ws, cfg, return_hidden=True)

    @case("init_blocks")
    def _():
        small = blockc.BlockConfig(d_model=8, n_heads=2, d_ff=16)
        return lambda: blockc.init_blocks(small, 2, seed=3)

    @case("ops")
    def _():
        return lambda: (ops.linear(x, w, b), ops.layernorm(xn, g, g), ops.attention(q, k, v, causal=True),
                        ops.gelu(xn), ops.swiglu(xn, xn))

    @case("book")
    def _():
        bw = book.stack_init(seed=42)
        xbook = book.stack_init.__globals__.get("np", np).zeros((4, 8), np.float32) + 0.1
        return lambda: (book.stack_forward(xbook, bw), book.ffn_params(), book.block_params())

    @case("GPT.__call__")
    def _():
        ids = rng.integers(0, 64, size=(2, 8))
        return alternate(lambda: model(ids, return_hidden=True), lambda: fails(model, ids + 64))

    @case("GPT.generate")
    def _():
        ids = rng.integers(0, 64, size=(1, 4))
        return lambda: model.generate(ids, max_new_tokens=4, temperature=1.0, top_k=8, seed=1)

    @case("block_backward")
    def _():
        dyb = f32(2, 5, 16)
        return lambda: blockc.stack_backward(xb, Ws, cfg, dyb)

    @case("GPT.train_step")
    def _():
        tm = blockc.GPT.random(gcfg, seed=1)
        opt = blockc.AdamW(tm, lr=1e-3)
        return alternate(lambda: tm.train_step(tids, ttg, opt, max_grad_norm=1.0),
                         lambda: fails(tm.train_step, tids, ttg + 200, opt))

    @case("GPT.grad")
    def _():
        return lambda: model.grad(tids, ttg)

    @case("GPT.from_state_dict")
    def _():
        sd = {k2: v2.copy() for k2, v2 in model.state_dict().items()}
        return lambda: blockc.GPT.from_state_dict(sd, gcfg)

    return cases


# ---------------------------------------------------------------- measuring

def _malloc_in_use():
    """Bytes malloc'd and not freed (glibc mallinfo2), or -1 where unavailable."""
    try:
        libc = ctypes.CDLL(None)
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return -1

    class Mallinfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                     "uordblks", "fordblks", "keepcost")]
    fn.restype = Mallinfo2
    m = fn()
    return int(m.uordblks + m.hblkhd)


def _peak_rss_kb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def measure(name, calls, warmup=500, cases=None):
    """Run one case in this process: dict of calls, seconds, peak RSS and malloc growth."""
    import gc
    cases = cases or _cases()
    call = cases[name]()
    for _ in range(warmup):
        call()
    gc.collect()
    rss0, mem0 = _peak_rss_kb(), _malloc_in_use()
    t0 = time.perf_counter()
    for _ in range(calls):
        call()
    seconds = time.perf_counter() - t0
    gc.collect()
    rss1, mem1 = _peak_rss_kb(), _malloc_in_use()
    return dict(name=name, calls=calls, seconds=seconds, peak_rss_mb=rss1 / 1024.0,
                rss_growth_mb=(rss1 - rss0) / 1024.0,
                malloc_growth_kb=(mem1 - mem0) / 1024.0 if mem0 >= 0 else float("nan"))


