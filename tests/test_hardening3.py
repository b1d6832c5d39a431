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
from blockc import _files
from blockc.train import fit as tr
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
        from blockc.train import fit as tr
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
    from blockc.train import fit as tr
    path, me, until = sys.argv[1], int(sys.argv[2]), time.time() + float(sys.argv[3])
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
    from blockc.train import fit as tr
    from blockc import BlockcValueError
    path, until = sys.argv[1], time.time() + float(sys.argv[2])
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
    d = str(tmp_path / "run")
    m = blockc.GPT.random(TINY, seed=1)  # writer 1's checkpoint, there before either starts
    tr.save_run(d, m, blockc.AdamW(m), {"step": 1, "history": []}, None)
    w, rd = _script(tmp_path, "w.py", RUN_WRITER), _script(tmp_path, "r.py", RUN_READER)
    until = "4.0"
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


# ---------------------------------------------------------------- training steps and Ctrl-C

def test_an_interrupted_train_step_never_updates_weights_without_the_step_count(monkeypatch):
    # SIGINT delivered the moment the C update returns (the window between it and the step
    # count): the step completes whole and the KeyboardInterrupt comes after it
    from blockc import train
    m = blockc.GPT.random(TINY, seed=0)
    opt = blockc.AdamW(m, lr=1e-2)
    ids = np.arange(16).reshape(1, 16) % 64
    ref = blockc.GPT.random(TINY, seed=0)
    ropt = blockc.AdamW(ref, lr=1e-2)
    ref.train_step(ids[:, :-1], ids[:, 1:], ropt)
    real = train.check

    def check_then_sigint(status, what):
        real(status, what)
        if what == "AdamW step":
            os.kill(os.getpid(), signal.SIGINT)
    monkeypatch.setattr(train, "check", check_then_sigint)
    with pytest.raises(KeyboardInterrupt):
        m.train_step(ids[:, :-1], ids[:, 1:], opt)
    assert opt.steps == 1
    assert np.array_equal(m.params, ref.params)
    assert all(np.array_equal(a, b) for a, b in zip(opt.state_dict()["exp_avg"].values(),
                                                    ropt.state_dict()["exp_avg"].values()))


TRAIN_TEXT = ("the residual stream flows from the embedding to the output. "
              "attention mixes positions and the mlp mixes features. ") * 30
SMALL = ["--width", "32", "--layers", "2", "--heads", "2", "--batch", "4", "--seq", "32"]


def _text(tmp_path):
    p = tmp_path / "text.txt"
    p.write_text(TRAIN_TEXT, encoding="utf-8")
    return str(p)


def test_ctrl_c_during_the_evaluation_saves_the_step_the_weights_are_at(tmp_path, monkeypatch,
                                                                       capsys):
    from blockc.cli import main
    f = _text(tmp_path)
    common = ["--text", f, "--lr", "2e-3", "--eval-every", "4"] + SMALL
    assert main(["train", "--steps", "8", "--out", str(tmp_path / "a")] + common) == 0
    real = tr.evaluate
    calls = []

    def interrupted(*a, **k):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(*a, **k)
    monkeypatch.setattr(tr, "evaluate", interrupted)
    assert main(["train", "--steps", "8", "--out", str(tmp_path / "b")] + common) == 130
    assert tr.read_state(str(tmp_path / "b"))["step"] == 4
    monkeypatch.setattr(tr, "evaluate", real)
    assert main(["train", "--resume", str(tmp_path / "b"), "--steps", "8", "--text", f]) == 0
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == \
        (tmp_path / "b" / "model.safetensors").read_bytes()


def test_ctrl_c_while_the_final_checkpoint_is_written_leaves_the_last_one(tmp_path, monkeypatch,
                                                                         capsys):
    from blockc.cli import main
    f = _text(tmp_path)
    out = tmp_path / "r"
    common = ["--text", f, "--lr", "2e-3", "--eval-every", "4", "--out", str(out)] + SMALL
    real = _files.replace_dir
    calls = []

    def swap(tmp, path):
        calls.append(1)
        if len(calls) == 2:  # the final save (the first was step 4's)
            raise KeyboardInterrupt
        return real(tmp, path)
    monkeypatch.setattr(_files, "replace_dir", swap)
    assert main(["train", "--steps", "8"] + common) == 130
    st = tr.read_state(str(out))  # one consistent step
    assert st["step"] in (4, 8)
    assert [x for x in os.listdir(tmp_path) if x.startswith(".")] == []


# ---------------------------------------------------------------- resume consistency

