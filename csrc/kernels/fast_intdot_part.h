/* fast_intdot_part.h: the integer formats' tiles (q8_0i, q4_0i, q5_0i, q4_ki, q6_ki, q5_ki,
 * iq4_nli, iq4_xsi, q4_1i, q5_1i, q2_ki, q3_ki) and their walk over a product
 * (part of fast_intdot.h, which includes it once per way of forming the
 * integer sums: Q8I_FN names the copy, Q8I_TARGET its instruction-set
 * attribute, Q8I_DP on AVX2 selects AVX-VNNI's vpdpbusd over pmaddubsw). Every
 * copy computes every output by the same chain: the sums are exact integers
 * whichever forms them. fk (a constant, FK_*) says which weights: q8_0i's
 * bytes (q + 128), q4_0i's nibbles (q + 8, two a byte), q5_0i's (q + 16:
 * the nibbles and their fifth bits, 16 added where a bit is set), or the
 * super-blocks of q4_ki and q6_ki (their own block functions). */

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
#if BC_SIMD == 512
#define IV_DOT(acc, w, x) _mm512_dpbusd_epi32((acc), (w), (x))
#define IV_LOAD(p) _mm512_loadu_si512((const void *)(p))
#define IV_STORE(p, v) _mm512_storeu_si512((void *)(p), (v))
#define IV_SET1(v) _mm512_set1_epi32(v)
#define IV_AND(a, b) _mm512_and_si512((a), (b))
#define IV_SRL4(a) _mm512_srli_epi32((a), 4)
#define IV_FLOAT(a) _mm512_cvtepi32_ps(a)
#define IV_ADD(a, b) _mm512_add_epi32((a), (b))
#define IV_OR(a, b) _mm512_or_si512((a), (b))
#define IV_SLL(a, n) _mm512_slli_epi32((a), (n))
#define IV_SRL(a, n) _mm512_srli_epi32((a), (n))
#define IV_SRLN(a, n) _mm512_srl_epi32((a), _mm_cvtsi32_si128(n))  /* n not a constant */
#define IV_LUT(t, n) _mm512_shuffle_epi8((t), (n))  /* byte n (0..15) of t's 16-byte lane */
#define IV_TABLE(p) _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(p)))
/* w + 16 in the byte lanes whose bit of the 64-bit word at bits is set (vpaddb under a mask) */
#define IV_FIFTH(w, bits, h) q5i_fifth_512((w), (bits))
#else
#define IV_DOT(acc, w, x) Q8I_FN(dot4_256)((acc), (w), (x))
#define IV_LOAD(p) _mm256_loadu_si256((const __m256i *)(p))
#define IV_STORE(p, v) _mm256_storeu_si256((__m256i *)(p), (v))
#define IV_SET1(v) _mm256_set1_epi32(v)
#define IV_AND(a, b) _mm256_and_si256((a), (b))
#define IV_SRL4(a) _mm256_srli_epi32((a), 4)
#define IV_FLOAT(a) _mm256_cvtepi32_ps(a)
#define IV_ADD(a, b) _mm256_add_epi32((a), (b))
#define IV_OR(a, b) _mm256_or_si256((a), (b))
#define IV_SLL(a, n) _mm256_slli_epi32((a), (n))
#define IV_SRL(a, n) _mm256_srli_epi32((a), (n))
#define IV_SRLN(a, n) _mm256_srl_epi32((a), _mm_cvtsi32_si128(n))
#define IV_LUT(t, n) _mm256_shuffle_epi8((t), (n))
#define IV_TABLE(p) _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(p)))
/* the same for the 32 lanes of vector h (rows 8h..8h+7): bits 32h.. of the word */
#define IV_FIFTH(w, bits, h) q5i_fifth_256((w), (bits) + 4 * (h))
/* acc + the sums of 4 products of signed bytes w (|w| <= 127) by signed bytes x
 * (pmaddubsw's pairs at most 2 * 127 * 127: no saturation) */
#define IV_DOTS(acc, w, x) _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16( \
    _mm256_abs_epi8(w), _mm256_sign_epi8((x), (w))), _mm256_set1_epi16(1)))
#endif

/* Block b of NB panels, for rows 0..mr-1 of x: f[i * fs + k * VPP + h] (row i,
 * panel k's vector h) = fma((float)isum, d_w d_x, that), the integer sums
 * formed as this copy forms them. blk[k]: panel k's block b (bc_q8i_block,
 * bc_q4i_block or bc_q5i_block by fk). One panel (decoding) reads its block's bytes in
 * order, in two chains a panel when spl (vpdpbusd's latency); several (the
 * GEMM, its weights in L1/L2) share each broadcast of x. */
BC_INLINE Q8I_TARGET void Q8I_FN(q8i_block)(const int fk, const int mr, const int NB,
                                            const int spl, V *f, size_t fs,
                                            const unsigned char *const *blk,
                                            const int8_t *const *xr, const float *const *xd,
                                            const int32_t *const *xs, size_t b)
{
    IV acc[QR][QN * VPP], acc2[QR][QN * VPP];  /* acc2: the second chain (spl) */
    BC_UNROLL
    for (int i = 0; i < mr; i++)  /* the corrections of unsigned weights: -8 (q4_0i), -16 */
        BC_UNROLL                 /* (q5_0i) or -128 (q8_0i by vpdpbusd) times sum q_x */
        for (int t = 0; t < NB * VPP; t++) {
            acc[i][t] = IV_SET1(fk == FK_Q4 ? xs[i][b] / 16 : fk == FK_Q5 ? xs[i][b] / 8
                                : fk == FK_Q41 || fk == FK_Q51 ? 0  /* (unsigned: no correction) */
                                : Q8I_DP ? xs[i][b] : 0);  /* (iq4_nli as q8_0i) */
            acc2[i][t] = IV_SET1(0);
        }
#if !Q8I_DP
    if (fk == FK_IQ4NL) {  /* signed weights: pmaddubsw on |w|, x with w's sign (as q8_0i's),
                            * a vector of weights at a time, decoded once for the mr rows */
        const IV low = IV_SET1(0x0F0F0F0F);
        const IV kv = IV_TABLE((const uint8_t *)bc_kvalues_iq4nl);
        BC_UNROLL
        for (int j = 0; j < 4; j++)
            BC_UNROLL
            for (int t = 0; t < NB * VPP; t++) {
                const IV raw = IV_LOAD(((const bc_q4i_block *)blk[t / VPP])->u[j][t % VPP * VL]);
                const IV wl = IV_LUT(kv, IV_AND(raw, low));
                const IV wh = IV_LUT(kv, IV_AND(IV_SRL4(raw), low));
                BC_UNROLL
                for (int i = 0; i < mr; i++) {
                    acc[i][t] = IV_DOTS(acc[i][t], wl, IV_SET1(ld32(xr[i] + b * 32 + (size_t)j * 4)));
                    acc[i][t] = IV_DOTS(acc[i][t], wh,
                                        IV_SET1(ld32(xr[i] + b * 32 + 16 + (size_t)j * 4)));
                }
            }
    } else
#endif
    if (fk != FK_Q8) {  /* a vector of bytes: its low nibbles weights 4j.., its high 4j + 16.. */
        const IV low = IV_SET1(0x0F0F0F0F);
        /* iq4_nli by vpdpbusd: a nibble's value + 128 (unsigned bytes, s corrects
         * them as q8_0i's) */
        const IV kv = IV_TABLE(bc_kvalues_iq4nl_u8);
        BC_UNROLL
        for (int j = 0; j < 4; j++) {
            IV wl[QN * VPP], wh[QN * VPP];
            BC_UNROLL
            /* (q5_0i's, q4_1i's and q5_1i's nibbles lie where q4_0i's do, q5_1i's fifth
             * bits where q5_0i's) */
            for (int t = 0; t < NB * VPP; t++) {
                const IV raw = IV_LOAD(((const bc_q4i_block *)blk[t / VPP])->u[j][t % VPP * VL]);
                wl[t] = IV_AND(raw, low);
                wh[t] = IV_AND(IV_SRL4(raw), low);
                if (fk == FK_Q5 || fk == FK_Q51) {
                    const unsigned char *h =
                        (const unsigned char *)((const bc_q5i_block *)blk[t / VPP])->h[j];
                    wl[t] = IV_FIFTH(wl[t], h, t % VPP);
                    wh[t] = IV_FIFTH(wh[t], h + 8, t % VPP);
                }
                if (fk == FK_IQ4NL) {
                    wl[t] = IV_LUT(kv, wl[t]);
                    wh[t] = IV_LUT(kv, wh[t]);
                }
            }
            BC_UNROLL
            for (int i = 0; i < mr; i++) {
                const IV xl = IV_SET1(ld32(xr[i] + b * 32 + (size_t)j * 4));
                const IV xh = IV_SET1(ld32(xr[i] + b * 32 + 16 + (size_t)j * 4));
                BC_UNROLL
                for (int t = 0; t < NB * VPP; t++) {
                    acc[i][t] = IV_DOT(acc[i][t], wl[t], xl);
                    if (spl)
                        acc2[i][t] = IV_DOT(acc2[i][t], wh[t], xh);
                    else
                        acc[i][t] = IV_DOT(acc[i][t], wh[t], xh);
                }
            }
        }
    } else {
        BC_UNROLL
        for (int j = 0; j < 8; j++) {
            IV w[QN * VPP];
#if !Q8I_DP
            IV aw[QN * VPP];  /* pmaddubsw: |q_w| times q_x with q_w's sign (pairs at most 2 * 127 * 127) */
#endif
            BC_UNROLL
            for (int t = 0; t < NB * VPP; t++) {
                w[t] = IV_LOAD(((const bc_q8i_block *)blk[t / VPP])->u[j][t % VPP * VL]);
#if !Q8I_DP
                w[t] = _mm256_xor_si256(w[t], _mm256_set1_epi8((char)0x80));
                aw[t] = _mm256_abs_epi8(w[t]);
#endif
            }
            BC_UNROLL
            for (int i = 0; i < mr; i++) {
                const IV xb = IV_SET1(ld32(xr[i] + b * 32 + (size_t)j * 4));
                BC_UNROLL
                for (int t = 0; t < NB * VPP; t++)
#if Q8I_DP
                {
                    if (spl && j % 2)
                        acc2[i][t] = IV_DOT(acc2[i][t], w[t], xb);
                    else
                        acc[i][t] = IV_DOT(acc[i][t], w[t], xb);
                }
#else
                    acc[i][t] = _mm256_add_epi32(acc[i][t], _mm256_madd_epi16(
                        _mm256_maddubs_epi16(aw[t], _mm256_sign_epi8(xb, w[t])),
                        _mm256_set1_epi16(1)));
#endif
            }
        }
    }
    if (spl)
        BC_UNROLL
        for (int i = 0; i < mr; i++)
            BC_UNROLL
            for (int t = 0; t < NB * VPP; t++)
                acc[i][t] = IV_ADD(acc[i][t], acc2[i][t]);
    BC_UNROLL
    for (int t = 0; t < NB * VPP; t++) {
        const uint16_t *d = fk != FK_Q8 ? ((const bc_q4i_block *)blk[t / VPP])->d
                                        : ((const bc_q8i_block *)blk[t / VPP])->d;
        const V dw = vload_half(d + t % VPP * VL);
        BC_UNROLL
        for (int i = 0; i < mr; i++)
            f[(size_t)i * fs + (size_t)t] = vfma(IV_FLOAT(acc[i][t]), vmul(dw, vset1(xd[i][b])),
                                                 f[(size_t)i * fs + (size_t)t]);
        if (fk == FK_Q41 || fk == FK_Q51) {  /* + m (d_x sum q_x): s = -128 sum q_x */
            const V mw = vload_half((fk == FK_Q41 ? ((const bc_q41i_block *)blk[t / VPP])->m
                                                  : ((const bc_q51i_block *)blk[t / VPP])->m)
                                    + t % VPP * VL);
            BC_UNROLL
            for (int i = 0; i < mr; i++)
                f[(size_t)i * fs + (size_t)t] = vfma(mw, vset1(xd[i][b] * (float)(-xs[i][b] / 128)),
                                                     f[(size_t)i * fs + (size_t)t]);
        }
    }
}

