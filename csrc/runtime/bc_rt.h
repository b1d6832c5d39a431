/* bc_rt.h: internal runtime services for the kernels (not public). */
#ifndef BC_RT_H
#define BC_RT_H

#include <stddef.h>
#include "bc_runtime.h"

/* The instruction set to use now (BC_ISA_*). */
int bc_rt_isa(void);

/* Threads to use for a job of `flops` floating-point operations: 1 when the
 * job is too small to pay for waking a team, else the configured count. */
int bc_rt_threads(double flops);

/* A 64-byte-aligned scratch buffer of at least n floats owned by the calling
 * thread, kept and reused across calls (grown when needed, freed when the
 * thread exits). Its content is undefined. NULL if the allocation fails.
 * slot 0 and 1 are independent buffers. */
float *bc_rt_scratch(int slot, size_t n);

#endif
