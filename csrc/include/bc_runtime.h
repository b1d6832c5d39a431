/* bc_runtime.h: how the fast kernels run (thread count, instruction set).
 *
 * Results never depend on the thread count: every output element is computed
 * by the same operations in the same order whichever thread computes it. They
 * may differ in the last bits between instruction sets (FMA vs separate
 * multiply and add), always within float32 tolerance of the oracle.
 */
#ifndef BC_RUNTIME_H
#define BC_RUNTIME_H

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel instruction sets. BLOCKC_ISA=generic|avx2|avx512 in the environment
 * (read once, at the first kernel call) forces one; otherwise the best the CPU
 * and OS support is used. */
#define BC_ISA_GENERIC 0
#define BC_ISA_AVX2 1
#define BC_ISA_AVX512 2

/* Threads the kernels use from now on (n >= 1), or n == 0 to go back to the
 * default: BLOCKC_NUM_THREADS if set, else OMP_NUM_THREADS, else the processors
 * (never more than the processors). BC_ESIZE if n < 0
 * or n > 4096. */
int bc_set_num_threads(int n);

/* *n = the number of threads the next kernel call may use (1 in a build without
 * threads). */
int bc_get_num_threads(int *n);

/* Force an instruction set (BC_ISA_*); BC_EOPTION if unknown or not supported
 * by this CPU and build. */
int bc_set_isa(int isa);

/* *isa = the instruction set the kernels use now (BC_ISA_*). */
int bc_get_isa(int *isa);

/* *isa = the best instruction set this CPU and build support (BC_ISA_*). */
int bc_best_isa(int *isa);

#ifdef __cplusplus
}
#endif

#endif
