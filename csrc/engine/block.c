/* block.c: the general transformer block at runtime sizes, and a stack of them.
 *
 * pre:  x = x + attn(norm1(x));  x = x + ffn(norm2(x))
 * post: x = norm1(x + attn(x));  x = norm2(x + ffn(x))      (the 2017 original)
 * residual = 0 drops the "x +". attn: one packed qkv linear (K and V are
 * projected once), multi-head attention per sequence, then proj.
 * ffn: down(act(up(x))), or down(silu(gate(x)) * up(x)) for swiglu.
 *
 * Everything is computed in a caller-provided workspace; the kernels' own
 * tiles live in the call's context (bc_rt_ctx), taken before anything is
 * written.
 */
#include <string.h>
#include "bc_engine.h"
#include "bc_check.h"
#include "kernels.h"

/* Sizes derived from a config and (B,T), all overflow-checked. */
typedef struct {
    size_t d, h, dh, f, b, t, n;  /* n = B*T rows */
    size_t nd, n3d, nf;           /* N*D, N*3D, N*F */
    size_t dd, fd;                /* D*D, F*D */
    size_t total;                 /* workspace floats */
} dims;

static int config_ok(const bc_block_config *cfg)
{
    if (!cfg->d_model || !cfg->n_heads || !cfg->d_ff)
        return BC_ESIZE;
    if (cfg->d_model % cfg->n_heads)
        return BC_EHEADS;
    if ((cfg->norm != BC_NORM_RMS && cfg->norm != BC_NORM_LAYER && cfg->norm != BC_NORM_NONE)
        || (cfg->placement != BC_PLACE_PRE && cfg->placement != BC_PLACE_POST)
        || (cfg->activation != BC_ACT_GELU_TANH && cfg->activation != BC_ACT_GELU
            && cfg->activation != BC_ACT_RELU && cfg->activation != BC_ACT_SWIGLU)
        || !bc_eps_ok(cfg->eps))
        return BC_EOPTION;
    return BC_OK;
}

static int get_dims(dims *s, const bc_block_config *cfg, size_t b, size_t t)
{
    int st;
    if ((st = config_ok(cfg)))
        return st;
    if (!b || !t)
        return BC_ESIZE;
    s->d = cfg->d_model;
    s->h = cfg->n_heads;
    s->dh = s->d / s->h;
    s->f = cfg->d_ff;
    s->b = b;
    s->t = t;
    size_t d3, tot, ff;
    if ((st = bc_mul(&s->n, b, t)) || (st = bc_mul(&d3, 3, s->d))
        || (st = bc_mul(&s->nd, s->n, s->d)) || (st = bc_mul(&s->n3d, s->n, d3))
        || (st = bc_mul(&s->nf, s->n, s->f)) || (st = bc_mul(&s->dd, s->d, d3))
        || (st = bc_mul(&s->fd, s->f, s->d)))
        return st;
    s->dd /= 3;  /* D*D, checked through the larger 3D*D */
    /* xn, att, sub (N,D); qkv (N,3D); hidden (N,F) and gate (N,F) for swiglu */
    ff = cfg->activation == BC_ACT_SWIGLU ? 2 : 1;
    if ((st = bc_mul(&ff, ff, s->nf)) || (st = bc_add(&tot, s->n3d, ff))
        || (st = bc_add(&tot, tot, s->nd)) || (st = bc_add(&tot, tot, s->nd))
        || (st = bc_add(&tot, tot, s->nd)))
        return st;
    s->total = tot;
    return BC_OK;
}

int bc_block_workspace_size(size_t *n_floats, const bc_block_config *cfg, size_t b, size_t t)
{
    dims s;
    int st;
    if (!n_floats || !cfg)
        return BC_ENULL;
    if ((st = get_dims(&s, cfg, b, t)))
        return st;
    *n_floats = s.total;
    return BC_OK;
}

/* The weights of one block: required parts present, none overlapping the
 * outputs (y, the optional hidden states) or the workspace. */
