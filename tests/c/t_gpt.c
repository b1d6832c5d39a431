/* t_gpt.c: the GPT's entry points (csrc/bc_gpt.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

#define NB(n) ((n) * sizeof(float))

/* GPT-2's architecture at the given sizes */
bc_gpt_config h_gpt2_config(size_t vocab, size_t context, size_t width, size_t heads, size_t layers,
                          int tied)
{
    bc_gpt_config c;
    memset(&c, 0, sizeof c);
    c.vocab = vocab;
    c.context = context;
    c.width = width;
    c.heads = heads;
    c.layers = layers;
    c.norm = BC_NORM_LAYER;
    c.placement = BC_PLACE_PRE;
    c.activation = BC_ACT_GELU_TANH;
    c.positions = BC_POS_LEARNED;
    c.rope_theta = 10000.0f;
    c.residual = 1;
    c.qkv_bias = c.out_bias = c.mlp_bias = 1;
    c.eps = 1e-5f;
    c.tie_weights = tied;
    c.dtype = BC_DTYPE_F32;
    return c;
}

static bc_gpt_config tiny(int tied) { return h_gpt2_config(11, 6, 8, 2, 2, tied); }

/* Llama's architecture: RMSNorm, RoPE, SwiGLU, grouped K/V heads, no biases */
bc_gpt_config h_llama_config(int tied)
{
    bc_gpt_config c = h_gpt2_config(13, 9, 16, 4, 2, tied);
    c.norm = BC_NORM_RMS;
    c.activation = BC_ACT_SWIGLU;
    c.positions = BC_POS_ROPE;
    c.kv_heads = 2;
    c.head_dim = 6;
    c.d_ff = 21;
    c.qkv_bias = c.out_bias = c.mlp_bias = 0;
    return c;
}

unsigned char *h_gpt_params(const bc_gpt_config *c, uint32_t seed, float scale,
                            float router_scale)
{
    size_t bytes = 0, count = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_param_bytes(&bytes, c));
    EXPECT_STATUS(BC_OK, bc_gpt_tensor_count(&count, c));
    unsigned char *p = h_alloc_bytes(bytes);
    for (size_t i = 0; i < count; i++) {
        size_t off, nb, nd, shape[2];
        int dt, pk;
        char name[BC_GPT_NAME_MAX];
        EXPECT_STATUS(BC_OK, bc_gpt_tensor_info(name, sizeof name, &off, &nb, &dt, &pk, &nd, shape, c, i));
        const size_t n = shape[0] * shape[1];
        const int router = strstr(name, "router") != NULL;
        float *w = h_alloc(n);
        h_fill(w, n, seed + (uint32_t)i, router ? router_scale : scale);
        if (strstr(name, "ln") || strstr(name, "norm.weight"))
            for (size_t j = 0; j < n; j++)
                w[j] += 1.0f;
        if (router && router_scale == 0.0f)
            memset(w, 0, NB(n));
        if (pk)
            EXPECT_STATUS(BC_OK, bc_pack(p + off, nb, w, dt, shape[0], shape[1]));
        else
            memcpy(p + off, w, NB(n));
    }
    return p;
}

/* c stored as dtype; for a format of whole blocks (q4_k: rows of 256k weights)
 * widened so that every matrix's rows are: width, d_ff and heads * head_dim
 * 256 (heads 4 when 256 is not a multiple of them) */
static bc_gpt_config as_dtype(bc_gpt_config c, int dtype)
{
    size_t blk = 1, n = 0;
    c.dtype = dtype;
    EXPECT_STATUS(BC_OK, bc_dtype_info(NULL, 0, &blk, NULL, dtype));
    if (blk == 1 || bc_pack_size(&n, dtype, 1, blk + 1) != BC_ESIZE)
        return c;
    if (blk % c.heads)
        c.heads = 4;
    if (c.kv_heads && c.heads % c.kv_heads)
        c.kv_heads = 1;
    c.width = c.d_ff = blk;
    if (c.head_dim)
        c.head_dim = blk / c.heads;
    return c;
}

static size_t formula(size_t v, size_t ctx, size_t d, size_t l, int tied)
{
    return v * d + ctx * d + l * (12 * d * d + 13 * d) + 2 * d + (tied ? 0 : v * d);
}

static void config_checks(void)
{
    size_t *n = h_alloc_bytes(sizeof *n);
    const bc_gpt_config good = tiny(1);
    bc_gpt_config c, ll;

    EXPECT_STATUS(BC_ENULL, bc_gpt_config_check(NULL));
    EXPECT_STATUS(BC_OK, bc_gpt_config_check(&good));
    c = good; c.vocab = 0;
    EXPECT_STATUS(BC_ESIZE, bc_gpt_config_check(&c));
    c = good; c.context = 0;
    EXPECT_STATUS(BC_ESIZE, bc_gpt_config_check(&c));
    c = good; c.width = 0;
    EXPECT_STATUS(BC_ESIZE, bc_gpt_config_check(&c));
    c = good; c.heads = 0;
    EXPECT_STATUS(BC_ESIZE, bc_gpt_config_check(&c));
    c = good; c.layers = 0;
    EXPECT_STATUS(BC_ESIZE, bc_gpt_config_check(&c));
    const float bad_eps[] = {-1e-5f, NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 4; i++) {
        c = good; c.eps = bad_eps[i];
        EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    }
    c = good; c.heads = 3;
    EXPECT_STATUS(BC_EHEADS, bc_gpt_config_check(&c));
    c = good; c.heads = 16;
    EXPECT_STATUS(BC_EHEADS, bc_gpt_config_check(&c));
    const size_t huge[] = {H_NEG, H_HALF, (size_t)BC_MAX_ELEMENTS, (size_t)1 << 37};
    for (int i = 0; i < 4; i++) {
        c = good; c.vocab = huge[i];
        EXPECT_STATUS(BC_EOVERFLOW, bc_gpt_config_check(&c));
        c = good; c.context = huge[i];
        EXPECT_STATUS(BC_EOVERFLOW, bc_gpt_config_check(&c));
        c = good; c.layers = huge[i];
        EXPECT_STATUS(BC_EOVERFLOW, bc_gpt_config_check(&c));
        c = good; c.width = huge[i] & ~(size_t)1; c.heads = 2;  /* even: heads divide */
        EXPECT_STATUS(BC_EOVERFLOW, bc_gpt_config_check(&c));
    }
    /* 2^20 wide: 12 D^2 = 12 * 2^40 */
    c = good; c.width = (size_t)1 << 20;
    EXPECT_STATUS(BC_EOVERFLOW, bc_gpt_config_check(&c));

    /* the architecture's options */
    const int bad_opt[] = {-1, 3, 99};
    for (int i = 0; i < 3; i++) {
        c = good; c.norm = bad_opt[i];
        EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
        c = good; c.placement = bad_opt[i] == 3 ? 2 : bad_opt[i];
        EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
        c = good; c.positions = bad_opt[i] == 3 ? 2 : bad_opt[i];
        EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
        c = good; c.dtype = bad_opt[i] == 3 ? BC_NDTYPE : bad_opt[i];
        EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    }
    c = good; c.activation = BC_ACT_SILU;  /* an activation, but not an MLP kind */
    EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    c = good; c.activation = 99;
    EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    c = good; c.kv_heads = 3;  /* does not divide 2 heads */
    EXPECT_STATUS(BC_EHEADS, bc_gpt_config_check(&c));
    c = good; c.kv_heads = 4;
    EXPECT_STATUS(BC_EHEADS, bc_gpt_config_check(&c));
    c = good; c.kv_heads = 1;  /* multi-query */
    EXPECT_STATUS(BC_OK, bc_gpt_config_check(&c));
    c = good; c.heads = 3; c.head_dim = 4;  /* H Dh need not be D */
    EXPECT_STATUS(BC_OK, bc_gpt_config_check(&c));
    c = good; c.positions = BC_POS_ROPE; c.head_dim = 5;
    EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    const float bad_theta[] = {0.0f, -1.0f, NAN, INFINITY};
    for (int i = 0; i < 4; i++) {
        c = good; c.positions = BC_POS_ROPE; c.rope_theta = bad_theta[i];
        EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    }
    c = good; c.rope_theta = NAN;  /* unused without RoPE */
    EXPECT_STATUS(BC_OK, bc_gpt_config_check(&c));
    c = good; c.d_ff = H_NEG;
    EXPECT_STATUS(BC_EOVERFLOW, bc_gpt_config_check(&c));
    c = good; c.head_dim = H_HALF;
    EXPECT_STATUS(BC_EOVERFLOW, bc_gpt_config_check(&c));
    ll = h_llama_config(0);
    EXPECT_STATUS(BC_OK, bc_gpt_config_check(&ll));

    /* every query refuses a bad config the same way, writing nothing */
    c = good; c.heads = 3;
    EXPECT_STATUS(BC_ENULL, bc_gpt_param_count(NULL, &good));
    EXPECT_STATUS(BC_ENULL, bc_gpt_param_count(n, NULL));
    EXPECT_STATUS(BC_EHEADS, bc_gpt_param_count(n, &c));
    EXPECT_STATUS(BC_ENULL, bc_gpt_tensor_count(NULL, &good));
    EXPECT_STATUS(BC_EHEADS, bc_gpt_tensor_count(n, &c));
    EXPECT_STATUS(BC_EHEADS, bc_gpt_cache_size(n, &c, 1, 4));
    EXPECT_STATUS(BC_EHEADS, bc_gpt_workspace_size(n, &c, 1, 4, NULL));
    EXPECT(h_untouched(n, sizeof *n));

    /* the chapter's counts: N = VD + CD + L(12 D^2 + 13 D) + 2D */
    EXPECT_STATUS(BC_OK, bc_gpt_param_count(n, &good));
    EXPECT(*n == formula(11, 6, 8, 2, 1));
    c = good; c.tie_weights = 1000;  /* any nonzero value ties */
    EXPECT_STATUS(BC_OK, bc_gpt_param_count(n, &c));
    EXPECT(*n == formula(11, 6, 8, 2, 1));
    c = good; c.tie_weights = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_param_count(n, &c));
    EXPECT(*n == formula(11, 6, 8, 2, 0));
    bc_gpt_config g2 = h_gpt2_config(50257, 1024, 768, 12, 12, 1);
    EXPECT_STATUS(BC_OK, bc_gpt_param_count(n, &g2));
    EXPECT(*n == 124439808u);
    bc_gpt_config g2m = h_gpt2_config(50257, 1024, 1024, 16, 24, 1);
    EXPECT_STATUS(BC_OK, bc_gpt_param_count(n, &g2m));
    EXPECT(*n == 354823168u);
    /* the buffer: the token table in whole panels of 16 rows (50257 -> 50272) */
    EXPECT_STATUS(BC_OK, bc_gpt_param_bytes(n, &g2));
    EXPECT(*n == 4 * (124439808u + 15 * 768));
    g2.dtype = BC_DTYPE_BF16;
    EXPECT_STATUS(BC_OK, bc_gpt_param_count(n, &g2));
    EXPECT(*n == 124439808u);
    /* q4_k: every matrix's rows whole super-blocks of 256, else BC_ESIZE */
    bc_gpt_config qk = as_dtype(tiny(1), BC_DTYPE_Q4_K);
    EXPECT_STATUS(BC_OK, bc_gpt_param_bytes(n, &qk));
    qk.d_ff = 200;
    EXPECT_STATUS(BC_ESIZE, bc_gpt_param_bytes(n, &qk));
    qk = tiny(1);
    qk.dtype = BC_DTYPE_Q4_K;
    EXPECT_STATUS(BC_ESIZE, bc_gpt_param_bytes(n, &qk));
    EXPECT_STATUS(BC_ENULL, bc_gpt_param_bytes(NULL, &g2));
    EXPECT_STATUS(BC_ENULL, bc_gpt_param_bytes(n, NULL));
    /* Llama-shaped: V D + L (D (H + 2KV) Dh + D H Dh + 3 D F + 2 D) + D, tied */
    ll = h_llama_config(1);
    EXPECT_STATUS(BC_OK, bc_gpt_param_count(n, &ll));
    EXPECT(*n == 13 * 16 + 2 * (16 * 8 * 6 + 16 * 4 * 6 + 3 * 16 * 21 + 2 * 16) + 16);
    EXPECT_STATUS(BC_OK, bc_gpt_tensor_count(n, &ll));
    EXPECT(*n == 1 + 7 * 2 + 1);
    EXPECT_STATUS(BC_OK, bc_gpt_tensor_count(n, &good));
    EXPECT(*n == 4 + 12 * 2);
    EXPECT_STATUS(BC_OK, bc_gpt_tensor_count(n, &c));
    EXPECT(*n == 5 + 12 * 2);
}

