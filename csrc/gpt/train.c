/* train.c: the whole model's loss, its gradient, and AdamW (bc_gpt.h).
 *
 * bc_gpt_grad runs the forward keeping every layer's record (bc_layer.h),
 * the head and the cross-entropy a block of rows at a time (the logits are
 * never whole), then the layers' backward last to first, and the embeddings'
 * gradients. The gradient buffer is laid out as the parameters: each matrix's
 * gradient packed as the matrix is (the backward's products write it so), so
 * the optimizer is element by element over matching buffers.
 */
#include <math.h>
#include <string.h>

#include "bc_check.h"
#include "bc_engine.h"
#include "gpt_internal.h"

/* Rows of logits the loss holds at once: about 8 Mi floats, at least 16. */
static size_t loss_rows(size_t vocab, size_t n)
{
    size_t r = ((size_t)1 << 23) / vocab;
    if (r < 16)
        r = 16;
    return r < n ? r : n;
}

/* The workspace (floats), N = B*T:
 *   xs     (L+1) x (N,D): each layer's input, then the last layer's output
 *   recs   L records (bc_layer_rec_size each)
 *   cs     (B,T,Dh) rotary angles (RoPE only)
 *   xf     (N,D) the head's input (the final norm's output)
 *   dx     (N,D) the running gradient
 *   rowl   (N) each row's loss
 *   tgt    (N) size_t: each row's target as checked (SIZE_MAX: ignored)
 *   logits (R,V) a block of rows' logits, then their gradient
 *   scratch  the layers' forward and backward workspaces, the norms' (N,D) */
typedef struct {
    size_t xs, recs, rec, cs, xf, dx, rowl, tgt, logits, rows, scratch, total;
} train_parts;

static int train_carve(train_parts *p, const model *m, size_t batch, size_t seq)
{
    const bc_gpt_config *c = &m->c;
    const bc_layer_cfg lc = bc_gpt_layer_cfg(m);
    size_t n, nd, xs, recs, ncs = 0, lg, fw, bw, at;
    int st;
    if ((st = bc_mul(&n, batch, seq)) || (st = bc_mul(&nd, n, c->width))
        || (st = bc_mul(&xs, nd, c->layers + 1)) || (st = bc_layer_rec_size(&p->rec, &lc, batch, seq))
        || (st = bc_mul(&recs, p->rec, c->layers)) || (st = bc_layer_work(&fw, &lc, n))
        || (st = bc_layer_bwd_work(&bw, &lc, batch, seq)))
        return st;
    if (c->positions == BC_POS_ROPE && (st = bc_mul(&ncs, n, m->dh)))
        return st;
    p->rows = loss_rows(c->vocab, n);
    if ((st = bc_mul(&lg, p->rows, c->vocab)))
        return st;
    size_t sc = fw > bw ? fw : bw;
    sc = sc > nd ? sc : nd;
    size_t nt;
    if ((st = bc_mul(&nt, n, sizeof(size_t) / sizeof(float))) || (st = bc_add(&nt, nt, 1)))
        return st;  /* one float spare: the part is word aligned in any float workspace */
    const size_t parts[] = {xs, recs, ncs, nd, nd, n, nt, lg, sc};
    size_t *offs[] = {&p->xs, &p->recs, &p->cs, &p->xf, &p->dx, &p->rowl, &p->tgt, &p->logits,
                      &p->scratch};
    at = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        *offs[i] = at;
        if ((st = bc_add(&at, at, parts[i])))
            return st;
        at = (at + 15) & ~(size_t)15;  /* each part 64-byte aligned in an aligned workspace */
    }
    p->total = at;
    return BC_OK;
}

int bc_gpt_train_workspace_size(size_t *n, const bc_gpt_config *cfg, size_t batch, size_t seq)
{
    model m;
    layout lo;
    train_parts p;
    int st;
    if (!n)
        return BC_ENULL;
    if ((st = bc_gpt_checked(&m, &lo, cfg)))
        return st;
    if (!bc_gpt_trainable(&m))
        return BC_EOPTION;
    if (!batch || !seq)
        return BC_ESIZE;
    if (seq > m.c.context)
        return BC_ECONTEXT;
    if ((st = train_carve(&p, &m, batch, seq)))
        return st;
    *n = p.total;
    return BC_OK;
}

/* The target at row i: its index, or `ignored` (BC_OK) for ignore_index; BC_ERANGE
 * outside [0, vocab). Read once. */
