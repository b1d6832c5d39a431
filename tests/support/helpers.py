"""Small helpers shared by the test modules (found through tests/conftest.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck

import blockc

__all__ = ["rnd", "close", "close_k", "mean_kl", "plots", "run_python", "write_script",
           "snapshot", "PROPERTY_SETTINGS", "pick", "schema_valid", "same_bits_any_threads",
           "bits", "in_calls"]

#: the checkout's root (tests/support/helpers.py is two folders below it)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: hypothesis settings of the property tests: reproducible draws, no deadline (a shared
#: machine's timing is no failure), no health check (the strategies draw freely)
PROPERTY_SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))

#: a test that draws with matplotlib: skipped under the sanitizer run, where matplotlib's
#: C++ extension aborts with ASan LD_PRELOADed (and without matplotlib)
plots = pytest.mark.skipif(bool(os.environ.get("BLOCKC_UNDER_SANITIZER")),
                           reason="matplotlib's C++ extension aborts under an LD_PRELOADed ASan")


def rnd(*shape, seed=0):
    """Standard-normal float32 of ``shape`` from ``default_rng(seed)``."""
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def close(got, want, tol=2e-5):
    """float32 against the float64 oracle, scaled to the result's magnitude."""
    want = np.asarray(want, np.float64)
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


def close_k(got, want, k):
    """float32 tolerance for sums of k products of unit-size numbers."""
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6 * np.sqrt(k) + 1e-6)


def mean_kl(p_logits, q_logits):
    """Mean over positions of KL(softmax(p) || softmax(q)), in float64."""
    p = np.asarray(p_logits, np.float64).reshape(-1, np.shape(p_logits)[-1])
    q = np.asarray(q_logits, np.float64).reshape(-1, np.shape(q_logits)[-1])
    lp = p - p.max(-1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(-1, keepdims=True))
    lq = q - q.max(-1, keepdims=True)
    lq -= np.log(np.exp(lq).sum(-1, keepdims=True))
    return float(np.mean(np.sum(np.exp(lp) * (lp - lq), axis=-1)))


def run_python(code, timeout=120, env=None):
    """Run ``code`` in a fresh interpreter (this blockc, this environment).

    For what could crash, hang or race: a crash or a hang fails the test, not the suite.
    """
    e = dict(os.environ if env is None else env)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, e.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e,
                          capture_output=True, text=True, timeout=timeout)


def write_script(folder, name, code):
    """Write ``code`` (dedented) to ``folder/name`` and return its path, for a subprocess."""
    f = folder / name
    f.write_text(textwrap.dedent(code))
    return str(f)


def snapshot(d):
    """{name: bytes} of a directory's files (to compare a directory before and after)."""
    return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))}


def pick(draw, broken, name, good, bad):
    """A property test's draw of one field: its bad value when it is the one field this
    draw breaks (``broken == name``), else a good one."""
    return draw(bad) if broken == name else draw(good)


def schema_valid(doc, schema):
    """Whether ``doc`` meets ``schema``: a small validator of the JSON Schema features the
    constrained-decoding tests use (no jsonschema dependency)."""
    t = schema.get("type")
    if "enum" in schema:
        return doc in schema["enum"]
    if "const" in schema:
        return doc == schema["const"]
    if t == "object":
        props = schema.get("properties", {})
        return (isinstance(doc, dict) and all(k in doc for k in schema.get("required", ()))
                and (schema.get("additionalProperties", True) or set(doc) <= set(props))
                and all(schema_valid(v, props[k]) for k, v in doc.items() if k in props))
    if t == "array":
        return (isinstance(doc, list) and len(doc) <= schema.get("maxItems", 1 << 30)
                and all(schema_valid(v, schema["items"]) for v in doc))
    if t == "string":
        return isinstance(doc, str) and len(doc) <= schema.get("maxLength", 1 << 30)
    if t == "integer":
        return (isinstance(doc, int) and not isinstance(doc, bool)
                and schema.get("minimum", -1e300) <= doc <= schema.get("maximum", 1e300))
    if t == "number":
        return isinstance(doc, (int, float)) and not isinstance(doc, bool)
    if t == "boolean":
        return isinstance(doc, bool)
    return True


def same_bits_any_threads(m, ids):
    """``m(ids)`` (a batch of at least two rows), asserted the same bits on 1 and 2 threads
    and for the first row run alone beside the rest; the 1-thread logits returned."""
    before = blockc.get_num_threads()
    try:
        outs = []
        for n in (1, 2):
            blockc.set_num_threads(n)
            outs.append(m(ids))
            one = np.concatenate([m(ids[:1]), m(ids[1:])])
            assert np.array_equal(outs[-1].view(np.uint32), one.view(np.uint32))
        assert np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    finally:
        blockc.set_num_threads(before)
    return outs[0]


def bits(a):
    """``a`` as float32's bit patterns (uint32): for comparing results bit for bit."""
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def in_calls(m, ids, sizes, cache):
    """ids (B, T) through ``cache`` in calls of the given sizes: every position's logits."""
    out, at = [], 0
    for n in sizes:
        out.append(m(ids[:, at:at + n], cache=cache))
        at += n
    assert at == ids.shape[1]
    return np.concatenate(out, axis=1)
