"""ASTRA model: grouped VQ, partitioned blocks, the partitioned-forward oracle, paper configs."""
from __future__ import annotations

import contextlib
import io
import math
import warnings

import numpy as np
import pytest
import torch

from edgekit.data import Dataset, load_dataset
from edgekit.errors import UnknownNameError, UsageError
from edgekit.methods.astra import (
    PAPER_PARAMS,
    AstraBlock,
    AstraViT,
    GroupedVQ,
    build_paper_model,
    partitioned_forward,
    token_shards,
    with_config,
)
from edgekit.registry import create_model, get_entry
from edgekit.training import train

pytestmark = pytest.mark.usefixtures("single_thread")


def _vq(dim: int = 12, groups: int = 3, codes: int = 16, **kw) -> GroupedVQ:
    torch.manual_seed(0)
    return GroupedVQ(dim, groups, codes, **kw)


def test_encode_picks_the_nearest_code_of_each_group():
    vq = _vq()
    x = torch.randn(5, 7, 12)
    idx = vq.encode(x)
    assert idx.shape == (5, 7, 3) and idx.dtype == torch.int64
    for g in range(3):
        dist = torch.cdist(x[..., 4 * g:4 * g + 4].reshape(-1, 4), vq.codebook[g])  # [35, K]
        chosen = dist.gather(1, idx[..., g].reshape(-1, 1))[:, 0]
        torch.testing.assert_close(chosen, dist.min(1).values)
        assert torch.equal(idx[..., g].reshape(-1), dist.argmin(1))
    decoded = vq.decode(idx)
    for g in range(3):
        assert torch.equal(decoded[..., 4 * g:4 * g + 4], vq.codebook[g][idx[..., g]])


def test_codes_round_trip_exactly():
    vq = _vq()
    idx = torch.randint(16, (4, 3))
    assert torch.equal(vq.encode(vq.decode(idx)), idx)


def test_bits_per_token():
    assert GroupedVQ(64, 16).bits_per_token == 160
    assert GroupedVQ(768, 1).bits_per_token == 10
    assert GroupedVQ(768, 32, codes=1000).bits_per_token == 320  # ceil(log2 1000) = 10
    assert GroupedVQ(8, 2, codes=2).bits_per_token == 2


def test_ema_step_moves_codes_to_the_smoothed_mean_of_their_vectors():
    vq = _vq(decay=0.5, eps=1e-5, dead_below=0.0).train()
    vq.seeded.fill_(True)
    before, count0, sum0 = vq.codebook.clone(), vq.ema_count.clone(), vq.ema_sum.clone()
    x = torch.randn(64, 12)
    idx = vq.encode(x)
    vq(x)
    for g in range(3):
        xs = x[:, 4 * g:4 * g + 4]
        count = torch.bincount(idx[:, g], minlength=16).float()
        sums = torch.zeros(16, 4).index_add_(0, idx[:, g], xs)
        c = 0.5 * count0[g] + 0.5 * count
        n = c.sum()
        expected = (0.5 * sum0[g] + 0.5 * sums) / ((c + 1e-5) / (n + 16e-5) * n)[:, None]
        torch.testing.assert_close(vq.codebook[g], expected)
        used = count > 0
        mean = sums[used] / count[used][:, None]
        # every used code ends nearer the mean of its vectors than it started
        assert ((vq.codebook[g][used] - mean).norm(dim=1)
                < (before[g][used] - mean).norm(dim=1)).all()


def test_first_training_batch_seeds_codes_and_dead_codes_restart_on_data():
    vq = _vq(dead_below=0.5).train()
    x = torch.randn(40, 12) + 10.0  # far from the random initial codebook
    vq(x)
    assert bool(vq.seeded)
    data = x.reshape(40, 3, 4).transpose(0, 1)  # [G, N, d]
    for g in range(3):  # every code is within the data's reach: seeded or restarted on it
        assert torch.cdist(vq.codebook[g], data[g]).min(1).values.max() < 5.0
    assert (vq.ema_count >= 0.5).all()


