"""Benchmark: blockc serve under concurrent streaming clients, and prefix reuse.

Random-weight models of two shapes, saved as checkpoint directories with a tokenizer
trained on a few lines and a ChatML template (tests/support/chat_dirs.py):

  smollm2-135m  Llama: V=49152 D=576 30 layers, 9 heads / 3 K/V heads, SwiGLU 1536, tied
  gpt2-small    V=50257 D=768 12 layers, 12 heads, GELU 3072, learned positions, tied

  throughput  aggregate completion tokens/s with 1, 4 and 8 concurrent clients, each
              sending --requests completions (``POST /v1/completions``, the same prompts)
              of --tokens tokens (ignore_eos, so every request makes
              exactly that many: counted from ``usage``), blockc's server started with
              --parallel 8 on the model's GGUF file (F32 and Q8_0), llama-cpp-python's
              server on the same file, --rounds-throughput rounds alternating between
              the two; the best round, the ratio to one client's, and blockc's to the peer's
  ttft        time to the first token of a chat's second turn (the first turn's
              --system-tokens system prompt, question and answer, then a new question),
              with prefix reuse (the first turn's keys and values kept in the cache) and
              without (--no-prefix-reuse), turns alternating between the two servers;
              the median of --rounds, and the same prompt cold (a fresh system prompt)

The peer is llama-cpp-python's server (``python -m llama_cpp.server``, run by the interpreter
--llama-python, default this one, so it can live in a venv of its own) on the file blockc's
``GPT.save_gguf`` wrote, with the checkpoint's tokenizer in it (padded with added tokens to
the model's vocabulary: llama.cpp wants a token per embedding row). llama.cpp runs with its
default repacked/AMX weight buffers wherever a probe in a subprocess
(benches/llama_peer.py, with the peer's interpreter) finds they run the file on this machine,
and without them where they crash (as on the AMX KVM guest the bench was written on):
llama-cpp-python's server has no setting for ``use_extra_bufts``, so the bench then starts it
through a two-line launcher that turns them off in ``llama_model_default_params`` before
running ``llama_cpp.server``'s own main. Each table's header says which ran. Without
llama_cpp.server importable by that interpreter the run says why and has no peer column.
The completions are not streamed: llama-cpp-python's stream carries no ``usage``, and counting
chunks would not count tokens (it holds back bytes of an incomplete UTF-8 character).
Every connection goes to 127.0.0.1. The load average and CPU steal over the run are
printed (the machine is shared: rerun late for the tables).

    python benches/bench_serve.py                      # both shapes (a few minutes)
    python benches/bench_serve.py --shapes gpt2-small --requests 1 --tokens 16   # a look
    python benches/bench_serve.py --llama-python /work/venv-llama/bin/python    # the peer's venv

With --docs the output also replaces the "serve" section of docs/serving.md.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import support_path  # noqa: F401  (tests/support on the path)

import blockc
from doc_section import run as run_bench  # noqa: E402
from machine import cpu_name, cpu_times, steal_share  # noqa: E402
from llama_peer import LAUNCH, extra_bufts_work  # noqa: E402  (llama-cpp-python's server)

SHAPES = {
    "smollm2-135m": dict(vocab=49152, context=2048, width=576, heads=9, layers=30, kv_heads=3,
                         d_ff=1536, norm="rms", activation="swiglu", positions="rope",
                         rope_theta=100000.0, qkv_bias=False, out_bias=False, mlp_bias=False,
                         tie_weights=True, eps=1e-5),
    "gpt2-small": dict(vocab=50257, context=1024, width=768, heads=12, layers=12),
}


def make_dir(root: Path, shape: str) -> Path:
    from chat_dirs import chat_dir
    d = root / shape
    chat_dir(d, "chatml")
    cfg = blockc.GPTConfig(**SHAPES[shape])
    # the tokenizer trained on a few lines has a few hundred tokens; llama.cpp wants one per
    # row of the embedding, so added special tokens <pad_N> (never in a prompt) fill it up
    # to V (special: the GGUF's CONTROL tokens; blockc reads 50,000 USER_DEFINED ones slowly)
    import tokenizers
    tok = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))
    n = tok.get_vocab_size(with_added_tokens=True)
    tok.add_tokens([tokenizers.AddedToken(f"<pad_{i}>", special=True, normalized=False)
                    for i in range(n, cfg.vocab)])
    assert tok.get_vocab_size(with_added_tokens=True) == cfg.vocab
    tok.save(str(d / "tokenizer.json"))
    blockc.GPT.random(cfg, seed=0).save_pretrained(d)
    return d


def make_gguf(d: Path, dtype: str) -> Path:
    """The checkpoint `d` as a GGUF file of `dtype` matrices, its tokenizer inside."""
    f = d.parent / f"{d.name}-{dtype}.gguf"
    blockc.GPT.from_pretrained(d).save_gguf(f, dtype, tokenizer=d)
    return f




def peer_version(python: str) -> Tuple[Optional[str], str]:
    """(llama-cpp-python's version, "") if `python` imports its server, else (None, why)."""
    try:
        r = subprocess.run([python, "-c", "import llama_cpp, llama_cpp.server.app; "
                            "print(llama_cpp.__version__)"], capture_output=True, text=True,
                           timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{python} does not run ({e})"
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"{python} cannot import llama_cpp.server ({last})"
    return r.stdout.strip(), ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """llama-cpp-python's server on `gguf` in a subprocess on a free port of 127.0.0.1."""

    def __init__(self, python: str, gguf: Path, threads: int, ctx: int, name: str,
                 buffers: bool = False):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = gguf.parent / f"llama-server-{time.monotonic_ns()}.log"
        self.f = open(self.log, "w")
        self.p = subprocess.Popen(
            [python, *(["-m", "llama_cpp.server"] if buffers else ["-c", LAUNCH]),
             "--model", str(gguf), "--model_alias", name,
             "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(ctx),
             "--n_threads", str(threads), "--n_threads_batch", str(threads),
             "--logits_all", "False", "--verbose", "False"],
            stdout=self.f, stderr=subprocess.STDOUT)
        end = time.monotonic() + 120
        while time.monotonic() < end:
            if self.p.poll() is not None:
                self.f.close()
                raise RuntimeError(f"llama_cpp.server exited: {open(self.log).read()[-2000:]}")
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=5) as r:
                    if name in [m["id"] for m in json.load(r)["data"]]:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("llama_cpp.server did not answer /v1/models in 120 s")

    def client(self):
        import openai
        return openai.OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0,
                             timeout=300)

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(30)
        self.f.close()


