from trainmedic.run.probe.decimate import Decimator


def test_keeps_everything_under_capacity():
    d = Decimator(capacity=8)
    for i in range(8):
        d.add(i, i * 10)
    assert d.items() == [(i, i * 10) for i in range(8)]


def test_stays_bounded_and_spread_over_the_whole_run():
    d = Decimator(capacity=16)
    for i in range(100_000):
        d.add(i, float(i))
    items = d.items()
    assert len(items) <= 16
    indices = [i for i, _ in items]
    assert indices[0] == 0
    assert indices[-1] > 90_000  # the end of the run is still represented
    gaps = {b - a for a, b in zip(indices, indices[1:])}
    assert gaps == {d.stride}  # evenly spread
