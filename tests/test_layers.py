"""The import rule of docs/architecture.md, read from the source: front ends -> kinds -> steps -> results -> runtime ->
leaves, never upward (a generic step reaches a kind only through the registry's dotted rows), and no import cycle
anywhere (imports inside functions count; ``if TYPE_CHECKING:`` blocks do not, they never run)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "onnx_nb"

LEAVES = {"errors", "render", "progress"}
ORDER = ["leaves", "runtime", "results", "steps", "kinds", "front ends"]
FOLDERS = {"runtime": "runtime", "results": "results", "steps": "steps", "kinds": "kinds", "frontends": "front ends"}


def layer(module: str) -> str:
    """The folder says the layer (the package itself, with its lazy name table and ``python -m``: a front end)."""
    if module in LEAVES:
        return "leaves"
    if module in ("", "__main__"):
        return "front ends"
    return FOLDERS[module.split(".")[0]]


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node, except what sits under ``if TYPE_CHECKING:``."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
            continue
        out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def imports() -> dict[str, set[str]]:
    """Module -> the onnx_nb modules it imports (relative to the package, "" for the package itself)."""
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        package = [p for p in package if p]
        deps: set[str] = set()
        for node in _runtime_nodes(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[:len(package) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                elif (node.module or "").startswith("onnx_nb"):
                    target = (node.module or "").removeprefix("onnx_nb").lstrip(".")
                else:
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}".lstrip(".")
                    targets.append(sub if sub in known else target)
            elif isinstance(node, ast.Import):
                targets = [a.name.removeprefix("onnx_nb").lstrip(".") for a in node.names
                           if a.name.split(".")[0] == "onnx_nb"]
            deps.update(t for t in targets if t in known and t != name)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_reader_sees_the_imports() -> None:
    graph = imports()
    assert {"errors", "runtime.sessions", "steps.plan", "results.parity", "steps.parity.check"} <= set(graph)
    assert {"runtime.providers", "runtime.isolation"} <= graph["runtime.sessions"]  # function-level imports count
    assert {layer(m) for m in graph} == set(ORDER), "every module sits in a layer's folder"
    assert "results.parity" not in graph["results.parity_view"]  # under TYPE_CHECKING: does not count
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = [f"{m} ({layer(m)}) imports {d} ({layer(d)})" for m, deps in imports().items() for d in sorted(deps)
              if ORDER.index(layer(d)) > ORDER.index(layer(m))]
    assert not upward, "\n".join(upward)


def test_no_import_cycle() -> None:
    assert cycles(imports()) == []


def private_imports(root: Path) -> list[str]:
    """``from <an onnx_nb module> import _name`` anywhere under ``root`` (tests too): a name a module keeps to itself,
    taken by another (dunders such as ``__version__`` are public)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("onnx_nb")):
                found += [f"{path.relative_to(root.parent)}:{node.lineno} imports {alias.name} from "
                          f"{'.' * node.level}{node.module or ''}" for alias in node.names
                          if alias.name.startswith("_") and not alias.name.startswith("__")]
    return found


def test_no_module_takes_another_modules_private_name() -> None:
    found = private_imports(PACKAGE) + private_imports(PACKAGE.parent / "tests")
    assert not found, "\n".join(found)


def test_export_imports_no_later_step() -> None:
    """Within the steps, export comes first: it never reaches into generation, parity, variants or latency (what they
    share with it lives below, in runtime/)."""
    later = ("steps.generate", "steps.parity", "steps.variants", "steps.benchmark")
    found = [f"{m} imports {d}" for m, deps in imports().items() if m.startswith("steps.export")
             for d in sorted(deps) if d.startswith(later)]
    assert not found, "\n".join(found)


def test_the_registry_names_every_kind_it_reaches() -> None:
    """The registry's dotted rows are the steps' only way to a kind: each names something that exists, every kind's
    package is reached through a row, and no module outside kinds/ names a kind's package."""
    from onnx_nb.steps.export.adapters import registry

    rows = list(registry.ROWS) + [getattr(shape, part) for shape in registry.SHAPES.values()
                                     for part in ("parity", "wrapper", "timing", "loop", "runner", "export")
                                     if getattr(shape, part)]
    for row in rows:
        assert registry.named(row) is not None, row
    kinds = {p.name for p in (PACKAGE / "kinds").iterdir() if (p / "__init__.py").exists()}
    reached = {row.split(":")[0].split(".")[2] for row in rows if row.startswith("onnx_nb.kinds.")}
    assert kinds and kinds == reached, f"kinds without a row: {kinds - reached}"
    naming = [f"{path.relative_to(PACKAGE)}:{node.lineno}" for path in sorted(PACKAGE.rglob("*.py"))
              if not path.is_relative_to(PACKAGE / "kinds") and path != PACKAGE / "steps/export/adapters/registry.py"
              and path != PACKAGE / "__init__.py" for node in _code_strings(ast.parse(path.read_text()))
              if "onnx_nb.kinds" in node.value]
    assert not naming, naming
    # the guard sees what it guards: a string in code counts, a docstring pointing to a kind does not
    assert [n.value for n in _code_strings(ast.parse('"""See onnx_nb.kinds."""\nrow = "onnx_nb.kinds.vlm:X"'))] == [
        "onnx_nb.kinds.vlm:X"]


def _code_strings(tree: ast.AST) -> list[ast.Constant]:
    """The string constants of a module's code (its docstrings, which may point a reader to a kind, left out)."""
    docs = {id(body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and (body := node.body) and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)}
    return [node for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs]
