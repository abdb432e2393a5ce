"""Packaging: every import is declared, optional ones fail in one line, the wheel holds it all.

These check the house rule "Every import is a declared dependency (optional ones behind a
one-line error); packages are found, not listed; the wheel is tested" on the real tree, the real
pyproject.toml and a real wheel build.
"""
from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
# repository folder -> the package it installs as (setup.py's package-dir mapping)
PACKAGE_FOLDERS = {"edgekit": "edgekit", "exporters": "edgekit.exporters",
                   "kernels": "edgekit.kernels", "profiles": "edgekit.profiles"}
# Import names that differ from their distribution's, of optional libraries not installed here,
# which packages_distributions() cannot map (otherwise the import name is taken, as for tensorrt).
NOT_INSTALLED_HERE = {"pynvml": "nvidia-ml-py"}
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> tuple[set[str], set[str]]:
    """(core distributions, distributions of all extras), canonical names."""
    project = PYPROJECT["project"]
    core = {_canonical(Requirement(r).name) for r in project["dependencies"]}
    extras = {_canonical(Requirement(r).name)
              for reqs in project["optional-dependencies"].values() for r in reqs}
    return core, extras - {"edgekit"}


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """(top-level module, line, imported inside a function) of each absolute import in ``path``,
    including ``importlib.import_module("x")`` and ``require("x", ...)`` of a literal name."""
    tree = ast.parse(path.read_text(), str(path))
    lazy = {id(node) for fn in ast.walk(tree)
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            for node in ast.walk(fn)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", None))
              in ("import_module", "require", "LazyModule")):
            names = [node.args[0].value]
        else:
            continue
        found += [(n.split(".")[0], node.lineno, id(node) in lazy) for n in names]
    return found


def test_every_third_party_import_is_declared_and_optional_ones_are_lazy():
    core, extras = _declared()
    distributions = metadata.packages_distributions()
    problems = []
    for folder in PACKAGE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for module, line, lazy in _imports(path):
                if module in sys.stdlib_module_names or module == "edgekit":
                    continue
                where = f"{path.relative_to(ROOT)}:{line}"
                dists = {_canonical(d) for d in distributions.get(module, [])} or {
                    _canonical(NOT_INSTALLED_HERE.get(module, module))}
                if not dists & (core | extras):
                    problems.append(f"{where}: '{module}' ({', '.join(sorted(dists))}) is not "
                                    f"declared in pyproject.toml")
                elif not dists & core and not lazy:
                    problems.append(f"{where}: '{module}' is optional (an extra) but imported "
                                    f"at module level")
    assert not problems, "\n".join(problems)


def _closure(requirements: list[str]) -> set[str]:
    """Every installed distribution these requirements pull in, transitively (no extras)."""
    env = default_environment()
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = _canonical(req.name)
        if name in seen or (req.marker and not req.marker.evaluate({**env, "extra": ""})):
            continue
        seen.add(name)
        try:
            todo += [Requirement(r) for r in metadata.requires(req.name) or []]
        except metadata.PackageNotFoundError:
            pass  # not installed here: its own requirements are unknown, its name is counted
    return seen


def test_onnx_runtime_is_one_extra_per_build():
    """The CPU and GPU builds share one package folder: the core pulls neither, `gpu` never pulls
    the CPU build, and only `cpu` and `gpu` name one (as optimum's extras do)."""
    project = PYPROJECT["project"]
    ort = {"onnxruntime", "onnxruntime-gpu"}
    assert not _closure(project["dependencies"]) & ort
    by_extra = {extra: {_canonical(Requirement(r).name) for r in reqs}
                for extra, reqs in project["optional-dependencies"].items()}
    assert {extra for extra, names in by_extra.items() if names & ort} == {"cpu", "gpu"}
    assert by_extra["cpu"] & ort == {"onnxruntime"}
    assert by_extra["gpu"] & ort == {"onnxruntime-gpu"}


