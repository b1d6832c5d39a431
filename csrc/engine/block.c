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
                             cfg->activation, cfg->causal != 0, cfg->residual != 0, cfg->eps};
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
    const bc_layer_pos pos = {NULL, NULL, NULL, NULL, 0, 0};
    const float *in = x;
    for (size_t i = 0; i < n_blocks; i++) {
        float *out = hidden ? hidden + i * s.nd : y;
        const bc_layer_w lw = layer_weights(&w[i]);
        bc_layer_forward(out, in, &s.lc, &lw, &pos, b, t, work, &cx);
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
