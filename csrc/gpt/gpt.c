/* gpt.c: the whole decoder-only model (bc_gpt.h) on the shared layer
 * (bc_layer.h) and kernels: this file validates, lays out the parameters,
 * embeds, sequences the layers and runs the head.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bc_check.h"
#include "bc_engine.h"
#include "bc_format.h"
#include "bc_gpt.h"
#include "bc_layer.h"
#include "bc_pack.h"
#include "gpt_internal.h"

/* Matrix slot k's entry is read (the head when untied, the gate with SwiGLU). */
static int slot_used(const bc_gpt_config *c, size_t slot)
{
    if (slot == BC_GPT_FMT_HEAD)
        return !c->tie_weights;
    if (slot < 2)
        return 1;
    return (slot - 2) % BC_GPT_NMAT != BC_GPT_MAT_GATE || bc_gpt_gated(c->activation);
}

/* The per-matrix formats: each entry of the caller's array read once into m->fmt and
 * checked there (another thread changing the array meanwhile changes nothing the call
 * uses); a model whose matrices all share one format is that format's uniform model. */
static int resolve_formats(model *m, const int *dtypes)
{
    bc_gpt_config *c = &m->c;
    c->dtypes = NULL;  /* never read again: m->fmt is the copy */
    m->mixed = 0;
    if (!dtypes)
        return BC_OK;
    if (c->layers > BC_GPT_FMT_LAYERS)
        return BC_EOPTION;
    const size_t n = BC_GPT_NFMT(c->layers);
    int first = -1, same = 1;
    for (size_t i = 0; i < n; i++) {
        const int v = dtypes[i];
        if (!bc_format_of(v))
            return BC_EOPTION;
        m->fmt[i] = (unsigned char)v;
        if (!slot_used(c, i))
            continue;
        if (first < 0)
            first = v;
        else if (v != first)
            same = 0;
    }
    if (same)
        c->dtype = first;  /* slot 0 is always used: first >= 0 */
    else
        m->mixed = 1;
    return BC_OK;
}

/* The sliding layers: the caller's flags read once into m->slide (bc_gpt.h's window).
 * A window is a position count, bounded as the context is. */
static int resolve_window(model *m)
{
    bc_gpt_config *c = &m->c;
    const unsigned char *flags = c->sliding;
    c->sliding = NULL;  /* never read again: m->slide is the copy */
    m->all_slide = flags == NULL;
    if (c->window > (size_t)BC_MAX_ELEMENTS)
        return BC_EOVERFLOW;
    if (!flags)
        return BC_OK;
    if (c->layers > BC_GPT_FMT_LAYERS)
        return BC_EOPTION;
    for (size_t l = 0; l < c->layers; l++)
        m->slide[l] = flags[l] != 0;
    return BC_OK;
}

/* The matrix slot (BC_GPT_FMT_*) of block tensor field f in layer l, or -1 for a vector. */
static long field_slot(int f, size_t l)
{
    switch (f) {
    case F_QKV_W: return (long)BC_GPT_FMT_LAYER(l, BC_GPT_MAT_QKV);
    case F_PROJ_W: return (long)BC_GPT_FMT_LAYER(l, BC_GPT_MAT_PROJ);
    case F_UP_W: case F_EUP_W: return (long)BC_GPT_FMT_LAYER(l, BC_GPT_MAT_UP);
    case F_GATE_W: case F_EGATE_W: return (long)BC_GPT_FMT_LAYER(l, BC_GPT_MAT_GATE);
    case F_DOWN_W: case F_EDOWN_W: return (long)BC_GPT_FMT_LAYER(l, BC_GPT_MAT_DOWN);
    default: return -1;
    }
}

/* The format of block tensor t of layer l (float32 for a vector). */
static int block_fmt(const model *m, const tdesc *t, size_t l)
{
    const long slot = field_slot(t->field, l);
    return slot < 0 ? BC_DTYPE_F32 : bc_gpt_fmt(m, (size_t)slot);
}

/* 0, or a finite positive float: the optional scales */
static int scale_ok(float s)
{
    return s == 0.0f || (isfinite(s) && s > 0.0f);
}

