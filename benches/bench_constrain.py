"""Benchmark: the grammar engines for constrained decoding (structured output, tool
calls), measured side by side on this machine, and the cost of blockc's token mask
against a decode step.

A byte-level BPE vocabulary of realistic size (``--vocab``, 32,000 by default) is
trained here on the Python sources of the standard library (nothing downloaded).
For each engine installed (llguidance, xgrammar, outlines-core):

- correctness: a few JSON Schemas (nested objects, arrays, enums, required,
  additionalProperties false, a pattern, numbers) each with documents that must be
  accepted and documents that must be refused; every document is tokenized and fed
  token by token, checking each token is in the mask the engine computed before it
  and that the valid ones end in an accepting state (the invalid ones must be
  refused somewhere: a token outside the mask, or no accepting end);
- the compile time of a schema with the vocabulary, to the first mask (uncached);
- the mask's cost per step: computing the allowed set and writing it into a
  float32 logits row (disallowed tokens to -inf), along a valid document, for 8
  sequences one after the other (blockc's loop masks each row on its own: batch 8);
  the median step after a warm-up pass (a shared machine's descheduling lands in a
  few steps, which a per-pass mean would spread over all);
- the install footprint of the engine's wheel and of what it requires beyond blockc's
  own requirements.

Then blockc's own path (:class:`blockc.generation.constraints.Constraint`, on the
chosen engine): the mask of 8 rows per step against one decode step at batch 8 of
the Llama-shaped model of bench_llama.py (32,000 words) with ``--layers`` layers;
and the server's path: ``blockc serve``'s per-row sampler
(:class:`blockc.serve.sampling.RowSampler`) choosing the next token of 8 rows with
and without a ``response_format`` json_schema constraint (the mask, the copy of the
logits it writes into, the advance), the difference per step as a fraction of the
same decode step.

    python benches/bench_constrain.py [--vocab 32000] [--rounds 3] [--layers 4] [--docs]

With --docs the output also replaces the "constrain" section of docs/serving.md.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sysconfig
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

import blockc
from bench_decode import Machine
from bench_llama import llama_config
from doc_section import run as run_bench

#: (name, schema, documents accepted, documents refused)
CASES: List[Tuple[str, Dict[str, Any], List[Any], List[str]]] = [
    ("nested object, required, additionalProperties:false",
     {"type": "object", "additionalProperties": False, "required": ["user", "tags"],
      "properties": {
          "user": {"type": "object", "additionalProperties": False, "required": ["name", "age"],
                   "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}},
          "tags": {"type": "array", "items": {"type": "string"}}}},
     [{"user": {"name": "Ada", "age": 36}, "tags": ["x", "y"]},
      {"user": {"name": "", "age": -1}, "tags": []}],
     ['{"user":{"name":"Ada"},"tags":[]}', '{"user":{"name":"Ada","age":1,"x":2},"tags":[]}',
      '{"tags":[],"extra":1}', '{"user":{"name":"A","age":1.5},"tags":[]}']),
    ("enum, array of objects",
     {"type": "object", "additionalProperties": False, "required": ["unit", "points"],
      "properties": {
          "unit": {"enum": ["celsius", "fahrenheit"]},
          "points": {"type": "array", "items": {
              "type": "object", "additionalProperties": False, "required": ["t", "ok"],
              "properties": {"t": {"type": "number"}, "ok": {"type": "boolean"}}}}}},
     [{"unit": "celsius", "points": [{"t": 1.5, "ok": True}, {"t": -3, "ok": False}]}],
     ['{"unit":"kelvin","points":[]}', '{"unit":"celsius","points":[{"t":"1","ok":true}]}',
      '{"unit":"celsius","points":[{"t":1}]}']),
    ("string pattern, integer bounds, minItems",
     {"type": "object", "additionalProperties": False, "required": ["id", "n", "xs"],
      "properties": {"id": {"type": "string", "pattern": "^[a-z]{2}[0-9]{3}$"},
                     "n": {"type": "integer", "minimum": 0, "maximum": 99},
                     "xs": {"type": "array", "items": {"type": "integer"}, "minItems": 1}}},
     [{"id": "ab123", "n": 7, "xs": [1]}],
     ['{"id":"ab12","n":7,"xs":[1]}', '{"id":"ab123","n":100,"xs":[1]}',
      '{"id":"ab123","n":7,"xs":[]}']),
]

#: the document whose tokens the mask is timed along
TIMED = {"user": {"name": "Ada Lovelace", "age": 36},
         "tags": ["analytical engine", "notes", "Bernoulli numbers", "first program"]}

#: the Python packages blockc itself requires (an engine's extra requirements are the rest)
BASE = {"numpy", "cffi", "pycparser"}


def train_vocab(size: int):
    """A byte-level BPE of ``size`` words trained on the standard library's sources."""
    import tokenizers
    root = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(root, "**", "*.py"), recursive=True))
    texts, total = [], 0
    for f in files:
        try:
            t = open(f, encoding="utf-8").read()
        except (OSError, UnicodeDecodeError):
            continue
        texts.append(t)
        total += len(t)
        if total > 12_000_000:
            break
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=size, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return tok


