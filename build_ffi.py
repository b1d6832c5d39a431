"""cffi builder (out-of-line API mode): compiles csrc/ into ``blockc._blockc``.

csrc/ is grouped by layer: ``include/`` holds the public headers (and only
those), ``core/``, ``kernels/``, ``runtime/``, ``parallel/``, ``engine/``,
``book/`` and ``gpt/`` the sources and their internal headers. The cdef is derived from the
public header ``csrc/include/blockc.h`` and the part headers it includes, so
the C declarations and the Python binding never drift.
Preprocessor lines are dropped, except ``#define NAME <integer>`` constants,
which cffi exposes as ``lib.NAME`` and which are substituted into array sizes.

Build switches (environment variables):
  BLOCKC_SANITIZE=1   build with -fsanitize=address,undefined
  BLOCKC_NO_THREADS=1 build without the thread pool (serial kernels)
  BLOCKC_DEBUG=1      -O0 -g
"""
import os
import re
import sys
import tempfile
import subprocess
import sysconfig

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = "csrc"  # relative: setuptools wants relative source paths
PUBLIC = os.path.join(CSRC, "include")
# the layers, lowest first; each directory is on the include path. A file includes
# and calls only its own folder and lower ones (tests/support/structure.py checks)
LAYERS = ("include", "core", "kernels", "runtime", "parallel", "engine", "book", "gpt")
UMBRELLA = "blockc.h"

_DEFINE = re.compile(r"^\s*#\s*define\s+([A-Z_][A-Z0-9_]*)\s+\(?\s*(-?\d+)\s*\)?\s*(?:/[/*].*)?$")


def _part_headers():
    text = open(os.path.join(HERE, PUBLIC, UMBRELLA)).read()
    return re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, flags=re.M)


def cdef_source():
    """The text handed to ffi.cdef(): the part headers, preprocessor-free."""
    defines = {}
    body = []
    for name in _part_headers():
        text = open(os.path.join(HERE, PUBLIC, name)).read()
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        skip = 0
        for line in text.splitlines():
            stripped = line.strip()
            if stripped.startswith("#"):
                m = _DEFINE.match(stripped)
                if m:
                    defines[m.group(1)] = m.group(2)
                # '#ifdef __cplusplus ... #endif' blocks are skipped whole
                if re.match(r"#\s*ifdef\s+__cplusplus", stripped):
                    skip += 1
                elif skip and re.match(r"#\s*endif", stripped):
                    skip -= 1
                continue
            if skip:
                continue
            body.append(re.sub(r"//.*", "", line))
    text = "\n".join(body)
    for name, value in defines.items():
        text = re.sub(r"\b%s\b" % name, value, text)
    head = "\n".join("#define %s %s" % kv for kv in defines.items())
    return head + "\n" + text


def _compiler():
    return (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()


def _compiler_accepts(flags, program="int main(void) { return 0; }\n"):
    cc = _compiler()
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "t.c")
        with open(src, "w") as f:
            f.write(program)
        try:
            r = subprocess.run(cc + flags + [src, "-o", os.path.join(tmp, "t")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except OSError:
            return False
        return r.returncode == 0


def require_compiler():
    """Stop the build with one line when there is no working C compiler (instead of
    the compiler driver's pages of output)."""
    if sys.platform == "win32":
        return
    if not _compiler_accepts([]):
        sys.exit(f"blockc: error: no working C compiler ({' '.join(_compiler())}): blockc compiles "
                 "its C library at install time; install gcc or clang (e.g. `apt-get install gcc`, "
                 "`xcode-select --install`) or set CC")


def _flags():
    cflags, ldflags = [], []
    if sys.platform == "win32":
        return ["/O2", "/fp:precise"], []
    debug = os.environ.get("BLOCKC_DEBUG") == "1"
    sanitize = os.environ.get("BLOCKC_SANITIZE") == "1"
    # a sanitized build at -O1, as the sanitizers' own documentation advises: gcc takes
    # over three times longer on the kernel files with ASan at -O2 (fast_avx512.c: 2.3
    # CPU-minutes at -O1 against more than 7.5 at -O2), twice in every CI run
    cflags += ["-O0", "-g"] if debug else ["-O1"] if sanitize else ["-O2"]
    # Book mode is exact: no FMA contraction, no fast-math, anywhere.
    cflags += ["-std=c11", "-ffp-contract=off", "-fno-fast-math", "-fno-strict-aliasing",
               "-Wall", "-Wextra", "-Wno-unused-parameter"]
    # the kernels' thread pool (csrc/runtime/pool.c) is plain POSIX threads
    if os.environ.get("BLOCKC_NO_THREADS") == "1":
        cflags.append("-DBC_NO_THREADS")
    else:
        cflags.append("-pthread")
        ldflags.append("-pthread")
    if sanitize:
        san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer",
               "-fno-sanitize-recover=undefined"]
        cflags += san + ["-g"]
        ldflags += san
    return cflags, ldflags


def include_dirs():
    """The layer directories, relative to the repository root."""
    return [os.path.join(CSRC, layer) for layer in LAYERS]


def headers():
    """Every header of every layer: a change to one rebuilds the extension (setuptools
    tracks only the .c files otherwise, and fast_tmpl.h is compiled through three)."""
    out = []
    for d in include_dirs():
        out += sorted(os.path.join(d, f) for f in os.listdir(os.path.join(HERE, d))
                      if f.endswith(".h"))
    return out


def sources():
    """Every .c file of every layer, relative to the repository root."""
    out = []
    for d in include_dirs():
        out += sorted(os.path.join(d, f) for f in os.listdir(os.path.join(HERE, d))
                      if f.endswith(".c"))
    return out


require_compiler()
ffibuilder = FFI()
ffibuilder.cdef(cdef_source())
_cflags, _ldflags = _flags()
ffibuilder.set_source(
    "blockc._blockc",
    '#include "blockc.h"',
    sources=sources(),
    include_dirs=include_dirs(),
    depends=headers(),
    extra_compile_args=_cflags,
    extra_link_args=_ldflags,
    libraries=[] if sys.platform == "win32" else ["m"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
