/* block.c: the general transformer block at runtime sizes, and a stack of them:
 * the validated entry points over the shared layer (bc_layer.h, which says
 * what every option computes), on a caller's row-major float32 weights.
 *
 * Everything is computed in a caller-provided workspace; the kernels' own
 * tiles live in the call's context (bc_rt_ctx), taken before anything is
 * written.
 */
#include <string.h>
#include "bc_engine.h"
#include "bc_check.h"
#include "bc_layer.h"

/* Sizes derived from a config and (B,T), all overflow-checked. */
typedef struct {
    size_t d, h, dh, f, b, t, n;  /* n = B*T rows */
    size_t nd;                    /* N*D */
    size_t dd, fd;                /* D*D, F*D */
    size_t total;                 /* workspace floats */
    bc_layer_cfg lc;              /* the layer this config is */
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
    size_t d3;
    if ((st = bc_mul(&s->n, b, t)) || (st = bc_mul(&d3, 3, s->d))
        || (st = bc_mul(&s->nd, s->n, s->d)) || (st = bc_mul(&s->dd, s->d, d3))
        || (st = bc_mul(&s->fd, s->f, s->d)))
        return st;
    s->dd /= 3;  /* D*D, checked through the larger 3D*D */
    const bc_layer_cfg lc = {s->d, s->h, s->h, s->dh, s->f, cfg->norm, cfg->placement,
                             cfg->activation, cfg->causal != 0, cfg->residual != 0, cfg->eps,
                             0, BC_QK_NORM_NONE, 0.0f, 0.0f, 0.0f};
    s->lc = lc;
    return bc_layer_work(&s->total, &s->lc, s->n);
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

/* The layer's view of a block's weights (a caller's row-major matrices). */
static bc_layer_w layer_weights(const bc_block_weights *w)
{
    const bc_layer_w lw = {
        {w->qkv_w, BC_WF_ROWS}, {w->proj_w, BC_WF_ROWS}, {w->up_w, BC_WF_ROWS},
        {w->gate_w, BC_WF_ROWS}, {w->down_w, BC_WF_ROWS},
        w->qkv_b, w->proj_b, w->up_b, w->gate_b, w->down_b,
        w->ln1_w, w->ln1_b, w->ln2_w, w->ln2_b,
        NULL, NULL, NULL, NULL,
    };
    return lw;
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
    const bc_layer_pos pos = {NULL, NULL, NULL, NULL, 0, 0, NULL, NULL, 0};
    const float *in = x;
    for (size_t i = 0; i < n_blocks; i++) {
        float *out = hidden ? hidden + i * s.nd : y;
        const bc_layer_w lw = layer_weights(&w[i]);
        bc_layer_forward(out, in, &s.lc, &lw, &pos, b, t, work, NULL, &cx);
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

/* ---- backward ------------------------------------------------------------ */

/* The backward's workspace (floats): the structs, copied once (wcopy, gcopy);
 * the inputs of blocks 1..n-1 (n-1 of N*D) and the last block's output; the n
 * records; one region the forward's and the backward's layer workspaces take
 * in turn. */
typedef struct {
    size_t wcopy, gcopy, inputs, last, recs, rec, scratch, total;
} bwd_work;

/* floats holding `bytes`, a whole number of words (so the next part stays word aligned) */
static size_t floats_for(size_t bytes)
{
    const size_t word = sizeof(void *) / sizeof(float);
    return ((bytes + sizeof(float) - 1) / sizeof(float) + word - 1) / word * word;
}

static int bwd_plan(bwd_work *bw, dims *s, const bc_block_config *cfg, size_t n_blocks,
                    size_t b, size_t t)
{
    size_t wb, gb, in, recs, bwdw, at;
    int st;
    if ((st = get_dims(s, cfg, b, t)))
        return st;
    if (!n_blocks)
        return BC_ESIZE;
    if ((st = bc_mul_bytes(&wb, n_blocks, sizeof(bc_block_weights)))
        || (st = bc_mul_bytes(&gb, n_blocks, sizeof(bc_block_grads)))
        || (st = bc_mul(&in, n_blocks - 1, s->nd))
        || (st = bc_layer_rec_size(&bw->rec, &s->lc, b, t))
        || (st = bc_mul(&recs, n_blocks, bw->rec))
        || (st = bc_layer_bwd_work(&bwdw, &s->lc, b, t)))
        return st;
    bw->wcopy = 0;  /* from the workspace's first word-aligned float (one float spare) */
    bw->gcopy = floats_for(wb);
    if ((st = bc_add(&at, bw->gcopy, floats_for(gb) + 1)))
        return st;
    at = (at + 15) & ~(size_t)15;
    bw->inputs = at;
    if ((st = bc_add(&at, at, in)))
        return st;
    bw->last = at;  /* the last block's output (not needed, but computed) */
    if ((st = bc_add(&at, at, s->nd)))
        return st;
    bw->recs = at;
    if ((st = bc_add(&at, at, recs)))
        return st;
    bw->scratch = at;
    return bc_add(&bw->total, at, bwdw > s->total ? bwdw : s->total);
}

int bc_stack_backward_workspace_size(size_t *n_floats, const bc_block_config *cfg,
                                     size_t n_blocks, size_t b, size_t t)
{
    bwd_work bw;
    dims s;
    int st;
    if (!n_floats || !cfg)
        return BC_ENULL;
    if ((st = bwd_plan(&bw, &s, cfg, n_blocks, b, t)))
        return st;
    *n_floats = bw.total;
    return BC_OK;
}

/* A block's gradients, as the layer takes them (none where the weight is absent). */
static bc_layer_g layer_grads(const bc_block_grads *g, const bc_block_weights *w)
{
    const bc_layer_g lg = {
        g->qkv_w, g->proj_w, g->up_w, w->gate_w ? g->gate_w : NULL, g->down_w,
        w->qkv_b ? g->qkv_b : NULL, w->proj_b ? g->proj_b : NULL, w->up_b ? g->up_b : NULL,
        w->gate_w && w->gate_b ? g->gate_b : NULL, w->down_b ? g->down_b : NULL,
        w->ln1_w ? g->ln1_w : NULL, w->ln1_b ? g->ln1_b : NULL, w->ln2_w ? g->ln2_w : NULL,
        w->ln2_b ? g->ln2_b : NULL,
    };
    return lg;
}

/* The gradients of one block: none overlapping another part of the same or
 * any earlier block, a weight of any block, or the other buffers. */
static int grads_ok(const bc_block_grads *g, size_t i, const bc_block_grads *all,
                    const bc_block_weights *w, size_t n_blocks, const bc_block_config *cfg,
                    const dims *s, const float *const *bufs, const size_t *nbufs, int nb)
{
    const int swiglu = cfg->activation == BC_ACT_SWIGLU;
    const float *const gp[] = {g->qkv_w, g->qkv_b, g->proj_w, g->proj_b, g->up_w, g->up_b,
                               swiglu ? g->gate_w : NULL, swiglu ? g->gate_b : NULL, g->down_w,
                               g->down_b, g->ln1_w, g->ln1_b, g->ln2_w, g->ln2_b};
    const size_t gn[] = {3 * s->dd, 3 * s->d, s->dd, s->d, s->fd, s->f, s->fd, s->f, s->fd, s->d,
                         s->d, s->d, s->d, s->d};
    const size_t np = sizeof gn / sizeof gn[0];
    for (size_t k = 0; k < np; k++) {
        if (!gp[k])
            continue;
        for (int j = 0; j < nb; j++)
            if (bc_overlap(gp[k], gn[k], bufs[j], nbufs[j]))
                return BC_EALIAS;
        for (size_t k2 = 0; k2 < k; k2++)
            if (bc_overlap(gp[k], gn[k], gp[k2], gn[k2]))
                return BC_EALIAS;
        for (size_t b2 = 0; b2 <= i; b2++) {
            const bc_block_grads *o = &all[b2];
            const float *const op[] = {o->qkv_w, o->qkv_b, o->proj_w, o->proj_b, o->up_w, o->up_b,
                                       swiglu ? o->gate_w : NULL, swiglu ? o->gate_b : NULL,
                                       o->down_w, o->down_b, o->ln1_w, o->ln1_b, o->ln2_w,
                                       o->ln2_b};
            for (size_t k2 = 0; k2 < (b2 == i ? 0 : np); k2++)
                if (bc_overlap(gp[k], gn[k], op[k2], gn[k2]))
                    return BC_EALIAS;
        }
        for (size_t b2 = 0; b2 < n_blocks; b2++) {
            const bc_block_weights *o = &w[b2];
            const float *const op[] = {o->qkv_w, o->qkv_b, o->proj_w, o->proj_b, o->up_w, o->up_b,
                                       swiglu ? o->gate_w : NULL, swiglu ? o->gate_b : NULL,
                                       o->down_w, o->down_b, o->ln1_w, o->ln1_b, o->ln2_w,
                                       o->ln2_b};
            for (size_t k2 = 0; k2 < np; k2++)
                if (bc_overlap(gp[k], gn[k], op[k2], gn[k2]))
                    return BC_EALIAS;
        }
    }
    return BC_OK;
}

int bc_stack_backward(float *dx, const bc_block_grads *g, const float *dy, const float *x,
                      const bc_block_config *config, const bc_block_weights *w, size_t n_blocks,
                      size_t b, size_t t, float *work, size_t work_len)
{
    bwd_work bw;
    dims s;
    int st;
    if (!dx || !g || !dy || !x || !config || !w || !work)
        return BC_ENULL;
    const bc_block_config cfg_copy = *config, *cfg = &cfg_copy;
    if ((st = bwd_plan(&bw, &s, cfg, n_blocks, b, t)))
        return st;
    if (work_len < bw.total)
        return BC_EWORKSPACE;
    /* the structs, read once: what is checked below is what is used */
    float *words = bc_word_align(work);
    bc_block_weights *wc = (bc_block_weights *)(void *)(words + bw.wcopy);
    bc_block_grads *gc = (bc_block_grads *)(void *)(words + bw.gcopy);
    if (bc_overlap(work, bw.total, (const float *)(const void *)w, floats_for(n_blocks * sizeof *w))
        || bc_overlap(work, bw.total, (const float *)(const void *)g,
                      floats_for(n_blocks * sizeof *g)))
        return BC_EALIAS;
    memcpy(wc, w, n_blocks * sizeof *w);
    memcpy(gc, g, n_blocks * sizeof *g);
    if ((dx != dy && bc_overlap(dx, s.nd, dy, s.nd)) || bc_overlap(dx, s.nd, x, s.nd)
        || bc_overlap(work, bw.total, x, s.nd) || bc_overlap(work, bw.total, dy, s.nd)
        || bc_overlap(work, bw.total, dx, s.nd))
        return BC_EALIAS;
    const float *bufs[] = {x, dy, dx, work};
    const size_t nbufs[] = {s.nd, s.nd, s.nd, bw.total};
    for (size_t i = 0; i < n_blocks; i++) {
        if ((st = weights_ok(&wc[i], cfg, &s, dx, s.nd, work, bw.total)))
            return st;
        if ((st = grads_ok(&gc[i], i, gc, wc, n_blocks, cfg, &s, bufs, nbufs, 4)))
            return st;
    }
    bc_ctx cx;
    if ((st = bc_rt_ctx(&cx, s.dh)))
        return st;
    const bc_layer_pos pos = {NULL, NULL, NULL, NULL, 0, 0, NULL, NULL, 0};
    float *inputs = work + bw.inputs, *scratch = work + bw.scratch;
    /* forward, keeping each block's record (the last block's output is not needed) */
    const float *in = x;
    for (size_t i = 0; i < n_blocks; i++) {
        const bc_layer_w lw = layer_weights(&wc[i]);
        const bc_layer_rec rec = bc_layer_rec_carve(work + bw.recs + i * bw.rec, in, &s.lc, b, t);
        float *out = i + 1 < n_blocks ? inputs + i * s.nd : work + bw.last;
        bc_layer_forward(out, in, &s.lc, &lw, &pos, b, t, scratch, &rec, &cx);
        in = out;
    }
    /* backward, last block first; the running gradient in dx */
    const float *d = dy;
    for (size_t i = n_blocks; i-- > 0;) {
        const bc_layer_w lw = layer_weights(&wc[i]);
        const bc_layer_g lg = layer_grads(&gc[i], &wc[i]);
        const bc_layer_rec rec = bc_layer_rec_carve(work + bw.recs + i * bw.rec,
                                                    i ? inputs + (i - 1) * s.nd : x, &s.lc, b, t);
        bc_layer_backward(dx, d, &s.lc, &lw, &lg, &pos, &rec, b, t, scratch, &cx);
        d = dx;
    }
    return BC_OK;
}
