"""blockc.gguf and blockc.reference.ggml: the gguf package (llama.cpp's own Python reader
and writer) as the peer, and hostile files.

Every malformed file must end in a BlockcValueError (a ValueError) naming the file and
the key or tensor, never in another exception, a crash or a read out of bounds.
"""
import os
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blockc import BlockcValueError
from blockc import gguf as bg
from blockc.io import gguf as fmt, gguf_strings
from blockc.reference import ggml

gguf = pytest.importorskip("gguf")
gq = pytest.importorskip("gguf.quants")
T = gguf.GGMLQuantizationType

TYPES = list(ggml.QUANTISE)


def weights(rng, rows, cols, scale=1.0):
    """Weights with the hard cases in them: a zero block, a constant row, outliers."""
    x = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
    x[0, :64] = 0
    if rows > 1:
        x[1, :] = 0.5
    if rows > 2:
        x[2, ::7] *= 30
    return x


# ---- the oracle against gguf.quants --------------------------------------------------------------

@pytest.mark.parametrize("name", TYPES)
def test_quantise_matches_gguf_quants_bit_for_bit(name):
    """Blocks bit-identical to gguf.quants.quantize wherever it quantises the type (every
    type but the K-quants, which the package does not quantise)."""
    rng = np.random.default_rng(1)
    for scale in (1e-3, 1.0, 300.0):
        x = weights(rng, 6, 512, scale)
        mine = ggml.quantise(x, name)
        try:
            ref = gq.quantize(x, T[name])
        except NotImplementedError:
            continue
        assert np.array_equal(mine, ref.view(np.uint8).reshape(mine.shape)), (name, scale)


@pytest.mark.parametrize("name", TYPES)
def test_dequantise_matches_gguf_quants_bit_for_bit(name):
    """Our dequantised tensors equal gguf.quants.dequantize bit for bit: of our quantised
    weights, and of arbitrary bytes (any scale, any nibble; NaN payloads included)."""
    rng = np.random.default_rng(2)
    x = weights(rng, 5, 1024)
    for blob in (ggml.quantise(x, name),
                 rng.integers(0, 256, (7, ggml.BLOCKS[name][1] * 4), dtype=np.uint8)):
        mine = ggml.dequantise(blob, name)
        ref = np.asarray(gq.dequantize(blob, T[name]), np.float32)
        assert mine.shape == ref.shape
        assert np.array_equal(mine.view(np.uint32), ref.view(np.uint32)), name


@pytest.mark.parametrize("name,budget", [("Q8_0", 0.0058), ("Q6_K", 0.019), ("Q5_K", 0.039),
                                         ("Q5_1", 0.041), ("Q5_0", 0.046), ("Q4_K", 0.076),
                                         ("Q4_1", 0.084), ("Q4_0", 0.093)])
