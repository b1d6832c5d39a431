/* elementwise.c: norms, activations and the residual addition.
 * Rows (norms) and chunks (the rest) are spread over threads when large;
 * each element's result is the same whichever thread computes it. */
#include <float.h>
#include <math.h>
#include "bc_parallel.h"

/* elements per parallel chunk (a multiple of every vector width) */
#define EW_CHUNK 16384

/* The squares are summed in double, where no finite float32 row overflows
 * (|x| < 2^128, so x^2 < 2^256) or underflows (x^2 >= 2^-298). When the mean
 * square is a normal float32 the scale is taken in float32 as always; when it
 * is not (rows beyond about 1.8e19, where it overflows float32, or below about
 * 1e-19, where it underflows), the row is scaled in double, so that every
 * finite row normalises (RMS 1 up to rounding, for eps small beside it). */
static void rmsnorm_row(float *yi, const float *xi, const float *g, size_t c, float eps)
{
    double ss = 0.0;
    for (size_t j = 0; j < c; j++)
        ss += (double)xi[j] * xi[j];
    const double ms = ss / (double)c;
    const float den = (float)ms + eps;
    if (den >= FLT_MIN && isfinite(den)) {
        const float inv = 1.0f / sqrtf(den);
        for (size_t j = 0; j < c; j++)
            yi[j] = g ? xi[j] * inv * g[j] : xi[j] * inv;
        return;
    }
    const double inv = 1.0 / sqrt(ms + (double)eps);
    for (size_t j = 0; j < c; j++) {
        const float t = (float)(xi[j] * inv);
        yi[j] = g ? t * g[j] : t;
    }
}

static void layernorm_row(float *yi, const float *xi, const float *g, const float *b,
                          size_t c, float eps)
{
    double s = 0.0;
    for (size_t j = 0; j < c; j++)
        s += xi[j];
    const double mean = s / (double)c;
    double var = 0.0;
    for (size_t j = 0; j < c; j++) {
        const double d = xi[j] - mean;
        var += d * d;
    }
    const float m = (float)mean;
    const float inv = (float)(1.0 / sqrt(var / (double)c + (double)eps));
    for (size_t j = 0; j < c; j++) {
        float t = (xi[j] - m) * inv;
        if (g) t *= g[j];
        if (b) t += b[j];
        yi[j] = t;
    }
}

/* One norm call: RMSNorm or LayerNorm rows of C, gain g and shift b or NULL. */
typedef struct {
    int layer;              /* 0: RMSNorm (b unused), 1: LayerNorm */
    float *y;
    const float *x, *g, *b;
    size_t c;
    float eps;
} norm_op;

static void norm_row(const void *arg, size_t i)
{
    const norm_op *o = arg;
    if (o->layer)
        layernorm_row(o->y + i * o->c, o->x + i * o->c, o->g, o->b, o->c, o->eps);
    else
        rmsnorm_row(o->y + i * o->c, o->x + i * o->c, o->g, o->c, o->eps);
}

/* The op over n rows, on as many threads as its size is worth. */
static void norm_run(const norm_op *o, size_t n, double flops_per_elem, const bc_ctx *cx)
{
    const double elems = (double)n * (double)o->c;
    bc_rt_rows(bc_rt_threads(cx, flops_per_elem * elems, 8.0 * elems), n, norm_row, o);
}

// y (N,C), x (N,C), g (C) or NULL
void bc_k_rmsnorm(float *y, const float *x, const float *g, size_t n, size_t c, float eps,
                  const bc_ctx *cx)
{
    const norm_op o = {0, y, x, g, NULL, c, eps};
    norm_run(&o, n, 4.0, cx);
}

// y (N,C), x (N,C), g (C) or NULL, b (C) or NULL
void bc_k_layernorm(float *y, const float *x, const float *g, const float *b,
                    size_t n, size_t c, float eps, const bc_ctx *cx)
{
    const norm_op o = {1, y, x, g, b, c, eps};
    norm_run(&o, n, 6.0, cx);
}

/* One elementwise kernel call: which of the three, its operands and its
 * implementation. */
typedef enum { EW_ACT, EW_SWIGLU, EW_ADD, EW_MUL, EW_ADD_SCALED, EW_SCALE } ew_kind;
typedef struct {
    ew_kind op;
    int act;                /* BC_ACT_* for EW_ACT */
    float *y;
    const float *a, *b;     /* x (act, scale); gate, up (swiglu); a, b (add, mul, add_scaled) */
    const bc_kernel_table *kt;
    float s;                /* the scalar of add_scaled and scale */
} ew_op;

/* elements [i, i+m) of the op */
static void ew_span(const ew_op *o, size_t i, size_t m)
{
    switch (o->op) {
    case EW_ACT: o->kt->act(o->y + i, o->a + i, m, o->act); break;
    case EW_SWIGLU: o->kt->swiglu(o->y + i, o->a + i, o->b + i, m); break;
    case EW_ADD: o->kt->add(o->y + i, o->a + i, o->b + i, m); break;
    case EW_MUL:
        for (size_t j = i; j < i + m; j++)
            o->y[j] = o->a[j] * o->b[j];
        break;
    case EW_ADD_SCALED:
        for (size_t j = i; j < i + m; j++) {
            const float t = o->s * o->b[j];  /* rounded, then added (no contraction) */
            o->y[j] = o->a ? o->a[j] + t : t;
        }
        break;
    case EW_SCALE:
        for (size_t j = i; j < i + m; j++)
            o->y[j] = o->a[j] * o->s;
        break;
    }
}

