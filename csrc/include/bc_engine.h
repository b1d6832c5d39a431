/* bc_engine.h: the dynamic engine. Validated kernels one by one (ops.c) and
 * the general transformer block and stack at runtime sizes (block.c).
 *
 * Every entry point returns BC_OK or a BC_E* status (bc_core.h), checks its
 * pointers and sizes first (size products are overflow-checked against
 * BC_MAX_ELEMENTS) and writes nothing when it fails. Row-major float32.
 * The only memory the library allocates is the kernels' per-thread scratch,
 * taken (grown once and kept) before anything is written: BC_ENOMEM when it
 * cannot be had.
 */
#ifndef BC_ENGINE_H
#define BC_ENGINE_H

#include <stddef.h>
#include "bc_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Activation kinds (the same values as the internal kernels use). */
#define BC_ACT_GELU_TANH 0
#define BC_ACT_GELU 1
#define BC_ACT_RELU 2
#define BC_ACT_SILU 3
#define BC_ACT_SWIGLU 4
#define BC_ACT_GEGLU 5   /* the whole model's only (bc_gpt.h): down(gelu_tanh(gate) * up) */

/* Weight storage types (dtypes) of a packed matrix (below). */
#define BC_DTYPE_F32 0
#define BC_DTYPE_BF16 1
#define BC_DTYPE_Q8_0 2
#define BC_DTYPE_Q4_0 3
#define BC_DTYPE_Q4_K 4
#define BC_DTYPE_Q6_K 5
#define BC_DTYPE_F16 6
#define BC_DTYPE_Q5_0 7
#define BC_DTYPE_Q8_0I 8
#define BC_DTYPE_Q4_0I 9
#define BC_DTYPE_BF16I 10
#define BC_DTYPE_Q5_0I 11
#define BC_DTYPE_Q4_KI 12
#define BC_DTYPE_Q6_KI 13
#define BC_DTYPE_Q4_1 14
#define BC_DTYPE_Q5_1 15
#define BC_DTYPE_Q5_K 16
#define BC_DTYPE_IQ4_NL 17
#define BC_DTYPE_IQ4_XS 18
#define BC_DTYPE_Q2_K 19
#define BC_DTYPE_Q3_K 20
#define BC_DTYPE_Q5_KI 21
#define BC_DTYPE_IQ4_NLI 22
#define BC_DTYPE_IQ4_XSI 23
#define BC_DTYPE_Q4_1I 24
#define BC_DTYPE_Q5_1I 25
#define BC_DTYPE_Q2_KI 26
#define BC_DTYPE_Q3_KI 27
#define BC_NDTYPE 28     /* one past the last dtype */
#define BC_DTYPE_NAME_MAX 16   /* bytes a dtype's name needs, with its NUL */

/* Normalisation kinds and placements of the block. */
#define BC_NORM_RMS 0
#define BC_NORM_LAYER 1
#define BC_NORM_NONE 2
#define BC_PLACE_PRE 0
#define BC_PLACE_POST 1
/* the whole model's only (bc_gpt.h), RMSNorm only:
 * sandwich (Gemma 2/3): x = x + post(sub(pre(x))), pre and post norms around each sublayer;
 * output (OLMo2):       x = x + norm(sub(x)), a norm on each sublayer's output */
#define BC_PLACE_SANDWICH 2
#define BC_PLACE_OUTPUT 3
/* the whole model's q/k norms (bc_gpt.h's qk_norm): none, per head, the whole projection */
#define BC_QK_NORM_NONE 0
#define BC_QK_NORM_HEAD 1
#define BC_QK_NORM_ALL 2

/* ---- single kernels ---------------------------------------------------- */

/* y (N,OC) = x (N,C) @ w (OC,C)^T + b (OC); b may be NULL.
 * y must not overlap x, w or b (BC_EALIAS). Up to 3 rows are dot products that
 * stream w once (decoding at the memory's speed); their sums run in another
 * order than those of more rows, so a row's last bits can depend on whether
 * it came alone (bc_linear_packed keeps them equal). */
int bc_linear(float *y, const float *x, const float *w, const float *b,
              size_t n, size_t c, size_t oc);

/* y (N,C) = x / sqrt(mean(x^2) + eps) * g; g (C) may be NULL. y may be x. */
int bc_rmsnorm(float *y, const float *x, const float *g, size_t n, size_t c, float eps);

/* y (N,C) = (x - mean) / sqrt(var + eps) * g + b, var over C (not C-1);
 * g (C) and b (C) may be NULL. y may be x. */
int bc_layernorm(float *y, const float *x, const float *g, const float *b,
                 size_t n, size_t c, float eps);

/* Scaled dot-product attention, out (B,H,Tq,Dh) = softmax(q k^T / sqrt(Dh)) v
 * for q (B,H,Tq,Dh), k (B,H,Tk,Dh), v (B,H,Tk,Dh). With causal != 0, query i
 * sees keys 0..i (top-left aligned, as torch's is_causal); a query with no
 * visible key gets zeros. out must not overlap q, k or v. */
int bc_attention(float *out, const float *q, const float *k, const float *v,
                 size_t b, size_t h, size_t tq, size_t tk, size_t dh, int causal);

/* y (n) = act(x (n)), kind BC_ACT_GELU_TANH, _GELU (exact erf), _RELU, _SILU.
 * y may be x. */