# ---- the engines behind one interface -------------------------------------------------

class Engine:
    """compile(schema) -> a matcher factory; a matcher: mask(row), accept(tok) -> bool,
    accepting()."""
    name = ""
    dist = ""

    def __init__(self, tok, eos: int):
        self.tok, self.eos, self.vocab = tok, eos, tok.get_vocab_size()


class LLGuidance(Engine):
    name, dist = "llguidance", "llguidance"

    def __init__(self, tok, eos):
        super().__init__(tok, eos)
        import llguidance
        import llguidance.numpy as lnp
        self.ll, self.lnp = llguidance, lnp
        self.lltok = llguidance.LLTokenizer(tok.to_str(), n_vocab=self.vocab, eos_token=eos)

    def compile(self, schema):
        g = self.ll.LLMatcher.grammar_from_json_schema(
            json.dumps(schema), defaults={"whitespace_flexible": False})
        ll, lltok, lnp, vocab = self.ll, self.lltok, self.lnp, self.vocab

        class M:
            def __init__(self):
                self.m = ll.LLMatcher(lltok, g)
                self.bits = lnp.allocate_token_bitmask(1, vocab)

            def mask(self, row):  # the bits applied as for xgrammar's (the same NumPy)
                lnp.fill_next_token_bitmask(self.m, self.bits, 0)
                keep = np.unpackbits(self.bits.view(np.uint8), bitorder="little")
                row[:vocab][keep[:vocab] == 0] = -np.inf

            def allowed(self, t):
                lnp.fill_next_token_bitmask(self.m, self.bits, 0)
                return bool((self.bits[0, t >> 5] >> (t & 31)) & 1)

            def accept(self, t):
                return self.m.consume_token(t) and not self.m.is_error()

            def accepting(self):
                return self.m.is_accepting()
        return M


class XGrammar(Engine):
    name, dist = "xgrammar", "xgrammar"

    def __init__(self, tok, eos):
        super().__init__(tok, eos)
        import xgrammar
        import transformers
        self.xgr = xgrammar
        hf = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
        self.info = xgrammar.TokenizerInfo.from_huggingface(hf, vocab_size=self.vocab,
                                                         stop_token_ids=[eos])
        self.compiler = xgrammar.GrammarCompiler(self.info, cache_enabled=False)

    def compile(self, schema):
        xgr, vocab = self.xgr, self.vocab
        c = self.compiler.compile_json_schema(json.dumps(schema), any_whitespace=False,
                                               separators=(",", ":"))

        class M:
            def __init__(self):
                self.m = xgr.GrammarMatcher(c)
                self.bits = xgr.allocate_token_bitmask(1, vocab)

            def _fill(self):
                self.m.fill_next_token_bitmask(self.bits)
                return self.bits.numpy()

            def mask(self, row):
                b = self._fill()
                keep = np.unpackbits(b.view(np.uint8), bitorder="little")
                row[:vocab][keep[:vocab] == 0] = -np.inf

            def allowed(self, t):
                b = self._fill()
                return bool((int(b[0, t >> 5]) >> (t & 31)) & 1)

            def accept(self, t):
                return self.m.accept_token(t)

            def accepting(self):
                return self.m.is_terminated() or self.m.accept_token(self_eos[0])
        self_eos = [self.eos]
        return M


class OutlinesCore(Engine):
    name, dist = "outlines-core", "outlines_core"

    def __init__(self, tok, eos):
        super().__init__(tok, eos)
        import outlines_core
        self.oc = outlines_core
        dec = {c: b for b, c in _byte_level().items()}
        words: Dict[bytes, List[int]] = {}
        for w, i in tok.get_vocab().items():
            if i == eos:
                continue
            words.setdefault(bytes(dec[c] for c in w), []).append(i)
        self.vocabulary = outlines_core.Vocabulary(eos, words)

    def compile(self, schema):
        from outlines_core.json_schema import build_regex_from_schema
        oc, vocab = self.oc, self.vocab
        index = oc.Index(build_regex_from_schema(json.dumps(schema)), self.vocabulary)

        class M:
            def __init__(self):
                self.g = oc.Guide(index)
                self.keep = np.zeros(vocab, bool)

            def mask(self, row):
                self.keep[:] = False
                self.keep[self.g.get_tokens()] = True
                row[~self.keep] = -np.inf

            def allowed(self, t):
                return t in self.g.get_tokens()

            def accept(self, t):
                try:
                    self.g.advance(t)
                    return True
                except Exception:
                    return False

            def accepting(self):
                return self.g.is_finished() or eos_ok(self.g)

        def eos_ok(g):
            return self.eos in g.get_tokens()
        return M


