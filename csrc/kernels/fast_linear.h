/* fast_linear.h: the products (part of the kernel template, fast_tmpl.h:
 * included once per instruction set): the GEMM of the forward, y (N,OC) =
 * act(r + x (N,C) @ w (OC,C)^T + b), and beside it the backward's products
 * C = [C +] A B, on one register tile and one epilogue. Decoding (a few
 * rows) is fast_decode.h; what each weight format adds (its copy into
 * float32 panels) is fast_formats.h. Spread over threads by linear.c and
 * grad.c. */

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

/* Rows 0..nk-1 of a panel, PW floats apart from dst, <- the transpose of a
 * VL x VL block whose row j (j < nj; zero past) is nk <= VL floats at src +
 * j * ld: VL loads, a register transpose, nk stores. */
BC_INLINE void pack_block_t(float *dst, const float *src, size_t ld, size_t nj, size_t nk)
{
    V r[VL], o[VL];
    BC_UNROLL
    for (size_t j = 0; j < VL; j++)
        r[j] = j >= nj ? vzero() : nk == VL ? vload(src + j * ld) : vloadn(src + j * ld, nk);
    vtranspose(o, r);
    for (size_t k = 0; k < nk; k++)
        vstore(dst + k * PW, o[k]);
}

/* bp (nc columns of kc rows as float32 panels) <- rows o0.. of a row-major w,
 * columns p0..p0+kc; zero past nc: VL x VL blocks transposed (pack_block_t). */
static void pack_rows(float *restrict bp, const bc_gemm *g, size_t o0, size_t nc, size_t p0,
                      size_t kc)
{
    const float *restrict w = g->w;
    const size_t c = g->c;
    for (size_t jp = 0; jp < nc; jp += VL) {
        float *dst = bp + (jp / PW) * kc * PW + jp % PW;
        const float *src = w + (o0 + jp) * c + p0;
        for (size_t k = 0; k < kc; k += VL)
            pack_block_t(dst + k * PW, src + k, c, min_sz(VL, nc - jp), min_sz(VL, kc - k));
    }
}

/* How the kernels read a format's panel (fast_formats.h): for the group of
 * rows from k0 (a multiple of the format's scale group) the lanes' block
 * state (q8_0: the scales in s; q4_k: the scales in s and the negated
 * offsets in m; nothing for float32 and bfloat16; a field a format leaves
 * unused costs nothing once inlined), then row k's VL weights of lanes
 * lane0.. as floats. The panel's block b lies at panel + b * st
 * (bc_format_panel_at: one block of 16 rows apart, or a run's blocks apart
 * where the format interleaves its panels in runs). The GEMM's copy and the
 * decoding stream both read a format through these, so they see the same
 * floats. */
typedef struct {
    V s, m;
} wf_st;
typedef wf_st (*wf_state_fn)(const unsigned char *panel, size_t st, size_t k0, size_t lane0);
typedef V (*wf_vec_fn)(const unsigned char *panel, size_t st, size_t k, size_t lane0,
                       wf_st state);

/* The state of a format with one vector a group (the scales, or nothing). */
BC_INLINE wf_st wf_scale(V s)
{
    wf_st r;
    r.s = s;
    r.m = s;
    return r;
}

/* bp (nc columns of kc rows as float32 panels) <- columns o0.. (a multiple of
 * PW), rows p0..p0+kc (a multiple of sg) of g's packed matrix (dtype), read
 * with state and vec every sg rows. */