def test_quantise_error_budget(name, budget):
    """Gaussian weights come back within each type's error (relative RMS): a quantiser
    that picked bad scales, or a packing off by a nibble, would miss it by far."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 512)).astype(np.float32)
    back = ggml.dequantise(ggml.quantise(x, name), name)
    rel = float(np.sqrt(np.mean((back - x) ** 2) / np.mean(x ** 2)))
    assert rel < budget, (name, rel)


def test_k_quants_are_fixed_points():
    """A K-quant block dequantised and quantised again comes back the same bytes where the
    weights lie on its grid (the quantiser finds the grid it was given)."""
    rng = np.random.default_rng(4)
    for name in ("Q4_K", "Q5_K", "Q6_K"):
        b = ggml.quantise(rng.standard_normal((4, 256)).astype(np.float32), name)
        w = ggml.dequantise(b, name)
        w2 = ggml.dequantise(ggml.quantise(w, name), name)
        rel = np.abs(w2 - w).max() / np.abs(w).max()
        assert rel < 0.02, (name, rel)


def test_quantise_refuses():
    with pytest.raises(ValueError, match="blocks of 32"):
        ggml.quantise(np.zeros((2, 40), np.float32), "Q4_0")
    with pytest.raises(ValueError, match="finite"):
        ggml.quantise(np.full((1, 32), np.inf, np.float32), "Q8_0")
    with pytest.raises(ValueError, match="type must be"):
        ggml.quantise(np.zeros((1, 32), np.float32), "IQ2_XXS")
    with pytest.raises(ValueError, match="type must be"):
        ggml.dequantise(np.zeros((1, 66), np.uint8), "IQ2_XXS")
    with pytest.raises(ValueError, match="whole blocks of 84"):
        ggml.dequantise(np.zeros((1, 18), np.uint8), "Q2_K")


# ---- reading files the gguf package writes -------------------------------------------------------

def peer_file(path, tensors, extra=None, arch="llama"):
    """A GGUF written by gguf.GGUFWriter: tensors name -> (type name, float32 weights)."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_uint32("t.u32", 7)
    w.add_int32("t.i32", -7)
    w.add_float32("t.f32", 0.25)
    w.add_uint64("t.u64", 2 ** 40)
    w.add_int64("t.i64", -(2 ** 40))
    w.add_float64("t.f64", 1e-300)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "naïve 🙂")
    w.add_uint8("t.u8", 255)
    w.add_int8("t.i8", -128)
    w.add_uint16("t.u16", 65535)
    w.add_int16("t.i16", -32768)
    w.add_array("t.strs", ["a", "", "ü" * 3])
    w.add_array("t.ints", [1, 2, 3])
    w.add_array("t.floats", [0.5, 1.5])
    for k, v in (extra or {}).items():
        w.add_array(k, v) if isinstance(v, list) else w.add_string(k, v)
    for name, (tname, x) in tensors.items():
        if tname == "F32":
            w.add_tensor(name, x.astype(np.float32))
        elif tname == "F16":
            w.add_tensor(name, x.astype(np.float16))
        else:
            b = ggml.quantise(x, tname)
            w.add_tensor(name, b, raw_shape=b.shape, raw_dtype=T[tname])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_reads_every_value_type_and_tensor_type(tmp_path):
    rng = np.random.default_rng(5)
    tensors = {f"w.{n}": (n, weights(rng, 3, 256)) for n in TYPES}
    tensors["vec"] = ("F32", rng.standard_normal((1, 64)).astype(np.float32)[0])
    tensors["cube"] = ("F32", rng.standard_normal((2, 3, 32)).astype(np.float32))
    p = peer_file(tmp_path / "a.gguf", tensors)
    f = bg.read(p)
    assert f.version == 3 and f.alignment == 32
    m = f.metadata
    assert m["general.architecture"] == "llama"
    assert (m["t.u32"], m["t.i32"], m["t.f32"], m["t.u64"], m["t.i64"]) == (7, -7, 0.25, 2 ** 40, -(2 ** 40))
    assert m["t.f64"] == 1e-300 and m["t.bool"] is True and m["t.str"] == "naïve 🙂"
    assert (m["t.u8"], m["t.i8"], m["t.u16"], m["t.i16"]) == (255, -128, 65535, -32768)
    assert m["t.strs"] == ["a", "", "üüü"]
    assert list(m["t.ints"]) == [1, 2, 3] and list(m["t.floats"]) == [0.5, 1.5]
    assert f.fields["t.u16"].type == "UINT16" and f.fields["t.ints"].element == "INT32"
    peer = gguf.GGUFReader(str(p))
    for pt in peer.tensors:
        t = f.tensors[pt.name]
        assert t.type == pt.tensor_type.name
        assert t.shape == tuple(int(d) for d in reversed(pt.shape.tolist()))
        assert t.offset + f.data_offset == pt.data_offset
        ref = np.asarray(gq.dequantize(pt.data, pt.tensor_type), np.float32).reshape(t.shape)
        assert np.array_equal(t.to_float32().view(np.uint32), ref.view(np.uint32)), pt.name
    assert not t.data.flags.writeable  # read-only, like a mapping's view


