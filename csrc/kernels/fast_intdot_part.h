/* fast_intdot_part.h: q8_0i's and q4_0i's tiles and their walk over a product
 * (part of fast_intdot.h, which includes it once per way of forming the
 * integer sums: Q8I_FN names the copy, Q8I_TARGET its instruction-set
 * attribute, Q8I_DP on AVX2 selects AVX-VNNI's vpdpbusd over pmaddubsw). Every
 * copy computes every output by the same chain: the sums are exact integers
 * whichever forms them. q4 (a constant) says which weights: q8_0i's bytes
 * (q + 128) or q4_0i's nibbles (q + 8, two a byte). */

/* Rows i0..i0+mr-1 of y (their quantised x at x0, rb bytes apart) by NP panels
 * from panel p (np <= NP of them real; the rest repeat the last: computed, not
 * stored), over nb blocks. */
#if BC_SIMD == 256
/* acc + each 32-bit lane's sum of 4 products of unsigned bytes w by signed bytes x:
 * AVX-VNNI's vpdpbusd, or pmaddubsw then pmaddwd (q4_0i's w are nibbles: pairs at
 * most 2 * 15 * 128, no saturation) */
BC_INLINE Q8I_TARGET IV Q8I_FN(dot4_256)(IV acc, IV w, IV x)
{
#if Q8I_DP
    return _mm256_dpbusd_avx_epi32(acc, w, x);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x),
                                                   _mm256_set1_epi16(1)));
#endif
}
#endif