def test_straight_through_gradient_and_commitment_loss():
    vq = _vq().train()
    vq.seeded.fill_(True)
    x = torch.randn(6, 12, requires_grad=True)
    q = vq.decode(vq.encode(x.detach()))
    out, commitment = vq(x)
    torch.testing.assert_close(out, q)
    torch.testing.assert_close(commitment, (x.detach() - q).pow(2).mean())
    (out * torch.arange(12.0)).sum().backward()
    assert torch.equal(x.grad, torch.arange(12.0).expand(6, 12))  # identity through the VQ
    x.grad = None
    vq.eval()  # no EMA step, so q stays the code the loss is measured against
    q = vq.decode(vq.encode(x.detach()))
    vq(x)[1].backward()
    torch.testing.assert_close(x.grad, 2 * (x.detach() - q) / x.numel())


def test_navq_noise_follows_the_residual_distribution_per_group():
    vq = _vq(dim=8, groups=2, codes=4).train()
    vq.seeded.fill_(True)
    x = torch.randn(20000, 8) * torch.tensor([0.5] * 4 + [2.0] * 4) + 0.3
    q = vq.decode(vq.encode(x))
    res = (x - q).reshape(-1, 2, 4)
    out, _ = vq(x, noise_scale=2.0)  # q is taken before this call's EMA step
    noise = ((out - q) / 2.0).reshape(-1, 2, 4)
    for g in range(2):
        assert noise[:, g].mean().item() == pytest.approx(res[:, g].mean().item(), abs=0.03)
        assert noise[:, g].std().item() == pytest.approx(res[:, g].std().item(), rel=0.03)
    q = vq.decode(vq.encode(x))
    torch.testing.assert_close(vq(x, noise_scale=0.0)[0], q)
    vq.eval()
    assert torch.equal(vq(x, noise_scale=1.0)[0], vq.decode(vq.encode(x)))  # no noise in eval


@pytest.mark.parametrize("world_size", [2, 3, 5])
def test_block_on_shards_with_exact_remote_tokens_equals_the_full_block(world_size):
    torch.manual_seed(0)
    block = AstraBlock(32, 4, groups=4).eval()
    x = torch.randn(2, 11, 32)
    full = block(x)
    for s in token_shards(11, world_size):
        remote = torch.cat([x[:, :s.start], x[:, s.stop:]], 1)
        torch.testing.assert_close(block.forward_partitioned(x[:, s], remote), full[:, s],
                                   atol=1e-5, rtol=0)


def test_causal_block_on_shards_sees_only_earlier_ranks():
    torch.manual_seed(0)
    block = AstraBlock(32, 4, causal=True).eval()
    x = torch.randn(2, 10, 32)
    full = block(x)
    for s in token_shards(10, 3):
        torch.testing.assert_close(block.forward_partitioned(x[:, s], x[:, :s.start]),
                                   full[:, s], atol=1e-5, rtol=0)


def test_gpt_prefill_sequence_parallel_equals_single_device():
    torch.manual_seed(0)
    gpt = build_paper_model("gpt2", vocab_size=50, context=16, dim=32, depth=2, heads=4,
                            groups=4, codes=8).eval()
    ids = torch.randint(50, (2, 12))
    torch.testing.assert_close(gpt.prefill_partitioned(ids, 3, "sp"), gpt(ids), atol=1e-5, rtol=0)
    assert gpt.prefill_partitioned(ids, 3, "astra").shape == (2, 12, 50)


@pytest.fixture(scope="module")
def digits_model():
    torch.manual_seed(0)
    return create_model("astra-vit").eval()


@pytest.fixture(scope="module")
def images():
    return get_entry("astra-vit").example_inputs(batch=3)[0]


@pytest.mark.parametrize("world_size", [2, 3, 4, 16])
def test_sequence_parallel_equals_single_device(digits_model, images, world_size):
    with torch.no_grad():
        single = partitioned_forward(digits_model, images, 1, "single")
        sp = partitioned_forward(digits_model, images, world_size, "sp")
    torch.testing.assert_close(sp, single, atol=1e-5, rtol=0)


