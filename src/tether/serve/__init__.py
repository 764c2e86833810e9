"""Serve any Agent over HTTP: ``tether serve PATH_OR_MODULE:agent``, or ``tether.serve.app(agent, ...)``.

Needs the ``server`` extra (FastAPI, uvicorn, pyjwt). Who is calling comes
from an ``Authenticator`` (``tether.serve.identity``).
"""

from tether.serve.app import app

__all__ = ["app"]
