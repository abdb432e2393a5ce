"""The trained checkpoints shipped for the short tour (issue 43): each is what its manifest says
(hash, command, data digest, score), a corrupted one is refused before use, and installing one
writes exactly its bytes where the tour caches it."""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from edgekit import demo_weights
from edgekit.checkpoint import read_checkpoint
from edgekit.demo_weights.build import RECIPES
from edgekit.errors import UsageError
from edgekit.tour import plan

MIB = 2**20


def test_every_recipe_is_shipped_with_its_hash_command_and_data_digest() -> None:
    weights = demo_weights.manifest()
    assert sorted(weights) == sorted(r.name for r in RECIPES)
    assert sum(w["bytes"] for w in weights.values()) < 8 * MIB  # a few MB in all
    for name, entry in weights.items():
        path = demo_weights.FOLDER / entry["file"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"], name
        assert entry["command"].startswith(f"edgekit train {entry['model']} "), entry
        info = read_checkpoint(path).info
        assert info["dataset_digest"] == entry["dataset_digest"] and entry["dataset_digest"]
        assert entry["stored"] in ("fp16", "fp32") and entry["score"] > 0


def test_the_tour_installs_every_shipped_checkpoint(tmp_path: Path) -> None:
    tour = plan(tmp_path / "out")
    assert set(tour.weights) == set(demo_weights.manifest())
    assert not plan(tmp_path / "out", full=True).weights  # the full tour trains its own


def test_a_corrupted_checkpoint_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    folder = tmp_path / "weights"
    shutil.copytree(demo_weights.FOLDER, folder, ignore=shutil.ignore_patterns("*.py",
                                                                              "__pycache__"))
    good = demo_weights.install("mlp", tmp_path / "mlp.safetensors", folder=folder)
    assert good.read_bytes() == (folder / "mlp.safetensors").read_bytes()
    blob = bytearray((folder / "mlp.safetensors").read_bytes())
    blob[-1] ^= 0x01  # one bit of one weight
    (folder / "mlp.safetensors").write_bytes(bytes(blob))
    dest = tmp_path / "copy.safetensors"
    with pytest.raises(UsageError, match="do not match the SHA-256"):
        demo_weights.install("mlp", dest, folder=folder)
    assert not dest.exists()
    with pytest.raises(UsageError, match="no demo weights named"):
        demo_weights.install("gpt-5", dest, folder=folder)
