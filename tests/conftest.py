"""Shared fixtures: every test gets its own EDGEKIT_HOME, so nothing touches ~/.cache."""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# `make test` runs one xdist worker per core. A worker, or a process it starts, that also takes
# every core for its OpenMP and BLAS pools oversubscribes the machine: its threads spin at
# barriers waiting for a core the other worker holds (why ``single_thread`` exists). Set before
# any test imports torch or numpy, and inherited by the CLI and fleet processes the tests start.
if "PYTEST_XDIST_WORKER" in os.environ:
    for _pool in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_pool, "1")


# `python -m pytest` from the repository root puts the root first on sys.path, where the source
# folders edgekit installs as subpackages (kernels/, profiles/, exporters/) would import as
# top-level packages and shadow installed ones of the same name (transformers imports Hugging
# Face's `kernels`). The root goes last: installed packages win, `tests.*` still imports.
_ROOT = str(Path(__file__).resolve().parents[1])
_FIRST = [p for p in sys.path if p in ("", ".", _ROOT)]
sys.path[:] = [p for p in sys.path if p not in _FIRST] + _FIRST


@pytest.fixture(scope="session", autouse=True)
def numba_cache(tmp_path_factory) -> Path:
    """One Numba cache for the run's workers and the CLI processes they start (inherited), so
    WiFi-Mamba's scan kernel is compiled once per run rather than once per process that meets
    it (edgekit would otherwise cache it under each test's own EDGEKIT_HOME)."""
    root = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:
        root = root.parent  # this run's folder, shared by its workers
    os.environ.setdefault("NUMBA_CACHE_DIR", str(root / "numba-cache"))
    return Path(os.environ["NUMBA_CACHE_DIR"])


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


@contextlib.contextmanager
def _home(home: Path) -> Iterator[None]:
    """``EDGEKIT_HOME`` set to ``home`` for a session fixture (monkeypatch is per test)."""
    before = os.environ.get("EDGEKIT_HOME")
    os.environ["EDGEKIT_HOME"] = str(home)
    try:
        yield
    finally:
        if before is None:
            del os.environ["EDGEKIT_HOME"]
        else:
            os.environ["EDGEKIT_HOME"] = before


def _shared_home(tmp_path_factory, name: str, fill: Callable[[], object]) -> Path:
    """An EDGEKIT_HOME that ``fill()`` fills once per test run: under xdist one worker fills it
    while any other that needs it waits on the lock, then every worker reads the same folder."""
    root = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:
        root = root.parent  # this run's folder, shared by its workers
    home, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            with _home(home):
                fill()
            done.touch()
    return home


@pytest.fixture(scope="session")
def trained_home(tmp_path_factory) -> Path:
    """An EDGEKIT_HOME whose compare cache holds mlp:small trained as ``compare`` trains it: once
    per test run, for the tests that need trained weights."""
    from edgekit.compare.cache import cached_checkpoint
    from edgekit.data import load_dataset
    from edgekit.registry import get_entry

    entry = get_entry("mlp")
    return _shared_home(tmp_path_factory, "trained-home",
                        lambda: cached_checkpoint(entry, "small", load_dataset(entry.task)))


@pytest.fixture(scope="session")
def wifi_pose_home(tmp_path_factory) -> Path:
    """An EDGEKIT_HOME whose dataset cache holds the default wifi-pose-sim data: simulating it
    takes about 20 s, so once per test run rather than in each test that loads it."""
    from edgekit.data import load_dataset
    from edgekit.methods.wifi_mamba.dataset import WIFI_POSE

    return _shared_home(tmp_path_factory, "wifi-pose-home", lambda: load_dataset(WIFI_POSE.task))


@pytest.fixture
def wifi_pose_sim(wifi_pose_home, edgekit_home) -> Path:
    """The default wifi-pose-sim data, copied into this test's EDGEKIT_HOME dataset cache, where
    its loader (in this process or a CLI one) reads it instead of simulating it."""
    return shutil.copytree(wifi_pose_home, edgekit_home, dirs_exist_ok=True)


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


@pytest.fixture(scope="session")
def tiny_qwen(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny random Qwen-MoE checkpoint (seed 3) and its ZipMoE store, shared read-only by
    the ZipMoE tests (a test that corrupts a store copies it first)."""
    from edgekit.methods.zipmoe.compress import compress_checkpoint
    from edgekit.methods.zipmoe.tiny import make_tiny_checkpoint

    root = tmp_path_factory.mktemp("tiny-qwen")
    ckpt = make_tiny_checkpoint(root / "ckpt", "qwen", seed=3)
    compress_checkpoint(ckpt, root / "store")
    return ckpt, root / "store"
