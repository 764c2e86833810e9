"""What the browser tests need, and the one rule when it is missing.

They drive Debian's Chromium with playwright-core from ``tests/e2e/node_modules``
(Node, no browser download). Set up once per machine, CI too::

    apt-get update && apt-get install -y chromium
    npm ci --prefix tests/e2e

Without it a browser test skips, unless TETHER_REQUIRE_BROWSER is set (``make
test`` sets it, so a broken set-up fails instead of skipping).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

E2E = Path(__file__).resolve().parent
CHROMIUM = Path(os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"))
SETUP = "apt-get install -y chromium && npm ci --prefix tests/e2e"


def missing() -> str | None:
    """Why the browser cannot be driven here, or None."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing"
    if not (E2E / "node_modules" / "playwright-core").is_dir():
        return "tests/e2e/node_modules has no playwright-core"
    return None


def require_browser(what: str, also: str | None = None) -> None:
    """Skip (or, under TETHER_REQUIRE_BROWSER, fail) the test ``what`` when the browser or ``also`` is missing."""
    reason = also or missing()
    if reason is not None:
        message = f"{what}: {reason} (run: {SETUP})"
        if os.environ.get("TETHER_REQUIRE_BROWSER"):
            pytest.fail(message)
        pytest.skip(message)
