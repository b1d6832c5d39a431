"""The package's structure (issues 18 and 48), counted by tests/support/structure.py (also a
command: python tests/support/structure.py .):

- no import cycle between blockc's modules (module level or inside functions), and no
  module of blockc/ reaching into another's private attributes;
- at most 8 modules at the top of blockc/ besides __init__/__main__ (the rest in folders
  named for the part they are), none over 700 lines;
- a blockc module imported inside a function only where the import waits for an optional
  extra (:data:`LOCAL_IMPORTS_ALLOWED`, each entry naming it);
- no import cycle between blockc's folders (a folder one node with everything under it);
- blockc/model/ (the model core) imports nothing of checkpoint/, generation/ or reference/
  (the oracle): those are built on the core, not the core on them.
"""
import functools
"""The package's structure (issue 18): no import cycle in blockc/ (module level or inside
functions), and no module of blockc/ reaching into another's private attributes; and the C
library's (issue 48): every file of csrc/ includes and calls only its own layer and lower
ones (build_ffi.py's LAYERS), no files include or call each other round. Counted by
tests/support/structure.py (also a command: python tests/support/structure.py .)."""
import os
import subprocess
import sys


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MAX_TOP_MODULES = 8
MAX_LINES = 700

#: (importing module, imported module) -> the optional extra the function-local import
#: waits for; any other function-local import of a blockc module fails the test (move it to
#: module level; if that makes a cycle, the modules' parts are in the wrong places)
LOCAL_IMPORTS_ALLOWED = {}


@functools.lru_cache(maxsize=None)
def _report():
    """The report's lines (counted once per session: every test reads the same tree)."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "support", "structure.py"), ROOT],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return tuple(r.stdout.splitlines())


def _section(out, heading):
    """(the count after ``heading: ``, the indented lines under it)."""
    i = next(i for i, line in enumerate(out) if line.startswith(heading + ": "))
    n = int(out[i].split(": ")[-1].split(";")[0])
    rows = []
    for line in out[i + 1:]:
        if not line.startswith("    "):
            break
        rows.append(line.strip())
    return n, rows


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


#: the parts of blockc above the book's block, which the model core builds on
#: (GPTConfig.from_block): the block imports none of them (the oracle's ggml type table,
#: blockc.reference.ggml.TYPES, is pure facts below everything: block/packed.py sizes a
#: GGUF tensor's blocks by it, as the C library checks them)
_ABOVE_BLOCK = ("model", "checkpoint", "generation", "gpt", "train", "serve", "cli",
                "text", "io", "hf", "gguf", "families")
_BLOCK_MAY = {"blockc.reference.ggml.TYPES"}


def test_the_block_imports_no_model_or_anything_above_it():
    """Arrows point down (issue 48): blockc/block/ imports no model, checkpoint,
    generation or oracle module (model/'s own rule is the test below)."""
    top = os.path.join(ROOT, "blockc", "block")
    bad = []
    for fn in sorted(os.listdir(top)):
        if fn.endswith(".py"):
            for mod in sorted(_blockc_imports(os.path.join(top, fn))):
                if mod.split(".")[1] in _ABOVE_BLOCK or (
                        mod.split(".")[1] == "reference" and mod not in _BLOCK_MAY):
                    bad.append(f"blockc/block/{fn}: {mod}")
    assert bad == []


def test_at_most_eight_modules_at_the_top_of_blockc():
    n, modules = _section(_report(), "modules at the top of blockc/ besides __init__/__main__")
    assert n == len(modules) and n >= 1  # the count and the list agree, and it saw the tree
    assert n <= MAX_TOP_MODULES, modules


def test_no_module_of_blockc_over_700_lines():
    n, modules = _section(_report(), "modules over 700 lines")
    assert n == len(modules)
    assert modules == [], modules


def test_function_local_imports_of_blockc_modules_only_for_an_optional_extra():
    _, rows = _section(_report(), "function-local imports")
    found = set()
    for row in rows:  # "blockc.x:LINE -> blockc.y, blockc.z"
        where, targets = row.split(" -> ")
        found |= {(where.split(":")[0], t) for t in targets.split(", ")}
    assert all(extra.strip() for extra in LOCAL_IMPORTS_ALLOWED.values())
    unexplained = sorted(row for row in rows if any(
        (row.split(":")[0], t) not in LOCAL_IMPORTS_ALLOWED
        for t in row.split(" -> ")[1].split(", ")))
    assert unexplained == [], unexplained
    stale = sorted(set(LOCAL_IMPORTS_ALLOWED) - found)  # an entry no longer needed goes
    assert stale == [], stale


def test_no_import_cycle_between_the_folders_of_blockc():
    out = _report()
    n, rows = _section(out, "import cycles between folders")
    assert n == 0, "\n".join(rows)


def test_model_imports_no_checkpoint_generation_or_oracle_module():
    n, rows = _section(_report(), "model/ imports of checkpoint/, generation/, reference/")
    assert n == len(rows)
    assert rows == [], rows
def test_c_layers_point_down_without_circles():
    out = _report()
    c = out[next(i for i, x in enumerate(out) if x.startswith("C folders")):]
    for line in ("C folders not in build_ffi.LAYERS: 0", "C arrows to a higher layer: 0",
                 "C file circles: 0"):
        assert line in c, "\n".join(c)
