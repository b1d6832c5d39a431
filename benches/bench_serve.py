"""Benchmark: blockc serve under concurrent streaming clients, and prefix reuse.

Random-weight models of two shapes, saved as checkpoint directories with a tokenizer
trained on a few lines and a ChatML template (tests/support/chat_dirs.py):

  smollm2-135m  Llama: V=49152 D=576 30 layers, 9 heads / 3 K/V heads, SwiGLU 1536, tied
  gpt2-small    V=50257 D=768 12 layers, 12 heads, GELU 3072, learned positions, tied

  throughput  aggregate completion tokens/s with 1, 4 and 8 concurrent clients, each
              streaming --requests chat completions of --tokens tokens (ignore_eos, so
              every request makes exactly that many), the server started with
              --parallel 8; the ratio to one client's throughput
  ttft        time to the first token of a chat's second turn (the first turn's
              --system-tokens system prompt, question and answer, then a new question),
              with prefix reuse (the first turn's keys and values kept in the cache) and
              without (--no-prefix-reuse), turns alternating between the two servers;
              the median of --rounds, and the same prompt cold (a fresh system prompt)

The peer, llama-cpp-python's server (``python -m llama_cpp.server``) on the same weights as
GGUF, is not driven yet: the run says whether llama-cpp-python and its server extra are
installed, and that no peer row is measured.
Every connection goes to 127.0.0.1. The load average and CPU steal over the run are
printed (the machine is shared: rerun late for the tables).

    python benches/bench_serve.py                      # both shapes (a few minutes)
    python benches/bench_serve.py --shapes gpt2-small --requests 1 --tokens 16   # a look

With --docs the output also replaces the "serve" section of docs/serving.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List

import support_path  # noqa: F401  (tests/support on the path)

import blockc
from doc_section import run as run_bench  # noqa: E402

SHAPES = {
    "smollm2-135m": dict(vocab=49152, context=2048, width=576, heads=9, layers=30, kv_heads=3,
                         d_ff=1536, norm="rms", activation="swiglu", positions="rope",
                         rope_theta=100000.0, qkv_bias=False, out_bias=False, mlp_bias=False,
                         tie_weights=True, eps=1e-5),
    "gpt2-small": dict(vocab=50257, context=1024, width=768, heads=12, layers=12),
}


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def cpu_times():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), (v[7] if len(v) > 7 else 0)


def make_dir(root: Path, shape: str) -> Path:
    from chat_dirs import chat_dir
    d = root / shape
    chat_dir(d, "chatml")
    cfg = blockc.GPTConfig(**SHAPES[shape])
    blockc.GPT.random(cfg, seed=0).save_pretrained(d)
    return d


def throughput(server, clients: int, requests: int, tokens: int) -> float:
    """Aggregate completion tokens/s of `clients` streaming clients."""
    from serve_proc import NAME
    done: List[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients)

    def client(i):
        c = server.client()
        barrier.wait()
        for r in range(requests):
            n = 0
            for ch in c.chat.completions.create(
                    model=NAME, stream=True, max_tokens=tokens, temperature=0.8, seed=i * 100 + r,
                    messages=[{"role": "user", "content": f"Question {i}.{r}: how are you?"}],
                    stream_options={"include_usage": True}, extra_body={"ignore_eos": True}):
                if ch.usage is not None:
                    n = ch.usage.completion_tokens
            with lock:
                done.append(n)
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
    ap.add_argument("--clients", default="1,4,8")
    ap.add_argument("--requests", type=int, default=2, help="requests per client")
    ap.add_argument("--tokens", type=int, default=32, help="tokens per request")
    ap.add_argument("--system-tokens", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    from serve_proc import Server
    try:
        import llama_cpp
        have = f"llama-cpp-python {llama_cpp.__version__} is installed"
        import llama_cpp.server.app  # noqa: F401  (its server extra: fastapi, sse-starlette...)
        peer = have
    except ImportError as e:
        peer = None
        why = (f"{have if 'have' in locals() else 'llama-cpp-python is not installed'}"
               f" ({e.name or e} missing)")
    tot0, steal0 = cpu_times()
    load0 = os.getloadavg()[0]
    print(f"CPU: {cpu_name()}, {os.cpu_count()} logical CPUs; blockc threads {args.threads}; "
          f"load average {load0:.2f} at the start")
    if peer is None:
        print(f"{why}: no llama.cpp server beside it (pip install 'llama-cpp-python[server]')")
    else:
        print(f"{peer}, but this bench's llama.cpp server runner is not written yet: no peer row")
    clients = [int(x) for x in args.clients.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.shapes.split(","):
            d = make_dir(Path(tmp), shape)
            common = ["--threads", str(args.threads), "--ctx-size", "1024"]
            s = Server(d, "--parallel", "8", *common)
            try:
                throughput(s, 1, 1, 4)  # warm up
                print(f"\n{shape}: {args.requests} streamed chat completions of {args.tokens} "
                      f"tokens per client, --parallel 8")
                print(f"{'clients':>8} {'tokens/s':>10} {'x one client':>13}")
                one = None
                for c in clients:
                    tps = throughput(s, c, args.requests, args.tokens)
                    one = one or tps
                    print(f"{c:>8} {tps:>10.1f} {tps / one:>13.2f}")
            finally:
                s.stop()
            servers = {"reuse": Server(d, "--parallel", "2", *common),
                       "no reuse": Server(d, "--parallel", "2", "--no-prefix-reuse", *common)}
            try:
                for srv in servers.values():
                    first_token_time(srv, [{"role": "user", "content": "warm up"}])
                t = ttft(servers, args.system_tokens, args.rounds)
            finally:
                for srv in servers.values():
                    srv.stop()
            print(f"time to first token of a second chat turn (~{args.system_tokens}-token system "
                  f"prompt), median of {args.rounds}:")
            print(f"  with prefix reuse {t['reuse'] * 1e3:8.1f} ms")
            print(f"  without           {t['no reuse'] * 1e3:8.1f} ms")
            print(f"  cold prompt       {t['cold'] * 1e3:8.1f} ms"
                  f"   (reuse / cold = {t['reuse'] / t['cold']:.3f})")
    tot1, steal1 = cpu_times()
    steal = (steal1 - steal0) / max(1, tot1 - tot0)
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end; CPU steal {steal:.1%} over the run")
    return 0


if __name__ == "__main__":
    run_bench(main, "serving.md", "serve")
