/* gpt.c: the whole GPT of chapter 6, on the shared kernels (kernels.h).
 *
 * All heavy compute goes through bc_k_linear, bc_k_attention, bc_k_layernorm
 * and bc_k_add; this file only validates, lays out and sequences.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bc_check.h"
#include "bc_gpt.h"
#include "kernels.h"

/* ---- overflow-safe size arithmetic, capped at BC_MAX_ELEMENTS ---------- */

static int mul3(size_t *r, size_t a, size_t b, size_t c)
{
    size_t t;
    int s = bc_mul(&t, a, b);
    return s ? s : bc_mul(r, t, c);
}

/* ---- parameter layout --------------------------------------------------- */

/* The twelve tensors of a block, in state_dict order: rows and cols as
 * multiples of D (cols 0: a vector of rows*D). */
enum { BLK_LN1_W, BLK_LN1_B, BLK_QKV_W, BLK_QKV_B, BLK_PROJ_W, BLK_PROJ_B,
       BLK_LN2_W, BLK_LN2_B, BLK_UP_W, BLK_UP_B, BLK_DOWN_W, BLK_DOWN_B, BLK_N };

static const struct { const char *name; size_t rows, cols; } BLOCK_TENSORS[BLK_N] = {
    {"ln1.weight", 1, 0},       {"ln1.bias", 1, 0},
    {"attn.qkv.weight", 3, 1},  {"attn.qkv.bias", 3, 0},
    {"attn.proj.weight", 1, 1}, {"attn.proj.bias", 1, 0},
    {"ln2.weight", 1, 0},       {"ln2.bias", 1, 0},
    {"up.weight", 4, 1},        {"up.bias", 4, 0},
    {"down.weight", 1, 4},      {"down.bias", 1, 0},
};

/* Every offset, in floats, computed once per call from the config. */
typedef struct {
    size_t token, position, blocks, block_size, norm_w, norm_b, head, total;
    size_t blk[BLK_N];  /* offsets inside a block */
} layout;

static int make_layout(layout *lo, const bc_gpt_config *cfg)
{
    const size_t d = cfg->width;
    size_t vd, cd, dd, bs = 0, blocks, off;
    int s;
    if ((s = bc_mul(&vd, cfg->vocab, d)) || (s = bc_mul(&cd, cfg->context, d)) ||
        (s = bc_mul(&dd, d, d)))
        return s;
    for (int j = 0; j < BLK_N; j++) {
        size_t n;
        /* a matrix is (rows*D, cols*D); a vector has rows*D elements */
        if (BLOCK_TENSORS[j].cols)
            s = mul3(&n, dd, BLOCK_TENSORS[j].rows, BLOCK_TENSORS[j].cols);
        else
            s = bc_mul(&n, d, BLOCK_TENSORS[j].rows);
        if (s)
            return s;
        lo->blk[j] = bs;
        if ((s = bc_add(&bs, bs, n)))
            return s;
    }
    lo->block_size = bs; /* 12 D^2 + 13 D */
    if ((s = bc_mul(&blocks, bs, cfg->layers)))
        return s;
    lo->token = 0;
    lo->position = vd;
    if ((s = bc_add(&lo->blocks, vd, cd)) || (s = bc_add(&off, lo->blocks, blocks)))
        return s;
    lo->norm_w = off;
    lo->norm_b = off + d; /* d <= vd: safe after the checks above */
    if ((s = bc_add(&off, off, 2 * d)))
        return s;
    if (cfg->tie_weights) {
        lo->head = lo->token;
        lo->total = off;
    } else {
        lo->head = off;
        if ((s = bc_add(&lo->total, off, vd)))
            return s;
    }
    return BC_OK;
}

int bc_gpt_config_check(const bc_gpt_config *cfg)
{
    layout lo;
    if (!cfg)
        return BC_ENULL;
    if (!cfg->vocab || !cfg->context || !cfg->width || !cfg->heads || !cfg->layers)
        return BC_ESIZE;
    if (!bc_eps_ok(cfg->eps))
        return BC_EOPTION;
    if (cfg->width % cfg->heads)
        return BC_EHEADS;
    return make_layout(&lo, cfg);
}

int bc_gpt_param_count(size_t *n, const bc_gpt_config *cfg)
{
    layout lo;
    int s;
    if (!n)
        return BC_ENULL;
    if ((s = bc_gpt_config_check(cfg)) || (s = make_layout(&lo, cfg)))
        return s;
    *n = lo.total;
    return BC_OK;
}

int bc_gpt_tensor_count(size_t *n, const bc_gpt_config *cfg)
{
    int s;
    if (!n)
        return BC_ENULL;
    if ((s = bc_gpt_config_check(cfg)))
        return s;
    *n = 4 + (size_t)BLK_N * cfg->layers + (cfg->tie_weights ? 0 : 1);
    return BC_OK;
}

