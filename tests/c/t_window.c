/* t_window.c: sliding-window attention and the ring cache (bc_gpt.h's window,
 * sliding, bc_gpt_ring_rows, BC_EEVICTED). The numbers against the NumPy oracle
 * and transformers are tests/test_sliding_window.py; here the C contract: sizes,
 * statuses, nothing written on an error, and the same bits however the tokens
 * are split into calls, at any thread count. */
#include <math.h>
#include <string.h>

#include "harness.h"

#define NB(n) ((n) * sizeof(float))

enum { CTX = 400, WIN = 5, B = 2, T = 260, PRE = 200 };

static bc_gpt_config window_config(size_t window, const unsigned char *sliding)
{
    bc_gpt_config c = h_llama_config(0);
    c.context = CTX;
    c.window = window;
    c.sliding = sliding;
    return c;
}

/* bc_gpt_ring_rows gives want for (window, capacity) */
static int ring_rows_are(size_t window, size_t capacity, size_t want)
{
    size_t rows = 0;
    return bc_gpt_ring_rows(&rows, window, capacity) == BC_OK && rows == want;
}

static void ring_size_checks(void)
{
    size_t rows = 7;
    EXPECT(bc_gpt_ring_rows(NULL, 8, 100) == BC_ENULL);
    EXPECT(bc_gpt_ring_rows(&rows, 8, (size_t)-1) == BC_EOVERFLOW && rows == 7);
    EXPECT(ring_rows_are(0, 100, 128));      /* a global layer: the capacity in tiles */
    EXPECT(ring_rows_are(8, 100, 128));      /* a ring no smaller than the capacity */
    EXPECT(ring_rows_are(8, 1000, 192));     /* W + 127 in tiles of 64 */
    EXPECT(ring_rows_are(4096, 32768, 4224));
    EXPECT(ring_rows_are(500, 400, 448));    /* a window past the capacity: none */
    const unsigned char one[2] = {1, 0};
    bc_gpt_config c = window_config(8, one);
    size_t n = 0, full = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_config_check(&c));
    EXPECT_STATUS(BC_OK, bc_gpt_cache_size(&n, &c, 3, CTX));
    EXPECT(n == 3 * (192 + 448) * 12);  /* KV Dh = 12 per position */
    c.sliding = NULL;                    /* every layer slides */
    EXPECT_STATUS(BC_OK, bc_gpt_cache_size(&n, &c, 3, CTX));
    EXPECT(n == 3 * 2 * 192 * 12);
    c.window = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_cache_size(&full, &c, 3, CTX));
    EXPECT(full == 3 * 2 * 448 * 12);
    /* a window is a position count; flags need layers the library can copy */
    c.window = (size_t)1 << 60;
    EXPECT_STATUS(BC_EOVERFLOW, bc_gpt_config_check(&c));
    bc_gpt_config many = h_gpt2_config(7, 4, 4, 1, BC_GPT_FMT_LAYERS + 1, 1);
    unsigned char *flags = h_alloc_bytes(BC_GPT_FMT_LAYERS + 1);
    memset(flags, 1, BC_GPT_FMT_LAYERS + 1);
    many.window = 2;
    EXPECT_STATUS(BC_OK, bc_gpt_config_check(&many));
    many.sliding = flags;
    EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&many));
}

/* One config's forward: the full pass, then through a float cache (a prompt longer
 * than the ring's slack in one call, then a token at a time past the ring) and a half
 * cache: the same bits (float), finite (half); threads 1 and 3 the same bits. */
