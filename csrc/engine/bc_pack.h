/* bc_pack.h: INTERNAL helpers of packed weight matrices (pack.c), for the GPT. */
#ifndef BC_PACK_H
#define BC_PACK_H

#include <stddef.h>

/* *out: bytes of a packed (rows, cols) matrix of dtype (BC_DTYPE_*), or
 * BC_EOPTION (dtype) / BC_EOVERFLOW. Zero sizes give 0 bytes. */
int bc_packed_bytes(size_t *out, int dtype, size_t rows, size_t cols);

/* out (cols) = row o of a packed (rows, cols) matrix of dtype, as the kernels
 * see it (dequantised). No checks: a known dtype, o < rows, the buffer the
 * right size. */
void bc_packed_row(float *out, const void *packed, int dtype, size_t rows, size_t cols, size_t o);

#endif
