/* bc_format.h: the weight formats, one row of a traits table each (internal).
 *
 * A packed matrix (bc_engine.h) holds its rows in panels of BC_PANEL; what a
 * panel holds is the format's affair: a format is a block of `block` weights
 * of one row in `block_bytes` bytes, a panel of `cols` columns is
 * ceil(cols / block) blocks of each of its BC_PANEL rows, and the format says
 * how they lie (float32 and bfloat16 interleave the rows column by column,
 * q8_0 block by block; bfloat16 and float16 interleave their panels too, in
 * runs: bc_format_panel_at). Everything that is the same for every format (sizes,
 * checks of sizes and buffers, the walk over panels, threads) is written once
 * over this table (pack.c, linear.c); what differs is a row here and its
 * kernels in fast_formats.h (the decoding and the GEMM's copy on each
 * instruction set: the second half of the row, kept in the kernel table as
 * ggml keeps type_traits_cpu beside type_traits).
 *
 * A new format: its BC_DTYPE_* value (bc_engine.h, and BC_NDTYPE one more),
 * its row and scalar pack/unpack in formats.c (with, when its panels hold a
 * ggml type's blocks, that type and the moves of a row's blocks each way),
 * its kernels in fast_formats.h. Python reads the row (bc_dtype_traits_of).
 */
#ifndef BC_FORMAT_H
#define BC_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include "bc_engine.h"  /* BC_DTYPE_*, BC_NDTYPE */

/* Outputs (rows) per panel of a packed matrix, on every instruction set. */
#define BC_PANEL 16

/* Columns a format's pack receives at once: a multiple of every block. */
#define BC_FORMAT_CHUNK 256

/* One block of a q8_0 panel: the panel's 16 rows, 32 columns. */
typedef struct {
    uint16_t d[BC_PANEL];       /* the rows' scales (IEEE halves) */
    int8_t q[32][BC_PANEL];     /* q[k][row] */
} bc_q8_block;

/* One block of a q4_0 panel: the panel's 16 rows, 32 columns (ggml's block_q4_0
 * for each row, its 16 bytes interleaved with the other rows'). */
typedef struct {
    uint16_t d[BC_PANEL];       /* the rows' scales (IEEE halves) */
    uint8_t q[16][BC_PANEL];    /* q[j][row]: weight j low nibble, weight j + 16 high */
} bc_q4_block;

/* One block of a q5_0 panel: the panel's 16 rows, 32 columns (ggml's block_q5_0
 * for each row, its fifth bits and nibbles interleaved with the other rows'). */
typedef struct {
    uint16_t d[BC_PANEL];       /* the rows' scales (IEEE halves) */
    uint32_t qh[BC_PANEL];      /* qh[row]: bit j the fifth bit of weight j */
    uint8_t q[16][BC_PANEL];    /* q[j][row]: weight j's low four bits low, j + 16's high */
} bc_q5_block;
/* One super-block of a q4_k panel: the panel's 16 rows, 256 columns (ggml's
 * block_q4_K for each row, the 6-bit scales and mins one byte each, every
 * field interleaved with the other rows'). */
typedef struct {
    uint16_t d[BC_PANEL];       /* the rows' super-block scales (IEEE halves) */
    uint16_t dmin[BC_PANEL];    /* and their scales of the mins */
    uint8_t sc[8][BC_PANEL];    /* sc[j][row]: sub-block j's scale, 0..63 */
    uint8_t m[8][BC_PANEL];     /* m[j][row]: its min, 0..63 */
    uint8_t q[128][BC_PANEL];   /* q[b][row]: byte b of the row's Q4_K qs */
} bc_q4k_block;

/* One super-block of a q6_k panel: the panel's 16 rows, 256 columns (ggml's
 * block_q6_K for each row, its 6-bit quants widened to a signed byte each,
 * q - 32, so decoding converts them as q8_0's: 274 bytes a row against the
 * file's 210; every field interleaved with the other rows'). */
typedef struct {
    uint16_t d[BC_PANEL];       /* the rows' super-block scales (IEEE halves) */
    int8_t sc[16][BC_PANEL];    /* sc[j][row]: sub-block j's (16 weights) scale */
    int8_t q[256][BC_PANEL];    /* q[t][row]: weight t's six-bit value less 32, -32..31 */
} bc_q6k_block;

