"""The server's incremental detokenisation (issue 52): each token decodes a small window
and appends what it adds, instead of the whole answer again. It releases the same pieces
as the whole decode did (the former TextTail, kept here as the reference) on random
answers of two tokenizers: a byte-level BPE and a SentencePiece-shaped one with byte
fallback (``<0xE2>`` tokens, a leading-space strip, special tokens skipped), with stop
strings; and through the HTTP API a streamed answer made of byte-fallback tokens (valid
and broken UTF-8) is the unstreamed reply's text."""
import json

import numpy as np
import pytest

import blockc
from chat_dirs import chat_dir
from serve_thread import ThreadServer, stream_completion

httpx = pytest.importorskip("httpx")
tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
pytest.importorskip("jinja2")

from blockc.serve import Settings  # noqa: E402
from blockc.serve.engine import TextTail  # noqa: E402


class WholeTextTail:
    """The former TextTail: the whole text decoded again for every token."""

    def __init__(self, decode, stops):
        self._decode, self.stops = decode, list(stops)
        self._longest = max((len(s) for s in self.stops), default=0)
        self.ids, self.text, self.sent, self.stopped = [], "", 0, False

    def _cut(self, text):
        start = max(0, self.sent - self._longest)
        hits = [i for i in (text.find(s, start) for s in self.stops) if i >= 0]
        if not hits:
            return False
        self.text, self.stopped = text[:max(min(hits), self.sent)], True
        return True

    def push(self, token):
        self.ids.append(token)
        text = self._decode(self.ids)
        complete = text.rstrip("\ufffd")
        if self.stops and self._cut(complete):
            piece, self.sent = self.text[self.sent:], len(self.text)
            return piece, True
        if len(complete) < len(text):
            return "", False
        self.text = text
        end = len(text)
        if self.stops:
            hold = 0
            for s in self.stops:
                for k in range(min(len(s) - 1, len(text)), hold, -1):
                    if text.endswith(s[:k]):
                        hold = k
                        break
            end = max(self.sent, len(text) - hold)
        piece, self.sent = text[self.sent:end], end
        return piece, False

    def flush(self):
        if not self.stopped and self.ids:
            text = self._decode(self.ids)
            if not (self.stops and self._cut(text)):
                self.text = text
        piece, self.sent = self.text[self.sent:], len(self.text)
        return piece


LINES = ["the block reads the stream", "a residual stream flows through the block",
         "hello there, how are you today?", "what is the capital of france"]


def fallback_dir(d):
    """A SentencePiece-shaped tokenizer (Llama's decoders): <unk> <s> </s>, the 256 byte
    tokens, the letters of LINES and a few merges; any other character falls back to its
    UTF-8 bytes."""
    d.mkdir(parents=True, exist_ok=True)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for c in sorted(set("".join(LINES).replace(" ", "\u2581")) | {"\u2581"}):
        vocab.setdefault(c, len(vocab))
    merges = [("\u2581", "t"), ("h", "e"), ("\u2581t", "he"), ("\u2581", "s"), ("r", "e")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    model = tokenizers.models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True,
                                  fuse_unk=True)
    tok = tokenizers.Tokenizer(model)
    tok.add_special_tokens([tokenizers.AddedToken(t, special=True) for t in ("<unk>", "<s>", "</s>")])
    N = tokenizers.normalizers
    tok.normalizer = N.Sequence([N.Prepend("\u2581"), N.Replace(" ", "\u2581")])
    D = tokenizers.decoders
    tok.decoder = D.Sequence([D.Replace("\u2581", " "), D.ByteFallback(), D.Fuse(),
                              D.Strip(" ", 1, 0)])
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "model_max_length": 4096}))
    return tok


@pytest.fixture(scope="module")
def fallback(tmp_path_factory):
    d = tmp_path_factory.mktemp("fallback")
    raw = fallback_dir(d)
    cfg = blockc.GPTConfig(vocab=raw.get_vocab_size(), context=256, width=32, heads=4, layers=2)
    blockc.GPT.random(cfg, seed=3).save_pretrained(d)
    c = json.loads((d / "config.json").read_text())
    c.update(eos_token_id=2, bos_token_id=1)
    (d / "config.json").write_text(json.dumps(c))
    return d, blockc.Tokenizer.from_pretrained(d)


