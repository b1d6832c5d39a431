/* layer.c: one transformer layer (bc_layer.h), every variant, on the shared
 * kernels. The residual additions are fused into the epilogues of the output
 * and down projections; the activation into the up projection's. */
#include <string.h>

#include "bc_check.h"
#include "bc_format.h"
#include "bc_half.h"
#include "bc_layer.h"

/* The workspace (floats), n = B*T rows: xn (n,D) the normed input; sub (n,D)
 * the sums of a post-norm layer; then one region the two sublayers take in
 * turn: att (n,H Dh) and qkv (n,(H+2KV) Dh) for attention, hid (n,F) and
 * gat (n,F, swiglu only) for the MLP. */
typedef struct {
    size_t xn, sub, att, qkv, hid, gat, tmp, total;
} parts;

/* A sublayer's output is not fused into the residual's sum: it is normed (sandwich,
 * output) or scaled (residual_scale) first, in the tmp region (n,D). */
static int unfused(const bc_layer_cfg *c)
{
    return c->placement == BC_PLACE_SANDWICH || c->placement == BC_PLACE_OUTPUT
           || (c->residual_scale != 0.0f && c->residual_scale != 1.0f);
}

static int gated(const bc_layer_cfg *c)
{
    return c->activation == BC_ACT_SWIGLU || c->activation == BC_ACT_GEGLU;
}

static int carve(parts *p, const bc_layer_cfg *c, size_t n)
{
    size_t nd, na, nq, nf, attn, mlp, at;
    int st;
    if ((st = bc_mul(&nd, n, c->d)) || (st = bc_mul(&na, n, c->heads * c->head_dim))
        || (st = bc_mul(&nq, n, (c->heads + 2 * c->kv_heads) * c->head_dim))
        || (st = bc_mul(&nf, n, c->d_ff)) || (st = bc_add(&attn, na, nq))
        || (st = bc_mul(&mlp, nf, gated(c) ? 2 : 1)))
        return st;
    if (c->n_experts && (st = bc_layer_moe_work(&mlp, c, n)))  /* in place of the MLP's */
        return st;
    if ((st = bc_add(&at, nd, c->placement == BC_PLACE_POST ? nd : 0)))
        return st;
    p->xn = 0;
    p->sub = nd;
    p->tmp = at;
    if (unfused(c) && (st = bc_add(&at, at, nd)))
        return st;
    p->att = at;
    p->qkv = at + na;
    p->hid = at;
    p->gat = at + nf;
    return bc_add(&p->total, at, attn > mlp ? attn : mlp);
}

int bc_layer_work(size_t *n_floats, const bc_layer_cfg *c, size_t n)
{
    parts p;
    const int st = carve(&p, c, n);
    if (!st)
        *n_floats = p.total;
    return st;
}

// y (N,D), x (N,D), g (D) or NULL, b (D) or NULL; y may be x
static void norm(float *y, const float *x, const float *g, const float *b,
                 const bc_layer_cfg *c, size_t n, const bc_ctx *cx)
{
    if (c->norm == BC_NORM_RMS)
        bc_k_rmsnorm(y, x, g, n, c->d, c->eps, cx);
    else if (c->norm == BC_NORM_LAYER)
        bc_k_layernorm(y, x, g, b, n, c->d, c->eps, cx);
    else if (y != x)
        memcpy(y, x, n * c->d * sizeof(float));
}

/* float -> the half cache's element: rounded to nearest even, finite values
 * past the half range saturated at +-65504 (an infinite key would make every
 * score of its head NaN); NaN stays NaN */
static uint16_t cache_half(float f)
{
    const float top = 65504.0f;
    return bc_f32_to_half(f > top ? top : f < -top ? -top : f);
}

// the cache's positions pos0..pos0+T-1 of one sequence <- k, v (T, .) row stride lds:
// for each K/V head g, keys into transposed tiles, values into rows; a float cache
// (kc, vc) or a half one (kc16, vc16: the same places, the other NULL); position p at
// row p mod cap (a ring's slot; p itself when the cache holds every position)
static void cache_store(float *kc, float *vc, uint16_t *kc16, uint16_t *vc16, const float *k,
                        const float *v, size_t lds, size_t t, size_t pos0, size_t kv_heads,
                        size_t dh, size_t cap)
{
    for (size_t g = 0; g < kv_heads; g++)
        for (size_t i = 0; i < t; i++) {
            const size_t p = (pos0 + i) % cap, head = g * cap * dh;
            const size_t kt = head + (p - p % BC_ATT_BK) * dh + p % BC_ATT_BK, vr = head + p * dh;
            const float *ki = k + i * lds + g * dh, *vi = v + i * lds + g * dh;
            for (size_t d = 0; d < dh; d++) {
                if (kc16) {
                    kc16[kt + d * BC_ATT_BK] = cache_half(ki[d]);
                    vc16[vr + d] = cache_half(vi[d]);
                } else {
                    kc[kt + d * BC_ATT_BK] = ki[d];
                    vc[vr + d] = vi[d];
                }
            }
        }
}

