/* fast_tmpl.h: the fast kernels, written once over the vector layer of
 * bc_simd.h and compiled once per instruction set: fast_generic.c,
 * fast_avx2.c and fast_avx512.c each define BC_SIMD and BC_KERNEL_TABLE (the
 * name of the one symbol the copy exports) and include this file. Every
 * function here is static, so the copies' names never collide and read as
 * written (gemm_part, rows_part, attn_unit, ...).
 * Every output element is computed by one fixed sequence of operations that
 * does not depend on how the work is split between threads. */
#include <string.h>
#include "bc_simd.h"
#include "bc_dispatch.h"

#ifndef BC_KERNEL_TABLE
#error "define BC_KERNEL_TABLE (the table's name) before including fast_tmpl.h"
#endif

static inline size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* ======================================================================== */
/* Linear: y (N,OC) = act(r + x (N,C) @ w (OC,C)^T + b)                      */
/* ======================================================================== */

/* Weights come in two layouts (bc_gemm.wf):
 *   rows    a caller's row-major float32 w (OC,C) (bc_linear, the block);
 *   panels  a packed matrix (bc_pack, the GPT): the outputs in panels of
 *           BC_PANEL, and in each panel the BC_PANEL weights of one column k
 *           side by side, k after k; float32, bfloat16 or q8_0.
 * Prompts (many rows) run a packed GEMM: NC x KC blocks of w as float32
 * panels in L2 (copied from rows or from bfloat16/q8_0 panels; float32
 * panels are used where they lie), a register tile of MR rows x NR columns,
 * x read in place. Decoding (up to BC_ROWS_MAX rows) streams panels once, VL
 * outputs per vector, several panels in flight: each output lane runs
 * exactly the GEMM tile's chain (an FMA per k over each K block, the blocks
 * added in order), so one row gives the bits of that row in a prompt and a
 * KV cache's logits equal a full recomputation's. Rows of a caller's w are
 * dot products instead (below): no transposes, the same bits at any thread
 * count, but not the GEMM's. */

#define PW BC_PANEL  /* panel width, the same on every instruction set */
#define VPP (PW / VL) /* vectors per panel: 1 (AVX-512), 2 (AVX2), 4 */

/* Column o, row k of a float32 panel matrix whose panels hold kc rows. */
static inline const float *pcol(const float *base, size_t kc, size_t o)
{
    return base + (o / PW) * kc * PW + o % PW;
}

/* bp (nc columns of kc rows as float32 panels) <- rows o0.. of a row-major w,
 * columns p0..p0+kc; zero past nc. VL x VL blocks: VL row loads, a register
 * transpose, VL stores. */
static void pack_rows(float *restrict bp, const float *restrict w, size_t c,
                      size_t o0, size_t nc, size_t p0, size_t kc)
{
    for (size_t jp = 0; jp < nc; jp += VL) {
        const size_t rows = min_sz(VL, nc - jp);
        float *dst = bp + (jp / PW) * kc * PW + jp % PW;
        const float *src = w + (o0 + jp) * c + p0;
        for (size_t k = 0; k < kc; k += VL) {
            const size_t nk = min_sz(VL, kc - k);
            V r[VL], o[VL];
            BC_UNROLL
            for (size_t j = 0; j < VL; j++)
                r[j] = j < rows ? vloadn(src + j * c + k, nk) : vzero();
            vtranspose(o, r);
            for (size_t kk = 0; kk < nk; kk++)
                vstore(dst + (k + kk) * PW, o[kk]);
        }
    }
}

/* The VL weights of panel column block (lanes lane0..lane0+VL-1 of a panel)
 * at row k, as float: the dequantisation both the GEMM's copy and the
 * decoding stream use, so they see the same floats. d: the lanes' q8_0
 * scales of k's block. */
BC_INLINE V pvec(const int wf, const unsigned char *panel, size_t c, size_t k, size_t lane0, V d)
{
    if (wf == BC_WF_PANEL_F32)
        return vload((const float *)panel + k * PW + lane0);
    if (wf == BC_WF_PANEL_BF16)
        return vload_bf16((const uint16_t *)panel + k * PW + lane0);
    const bc_q8_block *bl = (const bc_q8_block *)panel + k / 32;
    return vmul(vload_i8(&bl->q[k % 32][lane0]), d);
}

/* The q8_0 scales of lanes lane0.. of a panel for the block of row k. */
BC_INLINE V pscale(const int wf, const unsigned char *panel, size_t k, size_t lane0)
{
    if (wf != BC_WF_PANEL_Q8)
        return vzero();
    return vload_half(((const bc_q8_block *)panel + k / 32)->d + lane0);
}

/* Bytes of one panel of c rows. */
static inline size_t panel_bytes(int wf, size_t c)
{
    return wf == BC_WF_PANEL_F32 ? c * PW * 4 : wf == BC_WF_PANEL_BF16 ? c * PW * 2
                                              : (c + 31) / 32 * sizeof(bc_q8_block);
}

/* bp (nc columns of kc rows as float32 panels) <- columns o0.. (a multiple of
 * PW), rows p0..p0+kc of a bfloat16 or q8_0 panel matrix of c rows. */
BC_INLINE void pack_panels(const int wf, float *restrict bp, const unsigned char *w, size_t c,
                           size_t o0, size_t nc, size_t p0, size_t kc)
{
    const size_t pb = panel_bytes(wf, c);
    for (size_t jp = 0; jp < nc; jp += PW) {
        const unsigned char *panel = w + ((o0 + jp) / PW) * pb;
        float *dst = bp + (jp / PW) * kc * PW - p0 * PW;  /* row k at dst + k * PW */
        for (size_t k0 = p0; k0 < p0 + kc; k0 += 32) {    /* p0: a multiple of 32 */
            V d[VPP];
            BC_UNROLL
            for (size_t t = 0; t < VPP; t++)
                d[t] = pscale(wf, panel, k0, t * VL);
            const size_t k1 = min_sz(k0 + 32, p0 + kc);
            for (size_t k = k0; k < k1; k++)
                BC_UNROLL
                for (size_t t = 0; t < VPP; t++)
                    vstore(dst + k * PW + t * VL, pvec(wf, panel, c, k, t * VL, d[t]));
        }
    }
}

typedef struct {
    float *y;
    size_t ldy;
    size_t y1;        /* where the tile's second VL columns start, from y (VL: row-major) */
    const float *b;   /* bias at this tile's first column, or NULL */
    const float *r;   /* residual at this tile's corner, or NULL */
    size_t ldr, r1;   /* (r1 as y1) */
    size_t nv;        /* valid columns, 1..NR */
    int first, last, act;
} tile_io;

/* One MR x NR tile over kc: acc = sum_k a[i*lda + k] b[k][j] (a: rows of x,
 * read in place: each row's kc floats stay in L1 across the column panels;
 * b: the columns' panels, columns 0..VL-1 from b0 and VL..NR-1 from b1, a row
 * every PW floats), then stored as y = (first ? r : y) + acc, and on the last
 * K block y = act(y + b). */
