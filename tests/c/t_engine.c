/* t_engine.c: the dynamic engine's entry points (csrc/bc_engine.h). */
#include <math.h>
#include <string.h>

#include "harness.h"

#define NB(n) ((n) * sizeof(float))

/* sizes every entry point must refuse as too large: "negative", 2^63, past 2^40 */
static const size_t HUGE_SIZES[] = {H_NEG, H_HALF, (size_t)BC_MAX_ELEMENTS + 1};
#define N_HUGE (sizeof HUGE_SIZES / sizeof HUGE_SIZES[0])

static int close_to(float got, double want)
{
    return fabs((double)got - want) <= 1e-4 * (1.0 + fabs(want));
}

/* ---- bc_linear ---------------------------------------------------------- */

static void linear_checks(void)
{
    enum { N = 3, C = 5, OC = 4 };
    float *x = h_alloc(N * C), *w = h_alloc(OC * C), *b = h_alloc(OC), *y = h_alloc(N * OC);
    h_fill(x, N * C, 1, 1.0f);
    h_fill(w, OC * C, 2, 1.0f);
    h_fill(b, OC, 3, 1.0f);

    EXPECT_STATUS(BC_ENULL, bc_linear(NULL, x, w, b, N, C, OC));
    EXPECT_STATUS(BC_ENULL, bc_linear(y, NULL, w, b, N, C, OC));
    EXPECT_STATUS(BC_ENULL, bc_linear(y, x, NULL, b, N, C, OC));
    EXPECT_STATUS(BC_ESIZE, bc_linear(y, x, w, b, 0, C, OC));
    EXPECT_STATUS(BC_ESIZE, bc_linear(y, x, w, b, N, 0, OC));
    EXPECT_STATUS(BC_ESIZE, bc_linear(y, x, w, b, N, C, 0));
    for (size_t i = 0; i < N_HUGE; i++) {
        EXPECT_STATUS(BC_EOVERFLOW, bc_linear(y, x, w, b, HUGE_SIZES[i], C, OC));
        EXPECT_STATUS(BC_EOVERFLOW, bc_linear(y, x, w, b, N, HUGE_SIZES[i], OC));
        EXPECT_STATUS(BC_EOVERFLOW, bc_linear(y, x, w, b, N, C, HUGE_SIZES[i]));
    }
    /* each size fine alone, the products not: 2^32 * 2^32 wraps to 0 in size_t */
    EXPECT_STATUS(BC_EOVERFLOW, bc_linear(y, x, w, b, (size_t)1 << 32, (size_t)1 << 32, 1));
    EXPECT_STATUS(BC_EOVERFLOW, bc_linear(y, x, w, b, 1, (size_t)1 << 32, (size_t)1 << 32));
    EXPECT_STATUS(BC_EOVERFLOW, bc_linear(y, x, w, b, H_HALF / 4, 8, 1));
    EXPECT_STATUS(BC_EOVERFLOW, bc_linear(y, x, w, b, (size_t)1 << 21, (size_t)1 << 20, 1));
    EXPECT(h_untouched(y, NB(N * OC)));
    /* y may not overlap an input */
    float *xy = h_alloc(N * C + N * OC);
    h_fill(xy, N * C, 1, 1.0f);
    EXPECT_STATUS(BC_EALIAS, bc_linear(xy, xy, w, b, N, C, OC));
    EXPECT_STATUS(BC_EALIAS, bc_linear(xy + N * C - 1, xy, w, b, N, C, OC));
    EXPECT_STATUS(BC_EALIAS, bc_linear(y, x, y, b, N, OC, OC));
    EXPECT_STATUS(BC_EALIAS, bc_linear(y, x, w, y + 1, N, C, OC));
    EXPECT(h_untouched(y, NB(N * OC)));
    EXPECT(h_untouched(xy + N * C, NB(N * OC)));

    /* good: y = x w^T + b, with and without bias */
    for (int with_b = 0; with_b < 2; with_b++) {
        h_refill(y, NB(N * OC));
        EXPECT_STATUS(BC_OK, bc_linear(y, x, w, with_b ? b : NULL, N, C, OC));
        for (int i = 0; i < N; i++)
            for (int o = 0; o < OC; o++) {
                double s = with_b ? b[o] : 0.0;
                for (int j = 0; j < C; j++)
                    s += (double)x[i * C + j] * w[o * C + j];
                EXPECT(close_to(y[i * OC + o], s));
            }
        EXPECT(h_guard_ok(y, NB(N * OC)));
    }
    /* the adjacent, non-overlapping output is fine */
    EXPECT_STATUS(BC_OK, bc_linear(xy + N * C, xy, w, b, N, C, OC));
    EXPECT(h_guard_ok(xy, NB(N * C + N * OC)));
}