/* f's chain for one sub-block of q4_ki or q5_ki (isum a, the block's d sc and
 * dmin m, x's d and m: f + a (d sc d_x) - (dmin m) m_x) and for one x block of
 * q6_ki (its two sub-blocks' sums and d sc): written once for the tiles, the
 * decoders and the expanded weights, which must give the same bits. */
BC_INLINE Q8I_TARGET V Q8I_FN(k4_chain)(V f, IV a, V dsc, V dm, float xd, float xm)
{
    f = vfma(IV_FLOAT(a), vmul(dsc, vset1(xd)), f);
    return vfnma(dm, vset1(xm), f);
}

BC_INLINE Q8I_TARGET V Q8I_FN(k6_chain)(V f, IV a0, IV a1, V ds0, V ds1, float xd)
{
    const V dx = vset1(xd);
    f = vfma(IV_FLOAT(a0), vmul(ds0, dx), f);
    return vfma(IV_FLOAT(a1), vmul(ds1, dx), f);
}

/* The weights of sub-block j, inputs 4g..4g+3, lanes c.. of a q4_ki super-block
 * (fk FK_Q5K: q5_ki's, its nibbles after its fifth bits, each weight's fifth
 * bit added as 16): unsigned bytes, as the tile multiplies them. */
BC_INLINE Q8I_TARGET IV Q8I_FN(k45_weights)(const int fk, const unsigned char *blk, int j,
                                            int g, int c)
{
    const IV low = IV_SET1(0x0F0F0F0F), one = IV_SET1(0x01010101);
    const int r = j / 2 * 8 + g;  /* u row r */
    const IV raw = IV_LOAD(fk == FK_Q5K ? ((const bc_q5ki_block *)blk)->u[r][c]
                                        : ((const bc_q4ki_block *)blk)->u[r][c]);
    const IV w = IV_AND(j % 2 ? IV_SRL4(raw) : raw, low);
    if (fk != FK_Q5K)
        return w;
    /* bit j of qh byte 4g + lane, to bit 4 of its lane */
    const IV hb = IV_LOAD(((const bc_q5ki_block *)blk)->h[g][c]);
    return IV_OR(w, IV_SLL(IV_AND(IV_SRLN(hb, j), one), 4));
}

/* The six-bit weights (0..63) of x block k (sub-blocks 2k, 2k + 1), inputs
 * 4g..4g+3, lanes c.. of a q6_ki super-block: its nibble of ql and its two
 * bits of qh (half k / 4), made in integer lanes. */
BC_INLINE Q8I_TARGET IV Q8I_FN(k6_weights)(const unsigned char *blk, int k, int g, int c)
{
    const IV low = IV_SET1(0x0F0F0F0F), top = IV_SET1(0x30303030);
    const bc_q6ki_block *K = (const bc_q6ki_block *)blk;
    const int h = k / 4, q = k % 4;
    const IV raw = IV_LOAD(K->grp[h][g].ql[q % 2][c]);
    const IV hb = IV_LOAD(K->grp[h][g].qh[c]);
    /* bits 2q, 2q + 1 of each byte to bits 4, 5 (shifts within 32-bit lanes: the
     * mask keeps each byte's own bits) */
    const IV hi = q == 0 ? IV_SLL(hb, 4) : q == 1 ? IV_SLL(hb, 2) : q == 2 ? hb : IV_SRL(hb, 2);
    return IV_OR(IV_AND(q < 2 ? raw : IV_SRL4(raw), low), IV_AND(hi, top));
}

/* Super-block S of NB q4_ki panels (bc_q4ki_block; fk FK_Q5K: q5_ki's, bc_q5ki_block,
 * its scales where q4_ki's are, its nibbles after its fifth bits, each weight's
 * fifth bit added as 16), rows 0..mr-1 of x: for
 * each sub-block j (x block b = 8S + j), its integer sums (nibbles times q_x,
 * no correction: q4_k's nibbles are unsigned), then f = fma((float)isum,
 * (d sc_j) d_x, f) and f = fma(-(dmin m_j), xm, f), xm = d_x (float)sum q_x
 * (the row's m, xq_rows_q4k), per panel vector as q8i_block's. */
BC_INLINE Q8I_TARGET void Q8I_FN(q4ki_block)(const int fk, const int mr, const int NB,
                                             const int spl, V *f,
                                             size_t fs, const unsigned char *const *blk,
                                             const int8_t *const *xr, const float *const *xd,
                                             const float *const *xm, size_t S)
{
    V dv[QN * VPP], mv[QN * VPP];
    BC_UNROLL
    for (int t = 0; t < NB * VPP; t++) {
        const bc_q4ki_block *k = (const bc_q4ki_block *)blk[t / VPP];
        dv[t] = vload_half(k->d + t % VPP * VL);
        mv[t] = vload_half(k->dmin + t % VPP * VL);
    }
    BC_NO_UNROLL
    for (int j = 0; j < 8; j++) {
        const size_t b = 8 * S + (size_t)j;
        IV acc[QR][QN * VPP], acc2[QR][QN * VPP];
        BC_UNROLL
        for (int i = 0; i < mr; i++)
            BC_UNROLL
            for (int t = 0; t < NB * VPP; t++) {
                acc[i][t] = IV_SET1(0);
                acc2[i][t] = IV_SET1(0);
            }
        BC_UNROLL
        for (int g = 0; g < 8; g++) {
            IV w[QN * VPP];
            BC_UNROLL
            for (int t = 0; t < NB * VPP; t++)
                w[t] = Q8I_FN(k45_weights)(fk, blk[t / VPP], j, g, t % VPP * VL);
            BC_UNROLL
            for (int i = 0; i < mr; i++) {
                const IV xb = IV_SET1(ld32(xr[i] + b * 32 + (size_t)g * 4));
                BC_UNROLL
                for (int t = 0; t < NB * VPP; t++) {
                    if (spl && g % 2)
                        acc2[i][t] = IV_DOT(acc2[i][t], w[t], xb);
                    else
                        acc[i][t] = IV_DOT(acc[i][t], w[t], xb);
                }
            }
        }
        BC_UNROLL
        for (int t = 0; t < NB * VPP; t++) {
            const bc_q4ki_block *k = (const bc_q4ki_block *)blk[t / VPP];
            const V dsc = vmul(dv[t], vload_u8(k->sc[j] + t % VPP * VL));  /* exact */
            const V dm = vmul(mv[t], vload_u8(k->m[j] + t % VPP * VL));    /* exact */
            BC_UNROLL
            for (int i = 0; i < mr; i++) {
                V *fi = &f[(size_t)i * fs + (size_t)t];
                const IV a = spl ? IV_ADD(acc[i][t], acc2[i][t]) : acc[i][t];
                *fi = Q8I_FN(k4_chain)(*fi, a, dsc, dm, xd[i][b], xm[i][b]);
            }
        }
    }
}

