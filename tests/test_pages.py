"""Large outputs are advised onto small pages (blockc._native.output_empty and the
C entry point bc_advise_small_pages): read back from the kernel's own account of
the mapping (/proc/self/smaps), against a plain NumPy array of the same size
allocated beside it; and the values of the outputs that use it, against NumPy."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import blockc
from blockc import ops
from blockc._native import SMALL_PAGES_FROM, ffi, lib, output_empty

MIB = 1 << 20


def smaps_entry(address: int) -> dict:
    """The /proc/self/smaps fields of the mapping holding ``address``."""
    with open("/proc/self/smaps", encoding="ascii", errors="replace") as f:
        lines = f.read().splitlines()
    found = None
    for line in lines:
        head = line.split()[0] if line else ""
        if "-" in head and all(c in "0123456789abcdef-" for c in head):
            lo, hi = (int(x, 16) for x in head.split("-"))
            if found is not None:
                break
            if lo <= address < hi:
                found = {"range": (lo, hi)}
        elif found is not None and ":" in line:
            key, _, value = line.partition(":")
            found[key.strip()] = value.strip()
    assert found is not None, f"no mapping holds {address:#x}"
    return found


def kib(entry: dict, key: str) -> int:
    return int(entry[key].split()[0])


linux_thp = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="/proc/self/smaps: Linux only")


@linux_thp
def test_outputs_are_not_huge_page_eligible_where_numpy_arrays_are():
    n = 48 * MIB // 4
    plain = np.empty(n, np.float32)          # NumPy: madvise(MADV_HUGEPAGE) on >= 4 MiB
    ours = output_empty(n)
    plain[...] = 1.0
    ours[...] = 1.0
    p = smaps_entry(plain.ctypes.data + plain.nbytes // 2)
    o = smaps_entry(ours.ctypes.data + ours.nbytes // 2)
    if "THPeligible" not in p or p["THPeligible"] != "1":
        pytest.skip("this kernel gives a NumPy array no transparent huge pages: nothing to compare")
    assert o["THPeligible"] == "0"
    assert kib(o, "AnonHugePages") == 0
    assert "nh" in o.get("VmFlags", "").split()   # VM_NOHUGEPAGE on the mapping
    assert o["range"][1] - o["range"][0] >= ours.nbytes - 2 * 4096  # the whole pages inside
    assert np.all(ours == 1.0)


def test_output_empty_is_a_plain_array():
    small = output_empty((3, 5))
    big = output_empty((2, SMALL_PAGES_FROM // 8 + 1))
    for a, shape in ((small, (3, 5)), (big, (2, SMALL_PAGES_FROM // 8 + 1))):
        assert a.shape == shape and a.dtype == np.float32
        assert a.flags.writeable and a.flags.c_contiguous
    # a small one NumPy's own; a large one a view of a kept block (tests/test_outputs.py)
    assert small.flags.owndata and not big.flags.owndata
    wide = output_empty(SMALL_PAGES_FROM // 8, np.float64)
    assert wide.shape == (SMALL_PAGES_FROM // 8,) and wide.dtype == np.float64
    big[...] = 2.5
    assert float(big.sum(dtype=np.float64)) == 2.5 * big.size


def test_c_entry_point_statuses():
    assert lib.bc_advise_small_pages(ffi.NULL, 0) == lib.BC_OK
    assert lib.bc_advise_small_pages(ffi.NULL, 1) == lib.BC_ENULL
    buf = np.arange(3 * MIB, dtype=np.float32)
    before = buf.copy()
    assert lib.bc_advise_small_pages(ffi.from_buffer(buf), buf.nbytes) == lib.BC_OK
    np.testing.assert_array_equal(buf, before)   # advice: no byte changes


def test_large_outputs_keep_their_values():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 64), dtype=np.float32)
    w = rng.standard_normal((5000, 64), dtype=np.float32)   # 6 MB of output
    y = ops.linear(x, w)
    assert y.nbytes >= SMALL_PAGES_FROM
    np.testing.assert_allclose(y, x.astype(np.float64) @ w.T.astype(np.float64),
                               rtol=1e-4, atol=1e-4)
    cfg = blockc.GPTConfig(vocab=4096, context=512, width=32, heads=2, layers=1)
    m = blockc.GPT.random(cfg, seed=1)
    ids = rng.integers(0, cfg.vocab, size=(1, 400))
    logits = m(ids)                                       # 6.5 MB of logits
    assert logits.nbytes >= SMALL_PAGES_FROM and logits.flags.writeable
    last = m(ids, last_only=True)
    np.testing.assert_array_equal(logits[:, -1:], last)   # the same bits either way
