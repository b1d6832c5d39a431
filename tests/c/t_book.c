/* t_book.c: book mode's fixed-size entry points (csrc/bc_book.h). */
#include <stdint.h>
#include <string.h>

#include "harness.h"

#define T BC_BOOK_SEQ_LEN
#define C BC_BOOK_D_MODEL

static void book_init_checks(void)
{
    bc_rng g, bad;
    EXPECT_STATUS(BC_OK, bc_rng_init(&g, BC_RAND_MSVC, 42));
    bad = g;
    bad.kind = 5;
    bc_book_ffn *f = h_alloc_bytes(sizeof *f);
    bc_book_block *b = h_alloc_bytes(sizeof *b);
    bc_book_block *s = h_alloc_bytes(BC_BOOK_N_BLOCKS * sizeof *s);

    EXPECT_STATUS(BC_ENULL, bc_book_ffn_init(NULL, &g));
    EXPECT_STATUS(BC_ENULL, bc_book_ffn_init(f, NULL));
    EXPECT_STATUS(BC_EOPTION, bc_book_ffn_init(f, &bad));
    EXPECT_STATUS(BC_ENULL, bc_book_block_init(NULL, &g));
    EXPECT_STATUS(BC_ENULL, bc_book_block_init(b, NULL));
    EXPECT_STATUS(BC_EOPTION, bc_book_block_init(b, &bad));
    EXPECT_STATUS(BC_ENULL, bc_book_stack_init(NULL, &g));
    EXPECT_STATUS(BC_ENULL, bc_book_stack_init(s, NULL));
    EXPECT_STATUS(BC_EOPTION, bc_book_stack_init(s, &bad));
    EXPECT(h_untouched(f, sizeof *f) && h_untouched(b, sizeof *b));
    EXPECT(h_untouched(s, BC_BOOK_N_BLOCKS * sizeof *s));

    /* good: the listings' draws, the generator advanced by exactly that many */
    bc_rng g2 = g;
    EXPECT_STATUS(BC_OK, bc_book_block_init(b, &g));
    float *want = h_alloc(sizeof *b / sizeof(float));
    EXPECT_STATUS(BC_OK, bc_rng_uniform(want, &g2, sizeof *b / sizeof(float), 0.1f));
    EXPECT(memcmp(b, want, sizeof *b) == 0);
    EXPECT(memcmp(&g, &g2, sizeof g) == 0);
    EXPECT_STATUS(BC_OK, bc_book_ffn_init(f, &g));
    for (int i = 0; i < BC_BOOK_FFN_D_FF; i++)
        EXPECT(f->b1[i] == 0.0f);
    EXPECT_STATUS(BC_OK, bc_book_stack_init(s, &g));
    EXPECT(h_guard_ok(f, sizeof *f) && h_guard_ok(b, sizeof *b));
    EXPECT(h_guard_ok(s, BC_BOOK_N_BLOCKS * sizeof *s));
}