def throughput(server, clients: int, requests: int, tokens: int) -> float:
    """Aggregate completion tokens/s of `clients` clients, each sending `requests`
    completions of exactly `tokens` tokens (counted from ``usage``)."""
    from serve_proc import NAME
    done: List[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients)

    def client(i):
        c = server.client()
        barrier.wait()
        for r in range(requests):
            out = c.completions.create(
                model=NAME, prompt=f"Question {i}.{r}: how are you?", max_tokens=tokens,
                temperature=0.8, seed=i * 100 + r,
                extra_body={"ignore_eos": True})
            with lock:
                done.append(out.usage.completion_tokens)
    ts = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    assert sum(done) == clients * requests * tokens, done
    return sum(done) / dt


def first_token_time(server, messages, tokens: int = 4):
    """Seconds to the first generated token of a streamed chat (logprobs on: every token,
    even one whose text is empty, comes as a chunk), and the answer's text."""
    from serve_proc import NAME
    c = server.client()
    t0 = time.perf_counter()
    first, text = None, []
    for ch in c.chat.completions.create(model=NAME, stream=True, max_tokens=tokens,
                                        temperature=0, messages=messages, logprobs=True,
                                        extra_body={"ignore_eos": True}):
        if ch.choices and ch.choices[0].logprobs is not None and first is None:
            first = time.perf_counter() - t0
        if ch.choices:
            text.append(ch.choices[0].delta.content or "")
    return first, "".join(text)


