/* fast_formats.h: each weight format's kernels (part of the kernel template,
 * fast_tmpl.h: included once per instruction set, after fast_linear.h and
 * fast_decode.h). The ISA-independent half of a format (sizes, pack,
 * unpack) is its row in formats.c; here is the other half: how the kernels
 * read its panels (a state for each group of rows, the VL weights of a row
 * as floats), the two kernels made from that (decoding, prows_part; the
 * GEMM's copy, load_panels), and its entry of WF_KERNELS, the kernel table's
 * wf. A format whose products are not this chain puts its own kernel in its
 * entry: q8_0i's xq_part (fast_intdot.h) multiplies rows of x quantised once
 * per product, for any number of rows, by one chain per output. */

/* ---- float32 panels: the GEMM reads them where they lie ------------------- */

BC_INLINE wf_st f32_state(const unsigned char *panel, size_t st, size_t k0, size_t lane0)
{
    return wf_scale(vzero());
}

BC_INLINE V f32_vec(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    return vload((const float *)(panel + k * st) + lane0);
}

// y (N,OC), x (N,C), w (OC,C) float32 panels; N <= BC_ROWS_MAX
static void prows_f32(const bc_gemm *g, size_t o0, size_t o1)
{
    prows_part(BC_DTYPE_F32, PW * sizeof(float), PG_STREAM, 32, f32_state, f32_vec, g, o0, o1);
}

/* ---- bfloat16 panels --------------------------------------------------- */

BC_INLINE wf_st bf16_state(const unsigned char *panel, size_t st, size_t k0, size_t lane0)
{
    return wf_scale(vzero());
}

BC_INLINE V bf16_vec(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    return vload_bf16((const uint16_t *)(panel + k * st) + lane0);
}

// y (N,OC), x (N,C), w (OC,C) bfloat16 panels; N <= BC_ROWS_MAX
static void prows_bf16(const bc_gemm *g, size_t o0, size_t o1)
{
    prows_part(BC_DTYPE_BF16, 0, PG_STREAM2, 32, bf16_state, bf16_vec, g, o0, o1);
}

// bp (kc, nc) float32 panels <- w (OC,C) bfloat16 panels, columns o0.., rows p0..
static void panels_bf16(float *bp, const bc_gemm *g, size_t o0, size_t nc, size_t p0, size_t kc)
{
    load_panels(BC_DTYPE_BF16, 32, bf16_state, bf16_vec, bp, g, o0, nc, p0, kc);
}

/* ---- float16 panels: F16C's vcvtph2ps on AVX2 and AVX-512, exact in C ----- */

BC_INLINE wf_st f16_state(const unsigned char *panel, size_t st, size_t k0, size_t lane0)
{
    return wf_scale(vzero());
}

BC_INLINE V f16_vec(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    return vload_half((const uint16_t *)(panel + k * st) + lane0);
}

// y (N,OC), x (N,C), w (OC,C) float16 panels; N <= BC_ROWS_MAX
static void prows_f16(const bc_gemm *g, size_t o0, size_t o1)
{
    prows_part(BC_DTYPE_F16, 0, PG_STREAM2, 32, f16_state, f16_vec, g, o0, o1);
}

// bp (kc, nc) float32 panels <- w (OC,C) float16 panels, columns o0.., rows p0..
static void panels_f16(float *bp, const bc_gemm *g, size_t o0, size_t nc, size_t p0, size_t kc)
{
    load_panels(BC_DTYPE_F16, 32, f16_state, f16_vec, bp, g, o0, nc, p0, kc);
}

/* ---- q8_0 panels: a block of 32 rows k shares each lane's scale ----------- */

BC_INLINE wf_st q8_0_state(const unsigned char *panel, size_t st, size_t k0, size_t lane0)
{
    return wf_scale(vload_half(((const bc_q8_block *)(panel + k0 / 32 * st))->d + lane0));
}

BC_INLINE V q8_0_vec(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    const bc_q8_block *bl = (const bc_q8_block *)(panel + k / 32 * st);
    return vmul(vload_i8(&bl->q[k % 32][lane0]), state.s);
}

// y (N,OC), x (N,C), w (OC,C) q8_0 panels; N <= BC_ROWS_MAX
static void prows_q8_0(const bc_gemm *g, size_t o0, size_t o1)
{
    prows_part(BC_DTYPE_Q8_0, sizeof(bc_q8_block), RACC, 32, q8_0_state, q8_0_vec, g, o0, o1);
}

