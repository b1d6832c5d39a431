"""Python and C check the same configuration rules (issue 18): GPTConfig accepts a
config exactly when C's bc_gpt_config_check does, and BlockConfig exactly when C's
block check does. The C structs are built here from the drawn fields, not by the
Python classes, so each side's rules are its own."""
import math

from hypothesis import given, settings, strategies as st

from blockc import BlockConfig, BlockcError, GPTConfig
from blockc._enums import C_ACT, C_DTYPE, C_NORM, C_PLACE, C_POS, WHOLE_BLOCKS
from blockc._native import ffi, lib

SIZES = st.one_of(st.integers(0, 12), st.sampled_from([2 ** 20, 2 ** 40, 2 ** 40 + 1, 2 ** 41]))
OPTIONAL = st.one_of(st.none(), st.integers(1, 12), st.sampled_from([2 ** 40, 2 ** 41]))
# the C structs hold float32: the reals drawn are float32 values (a double that rounds
# to another float32, -1e-230 to -0.0, is a question of rounding, not of the rules),
# and a few past float32's range, which both sides refuse
REALS = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32), st.sampled_from(
    [0.0, -0.0, 1e-5, 1.0, 1e38, 3.5e38, 1e39, -1e39]))


@st.composite
def gpt_fields(draw):
    f = dict(vocab=draw(SIZES), context=draw(SIZES), width=draw(SIZES), heads=draw(SIZES),
             layers=draw(SIZES), eps=draw(REALS), tie_weights=draw(st.booleans()),
             norm=draw(st.sampled_from(sorted(C_NORM))),
             placement=draw(st.sampled_from(sorted(C_PLACE))),
             activation=draw(st.sampled_from(sorted(C_ACT))), d_ff=draw(OPTIONAL),
             positions=draw(st.sampled_from(sorted(C_POS))), kv_heads=draw(OPTIONAL),
             head_dim=draw(OPTIONAL), residual=draw(st.booleans()), qkv_bias=draw(st.booleans()),
             out_bias=draw(st.booleans()), mlp_bias=draw(st.booleans()))
    # C reads rope_theta only for rotary positions; Python checks it always (a config
    # carries a usable base whatever its positions): the rule compared is the rotary one
    f["rope_theta"] = draw(REALS) if f["positions"] == "rope" else draw(
        st.floats(1e-3, 1e6))
    return f, draw(st.sampled_from(sorted(C_DTYPE)))


def c_gpt_config(f, dtype):
    return ffi.new("bc_gpt_config *", dict(
        vocab=f["vocab"], context=f["context"], width=f["width"], heads=f["heads"],
        layers=f["layers"], kv_heads=f["kv_heads"] or 0, head_dim=f["head_dim"] or 0,
        d_ff=f["d_ff"] or 0, norm=C_NORM[f["norm"]], placement=C_PLACE[f["placement"]],
        activation=C_ACT[f["activation"]], positions=C_POS[f["positions"]],
        rope_theta=_f32(f["rope_theta"]), residual=int(f["residual"]),
        qkv_bias=int(f["qkv_bias"]), out_bias=int(f["out_bias"]), mlp_bias=int(f["mlp_bias"]),
        eps=_f32(f["eps"]), tie_weights=int(f["tie_weights"]), dtype=C_DTYPE[dtype]))


def _f32(x):
    """x as the float the C struct holds (out of range: infinity, as a C cast gives)."""
    if math.isfinite(x) and abs(x) > 3.4028234663852886e38:
        return math.copysign(math.inf, x)
    return x


def _fits_c(f):
    # a size_t field holds the value (the drawn sizes all do), so C sees what Python sees
    return all(v is None or v < 2 ** 64 for v in f.values() if isinstance(v, int))


def _agree(f, dtype):
    """Whether GPTConfig accepts the fields ``f`` stored as ``dtype``, after asserting that
    C's bc_gpt_config_check gives the same answer."""
    try:
        GPTConfig(**f).c_struct(dtype)
        python_ok = True
    except BlockcError:
        python_ok = False
    c_ok = lib.bc_gpt_config_check(c_gpt_config(f, dtype)) == lib.BC_OK
    assert python_ok == c_ok, (f, dtype)
    return python_ok


