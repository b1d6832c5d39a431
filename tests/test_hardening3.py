"""Hard to break, round three (issue 19): checkpoints that are never torn, runs that
resume exactly or refuse, files that are what they claim, errors that name the file.

Each class of failure has a test here that failed before its fix. The ones that race
processes or could crash or hang run in a subprocess with a timeout: a hang or a
SIGBUS fails the test instead of the suite.
"""
import base64
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import blockc
from blockc import _files, _trainer as tr
from blockc import safetensors as bst
from blockc._errors import BlockcValueError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = blockc.GPTConfig(vocab=64, context=16, width=16, heads=2, layers=2)


def run_python(code, timeout=120, env=None):
    """Run ``code`` in a fresh interpreter (this blockc, this environment)."""
    e = dict(os.environ if env is None else env)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, e.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e,
                          capture_output=True, text=True, timeout=timeout)


def snapshot(d):
    """{name: bytes} of a directory's files (to compare a directory before and after)."""
    return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))}


# ---------------------------------------------------------------- atomic writes

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
    path, me, until = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
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
    path, until = sys.argv[1], float(sys.argv[2])
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


def _script(tmp_path, name, code):
    f = tmp_path / name
    f.write_text(textwrap.dedent(code))
    return str(f)


def test_two_writers_and_a_reader_on_one_file_see_only_whole_files(tmp_path):
    # two processes saving to one path while a third reads it: each read is one writer's
    # file, whole (a shared PATH.tmp gave a mixture, or a SIGBUS in the reader)
    p = str(tmp_path / "model.safetensors")
    bst.write(p, {f"t{i}": np.full(21000, 1, np.float32) for i in range(8)})
    w, rd = _script(tmp_path, "w.py", WRITER), _script(tmp_path, "r.py", READER)
    until = str(time.time() + 2.0)
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


# ---------------------------------------------------------------- truncation while open

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


# ---------------------------------------------------------------- special files, bounded reads

def _fifo(path):
    os.mkfifo(path)
    return path


def test_special_files_are_refused_without_blocking(tmp_path):
    # a FIFO would block the open forever; /dev/zero would be read until memory ran out
    r = run_python(f"""
        import os
        from blockc import safetensors as bst, _files
        from blockc import BlockcValueError, Tokenizer
        d = {str(tmp_path)!r}
        os.mkfifo(os.path.join(d, "fifo.safetensors"))
        os.symlink("/dev/zero", os.path.join(d, "zero.safetensors"))
        os.mkfifo(os.path.join(d, "fifo.json"))
        os.symlink("/dev/zero", os.path.join(d, "zero.json"))
        os.makedirs(os.path.join(d, "tok"))
        os.mkfifo(os.path.join(d, "tok", "tokenizer.json"))
        calls = [lambda: bst.read(os.path.join(d, "fifo.safetensors")),
                 lambda: bst.read(os.path.join(d, "zero.safetensors")),
                 lambda: _files.read_json(os.path.join(d, "fifo.json")),
                 lambda: _files.read_json(os.path.join(d, "zero.json")),
                 lambda: bst.read(d)]
        try:
            import tokenizers
            calls.append(lambda: Tokenizer.from_pretrained(os.path.join(d, "tok")))
        except ImportError:
            pass
        for c in calls:
            try:
                c()
            except BlockcValueError as e:
                assert "not a regular file" in str(e), e
                print("refused")
        """, timeout=30)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("refused") >= 5


def test_json_reads_are_bounded_in_size_and_depth_and_name_the_file(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(BlockcValueError, match="deep.json.*nested more than 64") as e:
        _files.read_json(deep)
    assert e.type is BlockcValueError
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps({"a": [[[{"b": "[[[[[[[[" * 50}]]]}))  # brackets in strings count not
    assert _files.read_json(ok)["a"][0][0][0]["b"].startswith("[[[")
    big = tmp_path / "big.json"
    big.write_text(" " * 2000 + "{}")
    with pytest.raises(BlockcValueError, match="big.json: larger than 1,000 bytes"):
        _files.read_json(big, limit=1000)
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"\xff": 1}')
    with pytest.raises(BlockcValueError, match="bad.json: not valid JSON"):
        _files.read_json(bad)