static void tensor_info_checks(bc_gpt_config c)
{
    size_t count = 0, total = 0, bytes = 0;
    const int tied = c.tie_weights != 0;
    EXPECT_STATUS(BC_OK, bc_gpt_tensor_count(&count, &c));
    EXPECT_STATUS(BC_OK, bc_gpt_param_count(&total, &c));
    EXPECT_STATUS(BC_OK, bc_gpt_param_bytes(&bytes, &c));
    char *name = h_alloc_bytes(BC_GPT_NAME_MAX);
    size_t *off = h_alloc_bytes(sizeof *off), *nb = h_alloc_bytes(sizeof *nb);
    size_t *nd = h_alloc_bytes(sizeof *nd), *shape = h_alloc_bytes(2 * sizeof *shape);
    int *dt = h_alloc_bytes(sizeof *dt), *pk = h_alloc_bytes(sizeof *pk);
#define INFO(nm, cap, cc, i) bc_gpt_tensor_info(nm, cap, off, nb, dt, pk, nd, shape, cc, i)

    EXPECT_STATUS(BC_ENULL, bc_gpt_tensor_info(name, BC_GPT_NAME_MAX, NULL, nb, dt, pk, nd, shape, &c, 0));
    EXPECT_STATUS(BC_ENULL, bc_gpt_tensor_info(name, BC_GPT_NAME_MAX, off, NULL, dt, pk, nd, shape, &c, 0));
    EXPECT_STATUS(BC_ENULL, bc_gpt_tensor_info(name, BC_GPT_NAME_MAX, off, nb, NULL, pk, nd, shape, &c, 0));
    EXPECT_STATUS(BC_ENULL, bc_gpt_tensor_info(name, BC_GPT_NAME_MAX, off, nb, dt, NULL, nd, shape, &c, 0));
    EXPECT_STATUS(BC_ENULL, bc_gpt_tensor_info(name, BC_GPT_NAME_MAX, off, nb, dt, pk, NULL, shape, &c, 0));
    EXPECT_STATUS(BC_ENULL, bc_gpt_tensor_info(name, BC_GPT_NAME_MAX, off, nb, dt, pk, nd, NULL, &c, 0));
    EXPECT_STATUS(BC_ENULL, INFO(name, BC_GPT_NAME_MAX, NULL, 0));
    EXPECT_STATUS(BC_ERANGE, INFO(name, BC_GPT_NAME_MAX, &c, count));
    EXPECT_STATUS(BC_ERANGE, INFO(name, BC_GPT_NAME_MAX, &c, H_NEG));
    /* "token.weight" needs 13 bytes */
    EXPECT_STATUS(BC_ESIZE, INFO(name, 12, &c, 0));
    EXPECT_STATUS(BC_ESIZE, INFO(name, 0, &c, 0));
    EXPECT(h_untouched(name, BC_GPT_NAME_MAX) && h_untouched(off, sizeof *off));
    EXPECT(h_untouched(nd, sizeof *nd) && h_untouched(shape, 2 * sizeof *shape));
    EXPECT(h_untouched(nb, sizeof *nb) && h_untouched(dt, sizeof *dt) && h_untouched(pk, sizeof *pk));

    /* the tensors tile the buffer exactly, in state_dict order; the matrices packed */
    size_t next = 0, elems = 0;
    for (size_t i = 0; i < count; i++) {
        h_refill(name, BC_GPT_NAME_MAX);
        EXPECT_STATUS(BC_OK, INFO(name, BC_GPT_NAME_MAX, &c, i));
        EXPECT(memchr(name, '\0', BC_GPT_NAME_MAX) != NULL);
        EXPECT(*nd == 1 || *nd == 2);
        if (*nd == 1)
            EXPECT(shape[1] == 1 && !*pk && *nb == 4 * shape[0]);
        EXPECT(*pk == (*nd == 2 && strcmp(name, "position.weight") != 0));
        EXPECT(*dt == (*pk ? c.dtype : BC_DTYPE_F32));
        size_t want = 0;
        if (*pk)
            EXPECT_STATUS(BC_OK, bc_pack_size(&want, c.dtype, shape[0], shape[1]));
        else
            want = 4 * shape[0] * shape[1];
        EXPECT(*nb == want && *nb % 4 == 0);
        EXPECT(*off == next);
        next = *off + *nb;
        elems += shape[0] * shape[1];
        EXPECT(h_guard_ok(name, BC_GPT_NAME_MAX));
        EXPECT_STATUS(BC_OK, INFO(NULL, 0, &c, i)); /* no name */
    }
    EXPECT(next == bytes && elems == total);
    EXPECT_STATUS(BC_OK, INFO(name, 13, &c, 0));
    EXPECT(strcmp(name, "token.weight") == 0 && *off == 0 && shape[0] == c.vocab && shape[1] == c.width);
    EXPECT_STATUS(BC_OK, INFO(name, BC_GPT_NAME_MAX, &c, count - 1));
    EXPECT(strcmp(name, tied ? (c.norm == BC_NORM_LAYER ? "norm.bias" : "norm.weight")
                             : "head.weight") == 0);
#undef INFO
}

static void tensor_names_checks(void)
{
    bc_gpt_config c = tiny(1);
    char *name = h_alloc_bytes(BC_GPT_NAME_MAX);
    size_t off, nb, nd, shape[2];
    int dt, pk;
    EXPECT_STATUS(BC_OK, bc_gpt_tensor_info(name, BC_GPT_NAME_MAX, &off, &nb, &dt, &pk, &nd, shape, &c, 4));
    EXPECT(strcmp(name, "blocks.0.attn.qkv.weight") == 0 && shape[0] == 24 && shape[1] == 8);
    bc_gpt_config ll = h_llama_config(1);
    const char *want[] = {"token.weight", "blocks.0.ln1.weight", "blocks.0.attn.qkv.weight",
                          "blocks.0.attn.proj.weight", "blocks.0.ln2.weight", "blocks.0.up.weight",
                          "blocks.0.gate.weight", "blocks.0.down.weight"};
    const size_t rows[] = {13, 16, 48, 16, 16, 21, 21, 16}, cols[] = {16, 1, 16, 24, 1, 16, 16, 21};
    for (size_t i = 0; i < 8; i++) {
        EXPECT_STATUS(BC_OK, bc_gpt_tensor_info(name, BC_GPT_NAME_MAX, &off, &nb, &dt, &pk, &nd, shape, &ll, i));
        EXPECT(strcmp(name, want[i]) == 0 && shape[0] == rows[i] && shape[1] == cols[i]);
    }
    /* the longest name a big model has still fits BC_GPT_NAME_MAX */
    bc_gpt_config big = tiny(1);
    big.layers = 1000000;
    big.width = 2;
    big.heads = 1;
    EXPECT_STATUS(BC_OK, bc_gpt_tensor_info(name, BC_GPT_NAME_MAX, &off, &nb, &dt, &pk, &nd, shape,
                                            &big, 2 + 12 * 999999 + 4));
    EXPECT(strcmp(name, "blocks.999999.attn.proj.weight") == 0);
}