def _codebooks_holding_exact_tokens(model: AstraViT, images: torch.Tensor) -> None:
    """Put every block input of ``images`` into that block's codebooks (rest pushed far off)."""
    inputs = []
    hooks = [b.register_forward_pre_hook(lambda m, a: inputs.append(a[0][:, 1:]))
             for b in model.blocks]
    with torch.no_grad():
        partitioned_forward(model, images, 1, "single")
    for h in hooks:
        h.remove()
    for block, x in zip(model.blocks, inputs, strict=False):
        vq = block.vq
        tokens = x.reshape(-1, vq.groups, vq.group_dim).transpose(0, 1)  # [G, B*T, d]
        vq.codebook.fill_(1e4)
        vq.codebook[:, :tokens.shape[1]] = tokens


def test_astra_differs_from_sp_only_through_quantisation(images):
    torch.manual_seed(0)
    model = create_model("astra-vit").eval()
    with torch.no_grad():
        sp = partitioned_forward(model, images, 2, "sp")
        assert (partitioned_forward(model, images, 2, "astra") - sp).abs().max() > 1e-3
        _codebooks_holding_exact_tokens(model, images)
        for world_size in (2, 4):
            torch.testing.assert_close(partitioned_forward(model, images, world_size, "astra"),
                                       sp, atol=1e-5, rtol=0)
        torch.testing.assert_close(model(images), sp, atol=1e-5, rtol=0)  # forward = astra at 2


def test_forward_is_astra_at_the_configured_partitions_or_plain(digits_model, images):
    with torch.no_grad():
        torch.testing.assert_close(digits_model(images),
                                   partitioned_forward(digits_model, images, 2, "astra"))
        plain = create_model("astra-vit:plain").eval()
        assert all(b.vq is None for b in plain.blocks)
        torch.testing.assert_close(plain(images), partitioned_forward(plain, images, 1, "single"))


def test_token_shards_are_contiguous_and_balanced():
    for tokens, n in [(16, 2), (16, 3), (1024, 4), (10, 10), (7, 1)]:
        shards = token_shards(tokens, n)
        assert len(shards) == n and shards[0].start == 0 and shards[-1].stop == tokens
        assert all(a.stop == b.start for a, b in zip(shards, shards[1:], strict=False))
        sizes = [s.stop - s.start for s in shards]
        assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


def test_paper_configs_have_the_papers_parameter_counts():
    with torch.device("meta"):
        vit_b, gpt2, vit_s = (build_paper_model(n) for n in ("vit-b", "gpt2", "vit-s"))
    vit_b_params, gpt2_params, vit_s_params = (sum(p.numel() for p in m.parameters())
                                               for m in (vit_b, gpt2, vit_s))
    assert vit_b_params == PAPER_PARAMS["vit-b"] == pytest.approx(86.6e6, abs=5e4)
    assert gpt2_params == PAPER_PARAMS["gpt2"] == pytest.approx(124.4e6, abs=5e4)
    assert vit_s.config.num_tokens == 1024 and vit_s_params / 1e6 == pytest.approx(22.4, abs=0.05)
    assert vit_b.blocks[0].vq.bits_per_token == 320
    assert 768 * 32 / vit_b.blocks[0].vq.bits_per_token == pytest.approx(76.8)  # paper, G=32
    assert 768 * 32 / GroupedVQ(768, 1).bits_per_token == pytest.approx(2457.6)  # paper, G=1


def _one_line(exc: pytest.ExceptionInfo) -> str:
    assert "\n" not in str(exc.value)
    return str(exc.value)


def test_bad_inputs_are_one_line_usage_errors(digits_model, images):
    with pytest.raises(UsageError, match="groups=5 must be a positive divisor of dim=64") as e:
        create_model("astra-vit", groups=5)
    _one_line(e)
    with pytest.raises(UsageError, match="world size 17 exceeds the 16 tokens") as e:
        create_model("astra-vit", partitions=17)
    _one_line(e)
    with pytest.raises(UsageError, match="world size 5 exceeds the 4 tokens"):
        token_shards(4, 5)
    with pytest.raises(UsageError, match="world size 0 must be at least 1"):
        create_model("astra-vit", partitions=0)
    with pytest.raises(UsageError, match=r"shape \[B, 1, 8, 8\], got \[2, 1, 16, 16\]") as e:
        digits_model(torch.rand(2, 1, 16, 16))
    _one_line(e)
    with pytest.raises(UsageError, match="needs a model with VQ codebooks"):
        partitioned_forward(create_model("astra-vit:plain"), images, 2, "astra")
    with pytest.raises(UnknownNameError, match="valid: astra, single, sp"):
        partitioned_forward(digits_model, images, 2, "tp")
    with pytest.raises(UsageError, match="patch_size=3 must divide image_size=8"):
        create_model("astra-vit", patch_size=3)
    with pytest.raises(UnknownNameError, match="ASTRA paper config 'vit-h'"):
        build_paper_model("vit-h")