def test_resume_keeps_every_option_that_changes_the_result(tmp_path, capsys):
    from blockc.cli import main
    f = _text(tmp_path)
    common = ["--text", f, "--lr", "2e-3", "--eval-every", "4", "--eval-frac", "0.3",
              "--grad-clip", "0.05"] + SMALL
    assert main(["train", "--steps", "8", "--out", str(tmp_path / "a")] + common) == 0
    assert main(["train", "--steps", "4", "--out", str(tmp_path / "b")] + common) == 0
    st = tr.read_state(str(tmp_path / "b"))
    assert st["eval_frac"] == 0.3 and st["grad_clip"] == 0.05
    assert main(["train", "--resume", str(tmp_path / "b"), "--steps", "8", "--text", f]) == 0
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == \
        (tmp_path / "b" / "model.safetensors").read_bytes()


@pytest.mark.parametrize("extra, match", [
    (["--layers", "3"], "--layers 3"),
    (["--width", "64"], "--width 64"),
    (["--eval-frac", "0.2"], "--eval-frac 0.2"),
    (["--grad-clip", "0.5"], "--grad-clip 0.5"),
    (["--batch", "8"], "--batch 8"),
    (["--seed", "3"], "--seed 3"),
    (["--schedule", "cosine"], "--schedule cosine"),
])
def test_resume_refuses_options_that_contradict_the_run_by_name(tmp_path, capsys, extra, match):
    from blockc.cli import main
    f = _text(tmp_path)
    assert main(["train", "--steps", "2", "--out", str(tmp_path / "r"), "--text", f] + SMALL) == 0
    capsys.readouterr()
    assert main(["train", "--resume", str(tmp_path / "r"), "--steps", "4", "--text", f] + extra) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1, err


def test_model_with_a_shape_option_is_refused_by_name(tmp_path, capsys):
    from blockc.cli import main
    f = _text(tmp_path)
    src = tmp_path / "src"
    blockc.GPT.random(blockc.GPTConfig(vocab=256, context=32, width=32, heads=2,
                                       layers=2)).save_pretrained(src)
    assert main(["train", "--model", str(src), "--layers", "3", "--steps", "2", "--out",
                 str(tmp_path / "r"), "--text", f, "--seq", "16"]) == 2
    err = capsys.readouterr().err
    assert "--layers 3" in err and "has layers 2" in err


@pytest.mark.parametrize("field, value, match", [
    ("schedule", "bogus", "schedule"),
    ("lr", 0, "lr"),
    ("batch", "8", "batch"),
    ("seq", -1, "seq"),
    ("warmup", 1.5, "warmup"),
    ("eval_frac", 2.0, "eval_frac"),
    ("history", {"a": 1}, "history"),
])
def test_a_hand_edited_trainer_state_is_checked_like_the_command_line(tmp_path, capsys, field,
                                                                      value, match):
    from blockc.cli import main
    f = _text(tmp_path)
    d = tmp_path / "r"
    assert main(["train", "--steps", "2", "--out", str(d), "--text", f] + SMALL) == 0
    st = json.loads((d / tr.STATE).read_text())
    st[field] = value
    (d / tr.STATE).write_text(json.dumps(st))
    capsys.readouterr()
    assert main(["train", "--resume", str(d), "--steps", "4", "--text", f]) == 2
    err = capsys.readouterr().err
    assert "trainer_state.json" in err and match in err and err.count("\n") == 1, err


def test_resume_refuses_a_run_whose_tokenizer_is_gone(tmp_path, capsys):
    from blockc.cli import main
    from test_hf import trained_tokenizer
    src = tmp_path / "src"
    src.mkdir()
    tok = trained_tokenizer(src)
    blockc.GPT.random(blockc.GPTConfig(vocab=tok.get_vocab_size(), context=32, width=32,
                                       heads=2, layers=2)).save_pretrained(src)
    f = _text(tmp_path)
    d = tmp_path / "r"
    assert main(["train", "--model", str(src), "--steps", "2", "--batch", "2", "--seq", "16",
                 "--out", str(d), "--text", f, "--quiet"]) == 0
    os.remove(d / "tokenizer.json")
    capsys.readouterr()
    assert main(["train", "--resume", str(d), "--steps", "4", "--text", f]) == 2
    assert "tokenizer.json is missing" in capsys.readouterr().err


# ---------------------------------------------------------------- overwrites and output paths

def test_train_out_over_an_existing_run_needs_overwrite(tmp_path, capsys):
    from blockc.cli import main
    f = _text(tmp_path)
    d = tmp_path / "r"
    args = ["train", "--steps", "2", "--out", str(d), "--text", f] + SMALL
    assert main(args) == 0
    before = snapshot(d)
    capsys.readouterr()
    assert main(args) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert snapshot(d) == before
    assert main(args + ["--overwrite"]) == 0
    # a non-empty directory that is not a run is refused too; --resume continues in place
    assert main(["train", "--resume", str(d), "--steps", "3", "--text", f]) == 0