@settings(max_examples=200, deadline=None)
@given(gpt_fields())
def test_gptconfig_accepts_exactly_what_c_accepts(drawn):
    f, dtype = drawn
    assert _fits_c(f)
    _agree(f, dtype)


def test_whole_block_formats_agree_on_every_matrix_width():
    """q4_k and q6_k store whole 256-column blocks: Python and C refuse the same configs (the
    width, the heads' width or d_ff not a multiple; found by the test above at width 1)."""
    base = dict(vocab=300, context=8, width=256, heads=2, layers=1, eps=1e-5, tie_weights=True,
                norm="rms", placement="pre", activation="swiglu", d_ff=512, positions="rope",
                kv_heads=None, head_dim=None, residual=True, qkv_bias=False, out_bias=False,
                mlp_bias=False, rope_theta=1e4)
    cases = [{}, {"width": 1}, {"width": 300}, {"d_ff": 300}, {"head_dim": 100},
             {"head_dim": 256}, {"width": 512, "heads": 4, "d_ff": 1024}]
    seen = set()
    for change in cases:
        f = {**base, **change}
        for dtype in sorted(C_DTYPE):
            seen.add((dtype, _agree(f, dtype)))
    for dtype in WHOLE_BLOCKS:  # both answers met for each whole-block format
        assert (dtype, True) in seen and (dtype, False) in seen