int bc_activation(float *y, const float *x, size_t n, int kind);

/* y (n) = silu(gate (n)) * up (n). y may be gate or up. */
int bc_swiglu(float *y, const float *gate, const float *up, size_t n);

/* y (n) = a (n) + b (n). y may be a or b. */
int bc_residual_add(float *y, const float *a, const float *b, size_t n);

/* ---- packed weight matrices ------------------------------------------------ */

/* A (rows, cols) matrix w, as nn.Linear stores it (one row per output),
 * packed for the kernels: the rows in panels of 16, each panel the 16 rows'
 * weights of column 0 side by side, then of column 1, ... (rows past the end
 * zero). The decoding kernel streams each panel once and the GEMM reads its
 * blocks where they lie; both compute every output in the same order, so one
 * row of x gets the same bits alone or among many.
 *   BC_DTYPE_F32   panel p: cols x 16 floats, [k][l] = w[16p + l][k];
 *   BC_DTYPE_BF16  the same in bfloat16 (uint16, the high half of a float32,
 *                  rounded to nearest even), the panels interleaved column by
 *                  column in runs of 4 (n of them in a run: 4, or the panels
 *                  left in the last): w[16p + l][k] at byte 32 (cols (p - p %
 *                  4) + k n + p % 4) + 2 l, so that decoding streams a run as
 *                  one;
 *   BC_DTYPE_Q8_0  llama.cpp's q8_0 (blocks of 32 weights of a row with one
 *                  scale): panel p is ceil(cols / 32) blocks of 544 bytes, the
 *                  16 rows' scales d[l] (IEEE halves) then q[k][l] (32 x 16
 *                  int8); w[16p + l][32b + k] = d[l] * q[k][l]. A block's
 *                  d = max|w| / 127 and q = round(w / d).
 *   BC_DTYPE_Q4_0  llama.cpp's q4_0 (blocks of 32 weights of a row with one
 *                  scale, 4 bits each): panel p is ceil(cols / 32) blocks of
 *                  288 bytes, the 16 rows' scales d[l] (IEEE halves) then
 *                  q[j][l] (16 x 16 bytes: weight j in the low nibble, weight
 *                  j + 16 in the high one); w[16p + l][32b + k] = d[l] * (nibble
 *                  - 8). A block's d = m / -8 for m its weight of largest
 *                  magnitude, nibble = min(15, (int)(w / d + 8.5)).
 *   BC_DTYPE_Q4_K  llama.cpp's Q4_K (super-blocks of 256 weights of a row, 8
 *                  sub-blocks of 32 with a 6-bit scale and a 6-bit min each):
 *                  cols must be a multiple of 256 (else BC_ESIZE). Panel p is
 *                  cols / 256 super-blocks of 2368 bytes (148 a row: Q4_K's
 *                  144 with its 12 bytes of packed scales and mins spread to
 *                  16, one byte each, so decoding reads them without
 *                  unpacking; 4.625 bits a weight): the 16 rows' d[l], then
 *                  dmin[l] (IEEE halves), sc[j][l], m[j][l] (8 x 16 bytes
 *                  each, 0..63), q[b][l] (128 x 16 bytes: byte b of the row's
 *                  Q4_K qs: bytes 32i.. hold sub-block 2i in their low
 *                  nibbles, 2i + 1 in their high ones); for column 32j + t of a
 *                  super-block, w = (d[l] sc[j][l]) nibble - (dmin[l] m[j][l]),
 *                  the two products exact in float32, one rounding in all.
 *                  Packed by llama.cpp's reference quantiser (make_qkx2_quants
 *                  per sub-block, then the scales and mins to 6 bits).
 *   BC_DTYPE_Q6_K  llama.cpp's Q6_K (super-blocks of 256 weights of a row, 16
 *                  sub-blocks of 16 with an int8 scale each, 6 bits a weight):
 *                  cols must be a multiple of 256 (else BC_ESIZE). Panel p is
 *                  cols / 256 super-blocks of 4384 bytes (274 a row: Q6_K's
 *                  210 with its 6-bit quants widened to a byte each, so
 *                  decoding converts them as q8_0's; 8.56 bits a weight): the
 *                  16 rows' d[l] (IEEE halves), sc[j][l] (16 x 16 int8),
 *                  q[t][l] (256 x 16 int8: column t's six-bit value less 32);
 *                  w = (d[l] sc[t / 16][l]) q[t][l], exact in float32. Packed
 *                  by llama.cpp's reference quantiser (make_qx_quants per
 *                  sub-block, then the scales to int8 against the largest).
 *   BC_DTYPE_F16   as BC_DTYPE_BF16 in IEEE halves (uint16, rounded to nearest
 *                  even: numpy's astype(float16); the same runs of 4); a weight
 *                  must be finite and
 *                  at most 65504 (the largest half) in magnitude: larger ones,
 *                  even those that would round down to 65504, are refused
 *                  rather than stored as infinities.
 *   BC_DTYPE_Q5_0  llama.cpp's q5_0 (blocks of 32 weights of a row with one
 *                  scale, 5 bits each): panel p is ceil(cols / 32) blocks of
 *                  352 bytes, the 16 rows' scales d[l] (IEEE halves), their
 *                  fifth bits qh[l] (uint32: bit j of weight j), then q[j][l]
 *                  (16 x 16 bytes: the low four bits of weight j in the low
 *                  nibble, of weight j + 16 in the high one); w[16p + l][32b +
 *                  j] = d[l] * ((nibble | bit j of qh[l] << 4) - 16). A block's
 *                  d = m / -16 for m its weight of largest magnitude, q =
 *                  min(31, (int)(w / d + 16.5)).
 *   BC_DTYPE_Q8_0I q8_0's weights (the same d and q) multiplied by integer dot
 *                  products: panel p is nb = ceil(cols / 32) blocks of 544
 *                  bytes, the 16 rows' scales d[l] (IEEE halves) then
 *                  u[j][l][t] (8 x 16 x 4 bytes) = q[4j + t][l] + 128, the
 *                  panels interleaved block by block in runs of 4 (n of them
 *                  in a run: 4, or the panels left in the last): block b of
 *                  panel p at byte 544 (nb (p - p % 4) + b n + p % 4). A product
 *                  quantises each row of x to 8 bits per block of 32 (b:
 *                  a = max|x|, d_x = a / 127, q_x = round-half-even(x * (127 /
 *                  a)); a block with a non-finite x has d_x = NaN, one with a <
 *                  1e-30 is zero) and computes each output as acc = 0, then
 *                  for each block b in order acc = fma((float)isum_b, d[l] *
 *                  d_x[b], acc) with isum_b the exact int32 sum of q q_x: the
 *                  same bits on every instruction set, for any number of rows
 *                  and threads; about 1e-2 relative error per product from
 *                  the 8-bit x (q8_0 keeps x exact). At most BC_Q8_0I_MAX_COLS
 *                  columns (BC_ESIZE past them).
 *   BC_DTYPE_Q4_0I q4_0's weights (the same d and nibbles) multiplied by
 *                  integer dot products as q8_0i's: panel p is ceil(cols / 32)
 *                  blocks of 288 bytes, the 16 rows' scales d[l] (IEEE halves)
 *                  then u[j][l][t] (4 x 16 x 4 bytes) = byte 4j + t of row l's
 *                  q4_0 block (weight 4j + t in the low nibble, 4j + t + 16 in
 *                  the high one), in runs of 4 as q8_0i's (block b of panel p
 *                  at byte 288 (nb (p - p % 4) + b n + p % 4)); each output's
 *                  chain is q8_0i's with isum_b = sum (nibble - 8) q_x,
 *                  exact: the same bits on every
 *                  instruction set, for any number of rows and threads. At
 *                  most BC_Q8_0I_MAX_COLS columns.
 *   BC_DTYPE_BF16I bfloat16's weights multiplied by bfloat16 dot products
 *                  (AVX512_BF16's vdpbf16ps): panel p is ceil(cols / 2)
 *                  pairs of 64 bytes, u[j][l][t] (16 x 2 uint16) = the
 *                  bfloat16 of w[16p + l][2j + t] (rounded to nearest even;
 *                  subnormals stored as zeros of their sign; zero past cols),
 *                  the panels interleaved pair by pair in runs of 4 (n of
 *                  them in a run: 4, or the panels left in the last): pair
 *                  j of panel p at byte 64 (ceil(cols / 2) (p - p % 4) +
 *                  j n + p % 4), so that decoding streams a run as one.
 *                  A product rounds each row of x to bfloat16 the same way
 *                  (x_b) and computes each output as acc = 0, then for each
 *                  pair j in order acc = ftz(fma(w[2j+1], x_b[2j+1], acc)),
 *                  acc = ftz(fma(w[2j], x_b[2j], acc)), ftz flushing a
 *                  subnormal result to a zero of its sign (vdpbf16ps's order
 *                  and rounding, measured on an AMD Zen 4): the same bits on
 *                  every instruction set (emulated where the CPU lacks
 *                  AVX512_BF16), for any number of rows and threads; each x
 *                  off by at most 2^-9 of itself (bfloat16 keeps x exact).
 *                  At most BC_Q8_0I_MAX_COLS columns.
 *   BC_DTYPE_Q5_0I q5_0's weights (the same d, nibbles and fifth bits)
 *                  multiplied by integer dot products as q8_0i's: panel p is
 *                  ceil(cols / 32) blocks of 352 bytes, the 16 rows' scales
 *                  d[l] (IEEE halves), then u[j][l][t] (4 x 16 x 4 bytes) =
 *                  byte 4j + t of row l's q5_0 nibbles (weight 4j + t's low
 *                  four bits in the low nibble, 4j + t + 16's in the high
 *                  one), then h[j][s] (4 x 2 uint64): bit 4l + t the fifth
 *                  bit of row l's weight 4j + t + 16s; in runs of 4 as
 *                  q8_0i's (block b of panel p at byte 352 (nb (p - p % 4) +
 *                  b n + p % 4)); each output's chain is q8_0i's with isum_b
 *                  = sum (q - 16) q_x, exact: the same bits on every
 *                  instruction set, for any number of rows and threads. At
 *                  most BC_Q8_0I_MAX_COLS columns.
 *   BC_DTYPE_Q4_KI q4_k's weights (the same super-blocks) multiplied by
 *                  integer dot products: panel p is cols / 256 blocks of 2368
 *                  bytes, q4_k's d[l], dmin[l], sc[j][l] and m[j][l] as they
 *                  lie in BC_DTYPE_Q4_K, then u[g][l][t] (32 x 16 x 4 bytes) =
 *                  byte 4g + t of row l's Q4_K qs (sub-block 2 (g / 8) in the
 *                  low nibbles, 2 (g / 8) + 1 in the high ones); in runs of 4
 *                  as q8_0i's (block b of panel p at byte 2368 (nb (p - p %
 *                  4) + b n + p % 4)). x is quantised as q8_0i's (blocks of
 *                  32: sub-block j of super-block S is x block 8S + j); each
 *                  output's chain: acc = 0, then for each super-block and
 *                  each of its sub-blocks j in order (x block b) acc =
 *                  fma((float)isum_j, (d[l] sc[j][l]) d_x[b], acc), then acc
 *                  = fma(-(dmin[l] m[j][l]), d_x[b] (float)sum q_x, acc), with
 *                  isum_j the exact int32 sum of nibble q_x (d sc and dmin m
 *                  exact in float): the same bits on every instruction set,
 *                  for any number of rows and threads. Columns a multiple of
 *                  256, at most BC_Q8_0I_MAX_COLS.
 *   BC_DTYPE_Q6_KI q6_k's weights (the same super-blocks, at the file's 210
 *                  bytes a row: q6_k widens each quant to a byte) multiplied
 *                  by integer dot products: panel p is cols / 256 blocks of
 *                  3360 bytes, the 16 rows' d[l] (IEEE halves), sc[j][l] (16
 *                  x 16 int8: sub-block j's scale), then ql[g][l][t] (32 x 16
 *                  x 4) = byte 4g + t of row l's Q6_K ql and qh[g][l][t] (16 x
 *                  16 x 4) = byte 4g + t of its qh (the file's bits: weight
 *                  128h + 32q + i, i < 32, has the low four bits of ql byte
 *                  64h + 32 (q % 2) + i (its high nibble when q >= 2) and bits
 *                  2q, 2q + 1 of qh byte 32h + i); in runs of 4 as q8_0i's.
 *                  x is quantised as q8_0i's; each output's chain: acc = 0,
 *                  then for each super-block and each sub-block j of 16 in
 *                  order (x block b = j / 2) acc = fma((float)isum_j, (d[l]
 *                  sc[j][l]) d_x[b], acc), with isum_j the exact int32 sum of
 *                  (q - 32) q_x (d sc exact in float): the same bits on every
 *                  instruction set, for any number of rows and threads.
 *                  Columns a multiple of 256, at most BC_Q8_0I_MAX_COLS.
 *   BC_DTYPE_Q4_1  llama.cpp's q4_1 (blocks of 32 weights of a row with a
 *                  scale and a minimum, 4 bits each): panel p is ceil(cols /
 *                  32) blocks of 320 bytes, the 16 rows' scales d[l], minima
 *                  m[l] (IEEE halves), then q[j][l] as q4_0's; w = d[l] nibble
 *                  + m[l] (d nibble exact: one rounding). A block's m = its
 *                  least weight, d = (max - m) / 15, nibble = min(15, (int)((w
 *                  - m) / d + 0.5)). A weight must be finite, |w| <= 65504.
 *   BC_DTYPE_Q5_1  llama.cpp's q5_1: as q4_1 with q5_0's fifth bits: panel p
 *                  is ceil(cols / 32) blocks of 384 bytes, d[l], m[l], qh[l]
 *                  (uint32: bit j of weight j), q[j][l]; w = d[l] q + m[l], q
 *                  = nibble | bit << 4 (0..31), d = (max - m) / 31.
 *   BC_DTYPE_Q5_K  llama.cpp's Q5_K (super-blocks of 256 weights of a row, as
 *                  Q4_K with a fifth bit a weight): cols a multiple of 256.
 *                  Panel p is cols / 256 super-blocks of 2880 bytes (180 a
 *                  row: Q5_K's 176 with its scales and mins a byte each, as
 *                  q4_k's): d[l], dmin[l], sc[j][l], m[j][l] as q4_k's, then
 *                  qh[i][l] (32 x 16 bytes: bit j the fifth bit of sub-block
 *                  j's weight i), q[b][l] as q4_k's; w = (d[l] sc[j][l]) q -
 *                  (dmin[l] m[j][l]), q = nibble | bit << 4, exact products,
 *                  one rounding. Packed by llama.cpp's reference quantiser.
 *   BC_DTYPE_IQ4_NL llama.cpp's IQ4_NL (blocks of 32 weights of a row with one
 *                  scale, each weight a 4-bit index into the 16 values
 *                  kvalues_iq4nl, -127..113): panel p as q4_0's (d[l], then
 *                  q[j][l]); w = d[l] kv[nibble], exact. Packed by a simple
 *                  rule, not llama.cpp's search: d = m / -127 for m the weight
 *                  of largest magnitude, each nibble the nearest value (the
 *                  lower on a tie) of w / d.
 *   BC_DTYPE_IQ4_XS llama.cpp's IQ4_XS (super-blocks of 256, 8 sub-blocks of
 *                  32 with a 6-bit scale each, IQ4_NL's values): cols a
 *                  multiple of 256. Panel p is cols / 256 super-blocks of 2208
 *                  bytes (138 a row: the 6-bit scales a signed byte each, ls -
 *                  32): d[l], sc[j][l] (8 x 16 int8), q[b][l] (128 x 16 bytes:
 *                  byte b of the row's qs, sub-block b / 16); w = (d[l]
 *                  sc[j][l]) kv[nibble], exact. Packed by a simple rule (each
 *                  sub-block's scale m / -127, those against -max / 32 as
 *                  llama.cpp, then nearest values), not llama.cpp's search.
 *   BC_DTYPE_Q2_K  llama.cpp's Q2_K (super-blocks of 256, 16 sub-blocks of 16
 *                  with a 4-bit scale and a 4-bit min each, 2-bit quants):
 *                  cols a multiple of 256. Panel p is cols / 256 super-blocks
 *                  of 1344 bytes (84 a row, the file's): d[l], dmin[l], sc[j][l]
 *                  (16 x 16 bytes: the file's scale byte, scale low, min high),
 *                  q[b][l] (64 x 16 bytes: byte b of the row's qs; weight t's
 *                  two bits at 2 ((t % 128) / 32) of byte 32 (t / 128) + t % 32);
 *                  w = (d[l] sc) q - dmin[l] m, exact products, one rounding.
 *                  Packed by a simple rule (each sub-block's range over 3 and
 *                  minimum, those against their largest / 15), not llama.cpp's
 *                  search.
 *   BC_DTYPE_Q3_K  llama.cpp's Q3_K (super-blocks of 256, 16 sub-blocks of 16
 *                  with a 6-bit scale each, 3-bit quants: two low bits as
 *                  Q2_K's, a high bit in hmask): cols a multiple of 256. Panel
 *                  p is cols / 256 super-blocks of 1824 bytes (114 a row: the
 *                  6-bit scales a signed byte each, s - 32): d[l], sc[j][l] (16
 *                  x 16 int8), hm[i][l] (32 x 16: byte i of the row's hmask, bit
 *                  t / 32 weight t's high bit), q[b][l] (64 x 16 as Q2_K's); w =
 *                  (d[l] sc[j][l]) (low + 4 high - 4), exact. Packed by a simple
 *                  rule (each sub-block's scale m / -4, those against -max / 32
 *                  as IQ4_XS's), not llama.cpp's search.
 *   BC_DTYPE_Q5_KI q5_k's weights (the same super-blocks) multiplied by
 *                  integer dot products as q4_ki's: panel p is cols / 256
 *                  blocks of 2880 bytes, q4_ki's block (d, dmin, sc, m, then
 *                  u[g][l][t] = byte 4g + t of row l's Q5_K qs), then
 *                  h[g][l][t] (8 x 16 x 4) = byte 4g + t of row l's Q5_K qh
 *                  (bit j: the fifth bit of sub-block j's weight 4g + t); in
 *                  runs of 4 as q8_0i's. x is quantised as q8_0i's; each
 *                  output's chain is q4_ki's with isum_j the exact int32 sum
 *                  of q q_x, q = nibble | fifth bit << 4 (0..31): the same
 *                  bits on every instruction set, for any number of rows and
 *                  threads. Columns a multiple of 256, at most
 *                  BC_Q8_0I_MAX_COLS.
 *   BC_DTYPE_IQ4_NLI iq4_nl's weights (the same d and nibbles) multiplied by
 *                  integer dot products as q8_0i's: panel p as q4_0i's
 *                  (ceil(cols / 32) blocks of 288 bytes, d[l] then u[j][l][t] =
 *                  byte 4j + t of row l's nibbles), in runs of 4; each
 *                  output's chain is q8_0i's with isum_b = sum kv[nibble] q_x
 *                  (kvalues_iq4nl, -127..113), exact: the same bits on every
 *                  instruction set, for any number of rows and threads. At
 *                  most BC_Q8_0I_MAX_COLS columns.
 *   BC_DTYPE_IQ4_XSI iq4_xs's weights (the same super-blocks) multiplied by
 *                  integer dot products: panel p is cols / 256 blocks of 2208
 *                  bytes, iq4_xs's d[l] and sc[j][l] as they lie in
 *                  BC_DTYPE_IQ4_XS, then u[g][l][t] (32 x 16 x 4) = byte 4g +
 *                  t of row l's qs (sub-block g / 4 as an iq4_nli block's
 *                  nibbles); in runs of 4 as q8_0i's. x is quantised as
 *                  q8_0i's (sub-block j of super-block S is x block 8S + j);
 *                  each output's chain: acc = 0, then for each sub-block in
 *                  order acc = fma((float)isum_j, (d[l] sc[j][l]) d_x[b], acc),
 *                  isum_j the exact int32 sum of kv[nibble] q_x (d sc exact in
 *                  float): the same bits on every instruction set, for any
 *                  number of rows and threads. Columns a multiple of 256, at
 *                  most BC_Q8_0I_MAX_COLS.
 *   BC_DTYPE_Q4_1I q4_1's weights (the same d, m and nibbles) multiplied by
 *                  integer dot products: panel p is ceil(cols / 32) blocks of
 *                  320 bytes, q4_0i's d[l] and u[j][l][t] (byte 4j + t of row
 *                  l's nibbles) at q4_0i's offsets, then the minima m[l]
 *                  (halves); in runs of 4 as q8_0i's. x is quantised as
 *                  q8_0i's; each output's chain: acc = 0, then for each block
 *                  in order acc = fma((float)isum_b, d[l] d_x[b], acc) and acc =
 *                  fma(m[l], d_x[b] (float)sum q_x, acc), isum_b the exact
 *                  int32 sum of nibble q_x (llama.cpp's q4_1 x q8_1 product,
 *                  with d_x and its block sum d_x sum q_x kept in float32, not
 *                  halves): the same bits on every instruction set, for any
 *                  number of rows and threads. At most BC_Q8_0I_MAX_COLS columns.
 *   BC_DTYPE_Q5_1I q5_1's weights likewise: blocks of 384 bytes, q5_0i's d[l],
 *                  u and h (the fifth bits) at q5_0i's offsets, then m[l];
 *                  q4_1i's chain with isum_b the exact sum of the five-bit q
 *                  (0..31) times q_x. At most BC_Q8_0I_MAX_COLS columns.
 *   BC_DTYPE_Q2_KI q2_k's weights (the same super-blocks) multiplied by
 *                  integer dot products: panel p is cols / 256 blocks of 1344
 *                  bytes (84 a row, the file's), q2_k's d[l], dmin[l] and
 *                  sc[j][l] at q2_k's offsets, then u[g][l][t] (16 x 16 x 4) =
 *                  byte 4g + t of row l's qs; in runs of 4 as q8_0i's. x is
 *                  quantised as q6_ki's (q8_0i's blocks of 32 and the sums of
 *                  q_x of their halves, s16: sub-block j of super-block S lies
 *                  in x block 8S + j / 2); each output's chain: acc = 0, then
 *                  for each sub-block of 16 in order acc = fma((float)isum_j,
 *                  (d[l] sc_j) d_x, acc) and acc = fma(-(dmin[l] m_j), d_x
 *                  (float)s16_j, acc), isum_j the exact int32 sum of q q_x (q
 *                  0..3; d sc and dmin m exact in float, d_x s16 rounded): the
 *                  same bits on every instruction set, for any number of rows
 *                  and threads. Columns a multiple of 256, at most
 *                  BC_Q8_0I_MAX_COLS.
 *   BC_DTYPE_Q3_KI q3_k's weights (the same super-blocks) multiplied by
 *                  integer dot products: panel p is cols / 256 blocks of 1824
 *                  bytes (114 a row, as q3_k), q3_k's d[l] and sc[j][l], then
 *                  h[g][l][t] (8 x 16 x 4) = byte 4g + t of row l's hmask, then
 *                  u[g][l][t] (16 x 16 x 4) = byte 4g + t of its qs; in runs of
 *                  4 as q8_0i's. x is quantised as q6_ki's; each output's
 *                  chain: acc = 0, then for each sub-block of 16 in order acc =
 *                  fma((float)isum_j, (d[l] sc_j) d_x, acc), isum_j the exact
 *                  int32 sum of q q_x (q = low + 4 high - 4, -4..3: formed as
 *                  the unsigned low + 4 high less 4 s16_j): the same bits on
 *                  every instruction set, for any number of rows and threads.
 *                  Columns a multiple of 256, at most BC_Q8_0I_MAX_COLS.
 * bc_pack_size gives the bytes. */

