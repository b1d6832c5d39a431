/* t_moe.c: mixtures of experts (bc_gpt.h's n_experts, n_experts_used,
 * router_norm). The numbers against the NumPy oracle and transformers are
 * tests/test_moe.py; here the C contract: the refusals, the layout (names,
 * shapes, places), and in every weight format the same bits at any thread
 * count, at any batch and however the tokens are split into calls; ties take
 * the lower index and an expert no token chose is never read. */
#include <math.h>
#include <string.h>

#include "harness.h"

#define NB(n) ((n) * sizeof(float))

enum { E = 4, K = 2, B = 3, T = 5 };

static bc_gpt_config moe_config(int dtype)
{
    bc_gpt_config c = h_llama_config(0);
    c.n_experts = E;
    c.n_experts_used = K;
    c.router_norm = 1;
    c.context = 16;
    c.dtype = dtype;
    size_t blk = 1, n = 0;
    EXPECT_STATUS(BC_OK, bc_dtype_info(NULL, 0, &blk, NULL, dtype));
    if (blk > 1 && bc_pack_size(&n, dtype, 1, blk + 1) == BC_ESIZE) {  /* whole blocks */
        c.width = c.d_ff = blk;
        c.heads = 4;
        c.head_dim = blk / 4;
    }
    return c;
}

static void refusal_checks(void)
{
    bc_gpt_config c = moe_config(BC_DTYPE_F32);
    EXPECT_STATUS(BC_OK, bc_gpt_config_check(&c));
    c.n_experts = 1; EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    c.n_experts = BC_GPT_MAX_EXPERTS + 1; EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    c = moe_config(BC_DTYPE_F32);
    c.n_experts_used = 0; EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    c.n_experts_used = E + 1; EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    c = moe_config(BC_DTYPE_F32);
    c.activation = BC_ACT_GELU; EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    c = moe_config(BC_DTYPE_F32);
    c.mlp_bias = 1; EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    c = h_llama_config(0);
    c.n_experts_used = 2; EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    c.n_experts_used = 0; c.router_norm = 1; EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    /* training refuses experts */
    c = moe_config(BC_DTYPE_F32);
    size_t nw = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_workspace_size(&nw, &c, 1, 2, NULL));
    EXPECT_STATUS(BC_EOPTION, bc_gpt_train_workspace_size(&nw, &c, 1, 2));
}

// the router and E copies of each expert matrix per layer, each in its place
static void layout_checks(void)
{
    bc_gpt_config d = h_llama_config(0), c = moe_config(BC_DTYPE_F32);
    size_t n0 = 0, n1 = 0, bytes = 0, params = 0, p0 = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_tensor_count(&n0, &d));
    EXPECT_STATUS(BC_OK, bc_gpt_tensor_count(&n1, &c));
    EXPECT(n1 == n0 + c.layers * (1 + 3 * E - 3));
    EXPECT_STATUS(BC_OK, bc_gpt_param_count(&params, &c));
    EXPECT_STATUS(BC_OK, bc_gpt_param_count(&p0, &d));
    EXPECT(params == p0 + c.layers * (E * c.width + (E - 1) * 3 * c.width * c.d_ff));
    EXPECT_STATUS(BC_OK, bc_gpt_param_bytes(&bytes, &c));
    size_t at = 0, seen = 0;
    for (size_t i = 0; i < n1; i++) {
        size_t off, nb, nd, shape[2];
        int dt, pk;
        char name[BC_GPT_NAME_MAX];
        EXPECT_STATUS(BC_OK, bc_gpt_tensor_info(name, sizeof name, &off, &nb, &dt, &pk, &nd, shape, &c, i));
        EXPECT(off == at);  /* one after the other, no gaps */
        at = off + nb;
        if (!strcmp(name, "blocks.1.router.weight")) {
            EXPECT(!pk && dt == BC_DTYPE_F32 && shape[0] == E && shape[1] == c.width);
            seen++;
        }
        if (!strcmp(name, "blocks.1.experts.3.down.weight")) {
            EXPECT(pk && shape[0] == c.width && shape[1] == c.d_ff && nb == NB(c.width * c.d_ff));
            seen++;
        }
        if (!strcmp(name, "blocks.0.experts.0.gate.weight"))
            seen++;
        EXPECT(!strstr(name, "blocks.0.up.weight"));  /* no dense MLP */
    }
    EXPECT(seen == 3 && at == bytes);
}