typedef struct {
    const ew_op *o;
    size_t n;
} ew_job;

static void ew_unit(const void *arg, size_t u, int t)
{
    const ew_job *j = arg;
    const size_t i = u * EW_CHUNK;
    ew_span(j->o, i, j->n - i < EW_CHUNK ? j->n - i : EW_CHUNK);
}

/* The op over n elements: in one call when one thread does it, else in
 * EW_CHUNK chunks spread over the threads. */
static void ew_run(const ew_op *o, size_t n, double flops_per_elem, const bc_ctx *cx)
{
    const int nt = bc_rt_threads(cx, flops_per_elem * (double)n, 12.0 * (double)n);
    if (nt <= 1) {
        ew_span(o, 0, n);
        return;
    }
    const ew_job j = {o, n};
    bc_rt_run(nt, (n + EW_CHUNK - 1) / EW_CHUNK, ew_unit, &j);
}

// y (n), x (n)
void bc_k_act(float *y, const float *x, size_t n, int kind, const bc_ctx *cx)
{
    const ew_op o = {EW_ACT, kind, y, x, NULL, cx->kt, 0.0f};
    ew_run(&o, n, 20.0, cx);
}

// y (n), gate (n), up (n)
void bc_k_swiglu(float *y, const float *gate, const float *up, size_t n, const bc_ctx *cx)
{
    const ew_op o = {EW_SWIGLU, 0, y, gate, up, cx->kt, 0.0f};
    ew_run(&o, n, 20.0, cx);
}

// y (n), a (n), b (n)
void bc_k_add(float *y, const float *a, const float *b, size_t n, const bc_ctx *cx)
{
    const ew_op o = {EW_ADD, 0, y, a, b, cx->kt, 0.0f};
    ew_run(&o, n, 2.0, cx);
}

// y (n), a (n), b (n)
void bc_k_mul(float *y, const float *a, const float *b, size_t n, const bc_ctx *cx)
{
    const ew_op o = {EW_MUL, 0, y, a, b, cx->kt, 0.0f};
    ew_run(&o, n, 2.0, cx);
}

// y (n), a (n) or NULL, b (n)
void bc_k_add_scaled(float *y, const float *a, const float *b, float s, size_t n,
                     const bc_ctx *cx)
{
    const ew_op o = {EW_ADD_SCALED, 0, y, a, b, cx->kt, s};
    ew_run(&o, n, 2.0, cx);
}

// y (n), x (n)
void bc_k_scale(float *y, const float *x, float s, size_t n, const bc_ctx *cx)
{
    const ew_op o = {EW_SCALE, 0, y, x, NULL, cx->kt, s};
    ew_run(&o, n, 2.0, cx);
}

/* ---- rotary position embeddings ------------------------------------------ */

// cs (T, R/2, 2), inv (R/2) or NULL
void bc_k_rope_table(float *cs, size_t pos0, size_t t, size_t d_rot, float theta,
                     const float *inv_freq, float attn)
{
    const size_t half = d_rot / 2;
    for (size_t i = 0; i < half; i++) {
        /* inv_freq = 1 / theta^(2i / R), in float32 like transformers' */
        const float e = (float)(2 * i) / (float)d_rot;
        const float inv = inv_freq ? inv_freq[i] : 1.0f / powf(theta, e);
        for (size_t r = 0; r < t; r++) {
            const double a = (double)((float)(pos0 + r) * inv);
            float co = (float)cos(a), si = (float)sin(a);
            if (attn != 1.0f) {
                co *= attn;
                si *= attn;
            }
            cs[(r * half + i) * 2] = co;
            cs[(r * half + i) * 2 + 1] = si;
        }
    }
}

// x (T, .) heads at columns h*Dh, cs (T, R/2, 2)
void bc_k_rope(float *x, size_t ldx, size_t t, size_t n_heads, size_t d_head, const float *cs,
               const bc_ctx *cx)
{
    bc_k_rope_part(x, ldx, t, n_heads, d_head, d_head, cs, cx);
}

// x (T, .) heads at columns h*Dh, cs (T, R/2, 2), R = d_rot
void bc_k_rope_part(float *x, size_t ldx, size_t t, size_t n_heads, size_t d_head, size_t d_rot,
                    const float *cs, const bc_ctx *cx)
{
    (void)cx;
    const size_t half = d_rot / 2;
    for (size_t r = 0; r < t; r++) {
        const float *c = cs + r * half * 2;
        for (size_t h = 0; h < n_heads; h++) {
            float *v = x + r * ldx + h * d_head;
            for (size_t i = 0; i < half; i++) {
                const float a = v[i], b = v[i + half], co = c[2 * i], si = c[2 * i + 1];
                v[i] = a * co - b * si;
                v[i + half] = b * co + a * si;
            }
        }
    }
}
