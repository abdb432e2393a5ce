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
