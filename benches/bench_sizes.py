"""Benchmark: GGUF files at the sizes CPU users run, blockc against llama.cpp (issue 51).

Random-weight GGUF files written by blockc (blockc.checkpoint.gguf.save_streaming: tensor
by tensor, never the whole float32 model, so the 8B shape is written in the memory of its
largest tensor), shaped as these models' published config.json have them:

  qwen0.5b  Qwen2.5-0.5B   vocab 151,936, width 896, 14 heads, 2 K/V heads, SwiGLU 4,864,
            24 layers, tied, q/k/v biases, rope theta 1e6, RMS eps 1e-6
  llama1b   Llama-3.2-1B   vocab 128,256, width 2,048, 32 heads, 8 K/V heads, SwiGLU 8,192,
            16 layers, tied, rope theta 5e5
  llama3b   Llama-3.2-3B   vocab 128,256, width 3,072, 24 heads, 8 K/V heads, SwiGLU 8,192,
            28 layers, tied, rope theta 5e5
  llama8b   Llama-3.1-8B   vocab 128,256, width 4,096, 32 heads, 8 K/V heads, SwiGLU 14,336,
            32 layers, untied, rope theta 5e5

(The Llamas' "llama3" rope scaling is not written: blockc has none, and it costs nothing
per token.) Each matrix is a 64-row tile of N(0, 0.05) weights, quantised by blockc's C
quantiser (Q4_K's too: its blocks are the NumPy oracle's but for the sign of a zero
minimum, and the oracle takes hours at these sizes) or, for the types it lacks, the oracle,
repeated down the rows: every block is a real quantised block, every row its own bytes in
memory, and the files are written in seconds. Types Q8_0, Q4_0, Q4_K_M, Q5_K_M and IQ4_XS
(llama.cpp's recipes); a type blockc cannot write or read is skipped with a note.

Each engine runs in its own subprocess per round (so its peak RSS is its own, VmHWM):

  exact     GPT.from_pretrained(file, dtype="exact"): each matrix in its file type's own
            blocks, float activations
  integer   GPT.from_pretrained(file): the default (DEFAULT_FORMAT: dtype="integer" for every
            quantised type), the file's own blocks by integer dot products on 8-bit
            activations, as llama.cpp multiplies quantised matrices
  (both with a float16 KV cache: llama.cpp's default F16 keys and values)
  llama.cpp llama-cpp-python, with its repacked/AMX weight buffers where a probe in a
            subprocess finds they work for the file on this machine (benches/llama_peer.py),
            the plain CPU kernels where they crash; the "buffers" column says which

For each thread count and context: prefill tokens/s of a prompt of `context` tokens (the
last position's logits), then decode tokens/s of --new greedy tokens at that depth. Load
time (from a warm page cache) and RSS: after loading (the model's share: RSS after minus
before) and the peak of the whole run. Engines alternate within each round; rates are the
best of --repeats rounds (--big-repeats for the 3B and 8B shapes), load times the least.

The read bound: a decode step reads every matrix of the file once (the token embedding too
when it is also the output matrix; an untied one is only gathered) and the KV cache up to the
context (float16: llama.cpp's default and blockc's here); this machine's read bandwidth
(benches/machine.py, a STREAM-style read measured before each shape's rounds and after each
file's, the best: a shared host's bandwidth swings by half within a minute) over those bytes is the most tokens/s any engine can decode, and each engine's decode
rate is printed as a share of it (issue 51's goal: the 8B shape within 85%).

    python benches/bench_sizes.py                          # qwen0.5b and llama1b
    python benches/bench_sizes.py --sizes llama1b --docs   # one shape, into docs/results/sizes.md
    python benches/bench_sizes.py --sizes llama8b --types Q4_0 --contexts 256
    python benches/bench_sizes.py --sizes qwen0.5b --types Q4_0 --contexts 64 --new 8 --repeats 1

Files are kept in --dir (reused when present). With --docs (and one --sizes) the output
also replaces that shape's section ("sizes-llama1b", ...) of docs/results/sizes.md, or,
when every context is long, its "-long" section ("sizes-qwen0.5b-long").
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
import zlib
from typing import Any, Dict, List, Optional

import numpy as np

import blockc
from blockc.block.ops import pack, unpack_ggml
from blockc.checkpoint import gguf as gm
from blockc.model import layout
from doc_section import run as run_bench  # noqa: E402
from machine import ReadBound, cpu_name, cpu_times, read_bandwidth, steal_share  # noqa: E402
from blockc.io import gguf as gguf_io  # noqa: E402
import llama_peer  # noqa: E402


def _llama(vocab, width, heads, kv, d_ff, layers, tied, theta=500000.0, eps=1e-5, bias=False):
    return blockc.GPTConfig(vocab=vocab, context=8192, width=width, heads=heads, kv_heads=kv,
                            layers=layers, d_ff=d_ff, eps=eps, tie_weights=tied, norm="rms",
                            activation="swiglu", positions="rope", rope_theta=theta,
                            qkv_bias=bias, out_bias=False, mlp_bias=False)


SHAPES = {
    "qwen0.5b": _llama(151936, 896, 14, 2, 4864, 24, True, theta=1000000.0, eps=1e-6, bias=True),
    "llama1b": _llama(128256, 2048, 32, 8, 8192, 16, True),
    "llama3b": _llama(128256, 3072, 24, 8, 8192, 28, True),
    "llama8b": _llama(128256, 4096, 32, 8, 14336, 32, False),
}
BIG = ("llama3b", "llama8b")
TYPES = ("Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M", "IQ4_XS")
ENGINES = ("exact", "integer", "llama.cpp")
TILE = 64


def weight(cfg: blockc.GPTConfig):
    """blockc name -> float32 tensor: norms 1, biases 0, matrices a TILE-row random tile
    repeated (what :func:`quantiser` quantises once)."""
    from_layout = layout(cfg)

    def get(name: str) -> np.ndarray:
        shape = from_layout[name].shape
        if len(shape) == 1:
            return (np.zeros if name.endswith(".bias") else np.ones)(shape, np.float32)
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        tile = (rng.standard_normal((TILE, shape[1]), dtype=np.float32) * np.float32(0.05))
        return np.tile(tile, (-(-shape[0] // TILE), 1))[:shape[0]]
    return get


def quantiser(w: np.ndarray, t: str) -> np.ndarray:
    """The blocks of ``w`` as ggml type ``t``: its first TILE rows quantised (C's Q4_K
    quantiser for Q4_K, else blockc's save_gguf quantiser), repeated down the rows."""
    if w.ndim == 1 or t in ("F32", "F16", "BF16"):
        return gm.quantise(w, t)
    head = w[:TILE]
    q = (unpack_ggml(pack(head, "q4_k")) if t == "Q4_K" and w.shape[1] % 256 == 0
         else gm.quantise(head, t))
    return np.tile(q, (-(-w.shape[0] // TILE), 1))[:w.shape[0]]


def support(t: str, folder: str) -> Optional[str]:
    """None if blockc writes and reads type ``t``, else why not."""
    if t.upper() not in gm.GGUF_DTYPES:
        return f"blockc cannot write {t} yet (save_gguf types: {', '.join(gm.GGUF_DTYPES)})"
    cfg = _llama(512, 256, 4, 2, 512, 2, True)
    p = os.path.join(folder, f"probe-{t}.gguf")
    try:
        gm.save_streaming(p, cfg, t, weight(cfg), quantiser=quantiser)
        blockc.GPT.from_pretrained(p)
    except (ValueError, TypeError) as e:
        return f"blockc cannot read {t} yet ({e})"
    finally:
        if os.path.exists(p):
            os.unlink(p)
    return None


def rss_mb(field: str = "VmRSS") -> float:
    """This process's resident MB now (or ``field="VmHWM"``: its peak)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def worker(job: Dict[str, Any]) -> Dict[str, Any]:
    """One engine, one file, one round: load, then for each thread count and context a
    prefill and a decode; returns the figures (and the RSS)."""
    rng = np.random.default_rng(1)
    before = rss_mb()
    out: Dict[str, Any] = {"runs": {}}
    engine, path, new = job["engine"], job["path"], job["new"]
    top = max(job["contexts"]) + new + 8
    t0 = time.perf_counter()
    if engine == "llama.cpp":
        import llama_cpp
        with (llama_peer.extra_bufts_off() if not job["repack"] else contextlib.nullcontext()):
            llm = llama_cpp.Llama(model_path=path, n_ctx=top, n_threads=job["threads"][0],
                                  n_threads_batch=job["threads"][0], verbose=False)
        vocab = llm.n_vocab()
    else:
        m = blockc.GPT.from_pretrained(path, dtype=None if engine == "integer" else "exact")
        vocab = m.config.vocab
        wide = sum(1 for d in m.dtypes.values() if d == "float32")
        out["holds"] = m.dtype + (f" ({wide} of {len(m.dtypes)} matrices float32)" if wide else "")
    out["load_s"] = time.perf_counter() - t0
    out["rss_load_mb"] = rss_mb() - before
    for th in job["threads"]:
        for ctx in job["contexts"]:
            prompt = [int(i) for i in rng.integers(0, vocab, ctx)]
            if engine == "llama.cpp":
                llama_cpp.llama_set_n_threads(llm.ctx, th, th)
                llm.reset()
                t0 = time.perf_counter()
                llm.eval(prompt)
                pre = ctx / (time.perf_counter() - t0)
                first = llama_peer.last_logits(llama_cpp, llm)[:TILE].tolist()
                tok = int(np.argmax(llama_peer.last_logits(llama_cpp, llm)))
                toks = [tok]
                t0 = time.perf_counter()
                for _ in range(new):
                    llm.eval([tok])
                    tok = int(np.argmax(llama_peer.last_logits(llama_cpp, llm)))
                    toks.append(tok)
                dec = new / (time.perf_counter() - t0)
            else:
                blockc.set_num_threads(th)
                cache = m.new_cache(1, ctx + new + 1, dtype=job["cache"])
                ids = np.array([prompt])
                t0 = time.perf_counter()
                logits = m(ids, cache=cache, last_only=True)
                pre = ctx / (time.perf_counter() - t0)
                first = logits[0, -1, :TILE].tolist()
                tok = np.argmax(logits[:, -1], axis=-1)[:, None]
                toks = [int(tok[0, 0])]
                t0 = time.perf_counter()
                for _ in range(new):
                    tok = np.argmax(m(tok, cache=cache)[:, -1], axis=-1)[:, None]
                    toks.append(int(tok[0, 0]))
                dec = new / (time.perf_counter() - t0)
                del cache
            out["runs"][f"{th},{ctx}"] = {"prefill": pre, "decode": dec}
            # what agreement() compares across engines: the first run's (same prompt in each)
            out.setdefault("check", {"logits": first, "tokens": [t % TILE for t in toks]})
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss across fork and exec, so a worker
    # would report the bench's own size when it was forked (after writing a file) wherever
    # that was larger
    out["peak_rss_mb"] = rss_mb("VmHWM")
    return out


def run_worker(job: Dict[str, Any], timeout: float) -> Optional[Dict[str, Any]]:
    root = os.path.dirname(os.path.dirname(os.path.abspath(blockc.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    try:
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", json.dumps(job)],
                           capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        print(f"  ({job['engine']} on {os.path.basename(job['path'])}: over {timeout:.0f} s)")
        return None
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["?"])[-1][:160]
        print(f"  ({job['engine']} on {os.path.basename(job['path'])}: exit {r.returncode}: {tail})")
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])


def ensure_file(folder: str, size: str, t: str, cfg: Optional[blockc.GPTConfig] = None) -> str:
    """The file ``{size}-{t}.gguf`` in ``folder`` (a model of ``cfg``, default
    ``SHAPES[size]``), written when absent."""
    path = os.path.join(folder, f"{size}-{t}.gguf")
    if not os.path.exists(path):
        t0 = time.perf_counter()
        cfg = SHAPES[size] if cfg is None else cfg
        gm.save_streaming(path, cfg, t, weight(cfg), quantiser=quantiser)
        print(f"wrote {os.path.basename(path)} in {time.perf_counter() - t0:.0f} s "
              f"({os.path.getsize(path) / 1e9:.2f} GB)")
    return path


def peer() -> Any:
    """llama_cpp, or None when llama-cpp-python is not installed."""
    try:
        import llama_cpp
    except ImportError:
        return None
    return llama_cpp


def preamble(llama_cpp: Any, cache: str, new: int) -> Any:
    """Print the machine (CPU, load, steal), the peer and blockc's settings; returns the
    CPU times :func:`epilogue` measures the steal since."""
    t_start = cpu_times()
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at the start; "
          f"{steal_share(None)} steal since boot; ISA {blockc.get_isa()}")
    print("llama.cpp: " + (f"llama-cpp-python {llama_cpp.__version__}, {llama_peer.NOTE}"
                           if llama_cpp else "not installed (pip install llama-cpp-python)"))
    print(f"blockc: KV cache {cache}; rates the best of the rounds, load the least; "
          f"decode {new} tokens after a prompt of the context's length\n")
    return t_start


def epilogue(t_start: Any) -> None:
    print(f"\nload average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end; "
          f"steal {steal_share(t_start)} during the run")


def supported(types: str, folder: str) -> List[str]:
    """The types of the comma-separated ``types`` blockc writes and reads (the others
    printed as skipped, with why)."""
    out = []
    for t in types.split(","):
        why = support(t, folder)
        if why:
            print(f"skipped {t}: {why}")
        else:
            out.append(t)
    return out


def best_of(path: str, engines: List[str], job: Dict[str, Any], repeats: int,
            timeout: float) -> Dict[str, Dict[str, Any]]:
    """engine -> its figures on the file at ``path`` over ``repeats`` rounds (engines
    alternating, each in its own subprocess): the best rates, the least load time (the
    first round's RSS and agreement check); an engine that failed every round is absent.
    ``job`` holds the worker's other keys (threads, contexts, new, cache, repack)."""
    best: Dict[str, Dict[str, Any]] = {}
    for r in range(repeats):
        order = engines[r % len(engines):] + engines[:r % len(engines)]
        for e in order:
            res = run_worker(dict(job, engine=e, path=path), timeout)
            if res is None:
                continue
            b = best.setdefault(e, res)
            b["load_s"] = min(b["load_s"], res["load_s"])
            for k, v in res["runs"].items():
                for f in ("prefill", "decode"):
                    b["runs"][k][f] = max(b["runs"][k][f], v[f])
    return best


LOAD_HEAD = ("| file | engine | holds / llama.cpp buffers | file MB | load s | RSS after load MB | "
             "peak RSS MB |\n|---|---|---|---|---|---|---|")
SPEED_HEAD = ("| file | threads | context | exact decode tok/s | integer (default) decode | "
              "llama.cpp decode | ratio exact | ratio integer | exact prefill tok/s | integer "
              "(default) prefill | llama.cpp prefill | ratio exact | ratio integer |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def load_rows(t: str, path: str, best: Dict[str, Dict[str, Any]], engines: List[str],
              repack: bool) -> List[str]:
    """The rows of :data:`LOAD_HEAD` of file ``t`` (a row per engine that ran)."""
    rows = []
    for e in engines:
        if e not in best:
            continue
        b = best[e]
        holds = b.get("holds") or ("repacked/AMX" if repack else "plain CPU")
        rows.append(f"| {t} | {e} | {holds} | {os.path.getsize(path) / 1e6:,.0f} | "
                    f"{b['load_s']:.2f} | {b['rss_load_mb']:,.0f} | {b['peak_rss_mb']:,.0f} |")
    return rows


def speed_rows(t: str, best: Dict[str, Dict[str, Any]], threads: List[int],
               contexts: List[int]) -> List[str]:
    """The rows of :data:`SPEED_HEAD` of file ``t``: each engine's rates and blockc's
    ratios to llama.cpp's, per thread count and context."""
    rows = []
    for th in threads:
        for ctx in contexts:
            k = f"{th},{ctx}"
            cell = {e: best[e]["runs"][k] for e in best}
            ll = cell.get("llama.cpp")

            def fmt(e, f):
                return f"{cell[e][f]:.1f}" if e in cell else "n/a"

            def ratio(e, f):
                return f"{cell[e][f] / ll[f]:.2f}" if e in cell and ll else "n/a"
            rows.append(
                f"| {t} | {th} | {ctx} | {fmt('exact', 'decode')} | "
                f"{fmt('integer', 'decode')} | {fmt('llama.cpp', 'decode')} | "
                f"{ratio('exact', 'decode')} | {ratio('integer', 'decode')} | "
                f"{fmt('exact', 'prefill')} | {fmt('integer', 'prefill')} | "
                f"{fmt('llama.cpp', 'prefill')} | {ratio('exact', 'prefill')} | "
                f"{ratio('integer', 'prefill')} |")
    return rows


BOUND_HEAD = ("| file | threads | context | MB read a step | bound tok/s | exact % of bound | "
              "integer % | llama.cpp % |\n|---|---|---|---|---|---|---|---|")


def step_bytes(path: str, cfg: blockc.GPTConfig, context: int) -> int:
    """The bytes a decode step at depth ``context`` reads: every matrix of the file once
    (an untied token embedding is gathered, one row), and float16 keys and values."""
    tensors = gguf_io.read(path).tensors
    untied = "output.weight" in tensors
    weights = sum(t.nbytes for n, t in tensors.items() if not (untied and n == "token_embd.weight"))
    head_dim = cfg.head_dim or cfg.width // cfg.heads
    return int(weights + cfg.layers * 2 * (cfg.kv_heads or cfg.heads) * head_dim * context * 2)


def bound_rows(t: str, path: str, cfg: blockc.GPTConfig, best: Dict[str, Dict[str, Any]],
               threads: List[int], contexts: List[int], bw: Dict[int, float]) -> List[str]:
    """The rows of :data:`BOUND_HEAD` of file ``t`` (``bw``: GB/s by thread count)."""
    rows = []
    for th in threads:
        for ctx in contexts:
            nbytes = step_bytes(path, cfg, ctx)
            bound = bw.get(th, float("nan")) * 1e9 / nbytes
            k = f"{th},{ctx}"

            def share(e):
                return (f"{100 * best[e]['runs'][k]['decode'] / bound:.0f}%"
                        if e in best and bound == bound else "n/a")
            rows.append(f"| {t} | {th} | {ctx} | {nbytes / 1e6:,.0f} | {bound:.1f} | "
                        f"{share('exact')} | {share('integer')} | {share('llama.cpp')} |")
    return rows


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="qwen0.5b,llama1b", help=", ".join(SHAPES))
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--contexts", default="256,4096")
    ap.add_argument("--new", type=int, default=32, help="greedy tokens per decode run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--big-repeats", type=int, default=1, help="rounds for the 3B and 8B shapes")
    ap.add_argument("--cache", default="float16", help="blockc's KV cache dtype")
    ap.add_argument("--dir", default=os.path.join(os.path.expanduser("~"), ".cache",
                                                  "blockc-bench-sizes"))
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per worker")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    llama_cpp = peer()
    engines = [e for e in args.engines.split(",") if e != "llama.cpp" or llama_cpp is not None]
    threads = [int(t) for t in args.threads.split(",")]
    contexts = [int(c) for c in args.contexts.split(",")]
    os.makedirs(args.dir, exist_ok=True)
    t_start = preamble(llama_cpp, args.cache, args.new)
    types = supported(args.types, args.dir)
    reader = ReadBound()
    for size in args.sizes.split(","):
        cfg = SHAPES[size]
        repeats = args.big_repeats if size in BIG else args.repeats
        print(f"\n### {size} ({blockc.gpt_parameter_count(cfg) / 1e9:.2f}B parameters, "
              f"{repeats} round{'s' * (repeats > 1)})\n")
        loads, speeds, files = [], [], []
        bw = read_bandwidth(reader=reader)
        for t in types:
            path = ensure_file(args.dir, size, t)
            repack = llama_peer.extra_bufts_work(path, t)[0] if llama_cpp else False
            best = best_of(path, engines, {"threads": threads, "contexts": contexts,
                                           "new": args.new, "cache": args.cache,
                                           "repack": repack}, repeats, args.timeout)
            loads += load_rows(t, path, best, engines, repack)
            speeds += speed_rows(t, best, threads, contexts)
            files.append((t, path, best))
            after = read_bandwidth(reader=reader)
            bw = {th: max(bw.get(th, 0.0), after.get(th, 0.0)) for th in set(bw) | set(after)}
        print(LOAD_HEAD + "\n" + "\n".join(loads))
        print("\n" + SPEED_HEAD + "\n" + "\n".join(speeds))
        print("\nread bandwidth (best before the rounds and after each file's): "
              + ", ".join(f"{th} thread{'s' * (th > 1)} {v:.1f} GB/s" for th, v in sorted(bw.items()))
              + "\n\n" + BOUND_HEAD)
        print("\n".join(r for t, path, best in files
                        for r in bound_rows(t, path, cfg, best, threads, contexts, bw)))
    reader.close()
    epilogue(t_start)
    return 0


def _section() -> str:
    """The docs section of this run: one per shape ("sizes-llama1b"), so each shape's table
    is recorded by its own run (--docs takes one --sizes); a run whose every context is long
    (LONG tokens or more) records beside it ("sizes-qwen0.5b-long"), so the short contexts'
    table of every type and a long context's of a few are separate runs."""
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--sizes", default="")
    ap.add_argument("--contexts", default="256,4096")
    ap.add_argument("--worker")
    a, _ = ap.parse_known_args()
    if "--docs" in sys.argv and (a.sizes not in SHAPES):
        raise SystemExit(f"--docs records one shape's table: give --sizes one of {', '.join(SHAPES)}")
    long = min(int(c) for c in a.contexts.split(",")) >= LONG
    return a.sizes + ("-long" if long else "")


#: the shortest context whose run is recorded in a shape's "-long" section
LONG = 2048


if __name__ == "__main__":
    run_bench(main, "results/sizes.md", f"sizes-{_section()}")
