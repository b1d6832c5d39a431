"""The examples in the public docstrings run and print what they say (doctest), and
every public function documents its parameters, return value and errors (numpydoc)."""
import doctest
import glob
import importlib
import inspect
import os
import re

import numpy as np
import pytest

import blockc

MODULES = ["blockc.block.ops", "blockc.block.packed", "blockc.block.engine", "blockc.block.config", "blockc.block.weights",
           "blockc.gpt", "blockc.runtime", "blockc.book", "blockc.book.rng", "blockc.text.tokenizer",
           "blockc.text.chat", "blockc.model.config", "blockc.model.core", "blockc.model.cache",
           "blockc.model.layout", "blockc.checkpoint.hf", "blockc.train", "blockc.generation.loop",
           "blockc.generation.config", "blockc.generation.constraints", "blockc.text.tools",
           "blockc.checkpoint.reader", "blockc.checkpoint.locate"]
# the examples are written against the public API (GPT's methods live in the modules
# of the model core and its mixins, which do not import GPT)
API = {name: getattr(blockc, name) for name in blockc.__all__}


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module(name)
    missing = {k: v for k, v in API.items() if k not in vars(mod)}  # the module's own names win
    res = doctest.testmod(mod, extraglobs={"np": np, **missing},
                          optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.failed == 0


def _public_callables():
    for name in blockc.__all__:
        obj = getattr(blockc, name)
        if inspect.isfunction(obj):
            yield name, obj
        elif inspect.isclass(obj) and not issubclass(obj, Exception):
            members = {}  # what the class has, its own and its bases' (GPT: the core and mixins)
            for klass in reversed(obj.__mro__):
                if klass.__module__.split(".")[0] == "blockc":
                    members.update(vars(klass))
            for attr, member in members.items():
                if not attr.startswith("_") and (inspect.isfunction(member)
                                                  or isinstance(member, (classmethod, staticmethod))):
                    yield f"{name}.{attr}", getattr(obj, attr)
    for mod in (blockc.ops, blockc.book):
        for name in mod.__all__:
            obj = getattr(mod, name)
            if inspect.isfunction(obj):
                yield f"{mod.__name__}.{name}", obj


@pytest.mark.parametrize("name, fn", list(_public_callables()), ids=lambda v: v if isinstance(v, str) else "")
def test_numpydoc_sections(name, fn):
    doc = inspect.getdoc(fn) or ""
    params = [p for p in inspect.signature(fn).parameters if p not in ("self", "cls")]
    if params:  # arguments: what they are and what a bad one raises
        assert "Parameters\n----------" in doc, name
        assert "Raises\n------" in doc, name
    assert "Returns\n-------" in doc or "Yields\n------" in doc or \
        inspect.signature(fn).return_annotation in (None, "None"), name
    assert "Examples\n--------" in doc, name


#: the pages whose Python examples run as written: the README's one per part, the guide's
#: and the server page's (moved out of the README, issue 48)
EXAMPLE_PAGES = ("README.md", "docs/guide.md", "docs/serving.md")


def _readme_blocks():
    blocks = []
    for page in EXAMPLE_PAGES:
        with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               *page.split("/")), encoding="utf-8") as f:
            text = f.read()
        blocks += [(page, b) for b in re.findall(r"```python\n(.*?)```", text, flags=re.S)]
    return blocks


@pytest.mark.parametrize("i", range(len(_readme_blocks())),
                         ids=[f"{p}-{n}" for n, (p, _) in enumerate(_readme_blocks())])
