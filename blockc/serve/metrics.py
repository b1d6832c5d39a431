"""What the server tells of itself: ``GET /metrics`` (its counters in Prometheus' text
exposition format, summed over the loaded models: through ``prometheus-client``'s own
exposition when it is installed, else written here in the same text format, version
0.0.4), one log line per request (:class:`AccessLog` on :data:`LOG`), and llama-server's
``timings`` of a completion (:func:`timings`)."""
from __future__ import annotations

import bisect
import logging
import threading
import time
from typing import Any, Dict, List, Tuple

__all__ = ["metrics_text", "FAMILIES", "AccessLog", "LOG", "timings", "Latencies", "BUCKETS"]

#: the histograms' upper bounds in seconds (+Inf implied), vLLM's range for a CPU's speeds
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
           7.5, 10.0, 30.0, 60.0)
#: name -> help of each histogram (seconds)
HISTOGRAMS = {
    "queue_wait": "Seconds a request waited for a slot",
    "time_to_first_token": "Seconds from arrival to first token",
    "time_per_output_token": "Seconds per generated token after the first",
}


class Latencies:
    """Histograms of seconds (:data:`HISTOGRAMS`, :data:`BUCKETS`), observed from the
    scheduler thread, read by /metrics (a lock between them)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._counts = {n: [0] * (len(BUCKETS) + 1) for n in HISTOGRAMS}
        self._sums = dict.fromkeys(HISTOGRAMS, 0.0)

    def observe(self, name: str, seconds: float) -> None:
        i = bisect.bisect_left(BUCKETS, seconds)
        with self._lock:
            self._counts[name][i] += 1
            self._sums[name] += seconds

    def snapshot(self) -> Dict[str, Tuple[List[int], float]]:
        """name -> (counts per bucket, the last one past every bound; sum of seconds)."""
        with self._lock:
            return {n: (list(c), self._sums[n]) for n, c in self._counts.items()}


def _merged(pool: Any) -> Dict[str, Tuple[List[int], float]]:
    out = {n: ([0] * (len(BUCKETS) + 1), 0.0) for n in HISTOGRAMS}
    for e in pool.loaded():
        for n, (counts, total) in e.service.engine.latency.snapshot().items():
            acc, s = out[n]
            out[n] = ([a + b for a, b in zip(acc, counts)], s + total)
    return out

#: the server's logger: one line per request (method, path, status, model, tokens, ms)
LOG = logging.getLogger("blockc.serve")

#: (name, type, help) of every series /metrics shows
FAMILIES = (
    ("blockc_requests_total", "counter", "Generating requests accepted"),
    ("blockc_prompt_tokens_total", "counter", "Prompt tokens of the requests"),
    ("blockc_prompt_tokens_cached_total", "counter", "Prompt tokens reused from the cache"),
    ("blockc_completion_tokens_total", "counter", "Tokens generated"),
    ("blockc_queue_depth", "gauge", "Requests waiting for a slot"),
    ("blockc_active_requests", "gauge", "Requests in a slot"),
    ("blockc_models_loaded", "gauge", "Models loaded"),
) + tuple((f"blockc_{n}_seconds", "histogram", doc) for n, doc in HISTOGRAMS.items())


def _values(pool: Any) -> dict:
    engines = [e.service.engine for e in pool.loaded()]
    total = lambda key: sum(float(g.stats[key]) for g in engines)  # noqa: E731
    out: Dict[str, Any] = {
        "blockc_requests_total": total("requests_total"),
        "blockc_prompt_tokens_total": total("prompt_tokens"),
        "blockc_prompt_tokens_cached_total": total("prompt_tokens_cached"),
        "blockc_completion_tokens_total": total("completion_tokens"),
        "blockc_queue_depth": float(sum(g.queue_depth for g in engines)),
        "blockc_active_requests": float(sum(g.active for g in engines)),
        "blockc_models_loaded": float(len(engines)),
    }
    for n, (counts, seconds) in _merged(pool).items():
        cumulative, acc = [], 0
        for c in counts:
            acc += c
            cumulative.append(acc)
        out[f"blockc_{n}_seconds"] = (cumulative, seconds)
    return out


def _bounds() -> List[str]:
    return [repr(float(b)) for b in BUCKETS] + ["+Inf"]


def _prometheus(values: dict) -> Tuple[str, str]:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                        HistogramMetricFamily)
    from prometheus_client.exposition import CONTENT_TYPE_LATEST

    class Collector:
        def collect(self):
            for name, kind, doc in FAMILIES:
                v = values[name]
                if kind == "counter":
                    yield CounterMetricFamily(name, doc, value=v)
                elif kind == "gauge":
                    yield GaugeMetricFamily(name, doc, value=v)
                else:
                    yield HistogramMetricFamily(name, doc, buckets=list(zip(_bounds(), v[0])),
                                                sum_value=v[1])
    reg = CollectorRegistry(auto_describe=False)
    reg.register(Collector())
    return generate_latest(reg).decode("utf-8"), CONTENT_TYPE_LATEST


def metrics_text(pool: Any) -> Tuple[str, str]:
    """(the exposition text, its media type) of the pool's loaded models."""
    values = _values(pool)
    try:
        return _prometheus(values)
    except ImportError:
        pass
    lines: List[str] = []
    for name, kind, doc in FAMILIES:
        v = values[name]
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} {kind}"]
        if kind == "histogram":
            lines += [f'{name}_bucket{{le="{b}"}} {c}' for b, c in zip(_bounds(), v[0])]
            lines += [f"{name}_sum {v[1]!r}", f"{name}_count {v[0][-1]}"]
        else:
            lines.append(f"{name} {int(v) if float(v).is_integer() else v}")
    return "\n".join(lines) + "\n", "text/plain; version=0.0.4; charset=utf-8"