int bc_gpt_tensor_info(char *name, size_t name_cap, size_t *offset, size_t *ndim,
                       size_t shape[2], const bc_gpt_config *cfg, size_t index)
{
    layout lo;
    size_t count, off, rows, cols;
    char buf[BC_GPT_NAME_MAX];
    int s;
    if (!offset || !ndim || !shape)
        return BC_ENULL;
    if ((s = bc_gpt_tensor_count(&count, cfg)) || (s = make_layout(&lo, cfg)))
        return s;
    if (index >= count)
        return BC_ERANGE;
    const size_t d = cfg->width, nblk = (size_t)BLK_N * cfg->layers;
    if (index == 0) {
        snprintf(buf, sizeof buf, "token.weight");
        off = lo.token, rows = cfg->vocab, cols = d;
    } else if (index == 1) {
        snprintf(buf, sizeof buf, "position.weight");
        off = lo.position, rows = cfg->context, cols = d;
    } else if (index < 2 + nblk) {
        const size_t i = (index - 2) / BLK_N, j = (index - 2) % BLK_N;
        snprintf(buf, sizeof buf, "blocks.%zu.%s", i, BLOCK_TENSORS[j].name);
        off = lo.blocks + i * lo.block_size + lo.blk[j];
        rows = BLOCK_TENSORS[j].rows * d;
        cols = BLOCK_TENSORS[j].cols * d; /* 0 for a vector */
    } else if (index == 2 + nblk) {
        snprintf(buf, sizeof buf, "norm.weight");
        off = lo.norm_w, rows = d, cols = 0;
    } else if (index == 3 + nblk) {
        snprintf(buf, sizeof buf, "norm.bias");
        off = lo.norm_b, rows = d, cols = 0;
    } else {
        snprintf(buf, sizeof buf, "head.weight");
        off = lo.head, rows = cfg->vocab, cols = d;
    }
    const size_t len = strlen(buf);
    if (name && name_cap <= len)
        return BC_ESIZE;
    if (name)
        memcpy(name, buf, len + 1);
    *offset = off;
    *ndim = cols ? 2 : 1;
    shape[0] = rows;
    shape[1] = cols ? cols : 1;
    return BC_OK;
}

/* ---- cache and workspace ------------------------------------------------ */

int bc_gpt_cache_size(size_t *n, const bc_gpt_config *cfg, size_t batch, size_t capacity)
{
    size_t t, r;
    int s;
    if (!n)
        return BC_ENULL;
    if ((s = bc_gpt_config_check(cfg)))
        return s;
    if (!batch || !capacity)
        return BC_ESIZE;
    if (capacity > cfg->context)
        return BC_ECONTEXT;
    if ((s = mul3(&t, cfg->layers, batch, capacity)) || (s = bc_mul(&r, t, cfg->width)))
        return s;
    *n = r;
    return BC_OK;
}

/* The workspace, carved in this order (floats):
 *   x (N,D) residual, xn (N,D) normed / branch output, att (N,D) attention
 *   output, buf (N,4D) qkv (N,3D) then the MLP hidden (N,4D). N = B*T. */
static int work_parts(size_t *nd, size_t *total, const bc_gpt_config *cfg,
                      size_t batch, size_t seq)
{
    size_t n;
    int s;
    if ((s = bc_mul(&n, batch, seq)) || (s = bc_mul(nd, n, cfg->width)))
        return s;
    return bc_mul(total, *nd, 7);
}

int bc_gpt_workspace_size(size_t *n, const bc_gpt_config *cfg, size_t batch, size_t seq,
                          const bc_gpt_cache *cache)
{
    size_t nd;
    int s;
    if (!n)
        return BC_ENULL;
    if ((s = bc_gpt_config_check(cfg)))
        return s;
    if (!batch || !seq)
        return BC_ESIZE;
    if (cache && cache->capacity > cfg->context)
        return BC_ECONTEXT;
    if (cache && seq > cache->capacity)
        return BC_ECONTEXT;
    return work_parts(&nd, n, cfg, batch, seq);
}

/* ---- forward ------------------------------------------------------------ */

/* The id at row i, or BC_ERANGE outside [0, vocab). Each id is read once,
 * checked and used as read: ids another thread changes meanwhile can give
 * wrong tokens but never an index outside the table. */
static int id_at(size_t *id, const void *ids, int ids_type, size_t i, size_t vocab)
{
    const int64_t v = ids_type == BC_IDS_INT32 ? (int64_t)((const int32_t *)ids)[i]
                                               : ((const int64_t *)ids)[i];
    if (v < 0 || (uint64_t)v >= (uint64_t)vocab)
        return BC_ERANGE;
    *id = (size_t)v;
    return BC_OK;
}