/* One block of a q4_1 panel: the panel's 16 rows, 32 columns (ggml's block_q4_1
 * for each row: its scale and its minimum, interleaved with the other rows') */
typedef struct {
    uint16_t d[BC_PANEL];       /* the rows' scales (IEEE halves) */
    uint16_t m[BC_PANEL];       /* the rows' minima (IEEE halves) */
    uint8_t q[16][BC_PANEL];    /* q[j][row]: weight j low nibble, weight j + 16 high */
} bc_q41_block;

/* One block of a q5_1 panel: the panel's 16 rows, 32 columns (ggml's block_q5_1
 * for each row, interleaved with the other rows') */
typedef struct {
    uint16_t d[BC_PANEL];       /* the rows' scales (IEEE halves) */
    uint16_t m[BC_PANEL];       /* the rows' minima (IEEE halves) */
    uint32_t qh[BC_PANEL];      /* qh[row]: bit j the fifth bit of weight j */
    uint8_t q[16][BC_PANEL];    /* q[j][row]: weight j's low four bits low, j + 16's high */
} bc_q51_block;

/* One super-block of a q5_k panel: the panel's 16 rows, 256 columns (ggml's
 * block_q5_K for each row: q4_k's fields at q4_k's offsets, the fifth bits
 * between the mins and the nibbles, every field interleaved with the other rows') */
typedef struct {
    uint16_t d[BC_PANEL];       /* the rows' super-block scales (IEEE halves) */
    uint16_t dmin[BC_PANEL];    /* and their scales of the mins */
    uint8_t sc[8][BC_PANEL];    /* sc[j][row]: sub-block j's scale, 0..63 */
    uint8_t m[8][BC_PANEL];     /* m[j][row]: its min, 0..63 */
    uint8_t qh[32][BC_PANEL];   /* qh[i][row]: bit j the fifth bit of sub-block j's weight i */
    uint8_t q[128][BC_PANEL];   /* q[b][row]: byte b of the row's Q5_K qs (as Q4_K's) */
} bc_q5k_block;

/* IQ4_NL's and IQ4_XS's 16 values (ggml's kvalues_iq4nl): nibble n stands for
 * bc_kvalues_iq4nl[n] times the block's scale */
static const int8_t bc_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
/* the same + 128 (iq4_nli's unsigned bytes for vpdpbusd) */
static const uint8_t bc_kvalues_iq4nl_u8[16] = {1,   24,  45,  63,  79,  93,  106, 118,
                                                129, 141, 153, 166, 181, 197, 217, 241};

/* One super-block of an iq4_xs panel: the panel's 16 rows, 256 columns (ggml's
 * block_iq4_xs for each row, its 6-bit scales a signed byte each, ls - 32; an
 * iq4_nl panel's blocks are bc_q4_block: q4_0's layout) */
typedef struct {
    uint16_t d[BC_PANEL];       /* the rows' super-block scales (IEEE halves) */
    int8_t sc[8][BC_PANEL];     /* sc[j][row]: sub-block j's scale, -32..31 */
    uint8_t q[128][BC_PANEL];   /* q[b][row]: byte b of the row's qs (sub-block b / 16:
                                 * low nibble weight b % 16, high b % 16 + 16) */
} bc_iq4xs_block;

/* One super-block of a q2_k panel: the panel's 16 rows, 256 columns (ggml's
 * block_q2_K for each row, every field interleaved with the other rows') */
typedef struct {
    uint16_t d[BC_PANEL];       /* the rows' super-block scales (IEEE halves) */
    uint16_t dmin[BC_PANEL];    /* and their scales of the mins */
    uint8_t sc[16][BC_PANEL];   /* sc[j][row]: sub-block j's scale (low 4 bits), min (high) */
    uint8_t q[64][BC_PANEL];    /* q[b][row]: byte b of the row's qs (2 bits a weight) */
} bc_q2k_block;

/* One super-block of a q3_k panel: the panel's 16 rows, 256 columns (ggml's
 * block_q3_K for each row, its 6-bit scales a signed byte each, s - 32) */
