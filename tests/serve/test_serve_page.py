"""The served agent's web page over HTTP: where it is, its headers, and that it ships in the wheel.

The page itself, driven in Chromium, is tested in tests/e2e/test_browser_serve.py.
"""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import aiohttp
from serve_harness import Client, Served

from tether.serve.page import STATIC_DIR

ROOT = Path(__file__).resolve().parents[2]


async def test_the_page_and_its_files_are_served_under_the_services_csp(
    served: Served, session: aiohttp.ClientSession
) -> None:
    with served.process() as (_, base):
        api = Client(base, session)
        page = await api.call("GET", "/", None)  # the page itself needs no credential; the API it calls does
        script = await api.call("GET", "/assets/page.js", None)
        style = await api.call("GET", "/assets/page.css", None)
        missing = await api.call("GET", "/assets/no-such-file.js", None)
        schema = (await api.call("GET", "/openapi.json", None)).body
    assert (page.status, page.content_type) == (200, "text/html")
    csp = {d.strip().split(" ")[0]: d.strip() for d in page.headers["Content-Security-Policy"].split(";")}
    assert csp["default-src"] == "default-src 'self'"
    assert csp["script-src"] == "script-src 'self'"
    assert csp["style-src"] == "style-src 'self'"
    assert csp["connect-src"] == "connect-src 'self'"
    assert csp["frame-ancestors"] == "frame-ancestors 'none'"
    assert page.headers["X-Frame-Options"] == "DENY"
    assert (script.status, script.content_type) == (200, "text/javascript")
    assert (style.status, style.content_type) == (200, "text/css")
    for reply in (script, style, missing):
        assert reply.headers["X-Content-Type-Options"] == "nosniff"
        assert "Content-Security-Policy" in reply.headers
    assert missing.status == 404
    assert '<script type="module" src="/assets/page.js"></script>' in page.body
    assert "/" not in schema["paths"]  # the page is not an API route


def test_the_page_has_no_inline_script_or_style_and_loads_nothing_from_elsewhere() -> None:
    html = (STATIC_DIR / "index.html").read_text()
    for tag in re.findall(r"<script\b[^>]*>", html):
        assert re.search(r'\bsrc="/assets/[\w.-]+"', tag), tag  # no inline script (the CSP would block it anyway)
    assert "<style" not in html and " style=" not in html
    assert not re.search(r"\son\w+=", html)  # no inline event handlers
    assert "http:" not in html and "https:" not in html
    script = re.sub(r"^\s*//.*$", "", (STATIC_DIR / "page.js").read_text(), flags=re.M)  # its code, not comments
    # Server and model text goes in as text only; the browser test feeds the page hostile text to prove it.
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in script, sink
    assert "localStorage" not in script  # the key lives in this tab's sessionStorage only


def test_the_pages_files_are_package_data() -> None:
    """Installed from a wheel, the page is there: every file of it matches tether's package-data."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["tether"]
    package = ROOT / "src" / "tether"
    files = [p.relative_to(package).as_posix() for p in STATIC_DIR.rglob("*") if p.is_file()]
    assert {"serve/static/index.html", "serve/static/page.js", "serve/static/page.css"} <= set(files)
    for name in files:
        assert any(fnmatch(name, pattern) for pattern in patterns), name