static void forward_checks(int dtype)
{
    bc_gpt_config c = moe_config(dtype);
    const size_t V = c.vocab;
    unsigned char *p = h_gpt_params(&c, 31u, 0.4f, 2.0f);
    size_t nw = 0, nc = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_cache_size(&nc, &c, B, T));
    bc_gpt_cache cache = {h_alloc(nc), h_alloc(nc), B, T, 0, NULL, BC_DTYPE_F32};
    EXPECT_STATUS(BC_OK, bc_gpt_workspace_size(&nw, &c, B, T, &cache));
    float *work = h_alloc(nw), *full = h_alloc(B * T * V), *again = h_alloc(B * T * V);
    float *step = h_alloc(B * V);
    int64_t ids[B * T], col[B];
    for (int i = 0; i < B * T; i++)
        ids[i] = (i * 7 + 3) % (int64_t)V;
    EXPECT_STATUS(BC_OK, bc_gpt_forward(full, NULL, NULL, p, &c, ids, BC_IDS_INT64, B, T, 0, work, nw));
    EXPECT(h_finite(full, B * T * V));
    /* each sequence alone: its bits in the batch */
    for (int b = 0; b < B; b++) {
        EXPECT_STATUS(BC_OK, bc_gpt_forward(again, NULL, NULL, p, &c, ids + b * T, BC_IDS_INT64, 1, T,
                                            0, work, nw));
        EXPECT(memcmp(again, full + b * T * V, NB(T * V)) == 0);
    }
    /* one token at a time through the cache */
    for (int t = 0; t < T; t++) {
        for (int b = 0; b < B; b++)
            col[b] = ids[b * T + t];
        EXPECT_STATUS(BC_OK, bc_gpt_forward(step, NULL, &cache, p, &c, col, BC_IDS_INT64, B, 1, 1, work, nw));
        for (int b = 0; b < B; b++)
            EXPECT(memcmp(step + b * V, full + (b * T + t) * V, NB(V)) == 0);
    }
    const int counts[] = {1, 2, 3};
    for (int i = 0; i < 3; i++) {
        EXPECT_STATUS(BC_OK, bc_set_num_threads(counts[i]));
        EXPECT_STATUS(BC_OK, bc_gpt_forward(again, NULL, NULL, p, &c, ids, BC_IDS_INT64, B, T, 0, work, nw));
        EXPECT(memcmp(again, full, NB(B * T * V)) == 0);
    }
    EXPECT_STATUS(BC_OK, bc_set_num_threads(0));
    EXPECT(h_guard_ok(full, NB(B * T * V)) && h_guard_ok(work, NB(nw)));
}

// a zero router ties every expert: experts 0 and 1 run, 2 and 3 (NaN) are never read
static void unread_checks(void)
{
    bc_gpt_config c = moe_config(BC_DTYPE_F32);
    const size_t V = c.vocab;
    unsigned char *p = h_gpt_params(&c, 31u, 0.4f, 0.0f);
    size_t nw = 0, count = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_workspace_size(&nw, &c, B, T, NULL));
    float *work = h_alloc(nw), *a = h_alloc(B * T * V), *b = h_alloc(B * T * V);
    int64_t ids[B * T];
    for (int i = 0; i < B * T; i++)
        ids[i] = (i * 5 + 1) % (int64_t)V;
    EXPECT_STATUS(BC_OK, bc_gpt_forward(a, NULL, NULL, p, &c, ids, BC_IDS_INT64, B, T, 0, work, nw));
    EXPECT_STATUS(BC_OK, bc_gpt_tensor_count(&count, &c));
    for (size_t i = 0; i < count; i++) {
        size_t off, nb, nd, shape[2];
        int dt, pk;
        char name[BC_GPT_NAME_MAX];
        EXPECT_STATUS(BC_OK, bc_gpt_tensor_info(name, sizeof name, &off, &nb, &dt, &pk, &nd, shape, &c, i));
        if (strstr(name, "experts.2.") || strstr(name, "experts.3."))
            for (size_t j = 0; j < nb / 4; j++)
                ((float *)(void *)(p + off))[j] = NAN;
    }
    EXPECT_STATUS(BC_OK, bc_gpt_forward(b, NULL, NULL, p, &c, ids, BC_IDS_INT64, B, T, 0, work, nw));
    EXPECT(h_finite(b, B * T * V) && memcmp(a, b, NB(B * T * V)) == 0);
}

void test_moe(void)
{
    refusal_checks();
    layout_checks();
    for (int dtype = BC_DTYPE_F32; dtype < BC_NDTYPE; dtype++) {
        if (bc_dtype_info(NULL, 0, NULL, NULL, dtype) != BC_OK)
            continue;  /* a value with no format yet */
        forward_checks(dtype);
    }
    unread_checks();
}