// the quantised cache's positions pos0..pos0+T-1 of one sequence <- k, v (T, .) row
// stride lds: for each K/V head g and position p at row r = p mod cap, the value a row
// of dtype's blocks at element (g cap + r) Dh, the key lane r % BK of the tile at
// element (g cap + r - r % BK) Dh (bc_format.h); each row quantised on its own, so the
// bits do not depend on how positions are split
static void cache_store_q(unsigned char *kc, unsigned char *vc, int dtype, const float *k,
                          const float *v, size_t lds, size_t t, size_t pos0, size_t kv_heads,
                          size_t dh, size_t cap)
{
    for (size_t g = 0; g < kv_heads; g++)
        for (size_t i = 0; i < t; i++) {
            const size_t r = (pos0 + i) % cap;
            const size_t tile = bc_kvq_bytes(dtype, (g * cap + r - r % BC_ATT_BK) * dh);
            bc_kvq_key(kc + tile, r % BC_ATT_BK, k + i * lds + g * dh, dh, dtype);
            bc_kvq_row(vc + bc_kvq_bytes(dtype, (g * cap + r) * dh), v + i * lds + g * dh, dh,
                       dtype);
        }
}

/* One sequence's attention through its cache: its T keys and values stored at
 * positions p0.., then read back with the earlier ones (a half cache's own keys
 * too are read back rounded). A ring (a sliding layer whose cache holds fewer
 * rows than p0 + T positions) takes the queries in pieces of cap - W + 1: each
 * piece's keys overwrite only positions no query of the piece can see, so the
 * keys a query reads are its own whatever the piece. */
// att (T, H Dh) rows of this sequence; q (T, ld): its q/k/v rows after rotary
static void attn_cached(float *att, const float *q, size_t ld, const bc_layer_cfg *c,
                        const bc_layer_pos *pos, size_t s, size_t t, size_t p0, const bc_ctx *cx)
{
    const size_t dh = c->head_dim, qw = c->heads * dh, kw = c->kv_heads * dh;
    const size_t off = s * pos->seq_stride, cap = pos->cap, w = pos->window;
    float *kc = pos->k ? pos->k + off : NULL, *vc = pos->k ? pos->v + off : NULL;
    uint16_t *kh = pos->k16 ? pos->k16 + off : NULL, *vh = pos->k16 ? pos->v16 + off : NULL;
    const int qt = pos->kq ? pos->kq_dtype : 0;
    unsigned char *kq = qt ? pos->kq + bc_kvq_bytes(qt, off) : NULL;
    unsigned char *vq = qt ? pos->vq + bc_kvq_bytes(qt, off) : NULL;
    const size_t piece = w && w < cap && p0 + t > cap ? cap - w + 1 : t;
    const bc_kv kv = {kc, vc, dh, dh, cap * dh, cap * dh, !qt, kh, vh, cap, w, kq, vq, qt,
                      c->attn_softcap};
    for (size_t i = 0; i < t; i += piece) {
        const size_t n = t - i < piece ? t - i : piece;
        const float *qi = q + i * ld;
        if (qt)
            cache_store_q(kq, vq, qt, qi + qw, qi + qw + kw, ld, n, p0 + i, c->kv_heads, dh, cap);
        else
            cache_store(kc, vc, kh, vh, qi + qw, qi + qw + kw, ld, n, p0 + i, c->kv_heads, dh,
                        cap);
        bc_k_attention_lse(att + i * qw, qw, NULL, qi, ld, &kv, n, p0 + i + n, c->heads,
                           c->kv_heads, dh, p0 + i, c->causal != 0, cx);
    }
}

