"""``GET /metrics``: the server's counters in Prometheus' text exposition format, summed
over the loaded models: through ``prometheus-client``'s own exposition when it is
installed, else written here in the same text format (version 0.0.4)."""
from __future__ import annotations

from typing import Any, List, Tuple

__all__ = ["metrics_text", "FAMILIES"]

#: (name, type, help) of every series /metrics shows
FAMILIES = (
    ("blockc_requests_total", "counter", "Generating requests accepted"),
    ("blockc_prompt_tokens_total", "counter", "Prompt tokens of the requests"),
    ("blockc_prompt_tokens_cached_total", "counter", "Prompt tokens reused from the cache"),
    ("blockc_completion_tokens_total", "counter", "Tokens generated"),
    ("blockc_queue_depth", "gauge", "Requests waiting for a slot"),
    ("blockc_active_requests", "gauge", "Requests in a slot"),
    ("blockc_models_loaded", "gauge", "Models loaded"),
    ("blockc_time_to_first_token_seconds", "summary", "Seconds from arrival to first token"),
)


def _values(pool: Any) -> dict:
    engines = [e.service.engine for e in pool.loaded()]
    total = lambda key: sum(float(g.stats[key]) for g in engines)  # noqa: E731
    return {
        "blockc_requests_total": total("requests_total"),
        "blockc_prompt_tokens_total": total("prompt_tokens"),
        "blockc_prompt_tokens_cached_total": total("prompt_tokens_cached"),
        "blockc_completion_tokens_total": total("completion_tokens"),
        "blockc_queue_depth": float(sum(g.queue_depth for g in engines)),
        "blockc_active_requests": float(sum(g.active for g in engines)),
        "blockc_models_loaded": float(len(engines)),
        "blockc_time_to_first_token_seconds": (total("ttft_count"), total("ttft_seconds_sum")),
    }


def _prometheus(values: dict) -> Tuple[str, str]:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                        SummaryMetricFamily)
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
                    yield SummaryMetricFamily(name, doc, count_value=v[0], sum_value=v[1])
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
        if kind == "summary":
            lines += [f"{name}_sum {v[1]:.6f}", f"{name}_count {int(v[0])}"]
        else:
            lines.append(f"{name} {int(v) if float(v).is_integer() else v}")
    return "\n".join(lines) + "\n", "text/plain; version=0.0.4; charset=utf-8"
