"""Provenance records edgekit's own git commit, never that of a repository around a copy of it."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import edgekit
from edgekit.provenance import git_revision

SOURCE = Path(edgekit.__file__).resolve().parent


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], capture_output=True, text=True, check=True).stdout.strip()


def _user_repo(root: Path, package_at: Path, pyproject: str) -> None:
    """A user's git repository with a committed pyproject and a copy of edgekit at package_at."""
    _git(root, "init", "-q")
    (root / "pyproject.toml").write_text(pyproject)
    shutil.copytree(SOURCE, package_at / "edgekit",
                    ignore=shutil.ignore_patterns("__pycache__"))
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "user project")


def _revision_of_copy(site: Path) -> str:
    """git_revision() as the copy under ``site`` computes it (no site-packages: only the copy)."""
    code = ("import edgekit.provenance as p; "
            "print(p.__file__); print(p.git_revision())")
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                         check=True, cwd=site, env=env)
    file, revision = out.stdout.split()
    assert Path(file).resolve().is_relative_to(site.resolve())
    return revision


def test_installed_inside_a_users_repository(tmp_path) -> None:
    site = tmp_path / ".venv" / "lib" / "site-packages"
    site.mkdir(parents=True)
    _user_repo(tmp_path, site, '[project]\nname = "user-app"\n')
    assert _revision_of_copy(site) == "None"


def test_copy_at_the_top_of_another_project(tmp_path) -> None:
    _user_repo(tmp_path, tmp_path, '[project]\nname = "user-app"\n')
    assert _revision_of_copy(tmp_path) == "None"


def test_own_source_tree_records_its_commit() -> None:
    checkout = SOURCE.parent
    assert (checkout / "pyproject.toml").is_file(), "the suite runs from edgekit's checkout"
    assert git_revision() == _git(checkout, "rev-parse", "--short", "HEAD")