def test_deep_json_in_a_run_state_and_the_optimizer_metadata_name_the_file(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / tr.STATE).write_text("[" * 5000 + "]" * 5000)
    with pytest.raises(BlockcValueError, match="trainer_state.json.*nested"):
        tr.read_state(str(d))
    bst.write(d / tr.OPTIMIZER, {"x": np.zeros(1, np.float32)}, {"hyper": "[" * 5000 + "]" * 5000})
    m = blockc.GPT.random(TINY)
    with pytest.raises(BlockcValueError, match="optimizer.safetensors: the hyperparameters.*nested"):
        tr.load_optimizer(str(d), blockc.AdamW(m))


@pytest.mark.parametrize("shape, match", [
    ([1] * 65, "65 dimensions"),
    ([0, 2 ** 70], "a dimension of"),
    ([0, 2 ** 41], "a dimension of"),
])
def test_shapes_numpy_cannot_hold_are_refused_by_name(tmp_path, shape, match):
    h = json.dumps({"x": {"dtype": "F32", "shape": shape, "data_offsets": [0, 4 if 0 not in shape else 0]}})
    h = h.encode() + b" " * (-len(h) % 8)
    p = tmp_path / "s.safetensors"
    p.write_bytes(len(h).to_bytes(8, "little") + h + b"\0" * 4)
    with pytest.raises(BlockcValueError, match=match) as e:
        bst.read(p)
    assert str(p) in str(e.value) and "'x'" in str(e.value)


# ---------------------------------------------------------------- tokenizer failures

def _bpe_json():
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    tok.train_from_iterator(["hello world, the block"] * 20, tokenizers.trainers.BpeTrainer(
        vocab_size=280, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()))
    return json.loads(tok.to_str())


def test_a_tokenizer_that_panics_is_a_value_error_naming_the_file(tmp_path):
    d = _bpe_json()
    d["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": "AAAA"}  # panics on load
    (tmp_path / "tokenizer.json").write_text(json.dumps(d))
    with pytest.raises(BlockcValueError, match="tokenizer.json.*panicked"):
        blockc.Tokenizer.from_pretrained(tmp_path)
    # one that loads and panics when it encodes
    bad = base64.b64encode(b"\x10\x00\x00\x00" + b"\x01" * 20).decode()
    d["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": bad}
    (tmp_path / "tokenizer.json").write_text(json.dumps(d))
    tok = blockc.Tokenizer.from_pretrained(tmp_path)
    with pytest.raises(BlockcValueError, match="encode: the tokenizers package panicked"):
        tok.encode("hello")


def test_the_command_line_reports_a_tokenizer_panic_in_one_line(tmp_path, capsys):
    from blockc.cli import main
    d = _bpe_json()
    bad = base64.b64encode(b"\x10\x00\x00\x00" + b"\x01" * 20).decode()
    d["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": bad}
    (tmp_path / "tokenizer.json").write_text(json.dumps(d))
    blockc.GPT.random(blockc.GPTConfig(vocab=280, context=16, width=16, heads=2,
                                       layers=1)).save_pretrained(tmp_path)
    assert main(["generate", "--model", str(tmp_path), "--prompt", "hello"]) == 2
    err = capsys.readouterr().err
    assert "panicked" in err and err.count("\n") == 1


def test_decode_of_ids_out_of_range_and_a_failed_push_that_leaves_the_stream_working(tmp_path):
    (tmp_path / "tokenizer.json").write_text(json.dumps(_bpe_json()))
    tok = blockc.Tokenizer.from_pretrained(tmp_path)
    for bad in (-1, 2 ** 32, 2 ** 63 - 1):
        with pytest.raises(BlockcValueError, match=r"ids must lie in \[0, 2\*\*32\)"):
            tok.decode([1, bad])
    ids = tok.encode("hello world")
    s = blockc.TextStream(tok)
    first = s.push(int(ids[0]))
    for bad in (-1, 2 ** 32):
        with pytest.raises(BlockcValueError, match="token must lie"):
            s.push(bad)
    rest = [s.push(int(i)) for i in ids[1:]] + [s.flush()]
    assert first + "".join(rest) == "hello world"