def ttft(servers: Dict[str, object], system_tokens: int, rounds: int) -> Dict[str, float]:
    words = ("the block reads the stream and writes a small update back into it "
             "a residual stream flows from the embedding to the output ").split()
    out: Dict[str, List[float]] = {"reuse": [], "no reuse": [], "cold": []}
    for r in range(rounds):
        system = " ".join(words[(r + i) % len(words)] for i in range(system_tokens // 2))
        sys_msg = [{"role": "system", "content": f"Round {r}. {system}"},
                   {"role": "user", "content": "What is the capital of France?"}]
        for mode, s in servers.items():
            _, answer = first_token_time(s, sys_msg, 16)
            turn2 = sys_msg + [{"role": "assistant", "content": answer},
                               {"role": "user", "content": "And then?"}]
            t, _ = first_token_time(s, turn2)
            out[mode].append(t)
        # the same second-turn prompt, cold: a system prompt no slot holds
        cold = [{"role": "system", "content": f"Cold {r}. {system}"}] + turn2[1:]
        t, _ = first_token_time(servers["no reuse"], cold)
        out["cold"].append(t)
    return {k: statistics.median(v) for k, v in out.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="smollm2-135m,gpt2-small")
    ap.add_argument("--dtypes", default="F32,Q8_0", help="GGUF weight types for throughput")
    ap.add_argument("--clients", default="1,4,8")
    ap.add_argument("--requests", type=int, default=2, help="requests per client")
    ap.add_argument("--tokens", type=int, default=32, help="tokens per request")
    ap.add_argument("--rounds-throughput", type=int, default=2,
                    help="throughput rounds, alternating blockc and the peer")
    ap.add_argument("--system-tokens", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama-python", default=sys.executable,
                    help="the interpreter that runs llama_cpp.server (default: this one)")
    args = ap.parse_args(argv)
    from serve_proc import NAME, Server
    version, why = peer_version(args.llama_python)
    t0 = cpu_times()
    load0 = os.getloadavg()[0]
    print(f"CPU: {cpu_name()}, {os.cpu_count()} logical CPUs; blockc threads {args.threads}; "
          f"load average {load0:.2f} at the start")
    if version is None:
        print(f"{why}: no llama.cpp server beside it (pip install 'llama-cpp-python[server]')")
    else:
        print(f"peer: llama-cpp-python {version}'s server (python -m llama_cpp.server), "
              f"n_threads {args.threads}, its repacked/AMX weight buffers where a probe "
              "finds they run each file (a 'llama.cpp buffers:' line says), logits_all off; "
              "it runs one request at a time")
    clients = [int(x) for x in args.clients.split(",")]
    ctx = 1024
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.shapes.split(","):
            d = make_dir(Path(tmp), shape)
            common = ["--threads", str(args.threads), "--ctx-size", str(ctx)]
            for dtype in args.dtypes.split(","):
                f = make_gguf(d, dtype)
                runners = {"blockc": lambda: Server(f, "--parallel", "8", *common, name=NAME)}
                if version is not None:
                    on = extra_bufts_work(str(f), f"{shape} {dtype}",
                                          python=args.llama_python)[0]
                    runners["llama.cpp"] = lambda: LlamaServer(args.llama_python, f,
                                                               args.threads, ctx, NAME, on)
                servers: Dict[str, object] = {}
                try:
                    for k, start in runners.items():
                        servers[k] = start()
                        # warm up: the first requests of a fresh server run several times
                        # slower (llama.cpp's most, its weights mapped from the file)
                        throughput(servers[k], 1, 3, args.tokens)
                    best: Dict[Tuple[str, int], float] = {}
                    for r in range(args.rounds_throughput):
                        for c in clients:
                            order = list(servers) if r % 2 == 0 else list(servers)[::-1]
                            for k in order:
                                tps = throughput(servers[k], c, args.requests, args.tokens)
                                best[k, c] = max(best.get((k, c), 0.0), tps)
                finally:
                    for srv in servers.values():
                        srv.stop()
                print(f"\n{shape} {dtype}: {args.requests} completions of {args.tokens} tokens "
                      f"per client; tokens/s, best of {args.rounds_throughput} alternating rounds")
                head = f"{'clients':>8} {'blockc':>9} {'x one':>6}"
                if "llama.cpp" in servers:
                    head += f" {'llama.cpp':>10} {'x one':>6} {'blockc/llama.cpp':>17}"
                print(head)
                for c in clients:
                    b = best["blockc", c]
                    line = f"{c:>8} {b:>9.1f} {b / best['blockc', clients[0]]:>6.2f}"
                    if "llama.cpp" in servers:
                        q = best["llama.cpp", c]
                        line += (f" {q:>10.1f} {q / best['llama.cpp', clients[0]]:>6.2f}"
                                 f" {b / q:>17.2f}")
                    print(line)
            servers = {"reuse": Server(d, "--parallel", "2", *common),
                       "no reuse": Server(d, "--parallel", "2", "--no-prefix-reuse", *common)}
            try:
                for srv in servers.values():
                    first_token_time(srv, [{"role": "user", "content": "warm up"}])
                t = ttft(servers, args.system_tokens, args.rounds)
            finally:
                for srv in servers.values():
                    srv.stop()
            print(f"{shape}: time to first token of a second chat turn (~{args.system_tokens}-"
                  f"token system prompt, blockc only), median of {args.rounds}:")
            print(f"  with prefix reuse {t['reuse'] * 1e3:8.1f} ms")
            print(f"  without           {t['no reuse'] * 1e3:8.1f} ms")
            print(f"  cold prompt       {t['cold'] * 1e3:8.1f} ms"
                  f"   (reuse / cold = {t['reuse'] / t['cold']:.3f})")
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end; CPU steal {steal_share(t0)} "
          f"over the run")
    return 0


if __name__ == "__main__":
    run_bench(main, "serving.md", "serve")
