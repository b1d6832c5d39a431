/* fast_generic.c: the fast kernels in portable C (any CPU). */
#define BC_SIMD 0
#define BC_KERNEL_TABLE bc_kernels_generic
#define BC_KERNEL_NAME "generic"
#include "fast_tmpl.h"