// bp (kc, nc) float32 panels <- w (OC,C) q8_0 panels, columns o0.., rows p0..
static void panels_q8_0(float *bp, const bc_gemm *g, size_t o0, size_t nc, size_t p0, size_t kc)
{
    load_panels(BC_DTYPE_Q8_0, 32, q8_0_state, q8_0_vec, bp, g, o0, nc, p0, kc);
}

/* ---- q4_0 panels: as q8_0, four bits a weight ---------------------------- */

#if BC_SIMD
/* The vector instruction sets read a nibble n as the float f = 1 + n 2^-e
 * (vload_nibm: e = 15 for the low nibbles, rows k % 32 < 16 of a block, and 11
 * for the high ones) and the weight as fma(f, 2^e d, -(2^e + 8) d): both constants
 * exact (an 11-bit half times 2^e, and times 8 (2^(e-3) + 1): at most 24 bits),
 * so the one rounding of (n - 8) d, representable, leaves it exact: the very
 * weight the file's dequantisation gives. The state is a half's (k0: its first
 * row), so decoding computes it for each half (prows_split) and the GEMM's copy
 * reads groups of 16 rows. */
/* 2^e of the nibbles of rows k0.. of a block: vload_nibm's 2^15 for the low
 * nibbles (k0 % 32 < 16), 2^11 for the high ones */
BC_INLINE float nibm_scale(size_t k0)
{
    return k0 % 32 < 16 ? 32768.0f : 2048.0f;
}

BC_INLINE wf_st q4_0_state(const unsigned char *panel, size_t st, size_t k0, size_t lane0)
{
    const V d = vload_half(((const bc_q4_block *)(panel + k0 / 32 * st))->d + lane0);
    const float e = nibm_scale(k0);
    wf_st r;
    r.s = vmul(d, vset1(e));
    r.m = vmul(d, vset1(-(e + 8.0f)));
    return r;
}

BC_INLINE V q4_0_lo(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    const bc_q4_block *bl = (const bc_q4_block *)(panel + k / 32 * st);
    return vfma(vload_nibm(&bl->q[k % 16][lane0], 0), state.s, state.m);
}

BC_INLINE V q4_0_hi(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    const bc_q4_block *bl = (const bc_q4_block *)(panel + k / 32 * st);
    return vfma(vload_nibm(&bl->q[k % 16][lane0], 1), state.s, state.m);
}
#else
/* Portable C has no fused multiply-add: (nibble - 8) * d, exact in float32 */
BC_INLINE wf_st q4_0_state(const unsigned char *panel, size_t st, size_t k0, size_t lane0)
{
    return wf_scale(vload_half(((const bc_q4_block *)(panel + k0 / 32 * st))->d + lane0));
}

BC_INLINE V q4_0_lo(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    const bc_q4_block *bl = (const bc_q4_block *)(panel + k / 32 * st);
    return vmul(vload_nib8(&bl->q[k % 16][lane0], 0), state.s);
}

BC_INLINE V q4_0_hi(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    const bc_q4_block *bl = (const bc_q4_block *)(panel + k / 32 * st);
    return vmul(vload_nib8(&bl->q[k % 16][lane0], 1), state.s);
}
#endif

/* q4_0_lo or q4_0_hi by the row (the GEMM's copy; decoding runs each half apart,
 * so that no k chooses) */
BC_INLINE V q4_0_vec(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    return k % 32 < 16 ? q4_0_lo(panel, st, k, lane0, state) : q4_0_hi(panel, st, k, lane0, state);
}

// y (N,OC), x (N,C), w (OC,C) q4_0 panels; N <= BC_ROWS_MAX
static void prows_q4_0(const bc_gemm *g, size_t o0, size_t o1)
{
    prows_split(BC_DTYPE_Q4_0, sizeof(bc_q4_block), RACC, 32, 16, q4_0_state, q4_0_lo, q4_0_hi,
                g, o0, o1);
}

// bp (kc, nc) float32 panels <- w (OC,C) q4_0 panels, columns o0.., rows p0..
static void panels_q4_0(float *bp, const bc_gemm *g, size_t o0, size_t nc, size_t p0, size_t kc)
{
    load_panels(BC_DTYPE_Q4_0, 16, q4_0_state, q4_0_vec, bp, g, o0, nc, p0, kc);
}

/* ---- q5_0 panels: as q4_0, a fifth bit from each row's qh ----------------- */

#if BC_SIMD == 512
/* AVX-512 reads the nibble as q4_0 does (vload_nibm) and the fifth bit into a mask
 * (vdeq_q5): the state is a half's 2^e d and 16 d, both exact. AVX2 and portable C
 * widen and convert: on AVX2 the mask is a vector and saves no instruction. */
