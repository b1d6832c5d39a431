"""Training runs (blockc.train.fit and `blockc train`, issue 19): a run directory holds one
step (a manifest names its files), a save that fails part-way or is killed leaves the
previous checkpoint whole, concurrent writers never show a reader a mixture, Ctrl-C stops
at a consistent step, and a resumed run reproduces the uninterrupted one or refuses, by
name, options and files that contradict it.

What could crash, hang or race runs in a subprocess with a timeout.
"""
import errno
import json
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from helpers import run_python, snapshot, write_script

import blockc
from blockc import _files
from blockc import safetensors as bst
from blockc._errors import BlockcValueError
from blockc.train import fit as tr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = blockc.GPTConfig(vocab=64, context=16, width=16, heads=2, layers=2)


# ---- run directories ---------------------------------------------------------------------

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
    w, rd = write_script(tmp_path, "w.py", RUN_WRITER), write_script(tmp_path, "r.py", RUN_READER)
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


# ---- training steps and Ctrl-C -----------------------------------------------------------

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


# ---- resume consistency ------------------------------------------------------------------

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


# ---- --out and the options ---------------------------------------------------------------

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