def test_write_is_read_back_by_the_peer(tmp_path):
    rng = np.random.default_rng(6)
    x = weights(rng, 4, 512)
    p = tmp_path / "b.gguf"
    meta = {"general.architecture": "llama", "a.u32": 5, "a.big": 2 ** 40, "a.f": 0.5,
            "a.s": "ok", "a.b": False, "a.strs": ["x", "yz"], "a.ints": [3, -4],
            "a.u8": bg.Value("UINT8", 9), "a.f64": bg.Value("FLOAT64", 0.1),
            "a.arr": bg.Value("ARRAY", np.arange(5, dtype=np.float32), "FLOAT32")}
    tensors = [(f"w.{n}", n, x.shape, ggml.quantise(x, n)) for n in TYPES]
    bg.write(p, meta, tensors, alignment=64)
    assert [e for e in os.listdir(tmp_path)] == ["b.gguf"]  # no temporary left behind
    peer = gguf.GGUFReader(str(p))
    assert peer.fields["a.u32"].contents() == 5 and peer.fields["a.big"].contents() == 2 ** 40
    assert peer.fields["a.strs"].contents() == ["x", "yz"]
    assert peer.fields["a.s"].contents() == "ok" and peer.fields["a.b"].contents() is False
    assert peer.fields["general.alignment"].contents() == 64
    assert abs(peer.fields["a.f64"].contents() - 0.1) == 0
    for pt, (name, tname, shape, blob) in zip(peer.tensors, tensors):
        assert pt.name == name and pt.tensor_type.name == tname
        assert pt.data_offset % 64 == 0
        assert np.array_equal(np.asarray(pt.data).view(np.uint8).reshape(blob.shape), blob)
    f = bg.read(p)  # and blockc reads its own file back: the same fields, types and bytes
    assert f.alignment == 64 and f.fields["a.u8"] == bg.Value("UINT8", 9)
    assert f.fields["a.big"].type == "INT64" and f.fields["a.ints"].element == "INT32"
    for name, tname, shape, blob in tensors:
        assert np.array_equal(f.tensors[name].data, blob)


def test_write_refuses():
    with pytest.raises(BlockcValueError, match="appears twice"):
        bg.write("/nonexistent/x.gguf", {}, [("a", "F32", (4,), np.zeros(4, np.float32))] * 2)
    with pytest.raises(BlockcValueError, match="bytes of data"):
        bg.write("/nonexistent/x.gguf", {}, [("a", "Q4_0", (32,), np.zeros(10, np.uint8))])
    with pytest.raises(BlockcValueError, match="blocks of 32"):
        bg.write("/nonexistent/x.gguf", {}, [("a", "Q4_0", (16,), np.zeros(9, np.uint8))])
    with pytest.raises(TypeError, match="no GGUF type"):
        bg.write("/nonexistent/x.gguf", {"k": object()}, [])


# ---- hostile files -------------------------------------------------------------------------------

def s(text):
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def kv(key, vt, payload):
    return s(key) + struct.pack("<I", vt) + payload


def info(name, ne, tt, off):
    return s(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne) + \
        struct.pack("<IQ", tt, off)


def gguf_bytes(kvs=(), infos=(), data=b"", version=3, n_kv=None, n_t=None, align=32):
    head = b"GGUF" + struct.pack("<IQQ", version, len(infos) if n_t is None else n_t,
                                 len(kvs) if n_kv is None else n_kv)
    head += b"".join(kvs) + b"".join(infos)
    head += b"\0" * (-len(head) % align)
    return head + data


GOOD = gguf_bytes([kv("a", 4, struct.pack("<I", 1))], [info("t", [32, 2], 0, 0)],
                  np.arange(64, dtype=np.float32).tobytes())


def refused(tmp_path, b, match):
    p = tmp_path / "h.gguf"
    p.write_bytes(b)
    with pytest.raises(BlockcValueError, match=match) as e:
        bg.read(p)
    assert str(p) in str(e.value)
    return str(e.value)


def test_the_good_file_reads(tmp_path):
    p = tmp_path / "g.gguf"
    p.write_bytes(GOOD)
    f = bg.read(p)
    assert f.tensors["t"].shape == (2, 32)
    assert np.array_equal(f.tensors["t"].to_float32().ravel(), np.arange(64, dtype=np.float32))
    assert gguf.GGUFReader(str(p)).tensors[0].name == "t"  # the peer reads it too