typedef struct {
    uint16_t d[BC_PANEL];       /* the rows' super-block scales (IEEE halves) */
    int8_t sc[16][BC_PANEL];    /* sc[j][row]: sub-block j's (16 weights) scale, -32..31 */
    uint8_t hm[32][BC_PANEL];   /* hm[i][row]: byte i of the row's hmask (bit t / 32: weight
                                 * t's high bit, t % 32 == i) */
    uint8_t q[64][BC_PANEL];    /* q[b][row]: byte b of the row's qs (as q2_k's) */
} bc_q3k_block;

/* Where weight t (0..255) of a Q2_K / Q3_K super-block keeps its two low bits:
 * byte bc_k2_byte(t) of qs, from bit bc_k2_shift(t) */
static inline size_t bc_k2_byte(size_t t)
{
    return 32 * (t / 128) + t % 32;
}

static inline unsigned bc_k2_shift(size_t t)
{
    return (unsigned)(2 * (t % 128 / 32));
}

/* One block of a q8_0i panel: q8_0's weights laid out for integer dot products
 * (vpdpbusd multiplies 4 bytes of 16 rows per 64-byte vector by 4 bytes of x):
 * weight q (-127..127) of row l, column 4j + t stored as u[j][l][t] = q + 128. */
typedef struct {
    uint16_t d[BC_PANEL];       /* the rows' scales (IEEE halves) */
    uint8_t u[8][BC_PANEL][4];  /* u[j][row][t] = q[4j + t] + 128 */
} bc_q8i_block;

/* One block of a q4_0i panel: q4_0's bytes laid out for integer dot products
 * as q8_0i's (a 64-byte vector holds 4 bytes of each of the 16 rows: their low
 * nibbles are weights 4j..4j+3, their high ones 4j+16..4j+19). */
typedef struct {
    uint16_t d[BC_PANEL];       /* the rows' scales (IEEE halves) */
    uint8_t u[4][BC_PANEL][4];  /* u[j][row][t] = byte 4j + t of the row's q4_0 block */
} bc_q4i_block;

/* One block of a q5_0i panel: q4_0i's scales and nibbles (the same offsets),
 * then the fifth bits, one 64-bit word per vector of nibbles and per half:
 * bit 4 row + t of h[j][s] is the fifth bit of the row's weight 4j + t + 16s,
 * the byte lane of that weight's nibble in u[j] (AVX-512 takes it as a mask). */
typedef struct {
    uint16_t d[BC_PANEL];       /* the rows' scales (IEEE halves) */
    uint8_t u[4][BC_PANEL][4];  /* u[j][row][t] = byte 4j + t of the row's q5_0 nibbles */
    uint64_t h[4][2];           /* h[j][s]: bit 4 row + t the fifth bit of weight 4j + t + 16s */
} bc_q5i_block;

/* Weight k (0..31) of row l of a q5_0i block: its five bits, 0..31 (q + 16) */
static inline int bc_q5i_quant(const bc_q5i_block *b, size_t l, size_t k)
{
    const size_t i = k % 16;
    const int byte = b->u[i / 4][l][i % 4];
    return (k < 16 ? byte & 15 : byte >> 4) | (int)((b->h[i / 4][k / 16] >> (4 * l + i % 4)) & 1u) << 4;
}

/* One block of a q4_1i panel: q4_0i's scales and nibbles (the same fields at
 * the same offsets as bc_q4i_block: its kernels read them as q4_0i's; the
 * nibbles unsigned, 0..15), then q4_1's minima: 20 bytes a row, the file's. */
typedef struct {
    uint16_t d[BC_PANEL];       /* the rows' scales (IEEE halves) */
    uint8_t u[4][BC_PANEL][4];  /* u[j][row][t] = byte 4j + t of the row's q4_1 nibbles */
    uint16_t m[BC_PANEL];       /* the rows' minima (IEEE halves) */
} bc_q41i_block;

/* One block of a q5_1i panel: q5_0i's scales, nibbles and fifth bits (the same
 * fields at the same offsets as bc_q5i_block; q = nibble | bit << 4, 0..31),
 * then q5_1's minima: 24 bytes a row, the file's. */
