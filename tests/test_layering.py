"""Layers point down: the library never imports the CLI, generic code never imports a method."""
from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import edgekit

ROOT = Path(edgekit.__file__).resolve().parent
MAPPED = ("exporters", "kernels", "profiles")


def _library_modules() -> list[str]:
    """Every module of edgekit except the CLI (``edgekit.cli``, methods' ``cli``, ``__main__``)."""
    names = [m.name for m in pkgutil.walk_packages(edgekit.__path__, "edgekit.")]
    for folder in MAPPED:  # installed into edgekit from top-level folders (README.md, Layout)
        package = importlib.import_module(f"edgekit.{folder}")
        names += [package.__name__] + [
            m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
    return [n for n in names if not (n == "edgekit.cli" or n.startswith("edgekit.cli.")
                                     or n.endswith(".cli") or n.endswith(".__main__"))]


def test_library_never_imports_the_cli() -> None:
    modules = _library_modules()
    assert "edgekit.profiler.run" in modules and "edgekit.exporters.onnx" in modules
    script = ("import importlib, sys\n"
              f"for name in {modules!r}:\n"
              "    importlib.import_module(name)\n"
              "    if 'edgekit.cli' in sys.modules:\n"
              "        sys.exit(f'importing {name} imported edgekit.cli')\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def _imported_modules(path: Path) -> set[str]:
    """Every module an ``import`` or ``from ... import`` statement of ``path`` names."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _source_files() -> list[tuple[str, Path]]:
    """(path relative to edgekit, file) for every source file of the installed package."""
    folders = {f: Path(importlib.import_module(f"edgekit.{f}").__path__[0]) for f in MAPPED}
    files = [(p.relative_to(ROOT).as_posix(), p) for p in ROOT.rglob("*.py")]
    files += [(f"{f}/{p.relative_to(d).as_posix()}", p) for f, d in folders.items()
              for p in d.rglob("*.py")]
    assert len(files) > 50, "the scan found too few source files"
    return sorted(files)


def test_library_source_never_imports_the_cli() -> None:
    """Also the imports inside functions, which importing a module does not run."""
    offenders = [f"{rel}: {name}" for rel, path in _source_files()
                 if not (rel.startswith("cli/") or rel.endswith("/cli.py")
                         or rel == "__main__.py")
                 for name in sorted(_imported_modules(path))
                 if name == "edgekit.cli" or name.startswith("edgekit.cli.")]
    assert not offenders, "library modules import the CLI:\n" + "\n".join(offenders)


def test_generic_code_never_imports_a_method() -> None:
    offenders = []
    for rel, path in _source_files():
        if rel.startswith("methods/"):
            continue
        offenders.extend(f"{rel}: {name}" for name in sorted(_imported_modules(path))
                         if name.startswith("edgekit.methods."))
    assert not offenders, "generic modules import a method:\n" + "\n".join(offenders)


def _module_name(rel: str) -> str:
    """``exporters/tensorrt/build.py`` -> ``edgekit.exporters.tensorrt.build``."""
    parts = ["edgekit", *rel.removesuffix(".py").split("/")]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports: every ``import`` statement, at the top, inside
    functions and under ``TYPE_CHECKING`` alike (a circle only hidden from the first import is
    still a circle), relative ones resolved; ``from package import name`` points at the
    submodule ``name`` where there is one, else at the package."""
    files = {_module_name(rel): (rel, path) for rel, path in _source_files()}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, (rel, path) in files.items():
        package = name if rel.endswith("__init__.py") else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name in files)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                for alias in node.names:
                    if f"{base}.{alias.name}" in files:
                        graph[name].add(f"{base}.{alias.name}")
                    elif base in files:
                        graph[name].add(base)
        graph[name].discard(name)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[tuple[list[str], list[str]]]:
    """Each strongly connected component of more than one module (Tarjan's algorithm) as a
    shortest circle through its first module (``[a, b, c, a]``) and the component's other
    modules, which longer circles pass through."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    circles = []
    for component in sorted(components):
        circle = _shortest_circle(graph, component)
        circles.append((circle, sorted(set(component) - set(circle))))
    return circles


def _shortest_circle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, breadth first."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        for node in frontier:
            if start in graph[node]:
                return [*paths[node], start]
        following = []
        for node in frontier:
            for succ in sorted(graph[node] & members):
                if succ not in paths:
                    paths[succ] = [*paths[node], succ]
                    following.append(succ)
        frontier = following
    raise AssertionError(f"no circle through {start} in {component}")


def test_import_graph_sees_every_kind_of_import() -> None:
    graph = _import_graph()
    assert "edgekit.exporters.tensorrt.shapes" in graph["edgekit.exporters.tensorrt.config"]
    # imported inside a function only
    assert "edgekit.exporters.quantize" in graph["edgekit.exporters.artifact_validation"]
    assert "edgekit.exporters.options" in graph["edgekit.exporters.registry"]  # TYPE_CHECKING
    assert "edgekit.backends.tensorrt_runner" in graph["edgekit.exporters.tensorrt.build"]
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}) == [
        (["a", "b", "c", "a"], [])]
    assert _circles({"a": {"b", "c"}, "b": {"a"}, "c": {"b"}, "d": {"e"}, "e": {"d"}}) == [
        (["a", "b", "a"], ["c"]), (["d", "e", "d"], [])]


def test_no_import_circles() -> None:
    """Modules import each other one way: a circle means a shared piece lives in the wrong
    module (move it down into one both import) or a factory sits beside its base class."""
    circles = _circles(_import_graph())
    assert not circles, "import circles in the package:\n" + "\n".join(
        " -> ".join(circle) + (f" (and through {', '.join(others)})" if others else "")
        for circle, others in circles)