/* The families' variants checked (m->kv, m->dh resolved): m->rd and m->variant set. */
static int variants(model *m)
{
    const bc_gpt_config *c = &m->c;
    const int rope = c->positions == BC_POS_ROPE;
    m->rd = c->rope_dim ? c->rope_dim : m->dh;
    if (rope && (m->rd % 2 || m->rd > m->dh))
        return BC_EOPTION;
    if (!scale_ok(c->rope_local_theta) || (c->rope_local_theta != 0.0f && m->rd != m->dh))
        return BC_EOPTION;
    for (size_t l = 0; c->nope_layers && l < c->layers; l++)
        if (c->nope_layers[l] > 2 || (c->nope_layers[l] == 2 && c->rope_local_theta == 0.0f))
            return BC_EOPTION;
    if (!scale_ok(c->rope_attn) || !scale_ok(c->embed_scale) || !scale_ok(c->residual_scale)
        || !scale_ok(c->attn_scale) || !scale_ok(c->logit_scale)
        || !scale_ok(c->attn_softcap) || !scale_ok(c->logit_softcap))
        return BC_EOPTION;
    if (c->qk_norm != BC_QK_NORM_NONE && c->qk_norm != BC_QK_NORM_HEAD
        && c->qk_norm != BC_QK_NORM_ALL)
        return BC_EOPTION;
    if (c->qk_norm && c->norm != BC_NORM_RMS)
        return BC_EOPTION;
    if ((c->placement == BC_PLACE_SANDWICH || c->placement == BC_PLACE_OUTPUT)
        && c->norm != BC_NORM_RMS)
        return BC_EOPTION;
    if (c->placement == BC_PLACE_POST && c->residual_scale != 0.0f && c->residual_scale != 1.0f)
        return BC_EOPTION;
    const size_t half = m->rd / 2;
    for (int k = 0; k < 2; k++) {
        const float *f = k ? c->rope_freqs_long : c->rope_freqs;
        for (size_t i = 0; f && i < half; i++)
            if (!isfinite(f[i]) || !(f[i] > 0.0f))
                return BC_EOPTION;
    }
    if (c->rope_freqs_long && !c->rope_original)
        return BC_EOPTION;
    /* experts: SwiGLU ones without biases, 1 <= K <= E */
    if (c->n_experts
        && (c->n_experts < 2 || c->n_experts > BC_GPT_MAX_EXPERTS || !c->n_experts_used
            || c->n_experts_used > c->n_experts || c->activation != BC_ACT_SWIGLU
            || c->mlp_bias))
        return BC_EOPTION;
    if (!c->n_experts && (c->n_experts_used || c->router_norm))
        return BC_EOPTION;
    if (c->rope_dynamic != 0.0f
        && (!isfinite(c->rope_dynamic) || !(c->rope_dynamic >= 1.0f) || !c->rope_original
            || m->rd <= 2 || c->rope_freqs || c->rope_freqs_long))
        return BC_EOPTION;
    m->variant = (c->rope_dim && c->rope_dim != m->dh) || c->rope_freqs || c->rope_freqs_long
                 || c->rope_dynamic != 0.0f || (c->rope_attn != 0.0f && c->rope_attn != 1.0f)
                 || c->nope_layers || c->rope_local_theta != 0.0f || c->qk_norm || c->embed_scale != 0.0f
                 || c->residual_scale != 0.0f || c->attn_scale != 0.0f || c->logit_scale != 0.0f
                 || c->attn_softcap != 0.0f || c->logit_softcap != 0.0f
                 || c->placement == BC_PLACE_SANDWICH || c->placement == BC_PLACE_OUTPUT
                 || c->activation == BC_ACT_GEGLU || c->n_experts;
    return BC_OK;
}

static int resolve(model *m, const bc_gpt_config *cfg)
{
    if (!cfg)
        return BC_ENULL;
    m->c = *cfg;
    const bc_gpt_config *c = &m->c;
    if (!c->vocab || !c->context || !c->width || !c->heads || !c->layers)
        return BC_ESIZE;
    /* a context is a position count whatever the positions: a cache's capacity and a
     * sequence are bounded by it, so it obeys the element bound even when no tensor
     * has a row per position (rotary) */
    if (c->context > (size_t)BC_MAX_ELEMENTS)
        return BC_EOVERFLOW;
    if ((c->norm != BC_NORM_LAYER && c->norm != BC_NORM_RMS && c->norm != BC_NORM_NONE)
        || (c->placement != BC_PLACE_PRE && c->placement != BC_PLACE_POST
            && c->placement != BC_PLACE_SANDWICH && c->placement != BC_PLACE_OUTPUT)
        || (c->activation != BC_ACT_GELU_TANH && c->activation != BC_ACT_GELU
            && c->activation != BC_ACT_RELU && c->activation != BC_ACT_SWIGLU
            && c->activation != BC_ACT_GEGLU)
        || (c->positions != BC_POS_LEARNED && c->positions != BC_POS_ROPE)
        || !bc_format_of(c->dtype)
        || !bc_eps_ok(c->eps))
        return BC_EOPTION;
    m->kv = c->kv_heads ? c->kv_heads : c->heads;
    if (!c->head_dim && c->width % c->heads)
        return BC_EHEADS;
    m->dh = c->head_dim ? c->head_dim : c->width / c->heads;
    if (m->kv > c->heads || c->heads % m->kv)
        return BC_EHEADS;
    if (c->positions == BC_POS_ROPE
        && (m->dh % 2 || !isfinite(c->rope_theta) || !(c->rope_theta > 0.0f)))
        return BC_EOPTION;
    int st = variants(m);
    if (st)
        return st;
    if (c->d_ff) {
        m->ff = c->d_ff;
    } else {
        if ((st = bc_mul(&m->ff, c->width, 4)))
            return st;
    }
    if ((st = bc_mul(&m->qw, c->heads, m->dh)) || (st = bc_mul(&m->kw, m->kv, m->dh)))
        return st;
    if ((st = resolve_formats(m, m->c.dtypes)))  /* the pointer as copied, read once */
        return st;
    return resolve_window(m);
}

/* The copies of a tensor kind: E for an expert's, else 1. */
static size_t copies(const tdesc *t)
{
    return t->count ? t->count : 1;
}

/* bytes of every copy of t (an expert's matrix: all E, each packed alone) */
static int tensor_bytes(size_t *out, const tdesc *t, int dtype)
{
    size_t n, one;
    int st;
    if (t->kind == T_MAT) {
        if ((st = bc_packed_bytes(&one, dtype, t->rows, t->cols)))
            return st;
        return bc_mul_bytes(out, one, copies(t));
    }
    if ((st = bc_mul(&n, t->rows, t->cols ? t->cols : 1)) || (st = bc_mul(&n, n, copies(t))))
        return st;
    return bc_mul_bytes(out, n, 4);
}

/* The formats of layer l's attn.qkv.weight parts (q, k, v rows: bc_gpt.h) into
 * fm[3]; nonzero when they differ (the matrix is then three packed matrices). */
static int qkv_split(int fm[3], const model *m, size_t l)
{
    fm[0] = bc_gpt_fmt(m, BC_GPT_FMT_LAYER(l, BC_GPT_MAT_QKV));
    fm[1] = bc_gpt_fmt(m, BC_GPT_FMT_LAYER(l, BC_GPT_MAT_QKV_K));
    fm[2] = bc_gpt_fmt(m, BC_GPT_FMT_LAYER(l, BC_GPT_MAT_QKV_V));
    return fm[1] != fm[0] || fm[2] != fm[0];
}