/* Columns a q8_0i matrix can have (a quantised row of x fits a call's scratch). */
#define BC_Q8_0I_MAX_COLS 65536

/* The weight format dtype (0 <= dtype < BC_NDTYPE): its name as Python spells it
 * ("float32", "bfloat16", "q8_0", "q4_0", "q4_k", "q6_k", "float16", "q5_0",
 * "q8_0i", "q4_0i", "bfloat16i", "q5_0i", "q4_ki", "q6_ki", "q4_1", "q5_1", "q5_k",
 * "iq4_nl", "iq4_xs", "q2_k", "q3_k", "q5_ki", "iq4_nli", "iq4_xsi",
 * "q4_1i", "q5_1i", "q2_ki", "q3_ki";
 * NUL-terminated into name, name_cap >
 * its length, at most BC_DTYPE_NAME_MAX), the weights of a row per block and
 * the bytes of one block (a row of cols weights, padded to whole blocks, takes
 * ceil(cols / block) * block_bytes bytes). Any output may be NULL (not
 * wanted). BC_EOPTION for an unknown dtype (a value below BC_NDTYPE with no
 * format too), BC_ESIZE when name_cap is too
 * small; nothing written then. */
int bc_dtype_info(char *name, size_t name_cap, size_t *block, size_t *block_bytes, int dtype);

