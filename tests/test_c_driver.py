"""The C-level test driver (tests/c/): every public C entry point called directly
with NULL pointers, zero, "negative" and overflowing sizes and bad options; the
documented status must come back and nothing may be written."""
import os
import re
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "c"))
import build_driver  # noqa: E402

sys.path.pop(0)


def _have_compiler():
    return shutil.which(build_driver.compiler()[0]) is not None


@pytest.fixture(scope="module")
def driver(tmp_path_factory, c_objects):
    exe = str(tmp_path_factory.mktemp("driver") / "driver")
    # the compiler must not inherit a sanitizer runtime preloaded into this process
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    build = subprocess.run(build_driver.command(exe, objects=c_objects), env=env,
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    return exe


@pytest.mark.slow
@pytest.mark.skipif(not _have_compiler(), reason="no C compiler")
@pytest.mark.parametrize("isa", [None, "avx2", "generic"], ids=["best-isa", "avx2-isa", "generic-isa"])
def test_c_driver(driver, isa):
    env = dict(os.environ)
    env.pop("BLOCKC_ISA", None)
    if isa:
        env["BLOCKC_ISA"] = isa  # the kernels' portable path, whatever the CPU has
    run = subprocess.run([driver], capture_output=True, text=True, timeout=300, env=env)
    m = re.search(r"^(\d+) passed, (\d+) failed$", run.stdout, flags=re.M)
    assert run.returncode == 0 and m, run.stdout + run.stderr
    assert int(m.group(2)) == 0, run.stderr
    assert int(m.group(1)) >= 1900, run.stdout  # the checks really ran


def test_the_driver_calls_every_public_entry_point():
    # a new function in a part header needs its hostile calls in tests/c/ too
    from leak_cases import c_entry_points
    names = c_entry_points()
    src = "".join(open(os.path.join(HERE, "c", f)).read()
                  for f in os.listdir(os.path.join(HERE, "c")) if f.endswith(".c"))
    missing = [n for n in names if not re.search(r"\b%s\s*\(" % n, src)]
    assert len(names) >= 30 and not missing, f"not called by tests/c/: {missing}"