/* Decoding's q4ki_block for q4_ki (one panel, rows 0..mr-1, mr VPP <= 2):
 * the same integer sums and float chain, the sub-blocks two at a time: u row
 * 8p + g holds inputs 4g..4g+3 of sub-blocks 2p (its low nibbles) and 2p + 1
 * (its high), so each row is loaded once, not once a sub-block, and no
 * sub-block's parity is a branch; then f's chain for 2p, then 2p + 1, as
 * q4ki_block's. AMD Zen 4, Llama-3.2-1B's products from memory
 * (benches/ab_products.py, BLOCKC_PREFETCH off), one thread, GB/s before /
 * after: 1 row 22.7 / 25.0, 2 rows 13.7 / 24.3. q5_ki in this form (its qh
 * row loaded once a pair) ran 0.89x of q4ki_block on one thread, 1.09x on two:
 * left as it was (issue 51). */
BC_INLINE Q8I_TARGET void Q8I_FN(q4ki_rows)(const int mr, const int spl, V *f,
                                            size_t fs, const unsigned char *blk,
                                            const int8_t *const *xr, const float *const *xd,
                                            const float *const *xm, size_t S)
{
    const bc_q4ki_block *K = (const bc_q4ki_block *)blk;
    V dv[VPP], mv[VPP];
    BC_UNROLL
    for (int t = 0; t < VPP; t++) {
        dv[t] = vload_half(K->d + t * VL);
        mv[t] = vload_half(K->dmin + t * VL);
    }
    BC_NO_UNROLL
    for (int p = 0; p < 4; p++) {
        IV acc[2][2][2][VPP];  /* [row][sub-block 2p + e][chain][vector] */
        BC_UNROLL
        for (int i = 0; i < mr; i++)
            BC_UNROLL
            for (int e = 0; e < 2; e++)
                BC_UNROLL
                for (int t = 0; t < VPP; t++)
                    acc[i][e][0][t] = acc[i][e][1][t] = IV_SET1(0);
        BC_UNROLL
        for (int g = 0; g < 8; g++)
            BC_UNROLL
            for (int t = 0; t < VPP; t++) {
                IV w[2];
                BC_UNROLL
                for (int e = 0; e < 2; e++)
                    w[e] = Q8I_FN(k45_weights)(FK_Q4K, blk, 2 * p + e, g, t * VL);
                BC_UNROLL
                for (int i = 0; i < mr; i++)
                    BC_UNROLL
                    for (int e = 0; e < 2; e++) {
                        const size_t b = 8 * S + 2 * (size_t)p + (size_t)e;
                        const IV xb = IV_SET1(ld32(xr[i] + b * 32 + (size_t)g * 4));
                        const int c = spl && g % 2;
                        acc[i][e][c][t] = IV_DOT(acc[i][e][c][t], w[e], xb);
                    }
            }
        BC_UNROLL
        for (int e = 0; e < 2; e++) {
            const int j = 2 * p + e;
            const size_t b = 8 * S + (size_t)j;
            BC_UNROLL
            for (int t = 0; t < VPP; t++) {
                const V dsc = vmul(dv[t], vload_u8(K->sc[j] + t * VL));  /* exact */
                const V dm = vmul(mv[t], vload_u8(K->m[j] + t * VL));    /* exact */
                BC_UNROLL
                for (int i = 0; i < mr; i++) {
                    V *fi = &f[(size_t)i * fs + (size_t)t];
                    const IV a = spl ? IV_ADD(acc[i][e][0][t], acc[i][e][1][t]) : acc[i][e][0][t];
                    *fi = Q8I_FN(k4_chain)(*fi, a, dsc, dm, xd[i][b], xm[i][b]);
                }
            }
        }
    }
}

/* Super-block S of NB iq4_xsi panels (bc_iq4xsi_block), rows 0..mr-1 of x: for
 * each sub-block j (x block b = 8S + j), its integer sums as iq4_nli's (each
 * nibble's value by a byte shuffle: + 128 and corrected by s for vpdpbusd,
 * signed for pmaddubsw), then f = fma((float)isum, (d sc_j) d_x, f), per panel
 * vector as q8i_block's. */
BC_INLINE Q8I_TARGET void Q8I_FN(iq4xsi_block)(const int mr, const int NB, const int spl, V *f,
                                               size_t fs, const unsigned char *const *blk,
                                               const int8_t *const *xr, const float *const *xd,
                                               const int32_t *const *xs, size_t S)
{
    const IV low = IV_SET1(0x0F0F0F0F);
    const IV kv = IV_TABLE(Q8I_DP ? bc_kvalues_iq4nl_u8 : (const uint8_t *)bc_kvalues_iq4nl);
    V dv[QN * VPP];
    BC_UNROLL
    for (int t = 0; t < NB * VPP; t++)
        dv[t] = vload_half(((const bc_iq4xsi_block *)blk[t / VPP])->d + t % VPP * VL);
    BC_NO_UNROLL
    for (int j = 0; j < 8; j++) {
        const size_t b = 8 * S + (size_t)j;
        IV acc[QR][QN * VPP], acc2[QR][QN * VPP];
        BC_UNROLL
        for (int i = 0; i < mr; i++)
            BC_UNROLL
            for (int t = 0; t < NB * VPP; t++) {
                acc[i][t] = IV_SET1(Q8I_DP ? xs[i][b] : 0);
                acc2[i][t] = IV_SET1(0);
            }
#if Q8I_DP
        BC_UNROLL
        for (int g = 0; g < 4; g++) {
            IV wl[QN * VPP], wh[QN * VPP];
            BC_UNROLL
            for (int t = 0; t < NB * VPP; t++) {
                const IV raw = IV_LOAD(((const bc_iq4xsi_block *)blk[t / VPP])->u[4 * j + g][t % VPP * VL]);
                wl[t] = IV_LUT(kv, IV_AND(raw, low));
                wh[t] = IV_LUT(kv, IV_AND(IV_SRL4(raw), low));
            }
            BC_UNROLL
            for (int i = 0; i < mr; i++) {
                const IV xl = IV_SET1(ld32(xr[i] + b * 32 + (size_t)g * 4));
                const IV xh = IV_SET1(ld32(xr[i] + b * 32 + 16 + (size_t)g * 4));
                BC_UNROLL
                for (int t = 0; t < NB * VPP; t++) {
                    acc[i][t] = IV_DOT(acc[i][t], wl[t], xl);
                    if (spl)
                        acc2[i][t] = IV_DOT(acc2[i][t], wh[t], xh);
                    else
                        acc[i][t] = IV_DOT(acc[i][t], wh[t], xh);
                }
            }
        }
#else
        BC_UNROLL  /* pmaddubsw: a vector of weights at a time, decoded once for the mr rows */
        for (int g = 0; g < 4; g++)
            BC_UNROLL
            for (int t = 0; t < NB * VPP; t++) {
                const IV raw = IV_LOAD(((const bc_iq4xsi_block *)blk[t / VPP])->u[4 * j + g][t % VPP * VL]);
                const IV wl = IV_LUT(kv, IV_AND(raw, low));
                const IV wh = IV_LUT(kv, IV_AND(IV_SRL4(raw), low));
                BC_UNROLL
                for (int i = 0; i < mr; i++) {
                    acc[i][t] = IV_DOTS(acc[i][t], wl, IV_SET1(ld32(xr[i] + b * 32 + (size_t)g * 4)));
                    acc[i][t] = IV_DOTS(acc[i][t], wh,
                                        IV_SET1(ld32(xr[i] + b * 32 + 16 + (size_t)g * 4)));
                }
            }
#endif
        BC_UNROLL
        for (int t = 0; t < NB * VPP; t++) {
            const bc_iq4xsi_block *k = (const bc_iq4xsi_block *)blk[t / VPP];
            const V dsc = vmul(dv[t], vload_i8(k->sc[j] + t % VPP * VL));  /* exact */
            BC_UNROLL
            for (int i = 0; i < mr; i++) {
                V *fi = &f[(size_t)i * fs + (size_t)t];
                const IV a = spl ? IV_ADD(acc[i][t], acc2[i][t]) : acc[i][t];
                *fi = vfma(IV_FLOAT(a), vmul(dsc, vset1(xd[i][b])), *fi);
            }
        }
    }
}

/* Super-block S of NB q6_ki panels (bc_q6ki_block: half h's groups of qh and ql rows),
 * rows 0..mr-1 of x: x block b = 8S + k holds sub-blocks 2k and 2k + 1 (16
 * weights each); each weight's six bits (0..63) made in integer lanes from its
 * nibble of ql and its two bits of qh, the sums corrected by -32 times the
 * half's sum of q_x (s16, after s in the row, holds the products), then
 * f = fma((float)isum, (d sc_j) d_x, f) per sub-block. */