// out (N,D) = r + proj(attention(qkv(a (N,D)))); r (N,D) or NULL, may be out;
// lse (B,H,T) or NULL: the attention's log-sum-exps (a training forward's record)
static void attn_sublayer(float *out, const float *a, const float *r, const bc_layer_cfg *c,
                          const bc_layer_w *w, const bc_layer_pos *pos, size_t b, size_t t,
                          float *qkv, float *att, float *lse, const bc_ctx *cx)
{
    const size_t n = b * t, dh = c->head_dim, qw = c->heads * dh, kw = c->kv_heads * dh;
    const size_t ld = qw + 2 * kw;
    if (!w->qkv_k.p) {
        bc_k_linear(qkv, a, w->qkv.p, w->qkv.wf, w->qkv_b, NULL, n, c->d, ld, BC_ACT_NONE, cx);
    } else {
        /* q, k and v rows in their own formats: each product into att (N, H Dh), free
         * until the attention, then into its columns of the q/k/v rows */
        const bc_mat *part[3] = {&w->qkv, &w->qkv_k, &w->qkv_v};
        const size_t c0[3] = {0, qw, qw + kw}, nc[3] = {qw, kw, kw};
        for (int i = 0; i < 3; i++) {
            bc_k_linear(att, a, part[i]->p, part[i]->wf, w->qkv_b ? w->qkv_b + c0[i] : NULL,
                        NULL, n, c->d, nc[i], BC_ACT_NONE, cx);
            for (size_t r = 0; r < n; r++)
                memcpy(qkv + r * ld + c0[i], att + r * nc[i], nc[i] * sizeof(float));
        }
    }
    for (size_t s = 0; s < b; s++) {
        float *q = qkv + s * t * ld;
        const size_t p0 = pos->pos0 ? pos->pos0[s] : 0;
        /* the call's own keys and values, rows of the q/k/v buffer */
        bc_kv kv = {q + qw, q + qw + kw, ld, ld, dh, dh, 0, NULL, NULL, 0, 0, NULL, NULL, 0,
                    c->attn_softcap};
        size_t tk = t;
        if (c->qk_norm)  /* per head: rows of Dh; else the whole projection: one row */
            for (size_t i = 0; i < t; i++) {
                float *qi = q + i * ld, *ki = qi + qw;
                const int head = c->qk_norm == BC_QK_NORM_HEAD;
                bc_k_rmsnorm(qi, qi, w->q_norm, head ? c->heads : 1, head ? dh : qw, c->eps, cx);
                bc_k_rmsnorm(ki, ki, w->k_norm, head ? c->kv_heads : 1, head ? dh : kw, c->eps,
                             cx);
            }
        if (pos->cs) {
            const float *cs = pos->cs + s * t * dh;
            const size_t rd = c->rope_dim ? c->rope_dim : dh;
            bc_k_rope_part(q, ld, t, c->heads, dh, rd, cs, cx);
            bc_k_rope_part(q + qw, ld, t, c->kv_heads, dh, rd, cs, cx);
        }
        if (c->q_scale != 0.0f)
            for (size_t i = 0; i < t; i++)
                bc_k_scale(q + i * ld, q + i * ld, c->q_scale, qw, cx);
        kv.window = pos->window;
        if (pos->k || pos->k16 || pos->kq) {
            attn_cached(att + s * t * qw, q, ld, c, pos, s, t, p0, cx);
            continue;
        }
        bc_k_attention_lse(att + s * t * qw, qw, lse ? lse + s * c->heads * t : NULL, q, ld, &kv,
                           t, tk, c->heads, c->kv_heads, dh, p0, c->causal != 0, cx);
    }
    bc_k_linear(out, att, w->proj.p, w->proj.wf, w->proj_b, r, n, qw, c->d, BC_ACT_NONE, cx);
}

// out (N,D) = r + s * post(sub (N,D)): the unfused sublayers' sum; post: the gain of
// the norm on the sublayer's output (NULL: none), r (N,D) or NULL; out may be r or sub
static void unfused_sum(float *out, float *sub, const float *r, const float *post,
                        const bc_layer_cfg *c, size_t n, const bc_ctx *cx)
{
    if (post)
        bc_k_rmsnorm(sub, sub, post, n, c->d, c->eps, cx);
    const float s = c->residual_scale != 0.0f ? c->residual_scale : 1.0f;
    if (s == 1.0f && r)
        bc_k_add(out, r, sub, n * c->d, cx);
    else
        bc_k_add_scaled(out, r, sub, s, n * c->d, cx);
}