/* Bytes of block tensor t of layer l: a split attn.qkv.weight its parts' sum. */
static int block_bytes_of(size_t *out, const model *m, const tdesc *t, size_t l)
{
    int fm[3], st;
    if (t->field != F_QKV_W || !qkv_split(fm, m, l))
        return tensor_bytes(out, t, block_fmt(m, t, l));
    const size_t rows[3] = {m->qw, m->kw, m->kw};
    size_t sum = 0, nb;
    for (int i = 0; i < 3; i++)
        if ((st = bc_packed_bytes(&nb, fm[i], rows[i], t->cols))
            || (st = bc_add_bytes(&sum, sum, nb)))
            return st;
    *out = sum;
    return BC_OK;
}

static int tensor_elems(size_t *out, const tdesc *t)
{
    size_t n;
    int st = bc_mul(&n, t->rows, t->cols ? t->cols : 1);
    return st ? st : bc_mul(out, n, copies(t));
}

/* The block's tensors for this config, in state_dict order. */
static size_t block_tensors(tdesc *t, const model *m)
{
    const bc_gpt_config *c = &m->c;
    const size_t d = c->width, f = m->ff, qkv = m->qw + 2 * m->kw;
    const int gains = c->norm != BC_NORM_NONE, shifts = c->norm == BC_NORM_LAYER;
    const int swiglu = bc_gpt_gated(c->activation);
    const int sandwich = c->placement == BC_PLACE_SANDWICH;
    const size_t qn = c->qk_norm == BC_QK_NORM_ALL ? m->qw : m->dh;
    const size_t kn = c->qk_norm == BC_QK_NORM_ALL ? m->kw : m->dh;
    const size_t ne = c->n_experts;
    size_t n = 0;
#define ADDN(nm, r, cl, k, fl, cn) (t[n].name = (nm), t[n].rows = (r), t[n].cols = (cl), \
                                    t[n].kind = (k), t[n].field = (fl), t[n].count = (cn), n++)
#define ADD(nm, r, cl, k, fl) ADDN(nm, r, cl, k, fl, 1)
    if (gains)
        ADD("ln1.weight", d, 0, T_VEC, F_LN1_W);
    if (shifts)
        ADD("ln1.bias", d, 0, T_VEC, F_LN1_B);
    ADD("attn.qkv.weight", qkv, d, T_MAT, F_QKV_W);
    if (c->qkv_bias)
        ADD("attn.qkv.bias", qkv, 0, T_VEC, F_QKV_B);
    if (c->qk_norm) {
        ADD("attn.q_norm.weight", qn, 0, T_VEC, F_QN_W);
        ADD("attn.k_norm.weight", kn, 0, T_VEC, F_KN_W);
    }
    ADD("attn.proj.weight", d, m->qw, T_MAT, F_PROJ_W);
    if (c->out_bias)
        ADD("attn.proj.bias", d, 0, T_VEC, F_PROJ_B);
    if (sandwich)
        ADD("ln1_post.weight", d, 0, T_VEC, F_LN1P_W);
    if (gains)
        ADD("ln2.weight", d, 0, T_VEC, F_LN2_W);
    if (shifts)
        ADD("ln2.bias", d, 0, T_VEC, F_LN2_B);
    if (ne) {  /* the router, then each kind's E experts (bc_gpt.h) */
        ADD("router.weight", ne, d, T_ROWS, F_ROUTER_W);
        ADDN("up.weight", f, d, T_MAT, F_EUP_W, ne);
        ADDN("gate.weight", f, d, T_MAT, F_EGATE_W, ne);
        ADDN("down.weight", d, f, T_MAT, F_EDOWN_W, ne);
    }
    if (!ne)
        ADD("up.weight", f, d, T_MAT, F_UP_W);
    if (c->mlp_bias)
        ADD("up.bias", f, 0, T_VEC, F_UP_B);
    if (swiglu && !ne) {
        ADD("gate.weight", f, d, T_MAT, F_GATE_W);
        if (c->mlp_bias)
            ADD("gate.bias", f, 0, T_VEC, F_GATE_B);
    }
    if (!ne)
        ADD("down.weight", d, f, T_MAT, F_DOWN_W);
    if (c->mlp_bias)
        ADD("down.bias", d, 0, T_VEC, F_DOWN_B);
    if (sandwich)
        ADD("ln2_post.weight", d, 0, T_VEC, F_LN2P_W);
#undef ADD
#undef ADDN
    return n;
}

