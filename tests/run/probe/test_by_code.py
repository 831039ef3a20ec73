"""The sampler's per-function caches: keyed by code object identity, each code object kept alive."""

from __future__ import annotations

import gc

from trainmedic.run.probe.by_code import ByCode
from trainmedic.run.probe.frames import FrameClassifier


def _code(source: str):
    return compile(source, "<test>", "exec")


def test_a_code_object_is_found_by_identity_not_by_equality():
    cache: ByCode[str] = ByCode()
    first, twin = _code("x = 1"), _code("x = 1")
    assert first == twin  # equal code objects (what a dict keyed by them would merge)...
    cache[first] = "first"
    assert cache.get(first) == "first" and cache.get(twin) is None  # ...are two entries here
    cache[twin] = "twin"
    assert (cache.get(first), cache.get(twin), len(cache)) == ("first", "twin", 2)


def test_a_cached_code_object_stays_alive_so_its_id_is_never_reused():
    cache: ByCode[int] = ByCode()
    code = _code("y = 2")
    cache[code] = 7
    ident = id(code)
    del code
    gc.collect()
    newcomers = [_code(f"z = {i}") for i in range(200)]  # would likely reuse a freed id
    assert all(id(c) != ident for c in newcomers)


def test_the_classifier_judges_each_file_once_however_many_functions_it_has(tmp_path, monkeypatch):
    classifier = FrameClassifier(cwd=str(tmp_path))
    asked: list[str] = []
    real = type(classifier._user).__contains__
    monkeypatch.setattr(
        type(classifier._user), "__contains__", lambda self, path: asked.append(path) or real(self, path)
    )
    path = str(tmp_path / "train.py")
    assert classifier.is_user_file(path) and classifier.is_user_file(path)
    assert asked == [path]
