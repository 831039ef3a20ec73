"""A headless Chromium for the HTML pages' tests (run's report, tune's result), and what a
self-contained page must not reference."""

from __future__ import annotations

import re
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")

NETWORK_REF = re.compile(r"""(?:src|href|xlink:href)\s*=\s*["']?\s*(?:https?:)?//|@import|url\(""", re.I)
