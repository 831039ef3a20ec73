"""Shared by the config-tracking tests: files on disk and loads from project code (the `tracker`
fixture is in conftest.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


USER_CODE = """\
\"\"\"The project's own code: the tracker follows only the loads the project itself calls.\"\"\"
import importlib.util
import json
import tomllib

import yaml


def load(path, loader=None, **kwargs):
    path = str(path)
    if loader is None:
        loaders = {".json": json.load, ".toml": tomllib.load}
        loader = loaders.get(path[path.rfind("."):], yaml.safe_load)
    with open(path, "rb" if path.endswith(".toml") else "r") as f:
        return loader(f, **kwargs)
"""
_user_modules: dict[Path, object] = {}


def load(path: Path, loader=None, *, code_in: Path | None = None, **kwargs):
    """Load ``path`` from project code in ``code_in`` (default: the file's directory)."""
    directory = (code_in or path.parent).resolve()
    if directory not in _user_modules:
        source = write(directory / "user_code.py", USER_CODE)
        spec = importlib.util.spec_from_file_location(f"user_code_{len(_user_modules)}", source)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _user_modules[directory] = module
    return _user_modules[directory].load(path, loader, **kwargs)