static int weights_ok(const bc_block_weights *w, const bc_block_config *cfg, const dims *s,
                      const float *y, size_t ny, const float *work, size_t nwork)
{
    const int swiglu = cfg->activation == BC_ACT_SWIGLU;
    if (!w->qkv_w || !w->proj_w || !w->up_w || !w->down_w || (swiglu && !w->gate_w))
        return BC_ENULL;
    const struct { const float *p; size_t n; } parts[] = {
        { w->qkv_w, 3 * s->dd }, { w->qkv_b, 3 * s->d }, { w->proj_w, s->dd }, { w->proj_b, s->d },
        { w->up_w, s->fd }, { w->up_b, s->f }, { swiglu ? w->gate_w : NULL, s->fd },
        { swiglu ? w->gate_b : NULL, s->f }, { w->down_w, s->fd }, { w->down_b, s->d },
        { w->ln1_w, s->d }, { w->ln1_b, s->d }, { w->ln2_w, s->d }, { w->ln2_b, s->d },
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (bc_overlap(y, ny, parts[i].p, parts[i].n) || bc_overlap(work, nwork, parts[i].p, parts[i].n))
            return BC_EALIAS;
    return BC_OK;
}

// y (N,D), x (N,D), g (D) or NULL, b (D) or NULL; y may be x
static void norm(float *y, const float *x, const float *g, const float *b,
                 const bc_block_config *cfg, const dims *s, const bc_ctx *cx)
{
    if (cfg->norm == BC_NORM_RMS)
        bc_k_rmsnorm(y, x, g, s->n, s->d, cfg->eps, cx);
    else if (cfg->norm == BC_NORM_LAYER)
        bc_k_layernorm(y, x, g, b, s->n, s->d, cfg->eps, cx);
    else if (y != x)
        memcpy(y, x, s->nd * sizeof(float));
}

// out (N,D) = r + proj(attention(qkv(a (N,D)))); r (N,D) or NULL, may be out;
// scratch qkv (N,3D), att (N,D)
static void attn_sublayer(float *out, const float *a, const float *r, const bc_block_config *cfg,
                          const bc_block_weights *w, const dims *s,
                          float *qkv, float *att, const bc_ctx *cx)
{
    const size_t d = s->d, d3 = 3 * s->d;
    bc_k_linear(qkv, a, w->qkv_w, w->qkv_b, NULL, s->n, d, d3, BC_ACT_NONE, cx);
    for (size_t bi = 0; bi < s->b; bi++) {
        const float *q = qkv + bi * s->t * d3;
        bc_k_attention(att + bi * s->t * d, d, q, d3, q + d, d3, q + 2 * d, d3,
                       s->t, s->t, s->h, s->dh, 0, cfg->causal != 0, cx);
    }
    bc_k_linear(out, att, w->proj_w, w->proj_b, r, s->n, d, d, BC_ACT_NONE, cx);
}

// out (N,D) = r + down(act(up(a))) or r + down(silu(gate(a)) * up(a));
// r (N,D) or NULL, may be out; scratch hid, gat (N,F)
static void ffn_sublayer(float *out, const float *a, const float *r, const bc_block_config *cfg,
                         const bc_block_weights *w, const dims *s, float *hid, float *gat,
                         const bc_ctx *cx)
{
    if (cfg->activation == BC_ACT_SWIGLU) {
        bc_k_linear(hid, a, w->up_w, w->up_b, NULL, s->n, s->d, s->f, BC_ACT_NONE, cx);
        bc_k_linear(gat, a, w->gate_w, w->gate_b, NULL, s->n, s->d, s->f, BC_ACT_NONE, cx);
        bc_k_swiglu(hid, gat, hid, s->nf, cx);
    } else {
        /* the activation fused into the up projection's epilogue */
        bc_k_linear(hid, a, w->up_w, w->up_b, NULL, s->n, s->d, s->f, cfg->activation, cx);
    }
    bc_k_linear(out, hid, w->down_w, w->down_b, r, s->n, s->f, s->d, BC_ACT_NONE, cx);
}

/* One block, already validated. y may be x. */
static void block(float *y, const float *x, const bc_block_config *cfg,
                  const bc_block_weights *w, const dims *s, float *work, const bc_ctx *cx)
{
    float *xn = work, *att = xn + s->nd, *sub = att + s->nd, *qkv = sub + s->nd;
    float *hid = qkv + s->n3d, *gat = hid + s->nf;
    const int res = cfg->residual != 0;

    /* the residual additions are fused into the proj and down epilogues */
    if (cfg->placement == BC_PLACE_PRE) {
        const float *a = x;
        if (cfg->norm != BC_NORM_NONE) {
            norm(xn, x, w->ln1_w, w->ln1_b, cfg, s, cx);
            a = xn;
        }
        attn_sublayer(y, a, res ? x : NULL, cfg, w, s, qkv, att, cx);  /* x dead now */
        a = y;
        if (cfg->norm != BC_NORM_NONE) {
            norm(xn, y, w->ln2_w, w->ln2_b, cfg, s, cx);
            a = xn;
        }
        ffn_sublayer(y, a, res ? y : NULL, cfg, w, s, hid, gat, cx);
    } else {
        attn_sublayer(sub, x, res ? x : NULL, cfg, w, s, qkv, att, cx);
        norm(y, sub, w->ln1_w, w->ln1_b, cfg, s, cx);
        ffn_sublayer(sub, y, res ? y : NULL, cfg, w, s, hid, gat, cx);
        norm(y, sub, w->ln2_w, w->ln2_b, cfg, s, cx);
    }
}

int bc_stack_forward(float *y, float *hidden, const float *x, const bc_block_config *config,
                     const bc_block_weights *w, size_t n_blocks, size_t b, size_t t,
                     float *work, size_t work_len)
{
    dims s;
    size_t nh = 0;
    int st;
    if (!y || !x || !config || !w || !work)
        return BC_ENULL;
    /* the config is read once: the sizes checked are the sizes used */
    const bc_block_config cfg_copy = *config, *cfg = &cfg_copy;
    if ((st = get_dims(&s, cfg, b, t)))
        return st;
    if (!n_blocks)
        return BC_ESIZE;
    if (hidden && (st = bc_mul(&nh, n_blocks, s.nd)))
        return st;
    if (work_len < s.total)
        return BC_EWORKSPACE;
    if ((y != x && bc_overlap(y, s.nd, x, s.nd)) || bc_overlap(work, s.total, x, s.nd)
        || bc_overlap(work, s.total, y, s.nd) || bc_overlap(hidden, nh, x, s.nd)
        || bc_overlap(hidden, nh, y, s.nd) || bc_overlap(hidden, nh, work, s.total))
        return BC_EALIAS;
    for (size_t i = 0; i < n_blocks; i++) {
        if ((st = weights_ok(&w[i], cfg, &s, y, s.nd, work, s.total)))
            return st;
    }
    if (hidden) {
        /* the weights must not overlap the hidden states either */
        for (size_t i = 0; i < n_blocks; i++)
            if ((st = weights_ok(&w[i], cfg, &s, hidden, nh, NULL, 0)))
                return st;
    }
    bc_ctx cx;
    if ((st = bc_rt_ctx(&cx, s.dh)))
        return st;
    const float *in = x;
    for (size_t i = 0; i < n_blocks; i++) {
        float *out = hidden ? hidden + i * s.nd : y;
        block(out, in, cfg, &w[i], &s, work, &cx);
        in = out;
    }
    if (hidden)
        memcpy(y, in, s.nd * sizeof(float));
    return BC_OK;
}

int bc_block_forward(float *y, const float *x, const bc_block_config *cfg,
                     const bc_block_weights *w, size_t b, size_t t,
                     float *work, size_t work_len)
{
    return bc_stack_forward(y, NULL, x, cfg, w, 1, b, t, work, work_len);
}
