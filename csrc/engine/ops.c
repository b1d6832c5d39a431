/* ops.c: the public, validated entry points of the single kernels. Each one
 * checks pointers, sizes and overlaps, then calls the internal kernel. */
#include "bc_engine.h"
#include "bc_check.h"
#include "bc_parallel.h"

// y (N,OC), x (N,C), w (OC,C), b (OC) or NULL
int bc_linear(float *y, const float *x, const float *w, const float *b,
              size_t n, size_t c, size_t oc)
{
    size_t nx, nw, ny;
    int st;
    if (!y || !x || !w)
        return BC_ENULL;
    if (!n || !c || !oc)
        return BC_ESIZE;
    if ((st = bc_mul(&nx, n, c)) || (st = bc_mul(&nw, oc, c)) || (st = bc_mul(&ny, n, oc)))
        return st;
    if (bc_overlap(y, ny, x, nx) || bc_overlap(y, ny, w, nw) || bc_overlap(y, ny, b, oc))
        return BC_EALIAS;
    bc_ctx cx;
    if ((st = bc_rt_ctx(&cx, 0)))
        return st;
    bc_k_linear_few(y, x, w, b, n, c, oc, &cx);
    return BC_OK;
}

/* Shared checks of the two norms: y either is x or does not touch x, g, b. */
static int norm_check(const float *y, const float *x, const float *g, const float *b,
                      size_t n, size_t c, float eps)
{
    size_t nx;
    int st;
    if (!y || !x)
        return BC_ENULL;
    if (!n || !c)
        return BC_ESIZE;
    if ((st = bc_mul(&nx, n, c)))
        return st;
    if (!bc_eps_ok(eps))
        return BC_EOPTION;
    if ((y != x && bc_overlap(y, nx, x, nx)) || bc_overlap(y, nx, g, c) || bc_overlap(y, nx, b, c))
        return BC_EALIAS;
    return BC_OK;
}

// y (N,C), x (N,C), g (C) or NULL
int bc_rmsnorm(float *y, const float *x, const float *g, size_t n, size_t c, float eps)
{
    bc_ctx cx;
    int st = norm_check(y, x, g, NULL, n, c, eps);
    if (st || (st = bc_rt_ctx(&cx, 0)))
        return st;
    bc_k_rmsnorm(y, x, g, n, c, eps, &cx);
    return BC_OK;
}

// y (N,C), x (N,C), g (C) or NULL, b (C) or NULL
int bc_layernorm(float *y, const float *x, const float *g, const float *b,
                 size_t n, size_t c, float eps)
{
    bc_ctx cx;
    int st = norm_check(y, x, g, b, n, c, eps);
    if (st || (st = bc_rt_ctx(&cx, 0)))
        return st;
    bc_k_layernorm(y, x, g, b, n, c, eps, &cx);
    return BC_OK;
}

// out (B,H,Tq,Dh), q (B,H,Tq,Dh), k (B,H,Tk,Dh), v (B,H,Tk,Dh)
int bc_attention(float *out, const float *q, const float *k, const float *v,
                 size_t b, size_t h, size_t tq, size_t tk, size_t dh, int causal)
{
    size_t bh, nq, nk;
    int st;
    if (!out || !q || !k || !v)
        return BC_ENULL;
    if (!b || !h || !tq || !tk || !dh)
        return BC_ESIZE;
    if ((st = bc_mul(&bh, b, h)) || (st = bc_mul(&nq, tq, dh)) || (st = bc_mul(&nq, bh, nq))
        || (st = bc_mul(&nk, tk, dh)) || (st = bc_mul(&nk, bh, nk)))
        return st;
    if (bc_overlap(out, nq, q, nq) || bc_overlap(out, nq, k, nk) || bc_overlap(out, nq, v, nk))
        return BC_EALIAS;
    bc_ctx cx;
    if ((st = bc_rt_ctx(&cx, dh)))
        return st;
    /* each (batch, head) pair is one single-head sequence of row stride Dh */
    for (size_t s = 0; s < bh; s++) {
        const bc_kv kv = {k + s * tk * dh, v + s * tk * dh, dh, dh, dh, dh, 0, NULL, NULL, 0, 0,
                          NULL, NULL, 0, 0.0f};
        bc_k_attention(out + s * tq * dh, dh, q + s * tq * dh, dh, &kv, tq, tk, 1, 1, dh, 0,
                       causal != 0, &cx);
    }
    return BC_OK;
}

// y (n), x (n)
int bc_activation(float *y, const float *x, size_t n, int kind)
{
    if (!y || !x)
        return BC_ENULL;
    if (!n)
        return BC_ESIZE;
    if (n > (size_t)BC_MAX_ELEMENTS)
        return BC_EOVERFLOW;
    if (kind != BC_ACT_GELU_TANH && kind != BC_ACT_GELU && kind != BC_ACT_RELU
        && kind != BC_ACT_SILU)
        return BC_EOPTION;
    if (y != x && bc_overlap(y, n, x, n))
        return BC_EALIAS;
    bc_ctx cx;
    const int st = bc_rt_ctx(&cx, 0);
    if (st)
        return st;
    bc_k_act(y, x, n, kind, &cx);
    return BC_OK;
}

/* Shared checks of the two-input elementwise ops (y either is an input or
 * does not touch it), then the call's context. */
static int pair_check(bc_ctx *cx, const float *y, const float *a, const float *b, size_t n)
{
    if (!y || !a || !b)
        return BC_ENULL;
    if (!n)
        return BC_ESIZE;
    if (n > (size_t)BC_MAX_ELEMENTS)
        return BC_EOVERFLOW;
    if ((y != a && bc_overlap(y, n, a, n)) || (y != b && bc_overlap(y, n, b, n)))
        return BC_EALIAS;
    return bc_rt_ctx(cx, 0);
}

// y (n), gate (n), up (n)
int bc_swiglu(float *y, const float *gate, const float *up, size_t n)
{
    bc_ctx cx;
    const int st = pair_check(&cx, y, gate, up, n);
    if (st)
        return st;
    bc_k_swiglu(y, gate, up, n, &cx);
    return BC_OK;
}

// y (n), a (n), b (n)
int bc_residual_add(float *y, const float *a, const float *b, size_t n)
{
    bc_ctx cx;
    const int st = pair_check(&cx, y, a, b, n);
    if (st)
        return st;
    bc_k_add(y, a, b, n, &cx);
    return BC_OK;
}
