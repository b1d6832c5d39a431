"""Build the C-level test driver (tests/c/*.c linked with the library's sources).

    python tests/c/build_driver.py OUT [--sanitize] [--debug]

The compile flags are build_ffi.py's own (-std=c11, -ffp-contract=off, OpenMP
when the compiler has it...), so the driver exercises the library exactly as
the extension is built; --sanitize adds -fsanitize=address,undefined, --debug
builds -O0 -g (for valgrind). The library's sources are compiled to objects
first, one compiler per CPU (objects(): the tests build them once per session
and link every C program of theirs against them), then linked with the tests.
Prints the commands, exits with the compiler's status.

With BLOCKC_C_OBJECT_CACHE set to a directory, objects() keeps each build's
objects there under a key of everything that makes them (the compiler's
version, the flags, every source and header's bytes) and reuses them: CI's
suite and its valgrind driver compile the same objects once.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import glob
import hashlib
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


CACHE_ENV = "BLOCKC_C_OBJECT_CACHE"


def _key(cflags, incs, srcs, env=None):
    """A name for the objects these flags make of these sources: the compiler's version,
    the flags, and the bytes of every source and of every header they can include."""
    h = hashlib.sha256()
    version = subprocess.run(compiler() + ["--version"], env=env, capture_output=True)
    for part in (version.stdout, "\0".join(compiler() + cflags + incs).encode()):
        h.update(b"%d:" % len(part) + part)
    dirs = sorted({os.path.dirname(f) for f in srcs} | {incs[i + 1] for i in range(0, len(incs), 2)})
    files = sorted({os.path.join(d, f) for d in dirs for f in os.listdir(d) if f.endswith((".c", ".h"))}
                   | set(srcs))
    for f in files:
        with open(f, "rb") as fh:
            data = fh.read()
        name = f.encode()
        h.update(b"%d:" % len(name) + name + b"%d:" % len(data) + data)
    return h.hexdigest()[:40]


def objects(outdir, sanitize=False, debug=False, env=None, jobs=None, cache=None):
    """Compile the library's sources into ``outdir``, one object each, ``jobs``
    compilers at once (default: one per CPU); return the objects' paths in
    source order. Raises RuntimeError with the compiler's output if one fails.

    ``cache`` (default: the BLOCKC_C_OBJECT_CACHE directory, if set) keeps the objects
    under :func:`_key`'s name: found there whole, they are returned from there and
    nothing is compiled; compiled, they are copied there under a temporary name that
    is then renamed, so a reader sees a whole set or none."""
    cflags, _, srcs, incs = _library(sanitize, debug)
    names = ["%02d_%s.o" % (i, os.path.basename(f)[:-2]) for i, f in enumerate(srcs)]
    cache = cache if cache is not None else os.environ.get(CACHE_ENV) or None
    if cache:
        kept = os.path.join(cache, _key(cflags, incs, srcs, env))
        if all(os.path.isfile(os.path.join(kept, n)) for n in names):
            return [os.path.join(kept, n) for n in names]
    outs = [os.path.join(outdir, n) for n in names]

    def one(src_out):
        cmd = compiler() + cflags + incs + ["-c", src_out[0], "-o", src_out[1]]
        return cmd, subprocess.run(cmd, env=env, capture_output=True, text=True)

    with concurrent.futures.ThreadPoolExecutor(jobs or os.cpu_count() or 1) as pool:
        for cmd, r in pool.map(one, zip(srcs, outs)):
            if r.returncode:
                raise RuntimeError("+ " + " ".join(map(shlex.quote, cmd)) + "\n" + r.stderr)
    if cache:
        os.makedirs(cache, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=cache)
        for n, o in zip(names, outs):
            shutil.copyfile(o, os.path.join(tmp, n))
        try:
            os.rename(tmp, kept)  # whole or not at all; a set another build kept stays
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
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