static void sizes_checks(void)
{
    bc_gpt_config c = tiny(1);
    size_t *n = h_alloc_bytes(sizeof *n);
    bc_gpt_cache cache = {NULL, NULL, 1, 6, 0, NULL, BC_DTYPE_F32};

    EXPECT_STATUS(BC_ENULL, bc_gpt_cache_size(NULL, &c, 1, 4));
    EXPECT_STATUS(BC_ENULL, bc_gpt_cache_size(n, NULL, 1, 4));
    EXPECT_STATUS(BC_ESIZE, bc_gpt_cache_size(n, &c, 0, 4));
    EXPECT_STATUS(BC_ESIZE, bc_gpt_cache_size(n, &c, 1, 0));
    EXPECT_STATUS(BC_ECONTEXT, bc_gpt_cache_size(n, &c, 1, 7));
    EXPECT_STATUS(BC_ECONTEXT, bc_gpt_cache_size(n, &c, 1, H_NEG));
    EXPECT_STATUS(BC_EOVERFLOW, bc_gpt_cache_size(n, &c, H_NEG, 4));
    EXPECT_STATUS(BC_EOVERFLOW, bc_gpt_cache_size(n, &c, H_HALF, 2));
    EXPECT_STATUS(BC_ENULL, bc_gpt_workspace_size(NULL, &c, 1, 4, NULL));
    EXPECT_STATUS(BC_ENULL, bc_gpt_workspace_size(n, NULL, 1, 4, NULL));
    EXPECT_STATUS(BC_ESIZE, bc_gpt_workspace_size(n, &c, 0, 4, NULL));
    EXPECT_STATUS(BC_ESIZE, bc_gpt_workspace_size(n, &c, 1, 0, NULL));
    EXPECT_STATUS(BC_EOVERFLOW, bc_gpt_workspace_size(n, &c, H_NEG, 4, NULL));
    EXPECT_STATUS(BC_EOVERFLOW, bc_gpt_workspace_size(n, &c, (size_t)1 << 32, (size_t)1 << 32, NULL));
    cache.capacity = 7;
    EXPECT_STATUS(BC_ECONTEXT, bc_gpt_workspace_size(n, &c, 1, 4, &cache));
    cache.capacity = 3;
    EXPECT_STATUS(BC_ECONTEXT, bc_gpt_workspace_size(n, &c, 1, 4, &cache));
    EXPECT(h_untouched(n, sizeof *n));

    /* L * B * R * KV Dh, R the capacity in whole tiles of 64 positions */
    EXPECT_STATUS(BC_OK, bc_gpt_cache_size(n, &c, 3, 5));
    EXPECT(*n == 2 * 3 * 64 * 8);
    bc_gpt_config ll = h_llama_config(1);  /* the cache holds KV Dh = 12 per position */
    ll.context = 200;
    EXPECT_STATUS(BC_OK, bc_gpt_cache_size(n, &ll, 3, 64));
    EXPECT(*n == 2 * 3 * 64 * 12);
    EXPECT_STATUS(BC_OK, bc_gpt_cache_size(n, &ll, 3, 65));
    EXPECT(*n == 2 * 3 * 128 * 12);
    EXPECT_STATUS(BC_OK, bc_gpt_workspace_size(n, &c, 2, 3, NULL));
    EXPECT(*n >= 2 * 3 * 8 * 6);
    /* large but addressable: refused or not wrapped */
    bc_gpt_config w = tiny(1);
    w.context = (size_t)1 << 34;
    w.width = 4;
    for (size_t t = (size_t)1 << 20; t <= ((size_t)1 << 34); t <<= 7) {
        int st = bc_gpt_workspace_size(n, &w, 1, t, NULL);
        EXPECT(st == BC_OK || st == BC_EOVERFLOW);
        if (st == BC_OK)
            EXPECT(*n >= t * 4 * 6);
    }
}

static void forward_checks(int tied)
{
    enum { B = 2, T = 4, V = 11, D = 8, L = 2 };
    bc_gpt_config c = tiny(tied);
    size_t nbytes = 0, nw = 0, nwc = 0, nc = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_param_bytes(&nbytes, &c));
    const size_t np = nbytes / 4;  /* float32: any floats are valid parameters */
    EXPECT_STATUS(BC_OK, bc_gpt_cache_size(&nc, &c, B, 6));
    bc_gpt_cache cache = {h_alloc(nc), h_alloc(nc), B, 6, 0, NULL, BC_DTYPE_F32};
    EXPECT_STATUS(BC_OK, bc_gpt_workspace_size(&nw, &c, B, T, NULL));
    EXPECT_STATUS(BC_OK, bc_gpt_workspace_size(&nwc, &c, B, T, &cache));
    float *p = h_alloc(np), *work = h_alloc(nwc > nw ? nwc : nw);
    float *logits = h_alloc(B * T * V), *hidden = h_alloc(L * B * T * D);
    h_fill(p, np, 50, 0.2f);
    int32_t *ids = h_alloc_bytes(B * T * sizeof(int32_t));
    int64_t *ids64 = h_alloc_bytes(B * T * sizeof(int64_t));
    for (int i = 0; i < B * T; i++)
        ids64[i] = ids[i] = (i * 7 + 3) % V;
    const size_t nl = NB(B * T * V), nh = NB(L * B * T * D);
#define UNTOUCHED() EXPECT(h_untouched(logits, nl) && h_untouched(hidden, nh))
#define FWD(lg, hd, ca, pp, cc, ii, it, b, t, lo, wk, wn) \
    bc_gpt_forward(lg, hd, ca, pp, cc, ii, it, b, t, lo, wk, wn)

    EXPECT_STATUS(BC_ENULL, FWD(logits, hidden, NULL, NULL, &c, ids, BC_IDS_INT32, B, T, 0, work, nw));
    EXPECT_STATUS(BC_ENULL, FWD(logits, hidden, NULL, p, NULL, ids, BC_IDS_INT32, B, T, 0, work, nw));
    EXPECT_STATUS(BC_ENULL, FWD(logits, hidden, NULL, p, &c, NULL, BC_IDS_INT32, B, T, 0, work, nw));
    EXPECT_STATUS(BC_ENULL, FWD(logits, hidden, NULL, p, &c, ids, BC_IDS_INT32, B, T, 0, NULL, nw));
    const int bad_types[] = {0, 8, 16, 33, -32, 1};
    for (int i = 0; i < 6; i++)
        EXPECT_STATUS(BC_EOPTION, FWD(logits, hidden, NULL, p, &c, ids, bad_types[i], B, T, 0, work, nw));
    EXPECT_STATUS(BC_ESIZE, FWD(logits, hidden, NULL, p, &c, ids, BC_IDS_INT32, 0, T, 0, work, nw));
    EXPECT_STATUS(BC_ESIZE, FWD(logits, hidden, NULL, p, &c, ids, BC_IDS_INT32, B, 0, 0, work, nw));
    EXPECT_STATUS(BC_ECONTEXT, FWD(logits, hidden, NULL, p, &c, ids, BC_IDS_INT32, 1, 7, 0, work, nw));
    EXPECT_STATUS(BC_ECONTEXT, FWD(logits, hidden, NULL, p, &c, ids, BC_IDS_INT32, 1, H_NEG, 0, work, nw));
    EXPECT_STATUS(BC_EOVERFLOW, FWD(logits, hidden, NULL, p, &c, ids, BC_IDS_INT32, H_NEG, T, 0, work, nw));
    EXPECT_STATUS(BC_EOVERFLOW, FWD(logits, hidden, NULL, p, &c, ids, BC_IDS_INT32, H_HALF, 2, 0, work, nw));
    EXPECT_STATUS(BC_EWORKSPACE, FWD(logits, hidden, NULL, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nw - 1));
    EXPECT_STATUS(BC_EWORKSPACE, FWD(logits, hidden, NULL, p, &c, ids, BC_IDS_INT32, B, T, 0, work, 0));
    bc_gpt_config bad = c;
    bad.heads = 3;
    EXPECT_STATUS(BC_EHEADS, FWD(logits, hidden, NULL, p, &bad, ids, BC_IDS_INT32, B, T, 0, work, nw));
    UNTOUCHED();
    EXPECT(h_untouched(work, NB(nw)));

    /* overlapping buffers */
    EXPECT_STATUS(BC_EALIAS, FWD(logits, logits + 3, NULL, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nw));
    EXPECT_STATUS(BC_EALIAS, FWD(work + 1, NULL, NULL, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nw));
    EXPECT_STATUS(BC_EALIAS, FWD(logits, hidden, NULL, p, &c, ids, BC_IDS_INT32, B, T, 0, p + 5, nw));
    EXPECT_STATUS(BC_EALIAS, FWD(p + np - 1, NULL, NULL, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nw));
    EXPECT_STATUS(BC_EALIAS, FWD((float *)ids, NULL, NULL, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nw));
    bc_gpt_cache ov = cache;
    ov.v = (float *)cache.k + 1;
    EXPECT_STATUS(BC_EALIAS, FWD(logits, hidden, &ov, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nwc));
    ov = cache;
    ov.k = hidden;
    EXPECT_STATUS(BC_EALIAS, FWD(logits, hidden, &ov, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nwc));
    UNTOUCHED();
    EXPECT(h_untouched(work, NB(nw)) && h_untouched(cache.k, NB(nc)) && h_untouched(cache.v, NB(nc)));

    /* token ids: the last one bad, so every other id is read first */
    const int64_t bad_ids[] = {V, -1, (int64_t)1 << 32, INT64_MIN, INT64_MAX, (int64_t)V + ((int64_t)1 << 32)};
    for (int i = 0; i < 6; i++) {
        ids64[B * T - 1] = bad_ids[i];
        EXPECT_STATUS(BC_ERANGE, FWD(logits, hidden, NULL, p, &c, ids64, BC_IDS_INT64, B, T, 0, work, nw));
        if (bad_ids[i] == (int32_t)bad_ids[i]) {
            ids[B * T - 1] = (int32_t)bad_ids[i];
            EXPECT_STATUS(BC_ERANGE, FWD(logits, hidden, NULL, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nw));
        }
    }
    ids[B * T - 1] = INT32_MIN;
    EXPECT_STATUS(BC_ERANGE, FWD(logits, hidden, NULL, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nw));
    ids[B * T - 1] = INT32_MAX;
    EXPECT_STATUS(BC_ERANGE, FWD(logits, hidden, NULL, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nw));
    ids64[B * T - 1] = ids[B * T - 1] = 2;
    UNTOUCHED();

    /* cache misuse: nothing written, the cache does not move */
    bc_gpt_cache k = cache;
    k.k = NULL;
    EXPECT_STATUS(BC_ENULL, FWD(logits, hidden, &k, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nwc));
    k = cache; k.v = NULL;
    EXPECT_STATUS(BC_ENULL, FWD(logits, hidden, &k, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nwc));
    k = cache; k.batch = B + 1;
    EXPECT_STATUS(BC_ESIZE, FWD(logits, hidden, &k, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nwc));
    k = cache; k.length = 7;
    EXPECT_STATUS(BC_ESIZE, FWD(logits, hidden, &k, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nwc));
    k = cache; k.capacity = 0;
    EXPECT_STATUS(BC_ESIZE, FWD(logits, hidden, &k, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nwc));
    k = cache; k.capacity = 7; /* beyond the context */
    EXPECT_STATUS(BC_ECONTEXT, FWD(logits, hidden, &k, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nwc));
    k = cache; k.length = 3;   /* 3 + 4 > 6 */
    EXPECT_STATUS(BC_ECONTEXT, FWD(logits, hidden, &k, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nwc));
    EXPECT(k.length == 3);
    k = cache; k.length = H_NEG;
    EXPECT_STATUS(BC_ESIZE, FWD(logits, hidden, &k, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nwc));
    /* float32 and float16 caches, and q8_0 and q4_0 with Dh a multiple of 32 (6 here) */
    const int bad_dtypes[] = {BC_DTYPE_BF16, -1, 1000, BC_DTYPE_Q8_0, BC_DTYPE_Q4_0};
    for (int i = 0; i < 5; i++) {
        k = cache; k.dtype = bad_dtypes[i];
        EXPECT_STATUS(BC_EOPTION, FWD(logits, hidden, &k, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nwc));
        EXPECT_STATUS(BC_EOPTION, bc_gpt_cache_truncate(&k, &c, 0, 0));
    }
    k = cache;
    EXPECT_STATUS(BC_EWORKSPACE, FWD(logits, hidden, &k, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nwc - 1));
    ids[0] = V;
    EXPECT_STATUS(BC_ERANGE, FWD(logits, hidden, &k, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nwc));
    ids[0] = (int32_t)ids64[0];
    EXPECT(k.length == 0 && h_untouched(cache.k, NB(nc)) && h_untouched(cache.v, NB(nc)));
    UNTOUCHED();

    /* good: finite, in bounds; int32 and int64 ids agree bit for bit */
    EXPECT_STATUS(BC_OK, FWD(logits, hidden, NULL, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nw));
    EXPECT(h_finite(logits, B * T * V) && h_finite(hidden, L * B * T * D));
    EXPECT(h_guard_ok(logits, nl) && h_guard_ok(hidden, nh) && h_guard_ok(work, NB(nwc > nw ? nwc : nw)));
    float *l2 = h_alloc(B * T * V), *last = h_alloc(B * V);
    EXPECT_STATUS(BC_OK, FWD(l2, NULL, NULL, p, &c, ids64, BC_IDS_INT64, B, T, 0, work, nw));
    EXPECT(memcmp(l2, logits, nl) == 0);
    /* no outputs at all is a valid (if useless) call */
    EXPECT_STATUS(BC_OK, FWD(NULL, NULL, NULL, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nw));
    /* last_only: the last position of each row */
    EXPECT_STATUS(BC_OK, FWD(last, NULL, NULL, p, &c, ids, BC_IDS_INT32, B, T, 1, work, nw));
    EXPECT(h_guard_ok(last, NB(B * V)));
    for (int b = 0; b < B; b++)  /* the same bits: one row streams, a prompt runs the GEMM */
        EXPECT(memcmp(last + b * V, logits + (b * T + T - 1) * V, NB(V)) == 0);
    /* causality: a new last token leaves the earlier positions' logits as they were */
    ids[T - 1] = (ids[T - 1] + 1) % V;
    EXPECT_STATUS(BC_OK, FWD(l2, NULL, NULL, p, &c, ids, BC_IDS_INT32, B, T, 0, work, nw));
    EXPECT(memcmp(l2, logits, NB((T - 1) * V)) == 0);
    EXPECT(memcmp(l2 + (T - 1) * V, logits + (T - 1) * V, NB(V)) != 0);
    ids[T - 1] = (int32_t)ids64[T - 1];
    /* the cache: T-1 tokens then one gives the full pass's last logits */
    int32_t *head = h_alloc_bytes(B * (T - 1) * sizeof(int32_t)), *tail = h_alloc_bytes(B * sizeof(int32_t));
    for (int b = 0; b < B; b++) {
        memcpy(head + b * (T - 1), ids + b * T, (T - 1) * sizeof(int32_t));
        tail[b] = ids[b * T + T - 1];
    }
    k = cache;
    EXPECT_STATUS(BC_OK, FWD(NULL, NULL, &k, p, &c, head, BC_IDS_INT32, B, T - 1, 0, work, nwc));
    EXPECT(k.length == T - 1);
    EXPECT_STATUS(BC_OK, FWD(last, NULL, &k, p, &c, tail, BC_IDS_INT32, B, 1, 1, work, nwc));
    EXPECT(k.length == T);
    for (int b = 0; b < B; b++)
        EXPECT(memcmp(last + b * V, logits + (b * T + T - 1) * V, NB(V)) == 0);
    EXPECT(h_guard_ok(cache.k, NB(nc)) && h_guard_ok(cache.v, NB(nc)));
    /* full: 4 + 3 > 6 */
    EXPECT_STATUS(BC_ECONTEXT, FWD(last, NULL, &k, p, &c, head, BC_IDS_INT32, B, T - 1, 0, work, nwc));
    EXPECT(k.length == T);