/* GGUF (ggml) tensor types, numbered as GGUF files number them: the ones whose
 * blocks a format's panels hold bit for bit (bc_dtype_traits), and
 * BC_GGML_NONE for a format that holds none. */
#define BC_GGML_NONE -1
#define BC_GGML_F32 0
#define BC_GGML_F16 1
#define BC_GGML_Q4_0 2
#define BC_GGML_Q4_1 3
#define BC_GGML_Q5_0 6
#define BC_GGML_Q5_1 7
#define BC_GGML_Q8_0 8
#define BC_GGML_Q2_K 10
#define BC_GGML_Q3_K 11
#define BC_GGML_Q4_K 12
#define BC_GGML_Q5_K 13
#define BC_GGML_Q6_K 14
#define BC_GGML_IQ4_NL 20
#define BC_GGML_IQ4_XS 23
#define BC_GGML_BF16 30

/* What a weight format is, beyond its name and block (bc_dtype_info). */
typedef struct {
    size_t block;        /* weights of a row per block */
    size_t block_bytes;  /* bytes of one row's block in the panels */
    size_t max_cols;     /* the columns a matrix may have; 0: any */
    int whole;           /* 1: a row must be whole blocks (cols a multiple of block) */
    int ggml_type;       /* the BC_GGML_* whose blocks its panels hold bit for bit
                          * (bc_pack_ggml, bc_unpack_ggml), or BC_GGML_NONE */
    int integer;         /* 1: its products are integer dot products over rows of x
                          * quantised to 8 bits (q8_0i's family) */
    const char *limit;   /* the weights bc_pack refuses (BC_EVALUE), in words, static
                          * and NUL-terminated; NULL: it holds every float */
    size_t group;        /* the panels whose bytes are interleaved, in runs of group
                          * (1: panel p, rows 16p.., is the bytes [p * P, (p + 1) * P)
                          * of the packed matrix, P its bytes, the same as a matrix of
                          * those rows alone packs to) */
} bc_dtype_traits;

