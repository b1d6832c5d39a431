/* book.c: chapter 24's listings as fixed-size functions, bit for bit.
 *
 * Every value goes through the listings' own sequence of float32 roundings:
 * sums start at 0 (or at the bias) and add their terms in index order, every
 * product and quotient is a float, and RMSNorm sums float squares in a double.
 * The build forbids FMA contraction, so no two of those roundings merge.
 * (The listings recompute each key and value inside their loops; computing them
 * once gives the same bits, since each is the same sequence of operations.)
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "bc_book.h"
#include "bc_check.h"

#define SEQ BC_BOOK_SEQ_LEN
#define DM BC_BOOK_D_MODEL
#define NH BC_BOOK_N_HEADS
#define DH BC_BOOK_D_HEAD
#define DF BC_BOOK_D_FF
#define NB BC_BOOK_N_BLOCKS

/* compile-time checks, in a form every C compiler accepts */
typedef char bc_book_check_heads[NH * DH == DM ? 1 : -1];        /* d_head = d_model / n_heads */
typedef char bc_book_check_ffn[DF == 4 * DM ? 1 : -1];           /* d_ff = 4 d_model */
typedef char bc_book_check_layout[sizeof(bc_book_block) ==       /* a plain run of floats */
    (3 * NH * DH * DM + DM * DM + 2 * DF * DM) * sizeof(float) ? 1 : -1];

static const float INIT_SCALE = 0.1f;  /* (rand()/RAND_MAX * 2 - 1) * 0.1f */
static const float RMS_EPS = 1e-5f;

/* ---------------------------------------------------------------- kernels */

// y (OUT) = w (OUT, IN) @ x (IN) + b (OUT); each sum starts at b[o] (0 if b is NULL)
static void matvec(float *y, const float *w, const float *x, const float *b,
                   size_t out_n, size_t in_n)
{
    for (size_t o = 0; o < out_n; o++) {
        float s = b ? b[o] : 0.0f;
        for (size_t i = 0; i < in_n; i++)
            s += w[o * in_n + i] * x[i];
        y[o] = s;
    }
}

