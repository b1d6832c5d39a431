"""The kernel tests once more in a process whose instruction set BLOCKC_ISA forces to the
portable C path from start-up (the kernel table chosen at load, not switched by set_isa),
so a machine with AVX-512 still proves the path a CPU without AVX2 runs."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_kernel_tests_pass_with_the_portable_path_forced_from_start_up():
    env = dict(os.environ, BLOCKC_ISA="generic")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "tests/test_kernels_fast.py", "tests/test_runtime.py",
                        "tests/test_quant_types.py"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    tail = r.stdout[-3000:] + r.stderr[-2000:]
    assert r.returncode == 0, tail
    # the child really ran the kernel tests, on the portable path only
    assert " passed" in r.stdout.splitlines()[-1], tail
    assert "[avx512]" not in r.stdout and "[avx2]" not in r.stdout
