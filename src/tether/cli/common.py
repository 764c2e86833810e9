"""What the CLI's commands share: exit codes, errors, common options, the store."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from tether.core.errors import ApprovalMismatch, ConfigurationError
from tether.core.machine import Status

EXIT_CODES: dict[Status, int] = {
    Status.COMPLETED: 0,
    Status.MAX_STEPS: 10,
    Status.BUDGET_EXHAUSTED: 11,
    Status.TRUNCATED: 12,
    Status.CONTENT_FILTERED: 13,
    Status.PROTOCOL_ERROR: 14,
    Status.LOOP_DETECTED: 15,
    Status.REPAIR_EXHAUSTED: 16,
    Status.MODEL_ERROR: 17,
    Status.CANCELLED: 18,
    Status.AWAITING_APPROVAL: 20,
    Status.AWAITING_RECONCILIATION: 21,
}
EXIT_INTERNAL = 1
EXIT_CONFIGURATION = ConfigurationError.exit_code
# The run is not waiting for what the command does: no such pending call, other arguments, or already ended.
EXIT_NOT_WAITING = ApprovalMismatch.exit_code


# The ``code`` of a failure's JSON object (``--json``), by exit status.
ERROR_CODES: dict[int, str] = {
    EXIT_INTERNAL: "internal_error",
    2: "usage_error",
    EXIT_CONFIGURATION: "configuration_error",
    4: "model_error",
    5: "lease_held",
    6: "tampered",
    EXIT_NOT_WAITING: "not_waiting",
    **{code: status.value for status, code in EXIT_CODES.items()},
}


def report_failure(message: str, code: int) -> None:
    """Say why the command fails: with ``--json`` one JSON object on stdout, else a line on stderr.

    The object is ``{"error": {"code": ..., "message": ..., "exit": N}}``, and the command exits N.
    """
    context = click.get_current_context(silent=True)
    if context is not None and context.params.get("as_json"):
        error = {"code": ERROR_CODES.get(code, "error"), "message": message, "exit": code}
        click.echo(json.dumps({"error": error}, ensure_ascii=False))
    else:
        click.echo(f"error: {message}", err=True)


def fail(message: str, code: int = EXIT_CONFIGURATION) -> NoReturn:
    report_failure(message, code)
    sys.exit(code)


def open_store(db: str | None, log_content: bool = False, *, lease_seconds: float | None = None) -> Any:
    """The run store ``--db`` (else ``$TETHER_DB``) names: a ``postgresql://`` url or a SQLite file."""
    from tether.store import open_store as open_run_store

    leases = {} if lease_seconds is None else {"lease_seconds": lease_seconds}
    return open_run_store(db, log_content=log_content, **leases)


def seconds(at_most: float | None = None) -> Callable[[click.Context, click.Parameter, float | None], float | None]:
    """An option's check (``type=float, callback=seconds()``): a number of seconds, finite and above 0, and at
    most ``at_most``; anything else is a usage error (exit 2)."""

    def check(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
        if value is None:
            return None
        if not (math.isfinite(value) and value > 0):
            raise click.BadParameter(f"{value:g} is not a number of seconds above 0", ctx, param)
        if at_most is not None and value > at_most:
            raise click.BadParameter(f"{value:g} is more than {at_most:g} seconds", ctx, param)
        return value

    return check


db_option = click.option(
    "--db",
    metavar="FILE|URL",
    help="Run store: a SQLite file or a postgresql:// url [env: TETHER_DB; default ~/.local/share/tether/tether.db].",
)
json_option = click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print one JSON object; a failure too: {"error": {"code", "message", "exit"}} on stdout.',
)
api_key_option = click.option("--api-key", help="API key [env: OPENAI_API_KEY].")