// a (N) . b (N), summed in float from 0
static float dot(const float *a, const float *b, size_t n)
{
    float s = 0.0f;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

// y (C) = x (C) / sqrt(mean(x^2) + eps); the float squares are summed in a double
static void rmsnorm(float *y, const float *x, size_t c)
{
    double ss = 0.0;
    for (size_t i = 0; i < c; i++) {
        float sq = x[i] * x[i];
        ss += sq;
    }
    float inv = 1.0f / sqrtf((float)(ss / (double)c) + RMS_EPS);
    for (size_t i = 0; i < c; i++)
        y[i] = x[i] * inv;
}

// x (N) = softmax(x (N)): subtract the max, exponentiate, divide by the float sum
static void softmax(float *x, size_t n)
{
    float mx = -FLT_MAX, s = 0.0f;
    for (size_t i = 0; i < n; i++)
        if (x[i] > mx)
            mx = x[i];
    for (size_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        s += x[i];
    }
    for (size_t i = 0; i < n; i++)
        x[i] /= s;
}

// GELU, tanh form, as the listings write it: 0.5 x (1 + tanh(c (x + 0.044715 x^3)))
static float gelu(float x)
{
    const float c = 0.7978846f;
    float u = x + 0.044715f * x * x * x;
    return 0.5f * x * (1.0f + tanhf(c * u));
}

// out (SEQ, DM) = multi-head self-attention of x (SEQ, DM), no mask:
// per head h, q/k/v (SEQ, DH) = x @ w_{q,k,v}[h]^T, a = softmax(q k^T * DH^-1/2) v;
// heads concatenated in order, then out = concat @ w_o^T
static void attention(float out[SEQ][DM], const bc_book_block *b, const float x[SEQ][DM])
{
    const float scale = 1.0f / sqrtf((float)DH);
    float q[SEQ][DH], k[SEQ][DH], v[SEQ][DH], concat[SEQ][DM];
    for (size_t h = 0; h < NH; h++) {
        for (size_t t = 0; t < SEQ; t++) {
            matvec(q[t], &b->w_q[h][0][0], x[t], NULL, DH, DM);
            matvec(k[t], &b->w_k[h][0][0], x[t], NULL, DH, DM);
            matvec(v[t], &b->w_v[h][0][0], x[t], NULL, DH, DM);
        }
        for (size_t i = 0; i < SEQ; i++) {
            float score[SEQ];
            for (size_t j = 0; j < SEQ; j++)
                score[j] = dot(q[i], k[j], DH) * scale;
            softmax(score, SEQ);
            for (size_t d = 0; d < DH; d++) {
                float acc = 0.0f;
                for (size_t j = 0; j < SEQ; j++)
                    acc += score[j] * v[j][d];
                concat[i][h * DH + d] = acc;
            }
        }
    }
    for (size_t t = 0; t < SEQ; t++)
        matvec(out[t], &b->w_o[0][0], concat[t], NULL, DM, DM);
}

// x (SEQ, DM) += attention(rmsnorm(x)); x += ffn(rmsnorm(x)), ffn = w2 gelu(w1 .)
static void block_step(float x[SEQ][DM], const bc_book_block *b)
{
    float normed[SEQ][DM], sub[SEQ][DM];
    for (size_t t = 0; t < SEQ; t++)
        rmsnorm(normed[t], x[t], DM);
    attention(sub, b, (const float (*)[DM])normed);
    for (size_t t = 0; t < SEQ; t++)
        for (size_t j = 0; j < DM; j++)
            x[t][j] += sub[t][j];

    for (size_t t = 0; t < SEQ; t++)
        rmsnorm(normed[t], x[t], DM);
    for (size_t t = 0; t < SEQ; t++) {
        float hidden[DF], out[DM];
        matvec(hidden, &b->w1[0][0], normed[t], NULL, DF, DM);
        for (size_t f = 0; f < DF; f++)
            hidden[f] = gelu(hidden[f]);
        matvec(out, &b->w2[0][0], hidden, NULL, DM, DF);
        for (size_t j = 0; j < DM; j++)
            x[t][j] += out[j];
    }
}

// the mean over rows of the row L2 norms of x (SEQ, DM), in float
static float avg_norm(const float x[SEQ][DM])
{
    float total = 0.0f;
    for (size_t t = 0; t < SEQ; t++) {
        float ss = 0.0f;
        for (size_t j = 0; j < DM; j++)
            ss += x[t][j] * x[t][j];
        total += sqrtf(ss);
    }
    return total / (float)SEQ;
}

/* ------------------------------------------------------------ entry points */

int bc_book_ffn_init(bc_book_ffn *f, bc_rng *g)
{
    if (!f || !g)
        return BC_ENULL;
    bc_book_ffn w;
    /* the listing zeroes b1[i] and draws row i of W1, row by row, then the same
     * for W2 and b2: the draws land in W1 then W2, in memory order */
    int st = bc_rng_uniform(&w.w1[0][0], g, BC_BOOK_FFN_D_FF * BC_BOOK_FFN_D_MODEL, INIT_SCALE);
    if (st != BC_OK)
        return st;
    st = bc_rng_uniform(&w.w2[0][0], g, BC_BOOK_FFN_D_MODEL * BC_BOOK_FFN_D_FF, INIT_SCALE);
    if (st != BC_OK)
        return st;
    memset(w.b1, 0, sizeof w.b1);
    memset(w.b2, 0, sizeof w.b2);
    *f = w;
    return BC_OK;
}

// out (6) = w2 (6,12) @ gelu(w1 (12,6) @ x (6) + b1 (12)) + b2 (6)
int bc_book_ffn_forward(float *out, const bc_book_ffn *f, const float *x)
{
    if (!out || !f || !x)
        return BC_ENULL;
    float hidden[BC_BOOK_FFN_D_FF];
    matvec(hidden, &f->w1[0][0], x, f->b1, BC_BOOK_FFN_D_FF, BC_BOOK_FFN_D_MODEL);
    for (size_t i = 0; i < BC_BOOK_FFN_D_FF; i++)
        hidden[i] = gelu(hidden[i]);
    matvec(out, &f->w2[0][0], hidden, f->b2, BC_BOOK_FFN_D_MODEL, BC_BOOK_FFN_D_FF);
    return BC_OK;
}

int bc_book_ffn_params(int64_t *out, int64_t d_model, int64_t d_ff)
{
    if (!out)
        return BC_ENULL;
    if (d_model <= 0 || d_ff <= 0)
        return BC_ESIZE;
    int64_t w, n;
    int st;
    if ((st = bc_mul_i64(&w, d_model, d_ff)) || (st = bc_mul_i64(&w, w, 2)) ||
        (st = bc_add_i64(&n, w, d_ff)) || (st = bc_add_i64(&n, n, d_model)))
        return st;
    *out = n;
    return BC_OK;
}

// out (4) = x (4) + sublayer (4)
int bc_book_residual_add(float *out, const float *x, const float *sublayer)
{
    if (!out || !x || !sublayer)
        return BC_ENULL;
    for (size_t i = 0; i < BC_BOOK_RESIDUAL_DIM; i++)
        out[i] = x[i] + sublayer[i];
    return BC_OK;
}

int bc_book_block_init(bc_book_block *b, bc_rng *g)
{
    if (!b || !g)
        return BC_ENULL;
    bc_book_block w;
    int st = bc_rng_uniform((float *)&w, g, sizeof w / sizeof(float), INIT_SCALE);
    if (st != BC_OK)
        return st;
    *b = w;
    return BC_OK;
}

// y (4,8) = block(x (4,8)); y may alias x
int bc_book_block_forward(float *y, const bc_book_block *b, const float *x)
{
    if (!y || !b || !x)
        return BC_ENULL;
    float h[SEQ][DM];
    memcpy(h, x, sizeof h);
    block_step(h, b);
    memcpy(y, h, sizeof h);
    return BC_OK;
}

int bc_book_stack_init(bc_book_block *blocks, bc_rng *g)
{
    if (!blocks || !g)
        return BC_ENULL;
    bc_book_block w[NB];
    for (size_t i = 0; i < NB; i++) {
        int st = bc_book_block_init(&w[i], g);
        if (st != BC_OK)
            return st;
    }
    memcpy(blocks, w, sizeof w);
    return BC_OK;
}

// out = mean_t ||x[t]||, x (4,8)
int bc_book_avg_norm(float *out, const float *x)
{
    if (!out || !x)
        return BC_ENULL;
    *out = avg_norm((const float (*)[DM])x);
    return BC_OK;
}

// y (4,8) = block_3(...block_0(x (4,8))); norms (5) or NULL; y may alias x
int bc_book_stack_forward(float *y, float *norms, const bc_book_block *blocks,
                          const float *x)
{
    if (!y || !blocks || !x)
        return BC_ENULL;
    float h[SEQ][DM], n[NB + 1];
    memcpy(h, x, sizeof h);
    for (size_t i = 0; i <= NB; i++) {
        n[i] = avg_norm((const float (*)[DM])h);
        if (i < NB)
            block_step(h, &blocks[i]);
    }
    memcpy(y, h, sizeof h);
    if (norms)
        memcpy(norms, n, sizeof n);
    return BC_OK;
}

int bc_book_block_params(bc_book_params *out, int64_t d_model, int64_t d_ff,
                         int64_t n_layers)
{
    if (!out)
        return BC_ENULL;
    if (d_model <= 0 || d_ff <= 0 || n_layers <= 0)
        return BC_ESIZE;
    bc_book_params p;
    int64_t sq;
    int st;
    if ((st = bc_mul_i64(&sq, d_model, d_model)) || (st = bc_mul_i64(&p.attn, sq, 4)) ||
        (st = bc_mul_i64(&p.ffn, d_model, d_ff)) || (st = bc_mul_i64(&p.ffn, p.ffn, 2)) ||
        (st = bc_mul_i64(&p.norms, d_model, 2)) || (st = bc_add_i64(&p.per_block, p.attn, p.ffn)) ||
        (st = bc_add_i64(&p.per_block, p.per_block, p.norms)) ||
        (st = bc_mul_i64(&p.all_blocks, p.per_block, n_layers)))
        return st;
    *out = p;
    return BC_OK;
}
