/* fast_decode.h: decoding's products, up to BC_ROWS_MAX rows of x streaming
 * the weights once (part of the kernel template, fast_tmpl.h: included once
 * per instruction set, after fast_linear.h, whose epilogue they share). On
 * packed weights each format instantiates prows_part with its readers
 * (fast_formats.h) and gets the GEMM's bits; on a caller's rows, rows_dot
 * runs dot products. Spread over columns and threads by linear.c. */

/* ======================================================================== */
/* Decoding on panels: the GEMM tile's chain, streaming each panel once      */
/* ======================================================================== */

#if BC_SIMD == 512
#define RACC 16                     /* accumulators a decoding group keeps in flight */
#else
#define RACC 8
#endif
#define PF_AHEAD 1                  /* turns a run's first group prefetches ahead (prows_turns) */
#define PG_SUBS 4                   /* groups a run of panels is cut in, at most (prows_split) */

/* acc[i][t] = fma(x[i][k], w[k], acc[i][t]) for k = k0..k1-1 in turn, w read by vec */
BC_INLINE void prows_k(const wf_vec_fn vec, const int n, const int G, const bc_gemm *g,
                       const unsigned char *const *pan, size_t st, const wf_st d[RACC],
                       V acc[BC_ROWS_MAX][RACC], size_t k0, size_t k1)
{
    const size_t c = g->c;
    for (size_t k = k0; k < k1; k++) {
        V xv[BC_ROWS_MAX];
        BC_UNROLL
        for (int i = 0; i < n; i++)
            xv[i] = vset1(g->x[(size_t)i * c + k]);
        BC_UNROLL
        for (int t = 0; t < G * VPP; t++) {
            const V wv = vec(pan[t / VPP], st, k, (size_t)(t % VPP) * VL, d[t]);
            BC_UNROLL
            for (int i = 0; i < n; i++)
                acc[i][t] = vfma(xv[i], wv, acc[i][t]);
        }
    }
}

/* Rows k0..k1-1 (within one group of sg rows) of G panels for n rows: their
 * state, then the chains (prows_k); a format split in halves (sh < sg) reads
 * each half with its reader. */
BC_INLINE void prows_turn(const size_t sg, const size_t sh, const wf_state_fn state,
                          const wf_vec_fn vec, const wf_vec_fn vec_hi, const int n, const int G,
                          const bc_gemm *g, const unsigned char *const *pan, size_t st,
                          V acc[BC_ROWS_MAX][RACC], size_t k0, size_t k1)
{
    wf_st d[RACC];
    BC_UNROLL
    for (int t = 0; t < G * VPP; t++)
        d[t] = state(pan[t / VPP], st, k0, (size_t)(t % VPP) * VL);
    if (sh < sg) {  /* a constant: the split formats only */
        const size_t kh = min_sz(k0 + sh, k1);
        prows_k(vec, n, G, g, pan, st, d, acc, k0, kh);
        BC_UNROLL
        for (int t = 0; t < G * VPP; t++)  /* the second half's state */
            d[t] = state(pan[t / VPP], st, kh, (size_t)(t % VPP) * VL);
        prows_k(vec_hi, n, G, g, pan, st, d, acc, kh, k1);
    } else {
        prows_k(vec, n, G, g, pan, st, d, acc, k0, k1);
    }
}

/* pan[0..count-1] <- the panels p0.. (past np: the last again) of g's matrix,
 * and the bytes their blocks lie apart. A format of panels apart gives bs,
 * its block's bytes (a constant); a format of runs 0, and the panels lie
 * in one run or two whole ones (bc_format_run_take). */
