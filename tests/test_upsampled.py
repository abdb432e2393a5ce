"""Digits upsampled to a paper config's input size (benchmarks/spik4lite_cifar.py trains the
CIFAR-size Spikingformer on them)."""
from __future__ import annotations

import numpy as np
import pytest

from edgekit.data import DIGITS, load_dataset, upsampled
from edgekit.errors import UsageError


@pytest.fixture(scope="module")
def digits():
    return load_dataset(DIGITS.task)


def test_upsampled_keeps_labels_and_split_and_repeats_the_channel(digits):
    big = upsampled(digits, 32, 3)
    assert big.x_train.shape == (len(digits.x_train), 3, 32, 32)
    assert big.x_test.shape == (len(digits.x_test), 3, 32, 32)
    assert big.x_train.dtype == np.float32
    np.testing.assert_array_equal(big.y_train, digits.y_train)
    np.testing.assert_array_equal(big.y_test, digits.y_test)
    np.testing.assert_array_equal(big.x_test[:, 0], big.x_test[:, 2])
    # bilinear: the values stay within the source's range and the mean barely moves
    assert big.x_test.min() >= digits.x_test.min() and big.x_test.max() <= digits.x_test.max()
    assert abs(big.x_test.mean() - digits.x_test.mean()) < 0.02 * digits.x_test.max()
    assert big.digest != digits.digest and big.digest == upsampled(digits, 32, 3).digest
    assert upsampled(digits, 32, 1).digest != big.digest
    assert "32x32" in big.name


def test_upsampled_refuses_multichannel_images(digits):
    with pytest.raises(UsageError, match="single-channel"):
        upsampled(upsampled(digits, 16, 3), 32, 3)
