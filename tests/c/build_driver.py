"""Build the C-level test driver (tests/c/*.c linked with the library's sources).

    python tests/c/build_driver.py OUT [--sanitize] [--debug]

The compile flags are build_ffi.py's own (-std=c11, -ffp-contract=off, OpenMP
when the compiler has it...), so the driver exercises the library exactly as
the extension is built; --sanitize adds -fsanitize=address,undefined, --debug
builds -O0 -g (for valgrind). Prints the command, exits with the compiler's status.
"""
from __future__ import annotations

import argparse
import glob
import os
import shlex
import subprocess
import sys
import sysconfig

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def compiler():
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shlex.split(cc)


def command(out, sanitize=False, debug=False, tests=None, ldflags_extra=()):
    """The compiler command line that builds the driver into ``out``: the
    library's sources with ``tests`` (default: tests/c/*.c) and any extra
    linker flags."""
    saved = {k: os.environ.get(k) for k in ("BLOCKC_SANITIZE", "BLOCKC_DEBUG")}
    os.environ["BLOCKC_SANITIZE"] = "1" if sanitize else "0"
    os.environ["BLOCKC_DEBUG"] = "1" if debug else "0"
    try:
        sys.path.insert(0, ROOT)
        import build_ffi  # noqa: E402  (the extension's own flag logic)
        cflags, ldflags = build_ffi._flags()
        srcs = [os.path.join(ROOT, f) for f in build_ffi.sources()]
        incs = [a for d in build_ffi.include_dirs() for a in ("-I", os.path.join(ROOT, d))]
    finally:
        sys.path.remove(ROOT)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    srcs += sorted(glob.glob(os.path.join(HERE, "*.c"))) if tests is None else list(tests)
    return (compiler() + cflags + ["-g"] + incs + ["-I", HERE]
            + srcs + ["-o", out] + ldflags + list(ldflags_extra) + ["-lm"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--sanitize", action="store_true")
    ap.add_argument("--debug", action="store_true")
    a = ap.parse_args(argv)
    cmd = command(a.out, a.sanitize, a.debug)
    print("+ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main())
