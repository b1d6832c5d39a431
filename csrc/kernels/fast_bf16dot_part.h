/* fast_bf16dot_part.h: bfloat16i's tiles and their walk over a product (part
 * of fast_bf16dot.h, which includes it once per way of running the chain:
 * BF_FN names the copy, BF_TARGET its instruction-set attribute, BF_DP
 * selects vdpbf16ps (AVX-512 with AVX512_BF16) over FMAs on the converted
 * halves in FTZ/DAZ mode; BF_D1, BF_D, BF_M, BF_N the tiles; all undefined at
 * the end, ready for the next copy). Every copy computes every output by the
 * same chain. */

/* The raw chains of rows x0.. (mr of them, rb bytes apart) by NP panels, the
 * first's pairs at at.origin + j * at.stride of w (at: its
 * bc_format_panel_at), the next ones' a pair further, and past its run, in
 * the runs after it (np <= NP real; the rest repeat the last: computed, not
 * stored; panels beyond the first run only in whole runs, which share the
 * stride), over npair pairs of columns, into acc (mr rows of NP * PW floats). */
BC_INLINE BF_TARGET void BF_FN(bf16i_chains)(const int mr, const int NP, const bc_gemm *g,
                                             const unsigned char *x0, size_t rb,
                                             bc_panel_at at, size_t np, size_t npair,
                                             float *acc)
{
    const size_t st = at.stride, G = BC_BF16I_GROUP;
    const size_t rbytes = G * ((g->c + 1) / 2) * sizeof(bc_bf16i_pair);  /* a whole run */
    const unsigned char *pan[BF_D1 > BF_N ? BF_D1 : BF_N];
    BC_UNROLL
    for (int q = 0; q < NP; q++) {
        const size_t qq = (size_t)q < np ? (size_t)q : np - 1;
        pan[q] = (const unsigned char *)g->w + at.origin + qq / G * rbytes
                 + qq % G * sizeof(bc_bf16i_pair);
    }
    const uint16_t *xr[BF_M > BC_ROWS_MAX ? BF_M : BC_ROWS_MAX];
    BC_UNROLL
    for (int i = 0; i < mr; i++)
        xr[i] = (const uint16_t *)(x0 + (size_t)i * rb);
#if BF_DP
    __m512 a[BF_M > BC_ROWS_MAX ? BF_M : BC_ROWS_MAX][BF_D1 > BF_N ? BF_D1 : BF_N];
    BC_UNROLL
    for (int i = 0; i < mr; i++)
        BC_UNROLL
        for (int q = 0; q < NP; q++)
            a[i][q] = _mm512_setzero_ps();
    for (size_t j = 0; j < npair; j++) {
        __m512i w[BF_D1 > BF_N ? BF_D1 : BF_N];
        BC_UNROLL
        for (int q = 0; q < NP; q++)
            w[q] = _mm512_loadu_si512((const void *)(pan[q] + j * st));
        BC_UNROLL
        for (int i = 0; i < mr; i++) {
            uint32_t pair;
            memcpy(&pair, xr[i] + 2 * j, 4);
            const __m512i xb = _mm512_set1_epi32((int)pair);
            BC_UNROLL
            for (int q = 0; q < NP; q++)
                a[i][q] = _mm512_dpbf16_ps(a[i][q], (__m512bh)w[q], (__m512bh)xb);
        }
    }
    BC_UNROLL
    for (int i = 0; i < mr; i++)
        BC_UNROLL
        for (int q = 0; q < NP; q++)
            _mm512_storeu_ps(acc + (size_t)i * NP * PW + (size_t)q * PW, a[i][q]);
#else
    V a[BF_M > BC_ROWS_MAX ? BF_M : BC_ROWS_MAX][(BF_D1 > BF_N ? BF_D1 : BF_N) * VPP];
    BC_UNROLL
    for (int i = 0; i < mr; i++)
        BC_UNROLL
        for (int t = 0; t < NP * VPP; t++)
            a[i][t] = vzero();
    for (size_t j = 0; j < npair; j++) {
        V wo[(BF_D1 > BF_N ? BF_D1 : BF_N) * VPP], we[(BF_D1 > BF_N ? BF_D1 : BF_N) * VPP];
        BC_UNROLL
        for (int t = 0; t < NP * VPP; t++) {
            const BV raw = bv_load(((const bc_bf16i_pair *)(pan[t / VPP] + j * st))
                                       ->u[(t % VPP) * VL]);
            wo[t] = bv_hi(raw);  /* column 2j + 1 */
            we[t] = bv_lo(raw);  /* column 2j */
        }
        BC_UNROLL
        for (int i = 0; i < mr; i++) {
            const V xo = vset1(bc_bf16_to_f32(xr[i][2 * j + 1]));
            const V xe = vset1(bc_bf16_to_f32(xr[i][2 * j]));
            BC_UNROLL
            for (int t = 0; t < NP * VPP; t++)
                a[i][t] = vfma(we[t], xe, vfma(wo[t], xo, a[i][t]));
        }
    }
    BC_UNROLL
    for (int i = 0; i < mr; i++)
        BC_UNROLL
        for (int t = 0; t < NP * VPP; t++)
            vstore(acc + (size_t)i * NP * PW + (size_t)t * VL, a[i][t]);
#endif
}