static int target_at(size_t *t, int *ignored, const void *targets, int ids_type, size_t i,
                     size_t vocab, int64_t ignore_index)
{
    const int64_t v = ids_type == BC_IDS_INT32 ? (int64_t)((const int32_t *)targets)[i]
                                               : ((const int64_t *)targets)[i];
    *ignored = v == ignore_index;
    if (*ignored)
        return BC_OK;
    if (v < 0 || (uint64_t)v >= (uint64_t)vocab)
        return BC_ERANGE;
    *t = (size_t)v;
    return BC_OK;
}

/* A block of rows of the loss: row i of z (rows, V) against tgt[i] (SIZE_MAX: ignored). */
typedef struct {
    const bc_kernel_table *kt;
    float *z, *rowl;
    const size_t *tgt;
    size_t v, rows;
    float scale;
    int grad;
} xent_job;

/* Row i of a block of the loss (an ignored row: no loss, no gradient). */
static void xent_one(const void *arg, size_t i)
{
    const xent_job *j = arg;
    float *zi = j->z + i * j->v;
    if (j->tgt[i] == (size_t)-1) {
        j->rowl[i] = 0.0f;
        if (j->grad)
            memset(zi, 0, j->v * sizeof(float));
        return;
    }
    j->kt->xent_row(j->grad ? zi : NULL, &j->rowl[i], zi, j->v, j->tgt[i], j->scale);
}

/* d (token table, packed float32 panels) row id += dx (D); d (position table) row t += dx */
static void embed_backward(unsigned char *grads, const float *dx, const model *m,
                           const layout *lo, const void *ids, int ids_type, size_t batch,
                           size_t seq)
{
    const size_t d = m->c.width;
    float *tok = (float *)(grads + lo->token), *pos = (float *)(grads + lo->position);
    for (size_t r = 0; r < batch * seq; r++) {
        size_t id = 0;
        bc_gpt_id_at(&id, ids, ids_type, r, m->c.vocab);  /* checked by the forward */
        const float *g = dx + r * d;
        float *panel = tok + (id / BC_PANEL) * d * BC_PANEL + id % BC_PANEL;
        for (size_t k = 0; k < d; k++)
            panel[k * BC_PANEL] += g[k];
        if (lo->has_pos) {
            float *p = pos + (r % seq) * d;
            for (size_t k = 0; k < d; k++)
                p[k] += g[k];
        }
    }
}