typedef struct {
    uint16_t d[BC_PANEL];       /* the rows' scales (IEEE halves) */
    uint8_t u[4][BC_PANEL][4];  /* u[j][row][t] = byte 4j + t of the row's q5_1 nibbles */
    uint64_t h[4][2];           /* h[j][s]: bit 4 row + t the fifth bit of weight 4j + t + 16s */
    uint16_t m[BC_PANEL];       /* the rows' minima (IEEE halves) */
} bc_q51i_block;

/* One super-block of a q4_ki panel: q4_k's scales (the same fields at the
 * same offsets as bc_q4k_block), then its nibbles laid out for integer dot
 * products as q4_0i's: a 64-byte vector holds 4 bytes of each of the 16 rows,
 * u[g] bytes 4g..4g+3 of the rows' Q4_K qs (sub-block 2 (g / 8) the low
 * nibbles, 2 (g / 8) + 1 the high ones, weights 4 (g % 8)..). */
typedef struct {
    uint16_t d[BC_PANEL];       /* the rows' super-block scales (IEEE halves) */
    uint16_t dmin[BC_PANEL];    /* and their scales of the mins */
    uint8_t sc[8][BC_PANEL];    /* sc[j][row]: sub-block j's scale, 0..63 */
    uint8_t m[8][BC_PANEL];     /* m[j][row]: its min, 0..63 */
    uint8_t u[32][BC_PANEL][4]; /* u[g][row][t] = byte 4g + t of the row's Q4_K qs */
} bc_q4ki_block;

/* Weight w (0..255) of row l of Q4_K's qs laid 4 bytes by 4 per row (u, as
 * q4_ki's and q5_ki's): its nibble, 0..15 (sub-block w / 32 of the pair w / 64:
 * the low nibbles of the pair's 32 bytes, then the high) */
static inline int bc_qk_nibble(const uint8_t u[32][BC_PANEL][4], size_t l, size_t w)
{
    const size_t byte = 32 * (w / 64) + w % 32;
    const int v = u[byte / 4][l][byte % 4];
    return w / 32 % 2 ? v >> 4 : v & 15;
}

/* Weight w (0..255) of row l of a q4_ki super-block: its nibble, 0..15 */
static inline int bc_q4ki_nibble(const bc_q4ki_block *b, size_t l, size_t w)
{
    return bc_qk_nibble(b->u, l, w);
}

/* One super-block of an iq4_xsi panel: iq4_xs's scales (the same fields at the
 * same offsets as bc_iq4xs_block), then its nibbles 4 bytes by 4 per row: u[g]
 * bytes 4g..4g+3 of the rows' qs (sub-block g / 4, as an iq4_nli block's u[g % 4]) */
typedef struct {
    uint16_t d[BC_PANEL];       /* the rows' super-block scales (IEEE halves) */
    int8_t sc[8][BC_PANEL];     /* sc[j][row]: sub-block j's scale, -32..31 */
    uint8_t u[32][BC_PANEL][4]; /* u[g][row][t] = byte 4g + t of the row's qs */
} bc_iq4xsi_block;

/* Weight w (0..255) of row l of an iq4_xsi super-block: its nibble, 0..15 */
static inline int bc_iq4xsi_nibble(const bc_iq4xsi_block *b, size_t l, size_t w)
{
    const size_t byte = 16 * (w / 32) + w % 16;
    const int v = b->u[byte / 4][l][byte % 4];
    return w % 32 < 16 ? v & 15 : v >> 4;
}

/* One super-block of a q2_ki panel: q2_k's scales (the same fields at the same
 * offsets as bc_q2k_block), then its 2-bit quants 4 bytes by 4 per row: u[g]
 * bytes 4g..4g+3 of the rows' qs (byte i, bits 2s..2s+1: weight 128 (i / 32) +
 * 32 s + i % 32, bc_k2_byte and bc_k2_shift) */
typedef struct {
    uint16_t d[BC_PANEL];       /* the rows' super-block scales (IEEE halves) */
    uint16_t dmin[BC_PANEL];    /* and their scales of the mins */
    uint8_t sc[16][BC_PANEL];   /* sc[j][row]: sub-block j's scale (low 4 bits), min (high) */
    uint8_t u[16][BC_PANEL][4]; /* u[g][row][t] = byte 4g + t of the row's qs */
} bc_q2ki_block;