#undef UNTOUCHED
#undef FWD
}

/* the slot (BC_GPT_FMT_*) of a matrix by its name, -1 for anything else */
static long slot_of(const char *name, const bc_gpt_config *c)
{
    static const char *const kinds[] = {"attn.qkv.weight", "attn.proj.weight",
                                        "up.weight", "gate.weight", "down.weight"};
    if (strcmp(name, "token.weight") == 0)
        return BC_GPT_FMT_TOKEN;
    if (strcmp(name, "head.weight") == 0)
        return BC_GPT_FMT_HEAD;
    for (size_t l = 0; l < c->layers; l++)
        for (int k = 0; k < (int)(sizeof kinds / sizeof *kinds); k++) {
            char want[BC_GPT_NAME_MAX];
            snprintf(want, sizeof want, "blocks.%zu.%s", l, kinds[k]);
            if (strcmp(name, want) == 0)
                return (long)BC_GPT_FMT_LAYER(l, k);
        }
    return -1;
}

static size_t head_dim_of(const bc_gpt_config *c)
{
    return c->head_dim ? c->head_dim : c->width / c->heads;
}

/* Whether tensor `name` (format dt, `total` rows) of a model of config c is a split
 * attn.qkv.weight (bc_gpt.h): then its parts' formats fm and rows */
static int qkv_parts(int fm[3], size_t rows[3], const bc_gpt_config *c, const char *name, int dt,
                     size_t total)
{
    const long slot = c->dtypes ? slot_of(name, c) : -1;
    if (slot < 2 || (slot - 2) % BC_GPT_NMAT != BC_GPT_MAT_QKV)
        return 0;
    fm[0] = dt;
    fm[1] = c->dtypes[slot - BC_GPT_MAT_QKV + BC_GPT_MAT_QKV_K];
    fm[2] = c->dtypes[slot - BC_GPT_MAT_QKV + BC_GPT_MAT_QKV_V];
    rows[1] = rows[2] = (total - c->heads * head_dim_of(c)) / 2;
    rows[0] = total - 2 * rows[1];
    return fm[1] != dt || fm[2] != dt;
}

/* Pack (unpack: `un`) w (shape) to or from p (nb bytes, format dt): tensor `name` of a
 * model of config c, a split attn.qkv.weight part by part */
static void move_matrix(unsigned char *p, float *w, int un, size_t nb, int dt,
                        const size_t shape[2], const bc_gpt_config *c, const char *name)
{
    int fm[3] = {dt, dt, dt};
    size_t rows[3] = {shape[0], 0, 0}, at = 0, r0 = 0;
    qkv_parts(fm, rows, c, name, dt, shape[0]);
    for (int k = 0; k < 3; k++) {
        size_t pb = 0;
        if (!rows[k])
            continue;
        EXPECT_STATUS(BC_OK, bc_pack_size(&pb, fm[k], rows[k], shape[1]));
        if (un)
            EXPECT_STATUS(BC_OK, bc_unpack(w + r0 * shape[1], p + at, pb, fm[k], rows[k], shape[1]));
        else
            EXPECT_STATUS(BC_OK, bc_pack(p + at, pb, w + r0 * shape[1], fm[k], rows[k], shape[1]));
        at += pb;
        r0 += rows[k];
    }
    EXPECT(at == nb);
}

/* Parameters for c: every packed matrix packed from random weights, every
 * float32 tensor random (gains around 1). */
static unsigned char *random_params(const bc_gpt_config *c, uint32_t seed)
{
    size_t bytes = 0, count = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_param_bytes(&bytes, c));
    EXPECT_STATUS(BC_OK, bc_gpt_tensor_count(&count, c));
    unsigned char *p = h_alloc_bytes(bytes);
    for (size_t i = 0; i < count; i++) {
        size_t off, nb, nd, shape[2];
        int dt, pk;
        char name[BC_GPT_NAME_MAX];
        EXPECT_STATUS(BC_OK, bc_gpt_tensor_info(name, sizeof name, &off, &nb, &dt, &pk, &nd, shape, c, i));
        const size_t n = shape[0] * shape[1];
        float *w = h_alloc(n);
        h_fill(w, n, seed + (uint32_t)i, 0.3f);
        if (strstr(name, "ln") || strstr(name, "norm.weight"))
            for (size_t j = 0; j < n; j++)
                w[j] += 1.0f;
        if (pk)
            move_matrix(p + off, w, 0, nb, dt, shape, c, name);
        else
            memcpy(p + off, w, NB(n));
    }
    return p;
}

/* Every architecture option and storage type: finite logits; a cached run (a
 * prompt, then one token at a time) gives the full pass's logits bit for bit;
 * so does the last position alone; and every thread count gives the same bits. */