/* ---- norms -------------------------------------------------------------- */

static int call_norm(int layer, float *y, const float *x, const float *g, const float *b,
                     size_t n, size_t c, float eps)
{
    return layer ? bc_layernorm(y, x, g, b, n, c, eps) : bc_rmsnorm(y, x, g, n, c, eps);
}

static void norm_checks(int layer)
{
    enum { N = 3, C = 6 };
    float *x = h_alloc(N * C), *g = h_alloc(C), *b = h_alloc(C), *y = h_alloc(N * C);
    h_fill(x, N * C, 4, 2.0f);
    h_fill(g, C, 5, 1.0f);
    h_fill(b, C, 6, 1.0f);

    EXPECT_STATUS(BC_ENULL, call_norm(layer, NULL, x, g, b, N, C, 1e-5f));
    EXPECT_STATUS(BC_ENULL, call_norm(layer, y, NULL, g, b, N, C, 1e-5f));
    EXPECT_STATUS(BC_ESIZE, call_norm(layer, y, x, g, b, 0, C, 1e-5f));
    EXPECT_STATUS(BC_ESIZE, call_norm(layer, y, x, g, b, N, 0, 1e-5f));
    for (size_t i = 0; i < N_HUGE; i++) {
        EXPECT_STATUS(BC_EOVERFLOW, call_norm(layer, y, x, g, b, HUGE_SIZES[i], C, 1e-5f));
        EXPECT_STATUS(BC_EOVERFLOW, call_norm(layer, y, x, g, b, N, HUGE_SIZES[i], 1e-5f));
    }
    EXPECT_STATUS(BC_EOVERFLOW, call_norm(layer, y, x, g, b, (size_t)1 << 32, (size_t)1 << 32, 1e-5f));
    const float bad_eps[] = {-1e-5f, NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof bad_eps / sizeof bad_eps[0]; i++)
        EXPECT_STATUS(BC_EOPTION, call_norm(layer, y, x, g, b, N, C, bad_eps[i]));
    EXPECT_STATUS(BC_EALIAS, call_norm(layer, y, x, y, b, N, C, 1e-5f));
    if (layer)
        EXPECT_STATUS(BC_EALIAS, call_norm(layer, y, x, g, y + C, N, C, 1e-5f));
    EXPECT(h_untouched(y, NB(N * C)));
    /* partial overlap of y and x (in place is y == x exactly) */
    float *xx = h_alloc(N * C + 1);
    h_fill(xx, N * C + 1, 4, 2.0f);
    EXPECT_STATUS(BC_EALIAS, call_norm(layer, xx + 1, xx, g, b, N, C, 1e-5f));

    /* good: out of place, then in place gives the same bits */
    EXPECT_STATUS(BC_OK, call_norm(layer, y, x, g, b, N, C, 1e-5f));
    EXPECT(h_guard_ok(y, NB(N * C)));
    for (int i = 0; i < N; i++) {
        double m = 0, ss = 0;
        for (int j = 0; j < C; j++)
            m += x[i * C + j];
        m /= C;
        for (int j = 0; j < C; j++) {
            double d = layer ? x[i * C + j] - m : x[i * C + j];
            ss += d * d;
        }
        double r = 1.0 / sqrt(ss / C + 1e-5);
        for (int j = 0; j < C; j++) {
            double want = (layer ? (x[i * C + j] - m) : x[i * C + j]) * r * g[j]
                          + (layer ? b[j] : 0.0);
            EXPECT(close_to(y[i * C + j], want));
        }
    }
    float *z = h_alloc(N * C);
    memcpy(z, x, NB(N * C));
    EXPECT_STATUS(BC_OK, call_norm(layer, z, z, g, b, N, C, 1e-5f));
    EXPECT(memcmp(z, y, NB(N * C)) == 0);
    /* an all-zero row stays finite (eps > 0), and eps = 0 is accepted */
    float *zero = h_alloc(C), *out = h_alloc(C);
    memset(zero, 0, NB(C));
    EXPECT_STATUS(BC_OK, call_norm(layer, out, zero, NULL, NULL, 1, C, 1e-5f));
    EXPECT(h_finite(out, C) && out[0] == 0.0f);
    EXPECT_STATUS(BC_OK, call_norm(layer, out, x, NULL, NULL, 1, C, 0.0f));
    EXPECT(h_finite(out, C));
}