BC_INLINE wf_st q5_0_state(const unsigned char *panel, size_t st, size_t k0, size_t lane0)
{
    const V d = vload_half(((const bc_q5_block *)(panel + k0 / 32 * st))->d + lane0);
    wf_st r;
    r.s = vmul(d, vset1(nibm_scale(k0)));
    r.m = vmul(d, vset1(16.0f));
    return r;
}

BC_INLINE V q5_0_lo(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    const bc_q5_block *bl = (const bc_q5_block *)(panel + k / 32 * st);
    const size_t j = k % 16;
    return vdeq_q5(&bl->q[j][lane0], bl->qh + lane0, 0, (unsigned)j, state.s, state.m);
}

BC_INLINE V q5_0_hi(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    const bc_q5_block *bl = (const bc_q5_block *)(panel + k / 32 * st);
    const size_t j = k % 16;
    return vdeq_q5(&bl->q[j][lane0], bl->qh + lane0, 1, (unsigned)j + 16, state.s, state.m);
}
#else
BC_INLINE wf_st q5_0_state(const unsigned char *panel, size_t st, size_t k0, size_t lane0)
{
    return wf_scale(vload_half(((const bc_q5_block *)(panel + k0 / 32 * st))->d + lane0));
}

/* (q - 16) * d: exact in float32, the very weight the file's dequantisation gives */
BC_INLINE V q5_0_lo(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    const bc_q5_block *bl = (const bc_q5_block *)(panel + k / 32 * st);
    const size_t j = k % 16;
    return vmul(vload_nib16(&bl->q[j][lane0], bl->qh + lane0, 0, (unsigned)j), state.s);
}

BC_INLINE V q5_0_hi(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    const bc_q5_block *bl = (const bc_q5_block *)(panel + k / 32 * st);
    const size_t j = k % 16;
    return vmul(vload_nib16(&bl->q[j][lane0], bl->qh + lane0, 1, (unsigned)j + 16), state.s);
}
#endif

/* q5_0_lo or q5_0_hi by the row (the GEMM's copy) */
BC_INLINE V q5_0_vec(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    return k % 32 < 16 ? q5_0_lo(panel, st, k, lane0, state) : q5_0_hi(panel, st, k, lane0, state);
}

// y (N,OC), x (N,C), w (OC,C) q5_0 panels; N <= BC_ROWS_MAX
static void prows_q5_0(const bc_gemm *g, size_t o0, size_t o1)
{
    prows_split(BC_DTYPE_Q5_0, sizeof(bc_q5_block), RACC, 32, 16, q5_0_state, q5_0_lo, q5_0_hi,
                g, o0, o1);
}

// bp (kc, nc) float32 panels <- w (OC,C) q5_0 panels, columns o0.., rows p0..
static void panels_q5_0(float *bp, const bc_gemm *g, size_t o0, size_t nc, size_t p0, size_t kc)
{
    load_panels(BC_DTYPE_Q5_0, 16, q5_0_state, q5_0_vec, bp, g, o0, nc, p0, kc);
}

/* ---- q4_k panels: a scale and a min for each sub-block of 32 ------------- */

/* sub-block (k0 % 256) / 32's s = d sc and -(dmin m): both products exact
 * (an 11-bit half times a 6-bit integer) */
BC_INLINE wf_st k_state(const unsigned char *panel, size_t st, size_t k0, size_t lane0)
{
    const bc_q4k_block *bl = (const bc_q4k_block *)(panel + k0 / 256 * st);
    const size_t j = k0 % 256 / 32;
    wf_st r;
    r.s = vmul(vload_half(bl->d + lane0), vload_u8(bl->sc[j] + lane0));
    r.m = vneg(vmul(vload_half(bl->dmin + lane0), vload_u8(bl->m[j] + lane0)));
    return r;
}

/* k_state, s / 16 for the odd sub-blocks (the high nibbles, which q4_k_hi reads as 16
 * times themselves): exact (a power of two; at least 2^-28, a normal float) */
BC_INLINE wf_st q4_k_state(const unsigned char *panel, size_t st, size_t k0, size_t lane0)
{
    wf_st r = k_state(panel, st, k0, lane0);
    if (k0 % 64 >= 32)
        r.s = vmul(r.s, vset1(0.0625f));
    return r;
}

/* s * nibble - dmin m (the low nibbles, even sub-blocks) and s / 16 * (16 nibble) -
 * dmin m (the high ones): the product n s is exact (21 bits) either way, so the FMA
 * rounds once, as the file's dequantisation (d sc) q - dmin m does. Decoding reads
 * each half of 64 rows with its reader (prows_split), so that no k chooses. */
