"""blockc.safetensors: round trips, the reference library as a peer, and hostile files.

Every malformed file must end in a BlockcValueError (a ValueError) naming the
file, never in another exception, a crash or a read out of bounds.
"""
import json
import os
import struct

import numpy as np
import pytest
from hypothesis import given, settings, HealthCheck
from hypothesis import strategies as st

import blockc
from blockc import safetensors as bst
from blockc import BlockcValueError, BlockcTypeError


def raw(header, data=b"", pad=True):
    """A file's bytes from a header object (or its text) and the data."""
    text = header if isinstance(header, (bytes, str)) else json.dumps(header)
    text = text.encode() if isinstance(text, str) else text
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def put(tmp_path, b, name="t.safetensors"):
    p = tmp_path / name
    p.write_bytes(b)
    return p


ARRAYS = {
    "f32": np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5,
    "f16": np.array([1.5, -2.25, 65504.0], np.float16),
    "f64": np.array([[np.pi]], np.float64),
    "i64": np.array([-(2 ** 62), 7], np.int64),
    "i32": np.array([1, -2, 3], np.int32),
    "i8": np.array([-128, 127], np.int8),
    "u8": np.array([0, 255], np.uint8),
    "bool": np.array([True, False, True]),
    "scalar": np.array(3.0, np.float32),
    "empty": np.zeros((0, 5), np.float32),
}


def test_round_trip_of_every_dtype_and_shape(tmp_path):
    p = tmp_path / "a.safetensors"
    bst.write(p, ARRAYS, {"format": "pt", "note": "x"})
    tensors, meta = bst.read(p)
    assert meta == {"format": "pt", "note": "x"}
    assert list(tensors) == list(ARRAYS)
    for k, a in ARRAYS.items():
        t = tensors[k]
        assert t.shape == a.shape and t.data.dtype == a.dtype.newbyteorder("<")
        np.testing.assert_array_equal(t.data, a)
    assert os.listdir(tmp_path) == ["a.safetensors"]  # no temporary file left


def test_reading_copies_into_a_read_only_array(tmp_path):
    # read, not mapped (a truncated file must not SIGBUS the reader): each access a new
    # array of the reader's own, read-only so that it reads like the file it came from
    p = tmp_path / "a.safetensors"
    bst.write(p, {"w": np.ones((64, 64), np.float32)})
    t = bst.read(p)[0]["w"]
    a = t.data
    assert a.flags.owndata and not a.flags.writeable and a.flags.aligned
    with pytest.raises(ValueError):
        a[0, 0] = 2.0
    assert t.nbytes == 64 * 64 * 4


def test_the_data_starts_aligned_and_offsets_are_contiguous(tmp_path):
    p = tmp_path / "a.safetensors"
    bst.write(p, {"a": np.ones(3, np.int8), "b": np.ones(5, np.float32)})
    b = p.read_bytes()
    (n,) = struct.unpack("<Q", b[:8])
    assert (8 + n) % 8 == 0
    h = json.loads(b[8:8 + n])
    assert h["a"]["data_offsets"] == [0, 3] and h["b"]["data_offsets"] == [3, 23]
    assert len(b) == 8 + n + 23


def test_bfloat16_widens_exactly(tmp_path):
    vals = np.array([1.0, -3.140625, 2.0 ** -130, np.inf, -0.0], np.float32)
    bits = (vals.view(np.uint32) >> 16).astype(np.uint16)
    p = tmp_path / "b.safetensors"
    bst.write(p, {"x": bits}, bf16=("x",))
    t = bst.read(p)[0]["x"]
    assert t.dtype == "BF16"
    np.testing.assert_array_equal(t.to_float32().view(np.uint32), vals.view(np.uint32))
    with pytest.raises(ValueError, match="not a floating dtype"):
        bst.read(p)[0]["x"].__class__("i", "I32", (1,), np.zeros(1, np.int32), "f").to_float32()


def test_write_refuses_what_it_cannot_name(tmp_path):
    p = tmp_path / "w.safetensors"
    with pytest.raises(TypeError, match="names must be str"):
        bst.write(p, {1: np.zeros(2, np.float32)})
    with pytest.raises(TypeError, match="complex64"):
        bst.write(p, {"c": np.zeros(2, np.complex64)})
    with pytest.raises(TypeError, match="uint16"):
        bst.write(p, {"c": np.zeros(2, np.float32)}, bf16=("c",))
    assert not p.exists()


