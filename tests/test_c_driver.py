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


_FAKE_CC = r'''
import os, sys
args = sys.argv[1:]  # the real compiler, then its arguments
if "-c" not in args or "csrc" not in args[args.index("-c") + 1]:  # build_ffi's probes
    os.execvp(sys.argv[1], sys.argv[1:])
args = args[1:]
with open(sys.argv[0] + ".log", "a") as log:
    log.write(args[args.index("-c") + 1] + "\n")
with open(args[args.index("-o") + 1], "w") as out:
    out.write(" ".join(args))
'''


def test_object_cache_compiles_once_and_keys_on_what_makes_the_objects(tmp_path, monkeypatch):
    # BLOCKC_C_OBJECT_CACHE: CI's suite and its valgrind driver link one compile's objects
    fake = tmp_path / "cc.py"
    fake.write_text(_FAKE_CC)
    log = tmp_path / "cc.py.log"
    real = build_driver.compiler()[0]
    monkeypatch.setenv("CC", f"{sys.executable} {fake} {real}")
    cache = str(tmp_path / "cache")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "c").mkdir()
    first = build_driver.objects(str(tmp_path / "a"), cache=cache)
    compiled = log.read_text().splitlines()
    assert len(compiled) == len(first) >= 20
    again = build_driver.objects(str(tmp_path / "b"), cache=cache)
    assert log.read_text().splitlines() == compiled  # nothing compiled the second time
    assert [os.path.basename(p) for p in again] == [os.path.basename(p) for p in first]
    assert all(os.path.dirname(p).startswith(cache) for p in again)
    assert [open(p).read() for p in again] == [open(p).read() for p in first]
    assert not [n for n in os.listdir(cache) if n.startswith(".tmp-")]
    # other flags are other objects
    build_driver.objects(str(tmp_path / "c"), debug=True, cache=cache)
    assert len(log.read_text().splitlines()) == 2 * len(compiled)
    assert len(os.listdir(cache)) == 2


def test_object_cache_key_changes_with_any_header_byte(tmp_path):
    src, inc = tmp_path / "src", tmp_path / "inc"
    src.mkdir()
    inc.mkdir()
    (src / "a.c").write_text('#include "h.h"\nint f(void) { return H; }\n')
    (inc / "h.h").write_text("#define H 1\n")
    (inc / "notes.txt").write_text("not a source")
    args = (["-O2"], ["-I", str(inc)], [str(src / "a.c")])
    key = build_driver._key(*args)
    assert build_driver._key(*args) == key
    (inc / "notes.txt").write_text("still not a source")
    assert build_driver._key(*args) == key
    (inc / "h.h").write_text("#define H 2\n")
    assert build_driver._key(*args) != key
    assert build_driver._key(["-O1"], *args[1:]) != build_driver._key(*args)