/* Weight w (0..255) of row l of a q2_ki super-block: its two bits, 0..3 */
static inline int bc_q2ki_quant(const bc_q2ki_block *b, size_t l, size_t w)
{
    const size_t byte = bc_k2_byte(w);
    return b->u[byte / 4][l][byte % 4] >> bc_k2_shift(w) & 3;
}

/* One super-block of a q3_ki panel: q3_k's scales (the same fields at the same
 * offsets as bc_q3k_block), then its hmask and qs 4 bytes by 4 per row: h[g]
 * bytes 4g..4g+3 of the rows' hmask (bit k of byte i: the high bit of weight 32 k
 * + i), u[g] bytes 4g..4g+3 of their qs (as q2_ki's) */
typedef struct {
    uint16_t d[BC_PANEL];       /* the rows' super-block scales (IEEE halves) */
    int8_t sc[16][BC_PANEL];    /* sc[j][row]: sub-block j's (16 weights) scale, -32..31 */
    uint8_t h[8][BC_PANEL][4];  /* h[g][row][t] = byte 4g + t of the row's hmask */
    uint8_t u[16][BC_PANEL][4]; /* u[g][row][t] = byte 4g + t of the row's qs */
} bc_q3ki_block;

/* Weight w (0..255) of row l of a q3_ki super-block: low + 4 high, 0..7 (its value + 4) */
static inline int bc_q3ki_quant(const bc_q3ki_block *b, size_t l, size_t w)
{
    const size_t byte = bc_k2_byte(w), i = w % 32;
    return (b->u[byte / 4][l][byte % 4] >> bc_k2_shift(w) & 3)
           | (b->h[i / 4][l][i % 4] >> (w / 32) & 1) << 2;
}

/* One super-block of a q5_ki panel: q4_ki's scales (d, dmin, sc, m: the same
 * fields at the same offsets as bc_q4ki_block), then Q5_K's fifth bits 4 bytes
 * by 4 per row: h[g] bytes 4g..4g+3 of the rows' Q5_K qh (bit j of byte i: the
 * fifth bit of sub-block j's weight i), then the nibbles as q4_ki's u. The
 * fifth bits come before the nibbles so that a decoding step, which reads h[g]
 * and u[j / 2 * 8 + g] together for every sub-block j, first touches the
 * block's bytes in increasing order (the hardware prefetcher's streams). */
typedef struct {
    uint16_t d[BC_PANEL];       /* the rows' super-block scales (IEEE halves) */
    uint16_t dmin[BC_PANEL];    /* and their scales of the mins */
    uint8_t sc[8][BC_PANEL];    /* sc[j][row]: sub-block j's scale, 0..63 */
    uint8_t m[8][BC_PANEL];     /* m[j][row]: its min, 0..63 */
    uint8_t h[8][BC_PANEL][4];  /* h[g][row][t] = byte 4g + t of the row's Q5_K qh */
    uint8_t u[32][BC_PANEL][4]; /* u[g][row][t] = byte 4g + t of the row's Q5_K qs */
} bc_q5ki_block;

/* Weight w (0..255) of row l of a q5_ki super-block: its five bits, 0..31 */
static inline int bc_q5ki_quant(const bc_q5ki_block *b, size_t l, size_t w)
{
    const size_t i = w % 32;
    return bc_qk_nibble(b->u, l, w) | (b->h[i / 4][l][i % 4] >> (w / 32) & 1) << 4;
}

/* One super-block of a q6_ki panel: q6_k's scales and the file's own bits
 * (not widened: 210 bytes a row), its ql and qh bytes 4 by 4 per row so that
 * a 64-byte vector holds 4 bytes of each of the 16 rows (bc_engine.h says
 * which weight each bit is). The bits by halves (weights 128h..128h+127) and,
 * in a half, by the groups that make the same inputs' weights: qh row 8h + g
 * with ql rows 16h + g and 16h + 8 + g (g = 0..7), side by side, so that a
 * decoding step, which reads a group at a time (q6ki_rows), reads the block's
 * bytes once, in increasing order (the hardware prefetcher's one stream). Row g
 * of the file's ql (qh) is BC_Q6KI_QL(b, g) (BC_Q6KI_QH(b, g)). */
