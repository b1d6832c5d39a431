/* layer_grad.c: the backward of one layer (bc_layer.h), every variant the
 * forward has, on the backward kernels (grad.c). The record of the training
 * forward holds every intermediate the gradients need; nothing is recomputed
 * but attention's tile probabilities (the kernels recompute them from lse).
 *
 * pre:  x1 = r x + attn(n1(x));  y = r x1 + ffn(n2(x1))
 *       dx1 = r dy + n2'(ffn'(dy));  dx = r dx1 + n1'(attn'(dx1))
 * post: s1 = r x + attn(x); x1 = n1(s1); s2 = r x1 + ffn(x1); y = n2(s2)
 *       ds2 = n2'(dy); dx1 = r ds2 + ffn'(ds2); ds1 = n1'(dx1); dx = r ds1 + attn'(ds1)
 * (r: 1 with residuals, 0 without; n': the norm's backward, the identity
 * without a norm; attn' and ffn': the sublayers' input gradients, their
 * parameter gradients added into g on the way.) */
#include <string.h>

#include "bc_check.h"
#include "bc_layer.h"

/* ---- sizes ------------------------------------------------------------- */

/* The record, in floats: offsets of each part (SIZE_MAX: absent). */
typedef struct {
    size_t a1, qkv, att, lse, mid, x1, a2, up, gate, hid, s2, total;
} rec_parts;

static int rec_carve(rec_parts *r, const bc_layer_cfg *c, size_t b, size_t t)
{
    size_t n, nd, nq, na, nf, nl;
    int st;
    const size_t absent = (size_t)-1;
    if ((st = bc_mul(&n, b, t)) || (st = bc_mul(&nd, n, c->d))
        || (st = bc_mul(&nq, n, (c->heads + 2 * c->kv_heads) * c->head_dim))
        || (st = bc_mul(&na, n, c->heads * c->head_dim)) || (st = bc_mul(&nf, n, c->d_ff))
        || (st = bc_mul(&nl, n, c->heads)))
        return st;
    const int pre = c->placement == BC_PLACE_PRE, normed = c->norm != BC_NORM_NONE;
    const int swiglu = c->activation == BC_ACT_SWIGLU;
    const struct { size_t *off; size_t len; int have; } parts[] = {
        {&r->a1, nd, pre && normed}, {&r->qkv, nq, 1}, {&r->att, na, 1}, {&r->lse, nl, 1},
        {&r->mid, nd, 1}, {&r->x1, nd, !pre}, {&r->a2, nd, pre && normed}, {&r->up, nf, 1},
        {&r->gate, nf, swiglu}, {&r->hid, nf, 1}, {&r->s2, nd, !pre},
    };
    size_t at = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        *parts[i].off = absent;
        if (!parts[i].have)
            continue;
        *parts[i].off = at;
        if ((st = bc_add(&at, at, parts[i].len)))
            return st;
    }
    r->total = at;
    return BC_OK;
}

int bc_layer_rec_size(size_t *n_floats, const bc_layer_cfg *c, size_t b, size_t t)
{
    rec_parts r;
    const int st = rec_carve(&r, c, b, t);
    if (!st)
        *n_floats = r.total;
    return st;
}

bc_layer_rec bc_layer_rec_carve(float *buf, const float *x, const bc_layer_cfg *c, size_t b,
                                size_t t)
{
    rec_parts r;
    bc_layer_rec rec;
    rec_carve(&r, c, b, t);  /* checked by the caller's bc_layer_rec_size */
    const size_t absent = (size_t)-1;
#define PART(f) (r.f == absent ? NULL : buf + r.f)
    rec.x = x;
    rec.a1 = PART(a1);
    rec.qkv = PART(qkv);
    rec.att = PART(att);
    rec.lse = PART(lse);
    rec.mid = PART(mid);
    rec.x1 = PART(x1);
    rec.a2 = PART(a2);
    rec.up = PART(up);
    rec.gate = PART(gate);
    rec.hid = PART(hid);
    rec.s2 = PART(s2);
#undef PART
    return rec;
}

/* The backward's workspace (floats): cur (N,D) the running gradient; da (N,D)
 * a sublayer's input gradient; nw (N,D) the norms'; then one region the
 * sublayers take in turn: dqkv (N,(H+2KV)Dh), datt (N,H Dh), dsum (H,T) for
 * attention; dhid, dup, dgate (N,F) for the MLP. */
typedef struct {
    size_t cur, da, nw, dqkv, datt, dsum, dhid, dup, dgate, total;
} bwd_parts;