BC_INLINE void load_panels(const int dtype, const size_t sg, const wf_state_fn state,
                           const wf_vec_fn vec, float *restrict bp, const bc_gemm *g, size_t o0,
                           size_t nc, size_t p0, size_t kc)
{
    const unsigned char *w = g->w;
    const bc_format *f = bc_format_of(dtype);
    const size_t panels = (g->oc + PW - 1) / PW;
    for (size_t jp = 0; jp < nc; jp += PW) {
        const bc_panel_at at = bc_format_panel_at(f, g->c, panels, (o0 + jp) / PW);
        const unsigned char *panel = w + at.origin;
        float *dst = bp + (jp / PW) * kc * PW - p0 * PW;  /* row k at dst + k * PW */
        for (size_t k0 = p0; k0 < p0 + kc; k0 += sg) {
            wf_st d[VPP];
            BC_UNROLL
            for (size_t t = 0; t < VPP; t++)
                d[t] = state(panel, at.stride, k0, t * VL);
            const size_t k1 = min_sz(k0 + sg, p0 + kc);
            for (size_t k = k0; k < k1; k++)
                BC_UNROLL
                for (size_t t = 0; t < VPP; t++)
                    vstore(dst + k * PW + t * VL, vec(panel, at.stride, k, t * VL, d[t]));
        }
    }
}

/* The epilogue of every product (the GEMM tile and the backward's products
 * here, decoding on panels and on rows in fast_decode.h): v + the bias (when
 * there is one: adding a zero would turn -0 into +0), then the activation;
 * vstore_n (bc_simd.h) stores the first n lanes. */
BC_INLINE V finish(V v, const V *bias, int act)
{
    if (bias)
        v = vadd(v, *bias);
    if (act != BC_ACT_NONE)
        v = vact(v, act);
    return v;
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
            v0 = finish(v0, io->b ? &bb0 : NULL, io->act);
            v1 = finish(v1, io->b ? &bb1 : NULL, io->act);
        }
        vstore_n(yi, v0, n0);
        vstore_n(yi + io->y1, v1, n1);
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

/* Rows of one block of a product's output (rows: the output's rows). They are
 * taken in blocks, each block's K blocks summed before the next block starts,
 * so that the block's NC output columns stay in L2 between its K blocks
 * (when every row went through each K block in turn, an output of more rows
 * than L2 holds went to memory and back once a K block). A block of about
 * 16 MR rows (224 with AVX-512: 224 KiB of output beside the 256 KiB weight
 * block); where each block must copy the weights again (any layout but
 * float32 panels, and the backward's B) about 64 MR, so the copies stay a
 * small part of the work. Equal blocks of whole tiles, one block when the
 * rows fit; the order of every element's sums is the same for any block. */
static size_t row_block(size_t rows, int copies)
{
    const size_t most = (copies ? 64 : 16) * (size_t)MR;
    if (rows <= most)
        return rows;
    const size_t blocks = (rows + most - 1) / most;
    return ((rows + blocks - 1) / blocks + MR - 1) / MR * MR;
}

typedef void (*wf_copy_fn)(float *, const bc_gemm *, size_t, size_t, size_t, size_t);

/* Rows [i0,i1) x columns [jc,jc+nc) of y over all of C, in BC_KC blocks
 * added in order: each block of w as float32 panels (where they lie, or
 * copied into bp by copy_w), then the tiles. */
