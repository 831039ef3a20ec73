"""Measuring a live training job: step clock, stack sampler, op census, torch hooks, device readings.

This layer never prints and never exits; it returns measurements or raises ``trainmedic.errors``.
"""