BC_INLINE size_t prows_panels(const unsigned char **pan, const int count, const size_t bs,
                              const bc_gemm *g, const bc_format *f, size_t p0, size_t np)
{
    const unsigned char *w = g->w;
    if (bs) {
        const size_t pb = bc_format_panel_bytes(f, g->c);
        BC_UNROLL
        for (int q = 0; q < count; q++)
            pan[q] = w + (p0 + min_sz((size_t)q, np - 1)) * pb;
        return bs;
    }
    const size_t panels = (g->oc + PW - 1) / PW, bb = f->block_bytes * PW;
    const bc_panel_at a0 = bc_format_panel_at(f, g->c, panels, p0);
    const size_t run = a0.stride / bb;
    const bc_panel_at a1 = np > run ? bc_format_panel_at(f, g->c, panels, p0 + run) : a0;
    BC_UNROLL
    for (int q = 0; q < count; q++) {
        const size_t qq = min_sz((size_t)q, np - 1);
        pan[q] = w + (qq < run ? a0.origin + qq * bb : a1.origin + (qq - run) * bb);
    }
    return a0.stride;
}

/* Output vector o (columns o.., row i) after the K block from pc: its sum so
 * far v, or r (when there is one) for the first block, plus acc. */
BC_INLINE V prows_add(const bc_gemm *g, size_t pc, int i, size_t o, V v, V acc)
{
    if (pc)
        return vadd(v, acc);
    if (g->r && o < g->oc)
        return vadd(vloadn(g->r + (size_t)i * g->oc + o, min_sz(VL, g->oc - o)), acc);
    return acc;
}

/* y's output vector o of row i (o < oc) <- v + b, act (finish). */
BC_INLINE void prows_store(const bc_gemm *g, int i, size_t o, V v)
{
    const size_t nv = min_sz(VL, g->oc - o);
    const V bias = g->b ? vloadn(g->b + o, nv) : vzero();
    vstore_n(g->y + (size_t)i * g->oc + o, finish(v, g->b ? &bias : NULL, g->act), nv);
}

/* Panels p0..p0+np-1 (np <= G; one run, or whole runs, of a format that
 * interleaves its panels: bc_format_run_take) of the n <= BC_ROWS_MAX rows of
 * x; panels past np repeat the last one (computed, not stored). Each lane:
 * acc = fma(x[k], w[k], acc) over each BC_KC block of k from 0; y = r + acc
 * (the first block, or acc without r), y + acc (later blocks); then the
 * epilogue (+ b, act). The weights are read with the format's state and vec
 * every sg rows (prows_turn; fast_linear.h: the GEMM's copy reads them so
 * too). */
BC_INLINE void prows_group(const size_t bs, const size_t sg, const size_t sh,
                           const wf_state_fn state, const wf_vec_fn vec, const wf_vec_fn vec_hi,
                           const int n, const int G, const bc_gemm *g, const bc_format *f,
                           size_t p0, size_t np)
{
    const unsigned char *pan[RACC];
    const size_t st = prows_panels(pan, G, bs, g, f, p0, np);
    V v[BC_ROWS_MAX][RACC];
    for (size_t pc = 0; pc < g->c; pc += BC_KC) {
        const size_t kc = min_sz(BC_KC, g->c - pc);
        V acc[BC_ROWS_MAX][RACC];
        BC_UNROLL
        for (int i = 0; i < n; i++)
            BC_UNROLL
            for (int t = 0; t < G * VPP; t++)
                acc[i][t] = vzero();
        for (size_t k0 = pc; k0 < pc + kc; k0 += sg)
            prows_turn(sg, sh, state, vec, vec_hi, n, G, g, pan, st, acc, k0,
                       min_sz(k0 + sg, pc + kc));
        BC_UNROLL
        for (int i = 0; i < n; i++)
            BC_UNROLL
            for (int t = 0; t < G * VPP; t++)
                v[i][t] = prows_add(g, pc, i, p0 * PW + (size_t)t * VL, v[i][t], acc[i][t]);
    }
    for (int i = 0; i < n; i++)
        for (int t = 0; t < G * VPP; t++) {
            const size_t o = p0 * PW + (size_t)t * VL;
            if ((size_t)t / VPP < np && o < g->oc)
                prows_store(g, i, o, v[i][t]);
        }
}

