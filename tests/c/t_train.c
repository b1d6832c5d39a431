/* t_train.c: the backward and training entry points (bc_engine.h's
 * bc_stack_backward, bc_gpt.h's training part): hostile arguments refused with
 * nothing written, gradients the same bits at any thread count and in place,
 * accumulation exact, a coarse finite-difference check (the exact checks
 * against the NumPy oracle and PyTorch are in tests/test_train.py). */
#include <math.h>
#include <string.h>

#include "harness.h"

#define NB(n) ((n) * sizeof(float))

/* ---- the block's backward ------------------------------------------------ */

enum { SD = 8, SH = 2, SF = 12, SB = 2, ST = 5, NBLK = 2 };

typedef struct {
    float *w[NBLK][14];     /* each block's weights, bc_block_weights order */
    float *g[NBLK][14];     /* and gradients */
    bc_block_weights bw[NBLK];
    bc_block_grads bg[NBLK];
} stack_t_;

static const size_t *part_sizes(void)
{
    static size_t n[14];
    const size_t d = SD, f = SF;
    const size_t s[14] = {3 * d * d, 3 * d, d * d, d, f * d, f, f * d, f, d * f, d, d, d, d, d};
    memcpy(n, s, sizeof s);
    return n;
}

static void stack_make(stack_t_ *s, uint32_t seed)
{
    const size_t *n = part_sizes();
    for (int i = 0; i < NBLK; i++) {
        for (int k = 0; k < 14; k++) {
            s->w[i][k] = h_alloc(n[k]);
            h_fill(s->w[i][k], n[k], seed + 31u * (uint32_t)(i * 14 + k), 0.3f);
            s->g[i][k] = h_alloc(n[k]);
            memset(s->g[i][k], 0, NB(n[k]));
        }
        float **w = s->w[i], **g = s->g[i];
        const bc_block_weights bw = {w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8], w[9],
                                     w[10], w[11], w[12], w[13]};
        const bc_block_grads bg = {g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9],
                                   g[10], g[11], g[12], g[13]};
        s->bw[i] = bw;
        s->bg[i] = bg;
    }
}

static void stack_zero(stack_t_ *s)
{
    const size_t *n = part_sizes();
    for (int i = 0; i < NBLK; i++)
        for (int k = 0; k < 14; k++)
            memset(s->g[i][k], 0, NB(n[k]));
}

/* every gradient equals ref (tol 0: bit for bit) or mul * ref within tol relative */
static int stack_same(const stack_t_ *a, float *const ref[NBLK][14], float mul, float tol)
{
    const size_t *n = part_sizes();
    for (int i = 0; i < NBLK; i++)
        for (int k = 0; k < 14; k++)
            for (size_t j = 0; j < n[k]; j++) {
                const float want = ref[i][k][j] * mul, got = a->g[i][k][j];
                if (tol == 0.0f ? got != want : fabsf(got - want) > tol * (1e-3f + fabsf(want)))
                    return 0;
            }
    return 1;
}

/* sum(dy * stack(x)) for the finite differences */
static double stack_loss(const bc_block_config *c, const bc_block_weights *w, const float *x,
                         const float *dy, float *y, float *work, size_t nw)
{
    double s = 0.0;
    if (bc_stack_forward(y, NULL, x, c, w, NBLK, SB, ST, work, nw) != BC_OK)
        return NAN;
    for (size_t i = 0; i < SB * ST * SD; i++)
        s += (double)y[i] * dy[i];
    return s;
}

