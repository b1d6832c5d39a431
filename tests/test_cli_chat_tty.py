"""``blockc chat`` driven as a person drives it (issue 53): under a pseudo-terminal
(pexpect), its output rendered by a terminal emulator (pyte), each screen checked: the
banner, arrow-key history, a multi-line paste as one message, /help, Ctrl-C at the prompt
and mid-answer, a full context. Needs prompt_toolkit, pexpect and pyte (the 'test' extra);
POSIX only (a pseudo-terminal)."""
import json
import os
import sys
import time

import pytest

import blockc
from blockc.generation.chat import Conversation
from blockc.generation.ends import end_ids

pexpect = pytest.importorskip("pexpect")
pyte = pytest.importorskip("pyte")
pytest.importorskip("prompt_toolkit")
pytest.importorskip("jinja2")
pytest.importorskip("tokenizers")
if not hasattr(pexpect, "spawn"):  # Windows: no pseudo-terminal
    pytest.skip("needs a POSIX pseudo-terminal", allow_module_level=True)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLS, ROWS = 120, 60
HANG = 120  # seconds before a screen that never comes fails the test (not a timing)


class Terminal:
    """``blockc chat`` in a pseudo-terminal, its screen as pyte renders it."""

    def __init__(self, *args):
        self.screen = pyte.Screen(COLS, ROWS)
        self.stream = pyte.ByteStream(self.screen)
        self.raw = b""
        env = dict(os.environ, TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1", COLUMNS=str(COLS), LINES=str(ROWS),
                   PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.child = pexpect.spawn(sys.executable, ["-m", "blockc", "chat", *args], cwd=ROOT,
                                   env=env, dimensions=(ROWS, COLS))

    def lines(self):
        return [line.rstrip() for line in self.screen.display]

    def text(self):
        return "\n".join(self.lines()).rstrip()

    def wait(self, predicate, what):
        """Read the child's output until ``predicate(screen lines)``."""
        end = time.monotonic() + HANG
        while not predicate(self.lines()):
            if time.monotonic() > end:
                raise AssertionError(f"no {what} on the screen:\n{self.text()}")
            try:
                data = self.child.read_nonblocking(65536, timeout=0.2)
                self.raw += data
                self.stream.feed(data)
            except pexpect.TIMEOUT:
                pass
            except pexpect.EOF:
                if not predicate(self.lines()):
                    raise AssertionError(f"blockc chat ended before {what}:\n{self.text()}")
        return self.lines()

    def wait_ready(self):
        """Wait for the banner and the first prompt."""
        self.wait_for("/help lists the commands")
        return self.wait(lambda ls: ls[self.screen.cursor.y] == ">", "the first prompt")

    def wait_for(self, text):
        return self.wait(lambda ls: any(text in line for line in ls), repr(text))

    def prompt_line(self):
        """The last non-empty line (where the cursor is)."""
        return self.lines()[self.screen.cursor.y]

    def wait_prompt(self, n):
        """Wait for the n-th answer's statistics and the prompt after them."""
        return self.wait(lambda ls: sum("tokens/s" in line for line in ls) >= n
                         and ls[self.screen.cursor.y] == ">", f"answer {n} and a prompt")

    def close(self):
        self.child.close(force=True)


def _printed(text):
    """What a terminal shows of ``text`` (one line): its printable characters."""
    return "".join(c for c in text if c.isprintable()).rstrip()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from chat_dirs import chat_model_dir
    d = tmp_path_factory.mktemp("chat_tty")
    m, _ = chat_model_dir(d, "chatml", context=4096, llama=True, seed=5)
    return d, m, blockc.Tokenizer.from_pretrained(d)


@pytest.fixture(scope="module")
def endless(tmp_path_factory):
    """A chat model whose end token (not the template's <|im_end|>) its greedy answer to
    "Hello" never makes: an answer runs until Ctrl-C or the end of its context."""
    from chat_dirs import chat_model_dir
    d = tmp_path_factory.mktemp("chat_endless")
    m, raw = chat_model_dir(d, "chatml", context=16384, llama=True, seed=5)
    tok = blockc.Tokenizer.from_pretrained(d)
    ids = tok.apply_chat_template([{"role": "user", "content": "Hello"}]).ids
    made = set(m.generate(ids[None], 1000, eos_token_id=())[0, len(ids):].tolist())
    end = min(set(range(3, m.config.vocab)) - made)  # a token the greedy answer never makes
    for name, key, value in (("config.json", "eos_token_id", end),
                             ("tokenizer_config.json", "eos_token", raw.id_to_token(end))):
        c = json.loads((d / name).read_text())
        c[key] = value
        (d / name).write_text(json.dumps(c))
    return d


def _answer(m, tok, msgs, n):
    ids = tok.apply_chat_template(msgs).ids
    ends = end_ids(m.generation_config, tok, m.config.vocab)
    out = [int(t) for t in m.generate(ids[None], n, eos_token_id=ends)[0, len(ids):]]
    cut = next((i for i, t in enumerate(out) if t in ends), len(out))
    return tok.decode(out[:cut], skip_special_tokens=True)


def test_history_paste_help_and_ctrl_c_at_the_prompt(model, tmp_path):
    d, m, tok = model
    t = Terminal("--model", str(d), "--temperature", "0", "-n", "6", "--threads", "1")
    try:
        t.wait_ready()
        banner = t.text()
        calls = []  # the loader's progress: a tensor at a time, drawn as a bar, then erased
        blockc.GPT.from_pretrained(d, progress=lambda i, n: calls.append(n))
        total = calls[-1]
        assert f"loading [{'#' * 24}] {total}/{total}".encode() in t.raw
        assert f"model {d}" in banner and "family llama, format float32, 2 layers" in banner
        assert "context 4096 tokens (the model's; KV cache " in banner and "), 1 threads" in banner
        assert ("sampling: greedy, max_new_tokens 6 (from llama.cpp's defaults (the model states "
                "none); flags: --temperature)") in banner
        t.child.send("Hello\r")
        ls = t.wait_prompt(1)
        h = [{"role": "user", "content": "Hello"}]
        a1 = _answer(m, tok, h, 6)
        i = ls.index("> Hello")
        assert ls[i + 1] == _printed(a1)
        used = len(tok.apply_chat_template(h).ids) + 6
        assert ls[i + 2].startswith("[6 tokens, ") and ls[i + 2].endswith(f"context {used}/4096]")
        # the up arrow brings the last message back; Ctrl-C there leaves a fresh prompt
        t.child.send("\x1b[A")
        t.wait(lambda ls: ls[t.screen.cursor.y] == "> Hello", "the recalled message")
        t.child.send("\x03")
        t.wait(lambda ls: ls[t.screen.cursor.y] == ">", "a fresh prompt after Ctrl-C")
        # a paste of two lines (bracketed, as a terminal sends it) is one message
        t.child.send("\x1b[200~first line\nsecond line\x1b[201~")
        t.wait_for("... second line")
        t.child.send("\r")
        ls = t.wait_prompt(2)
        h += [{"role": "assistant", "content": a1},
              {"role": "user", "content": "first line\nsecond line"}]
        a2 = _answer(m, tok, h, 6)
        j = ls.index("... second line")
        assert ls[j - 1] == "> first line" and ls[j + 1] == _printed(a2)
        # /help is a command: its list on the screen, nothing sent to the model
        t.child.send("/help\r")
        ls = t.wait_for("/load PATH")
        assert sum("tokens/s" in line for line in ls) == 2
        path = tmp_path / "c.json"
        t.child.send(f"/save {path}\r")
        t.wait_for("(saved 4 messages")
        assert json.loads(path.read_text())["messages"] == h + [
            {"role": "assistant", "content": a2}]
        t.child.sendeof()
        t.child.expect(pexpect.EOF, timeout=HANG)
    finally:
        t.close()


def test_ctrl_c_stops_an_answer_and_a_full_context_drops_old_turns(model, endless):
    d, m, tok = model
    # no length limit: the answer runs until Ctrl-C (the model does not end its turn)
    t = Terminal("--model", str(endless), "--temperature", "0", "--threads", "1")
    try:
        t.wait_ready()
        t.child.send("Hello\r")
        t.wait(lambda ls: len([x for x in ls if x]) > ls.index("> Hello") + 1
               if "> Hello" in ls else False, "the answer starting")
        t.child.send("\x03")
        ls = t.wait_prompt(1)
        k = next(i for i, x in enumerate(ls) if "tokens/s" in x)
        n = int(ls[k][1:].split()[0])
        # (the random model's answer holds control characters that move the cursor: the
        # marker is checked in what was written)
        assert b" [stopped]\r\n" in t.raw and 0 < n < 16384 - 19
        t.child.sendeof()
        t.child.expect(pexpect.EOF, timeout=HANG)
    finally:
        t.close()
    ctx, n = 120, 8
    t = Terminal("--model", str(d), "--temperature", "0", "-n", str(n), "--ctx-size", str(ctx))
    c, notices = Conversation(), []
    try:
        t.wait_ready()
        for k, q in enumerate(("Hello", "And you?", "Why?"), 1):
            t.child.send(q + "\r")
            ls = t.wait_prompt(k)
            c.add("user", q)
            dropped = c.fit(lambda msgs: len(tok.apply_chat_template(msgs).ids), ctx - n)
            if dropped:
                notices.append(f"(the context of {ctx} tokens is full: the {dropped} oldest "
                               "messages dropped)")
                assert notices[-1] in ls
            c.add("assistant", _answer(m, tok, c.messages, n))
            assert ls[-1 - ls[::-1].index(">") - 2] == _printed(c.messages[-1]["content"])
        assert notices, "the conversation must overflow the context"
    finally:
        t.close()