static void book_forward_checks(void)
{
    bc_rng g;
    EXPECT_STATUS(BC_OK, bc_rng_init(&g, BC_RAND_MSVC, 42));
    bc_book_ffn *f = h_alloc_bytes(sizeof *f);
    bc_book_block *s = h_alloc_bytes(BC_BOOK_N_BLOCKS * sizeof *s);
    EXPECT_STATUS(BC_OK, bc_book_ffn_init(f, &g));
    EXPECT_STATUS(BC_OK, bc_book_stack_init(s, &g));
    float *x = h_alloc(T * C), *y = h_alloc(T * C), *n = h_alloc(BC_BOOK_N_BLOCKS + 1);
    float *o = h_alloc(BC_BOOK_FFN_D_MODEL), *r = h_alloc(BC_BOOK_RESIDUAL_DIM), *a = h_alloc(1);
    h_fill(x, T * C, 40, 1.0f);

    EXPECT_STATUS(BC_ENULL, bc_book_ffn_forward(NULL, f, x));
    EXPECT_STATUS(BC_ENULL, bc_book_ffn_forward(o, NULL, x));
    EXPECT_STATUS(BC_ENULL, bc_book_ffn_forward(o, f, NULL));
    EXPECT_STATUS(BC_ENULL, bc_book_residual_add(NULL, x, x));
    EXPECT_STATUS(BC_ENULL, bc_book_residual_add(r, NULL, x));
    EXPECT_STATUS(BC_ENULL, bc_book_residual_add(r, x, NULL));
    EXPECT_STATUS(BC_ENULL, bc_book_block_forward(NULL, s, x));
    EXPECT_STATUS(BC_ENULL, bc_book_block_forward(y, NULL, x));
    EXPECT_STATUS(BC_ENULL, bc_book_block_forward(y, s, NULL));
    EXPECT_STATUS(BC_ENULL, bc_book_avg_norm(NULL, x));
    EXPECT_STATUS(BC_ENULL, bc_book_avg_norm(a, NULL));
    EXPECT_STATUS(BC_ENULL, bc_book_stack_forward(NULL, n, s, x));
    EXPECT_STATUS(BC_ENULL, bc_book_stack_forward(y, n, NULL, x));
    EXPECT_STATUS(BC_ENULL, bc_book_stack_forward(y, n, s, NULL));
    EXPECT(h_untouched(o, 4 * BC_BOOK_FFN_D_MODEL) && h_untouched(r, 4 * BC_BOOK_RESIDUAL_DIM));
    EXPECT(h_untouched(y, 4 * T * C) && h_untouched(n, 4 * (BC_BOOK_N_BLOCKS + 1)));
    EXPECT(h_untouched(a, 4));

    /* good, within bounds; in place equals out of place; the stack is the blocks */
    EXPECT_STATUS(BC_OK, bc_book_ffn_forward(o, f, x));
    EXPECT(h_finite(o, BC_BOOK_FFN_D_MODEL) && h_guard_ok(o, 4 * BC_BOOK_FFN_D_MODEL));
    float *xo = h_alloc(BC_BOOK_FFN_D_MODEL);
    memcpy(xo, x, 4 * BC_BOOK_FFN_D_MODEL);
    EXPECT_STATUS(BC_OK, bc_book_ffn_forward(xo, f, xo));
    EXPECT(memcmp(xo, o, 4 * BC_BOOK_FFN_D_MODEL) == 0);
    EXPECT_STATUS(BC_OK, bc_book_residual_add(r, x, x + 4));
    for (int i = 0; i < BC_BOOK_RESIDUAL_DIM; i++)
        EXPECT(r[i] == x[i] + x[4 + i]);
    EXPECT(h_guard_ok(r, 4 * BC_BOOK_RESIDUAL_DIM));
    EXPECT_STATUS(BC_OK, bc_book_stack_forward(y, n, s, x));
    EXPECT(h_guard_ok(y, 4 * T * C) && h_guard_ok(n, 4 * (BC_BOOK_N_BLOCKS + 1)));
    EXPECT_STATUS(BC_OK, bc_book_avg_norm(a, x));
    EXPECT(*a == n[0] && h_guard_ok(a, 4));
    float *z = h_alloc(T * C);
    memcpy(z, x, 4 * T * C);
    for (int i = 0; i < BC_BOOK_N_BLOCKS; i++)
        EXPECT_STATUS(BC_OK, bc_book_block_forward(z, &s[i], z));
    EXPECT(memcmp(z, y, 4 * T * C) == 0);
    EXPECT_STATUS(BC_OK, bc_book_avg_norm(a, z));
    EXPECT(*a == n[BC_BOOK_N_BLOCKS]);
    memcpy(z, x, 4 * T * C);
    EXPECT_STATUS(BC_OK, bc_book_stack_forward(z, NULL, s, z));
    EXPECT(memcmp(z, y, 4 * T * C) == 0);
}

static void book_params_checks(void)
{
    int64_t *p = h_alloc_bytes(sizeof *p);
    bc_book_params *bp = h_alloc_bytes(sizeof *bp);

    EXPECT_STATUS(BC_ENULL, bc_book_ffn_params(NULL, 6, 12));
    EXPECT_STATUS(BC_ENULL, bc_book_block_params(NULL, 8, 32, 1));
    const int64_t bad[] = {0, -1, INT64_MIN};
    for (int i = 0; i < 3; i++) {
        EXPECT_STATUS(BC_ESIZE, bc_book_ffn_params(p, bad[i], 12));
        EXPECT_STATUS(BC_ESIZE, bc_book_ffn_params(p, 6, bad[i]));
        EXPECT_STATUS(BC_ESIZE, bc_book_block_params(bp, bad[i], 32, 1));
        EXPECT_STATUS(BC_ESIZE, bc_book_block_params(bp, 8, bad[i], 1));
        EXPECT_STATUS(BC_ESIZE, bc_book_block_params(bp, 8, 32, bad[i]));
    }
    EXPECT_STATUS(BC_EOVERFLOW, bc_book_ffn_params(p, INT64_MAX, 2));
    EXPECT_STATUS(BC_EOVERFLOW, bc_book_ffn_params(p, (int64_t)1 << 31, (int64_t)1 << 32));
    EXPECT_STATUS(BC_EOVERFLOW, bc_book_ffn_params(p, 1, INT64_MAX / 2));
    EXPECT_STATUS(BC_EOVERFLOW, bc_book_block_params(bp, (int64_t)1 << 31, 1, 1));
    EXPECT_STATUS(BC_EOVERFLOW, bc_book_block_params(bp, 1 << 20, 1 << 20, (int64_t)1 << 30));
    EXPECT_STATUS(BC_EOVERFLOW, bc_book_block_params(bp, INT64_MAX, INT64_MAX, INT64_MAX));
    EXPECT(h_untouched(p, sizeof *p) && h_untouched(bp, sizeof *bp));

    EXPECT_STATUS(BC_OK, bc_book_ffn_params(p, 6, 12));
    EXPECT(*p == 162); /* 126_Ffn */
    EXPECT_STATUS(BC_OK, bc_book_block_params(bp, 8, 32, 1));
    EXPECT(bp->attn == 256 && bp->ffn == 512 && bp->norms == 16 && bp->per_block == 784);
    EXPECT(bp->all_blocks == 784);
    /* the largest count that fits: no false overflow */
    EXPECT_STATUS(BC_OK, bc_book_ffn_params(p, 1, (INT64_MAX - 1) / 3));
}

void test_book(void)
{
    book_init_checks();
    book_forward_checks();
    book_params_checks();
}
