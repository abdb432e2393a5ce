"""WBMM (arXiv 2607.02097): the operator equals a (2w-1)x(2w-1) depthwise conv inside each window,
every deploy form equals the training form, the ONNX graph is one MatMul, and the paper-size
backbones have the paper's parameter counts."""
from __future__ import annotations

import collections
import contextlib
import io
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from edgekit.errors import UsageError
from edgekit.kernels.wbmm import (
    WBMM,
    centre_offset,
    dense_matrix,
    embed_kernel,
    relative_position_index,
    table_size,
    wbmm,
    wbmm_compact,
    window_depthwise_conv,
)
from edgekit.methods.wbmm.model import (
    PAPER_CONFIGS,
    PAPER_PARAMS,
    Block,
    WBMMNet,
    build_paper_model,
    paper_config,
)
from edgekit.registry import get_entry

F64 = torch.float64


def windowed_conv_reference(x: torch.Tensor, kernel: torch.Tensor, w: int) -> torch.Tensor:
    """Independent ground truth: zero-pad to multiples of w, cut the windows out with F.unfold,
    run one grouped (depthwise) F.conv2d over every window with 'same' padding, fold back, crop."""
    B, C, H, W = x.shape
    xp = F.pad(x, (0, -W % w, 0, -H % w))
    Hp, Wp = xp.shape[-2:]
    cols = F.unfold(xp, kernel_size=w, stride=w)  # [B, C·w·w, L]
    L = cols.shape[-1]
    windows = cols.reshape(B, C, w, w, L).permute(0, 4, 1, 2, 3).reshape(B * L, C, w, w)
    out = F.conv2d(windows, kernel, padding=kernel.shape[-1] // 2, groups=C)  # [B·L, C, w, w]
    out = out.reshape(B, L, C * w * w).permute(0, 2, 1)  # [B, C·w·w, L]
    return F.fold(out, (Hp, Wp), kernel_size=w, stride=w)[:, :, :H, :W]


def randomize(module: nn.Module, seed: int = 0) -> nn.Module:
    """Non-trivial BN statistics and affine terms, layer scales, GRN terms and WBMM tables."""
    gen = torch.Generator().manual_seed(seed)

    def rand(t, scale, shift=0.0):
        t.copy_(torch.randn(t.shape, generator=gen, dtype=t.dtype) * scale + shift)

    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                rand(m.running_mean, 0.5)
                m.running_var.copy_(
                    torch.rand(m.running_var.shape, generator=gen, dtype=F64) * 2 + 0.2)
                rand(m.weight, 0.5, 1.0)
                rand(m.bias, 0.3)
        for name, p in module.named_parameters():
            if name.rsplit(".", 1)[-1] in ("gamma", "beta", "table"):
                rand(p, 0.5)
    return module


def test_index_follows_the_formula():
    wh, ww = 3, 4
    index = relative_position_index((wh, ww))
    pos = [(h, w) for h in range(wh) for w in range(ww)]
    expected = [[(hi - hj + wh - 1) * (2 * ww - 1) + (wi - wj + ww - 1) for hj, wj in pos]
                for hi, wi in pos]
    assert index.tolist() == expected
    assert index.min() == 0 and index.max() == table_size((wh, ww)) - 1
    assert bool((index.diagonal() == centre_offset((wh, ww))).all())


CASES = [  # window, (H, W), channels, batch; padded sizes included
    (7, (14, 21), 4, 2), (7, (10, 17), 3, 1), (7, (5, 9), 16, 3),
    (14, (28, 28), 2, 2), (14, (20, 33), 5, 1), (14, (13, 13), 1, 3),
]


@pytest.mark.parametrize("w,size,channels,batch", CASES)
def test_wbmm_equals_depthwise_conv_inside_each_window(w, size, channels, batch):
    gen = torch.Generator().manual_seed(w + channels)
    kernel = torch.randn(channels, 1, 2 * w - 1, 2 * w - 1, generator=gen, dtype=F64)
    x = torch.randn(batch, channels, *size, generator=gen, dtype=F64)
    reference = windowed_conv_reference(x, kernel, w) + x  # identity shortcut inside the operator
    table = embed_kernel(kernel, w)
    torch.testing.assert_close(wbmm_compact(x, table, w), reference, rtol=0, atol=1e-10)
    torch.testing.assert_close(wbmm(x, dense_matrix(table, relative_position_index(w)), w),
                               reference, rtol=0, atol=1e-10)
    op = WBMM(channels, w).to(F64)
    with torch.no_grad():
        op.table.copy_(table)
    torch.testing.assert_close(op(x), reference, rtol=0, atol=1e-10)
    if max(size) > w:  # several windows: not a sliding convolution over the whole map
        sliding = F.conv2d(x, kernel, padding=w - 1, groups=channels) + x
        assert (op(x) - sliding).abs().max() > 1e-3


def test_small_kernel_branches_are_windowed_convolutions():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 11, 9, generator=gen, dtype=F64)
    for k in (3, 5):
        kernel = torch.randn(3, 1, k, k, generator=gen, dtype=F64)
        torch.testing.assert_close(window_depthwise_conv(x, kernel, 4),
                                   windowed_conv_reference(x, kernel, 4), rtol=0, atol=1e-12)
        torch.testing.assert_close(wbmm_compact(x, embed_kernel(kernel, 4), 4, shortcut=False),
                                   windowed_conv_reference(x, kernel, 4), rtol=0, atol=1e-12)


