/* bc_book.h: book mode. Chapter 24's listings (126_Ffn ... 130_Real_Params) as
 * fixed-size library functions.
 *
 * Everything here runs at the book's dimensions, which are compile-time constants,
 * and computes exactly what the listings compute, in the same floating-point
 * operation order, so the printed figures come out digit for digit.
 *
 * The weight structs are laid out like the listings' structs: drawing
 * n = sizeof(struct) / sizeof(float) uniforms in memory order is the listings'
 * initialisation (126_Ffn is the exception: its biases are zeroed, not drawn).
 */
#ifndef BC_BOOK_H
#define BC_BOOK_H

#include "bc_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 126_Ffn: one position, 6 -> 12 (GELU) -> 6, with biases. */
#define BC_BOOK_FFN_D_MODEL 6
#define BC_BOOK_FFN_D_FF 12

/* 127_Residual: a vector of 4. */
#define BC_BOOK_RESIDUAL_DIM 4

/* 128_Block and 129_Stack: 4 positions of 8, 2 heads of 4, FFN width 32, 4 blocks. */
#define BC_BOOK_SEQ_LEN 4
#define BC_BOOK_D_MODEL 8
#define BC_BOOK_N_HEADS 2
#define BC_BOOK_D_HEAD 4
#define BC_BOOK_D_FF 32
#define BC_BOOK_N_BLOCKS 4

/* 126_Ffn's weights: W1 (D_FF, D_MODEL), b1 (D_FF), W2 (D_MODEL, D_FF), b2 (D_MODEL). */
typedef struct {
    float w1[BC_BOOK_FFN_D_FF][BC_BOOK_FFN_D_MODEL];   /* up-projection */
    float b1[BC_BOOK_FFN_D_FF];
    float w2[BC_BOOK_FFN_D_MODEL][BC_BOOK_FFN_D_FF];   /* down-projection */
    float b2[BC_BOOK_FFN_D_MODEL];
} bc_book_ffn;

/* One pre-norm block of 128_Block / 129_Stack (no norm gains: the listings' RMSNorm
 * has none). Attention: w_q, w_k, w_v (H, Dh, C), w_o (C, C); FFN: w1 (F, C), w2 (C, F). */
typedef struct {
    float w_q[BC_BOOK_N_HEADS][BC_BOOK_D_HEAD][BC_BOOK_D_MODEL];
    float w_k[BC_BOOK_N_HEADS][BC_BOOK_D_HEAD][BC_BOOK_D_MODEL];
    float w_v[BC_BOOK_N_HEADS][BC_BOOK_D_HEAD][BC_BOOK_D_MODEL];
    float w_o[BC_BOOK_D_MODEL][BC_BOOK_D_MODEL];
    float w1[BC_BOOK_D_FF][BC_BOOK_D_MODEL];
    float w2[BC_BOOK_D_MODEL][BC_BOOK_D_FF];
} bc_book_block;

/* Parameter counts of a pre-norm block (128_Block, 130_Real_Params):
 * attn = 4 d^2, ffn = 2 d d_ff, norms = 2 d, per_block = their sum,
 * all_blocks = per_block * n_layers. */
typedef struct {
    int64_t attn;
    int64_t ffn;
    int64_t norms;
    int64_t per_block;
    int64_t all_blocks;
} bc_book_params;

/* --- 126_Ffn --- */

/* 126_Ffn's init from generator g: for each row of W1, b1 = 0 and the row is drawn;
 * then the same for W2 and b2. Draws (rand()/RAND_MAX*2-1)*0.1f. */
int bc_book_ffn_init(bc_book_ffn *f, bc_rng *g);

/* out (D_MODEL) = W2 gelu(W1 x + b1) + b2, x (D_MODEL). out may alias x. */
int bc_book_ffn_forward(float *out, const bc_book_ffn *f, const float *x);

/* out: the parameter count of a biased FFN, 2 d d_ff + d_ff + d (126_Ffn: 162).
 * BC_ESIZE if a size is not positive, BC_EOVERFLOW if the count overflows. */
int bc_book_ffn_params(int64_t *out, int64_t d_model, int64_t d_ff);

/* --- 127_Residual --- */

/* out (DIM) = x (DIM) + sublayer (DIM). out may alias either input. */
int bc_book_residual_add(float *out, const float *x, const float *sublayer);

/* --- 128_Block --- */

/* 128_Block's init: BC_BOOK_* sized weights drawn in memory order. */
int bc_book_block_init(bc_book_block *b, bc_rng *g);

/* One pre-norm block: x += attn(rmsnorm(x)); x += ffn(rmsnorm(x)).
 * y (T, C), x (T, C) with T = SEQ_LEN, C = D_MODEL. y may alias x. */
int bc_book_block_forward(float *y, const bc_book_block *b, const float *x);

/* --- 129_Stack --- */

/* 129_Stack's init: N_BLOCKS blocks, one after the other from the same generator. */
int bc_book_stack_init(bc_book_block *blocks, bc_rng *g);

/* out: the average over positions of the L2 norm of each row of x (T, C). */
int bc_book_avg_norm(float *out, const float *x);

/* N_BLOCKS blocks in a row. y (T, C): the final representations (may alias x);
 * norms (N_BLOCKS + 1) or NULL: the average norm at the input and after each block.
 * blocks (N_BLOCKS), x (T, C). */
int bc_book_stack_forward(float *y, float *norms, const bc_book_block *blocks,
                          const float *x);

/* --- 128_Block and 130_Real_Params --- */

/* out: the parameter counts of n_layers pre-norm blocks of width d_model and FFN
 * width d_ff. BC_ESIZE if a size is not positive, BC_EOVERFLOW on int64 overflow. */
int bc_book_block_params(bc_book_params *out, int64_t d_model, int64_t d_ff,
                         int64_t n_layers);

#ifdef __cplusplus
}
#endif

#endif