static void stack_checks(int norm, int placement, int activation, int causal, int residual)
{
    const bc_block_config c = {SD, SH, SF, norm, placement, activation, causal, residual, 1e-5f};
    stack_t_ s;
    stack_make(&s, 7u);
    if (activation != BC_ACT_SWIGLU)
        for (int i = 0; i < NBLK; i++)
            s.bw[i].gate_w = s.bw[i].gate_b = NULL;
    if (norm != BC_NORM_LAYER)
        for (int i = 0; i < NBLK; i++)
            s.bw[i].ln1_b = s.bw[i].ln2_b = NULL;
    if (norm == BC_NORM_NONE)
        for (int i = 0; i < NBLK; i++)
            s.bw[i].ln1_w = s.bw[i].ln2_w = NULL;
    size_t nw = 0, nf = 0;
    EXPECT_STATUS(BC_OK, bc_stack_backward_workspace_size(&nw, &c, NBLK, SB, ST));
    EXPECT_STATUS(BC_OK, bc_block_workspace_size(&nf, &c, SB, ST));
    const size_t nx = SB * ST * SD;
    float *x = h_alloc(nx), *dy = h_alloc(nx), *dx = h_alloc(nx), *work = h_alloc(nw);
    float *y = h_alloc(nx), *fwork = h_alloc(nf);
    h_fill(x, nx, 3u, 1.0f);
    h_fill(dy, nx, 4u, 1.0f);
    EXPECT_STATUS(BC_OK, bc_stack_backward(dx, s.bg, dy, x, &c, s.bw, NBLK, SB, ST, work, nw));
    EXPECT(h_finite(dx, nx) && h_guard_ok(dx, NB(nx)) && h_guard_ok(work, NB(nw)));
    /* keep the first result */
    float *ref[NBLK][14], *dx1 = h_alloc(nx);
    const size_t *n = part_sizes();
    memcpy(dx1, dx, NB(nx));
    for (int i = 0; i < NBLK; i++)
        for (int k = 0; k < 14; k++) {
            ref[i][k] = h_alloc(n[k]);
            memcpy(ref[i][k], s.g[i][k], NB(n[k]));
        }
    /* adding: a second call doubles every gradient (up to rounding: the products
     * add into the buffer block by block; the portable kernels' separate multiply
     * and add round a sum of many terms to 2e-5 relative) */
    EXPECT_STATUS(BC_OK, bc_stack_backward(dx, s.bg, dy, x, &c, s.bw, NBLK, SB, ST, work, nw));
    EXPECT(memcmp(dx, dx1, NB(nx)) == 0);
    EXPECT(stack_same(&s, ref, 2.0f, 1e-4f));
    /* the same bits at 1, 2 and 3 threads, and in place (dx = dy) */
    const int counts[] = {1, 2, 3};
    for (int i = 0; i < 3; i++) {
        EXPECT_STATUS(BC_OK, bc_set_num_threads(counts[i]));
        stack_zero(&s);
        EXPECT_STATUS(BC_OK, bc_stack_backward(dx, s.bg, dy, x, &c, s.bw, NBLK, SB, ST, work, nw));
        EXPECT(memcmp(dx, dx1, NB(nx)) == 0 && stack_same(&s, ref, 1.0f, 0.0f));
    }
    EXPECT_STATUS(BC_OK, bc_set_num_threads(0));
    float *inplace = h_alloc(nx);
    memcpy(inplace, dy, NB(nx));
    stack_zero(&s);
    EXPECT_STATUS(BC_OK, bc_stack_backward(inplace, s.bg, inplace, x, &c, s.bw, NBLK, SB, ST,
                                           work, nw));
    EXPECT(memcmp(inplace, dx1, NB(nx)) == 0 && stack_same(&s, ref, 1.0f, 0.0f));
    /* finite differences of sum(dy * y) in float32: coarse, but a wrong formula
     * (a sign, a missing term) is far outside */
    const float h = 1e-2f;
    const struct { float *p; float g; } probes[] = {
        {&x[7], dx1[7]}, {&s.w[0][0][5], ref[0][0][5]}, {&s.w[1][8][3], ref[1][8][3]},
        {&s.w[0][2][9], ref[0][2][9]}, {&s.w[1][4][11], ref[1][4][11]},
    };
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        const float keep = *probes[i].p;
        *probes[i].p = keep + h;
        const double up = stack_loss(&c, s.bw, x, dy, y, fwork, nf);
        *probes[i].p = keep - h;
        const double down = stack_loss(&c, s.bw, x, dy, y, fwork, nf);
        *probes[i].p = keep;
        const double fd = (up - down) / (2.0 * h);
        EXPECT(fabs(fd - probes[i].g) <= 2e-2 * (1.0 + fabs(fd)));
    }
}

