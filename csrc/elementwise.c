/* elementwise.c: norms, activations and the residual addition. */
#include <math.h>
#include "kernels.h"

// y (N,C), x (N,C), g (C) or NULL
void bc_k_rmsnorm(float *y, const float *x, const float *g, size_t n, size_t c, float eps)
{
    for (size_t i = 0; i < n; i++) {
        const float *xi = x + i * c;
        float *yi = y + i * c;
        double ss = 0.0;
        for (size_t j = 0; j < c; j++)
            ss += (double)xi[j] * xi[j];
        const float inv = 1.0f / sqrtf((float)(ss / (double)c) + eps);
        for (size_t j = 0; j < c; j++)
            yi[j] = g ? xi[j] * inv * g[j] : xi[j] * inv;
    }
}

// y (N,C), x (N,C), g (C) or NULL, b (C) or NULL
void bc_k_layernorm(float *y, const float *x, const float *g, const float *b,
                    size_t n, size_t c, float eps)
{
    for (size_t i = 0; i < n; i++) {
        const float *xi = x + i * c;
        float *yi = y + i * c;
        double s = 0.0;
        for (size_t j = 0; j < c; j++)
            s += xi[j];
        const double mean = s / (double)c;
        double var = 0.0;
        for (size_t j = 0; j < c; j++) {
            const double d = xi[j] - mean;
            var += d * d;
        }
        const float m = (float)mean;
        const float inv = (float)(1.0 / sqrt(var / (double)c + (double)eps));
        for (size_t j = 0; j < c; j++) {
            float t = (xi[j] - m) * inv;
            if (g) t *= g[j];
            if (b) t += b[j];
            yi[j] = t;
        }
    }
}

static float gelu_tanh(float x)
{
    const float c = 0.7978845608f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}

static float silu(float x) { return x / (1.0f + expf(-x)); }

// y (n), x (n)
void bc_k_act(float *y, const float *x, size_t n, int kind)
{
    for (size_t i = 0; i < n; i++) {
        const float v = x[i];
        switch (kind) {
        case BC_ACT_GELU_TANH: y[i] = gelu_tanh(v); break;
        case BC_ACT_GELU: y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); break;
        case BC_ACT_RELU: y[i] = v > 0.0f ? v : (v == v ? 0.0f : v); break;
        case BC_ACT_SILU: y[i] = silu(v); break;
        default: y[i] = v; break;
        }
    }
}

// y (n), gate (n), up (n)
void bc_k_swiglu(float *y, const float *gate, const float *up, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = silu(gate[i]) * up[i];
}

// y (n), a (n), b (n)
void bc_k_add(float *y, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = a[i] + b[i];
}