// y (N,OC), x (N,C), w (OC,C) in layout g->wf, b (OC), r (N,OC)
static void gemm_block(const bc_gemm *g, size_t i0, size_t i1, size_t jc, size_t nc,
                       wf_copy_fn copy_w, float *scratch)
{
    float *bp = scratch;                   /* BC_KC x BC_NC */
    float *ap = scratch + BC_KC * BC_NC;   /* MR x BC_KC: rows of x, when copied */
    /* Rows of x 4 KiB apart (C a multiple of 1024) all fall in one L1 set and
     * evict each other; then each tile's rows are first copied side by side.
     * The values and their order are the same either way. */
    const int copy_a = g->c % 1024 == 0;
    for (size_t pc = 0; pc < g->c; pc += BC_KC) {
        const size_t kc = min_sz(BC_KC, g->c - pc);
        const float *blk;
        size_t bkc;  /* rows of one panel of blk */
        if (!copy_w) {
            blk = (const float *)g->w + (jc / PW) * g->c * PW + pc * PW;
            bkc = g->c;
        } else {
            copy_w(bp, g, jc, nc, pc, kc);
            blk = bp;
            bkc = kc;
        }
        for (size_t ic = i0; ic < i1; ic += MR) {
            const int mr = (int)min_sz(MR, i1 - ic);
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

/* The rows [n0,n1) x columns [o0,o1) of y, any layout; o0 and o1 - o0
 * (unless o1 == oc) are multiples of NR and of PW. scratch: BC_GEMM_SCRATCH
 * floats. */
// y (N,OC), x (N,C), w (OC,C) in layout g->wf, b (OC), r (N,OC)
static void gemm_part(const bc_gemm *g, size_t n0, size_t n1, size_t o0, size_t o1,
                      float *scratch)
{
    /* the layout's copy into float32 panels (none: float32 panels, used where they lie) */
    const wf_copy_fn copy_w = BC_KERNEL_TABLE.wf[g->wf].panels;
    const size_t mc = row_block(n1 - n0, copy_w != NULL);
    for (size_t jc = o0; jc < o1; jc += BC_NC)
        for (size_t ic = n0; ic < n1; ic += mc)
            gemm_block(g, ic, min_sz(ic + mc, n1), jc, min_sz(BC_NC, o1 - jc), copy_w, scratch);
}

/* ======================================================================== */
/* The backward's products: C (M,N) = [C +] A (M,K) B (K,N) (bc_mm): the     */
/* linear's dx = dy w and dw += dy^T x, on the forward's tile                 */
/* ======================================================================== */

/* bp (nc columns of kc rows as float32 panels, zero past nc to the panel's
 * end) <- B(pc.., jc..) */
static void mm_pack_b(float *restrict bp, const bc_mm *g, size_t jc, size_t nc, size_t pc,
                      size_t kc)
{
    const size_t ncp = (nc + PW - 1) / PW * PW;
    if (g->b_kind == BC_MM_B_ROWS) {  /* a panel's row is VPP vectors: copied as such */
        for (size_t jp = 0; jp < ncp; jp += PW) {
            const size_t w = jp + PW <= nc ? PW : nc - jp;  /* jp < nc: ncp rounds nc up */
            float *dst = bp + (jp / PW) * kc * PW;
            const float *src = g->b + pc * g->ldb + jc + jp;
            if (w == PW) {
                for (size_t k = 0; k < kc; k++)
                    BC_UNROLL
                    for (size_t t = 0; t < VPP; t++)
                        vstore(dst + k * PW + t * VL, vload(src + k * g->ldb + t * VL));
                continue;
            }
            for (size_t k = 0; k < kc; k++)
                BC_UNROLL
                for (size_t t = 0; t < VPP; t++) {
                    const size_t l = t * VL;
                    vstore(dst + k * PW + l,
                           l < w ? vloadn(src + k * g->ldb + l, min_sz(VL, w - l)) : vzero());
                }
        }
        return;
    }
    /* panels: B(k, j) at b[(k/PW)*ldb*PW + j*PW + k%PW], PW consecutive k together
     * (pc a multiple of PW): each PW x PW block, column j's PW floats a row of
     * PW apart, transposed VL x VL at a time (pack_block_t) into rows of k;
     * columns past nc are zero */
    for (size_t jp = 0; jp < ncp; jp += PW) {
        float *dst = bp + (jp / PW) * kc * PW;
        for (size_t k0 = 0; k0 < kc; k0 += PW) {
            const size_t nk = min_sz(PW, kc - k0);
            const float *src = g->b + ((pc + k0) / PW) * g->ldb * PW + (jc + jp) * PW;
            for (size_t jb = 0; jb < PW; jb += VL) {
                const size_t nj = jp + jb < nc ? min_sz(VL, nc - jp - jb) : 0;
                for (size_t kb = 0; kb < nk; kb += VL)
                    pack_block_t(dst + (k0 + kb) * PW + jb, src + jb * PW + kb, PW, nj,
                                 min_sz(VL, nk - kb));
            }
        }
    }
}
_Static_assert(BC_KC % PW == 0, "mm_pack_b: a block of k starts a panel of B's k");

_Static_assert(MR <= BC_MM_MC, "mm_part: a block of A's rows holds a tile");
#define MM_MC (BC_MM_MC / MR * MR)  /* rows of A packed at once: whole tiles */

/* ap (mc rows of kc) <- A(i, k) = a[i + k cs] (A's rows are a's columns):
 * VL x VL blocks through a register transpose, each of a's rows read VL
 * floats at a time across the block */
// ap (mc, kc); a from the block's first row and first k
static void mm_pack_a_cols(float *restrict ap, const float *restrict a, size_t cs, size_t mc,
                           size_t kc)
{
    for (size_t k0 = 0; k0 < kc; k0 += VL) {
        const size_t nk = min_sz(VL, kc - k0);
        for (size_t i0 = 0; i0 < mc; i0 += VL) {
            const size_t ni = min_sz(VL, mc - i0);
            V r[VL], t[VL];
            BC_UNROLL
            for (size_t k = 0; k < VL; k++)
                r[k] = k >= nk ? vzero() : ni == VL ? vload(a + (k0 + k) * cs + i0)
                                                    : vloadn(a + (k0 + k) * cs + i0, ni);
            vtranspose(t, r);
            for (size_t i = 0; i < ni; i++)
                vstore_n(ap + (i0 + i) * kc + k0, t[i], nk);
        }
    }
}

/* Rows [i0,i1) x columns [jc,jc+nc) of C over all of K, in BC_KC blocks
 * added in order (the first block onto C itself when accumulating): every
 * element's chain depends on K alone, not on the split. */
// C (M,N), A (M,K), B (K,N) as bc_mm lays them out
static void mm_block(const bc_mm *g, size_t i0, size_t i1, size_t jc, size_t nc, float *scratch)
{
    float *bp = scratch;                   /* BC_KC x BC_NC */
    float *ap = scratch + BC_KC * BC_NC;   /* MM_MC x BC_KC: rows of A, when A is columns */
    for (size_t pc = 0; pc < g->k; pc += BC_KC) {
        const size_t kc = min_sz(BC_KC, g->k - pc);
        mm_pack_b(bp, g, jc, nc, pc, kc);
        for (size_t icb = i0; icb < i1; icb += MM_MC) {
            const size_t mc = min_sz(MM_MC, i1 - icb);
            if (g->a_cs != 1)  /* A's rows are columns of a (a_rs == 1) */
                mm_pack_a_cols(ap, g->a + icb + pc * g->a_cs, g->a_cs, mc, kc);
            for (size_t ic = icb; ic < icb + mc; ic += MR) {
                const int mr = (int)min_sz(MR, icb + mc - ic);
                const float *a = g->a_cs == 1 ? g->a + ic * g->a_rs + pc : ap + (ic - icb) * kc;
                const size_t lda = g->a_cs == 1 ? g->a_rs : kc;
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

/* Rows [i0,i1) x columns [j0,j1) of C: NC columns at a time, the rows in
 * blocks (row_block: B is packed again for each). */
// C (M,N), A (M,K), B (K,N) as bc_mm lays them out
static void mm_part(const bc_mm *g, size_t i0, size_t i1, size_t j0, size_t j1, float *scratch)
{
    const size_t mb = row_block(i1 - i0, 1);
    for (size_t jc = j0; jc < j1; jc += BC_NC)
        for (size_t ib = i0; ib < i1; ib += mb)
            mm_block(g, ib, min_sz(ib + mb, i1), jc, min_sz(BC_NC, j1 - jc), scratch);
}