def test_makefile_installs_the_spikingjelly_that_the_spiking_extra_declares():
    """`make install` installs SpikingJelly with --no-deps from its own spec; both must agree."""
    spec = re.search(r"^SPIKINGJELLY \?= (.+)$", (ROOT / "Makefile").read_text(), re.M)
    declared = [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"]["spiking"]]
    assert spec and Requirement(spec.group(1)).specifier in [
        r.specifier for r in declared if r.name == "spikingjelly"]


def test_makefile_installs_the_norse_that_the_nir_readers_extra_declares():
    """`make install` installs Norse with --no-deps from its own spec; both must agree."""
    spec = re.search(r"^NORSE \?= (.+)$", (ROOT / "Makefile").read_text(), re.M)
    declared = [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"]
                ["nir-readers"]]
    assert spec and Requirement(spec.group(1)).specifier in [
        r.specifier for r in declared if r.name == "norse"]


# Runs the CLI in a fresh interpreter where importing the named top-level modules fails, as it
# does where they are not installed.
_WITHOUT = """
import sys
blocked = set(sys.argv[1].split(","))

class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Absent())
sys.argv = ["edgekit", *sys.argv[2:]]
from edgekit.cli import main
main()
"""
_QUICK = ["--warmup", "0", "--iterations", "3", "--energy", "none"]


def _edgekit_without(modules: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _WITHOUT, modules, *args], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)


@pytest.mark.parametrize("args, shown", [
    (("models",), ["mlp", "spiking-cnn", "not built here: a spiking model needs 'spikingjelly'"]),
    (("profile", "mlp", "--backend", "torch", *_QUICK), ["latency"]),
])
def test_cli_works_without_spikingjelly(args, shown):
    """Registering the spiking models imports no SpikingJelly; only building one does."""
    run = _edgekit_without("spikingjelly", *args)
    assert run.returncode == 0, run.stderr
    out = " ".join(run.stdout.split())  # rich wraps table cells
    assert all(text in out for text in shown), run.stdout


@pytest.mark.parametrize("modules, args, extra", [
    ("spikingjelly", ("profile", "spiking-cnn", "--backend", "torch", *_QUICK), "spiking"),
    ("nir", ("export", "spiking-cnn", "--to", "nir", "-o", "{tmp}/out"), "spiking"),
    ("onnxruntime", ("profile", "mlp", "--backend", "onnxruntime", *_QUICK), "cpu"),
])
def test_a_missing_optional_library_is_one_line_naming_its_extra(tmp_path, modules, args, extra):
    run = _edgekit_without(modules, *(a.format(tmp=tmp_path) for a in args))
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2, run.stderr
    assert len(lines) == 1 and lines[0].startswith("edgekit: error: "), run.stderr
    assert f"'{modules}' (the '{extra}' extra)" in lines[0]
    assert f"pip install 'edgekit[{extra}]'" in lines[0]


def _package_folders() -> dict[str, Path]:
    """Installed package name -> its folder, for every folder with an __init__.py."""
    return {".".join([package, *init.parent.relative_to(ROOT / folder).parts]): init.parent
            for folder, package in PACKAGE_FOLDERS.items()
            for init in (ROOT / folder).rglob("__init__.py")}


def test_the_wheel_holds_every_package_module_and_profile(tmp_path):
    """Build the wheel offline from a clean copy of the tree (a stale build/ in the checkout
    would hide a package that discovery misses) and look inside."""
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-q", "-w", str(tmp_path / "dist"),
                    str(source)], check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("edgekit-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"{package.replace('.', '/')}/{path.name}"
                for package, folder in _package_folders().items()
                for path in folder.iterdir() if path.suffix in (".py", ".toml")}
    assert len([n for n in expected if n.endswith(".toml")]) >= 10  # the device profiles
    weights = ROOT / "edgekit" / "demo_weights"  # the short tour's trained checkpoints
    expected |= {f"edgekit/demo_weights/{p.name}" for p in weights.iterdir()
                 if p.suffix == ".safetensors" or p.name == "manifest.json"}
    assert any(n.endswith(".safetensors") for n in expected)
    expected.add(f"{wheel.name.split('-py3')[0]}.dist-info/licenses/LICENSE")
    assert not expected - names, sorted(expected - names)
    top_level = {n.split("/")[0] for n in names if not n.startswith("edgekit-")}
    assert top_level == {"edgekit"}  # exporters/ etc. install under edgekit, never top-level