#if BC_SIMD == 512 || BC_SIMD == 256
BC_INLINE Q8I_TARGET void Q8I_FN(q8i_tile)(const int q4, const int mr, const int NP,
                                   const bc_gemm *g, const unsigned char *x0, size_t rb,
                                   size_t i0, size_t p, size_t np, size_t nb)
{
    const size_t pb = nb * (q4 ? sizeof(bc_q4i_block) : sizeof(bc_q8i_block)), oc = g->oc;
    const bc_q8i_block *pan[QD1 > QN ? QD1 : QN];
    const bc_q4i_block *pan4[QD1 > QN ? QD1 : QN];
    BC_UNROLL
    for (int q = 0; q < NP; q++) {
        const unsigned char *at = (const unsigned char *)g->w
                                  + (p + ((size_t)q < np ? (size_t)q : np - 1)) * pb;
        pan[q] = (const bc_q8i_block *)at;
        pan4[q] = (const bc_q4i_block *)at;
    }
    const int8_t *xr[QR];
    const float *xd[QR];
    const int32_t *xs[QR];  /* the corrections of the +128 bytes (VNNI only) */
    BC_UNROLL
    for (int i = 0; i < mr; i++) {
        xr[i] = (const int8_t *)(x0 + (size_t)i * rb);
        xd[i] = (const float *)(x0 + (size_t)i * rb + nb * 32);
        xs[i] = (const int32_t *)(x0 + (size_t)i * rb + nb * 36);
    }
    V f[QR][QP * VPP];
    BC_UNROLL
    for (int i = 0; i < mr; i++)
        BC_UNROLL
        for (int t = 0; t < NP * VPP; t++)
            f[i][t] = vzero();
    for (size_t b = 0; b < nb; b++) {
        IV acc[QR][QP * VPP];
#if BC_SIMD == 512
        BC_UNROLL
        for (int i = 0; i < mr; i++)
            BC_UNROLL
            for (int t = 0; t < NP; t++)  /* -128 (q8_0i) or -8 (q4_0i) sum q_x */
                acc[i][t] = _mm512_set1_epi32(q4 ? xs[i][b] / 16 : xs[i][b]);
        if (q4) {  /* a vector of bytes: its low nibbles weights 4j.., its high 4j + 16.. */
            const IV low = _mm512_set1_epi32(0x0F0F0F0F);  /* (AVX-512F: no byte ops needed) */
            BC_UNROLL
            for (int j = 0; j < 4; j++) {
                IV wl[QD1 > QN ? QD1 : QN], wh[QD1 > QN ? QD1 : QN];
                BC_UNROLL
                for (int q = 0; q < NP; q++) {
                    const IV raw = _mm512_loadu_si512((const void *)pan4[q][b].u[j]);
                    wl[q] = _mm512_and_si512(raw, low);
                    wh[q] = _mm512_and_si512(_mm512_srli_epi32(raw, 4), low);
                }
                BC_UNROLL
                for (int i = 0; i < mr; i++) {
                    const IV xl = _mm512_set1_epi32(ld32(xr[i] + b * 32 + (size_t)j * 4));
                    const IV xh = _mm512_set1_epi32(ld32(xr[i] + b * 32 + 16 + (size_t)j * 4));
                    BC_UNROLL
                    for (int q = 0; q < NP; q++) {
                        acc[i][q] = _mm512_dpbusd_epi32(acc[i][q], wl[q], xl);
                        acc[i][q] = _mm512_dpbusd_epi32(acc[i][q], wh[q], xh);
                    }
                }
            }
        } else {
            BC_UNROLL
            for (int j = 0; j < 8; j++) {
                IV w[QD1 > QN ? QD1 : QN];
                BC_UNROLL
                for (int q = 0; q < NP; q++)
                    w[q] = _mm512_loadu_si512((const void *)pan[q][b].u[j]);
                BC_UNROLL
                for (int i = 0; i < mr; i++) {
                    const IV xb = _mm512_set1_epi32(ld32(xr[i] + b * 32 + (size_t)j * 4));
                    BC_UNROLL
                    for (int q = 0; q < NP; q++)
                        acc[i][q] = _mm512_dpbusd_epi32(acc[i][q], w[q], xb);
                }
            }
        }
#else  /* AVX2: AVX-VNNI's vpdpbusd on 256 bits (Q8I_DP), or pmaddubsw */
        BC_UNROLL
        for (int i = 0; i < mr; i++)  /* the corrections of unsigned weights: -8 (q4_0i) */
            BC_UNROLL                 /* or -128 (q8_0i with vpdpbusd) times sum q_x */
            for (int t = 0; t < NP * VPP; t++)
                acc[i][t] = q4 ? _mm256_set1_epi32(xs[i][b] / 16)
                            : Q8I_DP ? _mm256_set1_epi32(xs[i][b]) : _mm256_setzero_si256();
        if (q4) {
            const IV low = _mm256_set1_epi8(15);
            BC_UNROLL
            for (int j = 0; j < 4; j++) {
                IV wl[QP * VPP], wh[QP * VPP];
                BC_UNROLL
                for (int t = 0; t < NP * VPP; t++) {
                    const IV raw = _mm256_loadu_si256(
                        (const __m256i *)pan4[t / VPP][b].u[j][(t % VPP) * VL]);
                    wl[t] = _mm256_and_si256(raw, low);
                    wh[t] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
                }
                BC_UNROLL
                for (int i = 0; i < mr; i++) {
                    const IV xl = _mm256_set1_epi32(ld32(xr[i] + b * 32 + (size_t)j * 4));
                    const IV xh = _mm256_set1_epi32(ld32(xr[i] + b * 32 + 16 + (size_t)j * 4));
                    BC_UNROLL
                    for (int t = 0; t < NP * VPP; t++)
                        acc[i][t] = Q8I_FN(dot4_256)(Q8I_FN(dot4_256)(acc[i][t], wl[t], xl), wh[t], xh);
                }
            }
        } else {
#if Q8I_DP
            BC_UNROLL
            for (int j = 0; j < 8; j++) {
                IV w[QP * VPP];
                BC_UNROLL
                for (int t = 0; t < NP * VPP; t++)
                    w[t] = _mm256_loadu_si256((const __m256i *)pan[t / VPP][b].u[j][(t % VPP) * VL]);
                BC_UNROLL
                for (int i = 0; i < mr; i++) {
                    const IV xb = _mm256_set1_epi32(ld32(xr[i] + b * 32 + (size_t)j * 4));
                    BC_UNROLL
                    for (int t = 0; t < NP * VPP; t++)
                        acc[i][t] = _mm256_dpbusd_avx_epi32(acc[i][t], w[t], xb);
                }
            }
#else
            const IV flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
            BC_UNROLL
            for (int j = 0; j < 8; j++) {
                IV ws[QP * VPP], aw[QP * VPP];
                BC_UNROLL
                for (int t = 0; t < NP * VPP; t++) {
                    ws[t] = _mm256_xor_si256(
                        _mm256_loadu_si256((const __m256i *)pan[t / VPP][b].u[j][(t % VPP) * VL]), flip);
                    aw[t] = _mm256_abs_epi8(ws[t]);
                }
                BC_UNROLL
                for (int i = 0; i < mr; i++) {
                    const IV xb = _mm256_set1_epi32(ld32(xr[i] + b * 32 + (size_t)j * 4));
                    BC_UNROLL
                    for (int t = 0; t < NP * VPP; t++)
                        acc[i][t] = _mm256_add_epi32(acc[i][t], _mm256_madd_epi16(
                            _mm256_maddubs_epi16(aw[t], _mm256_sign_epi8(xb, ws[t])), ones));
                }
            }
#endif
        }
#endif
        BC_UNROLL
        for (int t = 0; t < NP * VPP; t++) {
            const V dw = vload_half((q4 ? pan4[t / VPP][b].d : pan[t / VPP][b].d) + (t % VPP) * VL);
            BC_UNROLL
            for (int i = 0; i < mr; i++) {
#if BC_SIMD == 512
                const V fs = _mm512_cvtepi32_ps(acc[i][t]);
#else
                const V fs = _mm256_cvtepi32_ps(acc[i][t]);
#endif
                f[i][t] = vfma(fs, vmul(dw, vset1(xd[i][b])), f[i][t]);
            }
        }
    }
    for (int i = 0; i < mr; i++)
        for (int t = 0; t < NP * VPP; t++) {
            const size_t o = (p + (size_t)(t / VPP)) * PW + (size_t)(t % VPP) * VL;
            if ((size_t)(t / VPP) >= np || o >= oc)
                continue;
            const size_t nv = min_sz(VL, oc - o), row = i0 + (size_t)i;
            V v = f[i][t];
            if (g->r)
                v = vadd(vloadn(g->r + row * oc + o, nv), v);
            const V bias = g->b ? vloadn(g->b + o, nv) : vzero();
            vstore_n(g->y + row * oc + o, finish(v, g->b ? &bias : NULL, g->act), nv);
        }
}
#else
/* portable C: one product at a time, the chain with fmaf */
BC_INLINE void Q8I_FN(q8i_tile)(const int q4, const int mr, const int NP, const bc_gemm *g,
                        const unsigned char *x0, size_t rb, size_t i0, size_t p, size_t np,
                        size_t nb)
{
    const size_t pb = nb * (q4 ? sizeof(bc_q4i_block) : sizeof(bc_q8i_block)), oc = g->oc;
    (void)NP;
    for (int i = 0; i < mr; i++) {
        const int8_t *xr = (const int8_t *)(x0 + (size_t)i * rb);
        const float *xd = (const float *)(x0 + (size_t)i * rb + nb * 32);
        const size_t row = i0 + (size_t)i;
        for (size_t q = 0; q < np; q++) {
            const unsigned char *at = (const unsigned char *)g->w + (p + q) * pb;
            const bc_q8i_block *pan = (const bc_q8i_block *)at;
            const bc_q4i_block *pan4 = (const bc_q4i_block *)at;
            float f[PW];
            for (size_t l = 0; l < PW; l++) {
                float acc = 0.0f;
                for (size_t b = 0; b < nb; b++) {
                    int32_t isum = 0;
                    for (size_t k = 0; k < 32; k++) {
                        int32_t w;
                        if (q4) {
                            const int byte = pan4[b].u[k % 16 / 4][l][k % 4];
                            w = (k < 16 ? byte & 15 : byte >> 4) - 8;
                        } else {
                            w = (int32_t)pan[b].u[k / 4][l][k % 4] - 128;
                        }
                        isum += w * xr[b * 32 + k];
                    }
                    const uint16_t dw = q4 ? pan4[b].d[l] : pan[b].d[l];
                    acc = fmaf((float)isum, bc_half_to_f32(dw) * xd[b], acc);
                }
                f[l] = acc;
            }
            for (size_t t = 0; t < VPP; t++) {
                const size_t o = (p + q) * PW + t * VL;
                if (o >= oc)
                    continue;
                const size_t nv = min_sz(VL, oc - o);
                V v = vload(f + t * VL);
                if (g->r)
                    v = vadd(vloadn(g->r + row * oc + o, nv), v);
                const V bias = g->b ? vloadn(g->b + o, nv) : vzero();
                vstore_n(g->y + row * oc + o, finish(v, g->b ? &bias : NULL, g->act), nv);
            }
        }
    }
}
#endif

