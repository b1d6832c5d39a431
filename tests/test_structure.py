"""The package's structure (issue 18): no import cycle in blockc/ (module level or inside
functions), and no module of blockc/ reaching into another's private attributes; and the C
library's (issue 48): every file of csrc/ includes and calls only its own layer and lower
ones (build_ffi.py's LAYERS), no files include or call each other round. Counted by
tests/support/structure.py (also a command: python tests/support/structure.py .)."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _report():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "support", "structure.py"), ROOT],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_no_import_cycle_and_no_private_reach_inside_blockc():
    out = _report()
    assert "import cycles (SCCs of > 1 module): 0" in out, "\n".join(out)
    reaches = [line.strip() for line in out if line.strip().startswith("blockc/")]
    assert reaches == [], reaches


def test_c_layers_point_down_without_circles():
    out = _report()
    c = out[next(i for i, x in enumerate(out) if x.startswith("C folders")):]
    for line in ("C folders not in build_ffi.LAYERS: 0", "C arrows to a higher layer: 0",
                 "C file circles: 0"):
        assert line in c, "\n".join(c)
