/* t_core.c: bc_strerror and the bc_rng_* generators (csrc/bc_core.h). */
#include <limits.h>
#include <string.h>

#include "harness.h"

static void strerror_codes(void)
{
    const int codes[] = {BC_OK, BC_ENULL, BC_ESIZE, BC_EOVERFLOW, BC_EHEADS, BC_EOPTION,
                         BC_ENOMEM, BC_ERANGE, BC_ECONTEXT, BC_EWORKSPACE};
    const size_t n = sizeof codes / sizeof codes[0];
    const char *unknown = bc_strerror(-1);
    EXPECT(unknown != NULL && strcmp(unknown, "unknown status") == 0);
    for (size_t i = 0; i < n; i++) {
        const char *s = bc_strerror(codes[i]);
        EXPECT(s != NULL && s[0] != '\0' && strcmp(s, unknown) != 0);
        for (size_t j = 0; j < i; j++) /* every code has its own message */
            EXPECT(s != NULL && strcmp(s, bc_strerror(codes[j])) != 0);
    }
    const int odd[] = {1000, 99, -2, INT_MAX, INT_MIN}; /* codes no header defines */
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++)
        EXPECT(strcmp(bc_strerror(odd[i]), "unknown status") == 0);
}

static void rng_init(void)
{
    bc_rng *g = h_alloc_bytes(sizeof *g);
    EXPECT_STATUS(BC_ENULL, bc_rng_init(NULL, BC_RAND_MSVC, 1));
    EXPECT_STATUS(BC_ENULL, bc_rng_init(NULL, 99, 1));
    const int bad_kinds[] = {-1, 2, 99, INT_MAX, INT_MIN};
    for (size_t i = 0; i < sizeof bad_kinds / sizeof bad_kinds[0]; i++) {
        EXPECT_STATUS(BC_EOPTION, bc_rng_init(g, bad_kinds[i], 1));
        EXPECT(h_untouched(g, sizeof *g));
    }
    EXPECT_STATUS(BC_OK, bc_rng_init(g, BC_RAND_MSVC, 0));
    EXPECT_STATUS(BC_OK, bc_rng_init(g, BC_RAND_GLIBC, 0xffffffffu));
    EXPECT(h_guard_ok(g, sizeof *g));
}

static void rng_rand_max(void)
{
    bc_rng g;
    uint32_t *out = h_alloc_bytes(sizeof *out);
    EXPECT_STATUS(BC_OK, bc_rng_init(&g, BC_RAND_MSVC, 1));
    EXPECT_STATUS(BC_ENULL, bc_rng_rand_max(NULL, &g));
    EXPECT_STATUS(BC_ENULL, bc_rng_rand_max(out, NULL));
    EXPECT(h_untouched(out, sizeof *out));
    EXPECT_STATUS(BC_OK, bc_rng_rand_max(out, &g));
    EXPECT(*out == 32767u);
    EXPECT_STATUS(BC_OK, bc_rng_init(&g, BC_RAND_GLIBC, 1));
    EXPECT_STATUS(BC_OK, bc_rng_rand_max(out, &g));
    EXPECT(*out == 2147483647u);
    /* a generator whose kind was never set (or was overwritten) */
    h_refill(out, sizeof *out);
    g.kind = 7;
    EXPECT_STATUS(BC_EOPTION, bc_rng_rand_max(out, &g));
    EXPECT(h_untouched(out, sizeof *out));
}

/* bc_rng_rand and bc_rng_uniform: same argument rules */
static int call_rng(int uniform, void *out, bc_rng *g, size_t n)
{
    return uniform ? bc_rng_uniform(out, g, n, 0.1f) : bc_rng_rand(out, g, n);
}

static void rng_draws(int uniform)
{
    const size_t n = 16, nb = n * 4;
    void *out = h_alloc_bytes(nb);
    bc_rng g, saved;
    EXPECT_STATUS(BC_OK, bc_rng_init(&g, BC_RAND_MSVC, 1));
    saved = g;

    EXPECT_STATUS(BC_ENULL, call_rng(uniform, NULL, &g, n));
    EXPECT_STATUS(BC_ENULL, call_rng(uniform, out, NULL, n));
    EXPECT(memcmp(&g, &saved, sizeof g) == 0);
    /* zero draws: no output needed, the generator does not move */
    EXPECT_STATUS(BC_OK, call_rng(uniform, NULL, &g, 0));
    EXPECT_STATUS(BC_OK, call_rng(uniform, out, &g, 0));
    EXPECT(h_untouched(out, nb) && memcmp(&g, &saved, sizeof g) == 0);
    /* "negative" and absurd counts: past BC_MAX_ELEMENTS, refused before writing */
    const size_t huge[] = {H_NEG, H_HALF, (size_t)BC_MAX_ELEMENTS + 1};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        EXPECT_STATUS(BC_EOVERFLOW, call_rng(uniform, out, &g, huge[i]));
        EXPECT(h_untouched(out, nb) && memcmp(&g, &saved, sizeof g) == 0);
    }
    /* a corrupted generator */
    bc_rng bad = g;
    bad.kind = -3;
    EXPECT_STATUS(BC_EOPTION, call_rng(uniform, out, &bad, n));
    EXPECT(h_untouched(out, nb));

    /* good calls: the known values, within bounds */
    EXPECT_STATUS(BC_OK, call_rng(uniform, out, &g, n));
    EXPECT(h_guard_ok(out, nb));
    if (uniform) {
        const float *f = out;
        /* srand(1): rand() = 41, 18467 -> (41/32767*2-1)*0.1 */
        float want0 = ((float)41 / (float)32767 * 2.0f - 1.0f) * 0.1f;
        EXPECT(f[0] == want0);
        EXPECT(h_finite(f, n));
        for (size_t i = 0; i < n; i++)
            EXPECT(f[i] >= -0.1f && f[i] <= 0.1f);
    } else {
        const uint32_t *u = out;
        EXPECT(u[0] == 41u && u[1] == 18467u && u[2] == 6334u);
    }
}

void test_core(void)
{
    strerror_codes();
    rng_init();
    rng_rand_max();
    rng_draws(0);
    rng_draws(1);
}
