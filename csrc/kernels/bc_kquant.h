/* bc_kquant.h: llama.cpp's reference K-quantisers for a panel's 16 rows at once
 * (internal; kquant.c). Each row is one lane: every lane does the one-row rule's
 * operations in its order (every sum accumulated weight by weight in float32, no
 * FMA), so a panel's bytes are those of quantising its rows one by one, on any
 * instruction set (issue 51). formats.c's q4_k, q5_k and q6_k packs call them. */
#ifndef BC_KQUANT_H
#define BC_KQUANT_H

#include <stddef.h>
#include <stdint.h>
#include "bc_format.h"

/* One super-block (256 columns) of rows 0..nl-1 of tile (row l at tile + l ld),
 * llama.cpp's quantize_row_q4_K_ref (nmax 15, rmin -1, nstep 20) or
 * quantize_row_q5_K_ref (31, -0.5, 15): b's d, dmin, sc and m of rows < nl
 * written, each weight's level 0..nmax into L[t][l] (lanes >= nl: zeros).
 * b (16 rows) <- tile (nl <= 16 rows, 256 columns) */
void bc_kq_panel(bc_q4k_block *b, uint8_t L[256][BC_PANEL], const float *tile, size_t ld,
                 size_t nl, int nmax, float rmin, int nstep);

/* One super-block (256 columns) of rows 0..nl-1 of tile, llama.cpp's
 * quantize_row_q6_K_ref: b's d, sc and q of rows < nl written.
 * b (16 rows) <- tile (nl <= 16 rows, 256 columns) */
void bc_q6k_panel(bc_q6k_block *b, const float *tile, size_t ld, size_t nl);

#endif
