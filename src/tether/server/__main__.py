"""``python -m tether.server``: serve the API and the page with uvicorn."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from tether.server.settings import Settings


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tether.server",
        description="Serve the ticket-support API and web page. Settings not given here come from "
        "TETHER_* and OPENAI_* environment variables; set TETHER_JWT_SECRET so tokens survive a restart.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--base-url", help="the model's OpenAI-compatible endpoint (default: OPENAI_BASE_URL)")
    parser.add_argument("--model", help="the model's name (default: OPENAI_MODEL)")
    parser.add_argument("--tickets-db", type=Path, help="the tickets database (default: TETHER_TICKETS_DB)")
    parser.add_argument("--run-db", type=Path, help="the run store (default: TETHER_RUN_DB)")
    parser.add_argument("--kb-index", type=Path, help="a knowledge-base index (default: TETHER_KB_INDEX)")
    parser.add_argument("--seed", action="store_true", help="write the demo users and tickets first")
    args = parser.parse_args(argv)

    import uvicorn

    from tether.server.app import create_app
    from tether.tickets.db import TicketsDB, seed

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    settings = Settings.from_env(base_url=args.base_url, model=args.model)
    changes = {"tickets_db": args.tickets_db, "run_db": args.run_db, "kb_index": args.kb_index}
    settings = replace(settings, **{k: v for k, v in changes.items() if v is not None})
    if args.seed:
        with TicketsDB(settings.tickets_db) as db:
            seed(db)
    uvicorn.run(create_app(settings), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