BC_INLINE void tile(const int mr, size_t kc, const float *restrict a, size_t lda,
                    const float *restrict b0, const float *restrict b1, const tile_io *io)
{
    V c0[MR], c1[MR];
    BC_UNROLL
    for (int i = 0; i < mr; i++) {
        c0[i] = vzero();
        c1[i] = vzero();
    }
    for (size_t k = 0; k < kc; k++) {
        const V w0 = vload(b0 + k * PW), w1 = vload(b1 + k * PW);
        BC_UNROLL
        for (int i = 0; i < mr; i++) {
            const V av = vset1(a[i * lda + k]);
            c0[i] = vfma(av, w0, c0[i]);
            c1[i] = vfma(av, w1, c1[i]);
        }
    }
    const size_t n0 = min_sz(io->nv, VL), n1 = io->nv - n0;
    V bb0 = vzero(), bb1 = vzero();
    if (io->last && io->b) {
        bb0 = vloadn(io->b, n0);
        bb1 = vloadn(io->b + VL, n1);
    }
    for (int i = 0; i < mr; i++) {
        float *yi = io->y + i * io->ldy;
        V v0 = c0[i], v1 = c1[i];
        if (!io->first) {
            v0 = vadd(vloadn(yi, n0), v0);
            v1 = vadd(vloadn(yi + io->y1, n1), v1);
        } else if (io->r) {
            const float *ri = io->r + i * io->ldr;
            v0 = vadd(vloadn(ri, n0), v0);
            v1 = vadd(vloadn(ri + io->r1, n1), v1);
        }
        if (io->last) {
            if (io->b) {
                v0 = vadd(v0, bb0);
                v1 = vadd(v1, bb1);
            }
            if (io->act != BC_ACT_NONE) {
                v0 = vact(v0, io->act);
                v1 = vact(v1, io->act);
            }
        }
        if (io->nv == NR) {
            vstore(yi, v0);
            vstore(yi + io->y1, v1);
        } else {
            vstoren(yi, v0, n0);
            vstoren(yi + io->y1, v1, n1);
        }
    }
}

/* tile() with its row count a compile-time constant (1..MR) */
static void tile_any(int mr, size_t kc, const float *a, size_t lda, const float *b0,
                     const float *b1, const tile_io *io)
{
    switch (mr) {
    case 1: tile(1, kc, a, lda, b0, b1, io); break;
    case 2: tile(2, kc, a, lda, b0, b1, io); break;
    case 3: tile(3, kc, a, lda, b0, b1, io); break;
    case 4: tile(4, kc, a, lda, b0, b1, io); break;
#if MR >= 6
    case 5: tile(5, kc, a, lda, b0, b1, io); break;
    case 6: tile(6, kc, a, lda, b0, b1, io); break;
#endif
#if MR >= 14
    case 7: tile(7, kc, a, lda, b0, b1, io); break;
    case 8: tile(8, kc, a, lda, b0, b1, io); break;
    case 9: tile(9, kc, a, lda, b0, b1, io); break;
    case 10: tile(10, kc, a, lda, b0, b1, io); break;
    case 11: tile(11, kc, a, lda, b0, b1, io); break;
    case 12: tile(12, kc, a, lda, b0, b1, io); break;
    case 13: tile(13, kc, a, lda, b0, b1, io); break;
    case 14: tile(14, kc, a, lda, b0, b1, io); break;
#endif
    default: break;
    }
}

/* The rows [n0,n1) x columns [o0,o1) of y; o0 and o1 - o0 (unless o1 == oc)
 * are multiples of NR and of PW. scratch: BC_GEMM_SCRATCH floats. */
BC_INLINE void gemm_part_wf(const int wf, const bc_gemm *g, size_t n0, size_t n1, size_t o0,
                            size_t o1, float *scratch)
{
    float *bp = scratch;                   /* BC_KC x BC_NC */
    float *ap = scratch + BC_KC * BC_NC;   /* MR x BC_KC: rows of x, when copied */
    /* Rows of x 4 KiB apart (C a multiple of 1024) all fall in one L1 set and
     * evict each other; then each tile's rows are first copied side by side.
     * The values and their order are the same either way. */
    const int copy_a = g->c % 1024 == 0;
    for (size_t jc = o0; jc < o1; jc += BC_NC) {
        const size_t nc = min_sz(BC_NC, o1 - jc);
        for (size_t pc = 0; pc < g->c; pc += BC_KC) {
            const size_t kc = min_sz(BC_KC, g->c - pc);
            /* the block's panels: where they lie (float32 panels), or copied */
            const float *blk;
            size_t bkc;  /* rows of one panel of blk */
            if (wf == BC_WF_PANEL_F32) {
                blk = (const float *)g->w + (jc / PW) * g->c * PW + pc * PW;
                bkc = g->c;
            } else {
                if (wf == BC_WF_ROWS)
                    pack_rows(bp, (const float *)g->w, g->c, jc, nc, pc, kc);
                else
                    pack_panels(wf, bp, (const unsigned char *)g->w, g->c, jc, nc, pc, kc);
                blk = bp;
                bkc = kc;
            }
            for (size_t ic = n0; ic < n1; ic += MR) {
                const int mr = (int)min_sz(MR, n1 - ic);
                const float *a = g->x + ic * g->c + pc;
                size_t lda = g->c;
                if (copy_a) {
                    for (int i = 0; i < mr; i++)
                        memcpy(ap + (size_t)i * kc, a + (size_t)i * g->c, kc * sizeof(float));
                    a = ap;
                    lda = kc;
                }
                for (size_t jr = 0; jr < nc; jr += NR) {
                    tile_io io;
                    io.y = g->y + ic * g->oc + jc + jr;
                    io.ldy = g->oc;
                    io.b = g->b ? g->b + jc + jr : NULL;
                    io.r = g->r ? g->r + ic * g->oc + jc + jr : NULL;
                    io.ldr = g->oc;
                    io.y1 = io.r1 = VL;
                    io.nv = min_sz(NR, nc - jr);
                    io.first = pc == 0;
                    io.last = pc + kc == g->c;
                    io.act = g->act;
                    const float *b0 = pcol(blk, bkc, jr);
                    /* past the last panel the second half is computed, not stored */
                    const float *b1 = io.nv > VL ? pcol(blk, bkc, jr + VL) : b0;
                    tile_any(mr, kc, a, lda, b0, b1, &io);
                }
            }
        }
    }
}

static void gemm_rows(const bc_gemm *g, size_t n0, size_t n1, size_t o0, size_t o1, float *s)
{
    gemm_part_wf(BC_WF_ROWS, g, n0, n1, o0, o1, s);
}

static void gemm_f32(const bc_gemm *g, size_t n0, size_t n1, size_t o0, size_t o1, float *s)
{
    gemm_part_wf(BC_WF_PANEL_F32, g, n0, n1, o0, o1, s);
}

static void gemm_bf16(const bc_gemm *g, size_t n0, size_t n1, size_t o0, size_t o1, float *s)
{
    gemm_part_wf(BC_WF_PANEL_BF16, g, n0, n1, o0, o1, s);
}

static void gemm_q8_0(const bc_gemm *g, size_t n0, size_t n1, size_t o0, size_t o1, float *s)
{
    gemm_part_wf(BC_WF_PANEL_Q8, g, n0, n1, o0, o1, s);
}

/* ------------------------------------------------------------------------ */
/* The backward's products: C (M,N) = [C +] A (M,K) B (K,N) (bc_mm)          */
/* ------------------------------------------------------------------------ */

/* bp (nc columns of kc rows as float32 panels, zero past nc to the panel's
 * end) <- B(pc.., jc..) */
static void mm_pack_b(float *restrict bp, const bc_mm *g, size_t jc, size_t nc, size_t pc,
                      size_t kc)
{
    const size_t ncp = (nc + PW - 1) / PW * PW;
    if (g->b_kind == BC_MM_B_ROWS) {
        for (size_t jp = 0; jp < ncp; jp += PW) {
            const size_t w = jp + PW <= nc ? PW : nc > jp ? nc - jp : 0;
            float *dst = bp + (jp / PW) * kc * PW;
            for (size_t k = 0; k < kc; k++) {
                const float *src = g->b + (pc + k) * g->ldb + jc + jp;
                memcpy(dst + k * PW, src, w * sizeof(float));
                if (w < PW)
                    memset(dst + k * PW + w, 0, (PW - w) * sizeof(float));
            }
        }
        return;
    }
    /* panels: B(k, j) at b[(k/PW)*ldb*PW + j*PW + k%PW], PW consecutive k together */
    for (size_t jp = 0; jp < ncp; jp += PW) {
        float *dst = bp + (jp / PW) * kc * PW;
        for (size_t jj = 0; jj < PW; jj++) {
            const size_t j = jp + jj;
            if (j >= nc) {
                for (size_t k = 0; k < kc; k++)
                    dst[k * PW + jj] = 0.0f;
                continue;
            }
            for (size_t k = 0; k < kc; k++) {
                const size_t kk = pc + k;
                dst[k * PW + jj] = g->b[(kk / PW) * g->ldb * PW + (jc + j) * PW + kk % PW];
            }
        }
    }
}