/* ---- attention ---------------------------------------------------------- */

static void attention_checks(void)
{
    enum { B = 2, H = 2, TQ = 3, TK = 4, DH = 3 };
    const size_t nq = B * H * TQ * DH, nk = B * H * TK * DH;
    float *q = h_alloc(nq), *k = h_alloc(nk), *v = h_alloc(nk), *o = h_alloc(nq);
    h_fill(q, nq, 7, 1.0f);
    h_fill(k, nk, 8, 1.0f);
    h_fill(v, nk, 9, 1.0f);

    EXPECT_STATUS(BC_ENULL, bc_attention(NULL, q, k, v, B, H, TQ, TK, DH, 0));
    EXPECT_STATUS(BC_ENULL, bc_attention(o, NULL, k, v, B, H, TQ, TK, DH, 0));
    EXPECT_STATUS(BC_ENULL, bc_attention(o, q, NULL, v, B, H, TQ, TK, DH, 0));
    EXPECT_STATUS(BC_ENULL, bc_attention(o, q, k, NULL, B, H, TQ, TK, DH, 0));
    EXPECT_STATUS(BC_ESIZE, bc_attention(o, q, k, v, 0, H, TQ, TK, DH, 0));
    EXPECT_STATUS(BC_ESIZE, bc_attention(o, q, k, v, B, 0, TQ, TK, DH, 0));
    EXPECT_STATUS(BC_ESIZE, bc_attention(o, q, k, v, B, H, 0, TK, DH, 0));
    EXPECT_STATUS(BC_ESIZE, bc_attention(o, q, k, v, B, H, TQ, 0, DH, 0));
    EXPECT_STATUS(BC_ESIZE, bc_attention(o, q, k, v, B, H, TQ, TK, 0, 0));
    for (size_t i = 0; i < N_HUGE; i++) {
        size_t s = HUGE_SIZES[i];
        EXPECT_STATUS(BC_EOVERFLOW, bc_attention(o, q, k, v, s, H, TQ, TK, DH, 0));
        EXPECT_STATUS(BC_EOVERFLOW, bc_attention(o, q, k, v, B, s, TQ, TK, DH, 0));
        EXPECT_STATUS(BC_EOVERFLOW, bc_attention(o, q, k, v, B, H, s, TK, DH, 0));
        EXPECT_STATUS(BC_EOVERFLOW, bc_attention(o, q, k, v, B, H, TQ, s, DH, 1));
        EXPECT_STATUS(BC_EOVERFLOW, bc_attention(o, q, k, v, B, H, TQ, TK, s, 0));
    }
    /* 2^16 of each of b, h, tq, dh: 2^64 elements, which wraps to 0 */
    const size_t p16 = (size_t)1 << 16;
    EXPECT_STATUS(BC_EOVERFLOW, bc_attention(o, q, k, v, p16, p16, p16, 1, p16, 0));
    EXPECT_STATUS(BC_EOVERFLOW, bc_attention(o, q, k, v, p16, p16, 1, p16, p16, 0));
    EXPECT(h_untouched(o, NB(nq)));
    EXPECT_STATUS(BC_EALIAS, bc_attention(q, q, k, v, B, H, TQ, TK, DH, 0));
    EXPECT_STATUS(BC_EALIAS, bc_attention(o, q, o, v, B, H, TQ, TQ, DH, 0));
    EXPECT_STATUS(BC_EALIAS, bc_attention(o, q, k, o + 1, B, H, TQ, TQ, DH, 0));
    EXPECT(h_untouched(o, NB(nq)));

    /* good, against a double-precision softmax; causal is top-left aligned */
    for (int causal = 0; causal < 2; causal++) {
        h_refill(o, NB(nq));
        EXPECT_STATUS(BC_OK, bc_attention(o, q, k, v, B, H, TQ, TK, DH, causal));
        EXPECT(h_guard_ok(o, NB(nq)));
        for (int s = 0; s < B * H; s++)
            for (int i = 0; i < TQ; i++) {
                double sc[TK], mx = -INFINITY, z = 0;
                int nk_vis = causal ? i + 1 : TK;
                for (int j = 0; j < nk_vis; j++) {
                    double d = 0;
                    for (int c = 0; c < DH; c++)
                        d += (double)q[(s * TQ + i) * DH + c] * k[(s * TK + j) * DH + c];
                    sc[j] = d / sqrt((double)DH);
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                for (int j = 0; j < nk_vis; j++)
                    z += sc[j] = exp(sc[j] - mx);
                for (int c = 0; c < DH; c++) {
                    double want = 0;
                    for (int j = 0; j < nk_vis; j++)
                        want += sc[j] / z * v[(s * TK + j) * DH + c];
                    EXPECT(close_to(o[(s * TQ + i) * DH + c], want));
                }
            }
    }
    /* scores of magnitude 1e4 (q, k of 100): the max-subtracted softmax stays finite */
    float *big_q = h_alloc(nq), *big_k = h_alloc(nk);
    for (size_t i = 0; i < nq; i++)
        big_q[i] = 100.0f * q[i];
    for (size_t i = 0; i < nk; i++)
        big_k[i] = 100.0f * k[i];
    EXPECT_STATUS(BC_OK, bc_attention(o, big_q, big_k, v, B, H, TQ, TK, DH, 1));
    EXPECT(h_finite(o, nq));
}

/* ---- elementwise -------------------------------------------------------- */

static void elementwise_checks(void)
{
    enum { N = 7 };
    float *x = h_alloc(N), *u = h_alloc(N), *y = h_alloc(N), *xx = h_alloc(N + 1);
    h_fill(x, N, 10, 3.0f);
    h_fill(u, N, 11, 3.0f);
    h_fill(xx, N + 1, 12, 3.0f);
    const int kinds[] = {BC_ACT_GELU_TANH, BC_ACT_GELU, BC_ACT_RELU, BC_ACT_SILU};

    for (size_t i = 0; i < 4; i++) {
        EXPECT_STATUS(BC_ENULL, bc_activation(NULL, x, N, kinds[i]));
        EXPECT_STATUS(BC_ENULL, bc_activation(y, NULL, N, kinds[i]));
        EXPECT_STATUS(BC_ESIZE, bc_activation(y, x, 0, kinds[i]));
        for (size_t j = 0; j < N_HUGE; j++)
            EXPECT_STATUS(BC_EOVERFLOW, bc_activation(y, x, HUGE_SIZES[j], kinds[i]));
        EXPECT_STATUS(BC_EALIAS, bc_activation(xx + 1, xx, N, kinds[i]));
    }
    /* swiglu is a block option, not an elementwise activation */
    const int bad_kinds[] = {-1, BC_ACT_SWIGLU, 5, 1000};
    for (size_t i = 0; i < 4; i++)
        EXPECT_STATUS(BC_EOPTION, bc_activation(y, x, N, bad_kinds[i]));
    EXPECT_STATUS(BC_ENULL, bc_swiglu(NULL, x, u, N));
    EXPECT_STATUS(BC_ENULL, bc_swiglu(y, NULL, u, N));
    EXPECT_STATUS(BC_ENULL, bc_swiglu(y, x, NULL, N));
    EXPECT_STATUS(BC_ESIZE, bc_swiglu(y, x, u, 0));
    EXPECT_STATUS(BC_ENULL, bc_residual_add(NULL, x, u, N));
    EXPECT_STATUS(BC_ENULL, bc_residual_add(y, NULL, u, N));
    EXPECT_STATUS(BC_ENULL, bc_residual_add(y, x, NULL, N));
    EXPECT_STATUS(BC_ESIZE, bc_residual_add(y, x, u, 0));
    for (size_t j = 0; j < N_HUGE; j++) {
        EXPECT_STATUS(BC_EOVERFLOW, bc_swiglu(y, x, u, HUGE_SIZES[j]));
        EXPECT_STATUS(BC_EOVERFLOW, bc_residual_add(y, x, u, HUGE_SIZES[j]));
    }
    EXPECT_STATUS(BC_EALIAS, bc_swiglu(xx + 1, xx, u, N));
    EXPECT_STATUS(BC_EALIAS, bc_swiglu(xx + 1, u, xx, N));
    EXPECT_STATUS(BC_EALIAS, bc_residual_add(xx + 1, xx, u, N));
    EXPECT_STATUS(BC_EALIAS, bc_residual_add(xx, u, xx + 1, N));
    EXPECT(h_untouched(y, NB(N)));

    /* good, and in place */
    EXPECT_STATUS(BC_OK, bc_residual_add(y, x, u, N));
    for (int i = 0; i < N; i++)
        EXPECT(y[i] == x[i] + u[i]);
    EXPECT_STATUS(BC_OK, bc_swiglu(y, x, u, N));
    for (int i = 0; i < N; i++)
        EXPECT(close_to(y[i], x[i] / (1.0 + exp(-(double)x[i])) * u[i]));
    EXPECT_STATUS(BC_OK, bc_activation(y, x, N, BC_ACT_RELU));
    for (int i = 0; i < N; i++)
        EXPECT(y[i] == (x[i] > 0 ? x[i] : 0.0f));
    EXPECT(h_guard_ok(y, NB(N)));
    for (size_t i = 0; i < 4; i++) {
        float *z = h_alloc(N);
        memcpy(z, x, NB(N));
        EXPECT_STATUS(BC_OK, bc_activation(y, x, N, kinds[i]));
        EXPECT_STATUS(BC_OK, bc_activation(z, z, N, kinds[i]));
        EXPECT(memcmp(y, z, NB(N)) == 0);
    }
    /* NaN goes through as NaN, +inf stays +inf; nothing hangs */
    float special[4] = {NAN, INFINITY, 1e30f, -1e30f}, out[4];
    for (size_t i = 0; i < 4; i++) {
        EXPECT_STATUS(BC_OK, bc_activation(out, special, 4, kinds[i]));
        EXPECT(isnan(out[0]));
        EXPECT(out[1] == INFINITY);
        EXPECT(out[2] == 1e30f);
    }
}

/* ---- the block and the stack -------------------------------------------- */

static bc_block_config config(size_t d, size_t h, size_t f, int act)
{
    bc_block_config c;
    memset(&c, 0, sizeof c);
    c.d_model = d;
    c.n_heads = h;
    c.d_ff = f;
    c.norm = BC_NORM_RMS;
    c.placement = BC_PLACE_PRE;
    c.activation = act;
    c.causal = 0;
    c.residual = 1;
    c.eps = 1e-5f;
    return c;
}

/* weights for one block, all parts present, drawn from seed */
static bc_block_weights weights(size_t d, size_t f, uint32_t seed)
{
    bc_block_weights w;
    float *p;
#define PART(field, n) (p = h_alloc(n), h_fill(p, (n), seed++, 0.3f), w.field = p)
    PART(qkv_w, 3 * d * d); PART(qkv_b, 3 * d);
    PART(proj_w, d * d); PART(proj_b, d);
    PART(up_w, f * d); PART(up_b, f);
    PART(gate_w, f * d); PART(gate_b, f);
    PART(down_w, d * f); PART(down_b, d);
    PART(ln1_w, d); PART(ln1_b, d);
    PART(ln2_w, d); PART(ln2_b, d);
#undef PART
    return w;
}

static void workspace_checks(void)
{
    size_t *n = h_alloc_bytes(sizeof *n);
    bc_block_config c = config(8, 2, 16, BC_ACT_GELU_TANH), bad;

    EXPECT_STATUS(BC_ENULL, bc_block_workspace_size(NULL, &c, 1, 4));
    EXPECT_STATUS(BC_ENULL, bc_block_workspace_size(n, NULL, 1, 4));
    EXPECT_STATUS(BC_ESIZE, bc_block_workspace_size(n, &c, 0, 4));
    EXPECT_STATUS(BC_ESIZE, bc_block_workspace_size(n, &c, 1, 0));
    bad = c; bad.d_model = 0;
    EXPECT_STATUS(BC_ESIZE, bc_block_workspace_size(n, &bad, 1, 4));
    bad = c; bad.n_heads = 0;
    EXPECT_STATUS(BC_ESIZE, bc_block_workspace_size(n, &bad, 1, 4));
    bad = c; bad.d_ff = 0;
    EXPECT_STATUS(BC_ESIZE, bc_block_workspace_size(n, &bad, 1, 4));
    bad = c; bad.n_heads = 3;                  /* 8 % 3 != 0 */
    EXPECT_STATUS(BC_EHEADS, bc_block_workspace_size(n, &bad, 1, 4));
    bad = c; bad.n_heads = 16;                 /* more heads than features */
    EXPECT_STATUS(BC_EHEADS, bc_block_workspace_size(n, &bad, 1, 4));
    bad = c; bad.d_model = H_NEG; bad.n_heads = 1;
    EXPECT_STATUS(BC_EOVERFLOW, bc_block_workspace_size(n, &bad, 1, 4));
    bad = c; bad.d_ff = H_NEG;
    EXPECT_STATUS(BC_EOVERFLOW, bc_block_workspace_size(n, &bad, 1, 4));
    const int bad_opts[] = {-1, 2, 3, 99};
    for (size_t i = 0; i < 4; i++) {
        bad = c; bad.norm = bad_opts[i] == 2 ? 3 : bad_opts[i];
        EXPECT_STATUS(BC_EOPTION, bc_block_workspace_size(n, &bad, 1, 4));
        bad = c; bad.placement = bad_opts[i];
        EXPECT_STATUS(BC_EOPTION, bc_block_workspace_size(n, &bad, 1, 4));
    }
    const int bad_acts[] = {-1, BC_ACT_SILU, 5, 1000};
    for (size_t i = 0; i < 4; i++) {
        bad = c; bad.activation = bad_acts[i];
        EXPECT_STATUS(BC_EOPTION, bc_block_workspace_size(n, &bad, 1, 4));
    }
    const float bad_eps[] = {-1.0f, NAN, INFINITY};
    for (size_t i = 0; i < 3; i++) {
        bad = c; bad.eps = bad_eps[i];
        EXPECT_STATUS(BC_EOPTION, bc_block_workspace_size(n, &bad, 1, 4));
    }
    for (size_t i = 0; i < N_HUGE; i++) {
        EXPECT_STATUS(BC_EOVERFLOW, bc_block_workspace_size(n, &c, HUGE_SIZES[i], 4));
        EXPECT_STATUS(BC_EOVERFLOW, bc_block_workspace_size(n, &c, 1, HUGE_SIZES[i]));
    }
    EXPECT_STATUS(BC_EOVERFLOW, bc_block_workspace_size(n, &c, (size_t)1 << 32, (size_t)1 << 32));
    EXPECT(h_untouched(n, sizeof *n));
    /* large but addressable shapes: either refused or a size that did not wrap */
    const size_t ts[] = {(size_t)1 << 20, (size_t)1 << 31, (size_t)1 << 36};
    for (size_t i = 0; i < 3; i++) {
        bc_block_config c4 = config(8, 4, 16, BC_ACT_SWIGLU);
        int st = bc_block_workspace_size(n, &c4, 1, ts[i]);
        EXPECT(st == BC_OK || st == BC_EOVERFLOW);
        /* at least xn (N,D) and the larger of attention's att + qkv (N,4D) and the
         * MLP's hidden and gate (N,2F) */
        if (st == BC_OK)
            EXPECT(*n >= ts[i] * (8 + 4 * 8));
    }
    EXPECT_STATUS(BC_OK, bc_block_workspace_size(n, &c, 2, 5));
    EXPECT(*n >= 2 * 5 * (8 + 4 * 8));
}

static void block_checks(int act, int norm, int placement)
{
    enum { D = 8, H = 2, F = 12, B = 2, T = 3, ND = B * T * D };
    bc_block_config c = config(D, H, F, act);
    c.norm = norm;
    c.placement = placement;
    c.causal = placement == BC_PLACE_POST;
    bc_block_weights w = weights(D, F, 100 + (uint32_t)act), bad;
    size_t need = 0;
    EXPECT_STATUS(BC_OK, bc_block_workspace_size(&need, &c, B, T));
    float *x = h_alloc(ND), *y = h_alloc(ND), *work = h_alloc(need);
    h_fill(x, ND, 20, 1.0f);

    EXPECT_STATUS(BC_ENULL, bc_block_forward(NULL, x, &c, &w, B, T, work, need));
    EXPECT_STATUS(BC_ENULL, bc_block_forward(y, NULL, &c, &w, B, T, work, need));
    EXPECT_STATUS(BC_ENULL, bc_block_forward(y, x, NULL, &w, B, T, work, need));
    EXPECT_STATUS(BC_ENULL, bc_block_forward(y, x, &c, NULL, B, T, work, need));
    EXPECT_STATUS(BC_ENULL, bc_block_forward(y, x, &c, &w, B, T, NULL, need));
    bad = w; bad.qkv_w = NULL;
    EXPECT_STATUS(BC_ENULL, bc_block_forward(y, x, &c, &bad, B, T, work, need));
    bad = w; bad.proj_w = NULL;
    EXPECT_STATUS(BC_ENULL, bc_block_forward(y, x, &c, &bad, B, T, work, need));
    bad = w; bad.up_w = NULL;
    EXPECT_STATUS(BC_ENULL, bc_block_forward(y, x, &c, &bad, B, T, work, need));
    bad = w; bad.down_w = NULL;
    EXPECT_STATUS(BC_ENULL, bc_block_forward(y, x, &c, &bad, B, T, work, need));
    bad = w; bad.gate_w = NULL;
    EXPECT_STATUS(act == BC_ACT_SWIGLU ? BC_ENULL : BC_OK,
                  bc_block_forward(y, x, &c, &bad, B, T, work, need));
    h_refill(y, NB(ND));
    h_refill(work, NB(need));
    EXPECT_STATUS(BC_ESIZE, bc_block_forward(y, x, &c, &w, 0, T, work, need));
    EXPECT_STATUS(BC_ESIZE, bc_block_forward(y, x, &c, &w, B, 0, work, need));
    EXPECT_STATUS(BC_EOVERFLOW, bc_block_forward(y, x, &c, &w, H_NEG, T, work, need));
    EXPECT_STATUS(BC_EOVERFLOW, bc_block_forward(y, x, &c, &w, B, H_HALF, work, need));
    EXPECT_STATUS(BC_EWORKSPACE, bc_block_forward(y, x, &c, &w, B, T, work, need - 1));
    EXPECT_STATUS(BC_EWORKSPACE, bc_block_forward(y, x, &c, &w, B, T, work, 0));
    bc_block_config badc = c;
    badc.n_heads = 3;
    EXPECT_STATUS(BC_EHEADS, bc_block_forward(y, x, &badc, &w, B, T, work, need));
    badc = c; badc.activation = BC_ACT_SILU;
    EXPECT_STATUS(BC_EOPTION, bc_block_forward(y, x, &badc, &w, B, T, work, need));
    /* overlaps: y straddling x, work over x or y, a weight inside y or work */
    float *xy = h_alloc(ND + 4);
    h_fill(xy, ND + 4, 20, 1.0f);
    EXPECT_STATUS(BC_EALIAS, bc_block_forward(xy + 4, xy, &c, &w, B, T, work, need));
    EXPECT_STATUS(BC_EALIAS, bc_block_forward(y, x, &c, &w, B, T, x, need));
    EXPECT_STATUS(BC_EALIAS, bc_block_forward(y, x, &c, &w, B, T, y, need));
    bad = w; bad.down_b = y + 3;
    EXPECT_STATUS(BC_EALIAS, bc_block_forward(y, x, &c, &bad, B, T, work, need));
    bad = w; bad.qkv_w = work;
    EXPECT_STATUS(BC_EALIAS, bc_block_forward(y, x, &c, &bad, B, T, work, need));
    EXPECT(h_untouched(y, NB(ND)));
    EXPECT(h_untouched(work, NB(need)));

    /* good: finite, within bounds; in place gives the same bits; the input is kept */
    float *x0 = h_alloc(ND);
    memcpy(x0, x, NB(ND));
    EXPECT_STATUS(BC_OK, bc_block_forward(y, x, &c, &w, B, T, work, need));
    EXPECT(h_finite(y, ND));
    EXPECT(h_guard_ok(y, NB(ND)) && h_guard_ok(work, NB(need)));
    EXPECT(memcmp(x, x0, NB(ND)) == 0);
    float *z = h_alloc(ND);
    memcpy(z, x, NB(ND));
    EXPECT_STATUS(BC_OK, bc_block_forward(z, z, &c, &w, B, T, work, need));
    EXPECT(memcmp(z, y, NB(ND)) == 0);
    /* a larger workspace than needed is fine and gives the same bits */
    float *big = h_alloc(need + 100);
    EXPECT_STATUS(BC_OK, bc_block_forward(z, x, &c, &w, B, T, big, need + 100));
    EXPECT(memcmp(z, y, NB(ND)) == 0);
    /* batch rows are independent: row 1 alone equals row 1 of the batch */
    size_t need1 = 0;
    EXPECT_STATUS(BC_OK, bc_block_workspace_size(&need1, &c, 1, T));
    EXPECT(need1 <= need);
    EXPECT_STATUS(BC_OK, bc_block_forward(z, x + T * D, &c, &w, 1, T, work, need1));
    EXPECT(memcmp(z, y + T * D, NB(T * D)) == 0);
}

static void stack_checks(void)
{
    enum { D = 8, H = 4, F = 8, B = 1, T = 5, ND = B * T * D, L = 3 };
    bc_block_config c = config(D, H, F, BC_ACT_GELU);
    c.norm = BC_NORM_LAYER;
    bc_block_weights w[L];
    for (int i = 0; i < L; i++)
        w[i] = weights(D, F, 200 + 20 * (uint32_t)i);
    size_t need = 0;
    EXPECT_STATUS(BC_OK, bc_block_workspace_size(&need, &c, B, T));
    float *x = h_alloc(ND), *y = h_alloc(ND), *hid = h_alloc(L * ND), *work = h_alloc(need);
    h_fill(x, ND, 30, 1.0f);

    EXPECT_STATUS(BC_ESIZE, bc_stack_forward(y, hid, x, &c, w, 0, B, T, work, need));
    EXPECT_STATUS(BC_EOVERFLOW, bc_stack_forward(y, hid, x, &c, w, H_NEG, B, T, work, need));
    EXPECT_STATUS(BC_EOVERFLOW, bc_stack_forward(y, hid, x, &c, w, H_HALF, B, T, work, need));
    EXPECT_STATUS(BC_ENULL, bc_stack_forward(NULL, hid, x, &c, w, L, B, T, work, need));
    EXPECT_STATUS(BC_ENULL, bc_stack_forward(y, hid, x, &c, NULL, L, B, T, work, need));
    EXPECT_STATUS(BC_EALIAS, bc_stack_forward(y, hid, x, &c, w, L, B, T, hid + ND, need));
    EXPECT_STATUS(BC_EALIAS, bc_stack_forward(y, y, x, &c, w, L, B, T, work, need));
    EXPECT_STATUS(BC_EALIAS, bc_stack_forward(y, x, x, &c, w, L, B, T, work, need));
    bc_block_weights bad[L];
    memcpy(bad, w, sizeof w);
    bad[2].ln2_b = hid + 2 * ND;               /* the last block's weight in hidden */
    EXPECT_STATUS(BC_EALIAS, bc_stack_forward(y, hid, x, &c, bad, L, B, T, work, need));
    bad[2] = w[2];
    bad[1].gate_w = NULL;                      /* gate is not used without swiglu */
    bad[2].up_w = NULL;                        /* but the last block misses up */
    EXPECT_STATUS(BC_ENULL, bc_stack_forward(y, hid, x, &c, bad, L, B, T, work, need));
    EXPECT(h_untouched(y, NB(ND)) && h_untouched(hid, NB(L * ND)));
    EXPECT(h_untouched(work, NB(need)));

    EXPECT_STATUS(BC_OK, bc_stack_forward(y, hid, x, &c, w, L, B, T, work, need));
    EXPECT(h_guard_ok(y, NB(ND)) && h_guard_ok(hid, NB(L * ND)) && h_guard_ok(work, NB(need)));
    EXPECT(memcmp(hid + (L - 1) * ND, y, NB(ND)) == 0);
    /* the stack is the blocks one after another */
    float *z = h_alloc(ND);
    memcpy(z, x, NB(ND));
    for (int i = 0; i < L; i++) {
        EXPECT_STATUS(BC_OK, bc_block_forward(z, z, &c, &w[i], B, T, work, need));
        EXPECT(memcmp(z, hid + i * ND, NB(ND)) == 0);
    }
    /* without hidden, in place */
    memcpy(z, x, NB(ND));
    EXPECT_STATUS(BC_OK, bc_stack_forward(z, NULL, z, &c, w, L, B, T, work, need));
    EXPECT(memcmp(z, y, NB(ND)) == 0);
}

void test_engine(void)
{
    linear_checks();
    norm_checks(0);
    norm_checks(1);
    attention_checks();
    elementwise_checks();
    workspace_checks();
    const int acts[] = {BC_ACT_GELU_TANH, BC_ACT_GELU, BC_ACT_RELU, BC_ACT_SWIGLU};
    for (int a = 0; a < 4; a++)
        for (int norm = BC_NORM_RMS; norm <= BC_NORM_NONE; norm++)
            block_checks(acts[a], norm, a % 2 ? BC_PLACE_POST : BC_PLACE_PRE);
    stack_checks();
}