typedef struct {
    uint16_t d[BC_PANEL];        /* the rows' super-block scales (IEEE halves) */
    int8_t sc[16][BC_PANEL];     /* sc[j][row]: sub-block j's (16 weights) scale */
    struct {
        uint8_t qh[BC_PANEL][4];     /* qh[row][t] = byte 32h + 4g + t of the row's Q6_K qh */
        uint8_t ql[2][BC_PANEL][4];  /* ql[p][row][t] = byte 64h + 32p + 4g + t of its ql */
    } grp[2][8];                     /* grp[h][g] */
} bc_q6ki_block;

/* ql (qh) row g (0..31; 0..15) of a q6_ki super-block b: [row][t] = byte 4g + t
 * of the row's Q6_K ql (qh) */
#define BC_Q6KI_QL(b, g) ((b)->grp[(g) / 16][(g) % 8].ql[(g) % 16 / 8])
#define BC_Q6KI_QH(b, g) ((b)->grp[(g) / 8][(g) % 8].qh)

/* Where weight w (0..255) of a q6_ki (Q6_K) super-block keeps its bits: byte ql
 * of ql, its low four bits from bit ls (0 or 4), and byte qh of qh, its two high
 * bits from bit hs */
typedef struct {
    size_t ql, qh;
    unsigned ls, hs;
} bc_q6k_at;

static inline bc_q6k_at bc_q6k_where(size_t w)
{
    const size_t h = w / 128, q = w % 128 / 32, i = w % 32;
    const bc_q6k_at at = {64 * h + 32 * (q % 2) + i, 32 * h + i, q >= 2 ? 4u : 0u,
                          (unsigned)(2 * q)};
    return at;
}

/* Weight w of row l of a q6_ki super-block: its six bits, 0..63 (q + 32) */
static inline int bc_q6ki_quant(const bc_q6ki_block *b, size_t l, size_t w)
{
    const bc_q6k_at at = bc_q6k_where(w);
    const unsigned lo = (unsigned)(BC_Q6KI_QL(b, at.ql / 4)[l][at.ql % 4] >> at.ls) & 15u;
    const unsigned hi = (unsigned)(BC_Q6KI_QH(b, at.qh / 4)[l][at.qh % 4] >> at.hs) & 3u;
    return (int)(lo | hi << 4);
}

/* One pair of columns of a bfloat16i panel: vdpbf16ps multiplies a 32-bit lane
 * of bfloat16 pairs by another, so a 64-byte vector holds 2 columns of 16 rows:
 * u[l][t] the bfloat16 of row l, column 2j + t (subnormals flushed to zero). */
typedef struct {
    uint16_t u[BC_PANEL][2];
} bc_bf16i_pair;

/* the integer formats' panels (q8_0i's ... iq4_xsi's, q4_1i's, q5_1i's) interleave 4
 * by 4, block by block (bc_format_panel_at): a decoding tile takes whole runs
 * (fast_intdot.h) and reads each block of its panels in turn, one stretch of memory */
#define BC_INTDOT_GROUP 4

/* bfloat16i's panels interleave 4 by 4 (bc_format_panel_at): the panels its
 * decoding keeps in flight on AVX2, half of AVX-512's on one thread (two runs
 * at once; on threads, a thread's share is whole runs: linear.c) */
#define BC_BF16I_GROUP 4

/* bfloat16's and float16's panels interleave 4 by 4 too (bc_format_panel_at):
 * their decoding streams 8 panels on AVX-512 (fast_decode.h, PG_STREAM2),
 * two runs, where apart they were 8 streams of 32 bytes a row k; AVX2's 4
 * are one run */
#define BC_HALF_GROUP 4

