"""Writing and reading files whole (blockc._files and the safetensors reader, issue 19):
every write goes through a unique temporary name and a rename, a write that fails part-way
(an injected ENOSPC, Ctrl-C, RLIMIT_FSIZE) leaves the old file and no temporary, two
writers and a reader on one file see only whole files, and a file truncated under a reader
is refused by name (tensors are read, never memory-mapped: no SIGBUS).

What could crash, hang or race runs in a subprocess with a timeout.
"""
import errno
import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import run_python, write_script

from blockc import _files
from blockc import safetensors as bst

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- atomic writes -----------------------------------------------------------------------

def test_atomic_write_uses_a_unique_temporary_name_and_leaves_nothing_on_failure(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"old")
    seen = []
    for data in (b"new", b"newer"):
        with _files.atomic_write(p) as f:
            f.write(data)
            tmp = [n for n in os.listdir(tmp_path) if n != "f.bin"]
            seen += tmp
            assert len(tmp) == 1 and p.read_bytes() == b"old" or data == b"newer"
    # a new name each time, in the same directory (so the rename is atomic)
    assert p.read_bytes() == b"newer" and len(set(seen)) == 2
    for exc in (OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()):
        with pytest.raises(type(exc)):
            with _files.atomic_write(p) as f:
                f.write(b"half")
                raise exc
        assert p.read_bytes() == b"newer"
        assert os.listdir(tmp_path) == ["f.bin"]


def test_a_write_that_runs_out_of_space_leaves_the_old_file_and_no_temporary(tmp_path):
    # a real failing write: RLIMIT_FSIZE makes the write past 4 KiB fail with EFBIG, as a
    # full disk would; the target keeps its old bytes and no temporary file is left
    p = tmp_path / "w.safetensors"
    bst.write(p, {"a": np.zeros(4, np.float32)})
    before = p.read_bytes()
    r = run_python(f"""
        import resource, signal, numpy as np
        from blockc import safetensors as bst
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        try:
            bst.write({str(p)!r}, {{"a": np.ones(100000, np.float32)}})
        except OSError as e:
            print("refused", e.errno)
        """)
    assert r.returncode == 0, r.stderr
    assert "refused 27" in r.stdout  # EFBIG
    assert p.read_bytes() == before and os.listdir(tmp_path) == ["w.safetensors"]


WRITER = """
    import sys, time, numpy as np
    from blockc import safetensors as bst
    path, me, until = sys.argv[1], int(sys.argv[2]), time.time() + float(sys.argv[3])
    arrays = {f"t{i}": np.full(20000 + 1000 * me, me, np.float32) for i in range(8)}
    n = 0
    while time.time() < until:
        bst.write(path, arrays)
        n += 1
    print(n)
"""


READER = """
    import sys, time
    from blockc import safetensors as bst
    path, until = sys.argv[1], time.time() + float(sys.argv[2])
    n = 0
    while time.time() < until:
        tensors, _ = bst.read(path)
        vals = {float(v) for t in tensors.values() for v in set(t.data.tolist())}
        sizes = {t.shape for t in tensors.values()}
        assert len(tensors) == 8 and len(vals) == 1 and len(sizes) == 1, (vals, sizes)
        me = int(vals.pop())
        assert sizes == {(20000 + 1000 * me,)}, (me, sizes)
        n += 1
    print(n)
"""


def test_two_writers_and_a_reader_on_one_file_see_only_whole_files(tmp_path):
    # two processes saving to one path while a third reads it: each read is one writer's
    # file, whole (a shared PATH.tmp gave a mixture, or a SIGBUS in the reader)
    p = str(tmp_path / "model.safetensors")
    bst.write(p, {f"t{i}": np.full(21000, 1, np.float32) for i in range(8)})
    w, rd = write_script(tmp_path, "w.py", WRITER), write_script(tmp_path, "r.py", READER)
    until = "2.0"  # seconds each process runs, counted from its start
    env = dict(os.environ, PYTHONPATH=ROOT)
    procs = [subprocess.Popen([sys.executable, w, p, str(me), until], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for me in (1, 2)]
    procs.append(subprocess.Popen([sys.executable, rd, p, until], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [pr.communicate(timeout=60) for pr in procs]
    for pr, (out, err) in zip(procs, outs):
        assert pr.returncode == 0, err[-2000:]
        assert int(out) > 0
    assert sorted(os.listdir(tmp_path)) == ["model.safetensors", "r.py", "w.py"]


# ---- truncation while open ---------------------------------------------------------------

def test_a_file_truncated_after_it_was_opened_is_refused_not_a_crash(tmp_path):
    # the policy: tensors are read (pread), never memory-mapped, so a file truncated under
    # a reader gives a short read, refused by name; a mapping would die of SIGBUS
    p = tmp_path / "t.safetensors"
    bst.write(p, {"a": np.ones(1 << 16, np.float32), "b": np.ones(1 << 16, np.float32)})
    r = run_python(f"""
        import os
        from blockc import safetensors as bst
        from blockc import BlockcValueError
        tensors, _ = bst.read({str(p)!r})
        assert float(tensors["a"].data.sum()) == 65536
        os.truncate({str(p)!r}, 4096)
        try:
            tensors["b"].data
        except BlockcValueError as e:
            print("refused:", e)
        """, timeout=60)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert "refused:" in r.stdout and "'b'" in r.stdout and "truncated" in r.stdout


def test_a_file_truncated_by_another_thread_while_read_is_refused_or_whole(tmp_path):
    p = tmp_path / "t.safetensors"
    r = run_python(f"""
        import os, threading, time, numpy as np
        from blockc import safetensors as bst
        from blockc import BlockcValueError
        p = {str(p)!r}
        big = {{f"t{{i}}": np.full(1 << 18, i, np.float32) for i in range(8)}}
        outcomes = {{"whole": 0, "refused": 0}}
        for _ in range(20):
            bst.write(p, big)
            tensors, _ = bst.read(p)
            def cut():
                time.sleep(0.001)
                os.truncate(p, 1000)
            t = threading.Thread(target=cut); t.start()
            for name, tn in tensors.items():
                try:
                    a = tn.data
                except BlockcValueError as e:
                    assert "truncated" in str(e)
                    outcomes["refused"] += 1
                    continue
                assert (a == int(name[1:])).all()
                outcomes["whole"] += 1
            t.join()
        print(outcomes)
        """, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert "refused" in r.stdout