def test_readme_examples_run_and_print_what_they_say(i, capsys, tmp_path, monkeypatch):
    # each `print(...)  # value` line in the README's Python examples prints that value
    page, code = _readme_blocks()[i]
    if '"gpt2/"' in code:  # a checkpoint directory the user has: made here, never downloaded
        _user_checkpoint(tmp_path / "gpt2")
        monkeypatch.chdir(tmp_path)
    if '"llama/"' in code:
        _user_checkpoint(tmp_path / "llama", llama=True)
        monkeypatch.chdir(tmp_path)
    if '"model.gguf"' in code:  # a GGUF file the user has, written here by the gguf package
        pytest.importorskip("gguf")
        from support.gguf_files import write_model
        write_model(tmp_path / "model.gguf", "llama", width=256, d_ff=512, kv_heads=2,
                    default_type="Q4_K", types={"attn_v.weight": "Q6_K", "ffn_down.weight": "Q6_K",
                                                "output.weight": "Q6_K"})
        monkeypatch.chdir(tmp_path)
    server = None
    if '"chat/"' in code or "127.0.0.1:8000" in code:  # a chat model (and a server on it)
        pytest.importorskip("jinja2")
        from chat_dirs import chat_model_dir
        chat_model_dir(tmp_path / "chat", "chatml", llama=True)
        monkeypatch.chdir(tmp_path)
    if "127.0.0.1:8000" in code:
        pytest.importorskip("openai")
        pytest.importorskip("uvicorn")
        from serve_proc import Server
        server = Server(tmp_path / "chat", "--api-key", "sekrit", name="chat")
        code = code.replace("127.0.0.1:8000", f"127.0.0.1:{server.port}")
    try:
        exec(compile(code, f"{page} block {i}", "exec"), {})
    finally:
        if server is not None:
            server.stop()
    printed = capsys.readouterr().out.splitlines()
    claims = [line.split("#", 1)[1].strip() for line in code.splitlines()
              if line.startswith("print(") and "#" in line]
    assert len(printed) == len(claims)
    for got, claim in zip(printed, claims):
        assert claim.startswith(got.strip().replace("'", "").replace("[", "").replace("]", "")
                                .replace(",", "")) or got.strip() in claim, (got, claim)


def _user_checkpoint(d, llama=False):
    """A directory as the Hub serves GPT-2 (config.json, model.safetensors, tokenizer.json,
    tokenizer_config.json), from random weights and a byte-level BPE trained on a few lines."""
    tokenizers = pytest.importorskip("tokenizers")
    d.mkdir()
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["The meaning of life is a question.", "Once upon a time, hi."] * 5,
                            trainer)
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text('{"eos_token": "<|endoftext|>"}')
    arch = dict(norm="rms", activation="swiglu", positions="rope", kv_heads=2, d_ff=88,
                qkv_bias=False, out_bias=False, mlp_bias=False, tie_weights=False) if llama else {}
    cfg = blockc.GPTConfig(vocab=tok.get_vocab_size(), context=96, width=32, heads=4, layers=2,
                           **arch)
    blockc.GPT.random(cfg, seed=0).save_pretrained(d)


_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _doc_pages():
    docs = os.path.join(_ROOT, "docs")
    return sorted(os.path.relpath(p, docs).replace(os.sep, "/")
                  for p in glob.glob(os.path.join(docs, "**", "*.md"), recursive=True))


def test_speed_md_is_a_summary_not_a_lab_log():
    # the headline tables only; the rest lives in docs/results/ (issue 48)
    with open(os.path.join(_ROOT, "docs", "speed.md"), encoding="utf-8") as f:
        assert len(f.read().splitlines()) < 400


def _writers():
    """(page, the source that names its sections) for every program writing docs/: each
    bench's ``run_bench(main, PAGE, SECTION)`` call (benches/doc_section.py), and the
    `blockc experiment` command, whose --markdown docs/training.md gets one section per
    experiment (named in blockc/cli/experiment.py)."""
    for path in sorted(glob.glob(os.path.join(_ROOT, "benches", "*.py"))):
        with open(path, encoding="utf-8") as f:
            src = f.read()
        for page, section in re.findall(r'run_bench\(main, "([^"]+)", (.*)\)\s*$', src, re.M):
            yield page, section
    with open(os.path.join(_ROOT, "blockc", "cli", "experiment.py"), encoding="utf-8") as f:
        yield "training.md", f.read()


def _names_section(src, name):
    # the section's name as a string literal, or an f-string that makes it
    # (ab_products.py: f"ab-products-{dtype}", with f"-{tag}")
    if f'"{name}"' in src or f"'{name}'" in src:
        return True
    return any(name.startswith(prefix) for prefix in re.findall(r'f"([\w.-]+-)\{', src))


@pytest.mark.parametrize("page", _doc_pages())
def test_every_docs_section_has_a_writer_naming_it_and_its_page(page):
    # no figure in docs/ is typed by hand: each <!-- X:begin --> ... <!-- X:end --> section
    # is written by a program that names both the page and the section it writes
    with open(os.path.join(_ROOT, "docs", *page.split("/")), encoding="utf-8") as f:
        text = f.read()
    names = re.findall(r"^<!-- ([\w.-]+):begin -->$", text, flags=re.M)
    assert sorted(names) == sorted(re.findall(r"^<!-- ([\w.-]+):end -->$", text, flags=re.M)), page
    writers = list(_writers())
    for name in names:
        assert any(p == page and _names_section(src, name) for p, src in writers), \
            f"docs/{page}: no bench writes section {name!r} into it"
