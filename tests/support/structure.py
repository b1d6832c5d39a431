"""Structure counts of a blockc tree (issue 18): ``python tests/support/structure.py ROOT``.

- the largest module (lines) and the largest class (lines, end - start + 1);
- import cycles among blockc's modules: every explicit import, at module level or
  inside a function (`from . import x` / `from .x import y` resolved to modules;
  the implicit import of a parent package is not an edge), strongly connected
  components of more than one module;
- private-attribute reaches: `X._name` (one leading underscore) where X is not
  self/cls and `_name` is not defined in the same file (as a def, a class, an
  assignment `self._name = ...`, a slot or a keyword); in blockc/, tests/, benches/;
- function-local imports: import statements inside a def, and those of them that
  import a blockc module (the ones that can dodge a cycle);
- (issue 48) the modules at the top of blockc/ besides __init__/__main__, the modules over
  700 lines, import cycles between blockc's folders (each folder one node with everything
  under it, each top-level module its own node; the imports above, module level and
  inside functions), and what blockc/model/ imports of checkpoint/, generation/ or
  reference/ (the oracle).
"""
import ast
import os
import sys
from collections import defaultdict

ROOT = sys.argv[1] if len(sys.argv) > 1 else "."
PKG = os.path.join(ROOT, "blockc")
STDLIB_PRIVATE = {"_replace", "_asdict", "_fields", "_exit", "_getframe", "_make", "_field_defaults"}


def py_files(top):
    for d, dirs, files in os.walk(top):
        dirs[:] = [x for x in dirs if x not in ("__pycache__",)]
        for f in sorted(files):
            if f.endswith(".py"):
                yield os.path.join(d, f)


def modname(path):
    rel = os.path.relpath(path, ROOT)[:-3].split(os.sep)
    if rel[-1] == "__init__":
        rel = rel[:-1]
    return ".".join(rel)


modules = {modname(p): p for p in py_files(PKG)}


def is_pkg(name):
    return modules.get(name, "").endswith("__init__.py")


def resolve(cur, node):
    """Modules an import node names (blockc's only)."""
    out = []
    if isinstance(node, ast.Import):
        for a in node.names:
            if a.name.split(".")[0] == "blockc":
                out.append(a.name)
        return out
    if node.level:
        base = cur.split(".") if is_pkg(cur) else cur.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        mod = ".".join(base + ([node.module] if node.module else []))
    else:
        mod = node.module or ""
        if mod.split(".")[0] != "blockc":
            return out
    for a in node.names:
        sub = f"{mod}.{a.name}"
        out.append(sub if sub in modules else mod)
    return out


graph = defaultdict(set)
edges = []  # (importer, imported module, line)
local_imports, local_blockc = [], []
largest_mod, largest_cls = ("", 0), ("", 0)
for name, path in modules.items():
    src = open(path, encoding="utf-8").read()
    tree = ast.parse(src)
    n = len(src.splitlines())
    if n > largest_mod[1]:
        largest_mod = (name, n)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            size = node.end_lineno - node.lineno + 1
            if size > largest_cls[1]:
                largest_cls = (f"{name}.{node.name}", size)
    funcs = [f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    inner = {id(x) for f in funcs for x in ast.walk(f) if isinstance(x, (ast.Import, ast.ImportFrom))}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            targets = [t for t in resolve(name, node) if t in modules and t != name]
            for t in targets:
                graph[name].add(t)
                edges.append((name, t, node.lineno))
            if id(node) in inner:
                local_imports.append(f"{name}:{node.lineno}")
                if targets:
                    local_blockc.append(f"{name}:{node.lineno} -> {', '.join(sorted(set(targets)))}")

# strongly connected components (Tarjan)
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]


def strong(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in graph[v]:
        if w not in index:
            strong(w)
            low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop()
            on.discard(w)
            comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            sccs.append(sorted(comp))


sys.setrecursionlimit(10000)
for v in list(modules):
    if v not in index:
        strong(v)
module_sccs = sccs


def folder(mod):
    """The node of ``mod`` in the folder graph: blockc.X for everything under a folder X of
    blockc/, the module itself for a module at the top (and the package blockc)."""
    parts = mod.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and is_pkg(".".join(parts[:2])) else mod


module_graph = graph
graph = defaultdict(set)
for a, b, _ in edges:
    if folder(a) != folder(b):
        graph[folder(a)].add(folder(b))
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
for v in sorted({folder(m) for m in modules}):
    if v not in index:
        strong(v)
folder_sccs, sccs = sccs, module_sccs
folder_paths = []  # one import line per edge inside a folder cycle, to show where it is
for comp in folder_sccs:
    for a, b, line in sorted(set(edges)):
        if folder(a) in comp and folder(b) in comp and folder(a) != folder(b):
            folder_paths.append(f"{a}:{line} -> {b}")

top_modules = sorted(m for m in modules if m.count(".") == 1 and m not in ("blockc.__main__",))
top_modules = [m for m in top_modules if not is_pkg(m)]
long_modules = sorted((n, m) for m, n in ((m, len(open(p, encoding="utf-8").read().splitlines()))
                                          for m, p in modules.items()) if n > 700)
FORBIDDEN_FOR_MODEL = ("blockc.checkpoint", "blockc.generation", "blockc.reference")
model_imports = sorted(f"{a}:{line} -> {b}" for a, b, line in set(edges)
                       if folder(a) == "blockc.model" and folder(b) in FORBIDDEN_FOR_MODEL)


def defined_names(tree):
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
            out.update(a.arg for a in node.args.args + node.args.kwonlyargs) if not isinstance(
                node, ast.ClassDef) else None
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                node.value.startswith("_"):
            out.add(node.value)  # __slots__ entries
    return out


reaches = []
for top in ("blockc", "tests", "benches"):
    for path in py_files(os.path.join(ROOT, top)):
        tree = ast.parse(open(path, encoding="utf-8").read())
        own = defined_names(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and not node.attr.startswith("__") and node.attr not in STDLIB_PRIVATE
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                    and node.attr not in own):
                reaches.append(f"{os.path.relpath(path, ROOT)}:{node.lineno} .{node.attr}")

print(f"modules in blockc/: {len(modules)}")
print(f"largest module: {largest_mod[0]} ({largest_mod[1]} lines)")
print(f"largest class: {largest_cls[0]} ({largest_cls[1]} lines)")
print(f"import cycles (SCCs of > 1 module): {len(sccs)}")
for c in sccs:
    print("   ", " <-> ".join(c))
print(f"private-attribute reaches across modules: {len(reaches)}")
for r in reaches:
    print("   ", r)
print(f"function-local imports: {len(local_imports)}; of a blockc module: {len(local_blockc)}")
for r in local_blockc:
    print("   ", r)
print(f"modules at the top of blockc/ besides __init__/__main__: {len(top_modules)}")
for m in top_modules:
    print("   ", m)
print(f"modules over 700 lines: {len(long_modules)}")
for n, m in reversed(long_modules):
    print(f"    {m} ({n} lines)")
print(f"import cycles between folders: {len(folder_sccs)}")
for c in folder_sccs:
    print("   ", " <-> ".join(sorted(c)))
for r in folder_paths:
    print("       ", r)
print(f"model/ imports of checkpoint/, generation/, reference/: {len(model_imports)}")
for r in model_imports:
    print("   ", r)
