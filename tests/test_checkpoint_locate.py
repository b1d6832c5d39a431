"""Models by name (issue 53): a Hugging Face Hub id resolves from the local cache, laid out
here by the test as huggingface_hub lays it out (refs/main, snapshots/<commit>/ whose files
are links into blobs/), never the network; errors name what is wrong; `blockc models`
lists what is there."""
import hashlib
import json
import os
import shutil

import numpy as np
import pytest

import blockc
from blockc.checkpoint.locate import find_models, hub_cache_dir, is_hub_id, resolve
from blockc.cli import main

pytest.importorskip("tokenizers")
from chat_dirs import chat_model_dir  # noqa: E402


def hub_layout(cache, hub_id, files, commit="0123456789abcdef0123456789abcdef01234567"):
    """Put ``files`` (name -> source path) into ``cache`` as huggingface_hub's cache holds a
    snapshot: each file a blob named by its hash, linked from snapshots/<commit>/."""
    repo = cache / ("models--" + hub_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for name, src in files.items():
        data = open(src, "rb").read()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        os.symlink(os.path.relpath(blob, snap), snap / name)
    return snap


@pytest.fixture
def cache(tmp_path, monkeypatch):
    c = tmp_path / "hub"
    c.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(c))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return c


@pytest.fixture
def model_dir(tmp_path):
    d = tmp_path / "src"
    d.mkdir()
    m, tok = chat_model_dir(d)
    return d, m


def test_hub_cache_dir_follows_huggingface_hubs_variables(monkeypatch, tmp_path):
    for v in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hub_cache_dir() == str(tmp_path / ".cache" / "huggingface" / "hub")
    monkeypatch.setenv("XDG_CACHE_HOME", "/x")
    assert hub_cache_dir() == "/x/huggingface/hub"
    monkeypatch.setenv("HF_HOME", "/h")
    assert hub_cache_dir() == "/h/hub"
    monkeypatch.setenv("HF_HUB_CACHE", "/c")
    assert hub_cache_dir() == "/c"


@pytest.mark.parametrize("env", [{}, {"XDG_CACHE_HOME": "/x"}, {"HF_HOME": "/h"},
                                 {"HF_HOME": "/h", "HF_HUB_CACHE": "/c"}])
