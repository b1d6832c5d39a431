/* fast_elementwise.h: the elementwise kernels, each forward beside its
 * backward (part of the kernel template, fast_tmpl.h: included once per
 * instruction set). y, x (n); chunks of n spread over threads by
 * elementwise.c and grad.c. */

/* ---- activations: y = act(x); dx = dy * act'(x) ---------------------------- */

// y (n), x (n)
static void act(float *y, const float *x, size_t n, int kind)
{
    size_t i = 0;
    for (; i + VL <= n; i += VL)
        vstore(y + i, vact(vload(x + i), kind));
    if (i < n)
        vstoren(y + i, vact(vloadn(x + i, n - i), kind), n - i);
}

/* dy * act'(x) */
static inline V vact_bwd(V dy, V x, int kind)
{
    switch (kind) {
    case BC_ACT_GELU_TANH: {
        /* gelu = x s, s = 1 / (1 + exp(-2u)), u = c (x + a x^3): s + 2 x s (1 - s) u' */
        const V x2 = vmul(x, x);
        const V u = vmul(vset1(0.7978845608f), vfma(vmul(vset1(0.044715f), x2), x, x));
        const V s = vdiv(vset1(1.0f), vadd(vset1(1.0f), vexp(vmul(vset1(-2.0f), u))));
        const V du = vmul(vset1(0.7978845608f), vfma(vset1(3.0f * 0.044715f), x2, vset1(1.0f)));
        const V ds = vmul(vmul(vset1(2.0f), vmul(s, vsub(vset1(1.0f), s))), du);
        return vmul(dy, vfma(x, ds, s));
    }
    case BC_ACT_GELU: {  /* Phi(x) + x phi(x) */
        float xs[VL], ds[VL];
        vstore(xs, x);
        vstore(ds, dy);
        for (int i = 0; i < VL; i++) {
            const float cdf = 0.5f * (1.0f + erff(xs[i] * 0.70710678118654752f));
            const float pdf = 0.39894228040143268f * expf(-0.5f * xs[i] * xs[i]);
            ds[i] *= cdf + xs[i] * pdf;
        }
        return vload(ds);
    }
    case BC_ACT_RELU: {  /* dy where x > 0 */
        float xs[VL], ds[VL];
        vstore(xs, x);
        vstore(ds, dy);
        for (int i = 0; i < VL; i++)
            ds[i] = xs[i] > 0.0f ? ds[i] : 0.0f;
        return vload(ds);
    }
    default:
        return dy;
    }
}

// dx (n), dy (n), x (n); dx may be dy
static void act_bwd(float *dx, const float *dy, const float *x, size_t n, int kind)
{
    size_t i = 0;
    for (; i + VL <= n; i += VL)
        vstore(dx + i, vact_bwd(vload(dy + i), vload(x + i), kind));
    if (i < n)
        vstoren(dx + i, vact_bwd(vloadn(dy + i, n - i), vloadn(x + i, n - i), kind), n - i);
}

/* ---- the gated MLP: y = silu(gate) * up ------------------------------------ */

// y (n), gate (n), up (n)
static void swiglu(float *y, const float *gate, const float *up, size_t n)
{
    size_t i = 0;
    for (; i + VL <= n; i += VL)
        vstore(y + i, vmul(vsilu(vload(gate + i)), vload(up + i)));
    if (i < n)
        vstoren(y + i, vmul(vsilu(vloadn(gate + i, n - i)), vloadn(up + i, n - i)), n - i);
}

/* y = silu(g) u: dup = dy g s, dgate = dy u s (1 + g (1 - s)), s = sigmoid(g) */
BC_INLINE void vswiglu_bwd(V *dg, V *du, V dy, V g, V u)
{
    const V one = vset1(1.0f);
    const V s = vdiv(one, vadd(one, vexp(vsub(vzero(), g))));
    *du = vmul(dy, vmul(g, s));
    *dg = vmul(vmul(dy, u), vmul(s, vfma(g, vsub(one, s), one)));
}

