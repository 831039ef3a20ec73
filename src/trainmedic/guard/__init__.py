"""guard: keep long runs alive and catch their pitfalls before they run.

``trainmedic.guard.lint`` reads training code and names the seeds' pitfalls (TM1xx) at their
line; it never imports or runs the code it reads.
"""