int bc_gpt_grad(float *loss, size_t *count, void *grads, const void *params,
                const bc_gpt_config *config, const void *ids, const void *targets, int ids_type,
                int64_t ignore_index, size_t batch, size_t seq, float *work, size_t work_size)
{
    model m;
    layout lo;
    train_parts p;
    bc_ctx cx;
    size_t n, nd;
    int st;
    if (!loss || !params || !config || !ids || !targets || !work)
        return BC_ENULL;
    if ((st = bc_gpt_checked(&m, &lo, config)))
        return st;
    const bc_gpt_config *c = &m.c;
    if (!bc_gpt_trainable(&m) || (ids_type != BC_IDS_INT32 && ids_type != BC_IDS_INT64))
        return BC_EOPTION;
    if (!batch || !seq)
        return BC_ESIZE;
    if (seq > c->context)
        return BC_ECONTEXT;
    /* the backward has no window: a sequence past a sliding layer's window is refused
     * (inside it the window changes nothing) */
    for (size_t l = 0; l < c->layers; l++)
        if (bc_gpt_window(&m, l) && seq > bc_gpt_window(&m, l))
            return BC_EOPTION;
    if ((st = bc_mul(&n, batch, seq)) || (st = bc_mul(&nd, n, c->width))
        || (st = train_carve(&p, &m, batch, seq)))
        return st;
    if (work_size < p.total)
        return BC_EWORKSPACE;
    const size_t ids_n = ids_type == BC_IDS_INT64 ? 2 * n : n, pf = lo.total / 4;
    const float *ro[4] = {(const float *)params, (const float *)ids, (const float *)targets, work};
    const size_t ro_n[4] = {pf, ids_n, ids_n, p.total};
    for (int i = 0; i < 4; i++) {
        if (grads && bc_overlap((const float *)grads, pf, ro[i], ro_n[i]))
            return BC_EALIAS;
        if (i < 3 && bc_overlap(work, p.total, ro[i], ro_n[i]))
            return BC_EALIAS;
    }
    if (bc_overlap(loss, 1, work, p.total) || (grads && bc_overlap(loss, 1, grads, pf)))
        return BC_EALIAS;
    /* the targets, read once into the workspace as checked (the loss's rows use
     * these): SIZE_MAX for an ignored row */
    size_t *tgt = bc_word_align(work + p.tgt);
    size_t valid = 0;
    for (size_t i = 0; i < n; i++) {
        size_t t = 0;
        int ign;
        if ((st = target_at(&t, &ign, targets, ids_type, i, c->vocab, ignore_index)))
            return st;
        tgt[i] = ign ? (size_t)-1 : t;
        valid += !ign;
    }
    if ((st = bc_rt_ctx(&cx, m.dh)))
        return st;
    const unsigned char *prm = params;
    unsigned char *grd = grads;
    const bc_layer_cfg lc = bc_gpt_layer_cfg(&m);
    float *xs = work + p.xs, *cs = work + p.cs, *xf = work + p.xf, *dx = work + p.dx;
    float *rowl = work + p.rowl, *lgt = work + p.logits, *scratch = work + p.scratch;
    const size_t d = c->width;
    if ((st = bc_gpt_embed(xs, prm, &m, &lo, ids, ids_type, NULL, batch, seq, &cx)))
        return st;
    if (c->positions == BC_POS_ROPE)
        for (size_t b = 0; b < batch; b++)
            bc_k_rope_table(cs + b * seq * m.dh, 0, seq, m.dh, c->rope_theta, NULL, 1.0f);
    const bc_layer_pos pos = {NULL, c->positions == BC_POS_ROPE ? cs : NULL, NULL, NULL, 0, 0,
                              NULL, NULL, 0, NULL, NULL, 0};
    for (size_t l = 0; l < c->layers; l++) {
        const bc_layer_w w = bc_gpt_layer_w(prm, &m, &lo, l);
        const bc_layer_rec rec = bc_layer_rec_carve(work + p.recs + l * p.rec, xs + l * nd, &lc,
                                                    batch, seq);
        bc_layer_forward(xs + (l + 1) * nd, xs + l * nd, &lc, &w, &pos, batch, seq, scratch, &rec,
                         &cx);
    }
    const float *xl = xs + c->layers * nd;
    const float *gf = lo.has_norm ? (const float *)(prm + lo.norm_w) : NULL;
    const float *bf = lo.has_norm_b ? (const float *)(prm + lo.norm_b) : NULL;
    if (!lo.has_norm)
        memcpy(xf, xl, nd * sizeof(float));
    else if (c->norm == BC_NORM_RMS)
        bc_k_rmsnorm(xf, xl, gf, n, d, c->eps, &cx);
    else
        bc_k_layernorm(xf, xl, gf, bf, n, d, c->eps, &cx);
    /* the head and the loss, R rows at a time */
    const int wf = BC_WF_PANEL(BC_DTYPE_F32);
    const float scale = valid ? 1.0f / (float)valid : 0.0f;
    for (size_t r0 = 0; r0 < n; r0 += p.rows) {
        const size_t rows = n - r0 < p.rows ? n - r0 : p.rows;
        bc_k_linear(lgt, xf + r0 * d, prm + lo.head, wf, NULL, NULL, rows, d, c->vocab,
                    BC_ACT_NONE, &cx);
        const xent_job xj = {cx.kt, lgt, rowl + r0, tgt + r0, c->vocab, rows, scale, grads != NULL};
        bc_rt_rows(bc_rt_threads(&cx, 8.0 * (double)rows * (double)c->vocab,
                                 8.0 * (double)rows * (double)c->vocab), rows, xent_one, &xj);
        if (grads) {
            /* the head's input gradient into scratch rows (dx still holds the targets) */
            bc_k_linear_dx(scratch + r0 * d, lgt, prm + lo.head, wf, rows, d, c->vocab, 0, &cx);
            bc_k_linear_dw((float *)(grd + lo.head), wf, lgt, xf + r0 * d, rows, d, c->vocab, &cx);
        }
    }
    double total = 0.0;
    for (size_t i = 0; i < n; i++)
        total += rowl[i];
    *loss = valid ? (float)(total / (double)valid) : NAN;
    if (count)
        *count = valid;
    if (!grads)
        return BC_OK;
    /* the final norm's backward: scratch (the head's input gradient) -> dx */
    if (!lo.has_norm) {
        memcpy(dx, scratch, nd * sizeof(float));
    } else {
        float *dgf = (float *)(grd + lo.norm_w), *dbf = lo.has_norm_b ? (float *)(grd + lo.norm_b) : NULL;
        memcpy(dx, scratch, nd * sizeof(float));
        if (c->norm == BC_NORM_RMS)
            bc_k_rmsnorm_bwd(dx, dgf, dx, xl, gf, n, d, c->eps, scratch, &cx);
        else
            bc_k_layernorm_bwd(dx, dgf, dbf, dx, xl, gf, n, d, c->eps, scratch, &cx);
    }
    for (size_t l = c->layers; l-- > 0;) {
        const bc_layer_w w = bc_gpt_layer_w(prm, &m, &lo, l);
        const bc_layer_w gw = bc_gpt_layer_w(grd, &m, &lo, l);  /* the same places in grads */
        const bc_layer_g g = {
            (float *)gw.qkv.p, (float *)gw.proj.p, (float *)gw.up.p, (float *)gw.gate.p,
            (float *)gw.down.p, (float *)gw.qkv_b, (float *)gw.proj_b, (float *)gw.up_b,
            (float *)gw.gate_b, (float *)gw.down_b, (float *)gw.ln1_w, (float *)gw.ln1_b,
            (float *)gw.ln2_w, (float *)gw.ln2_b,
        };
        const bc_layer_rec rec = bc_layer_rec_carve(work + p.recs + l * p.rec, xs + l * nd, &lc,
                                                    batch, seq);
        bc_layer_backward(dx, dx, &lc, &w, &g, &pos, &rec, batch, seq, scratch, &cx);
    }
    embed_backward(grd, dx, &m, &lo, ids, ids_type, batch, seq);
    return BC_OK;
}

