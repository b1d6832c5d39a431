"""Soak: ``blockc serve`` under 16 clients sending mixed valid, malformed, cancelled and
oversized requests for --minutes (30 by default), on loopback, against a tiny random
model made here (a Llama-shaped checkpoint with a tokenizer trained on a few lines and a
ChatML template: tests/support/chat_dirs.py). Bounded: every connection goes to
127.0.0.1, every request has a timeout, the run ends on time.

First the server's classes of failure (issue 49) are run as their tests (each class's
tests counted and run, as benches/reliability.py does for the library's). Then the soak:

  valid       chat and completions, streamed and not, n up to 2, logprobs, seeds, stop
              strings, sampling options at the edges of their ranges with logit_bias
  malformed   not JSON, JSON nested 100,000 deep, fields of the wrong type or out of
              range, lone surrogates, an unknown model, n past the queue
  oversized   a prompt over the bound the context sets (characters), a body over the
              limit (413), max_tokens past the context
  cancelled   a stream hung up after two chunks; a non-streamed request hung up (raw
              socket) before its answer

while a probe asks GET /health every 100 ms and the server's RSS is read every second.
The closing note: requests served, errors by status (and any status a kind should not
get), client-side failures, peak RSS against the first minute's, /health latency
percentiles, the CPU, the load average and the hypervisor's steal over the run.

    python benches/soak_serve.py --minutes 1          # a look
    python benches/soak_serve.py --docs               # 30 minutes; writes docs/reliability.md,
                                                      # section "serve"
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import support_path  # noqa: F401  (tests/support on the path)

from doc_section import run as run_bench  # noqa: E402
from machine import cpu_name, cpu_times, steal_share  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NAME = "soak"

# (class, what is tried, pytest selections): issue 49's classes, each as its tests
CLASSES = [
    ("fault isolation",
     "a request raising in its template, tokenizing, prefill, sampler or detokenizing while 7 "
     "stream on (their bits as alone); a model's NaN logits; sampling at its ranges' edges "
     "with logit_bias; a template rendering nothing",
     [["tests/test_serve_faults.py", "-k", "stage or sampler or finite or edges or nothing"]]),
    ("a client that goes away",
     "a streamed and a non-streamed client hanging up mid-answer: the slot freed within a step",
     [["tests/test_serve_faults.py", "-k", "hangs"]]),
    ("the event loop never stalls",
     "a checkpoint template with nested loops (stopped at its deadline, /health answering); "
     "prompts over the context's character bound refused untokenized",
     [["tests/test_serve_faults.py", "-k", "nested or longer or character_bound"]]),
    ("stop sequences never leak",
     "a stop string completed by a token ending inside a character, the request ending by "
     "length (streamed and not)",
     [["tests/test_serve_text.py", "-k", "stop"]]),
    ("log-probabilities are the token's own",
     "bytes of tokens that are part of a character; top_logprobs counts over 40 steps",
     [["tests/test_serve_text.py", "-k", "logprobs"]]),
    ("bad input is 400",
     "JSON nested 500,000 deep; lone surrogates in 6 fields; n past the queue; template "
     "division by zero, overflow, recursion, huge powers and strings; an empty prompt in a batch",
     [["tests/test_serve_input.py"]]),
    ("the rest",
     "special tokens out of the text unless asked; the API key compared in constant time; NaN "
     "and inf weights in safetensors and GGUF refused at load",
     [["tests/test_serve_text.py", "-k", "special or api_key"], ["tests/test_load_nonfinite.py"]]),
]


def run_pytest(args: List[str]) -> Tuple[int, int, int]:
    """(passed, failed, skipped) of one pytest run."""
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                       cwd=ROOT, capture_output=True, text=True, timeout=1800)
    last = (r.stdout.strip().splitlines() or [""])[-1]
    counts = [int(m.group(1)) if m else 0 for m in
              (re.search(r"(\d+) %s" % w, last) for w in ("passed", "failed", "skipped"))]
    if r.returncode not in (0, 5) and not counts[1]:
        counts[1] = 1  # a crash or an error: count it
    return counts[0], counts[1], counts[2]


def classes_table() -> int:
    print("| class | what is tried | result | command |")
    print("| --- | --- | --- | --- |")
    bad = 0
    for name, what, runs in CLASSES:
        p = f = s = 0
        for args in runs:
            a, b, c = run_pytest(args)
            p, f, s = p + a, f + b, s + c
        bad += f
        cmds = "; ".join("`python -m pytest " + " ".join(f'"{x}"' if " " in x else x for x in r)
                         + "`" for r in runs)
        print(f"| {name} | {what} | {p} tests passed, {f} failed"
              f"{f', {s} skipped' if s else ''} | {cmds} |", flush=True)
    return bad


# ---- the server ---------------------------------------------------------------------------

def make_model(root: Path) -> Path:
    from chat_dirs import chat_model_dir
    d = root / "model"
    chat_model_dir(d, "chatml", context=512, seed=7, llama=True, width=64, layers=2, d_ff=176)
    return d


class Server:
    def __init__(self, model: Path, log: Path, args: List[str]):
        self.f = open(log, "w")
        self.log = log
        self.p = subprocess.Popen(
            [sys.executable, "-m", "blockc", "serve", "--model", str(model), "--host",
             "127.0.0.1", "--port", "0", "--model-name", NAME, *args],
            stdout=self.f, stderr=subprocess.STDOUT, cwd=ROOT)
        end = time.monotonic() + 120
        while time.monotonic() < end:
            m = re.search(r"on http://127\.0\.0\.1:(\d+)/v1", log.read_text())
            if m:
                self.port = int(m.group(1))
                self.url = f"http://127.0.0.1:{self.port}"
                return
            if self.p.poll() is not None:
                raise SystemExit(f"the server exited: {log.read_text()}")
            time.sleep(0.05)
        self.stop()
        raise SystemExit("the server did not start in 120 s")

    def rss_mb(self) -> Optional[float]:
        try:
            for line in open(f"/proc/{self.p.pid}/status"):
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            return None
        return None

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(30)
        self.f.close()


# ---- the clients ----------------------------------------------------------------------------

WORDS = ("the block reads the stream and writes a small update back into it a residual "
         "stream flows from the embedding to the output Hello How are you today naïve café "
         "🙂 Paris capital France").split()

# kind: (weight, the statuses it should get)
KINDS = {
    "chat": (14, {200, 429}), "chat-stream": (14, {200, 429}),
    "completion": (10, {200, 429}), "completion-stream-n2": (6, {200, 429}),
    "logprobs": (5, {200, 429}), "edge-sampling": (5, {200, 429}),
    "malformed": (20, {400, 404, 422}), "oversized": (10, {400, 413}),
    "cancel-stream": (8, {"cancelled", 200, 429}), "cancel-wait": (8, {"cancelled"}),
}

MALFORMED = [
    b"{not json", b'{"model": "soak", "prompt": ' + b"[" * 100000 + b"]" * 100000 + b"}",
    json.dumps({"model": "soak", "prompt": "hi", "temperature": "hot"}).encode(),
    json.dumps({"model": "soak", "prompt": "hi", "top_p": 3}).encode(),
    b'{"model": "soak", "prompt": "hi \\ud800"}', b'{"model": "so\\udc00ak", "prompt": "hi"}',
    b'{"model": "soak", "messages": [{"role": "user", "content": "\\ud83d"}]}',
    json.dumps({"model": "nope", "prompt": "hi"}).encode(),
    json.dumps({"model": "soak", "prompt": "hi", "n": 1000}).encode(),
    json.dumps({"model": "soak", "prompt": "hi", "logit_bias": {"x": 1}}).encode(),
    json.dumps({"model": "soak", "prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}).encode(),
    json.dumps({"model": "soak", "messages": []}).encode(), b"[]", b"null",
]


VOCAB = [256]  # the model's, set once it is made


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.by_kind: Dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.failures: collections.Counter = collections.Counter()

    def add(self, kind: str, status) -> None:
        with self.lock:
            self.by_kind[kind][status] += 1

    def fail(self, kind: str, what: str) -> None:
        with self.lock:
            self.failures[f"{kind}: {what}"] += 1


def one_request(client, url: str, port: int, rng: random.Random, kind: str, stats: Stats,
                char_bound: int) -> None:
    import httpx
    chat_path, comp_path = url + "/v1/chat/completions", url + "/v1/completions"
    msgs = [{"role": "user", "content": _words(rng, rng.randint(3, 40))}]
    toks = rng.randint(4, 48)
    if kind == "chat":
        r = client.post(chat_path, json={"model": NAME, "messages": msgs, "max_tokens": toks,
                                         "temperature": rng.choice([0, 0.8]), "seed": rng.randint(0, 99),
                                         "stop": rng.choice([None, ["the"], ["\n", "ca"]])})
        stats.add(kind, r.status_code)
    elif kind in ("chat-stream", "completion-stream-n2", "cancel-stream"):
        if kind == "completion-stream-n2":
            path, body = comp_path, {"model": NAME, "prompt": _words(rng, 10), "n": 2,
                                     "max_tokens": toks, "temperature": 0.9, "seed": 3}
        else:
            path, body = chat_path, {"model": NAME, "messages": msgs, "max_tokens": toks,
                                     "temperature": 0.8, "stream_options": {"include_usage": True}}
        body["stream"] = True
        with client.stream("POST", path, json=body) as r:
            if r.status_code != 200:
                r.read()
                stats.add(kind, r.status_code)
                return
            chunks = 0
            for line in r.iter_lines():
                if line.startswith("data: "):
                    chunks += 1
                    if "\"error\"" in line and "internal_error" in line:
                        stats.fail(kind, "an error event")
                    if kind == "cancel-stream" and chunks == 2:
                        stats.add(kind, "cancelled")
                        return  # leaving the block closes the connection
            stats.add(kind, 200)
    elif kind == "completion":
        r = client.post(comp_path, json={"model": NAME, "prompt": _words(rng, rng.randint(1, 60)),
                                         "max_tokens": toks, "ignore_eos": rng.random() < 0.5})
        stats.add(kind, r.status_code)
    elif kind == "logprobs":
        if rng.random() < 0.5:
            r = client.post(comp_path, json={"model": NAME, "prompt": _words(rng, 8),
                                             "max_tokens": toks, "logprobs": 5})
        else:
            r = client.post(chat_path, json={"model": NAME, "messages": msgs, "max_tokens": toks,
                                             "logprobs": True, "top_logprobs": 5})
        stats.add(kind, r.status_code)
    elif kind == "edge-sampling":
        extra = rng.choice([dict(repetition_penalty=1e300), dict(repetition_penalty=1e-300),
                            dict(temperature=5e-324, top_p=0.0),
                            dict(temperature=2.0, min_p=1.0, frequency_penalty=-2.0,
                                 presence_penalty=2.0)])
        bias = {str(rng.randrange(VOCAB[0])): rng.choice([-100, 100]) for _ in range(5)}
        r = client.post(comp_path, json={"model": NAME, "prompt": _words(rng, 12),
                                         "max_tokens": toks, "logit_bias": bias, **extra})
        stats.add(kind, r.status_code)
    elif kind == "malformed":
        r = client.post(rng.choice([chat_path, comp_path]), content=rng.choice(MALFORMED),
                        headers={"Content-Type": "application/json"})
        stats.add(kind, r.status_code)
    elif kind == "oversized":
        which = rng.randrange(3)
        if which == 0:
            body = json.dumps({"model": NAME, "messages": [{"role": "user", "content":
                                                            "x" * (char_bound + 10)}]})
            r = client.post(chat_path, content=body, headers={"Content-Type": "application/json"})
        elif which == 1:
            r = client.post(comp_path, content=b'{"model": "soak", "prompt": "' + b"y" * (2 << 20)
                            + b'"}', headers={"Content-Type": "application/json"})
        else:
            r = client.post(comp_path, json={"model": NAME, "prompt": "hi", "max_tokens": 100000})
        stats.add(kind, r.status_code)
    elif kind == "cancel-wait":  # a non-streamed request whose client hangs up
        data = json.dumps({"model": NAME, "messages": msgs, "max_tokens": 200,
                           "ignore_eos": True}).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Content-Type: application/json\r\nContent-Length: "
                      + str(len(data)).encode() + b"\r\n\r\n" + data)
            time.sleep(rng.uniform(0.02, 0.3))
        stats.add(kind, "cancelled")


def client_loop(i: int, url: str, port: int, end: float, stats: Stats, char_bound: int) -> None:
    import httpx
    rng = random.Random(1000 + i)
    kinds = list(KINDS)
    weights = [KINDS[k][0] for k in kinds]
    with httpx.Client(timeout=httpx.Timeout(120.0)) as client:
        while time.monotonic() < end:
            kind = rng.choices(kinds, weights)[0]
            try:
                one_request(client, url, port, rng, kind, stats, char_bound)
            except httpx.TimeoutException:
                stats.fail(kind, "client timeout")
            except (httpx.HTTPError, OSError) as e:
                stats.fail(kind, type(e).__name__)


def health_probe(url: str, end: float, lat: List[float], fails: List[str]) -> None:
    import httpx
    with httpx.Client(timeout=30.0) as c:
        while time.monotonic() < end:
            t0 = time.perf_counter()
            try:
                r = c.get(url + "/health")
                if r.status_code != 200:
                    fails.append(str(r.status_code))
            except httpx.HTTPError as e:
                fails.append(type(e).__name__)
            lat.append(time.perf_counter() - t0)
            time.sleep(max(0.0, 0.1 - (time.perf_counter() - t0)))


def rss_probe(server: Server, t0: float, end: float, out: List[Tuple[float, float]]) -> None:
    while time.monotonic() < end:
        v = server.rss_mb()
        if v is not None:
            out.append((time.monotonic() - t0, v))
        time.sleep(1.0)


def _pct(xs: List[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def lscpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return cpu_name()


def soak(minutes: float, clients: int, parallel: int, threads: Optional[int]) -> int:
    with tempfile.TemporaryDirectory(prefix="blockc-soak-") as tmp:
        root = Path(tmp)
        model = make_model(root)
        args = ["--parallel", str(parallel), "--max-queue", "64", "--ctx-size", "512"]
        if threads:
            args += ["--threads", str(threads)]
        server = Server(model, root / "serve.log", args)
        try:
            import blockc
            tok = blockc.Tokenizer.from_pretrained(model)
            char_bound = 512 * tok.max_token_chars
            VOCAB[0] = json.loads((model / "config.json").read_text())["vocab_size"]
            stats, lat, hfails, rss = Stats(), [], [], []
            load0, steal0 = os.getloadavg(), cpu_times()
            t0 = time.monotonic()
            end = t0 + minutes * 60
            workers = [threading.Thread(target=client_loop,
                                        args=(i, server.url, server.port, end, stats, char_bound),
                                        daemon=True) for i in range(clients)]
            workers.append(threading.Thread(target=health_probe,
                                            args=(server.url, end, lat, hfails), daemon=True))
            workers.append(threading.Thread(target=rss_probe, args=(server, t0, end, rss),
                                            daemon=True))
            for w in workers:
                w.start()
            for w in workers:
                w.join(minutes * 60 + 300)
            elapsed = time.monotonic() - t0
            alive = server.p.poll() is None
            load1 = os.getloadavg()
            after = server.url and _final_check(server.url)
        finally:
            server.stop()
        return report(minutes, elapsed, clients, parallel, stats, lat, hfails, rss, load0, load1,
                      steal0, alive, after)


def _final_check(url: str) -> str:
    import httpx
    try:
        r = httpx.post(url + "/v1/completions", json={"model": NAME, "prompt": "the block",
                                                      "max_tokens": 4}, timeout=60)
        h = httpx.get(url + "/health", timeout=30).json()
        return f"{r.status_code}, /health {h['status']} with {h['active']} active, {h['queued']} queued"
    except Exception as e:  # noqa: BLE001 (reported, whatever it is)
        return f"failed: {type(e).__name__}: {e}"


def report(minutes, elapsed, clients, parallel, stats, lat, hfails, rss, load0, load1, steal0,
           alive, after) -> int:
    print(f"{elapsed / 60:.1f} minutes, {clients} clients on 127.0.0.1, blockc serve --parallel "
          f"{parallel} --max-queue 64 --ctx-size 512; a random Llama-shaped model "
          f"(V={VOCAB[0]}, D=64, 2 layers)")
    print(f"CPU: {lscpu_model()}, {os.cpu_count()} logical CPUs (shared); load average "
          f"{load0[0]:.2f} at the start, {load1[0]:.2f} / {load1[1]:.2f} / {load1[2]:.2f} "
          f"(1/5/15 min) at the end; steal {steal_share(steal0)} over the run")
    print()
    statuses = sorted({s for c in stats.by_kind.values() for s in c}, key=str)
    print(f"{'kind':<22}{'sent':>7}  " + "  ".join(f"{str(s):>9}" for s in statuses))
    total = collections.Counter()
    wrong = []
    for kind in KINDS:
        c = stats.by_kind.get(kind, collections.Counter())
        total.update(c)
        print(f"{kind:<22}{sum(c.values()):>7}  " + "  ".join(f"{c.get(s, 0):>9}" for s in statuses))
        bad = {s: n for s, n in c.items() if s not in KINDS[kind][1]}
        if bad:
            wrong.append(f"{kind}: {bad}")
    print(f"{'all':<22}{sum(total.values()):>7}  " + "  ".join(f"{total.get(s, 0):>9}"
                                                               for s in statuses))
    print()
    served = total.get(200, 0)
    errors = {s: n for s, n in total.items() if s not in (200, "cancelled")}
    print(f"requests: {sum(total.values())} sent, {served} served (200), "
          f"{total.get('cancelled', 0)} hung up on purpose")
    print("errors by status: " + (", ".join(f"{s}: {n}" for s, n in sorted(errors.items(), key=str))
                                  or "none"))
    print("statuses a kind should not get: " + ("; ".join(wrong) or "none (no 500)"))
    print("client-side failures: " + (", ".join(f"{k} x{n}" for k, n in stats.failures.items())
                                      or "none"))
    ms = [x * 1000 for x in lat]
    if ms:
        print(f"/health: {len(ms)} probes every 100 ms, latency p50 {_pct(ms, 50):.1f} ms, "
              f"p95 {_pct(ms, 95):.1f} ms, p99 {_pct(ms, 99):.1f} ms, max {max(ms):.1f} ms; "
              f"{len(hfails)} failed")
    if rss:
        first = max(v for t, v in rss if t <= 60)
        peak = max(v for _, v in rss)
        print(f"RSS: peak {first:.1f} MB in the first minute, {peak:.1f} MB over the run "
              f"({peak - first:+.1f} MB), {rss[-1][1]:.1f} MB at the end")
    print(f"after the run: server {'alive' if alive else 'DEAD'}; a completion: {after}")
    ok = alive and not wrong and not stats.failures and not hfails
    return 0 if ok else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1, help="the server's kernel threads")
    ap.add_argument("--no-classes", action="store_true", help="the soak only")
    a = ap.parse_args(argv)
    bad = 0
    if not a.no_classes:
        print("The server's classes of failure, each as its tests:")
        print()
        bad = classes_table()
        print()
    print("The soak:")
    print()
    status = soak(a.minutes, a.clients, a.parallel, a.threads)
    return 1 if bad or status else 0


if __name__ == "__main__":
    run_bench(main, "reliability.md", "serve")