def test_kernels_larger_than_the_window_are_refused():
    with pytest.raises(UsageError, match="does not fit"):
        embed_kernel(torch.zeros(2, 1, 9, 9), 4)
    with pytest.raises(UsageError, match="does not fit"):
        WBMM(8, 2, small_kernels=True)  # a 5x5 branch needs a window of at least 3
    with pytest.raises(UsageError, match="window"):
        WBMM(8, (7, 0))


@pytest.mark.parametrize("small_kernels", [False, True])
@pytest.mark.parametrize("size", [(14, 14), (7, 7), (10, 19)])
def test_operator_deploy_forms_equal_the_training_form(small_kernels, size):
    op = randomize(WBMM(6, 7, small_kernels=small_kernels).to(F64), seed=size[1]).eval()
    x = torch.randn(3, 6, *size, dtype=F64)
    scale, shift = torch.rand(6, dtype=F64) + 0.5, torch.randn(6, dtype=F64)
    with torch.no_grad():
        y = op(x)
        compact, cached = op.to_deploy("compact"), op.to_deploy("cached")
        torch.testing.assert_close(compact(x), y, rtol=0, atol=1e-12)
        torch.testing.assert_close(cached(x), compact(x), rtol=0, atol=1e-12)
        torch.testing.assert_close(compact.to_deploy("cached")(x), y, rtol=0, atol=1e-12)
        folded = op.to_deploy("cached", scale=scale, shift=shift)  # a following BN folded in
        torch.testing.assert_close(folded(x), y * scale.view(1, -1, 1, 1) + shift.view(1, -1, 1, 1),
                                   rtol=0, atol=1e-12)
    assert compact.table.shape == (6, 13 * 13) and cached.matrix.shape == (6, 49, 49)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in compact.modules())
    with pytest.raises(UsageError, match="cannot go back"):
        cached.to_deploy("compact")


@pytest.mark.parametrize("token,small_kernels",
                         [("W", False), ("W", True), ("D", False), (13, False)])
def test_block_reparameterisation_is_exact(token, small_kernels):
    block = randomize(Block(8, token, (4, 4), small_kernels).to(F64), seed=3).eval()
    x = torch.randn(2, 8, 8, 10, dtype=F64)  # a padded stage: 8x10 in 4x4 windows
    with torch.no_grad():
        y = block(x)
        block.reparameterize("compact")
        torch.testing.assert_close(block(x), y, rtol=0, atol=1e-12)
        block.reparameterize("cached")
        torch.testing.assert_close(block(x), y, rtol=0, atol=1e-12)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in block.modules())
    assert block.gamma is None and block.grn.beta is None


def test_digits_model_deploy_forms_and_checkpoints(tmp_path):
    from edgekit.checkpoint import load_checkpoint, save_checkpoint

    entry = get_entry("wbmm")
    trained = randomize(entry.build().to(F64), seed=5).eval()
    x = torch.rand(4, 1, 8, 8, dtype=F64)
    with torch.no_grad():
        y = trained(x)
    params = {}
    for form in ("compact", "cached"):
        model = entry.build().to(F64)
        model.load_state_dict(trained.state_dict())
        model.reparameterize(form)
        params[form] = sum(p.numel() for p in model.parameters())
        with torch.no_grad():
            torch.testing.assert_close(model(x), y, rtol=0, atol=1e-12)
        assert model.edgekit_cfg["config"]["deploy"] == form
        path = save_checkpoint(model.float(), tmp_path / f"{form}.safetensors")
        loaded, _ = load_checkpoint(path)
        assert loaded.deploy == form
        with torch.no_grad():
            torch.testing.assert_close(loaded(x.float()), y.float(), rtol=1e-4, atol=1e-5)
    # 4x4 windows: 7x7 = 49 table entries vs a 16x16 = 256 dense matrix per channel
    assert params["cached"] > params["compact"]