/* q8i_tile with its row count (1..QM) a constant, NP panels (q4 a constant too) */
BC_INLINE Q8I_TARGET void Q8I_FN(q8i_tile_rows)(const int q4, int mr, const bc_gemm *g,
                                        const unsigned char *x0, size_t rb, size_t i0, size_t p,
                                        size_t np, size_t nb)
{
    switch (mr) {
    case 1: Q8I_FN(q8i_tile)(q4, 1, QN, g, x0, rb, i0, p, np, nb); break;
    case 2: Q8I_FN(q8i_tile)(q4, 2, QN, g, x0, rb, i0, p, np, nb); break;
#if QM >= 4
    case 3: Q8I_FN(q8i_tile)(q4, 3, QN, g, x0, rb, i0, p, np, nb); break;
    case 4: Q8I_FN(q8i_tile)(q4, 4, QN, g, x0, rb, i0, p, np, nb); break;
#endif
#if QM >= 6
    case 5: Q8I_FN(q8i_tile)(q4, 5, QN, g, x0, rb, i0, p, np, nb); break;
    case 6: Q8I_FN(q8i_tile)(q4, 6, QN, g, x0, rb, i0, p, np, nb); break;
#endif
    default: break;
    }
}

/* The GEMM's tile, one copy for q8_0i and one for q4_0i (kept out of line) */
static Q8I_TARGET void Q8I_FN(q8i_tile_gemm)(int q4, int mr, const bc_gemm *g, const unsigned char *x0,
                                     size_t rb, size_t i0, size_t p, size_t np, size_t nb)
{
    if (q4)
        Q8I_FN(q8i_tile_rows)(1, mr, g, x0, rb, i0, p, np, nb);
    else
        Q8I_FN(q8i_tile_rows)(0, mr, g, x0, rb, i0, p, np, nb);
}