// x (N,D) = wte[ids] + wpe[pos0 + t], N = B*T, row b*T+t; BC_ERANGE for a bad id
static int embed(float *x, const float *wte, const float *wpe, const void *ids, int ids_type,
                 size_t batch, size_t seq, size_t pos0, size_t d, size_t vocab, const bc_ctx *cx)
{
    for (size_t b = 0; b < batch; b++)
        for (size_t t = 0; t < seq; t++) {
            const size_t r = b * seq + t;
            size_t id;
            const int s = id_at(&id, ids, ids_type, r, vocab);
            if (s)
                return s;
            bc_k_add(x + r * d, wte + id * d, wpe + (pos0 + t) * d, d, cx);
        }
    return BC_OK;
}

// cache rows (T,D) at position pos0 of layer l, row b <- src (T,.) row stride lds
static void cache_store(float *dst, const float *src, size_t lds, size_t seq, size_t d)
{
    for (size_t t = 0; t < seq; t++)
        memcpy(dst + t * d, src + t * lds, d * sizeof(float));
}

/* Everything bc_gpt_forward checked, as checked: the cache's fields are read
 * once, into c, and only that copy is used afterwards (a caller changing its
 * struct during the call cannot move a write past the buffers checked). */
typedef struct {
    layout lo;
    bc_gpt_cache c;   /* a copy of *cache (has_cache) */
    int has_cache;
    size_t n, nd;     /* N = B*T rows, N*D */
    size_t pos0;      /* the first position: the cache's length, or 0 */
    size_t cap;       /* rows per (layer, sequence) of the cache, or T */
} fwd_plan;

static int forward_plan(fwd_plan *p, const float *logits, const float *hidden,
                        const bc_gpt_cache *cache, const float *params, const bc_gpt_config *cfg,
                        const void *ids, int ids_type, size_t batch, size_t seq, int last_only,
                        const float *work, size_t work_size)
{
    size_t need, cache_n = 0, logits_n = 0, hidden_n = 0;
    int s;
    if (!params || !ids || !work)
        return BC_ENULL;
    if ((s = bc_gpt_config_check(cfg)) || (s = make_layout(&p->lo, cfg)))
        return s;
    if (ids_type != BC_IDS_INT32 && ids_type != BC_IDS_INT64)
        return BC_EOPTION;
    if (!batch || !seq)
        return BC_ESIZE;
    p->has_cache = cache != NULL;
    p->pos0 = 0;
    p->cap = seq;
    if (cache) {
        const bc_gpt_cache c = *cache;  /* read once */
        if (!c.k || !c.v)
            return BC_ENULL;
        if (c.batch != batch || !c.capacity || c.length > c.capacity)
            return BC_ESIZE;
        if (c.capacity > cfg->context || seq > c.capacity - c.length)
            return BC_ECONTEXT;
        if ((s = bc_gpt_cache_size(&cache_n, cfg, batch, c.capacity)))
            return s;
        p->c = c;
        p->pos0 = c.length;
        p->cap = c.capacity;
    } else if (seq > cfg->context) {
        return BC_ECONTEXT;
    }
    if ((s = bc_mul(&p->n, batch, seq)) || (s = work_parts(&p->nd, &need, cfg, batch, seq)))
        return s;
    if (work_size < need)
        return BC_EWORKSPACE;
    if (logits && (s = bc_mul(&logits_n, last_only ? batch : p->n, cfg->vocab)))
        return s;
    if (hidden && (s = bc_mul(&hidden_n, p->nd, cfg->layers)))
        return s;
    /* outputs may not overlap each other, the parameters or the ids */
    const size_t ids_n = ids_type == BC_IDS_INT64 ? 2 * p->n : p->n;
    const float *in[2] = {params, (const float *)ids};
    const size_t in_n[2] = {p->lo.total, ids_n};
    const float *out[5] = {logits, hidden, work, cache ? p->c.k : NULL, cache ? p->c.v : NULL};
    const size_t out_n[5] = {logits_n, hidden_n, need, cache_n, cache_n};
    for (int i = 0; i < 5; i++) {
        for (int j = 0; j < 2; j++)
            if (bc_overlap(out[i], out_n[i], in[j], in_n[j]))
                return BC_EALIAS;
        for (int j = i + 1; j < 5; j++)
            if (bc_overlap(out[i], out_n[i], out[j], out_n[j]))
                return BC_EALIAS;
    }
    return BC_OK;
}

/* Layer l on the residual stream x (N,D), in place; scratch xn, att (N,D), buf (N,4D).
 *   x += proj(attn(qkv(ln1(x))));  x += down(gelu_tanh(up(ln2(x)))) */
