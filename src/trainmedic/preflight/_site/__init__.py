"""Holds only the sitecustomize.py that ``trainmedic preflight`` puts first on a child's PYTHONPATH.

The folder itself goes on PYTHONPATH, so nothing else may live here: every module in it would
shadow a user's module of the same name.
"""
