"""The package's structure (issue 18): no import cycle in blockc/ (module level or inside
functions), and no module of blockc/ reaching into another's private attributes; counted
by tests/support/structure.py (also a command: python tests/support/structure.py .)."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _report():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "support", "structure.py"), ROOT],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_no_import_cycle_and_no_private_reach_inside_blockc():
    out = _report()
    assert "import cycles (SCCs of > 1 module): 0" in out, "\n".join(out)
    reaches = [line.strip() for line in out if line.strip().startswith("blockc/")]
    assert reaches == [], reaches


def _blockc_imports(path):
    """The blockc modules a file imports (module level or in a function; relative imports
    resolved against its package)."""
    import ast
    rel = os.path.relpath(path, ROOT)[:-3].split(os.sep)
    pkg = rel[:-1] if rel[-1] != "__init__" else rel[:-1]
    out = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "blockc"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[:len(pkg) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] == "blockc":
                out |= {f"{mod}.{a.name}" for a in node.names}
    return out


#: model/ modules another change removes (issue 48: the weight formats' branch deletes
#: model/panels.py, which reads blocks through the NumPy oracle)
_MODEL_PENDING = {"panels.py"}


#: folder of blockc -> the top-level parts of blockc it must not import (they sit above it)
_BELOW = {
    # the model core: neither the checkpoints, nor generation, nor the oracle (they import it)
    "model": ("checkpoint", "generation", "reference", "gpt", "train", "serve", "cli", "hf",
              "gguf", "families", "text"),
    # the book's block, which the model core builds on (GPTConfig.from_block)
    "block": ("model", "checkpoint", "generation", "reference", "gpt", "train", "serve", "cli",
              "hf", "gguf", "families", "text"),
}


@pytest.mark.parametrize("folder", sorted(_BELOW))
def test_the_model_core_imports_no_checkpoint_generation_or_reference_module(folder):
    """Arrows point down (issue 48): blockc/model/ (the model core) imports neither the
    checkpoints, nor generation, nor the oracle; the block below it imports no model."""
    top = os.path.join(ROOT, "blockc", folder)
    bad = []
    for fn in sorted(os.listdir(top)):
        if not fn.endswith(".py") or (folder == "model" and fn in _MODEL_PENDING):
            continue
        for mod in sorted(_blockc_imports(os.path.join(top, fn))):
            if mod.split(".")[1] in _BELOW[folder]:
                bad.append(f"blockc/{folder}/{fn}: {mod}")
    assert bad == []
