"""The documentation site in a real browser: built by mkdocs, served over HTTP, opened in headless Chromium.

The site is built from this checkout's mkdocs.yml into a temporary folder
and served by Python's ``http.server`` on a free loopback port. ``site.mjs``
(Node, playwright-core, Debian's Chromium, started as ``browser.mjs`` starts
it) types "approval" and "reconcile" into Material's search box and reads the
results, then walks the site from its home page: every same-origin link of
every page, each fetched once. Nothing here names a page, so the test holds
for whatever pages the site has.

Needs, once per machine (CI too), besides the ``docs`` extra::

    apt-get update && apt-get install -y chromium
    npm ci --prefix tests/e2e        # or: npm install --prefix tests/e2e

Without them the test skips, unless TETHER_REQUIRE_BROWSER is set: then it fails.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import pytest
from chromium import CHROMIUM, require_browser

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SCRIPT = HERE / "site.mjs"
QUERIES = ("approval", "reconcile")

pytestmark = pytest.mark.timeout(300)


def require_site_browser() -> None:
    docs = None if importlib.util.find_spec("mkdocs") else "mkdocs is not installed (pip install -e '.[docs]')"
    require_browser("site e2e", docs)


class _StaticHost(http.server.SimpleHTTPRequestHandler):
    """Serves files as a static host does: a folder without an index.html is a 404, not a listing."""

    def list_directory(self, path: str | os.PathLike[str]) -> None:
        self.send_error(404, "File not found")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serve(folder: Path) -> Iterator[str]:
    """Serve ``folder`` on 127.0.0.1 from a thread; yields the base URL."""
    handler = functools.partial(_StaticHost, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def drive(folder: Path, *queries: str) -> tuple[str, dict[str, Any]]:
    """Serve ``folder``, run site.mjs against it; the base URL and site.mjs's report."""
    with serve(folder) as base:
        env = {**os.environ, "CHROMIUM_PATH": str(CHROMIUM)}
        done = subprocess.run(
            ["node", str(SCRIPT), base, *queries], cwd=HERE, env=env, capture_output=True, text=True, timeout=240
        )
    assert done.returncode == 0, done.stdout + done.stderr
    return base, json.loads(done.stdout.strip().splitlines()[-1])


def built_pages(folder: Path, base: str) -> set[str]:
    """The URL of each page mkdocs built (``x/index.html`` is served as ``x/``), but its 404 page."""
    pages = set()
    for html in folder.rglob("*.html"):
        path = html.relative_to(folder).as_posix()
        if path != "404.html":
            pages.add(urljoin(base, path.removesuffix("index.html")))
    return pages


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_site_browser()
    folder = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f", str(ROOT / "mkdocs.yml")]
    done = subprocess.run(
        [*build, "-d", str(folder)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return folder


@pytest.fixture(scope="module")
def walked(site: Path) -> tuple[str, dict[str, Any]]:
    return drive(site, *QUERIES)


@pytest.mark.parametrize("query", QUERIES)
def test_the_search_box_finds_pages(query: str, walked: tuple[str, dict[str, Any]]) -> None:
    base, report = walked
    found = report["searches"][query]
    assert found["links"], f"searching {query!r} found nothing: {found['meta']}"
    for link in found["links"]:
        page = urlunsplit(urlsplit(link)._replace(query="", fragment=""))  # a result adds ?h=QUERY#heading
        assert page.startswith(base) and report["links"].get(page) == 200, f"{query!r} links to {link}"


def test_every_link_of_every_page_answers_200(walked: tuple[str, dict[str, Any]]) -> None:
    _, report = walked
    broken = {url: (status, report["from"][url]) for url, status in report["links"].items() if status != 200}
    assert broken == {}, "url: (status, the first page linking it)"
    assert len(report["pages"]) > 1


def test_the_links_reach_every_page_the_site_has(site: Path, walked: tuple[str, dict[str, Any]]) -> None:
    base, report = walked
    assert built_pages(site, base) - set(report["pages"]) == set()


def test_the_walk_reports_a_link_to_a_page_that_is_gone(site: Path, tmp_path: Path) -> None:
    # The walk itself can fail: the same site with one linked page deleted.
    copy = tmp_path / "site"
    shutil.copytree(site, copy)
    pages = sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*.html"))
    gone = next(p for p in pages if p not in ("index.html", "404.html"))  # x.html, or x/index.html served as x/
    (copy / gone).unlink()
    base, report = drive(copy)
    url = urljoin(base, gone.removesuffix("index.html"))
    assert report["links"][url] == 404
    assert url not in report["pages"]
