"""Shared fixtures: every test gets its own EDGEKIT_HOME, so nothing touches ~/.cache."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

# `make test` runs one xdist worker per core. A worker, or a process it starts, that also takes
# every core for its OpenMP and BLAS pools oversubscribes the machine: its threads spin at
# barriers waiting for a core the other worker holds (why ``single_thread`` exists). Set before
# any test imports torch or numpy, and inherited by the CLI and fleet processes the tests start.
if "PYTEST_XDIST_WORKER" in os.environ:
    for _pool in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_pool, "1")


@pytest.fixture(autouse=True)
def edgekit_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("edgekit-home")
    monkeypatch.setenv("EDGEKIT_HOME", str(home))
    return home


@pytest.fixture(scope="module")
def single_thread():
    """One torch intra-op thread and one BLAS thread: on a shared 2-core machine a second thread
    mostly waits at OpenMP barriers, and numpy's spinning BLAS pool (after an SVD or a
    pseudo-inverse) slows the torch code that follows by 10x or more."""
    import torch
    from threadpoolctl import threadpool_limits

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(1):
        yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def trained_home(tmp_path_factory):
    """An EDGEKIT_HOME whose compare cache holds mlp:small trained as ``compare`` trains it: once
    per session (per xdist worker), for the tests that need trained weights."""
    from edgekit.compare.cache import cached_checkpoint
    from edgekit.data import load_dataset
    from edgekit.registry import get_entry

    home = tmp_path_factory.mktemp("trained-home")
    before = os.environ.get("EDGEKIT_HOME")
    os.environ["EDGEKIT_HOME"] = str(home)
    try:
        entry = get_entry("mlp")
        cached_checkpoint(entry, "small", load_dataset(entry.task))
    finally:
        if before is None:
            del os.environ["EDGEKIT_HOME"]
        else:
            os.environ["EDGEKIT_HOME"] = before
    return home


@pytest.fixture
def trained_mlp(trained_home, edgekit_home) -> Path:
    """The trained mlp:small checkpoint, copied into this test's EDGEKIT_HOME cache, where
    ``compare("mlp:small")`` finds it instead of training."""
    shutil.copytree(trained_home, edgekit_home, dirs_exist_ok=True)
    return next(edgekit_home.rglob("*.safetensors"))


@pytest.fixture(scope="module")
def one_compute_thread():
    """One intra-op thread for a module (``pytestmark = usefixtures("one_compute_thread")``): the
    ZipMoE decode workers and routing traces use the other cores, and OpenMP barriers stall badly
    on a shared, oversubscribed machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
