"""tether.server: the ticket-support HTTP API and its web page (docs/tickets-service.md).

Run it with ``python -m tether.server --seed --base-url http://127.0.0.1:8080/v1``.
"""

from tether.server.app import create_app
from tether.server.settings import Settings

__all__ = ["Settings", "create_app"]