BC_INLINE V q4_k_half(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state,
                      int hi)
{
    const bc_q4k_block *bl = (const bc_q4k_block *)(panel + k / 256 * st);
    const size_t t = k % 256;
    return vfma(vload_nibx(bl->q[32 * (t / 64) + t % 32] + lane0, hi), state.s, state.m);
}

BC_INLINE V q4_k_lo(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    return q4_k_half(panel, st, k, lane0, state, 0);
}

BC_INLINE V q4_k_hi(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    return q4_k_half(panel, st, k, lane0, state, 1);
}

/* q4_k_lo or q4_k_hi by the row (the GEMM's copy) */
BC_INLINE V q4_k_vec(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    return k % 64 < 32 ? q4_k_lo(panel, st, k, lane0, state) : q4_k_hi(panel, st, k, lane0, state);
}

/* q4_k decodes at most 8 panels at a time on every instruction set (AVX2's RACC;
 * AVX-512 would take 16 for one row): on an AMD Zen 5 one row read 28-30 G weights
 * a second on 8 against 25-26 on 16 (3072 x 768 products), and a GPT-2 held in
 * q4_k decoded 199-211 tokens/s against 156-173 on one thread; two and three rows
 * take 8 and 5 either way. On 8, q6_k read slower and q5_0 within a few percent. On
 * an AMD Zen 4 with AVX2 (4 panels: their states do not fit in its 16 registers) 2
 * panels (which fit) and 3 took 1.05 and 1.25 times the time of 4 (2048 x 2048). */
#define Q4K_PANELS 8

// y (N,OC), x (N,C), w (OC,C) q4_k panels; N <= BC_ROWS_MAX
static void prows_q4_k(const bc_gemm *g, size_t o0, size_t o1)
{
    prows_split(BC_DTYPE_Q4_K, sizeof(bc_q4k_block), Q4K_PANELS, 64, 32, q4_k_state, q4_k_lo,
                q4_k_hi, g, o0, o1);
}

// bp (kc, nc) float32 panels <- w (OC,C) q4_k panels, columns o0.., rows p0..
static void panels_q4_k(float *bp, const bc_gemm *g, size_t o0, size_t nc, size_t p0, size_t kc)
{
    load_panels(BC_DTYPE_Q4_K, 32, q4_k_state, q4_k_vec, bp, g, o0, nc, p0, kc);
}

/* ---- q6_k panels: as q8_0, an int8 scale for each sub-block of 16 ---------- */

/* sub-block (k0 % 256) / 16's s = d sc: exact (an 11-bit half times an 8-bit
 * integer) */
BC_INLINE wf_st q6_k_state(const unsigned char *panel, size_t st, size_t k0, size_t lane0)
{
    const bc_q6k_block *bl = (const bc_q6k_block *)(panel + k0 / 256 * st);
    return wf_scale(vmul(vload_half(bl->d + lane0), vload_i8(bl->sc[k0 % 256 / 16] + lane0)));
}

/* s (q - 32): exact (at most 23 significant bits), the file's dequantised weight */
BC_INLINE V q6_k_vec(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    const bc_q6k_block *bl = (const bc_q6k_block *)(panel + k / 256 * st);
    return vmul(vload_i8(&bl->q[k % 256][lane0]), state.s);
}

// y (N,OC), x (N,C), w (OC,C) q6_k panels; N <= BC_ROWS_MAX
static void prows_q6_k(const bc_gemm *g, size_t o0, size_t o1)
{
    prows_part(BC_DTYPE_Q6_K, sizeof(bc_q6k_block), RACC, 16, q6_k_state, q6_k_vec, g, o0, o1);
}

// bp (kc, nc) float32 panels <- w (OC,C) q6_k panels, columns o0.., rows p0..
static void panels_q6_k(float *bp, const bc_gemm *g, size_t o0, size_t nc, size_t p0, size_t kc)
{
    load_panels(BC_DTYPE_Q6_K, 16, q6_k_state, q6_k_vec, bp, g, o0, nc, p0, kc);
}

/* ---- q4_1 and q5_1 panels: a scale and a minimum for each block of 32 ---- */

/* the block's d and m: the weight is fma(q, d, m), d q exact (at most 16 bits), so
 * the FMA rounds once, as the file's dequantisation d q + m does */
BC_INLINE wf_st q4_1_state(const unsigned char *panel, size_t st, size_t k0, size_t lane0)
{
    const bc_q41_block *bl = (const bc_q41_block *)(panel + k0 / 32 * st);
    wf_st r;
    r.s = vload_half(bl->d + lane0);
    r.m = vload_half(bl->m + lane0);
    return r;
}