// dgate (n), dup (n), dy (n), gate (n), up (n); outputs may alias dy
static void swiglu_bwd(float *dgate, float *dup, const float *dy, const float *gate,
                       const float *up, size_t n)
{
    size_t i = 0;
    V dg, du;
    for (; i + VL <= n; i += VL) {
        vswiglu_bwd(&dg, &du, vload(dy + i), vload(gate + i), vload(up + i));
        vstore(dgate + i, dg);
        vstore(dup + i, du);
    }
    if (i < n) {
        const size_t m = n - i;
        vswiglu_bwd(&dg, &du, vloadn(dy + i, m), vloadn(gate + i, m), vloadn(up + i, m));
        vstoren(dgate + i, dg, m);
        vstoren(dup + i, du, m);
    }
}

/* ---- the residual addition: y = a + b (its gradient is dy, twice) ---------- */

// y (n), a (n), b (n)
static void add(float *y, const float *a, const float *b, size_t n)
{
    size_t i = 0;
    for (; i + VL <= n; i += VL)
        vstore(y + i, vadd(vload(a + i), vload(b + i)));
    if (i < n)
        vstoren(y + i, vadd(vloadn(a + i, n - i), vloadn(b + i, n - i)), n - i);
}

/* ---- a bias's gradient: the column sums of dy ------------------------------ */

/* db[o] += dy[i][o] for i = 0, 1, ... in order: each column's chain is the
 * scalar loop's; 4 VL columns at a time held in registers down the rows. */
// db (OC), dy (N,OC): columns [o0,o1)
static void colsum(float *db, const float *dy, size_t n, size_t oc, size_t o0, size_t o1)
{
    size_t o = o0;
    for (; o + 4 * VL <= o1; o += 4 * VL) {
        V s0 = vload(db + o), s1 = vload(db + o + VL);
        V s2 = vload(db + o + 2 * VL), s3 = vload(db + o + 3 * VL);
        for (size_t i = 0; i < n; i++) {
            const float *r = dy + i * oc + o;
            s0 = vadd(s0, vload(r));
            s1 = vadd(s1, vload(r + VL));
            s2 = vadd(s2, vload(r + 2 * VL));
            s3 = vadd(s3, vload(r + 3 * VL));
        }
        vstore(db + o, s0);
        vstore(db + o + VL, s1);
        vstore(db + o + 2 * VL, s2);
        vstore(db + o + 3 * VL, s3);
    }
    for (; o < o1; o += VL) {
        const size_t k = min_sz(VL, o1 - o);
        V s = vloadn(db + o, k);
        for (size_t i = 0; i < n; i++)
            s = vadd(s, vloadn(dy + i * oc + o, k));
        vstore_n(db + o, s, k);
    }
}

/* ---- the optimizer: AdamW (bc_adamw_args) -------------------------------- */

// p, m, v (n) updated in place; g (n)
static void adamw(float *p, float *m, float *v, const float *g, size_t n, const bc_adamw_args *a)
{
    const V decay = vset1(a->decay), b2 = vset1(a->b2), omb1 = vset1(a->omb1);
    const V omb2 = vset1(a->omb2), step = vset1(a->step), bc2s = vset1(a->bc2s);
    const V eps = vset1(a->eps), gscale = vset1(a->gscale);
    const int scaled = a->gscale != 1.0f;
    for (size_t i = 0; i < n; i += VL) {
        const size_t k = min_sz(VL, n - i);
        V gv = k == VL ? vload(g + i) : vloadn(g + i, k);
        if (scaled)
            gv = vmul(gv, gscale);
        const V p0 = k == VL ? vload(p + i) : vloadn(p + i, k);
        const V m0 = k == VL ? vload(m + i) : vloadn(m + i, k);
        const V v0 = k == VL ? vload(v + i) : vloadn(v + i, k);
        const V m1 = vadd(m0, vmul(omb1, vsub(gv, m0)));
        const V v1 = vadd(vmul(v0, b2), vmul(vmul(omb2, gv), gv));
        const V den = vadd(vdiv(vsqrt(v1), bc2s), eps);
        const V p1 = vadd(vmul(p0, decay), vmul(step, vdiv(m1, den)));
        if (k == VL) {
            vstore(p + i, p1);
            vstore(m + i, m1);
            vstore(v + i, v1);
        } else {
            vstoren(p + i, p1, k);
            vstoren(m + i, m1, k);
            vstoren(v + i, v1, k);
        }
    }
}