/* bf16i_chains with its shape a constant (decoding: n rows by BF_D1 or BF_D
 * panels; the GEMM: 1..BF_M rows by BF_N panels), kept out of line: the FMA
 * copy sets FTZ and DAZ around it alone (the compiler moves no arithmetic
 * past the barriers, and none of the caller's into the mode) */
static __attribute__((noinline)) BF_TARGET void BF_FN(bf16i_raw)(int decode, int mr,
                                                                 const bc_gemm *g,
                                                                 const unsigned char *x0,
                                                                 size_t rb, bc_panel_at at,
                                                                 size_t np, size_t npair,
                                                                 float *acc)
{
#if !BF_DP
    const unsigned int csr = _mm_getcsr();
    _mm_setcsr(csr | BF_MXCSR_FTZ_DAZ);
    __asm__ volatile("" ::: "memory");
#endif
    if (decode) {
        switch (mr) {
        case 1: BF_FN(bf16i_chains)(1, BF_D1, g, x0, rb, at, np, npair, acc); break;
        case 2: BF_FN(bf16i_chains)(2, BF_D, g, x0, rb, at, np, npair, acc); break;
        default: BF_FN(bf16i_chains)(3, BF_D, g, x0, rb, at, np, npair, acc); break;
        }
    } else {
        switch (mr) {
        case 1: BF_FN(bf16i_chains)(1, BF_N, g, x0, rb, at, np, npair, acc); break;
        case 2: BF_FN(bf16i_chains)(2, BF_N, g, x0, rb, at, np, npair, acc); break;
#if BF_M >= 3
        case 3: BF_FN(bf16i_chains)(3, BF_N, g, x0, rb, at, np, npair, acc); break;
#endif
#if BF_M >= 6
        case 4: BF_FN(bf16i_chains)(4, BF_N, g, x0, rb, at, np, npair, acc); break;
        case 5: BF_FN(bf16i_chains)(5, BF_N, g, x0, rb, at, np, npair, acc); break;
        case 6: BF_FN(bf16i_chains)(6, BF_N, g, x0, rb, at, np, npair, acc); break;
#endif
        default: break;
        }
    }
#if !BF_DP
    __asm__ volatile("" ::: "memory");
    _mm_setcsr(csr);
#endif
}

// y (N,OC) rows [n0,n1), columns [o0,o1); xq rows n0.. rounded; w (OC,C) bfloat16i panels
static void BF_FN(bf16i_part)(const bc_gemm *g, const unsigned char *xq, size_t n0, size_t n1,
                              size_t o0, size_t o1)
{
    const size_t npair = (g->c + 1) / 2, rb = bc_xq_row_bytes(BC_DTYPE_BF16I, g->c);
    const size_t p0 = o0 / PW, p1 = (o1 + PW - 1) / PW, n = n1 - n0, panels = (g->oc + PW - 1) / PW;
    const bc_format *f = bc_format_of(BC_DTYPE_BF16I);
    float acc[(BF_M > BC_ROWS_MAX ? BF_M : BC_ROWS_MAX) * (BF_D1 > BF_N ? BF_D1 : BF_N) * PW];
    _Static_assert(BF_D1 % BC_BF16I_GROUP == 0 && BF_D % BC_BF16I_GROUP == 0,
                   "decoding takes whole runs of panels");
    if (n <= BC_ROWS_MAX) {
        /* per panels at once, whole runs side by side; else what is left of a run */
        const size_t per = n == 1 ? BF_D1 : BF_D;
        for (size_t p = p0; p < p1;) {
            const size_t np = bc_format_run_take(BC_BF16I_GROUP, panels, p, p1, per);
            BF_FN(bf16i_raw)(1, (int)n, g, xq, rb, bc_format_panel_at(f, g->c, panels, p), np,
                             npair, acc);
            bf16i_finish(g, acc, per * PW, (int)n, n0, p, np);
            p += np;
        }
        return;
    }
    for (size_t pc = p0; pc < p1; pc += 4 * BF_N) {  /* panels kept in L2 */
        const size_t pe = min_sz(pc + 4 * BF_N, p1);
        for (size_t i = n0; i < n1; i += BF_M) {
            const int mr = (int)min_sz(BF_M, n1 - i);
            for (size_t p = pc; p < pe;) {
                const size_t np = min_sz(min_sz(BF_N, pe - p),
                                         BC_BF16I_GROUP - p % BC_BF16I_GROUP);
                BF_FN(bf16i_raw)(0, mr, g, xq + (i - n0) * rb, rb,
                                 bc_format_panel_at(f, g->c, panels, p), np, npair, acc);
                bf16i_finish(g, acc, BF_N * PW, mr, i, p, np);
                p += np;
            }
        }
    }
}

#undef BF_DP
#undef BF_FN
#undef BF_TARGET
#undef BF_D1
#undef BF_D
#undef BF_M
#undef BF_N