BC_INLINE V q4_1_lo(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    const bc_q41_block *bl = (const bc_q41_block *)(panel + k / 32 * st);
    return vfma(vload_nib(&bl->q[k % 16][lane0], 0), state.s, state.m);
}

BC_INLINE V q4_1_hi(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    const bc_q41_block *bl = (const bc_q41_block *)(panel + k / 32 * st);
    return vfma(vload_nib(&bl->q[k % 16][lane0], 1), state.s, state.m);
}

BC_INLINE V q4_1_vec(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    return k % 32 < 16 ? q4_1_lo(panel, st, k, lane0, state) : q4_1_hi(panel, st, k, lane0, state);
}

// y (N,OC), x (N,C), w (OC,C) q4_1 panels; N <= BC_ROWS_MAX
static void prows_q4_1(const bc_gemm *g, size_t o0, size_t o1)
{
    prows_split(BC_DTYPE_Q4_1, sizeof(bc_q41_block), RACC, 32, 16, q4_1_state, q4_1_lo, q4_1_hi,
                g, o0, o1);
}

// bp (kc, nc) float32 panels <- w (OC,C) q4_1 panels, columns o0.., rows p0..
static void panels_q4_1(float *bp, const bc_gemm *g, size_t o0, size_t nc, size_t p0, size_t kc)
{
    load_panels(BC_DTYPE_Q4_1, 32, q4_1_state, q4_1_vec, bp, g, o0, nc, p0, kc);
}

/* (q5_1's d and m lie where q4_1's do) */
BC_INLINE V q5_1_lo(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    const bc_q51_block *bl = (const bc_q51_block *)(panel + k / 32 * st);
    const size_t j = k % 16;
    return vfma(vload_q5w(&bl->q[j][lane0], 0, bl->qh + lane0, (unsigned)j), state.s, state.m);
}

BC_INLINE V q5_1_hi(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    const bc_q51_block *bl = (const bc_q51_block *)(panel + k / 32 * st);
    const size_t j = k % 16;
    return vfma(vload_q5w(&bl->q[j][lane0], 1, bl->qh + lane0, (unsigned)j + 16), state.s,
                state.m);
}

BC_INLINE V q5_1_vec(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    return k % 32 < 16 ? q5_1_lo(panel, st, k, lane0, state) : q5_1_hi(panel, st, k, lane0, state);
}

// y (N,OC), x (N,C), w (OC,C) q5_1 panels; N <= BC_ROWS_MAX
static void prows_q5_1(const bc_gemm *g, size_t o0, size_t o1)
{
    prows_split(BC_DTYPE_Q5_1, sizeof(bc_q51_block), RACC, 32, 16, q4_1_state, q5_1_lo, q5_1_hi,
                g, o0, o1);
}

// bp (kc, nc) float32 panels <- w (OC,C) q5_1 panels, columns o0.., rows p0..
static void panels_q5_1(float *bp, const bc_gemm *g, size_t o0, size_t nc, size_t p0, size_t kc)
{
    load_panels(BC_DTYPE_Q5_1, 32, q4_1_state, q5_1_vec, bp, g, o0, nc, p0, kc);
}

/* ---- q5_k panels: q4_k's with a fifth bit a weight ----------------------- */

/* (k_state: q5_k's d, dmin, sc and m lie where q4_k's do) s * q - dmin m: s * q
 * exact (22 bits), so the FMA rounds once, as the file's dequantisation does. The
 * five bits are put together on the panel's 16 bytes before widening (vload_q5k);
 * decoding reads each half of 64 rows with its reader (prows_split). */
BC_INLINE V q5_k_half(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state,
                      int hi)
{
    const bc_q5k_block *bl = (const bc_q5k_block *)(panel + k / 256 * st);
    const size_t t = k % 256;
    return vfma(vload_q5k(bl->q[32 * (t / 64) + t % 32], bl->qh[t % 32], lane0, hi,
                          (unsigned)(t / 32)),
                state.s, state.m);
}

BC_INLINE V q5_k_lo(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    return q5_k_half(panel, st, k, lane0, state, 0);
}

BC_INLINE V q5_k_hi(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    return q5_k_half(panel, st, k, lane0, state, 1);
}

/* q5_k_lo or q5_k_hi by the row (the GEMM's copy) */
BC_INLINE V q5_k_vec(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    return k % 64 < 32 ? q5_k_lo(panel, st, k, lane0, state) : q5_k_hi(panel, st, k, lane0, state);
}

