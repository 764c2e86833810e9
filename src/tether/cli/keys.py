"""``tether keys``: the API keys ``tether serve --auth keys`` accepts, kept in the run store.

A key is printed once, when it is made; the store keeps only its hash, so
neither ``list`` nor anything else can show it again. A revoked key stops
working at once, in every process serving from the store.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from tether.cli.common import EXIT_CONFIGURATION, db_option, fail, json_option, open_store
from tether.core.errors import NoStore, TetherError
from tether.store.keys import ApiKey


def _names(values: tuple[str, ...]) -> list[str]:
    """Repeated options, each also a comma-separated list: ``--roles approver,auditor --roles admin``."""
    return [part.strip() for value in values for part in value.split(",")]


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


@click.group()
def keys() -> None:
    """Make, list and revoke the API keys of `tether serve --auth keys`."""


@keys.command("create")
@click.option("--principal", required=True, help="Who the key acts for: runs it starts are this principal's.")
@click.option(
    "--roles",
    multiple=True,
    metavar="ROLE[,ROLE...]",
    help="A role the key holds (repeatable, or comma-separated); `approver` may decide approvals.",
)
@click.option(
    "--scope",
    multiple=True,
    metavar="SCOPE[,SCOPE...]",
    help="A scope the key holds (repeatable, or comma-separated); `*` holds every scope. Default: none (only"
    " tools that need no scope are offered).",
)
@db_option
@json_option
def create_key(principal: str, roles: tuple[str, ...], scope: tuple[str, ...], db: str | None, as_json: bool) -> None:
    """Make an API key and print it, once: tether keeps only its hash.

    \b
    Example:
      tether keys create --principal alice --roles approver
    """
    try:
        store = open_store(db)
        try:
            key_id, secret = store.create_api_key(principal, _names(roles), _names(scope))
            [made] = [k for k in store.list_api_keys() if k.key_id == key_id]
        finally:
            store.close()
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
    if as_json:
        click.echo(json.dumps({"key": secret, **_listed(made)}, ensure_ascii=False))
        return
    click.echo(f"key {key_id} for {made.principal}  roles: {_list(made.roles)}  scopes: {_list(made.scopes)}")
    click.echo(secret)
    click.echo(
        "Shown only now: tether keeps its hash, not the key. Revoke it with: tether keys revoke " + key_id, err=True
    )


@keys.command("list")
@db_option
@json_option
def list_keys(db: str | None, as_json: bool) -> None:
    """List the API keys, oldest first: id, principal, roles, scopes and state (never the key)."""
    nowhere = ""
    try:
        store = open_store(db, existing=True)
        try:
            found = store.list_api_keys()
        finally:
            store.close()
    except NoStore as exc:  # no keys made yet, or a mistyped path: either way none, and the path said
        found, nowhere = [], f": {exc}"
        if as_json:
            click.echo(f"tether: {exc}", err=True)
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
    if as_json:
        click.echo(json.dumps([_listed(k) for k in found], ensure_ascii=False))
        return
    for k in found:
        click.echo(
            f"{k.key_id}  {_state(k):<28} {k.principal:<16} roles: {_list(k.roles)}  scopes: {_list(k.scopes)}"
            f"  created {_when(k.created_at)}"
        )
        if k.problem:
            click.echo(f"  refused: {k.problem}")
    if not found:
        click.echo(f"no API keys{nowhere}")


@keys.command("revoke")
@click.argument("key_id")
@db_option
@json_option
def revoke_key(key_id: str, db: str | None, as_json: bool) -> None:
    """Revoke an API key: it stops working at once, in every process serving from this store.

    \b
    Example:
      tether keys revoke 3f9a0c2d41b7e865
    """
    try:
        store = open_store(db, existing=True)
        try:
            revoked = store.revoke_api_key(key_id)
            found = [k for k in store.list_api_keys() if k.key_id == key_id]
        finally:
            store.close()
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
    if not found:
        fail(f"no API key {key_id} (see tether keys list)", EXIT_CONFIGURATION)
    if as_json:
        click.echo(json.dumps({**_listed(found[0]), "revoked": revoked}, ensure_ascii=False))
    else:
        click.echo(f"key {key_id} revoked" if revoked else f"key {key_id} was already revoked")


def _list(values: tuple[str, ...]) -> str:
    return ",".join(values) or "none"


def _state(k: ApiKey) -> str:
    if k.revoked_at is not None:
        return f"revoked {_when(k.revoked_at)}"
    return "REFUSED (tampered)" if k.problem else "active"


def _listed(k: ApiKey) -> dict[str, Any]:
    return {
        "key_id": k.key_id,
        "principal": k.principal,
        "roles": list(k.roles),
        "scopes": list(k.scopes),
        "created_at": k.created_at,
        "revoked_at": k.revoked_at,
        "problem": k.problem,
    }