static int make_layout(layout *lo, const model *m)
{
    const bc_gpt_config *c = &m->c;
    const size_t d = c->width;
    size_t off = 0, blocks, n, elems = 0, per = 0;
    int st;
    const tdesc token = {"token.weight", c->vocab, d, T_MAT, 0, 1};
    const tdesc position = {"position.weight", c->context, d, T_ROWS, 0, 1};
    lo->nblk = block_tensors(lo->blk, m);
    lo->block_bytes = 0;
    lo->nper = 0;
    for (size_t j = 0; j < lo->nblk; j++) {
        lo->nper += copies(&lo->blk[j]);  /* E <= BC_GPT_MAX_EXPERTS: no overflow */
        lo->blk_off[j] = lo->block_bytes;
        if ((st = block_bytes_of(&lo->blk_bytes[j], m, &lo->blk[j], 0))
            || (st = bc_add_bytes(&lo->block_bytes, lo->block_bytes, lo->blk_bytes[j]))
            || (st = tensor_elems(&n, &lo->blk[j])) || (st = bc_add(&per, per, n)))
            return st;
    }
    /* token, position, blocks, final norm, head */
    lo->token = 0;
    if ((st = tensor_bytes(&lo->token_bytes, &token, bc_gpt_fmt(m, BC_GPT_FMT_TOKEN)))
        || (st = tensor_elems(&elems, &token)))
        return st;
    off = lo->token_bytes;
    lo->has_pos = c->positions == BC_POS_LEARNED;
    lo->position = off;
    lo->position_bytes = 0;
    if (lo->has_pos) {
        if ((st = tensor_bytes(&lo->position_bytes, &position, c->dtype))
            || (st = bc_add_bytes(&off, off, lo->position_bytes)) || (st = tensor_elems(&n, &position))
            || (st = bc_add(&elems, elems, n)))
            return st;
    }
    lo->blocks = off;
    if (m->mixed) {
        /* each layer's block in its own formats (layers <= BC_GPT_FMT_LAYERS) */
        for (size_t l = 0; l < c->layers; l++) {
            lo->layer_off[l] = off;
            for (size_t j = 0; j < lo->nblk; j++) {
                size_t nb;
                if ((st = block_bytes_of(&nb, m, &lo->blk[j], l))
                    || (st = bc_add_bytes(&off, off, nb)))
                    return st;
            }
        }
        lo->layer_off[c->layers] = off;
    } else if ((st = bc_mul_bytes(&blocks, lo->block_bytes, c->layers))
               || (st = bc_add_bytes(&off, off, blocks))) {
        return st;
    }
    if ((st = bc_mul(&n, per, c->layers)) || (st = bc_add(&elems, elems, n)))
        return st;
    lo->has_norm = c->placement != BC_PLACE_POST && c->norm != BC_NORM_NONE;
    lo->has_norm_b = lo->has_norm && c->norm == BC_NORM_LAYER;
    lo->norm_w = lo->norm_b = off;
    if (lo->has_norm) {
        lo->norm_b = off + 4 * d;  /* 4 d <= the token table's bytes: no overflow */
        if ((st = bc_add_bytes(&off, off, (lo->has_norm_b ? 8 : 4) * d))
            || (st = bc_add(&elems, elems, (lo->has_norm_b ? 2 : 1) * d)))
            return st;
    }
    if (c->tie_weights) {
        lo->head = lo->token;
        lo->head_bytes = lo->token_bytes;
    } else {
        lo->head = off;
        if ((st = tensor_bytes(&lo->head_bytes, &token, bc_gpt_fmt(m, BC_GPT_FMT_HEAD)))
            || (st = bc_add_bytes(&off, off, lo->head_bytes))
            || (st = bc_add(&elems, elems, c->vocab * d)))  /* vocab * d: checked above */
            return st;
    }
    lo->total = off;
    lo->params = elems;
    if ((st = bc_mul(&n, lo->nper, c->layers)))
        return st;
    lo->ntensors = 1 + (size_t)lo->has_pos + n + (size_t)lo->has_norm
                   + (size_t)lo->has_norm_b + (c->tie_weights ? 0 : 1);
    return BC_OK;
}

void bc_gpt_block_tensor(size_t *offset, size_t *bytes, const model *m, const layout *lo,
                         size_t l, size_t j)
{
    if (!m->mixed) {
        *offset = lo->blocks + l * lo->block_bytes + lo->blk_off[j];
        *bytes = lo->blk_bytes[j];
        return;
    }
    size_t off = lo->layer_off[l], nb = 0;
    for (size_t i = 0; i <= j; i++) {
        off += nb;  /* every size and sum checked by make_layout */
        block_bytes_of(&nb, m, &lo->blk[i], l);
    }
    *offset = off;
    *bytes = nb;
}

int bc_gpt_checked(model *m, layout *lo, const bc_gpt_config *cfg)
{
    int st = resolve(m, cfg);
    return st ? st : make_layout(lo, m);
}

int bc_gpt_config_check(const bc_gpt_config *cfg)
{
    model m;
    layout lo;
    return bc_gpt_checked(&m, &lo, cfg);
}

/* The counts of a config's layout the getters below return (NULL: not wanted). */
static int layout_sizes(size_t *params, size_t *bytes, size_t *tensors, const bc_gpt_config *cfg)
{
    model m;
    layout lo;
    const int st = bc_gpt_checked(&m, &lo, cfg);
    if (st)
        return st;
    if (params)
        *params = lo.params;
    if (bytes)
        *bytes = lo.total;
    if (tensors)
        *tensors = lo.ntensors;
    return BC_OK;
}

int bc_gpt_param_count(size_t *n, const bc_gpt_config *cfg)
{
    return n ? layout_sizes(n, NULL, NULL, cfg) : BC_ENULL;
}

int bc_gpt_param_bytes(size_t *n, const bc_gpt_config *cfg)
{
    return n ? layout_sizes(NULL, n, NULL, cfg) : BC_ENULL;
}

int bc_gpt_tensor_count(size_t *n, const bc_gpt_config *cfg)
{
    return n ? layout_sizes(NULL, NULL, n, cfg) : BC_ENULL;
}

