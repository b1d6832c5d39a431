/* bc_simd_scalar.h: the scalar activations (internal), for tails and fallbacks. */
#ifndef BC_SIMD_SCALAR_H
#define BC_SIMD_SCALAR_H

#include <math.h>
#include "bc_engine.h"  /* BC_ACT_* */

static inline float bc_act_scalar(float v, int kind)
{
    switch (kind) {
    case BC_ACT_GELU_TANH:
        return 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
    case BC_ACT_GELU: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    case BC_ACT_RELU: return v > 0.0f ? v : (v == v ? 0.0f : v);
    case BC_ACT_SILU: return v / (1.0f + expf(-v));
    default: return v;
    }
}

#endif