static void stack_refusals(void)
{
    const bc_block_config c = {SD, SH, SF, BC_NORM_LAYER, BC_PLACE_PRE, BC_ACT_SWIGLU, 1, 1, 1e-5f};
    stack_t_ s;
    stack_make(&s, 11u);
    size_t nw = 0;
    EXPECT_STATUS(BC_ENULL, bc_stack_backward_workspace_size(NULL, &c, NBLK, SB, ST));
    EXPECT_STATUS(BC_ENULL, bc_stack_backward_workspace_size(&nw, NULL, NBLK, SB, ST));
    EXPECT_STATUS(BC_ESIZE, bc_stack_backward_workspace_size(&nw, &c, 0, SB, ST));
    EXPECT_STATUS(BC_ESIZE, bc_stack_backward_workspace_size(&nw, &c, NBLK, 0, ST));
    EXPECT_STATUS(BC_EOVERFLOW, bc_stack_backward_workspace_size(&nw, &c, NBLK, H_HALF, 2));
    EXPECT_STATUS(BC_EOVERFLOW, bc_stack_backward_workspace_size(&nw, &c, H_NEG, SB, ST));
    bc_block_config bad = c;
    bad.n_heads = 3;
    EXPECT_STATUS(BC_EHEADS, bc_stack_backward_workspace_size(&nw, &bad, NBLK, SB, ST));
    bad = c;
    bad.activation = 9;
    EXPECT_STATUS(BC_EOPTION, bc_stack_backward_workspace_size(&nw, &bad, NBLK, SB, ST));
    EXPECT_STATUS(BC_OK, bc_stack_backward_workspace_size(&nw, &c, NBLK, SB, ST));
    const size_t nx = SB * ST * SD;
    float *x = h_alloc(nx), *dy = h_alloc(nx), *dx = h_alloc(nx), *work = h_alloc(nw);
    h_fill(x, nx, 5u, 1.0f);
    h_fill(dy, nx, 6u, 1.0f);
    h_refill(dx, NB(nx));
    const size_t *n = part_sizes();
    for (int i = 0; i < NBLK; i++)
        for (int k = 0; k < 14; k++)
            h_refill(s.g[i][k], NB(n[k]));
#define UNTOUCHED_ALL() do {                                               \
        int ok = h_untouched(dx, NB(nx));                                  \
        for (int i_ = 0; i_ < NBLK; i_++)                                  \
            for (int k_ = 0; k_ < 14; k_++)                                \
                ok = ok && h_untouched(s.g[i_][k_], NB(n[k_]));            \
        EXPECT(ok);                                                        \
    } while (0)
    EXPECT_STATUS(BC_ENULL, bc_stack_backward(NULL, s.bg, dy, x, &c, s.bw, NBLK, SB, ST, work, nw));
    EXPECT_STATUS(BC_ENULL, bc_stack_backward(dx, NULL, dy, x, &c, s.bw, NBLK, SB, ST, work, nw));
    EXPECT_STATUS(BC_ENULL, bc_stack_backward(dx, s.bg, NULL, x, &c, s.bw, NBLK, SB, ST, work, nw));
    EXPECT_STATUS(BC_ENULL, bc_stack_backward(dx, s.bg, dy, NULL, &c, s.bw, NBLK, SB, ST, work, nw));
    EXPECT_STATUS(BC_ENULL, bc_stack_backward(dx, s.bg, dy, x, NULL, s.bw, NBLK, SB, ST, work, nw));
    EXPECT_STATUS(BC_ENULL, bc_stack_backward(dx, s.bg, dy, x, &c, NULL, NBLK, SB, ST, work, nw));
    EXPECT_STATUS(BC_ENULL, bc_stack_backward(dx, s.bg, dy, x, &c, s.bw, NBLK, SB, ST, NULL, nw));
    EXPECT_STATUS(BC_EWORKSPACE, bc_stack_backward(dx, s.bg, dy, x, &c, s.bw, NBLK, SB, ST, work, nw - 1));
    EXPECT_STATUS(BC_ESIZE, bc_stack_backward(dx, s.bg, dy, x, &c, s.bw, 0, SB, ST, work, nw));
    /* a required weight missing */
    bc_block_weights wmiss[NBLK];
    memcpy(wmiss, s.bw, sizeof wmiss);
    wmiss[1].gate_w = NULL;
    EXPECT_STATUS(BC_ENULL, bc_stack_backward(dx, s.bg, dy, x, &c, wmiss, NBLK, SB, ST, work, nw));
    /* overlaps: dx on x; a gradient on a weight, on another gradient, on dy, on the work */
    EXPECT_STATUS(BC_EALIAS, bc_stack_backward(x, s.bg, dy, x, &c, s.bw, NBLK, SB, ST, work, nw));
    bc_block_grads gbad[NBLK];
    memcpy(gbad, s.bg, sizeof gbad);
    gbad[1].up_w = s.w[0][4];
    EXPECT_STATUS(BC_EALIAS, bc_stack_backward(dx, gbad, dy, x, &c, s.bw, NBLK, SB, ST, work, nw));
    memcpy(gbad, s.bg, sizeof gbad);
    gbad[1].down_b = gbad[0].down_b;
    EXPECT_STATUS(BC_EALIAS, bc_stack_backward(dx, gbad, dy, x, &c, s.bw, NBLK, SB, ST, work, nw));
    memcpy(gbad, s.bg, sizeof gbad);
    gbad[0].ln1_w = gbad[0].qkv_w + 4;  /* inside the same block's qkv gradient */
    EXPECT_STATUS(BC_EALIAS, bc_stack_backward(dx, gbad, dy, x, &c, s.bw, NBLK, SB, ST, work, nw));
    memcpy(gbad, s.bg, sizeof gbad);
    gbad[0].proj_b = dy;
    EXPECT_STATUS(BC_EALIAS, bc_stack_backward(dx, gbad, dy, x, &c, s.bw, NBLK, SB, ST, work, nw));
    memcpy(gbad, s.bg, sizeof gbad);
    gbad[1].ln2_b = work + 3;
    EXPECT_STATUS(BC_EALIAS, bc_stack_backward(dx, gbad, dy, x, &c, s.bw, NBLK, SB, ST, work, nw));
    /* the structs themselves inside the workspace */
    EXPECT_STATUS(BC_EALIAS, bc_stack_backward(dx, (const bc_block_grads *)(void *)work, dy, x, &c,
                                               s.bw, NBLK, SB, ST, work, nw));
    UNTOUCHED_ALL();
