# setuptools needs cffi_modules here; everything else lives in pyproject.toml.
# The extension uses only CPython's limited API (cffi builds it abi3), so the
# wheel is tagged cp39-abi3: one wheel serves every CPython >= 3.9.
#
# The C library is some thirty files, three of them the kernels compiled once per
# instruction set (minutes of the install): they compile in parallel, one job per
# core (BLOCKC_BUILD_JOBS overrides), and each says its name as it starts, on the
# terminal when there is one (pip hides a build's own output unless run with -v).
import os
import sys
from concurrent.futures import ThreadPoolExecutor

from setuptools import setup
from setuptools.command.build_ext import build_ext


def _jobs() -> int:
    n = os.environ.get("BLOCKC_BUILD_JOBS", "")
    if n.isdigit() and int(n) > 0:
        return int(n)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _say(line: str) -> None:
    """One progress line: to the terminal if the build has one, else to stderr."""
    try:
        with open("/dev/tty", "w") as tty:
            tty.write(line + "\n")
            return
    except OSError:
        pass
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class ParallelBuildExt(build_ext):
    """build_ext whose compiler compiles an extension's sources in parallel."""

    def build_extension(self, ext):
        cc = self.compiler
        if cc.compiler_type != "unix":  # MSVC's compile() is its own: left serial
            return super().build_extension(ext)
        serial = cc.compile

        def compile_parallel(sources, output_dir=None, macros=None, include_dirs=None, debug=0,
                             extra_preargs=None, extra_postargs=None, depends=None):
            macros, objects, extra_postargs, pp_opts, build = cc._setup_compile(
                output_dir, macros, include_dirs, sources, depends, extra_postargs)
            cc_args = cc._get_cc_args(pp_opts, debug, extra_preargs)
            # the kernels compiled once per instruction set take most of the time: start them
            # first, so the other files fill the remaining cores around them
            todo = sorted((o for o in objects if o in build),
                          key=lambda o: not os.path.basename(build[o][0]).startswith("fast_"))
            jobs = min(_jobs(), max(1, len(todo)))
            _say(f"blockc: compiling {len(todo)} C files, {jobs} at a time")

            def one(i_obj):
                i, obj = i_obj
                src, ext_ = build[obj]
                _say(f"blockc: [{i + 1}/{len(todo)}] {src}")
                cc._compile(obj, src, ext_, cc_args, extra_postargs, pp_opts)

            with ThreadPoolExecutor(jobs) as pool:
                list(pool.map(one, enumerate(todo)))  # list(): a failed file raises here
            return objects

        cc.compile = compile_parallel
        try:
            return super().build_extension(ext)
        finally:
            cc.compile = serial


setup(cffi_modules=["build_ffi.py:ffibuilder"],
      cmdclass={"build_ext": ParallelBuildExt},
      options={"bdist_wheel": {"py_limited_api": "cp39"}})
