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
- the C library's layers (csrc/, issue 48): every folder of csrc/ is one of build_ffi.py's
  LAYERS, and each .c/.h file's arrows (the headers it #includes, the files defining the
  bc_* functions it calls, in its code or its macros) point to its own folder or a lower
  layer, lowest first in LAYERS' order; and no circle among the files along those arrows.
"""
import ast
import os
import re
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


# ---- the C library's layers (csrc/) ------------------------------------------------------

def c_layers():
    """build_ffi.py's LAYERS, read without running build_ffi (it needs a compiler)."""
    tree = ast.parse(open(os.path.join(ROOT, "build_ffi.py"), encoding="utf-8").read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "LAYERS" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise SystemExit("build_ffi.py: no LAYERS")


def c_code(text):
    """text without comments, string and character literals (kept: #include's names),
    line continuations joined."""
    text = text.replace("\\\n", " ")
    pattern = re.compile(r'(/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\')', re.S)

    def blank(m):
        t = m.group(0)
        if t.startswith("/"):
            return " " if t.startswith("//") else re.sub(r"[^\n]", " ", t)
        return t if t.startswith('"') else "0"  # an #include's "name" is kept; others never hold bc_ calls
    return pattern.sub(blank, text)


_CALL = re.compile(r"\b(bc_[a-z0-9_]+)\s*\(")


def c_scan(code):
    """(includes, definitions, calls) of one file's code: the "..." headers it includes,
    the bc_* functions it defines (a body follows), the bc_* names it calls."""
    includes = re.findall(r'^\s*#\s*include\s+"([^"]+)"', code, flags=re.M)
    calls, defs = set(), set()
    body, cplusplus = [], 0
    for line in code.splitlines():
        if cplusplus:  # C++'s extern "C" braces: never C
            cplusplus += 1 if re.match(r"\s*#\s*if", line) else -1 if re.match(r"\s*#\s*endif", line) else 0
            body.append("")
            continue
        if re.match(r"\s*#\s*ifdef\s+__cplusplus\b", line):
            cplusplus = 1
            body.append("")
            continue
        m = re.match(r"\s*#\s*define\s+\w+(\([^)]*\))?(.*)", line)
        if m:
            calls.update(_CALL.findall(m.group(2)))  # a macro's calls are its users' calls
            body.append("")
        else:
            body.append("" if line.lstrip().startswith("#") else line)
    body = "\n".join(body)
    depth, i = 0, 0
    for m in re.finditer(r"[{}]|\b(bc_[a-z0-9_]+)\s*\(", body):
        if m.group(0) == "{":
            depth += 1
        elif m.group(0) == "}":
            depth -= 1
        elif depth > 0:
            calls.add(m.group(1))
        else:  # at file level: a definition when a body follows its parameters
            j, nest = m.end(), 1
            while j < len(body) and nest:
                nest += {"(": 1, ")": -1}.get(body[j], 0)
                j += 1
            if body[j:].lstrip().startswith("{"):
                defs.add(m.group(1))
    return includes, defs, calls


def c_report():
    layers = c_layers()
    csrc = os.path.join(ROOT, "csrc")
    if not os.path.isdir(csrc):
        return [], [], []
    strays = sorted(d for d in os.listdir(csrc) if os.path.isdir(os.path.join(csrc, d))
                    and d not in layers)
    files = {}
    for layer in layers:
        d = os.path.join(csrc, layer)
        for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if f.endswith((".c", ".h")):
                files[f"{layer}/{f}"] = c_scan(c_code(open(os.path.join(d, f), encoding="utf-8").read()))
    defined = defaultdict(set)
    for f, (_, defs, _) in files.items():
        for name in defs:
            defined[name].add(f)

    def header(f, name):  # "name" from f: f's own folder first, then the include path (LAYERS)
        for layer in [f.split("/")[0]] + layers:
            if f"{layer}/{name}" in files:
                return f"{layer}/{name}"
        return None

    arrows = defaultdict(dict)  # file -> {file it depends on: why}
    for f, (includes, defs, calls) in files.items():
        for name in includes:
            h = header(f, name)
            if h and h != f:
                arrows[f].setdefault(h, f'#include "{name}"')
        for name in sorted(calls - defs):
            for g in sorted(defined.get(name, ())):
                if g != f:
                    arrows[f].setdefault(g, f"{name}()")
    rank = {layer: i for i, layer in enumerate(layers)}
    upward = [f"csrc/{f} -> csrc/{g} ({why})" for f in sorted(arrows)
              for g, why in sorted(arrows[f].items())
              if rank[g.split("/")[0]] > rank[f.split("/")[0]]]
    # circles: strongly connected components of the arrows (Tarjan, iterative)
    idx, lowl, st, on, circles = {}, {}, [], set(), []
    for root in files:
        if root in idx:
            continue
        work = [(root, iter(sorted(arrows[root])))]
        idx[root] = lowl[root] = len(idx)
        st.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in idx:
                    idx[w] = lowl[w] = len(idx)
                    st.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(arrows[w]))))
                elif w in on:
                    lowl[v] = min(lowl[v], idx[w])
                continue
            work.pop()
            if work:
                lowl[work[-1][0]] = min(lowl[work[-1][0]], lowl[v])
            if lowl[v] == idx[v]:
                comp = []
                while True:
                    w = st.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    circles.append(" <-> ".join(f"csrc/{c}" for c in sorted(comp)))
    return strays, upward, circles


c_strays, c_upward, c_circles = c_report()
print(f"C folders not in build_ffi.LAYERS: {len(c_strays)}")
for r in c_strays:
    print("    csrc/" + r)
print(f"C arrows to a higher layer: {len(c_upward)}")
for r in c_upward:
    print("   ", r)
print(f"C file circles: {len(c_circles)}")
for r in c_circles:
    print("   ", r)