// y (N,OC), x (N,C), w (OC,C) q5_k panels; N <= BC_ROWS_MAX
static void prows_q5_k(const bc_gemm *g, size_t o0, size_t o1)
{
    prows_split(BC_DTYPE_Q5_K, sizeof(bc_q5k_block), Q4K_PANELS, 64, 32, k_state, q5_k_lo,
                q5_k_hi, g, o0, o1);
}

// bp (kc, nc) float32 panels <- w (OC,C) q5_k panels, columns o0.., rows p0..
static void panels_q5_k(float *bp, const bc_gemm *g, size_t o0, size_t nc, size_t p0, size_t kc)
{
    load_panels(BC_DTYPE_Q5_K, 32, k_state, q5_k_vec, bp, g, o0, nc, p0, kc);
}

/* ---- iq4_nl and iq4_xs panels: nibbles index IQ4_NL's 16 values ---------- */

/* kvalues_iq4nl as floats (vload_lut16's table) */
static const float iq4_lut[16] = {-127.0f, -104.0f, -83.0f, -65.0f, -49.0f, -35.0f, -22.0f,
                                  -10.0f,  1.0f,    13.0f,  25.0f,  38.0f,  53.0f,  69.0f,
                                  89.0f,   113.0f};

/* (q4_0_state's portable form: the block's d) d kv: exact (18 bits), the file's weight */
BC_INLINE wf_st iq4_nl_state(const unsigned char *panel, size_t st, size_t k0, size_t lane0)
{
    return wf_scale(vload_half(((const bc_q4_block *)(panel + k0 / 32 * st))->d + lane0));
}

BC_INLINE V iq4_nl_lo(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    const bc_q4_block *bl = (const bc_q4_block *)(panel + k / 32 * st);
    return vmul(vload_lut16(&bl->q[k % 16][lane0], 0, iq4_lut), state.s);
}

BC_INLINE V iq4_nl_hi(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    const bc_q4_block *bl = (const bc_q4_block *)(panel + k / 32 * st);
    return vmul(vload_lut16(&bl->q[k % 16][lane0], 1, iq4_lut), state.s);
}

BC_INLINE V iq4_nl_vec(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    return k % 32 < 16 ? iq4_nl_lo(panel, st, k, lane0, state) : iq4_nl_hi(panel, st, k, lane0, state);
}

// y (N,OC), x (N,C), w (OC,C) iq4_nl panels; N <= BC_ROWS_MAX
static void prows_iq4_nl(const bc_gemm *g, size_t o0, size_t o1)
{
    prows_split(BC_DTYPE_IQ4_NL, sizeof(bc_q4_block), RACC, 32, 16, iq4_nl_state, iq4_nl_lo,
                iq4_nl_hi, g, o0, o1);
}

// bp (kc, nc) float32 panels <- w (OC,C) iq4_nl panels, columns o0.., rows p0..
static void panels_iq4_nl(float *bp, const bc_gemm *g, size_t o0, size_t nc, size_t p0, size_t kc)
{
    load_panels(BC_DTYPE_IQ4_NL, 32, iq4_nl_state, iq4_nl_vec, bp, g, o0, nc, p0, kc);
}

/* sub-block (k0 % 256) / 32's s = d sc: exact (an 11-bit half times 6 bits) */
BC_INLINE wf_st iq4_xs_state(const unsigned char *panel, size_t st, size_t k0, size_t lane0)
{
    const bc_iq4xs_block *bl = (const bc_iq4xs_block *)(panel + k0 / 256 * st);
    return wf_scale(vmul(vload_half(bl->d + lane0), vload_i8(bl->sc[k0 % 256 / 32] + lane0)));
}

/* s kv: exact (24 bits), the file's weight */
BC_INLINE V iq4_xs_vec(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    const bc_iq4xs_block *bl = (const bc_iq4xs_block *)(panel + k / 256 * st);
    const size_t t = k % 256;
    return vmul(vload_lut16(bl->q[16 * (t / 32) + t % 16] + lane0, (int)(t % 32 / 16), iq4_lut),
                state.s);
}

// y (N,OC), x (N,C), w (OC,C) iq4_xs panels; N <= BC_ROWS_MAX
static void prows_iq4_xs(const bc_gemm *g, size_t o0, size_t o1)
{
    prows_part(BC_DTYPE_IQ4_XS, sizeof(bc_iq4xs_block), Q4K_PANELS, 32, iq4_xs_state, iq4_xs_vec,
               g, o0, o1);
}