// out (N,D) = r + down(act(up(a))) or r + down(silu(gate(a)) * up(a)); r (N,D) or NULL,
// may be out; up (N,F) or NULL: the pre-activation kept apart (a training
// forward's record; the same bits as the fused epilogue). With experts: r + the
// mixture (bc_layer_moe), its workspace at hid (no record: training refuses them)
static void ffn_sublayer(float *out, const float *a, const float *r, const bc_layer_cfg *c,
                         const bc_layer_w *w, size_t n, float *hid, float *gat, float *up,
                         const bc_ctx *cx)
{
    if (c->n_experts) {
        bc_layer_moe(out, a, r, c, w, n, hid, cx);
        return;
    }
    float *u = up ? up : hid;
    if (gated(c)) {
        bc_k_linear(u, a, w->up.p, w->up.wf, w->up_b, NULL, n, c->d, c->d_ff, BC_ACT_NONE, cx);
        bc_k_linear(gat, a, w->gate.p, w->gate.wf, w->gate_b, NULL, n, c->d, c->d_ff,
                    BC_ACT_NONE, cx);
        if (c->activation == BC_ACT_GEGLU) {
            bc_k_act(gat, gat, n * c->d_ff, BC_ACT_GELU_TANH, cx);
            bc_k_mul(hid, gat, u, n * c->d_ff, cx);
        } else {
            bc_k_swiglu(hid, gat, u, n * c->d_ff, cx);
        }
    } else if (up) {
        bc_k_linear(up, a, w->up.p, w->up.wf, w->up_b, NULL, n, c->d, c->d_ff, BC_ACT_NONE, cx);
        bc_k_act(hid, up, n * c->d_ff, c->activation, cx);
    } else {
        bc_k_linear(hid, a, w->up.p, w->up.wf, w->up_b, NULL, n, c->d, c->d_ff, c->activation,
                    cx);
    }
    bc_k_linear(out, hid, w->down.p, w->down.wf, w->down_b, r, n, c->d_ff, c->d, BC_ACT_NONE, cx);
}

// y (B,T,D), x (B,T,D); y may be x (not with a record)
void bc_layer_forward(float *y, const float *x, const bc_layer_cfg *c, const bc_layer_w *w,
                      const bc_layer_pos *pos, size_t b, size_t t, float *work,
                      const bc_layer_rec *rec, const bc_ctx *cx)
{
    parts p;
    const size_t n = b * t, nd = n * c->d;
    carve(&p, c, n);  /* checked by the caller's bc_layer_work */
    float *xn = work + p.xn, *sub = work + p.sub;
    float *att = rec ? rec->att : work + p.att, *qkv = rec ? rec->qkv : work + p.qkv;
    float *hid = rec ? rec->hid : work + p.hid, *gat = rec ? rec->gate : work + p.gat;
    float *lse = rec ? rec->lse : NULL, *up = rec ? rec->up : NULL;
    const int res = c->residual != 0, normed = c->norm != BC_NORM_NONE;
    if (unfused(c)) {  /* no record: training refuses these configs */
        const int sandwich = c->placement == BC_PLACE_SANDWICH;
        const int output = c->placement == BC_PLACE_OUTPUT;
        float *tmp = work + p.tmp;
        const float *a = x;
        if (normed && !output) {
            norm(xn, x, w->ln1_w, w->ln1_b, c, n, cx);
            a = xn;
        }
        attn_sublayer(tmp, a, NULL, c, w, pos, b, t, qkv, att, NULL, cx);
        unfused_sum(y, tmp, res ? x : NULL, sandwich ? w->ln1p_w : output ? w->ln1_w : NULL, c,
                    n, cx);
        a = y;
        if (normed && !output) {
            norm(xn, y, w->ln2_w, w->ln2_b, c, n, cx);
            a = xn;
        }
        ffn_sublayer(tmp, a, NULL, c, w, n, hid, gat, NULL, cx);
        unfused_sum(y, tmp, res ? y : NULL, sandwich ? w->ln2p_w : output ? w->ln2_w : NULL, c,
                    n, cx);
        return;
    }
    if (c->placement == BC_PLACE_PRE) {
        const float *a = x;
        if (normed) {
            float *a1 = rec ? rec->a1 : xn;
            norm(a1, x, w->ln1_w, w->ln1_b, c, n, cx);
            a = a1;
        }
        attn_sublayer(y, a, res ? x : NULL, c, w, pos, b, t, qkv, att, lse, cx);  /* x dead now */
        if (rec)
            memcpy(rec->mid, y, nd * sizeof(float));
        a = y;
        if (normed) {
            float *a2 = rec ? rec->a2 : xn;
            norm(a2, y, w->ln2_w, w->ln2_b, c, n, cx);
            a = a2;
        }
        ffn_sublayer(y, a, res ? y : NULL, c, w, n, hid, gat, up, cx);
    } else {
        float *s1 = rec ? rec->mid : sub, *x1 = rec ? rec->x1 : y, *s2 = rec ? rec->s2 : sub;
        attn_sublayer(s1, x, res ? x : NULL, c, w, pos, b, t, qkv, att, lse, cx);
        norm(x1, s1, w->ln1_w, w->ln1_b, c, n, cx);
        ffn_sublayer(s2, x1, res ? x1 : NULL, c, w, n, hid, gat, up, cx);
        norm(y, s2, w->ln2_w, w->ln2_b, c, n, cx);
    }
}