/* *out = the traits of weight format dtype. BC_ENULL for a NULL out,
 * BC_EOPTION for an unknown dtype (nothing written). */
int bc_dtype_traits_of(bc_dtype_traits *out, int dtype);

/* *bytes: the size of rows of cols weights of ggml type `type` (a BC_GGML_*),
 * rows * (cols / its block) * its block's bytes. BC_EOPTION for a type blockc
 * does not move, BC_ESIZE for a zero size or cols not whole blocks,
 * BC_EOVERFLOW past BC_MAX_ELEMENTS. */
int bc_ggml_size(size_t *bytes, int type, size_t rows, size_t cols);

/* out (out_bytes >= bc_pack_size) = the packed (rows, cols) matrix of dtype
 * holding src's very blocks: src (src_bytes >= bc_ggml_size) the rows of the
 * format's ggml type as a GGUF file stores them (rows one after another, each
 * its blocks; little-endian), rearranged into panels, rows past the end zero
 * (bc_pack's bytes when bc_pack would find the same blocks). BC_EOPTION for a
 * dtype whose ggml type is BC_GGML_NONE, BC_ESIZE for sizes bc_pack_size or
 * bc_ggml_size refuses, BC_EWORKSPACE when a buffer is too small, BC_EALIAS
 * when they overlap. */