// bp (kc, nc) float32 panels <- w (OC,C) iq4_xs panels, columns o0.., rows p0..
static void panels_iq4_xs(float *bp, const bc_gemm *g, size_t o0, size_t nc, size_t p0, size_t kc)
{
    load_panels(BC_DTYPE_IQ4_XS, 32, iq4_xs_state, iq4_xs_vec, bp, g, o0, nc, p0, kc);
}

/* ---- q2_k and q3_k panels: 2-bit quants, a scale for each sub-block of 16 -- */

/* sub-block (k0 % 256) / 16's s = d sc and -(dmin m): both products exact (an
 * 11-bit half times a 4-bit integer) */
BC_INLINE wf_st q2_k_state(const unsigned char *panel, size_t st, size_t k0, size_t lane0)
{
    const bc_q2k_block *bl = (const bc_q2k_block *)(panel + k0 / 256 * st);
    const uint8_t *sc = bl->sc[k0 % 256 / 16] + lane0;
    wf_st r;
    r.s = vmul(vload_half(bl->d + lane0), vload_bits(sc, 0, 15));
    r.m = vneg(vmul(vload_half(bl->dmin + lane0), vload_bits(sc, 4, 15)));
    return r;
}

/* s q - dmin m: s q exact (17 bits), so the FMA rounds once, as the file's
 * dequantisation (d sc) q - dmin m does */
BC_INLINE V q2_k_vec(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    const bc_q2k_block *bl = (const bc_q2k_block *)(panel + k / 256 * st);
    const size_t t = k % 256;
    return vfma(vload_bits(bl->q[bc_k2_byte(t)] + lane0, bc_k2_shift(t), 3), state.s, state.m);
}

// y (N,OC), x (N,C), w (OC,C) q2_k panels; N <= BC_ROWS_MAX
static void prows_q2_k(const bc_gemm *g, size_t o0, size_t o1)
{
    prows_part(BC_DTYPE_Q2_K, sizeof(bc_q2k_block), RACC, 16, q2_k_state, q2_k_vec, g, o0, o1);
}

// bp (kc, nc) float32 panels <- w (OC,C) q2_k panels, columns o0.., rows p0..
static void panels_q2_k(float *bp, const bc_gemm *g, size_t o0, size_t nc, size_t p0, size_t kc)
{
    load_panels(BC_DTYPE_Q2_K, 16, q2_k_state, q2_k_vec, bp, g, o0, nc, p0, kc);
}

/* sub-block (k0 % 256) / 16's s = d sc: exact (an 11-bit half times 6 bits) */
BC_INLINE wf_st q3_k_state(const unsigned char *panel, size_t st, size_t k0, size_t lane0)
{
    const bc_q3k_block *bl = (const bc_q3k_block *)(panel + k0 / 256 * st);
    return wf_scale(vmul(vload_half(bl->d + lane0), vload_i8(bl->sc[k0 % 256 / 16] + lane0)));
}

/* s (low + 4 high - 4): the integer exact, the product exact (20 bits): the file's
 * dequantised weight */
BC_INLINE V q3_k_vec(const unsigned char *panel, size_t st, size_t k, size_t lane0, wf_st state)
{
    const bc_q3k_block *bl = (const bc_q3k_block *)(panel + k / 256 * st);
    const size_t t = k % 256;
    const V lo = vload_bits(bl->q[bc_k2_byte(t)] + lane0, bc_k2_shift(t), 3);
    const V hi = vload_bits(bl->hm[t % 32] + lane0, (unsigned)(t / 32), 1);
    return vmul(vadd(lo, vfma(hi, vset1(4.0f), vset1(-4.0f))), state.s);
}

// y (N,OC), x (N,C), w (OC,C) q3_k panels; N <= BC_ROWS_MAX
static void prows_q3_k(const bc_gemm *g, size_t o0, size_t o1)
{
    prows_part(BC_DTYPE_Q3_K, sizeof(bc_q3k_block), RACC, 16, q3_k_state, q3_k_vec, g, o0, o1);
}

// bp (kc, nc) float32 panels <- w (OC,C) q3_k panels, columns o0.., rows p0..
static void panels_q3_k(float *bp, const bc_gemm *g, size_t o0, size_t nc, size_t p0, size_t kc)
{
    load_panels(BC_DTYPE_Q3_K, 16, q3_k_state, q3_k_vec, bp, g, o0, nc, p0, kc);
}

/* ---- the entries of the kernel table's wf, by BC_WF_* -------------------- */