/* ---- the gradient's norm and AdamW --------------------------------------- */

#define NORM_PARTS 1024

typedef struct {
    const float *g;
    size_t n, chunk;
    double *part;
} norm_job;

#define NORM_LANES 16  /* independent sums per chunk: not one chain of dependent adds */
#if defined(__GNUC__) && !defined(__clang__)
#define NORM_UNROLL _Pragma("GCC unroll 16")  /* the lanes in registers, not on the stack */
#else
#define NORM_UNROLL
#endif

/* part[u] = the sum of g[i]^2 over chunk u: element i0 + l adds (exactly squared,
 * in double) into lane l % NORM_LANES in order, then the lanes pairwise */
static void norm_unit(const void *arg, size_t u, int th)
{
    (void)th;
    const norm_job *j = arg;
    const size_t i0 = u * j->chunk, i1 = (u + 1) * j->chunk < j->n ? (u + 1) * j->chunk : j->n;
    double s[NORM_LANES] = {0.0};
    size_t i = i0;
    for (; i + NORM_LANES <= i1; i += NORM_LANES)
        NORM_UNROLL
        for (size_t l = 0; l < NORM_LANES; l++)
            s[l] += (double)j->g[i + l] * j->g[i + l];
    for (size_t l = 0; i + l < i1; l++)
        s[l] += (double)j->g[i + l] * j->g[i + l];
    for (size_t w = NORM_LANES / 2; w >= 1; w /= 2)
        for (size_t l = 0; l < w; l++)
            s[l] += s[l + w];
    j->part[u] = s[0];
}

int bc_gpt_grad_norm(double *norm, const void *grads, const bc_gpt_config *cfg)
{
    model m;
    layout lo;
    bc_ctx cx;
    int st;
    if (!norm || !grads)
        return BC_ENULL;
    if ((st = bc_gpt_checked(&m, &lo, cfg)))
        return st;
    if ((st = bc_rt_ctx(&cx, 0)))
        return st;
    const size_t n = lo.total / 4;
    /* fixed chunks, whatever the thread count: the same sum every time */
    const size_t chunk = (n + NORM_PARTS - 1) / NORM_PARTS > 0 ? (n + NORM_PARTS - 1) / NORM_PARTS : 1;
    const size_t parts = (n + chunk - 1) / chunk;
    double part[NORM_PARTS];
    const norm_job j = {grads, n, chunk, part};
    const int nt = bc_rt_threads(&cx, 2.0 * (double)n, 4.0 * (double)n);
    if (nt <= 1)
        for (size_t u = 0; u < parts; u++)
            norm_unit(&j, u, 0);
    else
        bc_rt_run(nt, parts, norm_unit, &j);
    double s = 0.0;
    for (size_t u = 0; u < parts; u++)
        s += part[u];
    *norm = sqrt(s);
    return BC_OK;
}

typedef struct {
    float *p, *m, *v;
    const float *g;
    size_t n;
    bc_adamw_args a;
    const bc_kernel_table *kt;
} adam_job;

#define ADAM_UNIT 16384

/* torch.optim.AdamW's single-tensor update, in its order of float32 operations
 * (the kernel table's adamw: the same bits on every instruction set) */
