"""Shared fixtures: every test gets its own EDGEKIT_HOME, so nothing touches ~/.cache."""
from __future__ import annotations

import pytest


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