/* (a caller's row-major float32 rows: dot products to decode, pack_rows to copy;
 * q8_0i, q4_0i, q5_0i, q4_ki and q6_ki: fast_intdot.h, bfloat16i: fast_bf16dot.h) */
#define WF_KERNELS                                                    \
    [BC_WF_ROWS] = {rows_dot, pack_rows},                             \
    [BC_WF_PANEL(BC_DTYPE_F32)] = {prows_f32, NULL},                  \
    [BC_WF_PANEL(BC_DTYPE_BF16)] = {prows_bf16, panels_bf16},         \
    [BC_WF_PANEL(BC_DTYPE_Q8_0)] = {prows_q8_0, panels_q8_0},         \
    [BC_WF_PANEL(BC_DTYPE_Q4_0)] = {prows_q4_0, panels_q4_0},         \
    [BC_WF_PANEL(BC_DTYPE_F16)] = {prows_f16, panels_f16},            \
    [BC_WF_PANEL(BC_DTYPE_Q5_0)] = {prows_q5_0, panels_q5_0},         \
    [BC_WF_PANEL(BC_DTYPE_Q4_K)] = {prows_q4_k, panels_q4_k},         \
    [BC_WF_PANEL(BC_DTYPE_Q6_K)] = {prows_q6_k, panels_q6_k},         \
    [BC_WF_PANEL(BC_DTYPE_Q4_1)] = {prows_q4_1, panels_q4_1},         \
    [BC_WF_PANEL(BC_DTYPE_Q5_1)] = {prows_q5_1, panels_q5_1},         \
    [BC_WF_PANEL(BC_DTYPE_Q5_K)] = {prows_q5_k, panels_q5_k},         \
    [BC_WF_PANEL(BC_DTYPE_IQ4_NL)] = {prows_iq4_nl, panels_iq4_nl},   \
    [BC_WF_PANEL(BC_DTYPE_IQ4_XS)] = {prows_iq4_xs, panels_iq4_xs},   \
    [BC_WF_PANEL(BC_DTYPE_Q2_K)] = {prows_q2_k, panels_q2_k},         \
    [BC_WF_PANEL(BC_DTYPE_Q3_K)] = {prows_q3_k, panels_q3_k},         \
    [BC_WF_PANEL(BC_DTYPE_Q8_0I)] = {NULL, NULL, xq_part_q8_0i, xq_rows_q8, xq_part_q8_0i},     \
    [BC_WF_PANEL(BC_DTYPE_Q4_0I)] = {NULL, NULL, xq_part_q4_0i, xq_rows_q8, xq_part_q4_0i},     \
    [BC_WF_PANEL(BC_DTYPE_Q5_0I)] = {NULL, NULL, xq_part_q5_0i, xq_rows_q8, xq_part_q5_0i},     \
    [BC_WF_PANEL(BC_DTYPE_Q4_KI)] = {NULL, NULL, xq_part_q4_ki, xq_rows_q4k, xq_part_q4_ki},    \
    [BC_WF_PANEL(BC_DTYPE_Q6_KI)] = {NULL, NULL, xq_part_q6_ki, xq_rows_q6, xq_part_q6_ki},     \
    [BC_WF_PANEL(BC_DTYPE_Q5_KI)] = {NULL, NULL, xq_part_q5_ki, xq_rows_q4k, xq_part_q5_ki},    \
    [BC_WF_PANEL(BC_DTYPE_IQ4_NLI)] = {NULL, NULL, xq_part_iq4_nli, xq_rows_q8, xq_part_iq4_nli}, \
    [BC_WF_PANEL(BC_DTYPE_IQ4_XSI)] = {NULL, NULL, xq_part_iq4_xsi, xq_rows_q8, xq_part_iq4_xsi}, \
    [BC_WF_PANEL(BC_DTYPE_Q4_1I)] = {NULL, NULL, xq_part_q4_1i, xq_rows_q8, xq_part_q4_1i},     \
    [BC_WF_PANEL(BC_DTYPE_Q5_1I)] = {NULL, NULL, xq_part_q5_1i, xq_rows_q8, xq_part_q5_1i},     \
    [BC_WF_PANEL(BC_DTYPE_Q2_KI)] = {NULL, NULL, xq_part_q2_ki, xq_rows_k2, xq_part_q2_ki},     \
    [BC_WF_PANEL(BC_DTYPE_Q3_KI)] = {NULL, NULL, xq_part_q3_ki, xq_rows_k2, xq_part_q3_ki},     \
    [BC_WF_PANEL(BC_DTYPE_BF16I)] = {NULL, NULL, xq_part_bf16i, xq_rows_bf16, xq_part_bf16i},