def test_train_out_a_regular_file_fails_before_training(tmp_path, capsys, monkeypatch):
    from blockc.cli import main
    f = _text(tmp_path)
    (tmp_path / "file").write_text("x")
    monkeypatch.setattr(tr, "fit", lambda *a, **k: pytest.fail("trained"))
    assert main(["train", "--steps", "2", "--out", str(tmp_path / "file"), "--text", f] + SMALL) == 2
    assert "not a directory" in capsys.readouterr().err
    assert main(["train", "--steps", "2", "--out", str(tmp_path / "no" / "r"), "--text", f]
                + SMALL) == 2
    assert "does not exist" in capsys.readouterr().err


def test_convert_refuses_to_write_over_its_input(tmp_path, capsys):
    from blockc.cli import main
    d = tmp_path / "ck"
    blockc.GPT.random(TINY).save_pretrained(d)
    before = snapshot(d)
    assert main(["convert", str(d), str(d / "model.safetensors")]) == 2
    assert "input" in capsys.readouterr().err
    assert snapshot(d) == before
    sd = tmp_path / "sd.safetensors"
    assert main(["convert", str(d), str(sd)]) == 0
    assert main(["convert", str(sd), str(d / "model.safetensors"), "--config-json",
                 str(d / "config.json")]) == 2  # a directory path that is a file of the input
    capsys.readouterr()


