/* rng.c: the MSVC and glibc rand() generators, bit for bit. */
#include "bc_core.h"

/* One step of glibc's TYPE_3 generator: tab[front] += tab[rear], output >> 1. */
static uint32_t glibc_next(bc_rng *g)
{
    uint32_t v = g->tab[g->front] + g->tab[g->rear];
    g->tab[g->front] = v;
    g->front = (g->front + 1) % 31;
    g->rear = (g->rear + 1) % 31;
    return v >> 1;
}

static uint32_t msvc_next(bc_rng *g)
{
    g->lcg = g->lcg * 214013u + 2531011u;
    return (g->lcg >> 16) & 0x7fffu;
}

static uint32_t next(bc_rng *g)
{
    return g->kind == BC_RAND_GLIBC ? glibc_next(g) : msvc_next(g);
}

int bc_rng_init(bc_rng *g, int kind, uint32_t seed)
{
    if (!g)
        return BC_ENULL;
    if (kind != BC_RAND_MSVC && kind != BC_RAND_GLIBC)
        return BC_EOPTION;
    g->kind = kind;
    g->lcg = seed;
    g->front = 3;
    g->rear = 0;
    /* glibc: tab[0] = seed (0 becomes 1); tab[i] = 16807 * tab[i-1] mod (2^31 - 1),
     * computed on the signed 32-bit value with Schrage's method; then 310 draws
     * are discarded. */
    int32_t word = (int32_t)(seed ? seed : 1u);
    g->tab[0] = (uint32_t)word;
    for (int i = 1; i < 31; i++) {
        int32_t hi = word / 127773, lo = word % 127773;
        word = 16807 * lo - 2836 * hi;
        if (word < 0)
            word += 2147483647;
        g->tab[i] = (uint32_t)word;
    }
    if (kind == BC_RAND_GLIBC)
        for (int i = 0; i < 310; i++)
            (void)glibc_next(g);
    return BC_OK;
}

int bc_rng_rand_max(uint32_t *out, const bc_rng *g)
{
    if (!out || !g)
        return BC_ENULL;
    if (g->kind != BC_RAND_MSVC && g->kind != BC_RAND_GLIBC)
        return BC_EOPTION;
    *out = g->kind == BC_RAND_GLIBC ? 2147483647u : 32767u;
    return BC_OK;
}

/* The checks shared by the draws: a generator, n outputs (out may be NULL
 * only for n = 0), a known kind. */
static int draw_check(const void *out, const bc_rng *g, size_t n)
{
    if (!g || (!out && n))
        return BC_ENULL;
    if (n > BC_MAX_ELEMENTS)
        return BC_EOVERFLOW;
    if (g->kind != BC_RAND_MSVC && g->kind != BC_RAND_GLIBC)
        return BC_EOPTION;
    return BC_OK;
}

int bc_rng_rand(uint32_t *out, bc_rng *g, size_t n)
{
    const int st = draw_check(out, g, n);
    if (st)
        return st;
    for (size_t i = 0; i < n; i++)
        out[i] = next(g);
    return BC_OK;
}

int bc_rng_uniform(float *out, bc_rng *g, size_t n, float scale)
{
    const int st = draw_check(out, g, n);
    if (st)
        return st;
    /* (float)RAND_MAX, as the listings' int-to-float conversion rounds it */
    const float rmax = g->kind == BC_RAND_GLIBC ? (float)2147483647 : (float)32767;
    for (size_t i = 0; i < n; i++) {
        float r = (float)next(g) / rmax;
        out[i] = (r * 2.0f - 1.0f) * scale;
    }
    return BC_OK;
}