static int bwd_carve(bwd_parts *p, const bc_layer_cfg *c, size_t b, size_t t)
{
    size_t n, nd, nq, na, nf, nl, at, attn, mlp;
    int st;
    if ((st = bc_mul(&n, b, t)) || (st = bc_mul(&nd, n, c->d))
        || (st = bc_mul(&nq, n, (c->heads + 2 * c->kv_heads) * c->head_dim))
        || (st = bc_mul(&na, n, c->heads * c->head_dim)) || (st = bc_mul(&nf, n, c->d_ff))
        || (st = bc_mul(&nl, t, c->heads)))
        return st;
    p->cur = 0;
    p->da = nd;
    p->nw = 2 * nd;  /* 3 nd <= the record's size, which was checked */
    at = 3 * nd;
    p->dqkv = at;
    p->datt = at + nq;
    p->dsum = at + nq + na;
    p->dhid = at;
    p->dup = at + nf;
    p->dgate = at + 2 * nf;
    if ((st = bc_add(&attn, nq, na)) || (st = bc_add(&attn, attn, nl))
        || (st = bc_mul(&mlp, nf, 3)))
        return st;
    return bc_add(&p->total, at, attn > mlp ? attn : mlp);
}

int bc_layer_bwd_work(size_t *n_floats, const bc_layer_cfg *c, size_t b, size_t t)
{
    bwd_parts p;
    size_t rec;
    int st;
    if ((st = bc_layer_rec_size(&rec, c, b, t)) || (st = bwd_carve(&p, c, b, t)))
        return st;
    *n_floats = p.total;
    return BC_OK;
}

/* ---- pieces ------------------------------------------------------------ */

// dx (N,D) = the gradient through the norm of x given dy; the gain's and shift's added
static void norm_bwd(float *dx, const float *dy, const float *x, const float *g, float *dg,
                     float *db, const bc_layer_cfg *c, size_t n, float *work, const bc_ctx *cx)
{
    if (c->norm == BC_NORM_RMS)
        bc_k_rmsnorm_bwd(dx, dg, dy, x, g, n, c->d, c->eps, work, cx);
    else if (c->norm == BC_NORM_LAYER)
        bc_k_layernorm_bwd(dx, dg, db, dy, x, g, n, c->d, c->eps, work, cx);
    else if (dx != dy)
        memcpy(dx, dy, n * c->d * sizeof(float));
}

// y (N,D) = r * dres + d (a residual's gradient: the identity path and the sublayer's)
static void residual(float *y, const float *dres, const float *d, int res, size_t nd,
                     const bc_ctx *cx)
{
    if (res)
        bc_k_add(y, dres, d, nd, cx);
    else if (y != d)
        memcpy(y, d, nd * sizeof(float));
}

// da (N,D) = the MLP's input gradient given dout (N,D); its parameters' added.
// a: the MLP's input (the forward's a2, or x1 post-norm)
static void ffn_bwd(float *da, const float *dout, const float *a, const bc_layer_cfg *c,
                    const bc_layer_w *w, const bc_layer_g *g, const bc_layer_rec *rec,
                    size_t n, float *dhid, float *dup, float *dgate, const bc_ctx *cx)
{
    const size_t d = c->d, f = c->d_ff;
    /* down: hid (N,F) -> out (N,D) */
    bc_k_linear_dx(dhid, dout, w->down.p, w->down.wf, n, f, d, 0, cx);
    if (g->down)
        bc_k_linear_dw(g->down, w->down.wf, dout, rec->hid, n, f, d, cx);
    if (g->down_b)
        bc_k_colsum(g->down_b, dout, n, d, cx);
    if (c->activation == BC_ACT_SWIGLU) {
        bc_k_swiglu_bwd(dgate, dup, dhid, rec->gate, rec->up, n * f, cx);
        bc_k_linear_dx(da, dgate, w->gate.p, w->gate.wf, n, d, f, 0, cx);
        if (g->gate)
            bc_k_linear_dw(g->gate, w->gate.wf, dgate, a, n, d, f, cx);
        if (g->gate_b)
            bc_k_colsum(g->gate_b, dgate, n, f, cx);
        bc_k_linear_dx(da, dup, w->up.p, w->up.wf, n, d, f, 1, cx);
    } else {
        bc_k_act_bwd(dup, dhid, rec->up, n * f, c->activation, cx);
        bc_k_linear_dx(da, dup, w->up.p, w->up.wf, n, d, f, 0, cx);
    }
    if (g->up)
        bc_k_linear_dw(g->up, w->up.wf, dup, a, n, d, f, cx);
    if (g->up_b)
        bc_k_colsum(g->up_b, dup, n, f, cx);
}