int bc_pack_ggml(void *out, size_t out_bytes, const void *src, size_t src_bytes, int dtype,
                 size_t rows, size_t cols);

/* The inverse: out (out_bytes >= bc_ggml_size) = the rows of the format's ggml
 * type a GGUF file stores for the packed (rows, cols) matrix of dtype (every
 * byte written). The same refusals. */
int bc_unpack_ggml(void *out, size_t out_bytes, const void *packed, size_t packed_bytes,
                   int dtype, size_t rows, size_t cols);

/* out (out_bytes >= blocks of to_type's bytes) = blocks of from_type
 * as blocks of to_type of exactly the same weights: Q4_0 and Q5_0 as Q8_0 (the
 * same half scale, q - 8 or q - 16 an int8). BC_EOPTION for another pair,
 * BC_ESIZE for no blocks, BC_EWORKSPACE, BC_EALIAS as above. The pair is
 * checked before the sizes: zero blocks asks whether it converts (BC_ESIZE:
 * it does; BC_EOPTION: it does not), writing nothing. */
int bc_ggml_convert(void *out, size_t out_bytes, const void *src, size_t src_bytes, int to_type,
                    int from_type, size_t blocks);

/* out (out_bytes >= 2 n) = x (n floats) as to_type's 2-byte values, little-endian,
 * rounded to nearest even: BC_GGML_F16 IEEE halves (NumPy's astype(float16) bits:
 * overflow to infinity, subnormals, a NaN keeping its sign and its payload's top
 * bits), BC_GGML_BF16 bfloat16s (a NaN quiet, its sign and top bits kept), on the
 * pool, F16C / AVX-512 where the CPU has them: the same bytes everywhere.
 * BC_EOPTION for another type, BC_ESIZE for n == 0, BC_EOVERFLOW past
 * BC_MAX_ELEMENTS, BC_EWORKSPACE, BC_EALIAS as above. */