def test_hub_cache_dir_is_where_huggingface_hub_looks(env, tmp_path):
    pytest.importorskip("huggingface_hub")
    import subprocess
    import sys
    clean = {k: v for k, v in os.environ.items()
             if k not in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HUGGINGFACE_HUB_CACHE")}
    clean.update(env, HOME=str(tmp_path))
    code = ("import huggingface_hub.constants as c; from blockc.checkpoint.locate import "
            "hub_cache_dir; print(c.HF_HUB_CACHE); print(hub_cache_dir())")
    out = subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out[0] == out[1]


def test_a_hub_id_in_the_cache_loads_offline_with_the_same_weights(cache, model_dir):
    src, m = model_dir
    files = {f: src / f for f in os.listdir(src)}
    snap = hub_layout(cache, "someone/tiny-chat", files)
    assert all(os.path.islink(snap / f) for f in files)
    path = resolve("someone/tiny-chat")
    assert os.path.samefile(path, snap)
    g = blockc.GPT.from_pretrained(path)
    ids = [[1, 2, 3, 4]]
    assert np.array_equal(g(ids), m(ids))


def test_generate_takes_a_hub_id_from_the_cache(cache, model_dir, capsys):
    src, m = model_dir
    hub_layout(cache, "someone/tiny-chat", {f: src / f for f in os.listdir(src)})
    assert main(["generate", "--temperature", "0", "--model", "someone/tiny-chat", "--ids", "1,2,3",
                 "--max-new-tokens", "4", "--no-eos"]) == 0
    got = [int(x) for x in capsys.readouterr().out.split()]
    want = m.generate(np.array([[1, 2, 3]]), max_new_tokens=4, eos_token_id=[])[0, 3:]
    assert got == list(want)


def test_a_gguf_repository_resolves_to_its_file_and_several_need_one_named(cache, tmp_path):
    gguf_files = pytest.importorskip("gguf_files")
    pytest.importorskip("gguf")
    a, b = tmp_path / "a-Q8_0.gguf", tmp_path / "a-F32.gguf"
    gguf_files.write_model(a, default_type="Q8_0")
    gguf_files.write_model(b)
    hub_layout(cache, "someone/one-gguf", {"m-Q8_0.gguf": a})
    assert resolve("someone/one-gguf").endswith("m-Q8_0.gguf")
    snap = hub_layout(cache, "someone/two-gguf", {"m-Q8_0.gguf": a, "m-F32.gguf": b})
    with pytest.raises(ValueError, match="several GGUF files .*m-F32.gguf, m-Q8_0.gguf"):
        resolve("someone/two-gguf")
    assert resolve("someone/two-gguf", file="m-F32.gguf") == str(snap / "m-F32.gguf")
    assert blockc.GPT.from_pretrained(resolve("someone/two-gguf", file="m-F32.gguf")).dtype \
        == "float32"
    with pytest.raises(ValueError, match="no file 'm-Q4_0.gguf' .*m-F32.gguf"):
        resolve("someone/two-gguf", file="m-Q4_0.gguf")
    with pytest.raises(ValueError, match="inside"):
        resolve("someone/two-gguf", file="../../x.gguf")


def test_errors_name_what_is_wrong(cache, tmp_path):
    with pytest.raises(ValueError, match=r"nope/missing\.gguf: no such file or directory$"):
        resolve("nope/missing.gguf")
    with pytest.raises(ValueError, match="no model 'org/absent' in the Hugging Face cache .*"
                                         "blockc pull org/absent"):
        resolve("org/absent")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "pytorch_model.bin").write_bytes(b"\x80\x04")
    with pytest.raises(ValueError, match="without config.json .*pytorch_model.bin: pickle"):
        resolve(empty)
    with pytest.raises(ValueError, match="pickle checkpoint"):
        resolve(empty / "pytorch_model.bin")
    with pytest.raises(TypeError, match="model must be a path"):
        resolve(3)
    # the command line says the same, with exit status 2 and no traceback
    assert main(["generate", "--temperature", "0", "--model", "org/absent", "--ids", "1"]) == 2


def test_a_link_in_the_cache_to_something_not_a_regular_file_is_refused(cache, model_dir):
    src, _ = model_dir
    snap = hub_layout(cache, "someone/odd", {f: src / f for f in os.listdir(src)})
    os.unlink(snap / "model.safetensors")
    fifo = cache / "fifo"
    os.mkfifo(fifo)
    os.symlink(fifo, snap / "model.safetensors")
    with pytest.raises(ValueError, match="not a regular file"):
        blockc.GPT.from_pretrained(resolve("someone/odd"))