int bc_gpt_tensor_info(char *name, size_t name_cap, size_t *offset, size_t *bytes,
                       int *dtype, int *packed, size_t *ndim, size_t shape[2],
                       const bc_gpt_config *cfg, size_t index)
{
    model m;
    layout lo;
    char buf[BC_GPT_NAME_MAX];
    size_t off, nb, rows, cols;
    int kind, st, fm = BC_DTYPE_F32;
    if (!offset || !bytes || !dtype || !packed || !ndim || !shape)
        return BC_ENULL;
    if ((st = bc_gpt_checked(&m, &lo, cfg)))
        return st;
    if (index >= lo.ntensors)
        return BC_ERANGE;
    const size_t d = m.c.width, nblk = lo.nper * m.c.layers, first = 1 + (size_t)lo.has_pos;
    if (index == 0) {
        snprintf(buf, sizeof buf, "token.weight");
        off = lo.token, nb = lo.token_bytes, rows = m.c.vocab, cols = d, kind = T_MAT;
        fm = bc_gpt_fmt(&m, BC_GPT_FMT_TOKEN);
    } else if (index == 1 && lo.has_pos) {
        snprintf(buf, sizeof buf, "position.weight");
        off = lo.position, nb = lo.position_bytes, rows = m.c.context, cols = d, kind = T_ROWS;
    } else if (index < first + nblk) {
        const size_t i = (index - first) / lo.nper;
        size_t j = 0, e = (index - first) % lo.nper;  /* kind j, its copy e */
        while (e >= copies(&lo.blk[j]))
            e -= copies(&lo.blk[j++]);
        bc_gpt_block_tensor(&off, &nb, &m, &lo, i, j);
        if (lo.blk[j].count > 1) {  /* expert e's matrix, one of the kind's E */
            snprintf(buf, sizeof buf, "blocks.%zu.experts.%zu.%s", i, e, lo.blk[j].name);
            nb /= lo.blk[j].count;
            off += e * nb;
        } else {
            snprintf(buf, sizeof buf, "blocks.%zu.%s", i, lo.blk[j].name);
        }
        rows = lo.blk[j].rows, cols = lo.blk[j].cols, kind = lo.blk[j].kind;
        fm = block_fmt(&m, &lo.blk[j], i);
    } else if (index == first + nblk && lo.has_norm) {
        snprintf(buf, sizeof buf, "norm.weight");
        off = lo.norm_w, nb = 4 * d, rows = d, cols = 0, kind = T_VEC;
    } else if (index == first + nblk + 1 && lo.has_norm_b) {
        snprintf(buf, sizeof buf, "norm.bias");
        off = lo.norm_b, nb = 4 * d, rows = d, cols = 0, kind = T_VEC;
    } else {
        snprintf(buf, sizeof buf, "head.weight");
        off = lo.head, nb = lo.head_bytes, rows = m.c.vocab, cols = d, kind = T_MAT;
        fm = bc_gpt_fmt(&m, BC_GPT_FMT_HEAD);
    }
    const size_t len = strlen(buf);
    if (name && name_cap <= len)
        return BC_ESIZE;
    if (name)
        memcpy(name, buf, len + 1);
    *offset = off;
    *bytes = nb;
    *dtype = fm;
    *packed = kind == T_MAT;
    *ndim = cols ? 2 : 1;
    shape[0] = rows;
    shape[1] = cols ? cols : 1;
    return BC_OK;
}

/* ---- cache and workspace ------------------------------------------------ */

int bc_gpt_ring_rows(size_t *rows, size_t window, size_t capacity)
{
    if (!rows)
        return BC_ENULL;
    if (capacity > BC_MAX_ELEMENTS)  /* its tiles would not be addressable */
        return BC_EOVERFLOW;
    *rows = bc_gpt_rows_of(window, capacity);
    return BC_OK;
}

int bc_gpt_cache_seq_elems(size_t *n, const model *m, size_t capacity)
{
    size_t t = 0, r;
    int st;
    for (size_t l = 0; l < m->c.layers; l++)
        if ((st = bc_mul(&r, bc_gpt_layer_rows(m, l, capacity), m->kw)) || (st = bc_add(&t, t, r)))
            return st;
    *n = t;
    return BC_OK;
}

int bc_gpt_cache_elems(size_t *n, const model *m, size_t batch, size_t capacity)
{
    size_t t, r;
    int st;
    if (!batch || !capacity)
        return BC_ESIZE;
    if (capacity > m->c.context)
        return BC_ECONTEXT;
    if ((st = bc_gpt_cache_seq_elems(&t, m, capacity)) || (st = bc_mul(&r, t, batch)))
        return st;
    *n = r;
    return BC_OK;
}

int bc_gpt_cache_size(size_t *n, const bc_gpt_config *cfg, size_t batch, size_t capacity)
{
    model m;
    layout lo;
    int st;
    if (!n)
        return BC_ENULL;
    if ((st = bc_gpt_checked(&m, &lo, cfg)))
        return st;
    return bc_gpt_cache_elems(n, &m, batch, capacity);
}

int bc_gpt_cache_bytes(size_t *n, const bc_gpt_config *cfg, size_t batch, size_t capacity,
                       int dtype)
{
    model m;
    layout lo;
    size_t e;
    int st;
    if (!n)
        return BC_ENULL;
    if ((st = bc_gpt_checked(&m, &lo, cfg)) || (st = bc_gpt_cache_dtype(dtype, m.dh))
        || (st = bc_gpt_cache_elems(&e, &m, batch, capacity)))
        return st;
    const int q = dtype != BC_DTYPE_F32 && dtype != BC_DTYPE_F16;  /* e: whole rows */
    return bc_mul_bytes(n, q ? e / BC_KVQ_BLOCK : e,
                        q ? bc_kvq_block_bytes(dtype) : bc_gpt_cache_span(dtype, 1));
}

bc_layer_cfg bc_gpt_layer_cfg(const model *m)
{
    const float q_scale = m->c.attn_scale != 0.0f ? m->c.attn_scale * sqrtf((float)m->dh) : 0.0f;
    const bc_layer_cfg lc = {m->c.width, m->c.heads, m->kv, m->dh, m->ff, m->c.norm,
                             m->c.placement, m->c.activation, 1, m->c.residual != 0, m->c.eps,
                             m->rd, m->c.qk_norm, q_scale, m->c.residual_scale,
                             m->c.n_experts, m->c.n_experts_used, m->c.router_norm != 0,
                             m->c.attn_softcap};
    return lc;
}

/* The workspace, carved in this order (floats), N = B*T:
 *   x (N,D) the residual stream; pos (B size_t, in 2B + 1 floats: aligned at the
 *   call) each sequence's first position, as read once; cs (B, T, Dh) the rotary angles (RoPE only);
 *   the layer's workspace (the final norm writes into its first N*D). */
typedef struct {
    size_t pos, cs, cs2, layer, total;
} work_parts;