def test_convert_metadata_that_is_not_json_names_the_file(tmp_path, capsys):
    from blockc.cli import main
    sd = tmp_path / "sd.safetensors"
    bst.write(sd, {"x": np.zeros(1, np.float32)}, {"config": "[" * 5000 + "]" * 5000})
    assert main(["convert", str(sd), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "sd.safetensors" in err and "internal error" not in err
    bst.write(sd, {"x": np.zeros(1, np.float32)}, {"config": "{nope"})
    assert main(["convert", str(sd), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "sd.safetensors" in err and "not valid JSON" in err


@pytest.mark.parametrize("opt", ["--json", "--markdown"])
def test_experiment_output_paths_are_checked_before_the_experiment(tmp_path, capsys, opt):
    from blockc.cli import main
    assert main(["experiment", "trainability", "--depths", "1", "--variants", "pre-norm",
                 "--steps", "1", "--width", "16", opt, str(tmp_path / "missing" / "x")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "trainability:" not in capsys.readouterr().out


def test_experiment_markdown_with_markers_out_of_order_is_refused(tmp_path, capsys):
    from blockc.cli import main
    md = tmp_path / "doc.md"
    text = "intro\n<!-- trainability:end -->\nmine\n<!-- trainability:begin -->\nend\n"
    md.write_text(text)
    assert main(["experiment", "trainability", "--depths", "1", "--variants", "pre-norm",
                 "--steps", "1", "--width", "16", "--markdown", str(md)]) == 2
    assert "marker" in capsys.readouterr().err
    assert md.read_text() == text


@pytest.mark.parametrize("extra, match", [
    (["--warmup", "-5"], "--warmup"),
    (["--grad-clip", "nan"], "--grad-clip"),
    (["--grad-clip", "-1"], "--grad-clip"),
    (["--weight-decay", "inf"], "--weight-decay"),
])
def test_train_options_out_of_range_are_refused(tmp_path, capsys, extra, match):
    from blockc.cli import main
    f = _text(tmp_path)
    assert main(["train", "--steps", "2", "--out", str(tmp_path / "r"), "--text", f]
                + SMALL + extra) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1


def test_generate_ids_past_int64_are_named(tmp_path, capsys):
    from blockc.cli import main
    d = tmp_path / "ck"
    blockc.GPT.random(TINY).save_pretrained(d)
    assert main(["generate", "--model", str(d), "--ids", f"1,{2 ** 64}"]) == 2
    err = capsys.readouterr().err
    assert "--ids" in err and "dtype" not in err


# ---------------------------------------------------------------- the training and generation API

def test_training_targets_are_range_checked_before_any_cast():
    m = blockc.GPT.random(TINY)
    ids = np.zeros((1, 4), np.int64)
    with pytest.raises(BlockcValueError, match="ignore_index"):
        m.loss(ids, ids, ignore_index=2 ** 63)
    t = np.array([[1, 2, 3, 2 ** 64 - 100]], np.uint64)  # wraps to -100 in int64
    with pytest.raises(BlockcValueError, match="targets must lie"):
        m.loss(ids, t)
    with pytest.raises(BlockcValueError, match="targets must lie"):
        m.loss(ids, np.array([[1, 2, 3, 2 ** 63]], np.uint64))


def test_stream_refuses_what_generate_refuses():
    m = blockc.GPT.random(TINY)
    with pytest.raises(BlockcValueError):
        list(m.stream(np.zeros((2, 1, 3), np.int64), 2))
    with pytest.raises(BlockcValueError, match="empty"):
        list(m.stream([], 2))
    with pytest.raises(BlockcValueError):
        list(m.stream(np.zeros((2, 3), np.int64), 2))  # one prompt at a time
    assert len(list(m.stream([1, 2, 3], 2))) == 2


# ---------------------------------------------------------------- checkpoint directories

def _ckpt(d, cfg=TINY, seed=0, **config):
    m = blockc.GPT.random(cfg, seed=seed)
    m.save_pretrained(d)
    if config:
        c = json.loads((d / "config.json").read_text())
        c.update(config)
        (d / "config.json").write_text(json.dumps(c))
    return m


@pytest.mark.parametrize("field, value, match", [
    ("scale_attn_by_inverse_layer_idx", "yes", "scale_attn_by_inverse_layer_idx"),
    ("reorder_and_upcast_attn", "yes", "reorder_and_upcast_attn"),
    ("tie_word_embeddings", "false", "tie_word_embeddings"),
    ("layer_norm_epsilon", "abc", "layer_norm_epsilon"),
    ("layer_norm_epsilon", [1e-5], "layer_norm_epsilon"),
    ("layer_norm_epsilon", True, "layer_norm_epsilon"),
    ("model_type", ["gpt2"], "model_type"),
    ("activation_function", ["gelu_new"], "activation_function"),
    ("n_inner", "64", "n_inner"),
    ("eos_token_id", "x", None),  # not an id: dropped with a warning, the model loads
])
def test_every_config_field_is_type_checked_naming_field_and_file(tmp_path, field, value, match):
    d = tmp_path / "ck"
    _ckpt(d, **{field: value})
    if match is None:
        with pytest.warns(UserWarning, match="config.json.*eos_token_id"):
            blockc.GPT.from_pretrained(d)
        return
    with pytest.raises(BlockcValueError, match=match) as e:
        blockc.GPT.from_pretrained(d)
    assert "config.json" in str(e.value)


def test_a_config_that_lies_about_the_shapes_is_refused_before_allocating(tmp_path):
    d = tmp_path / "ck"
    _ckpt(d, vocab_size=2 ** 33)
    with pytest.raises(BlockcValueError, match="wte.weight.*shape") as e:
        blockc.GPT.from_pretrained(d)
    assert "memory" not in str(e.value)


def test_config_json_special_files_and_deep_json_are_refused(tmp_path):
    d = tmp_path / "ck"
    _ckpt(d)
    r = run_python(f"""
        import os, json, shutil, blockc
        from blockc import BlockcValueError
        d = {str(d)!r}
        cfg = open(os.path.join(d, "config.json")).read()
        out = []
        for name, make in (("config.json", "fifo"), ("config.json", "zero"),
                           ("model.safetensors", "fifo"), ("config.json", "deep"),
                           ("model.safetensors.index.json", "fifo"),
                           ("model.safetensors.index.json", "deep"),
                           ("generation_config.json", "deep")):
            p = os.path.join(d, name)
            keep = p + ".keep"
            if os.path.exists(p):
                os.rename(p, keep)
            if name == "model.safetensors.index.json":
                os.rename(os.path.join(d, "model.safetensors"), os.path.join(d, "m.keep"))
            if make == "fifo":
                os.mkfifo(p)
            elif make == "zero":
                os.symlink("/dev/zero", p)
            else:
                open(p, "w").write("[" * 100000 + "]" * 100000)
            try:
                blockc.GPT.from_pretrained(d)
                out.append("loaded")
            except BlockcValueError as e:
                assert name in str(e), e
                out.append("refused")
            os.remove(p)
            if os.path.exists(keep):
                os.rename(keep, p)
            if name == "model.safetensors.index.json":
                os.rename(os.path.join(d, "m.keep"), os.path.join(d, "model.safetensors"))
        print(out)
        """, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "loaded" not in r.stdout and r.stdout.count("refused") == 7


def _shard(d):
    """Split d's model.safetensors into two shards with an index (transformers' layout)."""
    tensors, meta = bst.read(d / "model.safetensors")
    names = list(tensors)
    half = len(names) // 2
    files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    wm = {}
    for fn, part in zip(files, (names[:half], names[half:])):
        bst.write(d / fn, {n: tensors[n].data for n in part}, meta)
        wm.update({n: fn for n in part})
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    os.remove(d / "model.safetensors")


def test_the_single_file_is_preferred_to_a_stale_index_as_transformers_does(tmp_path):
    d = tmp_path / "ck"
    _ckpt(d, seed=1)
    _shard(d)
    new = blockc.GPT.random(TINY, seed=2)
    bst.write(d / "model.safetensors", _saved_tensors(tmp_path, new), {"format": "pt"})
    got = blockc.GPT.from_pretrained(d)
    assert np.array_equal(got.params, new.params)


def _saved_tensors(tmp_path, m):
    e = tmp_path / "tmp-save"
    m.save_pretrained(e)
    return {k: t.data for k, t in bst.read(e / "model.safetensors")[0].items()}


def test_save_pretrained_over_a_sharded_checkpoint_removes_its_shards_and_index(tmp_path):
    d = tmp_path / "ck"
    _ckpt(d, seed=1)
    _shard(d)
    (d / "notes.txt").write_text("mine")
    new = blockc.GPT.random(TINY, seed=2)
    new.save_pretrained(d)
    assert sorted(os.listdir(d)) == ["config.json", "generation_config.json", "model.safetensors", "notes.txt"]
    assert np.array_equal(blockc.GPT.from_pretrained(d).params, new.params)


def test_generate_prompt_adds_bos_as_transformers_does(tmp_path, capsys):
    from blockc.cli import main
    tokenizers = pytest.importorskip("tokenizers")
    t = tokenizers.Tokenizer.from_str(json.dumps(_bpe_json()))
    t.add_special_tokens(["<s>"])
    bos = t.token_to_id("<s>")
    t.post_processor = tokenizers.processors.TemplateProcessing(single="<s> $A",
                                                                special_tokens=[("<s>", bos)])
    d = tmp_path / "ck"
    d.mkdir()
    t.save(str(d / "tokenizer.json"))
    m = blockc.GPT.random(blockc.GPTConfig(vocab=t.get_vocab_size(), context=32, width=16,
                                           heads=2, layers=1), seed=4)
    m.save_pretrained(d)
    tok = blockc.Tokenizer.from_pretrained(d)
    for flag, ids in (([], [bos] + t.encode("hello", add_special_tokens=False).ids),
                      (["--no-special-tokens"], t.encode("hello", add_special_tokens=False).ids)):
        want = tok.decode(m.generate(np.array([ids]), 6)[0][len(ids):])
        assert main(["generate", "--model", str(d), "--prompt", "hello", "--max-new-tokens", "6",
                     "--no-eos", "--no-echo"] + flag) == 0
        assert capsys.readouterr().out == want + "\n"


def test_train_text_and_chat_config_special_files_are_refused(tmp_path):
    r = run_python(f"""
        import os
        from blockc.cli import main
        d = {str(tmp_path)!r}
        os.mkfifo(os.path.join(d, "fifo.txt"))
        print("status", main(["train", "--text", os.path.join(d, "fifo.txt"), "--out",
                              os.path.join(d, "r"), "--steps", "1"]))
        """, timeout=30)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "status 2" in r.stdout and "a FIFO, not a regular file" in r.stderr
    pytest.importorskip("jinja2")
    from blockc import chat
    (tmp_path / "tokenizer_config.json").write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(BlockcValueError, match="tokenizer_config.json.*nested"):
        chat.load_chat_template(str(tmp_path))


def test_generation_config_end_ids_are_honoured(tmp_path, capsys):
    from blockc.cli import main
    d = tmp_path / "ck"
    m = _ckpt(d, eos_token_id=63)
    prompt = [1, 2, 3]
    free = [int(t) for t in m.generate(np.array([prompt]), 12)[0][3:]]
    stop = free[4]
    first = free.index(stop)
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": [63, stop]}))
    assert main(["generate", "--model", str(d), "--ids", "1,2,3", "--max-new-tokens", "12"]) == 0
    out = [int(x) for x in capsys.readouterr().out.split()]
    assert out == free[:first + 1]


def test_a_config_end_id_outside_the_vocabulary_warns_and_generates(tmp_path, capsys):
    from blockc.cli import main
    d = tmp_path / "ck"
    _ckpt(d, eos_token_id=10 ** 6)
    assert main(["generate", "--model", str(d), "--ids", "1,2,3", "--max-new-tokens", "4"]) == 0
    cap = capsys.readouterr()
    assert len(cap.out.split()) == 4
    assert "config.json" in cap.err and "eos_token_id" in cap.err and cap.err.count("\n") == 1