static void variant_checks(bc_gpt_config c)
{
    enum { B = 2, T = 5 };
    const size_t V = c.vocab;
    unsigned char *p = random_params(&c, 77);
    size_t nw = 0, nwc = 0, nc = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_cache_size(&nc, &c, B, T));
    bc_gpt_cache cache = {h_alloc(nc), h_alloc(nc), B, T, 0, NULL, BC_DTYPE_F32};
    EXPECT_STATUS(BC_OK, bc_gpt_workspace_size(&nw, &c, B, T, NULL));
    EXPECT_STATUS(BC_OK, bc_gpt_workspace_size(&nwc, &c, B, T, &cache));
    float *work = h_alloc(nw > nwc ? nw : nwc), *full = h_alloc(B * T * V), *step = h_alloc(B * V);
    float *again = h_alloc(B * T * V);
    int64_t ids[B * T], col[B];
    for (int i = 0; i < B * T; i++)
        ids[i] = (i * 5 + 2) % (int64_t)V;
    EXPECT_STATUS(BC_OK, bc_gpt_forward(full, NULL, NULL, p, &c, ids, BC_IDS_INT64, B, T, 0, work, nw));
    EXPECT(h_finite(full, B * T * V));
    for (int t = 0; t < T; t++) {
        for (int b = 0; b < B; b++)
            col[b] = ids[b * T + t];
        EXPECT_STATUS(BC_OK, bc_gpt_forward(step, NULL, &cache, p, &c, col, BC_IDS_INT64, B, 1, 1, work, nwc));
        for (int b = 0; b < B; b++)
            EXPECT(memcmp(step + b * V, full + (b * T + t) * V, NB(V)) == 0);
    }
    EXPECT(cache.length == T);
    EXPECT_STATUS(BC_OK, bc_gpt_forward(step, NULL, NULL, p, &c, ids, BC_IDS_INT64, B, T, 1, work, nw));
    for (int b = 0; b < B; b++)
        EXPECT(memcmp(step + b * V, full + (b * T + T - 1) * V, NB(V)) == 0);
    int before = 1;
    EXPECT_STATUS(BC_OK, bc_get_num_threads(&before));
    const int counts[] = {1, 2, 3};
    for (int i = 0; i < 3; i++) {
        EXPECT_STATUS(BC_OK, bc_set_num_threads(counts[i]));
        EXPECT_STATUS(BC_OK, bc_gpt_forward(again, NULL, NULL, p, &c, ids, BC_IDS_INT64, B, T, 0, work, nw));
        EXPECT(memcmp(again, full, NB(B * T * V)) == 0);
    }
    EXPECT_STATUS(BC_OK, bc_set_num_threads(0));
    EXPECT(h_guard_ok(full, NB(B * T * V)) && h_guard_ok(cache.k, NB(nc)) && h_guard_ok(cache.v, NB(nc)));

    /* a half cache: the prompt in one call, then again one token at a time (on
     * 1 and 3 threads): the same bits, finite, near the float cache's (the
     * accuracy itself is the NumPy oracle's test, tests/test_half_cache.py) */
    const size_t nh = (nc + 1) / 2;  /* floats holding nc halves */
    bc_gpt_cache half = {h_alloc(nh), h_alloc(nh), B, T, 0, NULL, BC_DTYPE_F16};
    EXPECT_STATUS(BC_OK, bc_gpt_forward(again, NULL, &half, p, &c, ids, BC_IDS_INT64, B, T, 0, work, nwc));
    EXPECT(half.length == T && h_finite(again, B * T * V));
    float worst = 0.0f, top = 0.0f;
    for (size_t i = 0; i < (size_t)B * T * V; i++) {
        const float d = fabsf(again[i] - full[i]), a = fabsf(full[i]);
        worst = d > worst ? d : worst;
        top = a > top ? a : top;
    }
    /* 0.013 * top at most seen (q4_0i); a format on 8-bit activations turns the
     * half cache's rounding into other roundings of x downstream, the more the
     * wider the model (whole super-blocks: 256) and without norms (logits to
     * 2500): at width 256 measured up to 0.065 (q6_ki) with norms, 0.11 (q8_0i),
     * 0.13 (q4_0i) and 0.26 (q4_ki) without */
    bc_dtype_traits tr;
    EXPECT_STATUS(BC_OK, bc_dtype_traits_of(&tr, c.dtype));
    const int rounds_x = tr.integer;  /* (q8_0i, q4_0i, ..., q5_ki) */
    const float drift = !rounds_x ? 5e-2f : c.norm == BC_NORM_NONE ? 0.4f : 0.1f;
    EXPECT(worst <= drift * (top > 1.0f ? top : 1.0f));
    for (int threads = 1; threads <= 3; threads += 2) {
        EXPECT_STATUS(BC_OK, bc_set_num_threads(threads));
        half.length = 0;
        for (int t = 0; t < T; t++) {
            for (int b = 0; b < B; b++)
                col[b] = ids[b * T + t];
            EXPECT_STATUS(BC_OK, bc_gpt_forward(step, NULL, &half, p, &c, col, BC_IDS_INT64, B, 1, 1, work, nwc));
            for (int b = 0; b < B; b++)
                EXPECT(memcmp(step + b * V, again + (b * T + t) * V, NB(V)) == 0);
        }
    }
    EXPECT_STATUS(BC_OK, bc_set_num_threads(0));
    EXPECT(h_guard_ok(half.k, NB(nh)) && h_guard_ok(half.v, NB(nh)));
}

/* A batch whose sequences sit at different positions (cache->lengths): each
 * sequence's logits are the bits it gets alone with the same history, and a
 * sequence's part of the cache is itself a batch-1 cache. */
static void ragged_checks(int dtype)
{
    bc_gpt_config c = as_dtype(h_llama_config(0), dtype);
    enum { B = 2, CAP = 9 };
    const size_t V = c.vocab;
    unsigned char *p = random_params(&c, 5);
    size_t nc = 0, nc1 = 0, nw = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_cache_size(&nc, &c, B, CAP));
    EXPECT_STATUS(BC_OK, bc_gpt_cache_size(&nc1, &c, 1, CAP));
    EXPECT(nc == 2 * nc1);
    float *k = h_alloc(nc), *v = h_alloc(nc), *k1 = h_alloc(nc1), *v1 = h_alloc(nc1);
    size_t *lengths = h_alloc_bytes(B * sizeof(size_t));
    lengths[0] = lengths[1] = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_workspace_size(&nw, &c, B, 5, NULL));
    float *work = h_alloc(nw), *lg = h_alloc(B * V), *solo = h_alloc(V);
    const int64_t prompt0[3] = {1, 2, 3}, prompt1[5] = {4, 5, 6, 7, 8};
    /* prefill each sequence into its own part of the batched cache */
    bc_gpt_cache r0 = {k, v, 1, CAP, 0, lengths, BC_DTYPE_F32}, r1 = {k + nc1, v + nc1, 1, CAP, 0, lengths + 1, BC_DTYPE_F32};
    EXPECT_STATUS(BC_OK, bc_gpt_forward(NULL, NULL, &r0, p, &c, prompt0, BC_IDS_INT64, 1, 3, 1, work, nw));
    EXPECT_STATUS(BC_OK, bc_gpt_forward(NULL, NULL, &r1, p, &c, prompt1, BC_IDS_INT64, 1, 5, 1, work, nw));
    EXPECT(lengths[0] == 3 && lengths[1] == 5);
    /* one step of both: sequence 1's row equals sequence 1 alone */
    bc_gpt_cache both = {k, v, B, CAP, 0, lengths, BC_DTYPE_F32};
    const int64_t step[B] = {9, 10};
    EXPECT_STATUS(BC_OK, bc_gpt_forward(lg, NULL, &both, p, &c, step, BC_IDS_INT64, B, 1, 1, work, nw));
    EXPECT(lengths[0] == 4 && lengths[1] == 6);
    bc_gpt_cache alone = {k1, v1, 1, CAP, 0, NULL, BC_DTYPE_F32};
    const int64_t seq1[6] = {4, 5, 6, 7, 8, 10};
    EXPECT_STATUS(BC_OK, bc_gpt_forward(NULL, NULL, &alone, p, &c, seq1, BC_IDS_INT64, 1, 5, 1, work, nw));
    EXPECT_STATUS(BC_OK, bc_gpt_forward(solo, NULL, &alone, p, &c, seq1 + 5, BC_IDS_INT64, 1, 1, 1, work, nw));
    EXPECT(memcmp(solo, lg + V, NB(V)) == 0);
    /* bad lengths: refused, nothing written, the lengths as they were */
    float *keep = h_alloc(B * V);
    memcpy(keep, lg, NB(B * V));
    lengths[1] = CAP + 1;
    EXPECT_STATUS(BC_ESIZE, bc_gpt_forward(lg, NULL, &both, p, &c, step, BC_IDS_INT64, B, 1, 1, work, nw));
    lengths[1] = CAP;  /* full: one more token does not fit */
    EXPECT_STATUS(BC_ECONTEXT, bc_gpt_forward(lg, NULL, &both, p, &c, step, BC_IDS_INT64, B, 1, 1, work, nw));
    EXPECT(lengths[0] == 4 && lengths[1] == CAP);
    lengths[1] = 6;
    bc_gpt_cache over = {k, v, B, CAP, 0, (size_t *)(void *)lg, BC_DTYPE_F32};  /* lengths inside the logits */
    EXPECT_STATUS(BC_EALIAS, bc_gpt_forward(lg, NULL, &over, p, &c, step, BC_IDS_INT64, B, 1, 1, work, nw));
    EXPECT(memcmp(keep, lg, NB(B * V)) == 0);
}

/* truncate and copy: a prefix copied to another sequence continues with the bits
 * the source gets, across a tile edge (CAP > 64); misuse refused, nothing changed */
