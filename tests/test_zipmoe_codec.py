"""ZipMoE codec: bit-exact round trips, the split's formulas, refusals, checksums, measures."""
from __future__ import annotations

import concurrent.futures as cf

import numpy as np
import pytest
import torch

from edgekit.kernels import zipmoe_codec as z

SPECIALS = [float("inf"), float("-inf"), float("nan"), -0.0, 0.0, 1e-40, -1e-40, 65504.0, 3e38]


def _bits(t: torch.Tensor) -> torch.Tensor:
    view = {2: torch.int16, 4: torch.int32}[t.element_size()]
    return t.contiguous().view(view)


def _sample(dtype: torch.dtype, shape=(257, 33)) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    t = (torch.randn(shape, generator=g) * 0.02).to(dtype)
    flat = t.view(-1)
    flat[:len(SPECIALS)] = torch.tensor(SPECIALS).to(dtype)
    return t


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("codec_name", z.CODECS)
def test_round_trip_is_bit_exact(dtype, codec_name):
    t = _sample(dtype)
    with cf.ThreadPoolExecutor(2) as pool:
        for chunks in (1, 3, 5):
            enc = z.encode(t, codec_name, chunks=chunks, pool=pool, min_chunk_values=1)
            assert len(enc.chunks) == chunks
            for out in (z.decode(enc), z.decode(enc, pool)):
                assert out.dtype == dtype and out.shape == t.shape
                assert torch.equal(_bits(out), _bits(t))


@pytest.mark.parametrize("shape", [(0,), (1,), (3, 0, 2), (5,)])
def test_round_trip_edge_shapes(shape):
    t = torch.randn(shape).to(torch.bfloat16)
    enc = z.encode(t, chunks=4)
    assert torch.equal(_bits(z.decode(enc)), _bits(t))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_every_16_bit_pattern_survives_the_split(dtype):
    """All 65536 upper halves (every sign, exponent and NaN payload), in every chunk slice."""
    words = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32)
    if dtype == torch.float32:
        t = (words << 16 | (words * 40503) & 0xFFFF).view(torch.float32)
    else:
        t = words.to(torch.int16).view(dtype)
    exponent, raw = z.split_planes(t)
    assert torch.equal(_bits(z.merge_planes(exponent, raw, dtype, t.shape)), _bits(t))
    out = np.empty(t.numel(), z.split_for(dtype).word)
    for start, stop in z.chunk_bounds(t.numel(), 3):
        z.reconstruct_into(out, exponent[start:stop], raw, start, stop)
    assert torch.equal(_bits(z.words_to_tensor(out, z.split_for(dtype), t.shape)), _bits(t))


def test_split_formulas_of_known_bf16_values():
    # 1.0 = 0x3F80, -2.0 = 0xC000, -1.5 = 0xBFC0
    t = torch.tensor([1.0, -2.0, -1.5], dtype=torch.bfloat16)
    exponent, sm = z.split_planes(t)
    assert exponent.tolist() == [0x7F, 0x80, 0x7F]
    assert sm.tolist() == [0x00, 0x80, 0x80 | 0x40]
    assert torch.equal(_bits(z.merge_planes(exponent, sm, torch.bfloat16, (3,))), _bits(t))


def test_fp32_keeps_its_low_mantissa_raw():
    t = torch.tensor([1.0 + 2**-20], dtype=torch.float32)  # a bit bf16 cannot hold
    exponent, raw = z.split_planes(t)
    assert raw.size == 3 and exponent.size == 1
    assert z.raw_bits(torch.float32) == 24 and z.raw_bits(torch.bfloat16) == 8
    assert torch.equal(z.merge_planes(exponent, raw, torch.float32, (1,)), t)


@pytest.mark.parametrize("dtype", [torch.int8, torch.float64, torch.bool, torch.int64])
def test_other_dtypes_are_refused_clearly(dtype):
    with pytest.raises(z.CodecError, match=r"dtype .* has no exponent/sign-mantissa split"):
        z.encode(torch.zeros(4, dtype=dtype))


def test_bad_settings_are_usage_errors():
    t = torch.zeros(4, dtype=torch.bfloat16)
    with pytest.raises(z.UsageError, match="unknown codec 'gzip'"):
        z.encode(t, "gzip")
    with pytest.raises(z.UsageError, match="level 99 is out of range"):
        z.encode(t, "zstd", level=99)
    with pytest.raises(z.UsageError, match="at least 1"):
        z.encode(t, chunks=0)


def test_corrupt_chunk_and_raw_bytes_are_detected():
    t = _sample(torch.bfloat16)
    enc = z.encode(t, chunks=2, min_chunk_values=1)
    bad = bytearray(enc.chunks[1].data)
    bad[len(bad) // 2] ^= 0x01
    enc.chunks[1].data = bytes(bad)
    with pytest.raises(z.ChecksumError, match="my.weight: exponent chunk .* fails its CRC-32"):
        z.decode(enc, name="my.weight")
    enc = z.encode(t, chunks=2)
    enc.raw = enc.raw[:-1] + bytes([enc.raw[-1] ^ 0x80])
    with pytest.raises(z.ChecksumError, match="sign-mantissa bytes fail their CRC-32"):
        z.decode(enc)


def test_chunk_bounds_cover_the_range():
    for n, k, m in [(10, 3, 1), (2, 5, 1), (0, 4, 1), (1 << 18, 4, 1 << 16), (1000, 4, 1 << 16)]:
        bounds = z.chunk_bounds(n, k, m)
        if n == 0:
            assert bounds == []
            continue
        assert bounds[0][0] == 0 and bounds[-1][1] == n and len(bounds) <= k
        assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    assert len(z.chunk_bounds(1000, 4, 1 << 16)) == 1
    assert len(z.chunk_bounds(1 << 18, 4, 1 << 16)) == 4


def test_entropy_and_bits_per_param():
    assert z.entropy_bits(np.ones(256)) == pytest.approx(8.0)
    assert z.entropy_bits(np.array([5, 0, 0])) == 0.0
    t = (torch.randn(1 << 16) * 0.02).to(torch.bfloat16)
    h = z.entropy_bits(z.exponent_histogram(t))
    enc = z.encode(t)
    assert 1.5 < h < 4.0
    # The order-0 bound of the scheme is 8 raw bits + H; zstd's optimal parser lands close.
    assert 8 + h - 0.05 < enc.bits_per_param < 8 + h + 0.3