/* A whole run of a format of runs (p0.., S * G panels) as prows_group's, in
 * S groups of G taking turns every sg rows k, so that what the first reads
 * from memory the others find in L1 (PF_AHEAD: the first prefetches the
 * turns after the next). Each group's accumulators wait in held between
 * turns, in a loop the compiler does not unroll: held as vectors, or the
 * turns unrolled, it kept every group's in registers and spilled them in the
 * loops over k, at half the speed. */
BC_INLINE void prows_turns(const size_t sg, const size_t sh, const wf_state_fn state,
                           const wf_vec_fn vec, const wf_vec_fn vec_hi, const int n, const int G,
                           const int S, const bc_gemm *g, const bc_format *f, size_t p0)
{
    const unsigned char *pan[PG_SUBS * RACC];
    const size_t st = prows_panels(pan, S * G, 0, g, f, p0, (size_t)(S * G));
    float held[PG_SUBS][BC_ROWS_MAX][RACC][VL];
    V v[PG_SUBS][BC_ROWS_MAX][RACC];
    for (size_t pc = 0; pc < g->c; pc += BC_KC) {
        const size_t kc = min_sz(BC_KC, g->c - pc);
        for (int s = 0; s < S; s++)
            for (int i = 0; i < n; i++)
                for (int t = 0; t < G * VPP; t++)
                    vstore(held[s][i][t], vzero());
        for (size_t k0 = pc; k0 < pc + kc; k0 += sg) {
            if (k0 + PF_AHEAD * sg < g->c)
                for (size_t b = 0; b < sg * st; b += 64)
                    __builtin_prefetch(pan[0] + (k0 + PF_AHEAD * sg) * st + b);
            for (int s = 0; s < S; s++) {
                V acc[BC_ROWS_MAX][RACC];
                BC_UNROLL
                for (int i = 0; i < n; i++)
                    BC_UNROLL
                    for (int t = 0; t < G * VPP; t++)
                        acc[i][t] = vload(held[s][i][t]);
                prows_turn(sg, sh, state, vec, vec_hi, n, G, g, pan + s * G, st, acc, k0,
                           min_sz(k0 + sg, pc + kc));
                BC_UNROLL
                for (int i = 0; i < n; i++)
                    BC_UNROLL
                    for (int t = 0; t < G * VPP; t++)
                        vstore(held[s][i][t], acc[i][t]);
            }
        }
        BC_UNROLL
        for (int s = 0; s < S; s++)
            BC_UNROLL
            for (int i = 0; i < n; i++)
                BC_UNROLL
                for (int t = 0; t < G * VPP; t++)
                    v[s][i][t] = prows_add(g, pc, i, (p0 + (size_t)(s * G)) * PW + (size_t)t * VL,
                                           v[s][i][t], vload(held[s][i][t]));
    }
    for (int s = 0; s < S; s++)
        for (int i = 0; i < n; i++)
            for (int t = 0; t < G * VPP; t++) {
                const size_t o = (p0 + (size_t)(s * G)) * PW + (size_t)t * VL;
                if (o < g->oc)
                    prows_store(g, i, o, v[s][i][t]);
            }
}

/* Panels in flight for n rows: RACC accumulators in all, and at most gmax
 * panels. The formats read at the memory's speed (float32, bfloat16, float16:
 * one load, at most a conversion, and an FMA per weight) stream PG_STREAM
 * panels at a time, since a core's prefetchers keep a few streams ahead and
 * not 16: on an Intel Xeon (family 6 model 167, KVM) the AVX-512 bfloat16
 * decoder read matrices streamed from memory (288 MB) at 12-14.5 GB/s with
 * 16 panels in flight and at 13.5-15.4 with 4, as AVX2 does with its 4 (whose
 * 8 accumulators already make 4 panels). 4 chains of FMAs on AVX-512 still
 * consume 64 bytes a cycle, past any memory's speed. The formats that convert
 * more (q8_0 and the 4-bit ones) are bound by their arithmetic and keep RACC
 * chains: 4 panels made q8_0 14% slower. The formats of two bytes a weight
 * (bfloat16, float16) stream PG_STREAM2 panels, twice as many, so that a step
 * of k reads as many bytes as float32's (256 on AVX-512; AVX2's 8 accumulators
 * keep it at 4): on an AMD Zen 5 (family 26 model 2) a SmolLM2 step's products
 * on one row took 0.90 (bfloat16) and 0.91 (float16) of the time they took on
 * 4 panels, 0.92-0.96 on 2-3 rows and 2 threads, where float32 on 8 panels
 * took 1.05-1.13 (benches/ab_products.py; docs/results/panels.md). 16 panels: slower
 * again (1.2 of 8's). */
