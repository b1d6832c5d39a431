/* fast_generic.c: the fast kernels in portable C (any CPU). */
#define BC_SIMD 0
#define SUF generic
#include "fast_tmpl.h"