def test_big_endian_arrays_are_written_little_endian(tmp_path):
    a = np.arange(4, dtype=">f4")
    p = tmp_path / "e.safetensors"
    bst.write(p, {"a": a})
    np.testing.assert_array_equal(bst.read(p)[0]["a"].data, a)


# -- the reference implementation as a peer --------------------------------------------

def test_the_reference_library_reads_what_blockc_writes(tmp_path):
    ref = pytest.importorskip("safetensors.numpy")
    p = tmp_path / "a.safetensors"
    arrays = {k: v for k, v in ARRAYS.items()}
    bst.write(p, arrays, {"format": "pt"})
    back = ref.load_file(str(p))
    assert set(back) == set(arrays)
    for k, a in arrays.items():
        np.testing.assert_array_equal(back[k], a)


def test_blockc_reads_what_the_reference_library_writes(tmp_path):
    torch = pytest.importorskip("torch")
    ref = pytest.importorskip("safetensors.torch")
    g = torch.Generator().manual_seed(0)
    ts = {"a.weight": torch.randn(7, 3, generator=g), "b": torch.randn(5, generator=g).bfloat16(),
          "c": torch.randn(2, 2, generator=g).half(), "d": torch.arange(6).reshape(2, 3)}
    p = tmp_path / "r.safetensors"
    ref.save_file(ts, str(p), metadata={"format": "pt"})
    tensors, meta = bst.read(p)
    assert meta == {"format": "pt"}
    for k, t in ts.items():
        want = t.float().numpy() if t.is_floating_point() else t.numpy()
        got = tensors[k].to_float32() if t.is_floating_point() else tensors[k].data
        np.testing.assert_array_equal(got, want)


# -- hostile files -----------------------------------------------------------------------

GOOD = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}

HOSTILE = [
    ("short", b"\x01\x00", "shorter than the 8-byte"),
    ("huge header", struct.pack("<Q", 2 ** 63) + b"{}", "exceeds the limit"),
    ("truncated header", struct.pack("<Q", 100) + b"{}", "truncated"),
    ("not json", raw(b"{nope"), "not valid JSON"),
    ("not utf-8", raw(b'{"\xff": 1}'), "not valid JSON"),
    ("too deep", raw(b"[" * 100000 + b"]" * 100000), "not valid JSON"),
    ("not an object", raw([1, 2]), "must be a JSON object"),
    ("duplicate", raw(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                      b'"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4),
     "duplicate key 'a'"),
    ("metadata not strings", raw({"__metadata__": {"a": 1}}), "__metadata__ must map"),
    ("metadata not a dict", raw({"__metadata__": [1]}), "__metadata__ must map"),
    ("entry not a dict", raw({"a": 3}), "exactly dtype, shape and data_offsets"),
    ("extra key", raw({"a": dict(GOOD["a"], extra=1)}, b"\0" * 8), "exactly dtype"),
    ("missing key", raw({"a": {"dtype": "F32", "shape": [2]}}, b"\0" * 8), "exactly dtype"),
    ("unknown dtype", raw({"a": dict(GOOD["a"], dtype="F8_E4M3")}, b"\0" * 8), "unknown dtype"),
    ("dtype not str", raw({"a": dict(GOOD["a"], dtype=4)}, b"\0" * 8), "unknown dtype"),
    ("negative dim", raw({"a": dict(GOOD["a"], shape=[-2])}, b"\0" * 8), "integers >= 0"),
    ("float dim", raw({"a": dict(GOOD["a"], shape=[2.0])}, b"\0" * 8), "integers >= 0"),
    ("bool dim", raw({"a": dict(GOOD["a"], shape=[True, 2])}, b"\0" * 8), "integers >= 0"),
    ("shape not a list", raw({"a": dict(GOOD["a"], shape=2)}, b"\0" * 8), "integers >= 0"),
    ("offsets not two", raw({"a": dict(GOOD["a"], data_offsets=[0])}, b"\0" * 8), "two integers"),
    ("offsets floats", raw({"a": dict(GOOD["a"], data_offsets=[0, 8.0])}, b"\0" * 8), "two integers"),
    ("offsets past the end", raw(GOOD, b"\0" * 4), "outside the 4 bytes"),
    ("offsets reversed", raw({"a": dict(GOOD["a"], data_offsets=[8, 0])}, b"\0" * 8), "outside"),
    ("negative offset", raw({"a": dict(GOOD["a"], data_offsets=[-8, 0])}, b"\0" * 8), "outside"),
    ("wrong size", raw({"a": dict(GOOD["a"], data_offsets=[0, 4])}, b"\0" * 8), "needs 8"),
    ("shape overflowing", raw({"a": dict(GOOD["a"], shape=[2 ** 40, 2 ** 40, 2 ** 40])}, b"\0" * 8),
     "needs"),
    ("overlap", raw({"a": GOOD["a"], "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}},
                    b"\0" * 12), "overlap"),
]


@pytest.mark.parametrize("name,data,msg", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_files_are_refused_by_name(tmp_path, name, data, msg):
    p = put(tmp_path, data)
    with pytest.raises(BlockcValueError, match=msg) as e:
        bst.read(p)
    assert str(p) in str(e.value)


def test_an_empty_file_is_refused(tmp_path):
    with pytest.raises(BlockcValueError, match="empty file"):
        bst.read(put(tmp_path, b""))


def test_a_missing_file_is_an_oserror(tmp_path):
    with pytest.raises(OSError):
        bst.read(tmp_path / "nothing.safetensors")


def _valid_file():
    return raw({"__metadata__": {"format": "pt"},
                "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                "b": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]},
                "c": {"dtype": "I8", "shape": [], "data_offsets": [22, 23]}},
               bytes(range(23)))


def _check_or_refuse(tmp_path, b):
    p = put(tmp_path, b, "fuzz.safetensors")
    try:
        tensors, meta = bst.read(p)
    except BlockcValueError as e:
        assert str(p) in str(e)
        return
    size = p.stat().st_size
    for t in tensors.values():  # what was accepted lies inside the file and matches its shape
        assert t.data.shape == t.shape
        assert t.data.nbytes <= size
        t.data.tobytes()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), min_size=1, max_size=6),
       st.one_of(st.none(), st.integers(0, 230)))