#define PG_STREAM 4
#define PG_STREAM2 8
#define PG_ALL(n) (RACC / ((n) * VPP) > 0 ? RACC / ((n) * VPP) : 1)
#define PG(n) (PG_ALL(n) < gmax ? PG_ALL(n) : gmax)

/* One group of panels from p for N rows: PG(N) of them while that many are
 * left, then the largest of 8, 4, 2, 1 (below PG(N)) that fits, so that no
 * group computes panels past the matrix (a thread's share, a matrix's last
 * panels). Each lane's chain does not depend on the group, so neither do the
 * bits. */
#define PROWS_STEP(N)                                                                      \
    do {                                                                                   \
        if (left >= (size_t)PG(N)) {                                                       \
            prows_group(bs, sg, sh, state, vec, vec_hi, N, PG(N), g, f, p, PG(N));         \
            p += PG(N);                                                                    \
        } else if (PG(N) > 8 && left >= 8) {                                               \
            prows_group(bs, sg, sh, state, vec, vec_hi, N, 8, g, f, p, 8);                 \
            p += 8;                                                                        \
        } else if (PG(N) > 4 && left >= 4) {                                               \
            prows_group(bs, sg, sh, state, vec, vec_hi, N, 4, g, f, p, 4);                 \
            p += 4;                                                                        \
        } else if (PG(N) > 2 && left >= 2) {                                               \
            prows_group(bs, sg, sh, state, vec, vec_hi, N, 2, g, f, p, 2);                 \
            p += 2;                                                                        \
        } else {                                                                           \
            prows_group(bs, sg, sh, state, vec, vec_hi, N, 1, g, f, p, 1);                 \
            p += 1;                                                                        \
        }                                                                                  \
    } while (0)

/* STEP(1), STEP(2) or STEP(3) by g's rows (a constant N for each kernel). */
#define PROWS_BY_ROWS(STEP)                                                                \
    do {                                                                                   \
        switch (g->n) {                                                                    \
        case 1:                                                                            \
            STEP(1);                                                                       \
            break;                                                                         \
        case 2:                                                                            \
            STEP(2);                                                                       \
            break;                                                                         \
        default:                                                                           \
            STEP(3);                                                                       \
            break;                                                                         \
        }                                                                                  \
    } while (0)

/* Panels [p, end) of g's rows in groups of at most gmax panels (PROWS_STEP). */
BC_INLINE void prows_span(const size_t bs, const int gmax, const size_t sg, const size_t sh,
                          const wf_state_fn state, const wf_vec_fn vec, const wf_vec_fn vec_hi,
                          const bc_gemm *g, const bc_format *f, size_t p, size_t end)
{
    while (p < end) {
        const size_t left = end - p;
        PROWS_BY_ROWS(PROWS_STEP);
    }
}

/* A whole run (grp panels, from p) of g's N rows as grp / PGR(N) groups of
 * PGR(N) panels taking turns (prows_turns). AVX2's 3 rows take 2 panels a
 * group, 12 accumulators of its 16 registers, where its decoding's groups
 * keep 8 (RACC): with groups of 1 the turns read a run at 0.7 of the speed
 * of panels apart, with 2 at the same speed. */
