"""``trainmedic run`` and ``trainmedic.watch``: why a training job is slow, at the user's line.

Three stages, each a subpackage, each importing only the ones before it:

- ``report.model``: the Report (JSON schema ``trainmedic.report/1``), what every stage shares;
- ``probe``: measures a live job (step clock, stack sampler, op census, hooks, device readings);
- ``diagnose``: turns the measurements into a breakdown, a bottleneck and ranked findings;
- ``report``: renders a Report (console, HTML).

``watch`` wraps a custom loop in Python; the ``trainmedic run`` command lives in ``cli.run``.
"""
