"""The on-disk dataset cache: built once, read back equal, rebuilt when damaged, and never in the
way when the home folder cannot take it."""
import numpy as np
import pytest

from edgekit.data import Dataset
from edgekit.dataset_cache import cached_dataset, source_digest


def _builder(calls):
    def build():
        calls.append(1)
        rng = np.random.default_rng(len(calls))
        return Dataset("sim", rng.random((4, 3), dtype=np.float32), np.arange(4),
                       rng.random((2, 3), dtype=np.float32), np.arange(2), "abc123")
    return build


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_HOME", str(tmp_path))
    return tmp_path


def test_built_once_then_read_back_equal(home):
    calls = []
    first = cached_dataset("sim", "k1", _builder(calls))
    second = cached_dataset("sim", "k1", _builder(calls))
    assert len(calls) == 1 and second.digest == "abc123"
    for a in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(first, a), getattr(second, a))
    cached_dataset("sim", "k2", _builder(calls))  # another key is other data
    assert len(calls) == 2


def test_a_new_version_replaces_only_edgekits_older_copies(home):
    folder = home / "datasets"
    cached_dataset("sim", "old", _builder([]))
    cached_dataset("sim-big", "old", _builder([]))  # another dataset whose name starts alike
    folder.joinpath("sim-mine.json").write_text('{"notes": "a user\'s file"}')
    folder.joinpath("sim-mine.npz").write_bytes(b"user data")
    cached_dataset("sim", "new", _builder([]))
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["sim-big-old.json", "sim-big-old.npz", "sim-mine.json", "sim-mine.npz",
                     "sim-new.json", "sim-new.npz"]


def test_a_damaged_copy_is_built_again(home):
    calls = []
    cached_dataset("sim", "k", _builder(calls))
    path = home / "datasets" / "sim-k.npz"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: the checksum catches it
    path.write_bytes(bytes(data))
    cached_dataset("sim", "k", _builder(calls))
    assert len(calls) == 2
    (home / "datasets" / "sim-k.json").write_text("{not json")
    cached_dataset("sim", "k", _builder(calls))
    assert len(calls) == 3
    cached_dataset("sim", "k", _builder(calls))
    assert len(calls) == 3


def test_an_unwritable_home_costs_only_the_cache(home):
    (home / "datasets").write_text("a file where the folder would go")
    calls = []
    data = cached_dataset("sim", "k", _builder(calls))
    assert len(calls) == 1 and data.digest == "abc123"


def test_the_key_follows_the_code(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("x = 1\n")
    b.write_text("y = 2\n")
    before = source_digest([a, b])
    b.write_text("y = 3\n")
    assert source_digest([a, b]) != before


def test_a_variant_is_kept_beside_its_dataset_under_a_file_safe_name(home):
    folder = home / "datasets"
    cached_dataset("sim", "k1", _builder([]))
    calls = []
    cached_dataset("sim:station", "k1", _builder(calls))
    again = cached_dataset("sim:station", "k1", _builder(calls))
    assert len(calls) == 1 and again.name == "sim:station"  # read back under its own name
    cached_dataset("sim", "k2", _builder([]))  # a new version of the dataset...
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["sim-k2.json", "sim-k2.npz",  # ...replaces its own old copy only
                     "sim-station-k1.json", "sim-station-k1.npz"]