/* Decoding's q6ki_block (one panel, rows 0..mr-1, mr VPP <= 2: the sums in
 * registers): the same integer sums and float chain, the super-block read once
 * and in memory order. Half h's group g (qh row 8h + g, ql rows 16h + g and
 * 16h + 8 + g, side by side: bc_q6ki_block) holds inputs 4g..4g+3 of x blocks
 * 4h..4h+3, so the eight sums of the half (sub-blocks 2k, 2k + 1 of its four x
 * blocks k) are formed together, a group at a time; then f's chain, block by
 * block, as q6ki_block's. q6ki_block reads qh row g four times and ql rows
 * twice, between its other rows: AMD Zen 4, Llama-3.2-1B's products from memory
 * (benches/ab_products.py), one thread, GB/s before (q6ki_block, the old
 * layout: half's qh rows, then its ql rows) / after: AVX-512 1 row 17.0 / 27.2
 * (the read of the same bytes 31.4), 2 rows 13.6 / 20.0; AVX2 (q6ki_rows too)
 * 1 row 10.8 / 17.9; AVX2's 2 rows, q6ki_block in the new layout, 9.2 / 10.0
 * (issue 51). */
BC_INLINE Q8I_TARGET void Q8I_FN(q6ki_rows)(const int mr, V *f, size_t fs,
                                            const unsigned char *blk, const int8_t *const *xr,
                                            const float *const *xd, const int32_t *const *s16,
                                            size_t S)
{
    const bc_q6ki_block *K = (const bc_q6ki_block *)blk;
    V dv[VPP];
    BC_UNROLL
    for (int t = 0; t < VPP; t++)
        dv[t] = vload_half(K->d + t * VL);
    BC_NO_UNROLL
    for (int h = 0; h < 2; h++) {
        IV acc[2][4][2][VPP];  /* [row][x block 4h + q][sub-block][vector] */
        BC_UNROLL
        for (int i = 0; i < mr; i++)
            BC_UNROLL
            for (int q = 0; q < 4; q++)
                BC_UNROLL
                for (int t = 0; t < VPP; t++) {
                    const size_t b = 8 * S + 4 * (size_t)h + (size_t)q;
                    acc[i][q][0][t] = IV_SET1(s16[i][2 * b]);  /* -32 times the half's sum */
                    acc[i][q][1][t] = IV_SET1(s16[i][2 * b + 1]);
                }
        BC_UNROLL
        for (int g = 0; g < 8; g++)
            BC_UNROLL
            for (int t = 0; t < VPP; t++) {
                IV w[4];
                BC_UNROLL
                for (int q = 0; q < 4; q++)
                    w[q] = Q8I_FN(k6_weights)(blk, 4 * h + q, g, t * VL);
                BC_UNROLL
                for (int i = 0; i < mr; i++)
                    BC_UNROLL
                    for (int q = 0; q < 4; q++) {
                        const size_t b = 8 * S + 4 * (size_t)h + (size_t)q;
                        const IV xb = IV_SET1(ld32(xr[i] + b * 32 + (size_t)g * 4));
                        acc[i][q][g / 4][t] = IV_DOT(acc[i][q][g / 4][t], w[q], xb);
                    }
            }
        BC_UNROLL
        for (int q = 0; q < 4; q++) {
            const int k = 4 * h + q;
            const size_t b = 8 * S + (size_t)k;
            BC_UNROLL
            for (int t = 0; t < VPP; t++) {
                const V ds0 = vmul(dv[t], vload_i8(K->sc[2 * k] + t * VL));      /* exact */
                const V ds1 = vmul(dv[t], vload_i8(K->sc[2 * k + 1] + t * VL));
                BC_UNROLL
                for (int i = 0; i < mr; i++) {
                    V *fi = &f[(size_t)i * fs + (size_t)t];
                    *fi = Q8I_FN(k6_chain)(*fi, acc[i][q][0][t], acc[i][q][1][t], ds0, ds1,
                                           xd[i][b]);
                }
            }
        }
    }
}

BC_INLINE Q8I_TARGET void Q8I_FN(q6ki_block)(const int mr, const int NB, V *f, size_t fs,
                                             const unsigned char *const *blk,
                                             const int8_t *const *xr, const float *const *xd,
                                             const int32_t *const *s16, size_t S)
{
    V dv[QN * VPP];
    BC_UNROLL
    for (int t = 0; t < NB * VPP; t++)
        dv[t] = vload_half(((const bc_q6ki_block *)blk[t / VPP])->d + t % VPP * VL);
    BC_UNROLL
    for (int k = 0; k < 8; k++) {
        const size_t b = 8 * S + (size_t)k;
        IV acc[QR][QN * VPP], acc2[QR][QN * VPP];  /* sub-blocks 2k and 2k + 1 */
        BC_UNROLL
        for (int i = 0; i < mr; i++)
            BC_UNROLL
            for (int t = 0; t < NB * VPP; t++) {
                acc[i][t] = IV_SET1(s16[i][2 * b]);  /* -32 times the half's sum */
                acc2[i][t] = IV_SET1(s16[i][2 * b + 1]);
            }
        BC_UNROLL
        for (int g = 0; g < 8; g++) {
            IV w[QN * VPP];
            BC_UNROLL
            for (int t = 0; t < NB * VPP; t++)
                w[t] = Q8I_FN(k6_weights)(blk[t / VPP], k, g, t % VPP * VL);
            BC_UNROLL
            for (int i = 0; i < mr; i++) {
                const IV xb = IV_SET1(ld32(xr[i] + b * 32 + (size_t)g * 4));
                BC_UNROLL
                for (int t = 0; t < NB * VPP; t++) {
                    if (g < 4)
                        acc[i][t] = IV_DOT(acc[i][t], w[t], xb);
                    else
                        acc2[i][t] = IV_DOT(acc2[i][t], w[t], xb);
                }
            }
        }
        BC_UNROLL
        for (int t = 0; t < NB * VPP; t++) {
            const bc_q6ki_block *K = (const bc_q6ki_block *)blk[t / VPP];
            const V ds0 = vmul(dv[t], vload_i8(K->sc[2 * k] + t % VPP * VL));      /* exact */
            const V ds1 = vmul(dv[t], vload_i8(K->sc[2 * k + 1] + t % VPP * VL));
            BC_UNROLL
            for (int i = 0; i < mr; i++) {
                V *fi = &f[(size_t)i * fs + (size_t)t];
                *fi = Q8I_FN(k6_chain)(*fi, acc[i][t], acc2[i][t], ds0, ds1, xd[i][b]);
            }
        }
    }
}

/* Super-block S of NB q2_ki or q3_ki panels (fk FK_Q2K: bc_q2ki_block, FK_Q3K:
 * bc_q3ki_block), rows 0..mr-1 of x: x block b = 8S + k holds sub-blocks 2k and
 * 2k + 1 (weights 32k.., bits 2 (k % 4) of qs bytes 32 (k / 4) + 0..15, then
 * 16..31). q2_ki's two bits as they lie (unsigned: no correction), then per
 * sub-block f = fma((float)isum, (d sc_j) d_x, f) and f = fma(-(dmin m_j), d_x
 * (float)s16_j, f); q3_ki's low + 4 high (0..7: the high bit k of hmask byte
 * 32k + i's i), the sums corrected by -4 s16_j, then per sub-block f =
 * fma((float)isum, (d sc_j) d_x, f), as q6ki_block's. */