typedef struct {
    const char *name;      /* the format's name in Python ("float32", "bfloat16", "q8_0") */
    size_t block;          /* weights of one row per block */
    size_t block_bytes;    /* bytes of one row's block */
    /* BC_OK, or BC_EVALUE when some w(r, c) = w[r * rs + c * cs] (r < rows, c < cols)
     * cannot be stored; NULL: every float can */
    int (*check)(const float *w, size_t rs, size_t cs, size_t rows, size_t cols);
    /* columns [k0, k0 + nk) of rows 0..nl-1 of a zeroed panel of `cols` columns
     * from tile (nl, nk) (row l at tile + l * ld); k0 a multiple of
     * BC_FORMAT_CHUNK, nk <= BC_FORMAT_CHUNK, nl <= BC_PANEL */
    void (*pack)(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                 size_t nk, size_t cols);
    /* out (cols) = row l (< BC_PANEL) of a panel of `cols` columns, as the kernels see
     * it (dequantised) */
    void (*unpack_row)(float *out, const unsigned char *panel, size_t l, size_t cols);
    size_t max_cols;       /* columns a matrix may have (bc_packed_bytes refuses more, before
                            * check sees the weights); 0: any */
    /* nonzero: a row must be whole blocks (cols a multiple of block; q4_k's
     * and q6_k's super-blocks have no short form in GGUF) */
    int whole;
    /* panels interleaved block by block (bc_format_panel_at); 0 or 1: none. A
     * grouped format's pack and unpack_row see one BC_FORMAT_CHUNK of a panel
     * at a time, its blocks side by side (k0 0, cols the chunk's columns): its
     * blocks must not depend on one another. */
    size_t group;
    /* the GGUF (ggml) type whose blocks its panels hold bit for bit (a BC_GGML_*),
     * or BC_GGML_NONE; then from_ggml and to_ggml move them */
    int ggml_type;
    /* nonzero: products by integer dot products over rows of x quantised to 8 bits
     * (q8_0i's family; bfloat16i's are not: bfloat16 dot products) */
    int integer;
    /* the weights check refuses, in words (Python's messages); NULL: every float */
    const char *limit;
    /* row l (< BC_PANEL) of a zeroed panel of `cols` columns, columns [k0, k0 + nk)
     * (pack's k0, nk and chunks: a grouped format's one chunk at a time, k0 0)
     * from src, that row's ggml_type blocks of those columns */
    void (*from_ggml)(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                      size_t nk);
    /* the inverse: dst (the row's ggml_type blocks of columns [k0, k0 + nk), every
     * byte written) from row l of a panel */
    void (*to_ggml)(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                    size_t nk);
    /* optional (NULL: from_ggml row by row): a whole panel's BC_PANEL rows at once,
     * row l's blocks of columns [k0, k0 + nk) at src + l * row_bytes; the same bytes
     * as from_ggml for l = 0 .. BC_PANEL - 1 (an ungrouped format's, load time:
     * the rows' bytes transposed 16 by 16 instead of one byte at a time) */
    void (*from_ggml_panel)(unsigned char *panel, const unsigned char *src, size_t row_bytes,
                            size_t k0, size_t nk);
} bc_format;

/* A ggml block type blockc reads or writes blocks of (bc_engine.h's BC_GGML_*):
 * its weights and bytes per block, and for Q4_0 and Q5_0 the Q8_0 block of the
 * same weights (the same half scale, q - 8 or q - 16: exact) */
typedef struct {
    int type;
    size_t block, block_bytes;
    void (*to_q8_0)(unsigned char *q8, const unsigned char *block);
} bc_ggml;

/* The ggml type `type` (a BC_GGML_*), or NULL for one blockc does not move. */
const bc_ggml *bc_ggml_of(int type);

/* The row of a BC_DTYPE_*, or NULL for anything else (a gap in the numbering too). */
const bc_format *bc_format_of(int dtype);

/* Bytes of one panel of `cols` columns (no overflow check: callers size the
 * whole matrix first, bc_packed_bytes). */
static inline size_t bc_format_panel_bytes(const bc_format *f, size_t cols)
{
    return (cols + f->block - 1) / f->block * f->block_bytes * BC_PANEL;
}

/* Where panel p of a matrix of `panels` panels of `cols` columns lies: its
 * block b at origin + b * stride bytes. Panels lie one after another (origin
 * p times the panel's bytes, stride one block of its 16 rows) unless the
 * format groups them: then each run of `group` panels (the last run: the
 * panels left) interleaves block by block, block b of the run's panels side
 * by side, so that decoding, which streams a run's panels together, reads
 * one run of memory instead of `group` (bfloat16i on an AMD Zen 4, a decode
 * step's products on one thread: 0.88 of the time with vdpbf16ps, 0.76 with
 * AVX2, 0.89 with AVX-512 FMAs; docs/results/panels.md, benches/ab_products.py). The
 * run takes the bytes its panels would take apart. */
