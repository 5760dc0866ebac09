"""The modules of the `weft` package import each other without a circle (issue 46, item 1): the graph of
python/weft/*.py's imports, function-level ones included (an import inside a function is how a circle hides:
it runs later, so Python does not fail, but the two modules still need each other), is acyclic.

The graph is read from the sources with `ast`, not from sys.modules: an import that only runs inside a
function is an edge too. `from . import name` is an edge to the submodule `name` when there is one, else to the
package itself (weft/__init__.py, which imports nearly everything: a module reaching back to it closes a
circle). Only python/weft/*.py is checked; the weft.popxl subpackage is outside this test.
"""
import ast
import pathlib

import pytest

import weft

from conftest import ROOT

PACKAGE = ROOT / "python" / "weft"


def module_name(path, package_dir, package):
    """weft/_jit.py -> 'weft._jit'; weft/__init__.py -> 'weft'."""
    return package if path.name == "__init__.py" else f"{package}.{path.stem}"


def import_edges(package_dir, package="weft", built=()):
    """{importer: {imported: [(file, line, where)]}} over package_dir/*.py, where `where` is 'top level' or
    'in a function' (or a class body); imports of modules outside the package are left out. `built`: the
    package's modules that have no source there (the extension, the generated _version): `from . import _weft`
    names a module, not the package."""
    files = sorted(pathlib.Path(package_dir).glob("*.py"))
    modules = {module_name(f, package_dir, package) for f in files}
    submodules = modules | {f"{package}.{name}" for name in built}
    edges = {}
    for f in files:
        me = module_name(f, package_dir, package)
        tree = ast.parse(f.read_text(), str(f))
        nested = {id(n) for scope in ast.walk(tree) if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                         ast.ClassDef, ast.Lambda))
                  for n in ast.walk(scope) if n is not scope}
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level > 1:
                    continue  # (no deeper package in python/weft/*.py)
                base = package if node.level == 1 else ""
                if node.module:
                    base = f"{base}.{node.module}" if base else node.module
                # `from <base> import name`: the submodule base.name when there is one, else base itself
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in submodules else base for a in node.names]
            for target in targets:
                if target in modules and target != me:
                    where = "in a function" if id(node) in nested else "top level"
                    edges.setdefault(me, {}).setdefault(target, []).append((f.name, node.lineno, where))
    return edges


def components(edges):
    """The strongly connected components of more than one module (Tarjan's algorithm): each a set of modules
    that all reach each other through imports."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(set(component))

    for v in sorted(set(edges) | {w for targets in edges.values() for w in targets}):
        if v not in index:
            visit(v)
    return found


def cycles(edges):
    """One circle per strongly connected component, as the list of its modules in import order, the first
    repeated at the end; sorted."""
    return sorted(_circle_in(edges, c) for c in components(edges))


def _circle_in(edges, component):
    """A circle through the smallest module of a strongly connected component (a path back to it)."""
    start = min(component)
    path, seen = [start], {start}

    def walk(v):
        for w in sorted(edges.get(v, {})):
            if w == start:
                return True
            if w in component and w not in seen:
                seen.add(w)
                path.append(w)
                if walk(w):
                    return True
                path.pop()
        return False

    walk(start)
    return path + [start]


def describe(edges, circle):
    """'weft._jit -> weft._shard_map (_jit.py:199, in a function) -> weft._jit (_shard_map.py:31, top level)'."""
    text = circle[0]
    for a, b in zip(circle, circle[1:]):
        file, line, where = edges[a][b][0]
        text += f" -> {b} ({file}:{line}, {where})"
    return text


# ---- the checker itself, on small packages whose circles are known --------------------------------------------

CHECKER_CASES = [
    # (files of the package, the circles expected)
    ({"a.py": "from . import b\n", "b.py": "import os\n"}, []),
    ({"a.py": "from . import b\n", "b.py": "from . import a\n"}, [["p.a", "p.b", "p.a"]]),
    # the circle that only a function-level import closes
    ({"a.py": "from .b import f\n", "b.py": "def f():\n    from .a import g\n    return g\n"},
     [["p.a", "p.b", "p.a"]]),
    # a name taken from the package (its __init__), which imports the module: a circle through the package
    ({"__init__.py": "from .a import f\nbfloat16 = 1\n", "a.py": "def f():\n    from . import bfloat16\n"},
     [["p", "p.a", "p"]]),
    # a submodule named in `from . import`, and absolute imports of the package's modules
    ({"__init__.py": "from . import a\n", "a.py": "import p.b\n", "b.py": "from p import c\n", "c.py": "x = 1\n"}, []),
    ({"a.py": "import p.b\n", "b.py": "from p.c import x\n", "c.py": "class C:\n    def m(self):\n        import p.a\n"},
     [["p.a", "p.b", "p.c", "p.a"]]),
    # two separate circles
    ({"a.py": "from . import b\n", "b.py": "from . import a\n", "c.py": "from . import d\n", "d.py": "from . import c\n"},
     [["p.a", "p.b", "p.a"], ["p.c", "p.d", "p.c"]]),
]


@pytest.mark.parametrize("files, expected", CHECKER_CASES)
def test_the_checker_finds_exactly_the_known_circles(tmp_path, files, expected):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert cycles(import_edges(tmp_path, "p")) == expected


def test_the_checker_says_where_a_circle_closes(tmp_path):
    (tmp_path / "a.py").write_text("from .b import f\n")
    (tmp_path / "b.py").write_text("import os\n\n\ndef f():\n    from .a import g\n")
    edges = import_edges(tmp_path, "p")
    assert [describe(edges, c) for c in cycles(edges)] == [
        "p.a -> p.b (a.py:1, top level) -> p.a (b.py:5, in a function)"]


# ---- the weft package ------------------------------------------------------------------------------------------

def weft_edges():
    """The graph of python/weft/*.py, the built package's other modules (weft/_weft*.so, _version.py, popxl/)
    known as modules."""
    built = {path.name.split(".")[0] for path in pathlib.Path(weft.__file__).parent.iterdir()}
    assert {"_weft", "_version", "popxl"} <= built
    return import_edges(PACKAGE, "weft", built)


def test_the_weft_package_has_no_import_circle():
    edges = weft_edges()
    assert "weft._jit" in edges and "weft.lax" in edges  # (the graph was read)
    found = sorted(components(edges), key=min)
    assert not found, "import circles in python/weft:\n" + "\n".join(
        f"{describe(edges, _circle_in(edges, c))}; modules of this circle and the ones tied to it: {sorted(c)}"
        for c in found)