def test_trainer_pretrains_then_finetunes_through_the_vq():
    full = load_dataset(get_entry("astra-vit").task)
    small = Dataset("digits-small", full.x_train[:128], full.y_train[:128], full.x_test[:64],
                    full.y_test[:64], "small")
    result = train(get_entry("astra-vit"), small, variant="g4", epochs=1)
    model = result.model
    assert result.metric == "accuracy" and result.epochs == 2 and math.isfinite(result.final_loss)
    assert not model.training and all(bool(b.vq.seeded) for b in model.blocks)
    assert all((b.vq.ema_count != 1.0).any() for b in model.blocks)  # EMA steps happened
    x = torch.from_numpy(small.x_test)
    with torch.no_grad():
        expected = (model(x).argmax(-1).numpy() == small.y_test).mean()
    assert result.value == pytest.approx(float(expected))
    assert np.isfinite(result.value)


class _Encoder(torch.nn.Module):
    def __init__(self, vq: GroupedVQ) -> None:
        super().__init__()
        self.vq = vq

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.vq.encode(x)


@pytest.mark.parametrize("dynamo", [False, True])
def test_encoding_exports_to_onnx_as_an_argmin(tmp_path, dynamo):
    import onnx
    import onnxruntime as ort

    vq = _vq(dim=64, groups=16, codes=1024).eval()
    x = torch.randn(2, 8, 64)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(_Encoder(vq), (x,), str(tmp_path / "enc.onnx"), dynamo=dynamo,
                          opset_version=18, input_names=["x"], output_names=["codes"])
    assert "ArgMin" in {n.op_type for n in onnx.load(str(tmp_path / "enc.onnx")).graph.node}
    session = ort.InferenceSession(str(tmp_path / "enc.onnx"), providers=["CPUExecutionProvider"])
    (codes,) = session.run(None, {"x": x.numpy()})
    np.testing.assert_array_equal(codes, vq.encode(x).numpy())


def test_with_config_keeps_the_weights_and_starts_fresh_codebooks(digits_model, images):
    g4 = with_config(digits_model, groups=4, noise_scale=0.0)
    assert g4.config.groups == 4 and g4.config.noise_scale == 0.0
    assert g4.edgekit_cfg["config"]["groups"] == 4
    assert not bool(g4.blocks[0].vq.seeded) and g4.blocks[0].vq.codebook.shape == (4, 1024, 16)
    for (name, p), q in zip(digits_model.named_parameters(), g4.parameters(), strict=False):
        assert torch.equal(p, q), name
    with torch.no_grad():
        torch.testing.assert_close(partitioned_forward(g4, images, 2, "sp"),
                                   partitioned_forward(digits_model, images, 2, "sp"))


@torch.no_grad()
def test_one_group_codes_keys_and_values_are_a_table_lookup():
    torch.manual_seed(0)
    block = AstraBlock(32, 4, groups=1, codes=64).eval()
    block.vq.codebook.normal_()
    local, tokens = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    idx = block.vq.encode(tokens)[..., 0]  # [2, 7]
    keys, values = block.code_keys_values()  # [64, 32] each
    torch.testing.assert_close(
        block.forward_partitioned(local, remote_kv=(keys[idx], values[idx])),
        block.forward_partitioned(local, block.vq.decode(idx[..., None])), atol=1e-5, rtol=1e-5)
    with pytest.raises(UsageError, match="one-group"):
        AstraBlock(32, 4, groups=4, codes=64).code_keys_values()