static void adam_unit(const void *arg, size_t u, int th)
{
    (void)th;
    const adam_job *j = arg;
    const size_t i0 = u * ADAM_UNIT, i1 = (u + 1) * ADAM_UNIT < j->n ? (u + 1) * ADAM_UNIT : j->n;
    j->kt->adamw(j->p + i0, j->m + i0, j->v + i0, j->g + i0, i1 - i0, &j->a);
}

static void adam_run(const adam_job *j, const bc_ctx *cx)
{
    const size_t units = (j->n + ADAM_UNIT - 1) / ADAM_UNIT;
    const int nt = bc_rt_threads(cx, 12.0 * (double)j->n, 20.0 * (double)j->n);
    if (nt <= 1 || units <= 1)
        for (size_t u = 0; u < units; u++)
            adam_unit(j, u, 0);
    else
        bc_rt_run(nt, units, adam_unit, j);
}

static int finite_nonneg(double x) { return isfinite(x) && x >= 0.0; }

int bc_gpt_adamw(void *params, float *m, float *v, const void *grads, const bc_gpt_config *cfg,
                 const bc_adamw_config *opt)
{
    model md;
    layout lo;
    bc_ctx cx;
    int st;
    if (!params || !m || !v || !grads || !opt)
        return BC_ENULL;
    const bc_adamw_config o = *opt;  /* read once */
    if ((st = bc_gpt_checked(&md, &lo, cfg)))
        return st;
    if (!bc_gpt_all_f32(&md) || (o.decay != BC_DECAY_MATRICES && o.decay != BC_DECAY_ALL
                                       && o.decay != BC_DECAY_NONE)
        || !finite_nonneg(o.lr) || !finite_nonneg(o.eps) || !finite_nonneg(o.weight_decay)
        || !(o.beta1 >= 0.0 && o.beta1 < 1.0) || !(o.beta2 >= 0.0 && o.beta2 < 1.0) || !o.step
        || !isfinite(o.grad_scale))
        return BC_EOPTION;
    const size_t n = lo.total / 4;
    const float *bufs[4] = {params, m, v, grads};
    for (int i = 0; i < 4; i++)
        for (int k = i + 1; k < 4; k++)
            if (bc_overlap(bufs[i], n, bufs[k], n))
                return BC_EALIAS;
    if ((st = bc_rt_ctx(&cx, 0)))
        return st;
    /* the scalars as torch computes them: in double, then used with float32 tensors */
    const double bc1 = 1.0 - pow(o.beta1, (double)o.step), bc2 = 1.0 - pow(o.beta2, (double)o.step);
    const float step = (float)(-o.lr / bc1), bc2s = (float)sqrt(bc2);
    const float decay = (float)(1.0 - o.lr * o.weight_decay);
    /* tensor by tensor: the decay rule is per tensor (matrices, vectors) */
    struct { size_t off, bytes; int matrix; } t[3 + MAX_BLK];
    float *pp = params;
    float *gg = (float *)(uintptr_t)grads;
    for (size_t l = 0; l <= md.c.layers; l++) {
        size_t nt = 0;
        if (l == 0) {
            t[nt].off = lo.token; t[nt].bytes = lo.token_bytes; t[nt++].matrix = 1;
            if (lo.has_pos) { t[nt].off = lo.position; t[nt].bytes = lo.position_bytes; t[nt++].matrix = 1; }
            if (lo.has_norm) {
                t[nt].off = lo.norm_w; t[nt].bytes = (lo.has_norm_b ? 8 : 4) * md.c.width;
                t[nt++].matrix = 0;
            }
            if (!md.c.tie_weights) { t[nt].off = lo.head; t[nt].bytes = lo.head_bytes; t[nt++].matrix = 1; }
        } else {
            for (size_t k = 0; k < lo.nblk; k++) {
                t[nt].off = lo.blocks + (l - 1) * lo.block_bytes + lo.blk_off[k];
                t[nt].bytes = lo.blk_bytes[k];
                t[nt++].matrix = lo.blk[k].kind != T_VEC;
            }
        }
        for (size_t k = 0; k < nt; k++) {
            const int dec = o.decay == BC_DECAY_ALL || (o.decay == BC_DECAY_MATRICES && t[k].matrix);
            const size_t i0 = t[k].off / 4;
            const adam_job j = {pp + i0, m + i0, v + i0, gg + i0, t[k].bytes / 4,
                                {dec ? decay : 1.0f, (float)o.beta2, (float)(1.0 - o.beta1),
                                 (float)(1.0 - o.beta2), step, bc2s, (float)o.eps,
                                 (float)o.grad_scale},
                                cx.kt};
            adam_run(&j, &cx);
        }
    }
    return BC_OK;
}