def test_models_lists_the_cache_and_a_models_folder(cache, model_dir, tmp_path, capsys):
    src, _ = model_dir
    hub_layout(cache, "someone/tiny-chat", {f: src / f for f in os.listdir(src)})
    own = tmp_path / "own"
    own.mkdir()
    shutil.copytree(src, own / "mine")
    found = find_models(own)
    assert [(f.name, f.kind, f.source) for f in found] == [
        ("someone/tiny-chat", "directory", "hf-cache"), ("mine", "directory", "models-dir")]
    assert main(["models", "--models-dir", str(own)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["someone/tiny-chat", "directory"]
    assert out[1].split()[:2] == ["mine", "directory"]


def test_is_hub_id():
    assert is_hub_id("org/name") and is_hub_id("gpt2") and is_hub_id("a.b/c-d_e")
    assert not is_hub_id("/abs/path") and not is_hub_id("./x") and not is_hub_id("a/b/c")
    assert not is_hub_id("../x") and not is_hub_id("org/..")


# -- blockc pull, against a stand-in for the Hub on 127.0.0.1 --------------------------------

def _pull(argv, cache, endpoint, offline=False):
    import subprocess
    import sys
    env = dict(os.environ, HF_HUB_CACHE=str(cache), HF_ENDPOINT=endpoint,
               HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_XET="1", HF_TOKEN="")
    env.pop("HF_HUB_OFFLINE", None)
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run([sys.executable, "-m", "blockc", "pull"] + argv, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_pull_downloads_a_checkpoint_into_the_cache_that_then_loads_offline(tmp_path, model_dir):
    pytest.importorskip("huggingface_hub")
    from fake_hub import FakeHub
    src, m = model_dir
    files = {f: (src / f).read_bytes() for f in os.listdir(src)}
    files["pytorch_model.bin"] = b"\x80\x04 a pickle that must never be fetched"
    cache = tmp_path / "hub"
    with FakeHub({"someone/tiny-chat": files}) as hub:
        r = _pull(["someone/tiny-chat"], cache, hub.url)
        assert r.returncode == 0, r.stderr
        fetched = {p.rsplit("/", 1)[-1] for meth, p in hub.requests if meth == "GET"
                   and "/resolve/" in p}
    assert fetched == set(files) - {"pytorch_model.bin"}
    assert "blockc chat --model someone/tiny-chat" in r.stderr
    # a line per file as it is in: its index, name and size
    want = sorted(fetched)
    lines = [x for x in r.stderr.splitlines() if x.startswith("blockc pull: [")]
    assert [x.split("] ")[1].rsplit(" (", 1)[0] for x in lines] == want
    for i, (x, name) in enumerate(zip(lines, want), 1):
        assert x.startswith(f"blockc pull: [{i}/{len(want)}] {name} (")
        n = len(files[name])
        assert x.endswith(f"({n} bytes)" if n < 1e6 else f"({n / 1e6:.1f} MB)")
    path = r.stdout.strip()
    assert os.path.samefile(path, resolve("someone/tiny-chat", cache_dir=str(cache)))
    g = blockc.GPT.from_pretrained(path)
    assert np.array_equal(g([[1, 2, 3]]), m([[1, 2, 3]]))


@pytest.mark.slow
def test_pull_of_a_gguf_repository_needs_a_file_and_fetches_only_it(tmp_path):
    pytest.importorskip("huggingface_hub")
    gguf_files = pytest.importorskip("gguf_files")
    pytest.importorskip("gguf")
    from fake_hub import FakeHub
    a = tmp_path / "a.gguf"
    gguf_files.write_model(a, default_type="Q8_0")
    files = {"m-Q8_0.gguf": a.read_bytes(), "m-F16.gguf": b"GGUF never fetched"}
    cache = tmp_path / "hub"
    with FakeHub({"someone/m-GGUF": files}) as hub:
        r = _pull(["someone/m-GGUF"], cache, hub.url)
        assert r.returncode == 2 and "name one with --file (m-F16.gguf, m-Q8_0.gguf)" in r.stderr
        r = _pull(["someone/m-GGUF", "--file", "m-Q8_0.gguf"], cache, hub.url)
        assert r.returncode == 0, r.stderr
        got = [p for meth, p in hub.requests if meth == "GET" and "/resolve/" in p]
        assert got and all(p.endswith("m-Q8_0.gguf") for p in got)
        assert f"blockc pull: [1/1] m-Q8_0.gguf ({len(files['m-Q8_0.gguf'])} bytes)" in r.stderr
        r = _pull(["nobody/absent"], cache, hub.url)
        assert r.returncode == 2 and "no such repository" in r.stderr, r.stderr
    path = resolve("someone/m-GGUF", file="m-Q8_0.gguf", cache_dir=str(cache))
    assert blockc.GPT.from_pretrained(path, dtype="exact").dtype == "q8_0"


@pytest.mark.slow
def test_pull_says_why_it_cannot_download(tmp_path):
    pytest.importorskip("huggingface_hub")
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    r = _pull(["someone/x"], tmp_path / "hub", f"http://127.0.0.1:{port}")
    assert r.returncode == 1 and "cannot download someone/x" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    r = _pull(["someone/x"], tmp_path / "hub", f"http://127.0.0.1:{port}", offline=True)
    assert r.returncode == 1 and "HF_HUB_OFFLINE" in r.stderr, r.stderr
    r = _pull(["not a hub id"], tmp_path / "hub", f"http://127.0.0.1:{port}")
    assert r.returncode == 2 and "not a Hub id" in r.stderr