BC_INLINE Q8I_TARGET void Q8I_FN(k2ki_block)(const int fk, const int mr, const int NB, V *f,
                                             size_t fs, const unsigned char *const *blk,
                                             const int8_t *const *xr, const float *const *xd,
                                             const int32_t *const *s16, size_t S)
{
    const IV three = IV_SET1(0x03030303), four = IV_SET1(0x04040404);
    V dv[QN * VPP], mv[QN * VPP];
    BC_UNROLL
    for (int t = 0; t < NB * VPP; t++) {
        if (fk == FK_Q2K) {
            const bc_q2ki_block *K = (const bc_q2ki_block *)blk[t / VPP];
            dv[t] = vload_half(K->d + t % VPP * VL);
            mv[t] = vload_half(K->dmin + t % VPP * VL);
        } else {
            dv[t] = vload_half(((const bc_q3ki_block *)blk[t / VPP])->d + t % VPP * VL);
            mv[t] = vzero();
        }
    }
    BC_UNROLL
    for (int k = 0; k < 8; k++) {
        const int hh = k / 4, sh = 2 * (k % 4);
        const size_t b = 8 * S + (size_t)k;
        IV acc[QR][QN * VPP], acc2[QR][QN * VPP];  /* sub-blocks 2k and 2k + 1 */
        BC_UNROLL
        for (int i = 0; i < mr; i++)
            BC_UNROLL
            for (int t = 0; t < NB * VPP; t++) {
                acc[i][t] = IV_SET1(fk == FK_Q3K ? -4 * s16[i][2 * b] : 0);
                acc2[i][t] = IV_SET1(fk == FK_Q3K ? -4 * s16[i][2 * b + 1] : 0);
            }
        BC_UNROLL
        for (int g = 0; g < 8; g++) {
            IV w[QN * VPP];
            BC_UNROLL
            for (int t = 0; t < NB * VPP; t++) {
                if (fk == FK_Q2K) {
                    const bc_q2ki_block *K = (const bc_q2ki_block *)blk[t / VPP];
                    w[t] = IV_AND(IV_SRLN(IV_LOAD(K->u[8 * hh + g][t % VPP * VL]), sh), three);
                } else {  /* bit k of each hmask byte to bit 2 of its lane */
                    const bc_q3ki_block *K = (const bc_q3ki_block *)blk[t / VPP];
                    const IV lo = IV_AND(IV_SRLN(IV_LOAD(K->u[8 * hh + g][t % VPP * VL]), sh), three);
                    const IV hb = IV_LOAD(K->h[g][t % VPP * VL]);
                    w[t] = IV_OR(lo, IV_AND(IV_SLL(IV_SRLN(hb, k), 2), four));
                }
            }
            BC_UNROLL
            for (int i = 0; i < mr; i++) {
                const IV xb = IV_SET1(ld32(xr[i] + b * 32 + (size_t)g * 4));
                BC_UNROLL
                for (int t = 0; t < NB * VPP; t++) {
                    if (g < 4)
                        acc[i][t] = IV_DOT(acc[i][t], w[t], xb);
                    else
                        acc2[i][t] = IV_DOT(acc2[i][t], w[t], xb);
                }
            }
        }
        BC_UNROLL
        for (int t = 0; t < NB * VPP; t++) {
            V ds0, ds1, dm0 = vzero(), dm1 = vzero();
            if (fk == FK_Q2K) {  /* (d sc), (dmin m): exact */
                const bc_q2ki_block *K = (const bc_q2ki_block *)blk[t / VPP];
                ds0 = vmul(dv[t], vload_bits(K->sc[2 * k] + t % VPP * VL, 0, 15));
                ds1 = vmul(dv[t], vload_bits(K->sc[2 * k + 1] + t % VPP * VL, 0, 15));
                dm0 = vmul(mv[t], vload_bits(K->sc[2 * k] + t % VPP * VL, 4, 15));
                dm1 = vmul(mv[t], vload_bits(K->sc[2 * k + 1] + t % VPP * VL, 4, 15));
            } else {
                const bc_q3ki_block *K = (const bc_q3ki_block *)blk[t / VPP];
                ds0 = vmul(dv[t], vload_i8(K->sc[2 * k] + t % VPP * VL));
                ds1 = vmul(dv[t], vload_i8(K->sc[2 * k + 1] + t % VPP * VL));
            }
            BC_UNROLL
            for (int i = 0; i < mr; i++) {
                V *fi = &f[(size_t)i * fs + (size_t)t];
                const V dx = vset1(xd[i][b]);
                *fi = vfma(IV_FLOAT(acc[i][t]), vmul(ds0, dx), *fi);
                if (fk == FK_Q2K)
                    *fi = vfnma(dm0, vset1(xd[i][b] * (float)s16[i][2 * b]), *fi);
                *fi = vfma(IV_FLOAT(acc2[i][t]), vmul(ds1, dx), *fi);
                if (fk == FK_Q2K)
                    *fi = vfnma(dm1, vset1(xd[i][b] * (float)s16[i][2 * b + 1]), *fi);
            }
        }
    }
}

/* ---- a prompt's weights expanded once (the GEMM on q5_ki, q6_ki, iq4_xsi) ----
 * The GEMM's tile decodes its QN panels' weights again for every QM rows of a
 * prompt (q5_ki's fifth bits, q6_ki's two planes: about as many operations as
 * the products). Expanded once per QN panels into the thread's buffer
 * (bc_gemm's ws), as the bytes the tile multiplies, the tiles only multiply.
 * x block b (32 inputs) of the QN panels has a record of WX_VECS vectors: for
 * g = 0..7 the T = QN VPP vectors of weights by inputs 4g..4g+3 (the tile's
 * w[t]), then T float vectors of the block's first scale and T of its second:
 *   q5_ki: d sc_j and dmin m_j (sums and chain as q4ki_block's);
 *   q6_ki: d sc_2k and d sc_2k+1 (g < 4 and g >= 4, as q6ki_block's);
 *   iq4_xsi: d sc_j (the second unused), each nibble's value + 128 at g and
 *   g + 4 as iq4xsi_block's wl and wh (vpdpbusd only: pmaddubsw takes them signed).
 * The same integer sums, the same float chain: the same bits. AMD Zen 4, one
 * thread, 512 rows by 3,072 / 8,192 columns to 4,096 outputs, GOPS decoding as
 * it went / expanded: AVX-512 q5_ki 246 / 289, 248 / 301; q6_ki 246 / 268,
 * 249 / 275; iq4_xsi 307 / 317, 316 / 334; AVX2 (pmaddubsw, 3,072) q5_ki 93 /
 * 129, q6_ki 93 / 122. q4_ki's nibbles cost two operations a vector: expanded,
 * AVX-512 the same, AVX2 0.93x, so it decodes as it goes (issue 51). */
static inline int Q8I_FN(wx_expands)(int fk)
{
    return fk == FK_Q5K || fk == FK_Q6K || (fk == FK_IQ4XS && Q8I_DP);
}

/* ex (nfb * 8 records) = the expanded super-blocks 0..nfb-1 of the QN panels
 * whose block S lies at org[q] + S * st[q] */
BC_INLINE Q8I_TARGET void Q8I_FN(wx_expand)(const int fk, unsigned char *ex,
                                            const unsigned char *const *org, const size_t *st,
                                            size_t nfb)
{
    const IV low = IV_SET1(0x0F0F0F0F);
    const IV kv = IV_TABLE(bc_kvalues_iq4nl_u8);
    const size_t vb = sizeof(IV);
    for (size_t S = 0; S < nfb; S++)
        BC_UNROLL
        for (int t = 0; t < WX_T; t++) {
            const unsigned char *blk = org[t / VPP] + S * st[t / VPP];
            const int c = t % VPP * VL;
            BC_NO_UNROLL
            for (int j = 0; j < 8; j++) {
                unsigned char *rec = ex + (S * 8 + (size_t)j) * WX_VECS * vb;
                float *sc0 = (float *)(void *)(rec + (size_t)(8 * WX_T + t) * vb);
                float *sc1 = (float *)(void *)(rec + (size_t)(9 * WX_T + t) * vb);
                if (fk == FK_Q5K) {  /* (its scales where q4_ki's are) */
                    const bc_q4ki_block *k = (const bc_q4ki_block *)blk;
                    BC_UNROLL
                    for (int g = 0; g < 8; g++)
                        IV_STORE(rec + (size_t)(g * WX_T + t) * vb,
                                 Q8I_FN(k45_weights)(FK_Q5K, blk, j, g, c));
                    vstore(sc0, vmul(vload_half(k->d + c), vload_u8(k->sc[j] + c)));
                    vstore(sc1, vmul(vload_half(k->dmin + c), vload_u8(k->m[j] + c)));
                } else if (fk == FK_Q6K) {
                    const bc_q6ki_block *K = (const bc_q6ki_block *)blk;
                    BC_UNROLL
                    for (int g = 0; g < 8; g++)
                        IV_STORE(rec + (size_t)(g * WX_T + t) * vb, Q8I_FN(k6_weights)(blk, j, g, c));
                    vstore(sc0, vmul(vload_half(K->d + c), vload_i8(K->sc[2 * j] + c)));
                    vstore(sc1, vmul(vload_half(K->d + c), vload_i8(K->sc[2 * j + 1] + c)));
                } else {
                    const bc_iq4xsi_block *k = (const bc_iq4xsi_block *)blk;
                    BC_UNROLL
                    for (int g = 0; g < 4; g++) {
                        const IV raw = IV_LOAD(k->u[4 * j + g][c]);
                        IV_STORE(rec + (size_t)(g * WX_T + t) * vb, IV_LUT(kv, IV_AND(raw, low)));
                        IV_STORE(rec + (size_t)((g + 4) * WX_T + t) * vb,
                                 IV_LUT(kv, IV_AND(IV_SRL4(raw), low)));
                    }
                    vstore(sc0, vmul(vload_half(k->d + c), vload_i8(k->sc[j] + c)));
                    vstore(sc1, vzero());
                }
            }
        }
}

/* x block b of the QN panels from their expanded record rec, rows 0..mr-1 of
 * x, into f as the format's block function (see wx_expand) */
BC_INLINE Q8I_TARGET void Q8I_FN(wx_block)(const int fk, const int mr, V *f, size_t fs,
                                           const unsigned char *rec, const int8_t *const *xr,
                                           const float *const *xd, const int32_t *const *xs,
                                           const int32_t *const *s16, const float *const *xm,
                                           size_t b)
{
    const size_t vb = sizeof(IV);
    IV acc[QR][WX_T], acc2[QR][WX_T];  /* acc2: q6_ki's second sub-block */
    BC_UNROLL
    for (int i = 0; i < mr; i++)
        BC_UNROLL
        for (int t = 0; t < WX_T; t++) {
            acc[i][t] = IV_SET1(fk == FK_Q6K ? s16[i][2 * b] : fk == FK_IQ4XS ? xs[i][b] : 0);
            acc2[i][t] = IV_SET1(fk == FK_Q6K ? s16[i][2 * b + 1] : 0);
        }
    BC_UNROLL
    for (int g = 0; g < 8; g++) {
        IV w[WX_T];
        BC_UNROLL
        for (int t = 0; t < WX_T; t++)
            w[t] = IV_LOAD(rec + (size_t)(g * WX_T + t) * vb);
        BC_UNROLL
        for (int i = 0; i < mr; i++) {
            const IV xb = IV_SET1(ld32(xr[i] + b * 32 + (size_t)g * 4));
            BC_UNROLL
            for (int t = 0; t < WX_T; t++) {
                if (fk == FK_Q6K && g >= 4)
                    acc2[i][t] = IV_DOT(acc2[i][t], w[t], xb);
                else
                    acc[i][t] = IV_DOT(acc[i][t], w[t], xb);
            }
        }
    }
    BC_UNROLL
    for (int t = 0; t < WX_T; t++) {
        const V s0 = vload((const float *)(const void *)(rec + (size_t)(8 * WX_T + t) * vb));
        const V s1 = vload((const float *)(const void *)(rec + (size_t)(9 * WX_T + t) * vb));
        BC_UNROLL
        for (int i = 0; i < mr; i++) {
            V *fi = &f[(size_t)i * fs + (size_t)t];
            if (fk == FK_Q5K)
                *fi = Q8I_FN(k4_chain)(*fi, acc[i][t], s0, s1, xd[i][b], xm[i][b]);
            else if (fk == FK_Q6K)
                *fi = Q8I_FN(k6_chain)(*fi, acc[i][t], acc2[i][t], s0, s1, xd[i][b]);
            else  /* iq4_xsi: iq4xsi_block's one term */
                *fi = vfma(IV_FLOAT(acc[i][t]), vmul(s0, vset1(xd[i][b])), *fi);
        }
    }
}

