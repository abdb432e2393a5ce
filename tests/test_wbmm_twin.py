"""WBMM-P's depthwise twin (issue 42: WBMM against depthwise at 224 px): the same network with
every WBMM mixer a 13x13 depthwise conv, a member of the edge suite right after WBMM-P; at a tiny
config both go through the bring-your-own-model export and validation; the backbone benchmark
states its verdict the right way round."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch import nn

from edgekit.exporters import export_onnx
from edgekit.kernels.wbmm import WBMM
from edgekit.methods.wbmm.model import (
    DW_TWIN_KERNEL,
    WBMMNet,
    paper_config,
    paper_dw_config,
    paper_dw_model_and_inputs,
    paper_model_and_inputs,
)
from edgekit.suites import get_suite
from edgekit.targets import resolve_target

pytestmark = pytest.mark.usefixtures("one_compute_thread")
REPO = Path(__file__).resolve().parents[1]
TINY = {"dims": (8, 16, 16, 32), "patterns": (("D",), ("W", "D"), ("W",), ("W",)),
        "num_classes": 10}


@pytest.fixture(scope="module")
def pair() -> tuple[WBMMNet, WBMMNet]:
    return paper_model_and_inputs()[0], paper_dw_model_and_inputs()[0]


def _mixers(model: WBMMNet) -> list[nn.Module]:
    return [block.op for stage in model.stages for block in stage]


def test_the_twin_has_no_wbmm_mixer_left(pair) -> None:
    wbmm, twin = pair
    assert not any(isinstance(m, WBMM) for m in twin.modules())
    for ours, theirs in zip(_mixers(wbmm), _mixers(twin), strict=True):
        if isinstance(ours, WBMM):  # every WBMM became a 13x13 depthwise conv
            assert isinstance(theirs, nn.Conv2d) and theirs.groups == theirs.in_channels
            assert theirs.kernel_size == (DW_TWIN_KERNEL, DW_TWIN_KERNEL)
        else:  # the 3x3 blocks are the same
            assert theirs.kernel_size == ours.kernel_size == (3, 3)


def test_the_twin_keeps_stem_widths_depths_and_head(pair) -> None:
    wbmm, twin = pair
    def shapes(model: WBMMNet) -> dict[str, torch.Size]:
        return {k: v.shape for k, v in model.state_dict().items() if ".op." not in k}

    assert shapes(twin) == shapes(wbmm)
    x = torch.rand(1, 3, 32, 32)
    with torch.inference_mode():
        assert twin(x).shape == wbmm(x).shape == (1, 1000)


def test_the_edge_suite_lists_the_twin_right_after_wbmm_p() -> None:
    members = get_suite("edge").models
    names = [m.name for m in members]
    assert names[names.index("wbmm-p") + 1] == "wbmm-p-dw"
    assert members[names.index("wbmm-p-dw")].kind == "wbmm"


@pytest.mark.slow  # two dynamo exports: 4-11 s on the shared 2-core machine
@pytest.mark.parametrize("config", [paper_config, paper_dw_config], ids=["wbmm", "twin"])
def test_tiny_backbones_export_and_validate_as_user_models(config, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = WBMMNet(**config("p", **TINY)).eval()
    source = resolve_target(model, inputs=["x:1x3x28x28"])
    result = export_onnx(source, tmp_path / "art")
    assert result.validation.passed


def _backbone_bench() -> ModuleType:
    """benchmarks/wbmm_backbone.py as a module (it imports its neighbours by name)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("bench_wbmm_backbone",
                                                      REPO / "benchmarks" / "wbmm_backbone.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return module


def test_the_backbone_verdict_names_the_faster_net_and_the_noise() -> None:
    bench = _backbone_bench()
    def ms(median: float, low: float, high: float) -> dict[str, float]:
        return {"median": median, "min": low, "max": high}

    slower = bench.verdict("onnxruntime@2", {"wbmm-p": ms(50.0, 48.0, 52.0),
                                             "wbmm-p-dw13": ms(40.0, 39.0, 41.0)})
    assert slower["text"] == ("WBMM-P slower than its depthwise twin by 1.25x on onnxruntime "
                              "at 2 threads")
    faster = bench.verdict("torch@1", {"wbmm-p": ms(40.0, 39.0, 45.0),
                                       "wbmm-p-dw13": ms(50.0, 44.0, 51.0)})
    assert faster["text"] == ("WBMM-P faster than its depthwise twin by 1.25x on torch at 1 "
                              "thread (min-max over rounds overlap: within the noise)")
