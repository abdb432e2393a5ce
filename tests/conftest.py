"""Shared fixtures: every test gets its own EDGEKIT_HOME, so nothing touches ~/.cache."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def edgekit_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("edgekit-home")
    monkeypatch.setenv("EDGEKIT_HOME", str(home))
    return home
