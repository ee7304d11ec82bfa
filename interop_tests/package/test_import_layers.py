"""The layering of the Python sources (docs/architecture.md, "Layout and dependency direction"): `bridge`
never imports `dsl`, and no module of either package reaches itself through imports.

Every import statement counts, wherever it stands: one inside a function or under TYPE_CHECKING is the
same dependency as one at the top of the file. The edges are read from the sources (nothing is
imported), one per (module, module it names): `from pkg import name` is an edge to `pkg.name` when that
is a module, else to `pkg` (its __init__.py); the parent packages that Python initialises on the way
are not edges of their own. The compiled extensions are not in the source tree and import nothing back.
"""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("bridge", "dsl")
EXTENSIONS = {"bridge._native", "dsl.integrations._jax_ffi"}


def _modules() -> dict[str, Path]:
    """Dotted module name -> source file, for every .py file of the packages."""
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _targets(node: ast.Import | ast.ImportFrom, name: str, path: Path, modules: dict[str, Path]) -> list[str]:
    """The project modules one import statement of module `name` depends on."""
    if isinstance(node, ast.Import):
        candidates = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
            package = package[:len(package) - (node.level - 1)]
            base = ".".join(package + ([node.module] if node.module else []))
        known = modules.keys() | EXTENSIONS
        candidates = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    found = []
    for target in candidates:
        if target in EXTENSIONS:
            continue
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.append(target)
    return found


def _graph() -> dict[str, dict[str, int]]:
    """module -> {imported module: line of the first import of it}."""
    modules = _modules()
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(node, name, path, modules):
                    edges.setdefault(target, node.lineno)
        graph[name] = edges
    return graph


def _circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(graph[w])))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_runtime_never_imports_the_dsl():
    graph = _graph()
    bad = [f"{m} -> {t} (line {line})" for m, edges in graph.items() if m.split(".")[0] == "bridge"
           for t, line in edges.items() if t.split(".")[0] == "dsl"]
    assert not bad, "bridge imports dsl: " + "; ".join(bad)


def test_no_module_reaches_itself_through_imports():
    graph = _graph()
    described = []
    for component in _circles(graph):
        inside = set(component)
        edges = [f"{m} -> {t} (line {graph[m][t]})" for m in component for t in graph[m] if t in inside]
        described.append(f"{len(component)} modules: " + "; ".join(edges))
    assert not described, "import circles:\n" + "\n".join(described)


SIMULATOR = ("dsl.sim", "dsl.tile.sim", "dsl.tile.ptx.sm80", "dsl.tile.ptx.sm90")


def test_the_tile_lowering_never_imports_the_simulator():
    """dsl/tile/lower/ emits PTX through the table (dsl/tile/ptx/table.py), which names each row's CPU
    semantics instead of importing them: the lowering reaches no simulator module, directly or not."""
    graph = _graph()
    lowering = [m for m in graph if m == "dsl.tile.lower" or m.startswith("dsl.tile.lower.")]
    lowering.append("dsl.tile.ptx.table")
    assert len(lowering) > 10, lowering
    seen, todo, bad = set(lowering), list(lowering), []
    while todo:
        m = todo.pop()
        for t in graph[m]:
            if any(t == s or t.startswith(s + ".") for s in SIMULATOR):
                bad.append(f"{m} -> {t} (line {graph[m][t]})")
            elif t not in seen and t.startswith("dsl."):
                seen.add(t)
                todo.append(t)
    assert not bad, "the tile lowering reaches the simulator: " + "; ".join(bad)


def test_the_reader_sees_the_imports_it_must_see():
    """A self-check, so an empty graph cannot pass the two tests above."""
    graph = _graph()
    assert "bridge.device" in graph["bridge.stream"]                  # from bridge.device import ...
    assert "bridge.memory" in graph["bridge.array"]                   # from bridge import memory
    assert "bridge" not in graph["bridge.array"]                      # from bridge import _native (extension)
    assert "dsl.frontend" in graph["dsl.simt.kernel"]                 # inside a method
    assert "dsl.backend.inspect" in graph["dsl.simt.kernel"]          # under TYPE_CHECKING
    assert "dsl.frontend.typing_rules" in graph["dsl.frontend.calls"]  # from dsl.frontend import typing_rules
    assert _circles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]
