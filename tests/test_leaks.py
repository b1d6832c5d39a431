"""Leaks (issue 6): every public C entry point and the main Python calls, called
over and over (good and failing arguments alternately), leave the C heap where it
was. docs/reliability.md's 20,000-call figures come from ``python benches/leaks.py``; this
test runs fewer calls in-process and looks at glibc's count of bytes malloc'd
and not freed, which shows even a 16-byte-a-call leak."""
import os

import pytest

import leak_cases as leaks

CASES = leaks._cases()


def test_every_public_c_entry_point_has_a_leak_case():
    assert set(leaks.c_entry_points()) <= set(CASES)
    assert len(leaks.c_entry_points()) >= 30


@pytest.mark.skipif(os.environ.get("BLOCKC_UNDER_SANITIZER") == "1",
                    reason="ASan replaces malloc: glibc's counters see nothing")
@pytest.mark.skipif(leaks._malloc_in_use() < 0, reason="needs glibc's mallinfo2")
@pytest.mark.parametrize("name", sorted(CASES))
def test_no_leak(name):
    calls = min(200 if name == "GPT.generate" else 1000, leaks.CALL_CAP.get(name, 1000))
    r = leaks.measure(name, calls, warmup=min(100, calls), cases=CASES)
    # 8 KiB over 1000 calls: a leak of 8 bytes a call would show
    assert r["malloc_growth_kb"] < 8.0, r