static int carve(work_parts *w, const model *m, size_t batch, size_t seq)
{
    size_t n, nd, lw, ncs = 0, ncs2 = 0, at;
    int st;
    const bc_layer_cfg lc = bc_gpt_layer_cfg(m);
    if ((st = bc_mul(&n, batch, seq)) || (st = bc_mul(&nd, n, m->c.width))
        || (st = bc_layer_work(&lw, &lc, n)))
        return st;
    if (m->c.positions == BC_POS_ROPE && (st = bc_mul(&ncs, n, m->dh)))
        return st;
    if (m->c.rope_local_theta != 0.0f)
        ncs2 = ncs;  /* the local layers' table */
    w->pos = nd;  /* one float more than the slots need: forward_plan aligns them */
    if ((st = bc_add(&at, nd, 2 * batch + 1)))  /* 2 * batch <= 2 * nd */
        return st;
    w->cs = at;
    if ((st = bc_add(&at, at, ncs)))
        return st;
    w->cs2 = at;
    if ((st = bc_add(&at, at, ncs2)))
        return st;
    w->layer = at;
    return bc_add(&w->total, at, lw);
}

int bc_gpt_workspace_size(size_t *n, const bc_gpt_config *cfg, size_t batch, size_t seq,
                          const bc_gpt_cache *cache)
{
    model m;
    layout lo;
    work_parts w;
    int st;
    if (!n)
        return BC_ENULL;
    if ((st = bc_gpt_checked(&m, &lo, cfg)))
        return st;
    if (!batch || !seq)
        return BC_ESIZE;
    if (cache && cache->capacity > m.c.context)
        return BC_ECONTEXT;
    if (cache && seq > cache->capacity)
        return BC_ECONTEXT;
    if ((st = carve(&w, &m, batch, seq)))
        return st;
    *n = w.total;
    return BC_OK;
}

/* ---- forward ------------------------------------------------------------ */

/* The id at row i, or BC_ERANGE outside [0, vocab). Each id is read once,
 * checked and used as read: ids another thread changes meanwhile can give
 * wrong tokens but never an index outside the table. */
int bc_gpt_id_at(size_t *id, const void *ids, int ids_type, size_t i, size_t vocab)
{
    const int64_t v = ids_type == BC_IDS_INT32 ? (int64_t)((const int32_t *)ids)[i]
                                               : ((const int64_t *)ids)[i];
    if (v < 0 || (uint64_t)v >= (uint64_t)vocab)
        return BC_ERANGE;
    *id = (size_t)v;
    return BC_OK;
}

/* Everything bc_gpt_forward checked, as checked: the config and the cache's
 * fields are read once, into copies that are the only ones used afterwards (a
 * caller changing its structs during the call cannot move a write past the
 * buffers checked). */
typedef struct {
    model m;
    layout lo;
    work_parts w;
    bc_gpt_cache c;   /* a copy of *cache (has_cache) */
    int has_cache;
    size_t n, nd;     /* N = B*T rows, N*D */
    size_t *pos0;     /* (B) each sequence's first position, read once (in the workspace) */
} fwd_plan;

static int forward_plan(fwd_plan *p, const float *logits, const float *hidden,
                        const bc_gpt_cache *cache, const void *params, const bc_gpt_config *cfg,
                        const void *ids, int ids_type, size_t batch, size_t seq, int last_only,
                        float *work, size_t work_size)
{
    size_t cache_n = 0, logits_n = 0, hidden_n = 0;
    int st;
    if (!params || !ids || !work || !cfg)
        return BC_ENULL;
    if ((st = bc_gpt_checked(&p->m, &p->lo, cfg)))
        return st;
    const bc_gpt_config *c = &p->m.c;
    if (ids_type != BC_IDS_INT32 && ids_type != BC_IDS_INT64)
        return BC_EOPTION;
    if (!batch || !seq)
        return BC_ESIZE;
    p->has_cache = cache != NULL;
    if (cache) {
        const bc_gpt_cache cc = *cache;  /* read once */
        if (!cc.k || !cc.v)
            return BC_ENULL;
        if ((st = bc_gpt_cache_dtype(cc.dtype, p->m.dh)))
            return st;
        if (cc.batch != batch || !cc.capacity)
            return BC_ESIZE;
        if (cc.capacity > c->context)
            return BC_ECONTEXT;
        if (!cc.lengths && (cc.length > cc.capacity))
            return BC_ESIZE;
        if (!cc.lengths && seq > cc.capacity - cc.length)
            return BC_ECONTEXT;
        if ((st = bc_gpt_cache_elems(&cache_n, &p->m, batch, cc.capacity)))
            return st;
        cache_n = bc_gpt_cache_floats(cc.dtype, cache_n);
        p->c = cc;
    } else if (seq > c->context) {
        return BC_ECONTEXT;
    }
    if ((st = bc_mul(&p->n, batch, seq)) || (st = bc_mul(&p->nd, p->n, c->width))
        || (st = carve(&p->w, &p->m, batch, seq)))
        return st;
    if (work_size < p->w.total)
        return BC_EWORKSPACE;
    const size_t lengths_n = cache && p->c.lengths ? (2 * batch) : 0;  /* in floats */
    if (logits && (st = bc_mul(&logits_n, last_only ? batch : p->n, c->vocab)))
        return st;
    if (hidden && (st = bc_mul(&hidden_n, p->nd, c->layers)))
        return st;
    /* outputs may not overlap each other, the parameters or the ids */
    const size_t ids_n = ids_type == BC_IDS_INT64 ? 2 * p->n : p->n;
    const float *in[2] = {(const float *)params, (const float *)ids};
    const size_t in_n[2] = {p->lo.total / 4, ids_n};
    const float *out[6] = {logits, hidden, work, cache ? (const float *)p->c.k : NULL,
                           cache ? (const float *)p->c.v : NULL,
                           lengths_n ? (const float *)p->c.lengths : NULL};
    const size_t out_n[6] = {logits_n, hidden_n, p->w.total, cache_n, cache_n, lengths_n};
    for (int i = 0; i < 6; i++) {
        for (int j = 0; j < 2; j++)
            if (bc_overlap(out[i], out_n[i], in[j], in_n[j]))
                return BC_EALIAS;
        for (int j = i + 1; j < 6; j++)
            if (bc_overlap(out[i], out_n[i], out[j], out_n[j]))
                return BC_EALIAS;
    }
    /* each sequence's first position, read once into the workspace and checked there */
    p->pos0 = bc_word_align(work + p->w.pos);
    for (size_t b = 0; b < batch; b++) {
        const size_t len = !cache ? 0 : p->c.lengths ? p->c.lengths[b] : p->c.length;
        if (cache && len > p->c.capacity)
            return BC_ESIZE;
        if (cache && seq > p->c.capacity - len)
            return BC_ECONTEXT;
        p->pos0[b] = len;
    }
    return BC_OK;
}