// da (N,D) = the attention sublayer's input gradient given dout (N,D); a: its input
static void attn_bwd(float *da, const float *dout, const float *a, const bc_layer_cfg *c,
                     const bc_layer_w *w, const bc_layer_g *g, const bc_layer_pos *pos,
                     const bc_layer_rec *rec, size_t b, size_t t, float *dqkv, float *datt,
                     float *dsum, const bc_ctx *cx)
{
    const size_t n = b * t, d = c->d, dh = c->head_dim, qw = c->heads * dh;
    const size_t kw = c->kv_heads * dh, ld = qw + 2 * kw;
    /* output projection: att (N,H Dh) -> out (N,D) */
    bc_k_linear_dx(datt, dout, w->proj.p, w->proj.wf, n, qw, d, 0, cx);
    if (g->proj)
        bc_k_linear_dw(g->proj, w->proj.wf, dout, rec->att, n, qw, d, cx);
    if (g->proj_b)
        bc_k_colsum(g->proj_b, dout, n, d, cx);
    for (size_t s = 0; s < b; s++) {
        const float *q = rec->qkv + s * t * ld;
        float *dq = dqkv + s * t * ld;
        bc_attn_bwd ab = {dq, dq + qw, dq + qw + kw, ld, q, q + qw, q + qw + kw,
                          rec->att + s * t * qw, datt + s * t * qw, rec->lse + s * c->heads * t,
                          NULL, ld, qw, t, c->heads, dh, c->heads / c->kv_heads, c->causal != 0};
        bc_k_attention_bwd(&ab, dsum, cx);
        if (pos->cs) {
            const float *cs = pos->cs + s * t * dh;
            bc_k_rope_bwd(dq, ld, t, c->heads, dh, cs, cx);
            bc_k_rope_bwd(dq + qw, ld, t, c->kv_heads, dh, cs, cx);
        }
    }
    bc_k_linear_dx(da, dqkv, w->qkv.p, w->qkv.wf, n, d, ld, 0, cx);
    if (g->qkv)
        bc_k_linear_dw(g->qkv, w->qkv.wf, dqkv, a, n, d, ld, cx);
    if (g->qkv_b)
        bc_k_colsum(g->qkv_b, dqkv, n, ld, cx);
}

// dx (B,T,D), dy (B,T,D); dx may be dy
void bc_layer_backward(float *dx, const float *dy, const bc_layer_cfg *c, const bc_layer_w *w,
                       const bc_layer_g *g, const bc_layer_pos *pos, const bc_layer_rec *rec,
                       size_t b, size_t t, float *work, const bc_ctx *cx)
{
    bwd_parts p;
    bwd_carve(&p, c, b, t);  /* checked by the caller's bc_layer_bwd_work */
    const size_t n = b * t, nd = n * c->d;
    float *cur = work + p.cur, *da = work + p.da, *nw = work + p.nw;
    float *dqkv = work + p.dqkv, *datt = work + p.datt, *dsum = work + p.dsum;
    float *dhid = work + p.dhid, *dup = work + p.dup, *dgate = work + p.dgate;
    const int res = c->residual != 0, normed = c->norm != BC_NORM_NONE;
    if (c->placement == BC_PLACE_PRE) {
        /* y = r x1 + ffn(n2(x1)) */
        ffn_bwd(da, dy, normed ? rec->a2 : rec->mid, c, w, g, rec, n, dhid, dup, dgate, cx);
        norm_bwd(da, da, rec->mid, w->ln2_w, g->ln2_w, g->ln2_b, c, n, nw, cx);
        residual(cur, dy, da, res, nd, cx);
        /* x1 = r x + attn(n1(x)) */
        attn_bwd(da, cur, normed ? rec->a1 : rec->x, c, w, g, pos, rec, b, t, dqkv, datt, dsum,
                 cx);
        norm_bwd(da, da, rec->x, w->ln1_w, g->ln1_w, g->ln1_b, c, n, nw, cx);
        residual(dx, cur, da, res, nd, cx);
    } else {
        /* y = n2(s2), s2 = r x1 + ffn(x1) */
        norm_bwd(cur, dy, rec->s2, w->ln2_w, g->ln2_w, g->ln2_b, c, n, nw, cx);
        ffn_bwd(da, cur, rec->x1, c, w, g, rec, n, dhid, dup, dgate, cx);
        residual(cur, cur, da, res, nd, cx);
        /* x1 = n1(s1), s1 = r x + attn(x) */
        norm_bwd(cur, cur, rec->mid, w->ln1_w, g->ln1_w, g->ln1_b, c, n, nw, cx);
        attn_bwd(da, cur, rec->x, c, w, g, pos, rec, b, t, dqkv, datt, dsum, cx);
        residual(dx, cur, da, res, nd, cx);
    }
}
