/* fast_tmpl.h: the fast kernels, written once over the vector layer of
 * bc_simd.h and compiled once per instruction set: fast_generic.c,
 * fast_avx2.c and fast_avx512.c each define BC_SIMD and BC_KERNEL_TABLE (the
 * name of the one symbol the copy exports) and include this file, which
 * includes the op files and fills the table. Every function there is static,
 * so the copies' names never collide and read as written (gemm_part,
 * prows_q8_0, attn_unit, ...). Each op file holds an op's forward and its
 * backward side by side:
 *   fast_linear.h       the GEMM (tile, epilogue) and the backward's products
 *   fast_decode.h       decoding's products (a few rows streaming the weights)
 *   fast_intdot.h       q8_0i: quantised x, integer dot products (decoding and GEMM)
 *   fast_bf16dot.h      bfloat16i: x rounded to bfloat16, bfloat16 dot products
 *   fast_formats.h      each weight format's readers and kernels (the table's wf)
 *   fast_attention.h    attention: prefill, decoding, backward
 *   fast_elementwise.h  activations, the gated MLP, the residual addition, AdamW
 *   fast_loss.h         the cross-entropy and its gradient
 *   fast_convert.h      float32 -> GGUF's F16 and BF16 (writing files)
 * Every output element is computed by one fixed sequence of operations that
 * does not depend on how the work is split between threads. */
#include <string.h>
#include <float.h>
#include <stdlib.h>  /* getenv: BLOCKC_AVXVNNI (fast_intdot.h) */
#include "bc_simd.h"
#include "bc_dispatch.h"
#include "bc_format.h"

#ifndef BC_KERNEL_TABLE
#error "define BC_KERNEL_TABLE (the table's name) before including fast_tmpl.h"
#endif

#include "fast_linear.h"
#include "fast_decode.h"
#include "fast_intdot.h"
#include "fast_bf16dot.h"
#include "fast_formats.h"
#include "fast_attention.h"
#include "fast_elementwise.h"
#include "fast_loss.h"
#include "fast_convert.h"

/* ======================================================================== */
/* The table: the one symbol this copy exports                              */
/* ======================================================================== */

const bc_kernel_table BC_KERNEL_TABLE = {
    .name = BC_KERNEL_NAME,
    .gemm_mr = MR,
    .gemm_nr = NR,
    .gemm_part = gemm_part,
    .wf = {WF_KERNELS},
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
    .colsum = colsum,
    .xent_row = xent_row,
    .adamw = adamw,
    .round16 = round16,
};