HOSTILE = [
    (b"", "empty file"),
    (b"GGML" + GOOD[4:], "not a GGUF file"),
    (GOOD[:3], "not a GGUF file"),
    (GOOD[:10], "truncated"),
    (b"GGUF" + struct.pack("<I", 1) + GOOD[8:], "version 1"),
    (b"GGUF" + struct.pack(">I", 3) + GOOD[8:], "big-endian"),
    (b"GGUF" + struct.pack("<I", 99) + GOOD[8:], "version 99"),
    (gguf_bytes(n_kv=2 ** 62), "metadata keys"),
    (gguf_bytes(n_t=2 ** 62), "tensors"),
    (gguf_bytes([kv("a", 4, struct.pack("<I", 1))] * 2), "'a' appears twice"),
    (gguf_bytes([kv("a", 13, b"")], n_kv=1), "unknown value type 13"),
    (gguf_bytes([kv("a", 8, struct.pack("<Q", 2 ** 40) + b"abc")]), "longer than"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 50) + b"xx" + b"\0" * 12, "key 0.*longer than"),
    (gguf_bytes([kv("a", 8, s(b"\xff\xfe"))]), "UTF-8"),
    (gguf_bytes([s(b"\xc3") + struct.pack("<I", 4) + struct.pack("<I", 0)]), "UTF-8"),
    (gguf_bytes([kv("a", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 4, 0))]), "array of arrays"),
    (gguf_bytes([kv("a", 9, struct.pack("<IQ", 4, 2 ** 61))]), "cannot fit"),
    (gguf_bytes([kv("a", 9, struct.pack("<IQ", 8, 2 ** 61))]), "cannot fit"),
    (gguf_bytes([kv("a", 9, struct.pack("<IQ", 8, 2) + s("ok") + struct.pack("<Q", 999))]), r"'a'\[1\].*longer"),
    (gguf_bytes([kv("a", 9, struct.pack("<IQ", 77, 1))]), "unknown value type 77"),
    # the string arrays' one-pass parse (blockc.io.gguf_strings) gives way to the careful one
    (gguf_bytes([kv("a", 9, struct.pack("<IQ", 8, 3) + s("ok") + s("fine") + s(b"\xff"))]),
     r"'a'\[2\]: not valid UTF-8"),
    (gguf_bytes([kv("a", 9, struct.pack("<IQ", 8, 2) + s(b"\xc3") + s(b"\xa9"))]),
     r"'a'\[0\]: not valid UTF-8"),
    (gguf_bytes([kv("a", 9, struct.pack("<IQ", 8, 3) + s("ok") + struct.pack("<Q", 2 ** 63)
                    + s("x"))]), r"'a'\[1\].*longer"),
    (gguf_bytes([kv("a", 7, b"\x02")]), "BOOL"),
    (gguf_bytes([kv("general.alignment", 4, struct.pack("<I", 24))]), "power of two"),
    (gguf_bytes([kv("general.alignment", 4, struct.pack("<I", 0))]), "power of two"),
    (gguf_bytes([kv("general.alignment", 10, struct.pack("<Q", 32))]), "UINT32"),
    (gguf_bytes([], [info("t", [32], 0, 0)] * 2, b"\0" * 256), "'t' appears twice"),
    (gguf_bytes([], [info("t", [32], 77, 0)], b"\0" * 256), "unknown ggml type 77"),
    (gguf_bytes([], [info("t", [], 0, 0)], b"\0" * 256), "0 dimensions"),
    (gguf_bytes([], [info("t", [1] * 5, 0, 0)], b"\0" * 256), "5 dimensions"),
    (gguf_bytes([], [info("t", [32, 0], 0, 0)], b"\0" * 256), "dimension of 0"),
    (gguf_bytes([], [info("t", [2 ** 32, 2 ** 32], 0, 0)], b"\0" * 256), "2\\*\\*40"),
    (gguf_bytes([], [info("t", [2 ** 63, 2 ** 63, 2 ** 63], 0, 0)], b"\0" * 256), "2\\*\\*40"),
    (gguf_bytes([], [info("t", [33], 2, 0)], b"\0" * 256), "blocks of 32"),
    (gguf_bytes([], [info("t", [32], 0, 16)], b"\0" * 256), "not a multiple of the alignment"),
    (gguf_bytes([], [info("t", [64], 0, 0)], b"\0" * 255), "lie outside"),
    (gguf_bytes([], [info("t", [32], 0, 2 ** 63)], b"\0" * 256), "lie outside"),
    (gguf_bytes([], [info("a", [32], 0, 0), info("b", [32], 0, 64)], b"\0" * 256), "overlap"),
    (gguf_bytes([], [info("t", [32], 0, 0)]), "lie outside|truncated"),
]