static void forward_checks(const unsigned char *sliding)
{
    bc_gpt_config c = window_config(WIN, sliding);
    const size_t V = c.vocab;
    unsigned char *p = h_gpt_params(&c, 91u, 0.5f, 0.5f);
    size_t nc = 0, nw = 0, nwc = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_cache_size(&nc, &c, B, CTX));
    bc_gpt_cache cache = {h_alloc(nc), h_alloc(nc), B, CTX, 0, NULL, BC_DTYPE_F32};
    EXPECT_STATUS(BC_OK, bc_gpt_workspace_size(&nw, &c, B, T, NULL));
    EXPECT_STATUS(BC_OK, bc_gpt_workspace_size(&nwc, &c, B, T, &cache));
    float *work = h_alloc(nw > nwc ? nw : nwc), *full = h_alloc(B * T * V);
    float *part = h_alloc(B * T * V), *step = h_alloc(B * V), *wide = h_alloc(B * T * V);
    int64_t *ids = h_alloc_bytes(B * T * sizeof(int64_t)), col[B];
    for (int i = 0; i < B * T; i++)
        ids[i] = (i * 7 + i / 11 + 3) % (int64_t)V;
    EXPECT_STATUS(BC_OK, bc_gpt_forward(full, NULL, NULL, p, &c, ids, BC_IDS_INT64, B, T, 0, work, nw));
    EXPECT(h_finite(full, B * T * V));
    /* the window changes the logits past it (a window as wide as the context does not) */
    bc_gpt_config all = c;
    all.window = CTX;
    EXPECT_STATUS(BC_OK, bc_gpt_forward(wide, NULL, NULL, p, &all, ids, BC_IDS_INT64, B, T, 0, work, nw));
    float differ = 0.0f;
    for (size_t i = 0; i < (size_t)B * T * V; i++)
        differ = fmaxf(differ, fabsf(wide[i] - full[i]));
    EXPECT(differ > 1e-3f);
    all.window = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_forward(part, NULL, NULL, p, &all, ids, BC_IDS_INT64, B, T, 0, work, nw));
    EXPECT(memcmp(part, wide, NB(B * T * V)) == 0);
    /* the prompt in one call (rows 0..PRE-1 of each sequence), then one at a time */
    int64_t *pre = h_alloc_bytes(B * PRE * sizeof(int64_t));
    for (int b = 0; b < B; b++)
        memcpy(pre + b * PRE, ids + b * T, PRE * sizeof(int64_t));
    EXPECT_STATUS(BC_OK, bc_gpt_forward(part, NULL, &cache, p, &c, pre, BC_IDS_INT64, B, PRE, 0, work, nwc));
    for (int b = 0; b < B; b++)
        EXPECT(memcmp(part + b * PRE * V, full + b * T * V, NB(PRE * V)) == 0);
    for (int t = PRE; t < T; t++) {
        for (int b = 0; b < B; b++)
            col[b] = ids[b * T + t];
        EXPECT_STATUS(BC_OK, bc_gpt_forward(step, NULL, &cache, p, &c, col, BC_IDS_INT64, B, 1, 1, work, nwc));
        for (int b = 0; b < B; b++)
            EXPECT(memcmp(step + b * V, full + (b * T + t) * V, NB(V)) == 0);
    }
    EXPECT(cache.length == T);
    for (int threads = 1; threads <= 3; threads += 2) {
        EXPECT_STATUS(BC_OK, bc_set_num_threads(threads));
        EXPECT_STATUS(BC_OK, bc_gpt_forward(part, NULL, NULL, p, &c, ids, BC_IDS_INT64, B, T, 0, work, nw));
        EXPECT(memcmp(part, full, NB(B * T * V)) == 0);
    }
    EXPECT_STATUS(BC_OK, bc_set_num_threads(0));
    /* a half cache: the whole sequence in one call, then in two: the same bits */
    const size_t nh = (nc + 1) / 2;
    bc_gpt_cache half = {h_alloc(nh), h_alloc(nh), B, CTX, 0, NULL, BC_DTYPE_F16};
    EXPECT_STATUS(BC_OK, bc_gpt_forward(wide, NULL, &half, p, &c, ids, BC_IDS_INT64, B, T, 0, work, nwc));
    EXPECT(h_finite(wide, B * T * V));
    half.length = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_forward(part, NULL, &half, p, &c, pre, BC_IDS_INT64, B, PRE, 0, work, nwc));
    for (int b = 0; b < B; b++)
        EXPECT(memcmp(part + b * PRE * V, wide + b * T * V, NB(PRE * V)) == 0);
    EXPECT(h_guard_ok(cache.k, NB(nc)) && h_guard_ok(cache.v, NB(nc)));
    EXPECT(h_guard_ok(half.k, NB(nh)) && h_guard_ok(half.v, NB(nh)));

    /* rolling back: the ring (192) holds positions 68..259, position n reads n-4..n-1 */
    size_t lengths[B] = {T, T};
    cache.lengths = lengths;
    EXPECT_STATUS(BC_EEVICTED, bc_gpt_cache_truncate(&cache, &c, 0, 71));
    EXPECT_STATUS(BC_EEVICTED, bc_gpt_cache_copy(&cache, &c, 1, 0, 71));
    EXPECT(lengths[0] == T && lengths[1] == T);
    EXPECT_STATUS(BC_OK, bc_gpt_cache_copy(&cache, &c, 1, 0, 72));
    EXPECT(lengths[1] == 72);
    /* sequence 1 continues from sequence 0's ring: sequence 0's bits at 72.. */
    bc_gpt_cache one = {(float *)cache.k + nc / B, (float *)cache.v + nc / B, 1, CTX, 0, lengths + 1,
                        BC_DTYPE_F32};
    EXPECT_STATUS(BC_OK, bc_gpt_forward(part, NULL, &one, p, &c, ids + 72, BC_IDS_INT64, 1, 30, 0, work, nwc));
    EXPECT(memcmp(part, full + 72 * V, NB(30 * V)) == 0);
    EXPECT_STATUS(BC_OK, bc_gpt_cache_truncate(&cache, &c, 0, 0));  /* reads nothing: allowed */
    EXPECT(lengths[0] == 0);
}

static void training_checks(void)
{
    bc_gpt_config c = window_config(WIN, NULL);
    unsigned char *p = h_gpt_params(&c, 91u, 0.5f, 0.5f);
    size_t nw = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_train_workspace_size(&nw, &c, 1, 8));
    float *work = h_alloc(nw), loss = 0.0f;
    const int64_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8}, tg[8] = {2, 3, 4, 5, 6, 7, 8, 9};
    EXPECT_STATUS(BC_EOPTION, bc_gpt_grad(&loss, NULL, NULL, p, &c, ids, tg, BC_IDS_INT64, -100, 1,
                                          8, work, nw));
    EXPECT_STATUS(BC_OK, bc_gpt_grad(&loss, NULL, NULL, p, &c, ids, tg, BC_IDS_INT64, -100, 1,
                                     WIN, work, nw));
    EXPECT(isfinite(loss));
}

void test_window(void)
{
    static const unsigned char second[2] = {0, 1};
    ring_size_checks();
    forward_checks(NULL);
    forward_checks(second);
    training_checks();
}
