"""Properties every registered extension must have, generated from each registry (style.md: timm
tests over ``list_models()``): datasets, backends, energy meters, precisions, device profiles.
A new entry is tested for free."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgekit.data import get_dataset, list_datasets, load_dataset
from edgekit.precisions import TENSORRT, get_precision, list_precisions
from edgekit.profiles.schema import PRECISIONS
from edgekit.registry import list_models

DATASETS = list_datasets()


@pytest.mark.parametrize("entry", DATASETS, ids=lambda e: e.name)
def test_every_dataset_loads_in_the_shape_of_the_task_it_owns(entry):
    task = entry.task
    data = load_dataset(task)
    assert data.name == entry.name == task.dataset
    for x, y in ((data.x_train, data.y_train), (data.x_test, data.y_test)):
        assert len(x) == len(y) > 0
        assert x.shape[1:] == task.input_shape
        assert x.dtype == np.dtype(task.input_dtype)
        if task.num_classes:  # classification: integer labels covering every class
            assert y.dtype.kind == "i" and y.min() >= 0 and y.max() < task.num_classes
    if task.num_classes:
        assert set(np.unique(data.y_train)) == set(range(task.num_classes))


@pytest.mark.parametrize("entry", list_models(), ids=lambda e: e.name)
def test_every_model_takes_its_task_from_the_dataset_that_owns_it(entry):
    assert entry.task is get_dataset(entry.task.dataset).task


@pytest.mark.parametrize("precision", list_precisions(), ids=lambda p: p.name)
def test_every_precision_is_known_to_the_profile_schema_and_calibration(precision):
    from edgekit.profiles.calibrate import _skip_reason

    assert precision.name in PRECISIONS
    if precision.torch_dtype is None:  # no GEMM to time: calibration says why it skips it
        assert "quantised kernel" in _skip_reason(precision.name, "cpu")
    else:
        assert isinstance(getattr(torch, precision.torch_dtype), torch.dtype)
        assert _skip_reason(precision.name, "cuda") is None


@pytest.mark.parametrize("name", TENSORRT)
def test_every_engine_precision_is_a_cli_choice_with_its_own_switches(name):
    from edgekit.cli.export import export
    from edgekit.exporters.tensorrt import EngineBuildConfig, trtexec_build_args

    choices = next(p for p in export.params if p.name == "precision").type.choices
    assert name in choices
    args = trtexec_build_args(EngineBuildConfig(precision=name))
    others = [trtexec_build_args(EngineBuildConfig(precision=p)) for p in TENSORRT if p != name]
    assert all(a != args for a in others)  # trtexec builds each precision differently
    builder_flags = [get_precision(p).builder_flag for p in TENSORRT]
    assert builder_flags.count(get_precision(name).builder_flag) == 1  # so does the builder