#undef IV_DOT
#undef IV_LOAD
#undef IV_STORE
#undef IV_SET1
#undef IV_AND
#undef IV_SRL4
#undef IV_FLOAT
#undef IV_ADD
#undef IV_FIFTH
#undef IV_OR
#undef IV_SLL
#undef IV_SRL
#undef IV_SRLN
#undef IV_LUT
#undef IV_TABLE
#ifdef IV_DOTS
#undef IV_DOTS
#endif
#endif

/* Where each of NP panels from panel p lies (np <= NP of them real; the rest
 * repeat the last): its block b at org[q] + b * st[q] (bc_format_panel_at). */
BC_INLINE void Q8I_FN(q8i_where)(const int fk, const int NP, const bc_gemm *g, size_t p,
                                 size_t np, const unsigned char **org, size_t *st)
{
    const bc_format *fmt = bc_format_of(fk_dtype(fk));
    const size_t panels = (g->oc + PW - 1) / PW;
    BC_UNROLL
    for (int q = 0; q < NP; q++) {
        const bc_panel_at at = bc_format_panel_at(fmt, g->c, panels,
                                                  p + ((size_t)q < np ? (size_t)q : np - 1));
        org[q] = (const unsigned char *)g->w + at.origin;
        st[q] = at.stride;
    }
}

#if BC_SIMD == 512 || BC_SIMD == 256
/* Block b of the format fk (q4_ki, q6_ki: super-block b) into f, as q8i_block
 * (s16: q6_ki's half sums of the rows of x, times -32; xm: q4_ki's and q5_ki's
 * m, both after s in a row; pf: prefetch ahead, with NB == 1) */
BC_INLINE Q8I_TARGET void Q8I_FN(int_block)(const int fk, const int mr, const int NB,
                                            const int spl, const int pf, V *f, size_t fs,
                                            const unsigned char *const *blk,
                                            const int8_t *const *xr, const float *const *xd,
                                            const int32_t *const *xs,
                                            const int32_t *const *s16,
                                            const float *const *xm, size_t b)
{
    /* decoding: a block's bytes INT_AHEAD on (the tile reads memory in order; an
     * address, not a pointer: past the matrix's end it names nothing), when pf
     * says so (fk_decode_prefetches): by default not the formats whose blocks
     * are read forward (fk_prefetches): q5_ki (h before u), for one, the
     * hardware prefetcher alone streams at 2.2x the rate it reaches with these
     * (issue 51, AMD Zen 4). */
    if (NB == 1 && pf) {
        const size_t bb = fk_block_bytes(fk);
        for (size_t o = 0; o < bb; o += 64)
            __builtin_prefetch((const void *)((uintptr_t)blk[0] + INT_AHEAD + o), 0, 0);
    }
    if (fk == FK_Q4K && NB == 1 && mr * VPP <= 2)
        Q8I_FN(q4ki_rows)(mr, spl, f, fs, blk[0], xr, xd, xm, b);
    else if (fk == FK_Q4K || fk == FK_Q5K)
        Q8I_FN(q4ki_block)(fk, mr, NB, spl, f, fs, blk, xr, xd, xm, b);
    else if (fk == FK_Q6K && NB == 1 && mr * VPP <= 2)
        Q8I_FN(q6ki_rows)(mr, f, fs, blk[0], xr, xd, s16, b);
    else if (fk == FK_Q6K)
        Q8I_FN(q6ki_block)(mr, NB, f, fs, blk, xr, xd, s16, b);
    else if (fk == FK_IQ4XS)
        Q8I_FN(iq4xsi_block)(mr, NB, spl, f, fs, blk, xr, xd, xs, b);
    else if (fk == FK_Q2K || fk == FK_Q3K)
        Q8I_FN(k2ki_block)(fk, mr, NB, f, fs, blk, xr, xd, s16, b);
    else
        Q8I_FN(q8i_block)(fk, mr, NB, spl, f, fs, blk, xr, xd, xs, b);
}
#endif

/* Rows i0..i0+mr-1 of y (their quantised x at x0, rb bytes apart) by NP panels
 * from panel p (np <= NP of them real, all in one run; the rest repeat the
 * last: computed, not stored), over nb blocks. Block by block, each panel's in
 * turn: a run's blocks lie side by side, so a whole run is read in memory
 * order (AMD Zen 4, a decoding step's q8_0i products on one thread: 0.74 of
 * the time of the old tiles, 8 panels in flight in 8 streams; 0.67 for two and
 * three rows; AVX2 0.56 for one row, 1.17 / 1.13 for two / three: section
 * ab-products-q8_0i of docs/results/panels.md). One row runs the
 * panels unrolled (their sums in registers), more rows one panel at a time
 * (every row's and panel's sums would not fit), the partial outputs in memory.
 * The GEMM's tile (gemm: its panels from L1/L2, the rows streaming past)
 * takes its NP <= QN panels together, sharing each broadcast of x; from ex,
 * their weights expanded (wx_expand, NP == QN), where ex is not NULL. */
