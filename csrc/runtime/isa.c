/* isa.c: the instruction set: the widest this CPU and build run, the one
 * forced (BLOCKC_ISA, bc_set_isa) or auto, and each one's table of kernels.
 * tune.c assembles auto mode's table on top of these; runtime.c fixes one
 * table per call (bc_rt_ctx). */
#include <stdlib.h>
#include <string.h>
#include "bc_core.h"
#include "bc_atomic.h"
#include "bc_rt.h"

/* ---- instruction set ---------------------------------------------------- */

static int g_isa = -1;      /* forced or detected; -1 until the first call */
static int g_best = -1;

static int detect_best(void)
{
#ifdef BC_HAVE_X86_KERNELS
    __builtin_cpu_init();
    /* F16C converts q8_0's half-precision scales (every AVX2 CPU has it) */
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
                     && __builtin_cpu_supports("f16c");
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
        return BC_ISA_AVX512;
    if (avx2)
        return BC_ISA_AVX2;
#endif
    return BC_ISA_GENERIC;
}

/* BLOCKC_ISA: a name forces that instruction set (never more than the CPU
 * has); unset, "auto" or anything else: each family its measured variant. */
static int isa_from_env(int best)
{
    const char *s = getenv("BLOCKC_ISA");
    int want = BC_ISA_AUTO;
    if (s && *s) {
        if (!strcmp(s, "generic")) want = BC_ISA_GENERIC;
        else if (!strcmp(s, "avx2")) want = BC_ISA_AVX2;
        else if (!strcmp(s, "avx512")) want = BC_ISA_AVX512;
    }
    return want == BC_ISA_AUTO || want <= best ? want : best;
}

static int isa_now(void)
{
    int isa = BC_LOAD(&g_isa);
    if (isa < 0) {
        int best = BC_LOAD(&g_best);
        if (best < 0) {
            best = detect_best();
            BC_STORE(&g_best, best);
        }
        BC_INIT_ONCE(&g_isa, isa_from_env(best));
        isa = BC_LOAD(&g_isa);
    }
    return isa;
}

int bc_rt_best_isa(void)
{
    isa_now();
    return BC_LOAD(&g_best);
}

int bc_rt_forced_isa(void)
{
    const int isa = isa_now();
    return isa == BC_ISA_AUTO ? -1 : isa;
}

/* The one place an instruction set becomes a table of kernels. */
const bc_kernel_table *bc_rt_table_of(int isa)
{
#ifdef BC_HAVE_X86_KERNELS
    if (isa == BC_ISA_AVX512)
        return &bc_kernels_avx512;
    if (isa == BC_ISA_AVX2)
        return &bc_kernels_avx2;
#endif
    (void)isa;
    return &bc_kernels_generic;
}

int bc_best_isa(int *isa)
{
    if (!isa)
        return BC_ENULL;
    isa_now();
    *isa = BC_LOAD(&g_best);
    return BC_OK;
}

int bc_get_isa(int *isa)
{
    if (!isa)
        return BC_ENULL;
    *isa = isa_now();
    return BC_OK;
}

int bc_set_isa(int isa)
{
    isa_now();
    if (isa != BC_ISA_AUTO && (isa < BC_ISA_GENERIC || isa > BC_ISA_AVX512 || isa > BC_LOAD(&g_best)))
        return BC_EOPTION;
    BC_STORE(&g_isa, isa);
    return BC_OK;
}