// x (N,D) = token[ids] (+ position[pos0[b] + t]), N = B*T, row b*T+t; BC_ERANGE for a bad id
int bc_gpt_embed(float *x, const unsigned char *params, const model *m, const layout *lo,
                 const void *ids, int ids_type, const size_t *pos0, size_t batch, size_t seq,
                 const bc_ctx *cx)
{
    const size_t d = m->c.width;
    const float *pos = (const float *)(params + lo->position);
    for (size_t b = 0; b < batch; b++)
        for (size_t t = 0; t < seq; t++) {
            const size_t r = b * seq + t, p = (pos0 ? pos0[b] : 0) + t;
            size_t id;
            const int st = bc_gpt_id_at(&id, ids, ids_type, r, m->c.vocab);
            if (st)
                return st;
            bc_packed_row(x + r * d, params + lo->token, bc_gpt_fmt(m, BC_GPT_FMT_TOKEN),
                          m->c.vocab, d, id);
            if (lo->has_pos)
                bc_k_add(x + r * d, x + r * d, pos + p * d, d, cx);
        }
    return BC_OK;
}

bc_layer_w bc_gpt_layer_w(const unsigned char *params, const model *m, const layout *lo, size_t l)
{
    bc_layer_w w;
    memset(&w, 0, sizeof w);
    for (size_t j = 0; j < lo->nblk; j++) {
        size_t off, nb;
        bc_gpt_block_tensor(&off, &nb, m, lo, l, j);
        const void *t = params + off;
        const float *v = (const float *)t;
        const int wf = BC_WF_PANEL(block_fmt(m, &lo->blk[j], l));
        switch (lo->blk[j].field) {
        case F_LN1_W: w.ln1_w = v; break;
        case F_LN1_B: w.ln1_b = v; break;
        case F_QKV_W: {
            int fm[3];
            w.qkv.p = t;
            w.qkv.wf = wf;
            if (qkv_split(fm, m, l)) {  /* three packed matrices: q, k, v rows (bc_gpt.h) */
                size_t nq = 0, nk = 0;  /* sizes checked by make_layout */
                bc_packed_bytes(&nq, fm[0], m->qw, m->c.width);
                bc_packed_bytes(&nk, fm[1], m->kw, m->c.width);
                w.qkv_k.p = (const unsigned char *)t + nq;
                w.qkv_k.wf = BC_WF_PANEL(fm[1]);
                w.qkv_v.p = (const unsigned char *)t + nq + nk;
                w.qkv_v.wf = BC_WF_PANEL(fm[2]);
            }
            break;
        }
        case F_QKV_B: w.qkv_b = v; break;
        case F_PROJ_W: w.proj.p = t; w.proj.wf = wf; break;
        case F_PROJ_B: w.proj_b = v; break;
        case F_LN2_W: w.ln2_w = v; break;
        case F_LN2_B: w.ln2_b = v; break;
        case F_UP_W: w.up.p = t; w.up.wf = wf; break;
        case F_UP_B: w.up_b = v; break;
        case F_GATE_W: w.gate.p = t; w.gate.wf = wf; break;
        case F_GATE_B: w.gate_b = v; break;
        case F_DOWN_W: w.down.p = t; w.down.wf = wf; break;
        case F_DOWN_B: w.down_b = v; break;
        case F_QN_W: w.q_norm = v; break;
        case F_KN_W: w.k_norm = v; break;
        case F_LN1P_W: w.ln1p_w = v; break;
        case F_LN2P_W: w.ln2p_w = v; break;
        case F_ROUTER_W: w.router = v; break;
        case F_EUP_W: w.eup.p = t; w.eup.wf = wf; w.eup_bytes = nb / m->c.n_experts; break;
        case F_EGATE_W: w.egate.p = t; w.egate.wf = wf; w.egate_bytes = nb / m->c.n_experts; break;
        case F_EDOWN_W: w.edown.p = t; w.edown.wf = wf; w.edown_bytes = nb / m->c.n_experts; break;
        default: break;
        }
    }
    return w;
}

// logits (B,T,V) or (B,1,V) = head(norm(x (N,D))); scratch xn (N,D)
static void head_forward(float *logits, float *xn, const float *x, const unsigned char *params,
                         const fwd_plan *p, size_t batch, size_t seq, int last_only,
                         const bc_ctx *cx)
{
    const bc_gpt_config *c = &p->m.c;
    const size_t d = c->width, rows = last_only ? batch : p->n;
    const float *g = p->lo.has_norm ? (const float *)(params + p->lo.norm_w) : NULL;
    const float *bb = p->lo.has_norm_b ? (const float *)(params + p->lo.norm_b) : NULL;
    for (size_t r = 0; r < rows; r++) {
        const float *xr = last_only ? x + (r * seq + seq - 1) * d : x + r * d;
        if (!p->lo.has_norm)
            memcpy(xn + r * d, xr, d * sizeof(float));
        else if (c->norm == BC_NORM_RMS)
            bc_k_rmsnorm(xn + r * d, xr, g, 1, d, c->eps, cx);
        else
            bc_k_layernorm(xn + r * d, xr, g, bb, 1, d, c->eps, cx);
    }
    const int head_fmt = bc_gpt_fmt(&p->m, c->tie_weights ? BC_GPT_FMT_TOKEN : BC_GPT_FMT_HEAD);
    bc_k_linear(logits, xn, params + p->lo.head, BC_WF_PANEL(head_fmt), NULL, NULL, rows,
                d, c->vocab, BC_ACT_NONE, cx);
    if (c->logit_scale != 0.0f && c->logit_scale != 1.0f)
        for (size_t i = 0; i < rows * c->vocab; i++)
            logits[i] /= c->logit_scale;
    if (c->logit_softcap != 0.0f)  /* Gemma 2: cap * tanh(logit / cap), after the scale */
        for (size_t i = 0; i < rows * c->vocab; i++)
            logits[i] = c->logit_softcap * tanhf(logits[i] / c->logit_softcap);
}