typedef struct {
    size_t origin, stride;
} bc_panel_at;

static inline bc_panel_at bc_format_panel_at(const bc_format *f, size_t cols, size_t panels,
                                             size_t p)
{
    const size_t bb = f->block_bytes * BC_PANEL, pb = bc_format_panel_bytes(f, cols);
    const size_t g = f->group > 1 ? f->group : 1, p0 = p - p % g;
    const size_t run = panels - p0 < g ? panels - p0 : g;
    const bc_panel_at at = {p0 * pb + (p - p0) * bb, run * bb};
    return at;
}

/* How many panels from p a decoding walk over [p, p1) takes next: per of them
 * (a multiple of the format's group) when p starts a run and whole runs reach
 * that far, else what is left of p's run (a run cut by p1, or the short last
 * run), so that a tile never spans a run's end: q8_0i and q4_0i take one run
 * (per = group), bfloat16i one or two. */
static inline size_t bc_format_run_take(size_t group, size_t panels, size_t p, size_t p1,
                                        size_t per)
{
    const size_t whole = panels / group * group, end = p - p % group + group;
    if (p % group == 0 && p + per <= (p1 < whole ? p1 : whole))
        return per;
    return (p1 < end ? p1 : end) - p;
}

/* Bytes per weight (the memory a product streams). */
static inline double bc_format_weight_bytes(const bc_format *f)
{
    return (double)f->block_bytes / (double)f->block;
}

/* ---- a quantised KV cache (bc_gpt_cache dtype BC_DTYPE_Q8_0 or BC_DTYPE_Q4_0) ----
 * Each stored key and value row (one position of one K/V head: Dh values, Dh a
 * multiple of 32) is quantised in ggml's blocks of 32: per block a half scale d
 * and 32 values q, read back as half(d) * q (q8_0: int8) or half(d) * (nibble - 8)
 * (q4_0): exact float products. A value row is ggml's blocks one after another
 * (q8_0: d then 32 int8, 34 bytes; q4_0: d then 16 bytes, value k in the low nibble
 * of byte k and value k + 16 in the high one, 18 bytes). Keys lie transposed in
 * tiles of BC_ATT_BK positions, as a float cache's (decoding streams them into
 * the float chains without a transpose): a tile of Dh / 32 = nb blocks per key
 * holds the scales, nb rows of 64 halves (block b of key j at b * 64 + j), then
 * the values' rows of 64 bytes: q8_0 Dh rows (value d of key j: row d, byte j),
 * q4_0 nb * 16 rows (row b * 16 + k, byte j: block b's values k and k + 16 of key
 * j in its low and high nibbles). The same bytes a tile of rows takes. */
#define BC_KVQ_BLOCK 32

/* Bytes of one block of a quantised cache's dtype; 0 for any other dtype. */
static inline size_t bc_kvq_block_bytes(int dtype)
{
    return dtype == BC_DTYPE_Q8_0 ? 34 : dtype == BC_DTYPE_Q4_0 ? 18 : 0;
}

/* Bytes of n elements (a multiple of 32) of a quantised cache. */
static inline size_t bc_kvq_bytes(int dtype, size_t n)
{
    return n / BC_KVQ_BLOCK * bc_kvq_block_bytes(dtype);
}

/* dst (n / 32 blocks) = x (n, a multiple of 32) quantised as dtype's blocks, one
 * after another (a value row). The rules are the weights' (q8_block, q4_block:
 * llama.cpp's reference quantisers); finite values past what a half scale holds
 * saturated (+-65504 * 127 for q8_0, +-65504 * 8 for q4_0); a block holding a NaN
 * keeps a NaN scale (its 32 values read back NaN). Internal: the caller checked
 * dtype and n. */
void bc_kvq_row(unsigned char *dst, const float *x, size_t n, int dtype);

/* Key j (< BC_ATT_BK) of a tile of keys (the layout above) = x (dh, a multiple of
 * 32) quantised by bc_kvq_row's rules. */
void bc_kvq_key(unsigned char *tile, size_t j, const float *x, size_t dh, int dtype);

#endif
