"""The public API: one sorted __all__, every name importable, nothing private leaking."""

import trainmedic


def test_all_is_sorted_and_complete():
    assert trainmedic.__all__ == sorted(trainmedic.__all__)
    for name in trainmedic.__all__:
        assert hasattr(trainmedic, name), name
    public = {n for n in vars(trainmedic) if not n.startswith("_") and not isinstance(getattr(trainmedic, n), type(trainmedic))}
    assert public <= set(trainmedic.__all__), public - set(trainmedic.__all__)


def test_plan_api_is_one_sorted_all():
    import trainmedic.plan as plan

    assert plan.__all__ == sorted(plan.__all__)
    assert all(hasattr(plan, name) for name in plan.__all__)