def _byte_level() -> Dict[int, str]:
    """GPT-2's byte -> printable character table (the byte-level BPE's alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


ENGINES = [LLGuidance, XGrammar, OutlinesCore]


def footprint(dist: str) -> Tuple[float, List[str]]:
    """(MB installed of the distribution and of every requirement it pulls in beyond
    blockc's and the already-present scientific stack, their names)."""
    from importlib import metadata
    seen, todo, mb = set(), [dist], 0.0
    while todo:
        d = todo.pop()
        key = d.lower().replace("_", "-")
        if key in seen or key in BASE:
            continue
        seen.add(key)
        try:
            m = metadata.distribution(d)
        except metadata.PackageNotFoundError:
            continue
        mb += sum((f.size or 0) for f in (m.files or [])) / 1e6
        for r in m.requires or []:
            if "extra ==" in r:
                continue
            name = r.split(";")[0].split("[")[0]
            for sep in "<>=!~ (":
                name = name.split(sep)[0]
            todo.append(name.strip())
    return mb, sorted(seen - {dist.lower().replace("_", "-")})


def check(engine: Engine, tok) -> Tuple[int, int, List[str]]:
    """(cases right, cases, what went wrong)."""
    right, total, wrong = 0, 0, []
    for name, schema, good, bad in CASES:
        try:
            M = engine.compile(schema)
        except Exception as e:  # an engine that cannot compile a schema fails its cases
            n = len(good) + len(bad)
            total += n
            wrong.append(f"{name}: does not compile ({type(e).__name__})")
            continue
        for doc in [json.dumps(d, separators=(",", ":")) for d in good] + bad:
            total += 1
            want = doc not in bad
            m, ok = M(), True
            for t in tok.encode(doc).ids:
                if not m.allowed(t) or not m.accept(t):
                    ok = False
                    break
            ok = ok and m.accepting()
            if ok == want:
                right += 1
            else:
                wrong.append(f"{name}: {'refused' if want else 'accepted'} {doc}")
    return right, total, wrong


def mask_cost(engine: Engine, tok, rounds: int, batch: int = 8) -> Tuple[float, float]:
    """(seconds to compile and mask the first token, median seconds per step of masking
    ``batch`` rows after a warm-up pass)."""
    row = np.zeros((batch, engine.vocab), np.float32)
    t0 = time.perf_counter()
    M = engine.compile(CASES[0][1])
    M().mask(row[0])
    compile_s = time.perf_counter() - t0
    ids = tok.encode(json.dumps(TIMED, separators=(",", ":"))).ids
    per = []
    for r in range(rounds + 1):
        ms = [M() for _ in range(batch)]
        for t in ids:
            t0 = time.perf_counter()
            for b, m in enumerate(ms):
                m.mask(row[b])
                m.accept(t)
            if r:  # the first pass warms up (an engine's lazily built tables)
                per.append(time.perf_counter() - t0)
    return compile_s, statistics.median(per)


def decode_step(layers: int, rounds: int, batch: int = 8) -> float:
    """Median seconds of one decode step at ``batch`` of the Llama-shaped model."""
    m = blockc.GPT.random(llama_config(layers), seed=0)
    prompt = np.arange(1, 1 + 16 * batch).reshape(batch, 16) % 31000
    times = []
    for _ in range(rounds):
        cache = m.new_cache(batch, 16 + 9)
        m.run(prompt, cache, last_only=True)
        tok = prompt[:, -1:]
        for _ in range(8):
            t0 = time.perf_counter()
            m.run(tok, cache, last_only=True)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def blockc_mask(tok, eos: int, rounds: int, batch: int = 8) -> float:
    """Median seconds per step of blockc's Constraint masking ``batch`` logits rows."""
    from blockc.generation.constraints import Constraint
    from blockc.text import Tokenizer
    c = Constraint.json_schema(CASES[0][1], Tokenizer(tok, eos_token_id=eos))
    ids = tok.encode(json.dumps(TIMED, separators=(",", ":"))).ids
    rows = np.zeros((batch, tok.get_vocab_size()), np.float32)
    per = []
    for r in range(rounds + 1):
        states = [c.fresh() for _ in range(batch)]
        for t in ids:
            t0 = time.perf_counter()
            for b, s in enumerate(states):
                s.mask(rows[b])
                s.advance(t)
            if r:
                per.append(time.perf_counter() - t0)
    return statistics.median(per)


def serve_mask(tok, eos: int, rounds: int, batch: int = 8) -> Tuple[float, float, float]:
    """(median seconds per step of blockc serve's RowSampler choosing the next token of
    ``batch`` rows unconstrained, with a json_schema constraint each, and the median of
    the two's difference step by step), along the timed document (its tokens made
    certain by the logits, so every pass walks it). The two are timed in turns at each
    step, so a shared machine's load lands on both alike and the paired difference
    is what the constraint costs."""
    from blockc.generation.constraints import Constraint
    from blockc.serve.sampling import RowSampler, sampling_from_request
    from blockc.serve.types import SamplingRequest
    from blockc.text import Tokenizer
    vocab = tok.get_vocab_size()
    c = Constraint.json_schema(CASES[0][1], Tokenizer(tok, eos_token_id=eos))
    ids = tok.encode(json.dumps(TIMED, separators=(",", ":"))).ids
    samp = sampling_from_request(SamplingRequest(model="m"), vocab)
    base = np.random.default_rng(0).standard_normal(vocab).astype(np.float32)
    rows = []
    for t in ids:
        z = base.copy()
        z[t] += 60.0  # the document's token, certain
        rows.append(z)
    seen = np.zeros(1, np.int64)
    plain, masked, diff = [], [], []
    for r in range(rounds + 1):
        free = [RowSampler(samp, b, vocab) for b in range(batch)]
        held = [RowSampler(samp, b, vocab, c.fresh(), frozenset((eos,))) for b in range(batch)]
        for z in rows:
            t0 = time.perf_counter()
            for s in free:
                s(z, seen)
            t1 = time.perf_counter()
            for s in held:
                s(z, seen)
            t2 = time.perf_counter()
            if r:
                plain.append(t1 - t0)
                masked.append(t2 - t1)
                diff.append((t2 - t1) - (t1 - t0))
    return statistics.median(plain), statistics.median(masked), statistics.median(diff)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args(argv)
    machine = Machine()
    blockc.set_num_threads(min(2, os.cpu_count() or 1))
    print(machine.header())
    t0 = time.perf_counter()
    tok = train_vocab(args.vocab)
    eos = tok.token_to_id("<|endoftext|>")
    print(f"byte-level BPE of {tok.get_vocab_size()} words trained on the standard library "
          f"in {time.perf_counter() - t0:.1f} s")
    print(f"\n{len(CASES)} JSON Schemas, {sum(len(c[2]) + len(c[3]) for c in CASES)} documents; "
          f"mask = allowed set + -inf into a float32 row, 8 rows a step along a "
          f"{len(tok.encode(json.dumps(TIMED, separators=(',', ':'))).ids)}-token document, "
          f"the median step of {args.rounds} passes after a warm-up pass (steps, not passes: "
          f"a shared machine's descheduling lands in a few steps):\n")
    print("| engine | version | cases right | compile + first mask s | mask ms / step (8 rows) "
          "| installed MB (with what it pulls in) | license |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    from importlib import metadata
    notes = []
    for E in ENGINES:
        try:
            e = E(tok, eos)
        except ImportError as err:
            print(f"| {E.name} | not installed ({err}) | | | | | |")
            continue
        version = metadata.version(E.dist)
        m = metadata.metadata(E.dist)
        lic = m.get("License-Expression") or m.get("License") or "?"
        right, total, wrong = check(e, tok)
        comp, per = mask_cost(e, tok, args.rounds)
        mb, extra = footprint(E.dist)
        big = sorted(set(extra) & {"torch", "transformers", "triton", "pydantic"})
        pulled = (f" ({len(extra)} requirements: {', '.join(big) or ', '.join(extra[:4])}, ...)"
                  if extra else "")
        print(f"| {E.name} | {version} | {right}/{total} | {comp:.2f} | {per * 1e3:.2f} "
              f"| {mb:.0f}{pulled} | {lic} |")
        notes += [f"{E.name}: {w}" for w in wrong]
    for n in notes:
        print(f"- {n}")
    step = decode_step(args.layers, args.rounds)
    ours = blockc_mask(tok, eos, args.rounds)
    print(f"\nblockc's Constraint (llguidance) masking 8 rows: {ours * 1e3:.2f} ms a step; "
          f"one decode step at batch 8 of the Llama-shaped model ({args.layers} layers, width "
          f"768, 32,000 words): {step * 1e3:.1f} ms; the mask is {100 * ours / step:.1f}% of it")
    plain, masked, extra = serve_mask(tok, eos, args.rounds)
    print(f"blockc serve's sampler (RowSampler), 8 rows a step, timed in turns: "
          f"{plain * 1e3:.2f} ms unconstrained, {masked * 1e3:.2f} ms with a json_schema "
          f"constraint each; the constraint adds {extra * 1e3:.2f} ms a step (the median "
          f"paired difference), {100 * extra / step:.1f}% of the decode step")
    print(machine.footer())
    return 0


if __name__ == "__main__":
    run_bench(main, "serving.md", "constrain")
