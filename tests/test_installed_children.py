"""Children started as ``python -m edgekit...`` import the installed package, not the source
folder of the checkout they start in.

The device check runs from the repository root of a plain copy of the tree, with edgekit
installed from it (no editable install): there ``-m`` put the bare ``./edgekit`` folder, which
lacks the ``exporters/``, ``kernels/`` and ``profiles/`` setuptools maps into it, ahead of the
installed package, and 10 of 16 steps died with ``No module named 'edgekit.profiles'`` (issue 47).
The editable install of this suite maps those folders itself, so only such a copy shows it.
"""
from __future__ import annotations

import json
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from edgekit.interpreter import module_command

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("safe_path_flag", [True, False], ids=["-P", "python3.10 form"])
def test_a_child_skips_an_edgekit_folder_in_its_working_directory(tmp_path, safe_path_flag):
    (tmp_path / "edgekit").mkdir()
    (tmp_path / "edgekit" / "__init__.py").write_text("raise SystemExit('the folder shadowed')\n")
    argv = module_command("edgekit", "devices", "--json", "devices.json",
                          safe_path_flag=safe_path_flag)
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "devices.json").read_text())["detected"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """(a plain copy of the tracked tree, the python of a fresh venv with edgekit installed from
    that copy): no network, no dependencies installed (a .pth lends this environment's)."""
    tmp = tmp_path_factory.mktemp("installed")
    copy = tmp / "tree"
    # what the device tool carries: tracked files and the untracked ones git does not ignore
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (REPO / name).is_file():  # a tracked file deleted in the working tree is skipped
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, copy / name)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=60)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path("
                              "'purelib'))"], capture_output=True, text=True, check=True)
    # this environment's packages, after the venv's own: a .pth line only appends its folder
    # (the .pth files there, the editable install's finder among them, are not run)
    lent = [sysconfig.get_path("purelib"), *site.getsitepackages()]
    lent += [p for p in sys.path if p.endswith("site-packages") and p not in lent]
    (Path(purelib.stdout.strip()) / "lent.pth").write_text("\n".join(dict.fromkeys(lent)) + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--no-build-isolation", "--disable-pip-version-check", str(copy)],
                   check=True, capture_output=True, timeout=300)
    where = subprocess.run([str(python), "-P", "-c", "import edgekit.profiles as p; "
                            "print(p.__file__)"], cwd=tmp, capture_output=True, text=True)
    assert str(venv) in where.stdout, (where.stdout, where.stderr)  # the install, not the tree
    return copy, python


def test_the_device_check_starts_edgekit_from_a_plain_copy(installed, tmp_path):
    copy, python = installed
    bare = tmp_path / "bin"  # no nvidia-smi on PATH
    bare.mkdir()
    done = subprocess.run(
        [str(python), str(copy / "benchmarks" / "device_check.py"), "--out", str(tmp_path / "out"),
         "--no-install", "--only", "devices", "--python", str(python),
         "--work", str(tmp_path / "work"), "--site", str(tmp_path / "no-site")],
        cwd=copy, capture_output=True, text=True, timeout=120, env={"PATH": str(bare)})
    doc = json.loads((tmp_path / "out" / "device_check.json").read_text())
    step = next(s for s in doc["steps"] if s["name"] == "devices")
    log = (tmp_path / "out" / "device_check.log").read_text()
    assert step["status"] == "ran", (step["reason"], log[-1500:], done.stderr[-1500:])
    assert step["results"]["devices.json"]["detected"]


def test_edgekit_children_import_the_installed_package_from_a_plain_copy(installed):
    """edgekit.interpreter, which every child of the library goes through (ZipMoE's decode
    process, ASTRA's ranks, the fleet's runner, the tour), started from the copy's root."""
    copy, python = installed
    code = ("import subprocess, sys\n"
            "from edgekit.interpreter import module_command\n"
            "done = subprocess.run(module_command('edgekit', 'devices'), capture_output=True,"
            " text=True)\n"
            "sys.exit(done.returncode and done.stderr)\n")
    done = subprocess.run([str(python), "-P", "-c", code], cwd=copy, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