static void cache_ops_checks(int dtype)
{
    bc_gpt_config c = as_dtype(h_llama_config(0), dtype);
    c.context = 80;
    enum { B = 3, CAP = 70, T = 67 };
    const size_t V = c.vocab;
    unsigned char *p = random_params(&c, 9);
    size_t nc = 0, nc1 = 0, nw = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_cache_size(&nc, &c, B, CAP));
    EXPECT_STATUS(BC_OK, bc_gpt_cache_size(&nc1, &c, 1, CAP));
    float *k = h_alloc(nc), *v = h_alloc(nc), *k1 = h_alloc(nc1), *v1 = h_alloc(nc1);
    size_t *lengths = h_alloc_bytes(B * sizeof(size_t));
    lengths[0] = lengths[1] = lengths[2] = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_workspace_size(&nw, &c, 1, T, NULL));
    float *work = h_alloc(nw), *lg = h_alloc(V), *want = h_alloc(V);
    int64_t ids[T];
    for (size_t i = 0; i < T; i++)
        ids[i] = (int64_t)((i * 7 + 3) % V);
    bc_gpt_cache r0 = {k, v, 1, CAP, 0, lengths, BC_DTYPE_F32}, r2 = {k + 2 * nc1, v + 2 * nc1, 1, CAP, 0, lengths + 2, BC_DTYPE_F32};
    bc_gpt_cache all = {k, v, B, CAP, 0, lengths, BC_DTYPE_F32};
    EXPECT_STATUS(BC_OK, bc_gpt_forward(NULL, NULL, &r0, p, &c, ids, BC_IDS_INT64, 1, T - 1, 1, work, nw));
    EXPECT(lengths[0] == T - 1);
    /* the whole sequence in one batch-1 cache: the logits to match */
    bc_gpt_cache alone = {k1, v1, 1, CAP, 0, NULL, BC_DTYPE_F32};
    EXPECT_STATUS(BC_OK, bc_gpt_forward(want, NULL, &alone, p, &c, ids, BC_IDS_INT64, 1, T, 1, work, nw));
    /* sequence 0's 66 positions into sequence 2, then the last token there */
    EXPECT_STATUS(BC_OK, bc_gpt_cache_copy(&all, &c, 2, 0, T - 1));
    EXPECT(lengths[2] == T - 1 && lengths[0] == T - 1 && lengths[1] == 0);
    EXPECT_STATUS(BC_OK, bc_gpt_forward(lg, NULL, &r2, p, &c, ids + T - 1, BC_IDS_INT64, 1, 1, 1, work, nw));
    EXPECT(memcmp(lg, want, NB(V)) == 0);
    /* a shorter prefix (inside the first tile): truncate, recompute the rest */
    EXPECT_STATUS(BC_OK, bc_gpt_cache_copy(&all, &c, 1, 0, 10));
    EXPECT(lengths[1] == 10);
    bc_gpt_cache r1 = {k + nc1, v + nc1, 1, CAP, 0, lengths + 1, BC_DTYPE_F32};
    EXPECT_STATUS(BC_OK, bc_gpt_forward(lg, NULL, &r1, p, &c, ids + 10, BC_IDS_INT64, 1, T - 10, 1, work, nw));
    EXPECT(memcmp(lg, want, NB(V)) == 0);
    EXPECT_STATUS(BC_OK, bc_gpt_cache_truncate(&all, &c, 0, 3));
    EXPECT(lengths[0] == 3);
    EXPECT_STATUS(BC_OK, bc_gpt_forward(lg, NULL, &r0, p, &c, ids + 3, BC_IDS_INT64, 1, T - 3, 1, work, nw));
    EXPECT(memcmp(lg, want, NB(V)) == 0);
    EXPECT_STATUS(BC_OK, bc_gpt_cache_copy(&all, &c, 0, 0, 5));  /* dst == src: a truncation */
    EXPECT(lengths[0] == 5);
    /* misuse: refused, the lengths and the keys as they were */
    float *kk = h_alloc(nc);
    memcpy(kk, k, NB(nc));
    lengths[0] = T; lengths[1] = 4; lengths[2] = 2;
    EXPECT_STATUS(BC_ERANGE, bc_gpt_cache_copy(&all, &c, 3, 0, 1));
    EXPECT_STATUS(BC_ERANGE, bc_gpt_cache_copy(&all, &c, 0, B, 1));
    EXPECT_STATUS(BC_ERANGE, bc_gpt_cache_copy(&all, &c, 1, 2, 3));
    EXPECT_STATUS(BC_ERANGE, bc_gpt_cache_truncate(&all, &c, B, 0));
    EXPECT_STATUS(BC_ERANGE, bc_gpt_cache_truncate(&all, &c, 1, 5));
    EXPECT_STATUS(BC_ENULL, bc_gpt_cache_copy(NULL, &c, 1, 0, 1));
    EXPECT_STATUS(BC_ENULL, bc_gpt_cache_truncate(&all, NULL, 0, 1));
    bc_gpt_cache bad = all;
    bad.k = NULL;
    EXPECT_STATUS(BC_ENULL, bc_gpt_cache_copy(&bad, &c, 1, 0, 1));
    bad = all; bad.capacity = 81;
    EXPECT_STATUS(BC_ECONTEXT, bc_gpt_cache_copy(&bad, &c, 1, 0, 1));
    bad = all; bad.batch = 0;
    EXPECT_STATUS(BC_ESIZE, bc_gpt_cache_truncate(&bad, &c, 0, 0));
    bad = all; bad.lengths = NULL;
    EXPECT_STATUS(BC_EOPTION, bc_gpt_cache_copy(&bad, &c, 1, 0, 0));
    bad = all; bad.v = k + 1;
    EXPECT_STATUS(BC_EALIAS, bc_gpt_cache_copy(&bad, &c, 1, 0, 1));
    bad = all; bad.lengths = (size_t *)(void *)(v + 8);
    EXPECT_STATUS(BC_EALIAS, bc_gpt_cache_truncate(&bad, &c, 0, 0));
    lengths[0] = CAP + 1;
    EXPECT_STATUS(BC_ESIZE, bc_gpt_cache_copy(&all, &c, 1, 0, 1));
    EXPECT(lengths[0] == CAP + 1 && lengths[1] == 4 && lengths[2] == 2);
    EXPECT(memcmp(kk, k, NB(nc)) == 0);
    /* a shared length (lengths NULL): truncate cuts it; batch 1 copies onto itself */
    bc_gpt_cache shared = {k1, v1, 1, CAP, T, NULL, BC_DTYPE_F32};
    EXPECT_STATUS(BC_OK, bc_gpt_cache_truncate(&shared, &c, 0, 7));
    EXPECT(shared.length == 7);
    EXPECT_STATUS(BC_OK, bc_gpt_cache_copy(&shared, &c, 0, 0, 2));
    EXPECT(shared.length == 2);
    EXPECT_STATUS(BC_ERANGE, bc_gpt_cache_truncate(&shared, &c, 0, 3));
}

/* A quantised cache (q8_0, q4_0; Dh a multiple of 32): bc_gpt_cache_bytes's
 * count and refusals; a prompt in one call against one token at a time, on 1
 * and 3 threads, and a sliding window's ring past its rows: the same bits; a
 * copied prefix continues with the bits of the whole (the accuracy itself is the
 * NumPy oracle's test, tests/test_quant_cache.py). */
static void quant_cache_checks(int dtype, size_t window)
{
    bc_gpt_config c = h_llama_config(0);
    c.head_dim = 32;
    c.context = window ? 300 : 80;
    c.window = window;
    const size_t V = c.vocab, T = window ? 260 : 67, bb = dtype == BC_DTYPE_Q8_0 ? 34 : 18;
    enum { B = 2 };
    unsigned char *p = random_params(&c, 11);
    size_t nc = 0, nb = 0, nb1 = 0, nw = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_cache_size(&nc, &c, B, T));
    EXPECT_STATUS(BC_OK, bc_gpt_cache_bytes(&nb, &c, B, T, dtype));
    EXPECT_STATUS(BC_OK, bc_gpt_cache_bytes(&nb1, &c, 1, T, dtype));
    EXPECT(nb == nc / 32 * bb && nb == 2 * nb1);
    /* refusals, nothing written */
    size_t keep = 7;
    EXPECT_STATUS(BC_ENULL, bc_gpt_cache_bytes(NULL, &c, B, T, dtype));
    EXPECT_STATUS(BC_EOPTION, bc_gpt_cache_bytes(&keep, &c, B, T, BC_DTYPE_Q4_K));
    EXPECT_STATUS(BC_ESIZE, bc_gpt_cache_bytes(&keep, &c, 0, T, dtype));
    EXPECT_STATUS(BC_ECONTEXT, bc_gpt_cache_bytes(&keep, &c, B, c.context + 1, dtype));
    bc_gpt_config d6 = h_llama_config(0);  /* Dh 6: no whole blocks */
    EXPECT_STATUS(BC_EOPTION, bc_gpt_cache_bytes(&keep, &d6, B, 6, dtype));
    EXPECT(keep == 7);
    unsigned char *k = h_alloc_bytes(nb), *v = h_alloc_bytes(nb);
    bc_gpt_cache whole = {k, v, B, T, 0, NULL, dtype};
    EXPECT_STATUS(BC_OK, bc_gpt_workspace_size(&nw, &c, B, T, &whole));
    float *work = h_alloc(nw), *full = h_alloc(B * T * V), *step = h_alloc(B * V);
    int64_t *ids = h_alloc_bytes(B * T * sizeof(int64_t)), col[B];
    for (size_t i = 0; i < B * T; i++)
        ids[i] = (int64_t)((i * 5 + 2) % V);
    EXPECT_STATUS(BC_OK, bc_gpt_forward(full, NULL, &whole, p, &c, ids, BC_IDS_INT64, B, T, 0, work, nw));
    EXPECT(whole.length == T && h_finite(full, B * T * V));
    for (int threads = 1; threads <= 3; threads += 2) {
        EXPECT_STATUS(BC_OK, bc_set_num_threads(threads));
        bc_gpt_cache steps = {k, v, B, T, 0, NULL, dtype};
        for (size_t t = 0; t < T; t++) {
            for (int b = 0; b < B; b++)
                col[b] = ids[b * T + t];
            EXPECT_STATUS(BC_OK, bc_gpt_forward(step, NULL, &steps, p, &c, col, BC_IDS_INT64, B, 1, 1, work, nw));
            for (int b = 0; b < B; b++)
                EXPECT(memcmp(step + b * V, full + (b * T + t) * V, NB(V)) == 0);
        }
    }
    EXPECT_STATUS(BC_OK, bc_set_num_threads(0));
    EXPECT(h_guard_ok(k, nb) && h_guard_ok(v, nb));
    /* sequence 0's first T - 1 positions copied into sequence 1: its last token then
     * gives sequence 0's last logits */
    size_t lengths[B] = {T, 0};
    bc_gpt_cache all = {k, v, B, T, 0, lengths, dtype};
    bc_gpt_cache r1 = {k + nb1, v + nb1, 1, T, 0, lengths + 1, dtype};
    EXPECT_STATUS(BC_OK, bc_gpt_cache_copy(&all, &c, 1, 0, T - 1));
    EXPECT(lengths[1] == T - 1);
    EXPECT_STATUS(BC_OK, bc_gpt_forward(step, NULL, &r1, p, &c, ids + T - 1, BC_IDS_INT64, 1, 1, 1, work, nw));
    EXPECT(memcmp(step, full + (T - 1) * V, NB(V)) == 0);
    /* a cache whose buffers overlap by one byte: refused */
    bc_gpt_cache bad = {k, k + nb - 1, B, T, 0, NULL, dtype};
    EXPECT_STATUS(BC_EALIAS, bc_gpt_forward(step, NULL, &bad, p, &c, ids, BC_IDS_INT64, B, 1, 1, work, nw));
}