def test_wordpiece_without_unk_and_non_utf8_text_are_named(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    wp = tokenizers.Tokenizer(tokenizers.models.WordPiece({"a": 0, "b": 1}, unk_token="[UNK]"))
    wp.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    wp.save(str(tmp_path / "tokenizer.json"))
    tok = blockc.Tokenizer.from_pretrained(tmp_path)
    assert list(tok.encode("a b")) == [0, 1]
    with pytest.raises(BlockcValueError, match="encode: the tokenizers package failed.*UNK"):
        tok.encode("zzz")
    # a command line's non-UTF-8 bytes arrive as lone surrogates (surrogateescape)
    with pytest.raises(BlockcValueError, match="not valid Unicode at character 2"):
        tok.encode("a " + b"\xff".decode("utf-8", "surrogateescape"))


def test_encode_adds_the_special_tokens_as_transformers_does(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    d = _bpe_json()
    t = tokenizers.Tokenizer.from_str(json.dumps(d))
    t.add_special_tokens(["<s>"])
    bos = t.token_to_id("<s>")
    t.post_processor = tokenizers.processors.TemplateProcessing(single="<s> $A",
                                                                special_tokens=[("<s>", bos)])
    t.save(str(tmp_path / "tokenizer.json"))
    tok = blockc.Tokenizer.from_pretrained(tmp_path)
    assert tok.encode("hello")[0] == bos
    assert tok.encode("hello", add_special_tokens=False)[0] != bos
    transformers = pytest.importorskip("transformers")
    ht = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"))
    assert list(tok.encode("hello world")) == ht("hello world")["input_ids"]


# ---------------------------------------------------------------- run directories

def _run(tmp_path, name="run", seed=0, steps=1):
    """A run directory of TINY after ``steps`` steps (model seed ``seed``)."""
    m = blockc.GPT.random(TINY, seed=seed)
    opt = blockc.AdamW(m, lr=1e-2)
    ids = np.arange(16).reshape(1, 16) % 64
    for _ in range(steps):
        m.train_step(ids[:, :-1], ids[:, 1:], opt)
    d = str(tmp_path / name)
    tr.save_run(d, m, opt, {"step": steps, "history": []}, None)
    return d, m, opt


def test_a_run_directory_is_one_step_and_resume_refuses_any_mixture(tmp_path):
    a, _, _ = _run(tmp_path, "a", seed=0, steps=1)
    b, _, _ = _run(tmp_path, "b", seed=0, steps=2)
    st = tr.read_state(a)
    assert st["step"] == 1 and set(st["files"]) == {"config.json", "model.safetensors",
                                                    tr.OPTIMIZER}
    # another step's weights beside this step's optimizer and state: refused by name
    shutil.copyfile(os.path.join(b, "model.safetensors"), os.path.join(a, "model.safetensors"))
    with pytest.raises(BlockcValueError, match="model.safetensors is not the file the state of "
                                               "step 1 was written with"):
        tr.read_state(a)
    os.remove(os.path.join(b, tr.OPTIMIZER))
    with pytest.raises(BlockcValueError, match="optimizer.safetensors is missing"):
        tr.read_state(b)
    st = json.loads(open(os.path.join(b, tr.STATE)).read())
    del st["files"]  # a directory without a manifest (an older blockc's, or hand-made)
    with open(os.path.join(b, tr.STATE), "w") as f:
        json.dump(st, f)
    with pytest.raises(BlockcValueError, match="no manifest"):
        tr.read_state(b)


@pytest.mark.parametrize("fail_in", ["optimizer", "state", "swap"])
def test_a_save_that_fails_part_way_leaves_the_previous_checkpoint_whole(tmp_path, monkeypatch,
                                                                         fail_in):
    d, m, opt = _run(tmp_path, steps=1)
    before = snapshot(d)
    ids = np.arange(16).reshape(1, 16) % 64
    m.train_step(ids[:, :-1], ids[:, 1:], opt)
    exc = {"optimizer": OSError(errno.ENOSPC, "No space left on device"),
           "state": KeyboardInterrupt(), "swap": OSError(errno.EIO, "I/O error")}[fail_in]
    real_write, real_json, real_replace = bst.write, _files.write_json, _files.replace_dir

    def boom(*a, **k):
        raise exc
    if fail_in == "optimizer":
        monkeypatch.setattr(bst, "write", lambda p, *a, **k: boom() if "optimizer" in str(p)
                            else real_write(p, *a, **k))
    elif fail_in == "state":
        monkeypatch.setattr(_files, "write_json", boom)
    else:
        monkeypatch.setattr(_files, "replace_dir", boom)
    with pytest.raises(type(exc)):
        tr.save_run(d, m, opt, {"step": 2, "history": []}, None)
    assert snapshot(d) == before and tr.read_state(d)["step"] == 1
    assert os.listdir(tmp_path) == ["run"]  # no temporary directory left


def test_a_save_killed_by_a_full_disk_leaves_the_previous_checkpoint(tmp_path):
    d, _, _ = _run(tmp_path, steps=1)
    before = snapshot(d)
    r = run_python(f"""
        import resource, signal, numpy as np, blockc
        from blockc import _trainer as tr
        cfg = blockc.GPTConfig(vocab=64, context=16, width=16, heads=2, layers=2)
        m = blockc.GPT.random(cfg, seed=3)
        opt = blockc.AdamW(m)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (30000, 30000))  # the weights fit, not the moments
        try:
            tr.save_run({d!r}, m, opt, {{"step": 5, "history": []}}, None)
        except OSError as e:
            print("failed", e.errno)
        """)
    assert r.returncode == 0, r.stderr
    assert "failed 27" in r.stdout
    assert snapshot(d) == before and tr.read_state(d)["step"] == 1
    assert os.listdir(tmp_path) == ["run"]


RUN_WRITER = """
    import sys, time, numpy as np, blockc
    from blockc import _trainer as tr
    path, me, until = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    cfg = blockc.GPTConfig(vocab=64, context=16, width=16, heads=2, layers=2)
    m = blockc.GPT.random(cfg, seed=me)
    opt = blockc.AdamW(m)
    n = 0
    while time.time() < until:
        tr.save_run(path, m, opt, {"step": me, "history": []}, None)
        n += 1
    print(n)
"""

RUN_READER = """
    import sys, time, numpy as np, blockc
    from blockc import _trainer as tr
    from blockc import BlockcValueError
    path, until = sys.argv[1], float(sys.argv[2])
    cfg = blockc.GPTConfig(vocab=64, context=16, width=16, heads=2, layers=2)
    want = {me: blockc.GPT.random(cfg, seed=me).state_dict() for me in (1, 2)}
    ok = refused = 0
    while time.time() < until:
        try:
            st = tr.read_state(path)
            m = blockc.GPT.from_pretrained(path)
        except (BlockcValueError, FileNotFoundError) as e:  # swapped under the reader
            refused += 1
            continue
        sd = m.state_dict()
        same = [me for me in (1, 2) if all(np.array_equal(sd[k], want[me][k]) for k in sd)]
        assert len(same) == 1, "weights of neither writer"
        ok += 1
    print(ok, refused)
"""


@pytest.mark.slow
def test_two_run_writers_and_a_reader_never_see_a_mixed_checkpoint(tmp_path):
    d, _, _ = _run(tmp_path, steps=1)
    w, rd = _script(tmp_path, "w.py", RUN_WRITER), _script(tmp_path, "r.py", RUN_READER)
    until = str(time.time() + 4.0)
    env = dict(os.environ, PYTHONPATH=ROOT)
    procs = [subprocess.Popen([sys.executable, w, d, str(me), until], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for me in (1, 2)]
    procs.append(subprocess.Popen([sys.executable, rd, d, until], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [pr.communicate(timeout=120) for pr in procs]
    for pr, (out, err) in zip(procs, outs):
        assert pr.returncode == 0, err[-2000:]
    assert int(outs[2][0].split()[0]) > 0  # the reader loaded whole checkpoints
    st = tr.read_state(d)
    assert st["step"] in (1, 2)
    assert sorted(os.listdir(tmp_path)) == ["r.py", "run", "w.py"]