/* Rows [i0,i1) x columns [j0,j1) of C over all of K, in BC_KC blocks added in
 * order (the first block onto C itself when accumulating): every element's
 * chain depends on K alone, not on the split. */
static void mm_part(const bc_mm *g, size_t i0, size_t i1, size_t j0, size_t j1, float *scratch)
{
    float *bp = scratch;                   /* BC_KC x BC_NC */
    float *ap = scratch + BC_KC * BC_NC;   /* MR x BC_KC: rows of A, when A is columns */
    for (size_t jc = j0; jc < j1; jc += BC_NC) {
        const size_t nc = min_sz(BC_NC, j1 - jc);
        for (size_t pc = 0; pc < g->k; pc += BC_KC) {
            const size_t kc = min_sz(BC_KC, g->k - pc);
            mm_pack_b(bp, g, jc, nc, pc, kc);
            for (size_t ic = i0; ic < i1; ic += MR) {
                const int mr = (int)min_sz(MR, i1 - ic);
                const float *a;
                size_t lda;
                if (g->a_cs == 1) {
                    a = g->a + ic * g->a_rs + pc;
                    lda = g->a_rs;
                } else {  /* A's rows are columns of a: copied side by side, each
                           * of a's rows (k) read once across the tile's mr columns */
                    for (size_t k = 0; k < kc; k++) {
                        const float *src = g->a + ic * g->a_rs + (pc + k) * g->a_cs;
                        for (int i = 0; i < mr; i++)
                            ap[(size_t)i * kc + k] = src[(size_t)i * g->a_rs];
                    }
                    a = ap;
                    lda = kc;
                }
                for (size_t jr = 0; jr < nc; jr += NR) {
                    const size_t j = jc + jr;
                    tile_io io;
                    if (g->c_panels) {
                        io.y = g->c + (j / PW) * g->m * PW + ic * PW + j % PW;
                        io.ldy = PW;
                        io.y1 = j % PW + VL < PW ? VL : g->m * PW + VL - PW;
                    } else {
                        io.y = g->c + ic * g->ldc + j;
                        io.ldy = g->ldc;
                        io.y1 = VL;
                    }
                    io.b = NULL;
                    io.r = g->accumulate ? io.y : NULL;
                    io.ldr = io.ldy;
                    io.r1 = io.y1;
                    io.nv = min_sz(NR, nc - jr);
                    io.first = pc == 0;
                    io.last = pc + kc == g->k;
                    io.act = BC_ACT_NONE;
                    const float *b0 = pcol(bp, kc, jr);
                    const float *b1 = io.nv > VL ? pcol(bp, kc, jr + VL) : b0;
                    tile_any(mr, kc, a, lda, b0, b1, &io);
                }
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Decoding on panels: the GEMM tile's chain, streaming each panel once      */
/* ------------------------------------------------------------------------ */

#if BC_SIMD == 512
#define RACC 16                     /* accumulators a decoding group keeps in flight */
#else
#define RACC 8
#endif

/* Panels p0..p0+np-1 (np <= G) for the n <= BC_ROWS_MAX rows of x; panels past
 * np repeat the last one (computed, not stored). Each lane: acc = fma(x[k],
 * w[k], acc) over each BC_KC block of k from 0; y = r + acc (the first block,
 * or acc without r), y + acc (later blocks); then + b and act. */
BC_INLINE void prows_group(const int wf, const int n, const int G, const bc_gemm *g, size_t p0,
                           size_t np)
{
    const size_t c = g->c, oc = g->oc, pb = panel_bytes(wf, c);
    const unsigned char *pan[RACC];
    BC_UNROLL
    for (int q = 0; q < G; q++)
        pan[q] = (const unsigned char *)g->w + (p0 + ((size_t)q < np ? (size_t)q : np - 1)) * pb;
    V v[BC_ROWS_MAX][RACC];
    for (size_t pc = 0; pc < c; pc += BC_KC) {
        const size_t kc = min_sz(BC_KC, c - pc);
        V acc[BC_ROWS_MAX][RACC];
        BC_UNROLL
        for (int i = 0; i < n; i++)
            BC_UNROLL
            for (int t = 0; t < G * VPP; t++)
                acc[i][t] = vzero();
        for (size_t k0 = pc; k0 < pc + kc; k0 += 32) {
            V d[RACC];
            BC_UNROLL
            for (int t = 0; t < G * VPP; t++)
                d[t] = pscale(wf, pan[t / VPP], k0, (size_t)(t % VPP) * VL);
            const size_t k1 = min_sz(k0 + 32, pc + kc);
            for (size_t k = k0; k < k1; k++) {
                V xv[BC_ROWS_MAX];
                BC_UNROLL
                for (int i = 0; i < n; i++)
                    xv[i] = vset1(g->x[(size_t)i * c + k]);
                BC_UNROLL
                for (int t = 0; t < G * VPP; t++) {
                    const V wv = pvec(wf, pan[t / VPP], c, k, (size_t)(t % VPP) * VL, d[t]);
                    BC_UNROLL
                    for (int i = 0; i < n; i++)
                        acc[i][t] = vfma(xv[i], wv, acc[i][t]);
                }
            }
        }
        BC_UNROLL
        for (int i = 0; i < n; i++)
            BC_UNROLL
            for (int t = 0; t < G * VPP; t++) {
                const size_t o = p0 * PW + (size_t)t * VL;
                if (pc)
                    v[i][t] = vadd(v[i][t], acc[i][t]);
                else if (g->r && o < oc)
                    v[i][t] = vadd(vloadn(g->r + (size_t)i * oc + o, min_sz(VL, oc - o)), acc[i][t]);
                else
                    v[i][t] = acc[i][t];
            }
    }
    for (int i = 0; i < n; i++)
        for (int t = 0; t < G * VPP; t++) {
            const size_t o = p0 * PW + (size_t)t * VL;
            if ((size_t)t / VPP >= np || o >= oc)
                continue;
            const size_t nv = min_sz(VL, oc - o);
            V out = v[i][t];
            if (g->b)
                out = vadd(out, vloadn(g->b + o, nv));
            if (g->act != BC_ACT_NONE)
                out = vact(out, g->act);
            if (nv == VL)
                vstore(g->y + (size_t)i * oc + o, out);
            else
                vstoren(g->y + (size_t)i * oc + o, out, nv);
        }
}

/* panels in flight for n rows: RACC accumulators in all */
#define PG(n) (RACC / ((n) * VPP) > 0 ? RACC / ((n) * VPP) : 1)

/* Columns [o0, o1) of every row (o0 a multiple of PW), in groups of PG(n) panels. */
BC_INLINE void prows_part(const int wf, const bc_gemm *g, size_t o0, size_t o1)
{
    const size_t p1 = (o1 + PW - 1) / PW;
    for (size_t p = o0 / PW; p < p1;) {
        const size_t left = p1 - p;
        switch (g->n) {
        case 1: prows_group(wf, 1, PG(1), g, p, min_sz(PG(1), left)); p += PG(1); break;
        case 2: prows_group(wf, 2, PG(2), g, p, min_sz(PG(2), left)); p += PG(2); break;
        default: prows_group(wf, 3, PG(3), g, p, min_sz(PG(3), left)); p += PG(3); break;
        }
    }
}

static void prows_f32(const bc_gemm *g, size_t o0, size_t o1) { prows_part(BC_WF_PANEL_F32, g, o0, o1); }
static void prows_bf16(const bc_gemm *g, size_t o0, size_t o1) { prows_part(BC_WF_PANEL_BF16, g, o0, o1); }
static void prows_q8_0(const bc_gemm *g, size_t o0, size_t o1) { prows_part(BC_WF_PANEL_Q8, g, o0, o1); }

/* ------------------------------------------------------------------------ */
/* Decoding on a caller's rows: dot products                                 */
/* ------------------------------------------------------------------------ */

/* y[i][o] for n <= BC_ROWS_MAX rows: lane l of an accumulator adds
 * x[i][k] * w[o][k] for k = l, l + VL, ... (an FMA chain), then the lanes are
 * added in vsum_lanes' fixed tree, then r, b, act. A tile is n rows of x
 * against DNR[n] rows of w. */
#if BC_SIMD == 512
static const int DNR[BC_ROWS_MAX + 1] = {0, 16, 8, 8};
#define DNR_MAX 16
#elif BC_SIMD == 256
static const int DNR[BC_ROWS_MAX + 1] = {0, 8, 4, 4};
#define DNR_MAX 8
#else
static const int DNR[BC_ROWS_MAX + 1] = {0, 4, 4, 4};
#define DNR_MAX 4
#endif

/* The DNR[n] outputs from o (clamped to o1 - 1 past the end) of n rows. */
BC_INLINE void dot_group(const int n, const int nr, const bc_gemm *g, size_t o, size_t o1, V *sum)
{
    const size_t c = g->c;
    const float *wr[DNR_MAX];
    BC_UNROLL
    for (int j = 0; j < nr; j++)
        wr[j] = (const float *)g->w + min_sz(o + (size_t)j, o1 - 1) * c;
    V a[BC_ROWS_MAX][DNR_MAX];
    BC_UNROLL
    for (int i = 0; i < n; i++)
        BC_UNROLL
        for (int j = 0; j < nr; j++)
            a[i][j] = vzero();
    size_t k = 0;
    for (; k + VL <= c; k += VL) {
        V xv[BC_ROWS_MAX];
        BC_UNROLL
        for (int i = 0; i < n; i++)
            xv[i] = vload(g->x + (size_t)i * c + k);
        BC_UNROLL
        for (int j = 0; j < nr; j++) {
            const V wv = vload(wr[j] + k);
            BC_UNROLL
            for (int i = 0; i < n; i++)
                a[i][j] = vfma(xv[i], wv, a[i][j]);
        }
    }
    if (k < c) {
        const size_t m = c - k;
        V xv[BC_ROWS_MAX];
        BC_UNROLL
        for (int i = 0; i < n; i++)
            xv[i] = vloadn(g->x + (size_t)i * c + k, m);
        BC_UNROLL
        for (int j = 0; j < nr; j++) {
            const V wv = vloadn(wr[j] + k, m);
            BC_UNROLL
            for (int i = 0; i < n; i++)
                a[i][j] = vfma(xv[i], wv, a[i][j]);
        }
    }
    BC_UNROLL
    for (int i = 0; i < n; i++)
        BC_UNROLL
        for (int j = 0; j < nr; j++)
            sum[(size_t)j * BC_ROWS_MAX + (size_t)i] = a[i][j];
}

/* Columns [o0, o1) of every row, o0 a multiple of VL. */
static void rows_dot(const bc_gemm *g, size_t o0, size_t o1)
{
    const int n = (int)g->n;
    for (size_t o = o0; o < o1; o += VL) {
        V sum[VL * BC_ROWS_MAX];  /* DNR[n] divides VL */
        const size_t nv = min_sz(VL, o1 - o);
        for (size_t j = 0; j < VL; j += (size_t)DNR[n]) {
            switch (n) {
            case 1: dot_group(1, DNR[1], g, o + j, o1, sum + j * BC_ROWS_MAX); break;
            case 2: dot_group(2, DNR[2], g, o + j, o1, sum + j * BC_ROWS_MAX); break;
            default: dot_group(3, DNR[3], g, o + j, o1, sum + j * BC_ROWS_MAX); break;
            }
        }
        for (int i = 0; i < n; i++) {
            V part[VL];
            BC_UNROLL
            for (size_t j = 0; j < VL; j++)
                part[j] = sum[j * BC_ROWS_MAX + (size_t)i];
            V v = vsum_lanes(part);
            float *yi = g->y + (size_t)i * g->oc;
            if (g->r)
                v = vadd(vloadn(g->r + (size_t)i * g->oc + o, nv), v);
            if (g->b)
                v = vadd(v, vloadn(g->b + o, nv));
            if (g->act != BC_ACT_NONE)
                v = vact(v, g->act);
            vstoren(yi + o, v, nv);
        }
    }
}

/* ======================================================================== */
/* Attention: one head, one tile of BQ queries, online softmax over key     */
/* tiles; scores live transposed (key, query lane) so the softmax is        */
/* lane-wise. Never more than BC_ATT_BK x BQ scores at once.                */
/* ======================================================================== */

#define BQ NR  /* queries per unit; a unit of at most VL queries runs on one vector */

/* Qt (Dh, BQ), Ot (Dh, BQ), St (BK, BQ), m (BQ), l (BQ) */
/* attn_unit's, or attn_decode's: (Dh, BK) transposed keys and (2 Dh + BK) per head */
static size_t attn_scratch(size_t d_head)
{
    const size_t unit = (2 * d_head + BC_ATT_BK + 2) * BQ;
    const size_t decode = d_head * BC_ATT_BK + (2 * d_head + BC_ATT_BK) * BQ;
    return unit > decode ? unit : decode;
}

/* dst[i] (rb rows of nv*VL lanes) = (accumulate ? alpha * dst[i] : 0)
 *                                   + sum_t a[i*sa + t*st] * bv[t] (bv rows of nv*VL lanes).
 * masked: for term t, lanes [0, lim[t]) are left as they are (causal keys
 * those queries must not see: not even a NaN or inf in them may leak).
 * Each lane's chain is the same for nv = 1 and nv = 2. */
BC_INLINE void mk(const int rb, const int masked, const int nv, size_t nt,
                      const float *restrict a, size_t sa, size_t st, const float *restrict bv,
                      float *restrict dst, const float *restrict alpha, int accumulate,
                      const size_t *lim)
{
    const size_t bq = (size_t)nv * VL;
    V c0[MR], c1[MR];
    if (accumulate) {
        const V al0 = vload(alpha), al1 = nv == 2 ? vload(alpha + VL) : vzero();
        BC_UNROLL
        for (int i = 0; i < rb; i++) {
            c0[i] = vmul(vload(dst + i * bq), al0);
            c1[i] = nv == 2 ? vmul(vload(dst + i * bq + VL), al1) : vzero();
        }
    } else {
        BC_UNROLL
        for (int i = 0; i < rb; i++) {
            c0[i] = vzero();
            c1[i] = vzero();
        }
    }
    for (size_t t = 0; t < nt; t++) {
        const V b0 = vload(bv + t * bq), b1 = nv == 2 ? vload(bv + t * bq + VL) : vzero();
        const float *at = a + t * st;
        if (masked) {
            const size_t l0 = min_sz(lim[t], VL), l1 = lim[t] > VL ? min_sz(lim[t] - VL, VL) : 0;
            BC_UNROLL
            for (int i = 0; i < rb; i++) {
                const V av = vset1(at[i * sa]);
                c0[i] = vkeep_lo(vfma(av, b0, c0[i]), c0[i], l0);
                if (nv == 2)
                    c1[i] = vkeep_lo(vfma(av, b1, c1[i]), c1[i], l1);
            }
        } else {
            BC_UNROLL
            for (int i = 0; i < rb; i++) {
                const V av = vset1(at[i * sa]);
                c0[i] = vfma(av, b0, c0[i]);
                if (nv == 2)
                    c1[i] = vfma(av, b1, c1[i]);
            }
        }
    }
    BC_UNROLL
    for (int i = 0; i < rb; i++) {
        vstore(dst + i * bq, c0[i]);
        if (nv == 2)
            vstore(dst + i * bq + VL, c1[i]);
    }
}

/* mk() with its row count rb a compile-time constant (1..MR); always inlined
 * into mk_any, so masked and nv are constants in each of its four copies */
BC_INLINE void mk_rb(const int masked, const int nv, int rb, size_t nt, const float *a,
                     size_t sa, size_t st, const float *bv, float *dst, const float *alpha,
                     int accumulate, const size_t *lim)
{
    switch (rb) {
    case 1: mk(1, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim); break;
    case 2: mk(2, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim); break;
    case 3: mk(3, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim); break;
    case 4: mk(4, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim); break;
#if MR >= 6
    case 5: mk(5, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim); break;
    case 6: mk(6, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim); break;
#endif
#if MR >= 14
    case 7: mk(7, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim); break;
    case 8: mk(8, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim); break;
    case 9: mk(9, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim); break;
    case 10: mk(10, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim); break;
    case 11: mk(11, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim); break;
    case 12: mk(12, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim); break;
    case 13: mk(13, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim); break;
    case 14: mk(14, masked, nv, nt, a, sa, st, bv, dst, alpha, accumulate, lim); break;
#endif
    default: break;
    }
}

/* mk() for rb rows, masked when lim is given, on nv (1 or 2) vectors of lanes */
static void mk_any(int rb, int nv, size_t nt, const float *a, size_t sa, size_t st,
                   const float *bv, float *dst, const float *alpha, int accumulate,
                   const size_t *lim)
{
    if (nv == 1) {
        if (lim)
            mk_rb(1, 1, rb, nt, a, sa, st, bv, dst, alpha, accumulate, lim);
        else
            mk_rb(0, 1, rb, nt, a, sa, st, bv, dst, alpha, accumulate, lim);
    } else {
        if (lim)
            mk_rb(1, 2, rb, nt, a, sa, st, bv, dst, alpha, accumulate, lim);
        else
            mk_rb(0, 2, rb, nt, a, sa, st, bv, dst, alpha, accumulate, lim);
    }
}

/* dst rows (n, nv*VL), in blocks of MR rows */
static void mk_rows(size_t n, int nv, size_t nt, const float *a, size_t sa, size_t st,
                        const float *bv, float *dst, const float *alpha, int accumulate,
                        const size_t *lim)
{
    for (size_t i = 0; i < n; i += MR) {
        const int rb = (int)min_sz(MR, n - i);
        mk_any(rb, nv, nt, a + i * sa, sa, st, bv, dst + i * (size_t)nv * VL, alpha,
                   accumulate, lim);
    }
}

/* One unit on nv vectors of lanes (nq <= nv*VL queries). */
BC_INLINE void attn_unit_nv(const int nv, const bc_attn *A, size_t h, size_t i0, size_t nq,
                             float *scratch)
{
    const size_t bq = (size_t)nv * VL;
    const size_t dh = A->d_head, off = h * dh, kvh = h / A->kv_group;
    const float *kh = A->k + kvh * A->khs, *vh = A->v + kvh * A->vhs;
    float *qt = scratch;                 /* (Dh, bq) scaled queries, transposed */
    float *ot = qt + dh * bq;            /* (Dh, bq) unnormalised output, transposed */
    float *st = ot + dh * bq;            /* (BK, bq) scores, then probabilities */
    float *mx = st + BC_ATT_BK * bq;     /* (bq) running max */
    float *sum = mx + bq;                /* (bq) running sum */
    const float scale = 1.0f / sqrtf((float)dh);

    /* keys visible to the last query of the tile */
    size_t kend = A->tk;
    if (A->causal) {
        const size_t last = A->q_pos0 + i0 + nq;  /* keys < last */
        kend = min_sz(kend, last);
    }
    if (kend == 0) {
        for (size_t i = 0; i < nq; i++) {
            memset(A->out + (i0 + i) * A->ldo + off, 0, dh * sizeof(float));
            if (A->lse)
                A->lse[h * A->tq + i0 + i] = -INFINITY;
        }
        return;
    }
    for (size_t d = 0; d < dh; d++) {
        float *row = qt + d * bq;
        for (size_t i = 0; i < bq; i++)
            row[i] = i < nq ? A->q[(i0 + i) * A->ldq + off + d] * scale : 0.0f;
    }
    for (size_t i = 0; i < bq; i++) {
        mx[i] = -INFINITY;
        sum[i] = 0.0f;
    }
    float alpha[BQ];
    size_t lim[BC_ATT_BK];
    for (size_t j0 = 0; j0 < kend; j0 += BC_ATT_BK) {
        const size_t nk = min_sz(BC_ATT_BK, kend - j0);
        /* St (nk, bq) = K[j0:j0+nk] . Qt */
        if (A->k_tiled)  /* the tile's keys transposed: key +1, dimension +BK */
            mk_rows(nk, nv, dh, kh + j0 * dh, 1, BC_ATT_BK, qt, st, NULL, 0, NULL);
        else
            mk_rows(nk, nv, dh, kh + j0 * A->ldk, A->ldk, 1, qt, st, NULL, 0, NULL);
        /* causal: lanes i with q_pos0 + i0 + i < j do not see key j */
        int any_masked = 0;
        for (size_t j = 0; j < nk; j++) {
            const size_t key = j0 + j, pos0 = A->q_pos0 + i0;
            lim[j] = A->causal && key > pos0 ? key - pos0 : 0;
            if (lim[j]) {
                any_masked = 1;
                float *row = st + j * bq;
                vstore(row, vfill_lo(vload(row), min_sz(lim[j], VL), -INFINITY));
                if (nv == 2 && lim[j] > VL)
                    vstore(row + VL, vfill_lo(vload(row + VL), min_sz(lim[j] - VL, VL), -INFINITY));
            }
        }
        /* online softmax, lane-wise: new max t, rescale s = exp(m - t) */
        const V m0 = vload(mx), m1 = nv == 2 ? vload(mx + VL) : vzero();
        V t0 = m0, t1 = m1;
        for (size_t j = 0; j < nk; j++) {
            t0 = vmax(t0, vload(st + j * bq));
            if (nv == 2)
                t1 = vmax(t1, vload(st + j * bq + VL));
        }
        const V s0 = vexp(vsub(m0, t0)), s1 = nv == 2 ? vexp(vsub(m1, t1)) : vzero();
        V l0 = vmul(vload(sum), s0), l1 = nv == 2 ? vmul(vload(sum + VL), s1) : vzero();
        for (size_t j = 0; j < nk; j++) {
            float *row = st + j * bq;
            V p0 = vexp(vsub(vload(row), t0));
            if (lim[j])  /* exactly 0, not exp(-inf) rounded */
                p0 = vfill_lo(p0, min_sz(lim[j], VL), 0.0f);
            vstore(row, p0);
            l0 = vadd(l0, p0);
            if (nv == 2) {
                V p1 = vexp(vsub(vload(row + VL), t1));
                if (lim[j] > VL)
                    p1 = vfill_lo(p1, min_sz(lim[j] - VL, VL), 0.0f);
                vstore(row + VL, p1);
                l1 = vadd(l1, p1);
            }
        }
        vstore(mx, t0);
        vstore(sum, l0);
        vstore(alpha, s0);
        if (nv == 2) {
            vstore(mx + VL, t1);
            vstore(sum + VL, l1);
            vstore(alpha + VL, s1);
        }
        /* Ot (Dh, bq) = alpha * Ot + V[j0:j0+nk]^T . P */
        mk_rows(dh, nv, nk, vh + j0 * A->ldv, 1, A->ldv, st, ot, alpha, j0 > 0,
                    any_masked ? lim : NULL);
    }
    for (size_t i = 0; i < nq; i++) {
        float *oi = A->out + (i0 + i) * A->ldo + off;
        const float inv = 1.0f / sum[i];
        for (size_t d = 0; d < dh; d++)
            oi[d] = ot[d * bq + i] * inv;
        if (A->lse)  /* for the backward: p = exp(s - lse) */
            A->lse[h * A->tq + i0 + i] = mx[i] + logf(sum[i]);
    }
}

/* The unit of queries i0..i0+BQ (fewer at the end): on one vector of lanes when
 * they fit (decoding: one query), else on two; the same bits either way. */
static void attn_unit(const bc_attn *A, size_t h, size_t i0, float *scratch)
{
    const size_t nq = min_sz(BQ, A->tq - i0);
    if (nq <= VL)
        attn_unit_nv(1, A, h, i0, nq, scratch);
    else
        attn_unit_nv(2, A, h, i0, nq, scratch);
}

/* ------------------------------------------------------------------------ */
/* Decoding: one query row, the query heads of one K/V head, the keys in     */
/* lanes. Every query gets exactly attn_unit's chain (the same bits: a KV    */
/* cache's step equals the full pass): per tile of BC_ATT_BK keys, scores    */
/* s = fma over d of k[j][d] * (q[d] * scale) from 0, the running max m and  */
/* sum l updated in key order, p = exp(s - t), then the output rescaled and  */
/* fma'd with v[j] * p in key order; out = O * (1 / l). Keys past the query  */
/* are never visited (in attn_unit they are masked: they add nothing).       */
/* ------------------------------------------------------------------------ */

#define KLANES (BC_ATT_BK / VL)  /* vectors of keys in a tile */
#define DCHUNK 8                  /* head-dim vectors a PV pass keeps in flight */

/* Query row i, query heads h0..h0+nh-1 (nh <= BQ, all reading K/V head
 * h0 / kv_group). scratch: attn_scratch(Dh) floats: the tile's keys
 * transposed (Dh, BK), then per head the scaled query (Dh), the output (Dh)
 * and the tile's scores (BK). Independent chains run side by side (the
 * tile's key vectors for the scores, the head-dim vectors for PV): the order
 * within each chain is attn_unit's. */
static void attn_decode(const bc_attn *A, size_t i, size_t h0, size_t nh, float *scratch)
{
    const size_t dh = A->d_head, kvh = h0 / A->kv_group;
    const float *kh = A->k + kvh * A->khs, *vh = A->v + kvh * A->vhs;
    const float scale = 1.0f / sqrtf((float)dh);
    size_t kend = A->tk;
    if (A->causal)
        kend = min_sz(kend, A->q_pos0 + i + 1);
    float *kbuf = scratch, *qs = kbuf + dh * BC_ATT_BK, *o = qs + nh * dh, *sc = o + nh * dh;
    if (kend == 0) {
        for (size_t g = 0; g < nh; g++)
            memset(A->out + i * A->ldo + (h0 + g) * dh, 0, dh * sizeof(float));
        return;
    }
    for (size_t g = 0; g < nh; g++)
        for (size_t d = 0; d < dh; d++)
            qs[g * dh + d] = A->q[i * A->ldq + (h0 + g) * dh + d] * scale;
    float m[BQ], l[BQ];
    for (size_t g = 0; g < nh; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    for (size_t j0 = 0; j0 < kend; j0 += BC_ATT_BK) {
        const size_t nk = min_sz(BC_ATT_BK, kend - j0);
        /* kt (Dh, BK) = the tile's keys transposed: where they lie in a tiled
         * cache (keys past the length: computed, never used), else transposed
         * here, VL x VL blocks in registers (keys past nk zero) */
        const float *kt = kbuf;
        if (A->k_tiled)
            kt = kh + j0 * dh;
        else for (size_t jb = 0; jb < BC_ATT_BK; jb += VL) {
            const size_t rows = jb < nk ? min_sz(VL, nk - jb) : 0;
            for (size_t d0 = 0; d0 < dh; d0 += VL) {
                const size_t nd = min_sz(VL, dh - d0);
                V r[VL], t[VL];
                const float *kr = kh + (j0 + jb) * A->ldk + d0;
                if (rows == VL && nd == VL) {
                    BC_UNROLL
                    for (size_t j = 0; j < VL; j++)
                        r[j] = vload(kr + j * A->ldk);
                } else {
                    BC_UNROLL
                    for (size_t j = 0; j < VL; j++)
                        r[j] = j < rows ? vloadn(kr + j * A->ldk, nd) : vzero();
                }
                vtranspose(t, r);
                for (size_t dd = 0; dd < nd; dd++)
                    vstore(kbuf + (d0 + dd) * BC_ATT_BK + jb, t[dd]);
            }
        }
        for (size_t g = 0; g < nh; g++) {
            /* scores: KLANES chains, each fma over d in order from 0 */
            const float *q = qs + g * dh;
            float *s = sc + g * BC_ATT_BK, *og = o + g * dh;
            V acc[KLANES];
            BC_UNROLL
            for (int a = 0; a < KLANES; a++)
                acc[a] = vzero();
            for (size_t d = 0; d < dh; d++) {
                const V qd = vset1(q[d]);
                BC_UNROLL
                for (int a = 0; a < KLANES; a++)
                    acc[a] = vfma(vload(kt + d * BC_ATT_BK + (size_t)a * VL), qd, acc[a]);
            }
            BC_UNROLL
            for (int a = 0; a < KLANES; a++)
                vstore(s + (size_t)a * VL, acc[a]);
            /* the running max and sum, in key order */
            float t = m[g];
            for (size_t j = 0; j < nk; j++)
                t = t > s[j] ? t : s[j];  /* vmax(t, s): the second operand on NaN */
            float alpha[VL];
            vstore(alpha, vexp(vset1(m[g] - t)));
            BC_UNROLL
            for (int a = 0; a < KLANES; a++)
                vstore(s + (size_t)a * VL, vexp(vsub(vload(s + (size_t)a * VL), vset1(t))));
            float lg = l[g] * alpha[0];
            for (size_t j = 0; j < nk; j++)
                lg += s[j];
            /* PV: up to DCHUNK head-dim vectors side by side, each fma over the keys in order */
            for (size_t d0 = 0; d0 < dh; d0 += DCHUNK * VL) {
                V ov[DCHUNK];
                const size_t nc = min_sz(DCHUNK, (dh - d0 + VL - 1) / VL);
                const size_t last = min_sz(VL, dh - d0 - (nc - 1) * VL);  /* lanes of the last vector */
                for (size_t c = 0; c < nc; c++) {
                    const size_t nd = c + 1 < nc ? VL : last;
                    ov[c] = j0 ? vmul(vloadn(og + d0 + c * VL, nd), vset1(alpha[0])) : vzero();
                }
                const float *vk = vh + j0 * A->ldv + d0;
                if (nc == DCHUNK && last == VL) {  /* the accumulators stay in registers */
                    V acc[DCHUNK];
                    BC_UNROLL
                    for (int c = 0; c < DCHUNK; c++)
                        acc[c] = ov[c];
                    for (size_t j = 0; j < nk; j++) {
                        const V pj = vset1(s[j]);
                        BC_UNROLL
                        for (int c = 0; c < DCHUNK; c++)
                            acc[c] = vfma(vload(vk + j * A->ldv + (size_t)c * VL), pj, acc[c]);
                    }
                    BC_UNROLL
                    for (int c = 0; c < DCHUNK; c++)
                        ov[c] = acc[c];
                } else {
                    for (size_t j = 0; j < nk; j++) {
                        const V pj = vset1(s[j]);
                        for (size_t c = 0; c < nc; c++)
                            ov[c] = vfma(vloadn(vk + j * A->ldv + c * VL, c + 1 < nc ? VL : last),
                                         pj, ov[c]);
                    }
                }
                for (size_t c = 0; c < nc; c++)
                    vstoren(og + d0 + c * VL, ov[c], c + 1 < nc ? VL : last);
            }
            m[g] = t;
            l[g] = lg;
        }
    }
    for (size_t g = 0; g < nh; g++) {
        float *oi = A->out + i * A->ldo + (h0 + g) * dh;
        const float inv = 1.0f / l[g];
        for (size_t d = 0; d < dh; d++)
            oi[d] = o[g * dh + d] * inv;
    }
}

/* ======================================================================== */
/* Attention backward, flash style: no (T, T) matrix. For query i and key j  */
/* of one head, s = (q_i . k_j) / sqrt(Dh) recomputed, p = exp(s - lse_i),   */
/* dv_j += p do_i, dp = do_i . v_j, ds = p (dp - D_i) with D_i = do_i . o_i,  */
/* dk_j += ds q_i / sqrt(Dh), dq_i += ds k_j / sqrt(Dh). Keys and queries    */
/* are each owned by one unit (dk, dv by key tile, dq by query tile), so     */
/* nothing is added from two threads and the bits do not depend on them.    */
/* ======================================================================== */

/* sum_d a[d] b[d]: VL partial sums, added in vsum_lanes' tree */
static inline float vdot(const float *a, const float *b, size_t n)
{
    V acc = vzero();
    size_t d = 0;
    for (; d + VL <= n; d += VL)
        acc = vfma(vload(a + d), vload(b + d), acc);
    if (d < n)
        acc = vfma(vloadn(a + d, n - d), vloadn(b + d, n - d), acc);
    float t[VL];
    vstore(t, acc);
    float s = 0.0f;
    for (int i = 0; i < VL; i++)
        s += t[i];
    return s;
}

/* out[j] = scale * (a . b_j) for the n rows b_j = b + j ldb, each sum as vdot's
 * (the same bits); four rows at a time so their lane sums run side by side. */
static inline void vdot_rows(float *out, const float *a, const float *b, size_t ldb, size_t n,
                             size_t dh, float scale)
{
    size_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const float *b0 = b + j * ldb, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;
        V c0 = vzero(), c1 = vzero(), c2 = vzero(), c3 = vzero();
        size_t d = 0;
        for (; d + VL <= dh; d += VL) {
            const V av = vload(a + d);
            c0 = vfma(av, vload(b0 + d), c0);
            c1 = vfma(av, vload(b1 + d), c1);
            c2 = vfma(av, vload(b2 + d), c2);
            c3 = vfma(av, vload(b3 + d), c3);
        }
        if (d < dh) {
            const size_t r = dh - d;
            const V av = vloadn(a + d, r);
            c0 = vfma(av, vloadn(b0 + d, r), c0);
            c1 = vfma(av, vloadn(b1 + d, r), c1);
            c2 = vfma(av, vloadn(b2 + d, r), c2);
            c3 = vfma(av, vloadn(b3 + d, r), c3);
        }
        float t0[VL], t1[VL], t2[VL], t3[VL];
        vstore(t0, c0);
        vstore(t1, c1);
        vstore(t2, c2);
        vstore(t3, c3);
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
        for (int l = 0; l < VL; l++) {
            s0 += t0[l];
            s1 += t1[l];
            s2 += t2[l];
            s3 += t3[l];
        }
        out[j] = s0 * scale;
        out[j + 1] = s1 * scale;
        out[j + 2] = s2 * scale;
        out[j + 3] = s3 * scale;
    }
    for (; j < n; j++)
        out[j] = vdot(a, b + j * ldb, dh) * scale;
}

/* y[d] += alpha x[d] */
static inline void vaxpy(float *y, float alpha, const float *x, size_t n)
{
    const V a = vset1(alpha);
    size_t d = 0;
    for (; d + VL <= n; d += VL)
        vstore(y + d, vfma(a, vload(x + d), vload(y + d)));
    if (d < n)
        vstoren(y + d, vfma(a, vloadn(x + d, n - d), vloadn(y + d, n - d)), n - d);
}

/* p[j] = exp(s[j] - lse) for j < n (in place) */
static inline void vexp_shift(float *p, float lse, size_t n)
{
    const V l = vset1(lse);
    size_t j = 0;
    for (; j + VL <= n; j += VL)
        vstore(p + j, vexp(vsub(vload(p + j), l)));
    if (j < n)
        vstoren(p + j, vexp(vsub(vloadn(p + j, n - j), l)), n - j);
}

/* dk (BK, Dh), dv (BK, Dh), p (BK), dp (BK) */
static size_t attn_bwd_scratch(size_t d_head)
{
    return 2 * BC_ATT_BK * d_head + 2 * BC_ATT_BK + 2 * VL;
}

/* dk, dv of K/V head g, keys [j0, j0 + BK): every query head of the group in
 * order, every query that sees them in order. */
static void attn_bwd_kv(const bc_attn_bwd *A, size_t g, size_t j0, float *scratch)
{
    const size_t dh = A->d_head, t = A->t, nk = min_sz(BC_ATT_BK, t - j0);
    const size_t qw = A->n_heads * dh, kw = qw / A->kv_group;
    const float scale = 1.0f / sqrtf((float)dh);
    float *dk = scratch, *dv = dk + BC_ATT_BK * dh, *p = dv + BC_ATT_BK * dh, *dp = p + BC_ATT_BK;
    memset(dk, 0, 2 * BC_ATT_BK * dh * sizeof(float));
    const float *kg = A->k + g * dh, *vg = A->v + g * dh;
    for (size_t h = g * A->kv_group; h < (g + 1) * A->kv_group; h++) {
        for (size_t i = A->causal ? j0 : 0; i < t; i++) {
            const float *qi = A->q + i * A->ldq + h * dh, *doi = A->dout + i * A->ldo + h * dh;
            const size_t n = A->causal ? min_sz(nk, i - j0 + 1) : nk;
            vdot_rows(p, qi, kg + j0 * A->ldq, A->ldq, n, dh, scale);
            vdot_rows(dp, doi, vg + j0 * A->ldq, A->ldq, n, dh, 1.0f);
            vexp_shift(p, A->lse[h * t + i], n);
            const float di = A->dsum[h * t + i];
            for (size_t j = 0; j < n; j++) {
                vaxpy(dv + j * dh, p[j], doi, dh);
                vaxpy(dk + j * dh, p[j] * (dp[j] - di) * scale, qi, dh);
            }
        }
    }
    for (size_t j = 0; j < nk; j++) {
        memcpy(A->dk + (j0 + j) * A->ldd + g * dh, dk + j * dh, dh * sizeof(float));
        memcpy(A->dv + (j0 + j) * A->ldd + g * dh, dv + j * dh, dh * sizeof(float));
    }
    (void)kw;
}

/* dq of query head h, queries [i0, i0 + BK): the keys each sees, in order. */
static void attn_bwd_q(const bc_attn_bwd *A, size_t h, size_t i0, float *scratch)
{
    const size_t dh = A->d_head, t = A->t, nq = min_sz(BC_ATT_BK, t - i0);
    const size_t g = h / A->kv_group;
    const float scale = 1.0f / sqrtf((float)dh);
    float *dq = scratch, *p = dq + BC_ATT_BK * dh, *dp = p + BC_ATT_BK;
    const float *kg = A->k + g * dh, *vg = A->v + g * dh;
    for (size_t i = 0; i < nq; i++) {
        const size_t qi_ = i0 + i;
        const float *qi = A->q + qi_ * A->ldq + h * dh, *doi = A->dout + qi_ * A->ldo + h * dh;
        float *dqi = dq + i * dh;
        memset(dqi, 0, dh * sizeof(float));
        const size_t kend = A->causal ? qi_ + 1 : t;
        const float lse = A->lse[h * t + qi_], di = A->dsum[h * t + qi_];
        for (size_t j0 = 0; j0 < kend; j0 += BC_ATT_BK) {
            const size_t n = min_sz(BC_ATT_BK, kend - j0);
            vdot_rows(p, qi, kg + j0 * A->ldq, A->ldq, n, dh, scale);
            vdot_rows(dp, doi, vg + j0 * A->ldq, A->ldq, n, dh, 1.0f);
            vexp_shift(p, lse, n);
            for (size_t j = 0; j < n; j++)
                vaxpy(dqi, p[j] * (dp[j] - di) * scale, kg + (j0 + j) * A->ldq, dh);
        }
        memcpy(A->dq + qi_ * A->ldd + h * dh, dqi, dh * sizeof(float));
    }
}

/* ======================================================================== */
/* Elementwise backward                                                      */
/* ======================================================================== */

/* dy * act'(x) */
static inline V vact_bwd(V dy, V x, int kind)
{
    switch (kind) {
    case BC_ACT_GELU_TANH: {
        /* gelu = x s, s = 1 / (1 + exp(-2u)), u = c (x + a x^3): s + 2 x s (1 - s) u' */
        const V x2 = vmul(x, x);
        const V u = vmul(vset1(0.7978845608f), vfma(vmul(vset1(0.044715f), x2), x, x));
        const V s = vdiv(vset1(1.0f), vadd(vset1(1.0f), vexp(vmul(vset1(-2.0f), u))));
        const V du = vmul(vset1(0.7978845608f), vfma(vset1(3.0f * 0.044715f), x2, vset1(1.0f)));
        const V ds = vmul(vmul(vset1(2.0f), vmul(s, vsub(vset1(1.0f), s))), du);
        return vmul(dy, vfma(x, ds, s));
    }
    case BC_ACT_GELU: {  /* Phi(x) + x phi(x) */
        float xs[VL], ds[VL];
        vstore(xs, x);
        vstore(ds, dy);
        for (int i = 0; i < VL; i++) {
            const float cdf = 0.5f * (1.0f + erff(xs[i] * 0.70710678118654752f));
            const float pdf = 0.39894228040143268f * expf(-0.5f * xs[i] * xs[i]);
            ds[i] *= cdf + xs[i] * pdf;
        }
        return vload(ds);
    }
    case BC_ACT_RELU: {  /* dy where x > 0 */
        float xs[VL], ds[VL];
        vstore(xs, x);
        vstore(ds, dy);
        for (int i = 0; i < VL; i++)
            ds[i] = xs[i] > 0.0f ? ds[i] : 0.0f;
        return vload(ds);
    }
    default:
        return dy;
    }
}

static void act_bwd(float *dx, const float *dy, const float *x, size_t n, int kind)
{
    size_t i = 0;
    for (; i + VL <= n; i += VL)
        vstore(dx + i, vact_bwd(vload(dy + i), vload(x + i), kind));
    if (i < n)
        vstoren(dx + i, vact_bwd(vloadn(dy + i, n - i), vloadn(x + i, n - i), kind), n - i);
}

/* y = silu(g) u: dup = dy g s, dgate = dy u s (1 + g (1 - s)), s = sigmoid(g) */
BC_INLINE void vswiglu_bwd(V *dg, V *du, V dy, V g, V u)
{
    const V one = vset1(1.0f);
    const V s = vdiv(one, vadd(one, vexp(vsub(vzero(), g))));
    *du = vmul(dy, vmul(g, s));
    *dg = vmul(vmul(dy, u), vmul(s, vfma(g, vsub(one, s), one)));
}

static void swiglu_bwd(float *dgate, float *dup, const float *dy, const float *gate,
                       const float *up, size_t n)
{
    size_t i = 0;
    V dg, du;
    for (; i + VL <= n; i += VL) {
        vswiglu_bwd(&dg, &du, vload(dy + i), vload(gate + i), vload(up + i));
        vstore(dgate + i, dg);
        vstore(dup + i, du);
    }
    if (i < n) {
        const size_t m = n - i;
        vswiglu_bwd(&dg, &du, vloadn(dy + i, m), vloadn(gate + i, m), vloadn(up + i, m));
        vstoren(dgate + i, dg, m);
        vstoren(dup + i, du, m);
    }
}

/* The cross-entropy of one row of logits: the max, then sum exp(z - max) in
 * VL lanes added in order at the end, lse = max + log(sum); the gradient
 * exp(z - max) / sum, scaled, minus scale at the target. */
static void xent_row(float *dz, float *loss, const float *z, size_t v, size_t target, float scale)
{
    const float zt = z[target];  /* read before dz (which may be z) is written */
    V mx = vset1(-INFINITY);
    size_t j = 0;
    for (; j + VL <= v; j += VL)
        mx = vmax(mx, vload(z + j));
    float m = -INFINITY, t[VL];
    vstore(t, mx);
    for (int i = 0; i < VL; i++)
        m = t[i] > m ? t[i] : m;
    for (; j < v; j++)
        m = z[j] > m ? z[j] : m;
    const V mv = vset1(m);
    V acc = vzero();
    j = 0;
    for (; j + VL <= v; j += VL) {
        const V e = vexp(vsub(vload(z + j), mv));
        if (dz)
            vstore(dz + j, e);
        acc = vadd(acc, e);
    }
    if (j < v) {
        const V e = vexp(vsub(vloadn(z + j, v - j), mv));
        if (dz)
            vstoren(dz + j, e, v - j);
        acc = vadd(acc, vkeep_lo(vzero(), e, v - j));  /* the lanes past v add nothing */
    }
    vstore(t, acc);
    float sum = 0.0f;
    for (int i = 0; i < VL; i++)
        sum += t[i];
    *loss = m + logf(sum) - zt;
    if (!dz)
        return;
    const V f = vset1(scale / sum);
    j = 0;
    for (; j + VL <= v; j += VL)
        vstore(dz + j, vmul(vload(dz + j), f));
    if (j < v)
        vstoren(dz + j, vmul(vloadn(dz + j, v - j), f), v - j);
    dz[target] -= scale;
}

/* ======================================================================== */
/* Elementwise                                                               */
/* ======================================================================== */

static void act(float *y, const float *x, size_t n, int kind)
{
    size_t i = 0;
    for (; i + VL <= n; i += VL)
        vstore(y + i, vact(vload(x + i), kind));
    if (i < n)
        vstoren(y + i, vact(vloadn(x + i, n - i), kind), n - i);
}

static void swiglu(float *y, const float *gate, const float *up, size_t n)
{
    size_t i = 0;
    for (; i + VL <= n; i += VL)
        vstore(y + i, vmul(vsilu(vload(gate + i)), vload(up + i)));
    if (i < n)
        vstoren(y + i, vmul(vsilu(vloadn(gate + i, n - i)), vloadn(up + i, n - i)), n - i);
}

static void add(float *y, const float *a, const float *b, size_t n)
{
    size_t i = 0;
    for (; i + VL <= n; i += VL)
        vstore(y + i, vadd(vload(a + i), vload(b + i)));
    if (i < n)
        vstoren(y + i, vadd(vloadn(a + i, n - i), vloadn(b + i, n - i)), n - i);
}

/* ======================================================================== */
/* The table: the one symbol this copy exports                              */
/* ======================================================================== */

const bc_kernel_table BC_KERNEL_TABLE = {
    .name = BC_KERNEL_NAME,
    .gemm_mr = MR,
    .gemm_nr = NR,
    .gemm_part = {gemm_rows, gemm_f32, gemm_bf16, gemm_q8_0},
    .rows_part = {rows_dot, prows_f32, prows_bf16, prows_q8_0},
    .attn_bq = BQ,
    .attn_scratch = attn_scratch,
    .attn_unit = attn_unit,
    .attn_decode = attn_decode,
    .act = act,
    .swiglu = swiglu,
    .add = add,
    .mm_part = mm_part,
    .attn_bwd_scratch = attn_bwd_scratch,
    .attn_bwd_kv = attn_bwd_kv,
    .attn_bwd_q = attn_bwd_q,
    .act_bwd = act_bwd,
    .swiglu_bwd = swiglu_bwd,
    .xent_row = xent_row,
};