def test_bounded_column_formats_agree_at_the_bound():
    """q8_0i and q4_0i hold at most BC_Q8_0I_MAX_COLS columns (int32 sums of a row): the
    width, the heads' width and d_ff each at the bound and one block past it, uniform and
    as one matrix's own format (found by the property test above: 2**20 heads of width 1).
    The bound is C's; both sides must meet accept and refuse."""
    from blockc.model import formats, matrix_slots
    from blockc.model.layout import c_struct
    top = lib.BC_Q8_0I_MAX_COLS
    base = dict(vocab=64, context=8, width=64, heads=2, layers=1, eps=1e-5, tie_weights=True,
                norm="rms", placement="pre", activation="swiglu", d_ff=128, positions="rope",
                kv_heads=None, head_dim=None, residual=True, qkv_bias=False, out_bias=False,
                mlp_bias=False, rope_theta=1e4)
    seen = set()
    for change in ({"d_ff": top}, {"d_ff": top + 32}, {"width": top, "d_ff": 64},
                   {"width": top + 32, "d_ff": 64}, {"head_dim": top // 2},
                   {"head_dim": top // 2 + 32}):
        f = {**base, **change}
        for dtype in ("q8_0i", "q4_0i"):
            seen.add(_agree(f, dtype))
        # the down projection alone in q8_0i (its columns are d_ff), the rest float32
        cfg = GPTConfig(**f)
        try:
            c_struct(cfg, formats(cfg, dtypes={"blocks.0.down.weight": "q8_0i"}))
            python_ok = True
        except BlockcError:
            python_ok = False
        arr = ffi.new("int[]", 2 + lib.BC_GPT_NMAT * cfg.layers)
        arr[matrix_slots(cfg)["blocks.0.down.weight"]] = C_DTYPE["q8_0i"]
        cs = ffi.new("bc_gpt_config *")
        cs[0] = cfg.c_struct()[0]
        cs.dtypes = arr
        assert python_ok == (lib.bc_gpt_config_check(cs) == lib.BC_OK), change
        seen.add(("down", python_ok))
    assert seen == {True, False, ("down", True), ("down", False)}


# C has no block check of its own: bc_block_workspace_size checks the config, then
# sizes a workspace, which for a d_ff near 2**40 overflows whatever the config; the
# sizes drawn stop where the workspace of one position is still representable
BLOCK_SIZES = st.one_of(st.integers(0, 12), st.sampled_from([2 ** 10, 2 ** 19, 2 ** 20, 2 ** 21]))


@st.composite
def block_fields(draw):
    return dict(d_model=draw(BLOCK_SIZES), n_heads=draw(BLOCK_SIZES), d_ff=draw(BLOCK_SIZES),
                norm=draw(st.sampled_from(sorted(C_NORM))),
                placement=draw(st.sampled_from(sorted(C_PLACE))),
                activation=draw(st.sampled_from(sorted(C_ACT))), causal=draw(st.booleans()),
                residual=draw(st.booleans()), eps=draw(REALS))


def c_block_config(f):
    return ffi.new("bc_block_config *", dict(
        d_model=f["d_model"], n_heads=f["n_heads"], d_ff=f["d_ff"], norm=C_NORM[f["norm"]],
        placement=C_PLACE[f["placement"]], activation=C_ACT[f["activation"]],
        causal=int(f["causal"]), residual=int(f["residual"]), eps=_f32(f["eps"])))


@settings(max_examples=150, deadline=None)
@given(block_fields())
def test_blockconfig_accepts_exactly_what_c_accepts(f):
    try:
        BlockConfig(**f)
        python_ok = True
    except BlockcError:
        python_ok = False
    n = ffi.new("size_t *")
    c_ok = lib.bc_block_workspace_size(n, c_block_config(f), 1, 1) == lib.BC_OK
    assert python_ok == c_ok, f


# ---- per-matrix formats (bc_gpt_config.dtypes) -----------------------------------------------

FORMAT_CODES = st.one_of(st.sampled_from(sorted(C_DTYPE.values())), st.sampled_from([-1, 99]))


@st.composite
def mixed_fields(draw):
    layers = draw(st.sampled_from([1, 2, 3, lib.BC_GPT_FMT_LAYERS, lib.BC_GPT_FMT_LAYERS + 1]))
    f = dict(vocab=16, context=8, width=32, heads=2, layers=layers,
             tie_weights=draw(st.booleans()),
             activation=draw(st.sampled_from(["gelu_tanh", "swiglu"])))
    from blockc.model import matrix_slots
    names = list(matrix_slots(GPTConfig(**f)))
    if draw(st.booleans()):  # a few entries of their own, the rest the base format
        base = draw(st.sampled_from(sorted(C_DTYPE.values())))
        codes = dict.fromkeys(names, base)
        for n in draw(st.lists(st.sampled_from(names[:12] + names[-3:]), max_size=4)):
            codes[n] = draw(FORMAT_CODES)
    else:
        codes = {n: draw(FORMAT_CODES) for n in names[:30]}
        codes.update(dict.fromkeys(names[30:], codes[names[0]]))
    return f, codes


@settings(max_examples=80, deadline=None)
@given(mixed_fields())
def test_per_matrix_formats_python_and_c_agree(drawn):
    """A model of per-matrix formats is valid on both sides or neither: every entry a
    known format, and at most BC_GPT_FMT_LAYERS layers unless the matrices share one
    format (both sides then hold that format's uniform model: no dtypes array). The C
    struct is built here from the drawn codes; unused entries (a tied head, the gate
    without SwiGLU) stay float32, as the Python side writes them."""
    from blockc.model import formats, matrix_slots
    from blockc.model.layout import c_struct
    f, codes = drawn
    cfg = GPTConfig(**f)
    names = {v: k for k, v in C_DTYPE.items()}
    try:
        fm = formats(cfg, dtypes={n: names.get(c, f"format{c}") for n, c in codes.items()})
        c_struct(cfg, fm)
        python_ok = True
    except BlockcError:
        python_ok = False
    slots = matrix_slots(cfg)
    arr = ffi.new("int[]", 2 + lib.BC_GPT_NMAT * cfg.layers)
    for n, c in codes.items():
        arr[slots[n]] = c
        if n.endswith("attn.qkv.weight"):  # its k and v rows' entries: the same format
            arr[slots[n] - lib.BC_GPT_MAT_QKV + lib.BC_GPT_MAT_QKV_K] = c
            arr[slots[n] - lib.BC_GPT_MAT_QKV + lib.BC_GPT_MAT_QKV_V] = c
    cs = ffi.new("bc_gpt_config *")
    cs[0] = cfg.c_struct()[0]
    if len(set(codes.values())) > 1:
        cs.dtypes = arr
    else:
        cs.dtype = next(iter(codes.values()))
    c_ok = lib.bc_gpt_config_check(cs) == lib.BC_OK
    assert python_ok == c_ok, (f, codes)