#undef UNTOUCHED_ALL
}

/* ---- the GPT's loss, gradient and AdamW ------------------------------------ */

static void gpt_train_checks(bc_gpt_config c)
{
    enum { B = 2, T = 5 };
    size_t nbytes = 0, nw = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_param_bytes(&nbytes, &c));
    EXPECT_STATUS(BC_OK, bc_gpt_train_workspace_size(&nw, &c, B, T));
    const size_t np = nbytes / 4, V = c.vocab;
    float *p = h_alloc(np), *g = h_alloc(np), *work = h_alloc(nw);
    h_fill(p, np, 77u, 0.2f);
    memset(g, 0, NB(np));
    int64_t *ids = h_alloc_bytes(B * T * sizeof(int64_t)), *tg = h_alloc_bytes(B * T * sizeof(int64_t));
    int32_t *ids32 = h_alloc_bytes(B * T * sizeof(int32_t)), *tg32 = h_alloc_bytes(B * T * sizeof(int32_t));
    for (int i = 0; i < B * T; i++) {
        ids32[i] = (int32_t)(ids[i] = (i * 5 + 2) % (int64_t)V);
        tg32[i] = (int32_t)(tg[i] = i % 4 == 0 ? -100 : (i * 3 + 1) % (int64_t)V);
    }
    float loss = 0.0f, loss2 = 0.0f;
    size_t count = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_grad(&loss, &count, g, p, &c, ids, tg, BC_IDS_INT64, -100, B, T,
                                     work, nw));
    EXPECT(count == B * T - 3 && isfinite(loss) && loss > 0.0f && h_finite(g, np));
    EXPECT(h_guard_ok(g, NB(np)) && h_guard_ok(work, NB(nw)));
    float *g1 = h_alloc(np);
    memcpy(g1, g, NB(np));
    /* the loss alone, int32 ids: the same loss */
    EXPECT_STATUS(BC_OK, bc_gpt_grad(&loss2, NULL, NULL, p, &c, ids32, tg32, BC_IDS_INT32, -100,
                                     B, T, work, nw));
    EXPECT(loss2 == loss);
    /* the same bits at 1, 2, 3 threads; accumulation doubles exactly */
    const int counts[] = {1, 2, 3};
    for (int i = 0; i < 3; i++) {
        EXPECT_STATUS(BC_OK, bc_set_num_threads(counts[i]));
        memset(g, 0, NB(np));
        EXPECT_STATUS(BC_OK, bc_gpt_grad(&loss2, NULL, g, p, &c, ids, tg, BC_IDS_INT64, -100, B, T,
                                         work, nw));
        EXPECT(loss2 == loss && memcmp(g, g1, NB(np)) == 0);
    }
    EXPECT_STATUS(BC_OK, bc_set_num_threads(0));
    EXPECT_STATUS(BC_OK, bc_gpt_grad(&loss2, NULL, g, p, &c, ids, tg, BC_IDS_INT64, -100, B, T,
                                     work, nw));
    int doubled = 1;  /* up to rounding: the products add into the buffer block by block */
    for (size_t i = 0; i < np; i++)
        doubled = doubled && fabsf(g[i] - 2.0f * g1[i]) <= 1e-5f * (1e-3f + fabsf(2.0f * g1[i]));
    EXPECT(doubled);
    /* every target ignored: NaN, count 0, nothing added */
    int64_t *none = h_alloc_bytes(B * T * sizeof(int64_t));
    for (int i = 0; i < B * T; i++)
        none[i] = 7;
    memcpy(g, g1, NB(np));
    EXPECT_STATUS(BC_OK, bc_gpt_grad(&loss2, &count, g, p, &c, ids, none, BC_IDS_INT64, 7, B, T,
                                     work, nw));
    EXPECT(isnan(loss2) && count == 0 && memcmp(g, g1, NB(np)) == 0);
    /* a coarse finite difference on a few parameters (float32, h = 1e-2) */
    const size_t probe[] = {1, np / 3, np / 2 + 1, np - 5};
    for (size_t k = 0; k < sizeof probe / sizeof probe[0]; k++) {
        const size_t i = probe[k];
        const float keep = p[i];
        float up = 0.0f, down = 0.0f;
        p[i] = keep + 1e-2f;
        EXPECT_STATUS(BC_OK, bc_gpt_grad(&up, NULL, NULL, p, &c, ids, tg, BC_IDS_INT64, -100, B, T, work, nw));
        p[i] = keep - 1e-2f;
        EXPECT_STATUS(BC_OK, bc_gpt_grad(&down, NULL, NULL, p, &c, ids, tg, BC_IDS_INT64, -100, B, T, work, nw));
        p[i] = keep;
        const double fd = ((double)up - (double)down) / 2e-2;
        EXPECT(fabs(fd - g1[i]) <= 2e-2 + 5e-2 * fabs(fd));
    }
    /* the norm: the square root of the sum of squares */
    double norm = 0.0, want = 0.0;
    for (size_t i = 0; i < np; i++)
        want += (double)g1[i] * g1[i];
    EXPECT_STATUS(BC_OK, bc_gpt_grad_norm(&norm, g1, &c));
    EXPECT(fabs(norm - sqrt(want)) <= 1e-9 * sqrt(want));
    /* one AdamW step against the formula, element by element */
    float *m = h_alloc(np), *v = h_alloc(np), *p2 = h_alloc(np);
    memset(m, 0, NB(np));
    memset(v, 0, NB(np));
    memcpy(p2, p, NB(np));
    bc_adamw_config o = {1e-2, 0.9, 0.95, 1e-8, 0.0, BC_DECAY_NONE, 1.0, 1};
    EXPECT_STATUS(BC_OK, bc_gpt_adamw(p2, m, v, g1, &c, &o));
    int close = 1;
    for (size_t i = 0; i < np; i++) {
        /* step 1: m = 0.1 g, v = 0.05 g^2: p - lr g / (|g| + eps) */
        const double gi = g1[i], want_p = p[i] - 1e-2 * gi / (fabs(gi) + 1e-8);
        close = close && fabs(p2[i] - want_p) <= 1e-6 + 1e-6 * fabs(want_p);
    }
    EXPECT(close);
    /* refusals, nothing written */
    float *gr = h_alloc(np);
    h_refill(gr, NB(np));
    int64_t *bad_t = h_alloc_bytes(B * T * sizeof(int64_t)), *bad_i = h_alloc_bytes(B * T * sizeof(int64_t));
    memcpy(bad_t, tg, B * T * sizeof(int64_t));
    memcpy(bad_i, ids, B * T * sizeof(int64_t));
    bad_t[B * T - 1] = (int64_t)V;
    bad_i[3] = -1;
    EXPECT_STATUS(BC_ENULL, bc_gpt_grad(NULL, NULL, gr, p, &c, ids, tg, BC_IDS_INT64, -100, B, T, work, nw));
    EXPECT_STATUS(BC_ENULL, bc_gpt_grad(&loss2, NULL, gr, NULL, &c, ids, tg, BC_IDS_INT64, -100, B, T, work, nw));
    EXPECT_STATUS(BC_ENULL, bc_gpt_grad(&loss2, NULL, gr, p, &c, ids, NULL, BC_IDS_INT64, -100, B, T, work, nw));
    EXPECT_STATUS(BC_ENULL, bc_gpt_grad(&loss2, NULL, gr, p, &c, ids, tg, BC_IDS_INT64, -100, B, T, NULL, nw));
    EXPECT_STATUS(BC_EOPTION, bc_gpt_grad(&loss2, NULL, gr, p, &c, ids, tg, 16, -100, B, T, work, nw));
    EXPECT_STATUS(BC_ERANGE, bc_gpt_grad(&loss2, NULL, gr, p, &c, ids, bad_t, BC_IDS_INT64, -100, B, T, work, nw));
    EXPECT_STATUS(BC_ERANGE, bc_gpt_grad(&loss2, NULL, gr, p, &c, bad_i, tg, BC_IDS_INT64, -100, B, T, work, nw));
    EXPECT_STATUS(BC_ESIZE, bc_gpt_grad(&loss2, NULL, gr, p, &c, ids, tg, BC_IDS_INT64, -100, 0, T, work, nw));
    EXPECT_STATUS(BC_ECONTEXT, bc_gpt_grad(&loss2, NULL, gr, p, &c, ids, tg, BC_IDS_INT64, -100, 1, c.context + 1, work, nw));
    EXPECT_STATUS(BC_EOVERFLOW, bc_gpt_grad(&loss2, NULL, gr, p, &c, ids, tg, BC_IDS_INT64, -100, H_NEG, T, work, nw));
    EXPECT_STATUS(BC_EWORKSPACE, bc_gpt_grad(&loss2, NULL, gr, p, &c, ids, tg, BC_IDS_INT64, -100, B, T, work, nw - 1));
    EXPECT_STATUS(BC_EALIAS, bc_gpt_grad(&loss2, NULL, p, p, &c, ids, tg, BC_IDS_INT64, -100, B, T, work, nw));
    EXPECT_STATUS(BC_EALIAS, bc_gpt_grad(&loss2, NULL, work, p, &c, ids, tg, BC_IDS_INT64, -100, B, T, work, nw));
    EXPECT_STATUS(BC_EALIAS, bc_gpt_grad(&loss2, NULL, gr, p, &c, ids, tg, BC_IDS_INT64, -100, B, T,
                                         (float *)(void *)ids, nw));
    EXPECT_STATUS(BC_EALIAS, bc_gpt_grad(gr + 1, NULL, gr, p, &c, ids, tg, BC_IDS_INT64, -100, B, T, work, nw));
    bc_gpt_config c16 = c;
    c16.dtype = BC_DTYPE_BF16;
    EXPECT_STATUS(BC_EOPTION, bc_gpt_grad(&loss2, NULL, gr, p, &c16, ids, tg, BC_IDS_INT64, -100, B, T, work, nw));
    EXPECT_STATUS(BC_EOPTION, bc_gpt_train_workspace_size(&nw, &c16, B, T));
    EXPECT(h_untouched(gr, NB(np)));
    size_t n2 = 0;
    EXPECT_STATUS(BC_ENULL, bc_gpt_train_workspace_size(NULL, &c, B, T));
    EXPECT_STATUS(BC_ESIZE, bc_gpt_train_workspace_size(&n2, &c, B, 0));
    EXPECT_STATUS(BC_ECONTEXT, bc_gpt_train_workspace_size(&n2, &c, B, c.context + 1));
    EXPECT_STATUS(BC_EOVERFLOW, bc_gpt_train_workspace_size(&n2, &c, H_HALF, 2));
    EXPECT_STATUS(BC_ENULL, bc_gpt_grad_norm(NULL, g1, &c));
    EXPECT_STATUS(BC_ENULL, bc_gpt_grad_norm(&norm, NULL, &c));
    EXPECT_STATUS(BC_ENULL, bc_gpt_grad_norm(&norm, g1, NULL));
    /* AdamW's refusals leave all three buffers as they were */
    memcpy(p2, p, NB(np));
    float *m2 = h_alloc(np), *v2 = h_alloc(np);
    memcpy(m2, m, NB(np));
    memcpy(v2, v, NB(np));
    const bc_adamw_config good = {1e-3, 0.9, 0.999, 1e-8, 0.01, BC_DECAY_MATRICES, 1.0, 2};
    bc_adamw_config bad[9];
    for (int i = 0; i < 9; i++)
        bad[i] = good;
    bad[0].beta1 = 1.0; bad[1].beta2 = -0.1; bad[2].lr = -1.0; bad[3].lr = NAN;
    bad[4].eps = INFINITY; bad[5].weight_decay = -0.5; bad[6].decay = 7; bad[7].step = 0;
    bad[8].grad_scale = NAN;
    for (int i = 0; i < 9; i++)
        EXPECT_STATUS(BC_EOPTION, bc_gpt_adamw(p2, m2, v2, g1, &c, &bad[i]));
    EXPECT_STATUS(BC_EOPTION, bc_gpt_adamw(p2, m2, v2, g1, &c16, &good));
    EXPECT_STATUS(BC_ENULL, bc_gpt_adamw(NULL, m2, v2, g1, &c, &good));
    EXPECT_STATUS(BC_ENULL, bc_gpt_adamw(p2, m2, v2, g1, &c, NULL));
    EXPECT_STATUS(BC_EALIAS, bc_gpt_adamw(p2, m2, m2, g1, &c, &good));
    EXPECT_STATUS(BC_EALIAS, bc_gpt_adamw(p2, m2, v2, p2 + 1, &c, &good));
    EXPECT(memcmp(p2, p, NB(np)) == 0 && memcmp(m2, m, NB(np)) == 0 && memcmp(v2, v, NB(np)) == 0);
    /* decay: with a zero gradient, matrices shrink by (1 - lr wd) and vectors stay */
    memset(g, 0, NB(np));
    memset(m2, 0, NB(np));
    memset(v2, 0, NB(np));
    const bc_adamw_config dec = {0.1, 0.9, 0.999, 1e-8, 0.5, BC_DECAY_MATRICES, 1.0, 1};
    EXPECT_STATUS(BC_OK, bc_gpt_adamw(p2, m2, v2, g, &c, &dec));
    size_t off = 0, nb = 0, ndim = 0, shape[2];
    int dt = 0, packed = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_tensor_info(NULL, 0, &off, &nb, &dt, &packed, &ndim, shape, &c, 0));
    EXPECT(p2[off / 4] == p[off / 4] * (float)(1.0 - 0.05));
    size_t nt = 0, vecs = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_tensor_count(&nt, &c));
    for (size_t k = 0; k < nt; k++) {
        EXPECT_STATUS(BC_OK, bc_gpt_tensor_info(NULL, 0, &off, &nb, &dt, &packed, &ndim, shape, &c, k));
        if (ndim == 1) {
            vecs++;
            EXPECT(memcmp(p2 + off / 4, p + off / 4, nb) == 0);
        }
    }
    EXPECT(vecs > 0);
}

void test_train(void)
{
    const int norms[] = {BC_NORM_RMS, BC_NORM_LAYER, BC_NORM_NONE};
    const int acts[] = {BC_ACT_GELU_TANH, BC_ACT_GELU, BC_ACT_RELU, BC_ACT_SWIGLU};
    for (int n = 0; n < 3; n++)
        for (int pl = BC_PLACE_PRE; pl <= BC_PLACE_POST; pl++)
            for (int a = 0; a < 4; a++)
                stack_checks(norms[n], pl, acts[a], (n + a) % 2, n != 2 || a != 1);
    stack_refusals();
    gpt_train_checks(h_gpt2_config(11, 6, 8, 2, 2, 1));
    gpt_train_checks(h_gpt2_config(37, 7, 32, 4, 1, 0));
    gpt_train_checks(h_llama_config(0));
    bc_gpt_config post = h_llama_config(1);
    post.placement = BC_PLACE_POST;
    post.kv_heads = 1;
    gpt_train_checks(post);
}
