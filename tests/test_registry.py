"""Properties every registry model must have (generated from the registry, as timm's are)."""
from __future__ import annotations

import pytest
import torch

from edgekit.checkpoint import load_checkpoint, save_checkpoint
from edgekit.errors import UnknownNameError, UsageError
from edgekit.flops import model_cost
from edgekit.registry import all_names, create_model, get_entry, list_models, split_name

NAMES = all_names()


def _outputs(out) -> tuple[torch.Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)


def test_registry_has_reference_models():
    names = {e.name for e in list_models()}
    assert {"ds-cnn", "mlp"} <= names
    assert "ds-cnn:wide" in NAMES and "mlp:small" in NAMES


@pytest.mark.parametrize("name", NAMES)
def test_builds_runs_and_counts(name):
    entry, _ = split_name(name)
    model = create_model(name).eval()
    x = entry.example_inputs(batch=3)
    outputs = _outputs(model(*x))
    assert len(outputs) == len(entry.task.output_names)
    assert all(o.shape[0] == 3 for o in outputs)
    if entry.task.num_classes:
        assert outputs[0].shape == (3, entry.task.num_classes)
    cost = model_cost(model, entry.example_inputs(batch=1))
    assert cost.params == sum(p.numel() for p in model.parameters()) > 0
    assert cost.flops > 0
    assert model.edgekit_cfg["entry"] == entry.name


@pytest.mark.parametrize("name", NAMES)
def test_checkpoint_round_trip(name, tmp_path):
    torch.manual_seed(1)
    model = create_model(name).eval()
    path = save_checkpoint(model, tmp_path / "m.safetensors", metrics={"accuracy": 0.5})
    loaded, ckpt = load_checkpoint(path)
    assert ckpt.model_name == name and ckpt.metrics == {"accuracy": 0.5}
    x = split_name(name)[0].example_inputs(batch=2)
    for a, b in zip(_outputs(model(*x)), _outputs(loaded(*x)), strict=True):
        assert torch.equal(a, b)


def test_flops_of_mlp_are_exact():
    # Linear layers: 2 * in * out FLOPs each: 64*128 + 128*64 + 64*10
    cost = model_cost(create_model("mlp"), get_entry("mlp").example_inputs(batch=1))
    assert cost.flops == 2 * (64 * 128 + 128 * 64 + 64 * 10)


def test_unknown_names_list_valid_ones():
    with pytest.raises(UnknownNameError, match="valid: .*ds-cnn"):
        split_name("resnet9000")
    with pytest.raises(UnknownNameError, match="ds-cnn:wide"):
        split_name("ds-cnn:huge")
    with pytest.raises(UsageError, match="unknown config keys"):
        get_entry("mlp").build(depth=3)


@pytest.mark.parametrize("name", [n for n in NAMES if split_name(n)[0].deploy is not None])
def test_deploy_form_keeps_outputs(name):
    import copy

    entry, variant = split_name(name)
    torch.manual_seed(0)
    model = entry.build(variant).eval()
    deployed = entry.deploy(copy.deepcopy(model)).eval()
    x = entry.example_inputs(batch=2)
    with torch.no_grad():
        torch.testing.assert_close(deployed(*x), model(*x), atol=1e-5, rtol=1e-4)
