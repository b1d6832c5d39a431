"""Build the C-level test driver (tests/c/*.c linked with the library's sources).

    python tests/c/build_driver.py OUT [--sanitize] [--debug]

The compile flags are build_ffi.py's own (-std=c11, -ffp-contract=off, OpenMP
when the compiler has it...), so the driver exercises the library exactly as
the extension is built; --sanitize adds -fsanitize=address,undefined, --debug
builds -O0 -g (for valgrind). The library's sources are compiled to objects
first, one compiler per CPU (objects(): the tests build them once per session
and link every C program of theirs against them), then linked with the tests.
Prints the commands, exits with the compiler's status.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import glob
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def compiler():
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shlex.split(cc)


def _library(sanitize, debug):
    """build_ffi's compile flags, link flags, library sources and include flags
    for this build kind."""
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
    return cflags + ([] if "-g" in cflags else ["-g"]), ldflags, srcs, incs


def objects(outdir, sanitize=False, debug=False, env=None, jobs=None):
    """Compile the library's sources into ``outdir``, one object each, ``jobs``
    compilers at once (default: one per CPU); return the objects' paths in
    source order. Raises RuntimeError with the compiler's output if one fails."""
    cflags, _, srcs, incs = _library(sanitize, debug)
    outs = [os.path.join(outdir, "%02d_%s.o" % (i, os.path.basename(f)[:-2]))
            for i, f in enumerate(srcs)]

    def one(src_out):
        cmd = compiler() + cflags + incs + ["-c", src_out[0], "-o", src_out[1]]
        return cmd, subprocess.run(cmd, env=env, capture_output=True, text=True)

    with concurrent.futures.ThreadPoolExecutor(jobs or os.cpu_count() or 1) as pool:
        for cmd, r in pool.map(one, zip(srcs, outs)):
            if r.returncode:
                raise RuntimeError("+ " + " ".join(map(shlex.quote, cmd)) + "\n" + r.stderr)
    return outs


def command(out, sanitize=False, debug=False, tests=None, ldflags_extra=(), objects=None):
    """The compiler command line that builds the driver into ``out``: the
    library (its sources, or ``objects`` already compiled from them with the
    same sanitize and debug) with ``tests`` (default: tests/c/*.c) and any
    extra linker flags."""
    cflags, ldflags, srcs, incs = _library(sanitize, debug)
    srcs = list(objects) if objects is not None else srcs
    srcs += sorted(glob.glob(os.path.join(HERE, "*.c"))) if tests is None else list(tests)
    return (compiler() + cflags + incs + ["-I", HERE]
            + srcs + ["-o", out] + ldflags + list(ldflags_extra) + ["-lm"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--sanitize", action="store_true")
    ap.add_argument("--debug", action="store_true")
    a = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="objects-", dir=os.path.dirname(os.path.abspath(a.out)))
    try:
        try:
            objs = objects(tmp, a.sanitize, a.debug)
        except RuntimeError as e:
            print(e, file=sys.stderr)
            return 1
        cmd = command(a.out, a.sanitize, a.debug, objects=objs)
        print("+ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
        return subprocess.call(cmd)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