static void layer_forward(float *x, float *xn, float *att, float *buf, const float *params,
                          const bc_gpt_config *cfg, const fwd_plan *p, size_t l,
                          size_t batch, size_t seq, const bc_ctx *cx)
{
    const size_t d = cfg->width, h = cfg->heads, dh = d / h, n = p->n;
    const float *w = params + p->lo.blocks + l * p->lo.block_size;
    const size_t *o = p->lo.blk;
    bc_k_layernorm(xn, x, w + o[BLK_LN1_W], w + o[BLK_LN1_B], n, d, cfg->eps, cx);
    bc_k_linear(buf, xn, w + o[BLK_QKV_W], w + o[BLK_QKV_B], NULL, n, d, 3 * d, BC_ACT_NONE, cx);
    for (size_t b = 0; b < batch; b++) {
        const float *q = buf + b * seq * 3 * d;
        const float *k = q + d, *v = q + 2 * d;
        size_t ldk = 3 * d, tk = seq;
        if (p->has_cache) {
            const size_t row = (l * batch + b) * p->cap * d;
            cache_store(p->c.k + row + p->pos0 * d, k, 3 * d, seq, d);
            cache_store(p->c.v + row + p->pos0 * d, v, 3 * d, seq, d);
            k = p->c.k + row;
            v = p->c.v + row;
            ldk = d;
            tk = p->pos0 + seq;
        }
        bc_k_attention(att + b * seq * d, d, q, 3 * d, k, ldk, v, ldk, seq, tk, h, dh, p->pos0,
                       1, cx);
    }
    /* the residual adds fused into the proj and down epilogues */
    bc_k_linear(x, att, w + o[BLK_PROJ_W], w + o[BLK_PROJ_B], x, n, d, d, BC_ACT_NONE, cx);
    bc_k_layernorm(xn, x, w + o[BLK_LN2_W], w + o[BLK_LN2_B], n, d, cfg->eps, cx);
    bc_k_linear(buf, xn, w + o[BLK_UP_W], w + o[BLK_UP_B], NULL, n, d, 4 * d, BC_ACT_GELU_TANH,
                cx);
    bc_k_linear(x, buf, w + o[BLK_DOWN_W], w + o[BLK_DOWN_B], x, n, 4 * d, d, BC_ACT_NONE, cx);
}

// logits (B,T,V) or (B,1,V) = head(norm(x (N,D))); scratch xn (N,D)
static void head_forward(float *logits, float *xn, const float *x, const float *params,
                         const bc_gpt_config *cfg, const fwd_plan *p, size_t batch, size_t seq,
                         int last_only, const bc_ctx *cx)
{
    const size_t d = cfg->width;
    const float *g = params + p->lo.norm_w, *bb = params + p->lo.norm_b;
    size_t rows = p->n;
    if (last_only) {
        for (size_t b = 0; b < batch; b++)
            bc_k_layernorm(xn + b * d, x + (b * seq + seq - 1) * d, g, bb, 1, d, cfg->eps, cx);
        rows = batch;
    } else {
        bc_k_layernorm(xn, x, g, bb, p->n, d, cfg->eps, cx);
    }
    bc_k_linear(logits, xn, params + p->lo.head, NULL, NULL, rows, d, cfg->vocab, BC_ACT_NONE, cx);
}

int bc_gpt_forward(float *logits, float *hidden, bc_gpt_cache *cache,
                   const float *params, const bc_gpt_config *config,
                   const void *ids, int ids_type, size_t batch, size_t seq, int last_only,
                   float *work, size_t work_size)
{
    fwd_plan p;
    bc_ctx cx;
    int s;
    if (!config)
        return BC_ENULL;
    /* the config is read once: the sizes checked are the sizes used */
    const bc_gpt_config cfg_copy = *config, *cfg = &cfg_copy;
    /* validate everything before writing anything */
    if ((s = forward_plan(&p, logits, hidden, cache, params, cfg, ids, ids_type, batch, seq,
                          last_only, work, work_size)))
        return s;
    if ((s = bc_rt_ctx(&cx, cfg->width / cfg->heads)))
        return s;
    /* the embedding checks each id as it reads it, and writes only the workspace,
     * so a bad id still leaves every output untouched */
    const size_t d = cfg->width, nd = p.nd;
    float *x = work, *xn = x + nd, *att = xn + nd, *buf = att + nd;
    if ((s = embed(x, params + p.lo.token, params + p.lo.position, ids, ids_type, batch, seq,
                   p.pos0, d, cfg->vocab, &cx)))
        return s;
    for (size_t l = 0; l < cfg->layers; l++) {
        layer_forward(x, xn, att, buf, params, cfg, &p, l, batch, seq, &cx);
        if (hidden)
            memcpy(hidden + l * nd, x, nd * sizeof(float));
    }
    if (logits)
        head_forward(logits, xn, x, params, cfg, &p, batch, seq, last_only, &cx);
    if (cache)
        cache->length = p.pos0 + seq;  /* from the length checked, not a second read */
    return BC_OK;
}
