from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _own_cache(tmp_path_factory):
    """The measured CPU ceilings are cached per user; tests measure once into their own folder."""
    saved = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    yield
    if saved is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = saved