/* Decoding: n <= BC_ROWS_MAX rows, panels p0.. in groups of QD1 (one row) or QD. */
BC_INLINE Q8I_TARGET void Q8I_FN(q8i_decode)(const int q4, const bc_gemm *g, const unsigned char *xq,
                                     size_t rb, size_t n0, size_t n, size_t p0, size_t p1,
                                     size_t nb)
{
    for (size_t p = p0; p < p1;) {
        const size_t left = p1 - p;
        switch (n) {
        case 1: Q8I_FN(q8i_tile)(q4, 1, QD1, g, xq, rb, n0, p, min_sz(QD1, left), nb); p += QD1; break;
        case 2: Q8I_FN(q8i_tile)(q4, 2, QD, g, xq, rb, n0, p, min_sz(QD, left), nb); p += QD; break;
        default: Q8I_FN(q8i_tile)(q4, 3, QD, g, xq, rb, n0, p, min_sz(QD, left), nb); p += QD; break;
        }
    }
}

// y (N,OC) rows [n0,n1), columns [o0,o1); xq rows n0.. quantised; w (OC,C) q8_0i (q4: q4_0i) panels
static Q8I_TARGET void Q8I_FN(q8i_part)(int q4, const bc_gemm *g, const unsigned char *xq, size_t n0,
                                size_t n1, size_t o0, size_t o1)
{
    const size_t nb = (g->c + 31) / 32, rb = bc_xq_row_bytes(BC_DTYPE_Q8_0I, g->c);
    const size_t p0 = o0 / PW, p1 = (o1 + PW - 1) / PW, n = n1 - n0;
    if (n <= BC_ROWS_MAX) {
        if (q4)
            Q8I_FN(q8i_decode)(1, g, xq, rb, n0, n, p0, p1, nb);
        else
            Q8I_FN(q8i_decode)(0, g, xq, rb, n0, n, p0, p1, nb);
        return;
    }
    for (size_t pc = p0; pc < p1; pc += QB) {
        const size_t pe = min_sz(pc + QB, p1);
        for (size_t i = n0; i < n1; i += QM) {
            const int mr = (int)min_sz(QM, n1 - i);
            for (size_t p = pc; p < pe; p += QN)
                Q8I_FN(q8i_tile_gemm)(q4, mr, g, xq + (i - n0) * rb, rb, i, p, min_sz(QN, pe - p), nb);
        }
    }
}