static void variants_checks(void)
{
    for (int dtype = BC_DTYPE_F32; dtype < BC_NDTYPE; dtype++) {
        if (bc_dtype_info(NULL, 0, NULL, NULL, dtype) != BC_OK)
            continue;  /* a value with no format yet */
        ragged_checks(dtype);
        cache_ops_checks(dtype);
    }
    for (int dtype = BC_DTYPE_F32; dtype < BC_NDTYPE; dtype++) {
        if (bc_dtype_info(NULL, 0, NULL, NULL, dtype) != BC_OK)
            continue;  /* a value with no format yet */
        bc_gpt_config cs[10];
        int n = 0;
        cs[n++] = tiny(1);
        cs[n++] = tiny(0);
        cs[n++] = h_llama_config(1);
        cs[n++] = h_llama_config(0);
        cs[n] = tiny(1); cs[n].placement = BC_PLACE_POST; n++;
        cs[n] = tiny(1); cs[n].norm = BC_NORM_NONE; cs[n].residual = 0; n++;
        cs[n] = tiny(0); cs[n].activation = BC_ACT_RELU; cs[n].kv_heads = 1; n++;
        cs[n] = h_llama_config(1); cs[n].activation = BC_ACT_GELU; cs[n].qkv_bias = 1; n++;
        cs[n] = tiny(1); cs[n].width = 40; cs[n].heads = 5; cs[n].d_ff = 70; cs[n].vocab = 37; n++;
        for (int i = 0; i < n; i++)
            variant_checks(as_dtype(cs[i], dtype));
    }
}

/* ---- the checkpoint families' variants (issue 50) ------------------------- */

/* logits (T, V) of one sequence of ids (T <= 5) with no cache */
static void logits_of(float *out, const unsigned char *p, const bc_gpt_config *c, const int64_t *ids,
                      size_t t)
{
    size_t nw = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_workspace_size(&nw, c, 1, t, NULL));
    float *work = h_alloc(nw);
    EXPECT_STATUS(BC_OK, bc_gpt_forward(out, NULL, NULL, p, c, ids, BC_IDS_INT64, 1, t, 0, work, nw));
}

static void family_checks(void)
{
    static const float good[2] = {1.0f, 0.25f}, bad[2] = {1.0f, -1.0f}, lng[2] = {0.5f, 0.05f};
    bc_gpt_config c = h_llama_config(0);  /* Dh 6 */
    size_t n0 = 0, n1 = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_tensor_count(&n0, &c));
    /* refusals, each by itself */
    c.rope_dim = 3; EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    c.rope_dim = 8; EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    c.rope_dim = 4; c.rope_freqs = bad; EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    c.rope_freqs = good; EXPECT_STATUS(BC_OK, bc_gpt_config_check(&c));
    c.rope_freqs_long = lng; EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));  /* no original */
    c.rope_original = 3; EXPECT_STATUS(BC_OK, bc_gpt_config_check(&c));
    c.rope_dynamic = 2.0f; EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));  /* with tables */
    c = h_llama_config(0);
    c.rope_dynamic = 0.5f; c.rope_original = 3; EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    c.rope_dynamic = 2.0f; EXPECT_STATUS(BC_OK, bc_gpt_config_check(&c));
    c = h_llama_config(0);
    c.qk_norm = 3; EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    c.qk_norm = BC_QK_NORM_HEAD; EXPECT_STATUS(BC_OK, bc_gpt_tensor_count(&n1, &c));
    EXPECT(n1 == n0 + 2 * c.layers);
    c = h_llama_config(0);
    c.embed_scale = NAN; EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    c.embed_scale = -1.0f; EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    c = h_llama_config(0);
    c.attn_softcap = -1.0f; EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    c.attn_softcap = INFINITY; EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    c.attn_softcap = 50.0f; c.logit_softcap = NAN; EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    c.logit_softcap = 30.0f; EXPECT_STATUS(BC_OK, bc_gpt_config_check(&c));
    EXPECT_STATUS(BC_EOPTION, bc_gpt_train_workspace_size(&n1, &c, 1, 4));
    c = h_llama_config(0);
    c.placement = BC_PLACE_SANDWICH; EXPECT_STATUS(BC_OK, bc_gpt_tensor_count(&n1, &c));
    EXPECT(n1 == n0 + 2 * c.layers);
    c = tiny(1); c.placement = BC_PLACE_SANDWICH;  /* LayerNorm */
    EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    c = tiny(1); c.placement = BC_PLACE_POST; c.residual_scale = 2.0f;
    EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
    c = h_llama_config(0);
    static const unsigned char two[2] = {2, 2};
    c.nope_layers = two; EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));  /* no local base */
    c.rope_local_theta = 500.0f; EXPECT_STATUS(BC_OK, bc_gpt_config_check(&c));
    c.rope_dim = 4; EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));  /* local: whole heads */
    /* training refuses every variant */
    c = h_llama_config(0); c.logit_scale = 2.0f;
    EXPECT_STATUS(BC_EOPTION, bc_gpt_train_workspace_size(&n1, &c, 1, 4));

    /* each variant: cached steps, the last position and every thread count give the
     * full pass's bits (variant_checks), in float32 and q8_0 */
    for (int k = 0; k < 2; k++) {
        const int dtype = k ? BC_DTYPE_Q8_0 : BC_DTYPE_F32;
        static const unsigned char nope[2] = {0, 1}, local[2] = {2, 0};
        bc_gpt_config v[9];
        for (int i = 0; i < 9; i++)
            v[i] = h_llama_config(i % 2);
        v[0].rope_dim = 4; v[0].rope_freqs = good; v[0].rope_attn = 1.25f;
        v[1].nope_layers = nope; v[1].qk_norm = BC_QK_NORM_HEAD;
        v[2].qk_norm = BC_QK_NORM_ALL; v[2].placement = BC_PLACE_OUTPUT;
        v[3].placement = BC_PLACE_SANDWICH; v[3].activation = BC_ACT_GEGLU;
        v[3].embed_scale = 4.0f; v[3].attn_scale = 0.3f; v[3].logit_scale = 2.5f;
        v[4].residual_scale = 0.4f;
        v[5].rope_dynamic = 2.0f; v[5].rope_original = 9;  /* never past it here: T <= 5 */
        v[6].placement = BC_PLACE_OUTPUT; v[6].residual_scale = 0.5f; v[6].qkv_bias = 1;
        v[7].nope_layers = local; v[7].rope_local_theta = 500.0f; v[7].rope_freqs = NULL;
        v[8].attn_softcap = 0.5f; v[8].logit_softcap = 1.5f;  /* Gemma 2's caps, biting */
        for (int i = 0; i < 9; i++)
            variant_checks(as_dtype(v[i], dtype));
    }

    /* by length: a sequence past rope_original turns by the long table (longrope) or
     * the dynamic base; up to it by the short one */
    c = h_llama_config(0);
    c.rope_dim = 4; c.rope_freqs = good; c.rope_freqs_long = lng; c.rope_original = 3;
    bc_gpt_config s = c, l = c;
    s.rope_freqs_long = NULL; s.rope_original = 0;
    l.rope_freqs = lng; l.rope_freqs_long = NULL; l.rope_original = 0;
    unsigned char *p = random_params(&c, 91);
    const size_t V = c.vocab;
    const int64_t ids[5] = {1, 4, 2, 8, 5};
    float *a = h_alloc(5 * V), *b = h_alloc(5 * V);
    logits_of(a, p, &c, ids, 3);
    logits_of(b, p, &s, ids, 3);
    EXPECT(memcmp(a, b, NB(3 * V)) == 0);
    logits_of(a, p, &c, ids, 5);
    logits_of(b, p, &l, ids, 5);
    EXPECT(memcmp(a, b, NB(5 * V)) == 0);
    logits_of(b, p, &s, ids, 5);
    EXPECT(memcmp(a, b, NB(5 * V)) != 0);
    /* soft-caps: the logits within the cap and not the uncapped ones */
    bc_gpt_config cap = h_llama_config(0), open_ = h_llama_config(0);
    cap.attn_softcap = 0.5f; cap.logit_softcap = 0.25f;
    logits_of(a, p, &cap, ids, 5);
    logits_of(b, p, &open_, ids, 5);
    EXPECT(memcmp(a, b, NB(5 * V)) != 0);
    for (size_t i = 0; i < 5 * V; i++)
        EXPECT(fabsf(a[i]) <= 0.25f);
    /* every layer local: the plain rotary of the local base, bit for bit */
    static const unsigned char all_local[2] = {2, 2};
    bc_gpt_config loc = h_llama_config(0), base = h_llama_config(0);
    loc.nope_layers = all_local; loc.rope_local_theta = 500.0f;
    base.rope_theta = 500.0f;
    logits_of(a, p, &loc, ids, 5);
    logits_of(b, p, &base, ids, 5);
    EXPECT(memcmp(a, b, NB(5 * V)) == 0);
    /* dynamic: the default up to the original length, another base past it */
    bc_gpt_config d = h_llama_config(0), plain = h_llama_config(0);
    d.rope_dynamic = 4.0f; d.rope_original = 3;
    logits_of(a, p, &d, ids, 3);
    logits_of(b, p, &plain, ids, 3);
    EXPECT(memcmp(a, b, NB(3 * V)) == 0);
    logits_of(a, p, &d, ids, 5);
    logits_of(b, p, &plain, ids, 5);
    EXPECT(memcmp(a, b, NB(V)) == 0);           /* position 0 does not turn */
    EXPECT(memcmp(a + V, b + V, NB(4 * V)) != 0);
}

/* ---- one storage format per matrix (bc_gpt_config.dtypes) ------------------ */

/* the dtypes with a format (values without one yet are refused), in order, but
 * those whose rows must be whole blocks longer than these small models' rows
 * (q4_k: 256; variants_checks gives it models of its own, widened) */
static int known_formats(int *out)
{
    int n = 0;
    for (int d = 0; d < BC_NDTYPE; d++) {
        size_t blk = 1, nb = 0;
        if (bc_dtype_info(NULL, 0, &blk, NULL, d) != BC_OK)
            continue;
        if (blk > 1 && bc_pack_size(&nb, d, 1, blk + 1) == BC_ESIZE)
            continue;
        out[n++] = d;
    }
    return n;
}

/* entry i of a mixed model's formats: every format, in turn */
static int *mixed_formats(const bc_gpt_config *c, int shift)
{
    int known[BC_NDTYPE];
    const int nk = known_formats(known);
    const size_t n = BC_GPT_NFMT(c->layers);
    int *f = h_alloc_bytes(n * sizeof(int));
    for (size_t i = 0; i < n; i++)
        f[i] = known[(i + (size_t)shift) % (size_t)nk];
    return f;
}

/* the layout of a mixed model: the tensors tile the buffer, each matrix in its own
 * format (its bytes that format's), the vectors float32 */