int bc_ggml_from_f32(void *out, size_t out_bytes, const float *x, size_t n, int to_type);

/* *bytes: the size of a packed (rows, cols) matrix of dtype. BC_ESIZE for a zero
 * size (or more columns than the format holds: q8_0i; or columns not whole
 * blocks of a format that needs them: q4_k, q6_k), BC_EOPTION for an unknown dtype,
 * BC_EOVERFLOW past BC_MAX_ELEMENTS. */
int bc_pack_size(size_t *bytes, int dtype, size_t rows, size_t cols);

/* out (out_bytes >= bc_pack_size) = w (rows, cols) packed as dtype. BC_EVALUE
 * for q8_0 and q8_0i when a weight is not finite or beyond 65504 * 127 in magnitude, for
 * q4_0, q4_k and q6_k beyond 65504 * 8, for q5_0 beyond 65504 * 16, for float16 beyond 65504. */
int bc_pack(void *out, size_t out_bytes, const float *w, int dtype, size_t rows, size_t cols);

/* The same for w(r, c) = w[r * row_stride + c * col_stride]: a transposed w
 * (GPT-2's Conv1D weights, stored (in, out)) packs without a transposed copy.
 * bc_pack is bc_pack_strided(..., cols, 1, ...). */
int bc_pack_strided(void *out, size_t out_bytes, const float *w, size_t row_stride,
                    size_t col_stride, int dtype, size_t rows, size_t cols);