@pytest.mark.parametrize("blob,match", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_files_are_refused_by_name(tmp_path, blob, match):
    refused(tmp_path, blob, match)


def test_truncated_at_every_byte(tmp_path):
    """Every prefix of a real file is refused (or, past the header, reads tensors it holds)."""
    rng = np.random.default_rng(7)
    p = peer_file(tmp_path / "a.gguf", {"w": ("Q4_K", weights(rng, 2, 256))})
    b = p.read_bytes()
    q = tmp_path / "t.gguf"
    for n in list(range(0, 400)) + list(range(400, len(b) - 1, 37)):
        q.write_bytes(b[:n])
        with pytest.raises(BlockcValueError):
            bg.read(q)


def test_a_file_truncated_under_the_reader_is_an_error_not_sigbus(tmp_path):
    """read() keeps the file open and reads a tensor's bytes when asked: a file truncated
    after its header was read (another process rewriting it in place) is a ValueError
    naming the tensor, never SIGBUS as a mapping gives; the data read before are whole."""
    import subprocess
    import sys
    rng = np.random.default_rng(8)
    p = peer_file(tmp_path / "a.gguf", {"w": ("Q8_0", weights(rng, 64, 256)),
                                        "v": ("F32", weights(rng, 64, 256))})
    prog = f"""
import os, sys
import numpy as np
from blockc import BlockcValueError
from blockc import gguf as bg
f = bg.read({str(p)!r})
w = f.tensors["w"].data.copy()
os.truncate({str(p)!r}, f.data_offset + f.tensors["v"].offset + 100)
assert np.array_equal(f.tensors["w"].data, w) or f.tensors["w"].offset > f.tensors["v"].offset
try:
    f.tensors["v"].data
except BlockcValueError as e:
    print("refused:", e)
    sys.exit(0)
sys.exit(3)
"""
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=60,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])   # -7 would be SIGBUS
    assert "tensor 'v'" in r.stdout and "bytes short" in r.stdout


def test_a_header_longer_than_the_first_read_is_read_whole(tmp_path, monkeypatch):
    """The header is read as a prefix grown until it fits: a prefix of 64 bytes (every
    string, array and tensor info crossing its end at some growth) reads the same file."""
    from blockc.io import gguf as fmt
    rng = np.random.default_rng(9)
    p = peer_file(tmp_path / "a.gguf", {"w": ("Q4_0", weights(rng, 4, 256))},
                  extra={"long.text": "x" * 5000})
    whole = bg.read(p)
    monkeypatch.setattr(fmt, "_HEADER_PREFIX", 64)
    small = bg.read(p)
    assert small.metadata.keys() == whole.metadata.keys()
    assert small.get("long.text") == "x" * 5000 and small.get("t.strs") == ["a", "", "üüü"]
    assert np.array_equal(small.tensors["w"].data, whole.tensors["w"].data)
    with small:
        pass
    with pytest.raises(BlockcValueError, match="closed"):
        small.tensors["w"].data


def test_not_a_regular_file(tmp_path):
    for p in ("/dev/null", tmp_path):
        with pytest.raises(BlockcValueError, match="not a regular file"):
            bg.read(p)
    fifo = tmp_path / "fifo.gguf"
    os.mkfifo(fifo)
    with pytest.raises(BlockcValueError, match="not a regular file"):  # and it does not hang
        bg.read(fifo)


_FUZZ_BASE = None


def _fuzz_base():
    global _FUZZ_BASE
    if _FUZZ_BASE is None:
        import tempfile
        rng = np.random.default_rng(8)
        with tempfile.TemporaryDirectory() as d:
            p = peer_file(os.path.join(d, "f.gguf"), {"a": ("Q4_0", weights(rng, 2, 64)),
                                                      "b": ("Q6_K", weights(rng, 1, 256))})
            _FUZZ_BASE = open(p, "rb").read()
    return _FUZZ_BASE


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.integers(0, 2 ** 20), st.integers(0, 255)), min_size=1, max_size=6),
       st.one_of(st.none(), st.integers(0, 2 ** 20)))
def test_fuzz_mutated_files(edits, cut):
    """Bytes of a real file flipped (mostly in the header, where the counts and offsets
    are) and cut: read, or refused with a BlockcValueError; dequantising what reads works."""
    b = bytearray(_fuzz_base())
    header_end = 700
    for pos, val in edits:
        b[pos % header_end if pos % 4 else pos % len(b)] = val
    if cut is not None:
        b = b[:cut % (len(b) + 1)]
    try:
        f = bg.parse_bytes(bytes(b), "fuzz.gguf")
    except BlockcValueError as e:
        assert "fuzz.gguf" in str(e)
        return
    for t in f.tensors.values():
        try:
            v = t.to_float32()
        except BlockcValueError as e:  # a type blockc reads but does not dequantise
            assert t.name in str(e)
            continue
        assert v.shape == t.shape