def timings(ends: Dict[int, Dict[str, Any]], use: Dict[str, Any]) -> Dict[str, float]:
    """llama-server's ``timings`` (an extension): the prompt's tokens computed (those not
    reused from the cache) and its milliseconds from arrival to the first token (queue wait
    included), the generated tokens and their milliseconds, and the rates per second."""
    prompt_ms = max((u.get("prompt_ms", 0.0) for u in ends.values()), default=0.0)
    predicted_ms = max((u.get("predicted_ms", 0.0) for u in ends.values()), default=0.0)
    prompt_n = use["prompt_tokens"] - use["prompt_tokens_details"]["cached_tokens"]
    predicted_n = use["completion_tokens"]
    return {"prompt_n": prompt_n, "prompt_ms": round(prompt_ms, 3),
            "prompt_per_second": round(prompt_n * 1000 / prompt_ms, 3) if prompt_ms else 0.0,
            "predicted_n": predicted_n, "predicted_ms": round(predicted_ms, 3),
            "predicted_per_second": (round(predicted_n * 1000 / predicted_ms, 3)
                                     if predicted_ms else 0.0)}


class AccessLog:
    """ASGI middleware: one line per request on :data:`LOG` (method, path, status, the
    completion's id, model, prompt and completion tokens, milliseconds), when its response has been sent whole.
    A route names the model and tokens in ``request.state`` (``model``, ``tokens``)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.monotonic()
        info = scope.setdefault("state", {})
        status, done = [0], [False]

        def log():
            if done[0]:
                return
            done[0] = True
            p, c = info.get("tokens", (0, 0))
            LOG.info("%s %s %d id=%s model=%s prompt_tokens=%d completion_tokens=%d ms=%.1f",
                     scope.get("method", ""), scope.get("path", ""), status[0],
                     info.get("id", "-"), info.get("model", "-"), p, c,
                     (time.monotonic() - t0) * 1000)

        async def send_logged(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                log()
        try:
            await self.app(scope, receive, send_logged)
        finally:
            log()