static void mixed_layout_checks(const bc_gpt_config *c)
{
    size_t count = 0, bytes = 0, next = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_tensor_count(&count, c));
    EXPECT_STATUS(BC_OK, bc_gpt_param_bytes(&bytes, c));
    for (size_t i = 0; i < count; i++) {
        size_t off, nb, nd, shape[2], want;
        int dt, pk;
        char name[BC_GPT_NAME_MAX];
        EXPECT_STATUS(BC_OK, bc_gpt_tensor_info(name, sizeof name, &off, &nb, &dt, &pk, &nd, shape, c, i));
        const long slot = slot_of(name, c);
        EXPECT((slot >= 0) == (pk != 0));
        EXPECT(dt == (slot >= 0 ? c->dtypes[slot] : BC_DTYPE_F32));
        int fm[3];
        size_t rows[3];
        if (pk && qkv_parts(fm, rows, c, name, dt, shape[0])) {
            /* a split attn.qkv.weight: its q, k and v rows packed one after another */
            size_t pq, pk2, pv;
            EXPECT_STATUS(BC_OK, bc_pack_size(&pq, fm[0], rows[0], shape[1]));
            EXPECT_STATUS(BC_OK, bc_pack_size(&pk2, fm[1], rows[1], shape[1]));
            EXPECT_STATUS(BC_OK, bc_pack_size(&pv, fm[2], rows[2], shape[1]));
            want = pq + pk2 + pv;
            EXPECT(c->dtypes[slot] == dt);
        } else if (pk) {
            EXPECT_STATUS(BC_OK, bc_pack_size(&want, dt, shape[0], shape[1]));
        } else
            want = 4 * shape[0] * shape[1];
        EXPECT(off == next && nb == want);
        next = off + nb;
    }
    EXPECT(next == bytes);
}

/* x (rows) of every matrix of p (config c) unpacked into q, laid out for f (float32) */
static unsigned char *as_float32(const unsigned char *p, const bc_gpt_config *c, const bc_gpt_config *f)
{
    size_t count = 0, bytes = 0;
    EXPECT_STATUS(BC_OK, bc_gpt_tensor_count(&count, c));
    EXPECT_STATUS(BC_OK, bc_gpt_param_bytes(&bytes, f));
    unsigned char *q = h_alloc_bytes(bytes);
    for (size_t i = 0; i < count; i++) {
        size_t off, nb, nd, shape[2], foff, fnb;
        int dt, pk, fdt, fpk;
        EXPECT_STATUS(BC_OK, bc_gpt_tensor_info(NULL, 0, &off, &nb, &dt, &pk, &nd, shape, c, i));
        EXPECT_STATUS(BC_OK, bc_gpt_tensor_info(NULL, 0, &foff, &fnb, &fdt, &fpk, &nd, shape, f, i));
        if (!pk) {
            memcpy(q + foff, p + off, nb);
            continue;
        }
        float *w = h_alloc(shape[0] * shape[1]);
        char name[BC_GPT_NAME_MAX];
        EXPECT_STATUS(BC_OK, bc_gpt_tensor_info(name, sizeof name, &off, &nb, &dt, &pk, &nd, shape, c, i));
        move_matrix((unsigned char *)p + off, w, 1, nb, dt, shape, c, name);
        EXPECT_STATUS(BC_OK, bc_pack(q + foff, fnb, w, BC_DTYPE_F32, shape[0], shape[1]));
    }
    return q;
}

static void mixed_checks(void)
{
    bc_gpt_config base[3];
    base[0] = h_llama_config(0);
    base[1] = h_llama_config(1);
    base[2] = tiny(0);  /* no SwiGLU: the gate entries are not read */
    int known[BC_NDTYPE];
    const int nk = known_formats(known);
    for (int b = 0; b < 3; b++)
        for (int shift = 0; shift < nk; shift++) {
            bc_gpt_config c = base[b];
            int *f = mixed_formats(&c, shift);
            c.dtypes = f;
            EXPECT_STATUS(BC_OK, bc_gpt_config_check(&c));
            mixed_layout_checks(&c);
            variant_checks(c);
            /* the mixed model computes with its dequantised weights: a float32 model of
             * them gives the same bits (every format feeds the GEMM the same floats) */
            bc_gpt_config fc = base[b];
            unsigned char *p = random_params(&c, 31), *q = as_float32(p, &c, &fc);
            enum { B = 2, T = 4 };
            size_t nw = 0;
            EXPECT_STATUS(BC_OK, bc_gpt_workspace_size(&nw, &c, B, T, NULL));
            float *work = h_alloc(nw), *lm = h_alloc(B * T * c.vocab), *lf = h_alloc(B * T * c.vocab);
            int64_t ids[B * T];
            for (int i = 0; i < B * T; i++)
                ids[i] = (i * 3 + 1) % (int64_t)c.vocab;
            EXPECT_STATUS(BC_OK, bc_gpt_forward(lm, NULL, NULL, p, &c, ids, BC_IDS_INT64, B, T, 0, work, nw));
            EXPECT_STATUS(BC_OK, bc_gpt_forward(lf, NULL, NULL, q, &fc, ids, BC_IDS_INT64, B, T, 0, work, nw));
            /* (the integer formats, q8_0i ... q5_ki, multiply 8-bit activations, bfloat16i
             * bfloat16 ones: close to their weights' float32 model, not equal) */
            int integer = 0;
            for (size_t i = 0; i < BC_GPT_NFMT(c.layers); i++) {
                bc_dtype_traits tr;
                EXPECT_STATUS(BC_OK, bc_dtype_traits_of(&tr, f[i]));
                integer |= tr.integer || f[i] == BC_DTYPE_BF16I;
            }
            if (!integer) {
                EXPECT(memcmp(lm, lf, NB(B * T * c.vocab)) == 0);
            } else {
                float amax = 0.0f, emax = 0.0f;
                for (size_t i = 0; i < (size_t)(B * T) * c.vocab; i++) {
                    amax = fmaxf(amax, fabsf(lf[i]));
                    emax = fmaxf(emax, fabsf(lm[i] - lf[i]));
                }
                EXPECT(emax <= 0.05f * amax + 1e-6f);
            }
            /* training refuses a mixed model */
            size_t n = 0;
            float loss = 0.0f;
            EXPECT_STATUS(BC_EOPTION, bc_gpt_train_workspace_size(&n, &c, 1, 2));
            EXPECT_STATUS(BC_EOPTION, bc_gpt_grad(&loss, NULL, NULL, p, &c, ids, ids, BC_IDS_INT64,
                                                  -100, 1, 2, work, nw));
            /* every entry checked, read or not; the layer bound */
            const size_t nf = BC_GPT_NFMT(c.layers);
            int bad[BC_NDTYPE + 3], nbad = 0;
            bad[nbad++] = -1;
            bad[nbad++] = BC_NDTYPE;
            bad[nbad++] = 1000;
            for (int d = 0; d < BC_NDTYPE; d++)  /* a value with no format yet */
                if (bc_dtype_info(NULL, 0, NULL, NULL, d) != BC_OK)
                    bad[nbad++] = d;
            for (size_t i = 0; i < nf; i++)
                for (int k = 0; k < nbad; k++) {
                    const int keep = f[i];
                    f[i] = bad[k];
                    EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
                    EXPECT_STATUS(BC_EOPTION, bc_gpt_param_bytes(&n, &c));
                    f[i] = keep;
                }
            EXPECT_STATUS(BC_OK, bc_gpt_config_check(&c));
        }
    /* every entry one format: that format's uniform model, bit for bit */
    for (int kd = 0; kd < nk; kd++) {
        const int dtype = known[kd];
        bc_gpt_config u = h_llama_config(0), c = u;
        u.dtype = dtype;
        const size_t nf = BC_GPT_NFMT(c.layers);
        int *f = h_alloc_bytes(nf * sizeof(int));
        for (size_t i = 0; i < nf; i++)
            f[i] = dtype;
        c.dtypes = f;
        c.dtype = known[(kd + 1) % nk];  /* not read: every matrix has its entry */
        size_t bu = 0, bm = 0, n = 0;
        EXPECT_STATUS(BC_OK, bc_gpt_param_bytes(&bu, &u));
        EXPECT_STATUS(BC_OK, bc_gpt_param_bytes(&bm, &c));
        EXPECT(bu == bm);
        /* a uniform model: trains when float32 */
        EXPECT_STATUS(dtype == BC_DTYPE_F32 ? BC_OK : BC_EOPTION,
                      bc_gpt_train_workspace_size(&n, &c, 1, 2));
    }
    /* the bound on layers with per-matrix formats (none without) */
    bc_gpt_config big = tiny(1);
    big.layers = BC_GPT_FMT_LAYERS + 1;
    EXPECT_STATUS(BC_OK, bc_gpt_config_check(&big));
    big.dtypes = h_alloc_bytes(BC_GPT_NFMT(big.layers) * sizeof(int));
    memset((void *)big.dtypes, 0, BC_GPT_NFMT(big.layers) * sizeof(int));
    EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&big));
    big.layers = BC_GPT_FMT_LAYERS;
    EXPECT_STATUS(BC_OK, bc_gpt_config_check(&big));
    /* dtype itself must still be a format */
    bc_gpt_config c = h_llama_config(0);
    c.dtypes = mixed_formats(&c, 1);
    c.dtype = BC_NDTYPE;
    EXPECT_STATUS(BC_EOPTION, bc_gpt_config_check(&c));
}

void test_gpt(void)
{
    config_checks();
    for (int dtype = BC_DTYPE_F32; dtype < BC_NDTYPE; dtype++) {
        if (bc_dtype_info(NULL, 0, NULL, NULL, dtype) != BC_OK)
            continue;  /* a value with no format yet */
        bc_gpt_config c = as_dtype(tiny(1), dtype);
        tensor_info_checks(c);
        c.tie_weights = 0;
        tensor_info_checks(c);
        c = as_dtype(h_llama_config(1), dtype);
        tensor_info_checks(c);
        c.placement = BC_PLACE_POST;  /* no final norm */
        c.tie_weights = 0;
        tensor_info_checks(c);
    }
    tensor_names_checks();
    sizes_checks();
    variants_checks();
    forward_checks(1);
    forward_checks(0);
    mixed_checks();
    family_checks();
    quant_cache_checks(BC_DTYPE_Q8_0, 0);
    quant_cache_checks(BC_DTYPE_Q4_0, 0);
    quant_cache_checks(BC_DTYPE_Q8_0, 16);  /* a ring of 192 rows, 260 positions */
}
