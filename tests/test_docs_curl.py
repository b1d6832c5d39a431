"""The server's shell examples run as written (issue 52): every ```sh block of the README and
docs/serving.md that starts ``blockc serve`` is started on a free port of 127.0.0.1 with tiny
chat models made here in place of its model paths, and each of its ``curl`` commands is sent
to it (the port substituted): status 200 and the JSON (or server-sent events) of its
endpoint.

The curl command line is parsed here (its URL, ``-H`` headers, ``-d`` body; any other option
fails the test, so a page cannot show one this test does not understand) and the request is
sent with httpx, proxies from the environment ignored: what is checked is the documented
request and the server's answer, not the curl binary or the machine's network settings."""
import json
import os
import re
import shlex

import pytest

from chat_dirs import chat_model_dir
from serve_proc import Server

pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
pytest.importorskip("jinja2")
pytest.importorskip("tokenizers")
httpx = pytest.importorskip("httpx")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ("README.md", "docs/serving.md")


def _blocks():
    out = []
    for page in PAGES:
        with open(os.path.join(ROOT, *page.split("/")), encoding="utf-8") as f:
            text = f.read()
        for b in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
            if b.lstrip().startswith("blockc serve"):
                out.append((page, b))
    return out


def _commands(block):
    """The block's commands, continuation lines joined."""
    return [c.strip() for c in block.replace("\\\n", " ").splitlines() if c.strip()]


def _curl_request(argv):
    """(method, url, headers, body) of a curl command line's request."""
    assert argv[0] == "curl", argv
    url, headers, body, k = None, {}, None, 1
    while k < len(argv):
        a = argv[k]
        if a in ("-H", "--header"):
            name, _, value = argv[k + 1].partition(":")
            headers[name.strip()] = value.strip()
            k += 2
        elif a in ("-d", "--data", "--data-raw"):
            body = argv[k + 1]
            k += 2
        elif a in ("-N", "--no-buffer", "-s", "--silent"):  # output buffering only
            k += 1
        elif a.startswith("http://") and url is None:
            url = a
            k += 1
        else:
            raise AssertionError(f"curl option {a!r} is not understood by this test")
    assert url is not None, argv
    return ("POST" if body is not None else "GET"), url, headers, body


def _check_answer(path, body):
    if body.startswith("data: "):  # a stream: JSON events, then [DONE]
        events = [line[6:] for line in body.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        for e in events[:-1]:
            assert "choices" in json.loads(e) or "usage" in json.loads(e)
        return
    out = json.loads(body)
    assert "error" not in out, out
    if path.endswith("/chat/completions"):
        assert isinstance(out["choices"][0]["message"]["content"], str)
    elif path.endswith("/completions"):
        assert isinstance(out["choices"][0]["text"], str)
    elif path.endswith("/embeddings"):
        assert out["object"] == "list" and out["data"]
        assert len({len(d["embedding"]) for d in out["data"]}) == 1
        assert all(isinstance(x, float) for x in out["data"][0]["embedding"])
    elif path.endswith("/tokenize"):
        assert out["tokens"] and all(isinstance(t, (int, dict)) for t in out["tokens"])
    elif path.endswith("/detokenize"):
        assert isinstance(out["content"], str)
    elif path.endswith("/models"):
        assert out["object"] == "list" and out["data"]


@pytest.mark.slow
@pytest.mark.parametrize("i", range(len(_blocks())),
                         ids=[f"{p}-{n}" for n, (p, _) in enumerate(_blocks())])
def test_shell_examples_answer_200(i, tmp_path):
    page, block = _blocks()[i]
    cmds = _commands(block)
    serve = shlex.split(cmds[0])[2:]
    # the block's models: each path made here (a tiny chat model), NAME= kept
    args, models, k = [], [], 0
    while k < len(serve):
        if serve[k] in ("--model", "--port", "--models-dir"):
            if serve[k] == "--model":
                models.append(serve[k + 1])
            elif serve[k] == "--models-dir":
                d = tmp_path / "models"
                d.mkdir()
                chat_model_dir(d / "dir-model", "chatml", llama=True, seed=3)
                args += ["--models-dir", str(d)]
            k += 2
            continue
        args.append(serve[k])
        k += 1
    dirs = []
    for j, m in enumerate(models):
        name, _, path = m.rpartition("=")
        d = tmp_path / f"m{j}"
        chat_model_dir(d, "chatml", llama=True, seed=j)
        dirs.append((name or os.path.basename(os.path.normpath(path)).removesuffix(".gguf"), d))
    extra = [a for name, d in dirs[1:] for a in ("--model", f"{name}={d}")]
    server = Server(dirs[0][1], *extra, *args, name=dirs[0][0])
    try:
        curls = [c for c in cmds[1:] if c.startswith("curl ")]
        assert curls, "a server example shows at least one request"
        with httpx.Client(trust_env=False, timeout=120) as client:
            for c in curls:
                c = c.replace("127.0.0.1:8000", f"127.0.0.1:{server.port}")
                method, url, headers, body = _curl_request(shlex.split(c))
                r = client.request(method, url, headers=headers, content=body)
                assert r.status_code == 200, (c, r.text, server.log.read_text()[-4000:])
                _check_answer(url.split(f":{server.port}", 1)[1], r.text)
    finally:
        server.stop()
