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


@pytest.mark.skipif(not _have_compiler(), reason="no C compiler")
def test_c_driver(tmp_path):
    exe = str(tmp_path / "driver")
    # the compiler must not inherit a sanitizer runtime preloaded into this process
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    build = subprocess.run(build_driver.command(exe), env=env, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([exe], capture_output=True, text=True, timeout=300)
    m = re.search(r"^(\d+) passed, (\d+) failed$", run.stdout, flags=re.M)
    assert run.returncode == 0 and m, run.stdout + run.stderr
    assert int(m.group(2)) == 0, run.stderr
    assert int(m.group(1)) >= 100, run.stdout  # the checks really ran
