"""The served agent's web page: ``/`` and its files under ``/assets`` (``tether.serve.static``).

Plain HTML, one JavaScript module and one stylesheet, no build step. The
page calls the same API as any client, with the same ``Authorization:
Bearer`` header (the key or token a person pastes in, kept in the tab's
``sessionStorage``); it holds no credential of its own, so serving it needs
none. It runs under the service's Content-Security-Policy
(``tether.serve.headers.SECURITY_HEADERS``): scripts and styles from this
origin only, nothing inline, and everything the server, a model or a tool
wrote reaches the page as text, never as HTML.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parent / "static"  # package data (pyproject: tool.setuptools.package-data)
ASSETS = "/assets"


def mount_page(api: FastAPI) -> None:
    """Serve the page at ``/`` and its script and stylesheet under ``ASSETS``."""
    index = STATIC_DIR / "index.html"

    @api.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        # Revalidated on every load: a page cached from an older version would call routes that changed.
        return FileResponse(index, media_type="text/html", headers={"Cache-Control": "no-cache"})

    api.mount(ASSETS, StaticFiles(directory=STATIC_DIR), name="assets")