# ---- string arrays: the one-pass parse is the careful one's ----------------------------------------

def _careful(raw):
    """The strings of an array's items one by one: the decoded list, or None if one is not
    valid UTF-8."""
    try:
        return [x.decode("utf-8") for x in raw]
    except UnicodeDecodeError:
        return None


_ITEM = st.one_of(st.text(max_size=10), st.text(max_size=3).map(lambda t: t.encode()),
                  st.binary(max_size=6), st.just(b""), st.just(b"a\0b"),
                  st.text(min_size=256, max_size=300), st.sampled_from([b"\xc3", b"\xa9"]))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_ITEM, min_size=1, max_size=30), st.integers(0, 12))
def test_string_arrays_one_pass_is_the_careful_parse(items, cut):
    """blockc.io.gguf_strings.strings on arrays of every kind of string (empty, NUL,
    multi-byte, 256+ bytes, invalid or split UTF-8) and cut anywhere: whatever it returns
    is the strings one by one and the offset past them; None where it cannot prove them
    (it never returns what is not there); and the file's parse gives the careful result
    or refuses naming the array."""
    raw = [x.encode() if isinstance(x, str) else x for x in items]
    body = b"".join(s(x) for x in raw)
    buf = b"\x07\x07\x07" + body + s("after")
    limit = len(buf) - cut
    got = gguf_strings.strings(buf, 3, len(raw), limit)
    want = _careful(raw)
    if isinstance(got, int):  # the bytes up to got needed (past limit, within the array)
        assert limit < got <= 3 + len(body)
    elif got is not None:
        assert want is not None and got == (want, 3 + len(body)) and 3 + len(body) <= limit
    blob = gguf_bytes([kv("a", 9, struct.pack("<IQ", 8, len(raw)) + body)])
    if want is None:
        with pytest.raises(BlockcValueError, match=r"'a'\[\d+\]: not valid UTF-8"):
            bg.parse_bytes(blob)
    else:
        assert bg.parse_bytes(blob).get("a") == want


def test_a_vocabulary_takes_the_one_pass_and_reads_as_the_peer_does(tmp_path, monkeypatch):
    """A BPE-like vocabulary of 5,000 tokens (byte-level marks, CJK, a 256-byte token, an
    empty one, a NUL: the last three sent down the careful path) read whole and through a
    header prefix of 1,000 bytes (grown as the one pass asks), the peer's strings; the
    typical one takes the one pass."""
    rng = np.random.default_rng(4)
    alpha = list("abcdefghijklmnopqrstuvwxyzĠĊéü中文 ")
    toks = ["".join(rng.choice(alpha, rng.integers(1, 9))) for _ in range(5000)]
    buf = b"".join(s(t) for t in toks)
    assert gguf_strings.strings(buf, 0, len(toks), len(buf)) == (toks, len(buf))
    for odd in ("x" * 256, "", "a\0b"):
        t2 = toks[:100] + [odd] + toks[100:]
        b2 = b"".join(s(t) for t in t2)
        assert gguf_strings.strings(b2, 0, len(t2), len(b2)) is None  # the careful path
        p = peer_file(tmp_path / "v.gguf", {"w": ("F32", np.ones((2, 32), np.float32))},
                      extra={"tokenizer.ggml.tokens": t2})
        assert bg.read(p).get("tokenizer.ggml.tokens") == t2
    p = peer_file(tmp_path / "v.gguf", {"w": ("F32", np.ones((2, 32), np.float32))},
                  extra={"tokenizer.ggml.tokens": toks})
    f = gguf.GGUFReader(str(p))
    field = f.fields["tokenizer.ggml.tokens"]
    peer = [bytes(field.parts[i]).decode() for i in field.data]
    assert bg.read(p).get("tokenizer.ggml.tokens") == peer == toks
    assert 1000 < gguf_strings.strings(buf, 0, len(toks), 1000) <= 1000 + 8 + 255
    monkeypatch.setattr(fmt, "_HEADER_PREFIX", 1000)
    assert bg.read(p).get("tokenizer.ggml.tokens") == toks
