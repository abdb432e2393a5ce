"""Layers point down: the library never imports the CLI, generic code never imports a method."""
from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import edgekit

ROOT = Path(edgekit.__file__).resolve().parent
# The dataset registry (another branch of issue "One house") removes this import of the WiFi
# simulator from the generic dataset loader; until then it is the one known exception.
KNOWN_METHOD_IMPORTS = {"data.py": {"edgekit.methods.wifi_mamba.dataset"}}


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


def test_generic_code_never_imports_a_method() -> None:
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("methods/"):
            continue
        for name in sorted(_imported_modules(path)):
            known = KNOWN_METHOD_IMPORTS.get(rel, set())
            if name.startswith("edgekit.methods.") and not any(
                    name == k or name.startswith(k + ".") for k in known):
                offenders.append(f"{rel}: {name}")
    assert not offenders, "generic modules import a method:\n" + "\n".join(offenders)