def _export(module: nn.Module, x: torch.Tensor, path) -> collections.Counter:
    import onnx

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), str(path), input_names=["x"], output_names=["y"],
                          opset_version=18, dynamo=True, external_data=False)
    return collections.Counter(n.op_type for n in onnx.load(str(path)).graph.node)


@pytest.mark.parametrize("form", [None, "compact", "cached"])
def test_onnx_export_is_one_matmul_and_matches_torch(form, tmp_path):
    import onnxruntime as ort

    op = randomize(WBMM(8, 7, small_kernels=True), seed=7).eval()
    op = op if form is None else op.to_deploy(form)
    ops = {}
    for name, size in (("few", (13, 16)), ("many", (40, 47))):  # 2x3 vs 6x7 windows, padded
        x = torch.randn(2, 8, *size)
        ops[name] = _export(op, x, tmp_path / f"{name}.onnx")
        session = ort.InferenceSession(str(tmp_path / f"{name}.onnx"),
                                       providers=["CPUExecutionProvider"])
        (out,) = session.run(None, {"x": x.numpy()})
        with torch.no_grad():
            np.testing.assert_allclose(out, op(x).numpy(), rtol=1e-4, atol=1e-5)
    assert ops["few"]["MatMul"] == 1  # all windows of all channels in one batched MatMul
    assert ops["few"] == ops["many"]  # the graph does not grow with the number of windows
    assert "Loop" not in ops["few"] and "Scan" not in ops["few"]


def test_deployed_model_exports_through_edgekit(tmp_path):
    from edgekit.exporters import OnnxOptions, export_onnx
    from edgekit.targets import load_model_source

    source = load_model_source("wbmm")
    randomize(source.model, seed=9).eval().reparameterize("cached")
    result = export_onnx(source, tmp_path / "art", OnnxOptions(dynamic_batch=True))
    assert result.validation.passed
    assert result.manifest["source"]["config"]["deploy"] == "cached"


@pytest.mark.parametrize("name", list(PAPER_CONFIGS))
def test_paper_configs_have_the_paper_parameter_counts(name):
    with torch.device("meta"):  # no memory, no forward pass at 224x224
        model = build_paper_model(name)
    params = model.get_num_params()
    assert abs(params / PAPER_PARAMS[name] - 1) < 0.05, f"WBMM-{name.upper()}: {params / 1e6:.2f}M"


def test_paper_stage_patterns():
    t = paper_config("t")["patterns"]
    assert t[0] == ("D", "D", "D") and t[1] == ("W", "D", "W")
    assert t[2] == ("W", "D") * 9 and t[3] == ("W", "W", "W")
    assert [len(p) for p in paper_config("s")["patterns"]] == [3, 3, 27, 3]
    assert paper_config("p")["small_kernel_stages"] == (3,)
    assert paper_config("t")["small_kernel_stages"] == ()
    with pytest.raises(UsageError, match="valid: p, n, t, s"):
        paper_config("xl")


def test_paper_model_runs_at_a_small_resolution():
    model = build_paper_model("p", num_classes=7).eval()
    with torch.no_grad():  # 112x112: stages at 28, 14, 7 (one window) and 4 (padded to 7)
        assert model(torch.rand(1, 3, 112, 112)).shape == (1, 7)


def test_twin_is_the_same_network_with_a_13x13_depthwise_conv():
    wbmm_cfg, twin_cfg = get_entry("wbmm").config, get_entry("wbmm-dw13").config
    assert wbmm_cfg["dims"] == twin_cfg["dims"]
    for a, b in zip(wbmm_cfg["patterns"], twin_cfg["patterns"], strict=False):
        assert [13 if t == "W" else t for t in a] == list(b)
    twin = get_entry("wbmm-dw13").build()
    convs = [m for m in twin.modules() if isinstance(m, nn.Conv2d) and m.kernel_size == (13, 13)]
    assert len(convs) == sum(t == "W" for p in wbmm_cfg["patterns"] for t in p)
    assert not any(isinstance(m, WBMM) for m in twin.modules())


@pytest.mark.slow
def test_digits_model_learns():
    from edgekit.data import load_dataset
    from edgekit.training import train

    entry = get_entry("wbmm")
    result = train(entry, load_dataset(entry.task), epochs=3)
    assert result.value > 0.8  # 15 epochs (the entry's default) reach about 0.97
    assert isinstance(result.model, WBMMNet)
