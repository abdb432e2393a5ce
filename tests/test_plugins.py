"""Plugins (issue 41): an installed package's entry points, ``--import FILE.py`` and
``$EDGEKIT_PLUGINS`` register models, precisions and exporters that every command then takes.

The package is real to ``importlib.metadata``: a ``.dist-info`` folder with ``entry_points.txt``
beside its module, on the ``sys.path`` of a fresh ``edgekit`` process, as pip leaves one in
site-packages. Every run is a subprocess, so no test leaves a registration behind in this one.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

EXE = [sys.executable, "-m", "edgekit"]

_PACKAGE = '''
"""A plugin package of the kind a user publishes: a model, a precision, two exporters."""
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from torch import nn


def register_model():
    from edgekit.registry import ModelEntry, get_entry, register_model

    task = get_entry("mlp").task  # the digits task: 8x8 images, 10 classes
    register_model(ModelEntry(
        name="demo-mlp", family="demo", config={"hidden": 8}, task=task,
        description="a plugin's MLP",
        builder=lambda hidden: nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU(),
                                             nn.Linear(hidden, 10))))


@dataclass
class Written:
    folder: Path


def _layers(job):
    out = job.folder()
    out.mkdir(parents=True)
    source = job.model()
    names = [type(m).__name__ for m in source.model.modules()]
    (out / "layers.json").write_text(json.dumps(names))
    return Written(out)


def _onnx_copy(job):
    out = job.folder()
    out.mkdir(parents=True)
    shutil.copy(job.artifact.folder / job.artifact.manifest["model_file"], out / "copy.onnx")
    return Written(out)


def register_exporters():
    from edgekit.exporters.registry import ExporterSpec, register_exporter

    register_exporter(ExporterSpec(name="layers", description="the module's layer types",
                                   from_onnx=False, export=_layers,
                                   summary=lambda r: ["layer types listed"]))
    register_exporter(ExporterSpec(name="onnx-copy", description="the ONNX model, copied",
                                   from_onnx=True, export=_onnx_copy, options=frozenset({"opset"})))
'''

_PRECISION_MODULE = '''
"""Registers on import: an entry point may name a module rather than a function."""
from edgekit.precisions import Precision, register_precision

register_precision(Precision(name="fp8demo", torch_dtype=None, roundoff=2.0**-3, onnx=True))
'''

_ENTRY_POINTS = '''
[edgekit.models]
demo = edgekit_demo_plugin:register_model

[edgekit.precisions]
demo = edgekit_demo_plugin.precision

[edgekit.exporters]
demo = edgekit_demo_plugin:register_exporters
'''

_SCRIPT = '''
from torch import nn
from edgekit.registry import ModelEntry, get_entry, register_model

register_model(ModelEntry(name="script-mlp", family="script", config={}, task=get_entry("mlp").task,
                          description="a script's MLP",
                          builder=lambda: nn.Sequential(nn.Flatten(), nn.Linear(64, 10))))
'''


def _install(root: Path, package: str = _PACKAGE, entry_points: str = _ENTRY_POINTS) -> Path:
    """A distribution as an installer leaves it: the package and its .dist-info, side by side."""
    site = root / "site"
    pkg = site / "edgekit_demo_plugin"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(package)
    (pkg / "precision.py").write_text(_PRECISION_MODULE)
    info = site / "edgekit_demo_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: edgekit-demo-plugin\n"
                                   "Version: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    return site


def _run(*args: str, cwd: Path, site: Path | None = None,
         plugins: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "EDGEKIT_PLUGINS")}
    env["COLUMNS"] = "200"
    if site is not None:
        env["PYTHONPATH"] = str(site)
    if plugins is not None:
        env["EDGEKIT_PLUGINS"] = plugins
    return subprocess.run([*EXE, *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300, check=False)


def test_an_installed_package_adds_a_model_a_precision_and_exporters(tmp_path: Path) -> None:
    site = _install(tmp_path)
    made = _run("export", "demo-mlp", "--to", "layers", "-o", "out", cwd=tmp_path, site=site)
    assert made.returncode == 0, made.stderr
    assert json.loads((tmp_path / "out" / "layers.json").read_text())[1:] == [
        "Flatten", "Linear", "ReLU", "Linear"]
    assert "layer types listed" in made.stdout and "layers: out/ (layers.json)" in made.stdout

    # A from-ONNX format: edgekit exports and validates the FP32 artifact, the plugin builds on it.
    copied = _run("export", "demo-mlp", "--to", "onnx-copy", "--opset", "18", cwd=tmp_path,
                  site=site)
    assert copied.returncode == 0, copied.stderr
    assert "exporting demo-mlp to onnx first" in copied.stdout
    assert (tmp_path / "demo-mlp-onnx-copy" / "copy.onnx").stat().st_size > 0

    helped = _run("export", "--help", cwd=tmp_path, site=site)
    assert "[onnx|tensorrt|jetson-bundle|nir|loihi2|layers|onnx-copy]" in helped.stdout
    assert "fp8demo" in helped.stdout
    # The rules a plugin format declares: options it does not take name the formats that do.
    refused = _run("export", "demo-mlp", "--to", "layers", "--opset", "18", cwd=tmp_path,
                   site=site)
    assert refused.returncode == 2
    assert refused.stderr.strip() == ("edgekit: error: --opset apply to --to onnx, --to "
                                      "tensorrt, --to jetson-bundle and --to onnx-copy")
    # A from-model plugin format refuses an ONNX file in one line.
    artifact = _run("export", "demo-mlp-onnx-copy/copy.onnx", "--to", "layers", cwd=tmp_path,
                    site=site)
    assert artifact.returncode == 2 and len(artifact.stderr.splitlines()) == 1, artifact.stderr


def test_without_the_plugin_its_names_are_unknown_and_listed(tmp_path: Path) -> None:
    result = _run("export", "mlp:small", "--to", "layers", cwd=tmp_path)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("edgekit: error: Invalid value for '--to': 'layers' is not "
                                    "one of 'onnx', 'tensorrt', 'jetson-bundle', 'nir', "
                                    "'loihi2' (see ")


def test_import_option_and_environment_load_a_script(tmp_path: Path) -> None:
    script = tmp_path / "my_plugin.py"
    script.write_text(_SCRIPT)
    imported = _run("--import", str(script), "models", "--family", "script", cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    assert "script-mlp" in imported.stdout
    from_env = _run("export", "script-mlp", "-o", "onnx", cwd=tmp_path,
                    plugins=os.pathsep.join(["", str(script)]))
    assert from_env.returncode == 0, from_env.stderr
    assert (tmp_path / "onnx" / "manifest.json").is_file()
    without = _run("models", "--family", "script", cwd=tmp_path)
    assert without.returncode == 2 and "unknown model family 'script'" in without.stderr


@pytest.mark.parametrize("how", ["entry point", "script", "missing script"])
def test_a_plugin_that_fails_to_load_is_one_line_and_exit_2(tmp_path: Path, how: str) -> None:
    broken = "raise RuntimeError('no GPU driver for the demo plugin')\n"
    if how == "entry point":
        site = _install(tmp_path, package=broken)
        result = _run("models", cwd=tmp_path, site=site)
        where = ("edgekit.models entry point 'demo' (edgekit_demo_plugin:register_model, from "
                 "edgekit-demo-plugin 0.1)")
    elif how == "script":
        (tmp_path / "bad.py").write_text(broken)
        result = _run("--import", "bad.py", "models", cwd=tmp_path)
        where = "plugin script bad.py"
    else:
        result = _run("models", cwd=tmp_path, plugins="gone.py")
        assert result.returncode == 2
        assert result.stderr.splitlines() == [
            "edgekit: error: plugin script gone.py does not exist (check --import and "
            "EDGEKIT_PLUGINS)"]
        return
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"edgekit: error: {where} failed to load: RuntimeError: no GPU driver for the demo "
        f"plugin (run with --debug for the traceback)"]
    debug = _run("--debug", "--import", "bad.py", "models", cwd=tmp_path) if how == "script" \
        else _run("--debug", "models", cwd=tmp_path, site=site)
    assert debug.returncode == 2 and "Traceback" in debug.stderr
    assert "no GPU driver for the demo plugin" in debug.stderr


def test_a_precision_registered_after_import_is_a_choice(tmp_path: Path) -> None:
    """The CLI modules are imported first; the registration after them still counts."""
    code = textwrap.dedent('''
        from click.testing import CliRunner
        from edgekit.cli import cli
        from edgekit.cli.export import export
        from edgekit.cli.profile import profile
        from edgekit.precisions import Precision, onnx_names, register_precision

        register_precision(Precision(name="fp6late", torch_dtype=None, roundoff=2.0**-3,
                                     onnx=True))
        assert "fp6late" in onnx_names()
        option = next(p for p in export.params if p.name == "precision")
        assert option.type.convert("fp6late", option, None) == "fp6late"
        helped = CliRunner().invoke(cli, ["export", "--help"], terminal_width=200)
        assert "fp6late" in helped.output, helped.output
        refused = CliRunner().invoke(cli, ["export", "mlp:small", "--precision", "fp5"])
        assert refused.exit_code == 2 and "'fp6late'" in refused.output, refused.output
        print("ok")
    ''')
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=tmp_path, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
