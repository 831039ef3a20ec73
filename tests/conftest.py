"""Fixtures shared across the test folders."""

from __future__ import annotations

import fcntl
import os
import sys

import pytest
from browser_kit import CHROMEDRIVER, CHROMIUM

# Bytecode caching on, for this run and every interpreter it starts, even where the machine turns it
# off (PYTHONDONTWRITEBYTECODE): hundreds of new interpreters import trainmedic, and without a
# cache each one compiles every module it imports again.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not found: the browser test needs headless Chromium. "
            "Install it with `apt-get install chromium chromium-driver` (CI does)."
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    profile = tmp_path_factory.mktemp("chromium-profile")
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--window-size=1280,2000",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield drv
    finally:
        drv.quit()


#: A test that needs one of these services is slow as well: `-m "not slow"` never waits for one.
SERVICES = ("postgres", "chromium", "ray", "torchrun")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.get_closest_marker(name) for name in SERVICES):
            item.add_marker(pytest.mark.slow)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "alone: the test compares measured speeds, so no other test runs beside it while it does "
        "(one more busy worker on a 2-core machine halves and jitters what it measures)",
    )


@pytest.fixture(autouse=True)
def _cpu_share(request, tmp_path_factory):
    """Under xdist every test holds a shared lock on one file and an ``alone`` test an exclusive
    one: while a speed comparison runs, the other workers wait between their tests.

    flock grants a shared lock while an exclusive one waits, so on a machine with more workers an
    ``alone`` test could wait until all the others happened to be between tests at once (22 s in
    one run with three workers on a 2-vCPU VM). Every test passes through a gate first, and an
    ``alone`` test holds the gate while it waits: it waits only for the tests already running."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    alone = request.node.get_closest_marker("alone") is not None
    folder = tmp_path_factory.getbasetemp().parent
    with open(folder / "cpu.gate", "a") as gate, open(folder / "cpu.lock", "a") as handle:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(gate, fcntl.LOCK_UN)