/* The rotary table of a sequence whose call covers positions pos0..pos0+T-1: cs
 * (T, R/2, 2) by the config's frequencies for a sequence of length pos0 + T. */
static void rope_table(float *cs, const model *m, size_t pos0, size_t seq)
{
    const bc_gpt_config *c = &m->c;
    const size_t len = pos0 + seq;
    const float attn = c->rope_attn != 0.0f ? c->rope_attn : 1.0f;
    const float *inv = c->rope_freqs;
    float theta = c->rope_theta;
    if (c->rope_original && len > c->rope_original) {
        if (c->rope_freqs_long)
            inv = c->rope_freqs_long;
        else if (c->rope_dynamic != 0.0f) {
            /* transformers' dynamic NTK base, every step in float32 */
            const float f = c->rope_dynamic;
            const float r = f * (float)len / (float)c->rope_original - (float)((double)f - 1.0);
            const float ex = (float)((double)m->rd / (double)(m->rd - 2));
            theta = theta * powf(r, ex);
        }
    }
    bc_k_rope_table(cs, pos0, seq, m->rd, theta, inv, attn);
}

int bc_gpt_forward(float *logits, float *hidden, bc_gpt_cache *cache,
                   const void *params, const bc_gpt_config *config,
                   const void *ids, int ids_type, size_t batch, size_t seq, int last_only,
                   float *work, size_t work_size)
{
    fwd_plan p;
    bc_ctx cx;
    int st;
    /* validate everything before writing anything */
    if ((st = forward_plan(&p, logits, hidden, cache, params, config, ids, ids_type, batch, seq,
                           last_only, work, work_size)))
        return st;
    const bc_gpt_config *c = &p.m.c;
    if ((st = bc_rt_ctx(&cx, p.m.dh)))
        return st;
    const unsigned char *prm = params;
    float *x = work, *cs = work + p.w.cs, *cs2 = work + p.w.cs2, *lwork = work + p.w.layer;
    /* the embedding checks each id as it reads it, and writes only the workspace,
     * so a bad id still leaves every output untouched */
    if ((st = bc_gpt_embed(x, prm, &p.m, &p.lo, ids, ids_type, p.pos0, batch, seq, &cx)))
        return st;
    if (c->embed_scale != 0.0f && c->embed_scale != 1.0f)
        bc_k_scale(x, x, c->embed_scale, p.nd, &cx);
    if (c->positions == BC_POS_ROPE)
        for (size_t b = 0; b < batch; b++)
            rope_table(cs + b * seq * p.m.dh, &p.m, p.pos0[b], seq);
    if (c->positions == BC_POS_ROPE && c->rope_local_theta != 0.0f)
        for (size_t b = 0; b < batch; b++)
            bc_k_rope_table(cs2 + b * seq * p.m.dh, p.pos0[b], seq, p.m.dh, c->rope_local_theta,
                            NULL, 1.0f);
    const bc_layer_cfg lc = bc_gpt_layer_cfg(&p.m);
    /* the cache: sequence b, layer l at b * seq_kv + the earlier layers' KV R_l Dh */
    size_t seq_kv = 0, layer_at = 0;
    if (p.has_cache)
        bc_gpt_cache_seq_elems(&seq_kv, &p.m, p.c.capacity);  /* checked by forward_plan */
    const int half = p.has_cache && p.c.dtype == BC_DTYPE_F16;
    for (size_t l = 0; l < c->layers; l++) {
        const bc_layer_w w = bc_gpt_layer_w(prm, &p.m, &p.lo, l);
        const size_t rows = p.has_cache ? bc_gpt_layer_rows(&p.m, l, p.c.capacity) : 0;
        const int kind = c->nope_layers ? c->nope_layers[l] : 0;  /* read once */
        const float *lcs = kind == 1 ? NULL : kind == 2 && c->rope_local_theta != 0.0f ? cs2 : cs;
        bc_layer_pos pos = {p.pos0, c->positions == BC_POS_ROPE ? lcs : NULL, NULL, NULL,
                            seq_kv, rows, NULL, NULL, bc_gpt_window(&p.m, l), NULL, NULL, 0};
        if (p.has_cache && p.c.dtype != BC_DTYPE_F32 && !half) {  /* blocks: byte offsets */
            pos.kq = (unsigned char *)p.c.k + bc_gpt_cache_span(p.c.dtype, layer_at);
            pos.vq = (unsigned char *)p.c.v + bc_gpt_cache_span(p.c.dtype, layer_at);
            pos.kq_dtype = p.c.dtype;
        } else if (half) {  /* element offsets into the caller's halves or floats */
            pos.k16 = (uint16_t *)p.c.k + layer_at;
            pos.v16 = (uint16_t *)p.c.v + layer_at;
        } else if (p.has_cache) {
            pos.k = (float *)p.c.k + layer_at;
            pos.v = (float *)p.c.v + layer_at;
        }
        layer_at += rows * p.m.kw;
        bc_layer_forward(x, x, &lc, &w, &pos, batch, seq, lwork, NULL, &cx);
        if (hidden)
            memcpy(hidden + l * p.nd, x, p.nd * sizeof(float));
    }
    if (logits)
        head_forward(logits, lwork, x, prm, &p, batch, seq, last_only, &cx);
    /* from the lengths checked, not a second read */
    if (cache && p.c.lengths)
        for (size_t b = 0; b < batch; b++)
            p.c.lengths[b] = p.pos0[b] + seq;
    else if (cache)
        cache->length = p.pos0[0] + seq;
    return BC_OK;
}
