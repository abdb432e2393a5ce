"""Temporary folders of killed owners are removed by the next process of the same kind, and
nothing else is (edgekit.workdirs): a fleet worker lost mid-job and a profile killed mid-run left
their ``edgekit-fleet-*`` and ``edgekit-profile-*`` folders behind on every test run."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from click.testing import CliRunner

from edgekit import workdirs
from edgekit.cli import cli


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


def _leftovers(root, prefix):
    dead = root / f"{prefix}dead"
    dead.mkdir()
    (dead / workdirs.PID_FILE).write_text(f"{_dead_pid()}\n")
    live = root / f"{prefix}live"
    live.mkdir()
    (live / workdirs.PID_FILE).write_text(f"{os.getpid()}\n")
    unmarked = root / f"{prefix}unmarked"  # a folder edgekit cannot prove it wrote
    unmarked.mkdir()
    return dead, [live, unmarked]


def test_an_owned_folder_sweeps_dead_owners_of_its_prefix_only(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead, kept = _leftovers(tmp_path, "edgekit-fleet-")
    other, _ = _leftovers(tmp_path, "edgekit-other-")
    with workdirs.owned_tempdir("edgekit-fleet-") as mine:
        assert (mine / workdirs.PID_FILE).read_text().split()[0] == str(os.getpid())
        assert not dead.exists() and all(p.exists() for p in kept) and other.exists()
    assert not mine.exists()


def test_profile_removes_the_folder_a_killed_profile_left(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead, kept = _leftovers(tmp_path, "edgekit-profile-")
    result = CliRunner().invoke(cli, ["profile", "mlp:small", "--backend", "onnxruntime",
                                      "--duration", "0.05", "--threads", "1"])
    assert result.exit_code == 0, result.output
    assert not dead.exists() and all(p.exists() for p in kept)
    assert sorted(p.name for p in tmp_path.glob("edgekit-profile-*")) == \
        sorted(p.name for p in kept)  # its own folder removed on exit
