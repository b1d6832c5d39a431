/* elementwise.c: norms, activations and the residual addition.
 * Rows (norms) and chunks (the rest) are spread over threads when large;
 * each element's result is the same whichever thread computes it. */
#include <math.h>
#include "kernels.h"
#include "bc_fast.h"
#include "bc_rt.h"

typedef struct {
    void (*act)(float *, const float *, size_t, int);
    void (*swiglu)(float *, const float *, const float *, size_t);
    void (*add)(float *, const float *, const float *, size_t);
} ew_impl;

static ew_impl pick(void)
{
    ew_impl e = {bc_act_generic, bc_swiglu_generic, bc_add_generic};
#ifdef BC_HAVE_X86_KERNELS
    switch (bc_rt_isa()) {
    case BC_ISA_AVX512: e.act = bc_act_avx512; e.swiglu = bc_swiglu_avx512; e.add = bc_add_avx512; break;
    case BC_ISA_AVX2: e.act = bc_act_avx2; e.swiglu = bc_swiglu_avx2; e.add = bc_add_avx2; break;
    default: break;
    }
#endif
    return e;
}

/* elements per parallel chunk (a multiple of every vector width) */
#define EW_CHUNK 16384

static void rmsnorm_row(float *yi, const float *xi, const float *g, size_t c, float eps)
{
    double ss = 0.0;
    for (size_t j = 0; j < c; j++)
        ss += (double)xi[j] * xi[j];
    const float inv = 1.0f / sqrtf((float)(ss / (double)c) + eps);
    for (size_t j = 0; j < c; j++)
        yi[j] = g ? xi[j] * inv * g[j] : xi[j] * inv;
}

// y (N,C), x (N,C), g (C) or NULL
void bc_k_rmsnorm(float *y, const float *x, const float *g, size_t n, size_t c, float eps)
{
    const int nt = bc_rt_threads(4.0 * (double)n * (double)c);
    if (nt <= 1) {  /* no parallel region at all: even an if(0) one costs a microsecond */
        for (size_t i = 0; i < n; i++)
            rmsnorm_row(y + i * c, x + i * c, g, c, eps);
        return;
    }
    const long long nn = (long long)n;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt < nn ? nt : (int)nn)
#endif
    for (long long i = 0; i < nn; i++)
        rmsnorm_row(y + (size_t)i * c, x + (size_t)i * c, g, c, eps);
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

// y (N,C), x (N,C), g (C) or NULL, b (C) or NULL
void bc_k_layernorm(float *y, const float *x, const float *g, const float *b,
                    size_t n, size_t c, float eps)
{
    const int nt = bc_rt_threads(6.0 * (double)n * (double)c);
    if (nt <= 1) {
        for (size_t i = 0; i < n; i++)
            layernorm_row(y + i * c, x + i * c, g, b, c, eps);
        return;
    }
    const long long nn = (long long)n;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt < nn ? nt : (int)nn)
#endif
    for (long long i = 0; i < nn; i++)
        layernorm_row(y + (size_t)i * c, x + (size_t)i * c, g, b, c, eps);
}

// y (n), x (n)
void bc_k_act(float *y, const float *x, size_t n, int kind)
{
    const ew_impl e = pick();
    const int nt = bc_rt_threads(20.0 * (double)n);
    if (nt <= 1) {
        e.act(y, x, n, kind);
        return;
    }
    const long long nc = (long long)((n + EW_CHUNK - 1) / EW_CHUNK);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt < nc ? nt : (int)nc)
#endif
    for (long long ch = 0; ch < nc; ch++) {
        const size_t i = (size_t)ch * EW_CHUNK;
        e.act(y + i, x + i, n - i < EW_CHUNK ? n - i : EW_CHUNK, kind);
    }
}

// y (n), gate (n), up (n)
void bc_k_swiglu(float *y, const float *gate, const float *up, size_t n)
{
    const ew_impl e = pick();
    const int nt = bc_rt_threads(20.0 * (double)n);
    if (nt <= 1) {
        e.swiglu(y, gate, up, n);
        return;
    }
    const long long nc = (long long)((n + EW_CHUNK - 1) / EW_CHUNK);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt < nc ? nt : (int)nc)
#endif
    for (long long ch = 0; ch < nc; ch++) {
        const size_t i = (size_t)ch * EW_CHUNK;
        e.swiglu(y + i, gate + i, up + i, n - i < EW_CHUNK ? n - i : EW_CHUNK);
    }
}

// y (n), a (n), b (n)
void bc_k_add(float *y, const float *a, const float *b, size_t n)
{
    const ew_impl e = pick();
    const int nt = bc_rt_threads(2.0 * (double)n);
    if (nt <= 1) {
        e.add(y, a, b, n);
        return;
    }
    const long long nc = (long long)((n + EW_CHUNK - 1) / EW_CHUNK);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt < nc ? nt : (int)nc)
#endif
    for (long long ch = 0; ch < nc; ch++) {
        const size_t i = (size_t)ch * EW_CHUNK;
        e.add(y + i, a + i, b + i, n - i < EW_CHUNK ? n - i : EW_CHUNK);
    }
}
