"""Checkpoint files that are not what they claim (issue 19): special files (a FIFO, a link
to /dev/zero) refused without blocking, JSON bounded in size and depth, shapes NumPy cannot
hold, config fields of the wrong type, a config that lies about the tensors' shapes, a
stale shard index, a save over a sharded checkpoint, and generation_config's end ids.
Every refusal names the file.

What could block or exhaust memory runs in a subprocess with a timeout.
"""
import json
import os

import numpy as np
import pytest

from helpers import run_python

import blockc
from blockc import _files
from blockc import safetensors as bst
from blockc._errors import BlockcValueError

TINY = blockc.GPTConfig(vocab=64, context=16, width=16, heads=2, layers=2)


# ---- special files, bounded reads --------------------------------------------------------

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


# ---- checkpoint directories --------------------------------------------------------------

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


def test_generation_config_end_ids_are_honoured(tmp_path, capsys):
    from blockc.cli import main
    d = tmp_path / "ck"
    m = _ckpt(d, eos_token_id=63)
    prompt = [1, 2, 3]
    free = [int(t) for t in m.generate(np.array([prompt]), 12)[0][3:]]
    stop = free[4]
    first = free.index(stop)
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": [63, stop]}))
    assert main(["generate", "--temperature", "0", "--model", str(d), "--ids", "1,2,3", "--max-new-tokens", "12"]) == 0
    out = [int(x) for x in capsys.readouterr().out.split()]
    assert out == free[:first + 1]


def test_a_config_end_id_outside_the_vocabulary_warns_and_generates(tmp_path, capsys):
    from blockc.cli import main
    d = tmp_path / "ck"
    _ckpt(d, eos_token_id=10 ** 6)
    assert main(["generate", "--temperature", "0", "--model", str(d), "--ids", "1,2,3", "--max-new-tokens", "4"]) == 0
    cap = capsys.readouterr()
    assert len(cap.out.split()) == 4
    assert "config.json" in cap.err and "eos_token_id" in cap.err and cap.err.count("\n") == 1