def test_fuzz_mutated_files_read_or_are_refused(tmp_path, edits, cut):
    b = bytearray(_valid_file())
    for i, v in edits:
        b[i % len(b)] = v
    if cut is not None:
        b = b[:cut]
    _check_or_refuse(tmp_path, bytes(b))


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=False),
                      st.text(max_size=4))
json_value = st.recursive(json_leaf, lambda c: st.lists(c, max_size=4)
                          | st.dictionaries(st.text(max_size=4), c, max_size=4), max_leaves=12)
entry = st.fixed_dictionaries({
    "dtype": st.one_of(st.sampled_from(sorted(bst.DTYPES)), json_value),
    "shape": st.one_of(st.lists(st.integers(-1, 5), max_size=3), json_value),
    "data_offsets": st.one_of(st.lists(st.integers(-4, 64), min_size=2, max_size=2), json_value),
})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.text(max_size=6), st.one_of(entry, json_value), max_size=4),
       st.integers(0, 64))
def test_fuzz_random_headers_read_or_are_refused(tmp_path, header, data_len):
    _check_or_refuse(tmp_path, raw(header, bytes(data_len)))


def test_model_loading_reports_the_file_of_a_bad_tensor(tmp_path):
    m = blockc.GPT.random(blockc.GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
    m.save_pretrained(tmp_path)
    p = tmp_path / "model.safetensors"
    b = bytearray(p.read_bytes())
    (n,) = struct.unpack("<Q", b[:8])
    h = json.loads(b[8:8 + n])
    h["transformer.wte.weight"]["shape"] = [8, 16]  # same bytes, transposed shape
    text = json.dumps(h, separators=(",", ":")).encode()
    text += b" " * (n - len(text))
    p.write_bytes(b[:8] + text + b[8 + n:])
    with pytest.raises(BlockcValueError, match=r"model.safetensors: tensor 'transformer.wte.weight' "
                                               r"has shape \(8, 16\), expected \(16, 8\)"):
        blockc.GPT.from_pretrained(tmp_path)