#define PGR(N) ((N) == 3 && VPP == 2 ? 2 : PG(N))
#define PROWS_RUN(N)                                                                       \
    do {                                                                                   \
        if (grp / (size_t)PGR(N) == 2)                                                     \
            prows_turns(sg, sh, state, vec, vec_hi, N, PGR(N), 2, g, f, p);                \
        else                                                                               \
            prows_turns(sg, sh, state, vec, vec_hi, N, PGR(N), PG_SUBS, g, f, p);          \
    } while (0)

/* Columns [o0, o1) of every row (o0 a multiple of PW; of a run, for a format
 * that interleaves its panels in runs, as linear.c's shares are) of a packed
 * matrix of dtype (its block's bytes bs; 0: a format of runs), in groups of
 * at most gmax panels (PROWS_STEP), read as prows_group says. A format of
 * runs walks them whole, or what is left of one (bc_format_run_take), so
 * that no group spans a run's end; where a run is more panels than the rows'
 * group (AVX2's 2 and 3 rows), the run's groups take turns (prows_turns):
 * groups walking a run one after another read a quarter or a half of each
 * 128 bytes and ran a bfloat16 decode step's products at 1.1-1.8 times the
 * time of panels apart (AVX2, an AMD Zen 5, benches/ab_products.py). No
 * lane's chain changes. */
BC_INLINE void prows_split(const int dtype, const size_t bs, const int gmax, const size_t sg,
                           const size_t sh,
                           const wf_state_fn state, const wf_vec_fn vec, const wf_vec_fn vec_hi,
                           const bc_gemm *g, size_t o0, size_t o1)
{
    const bc_format *f = bc_format_of(dtype);
    const size_t p1 = (o1 + PW - 1) / PW, panels = (g->oc + PW - 1) / PW;
    /* the group of the formats of runs decoded here (bfloat16, float16) as a constant, so
     * that AVX-512, whose groups of panels cover a run, compiles no turns */
    const size_t grp = BC_HALF_GROUP;
    if (bs) {  /* panels apart (a constant: no walk over runs compiled) */
        prows_span(bs, gmax, sg, sh, state, vec, vec_hi, g, f, o0 / PW, p1);
        return;
    }
    const size_t pgn = g->n == 1 ? (size_t)PGR(1) : g->n == 2 ? (size_t)PGR(2) : (size_t)PGR(3);
    const int cut = pgn < grp && grp % pgn == 0 && grp / pgn <= PG_SUBS;
    const size_t per = cut ? grp : (pgn >= grp ? pgn / grp * grp : grp);
    for (size_t p = o0 / PW; p < p1;) {
        const size_t end = p + bc_format_run_take(grp, panels, p, p1, per);
        if (!cut || end - p < grp) {
            prows_span(bs, gmax, sg, sh, state, vec, vec_hi, g, f, p, end);
        } else {
            PROWS_BY_ROWS(PROWS_RUN);
        }
        p = end;
    }
}

#undef PROWS_STEP
#undef PROWS_RUN
#undef PROWS_BY_ROWS
#undef PGR
#undef PG
#undef PG_ALL

/* prows_split with one reader for every k */
BC_INLINE void prows_part(const int dtype, const size_t bs, const int gmax, const size_t sg,
                          const wf_state_fn state, const wf_vec_fn vec, const bc_gemm *g,
                          size_t o0, size_t o1)
{
    prows_split(dtype, bs, gmax, sg, sg, state, vec, vec, g, o0, o1);
}

/* ======================================================================== */
/* Decoding on a caller's rows: dot products                                 */
/* ======================================================================== */

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
// y (N,OC), x (N,C), w (OC,C) a caller's float32 rows, b (OC), r (N,OC); N <= BC_ROWS_MAX
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
            if (g->r)
                v = vadd(vloadn(g->r + (size_t)i * g->oc + o, nv), v);
            const V bias = g->b ? vloadn(g->b + o, nv) : vzero();
            vstore_n(g->y + (size_t)i * g->oc + o, finish(v, g->b ? &bias : NULL, g->act), nv);
        }
    }
}
