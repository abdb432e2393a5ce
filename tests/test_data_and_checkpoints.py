"""Datasets (digits, user .npz) and checkpoint integrity."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from edgekit.checkpoint import load_checkpoint, save_checkpoint
from edgekit.data import load_dataset
from edgekit.errors import UsageError
from edgekit.registry import create_model, get_entry
from edgekit.training import train

TASK = get_entry("mlp").task


def test_digits_split_is_real_and_stable():
    a, b = load_dataset(TASK), load_dataset(TASK)
    assert a.x_train.shape[1:] == (1, 8, 8) and a.x_train.dtype == np.float32
    assert len(a.x_train) + len(a.x_test) == 1797
    assert a.digest == b.digest and np.array_equal(a.y_test, b.y_test)
    assert 0.0 <= a.x_train.min() and a.x_train.max() <= 1.0


def test_npz_loads_and_splits(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "mine.npz"
    np.savez(path, x=rng.random((50, 1, 8, 8)), y=rng.integers(0, 10, 50))
    ds = load_dataset(TASK, path)
    assert len(ds.x_train) == 40 and len(ds.x_test) == 10 and ds.x_train.dtype == np.float32


@pytest.mark.parametrize("arrays, message", [
    ({"x": np.zeros((20, 1, 4, 4)), "y": np.zeros(20, int)}, r"shape \(1, 4, 4\).*\(1, 8, 8\)"),
    ({"x": np.zeros((20, 1, 8, 8), np.int32), "y": np.zeros(20, int)}, "dtype int32"),
    ({"x": np.zeros((20, 1, 8, 8)), "y": np.zeros(19, int)}, "20 samples but y has 19"),
    ({"x": np.zeros((20, 1, 8, 8)), "y": np.full(20, 10)}, r"labels must lie in \[0, 9\]"),
    ({"x": np.zeros((20, 1, 8, 8))}, "missing array"),
])
def test_npz_is_checked_against_the_entry(tmp_path, arrays, message):
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with pytest.raises(UsageError, match=message):
        load_dataset(TASK, path)


def test_npz_not_a_zip(tmp_path):
    path = tmp_path / "junk.npz"
    path.write_bytes(b"not a zip")
    with pytest.raises(UsageError, match="not a readable .npz"):
        load_dataset(TASK, path)


def test_training_reaches_useful_accuracy():
    result = train(get_entry("mlp"), load_dataset(TASK), epochs=10)
    assert result.value > 0.9  # a 10-class problem: chance is 0.1


def test_checkpoint_checksum_and_mismatch(tmp_path):
    path = save_checkpoint(create_model("mlp"), tmp_path / "m.safetensors")
    blob = bytearray(path.read_bytes())
    blob[-1] ^= 0xFF
    path.write_bytes(bytes(blob))
    with pytest.raises(UsageError, match="checksum"):
        load_checkpoint(path)
    # a record that names another model than the weights hold
    from safetensors import safe_open
    from safetensors.torch import load, save

    other = save_checkpoint(create_model("mlp"), tmp_path / "o.safetensors")
    with safe_open(str(other), framework="pt") as handle:
        info = json.loads(handle.metadata()["edgekit"])
    info.update(entry="ds-cnn", variant=None, config=dict(get_entry("ds-cnn").config))
    other.write_bytes(save(load(other.read_bytes()), metadata={"edgekit": json.dumps(info)}))
    with pytest.raises(UsageError, match="does not fit model 'ds-cnn'"):
        load_checkpoint(other)
    good = save_checkpoint(create_model("mlp"), tmp_path / "p.safetensors")
    with pytest.raises(UsageError, match="holds 'mlp', not 'ds-cnn'"):
        load_checkpoint(good, expect_entry="ds-cnn")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_weights_are_neither_saved_nor_loaded(tmp_path, value):
    """A diverged net is not written (a file already at the path stays as it was); one written
    by other means, with a record and checksum that match, is refused when loaded."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save

    from edgekit.checkpoint import METADATA_KEY, weights_digest

    model = create_model("mlp")
    name = next(iter(dict(model.named_parameters())))
    with torch.no_grad():
        model.state_dict()[name].view(-1)[:3] = value
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"the user's")
    with pytest.raises(UsageError, match=r"not writing .*m\.safetensors: the weights hold nan or "
                                         r"inf \(3 value\(s\) in 1 tensor\(s\), e\.g\. "
                                         rf"'{re.escape(name)}'\); the training diverged"):
        save_checkpoint(model, path)
    assert path.read_bytes() == b"the user's"
    good = save_checkpoint(create_model("mlp"), tmp_path / "ok.safetensors")
    loaded, _ = load_checkpoint(good)
    assert all(torch.isfinite(p).all() for p in loaded.parameters())
    with safe_open(str(good), framework="pt") as handle:
        state = {k: handle.get_tensor(k) for k in handle.keys()}
        record = json.loads(handle.metadata()[METADATA_KEY])
    state[name].view(-1)[:3] = value
    record["weights_sha256"] = weights_digest(state)
    path.write_bytes(save(state, metadata={"format": "pt", METADATA_KEY: json.dumps(record)}))
    with pytest.raises(UsageError, match=r"non-finite weights \(nan or inf\): 3 value\(s\) in "
                                         r"1 tensor\(s\)"):
        load_checkpoint(path)


def test_safetensors_without_edgekit_record(tmp_path):
    from safetensors.torch import save

    path = tmp_path / "m.safetensors"
    path.write_bytes(save(dict(create_model("mlp").state_dict()), metadata={"format": "pt"}))
    with pytest.raises(UsageError, match="not an edgekit checkpoint"):
        load_checkpoint(path)


def test_damaged_cached_checkpoint_is_retrained_not_trusted():
    from edgekit.compare.cache import cache_path, cached_checkpoint

    entry = get_entry("mlp")
    dataset = load_dataset(entry.task)
    path = cache_path(entry, "small", dataset)  # under the test's own EDGEKIT_HOME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a safetensors file")
    assert cached_checkpoint(entry, "small", dataset) == path
    _, ckpt = load_checkpoint(path)
    assert ckpt.model_name == "mlp:small" and ckpt.metrics["accuracy"] > 0.5