#if BC_SIMD == 512 || BC_SIMD == 256
BC_INLINE Q8I_TARGET void Q8I_FN(q8i_tile)(const int fk, const int gemm, const int mr, const int NP,
                                   const bc_gemm *g, const unsigned char *ex,
                                   const unsigned char *x0, size_t rb, size_t i0, size_t p,
                                   size_t np, size_t nb)
{
    const size_t oc = g->oc, bb = fk_block_bytes(fk);
    const size_t nfb = nb / fk_x_blocks(fk);  /* the format's blocks */
    const unsigned char *org[QP];
    size_t st[QP];
    Q8I_FN(q8i_where)(fk, NP, g, p, np, org, st);
    const int8_t *xr[QR];
    const float *xd[QR];
    const int32_t *xs[QR], *s16[QR];  /* the corrections of the unsigned weights */
    const float *xm[QR];
    BC_UNROLL
    for (int i = 0; i < mr; i++) {
        xr[i] = (const int8_t *)(x0 + (size_t)i * rb);
        xd[i] = (const float *)(x0 + (size_t)i * rb + nb * 32);
        xs[i] = (const int32_t *)(x0 + (size_t)i * rb + nb * 36);
        s16[i] = (const int32_t *)(x0 + (size_t)i * rb + nb * 40);  /* (q6_ki's, q2_ki's, q3_ki's rows only) */
        xm[i] = (const float *)(x0 + (size_t)i * rb + nb * 40);     /* (q4_ki's, q5_ki's) */
    }
    /* the GEMM's tile keeps the format's default; decoding's is the product's */
    const int pf = gemm ? fk_prefetches(fk) : fk_decode_prefetches(fk, g->pf);
    V f[QR * QP * VPP];  /* row i, panel q, vector h at f[i * QP * VPP + q * VPP + h] */
    BC_UNROLL
    for (int i = 0; i < mr; i++)
        BC_UNROLL
        for (int t = 0; t < NP * VPP; t++)
            f[i * QP * VPP + t] = vzero();
    for (size_t b = 0; b < nfb; b++) {
        if (gemm && ex && Q8I_FN(wx_expands)(fk)) {  /* the QN panels expanded (wx_expand) */
            BC_NO_UNROLL
            for (size_t j = 0; j < 8; j++)
                Q8I_FN(wx_block)(fk, mr, f, QP * VPP, ex + (8 * b + j) * WX_BYTES, xr, xd, xs,
                                 s16, xm, 8 * b + j);
        } else if (gemm) {  /* NP <= QN panels side by side */
            const unsigned char *blk[QN];
            BC_UNROLL
            for (int q = 0; q < NP; q++)
                blk[q] = org[q] + b * st[q];
            Q8I_FN(int_block)(fk, mr, NP, 0, pf, f, QP * VPP, blk, xr, xd, xs, s16, xm, b);
        } else if (mr == 1 && fk_x_blocks(fk) == 1) {
            BC_UNROLL
            for (int q = 0; q < NP; q++) {
                const unsigned char *blk = org[q] + b * st[q];
                Q8I_FN(int_block)(fk, mr, 1, Q8I_SPLIT, pf, f + q * VPP, QP * VPP, &blk, xr, xd,
                                  xs, s16, xm, b);
            }
        } else {  /* the panels of one run: their blocks b side by side */
            const unsigned char *blk = org[0] + b * st[0];
            BC_NO_UNROLL
            for (size_t q = 0; q < np; q++, blk += bb)
                Q8I_FN(int_block)(fk, mr, 1, Q8I_SPLIT, pf, f + q * VPP, QP * VPP, &blk, xr, xd,
                                  xs, s16, xm, b);
        }
    }
    for (int i = 0; i < mr; i++)
        for (int t = 0; t < NP * VPP; t++) {
            const size_t o = (p + (size_t)(t / VPP)) * PW + (size_t)(t % VPP) * VL;
            if ((size_t)(t / VPP) >= np || o >= oc)
                continue;
            const size_t nv = min_sz(VL, oc - o), row = i0 + (size_t)i;
            V v = f[i * QP * VPP + t];
            if (g->r)
                v = vadd(vloadn(g->r + row * oc + o, nv), v);
            const V bias = g->b ? vloadn(g->b + o, nv) : vzero();
            vstore_n(g->y + row * oc + o, finish(v, g->b ? &bias : NULL, g->act), nv);
        }
}
#else
/* portable C: one product at a time, the chain with fmaf */
BC_INLINE void Q8I_FN(q8i_tile)(const int fk, const int gemm, const int mr, const int NP, const bc_gemm *g,
                        const unsigned char *ex, const unsigned char *x0, size_t rb, size_t i0,
                        size_t p, size_t np, size_t nb)
{
    const size_t oc = g->oc;
    const unsigned char *org[QP];
    size_t st[QP];
    (void)gemm;
    (void)ex;
    Q8I_FN(q8i_where)(fk, NP, g, p, np, org, st);
    for (int i = 0; i < mr; i++) {
        const int8_t *xr = (const int8_t *)(x0 + (size_t)i * rb);
        const float *xd = (const float *)(x0 + (size_t)i * rb + nb * 32);
        const size_t row = i0 + (size_t)i;
        for (size_t q = 0; q < np; q++) {
            float f[PW];
            for (size_t l = 0; l < PW; l++) {
                float acc = 0.0f;
                if (fk == FK_Q6K) {
                    for (size_t j = 0; j < 2 * nb; j++) {  /* sub-block j % 16 of super-block j / 16 */
                        const bc_q6ki_block *k = (const bc_q6ki_block *)(org[q] + j / 16 * st[q]);
                        const size_t b = j / 2;
                        int32_t isum = 0;
                        for (size_t e = 0; e < 16; e++)
                            isum += (bc_q6ki_quant(k, l, j % 16 * 16 + e) - 32) * xr[j * 16 + e];
                        const float ds = bc_half_to_f32(k->d[l]) * (float)k->sc[j % 16][l];
                        acc = fmaf((float)isum, ds * xd[b], acc);
                    }
                    f[l] = acc;
                    continue;
                }
                if (fk == FK_Q2K || fk == FK_Q3K) {
                    for (size_t j = 0; j < 2 * nb; j++) {  /* sub-block j % 16 of super-block j / 16 */
                        const unsigned char *K = org[q] + j / 16 * st[q];
                        const size_t b = j / 2;
                        int32_t isum = 0, xsum = 0;
                        for (size_t e = 0; e < 16; e++) {
                            const size_t w = j % 16 * 16 + e;
                            const int wq = fk == FK_Q2K
                                ? bc_q2ki_quant((const bc_q2ki_block *)(const void *)K, l, w)
                                : bc_q3ki_quant((const bc_q3ki_block *)(const void *)K, l, w) - 4;
                            isum += wq * xr[j * 16 + e];
                            xsum += xr[j * 16 + e];
                        }
                        if (fk == FK_Q2K) {
                            const bc_q2ki_block *k2 = (const bc_q2ki_block *)(const void *)K;
                            const unsigned sc = k2->sc[j % 16][l];
                            const float ds = bc_half_to_f32(k2->d[l]) * (float)(sc & 15u);
                            const float dm = bc_half_to_f32(k2->dmin[l]) * (float)(sc >> 4);
                            acc = fmaf((float)isum, ds * xd[b], acc);
                            acc = fmaf(-dm, xd[b] * (float)xsum, acc);
                        } else {
                            const bc_q3ki_block *k3 = (const bc_q3ki_block *)(const void *)K;
                            const float ds = bc_half_to_f32(k3->d[l]) * (float)k3->sc[j % 16][l];
                            acc = fmaf((float)isum, ds * xd[b], acc);
                        }
                    }
                    f[l] = acc;
                    continue;
                }
                if (fk == FK_IQ4XS) {
                    for (size_t b = 0; b < nb; b++) {  /* sub-block b % 8 of super-block b / 8 */
                        const bc_iq4xsi_block *k = (const bc_iq4xsi_block *)(org[q] + b / 8 * st[q]);
                        const size_t j = b % 8;
                        int32_t isum = 0;
                        for (size_t i = 0; i < 32; i++)
                            isum += bc_kvalues_iq4nl[bc_iq4xsi_nibble(k, l, 32 * j + i)] * xr[b * 32 + i];
                        const float dsc = bc_half_to_f32(k->d[l]) * (float)k->sc[j][l];
                        acc = fmaf((float)isum, dsc * xd[b], acc);
                    }
                    f[l] = acc;
                    continue;
                }
                if (fk == FK_Q4K || fk == FK_Q5K) {
                    for (size_t b = 0; b < nb; b++) {  /* sub-block b % 8 of super-block b / 8 */
                        /* (q5_ki's scales where q4_ki's are) */
                        const bc_q4ki_block *k = (const bc_q4ki_block *)(org[q] + b / 8 * st[q]);
                        const size_t j = b % 8;
                        int32_t isum = 0, xsum = 0;
                        for (size_t i = 0; i < 32; i++) {
                            const int wq = fk == FK_Q5K
                                ? bc_q5ki_quant((const bc_q5ki_block *)(const void *)k, l, 32 * j + i)
                                : bc_q4ki_nibble(k, l, 32 * j + i);
                            isum += wq * xr[b * 32 + i];
                            xsum += xr[b * 32 + i];
                        }
                        const float dsc = bc_half_to_f32(k->d[l]) * (float)k->sc[j][l];
                        const float dm = bc_half_to_f32(k->dmin[l]) * (float)k->m[j][l];
                        acc = fmaf((float)isum, dsc * xd[b], acc);
                        acc = fmaf(-dm, xd[b] * (float)xsum, acc);
                    }
                    f[l] = acc;
                    continue;
                }
                if (fk == FK_Q41 || fk == FK_Q51) {
                    for (size_t b = 0; b < nb; b++) {  /* w = d q + m, q unsigned */
                        const unsigned char *bk = org[q] + b * st[q];
                        const bc_q41i_block *k4 = (const bc_q41i_block *)(const void *)bk;
                        const bc_q51i_block *k5 = (const bc_q51i_block *)(const void *)bk;
                        int32_t isum = 0, xsum = 0;
                        for (size_t k = 0; k < 32; k++) {
                            const int byte = k4->u[k % 16 / 4][l][k % 4];
                            const int wq = fk == FK_Q51
                                ? bc_q5i_quant((const bc_q5i_block *)(const void *)bk, l, k)
                                : k < 16 ? byte & 15 : byte >> 4;
                            isum += wq * xr[b * 32 + k];
                            xsum += xr[b * 32 + k];
                        }
                        const float dw = bc_half_to_f32(k4->d[l]);
                        const float mw = bc_half_to_f32(fk == FK_Q51 ? k5->m[l] : k4->m[l]);
                        acc = fmaf((float)isum, dw * xd[b], acc);
                        acc = fmaf(mw, xd[b] * (float)xsum, acc);
                    }
                    f[l] = acc;
                    continue;
                }
                for (size_t b = 0; b < nb; b++) {
                    const bc_q8i_block *blk = (const bc_q8i_block *)(org[q] + b * st[q]);
                    const bc_q4i_block *blk4 = (const bc_q4i_block *)(org[q] + b * st[q]);
                    int32_t isum = 0;
                    for (size_t k = 0; k < 32; k++) {
                        int32_t w;
                        if (fk == FK_Q5) {
                            w = bc_q5i_quant((const bc_q5i_block *)(org[q] + b * st[q]), l, k) - 16;
                        } else if (fk == FK_Q4 || fk == FK_IQ4NL) {
                            const int byte = blk4->u[k % 16 / 4][l][k % 4];
                            const int nib = k < 16 ? byte & 15 : byte >> 4;
                            w = fk == FK_IQ4NL ? bc_kvalues_iq4nl[nib] : nib - 8;
                        } else {
                            w = (int32_t)blk->u[k / 4][l][k % 4] - 128;
                        }
                        isum += w * xr[b * 32 + k];
                    }
                    const uint16_t dw = fk != FK_Q8 ? blk4->d[l] : blk->d[l];
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

/* The GEMM tile's rows for the format fk: QM, but 3 for iq4_nli's and iq4_xsi's
 * pmaddubsw (their weights' decoding, a shuffle and an abs a vector, shared by
 * one more row; QR >= 3 holds them) */
static inline int Q8I_FN(q8i_rows)(int fk)
{
    return BC_SIMD == 256 && !Q8I_DP && (fk == FK_IQ4NL || fk == FK_IQ4XS) ? 3 : QM;
}

/* q8i_tile with its row count (1..q8i_rows(fk)) a constant, NP panels (fk a constant too) */
BC_INLINE Q8I_TARGET void Q8I_FN(q8i_tile_rows)(const int fk, int mr, const bc_gemm *g,
                                        const unsigned char *ex, const unsigned char *x0,
                                        size_t rb, size_t i0, size_t p, size_t np, size_t nb)
{
    switch (mr) {
    case 1: Q8I_FN(q8i_tile)(fk, 1, 1, QN, g, ex, x0, rb, i0, p, np, nb); break;
    case 2: Q8I_FN(q8i_tile)(fk, 1, 2, QN, g, ex, x0, rb, i0, p, np, nb); break;
    case 3:
        if (Q8I_FN(q8i_rows)(fk) >= 3)
            Q8I_FN(q8i_tile)(fk, 1, 3, QN, g, ex, x0, rb, i0, p, np, nb);
        break;
#if QM >= 4
    case 4: Q8I_FN(q8i_tile)(fk, 1, 4, QN, g, ex, x0, rb, i0, p, np, nb); break;
#endif
#if QM >= 6
    case 5: Q8I_FN(q8i_tile)(fk, 1, 5, QN, g, ex, x0, rb, i0, p, np, nb); break;
    case 6: Q8I_FN(q8i_tile)(fk, 1, 6, QN, g, ex, x0, rb, i0, p, np, nb); break;
#endif
    default: break;
    }
}

/* The GEMM's tile, one copy per format (kept out of line) */
static Q8I_TARGET void Q8I_FN(q8i_tile_gemm)(int fk, int mr, const bc_gemm *g,
                                             const unsigned char *ex, const unsigned char *x0,
                                             size_t rb, size_t i0, size_t p, size_t np, size_t nb)
{
    if (fk == FK_Q4)
        Q8I_FN(q8i_tile_rows)(FK_Q4, mr, g, ex, x0, rb, i0, p, np, nb);
    else if (fk == FK_Q5)
        Q8I_FN(q8i_tile_rows)(FK_Q5, mr, g, ex, x0, rb, i0, p, np, nb);
    else if (fk == FK_Q4K)
        Q8I_FN(q8i_tile_rows)(FK_Q4K, mr, g, ex, x0, rb, i0, p, np, nb);
    else if (fk == FK_Q6K)
        Q8I_FN(q8i_tile_rows)(FK_Q6K, mr, g, ex, x0, rb, i0, p, np, nb);
    else if (fk == FK_Q5K)
        Q8I_FN(q8i_tile_rows)(FK_Q5K, mr, g, ex, x0, rb, i0, p, np, nb);
    else if (fk == FK_IQ4NL)
        Q8I_FN(q8i_tile_rows)(FK_IQ4NL, mr, g, ex, x0, rb, i0, p, np, nb);
    else if (fk == FK_IQ4XS)
        Q8I_FN(q8i_tile_rows)(FK_IQ4XS, mr, g, ex, x0, rb, i0, p, np, nb);
    else if (fk == FK_Q41)
        Q8I_FN(q8i_tile_rows)(FK_Q41, mr, g, ex, x0, rb, i0, p, np, nb);
    else if (fk == FK_Q51)
        Q8I_FN(q8i_tile_rows)(FK_Q51, mr, g, ex, x0, rb, i0, p, np, nb);
    else if (fk == FK_Q2K)
        Q8I_FN(q8i_tile_rows)(FK_Q2K, mr, g, ex, x0, rb, i0, p, np, nb);
    else if (fk == FK_Q3K)
        Q8I_FN(q8i_tile_rows)(FK_Q3K, mr, g, ex, x0, rb, i0, p, np, nb);
    else
        Q8I_FN(q8i_tile_rows)(FK_Q8, mr, g, ex, x0, rb, i0, p, np, nb);
}

#if BC_SIMD == 512 || BC_SIMD == 256
/* wx_expand with fk a constant (the formats wx_expands names) */
static Q8I_TARGET void Q8I_FN(wx_expand_fk)(int fk, unsigned char *ex,
                                            const unsigned char *const *org, const size_t *st,
                                            size_t nfb)
{
    if (fk == FK_Q5K)
        Q8I_FN(wx_expand)(FK_Q5K, ex, org, st, nfb);
    else if (fk == FK_Q6K)
        Q8I_FN(wx_expand)(FK_Q6K, ex, org, st, nfb);
    else
        Q8I_FN(wx_expand)(FK_IQ4XS, ex, org, st, nfb);
}
#endif

/* Decoding: n <= BC_ROWS_MAX rows, a run of panels at a time (its panels'
 * blocks side by side: a tile reads one stretch of memory), or what is left of
 * one (a run cut by [p0, p1)). */
BC_INLINE Q8I_TARGET void Q8I_FN(q8i_decode)(const int fk, const bc_gemm *g, const unsigned char *xq,
                                     size_t rb, size_t n0, size_t n, size_t p0, size_t p1,
                                     size_t nb)
{
    const size_t G = BC_INTDOT_GROUP, panels = (g->oc + PW - 1) / PW;
    for (size_t p = p0, np; p < p1; p += np) {
        np = bc_format_run_take(G, panels, p, p1, G);
        switch (n) {
        case 1: Q8I_FN(q8i_tile)(fk, 0, 1, G, g, NULL, xq, rb, n0, p, np, nb); break;
        case 2: Q8I_FN(q8i_tile)(fk, 0, 2, G, g, NULL, xq, rb, n0, p, np, nb); break;
        default: Q8I_FN(q8i_tile)(fk, 0, 3, G, g, NULL, xq, rb, n0, p, np, nb); break;
        }
    }
}

// y (N,OC) rows [n0,n1), columns [o0,o1); xq rows n0.. quantised; w (OC,C) q8_0i, q4_0i, q5_0i, q4_ki or q6_ki (fk) panels
static Q8I_TARGET void Q8I_FN(q8i_part)(int fk, const bc_gemm *g, const unsigned char *xq, size_t n0,
                                size_t n1, size_t o0, size_t o1)
{
    const size_t nb = (g->c + 31) / 32, rb = bc_xq_row_bytes(fk_dtype(fk), g->c);
    const size_t p0 = o0 / PW, p1 = (o1 + PW - 1) / PW, n = n1 - n0;
    if (n <= BC_ROWS_MAX) {
        if (fk == FK_Q4)
            Q8I_FN(q8i_decode)(FK_Q4, g, xq, rb, n0, n, p0, p1, nb);
        else if (fk == FK_Q5)
            Q8I_FN(q8i_decode)(FK_Q5, g, xq, rb, n0, n, p0, p1, nb);
        else if (fk == FK_Q4K)
            Q8I_FN(q8i_decode)(FK_Q4K, g, xq, rb, n0, n, p0, p1, nb);
        else if (fk == FK_Q6K)
            Q8I_FN(q8i_decode)(FK_Q6K, g, xq, rb, n0, n, p0, p1, nb);
        else if (fk == FK_Q5K)
            Q8I_FN(q8i_decode)(FK_Q5K, g, xq, rb, n0, n, p0, p1, nb);
        else if (fk == FK_IQ4NL)
            Q8I_FN(q8i_decode)(FK_IQ4NL, g, xq, rb, n0, n, p0, p1, nb);
        else if (fk == FK_IQ4XS)
            Q8I_FN(q8i_decode)(FK_IQ4XS, g, xq, rb, n0, n, p0, p1, nb);
        else if (fk == FK_Q41)
            Q8I_FN(q8i_decode)(FK_Q41, g, xq, rb, n0, n, p0, p1, nb);
        else if (fk == FK_Q51)
            Q8I_FN(q8i_decode)(FK_Q51, g, xq, rb, n0, n, p0, p1, nb);
        else if (fk == FK_Q2K)
            Q8I_FN(q8i_decode)(FK_Q2K, g, xq, rb, n0, n, p0, p1, nb);
        else if (fk == FK_Q3K)
            Q8I_FN(q8i_decode)(FK_Q3K, g, xq, rb, n0, n, p0, p1, nb);
        else
            Q8I_FN(q8i_decode)(FK_Q8, g, xq, rb, n0, n, p0, p1, nb);
        return;
    }
    const size_t qm = (size_t)Q8I_FN(q8i_rows)(fk);
#if BC_SIMD == 512 || BC_SIMD == 256
    /* enough rows: QN panels at a time, their weights expanded once (wx_expand) */
    unsigned char *ex = NULL;
    if (Q8I_FN(wx_expands)(fk) && g->ws && n >= WX_ROWS && nb % 8 == 0)
        ex = g->ws(nb * WX_BYTES);
    if (ex) {
        for (size_t p = p0; p < p1; p += QN) {
            const size_t np = min_sz(QN, p1 - p);
            const unsigned char *org[QP];
            size_t st[QP];
            Q8I_FN(q8i_where)(fk, QN, g, p, np, org, st);
            Q8I_FN(wx_expand_fk)(fk, ex, org, st, nb / 8);
            for (size_t i = n0; i < n1; i += qm)
                Q8I_FN(q8i_tile_gemm)(fk, (int)min_sz(qm, n1 - i), g, ex, xq + (i - n0) * rb, rb,
                                      i, p, np, nb);
        }
        return;
    }
#endif
    for (size_t pc = p0, pe; pc < p1; pc = pe) {  /* a run at a time (its panels in L1/L2) */
        pe = min_sz(p1, pc - pc % BC_INTDOT_GROUP + BC_INTDOT_GROUP);
        for (size_t i = n0; i < n1; i += qm) {
            const int mr = (int)min_sz(qm, n1 - i);
            for (size_t p = pc; p < pe; p += QN)
                Q8I_FN(q8i_tile_gemm)(fk, mr, g, NULL, xq + (i - n0) * rb, rb, i, p,
                                      min_sz(QN, pe - p), nb);
        }
    }
}