/* out (rows, cols) = the packed matrix as float32: the weights the kernels use. */
int bc_unpack(float *out, const void *packed, size_t packed_bytes, int dtype, size_t rows,
              size_t cols);

/* y (N,OC) = x (N,C) @ w^T + b (OC) for w (OC,C) packed as dtype (w_bytes
 * >= bc_pack_size); b may be NULL. y must not overlap x, w or b. */
int bc_linear_packed(float *y, const float *x, const void *w, size_t w_bytes, int dtype,
                     const float *b, size_t n, size_t c, size_t oc);

/* ---- the block ---------------------------------------------------------- */

/* Runtime shape and options of one block. */
typedef struct {
    size_t d_model;   /* D */
    size_t n_heads;   /* H, divides D; Dh = D / H */
    size_t d_ff;      /* F */
    int norm;         /* BC_NORM_RMS, BC_NORM_LAYER or BC_NORM_NONE */
    int placement;    /* BC_PLACE_PRE or BC_PLACE_POST */
    int activation;   /* BC_ACT_GELU_TANH, _GELU, _RELU or _SWIGLU */
    int causal;       /* mask keys after the query */
    int residual;     /* add the sublayer input back */
    float eps;        /* norm epsilon, finite and >= 0 */
} bc_block_config;

/* The weights of one block, named like the chapter-6 GPTBlock state dict.
 * Every pointer may be NULL except qkv_w, proj_w, up_w, down_w (and gate_w
 * with swiglu); NULL means the part is absent (no bias, unit gain, no shift). */
typedef struct {
    const float *qkv_w;   /* attn.qkv.weight (3D,D): Q, K, V stacked by rows */
    const float *qkv_b;   /* attn.qkv.bias (3D) */
    const float *proj_w;  /* attn.proj.weight (D,D) */
    const float *proj_b;  /* attn.proj.bias (D) */
    const float *up_w;    /* up.weight (F,D) */
    const float *up_b;    /* up.bias (F) */
    const float *gate_w;  /* gate.weight (F,D), swiglu only */
    const float *gate_b;  /* gate.bias (F), swiglu only */
    const float *down_w;  /* down.weight (D,F) */
    const float *down_b;  /* down.bias (D) */
    const float *ln1_w;   /* ln1.weight (D): gain of the first norm */
    const float *ln1_b;   /* ln1.bias (D): shift of the first norm (layer only) */
    const float *ln2_w;   /* ln2.weight (D) */
    const float *ln2_b;   /* ln2.bias (D) */
} bc_block_weights;

/* *n_floats: the workspace one bc_block_forward / bc_stack_forward call
 * needs for b sequences of t positions. */
int bc_block_workspace_size(size_t *n_floats, const bc_block_config *cfg, size_t b, size_t t);

/* y (B,T,D) = block(x (B,T,D)). y may be x itself (in place) but must not
 * otherwise overlap it. work: at least bc_block_workspace_size floats,
 * not overlapping x or y. *cfg is read once, at entry; the weight structs
 * and the arrays they point to must stay valid for the whole call. */
int bc_block_forward(float *y, const float *x, const bc_block_config *cfg,
                     const bc_block_weights *w, size_t b, size_t t,
                     float *work, size_t work_len);

/* y (B,T,D) = block n-1 ( ... block 0 (x (B,T,D))), w: n_blocks weight sets.
 * hidden (n_blocks,B,T,D) may be NULL; if given, hidden[i] is the state
 * after block i. y may be x; hidden must not overlap x, y or work. */
int bc_stack_forward(float *y, float *hidden, const float *x, const bc_block_config *cfg,
                     const bc_block_weights *w, size_t n_blocks, size_t b, size_t t,
                     float *work, size_t work_len);

/* ---- the block's backward ------------------------------------------------ */

/* The gradients of one block's weights, laid out as bc_block_weights (row-major,
 * the same shapes). The backward adds into them (zero them for plain gradients);
 * a NULL part is not computed (a part whose weight is absent never is). */
typedef struct {
    float *qkv_w, *qkv_b, *proj_w, *proj_b, *up_w, *up_b, *gate_w, *gate_b;
    float *down_w, *down_b, *ln1_w, *ln1_b, *ln2_w, *ln2_b;
} bc_block_grads;

/* *n_floats: the workspace one bc_stack_backward call needs. */
int bc_stack_backward_workspace_size(size_t *n_floats, const bc_block_config *cfg,
                                     size_t n_blocks, size_t b, size_t t);

/* The gradients of the stack y = block n-1 ( ... block 0 (x)) given dy (B,T,D),
 * the gradient of y: dx (B,T,D) = dL/dx, and g[i] += dL/dw[i] for each block.
 * The forward is run again (its intermediates kept in work); dx may be dy but
 * may not otherwise overlap anything; no gradient may overlap another, a weight,
 * x, dy or work. The weight and gradient structs are read once, at entry. */
int bc_stack_backward(float *dx, const bc_block_grads *g, const float *dy, const float *x,
                      const bc_block_config *cfg, const bc_block_weights *w, size_t n_blocks,
                      size_t b, size_t t, float *work, size_t work_len);

#ifdef __cplusplus
}
#endif

#endif
