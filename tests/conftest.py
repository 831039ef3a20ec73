"""Fixtures shared across the test folders."""

from __future__ import annotations

import pytest
from browser_kit import CHROMEDRIVER, CHROMIUM


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
