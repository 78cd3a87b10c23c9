"""No import circle inside `keras_transformer/`, read from the source with `ast`.

Every import statement counts, at module level or inside a function (a
lazy import in a function body or a module `__getattr__` included): a
deferred import only hides a circle until someone moves the import to the
top, and two modules that need each other cannot be read, tested or moved
one without the other. The layering is one way: a module that re-exports
another's names imports it, and that one does not import it back.

Edges: `import a.b` and `from a.b import c` name module `a.b` (or `a.b.c`,
when `c` is a module of the package); relative imports are resolved. The
packages above an imported module, which Python imports first, are not
edges: a package's `__init__` imports its own modules, and every module
of it imports the package that way.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "keras_transformer"


def module_files(package_dir):
    """{dotted module name: file} of every .py file under `package_dir`."""
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def imported_modules(name, path, modules):
    """{module of `modules` that `name` imports: first line number}, over every import statement of its file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module
                       for alias in node.names]
        else:
            continue
        for target in targets:
            if target in modules and target != name:
                found[target] = min(found.get(target, node.lineno), node.lineno)
    return found


def import_graph(package_dir):
    modules = module_files(package_dir)
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def circles(graph):
    """The strongly connected components of more than one module (Tarjan), each as a sorted list."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def describe(graph, component):
    members = set(component)
    return "; ".join(f"{a} imports {b} (line {line})" for a in component
                     for b, line in sorted(graph[a].items()) if b in members)


def test_no_import_circle_in_the_package():
    graph = import_graph(ROOT / PACKAGE)
    assert len(graph) > 50 and f"{PACKAGE}.run.train" in graph
    # The edges the layering rests on are seen (a reader that saw none would find no circle).
    assert f"{PACKAGE}.run.trained" in graph[f"{PACKAGE}.run.train"]
    assert f"{PACKAGE}.decoding.search" in graph[f"{PACKAGE}.decoding"]
    found = circles(graph)
    assert not found, "import circles: " + " | ".join(describe(graph, c) for c in found)


def test_a_circle_through_a_function_level_import_is_found(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from pkg.a import f\n")
    (package / "a.py").write_text("import os\n\ndef f():\n    from .sub import b\n    return b\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text("from pkg import a  # a module: the edge goes to pkg.a\n")
    (package / "c.py").write_text("import pkg.sub.b\n")
    graph = import_graph(package)
    assert graph == {"pkg": {"pkg.a": 1}, "pkg.a": {"pkg.sub.b": 4}, "pkg.sub": {}, "pkg.sub.b": {"pkg.a": 1},
                     "pkg.c": {"pkg.sub.b": 1}}
    assert circles(graph) == [["pkg.a", "pkg.sub.b"]]
    assert describe(graph, ["pkg.a", "pkg.sub.b"]) == "pkg.a imports pkg.sub.b (line 4); pkg.sub.b imports pkg.a (line 1)"