@pytest.fixture(scope="module")
def bytelevel(tmp_path_factory):
    d = tmp_path_factory.mktemp("bytelevel")
    chat_dir(d, "chatml")
    return blockc.Tokenizer.from_pretrained(d)


def _answers(tok, seed, n=40):
    """Random answers leaning on the tokens that are parts of characters, the special
    ones and spaces."""
    rng = np.random.default_rng(seed)
    v = tok.vocab_size
    parts = [i for i in range(v) if "\ufffd" in tok.decode([i]) or tok.decode([i]) == ""]
    words = [tok.encode(w).tolist() for w in ("é", "€", "🙂", " the", " a b", "ab", "\u00e9t\u00e9")]
    specials = [i for i in range(min(v, 300)) if tok.decode([i], skip_special_tokens=True) == ""
                and tok.decode([i])]
    assert specials
    # the special tokens (skipped) between words: a context of them alone decodes to ""
    yield words[4] + specials[:2] + words[3] + specials[-1:] + words[0] + words[3]
    for _ in range(n):
        ids = []
        while len(ids) < int(rng.integers(1, 60)):
            r = rng.random()
            if r < 0.3 and parts:
                ids.append(int(rng.choice(parts)))
            elif r < 0.6:
                ids += words[int(rng.integers(len(words)))]
            else:
                ids.append(int(rng.integers(v)))
        yield ids


@pytest.mark.parametrize("which", ["fallback", "bytelevel"])
@pytest.mark.parametrize("skip", [True, False])
def test_incremental_pieces_are_the_whole_decodes(request, which, skip):
    tok = request.getfixturevalue(which)
    tok = tok[1] if isinstance(tok, tuple) else tok

    def decode(ids):
        return tok.decode(ids, skip_special_tokens=skip)
    for k, ids in enumerate(_answers(tok, seed=len(which) + skip)):
        stops = [[], ["é"], ["a b", "\u20ac"], ["🙂", "the"]][k % 4]
        new, ref = TextTail(decode, stops), WholeTextTail(decode, stops)
        for t in ids:
            got, want = new.push(t), ref.push(t)
            assert got == want, (ids, stops)
            if got[1]:
                break
        assert (new.flush(), new.stopped, new.text) == (ref.flush(), ref.stopped, ref.text)
        if not stops:  # all of it: the text of the whole answer
            assert new.text == decode(ids)


def test_a_window_decoded_fewer_times_than_the_answer_grows(bytelevel):
    # what it is for: the ids decoded per token stay a few, not the answer's length
    seen = []

    def decode(ids):
        seen.append(len(ids))
        return bytelevel.decode(ids)
    t = TextTail(decode, [])
    for i in bytelevel.encode("the block reads the stream " * 20).tolist():
        t.push(i)
    assert len(t.ids) > 100 and max(seen[-50:]) <= 4
    assert t.flush() == "" and t.text == bytelevel.decode(t.ids)


@pytest.mark.slow
def test_streamed_byte_fallback_answer_is_the_unstreamed_text(fallback):
    d, tok = fallback
    bytes_ = {f"<0x{b:02X}>" for b in b"\xc3\xa9\xe2\x82\xac\xf0\x9f\x99\x82"}
    bias = {str(tok.token_to_id(b)): 6 for b in bytes_}
    bias.update({str(tok.token_to_id(c)): 3 for c in ("\u2581", "a", "\u2581the")})
    s = ThreadServer(Settings(model=str(d), model_name="m", parallel=2))
    try:
        for seed in (1, 2, 3):
            body = {"model": "m", "prompt": "the block", "max_tokens": 60, "temperature": 1.0,
                    "seed": seed, "ignore_eos": True, "logit_bias": bias}
            r = s.post("/v1/completions", body)
            assert r.status_code == 200, r.text
            whole = r.json()["choices"][0]["text"]
            assert any(ord(c) > 127 for c in whole)  # multi-byte characters were made
            text, reason, error = stream_completion(s.url, body)
            assert (text, reason, error) == (whole, "length", None)
            body["stop"] = ["\u20ac"]
            cut = s.post("/v1/completions", body).json()["choices"][0]["text"]
            assert stream_completion(s.url, body)[0] == cut and "\u20ac" not in cut
    finally:
        s.stop()
